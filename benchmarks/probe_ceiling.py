"""How far the probe suite can be learned at all: a diagnostic, not a recipe (it trains on half of the suite).

`write` splits the suite by question (every other question of each type), writes `make judge`'s s3 data with the
first half's probes added to train (right 5/5/5, wrong 1/1/1, each repeated --repeat times) as JSONL files for
`--stages.s3.files`, and the split itself; `score` reports, from run folders' metrics.json, the accuracy on the half
the trained model never saw (per type, and paired against the first run: 95 % interval over the probes) and on the
half it trained on.

    python benchmarks/probe_ceiling.py write --out runs/probe-ceiling-data
    python benchmarks/probe_ceiling.py score --split runs/probe-ceiling-data/split.json --runs runs/judge-prompt runs/judge-ceiling
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from _common import REPO  # sets the offline defaults and puts the repository on sys.path

from eval_suite.report.probes import labels, load_probes


def split_questions(probes: list[dict]) -> dict[str, list[str]]:
    """The suite's question ids in two halves: every other question of each type, in suite order."""
    by_type: dict[str, list[str]] = defaultdict(list)
    for p in probes:
        ids = by_type[labels(p)["type"]]
        if p["question_id"] not in ids:
            ids.append(p["question_id"])
    halves: dict[str, list[str]] = {"train": [], "held_out": []}
    for ids in by_type.values():
        for i, qid in enumerate(ids):
            halves["train" if i % 2 == 0 else "held_out"].append(qid)
    return halves


def write(out: Path, config: str, repeat: int) -> None:
    from training.config import load_run_config
    from training.data import load_stage_data

    cfg = load_run_config(config, [])
    data = load_stage_data(cfg["stages"]["s3"], cfg)
    probes = load_probes()
    halves = split_questions(probes)
    train_questions = set(halves["train"])
    added = []
    for p in probes:
        if p["question_id"] in train_questions:
            rating = 5 if labels(p)["expected"] == "right" else 1
            added += [{**p, "id": f"probe-train-{k}-{p['id']}", "question_id": f"probe-train-{k}-{p['question_id']}",
                       "ratings": [rating] * 3} for k in range(repeat)]
    out.mkdir(parents=True, exist_ok=True)
    for split, records in (("train", data["train"] + added), ("validation", data["validation"]), ("test", data["test"])):
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    (out / "split.json").write_text(json.dumps(halves, indent=1))
    print(f"train {len(data['train'])} + {len(added)} probe items ({len(added) // repeat} probes of "
          f"{len(halves['train'])} questions x {repeat}); held out: {len(halves['held_out'])} questions; -> {out}")


def score(split: Path, runs: list[Path], bootstrap: int) -> None:
    """Each run's accuracy on the held-out half (from its metrics.json), per type, and paired against the first."""
    from compare_judges import accuracy_difference, probe_passes

    held_out = set(json.loads(split.read_text())["held_out"])
    probes = load_probes()
    keep = np.array([p["question_id"] in held_out for p in probes])
    types = np.array([labels(p)["type"] for p in probes])[keep]
    first = None
    for run in runs:
        every = probe_passes(run, [p["id"] for p in probes])
        if every is None:
            raise SystemExit(f"{run}/metrics.json: no probe results")
        passes, trained = every[keep], every[~keep]
        by_type = {t: passes[types == t].mean() for t in dict.fromkeys(types)}
        line = (f"{run}: held-out half {passes.mean():.3f} ({passes.sum()}/{passes.size}), the other half "
                f"{trained.mean():.3f} ({trained.sum()}/{trained.size}); held-out types at or above 0.85: "
                f"{sum(a >= 0.85 for a in by_type.values())} of {len(by_type)}; lowest "
                + ", ".join(f"{t} {a:.2f}" for t, a in sorted(by_type.items(), key=lambda kv: kv[1])[:3]))
        if first is None:
            first = passes
        else:
            d = accuracy_difference(passes, first, bootstrap, seed=0)
            line += f"; minus {runs[0]}: {d['diff']:+.3f} [{d['diff_ci'][0]:+.3f}, {d['diff_ci'][1]:+.3f}]"
        print(line)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--config", default=str(REPO / "configs" / "judge.yaml"))
    w.add_argument("--repeat", type=int, default=4)
    s = sub.add_parser("score")
    s.add_argument("--split", type=Path, required=True)
    s.add_argument("--runs", type=Path, nargs="+", required=True, help="run folders (their metrics.json)")
    s.add_argument("--bootstrap", type=int, default=1000)
    args = p.parse_args(argv)
    if args.command == "write":
        write(args.out, args.config, args.repeat)
    else:
        score(args.split, args.runs, args.bootstrap)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
