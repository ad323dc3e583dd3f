"""orca-score's partial output files: which process scores which records (whole questions together), where each
process appends its lines, what a partial file must have been produced by to be resumed, and the merge into the
output in input order.

A partial file (`OUT.partial`, or `OUT.shard-K.jsonl` per process under `accelerate launch`) holds whole records in
this tool's own format, appended in chunks with fsync; beside it, `PARTIAL.meta.json` (written atomically before the
partial file is created) records what produced it: model, revision, dtype, clamping, output format, input digest
and process count. `--resume` continues a partial file only when all of these are the same, so one output never
mixes two models or two clamping thresholds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from eval_suite.models.loading import UsageError
from orca_io.files import fsync_dir, open_atomic, write_json_atomic


def group_key(entry, config) -> Any:
    """What a record shares with the other answers to its question: its rendered input before the candidate (the
    model file's own formatter, so the groups are what `predict` shares). A line that failed validation is alone."""
    from processing_orca import input_variants, split_fields

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


def meta_path(partial: Path) -> Path:
    return partial.with_name(partial.name + ".meta.json")


def start_partial(partial: Path, produced_by: dict) -> None:
    """A new, empty partial file, with what produces it recorded first (a kill between the two leaves a meta file
    and no partial file: the next run starts over)."""
    partial.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(meta_path(partial), produced_by)
    partial.write_bytes(b"")
    fsync_dir(partial.parent)


def check_produced_by(partial: Path, produced_by: dict) -> None:
    """Refuse to resume `partial` unless it was produced by the same settings, naming each one that differs."""
    meta = meta_path(partial)
    if not meta.is_file():
        raise UsageError(f"{partial}: no {meta.name} beside it, so what produced it cannot be checked "
                         "(written by an older orca-score?); delete it to start over")
    try:
        saved = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # a hand edit: torn, not JSON, nested 1,000 deep
        raise UsageError(f"{meta}: unreadable ({str(err)[:200]}); delete it and {partial.name} to start over") from None
    if not isinstance(saved, dict):
        raise UsageError(f"{meta}: not a JSON object; delete it and {partial.name} to start over")
    differ = [f"{key}: {saved.get(key)!r} there, {value!r} now" for key, value in produced_by.items()
              if saved.get(key) != value]
    if differ:
        raise UsageError(f"--resume: {partial} was produced with other settings ({'; '.join(differ)}); resume with "
                         "the same ones, or delete it to start over")


def output_key(obj: dict) -> tuple:
    return ("line", obj.get("orca_line")) if obj.get("orca_error") else ("id", obj.get("id"))


def completed_prefix(path: Path, expected: list) -> int:
    """How many of `expected` (entries) a partial file already holds (its lines must be exactly their first ones).
    A torn last line (killed mid-write) is cut off, so appending continues from a whole record. Not the general
    JSONL reader: this one tolerates a torn last line and needs byte offsets to cut it."""
    done, good_bytes = 0, 0
    with open(path, "rb") as fh:
        lines = fh.readlines()
    for i, raw in enumerate(lines):
        try:
            obj = json.loads(raw) if raw.endswith(b"\n") else None  # no newline: torn
        except (ValueError, RecursionError):  # RecursionError: a hand edit nested 1,000 deep
            obj = None
        if obj is None and i == len(lines) - 1:
            break
        if not isinstance(obj, dict):  # a line this tool never writes (a list, a number: a hand edit)
            raise UsageError(f"{path}:{i + 1}: unreadable line in the partial output; delete the file to start over")
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


def finalise(output: Path, entries: list, plan: list[list[int]], convert=None) -> list[dict]:
    """Merge the shards in input order (checking that each holds exactly its planned entries) and put the result
    in place, each line passed through `convert` when given (the shards stay in this tool's own format, which
    --resume reads); returns the lines in this tool's format."""
    from orca_io.jsonl import read_jsonl

    count = len(plan)
    lines: list = [None] * len(entries)
    for k, indices in enumerate(plan):
        shard = read_jsonl(shard_path(output, k, count))
        keys, want = [output_key(o) for o in shard], [entries[i].key for i in indices]
        if keys != want:
            raise RuntimeError(f"{shard_path(output, k, count)}: holds {len(keys)} lines, expected {len(want)} "
                               "(or lines out of order): the shard is incomplete")
        for i, line in zip(indices, shard):
            lines[i] = line
    if convert is None and count == 1 and plan[0] == list(range(len(entries))):
        os.replace(shard_path(output, 0, 1), output)  # the partial file already is the output, in order
        fsync_dir(output.parent)
    else:
        with open_atomic(output, "w", encoding="utf-8") as fh:
            write_chunk(fh, lines if convert is None else [convert(line) for line in lines])
    for k in range(count):
        shard_path(output, k, count).unlink(missing_ok=True)
        meta_path(shard_path(output, k, count)).unlink(missing_ok=True)
    return lines
