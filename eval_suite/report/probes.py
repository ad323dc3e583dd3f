"""The probe suite: hand-written cases where a judge must get meaning right (opposites, paraphrases, near misses).

`benchmarks/probes/*.jsonl` holds the cases in the project's record schema (id, question, reference, rationale,
candidate, ...; `rationale` is a short text standing in for the audio, empty for trivia) with three labels
outside the schema, which the reader keeps in `metadata`: `type` (the question type: sound_source, instrument,
count, emotion, speaker_gender, ..., trivia), `kind` (what the candidate does: paraphrase, synonym, hypernym,
unit, format, sentence, contrast, surname, exact are right; opposite, same_kind, off_by_one, contradiction,
negation, hedge, wrong_unit are wrong) and `expected` (right | wrong). A probe passes when the predicted mean is
on its side of the scale's midpoint 3: above for right, below for wrong (exactly 3 fails both).

`probe_accuracy(model, tokenizer)` is what train.py's final evaluation and benchmarks/bench_probes.py report.
"""

from __future__ import annotations

import codecs
import json
from collections import defaultdict
from pathlib import Path

# the suite lives beside the benchmarks in a checkout of the repository
PROBES_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "probes"
EXPECTED = ("right", "wrong")
LABELS = ("type", "kind", "expected")


def probe_files(paths=None) -> list[Path]:
    """The JSONL files of `paths` (files, or folders whose *.jsonl are taken in name order); default the suite."""
    files: list[Path] = []
    for path in map(Path, paths or [PROBES_DIR]):
        if path.is_dir():
            found = sorted(path.glob("*.jsonl"))
            if not found:
                raise FileNotFoundError(f"{path}: no *.jsonl probe file")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such probe file or folder")
    return files


def labels(record: dict) -> dict:
    """The probe labels of a record: top-level keys, or (after the schema's reader) its metadata."""
    meta = json.loads(record.get("metadata") or "{}")
    return {key: record.get(key, meta.get(key)) for key in LABELS}


def load_probes(paths=None) -> list[dict]:
    """Every probe of `paths` (default: the suite), in file and line order, as schema records. Each file is read
    by `orca_io.jsonl.read_records` (schema, UTF-8, duplicate ids); a missing or bad label raises
    `RecordError` naming file, line and field, and so does an id that two files share."""
    from orca_io.jsonl import read_records
    from orca_io.schema import RecordError

    records: list[dict] = []
    first_seen: dict[str, tuple[Path, int]] = {}
    for path in probe_files(paths):
        # with on_error="raise" every non-blank line is one record (or an error), so these are the records' lines
        with open(path, "rb") as fh:
            lines = [n for n, raw in enumerate(fh, start=1) if raw.removeprefix(codecs.BOM_UTF8 if n == 1 else b"").strip()]
        for line, record in zip(lines, read_records(path).records, strict=True):
            found = labels(record)
            for key in ("type", "kind"):
                if not isinstance(found[key], str) or not found[key].strip():
                    raise RecordError(key, "missing probe label (a non-empty string)", path=path, line=line)
            if found["expected"] not in EXPECTED:
                raise RecordError("expected", f"{found['expected']!r}: must be one of {', '.join(EXPECTED)}",
                                  path=path, line=line)
            if record["id"] in first_seen:
                other, other_line = first_seen[record["id"]]
                raise RecordError("id", f"duplicate id {record['id']!r} (also {other}:{other_line})", path=path, line=line)
            first_seen[record["id"]] = (path, line)
            records.append(record)
    return records


def probe_passes(mean: float, expected: str) -> bool:
    from orca_io.schema import RATING_MAX, RATING_MIN

    midpoint = (RATING_MIN + RATING_MAX) / 2
    return mean > midpoint if expected == "right" else mean < midpoint


def score_probes(model, tokenizer, records: list[dict], max_batch_tokens: int | None = None, *,
                 batch_size: int | None = None) -> list[dict]:
    """One row per probe, in input order: id, labels, question, reference, candidate, predicted mean, passed.
    `max_batch_tokens` goes to `predict` (None: its default); `batch_size` is its deprecated one (x 256 tokens)."""
    budget = {"max_batch_tokens": max_batch_tokens} if batch_size is None else {"batch_size": batch_size}
    predictions = model.predict(records, tokenizer, **budget)
    rows = []
    for record, prediction in zip(records, predictions, strict=True):
        found = labels(record)
        rows.append({"id": record["id"], **found, "question": record["question"], "reference": record["reference"],
                     "candidate": record["candidate"], "mean": prediction["mean"],
                     "passed": probe_passes(prediction["mean"], found["expected"])})
    return rows


def _tally(rows: list[dict]) -> dict:
    passed = sum(row["passed"] for row in rows)
    return {"n": len(rows), "passed": passed, "accuracy": passed / len(rows) if rows else None}


def summarise(rows: list[dict]) -> dict:
    """Accuracy overall, per type (with its right and wrong cases apart), per kind and per expected label; the
    failing probes."""
    groups: dict[str, dict[str, list]] = {"type": defaultdict(list), "kind": defaultdict(list),
                                          "expected": defaultdict(list), "type_expected": defaultdict(list)}
    for row in rows:
        for key in ("type", "kind", "expected"):
            groups[key][row[key]].append(row)
        groups["type_expected"][(row["type"], row["expected"])].append(row)
    by_type = {}
    for name in sorted(groups["type"]):
        by_type[name] = _tally(groups["type"][name])
        for expected in EXPECTED:
            by_type[name][expected] = _tally(groups["type_expected"].get((name, expected), []))
    return {**_tally(rows), "by_type": by_type,
            "by_kind": {name: _tally(groups["kind"][name]) for name in sorted(groups["kind"])},
            "by_expected": {name: _tally(groups["expected"][name]) for name in EXPECTED},
            "failures": [row for row in rows if not row["passed"]]}


def probe_accuracy(model, tokenizer, records: list[dict] | None = None, max_batch_tokens: int | None = None, *,
                   batch_size: int | None = None) -> dict:
    """The probe suite's summary (`summarise`) for a loaded ORCA model; `records` default: `load_probes()`;
    `max_batch_tokens` and the deprecated `batch_size` as in `score_probes`."""
    records = load_probes() if records is None else records
    return summarise(score_probes(model, tokenizer, records, max_batch_tokens, batch_size=batch_size))
