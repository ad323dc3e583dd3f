"""Scoring a JSONL file with an ORCA model (what orca-score does, without its argument parsing and printing): the
input read and validated line by line, the clamping threshold chosen, records scored question by question into
partial files (eval_suite.scoring.sharding), the output merged in input order and the summary built."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

from eval_suite.models.loading import UsageError, load_model, reference_fields, resolve_revision
from eval_suite.scoring import sharding
from orca_io.files import sha256_of
from orca_io.jsonl import JsonLines
from orca_io.schema import RecordError, unicode_problem, validate_record
from orca_io.version import package_version

SCORE_FIELDS = ("orca_mean", "orca_variance", "orca_probs", "orca_score")


@dataclass(kw_only=True)
class ScoreOptions:
    """What `score_file` does: orca-score's options (`--help` says each in full), as the CLI builds them and a
    Python caller can. Fields in the order of the CLI's flags, the order the summary lists them in."""

    model: str  # an ORCA model folder or Hub id
    revision: str | None = None  # Hub branch, tag or commit (ignored for a folder)
    device: str = "auto"  # "auto": the GPU when there is one
    dtype: str = "auto"  # auto, float32, bfloat16, float16
    max_batch_tokens: int | None = None  # tokens per forward pass, padding included (None: the model's, 1,024 on the CPU, 4,096 elsewhere)
    quiet: bool = False  # no progress bar (the CLI also silences the libraries' logging)
    input: Path  # JSONL records
    output: Path  # JSONL, one line per non-blank input line
    output_format: str = "orca"  # or "reference" (the reference release's field names)
    clamp: str = "config"  # config, auto, off or a variance threshold on the 1-5 scale
    tune_clamp_on: str | Path | None = None  # a labelled dev file to tune the clamp threshold on
    summary: Path | None = None  # checked like the output; the CLI writes the summary there
    on_error: str = "raise"  # or "skip": write a bad line with orca_error set
    resume: bool = False  # continue an interrupted run from its partial files
    chunk_size: int = 256  # records scored and appended to the partial file at a time
    no_progress: bool = False

    def __post_init__(self):
        for name in ("input", "output", "summary"):  # a Python caller may give strings
            if isinstance(getattr(self, name), str):
                setattr(self, name, Path(getattr(self, name)))

    @classmethod
    def from_namespace(cls, args) -> ScoreOptions:
        """From parsed arguments (orca-score's `build_parser`): the fields of this class, nothing else."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


# ------------------------------------------------------------------------------------------------ paths


def _input_problem(path: Path) -> str | None:
    try:
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        return "no such file"
    except IsADirectoryError:
        return "is a folder, not a file"
    except OSError as err:  # permissions, a symbolic link loop
        return f"cannot be read ({err.strerror or err})"


def _same_file(a: Path, b: Path) -> bool:
    """`a` and `b` name one file: the same path once resolved (`./o.jsonl`, a symlink), or the same inode (a hard
    link). os.path.realpath, not Path.resolve: that raises on a symbolic link loop."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _output_problem(path: Path) -> str | None:
    if path.is_dir():
        return "is a folder; name a file"
    folder = path.parent
    while not os.path.lexists(folder):  # the missing folders are created when the run starts
        folder = folder.parent
    if not folder.is_dir():  # a file, a dangling link or a link loop where a folder must be
        return f"{folder} is not a folder"
    try:  # really write: a read-only file system refuses root too, which os.access would not tell
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as err:
        return f"cannot write in {folder} ({err.strerror or err})"


def check_paths(inputs: dict[str, Path | None], outputs: dict[str, Path | None]) -> None:
    """Refuse, before any model is loaded, paths that cannot work: an input that is missing, a folder or
    unreadable; an output that is a folder, in a folder that cannot be written, or that is one of the inputs
    (scoring it would destroy it) or another output. Keys are the option names the messages use."""
    for flag, path in inputs.items():
        if path is not None and (problem := _input_problem(Path(path))):
            raise UsageError(f"{flag} {path}: {problem}")
    given = [(flag, Path(path)) for flag, path in outputs.items() if path is not None]
    for i, (flag, path) in enumerate(given):
        for other, source in [*((f, Path(p)) for f, p in inputs.items() if p is not None), *given[:i]]:
            if _same_file(path, source):
                raise UsageError(f"{flag} {path}: is the same file as {other} {source}; choose another {flag.split()[0]}")
        if problem := _output_problem(path):
            raise UsageError(f"{flag} {path}: {problem}")


# ------------------------------------------------------------------------------------------------ input


@dataclass
class Entry:
    """One non-blank input line: the parsed object (kept as is for the output) and the validated record."""

    line: int
    raw: str  # the line's text, kept only for lines that failed validation (memory: the parsed object is enough)
    obj: Any = None
    record: dict | None = None
    error: str | None = None

    @property
    def key(self) -> tuple:
        # what identifies this entry's output line; lines that failed validation may have no usable id
        return ("id", self.record["id"]) if self.record is not None else ("line", self.line)


def read_entries(path: Path, on_error: str) -> tuple[list[Entry], int]:
    """All non-blank lines of a JSONL file, validated with the project schema; returns (entries, blank lines).

    Not `read_records`: that reader drops bad lines (counting them), while the output needs every line in place.
    Both read through the one JSONL reader (`JsonLines`), and the checks are the same (`validate_record`,
    duplicate ids) and so are the `file:line: field` messages. Every entry stays in memory (the output keeps every
    line in input order).
    """
    entries, seen = [], {}
    lines = JsonLines(path, on_error="keep" if on_error == "skip" else "raise")
    hint = "(use --on-error skip to write such lines with orca_error set)"
    try:
        for item in lines:
            entry = Entry(item.line, "", item.value)
            try:
                if item.error is not None:
                    raise item.error
                record = validate_record(item.value, path=path, line=item.line)
                if record["id"] in seen:
                    raise RecordError("id", f"duplicate id {record['id']!r} (first on line {seen[record['id']]})", path=path, line=item.line)
                seen[record["id"]] = item.line
                entry.record = record
            except RecordError as e:
                if on_error == "raise":
                    raise UsageError(f"{e} {hint}") from None
                entry.error, entry.raw = str(e), item.text
            entries.append(entry)
    except RecordError as e:  # a line that is not UTF-8 or not JSON, under --on-error raise
        raise UsageError(f"{e} {hint}") from None
    if not entries:
        raise UsageError(f"{path}: no record (empty file or only blank lines)")
    return entries, lines.blank_lines


def output_line(entry: Entry, pred: dict | None) -> dict:
    if entry.record is None:
        # an object that cannot be written as strict JSON in UTF-8 (a lone surrogate, NaN) is kept as its line's
        # text, like non-JSON
        usable = isinstance(entry.obj, dict) and _writable(entry.obj)
        base = dict(entry.obj) if usable else {"orca_input": entry.raw}
        return {**base, **dict.fromkeys(SCORE_FIELDS), "orca_error": entry.error, "orca_line": entry.line}
    return {
        **entry.obj,
        "orca_mean": pred["mean"],
        "orca_variance": pred["variance"],
        "orca_probs": pred["probs"],
        "orca_score": pred["score"],
        "orca_error": None,
    }


def _writable(obj: dict) -> bool:
    try:
        return not unicode_problem(json.dumps(obj, ensure_ascii=False, allow_nan=False))
    except ValueError:  # NaN or Infinity
        return False


def reference_line(line: dict, config, clamped: bool) -> dict:
    """An output line of this tool in the reference release's format: the input fields, `rating_orca`,
    `variance_orca` (see `reference_fields`), `rating_orca_clamped` when a clamp threshold is in effect, and
    `n_ratings`; a line that failed validation keeps `orca_error` and `orca_line`."""
    base = {k: v for k, v in line.items() if k not in (*SCORE_FIELDS, "orca_error", "orca_line")}
    if line.get("orca_error"):
        extra = {"rating_orca_clamped": None} if clamped else {}
        return {**base, "rating_orca": None, "variance_orca": None, **extra,
                "orca_error": line["orca_error"], "orca_line": line.get("orca_line")}
    out = {**base, **reference_fields({"mean": line["orca_mean"], "variance": line["orca_variance"]}, config)}
    if clamped:
        out["rating_orca_clamped"] = line["orca_score"]
    ratings = line.get("ratings")
    out["n_ratings"] = len(ratings) if isinstance(ratings, list) else 0
    return out


# ------------------------------------------------------------------------------------------------ clamping


def tune_threshold(model, tokenizer, path: Path, max_batch_tokens: int | None) -> dict:
    """Variance threshold maximising rho + tau - MAE on a labelled dev file (variances on the 1-5 scale, the
    scale `predict` compares `clamp_threshold` with)."""
    from eval_suite.scoring.clamping import tune_on_predictions
    from heads_orca import head_for
    from orca_io.jsonl import read_records

    try:
        records = [r for r in read_records(path).records if r["ratings"]]
    except (RecordError, ValueError) as err:
        raise UsageError(f"--tune-clamp-on: {err}") from None
    if len(records) < 2:
        raise UsageError(f"--tune-clamp-on {path}: needs at least 2 records with ratings, found {len(records)}")
    if not head_for(model.config).has_variance:
        raise UsageError(f"--tune-clamp-on: a {model.config.score_type} head predicts no variance, so there is nothing to clamp on")
    preds = model.predict(records, tokenizer, max_batch_tokens=max_batch_tokens)  # unclamped: config.clamp was switched off
    try:
        tuned = tune_on_predictions(preds, [sum(r["ratings"]) / len(r["ratings"]) for r in records],
                                    margin=model.config.clamp_margin)
    except ValueError as err:  # e.g. every dev item has the same human mean: no correlation to maximise
        raise UsageError(f"--tune-clamp-on {path}: {err}") from None
    return {
        "threshold": tuned["threshold"],  # None: clamping does not help on dev
        "dev_file": str(path), "dev_items": len(records),
        "dev_clamped": _finite(tuned["clamped"]), "dev_unclamped": _finite(tuned["unclamped"]),
    }


def _finite(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in row.items()}


def resolve_clamp(options: ScoreOptions, model, tokenizer, config_clamp: bool) -> tuple[float | None, dict, list[str]]:
    """The variance threshold to clamp with (None: no clamping), its description for the summary and warnings
    to print; `config_clamp` is the checkpoint's own `clamp` setting."""
    from heads_orca import head_for

    config = model.config
    info: dict = {"margin": config.clamp_margin}
    if options.tune_clamp_on:
        info.update(mode="tuned", **tune_threshold(model, tokenizer, Path(options.tune_clamp_on), options.max_batch_tokens))
        return info["threshold"], info, []
    mode = options.clamp
    if mode == "config":  # default: whatever the checkpoint was saved with
        mode = "auto" if config_clamp else "off"
    if mode == "off":
        threshold = None
    elif mode == "auto":
        if config.clamp_variance_threshold is None:
            raise UsageError(f"--clamp auto: {options.model} has no clamp_variance_threshold in its config; "
                             "give a number or use --tune-clamp-on dev.jsonl")
        threshold = float(config.clamp_variance_threshold)
    else:
        try:
            threshold = float(mode)
        except ValueError:
            raise UsageError(f"--clamp must be auto, off or a number, got {mode!r}") from None
    warnings = []
    if threshold is not None and not head_for(config).has_variance:
        warnings.append(f"warning: a {config.score_type} head predicts no variance: clamping has no effect")
    info.update(mode=mode, threshold=threshold)
    return threshold, info, warnings


# ------------------------------------------------------------------------------------------------ scoring


def score_entries(entries: list[Entry], path: Path, start: int, model, tokenizer, options: ScoreOptions, threshold,
                  show_progress: bool) -> None:
    from tqdm.auto import tqdm

    bar = tqdm(total=len(entries), initial=start, desc="orca-score", unit="rec", disable=not show_progress)
    with open(path, "a", encoding="utf-8") as fh:
        for begin in range(start, len(entries), options.chunk_size):
            chunk = entries[begin : begin + options.chunk_size]
            valid = [e.record for e in chunk if e.record is not None]
            preds = iter(model.predict(valid, tokenizer, max_batch_tokens=options.max_batch_tokens, clamp_threshold=threshold) if valid else [])
            sharding.write_chunk(fh, [output_line(e, next(preds) if e.record is not None else None) for e in chunk])
            bar.update(len(chunk))
    bar.close()


def produced_by(options: ScoreOptions, revision_id: str, threshold, clamp_margin: float, count: int) -> dict:
    """What a partial file's lines depend on; `--resume` refuses a partial file produced otherwise. Not the device
    or token budget per batch, which may change between a crash and its resume (out of memory) without changing a score."""
    return {"model": str(options.model), "revision": revision_id, "dtype": options.dtype, "clamp_threshold": threshold,
            "clamp_margin": clamp_margin, "output_format": options.output_format,
            "input_sha256": sha256_of(options.input), "processes": count}


def summarise(entries: list[Entry], lines: list[dict], config, threshold) -> tuple[dict, dict]:
    """(counts and system-level scores, metrics with and without clamping on the labelled lines)."""
    from modeling_orca import rating_to_unit, unit_to_rating

    scored = [(e.record, line) for e, line in zip(entries, lines) if e.record is not None]
    scale = (config.rating_min, config.rating_max)
    system = {
        "mean": _avg([line["orca_mean"] for _, line in scored]),
        "score": _avg([line["orca_score"] for _, line in scored]),
        "score_unclamped": _avg([rating_to_unit(line["orca_mean"], *scale) for _, line in scored]),
    }
    rated = [(r, line) for r, line in scored if r["ratings"]]
    metrics: dict = {}
    if rated:
        from eval_suite.metrics import prediction_metrics

        ratings = [r["ratings"] for r, _ in rated]
        preds = [{"mean": line["orca_mean"], "variance": line["orca_variance"], "probs": line["orca_probs"]} for _, line in rated]
        metrics["unclamped"] = prediction_metrics(preds, ratings)
        if threshold is not None:
            clamped = [unit_to_rating(line["orca_score"], *scale) for _, line in rated]
            metrics["clamped"] = prediction_metrics(preds, ratings, means=clamped)
    system["human_mean"] = _avg([sum(r["ratings"]) / len(r["ratings"]) for r, _ in rated]) if rated else None
    return system, metrics


def over_max_chars(entries: list[Entry], max_chars: int) -> list[int]:
    """Line numbers of the valid records with a text over `max_chars` characters (the paper's 1,000-character rule,
    `dataset_builder.filters.too_long`). Training drops such records; orca-score scores them (the model cuts its
    input to `max_length` tokens, candidate last) and warns."""
    from dataset_builder.filters import too_long

    return [e.line for e in entries if e.record is not None and too_long(e.record, max_chars)]


def _avg(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def process_state():
    """This process's place in an `accelerate launch` (one process when not launched)."""
    import torch
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    # cpu=True on a machine without a GPU: PartialState() would ignore a torchrun launch there (every process
    # would think it is alone and score everything); with it the processes form a gloo group. The long barrier
    # timeout: after --resume one process may finish its shard hours before another (a crashed process is
    # stopped by the launcher, not by this timeout)
    cpu = parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available()
    return PartialState(cpu=cpu, timeout=timedelta(hours=48))


def _print_warning(text: str) -> None:
    print(text, file=sys.stderr)


def score_file(options: ScoreOptions, warn=_print_warning) -> tuple[dict, list[str]] | None:
    """Score `options.input` into `options.output` (orca-score without its argument parsing and printing; the
    summary is returned, not written); returns the summary and the notes to print after the results, on the main
    process (None on the others). `warn(text)` is called with each warning about the options, as soon as it is
    known (default: printed to stderr). Raises UsageError for input and options that cannot work."""
    started = time.time()
    check_paths({"--input": options.input, "--tune-clamp-on": options.tune_clamp_on},
                {"--output": options.output, "--summary": options.summary,
                 "--output (its partial file)": sharding.shard_path(Path(options.output), 0, 1)})
    if options.tune_clamp_on and options.clamp != "config":
        raise UsageError("--tune-clamp-on chooses the clamp threshold: do not combine it with --clamp")
    if (options.max_batch_tokens is not None and options.max_batch_tokens < 1) or options.chunk_size < 1:
        raise UsageError("--max-batch-tokens and --chunk-size must be >= 1")
    state = process_state()
    rank, count = state.process_index, state.num_processes
    entries, blank = read_entries(options.input, options.on_error)

    partial = sharding.shard_path(options.output, rank, count)
    if partial.exists() and not options.resume:
        raise UsageError(f"{partial} exists (an interrupted run): pass --resume to continue it, or delete it")

    load_revision, revision_id = resolve_revision(options.model, options.revision)
    # --device auto: the process's own device (cuda:N under accelerate launch, else the CPU)
    device = state.device if options.device == "auto" else options.device
    model, tokenizer = load_model(options.model, revision=load_revision, device=device, dtype=options.dtype)
    model_config = model.config.to_dict()  # as saved, before the clamp switch below
    config_clamp = model.config.clamp
    # the threshold is passed to predict explicitly; with config.clamp left on, predict would clamp under --clamp
    # off, and the dev scores of --tune-clamp-on must be unclamped
    model.config.clamp = False
    threshold, clamp_info, clamp_warnings = resolve_clamp(options, model, tokenizer, config_clamp)
    for text in clamp_warnings:
        warn(text)
    plan = sharding.shard_plan([sharding.group_key(e, model.config) for e in entries], count)
    mine = [entries[i] for i in plan[rank]]

    settings = produced_by(options, revision_id, threshold, model.config.clamp_margin, count)
    start = 0
    if partial.exists():
        sharding.check_produced_by(partial, settings)
        start = sharding.completed_prefix(partial, mine)
    else:
        sharding.start_partial(partial, settings)
    show = state.is_main_process and not (options.no_progress or options.quiet)
    score_entries(mine, partial, start, model, tokenizer, options, threshold, show_progress=show)

    state.wait_for_everyone()
    if not state.is_main_process:
        return None
    convert = None
    if options.output_format == "reference":
        convert = functools.partial(reference_line, config=model.config, clamped=threshold is not None)
    lines = sharding.finalise(options.output, entries, plan, convert)
    system, metrics = summarise(entries, lines, model.config, threshold)
    errors = [{"line": e.line, "error": e.error} for e in entries if e.error]
    long_lines = over_max_chars(entries, model.config.max_chars)
    summary = {
        "package": {"name": "orca-judge", "version": package_version()},
        "model": {"id": options.model, "revision": revision_id, "requested_revision": options.revision},
        "input": str(options.input), "output": str(options.output),
        "counts": {
            "lines": len(entries) + blank, "blank_lines": blank, "records": len(entries),
            "scored": len(entries) - len(errors), "errors": len(errors),
            "labelled": sum(1 for e in entries if e.record is not None and e.record["ratings"]),
            "resumed_from": start if count == 1 else None, "processes": count,
            "over_max_chars": len(long_lines),
        },
        "errors": errors[:1000],
        "system": system, "clamp": clamp_info, "metrics": metrics,
        "config": {"args": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
                   "model": model_config},
        "seconds": round(time.time() - started, 2),
    }
    return summary, closing_notes(errors, long_lines, model.config)


def closing_notes(errors: list[dict], long_lines: list[int], config) -> list[str]:
    """What orca-score prints after the results: lines that failed validation, texts over the 1,000-character rule."""
    notes = []
    if errors:
        notes.append(f"{len(errors)} line(s) failed validation and were written with orca_error set")
    if long_lines:
        shown = ", ".join(map(str, long_lines[:10])) + (", ..." if len(long_lines) > 10 else "")
        notes.append(f"warning: {len(long_lines)} record(s) with a text over {config.max_chars} characters (lines "
                     f"{shown}): scored, but training drops such records and the model cuts its input to "
                     f"{config.max_length} tokens")
    return notes
