"""train.py: schedule, early stopping, batching, gradient accumulation, learning, exact resume, paper configs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

import train
import training.config
import training.stages
from eval_suite.report.final_eval import choose_clamping
from training.batching import epoch_batches
from training.config import load_run_config
from training.schedule import EarlyStopping, lr_lambda

REPO = Path(__file__).resolve().parents[1]


def test_lr_schedule_warmup_then_linear_decay_to_floor():
    kw = dict(warmup_steps=100, max_steps=1100, floor=0.1)
    assert lr_lambda(0, **kw) == 0.0
    assert lr_lambda(50, **kw) == pytest.approx(0.5)
    assert lr_lambda(100, **kw) == pytest.approx(1.0)  # end of warmup: the peak
    assert lr_lambda(600, **kw) == pytest.approx(0.55)  # halfway down from 1.0 to 0.1
    assert lr_lambda(1100, **kw) == pytest.approx(0.1)
    assert lr_lambda(5000, **kw) == pytest.approx(0.1)  # never below the floor


@pytest.mark.parametrize("warmup, max_steps, floor", [(100, 1100, 0.1), (0, 10, 0.1), (7, 13, 0.0), (10, 10, 0.25), (3, 2, 0.1)])
def test_the_transformers_schedule_equals_the_written_out_one_step_by_step(warmup, max_steps, floor):
    from transformers import get_wsd_schedule

    from training.schedule import make_optimizer

    model = torch.nn.ModuleDict({"body": torch.nn.Linear(2, 2), "score_head": torch.nn.Linear(2, 1)}).double()
    stage = {"lr": 5e-5, "max_steps": max_steps, "warmup_steps": warmup}
    optimizer, scheduler = make_optimizer(model, stage, {"head_lr": 2e-3, "weight_decay": 0.0, "lr_floor_ratio": floor,
                                                                "warmup_ratio": 0.1})
    for step in range(max_steps + 5):
        factor = lr_lambda(step, warmup_steps=warmup, max_steps=max_steps, floor=floor)
        body, head = (group["lr"] for group in optimizer.param_groups)
        assert body == pytest.approx(5e-5 * factor, rel=1e-14, abs=1e-20), step
        assert head == pytest.approx(2e-3 * factor, rel=1e-14, abs=1e-20), step
        optimizer.step()
        scheduler.step()
    if warmup:  # get_wsd_schedule with min_lr_ratio is not this schedule: its warmup starts at the floor, not at 0
        wsd = get_wsd_schedule(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), warmup, max_steps - warmup, max_steps,
                               decay_type="linear", min_lr_ratio=floor)
        assert wsd.get_last_lr()[0] == pytest.approx(floor) and lr_lambda(0, warmup_steps=warmup, max_steps=max_steps, floor=floor) == 0


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


def write_split(path: Path, n: int, seed: int, flip: bool = False) -> str:
    """Learnable records (right answers rated high, wrong ones low); `flip` swaps the labels, so that a dev split
    made this way gets worse as training goes on and the best step of a stage comes early."""
    rng = random.Random(seed)
    animals = ["dog", "cat", "cow", "owl", "frog", "horse", "sheep", "goat"]
    with path.open("w") as f:
        for i in range(n):
            ref = rng.choice(animals)
            right = rng.random() < 0.5
            cand = ref if right else rng.choice([a for a in animals if a != ref])
            high = right != flip
            ratings = [rng.choice([4, 5]) for _ in range(3)] if high else [rng.choice([1, 2]) for _ in range(2)]
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
        state = torch.load(tmp_path / f"micro{micro}" / "checkpoints" / "s3" / "latest" / "optimizer.bin", weights_only=True)
        # AdamW's first moment after one step is (1 - beta1) * gradient
        grads.append([s["exp_avg"] for s in state["state"].values()])
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
    assert list((run_dir / "logs" / "orca").iterdir())  # tensorboard, through accelerate's trackers
    # the final folder is a plain HF model: LoRA merged, both code files, tokenizer
    final = run_dir / "final"
    assert {"modeling_orca.py", "configuration_orca.py", "model.safetensors", "tokenizer.json"} <= {p.name for p in final.iterdir()}
    assert not any("lora" in k for k in load_file(final / "model.safetensors"))
    preds = [json.loads(line) for line in (run_dir / "test_predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in preds] == [f"test-{i}" for i in range(16)]
    # the clamping tuned on dev is in the saved config (on only where it helped there) and in the metrics
    saved = json.loads((final / "config.json").read_text())
    clamping = metrics["clamping"]
    assert saved["clamp"] is clamping["enabled"] and saved["clamp_variance_threshold"] == clamping["threshold"]
    assert (clamping["dev_objective"]["clamped"] > clamping["dev_objective"]["unclamped"]) is clamping["enabled"]
    assert metrics["clamping"]["test"]["n"] == 16  # test with the dev-tuned clamping, beside test.orca without
    assert metrics["versions"]["orca"] and metrics["model_revision"] is None and metrics["num_processes"] == 1
    start = json.loads((run_dir / "log.jsonl").read_text().splitlines()[0])
    assert start["event"] == "run_start" and start["versions"] == metrics["versions"] and start["config"] == metrics["config"]


def test_calibration_is_fitted_on_dev_and_folded_into_the_saved_head(tmp_path, data_files):
    import numpy as np
    from transformers import AutoTokenizer

    from configuration_orca import OrcaConfig
    from eval_suite.scoring.calibration import shift_direction
    from modeling_orca import OrcaForCorrectnessDistribution

    heads, metrics = [], []
    for name, calibrate in (("plain", False), ("calibrated", True)):
        cfg = tiny_run_config(tmp_path, data_files, name)
        cfg["test"]["calibration"] = calibrate
        train.run(cfg)
        heads.append({k: v for k, v in load_file(tmp_path / name / "final" / "model.safetensors").items() if "score_head" in k})
        metrics.append(json.loads((tmp_path / name / "metrics.json").read_text()))
    record = metrics[1]["calibration"]
    assert "calibration" not in metrics[0] and record["dev_n"] == 16
    dev = record["dev"]
    assert record["enabled"] is (dev["calibrated"]["objective"] > dev["uncalibrated"]["objective"])
    t, shift = (record["temperature"], record["shift"]) if record["enabled"] else (1.0, 0.0)
    weight, bias = (next(v for k, v in heads[0].items() if k.endswith(suffix)) for suffix in ("weight", "bias"))
    d = shift_direction(OrcaConfig(score_type="multinomial")).float()
    torch.testing.assert_close(next(v for k, v in heads[1].items() if k.endswith("weight")), weight / t)
    torch.testing.assert_close(next(v for k, v in heads[1].items() if k.endswith("bias")), bias / t + shift * d)
    # the test figures are the saved model's
    final = OrcaForCorrectnessDistribution.from_pretrained(tmp_path / "calibrated" / "final")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "calibrated" / "final")
    records = [json.loads(line) for line in Path(data_files["test"]).read_text().splitlines()]
    saved = [json.loads(line)["mean"] for line in (tmp_path / "calibrated" / "test_predictions.jsonl").read_text().splitlines()]
    np.testing.assert_allclose([p["mean"] for p in final.predict(records, tokenizer)], saved, atol=1e-5)


def test_resume_continues_exactly(tmp_path, data_files, monkeypatch):
    straight = tiny_run_config(tmp_path, data_files, "straight", checkpoint_every=10)
    train.run(straight)

    interrupted = tiny_run_config(tmp_path, data_files, "resumed", checkpoint_every=10)
    real_save = training.stages.save_training_checkpoint

    def save_then_die(accelerator, path, state):
        real_save(accelerator, path, state)
        if state["step"] == 10:
            raise KeyboardInterrupt("simulated interruption after the step-10 checkpoint")

    monkeypatch.setattr(training.stages, "save_training_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train.run(interrupted)
    monkeypatch.setattr(training.stages, "save_training_checkpoint", real_save)
    train.run(interrupted, resume=True)

    a = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
    ma = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert ma["test"]["orca"]["spearman"] == pytest.approx(mb["test"]["orca"]["spearman"], abs=1e-6)


def paper_family(backbone: str) -> str:
    """The architecture of a paper backbone's Hub id, for its tiny random stand-in."""
    return next(family for key, family in (("olmo-2", "olmo2"), ("gemma-3", "gemma3"), ("llama", "llama"))
                if key in backbone.lower())


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
    cfg["model"]["backbone"] = "tiny-" + paper_family(cfg["model"]["backbone"])
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


# ------------------------------------------------------------------------------------------------ command line


def test_help_is_fast_imports_nothing_heavy_and_lists_every_key_with_its_default():
    import subprocess
    import sys
    import time

    started = time.time()
    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO, capture_output=True, text=True, check=True)
    assert time.time() - started < 2.0
    for key, value in training.config.leaf_keys(training.config.DEFAULTS).items():
        if key == "model.orca":
            for field in training.config.orca_config_fields():
                assert f"--model.orca.{field} " in out.stdout, field
        elif not key.startswith("stages."):
            line = next(line for line in out.stdout.splitlines() if line.strip().startswith(f"--{key} "))
            assert yaml.safe_load(line.split(" ", 3)[-1]) == value, line
    for key in training.config.STAGE_KEYS:
        assert f"--stages.NAME.{key}:" in out.stdout
    loaded = subprocess.run([sys.executable, "-c", "import sys, train; print(sorted({'torch', 'transformers'} & set(sys.modules)))"],
                            cwd=REPO, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_orca_fields_listed_are_the_configs_own():
    from configuration_orca import OrcaConfig

    fields = training.config.orca_config_fields()
    config = OrcaConfig()
    assert set(fields) == set(OrcaConfig.__annotations__) - {"backbone_config", "score_type", "pooling"}
    for name, default in fields.items():
        if name not in ("field_labels", "template_fields", "truncation_order"):  # filled in / listified by __post_init__
            assert getattr(config, name) == default, name


@pytest.mark.parametrize("args, message", [
    (["--training.eval_evry", "5"], "command line: unknown key training.eval_evry; did you mean training.eval_every?"),
    (["--training.eval_every", "five"], "command line: training.eval_every must be an integer, got 'five'"),
    (["--lora.r", "1.5"], "lora.r must be an integer, got 1.5"),
    (["--training.gradient_checkpointing", "1"], "training.gradient_checkpointing must be true or false, got 1"),
    (["--stages.s3.max_step", "5"], "unknown key stages.s3.max_step; did you mean stages.s3.max_steps?"),
    (["--model.orca.max_lenght", "64"], "unknown key model.orca.max_lenght; did you mean model.orca.max_length?"),
    (["--model.orca.score_type", "beta"], "unknown key model.orca.score_type; did you mean model.score_type?"),
    (["--resum", "true"], "unknown key resum; did you mean resume?"),
])
def test_unknown_keys_and_wrong_types_are_refused_naming_the_nearest_key(args, message):
    with pytest.raises(SystemExit) as exc:
        load_run_config(None, ["--model.backbone", "tiny-llama", *args])
    assert str(exc.value) == message or str(exc.value).endswith(message)


def test_a_config_file_with_a_typo_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model: {backbone: tiny-llama}\ntraining: {patiense: 3}\n")
    with pytest.raises(SystemExit, match=f"{path}: unknown key training.patiense; did you mean training.patience"):
        load_run_config(str(path), [])
    with pytest.raises(SystemExit, match="no such file"):
        load_run_config(str(tmp_path / "missing.yaml"), [])


def test_overrides_accept_key_equals_value_and_valid_values():
    cfg = load_run_config(None, ["--model.backbone=tiny-llama", "--training.head_lr", "1e-3", "--training.report_to", "[tensorboard]",
                                 "--stages.s3.files.train", "x.jsonl", "--model.orca.max_length", "64"])
    assert cfg["training"]["head_lr"] == 1e-3 and cfg["training"]["report_to"] == ["tensorboard"]
    assert cfg["stages"]["s3"]["files"] == {"train": "x.jsonl"} and cfg["model"]["orca"] == {"max_length": 64}


def test_every_key_that_defaults_to_null_declares_its_type():
    # without a declared type, an override of such a key is checked against NoneType and refused with a KeyError
    from training.config import DEFAULTS, KEY_TYPES, leaf_keys

    unset = [k for k, v in leaf_keys(DEFAULTS).items() if v is None and not k.startswith("stages.")]
    assert unset and [k for k in unset if k not in KEY_TYPES] == []
    cfg = load_run_config(None, ["--model.backbone", "tiny-llama", "--training.max_answers_per_question", "2"])
    assert cfg["training"]["max_answers_per_question"] == 2
    with pytest.raises(SystemExit, match="training.max_answers_per_question must be an integer, got 'two'"):
        load_run_config(None, ["--model.backbone", "tiny-llama", "--training.max_answers_per_question", "two"])


def test_docstring_examples_name_configs_that_exist_and_every_config_is_valid():
    import re

    named = re.findall(r"configs/\S+\.yaml", train.__doc__)
    assert named and all((REPO / path).is_file() for path in named), named
    for path in sorted((REPO / "configs").rglob("*.yaml")):
        if not path.name.startswith("_"):
            load_run_config(str(path), ["--model.backbone", "tiny-llama"])  # no unknown key, no wrong type


# ------------------------------------------------------------------------------------------------ clamping


def dev_predictions(n: int, helps: bool, seed: int = 0):
    """Items near the ends of the scale with a small predicted variance; their humans agree with the end (clamping
    helps) or sit in the middle (clamping hurts)."""
    rng = random.Random(seed)
    records, preds = [], []
    for i in range(n):
        high = i % 2 == 0
        confident = i % 3 != 0
        score = (0.95 if high else 0.05) if confident else rng.uniform(0.3, 0.7)
        ratings = ([5, 5, 5] if high else [1, 1, 1]) if helps or not confident else [3, 3, 2 + high]
        records.append({"ratings": ratings})
        preds.append({"mean": 1 + 4 * score, "variance": 0.05 if confident else 0.5 + rng.random()})
    return records, preds


@pytest.mark.parametrize("helps", [True, False])
def test_clamping_is_tuned_on_dev_and_switched_on_only_where_it_helps(helps):
    from configuration_orca import OrcaConfig

    records, preds = dev_predictions(60, helps)
    config = OrcaConfig(score_type="multinomial")
    result = choose_clamping(config, records, preds)
    assert result["enabled"] is helps and config.clamp is helps
    # the objective, computed here on its own: rho + tau - MAE on [0, 1]
    from scipy import stats

    human = [(sum(r["ratings"]) / len(r["ratings"]) - 1) / 4 for r in records]
    scores = [(p["mean"] - 1) / 4 for p in preds]
    clamped = [0.0 if s < 0.125 and p["variance"] <= 0.05 else 1.0 if s > 0.875 and p["variance"] <= 0.05 else s
               for s, p in zip(scores, preds)]

    def objective(x):
        return (stats.spearmanr(x, human).statistic + stats.kendalltau(x, human).statistic
                - sum(abs(a - b) for a, b in zip(x, human)) / len(x))

    assert result["dev_objective"]["unclamped"] == pytest.approx(objective(scores))
    if helps:
        assert config.clamp_variance_threshold == pytest.approx(0.05) and result["dev_n_clamped"] == 40
        assert result["dev_objective"]["clamped"] == pytest.approx(objective(clamped))
        assert objective(clamped) > objective(scores)
    else:
        assert config.clamp_variance_threshold is None and result["threshold"] is None
        assert objective(clamped) < objective(scores)


def test_bernoulli_has_no_clamping():
    from configuration_orca import OrcaConfig

    config = OrcaConfig(score_type="bernoulli", clamp=True)
    result = choose_clamping(config, [{"ratings": [5]}], [{"mean": 4.0, "variance": None}])
    assert result["enabled"] is False and config.clamp is False


def test_a_tracker_that_is_not_installed_is_refused_not_skipped(tmp_path, data_files):
    from accelerate.tracking import get_available_trackers

    installed = [str(t) for t in get_available_trackers()]
    missing = next((t for t in ("wandb", "mlflow", "comet_ml", "aim", "clearml", "dvclive") if t not in installed), None)
    if missing is None:
        pytest.skip("every tracker this test knows is installed")
    cfg = tiny_run_config(tmp_path, data_files, "tracker")
    cfg["training"]["report_to"] = ["tensorboard", missing]
    with pytest.raises(SystemExit, match=rf"training.report_to: \['{missing}'\] not installed"):
        train.run(cfg)


def test_a_misspelt_stage_or_batching_is_refused_before_any_work():
    with pytest.raises(SystemExit, match=r"stage s4: dataset \(or files\), lr not set"):
        load_run_config(str(REPO / "configs" / "quickstart.yaml"), ["--stages.s4.max_steps", "10"])
    with pytest.raises(SystemExit, match="training.batching is 'questin'"):
        load_run_config(str(REPO / "configs" / "quickstart.yaml"), ["--training.batching", "questin"])


@pytest.mark.real
def test_make_judge_config_runs_end_to_end_on_the_real_data(tmp_path, shared_data):
    """`make judge`'s recipe (configs/judge.yaml: the meaning variants of every stage, batches by question with
    shared prefixes, the calibration) on a tiny random backbone, a few steps a stage: every stage builds from the
    shared data and the final evaluation writes the calibration, the OOD sets and the probes."""
    cfg = load_run_config(str(REPO / "configs" / "judge.yaml"), [
        "--model.backbone", "tiny-llama", "--run_dir", str(tmp_path / "judge"), "--lora.r", "4", "--lora.alpha", "4",
        "--training.eval_every", "2", "--training.max_dev_items", "16", "--data.data_dir", str(shared_data),
        "--stages.s1.max_steps", "2", "--stages.s2.max_steps", "2", "--stages.s3.max_steps", "2",
        "--test.ood_max_items", "16", "--test.ood_bootstrap", "10",
    ])
    assert cfg["stages"]["s3"]["dataset"] == "s3_evouna_nq_heldout_sas_s1_meaning" and cfg["test"]["calibration"]
    results = train.run(cfg)
    assert set(results["stages"]) == {"s1", "s2", "s3"} and results["calibration"]["dev_n"] > 0
    assert set(results["ood"]["sets"]) >= {"in_domain_test", "nq_open_graded"} and results["probes"]["n"] >= 300
    # the question after the candidate travels with the saved model, so its users format as it was trained
    saved = json.loads((tmp_path / "judge" / "final" / "config.json").read_text())
    assert saved["template_suffix"] == cfg["model"]["orca"]["template_suffix"] == "\nIs the candidate answer correct? Answer:"
