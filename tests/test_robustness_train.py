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
