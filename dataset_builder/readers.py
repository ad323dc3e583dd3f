"""Readers for every source the builder knows. Each returns a :class:`~orca_io.jsonl.ReadResult` (a JSONL file
of records is read by :func:`orca_io.jsonl.read_records`).

Every reader counts what it leaves out (``ReadResult.skipped``: reason -> count); nothing is
dropped silently. With ``on_error="raise"`` (the default) a malformed row raises
:class:`~orca_io.schema.RecordError` naming file, line (or ``[index]`` for JSON lists)
and field; with ``on_error="skip"`` the row is counted under its reason and reading goes on.
Rows the source itself marks as unusable (EVOUNA ``improper`` questions, null verdicts, empty
SAS labels) are always skipped and counted, never an error.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
from pathlib import Path

from orca_io.jsonl import ErrorPolicy, JsonLines, ReadResult
from orca_io.schema import RecordError, make_record


def short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _norm_question(text: str) -> str:
    return " ".join(text.lower().split())


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
    errors = ErrorPolicy(result, on_error)
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
    errors = ErrorPolicy(result, on_error)
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
    errors = ErrorPolicy(result, on_error)
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
    errors = ErrorPolicy(result, on_error)
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
    errors = ErrorPolicy(result, on_error)
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
    errors = ErrorPolicy(result, on_error)
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
