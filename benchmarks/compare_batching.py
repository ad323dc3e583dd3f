"""Dev Spearman of `training.batching: shuffled` against `question` after the same number of optimiser steps, over
several seeds: the evidence behind the default batching mode. A mode `question:k` is batching by question with
`training.max_answers_per_question: k` (parts of at most k answers of a question); `MODE@N` trains that mode N steps
instead of `--steps`, for comparisons at equal wall time (N from the modes' measured seconds a step; each run's
training seconds are in the results, so a reader sees whether the times match).

Each run is `train.py` itself: one stage (default: s3_evouna_nq from the quickstart configuration, all-MiniLM-L6-v2
trained fully), `--steps` steps, one evaluation at the end on the whole dev split (no early stopping), seeds
`--seeds`. Batching decides which items meet in a step, not how a backbone computes them, so a small backbone answers
the question at a cost a CPU affords.

    .venv/bin/python benchmarks/compare_batching.py                          # 3 seeds x 2 modes x 300 steps
    .venv/bin/python benchmarks/compare_batching.py --seeds 0,1,2,3,4 --steps 400 --json runs/batching.json
    .venv/bin/python benchmarks/compare_batching.py --modes shuffled,question:2
    .venv/bin/python benchmarks/compare_batching.py --config configs/judge.yaml --stage s2 --steps 40 \
        --modes shuffled,question@100                                       # equal wall time on Gemma 3 270M
Last line: `shuffled_rho=X <mode>_rho=Y delta=Z` per mode (means over seeds; delta = mode - shuffled, paired by
seed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import REPO, load_line, run_info


def train_once(args, mode: str, seed: int, run_dir: Path) -> dict:
    mode_name, _, mode_steps = mode.partition("@")
    steps = int(mode_steps or args.steps)
    cmd = [sys.executable, str(REPO / "train.py"), "--config", args.config, "--run_dir", str(run_dir), "--seed", str(seed),
           "--skip_stages", json.dumps([s for s in args.all_stages if s != args.stage]),
           f"--stages.{args.stage}.max_steps", str(steps), "--training.eval_every", str(steps),
           "--training.patience", "1000", "--training.max_dev_items", str(args.max_dev_items or "null"),
           "--test.compare_reference_modes", "false", "--test.baselines", "[]", "--test.ood", "false",
           "--test.probes", "false", "--test.calibration", "false"]  # fmt: skip
    batching, _, cap = mode_name.partition(":")  # "question": whole questions; "question:k": parts of at most k
    cmd += ["--training.batching", batching, "--training.max_answers_per_question", cap or "null"]
    if args.backbone:
        cmd += ["--model.backbone", args.backbone]
    started = time.time()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"train.py failed ({mode}, seed {seed}):\n{proc.stderr[-3000:]}")
    stage = json.loads((run_dir / "metrics.json").read_text())["stages"][args.stage]
    return {"mode": mode, "seed": seed, "dev_spearman": stage["dev"]["spearman"], "dev_n": stage["dev"].get("n"),
            "steps": stage["steps"], "train_seconds": stage["train_seconds"],
            "seconds": round(time.time() - started, 1)}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    p.add_argument("--stage", default="s3", help="the one stage trained (the others are skipped)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--modes", default="shuffled,question")
    p.add_argument("--max-dev-items", type=int, default=None, help="dev items scored (default: all)")
    p.add_argument("--backbone", default=None, help="override model.backbone (e.g. tiny-llama for smoke runs)")
    p.add_argument("--jobs", type=int, default=1, help="train.py runs at a time (each with the threads OMP_NUM_THREADS gives it)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import training.config

    args.all_stages = list(training.config.load_run_config(args.config, ["--model.backbone", args.backbone] if args.backbone else [])["stages"])
    seeds = [int(s) for s in args.seeds.split(",")]
    modes = args.modes.split(",")
    print(f"{args.config}: stage {args.stage}, {args.steps} steps, seeds {seeds}; {load_line()}", flush=True)
    # modes interleaved, so a change in the machine's speed or load hits both alike; `--jobs` runs at once
    todo = [(mode, seed) for seed in seeds for mode in modes]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(train_once, args, mode, seed, Path(tmp) / f"{mode}-{seed}") for mode, seed in todo]
        runs = []
        for future in futures:
            run = future.result()
            runs.append(run)
            print(f"{run['mode']:<9} seed {run['seed']}: dev spearman {run['dev_spearman']:.4f} ({run['steps']} steps, "
                  f"{run['train_seconds']:.0f} s training, {run['seconds']:.0f} s in all)", flush=True)
    means = {m: statistics.mean(r["dev_spearman"] for r in runs if r["mode"] == m) for m in modes}
    stdevs = {m: statistics.stdev([r["dev_spearman"] for r in runs if r["mode"] == m]) if len(seeds) > 1 else 0.0 for m in modes}
    summary = {"mean": means, "stdev": stdevs}
    by = {(r["mode"], r["seed"]): r["dev_spearman"] for r in runs}
    if "shuffled" in modes:  # each other mode against shuffled, paired by seed
        for m in modes:
            if m != "shuffled":
                deltas = [by[m, s] - by["shuffled", s] for s in seeds]
                summary.setdefault("delta", {})[m] = {"deltas": deltas, "mean": statistics.mean(deltas),
                                                      "stdev": statistics.stdev(deltas) if len(deltas) > 1 else 0.0}
    for m in modes:
        print(f"{m:<9} dev spearman {means[m]:.4f} +- {stdevs[m]:.4f} (mean +- sd over {len(seeds)} seeds)")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(**run_info(args), runs=runs, summary=summary, load=load_line()), indent=1, default=str))
    print(load_line())
    for m, delta in summary.get("delta", {}).items():
        print(f"shuffled_rho={means['shuffled']:.4f} {m}_rho={means[m]:.4f} delta={delta['mean']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
