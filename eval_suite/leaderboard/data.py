"""Benchmarks the leaderboard knows, submission files (validation, export) and their metadata.

Each benchmark builds its reference and rationale in exactly one function (`*_item`); everything else
(formatting, truncation, batching) is the model's own `predict`.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from dataset_builder.readers import read_lalm_outputs, read_mmar, read_mmau
from orca_io.jsonl import JsonLines
from orca_io.schema import RecordError, validate_record

REPO = Path(__file__).resolve().parents[2]

# Limits of a submission (docs/leaderboard.md). The byte limit is checked before anything is read.
MAX_SUBMISSION_BYTES = 16 * 2**20
MAX_ANSWER_CHARS = 10_000
MAX_NAME_CHARS = 100
MAX_LINK_CHARS = 500
MAX_ERRORS_SHOWN = 20
# reading stops at this many problems: a file of junk would otherwise cost a message (and memory) per line
MAX_PROBLEMS = 50
SUBMISSION_KEYS = ("question_id", "answer")
META_KEYS = ("model_name", "link", "benchmark")


class SubmissionError(ValueError):
    """A submission or its metadata that cannot be scored; `errors` lists every problem as `file:line: ...`."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(shown_errors(errors, MAX_ERRORS_SHOWN)))


STOPPED = "more line(s) not read"  # the end of the message that says reading stopped at MAX_PROBLEMS


def shown_errors(errors: list[str], limit: int) -> list[str]:
    """The first `limit` problems, a count of the others, and always the note that reading stopped."""
    shown = errors[:limit]
    if len(errors) > limit:
        stops = [e for e in errors[limit:] if e.endswith(STOPPED)]
        hidden = len(errors) - limit - len(stops)
        shown = [*shown, *([f"... and {hidden} more"] if hidden else []), *stops]
    return shown


# ------------------------------------------------------------------------------------------------ benchmarks


@dataclass(frozen=True)
class Question:
    id: str  # the benchmark's own id: what a submission's `question_id` names
    question: str
    reference: list[str]
    rationale: str
    modality: str
    category: str


def mmau_item(q: dict) -> tuple[list[str], str]:
    """MMAU: the correct choice is the only reference; MMAU has no rationale."""
    return [q["answer"]], ""


def mmar_item(q: dict) -> tuple[list[str], str]:
    """MMAR: the correct choice, and MMAR's `thinking` (read as `rationale` by read_mmar) as rationale."""
    return [q["answer"]], q["rationale"]


def mmau_pro_item(q: dict) -> tuple[list[str], str]:
    """MMAU-Pro: the answer (one string or a list of accepted answers); no rationale."""
    answer = q["answer"]
    return ([answer] if isinstance(answer, str) else list(answer)), ""


def _from_reader(records: list[dict], item) -> list[Question]:
    out = []
    for q in records:
        reference, rationale = item(q)
        own_id = q["question_id"].split(":", 1)[1]  # the readers prefix "mmau:"/"mmar:"; submissions use the raw id
        out.append(Question(own_id, q["question"], reference, rationale, q["modality"], q["category"]))
    return out


def _load_mmau(path: Path) -> list[Question]:
    return _from_reader(read_mmau(path).records, mmau_item)


def _load_mmar(path: Path) -> list[Question]:
    return _from_reader(read_mmar(path).records, mmar_item)


def _load_mmau_pro(path: Path) -> list[Question]:
    """MMAU-Pro questions as a JSON list or JSONL: `id, question, answer` (str or list of str), optional
    `modality` (or `task`) and `category`. MMAU-Pro is not in the shared data; the user supplies it."""
    text = path.read_text(encoding="utf-8")
    rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    out, errors = [], []
    for i, obj in enumerate(rows, start=1):
        where = f"{path}:{i}"
        if not isinstance(obj, dict):
            errors.append(f"{where}: expected an object")
            continue
        if not isinstance(obj.get("id"), str | int) or not isinstance(obj.get("question"), str):
            errors.append(f"{where}: needs `id` (string or integer) and `question` (string)")
            continue
        answer = obj.get("answer")
        if not (isinstance(answer, str) and answer.strip()) and not (
            isinstance(answer, list) and answer and all(isinstance(a, str) for a in answer)
        ):
            errors.append(f"{where}: `answer` must be a non-empty string or a list of strings")
            continue
        reference, rationale = mmau_pro_item(obj)
        category = obj.get("category") or ""
        category = "; ".join(map(str, category)) if isinstance(category, list) else str(category)
        out.append(Question(str(obj["id"]), obj["question"], reference, rationale,
                            str(obj.get("modality") or obj.get("task") or ""), category))
    if errors:
        raise SubmissionError(errors)
    return out


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    default_file: str | None  # under the data dir; None: --questions is required
    load: object


BENCHMARKS = {
    b.name: b
    for b in (
        Benchmark("mmau-test-mini", "MMAU test-mini", "mmau_test_mini/mmau-test-mini.json", _load_mmau),
        Benchmark("mmar", "MMAR", "mmar/MMAR-meta.jsonl", _load_mmar),
        Benchmark("mmau-pro", "MMAU-Pro", None, _load_mmau_pro),
    )
}


def default_data_dir() -> Path:
    return Path(os.environ.get("ORCA_DATA_DIR") or REPO.parent / "shared" / "data")


def load_questions(benchmark: str, data_dir: Path | None = None, questions: Path | None = None) -> list[Question]:
    """The benchmark's questions from `questions` or from its file under the data dir; ids must be unique."""
    spec = BENCHMARKS[benchmark]
    if questions is None:
        if spec.default_file is None:
            raise SubmissionError([f"{benchmark}: its questions are not in the shared data; pass --questions FILE"])
        questions = Path(data_dir or default_data_dir()) / spec.default_file
    if not Path(questions).exists():
        raise SubmissionError([f"{questions}: benchmark file not found (set --data-dir, ORCA_DATA_DIR or --questions)"])
    try:
        items = spec.load(Path(questions))
    except SubmissionError:
        raise
    except (RecordError, ValueError, UnicodeDecodeError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise SubmissionError([f"{questions}: not a {spec.title} question file: {e}"]) from None
    seen: set[str] = set()
    dupes = sorted({q.id for q in items if q.id in seen or seen.add(q.id)})
    if dupes:
        raise SubmissionError([f"{questions}: duplicate question ids {dupes[:5]}"])
    if not items:
        raise SubmissionError([f"{questions}: no questions"])
    return items


# ------------------------------------------------------------------------------------------------ submissions


@dataclass
class Submission:
    path: Path
    model_name: str
    link: str
    answers: dict[str, str]  # question id -> answer; questions without a line are missing


def meta_path(path: Path) -> Path:
    """The metadata header beside a submission: `a.jsonl` -> `a.meta.json`."""
    return path.with_name(path.name.removesuffix(".jsonl") + ".meta.json")


def read_meta(path: Path, benchmark: str) -> dict:
    """The optional header file: `{"model_name": str, "link": str, "benchmark": str}` (all optional)."""
    mp = meta_path(path)
    if not mp.exists():
        return {}
    try:
        meta = json.loads(mp.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # also a 4,301-digit number, 1,000 levels deep
        raise SubmissionError([f"{mp}: not a UTF-8 JSON object ({str(e)[:200]})"]) from None
    if not isinstance(meta, dict):
        raise SubmissionError([f"{mp}: expected a JSON object, got {type(meta).__name__}"])
    errors = [f"{mp}: unknown key {k!r} (allowed: {', '.join(META_KEYS)})" for k in meta if k not in META_KEYS]
    errors += [f"{mp}: {k!r} must be a string" for k in META_KEYS if k in meta and not isinstance(meta[k], str)]
    if not errors and meta.get("benchmark", benchmark) != benchmark:
        errors.append(f"{mp}: submission is for benchmark {meta['benchmark']!r}, not {benchmark!r}")
    if errors:
        raise SubmissionError(errors)
    return meta


def name_key(model_name: str) -> str:
    """What makes two model names the same entry: NFKC, case-folded, whitespace collapsed ("Model  A", "model a"
    and a full-width "Ｍodel A" are one entry). Format characters (zero-width, direction overrides) are dropped so
    that records stored before such names were refused still fall on their entry."""
    visible = "".join(c for c in model_name if unicodedata.category(c) != "Cf")
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", visible).casefold())
    return " ".join(folded.split())


def hidden_characters(text: str) -> list[str]:
    """The control and format characters of `text` (Unicode categories Cc, Cf) as U+XXXX, first five."""
    found = sorted({f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in ("Cc", "Cf")})
    return found[:5]


# UTS #39's "highly restrictive" level: a name in one script, or Latin with the scripts Japanese, Chinese or Korean
# write beside it. Other mixes are how look-alike names are made ("Model А" with a Cyrillic А is not "Model A").
ALLOWED_SCRIPT_MIXES = ({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}, {"LATIN", "HAN", "BOPOMOFO"}, {"LATIN", "HAN", "HANGUL"})


def mixed_scripts(text: str) -> list[str]:
    """The scripts of `text` (Unicode's Scripts.txt, through confusable_homoglyphs) when they mix in a way UTS #39's
    highly restrictive level does not allow; [] when they do not. Common and inherited characters (digits,
    punctuation, combining marks) belong to every script."""
    from confusable_homoglyphs import categories

    scripts = {categories.alias(c) for c in unicodedata.normalize("NFKC", text)} - {"COMMON", "INHERITED"}
    if len(scripts) <= 1 or any(scripts <= allowed for allowed in ALLOWED_SCRIPT_MIXES):
        return []
    return sorted(scripts)


def check_meta(model_name: str, link: str, where: str) -> list[str]:
    errors = []
    if not model_name.strip():
        errors.append(f"{where}: empty model name")
    if len(model_name) > MAX_NAME_CHARS:
        errors.append(f"{where}: model name longer than {MAX_NAME_CHARS} characters")
    # a newline, a zero-width space or a right-to-left override makes two names look alike or one look like another
    for field, text in (("model name", model_name.strip()), ("link", link.strip())):
        hidden = hidden_characters(text)
        if hidden:
            errors.append(f"{where}: {field} contains control or format characters ({', '.join(hidden)}): "
                          "use visible characters and plain spaces only")
    if scripts := mixed_scripts(model_name):
        errors.append(f"{where}: model name mixes scripts ({', '.join(x.title() for x in scripts)}), so it can look "
                      "like another entry's name: write it in one script")
    if len(link) > MAX_LINK_CHARS:
        errors.append(f"{where}: link longer than {MAX_LINK_CHARS} characters")
    return errors


def scoring_record(q: Question, answer: str, *, benchmark: str = "", answerer: str = "unknown") -> dict:
    """The record `predict` scores for an answer to `q`, checked by the one record schema (raises RecordError)."""
    return validate_record({"id": q.id, "benchmark": benchmark, "question_id": q.id, "question": q.question,
                            "reference": q.reference, "rationale": q.rationale, "candidate": answer,
                            "answerer": answerer, "modality": q.modality, "category": q.category})


def answer_problem(question, qid: str, answer, benchmark: str) -> str | None:
    """What is wrong with one submitted answer (None: nothing), checked as the record `predict` will score."""
    if not isinstance(answer, str):
        # null is not "missing": a missing answer is a question without a line
        return f"'answer' must be a string, got {type(answer).__name__}"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"answer of {len(answer)} characters, over the limit of {MAX_ANSWER_CHARS}"
    try:  # through the one schema (e.g. a "\\ud800" escape: valid JSON, but no tokenizer takes it)
        if question is not None:
            scoring_record(question, answer, benchmark=benchmark)
        else:  # only ids known: the answer is checked as a record's candidate
            validate_record({"id": qid, "question": "-", "reference": "-", "candidate": answer})
    except RecordError as e:
        return f"'{'answer' if e.field == 'candidate' else e.field}' is {e.problem}"
    return None


def read_submission(path, questions, *, model_name: str | None = None, link: str | None = None,
                    benchmark: str = "", max_bytes: int = MAX_SUBMISSION_BYTES, where: str | None = None) -> Submission:
    """Validate one submission; raises SubmissionError listing the problems found (`file:line: ...`): at most
    `MAX_PROBLEMS`, where reading stops and the last message says how many more lines were not read.

    `questions`: the benchmark's Questions (each answer's record is then checked by the record schema) or just
    their ids. `where`: how problems name the file (default: its path); `where=""` gives `line N: problem`, the
    form a web form shows. Name and link come from the CLI flags, else from the header file `NAME.meta.json`,
    else the name is the file name. Blank lines are ignored; every other line must be
    `{"question_id": str, "answer": str}`.
    """
    path = Path(path)
    label = str(path) if where is None else where

    def at(lineno: int | None = None) -> str:
        if lineno is None:
            return label or "file"
        return f"{label}:{lineno}" if label else f"line {lineno}"

    if not path.is_file():
        raise SubmissionError([f"{at()}: no such file"])
    size = path.stat().st_size  # checked before anything is read
    if size > max_bytes:
        raise SubmissionError([f"{at()}: {size} bytes, over the limit of {max_bytes} bytes"])
    meta = read_meta(path, benchmark)
    name = model_name if model_name is not None else meta.get("model_name", path.name.removesuffix(".jsonl"))
    link = link if link is not None else meta.get("link", "")
    errors = check_meta(name, link, at())
    by_id = {q: None for q in questions} if questions and isinstance(next(iter(questions)), str) else {
        q.id: q for q in questions}
    known = set(by_id)
    answers: dict[str, str] = {}
    first_line: dict[str, int] = {}
    # the one JSONL reader; it stops once `errors` holds MAX_PROBLEMS (its bad lines are kept and listed below)
    lines = JsonLines(path, on_error="keep", max_problems=MAX_PROBLEMS, problems=errors)
    for item in lines:
        lineno, where, obj = item.line, at(item.line), item.value
        if item.error is not None:  # not UTF-8, or not JSON
            errors.append(f"{where}: {item.error.problem}")
            continue
        if not isinstance(obj, dict):
            errors.append(f"{where}: expected an object {{\"question_id\": ..., \"answer\": ...}}, got {type(obj).__name__}")
            continue
        extra = sorted(set(obj) - set(SUBMISSION_KEYS))
        if extra:
            errors.append(f"{where}: unknown keys {extra} (allowed: question_id, answer)")
        qid, answer = obj.get("question_id"), obj.get("answer")
        if not isinstance(qid, str):
            errors.append(f"{where}: 'question_id' must be a string, got {type(qid).__name__}")
            continue
        if qid not in known:
            errors.append(f"{where}: unknown question_id {qid!r} for {benchmark or 'this benchmark'}")
            continue
        if qid in first_line:
            errors.append(f"{where}: duplicate question_id {qid!r} (first on line {first_line[qid]})")
            continue
        first_line[qid] = lineno
        problem = answer_problem(by_id[qid], qid, answer, benchmark)
        if problem is not None:
            errors.append(f"{where}: {problem}")
        else:
            answers[qid] = answer
    if lines.unread is not None:
        errors.append(f"{at()}: stopped after {MAX_PROBLEMS} problems; {lines.unread} {STOPPED}")
    if not errors and not answers:
        errors.append(f"{at()}: no answers")
    if errors:
        raise SubmissionError(errors)
    return Submission(path, name.strip(), link.strip(), answers)


def export_lalm_submission(lalm_file, out, *, model_name: str | None = None, link: str = "") -> tuple[int, str]:
    """An audio-LM answer file of ../shared/data/lalm_outputs_mmau as a submission (+ its header file).
    Returns (answers written, model name)."""
    result = read_lalm_outputs(lalm_file)
    name = model_name or result.records[0]["answerer"]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        for rec in result.records:
            qid = rec["question_id"].split(":", 1)[1]
            fh.write(json.dumps({"question_id": qid, "answer": rec["candidate"]}, ensure_ascii=False) + "\n")
    meta = {"model_name": name, "link": link, "benchmark": "mmau-test-mini"}
    meta_path(out).write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return len(result.records), name


def slugify(name: str) -> str:
    """A file-name-safe form of a user-provided name: no separators, no dots at the ends, bounded."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:60]
    return slug or "submission"
