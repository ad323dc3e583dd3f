"""Property-based tests (hypothesis) of the input side (GitHub issue 9): the record schema and the JSONL readers
(valid records round-trip, any type mutation is an error naming its field, arbitrary bytes never crash a reader
and every line is accounted for), and the model's input formatter (never raises on valid strings, candidate last,
labels of the used fields in order, deterministic, bounded joining of reference aliases)."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from configuration_orca import OrcaConfig
from eval_suite.leaderboard.data import SubmissionError, read_submission
from eval_suite.scoring import cli, scorer
from orca_io.jsonl import read_records
from orca_io.schema import _STR_FIELDS, FLAGS, REQUIRED, STAGES, RecordError, validate_record
from processing_orca import format_input, input_fields, reference_list

SETTINGS = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])

text = st.text(max_size=40)  # any Unicode scalar values (hypothesis leaves out lone surrogates)
nonblank = text.filter(lambda s: s.strip() != "")
json_scalar = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | text
json_value = st.recursive(json_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                          max_leaves=6)


@st.composite
def valid_records(draw, rid: str | None = None) -> dict:
    """A record in the normalised form `validate_record` returns (so validating it again changes nothing)."""
    ratings = draw(st.lists(st.integers(1, 5), max_size=6))
    rec = {f: draw(text) for f in _STR_FIELDS}
    rec.update(
        id=rid if rid is not None else draw(st.text(min_size=1, max_size=20)),
        reference=[draw(nonblank), *draw(st.lists(text, max_size=4))],
        ratings=ratings,
        rater_ids=draw(st.just([]) | st.lists(text, min_size=len(ratings), max_size=len(ratings))),
        flags=draw(st.lists(st.sampled_from(FLAGS), max_size=3)),
        stage=draw(st.sampled_from(STAGES)),
        metadata=json.dumps(draw(st.dictionaries(text, json_value, max_size=3)), ensure_ascii=False, sort_keys=True),
    )
    if not rec["question_id"]:
        rec["question_id"] = rec["id"]
    return rec


def write_jsonl(folder: Path, name: str, lines: list[bytes]) -> Path:
    path = folder / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


# ------------------------------------------------------------------------------------------------ schema + readers


@SETTINGS
@given(st.lists(valid_records(), min_size=1, max_size=6, unique_by=lambda r: r["id"]), st.booleans())
def test_valid_records_round_trip_through_jsonl(records, ascii_only):
    for rec in records:
        assert validate_record(copy.deepcopy(rec)) == rec
    with tempfile.TemporaryDirectory() as d:
        path = write_jsonl(Path(d), "records.jsonl",
                           [json.dumps(r, ensure_ascii=ascii_only).encode("utf-8") for r in records])
        for on_error in ("raise", "skip"):
            result = read_records(path, on_error=on_error)
            assert result.records == records
            assert not result.skipped


# A wrong value for each field: (field, strategy of values that must be rejected naming that field)
def _not(*types):
    return json_value.filter(lambda v: not isinstance(v, types))


MUTATIONS = [
    *[(f, _not(str, type(None))) for f in _STR_FIELDS],  # None is "use the default" for the optional ones
    *[(f, st.none()) for f in REQUIRED],
    ("id", st.just("")),
    ("reference", _not(str, list, type(None))),
    ("reference", st.lists(_not(str), min_size=1, max_size=3)),
    ("reference", st.lists(text.filter(lambda s: not s.strip()), min_size=1, max_size=3)),  # blank first alias
    ("ratings", _not(list, type(None))),
    ("ratings", st.lists(st.integers().filter(lambda r: not 1 <= r <= 5), min_size=1, max_size=3)),
    ("ratings", st.lists(st.floats().filter(lambda r: not r.is_integer()) | st.booleans() | text | st.none(),
                         min_size=1, max_size=3)),
    ("rater_ids", _not(list, type(None))),
    ("rater_ids", st.lists(_not(str), min_size=1, max_size=3)),
    ("flags", st.lists(text.filter(lambda s: s not in FLAGS), min_size=1, max_size=3)),
    ("stage", text.filter(lambda s: s not in STAGES)),
    ("metadata", _not(str, dict, type(None))),
    ("metadata", text.filter(lambda s: s != "" and not _is_json_object(s))),
]


def _is_json_object(s: str) -> bool:
    try:
        return isinstance(json.loads(s), dict)
    except ValueError:
        return False


@st.composite
def mutated_records(draw):
    field, values = draw(st.sampled_from(MUTATIONS))
    rec = draw(valid_records(rid="m-1"))
    if field == "ratings":  # keep rater_ids consistent, so the ratings are what is wrong
        rec["rater_ids"] = []
    bad = draw(values)
    if field == "rater_ids" and isinstance(bad, list):
        rec["ratings"] = [3] * len(bad)
    rec[field] = bad
    return field, rec


@SETTINGS
@given(mutated_records(), st.integers(0, 3))
def test_any_type_mutation_is_an_error_naming_file_line_and_field(mutation, position):
    field, bad = mutation
    with pytest.raises(RecordError) as info:
        validate_record(copy.deepcopy(bad))
    assert info.value.field == field, (field, bad[field], str(info.value))
    # the same line in a file, among valid ones: raise names file, line and field; skip counts it and goes on
    good = [json.dumps({"id": f"g-{i}", "question": "q", "reference": "r", "candidate": "c"}).encode() for i in range(3)]
    lines = good[:position] + [json.dumps(bad).encode()] + good[position:]
    with tempfile.TemporaryDirectory() as d:
        path = write_jsonl(Path(d), "in.jsonl", lines)
        with pytest.raises(RecordError) as info:
            read_records(path)
        assert (info.value.path, info.value.line, info.value.field) == (path, position + 1, field)
        assert f"{path}:{position + 1}: field '{field}': " in str(info.value)
        skipped = read_records(path, on_error="skip")
        assert [r["id"] for r in skipped.records] == ["g-0", "g-1", "g-2"]
        assert dict(skipped.skipped) == {f"bad field '{field}'": 1}


# lines a real file could hold: valid records, mutated ones, broken JSON, stray bytes, blank lines
line_strategy = st.one_of(
    valid_records().map(lambda r: json.dumps(r, ensure_ascii=False).encode("utf-8")),
    mutated_records().map(lambda m: json.dumps(m[1]).encode()),
    valid_records().map(lambda r: json.dumps(r).encode()[: len(json.dumps(r)) // 2]),
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"  ", b"\r", b"null", b"[]", b"{}", b'"x"', b"\xef\xbb\xbf{}", b'{"id": "\\udc00"}']),
)


SURROGATE_LINE = b'{"id": "s", "question": "q", "reference": "r", "candidate": "a \\ud800 b"}'  # valid JSON


@SETTINGS
@given(st.lists(line_strategy, max_size=8))
@example([SURROGATE_LINE, b'{"id": "t", "question": "q", "reference": "r", "candidate": "c"}'])
@example([b"\xef\xbb\xbf" + SURROGATE_LINE, b"\xff\xfe"])
def test_readers_never_crash_and_account_for_every_line(lines):
    with tempfile.TemporaryDirectory() as d:
        path = write_jsonl(Path(d), "fuzz.jsonl", lines)
        try:
            result = read_records(path, on_error="skip")
        except RecordError:
            raise AssertionError("skip mode raised a RecordError") from None
        except ValueError as e:  # only when no line at all is a record
            assert "no valid record" in str(e) or "empty file" in str(e)
        else:
            assert len(result.records) + sum(result.skipped.values()) == len(lines)
            ids = [r["id"] for r in result.records]
            assert len(set(ids)) == len(ids)
            for rec in result.records:
                assert validate_record(copy.deepcopy(rec)) == rec
                json.dumps(rec, ensure_ascii=False).encode("utf-8")  # writable: no lone surrogate got through
        try:
            read_records(path)
        except ValueError:  # RecordError is one: raise mode stops at the first bad line
            pass
        # orca-score's reader: every non-blank line kept, in order, each either a record or an error
        try:
            entries, blank = scorer.read_entries(path, "skip")
        except cli.UsageError as e:
            assert "no record" in str(e)
        else:
            assert len(entries) + blank == len(lines)
            assert [e.line for e in entries] == sorted(e.line for e in entries)
            for entry in entries:
                assert (entry.record is None) != (entry.error is None)
                out = scorer.output_line(entry, {"mean": 3.0, "variance": 1.0, "probs": [0.2] * 5, "score": 0.5})
                json.dumps(out, ensure_ascii=False).encode("utf-8")  # the output line can be written
        # a leaderboard submission of the same bytes: accepted, or a SubmissionError listing file:line problems
        try:
            read_submission(path, ["q1", "q2"])
        except SubmissionError as e:
            assert all(m.startswith(str(path)) for m in e.errors)


# ------------------------------------------------------------------------------------------------ the formatter


CONFIG = OrcaConfig()
optional_text = st.none() | text


@st.composite
def formatter_records(draw) -> dict:
    reference = draw(nonblank) if draw(st.booleans()) else [draw(nonblank), *draw(st.lists(text, max_size=4))]
    rec = {"id": draw(text), "question": draw(text), "reference": reference, "candidate": draw(text)}
    for name in ("rationale", "transcript"):
        value = draw(st.sampled_from(["absent", "none", "text"]))
        if value != "absent":
            rec[name] = None if value == "none" else draw(text)
    if draw(st.booleans()) and "transcript" not in rec:
        rec["transcription"] = draw(text)  # the release's name for it
    return rec


@SETTINGS
@given(formatter_records(), st.sampled_from([
    CONFIG,
    OrcaConfig(template_fields=["reference", "candidate"]),
    OrcaConfig(skip_empty_fields=False, field_separator=" | ", template_prefix="[ORCA] "),
    OrcaConfig(template_suffix="\nIs the candidate answer correct? Answer:"),
]))
def test_format_input_candidate_last_labels_in_order_deterministic(record, config):
    out = format_input(record, config)
    assert format_input(copy.deepcopy(record), config) == out
    assert format_input(dict(reversed(list(record.items()))), config) == out  # key order does not matter
    labels = config.field_labels
    # the candidate, stripped of surrounding whitespace and otherwise verbatim, ends the input after its label
    # (then the template suffix)
    suffix = config.template_suffix
    assert out.endswith(config.field_separator + labels["candidate"] + record["candidate"].strip() + suffix) or \
        out == config.template_prefix + labels["candidate"] + record["candidate"].strip() + suffix
    assert out.startswith(config.template_prefix)
    fields = input_fields(record, config)
    assert list(fields) == list(config.template_fields)
    assert all(v == v.strip() for v in fields.values())
    # the documented template: prefix, then label + value of every used field in template order, separated
    used = [n for n, v in fields.items() if v or not config.skip_empty_fields or n == "candidate"]
    assert out == config.template_prefix + config.field_separator.join(labels[n] + fields[n] for n in used) + suffix
    for name in ("question", "rationale"):
        value = (record.get(name) or "").strip()
        if name in config.template_fields and (value or not config.skip_empty_fields):
            assert labels[name] + value in out
    if "transcription" in record:
        assert fields.get("transcript", record["transcription"].strip()) == record["transcription"].strip()


@SETTINGS
@given(st.lists(nonblank, min_size=1, max_size=20), st.integers(1, 10), st.integers(1, 400))
def test_reference_aliases_join_at_most_max_joined_references(aliases, max_joined, max_chars):
    config = OrcaConfig(max_joined_references=max_joined, max_reference_chars=max_chars)
    record = {"question": "q", "reference": aliases, "candidate": "c"}
    refs = reference_list(record)
    assert refs == [a.strip() for a in aliases]
    joined = input_fields(record, config)["reference"]
    prefixes = [config.reference_joiner.join(refs[:k]) for k in range(1, min(len(refs), max_joined) + 1)]
    assert joined in prefixes  # the first aliases, in order, at most max_joined_references of them
    assert len(joined) <= max(max_chars, len(refs[0]))  # the first alias is kept whatever its length
    k = prefixes.index(joined) + 1
    if k < min(len(refs), max_joined):  # stopped early: only because the next alias would pass the budget
        assert len(prefixes[k]) > max_chars
    # a single alias given as a string is the same as a list of one
    assert format_input({**record, "reference": aliases[0]}, config) == format_input({**record, "reference": aliases[:1]}, config)


@SETTINGS
@given(valid_records())
def test_every_valid_record_formats(rec):
    """What the readers accept, the formatter takes: no record that passed validation fails at scoring time."""
    out = format_input(rec, CONFIG)
    assert out.endswith(CONFIG.field_labels["candidate"] + rec["candidate"].strip())
    out.encode("utf-8")  # the tokenizer gets a valid string
