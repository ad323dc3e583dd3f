"""Readers for every source the builder knows. Each returns a :class:`ReadResult`.

Every reader counts what it leaves out (``ReadResult.skipped``: reason -> count); nothing is
dropped silently. With ``on_error="raise"`` (the default) a malformed row raises
:class:`~dataset_builder.schema.RecordError` naming file, line (or ``[index]`` for JSON lists)
and field; with ``on_error="skip"`` the row is counted under its reason and reading goes on.
Rows the source itself marks as unusable (EVOUNA ``improper`` questions, null verdicts, empty
SAS labels) are always skipped and counted, never an error.
"""

from __future__ import annotations

import ast
import codecs
import csv
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import MAX_DEPTH, RecordError, make_record, too_deep, validate_record


@dataclass
class ReadResult:
    path: str
    records: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.records)


class _Errors:
    """Raise or count, depending on ``on_error``."""

    def __init__(self, result: ReadResult, on_error: str):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.result, self.on_error = result, on_error

    def __call__(self, exc: RecordError, reason: str | None = None) -> None:
        if self.on_error == "raise":
            raise exc
        self.result.skipped[reason or f"bad field '{exc.field}'"] += 1


def short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _norm_question(text: str) -> str:
    return " ".join(text.lower().split())


# --------------------------------------------------------------------------- JSONL records

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
    errors = _Errors(result, on_error)
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


# --------------------------------------------------------------------------- MMAU / MMAR

def _load_json_list(path: Path) -> list:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    return data


def _mc_question(obj, *, path, line, benchmark, modality_key, rationale_key=None) -> dict:
    """Normalise one multiple-choice item; raises RecordError naming the field."""
    def bad(field_, problem):
        return RecordError(field_, problem, path=path, line=line)

    if not isinstance(obj, dict):
        raise bad("<record>", f"expected an object, got {type(obj).__name__}")
    for key in ("id", "question", "choices", "answer"):
        if obj.get(key) in (None, ""):
            raise bad(key, "missing")
    choices = obj["choices"]
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise bad("choices", "expected a list of at least two strings")
    if obj["answer"] not in choices:
        raise bad("answer", f"{obj['answer']!r} is not one of the choices")
    category = obj.get("category") or ""
    if isinstance(category, list):  # a few MMAU items carry ['Reasoning']
        category = "; ".join(map(str, category))
    rationale = obj.get(rationale_key) if rationale_key else ""
    if rationale is not None and not isinstance(rationale, str):
        raise bad(rationale_key, f"expected str, got {type(rationale).__name__}")
    skip = {"id", "question", "choices", "answer", "category", modality_key, rationale_key}
    return {
        "question_id": f"{benchmark}:{obj['id']}",
        "benchmark": benchmark,
        "question": obj["question"],
        "choices": list(choices),
        "answer": obj["answer"],
        "modality": str(obj.get(modality_key) or ""),
        "category": str(category),
        "rationale": rationale or "",
        "metadata": {k: v for k, v in obj.items() if k not in skip},
    }


def read_mmau(path, *, on_error: str = "raise") -> ReadResult:
    """MMAU test-mini (JSON list). Records are *questions* (not rated candidates): ``question_id,
    benchmark, question, choices, answer, modality`` (MMAU ``task``), ``category, rationale``
    (always "": MMAU has none) and ``metadata``."""
    path = Path(path)
    result = ReadResult(str(path))
    errors = _Errors(result, on_error)
    for i, obj in enumerate(_load_json_list(path)):
        try:
            result.records.append(_mc_question(obj, path=path, line=f"[{i}]", benchmark="mmau",
                                               modality_key="task"))
        except RecordError as e:
            errors(e)
    return result


def read_mmar(path, *, on_error: str = "raise") -> ReadResult:
    """MMAR (JSONL), same question layout as :func:`read_mmau`; ``thinking`` is the rationale."""
    path = Path(path)
    result = ReadResult(str(path))
    errors = _Errors(result, on_error)
    for item in JsonLines(path, on_error=on_error, skipped=result.skipped):
        try:
            result.records.append(_mc_question(item.value, path=path, line=item.line, benchmark="mmar",
                                               modality_key="modality", rationale_key="thinking"))
        except RecordError as e:
            errors(e)
    return result


# --------------------------------------------------------------------------- audio-LM answers

LALM_MODELS = {
    "qwen2_audio_7b_instruct": "Qwen2-Audio-7B-Instruct",
    "qwen_audio_chat": "Qwen-Audio-Chat",
}


def read_lalm_outputs(path, *, answerer: str | None = None, on_error: str = "raise") -> ReadResult:
    """Real open-ended answers of an audio LM to MMAU test-mini, as *unlabeled* records
    (``ratings == []``; stage s2 raters may rate them later). The answerer is taken from the file
    name (``qwen2_audio_7b_instruct_results.json`` -> ``Qwen2-Audio-7B-Instruct``) unless given.
    ``metadata`` keeps the choices so that a machine rater can decide."""
    path = Path(path)
    stem = path.stem.removesuffix("_results")
    answerer = answerer or LALM_MODELS.get(stem, stem)
    result = ReadResult(str(path))
    errors = _Errors(result, on_error)
    for i, obj in enumerate(_load_json_list(path)):
        try:
            q = _mc_question(obj, path=path, line=f"[{i}]", benchmark="mmau", modality_key="task")
            out = obj.get("model_output")
            if not isinstance(out, str):
                raise RecordError("model_output", f"expected str, got {type(out).__name__}", path=path, line=f"[{i}]")
        except RecordError as e:
            errors(e)
            continue
        meta = {k: v for k, v in q["metadata"].items() if k != "model_output"}
        result.records.append(make_record(
            id=f"lalm:{answerer}:{obj['id']}", benchmark="mmau", question_id=q["question_id"],
            question=q["question"], reference=[q["answer"]], candidate=out.strip(), answerer=answerer,
            modality=q["modality"], category=q["category"], stage="s2",
            source=f"lalm_outputs_mmau/{path.name}", metadata={**meta, "choices": q["choices"]},
        ))
    return result


# --------------------------------------------------------------------------- EVOUNA-NQ

EVOUNA_SYSTEMS = {"fid": "FiD", "gpt35": "GPT-3.5", "chatgpt": "ChatGPT", "gpt4": "GPT-4", "newbing": "New Bing"}


def split_aliases(golden: str) -> list[str]:
    """EVOUNA's golden_answer lists alternatives separated by '/'; keep order, drop empties/duplicates."""
    out: list[str] = []
    for part in golden.split("/"):
        part = part.strip().rstrip(",").strip()
        if part and part not in out:
            out.append(part)
    return out


def read_evouna_nq(path, *, on_error: str = "raise") -> ReadResult:
    """EVOUNA-NQ: one record per (question, answering system) with a human verdict.

    True -> rating 5, False -> rating 1 (one rating per item, rater id ``evouna-human``).
    Skipped and counted: ``improper question`` (one count per question, with all its answers),
    ``null verdict`` and ``missing answer`` per answer, ``missing golden answer`` per question.
    ``question_id`` hashes the normalised question text, so a question listed twice (NQ.json has
    one) lands in a single split part.
    """
    path = Path(path)
    result = ReadResult(str(path))
    errors = _Errors(result, on_error)
    for i, obj in enumerate(_load_json_list(path)):
        line = f"[{i}]"
        if not isinstance(obj, dict) or not isinstance(obj.get("question"), str):
            errors(RecordError("question", "missing or not a string", path=path, line=line))
            continue
        improper = obj.get("improper", False)
        if not isinstance(improper, bool):
            errors(RecordError("improper", f"expected bool, got {improper!r}", path=path, line=line))
            continue
        if improper:
            result.skipped["improper question"] += 1
            continue
        golden = obj.get("golden_answer")
        if not isinstance(golden, str) or not split_aliases(golden):
            result.skipped["missing golden answer"] += 1
            continue
        reference = split_aliases(golden)
        qid = "evouna_nq:" + short_hash(_norm_question(obj["question"]))
        for key, name in EVOUNA_SYSTEMS.items():
            answer, verdict = obj.get(f"answer_{key}"), obj.get(f"judge_{key}")
            if verdict is None:
                result.skipped["null verdict"] += 1
                continue
            if not isinstance(verdict, bool):
                errors(RecordError(f"judge_{key}", f"expected true/false/null, got {verdict!r}", path=path, line=line))
                continue
            if not isinstance(answer, str):
                result.skipped["missing answer"] += 1
                continue
            result.records.append(make_record(
                id=f"evouna_nq:{i}:{key}", benchmark="evouna_nq", question_id=qid,
                question=obj["question"], reference=reference, candidate=answer.strip(), answerer=name,
                modality="text", category="open-domain QA", ratings=[5 if verdict else 1],
                rater_ids=["evouna-human"], stage="s3", source="evouna_nq/NQ.json",
                metadata={"index": i, "verdict": verdict},
            ))
    return result


# --------------------------------------------------------------------------- SAS / NQ-open

SAS_LABELS = {0: 1, 1: 3, 2: 5}  # dissimilar / approximately similar / equivalent
NQ_OPEN_GRADES = {"def_correct_predictions": 5, "poss_correct_predictions": 3, "def_incorrect_predictions": 1}


def _open_csv(path: Path):
    return open(path, encoding="utf-8", newline="")


def read_sas_pairs(path, *, on_error: str = "raise") -> ReadResult:
    """A ``*_SAS.csv`` file (``answer1, answer2, label``): answer1 is the reference, answer2 the
    candidate, label 0/1/2 -> rating 1/3/5. The pairs have no question (``question == ""``);
    ``question_id`` hashes the reference so pairs sharing a reference stay in one split part.
    Empty labels are skipped and counted."""
    path = Path(path)
    name = path.stem.removesuffix("_SAS").lower().replace("-", "_")
    result = ReadResult(str(path))
    errors = _Errors(result, on_error)
    with _open_csv(path) as fh:
        reader = csv.DictReader(fh)
        missing = {"answer1", "answer2", "label"} - set(reader.fieldnames or ())
        if missing:
            raise RecordError(sorted(missing)[0], "missing CSV column", path=path, line=1)
        for row in reader:
            line = reader.line_num
            label = (row["label"] or "").strip()
            if not label:
                result.skipped["empty label"] += 1
                continue
            try:
                value = float(label)
                if value not in (0.0, 1.0, 2.0):
                    raise ValueError
            except ValueError:
                errors(RecordError("label", f"{label!r} is not 0, 1 or 2", path=path, line=line))
                continue
            ref, cand = (row["answer1"] or "").strip(), (row["answer2"] or "").strip()
            if not ref:
                errors(RecordError("answer1", "empty reference", path=path, line=line))
                continue
            result.records.append(make_record(
                id=f"sas:{name}:{line}", benchmark=f"sas_{name}", question_id=f"sas:{name}:{short_hash(ref)}",
                question="", reference=[ref], candidate=cand, answerer="unknown", modality="text",
                category="extractive QA", ratings=[SAS_LABELS[int(value)]], stage="s3",
                source=f"sas/{path.name}", metadata={"sas_label": int(value),
                                                     "language": "de" if "german" in name else "en"},
            ))
    return result


def read_nq_open_graded(path, *, on_error: str = "raise") -> ReadResult:
    """``nq_open_filtered.csv``: NQ-open questions with predictions that humans sorted into
    definitely correct (5) / possibly correct (3) / definitely incorrect (1). ``answer`` is the
    reference. The prediction columns are Python-list strings (parsed with ``ast.literal_eval``,
    never ``eval``)."""
    path = Path(path)
    result = ReadResult(str(path))
    errors = _Errors(result, on_error)
    with _open_csv(path) as fh:
        reader = csv.DictReader(fh)
        missing = ({"question", "answer"} | set(NQ_OPEN_GRADES)) - set(reader.fieldnames or ())
        if missing:
            raise RecordError(sorted(missing)[0], "missing CSV column", path=path, line=1)
        for row in reader:
            line = reader.line_num
            question, answer = (row["question"] or "").strip(), (row["answer"] or "").strip()
            if not answer:
                errors(RecordError("answer", "empty reference", path=path, line=line))
                continue
            parsed = {}
            try:
                for col in NQ_OPEN_GRADES:
                    value = ast.literal_eval(row[col] or "[]")
                    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                        raise RecordError(col, "expected a list of strings", path=path, line=line)
                    parsed[col] = value
            except (ValueError, SyntaxError) as e:
                errors(RecordError(col, f"not a Python list literal: {e}", path=path, line=line))
                continue
            except RecordError as e:
                errors(e)
                continue
            row_id = (row.get("") or str(line)).strip()
            qid = f"nq_open:{short_hash(_norm_question(question))}"
            for col, rating in NQ_OPEN_GRADES.items():
                for j, pred in enumerate(parsed[col]):
                    result.records.append(make_record(
                        id=f"nq_open:{row_id}:{col.removesuffix('_predictions')}:{j}", benchmark="nq_open", question_id=qid,
                        question=question, reference=[answer], candidate=pred.strip(), answerer="unknown",
                        modality="text", category="open-domain QA", ratings=[rating], stage="s3",
                        source=f"sas/{path.name}", metadata={"grade": col.removesuffix("_predictions")},
                    ))
    return result
