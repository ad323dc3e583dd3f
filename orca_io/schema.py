"""The one record schema shared by training, evaluation and the leaderboard.

A record is a plain ``dict`` whose keys and types are exactly those of :data:`FEATURES`.
``metadata`` is a JSON-encoded dict (a string), so that every source, whatever extra fields it
carries, fits the same Arrow schema and the same Parquet files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import datasets

FLAGS = ("Q", "R", "A", "U", "E")
"""Annotator flags: problem with the Question / Reference / rAtionale, Unable to judge, lacks Expertise."""

STAGES = ("s1", "s2", "s3")
"""s1 synthetic, s2 benchmark (machine raters), s3 human ratings."""

RATING_MIN, RATING_MAX = 1, 5

FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "benchmark": datasets.Value("string"),
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        # First item is the canonical answer; further items are accepted aliases.
        "reference": datasets.List(datasets.Value("string")),
        "rationale": datasets.Value("string"),
        "transcript": datasets.Value("string"),
        "candidate": datasets.Value("string"),
        "answerer": datasets.Value("string"),
        "modality": datasets.Value("string"),
        "category": datasets.Value("string"),
        "ratings": datasets.List(datasets.Value("int64")),
        "rater_ids": datasets.List(datasets.Value("string")),
        "flags": datasets.List(datasets.Value("string")),
        "stage": datasets.Value("string"),
        "source": datasets.Value("string"),
        "metadata": datasets.Value("string"),
    }
)

FIELDS = tuple(FEATURES)
REQUIRED = ("id", "question", "reference", "candidate")
_STR_FIELDS = ("id", "benchmark", "question_id", "question", "rationale", "transcript", "candidate",
               "answerer", "modality", "category", "stage", "source")
_DEFAULTS = {
    "benchmark": "", "question_id": "", "rationale": "", "transcript": "", "answerer": "unknown",
    "modality": "", "category": "", "ratings": [], "rater_ids": [], "flags": [], "stage": "s3",
    "source": "", "metadata": "{}",
}
# Names other releases use for our fields. The ORCA release writes `transcription`.
_ALIASES = {"transcription": "transcript", "model": "answerer"}


class RecordError(ValueError):
    """A record that does not fit the schema; the message names file, line and field."""

    def __init__(self, field: str, problem: str, *, path=None, line=None):
        self.path, self.line, self.field, self.problem = path, line, field, problem
        super().__init__(f"{path if path is not None else '<record>'}:{line if line is not None else '-'}: "
                         f"field '{field}': {problem}")


# Values nested deeper are refused (the JSONL reader, metadata): every later step that walks a value (json.dumps
# of metadata or of an output line, copying, comparing) recurses, and 1,000 levels crash it with RecursionError.
MAX_DEPTH = 100


def too_deep(value, text: str | None = None) -> bool:
    """Whether a parsed JSON value nests lists and objects more than `MAX_DEPTH` levels deep (without recursion).
    `text`, the JSON it was parsed from, skips the walk when it holds too few brackets to be that deep."""
    if text is not None and text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


def _is_int(x) -> bool:
    # bool is a subclass of int, but True is not a rating.
    return isinstance(x, int) and not isinstance(x, bool)


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8 (a lone surrogate from a JSON escape such as ``"\\ud800"``), or None.
    Such a string passes ``json.loads`` but breaks the tokenizer and every UTF-8 writer downstream."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not valid Unicode (lone surrogate at character {e.start})"
    return None


def _str_list(value, field, err) -> list[str]:
    if not isinstance(value, list | tuple):
        raise err(field, f"expected a list of strings, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise err(field, f"item {i} is {type(item).__name__}, expected str")
        if problem := unicode_problem(item):
            raise err(field, f"item {i}: {problem}")
    return list(value)


def validate_record(obj, *, path=None, line=None) -> dict:
    """Check ``obj`` and return it normalised to the schema (a new dict; ``obj`` is not modified).

    Accepts both the project schema and the ORCA release format (``id, question, reference,
    candidate, rationale, ratings`` and optionally ``transcription``): a reference string becomes a
    one-item list, ``transcription`` becomes ``transcript``, keys outside the schema move into
    ``metadata``. Raises :class:`RecordError` naming ``path:line`` and the field.
    """

    def err(field, problem):
        return RecordError(field, problem, path=path, line=line)

    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {type(obj).__name__}")
    extra: dict = {}
    rec: dict = {}
    for key, value in obj.items():
        if key in FIELDS:
            rec[key] = value
        elif key in _ALIASES and _ALIASES[key] not in obj:
            rec[_ALIASES[key]] = value
        else:
            extra[key] = value  # kept, never silently dropped
    for field in REQUIRED:
        if field not in rec or rec[field] is None:
            raise err(field, "missing required field")

    for field in _STR_FIELDS:
        if field in rec:
            if rec[field] is None and field not in REQUIRED:
                rec[field] = _DEFAULTS.get(field, "")
            elif not isinstance(rec[field], str):
                raise err(field, f"expected str, got {type(rec[field]).__name__}")
            elif problem := unicode_problem(rec[field]):
                raise err(field, problem)
    if rec["id"] == "":
        raise err("id", "empty id")

    ref = rec["reference"]
    ref = [ref] if isinstance(ref, str) else _str_list(ref, "reference", err)
    if not ref or not ref[0].strip():
        raise err("reference", "empty reference")
    rec["reference"] = ref

    rec["ratings"] = _ratings(rec.get("ratings"), err)

    for field in ("rater_ids", "flags"):
        value = rec.get(field)
        rec[field] = [] if value is None else _str_list(value, field, err)
    if rec["rater_ids"] and len(rec["rater_ids"]) != len(rec["ratings"]):
        raise err("rater_ids", f"{len(rec['rater_ids'])} rater ids for {len(rec['ratings'])} ratings")
    for f in rec["flags"]:
        if f not in FLAGS:
            raise err("flags", f"unknown flag {f!r}; allowed: {', '.join(FLAGS)}")

    if rec.get("stage") not in (None, *STAGES):
        raise err("stage", f"unknown stage {rec['stage']!r}; allowed: {', '.join(STAGES)}")

    rec["metadata"] = _metadata_json(rec.get("metadata"), extra, err)
    out = {f: rec[f] if f in rec else _copy_default(f) for f in FIELDS}
    if not out["question_id"]:
        out["question_id"] = out["id"]
    return out


def _ratings(ratings, err) -> list[int]:
    """A record's ratings checked: a new list of integers in RATING_MIN..RATING_MAX (4.0 read as 4)."""
    ratings = [] if ratings is None else ratings
    if not isinstance(ratings, list | tuple):
        raise err("ratings", f"expected a list of integers 1-5, got {type(ratings).__name__}")
    ratings = list(ratings)  # a copy: the caller's list is not modified, and a tuple is accepted
    for i, given in enumerate(ratings):
        r = given
        if not _is_int(r):
            # 4.0 from a float-writing tool is accepted; 4.5 or "4" or true are not.
            if isinstance(r, float) and r.is_integer():
                r = int(r)
            else:
                raise err("ratings", f"item {i} is {_shown(given)}: ratings must be integers {RATING_MIN}-{RATING_MAX}")
        if not RATING_MIN <= r <= RATING_MAX:  # named as given: 1e300, not its 301 digits
            raise err("ratings", f"item {i} is {_shown(given)}: outside {RATING_MIN}-{RATING_MAX}")
        ratings[i] = r
    return ratings


def _metadata_json(meta, extra: dict, err) -> str:
    """The record's metadata (a dict or its JSON encoding) with the keys outside the schema (`extra`) merged in, as
    strict JSON; deep nesting, NaN, Infinity and lone surrogates are refused naming the key."""
    if meta is None or meta == "":
        meta = {}
    elif isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError as e:
            raise err("metadata", f"not valid JSON: {e.msg}") from None
        except (ValueError, RecursionError):  # a 4,301-digit integer; 1,000 levels of nesting
            raise err("metadata", f"not valid JSON: a number too long or nesting deeper than {MAX_DEPTH} levels") from None
    if not isinstance(meta, dict):
        raise err("metadata", f"expected a dict (or its JSON encoding), got {type(meta).__name__}")
    meta = {**meta, **extra}
    try:  # NaN and Infinity parse (Python's json accepts them) but are not JSON: strict readers of the output fail
        text = json.dumps(meta, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (ValueError, RecursionError):  # RecursionError: a Python caller's value nested about 1,000 deep
        text = None
    if text is None or too_deep(meta, text):
        _raise_for_metadata_key(meta, extra, err)
    if problem := unicode_problem(text):  # an extra key's value, or a metadata string, with a surrogate
        raise err("metadata", f"{problem} (in metadata or in a key outside the schema)")
    return text


def _raise_for_metadata_key(meta: dict, extra: dict, err) -> None:
    """The RecordError for the first metadata value that is nested too deeply or holds NaN or Infinity, naming an
    input key outside the schema as itself (the slow path: only for a record that has such a value)."""
    for key, value in meta.items():
        where = key if key in extra else "metadata"
        if isinstance(value, dict | list) and too_deep([value]):  # [value]: as deep as it sits in metadata
            raise err(where, f"nested deeper than {MAX_DEPTH} levels")
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            raise err(where, "NaN or Infinity is not valid JSON (write null or a number)") from None
    raise err("metadata", f"nested deeper than {MAX_DEPTH} levels")  # no one value is, but all of it is


def _shown(value, limit: int = 40) -> str:
    if _is_int(value) and abs(value) >= 10**limit:  # str() of a 5,000-digit int raises
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _copy_default(field):
    d = _DEFAULTS[field]
    return list(d) if isinstance(d, list) else d


def make_record(**fields) -> dict:
    """Build a valid record from keyword fields, filling defaults (``metadata`` may be a dict)."""
    return validate_record(fields)


def rating_histogram(ratings: Sequence[int]) -> list[int]:
    """Counts of ratings 1..5 (index 0 is rating 1)."""
    h = [0] * (RATING_MAX - RATING_MIN + 1)
    for r in ratings:
        h[r - RATING_MIN] += 1
    return h
