"""Faults during training: kill -9 then --resume, a crash mid-checkpoint, a non-finite loss; bf16 numerics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

import train
from modeling_orca import pad_ratings
from tests.test_modeling import tiny_model
from tests.test_train import data_files, tiny_run_config  # noqa: F401  (data_files is a fixture)

REPO = Path(__file__).resolve().parents[1]


def write_config(cfg: dict, path: Path) -> str:
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def logged_steps(run_dir: Path) -> int:
    log = run_dir / "log.jsonl"
    if not log.exists():
        return 0
    steps = [json.loads(line).get("step", 0) for line in log.read_text().splitlines() if line.strip()]
    return max(steps, default=0)


def test_kill_9_then_resume_equals_an_uninterrupted_run(tmp_path, data_files):  # noqa: F811
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    runs = {}
    for name in ("straight", "killed"):
        cfg = tiny_run_config(tmp_path, data_files, name, checkpoint_every=5, eval_every=10)
        cfg["stages"]["s3"]["max_steps"] = 30
        runs[name] = write_config(cfg, tmp_path / f"{name}.yaml")
    subprocess.run([sys.executable, "train.py", "--config", runs["straight"]], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=600)

    proc = subprocess.Popen([sys.executable, "train.py", "--config", runs["killed"]], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while logged_steps(tmp_path / "killed") < 13 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up: mid-step, maybe mid-write
    proc.wait()
    assert not (tmp_path / "killed" / "final").exists()
    subprocess.run([sys.executable, "train.py", "--config", runs["killed"], "--resume"], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=600)

    a = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    b = load_file(tmp_path / "killed" / "final" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
    ma = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "killed" / "metrics.json").read_text())
    for key in ("spearman", "kendall", "mae_mean"):
        assert ma["test"]["orca"][key] == pytest.approx(mb["test"]["orca"][key], abs=1e-6)


def test_crash_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, data_files, monkeypatch):  # noqa: F811
    cfg = tiny_run_config(tmp_path, data_files, "crash", checkpoint_every=5, eval_every=100)
    cfg["stages"]["s3"]["max_steps"] = 20
    from accelerate import Accelerator

    real_save_state = Accelerator.save_state
    calls = {"n": 0}

    def failing_save_state(self, output_dir, **kwargs):
        calls["n"] += 1
        real_save_state(self, output_dir, **kwargs)
        if calls["n"] == 2:  # the step-10 checkpoint: half a weights file, then the process dies
            Path(output_dir, "model.safetensors").write_bytes(b"\x00" * 100)
            raise OSError("disk full (simulated)")

    monkeypatch.setattr(Accelerator, "save_state", failing_save_state)
    with pytest.raises(OSError, match="simulated"):
        train.run(cfg)
    latest = tmp_path / "crash" / "checkpoints" / "s3" / "latest"
    state = json.loads((latest / "trainer_state.json").read_text())
    assert state["step"] == 5
    load_file(latest / "model.safetensors")  # loadable, complete
    monkeypatch.setattr(Accelerator, "save_state", real_save_state)
    results = train.run(cfg, resume=True)  # and the run can go on from it
    assert results["stages"]["s3"]["steps"] == 20


def test_non_finite_loss_stops_with_a_clear_message_and_keeps_the_last_checkpoint(tmp_path, data_files, monkeypatch, capsys):  # noqa: F811
    cfg = tiny_run_config(tmp_path, data_files, "nan", checkpoint_every=5, eval_every=100)
    cfg["stages"]["s3"]["max_steps"] = 20
    from modeling_orca import OrcaForCorrectnessDistribution

    real_forward = OrcaForCorrectnessDistribution.forward
    calls = {"n": 0}

    def forward_with_nan(self, *args, **kwargs):
        out = real_forward(self, *args, **kwargs)
        if kwargs.get("ratings") is not None:
            calls["n"] += 1
            if calls["n"] == 8:
                out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(OrcaForCorrectnessDistribution, "forward", forward_with_nan)
    with pytest.raises(SystemExit) as exc:
        train.main(["--config", write_config(cfg, tmp_path / "nan.yaml")])
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert "stage s3 step 7: loss is nan" in err and "checkpoints/s3/latest" in err
    state = json.loads((tmp_path / "nan" / "checkpoints" / "s3" / "latest" / "trainer_state.json").read_text())
    assert state["step"] == 5


@pytest.mark.parametrize("score_type", ["beta", "multinomial", "bernoulli"])
def test_bf16_forward_gives_finite_losses_and_gradients(score_type, smollm2_tokenizer):
    model = tiny_model("llama", score_type, len(smollm2_tokenizer)).to(torch.bfloat16).train()
    batch = smollm2_tokenizer(["a b c", "d e f g h"], return_tensors="pt", padding=True)
    out = model(**batch, ratings=pad_ratings([[1, 5, 5], [5]]))
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(out.mean).all()
    assert all(torch.isfinite(p.grad.float()).all() for p in model.parameters() if p.grad is not None)


# ------------------------------------------------------------------------------------------------ resume and its files


def interrupted_run(tmp_path, data_files, name: str, monkeypatch, at_step: int = 5):  # noqa: F811
    """A run stopped (KeyboardInterrupt) right after its step-`at_step` checkpoint."""
    import training.stages

    cfg = tiny_run_config(tmp_path, data_files, name, checkpoint_every=5, eval_every=5)
    cfg["stages"]["s3"]["max_steps"] = 10
    real_save = training.stages.save_training_checkpoint

    def save_then_stop(accelerator, path, state):
        real_save(accelerator, path, state)
        if state["step"] == at_step:
            raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(training.stages, "save_training_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg)
    monkeypatch.setattr(training.stages, "save_training_checkpoint", real_save)
    return cfg


def test_resume_with_a_changed_config_is_refused_naming_the_keys(tmp_path, data_files, monkeypatch):  # noqa: F811
    cfg = interrupted_run(tmp_path, data_files, "changed", monkeypatch)
    saved = (tmp_path / "changed" / "run_config.yaml").read_text()
    changed = json.loads(json.dumps(cfg))
    changed["training"]["per_device_batch_size"] = 8
    changed["stages"]["s3"]["lr"] = 5e-4
    with pytest.raises(SystemExit) as exc:
        train.run(changed, resume=True)
    message = str(exc.value)
    assert "training.per_device_batch_size (16 -> 8)" in message and "stages.s3.lr (0.001 -> 0.0005)" in message
    assert (tmp_path / "changed" / "run_config.yaml").read_text() == saved  # compared, not overwritten
    # what only logs, saves or evaluates differently may change
    cfg["training"].update(log_every=3, checkpoint_every=2)
    cfg["test"]["baselines"] = []
    results = train.run(cfg, resume=True)
    assert results["stages"]["s3"]["steps"] == 10 and "contains" not in results["test"]


def test_resume_conflicts_allow_the_keys_of_stages_not_started():
    from training.config import resume_conflicts

    saved = train.load_run_config(None, ["--model.backbone", "tiny-llama"])
    later = json.loads(json.dumps(saved))
    later["stages"]["s3"]["max_steps"] = 7
    later["skip_stages"] = ["s2"]
    later["training"]["eval_every"] = 50
    # s1 finished, nothing half-way: the stages to come (and the training keys they use) may change
    assert resume_conflicts(saved, later, started={"s1"}, in_progress=False) == []
    # s1 half-way: its training keys may not
    assert resume_conflicts(saved, later, started={"s1"}, in_progress=True) == ["training.eval_every (250 -> 50)"]
    # a stage already trained may not be skipped or changed, nor the model
    later["skip_stages"], later["stages"]["s1"]["lr"], later["lora"]["r"] = ["s1"], 1.0, 4
    assert resume_conflicts(saved, later, started={"s1"}, in_progress=False) == [
        "lora.r (128 -> 4)", "skip_stages ([] -> [\"s1\"])", "stages.s1.lr (5e-05 -> 1.0)"]


def kill_between_renames(monkeypatch, folder: str, nth: int) -> None:
    """Stop the process (KeyboardInterrupt, as a kill would) at the `nth` swap of a `folder` (latest or best) whose
    old copy is already moved aside: the moment a folder swap leaves neither the old folder nor the new one."""
    real_replace = os.replace
    swaps = {"n": 0}

    def replace(src, dst, *args, **kwargs):
        src, dst = Path(src), Path(dst)
        moved_aside = [p for p in dst.parent.glob(f".{folder}*") if p.name.endswith("old")] if dst.parent.is_dir() else []
        if dst.name == folder and not src.name.endswith("old") and not dst.exists() and moved_aside:
            swaps["n"] += 1
            if swaps["n"] == nth:
                raise KeyboardInterrupt(f"killed between the two renames of {dst}")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("folder", ["latest", "best"])
def test_a_kill_between_the_renames_of_a_folder_swap_is_recovered_at_start(tmp_path, data_files, monkeypatch, folder):  # noqa: F811
    straight = tiny_run_config(tmp_path, data_files, "straight", checkpoint_every=5, eval_every=5)
    straight["stages"]["s3"]["max_steps"] = 15
    train.run(straight)
    cfg = tiny_run_config(tmp_path, data_files, "killed", checkpoint_every=5, eval_every=5)
    cfg["stages"]["s3"]["max_steps"] = 15
    kill_between_renames(monkeypatch, folder, nth=1)  # the step-10 swap: the step-5 one had no old folder
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg)
    stage_dir = tmp_path / "killed" / "checkpoints" / "s3"
    assert not (stage_dir / folder).exists()  # neither folder in place
    last_checkpoint = next(p for p in (stage_dir / "latest", *stage_dir.glob(".latest*old")) if p.exists())
    checkpointed_step = json.loads((last_checkpoint / "trainer_state.json").read_text())["step"]
    monkeypatch.undo()
    results = train.run(cfg, resume=True)
    log = [json.loads(line) for line in (tmp_path / "killed" / "log.jsonl").read_text().splitlines()]
    resumed = [e["step"] for e in log if e.get("event") == "resumed"]
    assert resumed == [checkpointed_step] and checkpointed_step > 0  # from the checkpoint kept or put back, not step 0
    assert results["stages"]["s3"]["best_step"] == json.loads((tmp_path / "straight" / "metrics.json").read_text())["stages"]["s3"]["best_step"]
    a, b = (load_file(tmp_path / name / "final" / "model.safetensors") for name in ("straight", "killed"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
    assert not list(stage_dir.glob(".*"))  # no staging or old folder left behind


def test_a_torn_progress_file_cannot_happen(tmp_path, data_files, monkeypatch):  # noqa: F811
    """A kill while progress.json is written (here: half of it written in place, or the finished copy not yet renamed)
    leaves the previous content, and the resumed run goes on."""
    cfg = tiny_run_config(tmp_path, data_files, "torn", checkpoint_every=5, eval_every=5)
    cfg["stages"] = {name: {"files": data_files, "max_steps": 5, "lr": 1e-3} for name in ("s_a", "s_b")}
    real_write_text, real_replace = Path.write_text, os.replace

    def torn_write_text(self, text, *args, **kwargs):
        if self.name == "progress.json":
            real_write_text(self, text[: len(text) // 2])
            raise KeyboardInterrupt("killed mid-write")
        return real_write_text(self, text, *args, **kwargs)

    def killed_replace(src, dst, *args, **kwargs):
        if Path(dst).name == "progress.json":
            raise KeyboardInterrupt("killed before the rename")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", torn_write_text)
    monkeypatch.setattr(os, "replace", killed_replace)
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg)
    monkeypatch.undo()
    progress = tmp_path / "torn" / "progress.json"
    assert not progress.exists() or json.loads(progress.read_text())  # the old content (none yet) or a whole file
    results = train.run(cfg, resume=True)
    assert list(results["stages"]) == ["s_a", "s_b"] and results["stages"]["s_a"]["steps"] == 5


def test_no_resume_unpickles(tmp_path, data_files, monkeypatch):  # noqa: F811
    """The stage's progress is JSON (trainer_state.json), not accelerate's custom_checkpoint_0.pkl, which it loads
    with weights_only=False; everything accelerate loads on resume goes through torch.load with weights_only=True."""
    cfg = interrupted_run(tmp_path, data_files, "pickles", monkeypatch)
    latest = tmp_path / "pickles" / "checkpoints" / "s3" / "latest"
    assert not list(latest.glob("custom_checkpoint_*"))
    assert {p.name for p in latest.glob("*.pkl")} == {"random_states_0.pkl"}  # torch.save format: see below
    loads = []
    real_load = torch.load

    def recording_load(f, *args, **kwargs):
        out = real_load(f, *args, **kwargs)  # raises where weights_only refuses a pickled object
        loads.append((Path(f).name, kwargs.get("weights_only")))
        return out

    monkeypatch.setattr(torch, "load", recording_load)
    train.run(cfg, resume=True)
    assert {name for name, _ in loads} >= {"optimizer.bin", "scheduler.bin", "random_states_0.pkl"}, loads
    assert all(weights_only is True for _, weights_only in loads), loads


def test_a_torn_last_log_line_is_cut_before_a_resume_appends(tmp_path):
    from training.run_log import drop_torn_last_line

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    drop_torn_last_line(log)
    assert log.read_text() == '{"step": 1}\n{"step": 2}\n'
    drop_torn_last_line(log)  # whole lines stay
    assert log.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_fault_matrix_kill_9_at_random_points_then_resume_equals_an_uninterrupted_run(tmp_path):
    """benchmarks/fault_matrix_train.py, one chain of 3 kills (mid-step, mid-checkpoint, mid-evaluation or during the
    final evaluation: wherever the seeded points fall): the resumed run ends where the uninterrupted one does, with
    every test item's prediction once and in order. The full matrix's counts are in docs/robustness.md."""
    from benchmarks.fault_matrix_train import fault_matrix

    result = fault_matrix(tmp_path, points=3, seed=0)
    assert result["killed"] >= 2, result  # the points fell inside the run
    assert result["equal"] and result["lost"] == result["duplicated"] == 0 and not result["leftovers"], result


def test_resume_between_stages_continues_with_the_rng_of_an_uninterrupted_run(tmp_path, data_files, monkeypatch):  # noqa: F811
    """Stopped after stage s_a finished and before s_b's first checkpoint: s_b restarts, and its dropout masks must
    be those of the uninterrupted run (the RNG state s_a ended with), not those of a fresh seed."""
    import training.stages

    def config(name):
        cfg = tiny_run_config(tmp_path, data_files, name, checkpoint_every=5, eval_every=5)
        cfg["stages"] = {stage: {"files": data_files, "max_steps": 6, "lr": 1e-3} for stage in ("s_a", "s_b")}
        return cfg

    train.run(config("straight"))
    real_step = training.stages.train_step

    def stop_in_s_b(accelerator, model, global_batch, inputs, micro):
        if inputs["records"] and training.stages.train_step.calls == 8:  # s_b's third step, before its first checkpoint
            raise KeyboardInterrupt("simulated interruption")
        training.stages.train_step.calls += 1
        return real_step(accelerator, model, global_batch, inputs, micro)

    stop_in_s_b.calls = 0
    monkeypatch.setattr(training.stages, "train_step", stop_in_s_b)
    with pytest.raises(KeyboardInterrupt):
        train.run(config("resumed"))
    monkeypatch.undo()
    assert not (tmp_path / "resumed" / "checkpoints" / "s_b" / "latest").exists()
    train.run(config("resumed"), resume=True)
    a, b = (load_file(tmp_path / name / "final" / "model.safetensors") for name in ("straight", "resumed"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=0)
