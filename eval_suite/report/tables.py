"""orca-eval's tables: the runs' metrics aggregated over folds, per system, answering model, ablation and
baseline, as Markdown for report.md and as data for report.json."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from eval_suite.metrics import compute_metrics
from eval_suite.report.runs import FOLD_KEY, Result, Run, group_by, label_of, plain_setting, varying_keys
from orca_io.tables import markdown_table

METRICS = ("spearman", "kendall", "mae_mean", "mae_variance", "nll", "roc_auc")
SHORT = {"spearman": "Spearman", "kendall": "Kendall", "mae_mean": "MAE", "mae_variance": "MAE var", "nll": "NLL", "roc_auc": "ROC AUC"}


def aggregate(metric_dicts: list[dict]) -> dict[str, tuple[float, float, int] | None]:
    """metric -> (mean, sample std, count) over the dicts where it is defined."""
    out = {}
    for key in METRICS:
        values = [m[key] for m in metric_dicts if m.get(key) is not None]
        out[key] = None if not values else (float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, len(values))
    return out


def fmt(cell) -> str:
    if cell is None:
        return "-"
    mean, std, n = cell
    return f"{mean:.3f} ± {std:.3f}" if n > 1 else f"{mean:.3f}"


@dataclass
class Table:
    title: str
    note: str
    headers: list[str]
    rows: list[list]  # Markdown cells
    data: list[dict]  # the same rows for report.json

    def markdown(self) -> str:
        body = markdown_table(self.headers, self.rows) if self.rows else "_No runs for this table._"
        return f"## {self.title}\n\n{self.note}\n\n{body}\n"


def metric_row(cells: dict) -> list[str]:
    return [fmt(cells[k]) for k in METRICS]


def json_cells(cells: dict) -> dict:
    return {k: None if v is None else {"mean": v[0], "std": v[1], "n": v[2]} for k, v in cells.items()}


def per_run_table(results: list[Result]) -> Table:
    rows, data = [], []
    for r in results:
        rows.append([r.run.name, r.test_set, r.metrics["n"], *["-" if r.metrics[k] is None else f"{r.metrics[k]:.3f}" for k in METRICS]])
        data.append({"run": r.run.name, "test_set": r.test_set, **r.metrics})
    return Table("Per run", "Each run on each test set (labelled items only).", ["run", "test set", "n", *[SHORT[k] for k in METRICS]], rows, data)


def systems(results: list[Result], runs: list[Run]) -> dict[str, dict[str, list[Result]]]:
    """label -> test set -> results of the label's folds. Labels name the settings that vary between systems."""
    keys = [k for k in varying_keys(runs) if k != FOLD_KEY]
    out: dict[str, dict[str, list[Result]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        out[label_of(r.run.settings, keys)][r.test_set].append(r)
    return out


def heads_table(by_system, test_sets: list[str]) -> Table:
    headers = ["system (head, ...)"] + [f"{t}: {SHORT[k]}" for t in test_sets for k in ("spearman", "kendall", "mae_mean")]
    rows, data = [], []
    for label, per_test in by_system.items():
        cells = {t: aggregate([r.metrics for r in per_test.get(t, [])]) for t in test_sets}
        rows.append([label] + [fmt(cells[t][k]) if t in per_test else "-" for t in test_sets for k in ("spearman", "kendall", "mae_mean")])
        data.append({"system": label, **{t: json_cells(cells[t]) for t in test_sets if t in per_test}})
    return Table("Heads × test sets", "Rows: systems (runs grouped over folds); mean ± std over folds where there are several.",
                 headers, rows, data)


def folds_table(by_system) -> Table:
    rows, data = [], []
    for label, per_test in by_system.items():
        for test_set, results in per_test.items():
            folds = sorted(str(r.run.fold) for r in results)
            cells = aggregate([r.metrics for r in results])
            rows.append([label, test_set, len(results), ", ".join(folds), *metric_row(cells)])
            data.append({"system": label, "test_set": test_set, "folds": folds, "runs": [r.run.name for r in results], **json_cells(cells)})
    return Table("Scenario A: mean ± std over folds",
                 "Runs that differ only in `data.fold` are grouped; std is the sample std over folds (ddof=1).",
                 ["system", "test set", "runs", "folds", *[SHORT[k] for k in METRICS]], rows, data)


def answerer_table(by_system) -> tuple[Table, dict]:
    """Per answering model, with each system's predictions pooled over its folds (in scenario B each held-out
    answering model is the test set of one fold)."""
    rows, data, pooled = [], [], {}
    for label, per_test in by_system.items():
        for test_set, results in per_test.items():
            by_answerer: dict[str, list[tuple]] = defaultdict(list)
            for r in results:
                for i, name in enumerate(r.answerers):
                    by_answerer[name].append((r.mean[i], r.ratings[i]))
            for name, items in sorted(by_answerer.items()):
                m = compute_metrics([x[0] for x in items], human_ratings=[x[1] for x in items])
                pooled[(label, test_set, name)] = m
                rows.append([label, test_set, name, m["n"], *["-" if m[k] is None else f"{m[k]:.3f}" for k in ("spearman", "kendall", "mae_mean")]])
                data.append({"system": label, "test_set": test_set, "answerer": name, **m})
    table = Table("Scenario B: per answering model",
                  "Test predictions broken down by `answerer`, pooled over each system's folds.",
                  ["system", "test set", "answerer", "n", "Spearman", "Kendall", "MAE"], rows, data)
    return table, pooled


def ablation_table(results: list[Result], runs: list[Run], dim: str, title: str, note: str) -> Table:
    """Systems that differ from each other only in `dim` (folds pooled as mean ± std)."""
    others = [k for k in varying_keys(runs) if k not in (dim, FOLD_KEY)]
    rows, data = [], []
    for members in group_by(runs, others).values():
        if len({r.settings.get(dim) for r in members}) < 2:
            continue
        context = label_of(members[0].settings, others)
        names = {r.name for r in members}
        by_value: dict[tuple, list[Result]] = defaultdict(list)
        for res in results:
            if res.run.name in names:
                by_value[(plain_setting(res.run.settings.get(dim)), res.test_set)].append(res)
        for (value, test_set), res_list in sorted(by_value.items()):
            cells = aggregate([r.metrics for r in res_list])
            rows.append([context, value, test_set, len(res_list), *metric_row(cells)])
            data.append({"context": context, dim: value, "test_set": test_set, "runs": [r.run.name for r in res_list], **json_cells(cells)})
    return Table(title, note, ["shared settings", dim.rsplit(".", 1)[-1], "test set", "runs", *[SHORT[k] for k in METRICS]], rows, data)


def baselines_table(by_system, results: list[Result], test_sets: list[str]) -> Table:
    cols = ("spearman", "kendall", "mae_mean", "roc_auc")
    rows, data = [], []
    for t in test_sets:
        for label, per_test in by_system.items():
            if t in per_test:
                cells = aggregate([r.metrics for r in per_test[t]])
                judge = "orca" if label == "orca" else f"orca ({label})"
                rows.append([t, judge, *[fmt(cells[k]) for k in cols]])
                data.append({"test_set": t, "judge": judge, **json_cells({k: cells[k] for k in cols})})
        # one value per distinct test split: folds of several systems share their baselines
        splits = {r.data_key: r.baselines for r in results if r.test_set == t}
        for name in sorted({n for b in splits.values() for n in b}):
            cells = aggregate([b[name] for b in splits.values() if name in b])
            rows.append([t, name, *[fmt(cells[k]) for k in cols]])
            data.append({"test_set": t, "judge": name, **json_cells({k: cells[k] for k in cols})})
    return Table("Baselines beside ORCA", "Baselines are mean ± std over the distinct test splits (folds).",
                 ["test set", "judge", *[SHORT[k] for k in cols]], rows, data)
