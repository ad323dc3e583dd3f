"""The one JSON Lines reader (`JsonLines`, `read_jsonl`) and the reader of a JSONL file of records (`read_records`,
`iter_records`): what orca-score, orca-eval, the leaderboard, training and the dataset builder read. Each records reader
returns or fills a :class:`ReadResult`; :class:`ErrorPolicy` raises or counts a bad row (``on_error``)."""

from __future__ import annotations

import codecs
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import MAX_DEPTH, RecordError, too_deep, validate_record


@dataclass
class ReadResult:
    path: str
    records: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.records)


class ErrorPolicy:
    """Raise or count, depending on ``on_error``."""

    def __init__(self, result: ReadResult, on_error: str):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.result, self.on_error = result, on_error

    def __call__(self, exc: RecordError, reason: str | None = None) -> None:
        if self.on_error == "raise":
            raise exc
        self.result.skipped[reason or f"bad field '{exc.field}'"] += 1


@dataclass
class JsonLine:
    """One non-blank line of a JSONL file: its number, its text (without the line end), the parsed value, and for
    a line that is not UTF-8 or not JSON (yielded with ``on_error="keep"``) the problem."""

    line: int
    value: Any = None
    error: RecordError | None = None
    text: str = ""


class JsonLines:
    """The one JSONL reader: iterate over the non-blank lines of ``path`` as :class:`JsonLine`.

    A line that is not UTF-8 or not JSON raises :class:`RecordError` naming file and line (``on_error="raise"``),
    is counted in ``skipped`` under its reason (``"skip"``), or is yielded with ``error`` set (``"keep"``, for
    outputs that keep every line in place). A UTF-8 byte order mark on the first line is accepted; blank lines are
    counted (``blank_lines`` and ``skipped["blank line"]``). The file is read one line at a time, as bytes, so a
    bad byte is reported with its line.

    ``max_problems``: reading stops before the next line once that many problems were seen; ``unread`` then
    holds how many lines were not read (None when the whole file was read). The problems counted are the bad lines
    found here, or, when the caller passes its own list of problems (``problems=``: its checks of each value and
    the kept bad lines it was given), that list.
    """

    def __init__(self, path, *, on_error: str = "raise", max_problems: int | None = None,
                 skipped: Counter | None = None, problems: list | None = None):
        if on_error not in ("raise", "skip", "keep"):
            raise ValueError(f"on_error must be 'raise', 'skip' or 'keep', got {on_error!r}")
        self.path, self.on_error, self.max_problems = Path(path), on_error, max_problems
        self.skipped = Counter() if skipped is None else skipped
        self.lines = self.blank_lines = self.bad_lines = 0
        self.unread: int | None = None
        self._caller_problems = problems

    @property
    def problems(self) -> int:
        return self.bad_lines if self._caller_problems is None else len(self._caller_problems)

    def _bad(self, lineno: int, raw: bytes, reason: str, message: str) -> JsonLine | None:
        err = RecordError("<line>", message, path=self.path, line=lineno)
        if self.on_error == "raise":
            raise err
        self.bad_lines += 1
        if self.on_error == "skip":
            self.skipped[reason] += 1
            return None
        return JsonLine(lineno, error=err, text=raw.decode("utf-8", errors="replace").rstrip("\r\n"))

    def _parse(self, lineno: int, raw: bytes, text: str) -> JsonLine | None:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            return self._bad(lineno, raw, "malformed JSON", f"malformed JSON: {e.msg} at column {e.colno}")
        except RecursionError:  # the C decoder's own guard (about 1,000 levels, fewer in a deep call stack)
            return self._bad(lineno, raw, "nested too deeply", f"JSON nested deeper than {MAX_DEPTH} levels")
        except ValueError as e:  # an integer of over 4,300 digits (Python's int limit): not a JSONDecodeError
            return self._bad(lineno, raw, "malformed JSON", f"malformed JSON: {_clip(str(e))}")
        if too_deep(value, text):
            return self._bad(lineno, raw, "nested too deeply", f"JSON nested deeper than {MAX_DEPTH} levels")
        return JsonLine(lineno, value, text=text.rstrip("\r\n"))

    def __iter__(self) -> Iterator[JsonLine]:
        with open(self.path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if self.max_problems is not None and self.problems >= self.max_problems:
                    self.unread = 1 + _lines_left(fh)  # this line and the rest
                    return
                self.lines += 1
                if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]  # as some editors write
                if not raw.strip():
                    self.blank_lines += 1
                    self.skipped["blank line"] += 1
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    item = self._bad(lineno, raw, "not UTF-8", f"not UTF-8 (byte {e.start})")
                else:
                    item = self._parse(lineno, raw, text)
                if item is not None:
                    yield item


def _clip(text: str, limit: int = 120) -> str:
    """A message bounded in length (a huge number in the input must not make a huge error line)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lines_left(fh) -> int:
    """Lines from the position of binary file `fh` to its end, counted by blocks (a 16 MiB file of junk: fast)."""
    count, last = 0, b"\n"
    for block in iter(lambda: fh.read(1 << 20), b""):
        count, last = count + block.count(b"\n"), block[-1:]
    return count + (last != b"\n")


def read_jsonl(path) -> list:
    """Every value of a JSONL file this project wrote (blank lines ignored); a bad line raises RecordError."""
    return [item.value for item in JsonLines(path)]



def _stage_from_name(path: Path) -> str | None:
    m = re.match(r"(s[123])[-_]", path.name)
    return m.group(1) if m else None


def read_records(path, *, on_error: str = "raise") -> ReadResult:
    """Read a JSONL file of records, one JSON object a line, into a :class:`ReadResult`.

    Each line may be in the project schema or in the ORCA release format (``id, question,
    reference, candidate, rationale, ratings``, optional ``transcription``; other keys go to
    ``metadata``); the format is detected per line by :func:`validate_record`. A record without a
    ``stage`` takes it from a file name such as ``s3-mmau-pro-human-judge-ratings.jsonl``, and one
    without ``source`` takes the file name. Duplicate ids are an error naming both lines. A file
    with no record at all is an error in both modes. A UTF-8 byte order mark is accepted.

    The file is read line by line, but the records are returned as a list (memory grows with the
    records, not with a multiple of the file); :func:`iter_records` yields them one at a time.
    """
    result = ReadResult(str(path))
    result.records.extend(iter_records(path, on_error=on_error, skipped=result.skipped))
    return result


def iter_records(path, *, on_error: str = "raise", skipped: Counter | None = None) -> Iterator[dict]:
    """The records of :func:`read_records`, yielded one at a time (same checks, messages and errors;
    skips are counted into ``skipped`` when given). Memory stays bounded by the longest line plus
    the set of ids seen (needed for the duplicate check), whatever the size of the file."""
    path = Path(path)
    result = ReadResult(str(path))
    if skipped is not None:
        result.skipped = skipped
    errors = ErrorPolicy(result, on_error)
    stage = _stage_from_name(path)
    seen: dict[str, int] = {}
    records = 0
    lines = JsonLines(path, on_error=on_error, skipped=result.skipped)
    for item in lines:
        obj = item.value
        if isinstance(obj, dict):
            if stage and not obj.get("stage"):
                obj["stage"] = stage
            obj.setdefault("source", path.name)
        try:
            rec = validate_record(obj, path=path, line=item.line)
        except RecordError as e:
            errors(e)
            continue
        if rec["id"] in seen:
            errors(RecordError("id", f"duplicate id {rec['id']!r} (first on line {seen[rec['id']]})",
                               path=path, line=item.line), "duplicate id")
            continue
        seen[rec["id"]] = item.line
        records += 1
        yield rec
    if not records:
        what = "empty file" if lines.lines == 0 else f"no valid record in {lines.lines} lines ({dict(result.skipped)})"
        raise ValueError(f"{path}: {what}; expected one JSON record per line")
