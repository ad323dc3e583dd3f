"""orca-score: score a JSONL file of candidate answers with a trained ORCA model.

    orca-score --model runs/orca/final --input answers.jsonl --output scored.jsonl --summary summary.json
    orca-score --model user/orca-judge --revision v1 --input in.jsonl --output out.jsonl --clamp auto
    orca-score --model out/converted --input in.jsonl --output out.jsonl --output-format reference
    accelerate launch --num_processes 4 -m eval_suite.cli --model ... --input ... --output ...

Input: one JSON object per line.
  required  id (unique string), question, reference (a string or a list of accepted answers), candidate
  optional  rationale (text describing the audio), transcript (or the reference release's `transcription`),
            ratings (human 1-5 ratings: metrics in the summary), answerer, benchmark, question_id, ...; other keys
            are kept in the output
  example   {"id": "q1-a", "question": "Which instrument plays the melody?", "reference": ["violin", "fiddle"],
             "rationale": "A solo violin plays over soft piano chords.", "candidate": "It's a violin.", "ratings": [5, 4, 5]}

Every non-blank input line gives one output line, in input order: the input object plus `orca_mean`,
`orca_variance` (1-5 scale), `orca_probs`, `orca_score` ([0, 1], clamped when asked) and `orca_error`; with
`--output-format reference`, the reference release's `rating_orca`, `variance_orca` ([0, 1] scale) and `n_ratings`.
It prints a system-level line (n, mean rating, mean score; also without ratings) and, for labelled lines, metrics.
Scores come from the model's own `predict` (the one scoring path). Records are scored question by question (all
answers sharing the text before the candidate together, so `predict` computes that text once); the output is built
in a `.partial` file (one per process under `accelerate launch`), appended in chunks of whole records with fsync,
and put in input order at the end: `--resume` continues an interrupted run.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from dataset_builder.schema import RecordError, unicode_problem, validate_record

EXIT_INVALID = 2  # input that fails validation, or options that cannot work together (argparse uses 2 too)
SCORE_FIELDS = ("orca_mean", "orca_variance", "orca_probs", "orca_score")


class UsageError(Exception):
    """A problem with the input or the options; reported as `error: ...` with exit code 2."""


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
    The checks are the same (`validate_record`, duplicate ids, a UTF-8 byte order mark accepted) and so are the
    `file:line: field` messages. Every entry stays in memory (the output keeps every line in input order).
    """
    entries, blank, seen = [], 0, {}
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte order mark, as some editors write
            if not raw.strip():
                blank += 1
                continue
            entry = Entry(lineno, "")
            try:
                try:
                    entry.obj = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError as e:
                    raise RecordError("<line>", f"not UTF-8 (byte {e.start})", path=path, line=lineno) from None
                except json.JSONDecodeError as e:
                    raise RecordError("<line>", f"malformed JSON: {e.msg} at column {e.colno}", path=path, line=lineno) from None
                record = validate_record(entry.obj, path=path, line=lineno)
                if record["id"] in seen:
                    raise RecordError("id", f"duplicate id {record['id']!r} (first on line {seen[record['id']]})", path=path, line=lineno)
                seen[record["id"]] = lineno
                entry.record = record
            except RecordError as e:
                if on_error == "raise":
                    raise UsageError(f"{e} (use --on-error skip to write such lines with orca_error set)") from None
                entry.error = str(e)
                entry.raw = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            entries.append(entry)
    if not entries:
        raise UsageError(f"{path}: no record (empty file or only blank lines)")
    return entries, blank


def output_line(entry: Entry, pred: dict | None) -> dict:
    if entry.record is None:
        # an object that cannot be written as UTF-8 (a lone surrogate) is kept as its line's text, like non-JSON
        usable = isinstance(entry.obj, dict) and not unicode_problem(json.dumps(entry.obj, ensure_ascii=False))
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


def reference_fields(pred: dict, config) -> dict:
    """A prediction in the reference release's field names and scale: `rating_orca` = the mean rating on [0, 1]
    (unclamped), `variance_orca` = the variance on that scale (the 1-5 variance / 16; 0.0 for a Bernoulli head,
    as the release writes)."""
    from modeling_orca import rating_to_unit

    span = config.rating_max - config.rating_min
    return {
        "rating_orca": float(rating_to_unit(pred["mean"], config.rating_min, config.rating_max)),
        "variance_orca": 0.0 if pred["variance"] is None else pred["variance"] / span**2,
    }


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


def output_key(obj: dict) -> tuple:
    return ("line", obj.get("orca_line")) if obj.get("orca_error") else ("id", obj.get("id"))


# ------------------------------------------------------------------------------------------------ model


def resolve_revision(model_id: str, revision: str | None) -> tuple[str | None, str]:
    """(revision to load, what to report). A Hub id is pinned to its commit, so the model and the tokenizer come
    from one repository state and the summary names it; a local folder is identified by its path and a hash of
    its config/weight file names and sizes (it has no commit)."""
    folder = Path(model_id)
    if folder.is_dir():
        files = sorted(
            (p.name, p.stat().st_size)
            for p in folder.iterdir()
            if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin") or p.name.endswith(".index.json"))
        )
        digest = hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]
        return revision, f"{folder.resolve()}#files-sha256:{digest}"
    from huggingface_hub import ResolvedRevision
    from transformers.utils.hub import resolve_revision as hf_resolve

    resolved = hf_resolve(model_id, revision)
    if isinstance(resolved, ResolvedRevision):
        return resolved, resolved.resolved
    if resolved and re.fullmatch(r"[0-9a-f]{40}", resolved):
        return resolved, resolved
    return resolved, resolved or "unresolved (default branch)"


DTYPES = ("auto", "float32", "bfloat16", "float16")


def add_model_arguments(parser: argparse.ArgumentParser, *, model: bool = True, batch_size: int = 16) -> None:
    """The flags every command that scores with an ORCA model shares, with the same names and defaults:
    --model and --revision (unless `model=False`, e.g. orca-eval reads its models from run folders), --device,
    --dtype, --batch-size and --quiet."""
    if model:
        parser.add_argument("--model", required=True, help="ORCA model folder (e.g. runs/x/final) or Hub id")
        parser.add_argument("--revision", default=None,
                            help="Hub branch, tag or commit hash; pin a commit with trust_remote_code "
                                 "(default: the default branch; ignored for a folder)")
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda, cuda:1, mps, ... (default: %(default)s = the GPU when there is one, else the CPU)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="weights and activations (default: %(default)s = as saved); bfloat16 on a GPU halves "
                             "memory and time")
    parser.add_argument("--batch-size", type=int, default=batch_size,
                        help="token budget of one forward pass: N x 256 tokens, padding included, longest inputs "
                             "first (about N inputs of 256 tokens, more shorter ones); on the CPU a pass holds at "
                             "most the model's cpu_batch_tokens (1,024), so there N above 4 changes nothing "
                             "(default: %(default)s)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars; transformers and huggingface_hub print errors only (no warnings, "
                             "no loading bars); this tool's own warnings still print")


def set_quiet(quiet: bool) -> None:
    """Silence (or restore) the logging and progress bars of transformers and huggingface_hub, and with `quiet`
    Python warnings (the libraries' deprecation notices). Process-wide, so for command-line entry points only; this
    tool's own warnings (`warning: ...` lines) and errors still print."""
    import warnings

    import huggingface_hub.utils as hub_utils
    from transformers.utils import logging as hf_logging

    if quiet:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        hub_utils.disable_progress_bars()
        warnings.simplefilter("ignore")
    else:
        hf_logging.set_verbosity_warning()
        hf_logging.enable_progress_bar()
        hub_utils.enable_progress_bars()


def resolve_device(device: str | None) -> str:
    """`auto`/None -> cuda when available, else cpu; anything else as given."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_model(name_or_path: str, *, revision: str | None = None, device=None, dtype=None):
    """The one loader of an ORCA model and its tokenizer (orca-score, orca-eval, orca-leaderboard): a folder or a
    Hub id, in eval mode, on `device` (None: where it loads, the CPU; "auto": the GPU when there is one) in `dtype`
    (None or "auto": as saved; a name such as "bfloat16" or a torch dtype). Weights are read from safetensors files
    only: a checkpoint with only pickle-based `.bin`/`.pt` weights is refused, never unpickled. Problems the user
    can fix (no such folder, Hub id or revision, not an ORCA model) raise `UsageError`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    kwargs = {}
    if dtype not in (None, "auto"):
        kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    try:
        model = AutoModel.from_pretrained(name_or_path, trust_remote_code=True, revision=revision, use_safetensors=True, **kwargs)
    except OSError as err:  # no such folder, Hub id or revision: transformers' message says which
        raise UsageError(f"--model {name_or_path}: {err}") from None
    if not hasattr(model, "predict"):
        raise UsageError(f"{name_or_path}: {type(model).__name__} is not an ORCA model (no predict method)")
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, revision=revision, trust_remote_code=True)
    if device is not None:
        model.to(resolve_device(device))
    return model.eval(), tokenizer


def tune_threshold(model, tokenizer, path: Path, batch_size: int) -> dict:
    """Variance threshold maximising rho + tau - MAE on a labelled dev file (variances on the 1-5 scale, the
    scale `predict` compares `clamp_threshold` with)."""
    from dataset_builder.readers import read_records
    from eval_suite.clamping import tune_clamp_threshold

    records = [r for r in read_records(path).records if r["ratings"]]
    if len(records) < 2:
        raise UsageError(f"--tune-clamp-on {path}: needs at least 2 records with ratings, found {len(records)}")
    if model.config.score_type == "bernoulli":
        raise UsageError("--tune-clamp-on: a bernoulli head predicts no variance, so there is nothing to clamp on")
    preds = model.predict(records, tokenizer, batch_size=batch_size)  # unclamped: run() switched config.clamp off
    try:
        threshold, table = tune_clamp_threshold(
            [p["score"] for p in preds], [p["variance"] for p in preds],
            [sum(r["ratings"]) / len(r["ratings"]) for r in records], margin=model.config.clamp_margin,
        )
    except ValueError as err:  # e.g. every dev item has the same human mean: no correlation to maximise
        raise UsageError(f"--tune-clamp-on {path}: {err}") from None
    best = next(row for row in table if row["threshold"] == threshold)
    no_clamp = table[0]  # -inf: nothing clamped
    return {
        "threshold": None if math.isinf(threshold) else threshold,  # -inf: clamping does not help on dev
        "dev_file": str(path), "dev_items": len(records),
        "dev_clamped": _finite(best), "dev_unclamped": _finite(no_clamp),
    }


def _finite(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in row.items()}


def resolve_clamp(args, model, tokenizer, config_clamp: bool) -> tuple[float | None, dict]:
    """The variance threshold to clamp with (None: no clamping) and its description for the summary;
    `config_clamp` is the checkpoint's own `clamp` setting."""
    config = model.config
    info: dict = {"margin": config.clamp_margin}
    if args.tune_clamp_on:
        info.update(mode="tuned", **tune_threshold(model, tokenizer, Path(args.tune_clamp_on), args.batch_size))
        return info["threshold"], info
    mode = args.clamp
    if mode == "config":  # default: whatever the checkpoint was saved with
        mode = "auto" if config_clamp else "off"
    if mode == "off":
        threshold = None
    elif mode == "auto":
        if config.clamp_variance_threshold is None:
            raise UsageError(f"--clamp auto: {args.model} has no clamp_variance_threshold in its config; "
                             "give a number or use --tune-clamp-on dev.jsonl")
        threshold = float(config.clamp_variance_threshold)
    else:
        try:
            threshold = float(mode)
        except ValueError:
            raise UsageError(f"--clamp must be auto, off or a number, got {mode!r}") from None
    if threshold is not None and config.score_type == "bernoulli":
        print("warning: a bernoulli head predicts no variance: clamping has no effect", file=sys.stderr)
    info.update(mode=mode, threshold=threshold)
    return threshold, info


# ------------------------------------------------------------------------------------------------ output files


def group_key(entry: Entry, config) -> Any:
    """What a record shares with the other answers to its question: its rendered input before the candidate (the
    model file's own formatter, so the groups are what `predict` shares). A line that failed validation is alone."""
    from modeling_orca import input_variants, split_fields

    if entry.record is None:
        return ("line", entry.line)
    return split_fields(input_variants(entry.record, config)[0], config)[0]


def shard_plan(keys: list, count: int) -> list[list[int]]:
    """Per process, the indices of `keys` it scores, in scoring order. Entries with equal keys (a group) stay on one
    process and together in its order, so a chunk holds whole questions (bar its two ends) and `predict` shares
    their prefix; round robin or file order would scatter them. Groups go largest first to the least loaded
    process (loads then differ by at most the largest group); a process takes its groups in order of first
    appearance, entries in input order. Deterministic: every process computes the same plan from the same file."""
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    taken: list[list[list[int]]] = [[] for _ in range(count)]
    load = [0] * count
    for members in sorted(groups.values(), key=len, reverse=True):  # stable: ties in first-appearance order
        k = load.index(min(load))
        taken[k].append(members)
        load[k] += len(members)
    return [[i for members in sorted(chosen) for i in members] for chosen in taken]


def shard_path(output: Path, index: int, count: int) -> Path:
    if count == 1:
        return output.with_name(output.name + ".partial")
    return output.with_name(f"{output.name}.shard-{index}.jsonl")


def completed_prefix(path: Path, expected: list[Entry]) -> int:
    """How many of `expected` a partial file already holds (its lines must be exactly their first ones). A torn
    last line (killed mid-write) is cut off, so appending continues from a whole record."""
    done, good_bytes = 0, 0
    with open(path, "rb") as fh:
        lines = fh.readlines()
    for i, raw in enumerate(lines):
        try:
            if not raw.endswith(b"\n"):
                raise ValueError("no newline")
            obj = json.loads(raw)
        except ValueError:
            if i == len(lines) - 1:
                break
            raise UsageError(f"{path}:{i + 1}: unreadable line in the partial output; delete the file to start over") from None
        if i >= len(expected) or output_key(obj) != expected[i].key:
            want = expected[i].key if i < len(expected) else "end of input"
            raise UsageError(f"{path}:{i + 1}: holds {output_key(obj)}, expected {want}: the partial output is not "
                             "from this input (or from another number of processes); delete it to start over")
        done, good_bytes = i + 1, good_bytes + len(raw)
    if good_bytes < path.stat().st_size:
        os.truncate(path, good_bytes)
    return done


def write_chunk(fh, lines: list[dict]) -> None:
    """Append whole records and force them to disk, so that a crash loses at most the chunk being scored."""
    fh.write("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    fh.flush()
    os.fsync(fh.fileno())


def score_entries(entries: list[Entry], path: Path, start: int, model, tokenizer, args, threshold, show_progress: bool) -> None:
    from tqdm.auto import tqdm

    bar = tqdm(total=len(entries), initial=start, desc="orca-score", unit="rec", disable=not show_progress)
    with open(path, "a", encoding="utf-8") as fh:
        for begin in range(start, len(entries), args.chunk_size):
            chunk = entries[begin : begin + args.chunk_size]
            valid = [e.record for e in chunk if e.record is not None]
            preds = iter(model.predict(valid, tokenizer, batch_size=args.batch_size, clamp_threshold=threshold) if valid else [])
            write_chunk(fh, [output_line(e, next(preds) if e.record is not None else None) for e in chunk])
            bar.update(len(chunk))
    bar.close()


def read_lines(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def finalise(output: Path, entries: list[Entry], plan: list[list[int]], convert=None) -> list[dict]:
    """Merge the shards in input order (checking that each holds exactly its planned entries) and put the result
    in place, each line passed through `convert` when given (the shards stay in this tool's own format, which
    --resume reads); returns the lines in this tool's format."""
    count = len(plan)
    lines: list = [None] * len(entries)
    for k, indices in enumerate(plan):
        shard = read_lines(shard_path(output, k, count))
        keys, want = [output_key(o) for o in shard], [entries[i].key for i in indices]
        if keys != want:
            raise RuntimeError(f"{shard_path(output, k, count)}: holds {len(keys)} lines, expected {len(want)} "
                               "(or lines out of order): the shard is incomplete")
        for i, line in zip(indices, shard):
            lines[i] = line
    if convert is None and count == 1 and plan[0] == list(range(len(entries))):
        os.replace(shard_path(output, 0, 1), output)  # the partial file already is the output, in order
        return lines
    tmp = output.with_name(output.name + ".merge.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        write_chunk(fh, lines if convert is None else [convert(line) for line in lines])
    os.replace(tmp, output)
    for k in range(count):
        shard_path(output, k, count).unlink()
    return lines


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------ summary


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


def system_line(n: int, system: dict) -> str:
    """The system-level result, with or without human ratings."""
    if not n:
        return "system: n=0 (no record scored)"
    line = f"system: n={n}  mean rating {system['mean']:.4f} (1-5)  mean score {system['score']:.4f} ([0, 1])"
    if system["score"] != system["score_unclamped"]:
        line += f", unclamped {system['score_unclamped']:.4f}"
    if system["human_mean"] is not None:
        line += f"  human mean rating {system['human_mean']:.4f} (labelled lines)"
    return line


def print_metrics(metrics: dict) -> None:
    cols = ("n", "spearman", "kendall", "mae_mean", "mae_variance", "nll", "roc_auc")
    print("\n| scores | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, m in metrics.items():
        cells = ["-" if m.get(c) is None else (str(m[c]) if c == "n" else f"{m[c]:.4f}") for c in cols]
        print(f"| {name} | " + " | ".join(cells) + " |")


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("orca-judge")
    except PackageNotFoundError:
        return "unknown (not installed)"


# ------------------------------------------------------------------------------------------------ main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orca-score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--input", required=True, type=Path, help="JSONL records (fields below; also the reference release's format)")
    p.add_argument("--output", required=True, type=Path, help="JSONL, one line per non-blank input line, in order")
    p.add_argument("--output-format", choices=("orca", "reference"), default="orca",
                   help="orca: orca_mean/orca_variance (1-5 scale), orca_probs, orca_score; reference: the reference "
                        "release's rating_orca (mean on [0, 1]), variance_orca (on [0, 1]: 1/16 of the 1-5 "
                        "variance; 0.0 for a bernoulli head) and n_ratings (default: %(default)s)")
    p.add_argument("--clamp", default="config", metavar="auto|THRESHOLD|off",
                   help="clamp confident scores to 0/1: auto = the model config's clamp_variance_threshold, a number "
                        "= that variance threshold (1-5 scale), off = never; default: as the model config says")
    p.add_argument("--tune-clamp-on", metavar="DEV.jsonl", help="tune the clamp threshold on this labelled file, then apply it")
    p.add_argument("--summary", type=Path, help="write a JSON summary (system-level scores, metrics, versions) here")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="a line that fails validation: stop with exit code 2 (raise) or write it with orca_error set (skip)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from its .partial/.shard files")
    p.add_argument("--chunk-size", type=int, default=256, help="records scored and appended to the partial file at a time")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (--quiet implies it)")
    return p


def run(args) -> dict | None:
    """Score the input; returns the summary on the main process (None on the others)."""
    import torch
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    started = time.time()
    if args.tune_clamp_on and args.clamp != "config":
        raise UsageError("--tune-clamp-on chooses the clamp threshold: do not combine it with --clamp")
    if args.batch_size < 1 or args.chunk_size < 1:
        raise UsageError("--batch-size and --chunk-size must be >= 1")
    # cpu=True on a machine without a GPU: PartialState() would ignore a torchrun launch there (every process
    # would think it is alone and score everything); with it the processes form a gloo group. The long barrier
    # timeout: after --resume one process may finish its shard hours before another (a crashed process is
    # stopped by the launcher, not by this timeout)
    cpu = parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available()
    state = PartialState(cpu=cpu, timeout=timedelta(hours=48))
    rank, count = state.process_index, state.num_processes
    entries, blank = read_entries(args.input, args.on_error)

    partial = shard_path(args.output, rank, count)
    if partial.exists() and not args.resume:
        raise UsageError(f"{partial} exists (an interrupted run): pass --resume to continue it, or delete it")

    load_revision, revision_id = resolve_revision(args.model, args.revision)
    # --device auto: the process's own device (cuda:N under accelerate launch, else the CPU)
    device = state.device if args.device == "auto" else args.device
    model, tokenizer = load_model(args.model, revision=load_revision, device=device, dtype=args.dtype)
    model_config = model.config.to_dict()  # as saved, before the clamp switch below
    config_clamp = model.config.clamp
    # the threshold is passed to predict explicitly; with config.clamp left on, predict would clamp under --clamp
    # off, and the dev scores of --tune-clamp-on must be unclamped
    model.config.clamp = False
    threshold, clamp_info = resolve_clamp(args, model, tokenizer, config_clamp)
    plan = shard_plan([group_key(e, model.config) for e in entries], count)
    mine = [entries[i] for i in plan[rank]]

    start = 0
    if partial.exists():
        start = completed_prefix(partial, mine)
    else:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(b"")
    score_entries(mine, partial, start, model, tokenizer, args, threshold, show_progress=state.is_main_process and not (args.no_progress or args.quiet))

    state.wait_for_everyone()
    if not state.is_main_process:
        return None
    convert = None
    if args.output_format == "reference":
        convert = functools.partial(reference_line, config=model.config, clamped=threshold is not None)
    lines = finalise(args.output, entries, plan, convert)
    system, metrics = summarise(entries, lines, model.config, threshold)
    errors = [{"line": e.line, "error": e.error} for e in entries if e.error]
    long_lines = over_max_chars(entries, model.config.max_chars)
    summary = {
        "package": {"name": "orca-judge", "version": package_version()},
        "model": {"id": args.model, "revision": revision_id, "requested_revision": args.revision},
        "input": str(args.input), "output": str(args.output),
        "counts": {
            "lines": len(entries) + blank, "blank_lines": blank, "records": len(entries),
            "scored": len(entries) - len(errors), "errors": len(errors),
            "labelled": sum(1 for e in entries if e.record is not None and e.record["ratings"]),
            "resumed_from": start if count == 1 else None, "processes": count,
            "over_max_chars": len(long_lines),
        },
        "errors": errors[:1000],
        "system": system, "clamp": clamp_info, "metrics": metrics,
        "config": {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "model": model_config},
        "seconds": round(time.time() - started, 2),
    }
    print(system_line(summary["counts"]["scored"], system))
    if metrics:
        print_metrics(metrics)
    if errors:
        print(f"{len(errors)} line(s) failed validation and were written with orca_error set", file=sys.stderr)
    if long_lines:
        shown = ", ".join(map(str, long_lines[:10])) + (", ..." if len(long_lines) > 10 else "")
        print(f"warning: {len(long_lines)} record(s) with a text over {model.config.max_chars} characters (lines "
              f"{shown}): scored, but training drops such records and the model cuts its input to "
              f"{model.config.max_length} tokens", file=sys.stderr)
    if args.summary:
        write_json_atomic(args.summary, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    set_quiet(args.quiet)
    try:
        run(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    return 0


if __name__ == "__main__":
    main()
