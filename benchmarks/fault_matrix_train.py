"""Fault matrix of training: a tiny two-stage run killed with SIGKILL at seeded random points, resumed after each,
compared with the same run uninterrupted (final weights within 1e-6, best steps, test metrics, every test
prediction once and in order). Each chain kills one run `--points` times; `--chains` chains with seeds 0, 1, ...

    .venv/bin/python benchmarks/fault_matrix_train.py --chains 3 --points 4     # the figures in docs/robustness.md

Last line: `fault_matrix_train points_tried=N killed=K chains=C equal=E lost=L`. tests/test_robustness_train.py
runs one short chain.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def tiny_config(folder: Path, name: str) -> str:
    """Two stages of 8 steps on a random 2-layer Llama with LoRA dropout on (a resume must restore the RNG), dev
    evaluations and checkpoints every few steps; written to FOLDER/NAME.yaml."""
    from tests.test_train import write_split

    files = {split: str(folder / f"{split}.jsonl") for split in ("train", "validation", "test")}
    if not Path(files["train"]).exists():
        for path, (n, seed) in zip(files.values(), ((96, 0), (16, 1), (16, 2))):
            write_split(Path(path), n, seed)
    cfg = {
        "run_dir": str(folder / name), "model": {"backbone": "tiny-llama"}, "lora": {"r": 4, "alpha": 4, "dropout": 0.1},
        "training": {"eval_every": 4, "checkpoint_every": 3, "log_every": 1, "per_device_batch_size": 16, "report_to": "none"},
        "stages": {stage: {"files": files, "max_steps": 8, "lr": 1e-3} for stage in ("s_a", "s_b")},
        "test": {"compare_reference_modes": False},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def train(config: str, *extra: str, env: dict) -> None:
    subprocess.run([sys.executable, "train.py", "--config", config, *extra], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=600)


def killed_chain(folder: Path, config: str, points: int, seed: int, env: dict) -> int:
    """Start the run, SIGKILL it once its log has a random number of new lines (after a random delay), resume;
    `points` times, then resume to the end. Returns how many kills landed before the run ended."""
    lines = len((folder / "straight" / "log.jsonl").read_text().splitlines())
    rng = random.Random(seed)
    log, killed = folder / "killed" / "log.jsonl", 0

    def logged() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    for _ in range(points):
        resume = ["--resume"] if (folder / "killed" / "run_config.yaml").exists() else []
        start, wait_for = logged(), rng.randint(2, max(3, lines // 3))
        proc = subprocess.Popen([sys.executable, "train.py", "--config", config, *resume], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline and logged() < start + wait_for:
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.3))
        if proc.poll() is not None:  # it got to its end before this point
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed += 1
    train(config, "--resume", env=env)
    return killed


def compare(folder: Path, test_file: str) -> dict:
    """Whether the killed run ended where the straight one did, and how many test items its predictions lost."""
    import torch
    from safetensors.torch import load_file

    a, b = (load_file(folder / name / "final" / "model.safetensors") for name in ("straight", "killed"))
    weights = a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)
    ma, mb = (json.loads((folder / name / "metrics.json").read_text()) for name in ("straight", "killed"))
    best = all(mb["stages"][s]["best_step"] == ma["stages"][s]["best_step"] for s in ma["stages"])
    metrics = all(abs(mb["test"]["orca"][k] - ma["test"]["orca"][k]) <= 1e-6 for k in ("spearman", "kendall", "mae_mean"))
    expected = [json.loads(line)["id"] for line in Path(test_file).read_text().splitlines()]
    got = [json.loads(line)["id"] for line in (folder / "killed" / "test_predictions.jsonl").read_text().splitlines()]
    leftovers = [str(p) for p in (folder / "killed").rglob(".*") if p.name.endswith(".old") or ".staged-" in p.name]
    return {"equal": weights and best and metrics and got == expected and not leftovers,
            "lost": len(set(expected) - set(got)), "duplicated": len(got) - len(set(got)), "leftovers": leftovers}


def fault_matrix(folder: Path, points: int, seed: int) -> dict:
    """One chain in `folder`: the straight run, the killed and resumed one, their comparison."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    train(tiny_config(folder, "straight"), env=env)
    killed = killed_chain(folder, tiny_config(folder, "killed"), points, seed, env)
    return {"points": points, "killed": killed, **compare(folder, str(folder / "test.jsonl"))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chains", type=int, default=3)
    p.add_argument("--points", type=int, default=4, help="kills per chain")
    args = p.parse_args()
    results = []
    for seed in range(args.chains):
        with tempfile.TemporaryDirectory() as tmp:
            results.append(fault_matrix(Path(tmp), args.points, seed))
        print(json.dumps(results[-1]), flush=True)
    print(f"fault_matrix_train points_tried={sum(r['points'] for r in results)} killed={sum(r['killed'] for r in results)} "
          f"chains={len(results)} equal={sum(r['equal'] for r in results)} lost={sum(r['lost'] for r in results)}")


if __name__ == "__main__":
    main()
