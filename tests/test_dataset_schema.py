import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orca_io.schema import FEATURES, FIELDS, FLAGS, RecordError, make_record, validate_record

RELEASE = {"id": "x1", "question": "Q?", "reference": "dog", "candidate": "a dog", "rationale": "barks",
           "ratings": [4, 5, 5]}


def test_release_format_is_normalised():
    rec = validate_record({**RELEASE, "transcription": "woof", "annotator_batch": 7})
    assert rec["reference"] == ["dog"]
    assert rec["transcript"] == "woof"
    assert json.loads(rec["metadata"]) == {"annotator_batch": 7}
    assert set(rec) == set(FIELDS) == set(FEATURES)
    assert rec["question_id"] == "x1" and rec["flags"] == [] and rec["rater_ids"] == []


def test_project_schema_round_trips_unchanged():
    rec = make_record(**{**RELEASE, "reference": ["dog", "hound"]}, metadata={"k": 1}, flags=list(FLAGS), stage="s2")
    assert validate_record(rec) == rec
    assert rec["flags"] == list(FLAGS)


@pytest.mark.parametrize("bad, field, words", [
    ({"question": None}, "question", "missing"),
    ({"candidate": 3}, "candidate", "expected str"),
    ({"reference": []}, "reference", "empty"),
    ({"reference": ["a", 2]}, "reference", "item 1"),
    ({"ratings": [4, 6]}, "ratings", "outside"),
    ({"ratings": [0]}, "ratings", "outside"),
    ({"ratings": [True]}, "ratings", "integers"),
    ({"ratings": [3.5]}, "ratings", "integers"),
    ({"ratings": ["4"]}, "ratings", "integers"),
    ({"ratings": 4}, "ratings", "list"),
    ({"flags": ["X"]}, "flags", "unknown flag"),
    ({"flags": "Q"}, "flags", "list"),
    ({"stage": "s4"}, "stage", "unknown stage"),
    ({"rater_ids": ["a"]}, "rater_ids", "rater ids"),
    ({"metadata": "{oops"}, "metadata", "JSON"),
])
def test_errors_name_path_line_and_field(bad, field, words):
    with pytest.raises(RecordError) as e:
        validate_record({**RELEASE, **bad}, path="f.jsonl", line=7)
    assert str(e.value).startswith(f"f.jsonl:7: field '{field}': ")
    assert words in str(e.value)
    assert e.value.field == field


def test_missing_required_field():
    obj = dict(RELEASE)
    del obj["reference"]
    with pytest.raises(RecordError, match="field 'reference': missing"):
        validate_record(obj)


def test_integral_float_rating_is_accepted():
    assert validate_record({**RELEASE, "ratings": [4.0, 2]})["ratings"] == [4, 2]


@settings(max_examples=60, deadline=None)
@given(ratings=st.lists(st.integers(-3, 9), max_size=6), flags=st.lists(st.sampled_from("QRAUEXY"), max_size=3),
       ref=st.one_of(st.text(min_size=1), st.lists(st.text(min_size=1), min_size=1, max_size=4)),
       extra=st.dictionaries(st.sampled_from(["batch", "model_name", "note"]), st.integers(), max_size=2))
def test_validate_is_idempotent_and_rejects_exactly_the_bad_values(ratings, flags, ref, extra):
    obj = {**RELEASE, "ratings": ratings, "flags": flags, "reference": ref, **extra}
    first = ref if isinstance(ref, str) else ref[0]
    bad = (any(not 1 <= r <= 5 for r in ratings) or any(f not in FLAGS for f in flags) or not first.strip())
    if bad:
        with pytest.raises(RecordError):
            validate_record(obj)
        return
    rec = validate_record(obj)
    assert validate_record(rec) == rec
    assert json.loads(rec["metadata"]) == extra
    assert rec["reference"] == ([ref] if isinstance(ref, str) else ref)
