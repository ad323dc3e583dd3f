"""push_to_hub.py: the model repository (dry run, sharding, card, fresh-process load), uploads and their errors
with a mocked HfApi, the dataset and metric repositories, and conversion of reference-release checkpoints."""

from __future__ import annotations

import json
import runpy
import sys
import types
from pathlib import Path
from unittest import mock

import httpx2
import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from huggingface_hub.errors import HfHubHTTPError

import push_to_hub
import train
from tests.test_train import write_split

# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real (2-step) training run: RUN/final and RUN/metrics.json as train.py writes them."""
    tmp = tmp_path_factory.mktemp("run")
    files = {"train": write_split(tmp / "train.jsonl", 32, 0), "validation": write_split(tmp / "dev.jsonl", 8, 1),
             "test": write_split(tmp / "test.jsonl", 8, 2)}
    cfg = train.load_run_config(None, ["--model.backbone", "tiny-llama", "--run_dir", str(tmp / "run")])
    cfg["lora"].update(r=4, alpha=4)
    cfg["training"].update(eval_every=2, log_every=1)
    cfg["stages"] = {"s3": {"files": files, "max_steps": 2, "lr": 1e-3}}
    cfg["test"]["compare_reference_modes"] = False
    train.run(cfg)
    return tmp / "run"


@pytest.fixture
def hub(monkeypatch):
    """HfApi replaced by a mock; upload_folder records the files of the folder it is given."""
    api = mock.MagicMock()
    api.create_repo.return_value = "https://huggingface.co/org/x"
    uploaded = {}

    def upload_folder(*, folder_path, **kwargs):
        uploaded.update({p.relative_to(folder_path).as_posix(): p.read_bytes() for p in Path(folder_path).rglob("*") if p.is_file()})
        return mock.Mock(oid="abc123")

    api.upload_folder.side_effect = upload_folder
    api.uploaded = uploaded
    hf_api = mock.Mock(return_value=api)
    monkeypatch.setattr(push_to_hub, "HfApi", hf_api)
    monkeypatch.setattr(push_to_hub, "get_token", lambda: "hf_test")
    return api


def no_leftovers(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------------------------------------ model


def test_model_dry_run_builds_a_sharded_repo_that_loads_in_a_fresh_process(run_dir, tmp_path):
    out = tmp_path / "repo"
    argv = ["model", "--checkpoint", str(run_dir / "final"), "--repo-id", "org/orca-tiny", "--dry-run",
            "--local-dir", str(out), "--max-shard-size", "2MB", "--revision", "v1"]
    assert push_to_hub.main(argv) == 0  # includes the fresh-process load and the prediction comparison
    names = {p.name for p in out.iterdir()}
    assert {"modeling_orca.py", "configuration_orca.py", "model.safetensors.index.json", "tokenizer.json", "README.md"} <= names
    shards = sorted(out.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and "model.safetensors" not in names and not list(out.glob("*.bin"))
    assert json.loads((out / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_orca.OrcaForCorrectnessDistribution"

    card = ModelCard.load(out / "README.md")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    results = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert results["spearmanr"] == pytest.approx(metrics["test"]["orca"]["spearman"], abs=1e-6)
    assert results["kendalltau"] == pytest.approx(metrics["test"]["orca"]["kendall"], abs=1e-6)
    assert card.data.eval_results[0].dataset_split == "test"
    for text in ("trust_remote_code=True", '"org/orca-tiny", "v1"', "## Limitations", "@article{sedlacek2025orca",
                 "| s3 | `files` | 32 / 8 / 8 |", "| exact_match |", "LoRA**: r=4"):
        assert text in card.text, text
    assert no_leftovers(tmp_path)

    # an existing non-empty target is never overwritten
    before = sorted(p.name for p in out.iterdir())
    assert push_to_hub.main(argv) == 2
    assert sorted(p.name for p in out.iterdir()) == before and no_leftovers(tmp_path)


def test_model_upload_validates_then_creates_repo_branch_and_uploads(run_dir, hub, monkeypatch, tmp_path):
    validated = []
    monkeypatch.setattr(push_to_hub, "validate_in_fresh_process", lambda folder, expected: validated.append(expected))
    monkeypatch.setattr(push_to_hub.tempfile, "tempdir", str(tmp_path))  # where the upload folder is staged
    argv = ["model", "--checkpoint", str(run_dir / "final"), "--repo-id", "org/orca-tiny", "--private", "--revision", "v1",
            "--base-model", "HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert push_to_hub.main(argv) == 0
    assert len(validated) == 1 and len(validated[0]) == len(push_to_hub.CHECK_RECORDS)
    hub.create_repo.assert_called_once_with("org/orca-tiny", repo_type="model", private=True, exist_ok=True)
    hub.create_branch.assert_called_once_with("org/orca-tiny", repo_type="model", branch="v1", exist_ok=True)
    kwargs = hub.upload_folder.call_args.kwargs
    assert (kwargs["repo_id"], kwargs["repo_type"], kwargs["revision"]) == ("org/orca-tiny", "model", "v1")
    assert {"model.safetensors", "config.json", "modeling_orca.py", "configuration_orca.py", "tokenizer.json",
            "README.md"} <= set(hub.uploaded)
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in hub.uploaded["README.md"].decode()
    assert not list(tmp_path.iterdir())  # the staging folder is gone


@pytest.mark.parametrize("failure, expected", [
    ("no token", "no Hugging Face token"),
    ("refused", "refused the request (HTTP 403) (check that the token has write access"),
    ("network", "network failure talking to the Hub"),
])
def test_hub_failures_give_one_clear_line_and_exit_2(failure, expected, hub, monkeypatch, tmp_path, capsys):
    if failure == "no token":
        monkeypatch.setattr(push_to_hub, "get_token", lambda: None)
    elif failure == "refused":
        response = httpx2.Response(403, request=httpx2.Request("POST", "https://huggingface.co/api/repos/create"))
        hub.create_repo.side_effect = HfHubHTTPError("403 Forbidden: you cannot create repos in org\nmore", response=response)
    else:
        hub.upload_folder.side_effect = httpx2.ConnectError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(push_to_hub.tempfile, "tempdir", str(tmp_path))
    assert push_to_hub.main(["metric", "--repo-id", "org/orca_metric"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1
    if failure == "no token":
        hub.create_repo.assert_not_called()  # refused before building anything
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_model_checkpoint_errors(tmp_path, capsys):
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    for folder, message in ((tmp_path / "adapter", "LoRA adapter"), (tmp_path, "not an ORCA model folder")):
        argv = ["model", "--checkpoint", str(folder), "--repo-id", "o/n", "--dry-run", "--local-dir", str(tmp_path / "out")]
        assert push_to_hub.main(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        push_to_hub.main(["model", "--checkpoint", str(tmp_path), "--repo-id", "o/n", "--dry-run"])  # no --local-dir


# ------------------------------------------------------------------------------------------------ dataset


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    from dataset_builder.export import build_repo
    from dataset_builder.fixtures import write_public_fixture

    root = tmp_path_factory.mktemp("exports")
    data = write_public_fixture(root / "data", n=12)
    kw = dict(data_dir=data, progress=False)
    build_repo(root / "research", configs=["s1_synthetic", "s2_benchmark"], s1_size=40, **kw)
    build_repo(root / "upload", configs=["s1_synthetic", "s2_benchmark"], s1_size=40, for_upload=True, **kw)
    build_repo(root / "licensed_only", configs=["s1_synthetic"], s1_size=40, **kw)
    return root


def test_dataset_export_with_unlicensed_sources_is_refused(exports, hub, capsys):
    assert push_to_hub.main(["dataset", "--dir", str(exports / "research"), "--repo-id", "org/ds"]) == 2
    err = capsys.readouterr().err
    assert "not for redistribution (lalm_outputs_mmau, mmar)" in err and "--for-upload" in err
    # only licensed records, but built without --for-upload: its card says "do not upload"
    assert push_to_hub.main(["dataset", "--dir", str(exports / "licensed_only"), "--repo-id", "org/ds"]) == 2
    assert "built without --for-upload" in capsys.readouterr().err
    hub.create_repo.assert_not_called()


def test_dataset_export_for_upload_is_uploaded(exports, hub):
    assert push_to_hub.main(["dataset", "--dir", str(exports / "upload"), "--repo-id", "org/ds", "--dry-run"]) == 0
    hub.create_repo.assert_not_called()
    assert push_to_hub.main(["dataset", "--dir", str(exports / "upload"), "--repo-id", "org/ds"]) == 0
    hub.create_repo.assert_called_once_with("org/ds", repo_type="dataset", private=None, exist_ok=True)
    hub.create_branch.assert_not_called()
    assert {"README.md", "stats.json", "data/s2_benchmark/test-00000-of-00001.parquet"} <= set(hub.uploaded)


# ------------------------------------------------------------------------------------------------ metric


def test_metric_space_folder_loads_and_its_app_computes(tmp_path, hub, monkeypatch):
    out = tmp_path / "space"
    assert push_to_hub.main(["metric", "--repo-id", "org/orca_judge_metric", "--dry-run", "--local-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "app.py", "orca_judge_metric.py", "orca_metric_core.py", "requirements.txt"]
    imports = [line for line in (out / "orca_judge_metric.py").read_text().splitlines() if line.startswith(("from ", "import "))]
    assert "from .orca_metric_core import compute_metrics" in imports and not any("eval_suite" in line for line in imports)
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\n") and 'evaluate.load("org/orca_judge_metric")' in readme and "app_file: app.py" in readme

    # the Space's app with a stand-in gradio: builds an Interface whose function computes the metric
    gradio = types.ModuleType("gradio")
    built = {}
    gradio.Textbox = gradio.JSON = lambda **kw: kw
    gradio.Interface = lambda **kw: built.update(kw) or mock.Mock()
    monkeypatch.setitem(sys.modules, "gradio", gradio)
    monkeypatch.setenv("HF_EVALUATE_CACHE", str(tmp_path / "cache"))
    runpy.run_path(str(out / "app.py"))
    result = built["fn"]("[4.5, 1.5, 3.0]", "[[5, 4, 5], [1, 1, 2], [3, 2, 4]]", "")
    assert result["spearman"] == 1.0 and result["mae_mean"] == pytest.approx(1 / 9)
    assert built["fn"]("[4.5, 1.5, 3.0]", "[[5, 4, 5], [1, 1, 2], [3, 2, 4]]", "[0.2, 0.2, 0.7]")["mae_variance"] is not None

    assert push_to_hub.main(["metric", "--repo-id", "org/orca_judge_metric"]) == 0
    hub.create_repo.assert_called_once_with("org/orca_judge_metric", repo_type="space", private=None, exist_ok=True, space_sdk="gradio")
    assert "orca_judge_metric.py" in hub.uploaded
    assert push_to_hub.main(["metric", "--repo-id", "org/orca-metric", "--dry-run", "--local-dir", str(tmp_path / "x")]) == 2


# ------------------------------------------------------------------------------------------------ reference release

REF_RECORDS = [
    {"id": "r1", "question": "Which instrument plays the melody?", "reference": "violin",
     "rationale": "A solo violin plays over soft piano chords.", "candidate": "It is a violin."},
    {"id": "r2", "question": "What animal is barking?", "reference": "dog", "rationale": "", "candidate": "A cat."},
    {"id": "r3", "question": "How many bells ring?", "reference": "three", "candidate": "I hear three bells, maybe four.",
     "rationale": "Three church bells ring one after another in a large stone tower, then a long silence."},
]
HEAD_OUTPUTS = {"beta": 2, "multinomial": 5, "bernoulli": 2}


@pytest.fixture(scope="module")
def base_lm(tmp_path_factory, smollm2_tokenizer):
    """A tiny random Llama causal LM saved with transformers: the 'pre-trained' base of the reference release."""
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    LlamaForCausalLM(train.tiny_backbone_config("llama", len(smollm2_tokenizer))).save_pretrained(folder)
    return folder


def make_reference_checkpoint(root: Path, base: Path, tokenizer, score_type: str, lora: bool, **config) -> Path:
    """model/config.yaml (written with yaml.dump, as the release does), model/lm/ (a PEFT adapter or a full LM),
    model/model_minus_lm.pt (the head), tokenizer/."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    lm = AutoModelForCausalLM.from_pretrained(base)
    if lora:  # init_lora_weights=False: a non-zero update, so a forgotten merge shows
        lm = get_peft_model(lm, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False))
    else:
        with torch.no_grad():
            lm.model.layers[0].mlp.down_proj.weight.add_(0.05 * torch.randn_like(lm.model.layers[0].mlp.down_proj.weight))
    (root / "model").mkdir(parents=True)
    lm.save_pretrained(root / "model" / "lm")
    (root / "model" / "config.yaml").write_text(yaml.dump({"score_type": score_type, "layers_to_use": (-1,), "use_cls_token": False, **config}))
    hidden = lm.config.hidden_size
    head = {"linear.weight": torch.randn(HEAD_OUTPUTS[score_type], hidden) * 0.5, "linear.bias": torch.randn(HEAD_OUTPUTS[score_type])}
    torch.save(head, root / "model" / "model_minus_lm.pt")
    tokenizer.save_pretrained(root / "tokenizer")
    return root


def reference_math(src: Path, base: Path, lora: bool, score_type: str, records: list[dict]) -> list[dict]:
    """The reference release's computation, written from its description: the causal LM (adapter not merged),
    its input string, a right-padded batch, the last real token of the last hidden state, the head by hand."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if lora:
        lm = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), src / "model" / "lm")
    else:
        lm = AutoModelForCausalLM.from_pretrained(src / "model" / "lm")
    lm.eval()
    tokenizer = AutoTokenizer.from_pretrained(src / "tokenizer")
    tokenizer.pad_token, tokenizer.padding_side = tokenizer.eos_token, "right"
    head = torch.load(src / "model" / "model_minus_lm.pt", weights_only=True)
    texts = [f" |context: {r['rationale']} |question: {r['question']} |correct answer: {r['reference']} "
             f"|candidate answer: {r['candidate']}" for r in records]
    batch = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    assert len(set(batch["attention_mask"].sum(-1).tolist())) > 1  # really padded
    with torch.no_grad():
        hidden = lm(**batch, output_hidden_states=True).hidden_states[-1].double()
        lengths = batch["attention_mask"].sum(-1)
        pooled = hidden[torch.arange(len(records)), lengths - 1]
        params = pooled @ head["linear.weight"].double().T + head["linear.bias"].double()
    out = []
    for p in params:
        if score_type == "beta":
            a, b = p.exp()
            mean01, var01 = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
            out.append({"score": float(mean01), "mean": float(1 + 4 * mean01), "variance": float(16 * var01)})
        elif score_type == "multinomial":
            probs = p.softmax(-1)
            mean = float(sum((k + 1) * probs[k] for k in range(5)))
            var = float(sum(probs[k] * (k + 1 - mean) ** 2 for k in range(5)))
            out.append({"score": (mean - 1) / 4, "mean": mean, "variance": var, "probs": probs.tolist()})
        else:
            prob1 = float(p.softmax(-1)[0])  # the correctness probability
            out.append({"score": prob1, "mean": 1 + 4 * prob1})
    return out


@pytest.mark.parametrize("score_type, lora", [("beta", True), ("multinomial", True), ("bernoulli", True), ("bernoulli", False)])
def test_converted_reference_checkpoint_predicts_the_reference_scores(score_type, lora, base_lm, smollm2_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    from modeling_orca import OrcaForCorrectnessDistribution

    src = make_reference_checkpoint(tmp_path / "ref", base_lm, smollm2_tokenizer, score_type, lora)
    out = tmp_path / "converted"
    argv = ["convert-reference", "--src", str(src), "--out", str(out)] + (["--base-model", str(base_lm)] if lora else [])
    assert push_to_hub.main(argv) == 0
    assert (out / "model.safetensors").exists() and (out / "modeling_orca.py").exists()
    model = OrcaForCorrectnessDistribution.from_pretrained(out)
    assert not any("lora" in k or "lm_head" in k for k in model.state_dict())
    assert model.format_input(REF_RECORDS[1]) == " |context:  |question: What animal is barking? |correct answer: dog |candidate answer: A cat."
    got = model.predict(REF_RECORDS, AutoTokenizer.from_pretrained(out), batch_size=3)
    want = reference_math(src, base_lm, lora, score_type, REF_RECORDS)
    for g, w in zip(got, want):
        for key, value in w.items():
            assert g[key] == pytest.approx(value, abs=1e-5), key
    assert len({round(g["score"], 6) for g in got}) == len(got)  # the inputs really give different scores


@pytest.mark.parametrize("problem, message", [
    ("layers", "only the last layer"),
    ("cls", "use_cls_token"),
    ("pickle", "not a plain tensor state dict"),
    ("shape", "does not fit score_type"),
    ("no base", "pass --base-model"),
    ("yaml", "not a plain YAML config"),
])
def test_convert_refuses_what_it_cannot_reproduce(problem, message, base_lm, smollm2_tokenizer, tmp_path, capsys):
    extra = {"layers": {"layers_to_use": [-2, -1]}, "cls": {"use_cls_token": True}}.get(problem, {})
    src = make_reference_checkpoint(tmp_path / "ref", base_lm, smollm2_tokenizer, "beta", lora=True, **extra)
    if problem == "pickle":  # an arbitrary object: weights_only=True refuses to unpickle it
        torch.save({"linear.weight": torch.zeros(2, 32), "linear.bias": torch.zeros(2), "x": types.SimpleNamespace(a=1)},
                   src / "model" / "model_minus_lm.pt")
    if problem == "yaml":  # yaml.load with a full loader would run this
        (src / "model" / "config.yaml").write_text('score_type: !!python/object/apply:os.system ["touch pwned"]')
    if problem == "shape":
        torch.save({"linear.weight": torch.zeros(5, 32), "linear.bias": torch.zeros(5)}, src / "model" / "model_minus_lm.pt")
    argv = ["convert-reference", "--src", str(src), "--out", str(tmp_path / "out")]
    if problem != "no base":
        argv += ["--base-model", str(base_lm)]
    assert push_to_hub.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and no_leftovers(tmp_path)
