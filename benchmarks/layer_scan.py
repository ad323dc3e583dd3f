"""Which layer of a frozen backbone a linear head should read (`model.backbone_layers`).

One pass through the backbone of a run config (its template and prompt) gives every layer's last-token state, after
the final norm as the head would read it with the layers above cut, for seeded samples of whole questions of the
last stage's train, dev and test splits and for the probe suite. Per layer, a multinomial logistic head (the NLL of
each rating, what the Multinomial head's `forward` minimises) on standardised states, its L2 strength chosen by dev
Spearman of the mean, is scored on test (Spearman, ROC-AUC with correct = mean rating >= 4, MAE of the mean) and on
the probes (share passed, ROC-AUC of right against wrong), beside the backbone's own yes/no reading at that layer
(the LM-head rows of `model.verdict_tokens` on the same state: the "logit lens"). It measures a linear reading of each
layer, not a trained judge: train.py with `model.backbone_layers` makes one.

    .venv/bin/python benchmarks/layer_scan.py --config configs/qwen-judge.yaml --train-items 1200 --json runs/bench/layer_scan_qwen.json

Any other `--KEY VALUE` is a run-config override, as for train.py. Last line: `best_dev_layer=J test_spearman=X
probes=Y last_layer_test_spearman=Z last_layer_probes=W` (the layer with the highest dev Spearman, and the last).
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import torch
from _common import run_info
from tqdm.auto import tqdm

C_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)


def pooled_by_layer(model, tokenizer, records: list[dict], desc: str, chunk: int = 64) -> np.ndarray:
    """(N, layers, H) float64: each record's training input (its first variant), last token, after every layer and
    the final norm; chunks of whole questions so that their answers share the prefix."""
    from training.top_layers import layer_states

    out, start = [], 0
    bar = tqdm(total=len(records), desc=desc, unit="record")
    while start < len(records):
        end = min(start + chunk, len(records))
        while end < len(records) and records[end].get("question_id") == records[end - 1].get("question_id"):
            end += 1
        states, owner = layer_states(model, tokenizer, records[start:end], model.backbone.config.num_hidden_layers,
                                     pooled_by_layer=True)
        first = {o: s for s, o in reversed(list(zip(states, owner)))}  # a record's first variant
        with torch.inference_mode():
            out += [model.backbone.norm(first[i].to(model.device)).double().cpu() for i in range(end - start)]
        bar.update(end - start)
        start = end
    bar.close()
    return torch.stack(out).numpy()


def fit_layer(X: dict[str, np.ndarray], targets: dict, expected: np.ndarray | None) -> dict:
    """The logistic head on one layer's states: C chosen on dev, scored on test and the probes."""
    from scipy.stats import spearmanr
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    mu, sd = X["train"].mean(0), X["train"].std(0) + 1e-6
    Z = {name: (x - mu) / sd for name, x in X.items()}
    repeat, labels = targets["train_repeat"], targets["train_ratings"]
    best = None
    for C in C_GRID:
        with warnings.catch_warnings():  # lbfgs may stop at max_iter on the weakest C: still a fitted head
            warnings.simplefilter("ignore")
            head = LogisticRegression(C=C, max_iter=500).fit(Z["train"][repeat], labels)
        dev = spearmanr(head.predict_proba(Z["dev"]) @ head.classes_, targets["dev"]).statistic
        if best is None or dev > best[0]:
            best = (dev, C, head)
    dev, C, head = best
    test = head.predict_proba(Z["test"]) @ head.classes_
    row = {"C": C, "dev_spearman": float(dev), "test_spearman": float(spearmanr(test, targets["test"]).statistic),
           "test_roc_auc": float(roc_auc_score(targets["test"] >= 4, test)),
           "test_mae": float(np.abs(test - targets["test"]).mean())}
    if expected is not None:
        probes = head.predict_proba(Z["probes"]) @ head.classes_
        row.update(probes=float(np.mean(np.where(expected, probes > 3, probes < 3))),
                   probes_roc_auc=float(roc_auc_score(expected, probes)))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="a run config (train.py's): backbone, template, data, seed")
    parser.add_argument("--train-items", type=int, default=1200, help="seeded sample of the last stage's rated train items")
    parser.add_argument("--eval-items", type=int, default=250, help="seeded samples of its dev and test splits")
    parser.add_argument("--no-probes", action="store_true", help="leave the probe suite out")
    parser.add_argument("--json", type=Path, help="write every layer's figures here")
    args, overrides = parser.parse_known_args()

    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    from eval_suite.report.probes import load_probes
    from training.config import load_run_config
    from training.data import load_stage_data, sample_questions
    from training.model import build_model, lm_head_rows, resolve_backbone

    cfg = load_run_config(args.config, overrides)
    model, tokenizer = build_model(cfg)
    model.eval()
    stage = list(cfg["stages"].values())[-1]
    data = load_stage_data(stage, cfg)
    seed = cfg["seed"]
    records = {"train": sample_questions([r for r in data["train"] if r.get("ratings")], args.train_items, seed),
               "dev": sample_questions(data["validation"], args.eval_items, seed),
               "test": sample_questions(data["test"], args.eval_items, seed)}
    if not args.no_probes:
        records["probes"] = load_probes()
    states = {name: pooled_by_layer(model, tokenizer, recs, name) for name, recs in records.items()}
    targets = {name: np.array([np.mean(r["ratings"]) for r in records[name]]) for name in ("dev", "test")}
    targets["train_repeat"] = np.concatenate([[i] * len(r["ratings"]) for i, r in enumerate(records["train"])]).astype(int)
    targets["train_ratings"] = np.concatenate([r["ratings"] for r in records["train"]])
    expected = None if args.no_probes else np.array([json.loads(r["metadata"])["expected"] == "right" for r in records["probes"]])

    verdict = None  # the LM's own yes/no direction (w_yes - w_no), where the backbone has an LM head
    if not cfg["model"]["backbone"].startswith("tiny-"):
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in cfg["model"]["verdict_tokens"][:2]]
        rows = lm_head_rows(resolve_backbone(cfg["model"]["backbone"]), model, ids).double().numpy()
        verdict = rows[0] - rows[1]
    layers = []
    for j in tqdm(range(states["train"].shape[1]), desc="heads", unit="layer"):
        row = {"layer": j + 1, **fit_layer({name: s[:, j] for name, s in states.items()}, targets, expected)}
        if verdict is not None:
            row["lens_test_spearman"] = float(spearmanr(states["test"][:, j] @ verdict, targets["test"]).statistic)
            if expected is not None:
                row["lens_probes_roc_auc"] = float(roc_auc_score(expected, states["probes"][:, j] @ verdict))
        layers.append(row)
        print(" ".join(f"{k}={v:g}" if k == "C" else f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        counts = {name: len(recs) for name, recs in records.items()}
        args.json.write_text(json.dumps({**run_info(args), "config": cfg, "counts": counts, "layers": layers}, indent=1, default=str) + "\n")
    best, last = max(layers, key=lambda r: r["dev_spearman"]), layers[-1]
    print(f"best_dev_layer={best['layer']} test_spearman={best['test_spearman']:.3f} probes={best.get('probes', float('nan')):.3f} "
          f"last_layer_test_spearman={last['test_spearman']:.3f} last_layer_probes={last.get('probes', float('nan')):.3f}")


if __name__ == "__main__":
    main()
