"""Two or more trained judges on the same items, with paired bootstrap intervals of their differences.

Reads what `train.py` wrote in each run folder (no model is loaded): `test_predictions.jsonl` (the in-domain test),
`ood_predictions.jsonl` (the out-of-domain sets, with `test.ood: true`) and the probe suite's failing ids in
`metrics.json` (with `test.probes: true`). Each set is scored on the items every run scored (ids matched; the
count left out per run is reported), the first run is the reference: each other run gets `diff_ci`, the 95 %
interval of (its metric - the first run's) over the same bootstrap draws, for Spearman, Kendall, MAE of the mean,
ROC-AUC (correct = human mean >= 4) and the calibration error (`eval_suite.metrics.judge_agreement`); probes get
the interval of the difference in accuracy over resampled probes. `--clamped` compares the scores the saved models
give users (`score`, clamped where the model's config switches clamping on, mapped to 1-5) instead of the means.

    .venv/bin/python benchmarks/compare_judges.py --runs runs/quickstart runs/cpu-gemma3 --json runs/judges.json
Last line: `judges=A,B` then per other run `<run>_minus_<first>: <set>=d [lo, hi] ...` (Spearman).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _common import run_info

from eval_suite.metrics import judge_agreement
from eval_suite.report.probes import load_probes
from modeling_orca import unit_to_rating
from orca_io.jsonl import read_jsonl


def run_sets(run: Path) -> dict[str, dict[str, dict]]:
    """{set: {id: prediction with ratings}} of one run folder."""
    test = run / "test_predictions.jsonl"
    if not test.exists():
        raise SystemExit(f"{run}: no test_predictions.jsonl (a run that train.py finished)")
    rows = [(test, "in_domain_test", p) for p in read_jsonl(test) if p.get("ratings")]
    ood = run / "ood_predictions.jsonl"
    if ood.exists():
        rows += [(ood, p["set"], p) for p in read_jsonl(ood)]
    sets: dict[str, dict[str, dict]] = {}
    for path, set_name, pred in rows:
        if pred["id"] in sets.setdefault(set_name, {}):  # a second prediction for an item would replace the first
            raise SystemExit(f"{path}: id {pred['id']!r} appears twice in set {set_name}")
        sets[set_name][pred["id"]] = pred
    return sets


def probe_passes(run: Path, probe_ids: list[str]) -> np.ndarray | None:
    metrics = run / "metrics.json"
    probes = json.loads(metrics.read_text()).get("probes") if metrics.exists() else None
    if not probes:
        return None
    if probes["n"] != len(probe_ids):
        raise SystemExit(f"{metrics}: probes scored on {probes['n']} cases, the suite has {len(probe_ids)}")
    failed = set(probes["failed_ids"])
    return np.array([pid not in failed for pid in probe_ids])


def accuracy_difference(passes: np.ndarray, reference: np.ndarray, bootstrap: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    diffs = [passes[idx].mean() - reference[idx].mean() for idx in (rng.integers(0, passes.size, passes.size) for _ in range(bootstrap))]
    return {"diff": float(passes.mean() - reference.mean()), "diff_ci": tuple(float(q) for q in np.quantile(diffs, [0.025, 0.975]))}


def judged_rating(pred: dict, clamped: bool) -> float:
    """The predicted mean, or with `clamped` the saved model's score ([0, 1]) on the 1-5 scale."""
    if not clamped:
        return pred["mean"]
    if "score" not in pred:
        raise SystemExit(f"prediction {pred['id']!r} has no score (written before scores were kept): rerun without --clamped")
    return unit_to_rating(pred["score"])


def compare(runs: list[Path], bootstrap: int = 1000, seed: int = 0, clamped: bool = False) -> dict:
    names = [str(r) for r in runs]
    if len(set(names)) != len(names):
        raise SystemExit(f"a run is named twice: {names}")
    by_run = {name: run_sets(run) for name, run in zip(names, runs)}
    first = names[0]
    out: dict = {"runs": names, "statistic": "clamped score" if clamped else "mean", "sets": {}, "left_out": {}}
    for set_name, reference_preds in by_run[first].items():
        if any(set_name not in sets for sets in by_run.values()):
            continue  # a set not every run scored
        ids = [i for i in reference_preds if all(i in by_run[n][set_name] for n in names)]
        out["left_out"][set_name] = {n: len(by_run[n][set_name]) - len(ids) for n in names}
        if not ids:
            raise SystemExit(f"{set_name}: the runs share no item ids")
        human = [sum(reference_preds[i]["ratings"]) / len(reference_preds[i]["ratings"]) for i in ids]
        ratings = {n: [judged_rating(by_run[n][set_name][i], clamped) for i in ids] for n in names}
        out["sets"][set_name] = judge_agreement(ratings, human, bootstrap=bootstrap, seed=seed, reference=first)
    probe_ids = [r["id"] for r in load_probes()]
    passes = {n: probe_passes(run, probe_ids) for n, run in zip(names, runs)}
    if all(p is not None for p in passes.values()):
        out["probes"] = {n: {"n": len(probe_ids), "accuracy": float(p.mean()),
                             **(accuracy_difference(p, passes[first], bootstrap, seed) if n != first else {})}
                         for n, p in passes.items()}  # fmt: skip
    return out


def markdown(result: dict) -> str:
    names, first = result["runs"], result["runs"][0]
    lines = ["| set | n | judge | Spearman | ROC-AUC | MAE (1-5) | Spearman - first [95 %] | ROC-AUC - first | MAE - first |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for set_name, judges in result["sets"].items():
        for n in names:
            j = judges[n]
            cells = [f"{j[k]:.3f}" if j[k] is not None else "-" for k in ("spearman", "roc_auc", "mae_mean")]
            diff = j.get("diff_ci")
            deltas = ["-"] * 3 if diff is None else [
                f"{j[k] - judges[first][k]:+.3f} [{diff[k][0]:+.3f}, {diff[k][1]:+.3f}]" if diff[k] else "-"
                for k in ("spearman", "roc_auc", "mae_mean")]  # fmt: skip
            lines.append(f"| {set_name} | {j['n']} | {n} | " + " | ".join(cells + deltas) + " |")
    if "probes" in result:
        for n, p in result["probes"].items():
            delta = f"{p['diff']:+.3f} [{p['diff_ci'][0]:+.3f}, {p['diff_ci'][1]:+.3f}]" if "diff" in p else "-"
            lines.append(f"| probes (accuracy) | {p['n']} | {n} | {p['accuracy']:.3f} | | | {delta} | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, type=Path, help="run folders; the first is the reference")
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--clamped", action="store_true", help="compare the saved models' (clamped) scores, not the means")
    args = p.parse_args(argv)
    if len(args.runs) < 2:
        p.error("--runs needs at least two run folders")
    result = compare(args.runs, args.bootstrap, args.seed, args.clamped)
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(**run_info(args), **result), indent=1, default=str))
    first = result["runs"][0]
    print(f"judges={','.join(result['runs'])}")
    for n in result["runs"][1:]:
        parts = []
        for set_name, judges in result["sets"].items():
            lo, hi = judges[n]["diff_ci"]["spearman"] or (float("nan"), float("nan"))
            parts.append(f"{set_name}={judges[n]['spearman'] - judges[first]['spearman']:+.3f} [{lo:+.3f}, {hi:+.3f}]")
        print(f"{Path(n).name}_minus_{Path(first).name}: " + " ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
