"""Property-based fuzzing (hypothesis) of every reader of untrusted input (GitHub issue 49): the JSONL reader, the
record schema, orca-score's input reader and its checks before the model loads (paths included), the
leaderboard's submission reader and its stored-record reader. Arbitrary bytes and structured-but-wrong JSON
(wrong types, deep nesting, huge numbers, NaN, lone surrogates, torn lines) go in. The only allowed outcomes are a
correct result or a clean error naming file, line and field, with every input line accounted for; any other
exception, or a broken promise, is a crash.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fuzz_inputs.py --seconds 180 --seed 0 --json runs/fuzz_inputs.json

`tests/test_fuzz.py` runs each target on a few dozen cases in CI. Last line:
`fuzz_inputs cases=N ok=O clean_errors=E crashes=C`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from eval_suite.leaderboard import build_leaderboard  # noqa: E402
from eval_suite.leaderboard.data import Question, Submission, SubmissionError, meta_path, read_submission  # noqa: E402
from eval_suite.leaderboard.store import read_record  # noqa: E402
from eval_suite.models.loading import UsageError  # noqa: E402
from eval_suite.scoring import cli, scorer  # noqa: E402
from orca_io.jsonl import JsonLines, read_records  # noqa: E402
from orca_io.schema import FLAGS, STAGES, RecordError, too_deep, validate_record  # noqa: E402

# ------------------------------------------------------------------------------------------------ inputs

text = st.text(max_size=20)
json_scalar = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | text
               | st.sampled_from([10**300, -(10**4000), 1e300, 4.0, 4.5]))
json_value = st.recursive(json_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                          max_leaves=8)
nonblank = st.text(min_size=1, max_size=20).filter(str.strip)
VALID = {"id": st.text(min_size=1, max_size=8), "question": text,
         "reference": nonblank | st.tuples(nonblank, st.lists(text, max_size=2)).map(lambda v: [v[0], *v[1]]),
         "candidate": text, "rationale": text, "transcription": text, "ratings": st.lists(st.integers(1, 5), max_size=3),
         "rater_ids": st.just([]), "flags": st.lists(st.sampled_from(FLAGS), max_size=2), "stage": st.sampled_from(STAGES),
         "metadata": st.just("{}") | st.dictionaries(text, json_scalar, max_size=2)}


@st.composite
def record_like(draw, broken: bool = True) -> dict:
    """A record's keys, each absent, valid or (when `broken`) any JSON value; sometimes a key outside the schema."""
    rec = {}
    for key in [*VALID, *draw(st.lists(text, max_size=1))]:
        how = draw(st.integers(0, 3 if broken else 2))
        if how == 0 and key not in ("id", "question", "reference", "candidate"):
            continue
        rec[key] = draw(VALID[key]) if how < 3 and key in VALID else draw(json_scalar if not broken else json_value)
    return rec


def deep(k: int, inside: str = "") -> str:
    return "[" * k + inside + "]" * k


HOSTILE = [deep(1000), deep(101), deep(100), "{" * 5000, "1" * 5000, "NaN", "-Infinity", '{"id": "\\ud800"}',
           '{"id": "a", "question": "q", "reference": "r", "candidate": "c", "x": ' + deep(150) + "}",
           '{"id": "a", "question": "q", "reference": "r", "candidate": "c", "x": NaN}',
           '{"id": "a", "question": "q", "reference": "r", "candidate": "c", "ratings": [1e300]}',
           '{"id": "a", "question": "q", "reference": "r", "candidate": "c", "metadata": "' + deep(2000) + '"}',
           "\ufeff{}", '"' + "a" * 5000 + '"']


def encode(value, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")


line = st.one_of(
    st.tuples(record_like(), st.booleans()).map(lambda v: encode(*v)),
    st.tuples(json_value, st.booleans()).map(lambda v: encode(*v)),
    st.tuples(record_like(), st.integers(1, 60)).map(lambda v: encode(v[0], True)[: v[1]]),  # torn
    st.binary(max_size=40),
    st.sampled_from(HOSTILE).map(str.encode),
    st.integers(1, 1200).map(lambda k: deep(k).encode()),
    st.sampled_from([b"", b"  ", b"\r", b"\xef\xbb\xbf", b"\xff\xfe", b"\x00"]),
).map(lambda b: b.replace(b"\n", b""))
valid_line = st.tuples(record_like(broken=False), st.booleans()).map(lambda v: encode(*v))
# whole files of hostile lines, and files of valid records with a hostile line or two among them
files = st.lists(line, max_size=6) | st.tuples(st.lists(valid_line, max_size=5), st.lists(line, max_size=2)).map(
    lambda v: v[0] + v[1]) | st.lists(valid_line, min_size=1, max_size=5)


def write_lines(folder: Path, name: str, lines: list[bytes]) -> Path:
    path = folder / name
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    return path


def starts_with_place(message: str, path: Path) -> bool:
    """`path:line: field 'x': problem`, the form every reader error takes."""
    return re.match(rf"{re.escape(str(path))}:\d+: field '.*': ", message, re.S) is not None


# ------------------------------------------------------------------------------------------------ targets
# Each returns "ok" (a correct result) or "error" (a clean error), and raises on anything else.


def jsonl_target(lines: list[bytes]) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = write_lines(Path(d), "in.jsonl", lines)
        reader = JsonLines(path, on_error="keep")
        items = list(reader)
        assert len(items) + reader.blank_lines == len(lines)  # every line accounted for
        for item in items:
            if item.error is not None:
                assert str(item.error).startswith(f"{path}:{item.line}: field '<line>': "), str(item.error)
            else:
                assert not too_deep(item.value)
        try:
            list(JsonLines(path))
        except RecordError as e:
            assert starts_with_place(str(e), path), str(e)
        return "error" if any(i.error for i in items) else "ok"


def records_target(lines: list[bytes]) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = write_lines(Path(d), "in.jsonl", lines)
        try:
            result = read_records(path, on_error="skip")
        except RecordError:
            raise AssertionError("skip mode raised a RecordError") from None
        except ValueError as e:  # only when no line is a record
            assert "empty file" in str(e) or "no valid record" in str(e), str(e)
            return "error"
        assert len(result.records) + sum(result.skipped.values()) == len(lines)
        for rec in result.records:
            assert validate_record(copy.deepcopy(rec)) == rec
            json.dumps(rec, ensure_ascii=False, allow_nan=False).encode("utf-8")  # strict JSON, valid UTF-8
        try:
            read_records(path)
        except RecordError as e:
            assert starts_with_place(str(e), path), str(e)
            return "error"
        return "error" if result.skipped.keys() - {"blank line"} else "ok"


def schema_target(obj) -> str:
    try:
        rec = validate_record(obj)
    except RecordError as e:
        assert isinstance(e.field, str) and str(e).startswith(f"<record>:-: field '{e.field}': "), str(e)
        assert len(str(e)) < 400, str(e)[:400]
        return "error"
    assert validate_record(copy.deepcopy(rec)) == rec
    json.dumps(rec, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return "ok"


def orca_reader_target(lines: list[bytes]) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = write_lines(Path(d), "in.jsonl", lines)
        try:
            entries, blank = scorer.read_entries(path, "skip")
        except UsageError as e:
            assert "no record" in str(e), str(e)
            return "error"
        assert len(entries) + blank == len(lines) and [e.line for e in entries] == sorted(e.line for e in entries)
        for entry in entries:
            assert (entry.record is None) != (entry.error is None)
            if entry.error:
                assert starts_with_place(entry.error, path), entry.error
            out = scorer.output_line(entry, {"mean": 3.0, "variance": 1.0, "probs": [0.2] * 5, "score": 0.5})
            json.dumps(out, ensure_ascii=False, allow_nan=False).encode("utf-8")
        try:
            scorer.read_entries(path, "raise")
        except UsageError as e:
            assert str(e).startswith(f"{path}:"), str(e)
            return "error"
        return "ok"


class ModelLoaded(Exception):
    """orca-score got past every check and would now load the model."""


KINDS = ("file", "empty", "folder", "link", "dangling", "loop", "hardlink", "missing")


@st.composite
def layouts(draw):
    """Up to four entries of a folder (e0 mostly a JSONL file; others an empty file, a folder, links, a link loop,
    nothing) and orca-score's --input, --output, --summary, --tune-clamp-on (and --on-error): an entry, a file
    under one, or a new name, maybe written as ./X."""
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4))
    if draw(st.integers(0, 2)):
        kinds[0] = "file"

    def entry():
        name = f"e{draw(st.integers(0, len(kinds) - 1))}" + ("/x.jsonl" if draw(st.integers(0, 4)) == 0 else "")
        return ("./" if draw(st.booleans()) else "") + name

    def new(name):
        return draw(st.sampled_from([name, f"./{name}", f"new/{name}"]))

    inp = draw(st.just("e0") | st.builds(entry))
    out = draw(st.builds(new, st.just("out.jsonl")) | st.builds(entry))
    summary = draw(st.none() | st.builds(new, st.just("s.json")) | st.builds(entry) | st.just(out))
    tune = draw(st.none() | st.none() | st.builds(entry))
    return kinds, draw(files), inp, out, summary, tune, draw(st.sampled_from(["raise", "skip"]))


def orca_score_target(layout) -> str:
    kinds, lines, inp, out, summary, tune, on_error = layout
    stderr = io.StringIO()
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d), contextlib.redirect_stderr(stderr):
        for k, kind in enumerate(kinds):
            entry = Path(f"e{k}")
            if kind in ("file", "empty"):
                write_lines(Path("."), entry.name, lines if kind == "file" else [])
            elif kind == "folder":
                entry.mkdir()
            elif kind == "link":
                entry.symlink_to("e0")
            elif kind == "dangling":
                entry.symlink_to("nowhere")
            elif kind == "loop":
                entry.symlink_to(entry.name)
            elif kind == "hardlink" and Path("e0").is_file():
                os.link("e0", entry)
        before = {p: p.read_bytes() for p in Path(".").rglob("*") if p.is_file()}
        argv = ["--model", "m", "--input", inp, "--output", out, "--on-error", on_error, "--no-progress"]
        argv += ["--summary", summary] if summary else []
        argv += ["--tune-clamp-on", tune] if tune else []
        real_load = scorer.load_model
        scorer.load_model = lambda *a, **k: (_ for _ in ()).throw(ModelLoaded())
        try:
            cli.main(argv)
        except SystemExit as e:
            lines_out = stderr.getvalue().strip().splitlines()
            assert e.code == 2 and len(lines_out) == 1 and lines_out[0].startswith("error: "), stderr.getvalue()[-500:]
            outcome = "error"
        except ModelLoaded:
            # accepted: the input is a readable file; no output names the input, a folder or another output
            assert Path(inp).is_file()
            outs = [Path(p) for p in (out, summary) if p]
            assert not any(p.is_dir() for p in outs)
            for i, p in enumerate(outs):
                for q in [Path(inp), *([Path(tune)] if tune else []), *outs[:i]]:
                    # realpath: Path.resolve raises on a link loop (a loop is a valid --summary: replaced, not followed)
                    assert not (p.exists() and q.exists() and os.path.samefile(p, q))
                    assert os.path.realpath(p) != os.path.realpath(q)
            outcome = "ok"
        finally:
            scorer.load_model = real_load
        after = {p: p.read_bytes() for p in Path(".").rglob("*") if p.is_file()}
        assert after == before, "a file was written or changed before the model loaded"
        return outcome


QUESTIONS = [Question(f"q{i}", f"Which animal is heard in clip {i}?", ["dog"], "", "sound", "c") for i in range(3)]
IDS = [q.id for q in QUESTIONS]


def submission_target(case) -> str:
    lines, meta = case
    with tempfile.TemporaryDirectory() as d:
        path = write_lines(Path(d), "sub.jsonl", lines)
        if meta is not None:
            meta_path(path).write_bytes(meta)
        try:
            sub = read_submission(path, QUESTIONS, benchmark="b")
        except SubmissionError as e:
            assert e.errors and all(m.startswith((str(path), str(meta_path(path)))) for m in e.errors), e.errors[:3]
            return "error"
        assert set(sub.answers) <= set(IDS) and all(isinstance(a, str) for a in sub.answers.values())
        return "ok"


answer_line = st.fixed_dictionaries({"question_id": st.sampled_from(IDS) | json_value, "answer": text | json_value},
                                    optional={"x": json_value}).map(lambda o: encode(o, False))
valid_answers = st.lists(st.tuples(st.sampled_from(IDS), text), min_size=1, max_size=3, unique_by=lambda v: v[0]).map(
    lambda pairs: [encode({"question_id": q, "answer": a}, False) for q, a in pairs])
# files of good answers, of any lines, and of good answers with a hostile line among them
submissions = st.tuples(valid_answers | st.lists(answer_line | line, max_size=5) | st.tuples(valid_answers, st.lists(
                            answer_line | line, min_size=1, max_size=1)).map(lambda v: v[0] + v[1]),
                        st.none() | st.none() | st.binary(max_size=30)
                        | st.dictionaries(st.sampled_from(["model_name", "link", "benchmark", "x"]), json_value | text,
                                          max_size=3).map(lambda o: encode(o, False)))


@st.composite
def stored_records(draw) -> bytes:
    """A record as the app stores it, then maybe one field replaced or removed, maybe torn, or any bytes."""
    n = len(IDS)
    rec = {"model_name": draw(st.text(min_size=1, max_size=10).filter(str.strip)), "owner": draw(st.none() | text),
           "link": draw(text), "submitted_at": draw(text), "judge": {"id": "j", "revision": "r"},
           "question_ids": IDS, "answers": draw(st.dictionaries(st.sampled_from(IDS), text)),
           "submission_file": draw(st.sampled_from(["A-1.abc.jsonl", None])),
           "scores": {"means": draw(st.lists(st.floats(1, 5), min_size=n, max_size=n)),
                      "variances": draw(st.none() | st.lists(st.floats(0, 4), min_size=n, max_size=n)),
                      "answered": draw(st.lists(st.booleans(), min_size=n, max_size=n))}}
    how = draw(st.integers(0, 4))
    if how == 1:
        rec[draw(st.sampled_from(sorted(rec)))] = draw(json_value)
    elif how == 2:
        rec["scores"][draw(st.sampled_from(["means", "variances", "answered"]))] = draw(json_value)
    elif how == 3:
        del rec[draw(st.sampled_from(sorted(rec)))]
    data = json.dumps(rec).encode()
    if how == 4:
        return draw(st.sampled_from([data[: draw(st.integers(0, len(data)))], draw(st.binary(max_size=40)),
                                     deep(1000).encode()]))
    return data


def stored_record_target(data: bytes) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "r.json"
        path.write_bytes(data)
        try:
            rec = read_record(path)
        except ValueError as e:
            assert str(e) and "\n" not in str(e), str(e)
            return "error"
        # a record that reads is ranked without error (what the app does at start with every stored record)
        sub = Submission(path, rec["model_name"], rec["link"], rec["answers"])
        board = build_leaderboard(QUESTIONS, [sub], [rec["scores"]], resamples=10)
        assert [e["model_name"] for e in board["entries"]] == [rec["model_name"]]
        return "ok"


TARGETS = {  # name -> (target, strategy of its input)
    "jsonl_reader": (jsonl_target, files),
    "read_records": (records_target, files),
    "record_schema": (schema_target, record_like() | json_value),
    "orca_score_reader": (orca_reader_target, files),
    "orca_score_paths": (orca_score_target, layouts()),
    "submission_reader": (submission_target, submissions),
    "stored_record_reader": (stored_record_target, stored_records()),
}


def run_target(name: str, examples: int, seed_: int, counts: Counter) -> str | None:
    """Run one target on `examples` cases; counts outcomes into `counts`. Returns the crash (shrunk by
    hypothesis) as text, or None."""
    target, strategy = TARGETS[name]

    @seed(seed_)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(case):
        counts["cases"] += 1
        counts[target(case)] += 1

    try:
        check()
    except Exception as err:  # noqa: BLE001 - any exception is what this counts
        counts["crashes"] += 1
        found = err.exceptions if isinstance(err, BaseExceptionGroup) else [err]  # several distinct failures
        # hypothesis puts the shrunk failing case in the exception's notes
        return f"{name}: " + "; ".join(f"{type(e).__name__}: {str(e)[:500]} {' '.join(getattr(e, '__notes__', []))[:1500]}"
                                       for e in found)
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=180, help="time budget, shared equally by the targets")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--round", type=int, default=200, help="cases per hypothesis run (runs repeat, seeds change)")
    p.add_argument("--json", type=Path, help="write the counts here")
    args = p.parse_args(argv)
    started, per_target = time.time(), args.seconds / len(TARGETS)
    results, crashes = {}, []
    for i, name in enumerate(TARGETS):
        counts, rounds, t0 = Counter(), 0, time.time()
        while time.time() - t0 < per_target:
            crash = run_target(name, args.round, args.seed * 1000 + 100 * i + rounds, counts)
            rounds += 1
            if crash:
                crashes.append(crash)
                print(crash, file=sys.stderr)
        results[name] = {"cases": counts["cases"], "ok": counts["ok"], "clean_errors": counts["error"],
                         "crashes": counts["crashes"], "seconds": round(time.time() - t0, 1)}
        print(f"{name}: " + " ".join(f"{k}={v}" for k, v in results[name].items()))
    total = {k: sum(r[k] for r in results.values()) for k in ("cases", "ok", "clean_errors", "crashes")}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "targets": results,
                                         "total": total, "crashes": crashes, "load_average": os.getloadavg(),
                                         "seconds": round(time.time() - started, 1)}, indent=1) + "\n")
    print(f"fuzz_inputs cases={total['cases']} ok={total['ok']} clean_errors={total['clean_errors']} "
          f"crashes={total['crashes']}")
    return 1 if crashes else 0


if __name__ == "__main__":
    raise SystemExit(main())
