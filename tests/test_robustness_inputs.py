"""Bad input on every entry point (GitHub issue 9): each case of docs/robustness.md, tried on the dataset readers
(`read_records` / `iter_records`), `orca-score` (both `--on-error` modes), `train.py`'s data loading
(`load_stage_data`) and leaderboard submissions, with the exact documented behaviour: an error naming file, line
and field; a counted skip; or accepted (scored, with a warning where the text is over the 1,000-character rule).
Outputs keep every input id, in input order. Also: a large file streamed with bounded memory, and weights read
only from safetensors.

Faults (kill -9 and resume, crash mid-checkpoint, NaN loss, bf16) are in test_robustness_train.py, interrupted
scoring in test_eval_cli.py, hostile names and path traversal of the leaderboard in test_leaderboard.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path

import pytest
from conftest import tiny_llama_orca

from dataset_builder.filters import MAX_CHARS, REASON_LONG, REASON_UNRATED
from eval_suite import leaderboard as lb
from eval_suite.leaderboard.data import SubmissionError, read_submission
from eval_suite.scoring import cli, scorer, sharding
from orca_io.jsonl import iter_records, read_records
from orca_io.schema import RecordError

REPO = Path(__file__).resolve().parents[1]
BOM = b"\xef\xbb\xbf"
LONG = "x" * (MAX_CHARS + 1)
QIDS = [f"q{i:02d}" for i in range(6)]  # the leaderboard fixture benchmark


def record(rid: str, **over) -> dict:
    rec = {"id": rid, "question": "Which animal can be heard?", "reference": "dog", "rationale": "A dog barks.",
           "candidate": "a dog", "ratings": [4, 5]}
    rec.update(over)
    return {k: v for k, v in rec.items() if v is not DROP}


DROP = object()  # record(..., field=DROP) leaves the field out


def dumps(obj) -> bytes:
    return json.dumps(obj).encode()


# ------------------------------------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Case:
    """One bad (or odd) input line. In a case's file it is line 3, between good records K-1, K-2 and K-4."""

    make: Callable[[str], bytes]  # the line (no newline) for the id prefix K
    field: str | None = None  # the field the error names; None: the line is accepted
    words: str = ""  # in the error message
    reason: str | None = None  # skip-mode count (default: "bad field '<field>'")
    train_drop: str | None = None  # accepted, but train.py drops it from the train split under this reason
    has_id: bool = True  # an accepted line: whether K-3 is its id
    stored: dict = dc_field(default_factory=dict)  # accepted: fields of the validated record
    submission: bytes | None = None  # the leaderboard's form of the case (line 3, for question q02); None: n/a
    submission_error: str | None = None  # in the SubmissionError; None: accepted

    @property
    def skip_reason(self) -> str:
        return self.reason or f"bad field '{self.field}'"


CASES = {
    "malformed JSON": Case(
        lambda k: b'{"id": "%s-3", "question": "q", "reference": "dog", "candidate": "a dog"' % k.encode(),
        "<line>", "malformed JSON: Expecting ',' delimiter", reason="malformed JSON",
        submission=b'{"question_id": "q02", "answer": "dog"', submission_error=":3: malformed JSON"),
    "not an object": Case(
        lambda k: dumps([f"{k}-3", "a dog"]), "<record>", "expected a JSON object, got list",
        submission=b'["q02", "dog"]', submission_error=":3: expected an object"),
    "missing candidate": Case(
        lambda k: dumps(record(f"{k}-3", candidate=DROP)), "candidate", "missing required field",
        submission=b'{"question_id": "q02"}', submission_error=":3: 'answer' must be a string, got NoneType"),
    "missing id": Case(
        lambda k: dumps(record(DROP)), "id", "missing required field",
        submission=b'{"answer": "dog"}', submission_error=":3: 'question_id' must be a string, got NoneType"),
    "null reference": Case(lambda k: dumps(record(f"{k}-3", reference=None)), "reference", "missing required field"),
    "wrong type: candidate": Case(
        lambda k: dumps(record(f"{k}-3", candidate=42)), "candidate", "expected str, got int",
        submission=b'{"question_id": "q02", "answer": 42}', submission_error=":3: 'answer' must be a string, got int"),
    "wrong type: id": Case(
        lambda k: dumps(record(3)), "id", "expected str, got int",
        submission=b'{"question_id": 2, "answer": "dog"}', submission_error=":3: 'question_id' must be a string, got int"),
    "wrong type: reference": Case(
        lambda k: dumps(record(f"{k}-3", reference={"a": 1})), "reference", "expected a list of strings, got dict"),
    "empty reference": Case(lambda k: dumps(record(f"{k}-3", reference=[" "])), "reference", "empty reference"),
    "empty id": Case(lambda k: dumps(record("")), "id", "empty id"),
    "empty candidate": Case(
        lambda k: dumps(record(f"{k}-3", candidate="")), stored={"candidate": ""},
        submission=b'{"question_id": "q02", "answer": ""}'),
    "blank candidate": Case(
        lambda k: dumps(record(f"{k}-3", candidate="  \t ")), stored={"candidate": "  \t "},
        submission=b'{"question_id": "q02", "answer": "  \\t "}'),
    "rating outside 1-5": Case(
        lambda k: dumps(record(f"{k}-3", ratings=[3, 6])), "ratings", "item 1 is 6: outside 1-5"),
    "rating 0": Case(lambda k: dumps(record(f"{k}-3", ratings=[0])), "ratings", "item 0 is 0: outside 1-5"),
    "rating not an integer": Case(
        lambda k: dumps(record(f"{k}-3", ratings=[4.5])), "ratings", "item 0 is 4.5: ratings must be integers 1-5"),
    "rating a string": Case(
        lambda k: dumps(record(f"{k}-3", ratings=["4"])), "ratings", "item 0 is '4': ratings must be integers"),
    "rating a bool": Case(
        lambda k: dumps(record(f"{k}-3", ratings=[True])), "ratings", "item 0 is True: ratings must be integers"),
    "ratings not a list": Case(
        lambda k: dumps(record(f"{k}-3", ratings=4)), "ratings", "expected a list of integers 1-5, got int"),
    "rating 4.0": Case(lambda k: dumps(record(f"{k}-3", ratings=[4.0, 2])), stored={"ratings": [4, 2]}),
    "ratings empty": Case(
        lambda k: dumps(record(f"{k}-3", ratings=[])), stored={"ratings": []}, train_drop=REASON_UNRATED),
    "ratings null": Case(
        lambda k: dumps(record(f"{k}-3", ratings=None)), stored={"ratings": []}, train_drop=REASON_UNRATED),
    "text over 1,000 characters": Case(
        lambda k: dumps(record(f"{k}-3", candidate=LONG)), stored={"candidate": LONG}, train_drop=REASON_LONG,
        submission=dumps({"question_id": "q02", "answer": LONG})),
    "not UTF-8": Case(
        lambda k: b'{"id": "%s-3", "question": "q", "reference": "dog", "candidate": "caf\xe9"}' % k.encode(),
        "<line>", "not UTF-8 (byte ", reason="not UTF-8",
        submission=b'{"question_id": "q02", "answer": "caf\xe9"}', submission_error=":3: not UTF-8 (byte "),
    "lone surrogate": Case(
        lambda k: b'{"id": "%s-3", "question": "q", "reference": "dog", "candidate": "a \\ud800 dog"}' % k.encode(),
        "candidate", "not valid Unicode (lone surrogate at character 2)",
        submission=b'{"question_id": "q02", "answer": "a \\ud800 dog"}', submission_error=":3: 'answer' is not valid Unicode"),
    "duplicate id": Case(
        lambda k: dumps(record(f"{k}-1", candidate="a cat")), "id", "duplicate id '{k}-1' (first on line {first})",
        reason="duplicate id",
        submission=b'{"question_id": "q00", "answer": "cat"}', submission_error=":3: duplicate question_id 'q00' (first on line 1)"),
    "blank line": Case(lambda k: b"   ", has_id=False, submission=b"  "),
}
ERRORS = sorted(k for k, c in CASES.items() if c.field)
ACCEPTED = sorted(k for k, c in CASES.items() if not c.field)


def slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def case_lines(name: str) -> list[bytes]:
    k = slug(name)
    return [dumps(record(f"{k}-1")), dumps(record(f"{k}-2")), CASES[name].make(k), dumps(record(f"{k}-4"))]


def write_case(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{slug(name)}.jsonl"
    path.write_bytes(b"\n".join(case_lines(name)) + b"\n")
    return path


def expected_ids(name: str, *, train: bool = False) -> list[str]:
    """The ids a reader (or train's train split) returns for a case's file, in order."""
    k, case = slug(name), CASES[name]
    keep_3 = case.field is None and case.has_id and not (train and case.train_drop)
    return [f"{k}-1", f"{k}-2", *([f"{k}-3"] if keep_3 else []), f"{k}-4"]


def error_text(name: str, path: Path, line: int = 3) -> str:
    case = CASES[name]
    # the case's line is 2 lines after the case's first good record, the one a duplicate id repeats
    return f"{path}:{line}: field '{case.field}': {case.words.format(k=slug(name), first=line - 2)}"


# ------------------------------------------------------------------------------------------------ readers


@pytest.mark.parametrize("name", ERRORS)
def test_reader_raise_names_file_line_and_field(tmp_path, name):
    path = write_case(tmp_path, name)
    with pytest.raises(RecordError) as info:
        read_records(path)
    err = info.value
    assert (Path(err.path), err.line, err.field) == (path, 3, CASES[name].field)
    assert error_text(name, path) in str(err)


@pytest.mark.parametrize("name", ERRORS)
def test_reader_skip_counts_the_line_and_keeps_the_rest_in_order(tmp_path, name):
    path = write_case(tmp_path, name)
    result = read_records(path, on_error="skip")
    assert [r["id"] for r in result.records] == expected_ids(name)
    assert dict(result.skipped) == {CASES[name].skip_reason: 1}
    # the streaming reader: same records, same counts
    skipped = type(result.skipped)()
    assert list(iter_records(path, on_error="skip", skipped=skipped)) == result.records
    assert skipped == result.skipped


@pytest.mark.parametrize("name", ACCEPTED)
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_reader_accepts(tmp_path, name, on_error):
    path = write_case(tmp_path, name)
    result = read_records(path, on_error=on_error)
    assert [r["id"] for r in result.records] == expected_ids(name)
    assert dict(result.skipped) == ({"blank line": 1} if name == "blank line" else {})
    if CASES[name].has_id:
        got = result.records[2]
        assert {k: got[k] for k in CASES[name].stored} == CASES[name].stored


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_reader_file_level_cases(tmp_path, on_error):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.jsonl: empty file; expected one JSON record per line"):
        read_records(empty, on_error=on_error)
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n  \n\r\n")
    with pytest.raises(ValueError, match=r"blank\.jsonl: no valid record in 3 lines \(\{'blank line': 3\}\)"):
        read_records(blank, on_error=on_error)
    # a byte order mark (Windows editors) is accepted
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(BOM + dumps(record("b-1")) + b"\r\n" + dumps(record("b-2")) + b"\r\n")
    assert [r["id"] for r in read_records(bom, on_error=on_error).records] == ["b-1", "b-2"]


def test_reader_every_line_bad_is_an_error_in_skip_mode_too(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"{\n" + dumps(record("a", ratings=[9])) + b"\n")
    with pytest.raises(ValueError, match=r"no valid record in 2 lines \(\{'malformed JSON': 1, \"bad field 'ratings'\": 1\}\)"):
        read_records(path, on_error="skip")


def test_validate_record_does_not_modify_its_input_and_accepts_tuples():
    from orca_io.schema import validate_record

    ratings = [4.0, 2]
    obj = record("a", ratings=ratings)
    assert validate_record(obj)["ratings"] == [4, 2]
    assert ratings == [4.0, 2] and type(ratings[0]) is float  # the caller's list is left as it was
    assert validate_record(record("b", ratings=(5.0, 1)))["ratings"] == [5, 1]  # a tuple, e.g. from code


def test_lone_surrogate_in_an_extra_key_is_named():
    from orca_io.schema import validate_record

    with pytest.raises(RecordError, match=r"field 'metadata': not valid Unicode .* in a key outside the schema"):
        validate_record(json.loads('{"id": "a", "question": "q", "reference": "r", "candidate": "c", "note": "\\udfff"}'))
    with pytest.raises(RecordError, match=r"field 'reference': item 1: not valid Unicode"):
        validate_record(json.loads('{"id": "a", "question": "q", "reference": ["r", "\\ud83d"], "candidate": "c"}'))
    # a proper surrogate pair is one valid character
    rec = validate_record(json.loads('{"id": "a", "question": "q", "reference": "r", "candidate": "\\ud83d\\udc36"}'))
    assert rec["candidate"] == "\U0001f436"


# ------------------------------------------------------------------------------------------------ train.py


def train_files(tmp_path: Path, train: Path | None = None) -> dict:
    """A `files:` stage: `train` as given (a good file when None), good validation and test files."""
    files = {}
    if train is None:
        train = tmp_path / "good-train.jsonl"
        train.write_bytes(b"".join(dumps(record(f"train-{i}")) + b"\n" for i in range(3)))
    for split in ("validation", "test"):
        files[split] = tmp_path / f"good-{split}.jsonl"
        files[split].write_bytes(b"".join(dumps(record(f"{split}-{i}")) + b"\n" for i in range(3)))
    return {"files": {"train": str(train), **{k: str(v) for k, v in files.items()}}}


@pytest.mark.parametrize("name", ERRORS)
def test_train_loading_stops_on_a_bad_line_naming_file_line_and_field(tmp_path, name):
    from training.data import load_stage_data

    path = write_case(tmp_path, name)
    with pytest.raises(RecordError) as info:
        load_stage_data(train_files(tmp_path, path), {})
    assert error_text(name, path) in str(info.value)


@pytest.mark.parametrize("name", ACCEPTED)
def test_train_loading_keeps_or_drops_and_counts(tmp_path, name, caplog):
    from training.data import load_stage_data

    path = write_case(tmp_path, name)
    with caplog.at_level(logging.WARNING, logger="orca.train"):
        data = load_stage_data(train_files(tmp_path, path), {})
    assert [r["id"] for r in data["train"]] == expected_ids(name, train=True)
    dropped = [r.getMessage() for r in caplog.records if r.getMessage().startswith(str(path))]
    reason = CASES[name].train_drop
    assert dropped == ([f"{path}: dropped {{{reason!r}: 1}}"] if reason else [])


def test_train_loading_drops_over_long_texts_from_every_split(tmp_path):
    from training.data import load_stage_data

    long_dev = tmp_path / "dev.jsonl"
    long_dev.write_bytes(dumps(record("d-1")) + b"\n" + dumps(record("d-2", question=LONG)) + b"\n")
    stage = train_files(tmp_path)
    stage["files"]["validation"] = str(long_dev)
    assert [r["id"] for r in load_stage_data(stage, {})["validation"]] == ["d-1"]


def test_train_unrated_dev_records_do_not_crash_evaluation(tmp_path):
    from eval_suite.metrics import compute_metrics
    from training.data import load_stage_data

    dev = tmp_path / "dev.jsonl"
    dev.write_bytes(dumps(record("d-1")) + b"\n" + dumps(record("d-2", ratings=[])) + b"\n" + dumps(record("d-3", ratings=[2])) + b"\n")
    stage = train_files(tmp_path)
    stage["files"]["validation"] = str(dev)
    records = load_stage_data(stage, {})["validation"]
    assert [r["id"] for r in records] == ["d-1", "d-3"]  # the unrated one is filtered (and logged), not scored
    # what eval_suite.report.final_eval.evaluate_records does with the dev split
    compute_metrics([3.0] * len(records), human_ratings=[r["ratings"] for r in records])


def test_train_loading_of_an_empty_file_is_an_error(tmp_path):
    from training.data import load_stage_data

    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty file"):
        load_stage_data(train_files(tmp_path, empty), {})


# ------------------------------------------------------------------------------------------------ orca-score


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random llama ORCA saved as a folder (safetensors), loadable by orca-score."""
    model, tokenizer = tiny_llama_orca(max_length=64)
    folder = tmp_path_factory.mktemp("model") / "orca-tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_score(model_dir: Path, inp: Path, out: Path, *extra) -> tuple[int, str]:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            code = cli.main(["--model", str(model_dir), "--input", str(inp), "--output", str(out),
                             "--summary", str(out.with_suffix(".summary.json")), "--no-progress", *extra])
        except SystemExit as e:
            code = e.code
    return code, stderr.getvalue()


@pytest.mark.parametrize("name", ERRORS)
def test_score_raise_exits_2_naming_file_line_and_field_and_writes_nothing(tmp_path, name):
    path = write_case(tmp_path, name)
    out = tmp_path / "out.jsonl"
    # the input is checked before the model loads: a folder that does not exist is never reached
    code, err = run_score(tmp_path / "no-model-here", path, out)
    assert code == cli.EXIT_INVALID
    assert f"error: {error_text(name, path)}" in err
    assert "--on-error skip" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no output, partial or summary file


@pytest.mark.parametrize("content", [b"", b"\n \n"], ids=["empty", "blank lines"])
def test_score_empty_file_exits_2(tmp_path, content):
    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    code, err = run_score(tmp_path / "no-model-here", path, tmp_path / "out.jsonl", "--on-error", "skip")
    assert code == cli.EXIT_INVALID
    assert f"error: {path}: no record (empty file or only blank lines)" in err


@pytest.fixture(scope="module")
def scored_all(model_dir, tmp_path_factory):
    """Every case in one input file (a byte order mark first), scored once with --on-error skip."""
    folder = tmp_path_factory.mktemp("score")
    inp, out = folder / "all.jsonl", folder / "all.scored.jsonl"
    lines, where = [], {}
    for name in CASES:
        where[name] = len(lines) + 3  # the case's line number in this file
        lines += case_lines(name)
    inp.write_bytes(BOM + b"\n".join(lines) + b"\n")
    code, err = run_score(model_dir, inp, out, "--on-error", "skip")
    assert code == 0, err
    output = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    return {"input": inp, "lines": lines, "where": where, "output": output, "summary": summary, "stderr": err}


def test_score_skip_keeps_every_line_in_input_order(scored_all):
    keys = []
    for lineno, raw in enumerate(scored_all["lines"], start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except ValueError:
            obj = None
        bad = any(scored_all["where"][n] == lineno for n in ERRORS)
        keys.append(("line", lineno) if bad else ("id", obj["id"]))
    assert [sharding.output_key(o) for o in scored_all["output"]] == keys
    counts = scored_all["summary"]["counts"]
    assert counts["errors"] == len(ERRORS) and counts["blank_lines"] == 1
    assert counts["records"] == len(keys) == counts["scored"] + counts["errors"]
    assert [e["line"] for e in scored_all["summary"]["errors"]] == sorted(scored_all["where"][n] for n in ERRORS)


@pytest.mark.parametrize("name", ERRORS)
def test_score_skip_writes_the_bad_line_in_place_with_orca_error(scored_all, name):
    lineno = scored_all["where"][name]
    (line,) = [o for o in scored_all["output"] if o.get("orca_line") == lineno]
    assert error_text(name, scored_all["input"], lineno) in line["orca_error"]
    assert all(line[f] is None for f in scorer.SCORE_FIELDS)
    raw = scored_all["lines"][lineno - 1]
    if CASES[name].field in ("<line>", "<record>") or name == "lone surrogate":
        # not an object (or one that cannot be written as UTF-8): its text is kept instead
        assert line["orca_input"] == raw.decode("utf-8", errors="replace")
    else:
        assert {k: line[k] for k in json.loads(raw)} == json.loads(raw)  # every input key, as given


@pytest.mark.parametrize("name", [n for n in ACCEPTED if CASES[n].has_id])
def test_score_accepts_and_scores(scored_all, name):
    (line,) = [o for o in scored_all["output"] if o.get("id") == f"{slug(name)}-3"]
    assert line["orca_error"] is None
    assert 1.0 <= line["orca_mean"] <= 5.0 and abs(sum(line["orca_probs"]) - 1) < 1e-4
    assert {k: line[k] for k in json.loads(CASES[name].make(slug(name)))} == json.loads(CASES[name].make(slug(name)))


def test_score_warns_about_texts_over_the_1000_character_rule(scored_all):
    lineno = scored_all["where"]["text over 1,000 characters"]
    assert scored_all["summary"]["counts"]["over_max_chars"] == 1
    assert (f"warning: 1 record(s) with a text over {MAX_CHARS} characters (lines {lineno}): scored, but training "
            "drops such records and the model cuts its input to 64 tokens") in scored_all["stderr"]


def test_score_refuses_pickle_weights(model_dir, tmp_path):
    """Weights are read from safetensors only: a folder with only a pickle `.bin` is refused, never unpickled."""
    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(model_dir, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(dumps(record("a")) + b"\n")
    code, err = run_score(folder, inp, tmp_path / "out.jsonl")
    assert code == cli.EXIT_INVALID
    assert f"error: --model {folder}:" in err and "model.safetensors" in err


# ------------------------------------------------------------------------------------------------ leaderboard


@pytest.fixture
def known_ids():
    return list(QIDS)


def submission_lines(name: str) -> list[bytes]:
    good = [dumps({"question_id": q, "answer": "dog"}) for q in ("q00", "q01", "q03")]
    return [good[0], good[1], CASES[name].submission, good[2]]


LB_CASES = sorted(k for k, c in CASES.items() if c.submission is not None)


@pytest.mark.parametrize("name", LB_CASES)
def test_leaderboard_submission(tmp_path, known_ids, name):
    path = tmp_path / "sub.jsonl"
    path.write_bytes(b"\n".join(submission_lines(name)) + b"\n")
    case = CASES[name]
    if case.submission_error:
        with pytest.raises(SubmissionError) as info:
            read_submission(path, known_ids, benchmark="mmau-test-mini")
        assert info.value.errors == [m for m in info.value.errors if m.startswith(f"{path}:")]
        assert any(case.submission_error in m for m in info.value.errors), info.value.errors
        assert len(info.value.errors) == 1
    else:
        sub = read_submission(path, known_ids, benchmark="mmau-test-mini")
        want = {"q00": "dog", "q01": "dog", "q03": "dog"}
        if name != "blank line":
            want["q02"] = json.loads(case.submission)["answer"]  # kept exactly, empty or long
        assert sub.answers == want


def test_leaderboard_file_level_cases(tmp_path, known_ids):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(SubmissionError, match=r"empty\.jsonl: no answers"):
        read_submission(empty, known_ids)
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(BOM + dumps({"question_id": "q00", "answer": "dog"}) + b"\r\n")
    assert read_submission(bom, known_ids).answers == {"q00": "dog"}
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * 101)
    with pytest.raises(SubmissionError, match=r"big\.jsonl: 101 bytes, over the limit of 100 bytes"):
        read_submission(big, known_ids, max_bytes=100)


class FixedJudge:
    """A stand-in judge with an ORCA config: the mean is 5 for the exact reference, else 1."""

    class config:  # noqa: N801 - mimics model.config
        rating_min, rating_max, score_type, max_chars = 1, 5, "multinomial", MAX_CHARS

    def predict(self, records, tokenizer, *, max_batch_tokens=None, show_progress=False, clamp_threshold=None):
        return [{"mean": 5.0 if r["candidate"] == r["reference"][0] else 1.0, "variance": 0.5, "probs": None,
                 "score": 0.0} for r in records]


def test_leaderboard_scores_empty_and_long_answers_warns_and_keeps_every_question_in_order(tmp_path, monkeypatch, capsys):
    rows = [{"id": q, "question": f"Which animal, clip {i}?", "choices": ["dog", "cat"], "answer": "dog",
             "task": "sound", "category": "Reasoning"} for i, q in enumerate(QIDS)]
    questions = tmp_path / "mmau.json"
    questions.write_text(json.dumps(rows[::-1]))  # benchmark order: q05 .. q00
    sub = tmp_path / "sub.jsonl"
    answers = {"q00": "dog", "q03": "", "q01": LONG, "q04": "dog"}  # q02, q05 missing
    sub.write_bytes(b"".join(dumps({"question_id": q, "answer": a}) + b"\n" for q, a in answers.items()))
    monkeypatch.setattr(lb, "load_model", lambda *a, **k: (FixedJudge(), None))
    out = tmp_path / "board"
    assert lb.main(["--model", "fake", "--benchmark", "mmau-test-mini", "--questions", str(questions),
                    "--submissions", str(sub), "--out", str(out), "--no-progress", "--bootstrap", "50"]) == 0
    err = capsys.readouterr().err
    assert f"warning: 1 answer(s) over {MAX_CHARS} characters (first: 'sub', question 'q01'): scored" in err
    board = json.loads((out / "leaderboard.json").read_text())
    (entry,) = board["entries"]
    assert (entry["n_answered"], entry["n_missing"]) == (4, 2)
    per_question = [json.loads(x) for x in (out / entry["answers_file"]).read_text().splitlines()]
    assert [p["question_id"] for p in per_question] == [r["id"] for r in rows[::-1]]
    assert [p["answer"] for p in per_question] == [answers.get(r["id"]) for r in rows[::-1]]
    assert [p["mean"] for p in per_question] == [5.0 if answers.get(r["id"]) == "dog" else 1.0 for r in rows[::-1]]


def test_leaderboard_refuses_pickle_weights(model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(model_dir, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(cli.UsageError, match="model.safetensors"):
        lb.load_model(str(folder))


# ------------------------------------------------------------------------------------------------ a large file

LARGE_LINES = 200_000


def test_iter_records_streams_a_large_file_with_bounded_memory(tmp_path):
    """200,000 records (~127 MB) through `iter_records` in a fresh process: the resident memory it adds (peak,
    measured from /proc) stays far below the file size; what grows is the set of ids seen (duplicate check),
    not the texts."""
    path = tmp_path / "large.jsonl"
    text = "y" * 500
    with open(path, "wb") as fh:
        for i in range(LARGE_LINES):
            fh.write(dumps(record(f"r{i}", rationale=text)) + b"\n")
    size = path.stat().st_size
    script = textwrap.dedent(f"""
        import json, re
        from orca_io.jsonl import iter_records

        def status(key):
            return int(re.search(key + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024

        open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current resident size
        before = status("VmRSS")
        n, last = 0, None
        for rec in iter_records({str(path)!r}):
            n, last = n + 1, rec["id"]
        print(json.dumps({{"n": n, "last": last, "added": status("VmHWM") - before}}))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert (got["n"], got["last"]) == (LARGE_LINES, f"r{LARGE_LINES - 1}")
    assert size > 100e6
    # measured: ~29 MB (~145 bytes a record: the id and its line number); a list of the records would be ~310 MB
    assert got["added"] < min(size / 3, 250 * LARGE_LINES), (got["added"], size)


def traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def memory_by_text_length(tmp_path: Path, read) -> tuple[float, float]:
    """Peak traced memory of `read(path)` on 4,000 records with a 10- and a 900-character rationale: (bytes per
    extra character of text, bytes per record with short texts)."""
    n, short, long = 4000, 10, 900
    peaks = {}
    for length in (short, long):
        path = tmp_path / f"len{length}.jsonl"
        path.write_bytes(b"".join(dumps(record(f"r{i}", rationale="z" * length)) + b"\n" for i in range(n)))
        peaks[length] = traced_peak(lambda p=path: read(p))
    return (peaks[long] - peaks[short]) / (n * (long - short)), peaks[short] / n


def test_read_records_memory_grows_with_the_records_not_a_multiple_of_the_file(tmp_path):
    """`read_records` returns a list: memory is a per-record overhead plus each text once (ASCII: one byte a
    character), not k x the file; reading a line at a time adds nothing per byte of file."""
    per_char, per_record = memory_by_text_length(tmp_path, read_records)
    assert 0.95 < per_char < 1.2, per_char
    assert per_record < 1500, per_record


def test_score_input_memory_is_documented(tmp_path):
    """orca-score keeps every input line in memory (the output must hold every line in order): the parsed object
    and the validated record, which share their strings; the line's own text only for lines that failed
    validation. docs/robustness.md states what is checked here: each text held once, ~2 kB per line on top."""
    per_char, per_record = memory_by_text_length(tmp_path, lambda p: scorer.read_entries(p, "raise"))
    assert 0.95 < per_char < 1.2, per_char  # 2.0 while every line's text was kept beside the parsed object
    assert per_record < 2500, per_record


def test_train_refuses_an_id_in_two_splits(tmp_path):
    from training.data import DataError, load_stage_data

    same = tmp_path / "same.jsonl"
    same.write_bytes(dumps(record("same")) + b"\n")
    stage = train_files(tmp_path, same)
    stage["files"]["test"] = str(same)
    with pytest.raises(DataError, match="id 'same' is in both"):
        load_stage_data(stage, {})
