"""push_to_hub.py convert-reference: a checkpoint of the reference release (model/lm + pickled head + yaml) becomes
an ORCA folder whose `predict` gives the release's numbers on every input of the edge-case set (surrounding
whitespace, tabs and newlines, empty fields, unicode, a long input, many aliases), for all three heads, LoRA-adapter
and full-model checkpoints; checked against the release's computation written out here on its own (its string, no
stripping, its tokenisation, a right-padded batch, last-token pooling, its head mapping in float64)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import yaml

import push_to_hub
import training.model
from eval_suite.models import reference_checkpoint
from eval_suite.models.reference_checkpoint import REFERENCE_EDGE_RECORDS

HEAD_OUTPUTS = {"beta": 2, "multinomial": 5, "bernoulli": 2}


@pytest.fixture(scope="module")
def base_lm(tmp_path_factory, smollm2_tokenizer):
    """A tiny random Llama causal LM saved with transformers: the 'pre-trained' base of the reference release."""
    from transformers import LlamaForCausalLM

    folder = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    LlamaForCausalLM(training.model.tiny_backbone_config("llama", len(smollm2_tokenizer))).save_pretrained(folder)
    return folder


def make_reference_checkpoint(root: Path, base: Path, tokenizer, score_type: str, lora: bool, **config) -> Path:
    """model/config.yaml (written with yaml.dump, as the release does), model/lm/ (a PEFT adapter or a full LM),
    model/model_minus_lm.pt (the head, saved with torch.save as the release does), tokenizer/."""
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


def release_text(record: dict) -> str:
    """The release's UnifiedAnnotationDataset string (empty prompt, rationale and question kept), aliases as one
    string joined by ' / '."""
    ref = record["reference"] if isinstance(record["reference"], str) else " / ".join(record["reference"])
    text = ""
    text += f" |context: {record['rationale']}"
    text += f" |question: {record['question']}"
    text += f" |correct answer: {ref}"
    text += f" |candidate answer: {record['candidate']}"
    return text


def reference_math(src: Path, base: Path, lora: bool, score_type: str, records: list[dict]) -> list[dict]:
    """The release's computation: the causal LM (adapter not merged), its string, a right-padded batch without
    special tokens, the last real token of the last hidden state, the head and its mapping by hand."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if lora:
        lm = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), src / "model" / "lm")
    else:
        lm = AutoModelForCausalLM.from_pretrained(src / "model" / "lm")
    lm.eval()
    tokenizer = AutoTokenizer.from_pretrained(src / "tokenizer")
    tokenizer.pad_token = tokenizer.eos_token
    head = torch.load(src / "model" / "model_minus_lm.pt", weights_only=True)
    batch = tokenizer([release_text(r) for r in records], add_special_tokens=False, padding="longest",
                      padding_side="right", return_tensors="pt")
    lengths = batch["attention_mask"].sum(-1)
    assert len(set(lengths.tolist())) > 1 and int(lengths.max()) > 512  # really padded; one input over 512 tokens
    with torch.no_grad():
        hidden = lm(**batch, output_hidden_states=True).hidden_states[-1].double()  # [N, T, H]
        pooled = hidden[torch.arange(len(records)), lengths - 1]  # [N, H]
        params = pooled @ head["linear.weight"].double().T + head["linear.bias"].double()  # [N, K]
    out = []
    for p in params:
        if score_type == "beta":
            a, b = p.exp()
            out.append({"rating_orca": float(a / (a + b)), "variance_orca": float(a * b / ((a + b + 1) * (a + b) ** 2))})
        elif score_type == "multinomial":
            probs = p.softmax(-1)
            mean = sum(probs[k] * k / 4 for k in range(5))
            out.append({"rating_orca": float(mean), "variance_orca": float(sum(probs[k] * (k / 4 - mean) ** 2 for k in range(5)))})
        else:
            out.append({"rating_orca": float(p.softmax(-1)[0]), "variance_orca": 0.0})
    return out


def as_reference(pred: dict) -> dict:
    """Our 1-5 prediction on the release's [0, 1] scale, written out here (mean -> (mean - 1) / 4, variance / 16)."""
    return {"rating_orca": (pred["mean"] - 1) / 4, "variance_orca": 0.0 if pred["variance"] is None else pred["variance"] / 16}


def convert(tmp_path: Path, base: Path, tokenizer, score_type: str, lora: bool, *extra: str) -> tuple[Path, Path]:
    src = make_reference_checkpoint(tmp_path / "ref", base, tokenizer, score_type, lora)
    out = tmp_path / "converted"
    assert push_to_hub.main(["convert-reference", "--src", str(src), "--out", str(out), *extra]) == 0
    return src, out


@pytest.fixture(scope="module")
def converted(tmp_path_factory, base_lm, smollm2_tokenizer) -> tuple[Path, Path]:
    """(reference checkpoint, converted folder) of a multinomial LoRA checkpoint, for the tests that only read it."""
    return convert(tmp_path_factory.mktemp("converted"), base_lm, smollm2_tokenizer, "multinomial", True)


# every head; LoRA adapters and full models (bernoulli both: its two rows become one logit)
@pytest.mark.parametrize("score_type, lora", [("beta", True), ("multinomial", False), ("bernoulli", True), ("bernoulli", False)])
def test_converted_checkpoint_gives_the_reference_numbers_on_every_edge_record(score_type, lora, base_lm, smollm2_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    from modeling_orca import OrcaForCorrectnessDistribution

    # LoRA: no --base-model, the adapter's adapter_config.json names it
    src, out = convert(tmp_path, base_lm, smollm2_tokenizer, score_type, lora)
    model = OrcaForCorrectnessDistribution.from_pretrained(out)
    assert not any("lora" in k or "lm_head" in k for k in model.state_dict())
    assert [model.format_input(r) for r in REFERENCE_EDGE_RECORDS] == [release_text(r) for r in REFERENCE_EDGE_RECORDS]
    tokenizer = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    got = [as_reference(p) for p in model.predict(REFERENCE_EDGE_RECORDS, tokenizer, max_batch_tokens=1024)]
    want = reference_math(src, base_lm, lora, score_type, REFERENCE_EDGE_RECORDS)
    for record, g, w in zip(REFERENCE_EDGE_RECORDS, got, want):
        for key in ("rating_orca", "variance_orca"):
            assert g[key] == pytest.approx(w[key], abs=1e-5), (record["id"], key)
    assert len({round(g["rating_orca"], 6) for g in got}) == len(got)  # the inputs really give different scores

    # the switch matters on these records: stripped fields give other numbers
    model.config.strip_fields = True
    stripped = [as_reference(p) for p in model.predict(REFERENCE_EDGE_RECORDS, tokenizer, max_batch_tokens=1024)]
    changed = {r["id"] for r, s, w in zip(REFERENCE_EDGE_RECORDS, stripped, want) if abs(s["rating_orca"] - w["rating_orca"]) > 1e-4}
    assert {"spaces", "tabs-newlines", "unicode"} <= changed


def test_orca_score_writes_the_reference_fields_and_scale(converted, base_lm, tmp_path):
    from eval_suite.scoring import cli

    src, out = converted
    inp = tmp_path / "edge.jsonl"
    inp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in REFERENCE_EDGE_RECORDS))
    scored = tmp_path / "scored.jsonl"
    assert cli.main(["--model", str(out), "--input", str(inp), "--output", str(scored), "--output-format", "reference",
                     "--quiet"]) == 0
    lines = [json.loads(x) for x in scored.read_text().splitlines()]
    assert [x["id"] for x in lines] == [r["id"] for r in REFERENCE_EDGE_RECORDS]
    assert not any(k.startswith("orca_") for x in lines for k in x)
    want = reference_math(src, base_lm, True, "multinomial", REFERENCE_EDGE_RECORDS)
    for line, w in zip(lines, want):
        assert line["rating_orca"] == pytest.approx(w["rating_orca"], abs=1e-5)
        assert line["variance_orca"] == pytest.approx(w["variance_orca"], abs=1e-5)
        assert line["n_ratings"] == len(line["ratings"])


def test_adapter_base_model_comes_from_adapter_config_and_the_flag_overrides(base_lm, smollm2_tokenizer, tmp_path, capsys):
    src = make_reference_checkpoint(tmp_path / "ref", base_lm, smollm2_tokenizer, "beta", True)
    adapter_config = src / "model" / "lm" / "adapter_config.json"
    data = json.loads(adapter_config.read_text())
    data["base_model_name_or_path"] = str(tmp_path / "moved-away")
    adapter_config.write_text(json.dumps(data))
    argv = ["convert-reference", "--src", str(src), "--out", str(tmp_path / "out")]
    assert push_to_hub.main(argv) == 2
    assert "moved-away" in capsys.readouterr().err  # the base it tried: the adapter's own
    assert push_to_hub.main([*argv, "--base-model", str(base_lm)]) == 0


def test_converted_folder_carries_no_local_paths_and_names_its_backbone_class(converted, base_lm):
    src, out = converted
    texts = {p.name: p.read_text() for p in out.iterdir() if p.suffix in (".json", ".jinja", ".txt")}
    for name, text in texts.items():
        assert str(src) not in text and str(base_lm) not in text and str(out) not in text, name
        for key in reference_checkpoint.LOCAL_KEYS:
            assert f'"{key}"' not in text, (name, key)
    config = json.loads(texts["config.json"])
    assert config["backbone_config"]["architectures"] == ["LlamaModel"] and config["strip_fields"] is False


TOKENIZER_FIRST = """
import json, sys
from transformers import AutoModel, AutoTokenizer
folder, records = sys.argv[1], json.loads(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # before the model
model = AutoModel.from_pretrained(folder, trust_remote_code=True)
print(json.dumps([p["mean"] for p in model.predict(records, tokenizer)]))
"""


def test_tokenizer_before_the_model_in_a_fresh_process_does_not_ask(converted, smollm2_tokenizer, tmp_path):
    from modeling_orca import OrcaForCorrectnessDistribution

    _, out = converted
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="", HF_MODULES_CACHE=str(tmp_path / "modules"))
    proc = subprocess.run([sys.executable, "-c", TOKENIZER_FIRST, str(out), json.dumps(REFERENCE_EDGE_RECORDS[:3])],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "custom code" not in proc.stdout + proc.stderr
    model = OrcaForCorrectnessDistribution.from_pretrained(out)
    want = [p["mean"] for p in model.predict(REFERENCE_EDGE_RECORDS[:3], smollm2_tokenizer)]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("problem, message", [
    ("layers", "only the last layer"),
    ("cls", "use_cls_token"),
    ("pickle", "not a plain tensor state dict"),
    ("shape", "does not fit score_type"),
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
    argv = ["convert-reference", "--src", str(src), "--out", str(tmp_path / "out"), "--base-model", str(base_lm)]
    assert push_to_hub.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not Path("pwned").exists()
