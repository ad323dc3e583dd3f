"""orca-eval's runs: train.py run folders read, grouped into systems by what differs in their run_config.yaml,
and scored on their test sets (one Result per run and test set)."""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from configuration_orca import TEMPLATE_FIELDS
from eval_suite.metrics import baseline_metrics, prediction_metrics
from orca_io.jsonl import read_jsonl
from orca_io.tables import flatten

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
    parts = [f"{k.rsplit('.', 1)[-1]}={plain_setting(settings.get(k))}" for k in keys]
    return ", ".join(parts) or "orca"


def plain_setting(value: str | None) -> str:
    """A setting as stored in Run.settings (JSON) as a table shows it: a list joined by +."""
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
        from orca_io.jsonl import read_records

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


def score_results(runs: list[Run], test_files: list[Path], baseline_names, max_batch_tokens: int | None, notes: list[str],
                  device: str = "auto", dtype: str = "auto") -> list[Result]:
    if not test_files:
        return [own_test(run, baseline_names, notes) for run in runs]
    from eval_suite.models.loading import load_model
    from orca_io.jsonl import read_records

    tests = {path: read_records(path).records for path in test_files}
    names = list(baseline_names) if baseline_names is not None else list(DEFAULT_BASELINES)
    base = {path: baseline_metrics(records, names) for path, records in tests.items()}
    results = []
    for run in runs:
        if not (run.path / "final").is_dir():
            raise ReportError(f"{run.path}: no final/ model folder to score --test-file with")
        model, tokenizer = load_model(str(run.path / "final"), device=device, dtype=dtype)
        for path, records in tests.items():
            preds = model.predict(records, tokenizer, max_batch_tokens=max_batch_tokens)
            results.append(make_result(run, path.stem, str(path.resolve()), records, preds, base[path]))
        del model
    return results


def test_records_of(run: Run, preds: list[dict]) -> list[dict]:
    """The run's test records (for the baselines and slices), in the order of its test_predictions.jsonl."""
    stages = [(n, s) for n, s in run.config["stages"].items() if n not in run.config.get("skip_stages", [])]
    stage = stages[-1][1]
    if stage.get("files", {}).get("test"):
        from orca_io.jsonl import read_records

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
