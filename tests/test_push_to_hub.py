"""push_to_hub.py: the model repository (dry run, sharding, card, fresh-process load), uploads and their errors
with a mocked HfApi, the dataset and metric repositories. Conversion of reference checkpoints: test_convert_reference.py."""

from __future__ import annotations

import json
import runpy
import sys
import types
from pathlib import Path
from unittest import mock

import httpx2
import pytest
from huggingface_hub import DatasetCard, ModelCard
from huggingface_hub.errors import HfHubHTTPError

import push_to_hub
import train
import training.config
from configuration_orca import OrcaConfig
from eval_suite.models import reference_checkpoint
from tests.test_train import write_split
from training.model import tiny_backbone_config

# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real (2-step) training run: RUN/final and RUN/metrics.json as train.py writes them."""
    tmp = tmp_path_factory.mktemp("run")
    files = {"train": write_split(tmp / "train.jsonl", 32, 0), "validation": write_split(tmp / "dev.jsonl", 8, 1),
             "test": write_split(tmp / "test.jsonl", 8, 2)}
    cfg = training.config.load_run_config(None, ["--model.backbone", "tiny-llama", "--run_dir", str(tmp / "run")])
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
            "--local-dir", str(out), "--max-shard-size", "2MB", "--revision", "v1", "--license", "apache-2.0",
            "--dataset-id", "org/orca-ratings"]
    assert push_to_hub.main(argv) == 0  # includes the fresh-process load and the prediction comparison
    names = {p.name for p in out.iterdir()}
    assert {"modeling_orca.py", "configuration_orca.py", "model.safetensors.index.json", "tokenizer.json", "README.md"} <= names
    shards = sorted(out.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and "model.safetensors" not in names and not list(out.glob("*.bin"))
    assert json.loads((out / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_orca.OrcaForCorrectnessDistribution"

    config = json.loads((out / "config.json").read_text())
    assert config["backbone_config"]["architectures"] == ["LlamaModel"]
    for path in out.glob("*.json"):  # nothing of this machine: no folder it was loaded from, no offline flags
        text = path.read_text()
        assert str(run_dir) not in text and all(f'"{k}"' not in text for k in reference_checkpoint.LOCAL_KEYS), path.name

    card = ModelCard.load(out / "README.md")
    # no Hub pipeline tag: pipeline("text-classification") cannot read ORCA records; the card shows the model's own
    assert (card.data.license, card.data.pipeline_tag, card.data.library_name) == ("apache-2.0", None, "transformers")
    assert 'pipeline("orca-scoring", model=repo, revision=revision, trust_remote_code=True)' in card.text
    assert f'pip install "transformers{push_to_hub.min_transformers_version()}"' in card.text
    assert card.data.eval_results[0].dataset_type == "org/orca-ratings"
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
    card = ModelCard(hub.uploaded["README.md"].decode())
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct" and card.data.license == "apache-2.0"
    assert card.data.eval_results is None and "model-index" not in card.content  # no Hub dataset id: no model-index
    assert not list(tmp_path.iterdir())  # the staging folder is gone


@pytest.mark.parametrize("base, backbone_type, given, licence", [
    ("meta-llama/Llama-3.2-1B-Instruct", "llama", None, "llama3.2"),
    ("meta-llama/Meta-Llama-3.1-8B", "llama", None, "llama3.1"),
    ("google/gemma-3-4b-it", "gemma3", None, "gemma"),
    (None, "gemma3_text", None, "gemma"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "llama", None, "apache-2.0"),
    ("allenai/OLMo-2-0425-1B-Instruct", "olmo2", None, "apache-2.0"),
    ("meta-llama/Llama-3.2-1B", "llama", "other", "other"),  # --license overrides
])
def test_card_licence_follows_the_base_model(base, backbone_type, given, licence):
    assert push_to_hub.model_licence(base, backbone_type, given) == licence


def test_card_names_the_template_suffix_the_model_reads():
    config = OrcaConfig(backbone_config=tiny_backbone_config("gemma3", 100), template_suffix="\nIs it correct? Answer:")
    card = push_to_hub.model_card(config, None, repo_id="org/j", revision=None, base_model=None, dataset_id=None)
    assert "then the text `\\nIs it correct? Answer:`" in card.text
    config.template_suffix = ""
    card = push_to_hub.model_card(config, None, repo_id="org/j", revision=None, base_model=None, dataset_id=None)
    assert "then the text" not in card.text


def test_card_licence_of_an_unknown_base_is_not_guessed():
    with pytest.raises(push_to_hub.PublishError, match="pass --license"):
        push_to_hub.model_licence("someone/some-llama-finetune", "llama", None)


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
    card = DatasetCard(hub.uploaded["README.md"].decode())
    assert 'load_dataset("org/ds"' in card.text and "<this repo>" in (exports / "upload" / "README.md").read_text()
    assert "apache-2.0" in card.data.license and card.data.size_categories == ["n<1K"]
    assert "@article{sedlacek2025orca" in card.text


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
