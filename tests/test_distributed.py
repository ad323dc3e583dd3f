"""Multi-process training (`accelerate launch`, 2 CPU processes over gloo) equals one process: the loss of every
step, the best step of every stage, the weights in each stage's best/ folder, the final metrics; and a 2-process
run killed with SIGKILL mid-stage and resumed ends where the uninterrupted one does. `make test-distributed`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

import training.config
import training.stages
from tests.test_train import write_split
from train import run

REPO = Path(__file__).resolve().parents[1]
ACCELERATE = Path(sys.executable).parent / "accelerate"
ATOL = 1e-5


def run_config(tmp_path: Path, name: str) -> dict:
    """Two stages with early stopping: s_a's dev split is flipped (its best step is an early one, before early
    stopping ends the stage), s_b trains from s_a's best weights."""
    data = tmp_path / "data"
    if not data.exists():
        data.mkdir()
        write_split(data / "train.jsonl", 96, 0)
        write_split(data / "dev_flipped.jsonl", 24, 1, flip=True)
        write_split(data / "dev.jsonl", 24, 2)
        write_split(data / "test.jsonl", 24, 3)
    files = {"train": str(data / "train.jsonl"), "test": str(data / "test.jsonl")}
    cfg = training.config.load_run_config(None, ["--model.backbone", "tiny-llama", "--run_dir", str(tmp_path / name)])
    cfg["lora"].update(r=4, alpha=4, dropout=0.0)  # dropout masks would depend on the split into processes
    cfg["training"].update(effective_batch_size=16, per_device_batch_size=8, eval_every=2, patience=2, log_every=1,
                           checkpoint_every=2, head_lr=2e-2)
    cfg["stages"] = {
        "s_a": {"files": dict(files, validation=str(data / "dev_flipped.jsonl")), "max_steps": 16, "lr": 5e-3},
        "s_b": {"files": dict(files, validation=str(data / "dev.jsonl")), "max_steps": 24, "lr": 5e-3},
    }
    cfg["test"].update(baselines=[], compare_reference_modes=False)
    return cfg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cfg: dict, path: Path, *extra: str, wait: bool = True):
    """`accelerate launch` with 2 CPU processes (`--multi_gpu` is accelerate's name for its multi-process launcher;
    without a GPU its processes use gloo)."""
    path.write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    cmd = [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "--main_process_port", str(free_port()), "train.py", "--config", str(path), *extra]
    if not wait:  # its own process group, so that the launcher and both workers can be killed at once
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def step_losses(run_dir: Path) -> dict[tuple[str, int], float]:
    entries = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return {(e["stage"], e["step"]): e["loss"] for e in entries if "loss" in e}


def assert_weights_close(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0, msg=lambda m, k=key: f"{k}: {m}")


def trainable_state(model) -> dict[str, torch.Tensor]:
    """A copy of the weights that train (those a best/ folder holds), under their names in the wrapped model."""
    model = getattr(model, "module", model)
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: one process, in this process, with the trained weights recorded at every dev evaluation."""
    tmp_path = tmp_path_factory.mktemp("distributed")
    snapshots: dict[tuple[str, int], dict] = {}
    real_evaluate = training.stages.evaluate_records

    def evaluate_and_record(model, *args, **kwargs):
        caller = sys._getframe(1)
        if caller.f_code.co_name == "evaluate_dev":  # a dev evaluation during training: the weights of this step
            state = caller.f_locals["progress"].state
            snapshots[(state["stage"], state["step"])] = trainable_state(caller.f_locals["model"])
        return real_evaluate(model, *args, **kwargs)

    training.stages.evaluate_records = evaluate_and_record
    try:
        run(run_config(tmp_path, "one"))
    finally:
        training.stages.evaluate_records = real_evaluate
    return tmp_path, snapshots


def test_one_process_best_folder_holds_the_best_steps_weights(one_process):
    tmp_path, snapshots = one_process
    metrics = json.loads((tmp_path / "one" / "metrics.json").read_text())
    for stage, summary in metrics["stages"].items():
        best = load_file(tmp_path / "one" / "checkpoints" / stage / "best" / "trainable.safetensors")
        assert_weights_close(best, snapshots[(stage, summary["best_step"])], atol=0)
    # the case the checks below are about: a stage stopped early, after its best step
    assert any(s["stopped_early"] and s["best_step"] < s["steps"] for s in metrics["stages"].values())


def test_two_processes_equal_one(one_process):
    tmp_path, snapshots = one_process
    launch(run_config(tmp_path, "two"), tmp_path / "two.yaml")
    one, two = tmp_path / "one", tmp_path / "two"

    # the same global batches, the same loss at every step (the logged loss is the global batch's mean)
    losses_one, losses_two = step_losses(one), step_losses(two)
    assert losses_one.keys() == losses_two.keys() and len(losses_one) > 10
    for key in losses_one:
        assert losses_two[key] == pytest.approx(losses_one[key], abs=ATOL), key

    m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
    assert m2["num_processes"] == 2 and m1["num_processes"] == 1
    for stage, summary in m1["stages"].items():
        assert m2["stages"][stage]["best_step"] == summary["best_step"], stage
        assert m2["stages"][stage]["steps"] == summary["steps"], stage
        # best/ holds the weights of the best step, not those of the last step every process ended with
        best = load_file(two / "checkpoints" / stage / "best" / "trainable.safetensors")
        assert_weights_close(best, snapshots[(stage, summary["best_step"])], atol=ATOL)
    stage, summary = next((n, s) for n, s in m1["stages"].items() if s["best_step"] < s["steps"])
    last, best = snapshots[(stage, summary["steps"])], snapshots[(stage, summary["best_step"])]
    assert max((last[k] - best[k]).abs().max().item() for k in last) > 1e-3  # so the check above can fail

    for key in ("spearman", "kendall", "mae_mean", "nll"):
        assert m2["test"]["orca"][key] == pytest.approx(m1["test"]["orca"][key], abs=ATOL), key
    assert m2["clamping"]["enabled"] == m1["clamping"]["enabled"]
    assert_weights_close(load_file(two / "final" / "model.safetensors"), load_file(one / "final" / "model.safetensors"),
                         atol=ATOL)


def test_two_processes_killed_mid_stage_and_resumed_equal_uninterrupted(one_process):
    tmp_path, _ = one_process
    if not (tmp_path / "two" / "metrics.json").exists():
        launch(run_config(tmp_path, "two"), tmp_path / "two.yaml")
    cfg = run_config(tmp_path, "killed")
    proc = launch(cfg, tmp_path / "killed.yaml", wait=False)
    log = tmp_path / "killed" / "log.jsonl"

    def reached(stage: str, step: int) -> bool:
        lines = log.read_text().splitlines() if log.exists() else []
        return any(e.get("stage") == stage and e.get("step", 0) >= step for e in map(json.loads, lines[:-1]))

    deadline = time.time() + 300
    while not reached("s_a", 5) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both workers, mid-step, maybe mid-write
    proc.wait()
    progress = tmp_path / "killed" / "progress.json"
    assert not progress.exists() or "s_a" not in json.loads(progress.read_text())["stages"]  # killed mid-stage
    assert (tmp_path / "killed" / "checkpoints" / "s_a" / "latest").exists()
    launch(cfg, tmp_path / "killed.yaml", "--resume")

    two, killed = tmp_path / "two", tmp_path / "killed"
    assert_weights_close(load_file(killed / "final" / "model.safetensors"), load_file(two / "final" / "model.safetensors"),
                         atol=1e-6)
    m2, mk = (json.loads((d / "metrics.json").read_text()) for d in (two, killed))
    for stage in m2["stages"]:
        assert mk["stages"][stage]["best_step"] == m2["stages"][stage]["best_step"]
    for key in ("spearman", "kendall", "mae_mean"):
        assert mk["test"]["orca"][key] == pytest.approx(m2["test"]["orca"][key], abs=1e-6)


def test_fsdp_without_sharding_is_refused_not_silently_replicated(tmp_path, monkeypatch):
    """accelerate (1.15) shards with FSDP only on GPUs and other accelerators: CPU processes launched with
    --use_fsdp run plain data parallelism. train.py says so and stops instead (here in one process, as
    `accelerate launch --use_fsdp` sets it)."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    with pytest.raises(SystemExit, match="FSDP was asked for, but accelerate runs these processes as"):
        run(run_config(tmp_path, "fsdp"))
    assert not (tmp_path / "fsdp" / "checkpoints").exists()


@pytest.mark.parametrize("version", [None, "1"])
def test_fsdp_version_1_is_refused_before_any_work(tmp_path, monkeypatch, version):
    """FSDP version 1 (accelerate's default when --fsdp_version is not given) wraps the model in one root module
    whose forward gathers the shards; the dev evaluation calls predict on the model inside it. Refused at once."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    if version is None:
        monkeypatch.delenv("FSDP_VERSION", raising=False)
    else:
        monkeypatch.setenv("FSDP_VERSION", version)
    with pytest.raises(SystemExit, match=r"FSDP version 1 \(accelerate's default\) is not supported: launch with --fsdp_version 2"):
        run(run_config(tmp_path, "fsdp1"))
    assert not (tmp_path / "fsdp1").exists()
