"""orca-eval: turn trained runs (train.py run folders) into the paper's tables and plots.

    orca-eval --runs runs/multi-f0 runs/multi-f1 runs/beta-f0 runs/beta-f1 --out reports/main
    orca-eval --runs runs/* --out reports/mmar --test-file mmar_test.jsonl --baselines exact_match token_f1 bleu

Runs are grouped by what differs in their run_config.yaml: runs that differ only in `data.fold` are folds of one
system (mean +- std over folds); systems that differ only in `model.orca.template_fields` form the input ablation,
systems that differ only in the stages they skip form the curriculum ablation. Each run is scored on its own test
split (test_predictions.jsonl) or, with --test-file, on the given files through its final/ model's `predict`.
Writes report.md, report.json and PNG plots into --out.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from configuration_orca import TEMPLATE_FIELDS
from dataset_builder.files import write_text_atomic
from dataset_builder.readers import read_jsonl
from eval_suite.cli_args import add_model_arguments, set_quiet
from eval_suite.metrics import baseline_metrics, compute_metrics, prediction_metrics
from eval_suite.tables import flatten, markdown_table

METRICS = ("spearman", "kendall", "mae_mean", "mae_variance", "nll", "roc_auc")
SHORT = {"spearman": "Spearman", "kendall": "Kendall", "mae_mean": "MAE", "mae_variance": "MAE var", "nll": "NLL", "roc_auc": "ROC AUC"}
DEFAULT_BASELINES = ("exact_match", "contains", "token_f1")
FOLD_KEY, INPUT_KEY, CURRICULUM_KEY = "data.fold", "model.orca.template_fields", "curriculum"
# config keys that never make two runs different systems: where the run was written, which data files a fold
# read (they differ per fold by construction) and what the test section asked to compare
IGNORED = re.compile(r"^(run_dir|skip_stages|test\..*|stages\.[^.]+\.files\..*)$")


class ReportError(Exception):
    pass


# ------------------------------------------------------------------------------------------------ runs


@dataclass
class Run:
    name: str
    path: Path
    config: dict
    metrics: dict
    settings: dict = field(default_factory=dict)  # flattened config that identifies the system

    @property
    def fold(self):
        return self.config.get("data", {}).get("fold")


def curriculum(config: dict) -> str:
    stages = list(config.get("stages", {}))
    done = [s for s in stages if s not in config.get("skip_stages", [])]
    return "full" if done == stages else "->".join(done)


def system_settings(config: dict) -> dict[str, str]:
    flat = {k: v for k, v in flatten(config, leaf=functools.partial(json.dumps, sort_keys=True)).items() if not IGNORED.match(k)}
    # an unset template means the default one: the two must compare equal
    flat.setdefault(INPUT_KEY, json.dumps(list(config.get("model", {}).get("orca", {}).get("template_fields", TEMPLATE_FIELDS))))
    flat[CURRICULUM_KEY] = json.dumps(curriculum(config))
    return flat


def load_run(path: Path) -> Run:
    if not (path / "run_config.yaml").exists():
        raise ReportError(f"{path}: no run_config.yaml; is it a train.py run folder?")
    config = yaml.safe_load((path / "run_config.yaml").read_text())
    metrics_file = path / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    return Run(path.name, path, config, metrics, system_settings(config))


def varying_keys(runs: list[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.settings})
    return [k for k in keys if len({r.settings.get(k) for r in runs}) > 1]


def label_of(settings: dict, keys: list[str]) -> str:
    parts = [f"{k.rsplit('.', 1)[-1]}={_plain(settings.get(k))}" for k in keys]
    return ", ".join(parts) or "orca"


def _plain(value: str | None) -> str:
    value = json.loads(value) if value is not None else None
    return "+".join(map(str, value)) if isinstance(value, list) else str(value)


def group_by(runs: list[Run], keys: list[str]) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        groups[tuple(run.settings.get(k) for k in keys)].append(run)
    return dict(groups)


# ------------------------------------------------------------------------------------------------ scoring


@dataclass
class Result:
    """One run on one test set: labelled items only."""

    run: Run
    test_set: str
    data_key: str  # identifies the test data, so baselines of one split are counted once
    ratings: list[list[int]]
    answerers: list[str]
    mean: list[float]
    variance: list[float] | None
    probs: list[list[float]] | None
    baselines: dict[str, dict]
    metrics: dict = field(default_factory=dict)


def make_result(run, test_set, data_key, records, preds, baselines) -> Result:
    pairs = [(r, p) for r, p in zip(records, preds) if r.get("ratings")]
    if not pairs:
        raise ReportError(f"{run.name} on {test_set}: no test item has human ratings")
    has_var = pairs[0][1].get("variance") is not None
    has_probs = pairs[0][1].get("probs") is not None
    result = Result(
        run, test_set, data_key,
        ratings=[r["ratings"] for r, _ in pairs],
        answerers=[r.get("answerer") or "unknown" for r, _ in pairs],
        mean=[p["mean"] for _, p in pairs],
        variance=[p["variance"] for _, p in pairs] if has_var else None,
        probs=[p["probs"] for _, p in pairs] if has_probs else None,
        baselines=baselines,
    )
    result.metrics = prediction_metrics([p for _, p in pairs], result.ratings)
    return result


def own_test(run: Run, baseline_names, notes: list[str]) -> Result:
    """The run's test split, from test_predictions.jsonl, joined with its test file (for `answerer`) when known."""
    preds_file = run.path / "test_predictions.jsonl"
    if not preds_file.exists():
        raise ReportError(f"{run.path}: no test_predictions.jsonl (did the run finish?); or pass --test-file")
    preds = read_jsonl(preds_file)
    stages = [(n, s) for n, s in run.config["stages"].items() if n not in run.config.get("skip_stages", [])]
    stage_name, stage = stages[-1]
    test_file = stage.get("files", {}).get("test")
    if test_file:
        test_set, data_key = f"{stage_name} test", str(Path(test_file).resolve())
    else:
        d = run.config.get("data", {})
        test_set = f"{stage.get('dataset', stage_name)} test"
        data_key = f"{test_set}|scenario={d.get('scenario')}|fold={d.get('fold')}|seed={d.get('seed')}"

    by_id = {}
    if test_file and Path(test_file).exists():
        from dataset_builder.readers import read_records

        by_id = {r["id"]: r for r in read_records(test_file, on_error="skip").records}
    if not all("answerer" in p for p in preds) and not by_id:
        notes.append(f"{run.name}: answerers unknown (test_predictions.jsonl has no `answerer` and the test data is "
                     "not a readable file): the per-answerer breakdown shows one 'unknown' bar")
    records = [{**by_id.get(p["id"], {}), "ratings": p.get("ratings"), "answerer": p.get("answerer") or by_id.get(p["id"], {}).get("answerer")}
               for p in preds]

    stored = {k: v for k, v in run.metrics.get("test", {}).items() if k != "orca"}
    wanted = list(baseline_names) if baseline_names is not None else list(stored)
    baselines = {k: stored[k] for k in wanted if k in stored}
    missing = [k for k in wanted if k not in stored]
    if missing and by_id:  # only possible with the test records at hand
        baselines.update(baseline_metrics(records, missing))
    elif missing:
        notes.append(f"{run.name}: baselines {missing} are not in metrics.json and the test file is unknown: left out")
    return make_result(run, test_set, data_key, records, preds, baselines)


def score_results(runs: list[Run], test_files: list[Path], baseline_names, batch_size: int, notes: list[str],
                  device: str = "auto", dtype: str = "auto") -> list[Result]:
    if not test_files:
        return [own_test(run, baseline_names, notes) for run in runs]
    from dataset_builder.readers import read_records
    from eval_suite.loading import load_model

    tests = {path: read_records(path).records for path in test_files}
    names = list(baseline_names) if baseline_names is not None else list(DEFAULT_BASELINES)
    base = {path: baseline_metrics(records, names) for path, records in tests.items()}
    results = []
    for run in runs:
        if not (run.path / "final").is_dir():
            raise ReportError(f"{run.path}: no final/ model folder to score --test-file with")
        model, tokenizer = load_model(str(run.path / "final"), device=device, dtype=dtype)
        for path, records in tests.items():
            preds = model.predict(records, tokenizer, batch_size=batch_size)
            results.append(make_result(run, path.stem, str(path.resolve()), records, preds, base[path]))
        del model
    return results


# ------------------------------------------------------------------------------------------------ tables


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
                by_value[(_plain(res.run.settings.get(dim)), res.test_set)].append(res)
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


# ------------------------------------------------------------------------------------------------ plots


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "test"


def human_stats(ratings: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, population variance, number of ratings) per item."""
    from eval_suite.metrics import RATINGS, ratings_to_counts

    counts = ratings_to_counts(ratings)
    total = counts.sum(1)
    mean = counts @ RATINGS / total
    return mean, np.clip(counts @ RATINGS**2 / total - mean**2, 0, None), total


def reliability(probs: np.ndarray, ratings: list[list[int]], bins: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Binned predicted probability of each rating vs the observed share of annotators giving it (all 5 ratings
    of every item pooled). Returns (mean predicted, observed frequency, count) per non-empty bin."""
    from eval_suite.metrics import ratings_to_counts

    counts = ratings_to_counts(ratings)
    observed = (counts / counts.sum(1, keepdims=True)).ravel()
    p = probs.ravel()
    which = np.minimum((p * bins).astype(int), bins - 1)
    keep = [b for b in range(bins) if np.any(which == b)]
    return (np.array([p[which == b].mean() for b in keep]), np.array([observed[which == b].mean() for b in keep]),
            np.array([int(np.sum(which == b)) for b in keep]))


def make_plots(by_system, pooled_answerers: dict, test_sets: list[str], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    files = []

    def legend(ax):
        # below the axes: system labels can be long and would hide the points
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.14), frameon=False)

    def save(fig, name):
        fig.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
        files.append(name)

    for t in test_sets:
        members = {label: per_test[t] for label, per_test in by_system.items() if t in per_test}
        pooled = {}
        for label, results in members.items():
            pooled[label] = {
                "mean": np.concatenate([r.mean for r in results]),
                "ratings": [x for r in results for x in r.ratings],
                "variance": None if any(r.variance is None for r in results) else np.concatenate([r.variance for r in results]),
                "probs": None if any(r.probs is None for r in results) else np.concatenate([r.probs for r in results]),
            }

        fig, ax = plt.subplots(figsize=(5, 5))
        for label, d in pooled.items():
            ax.scatter(human_stats(d["ratings"])[0], d["mean"], s=12, alpha=0.6, label=label)
        ax.plot([1, 5], [1, 5], "k--", lw=1)
        ax.set(xlabel="human mean rating", ylabel="predicted mean rating", title=f"{t}: predicted vs human mean", xlim=(0.8, 5.2), ylim=(0.8, 5.2))
        legend(ax)
        save(fig, f"scatter_{slug(t)}.png")

        fig, ax = plt.subplots(figsize=(5, 5))
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
        for label, d in pooled.items():
            if d["probs"] is not None:  # a bernoulli head predicts no distribution
                x, y, _ = reliability(d["probs"], d["ratings"])
                ax.plot(x, y, "o-", label=label)
        ax.set(xlabel="predicted probability of a rating", ylabel="observed share of annotators", title=f"{t}: reliability", xlim=(0, 1), ylim=(0, 1))
        legend(ax)
        save(fig, f"reliability_{slug(t)}.png")

        fig, ax = plt.subplots(figsize=(5, 5))
        for label, d in pooled.items():
            _, h_var, n = human_stats(d["ratings"])
            if d["variance"] is not None:
                multi = n >= 2  # one rating has no disagreement to compare with
                ax.scatter(h_var[multi], d["variance"][multi], s=12, alpha=0.6, label=label)
        ax.plot([0, 4], [0, 4], "k--", lw=1)
        ax.set(xlabel="human rating variance (items with >= 2 ratings)", ylabel="predicted variance", title=f"{t}: variance vs disagreement")
        legend(ax)
        save(fig, f"variance_{slug(t)}.png")

        answerers = sorted({a for (label, ts, a) in pooled_answerers if ts == t})
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.2 * len(answerers) * max(1, len(members))), 4))
        width = 0.8 / max(1, len(members))
        for j, label in enumerate(members):
            for ax, key in zip(axes, ("spearman", "mae_mean")):
                values = [pooled_answerers.get((label, t, a), {}).get(key) for a in answerers]
                ax.bar(np.arange(len(answerers)) + j * width, [np.nan if v is None else v for v in values], width, label=label)
        for ax, key in zip(axes, ("spearman", "mae_mean")):
            ax.set_xticks(np.arange(len(answerers)) + 0.4 - width / 2, answerers, rotation=30, ha="right", fontsize=8)
            ax.set(ylabel=SHORT[key], title=f"{t}: {SHORT[key]} per answering model")
        legend(axes[0])
        save(fig, f"answerers_{slug(t)}.png")
    return files


# ------------------------------------------------------------------------------------------------ out of domain

OOD_BASELINES = ("contains", "token_f1", "embedding_cosine")
SHORT_ANSWER_WORDS = 5  # a span answer has at most this many words; longer ones are sentences
SLICE_BOOTSTRAP = 200  # resamples for slices (whole sets get the full count): enough for a rough interval


def ood_slices(records: list[dict]) -> dict[str, np.ndarray]:
    """Boolean masks of the slices reported per set: all; short span vs sentence answers; one reference alias vs
    many; answers sharing a word with the reference vs none (where none is shared, only knowledge beyond the
    reference can tell a right answer: the limit of any reference-based judge); each answering model. A slice
    equal to the whole set or empty is left out."""
    from eval_suite.baselines import token_f1

    n = len(records)
    words = np.array([len(r["candidate"].split()) for r in records])
    aliases = np.array([len(r["reference"]) for r in records])
    overlap = np.array(token_f1(records)) > 0
    slices = {
        "all": np.ones(n, dtype=bool),
        f"short (<= {SHORT_ANSWER_WORDS} words)": words <= SHORT_ANSWER_WORDS,
        f"sentence (> {SHORT_ANSWER_WORDS} words)": words > SHORT_ANSWER_WORDS,
        "one alias": aliases == 1,
        "many aliases": aliases > 1,
        "shares a word with the reference": overlap,
        "no word in common with the reference": ~overlap,
    }
    for answerer in sorted({r.get("answerer") or "unknown" for r in records}):
        slices[f"answerer {answerer}"] = np.array([(r.get("answerer") or "unknown") == answerer for r in records])
    return {name: mask for name, mask in slices.items() if name == "all" or 0 < mask.sum() < n}


def distribution_median(probs) -> np.ndarray:
    """The median rating of each predicted distribution (n, 5): the smallest rating whose cumulative probability
    reaches 1/2. Against a single human rating per item it is the statistic that minimises the expected absolute
    error; the mean is the one for the mean of many raters."""
    cum = np.cumsum(np.asarray(probs, dtype=float), axis=1)
    return 1.0 + np.argmax(cum >= 0.5 - 1e-9, axis=1)


def judge_sets(sets: dict[str, tuple[list[dict], list[float] | dict]], *, baselines=OOD_BASELINES, bootstrap: int = 1000,
               slice_bootstrap: int = SLICE_BOOTSTRAP, seed: int = 0, reference: str | None = None) -> dict:
    """ORCA beside the baselines on each set and its slices (:func:`ood_slices`).

    ``sets``: name -> (records with ratings, ORCA's predicted means in the same order, or a dict of named ORCA
    statistics whose first entry is the mean, e.g. {"orca": means, "orca_median": medians}). Returns
    {set: {slice: judge_agreement(...)}}: every judge on the same items, ``reference`` (default: the first ORCA
    statistic) as the reference of the paired differences (a baseline's ``diff_ci`` is baseline - reference)."""
    from eval_suite.baselines import BASELINES
    from eval_suite.metrics import judge_agreement
    from modeling_orca import unit_to_rating

    out = {}
    for set_name, (records, orca_mean) in sets.items():
        human = np.array([sum(r["ratings"]) / len(r["ratings"]) for r in records])
        own = orca_mean if isinstance(orca_mean, dict) else {"orca": orca_mean}
        judges = {name: np.asarray(values, dtype=float) for name, values in own.items()}
        if any(len(v) != len(records) for v in judges.values()):
            raise ValueError(f"{set_name}: {len(records)} records but {[len(v) for v in judges.values()]} predictions")
        first = reference or next(iter(judges))
        judges.update({name: unit_to_rating(np.asarray(BASELINES[name](records), dtype=float)) for name in baselines})
        out[set_name] = {}
        for slice_name, mask in ood_slices(records).items():
            out[set_name][slice_name] = judge_agreement(
                {name: pred[mask] for name, pred in judges.items()}, human[mask], reference=first, seed=seed,
                bootstrap=bootstrap if slice_name == "all" else slice_bootstrap)
    return out


def ood_evaluation(model, tokenizer, *, data_dir=None, fold: int = 0, seed: int = 0, batch_size: int = 16,
                   in_domain: tuple[list[dict], list[dict]] | None = None, baselines=OOD_BASELINES,
                   bootstrap: int = 1000, show_progress: bool = False, keep_predictions: bool = False,
                   max_items: int | None = None) -> dict:
    """Score the out-of-domain sets (``dataset_builder.configs.ood_sets``) with ``model.predict`` and compare with
    the baselines; ``in_domain`` = (test records, their ``predict`` outputs) already scored is put first, as
    ``in_domain_test``. ORCA appears as ``orca`` (the predicted mean), for heads with a distribution as
    ``orca_median`` (:func:`distribution_median`) and, where the model's config switches clamping on, as
    ``orca_clamped`` (the clamped ``score`` users get, on 1-5). The paired differences (``diff_ci``) are taken
    against the score users get (``reference``: ``orca_clamped`` where the config clamps, else ``orca``).
    ``keep_predictions`` adds ``predictions``: per out-of-domain set, one {id, ratings, mean, variance, probs,
    score} per record, in order. ``max_items``: score a seeded sample of at most this many items of each
    out-of-domain set (kept in order; the sizes are in the result's ``n``)."""
    from dataset_builder.configs import ood_sets
    from modeling_orca import unit_to_rating

    config = model.config

    def statistics(preds: list[dict]) -> dict:
        out = {"orca": [p["mean"] for p in preds]}
        if preds and preds[0].get("probs") is not None:
            out["orca_median"] = list(distribution_median([p["probs"] for p in preds]))
        if config.clamp:
            scores = np.array([p["score"] for p in preds])
            out["orca_clamped"] = list(unit_to_rating(scores, config.rating_min, config.rating_max))
        return out

    sets, kept = {}, {}
    if in_domain is not None:
        sets["in_domain_test"] = (in_domain[0], statistics(in_domain[1]))
    for name, records in ood_sets(data_dir=data_dir, fold=fold, seed=seed).items():
        if max_items and len(records) > max_items:
            keep = set(np.random.default_rng([seed, len(records)]).choice(len(records), max_items, replace=False).tolist())
            records = [r for i, r in enumerate(records) if i in keep]
        preds = model.predict(records, tokenizer, batch_size=batch_size, show_progress=show_progress)
        sets[name] = (records, statistics(preds))
        kept[name] = [{"id": r["id"], "ratings": r["ratings"], "mean": p["mean"], "variance": p["variance"],
                       "probs": p["probs"], "score": p["score"]} for r, p in zip(records, preds)]
    reference = "orca_clamped" if config.clamp else "orca"
    return {"sets": judge_sets(sets, baselines=baselines, bootstrap=bootstrap, seed=seed, reference=reference),
            "reference": reference, "baselines": list(baselines), "bootstrap": bootstrap,
            "slice_bootstrap": SLICE_BOOTSTRAP, "fold": fold, "seed": seed, "max_items": max_items,
            **({"predictions": kept} if keep_predictions else {})}


def _with_ci(m: dict, key: str) -> str:
    value, ci = m.get(key), (m.get("ci") or {}).get(key)
    if value is None:
        return "-"
    return f"{value:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.3f}"


def _difference(m: dict, reference: dict, key: str) -> str:
    ci = m["diff_ci"].get(key)
    if m.get(key) is None or reference.get(key) is None or not ci:
        return "-"
    return f"{m[key] - reference[key]:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def ood_markdown(ood: dict, *, slices: bool = True) -> str:
    """Markdown tables of :func:`ood_evaluation`: one row per set and judge (whole sets), then the slices."""
    keys = ("spearman", "kendall", "mae_mean", "roc_auc", "calibration_error")
    head = ["set", "n", "judge", "Spearman", "Kendall", "MAE (1-5)", "ROC-AUC", "calib. error"]
    rows = []
    for set_name, per_slice in ood["sets"].items():
        judges = per_slice["all"]
        for judge, m in judges.items():
            rows.append([set_name, m["n"], f"**{judge}**" if judge == "orca" else judge] + [_with_ci(m, k) for k in keys])
    parts = [markdown_table(head, rows)]
    reference = ood.get("reference", "orca")
    drows = []  # paired: the same bootstrap draws for both judges, so an interval off 0 is a real difference
    for set_name, per_slice in ood["sets"].items():
        judges = per_slice["all"]
        for judge, m in judges.items():
            if m.get("diff_ci"):
                drows.append([set_name, f"{judge} - {reference}"]
                             + [_difference(m, judges[reference], k) for k in ("spearman", "roc_auc", "mae_mean")])
    if drows:
        parts.append(markdown_table(["set", "paired difference", "Spearman [95 %]", "ROC-AUC [95 %]", "MAE [95 %]"], drows))
    if slices:
        srows = []
        for set_name, per_slice in ood["sets"].items():
            for slice_name, judges in per_slice.items():
                if slice_name == "all":
                    continue
                for judge, m in judges.items():
                    srows.append([set_name, slice_name, m["n"], judge] + [_with_ci(m, k) for k in ("spearman", "mae_mean", "roc_auc")])
        parts.append(markdown_table(["set", "slice", "n", "judge", "Spearman", "MAE (1-5)", "ROC-AUC"], srows))
    return "\n\n".join(parts)


def ood_for_runs(runs: list[Run], batch_size: int, out: Path, bootstrap: int, device=None, dtype=None) -> dict:
    """orca-eval --ood: each run's final/ model on the out-of-domain sets of its own fold."""
    from eval_suite.loading import load_model

    results = {}
    for run in runs:
        if not (run.path / "final").is_dir():
            raise ReportError(f"{run.path}: no final/ model folder to score the out-of-domain sets with")
        d = run.config.get("data", {})
        in_domain = None
        preds_file = run.path / "test_predictions.jsonl"
        if preds_file.exists():
            test = [p for p in read_jsonl(preds_file) if p.get("ratings")]
            in_domain = (test_records_of(run, test), test)
        model, tokenizer = load_model(str(run.path / "final"), device=device, dtype=dtype)
        results[run.name] = ood_evaluation(model, tokenizer, data_dir=d.get("data_dir"), fold=d.get("fold") or 0,
                                           seed=d.get("seed") or 0, batch_size=batch_size, in_domain=in_domain,
                                           bootstrap=bootstrap)
        del model
        make_calibration_plot(results[run.name], out / f"calibration_{slug(run.name)}.png", run.name)
    return results


def test_records_of(run: Run, preds: list[dict]) -> list[dict]:
    """The run's test records (for the baselines and slices), in the order of its test_predictions.jsonl."""
    stages = [(n, s) for n, s in run.config["stages"].items() if n not in run.config.get("skip_stages", [])]
    stage = stages[-1][1]
    if stage.get("files", {}).get("test"):
        from dataset_builder.readers import read_records

        by_id = {r["id"]: r for r in read_records(stage["files"]["test"]).records}
    else:
        from dataset_builder import load_config

        d = run.config.get("data", {})
        split = load_config(stage["dataset"], scenario=d.get("scenario", "A"), fold=d.get("fold") or 0,
                            data_dir=d.get("data_dir"), seed=d.get("seed") or 0)["test"]
        by_id = {r["id"]: r for r in split.to_list()}
    missing = [p["id"] for p in preds if p["id"] not in by_id]
    if missing:
        raise ReportError(f"{run.path}: {len(missing)} test predictions have no test record, e.g. {missing[:3]}")
    return [by_id[p["id"]] for p in preds]


def make_calibration_plot(ood: dict, path: Path, title: str) -> None:
    """Reliability diagram of the predicted mean: per set, mean human rating against mean prediction per bin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([1, 5], [1, 5], "k--", lw=1, label="calibrated")
    for set_name, per_slice in ood["sets"].items():
        bins = per_slice["all"]["orca"]["calibration"]
        ax.plot([b["pred"] for b in bins], [b["human"] for b in bins], "o-", label=set_name)
    ax.set(xlabel="predicted mean rating (bin mean)", ylabel="human mean rating", xlim=(0.8, 5.2), ylim=(0.8, 5.2),
           title=f"{title}: calibration of the mean")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.14), frameon=False)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ main


def build_report(args) -> dict:
    runs = [load_run(Path(p)) for p in args.runs]
    names = [r.name for r in runs]
    for r in runs:
        if names.count(r.name) > 1:  # two folders with one name: use the path given
            r.name = str(r.path)
    notes: list[str] = []
    results = score_results(runs, [Path(p) for p in args.test_file], args.baselines, args.batch_size, notes,
                            getattr(args, "device", "auto"), getattr(args, "dtype", "auto"))
    test_sets = list(dict.fromkeys(r.test_set for r in results))
    by_system = systems(results, runs)
    answerer, pooled = answerer_table(by_system)
    tables = [
        heads_table(by_system, test_sets),
        folds_table(by_system),
        answerer,
        ablation_table(results, runs, INPUT_KEY, "Input ablations",
                       "Systems that differ only in `model.orca.template_fields` (the fields the model reads)."),
        ablation_table(results, runs, CURRICULUM_KEY, "Curriculum ablations",
                       "Systems that differ only in the training stages they run (`skip_stages`; full = every stage)."),
        baselines_table(by_system, results, test_sets),
        per_run_table(results),
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(by_system, pooled, test_sets, out)

    run_rows = [[r.name, str(r.path), r.config["model"].get("score_type"), r.fold, curriculum(r.config)] for r in runs]
    md = ["# ORCA evaluation report", "", markdown_table(["run", "path", "head", "fold", "curriculum"], run_rows), ""]
    md += [t.markdown() for t in tables]
    ood = ood_for_runs(runs, args.batch_size, out, args.bootstrap, args.device, args.dtype) if getattr(args, "ood", False) else {}
    for name, result in ood.items():
        plots.append(f"calibration_{slug(name)}.png")
        md += [f"## Out-of-domain sets: {name}", "",
               f"The in-domain test and sets no training stage read, every judge on the same items; [low, high] = "
               f"95 % bootstrap interval ({result['bootstrap']} resamples, {result['slice_bootstrap']} for slices); "
               "ROC-AUC: correct = human mean >= 4; calib. error: calibration error of the mean (1-5).", "",
               ood_markdown(result), ""]
    md += ["## Plots", ""] + [f"![{p}]({p})" for p in plots]
    if notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    write_text_atomic(out / "report.md", "\n".join(md) + "\n")
    report = {
        "runs": [{"name": r.name, "path": str(r.path), "fold": r.fold, "curriculum": curriculum(r.config),
                  "head": r.config["model"].get("score_type"), "varying_settings": {k: r.settings.get(k) for k in varying_keys(runs)}}
                 for r in runs],
        "test_sets": test_sets,
        "tables": {t.title: t.data for t in tables},
        "plots": plots,
        "notes": notes,
        "ood": ood,
    }
    write_text_atomic(out / "report.json", json.dumps(report, indent=1, default=str) + "\n")
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orca-eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, help="train.py run folders")
    p.add_argument("--out", required=True, help="folder for report.md, report.json and the PNG plots")
    p.add_argument("--test-file", nargs="*", default=[], help="labelled JSONL test sets scored with each run's final/ model")
    p.add_argument("--baselines", nargs="*", default=None,
                   help="baselines beside ORCA (default: those in each run's metrics.json, or "
                        f"{' '.join(DEFAULT_BASELINES)} with --test-file)")
    add_model_arguments(p, model=False)  # --device, --dtype, --batch-size, --quiet as in orca-score
    p.add_argument("--ood", action="store_true",
                   help="also score each run's final/ model on the out-of-domain sets (EVOUNA-NQ held-out answerers, "
                        "NQ-open graded predictions, NQ-open SAS pairs) beside the in-domain test, with baselines")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the --ood intervals")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    set_quiet(args.quiet)
    if args.baselines:
        from eval_suite.baselines import BASELINES

        unknown = sorted(set(args.baselines) - set(BASELINES))
        if unknown:
            print(f"error: unknown baselines {unknown}; known: {', '.join(BASELINES)}", file=sys.stderr)
            raise SystemExit(2)
    try:
        report = build_report(args)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"wrote {Path(args.out) / 'report.md'} ({len(report['runs'])} runs, {len(report['plots'])} plots)")
    return 0


if __name__ == "__main__":
    main()
