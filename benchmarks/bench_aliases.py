"""Many reference aliases at little cost: reference_mode='max' over every alias against the k aliases closest to the
candidate (`OrcaConfig.max_scored_references`), with a trained judge.

Trivia-style records come from EVOUNA-NQ: its answers whose golden answer lists at least `--min-aliases` aliases
('/'-separated), each alias list grown to N entries (`--aliases`, default 10 50 200) with the surface forms trivia
alias lists carry ('The X', 'x', 'X (film)', 'X.', ...), the real aliases at seeded places among them. Per N it
times `predict` on the same records with the first alias only, with every alias ('max') and with the k closest
(k in `--k`), and compares the k-closest scores with 'max' (mean |difference| of the means, Spearman and ROC-AUC
against the human verdicts). Then the dev split of s3_evouna_nq (its real alias lists) is scored with join, max
and max over the k closest: "no loss of dev quality against max".

    .venv/bin/python benchmarks/bench_aliases.py --model runs/quickstart/final
Last line: `cost_ratio_vs_one_alias=X (k=K, N=max) dev_spearman_max=A dev_spearman_max_k=B`.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time

import numpy as np
from _common import load_line, run_info

_PREFIXES = ("", "The ", "the ", "a ")
_SUFFIXES = ("", ".", " (film)", " (band)", " (song)", " (TV series)", " (novel)", " (album)", " (person)",
             " (disambiguation)")


def trivia_aliases(real: list[str], n: int, seed: int) -> list[str]:
    """`n` aliases: the real ones plus surface forms of them, shuffled with a seed (the real ones included)."""
    forms = []
    for alias in real:
        for suffix in _SUFFIXES:
            for prefix in _PREFIXES:
                for case in (str, str.lower, str.upper):
                    forms.append(case(prefix + alias + suffix))
    extra = [f for f in dict.fromkeys(forms) if f not in real]
    rng = random.Random(seed)
    rng.shuffle(extra)
    out = list(real[:n]) + extra[: max(0, n - len(real))]
    rng.shuffle(out)
    return out


def many_alias_records(min_aliases: int, n_records: int, data_dir=None) -> list[dict]:
    from dataset_builder.configs import build_config

    records = [r for r in build_config("s3_evouna_nq", data_dir=data_dir).records if len(r["reference"]) >= min_aliases]
    return random.Random(0).sample(records, min(n_records, len(records)))


def timed_predict(model, tokenizer, records, max_batch_tokens) -> tuple[list[dict], float]:
    t = time.perf_counter()
    preds = model.predict(records, tokenizer, max_batch_tokens=max_batch_tokens)
    return preds, time.perf_counter() - t


def agreement(preds, records) -> dict:
    from eval_suite.metrics import roc_auc, spearman

    mean = np.array([p["mean"] for p in preds])
    human = np.array([np.mean(r["ratings"]) for r in records])
    return {"spearman": spearman(mean, human), "roc_auc": roc_auc(human >= 4, mean)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a trained ORCA folder, e.g. runs/quickstart/final")
    p.add_argument("--aliases", type=int, nargs="+", default=[10, 50, 200], help="alias counts N of the records")
    p.add_argument("--k", type=int, nargs="+", default=[2, 3], help="aliases scored per record (max_scored_references)")
    p.add_argument("--n", type=int, default=40, help="many-alias records (EVOUNA-NQ answers)")
    p.add_argument("--min-aliases", type=int, default=5)
    p.add_argument("--dev-items", type=int, default=0, help="dev items for the quality check (0 = the whole split)")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="predict's (default: its own, 1,024 on the CPU)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from dataset_builder import load_config
    from eval_suite.models.loading import load_model

    model, tokenizer = load_model(args.model, device="cpu")
    base = copy.deepcopy(model.config)
    base_records = many_alias_records(args.min_aliases, args.n)
    print(f"{len(base_records)} EVOUNA-NQ answers with >= {args.min_aliases} aliases; k = {args.k}; {load_line()}", flush=True)

    def configure(mode: str, k: int) -> None:
        model.config = copy.deepcopy(base)
        model.config.reference_mode, model.config.max_scored_references = mode, k

    configure("max", 0)
    model.predict(base_records[:4], tokenizer)  # warm-up
    rows, per_n = [], {}
    print(f"{'N aliases':>9} {'scoring':<22}{'s/record':>9}{'x one':>7}{'|d mean|':>9}{'Spearman':>9}{'ROC-AUC':>8}")
    for n in args.aliases:
        records = [{**r, "reference": trivia_aliases(r["reference"], n, seed=i)} for i, r in enumerate(base_records)]
        one = [{**r, "reference": r["reference"][:1]} for r in base_records]  # the canonical alias alone
        configure("max", 0)
        one_preds, t_one = timed_predict(model, tokenizer, one, args.max_batch_tokens)
        full_preds, t_full = timed_predict(model, tokenizer, records, args.max_batch_tokens)
        entries = {"one alias": (one_preds, t_one), "max, every alias": (full_preds, t_full)}
        for k in args.k:
            configure("max", k)
            entries[f"max, {k} closest"] = timed_predict(model, tokenizer, records, args.max_batch_tokens)
        per_n[n] = {}
        full_mean = np.array([q["mean"] for q in full_preds])
        for name, (preds, seconds) in entries.items():
            diff = float(np.mean(np.abs(np.array([q["mean"] for q in preds]) - full_mean)))
            row = {"aliases": n, "scoring": name, "s_per_record": seconds / len(records), "x_one_alias": seconds / t_one,
                   "mean_abs_diff_vs_max": diff, **agreement(preds, records)}
            rows.append(row)
            per_n[n][name] = row
            print(f"{n:>9} {name:<22}{row['s_per_record']:>9.4f}{row['x_one_alias']:>7.2f}{diff:>9.4f}"
                  f"{row['spearman'] or float('nan'):>9.3f}{row['roc_auc'] or float('nan'):>8.3f}", flush=True)

    dev = load_config("s3_evouna_nq")["validation"].to_list()
    if args.dev_items:
        dev = random.Random(0).sample(dev, min(args.dev_items, len(dev)))
    dev_rows = {}
    for mode, k in [("join", 0), ("max", 0), *[("max", k) for k in args.k]]:
        configure(mode, k)
        preds, seconds = timed_predict(model, tokenizer, dev, args.max_batch_tokens)
        name = f"{mode}" + (f", {k} closest" if k else "")
        dev_rows[name] = {**agreement(preds, dev), "seconds": seconds}
        print(f"dev ({len(dev)} answers) {name:<16} Spearman {dev_rows[name]['spearman']:.4f} ROC-AUC "
              f"{dev_rows[name]['roc_auc']:.4f} ({seconds:.1f} s)", flush=True)

    k = args.k[-1]
    worst = max(per_n[n][f"max, {k} closest"]["x_one_alias"] for n in args.aliases)
    summary = (f"cost_ratio_vs_one_alias={worst:.2f} (k={k}, worst over N={args.aliases}) "
               f"dev_spearman_max={dev_rows['max']['spearman']:.4f} dev_spearman_max_k={dev_rows[f'max, {k} closest']['spearman']:.4f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "dev": dev_rows, "summary": summary, "n_records": len(base_records),
                       **run_info(args)}, fh, indent=1)
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
