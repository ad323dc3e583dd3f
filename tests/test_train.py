"""train.py: schedule, early stopping, batching, gradient accumulation, learning, exact resume, paper configs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import train
from train import EarlyStopping, epoch_batches, load_run_config, lr_lambda

REPO = Path(__file__).resolve().parents[1]


def test_lr_schedule_warmup_then_linear_decay_to_floor():
    kw = dict(warmup_steps=100, max_steps=1100, floor=0.1)
    assert lr_lambda(0, **kw) == 0.0
    assert lr_lambda(50, **kw) == pytest.approx(0.5)
    assert lr_lambda(100, **kw) == pytest.approx(1.0)  # end of warmup: the peak
    assert lr_lambda(600, **kw) == pytest.approx(0.55)  # halfway down from 1.0 to 0.1
    assert lr_lambda(1100, **kw) == pytest.approx(0.1)
    assert lr_lambda(5000, **kw) == pytest.approx(0.1)  # never below the floor


def test_early_stopping_fires_after_patience_evaluations_without_improvement():
    stopper = EarlyStopping(patience=5)
    assert stopper.update(0.3) and not stopper.should_stop
    assert stopper.update(0.4)
    for i in range(4):
        assert not stopper.update(0.4 - 0.01 * i)
        assert not stopper.should_stop
    assert not stopper.update(0.35)
    assert stopper.should_stop
    assert not EarlyStopping(5).update(float("nan"))  # a NaN correlation never counts as an improvement


def test_epoch_batches_are_full_deterministic_and_length_bucketed():
    rng = random.Random(0)
    lengths = [rng.randint(5, 300) for _ in range(1000)]
    batches = epoch_batches(lengths, 16, seed=1, epoch=0)
    assert batches == epoch_batches(lengths, 16, seed=1, epoch=0)
    assert batches != epoch_batches(lengths, 16, seed=1, epoch=1)
    assert all(len(b) == 16 for b in batches) and len(batches) == 1000 // 16
    flat = [i for b in batches for i in b]
    assert len(set(flat)) == len(flat)
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 40  # vs ~270 for random batches of 16 lengths in 5..300


def test_a_config_file_curriculum_replaces_the_default_one(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model: {backbone: tiny-llama}\nstages:\n  s3: {dataset: s3_evouna_nq, max_steps: 7, lr: 1.0e-4}\n")
    cfg = load_run_config(str(path), ["--stages.s3.max_steps", "9"])
    assert cfg["stages"] == {"s3": {"dataset": "s3_evouna_nq", "max_steps": 9, "lr": 1e-4}}


def test_overrides_are_parsed_as_yaml_and_unknown_stage_rejected():
    cfg = load_run_config(None, ["--model.backbone", "tiny-llama", "--training.eval_every", "7", "--skip_stages", "[s1, s2]",
                                 "--stages.s3.lr", "1e-4"])
    assert cfg["training"]["eval_every"] == 7 and cfg["skip_stages"] == ["s1", "s2"]
    assert cfg["stages"]["s3"]["lr"] == 1e-4  # a float, though YAML 1.1 reads `1e-4` as a string
    with pytest.raises(SystemExit, match="unknown stages"):
        load_run_config(None, ["--model.backbone", "tiny-llama", "--skip_stages", "[s9]"])


# ------------------------------------------------------------------------------------------------ end to end


def write_split(path: Path, n: int, seed: int) -> str:
    """Records where the label is learnable: right answers are rated high, wrong ones low."""
    rng = random.Random(seed)
    animals = ["dog", "cat", "cow", "owl", "frog", "horse", "sheep", "goat"]
    with path.open("w") as f:
        for i in range(n):
            ref = rng.choice(animals)
            right = rng.random() < 0.5
            cand = ref if right else rng.choice([a for a in animals if a != ref])
            ratings = [rng.choice([4, 5]) for _ in range(3)] if right else [rng.choice([1, 2]) for _ in range(2)]
            f.write(json.dumps({"id": f"{path.stem}-{i}", "question": "Which animal makes this sound?",
                                "reference": ref, "rationale": f"A {ref} can be heard.", "candidate": f"a {cand}",
                                "ratings": ratings}) + "\n")
    return str(path)


@pytest.fixture
def data_files(tmp_path):
    return {
        "train": write_split(tmp_path / "train.jsonl", 96, 0),
        "validation": write_split(tmp_path / "dev.jsonl", 16, 1),
        "test": write_split(tmp_path / "test.jsonl", 16, 2),
    }


def tiny_run_config(tmp_path, data_files, name, **training):
    cfg = load_run_config(None, ["--model.backbone", "tiny-llama", "--run_dir", str(tmp_path / name)])
    cfg["lora"].update(r=4, alpha=4, dropout=0.1)  # dropout on: resume must restore the RNG exactly
    cfg["training"].update(dict(eval_every=5, log_every=1, per_device_batch_size=16), **training)
    cfg["stages"] = {"s3": {"files": data_files, "max_steps": 20, "lr": 1e-3}}
    cfg["test"]["compare_reference_modes"] = False
    return cfg


def test_gradient_accumulation_4x4_equals_16x1(tmp_path, data_files):
    grads = []
    for micro in (16, 4):
        cfg = tiny_run_config(tmp_path, data_files, f"micro{micro}", per_device_batch_size=micro, checkpoint_every=1, max_grad_norm=0)
        cfg["stages"]["s3"]["max_steps"] = 1
        cfg["lora"]["dropout"] = 0.0  # dropout masks would differ with the micro-batch split
        train.run(cfg)
        state = torch.load(tmp_path / f"micro{micro}" / "checkpoints" / "s3" / "latest" / "state.pt", weights_only=True)
        # AdamW's first moment after one step is (1 - beta1) * gradient
        grads.append([s["exp_avg"] for s in state["optimizer"]["state"].values()])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_short_run_lowers_the_loss_and_writes_everything(tmp_path, data_files):
    cfg = tiny_run_config(tmp_path, data_files, "learn", head_lr=2e-2)
    cfg["stages"]["s3"].update(max_steps=60, lr=5e-3)
    results = train.run(cfg)
    run_dir = tmp_path / "learn"
    losses = [e["loss"] for e in map(json.loads, (run_dir / "log.jsonl").read_text().splitlines()) if "loss" in e]
    # below 0.88 x start, the best a label-marginal-only model can do on these ratings
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["test"]) == {"orca", "exact_match", "contains", "token_f1"}
    for entry in metrics["test"].values():
        assert {"spearman", "kendall", "mae", "roc_auc"} <= set(entry)
    assert metrics["stages"]["s3"]["counts"] == {"train": 96, "validation": 16, "test": 16}
    assert metrics["versions"]["torch"] == torch.__version__ and metrics["config"]["seed"] == 0
    assert results["test"]["orca"]["n"] == 16
    assert list((run_dir / "tensorboard").iterdir())
    # the final folder is a plain HF model: LoRA merged, both code files, tokenizer
    final = run_dir / "final"
    assert {"modeling_orca.py", "configuration_orca.py", "model.safetensors", "tokenizer.json"} <= {p.name for p in final.iterdir()}
    assert not any("lora" in k for k in load_file(final / "model.safetensors"))
    preds = [json.loads(line) for line in (run_dir / "test_predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in preds] == [f"test-{i}" for i in range(16)]


def test_resume_continues_exactly(tmp_path, data_files, monkeypatch):
    straight = tiny_run_config(tmp_path, data_files, "straight", checkpoint_every=10)
    train.run(straight)

    interrupted = tiny_run_config(tmp_path, data_files, "resumed", checkpoint_every=10)
    real_save = train.save_training_checkpoint

    def save_then_die(path, model, optimizer, scheduler, state):
        real_save(path, model, optimizer, scheduler, state)
        if state["step"] == 10:
            raise KeyboardInterrupt("simulated interruption after the step-10 checkpoint")

    monkeypatch.setattr(train, "save_training_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train.run(interrupted)
    monkeypatch.setattr(train, "save_training_checkpoint", real_save)
    train.run(interrupted, resume=True)

    a = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
    ma = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert ma["test"]["orca"]["spearman"] == pytest.approx(mb["test"]["orca"]["spearman"], abs=1e-6)


PAPER_CONFIGS = sorted(p for p in (REPO / "configs" / "paper").glob("*.yaml") if not p.name.startswith("_"))


def test_every_paper_model_and_head_has_a_config():
    names = {p.stem for p in PAPER_CONFIGS}
    for model in ("olmo2-1b", "gemma3-1b", "gemma3-4b", "llama3.2-1b", "llama3.2-3b"):
        for head in ("beta", "multi", "bern"):
            assert f"orca-{model}-{head}" in names


@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_paper_config_trains_two_steps_on_a_tiny_stand_in(path, tmp_path, data_files):
    cfg = load_run_config(str(path), ["--run_dir", str(tmp_path / "run")])
    assert cfg["lora"]["r"] == 128 and cfg["lora"]["alpha"] == 128
    assert cfg["training"]["effective_batch_size"] == 16 and cfg["training"]["patience"] == 5
    assert [(s["max_steps"], s["lr"]) for s in cfg["stages"].values()] == [(10000, 5e-5), (5000, 2e-5), (2000, 2e-5)]
    cfg["model"]["backbone"] = "tiny-" + cfg["model"]["family"]
    cfg["lora"]["r"] = cfg["lora"]["alpha"] = 4
    cfg["stages"] = {"s3": {"files": data_files, "max_steps": 2, "lr": 1e-4}}
    cfg["training"]["per_device_batch_size"] = 8
    cfg["test"].update(baselines=[], compare_reference_modes=False)
    results = train.run(cfg)
    assert results["stages"]["s3"]["steps"] == 2


def test_a_stage_stops_at_its_time_budget(tmp_path, data_files):
    cfg = tiny_run_config(tmp_path, data_files, "budget", patience=10_000)  # only the clock may stop it
    cfg["stages"]["s3"].update(max_steps=10_000, max_minutes=0.05)  # 3 seconds
    cfg["test"]["baselines"] = []
    results = train.run(cfg)
    stage = results["stages"]["s3"]
    assert stage["stopped_by_time"] and 0 < stage["steps"] < 10_000
