"""Hostile inputs and paths (GitHub issue 49): each defect the review reproduced, as a test that failed before the
fix. Readers (deep nesting, huge numbers, NaN), orca-score's paths (input = output, missing or wrong paths,
checked before the model loads), a folder model changed under `--resume`, hand-edited leaderboard records and
sign-in logs, `--login on` outside a Space, and look-alike names."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import test_eval_cli
from test_leaderboard import answers_with, question_rows, write_sub
from test_leaderboard_app import make_lb

from eval_suite.leaderboard.access import Access, log_path
from eval_suite.leaderboard.data import SubmissionError, load_questions, read_submission
from eval_suite.leaderboard.store import StoreError, read_record
from eval_suite.models.loading import UsageError
from eval_suite.scoring import cli, scorer, sharding
from orca_io.jsonl import JsonLines, read_records
from orca_io.schema import MAX_DEPTH, RecordError, validate_record

model_dir = test_eval_cli.model_dir  # the fixture: a tiny random ORCA saved as a folder
GOOD = {"id": "a", "question": "Which animal?", "reference": "dog", "candidate": "a dog"}
DEEP = "[" * 1000 + "]" * 1000  # what the review fed orca-score: RecursionError, exit 1


def write_lines(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


# ------------------------------------------------------------------------------------------------ 1. deep JSON


@pytest.mark.parametrize("deep", [DEEP, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
                                  json.dumps({**GOOD, "id": "b", "extra": json.loads("[" * 200 + "]" * 200)})])
def test_deeply_nested_json_is_a_clean_error_naming_file_and_line(tmp_path, deep):
    path = write_lines(tmp_path / "d.jsonl", [GOOD, deep])
    with pytest.raises(RecordError, match=rf"^{path}:2: field '<line>': JSON nested deeper than {MAX_DEPTH} levels$"):
        read_records(path)
    result = read_records(path, on_error="skip")
    assert [r["id"] for r in result.records] == ["a"] and dict(result.skipped) == {"nested too deeply": 1}
    entries, _ = scorer.read_entries(path, "skip")  # orca-score --on-error skip: the line kept with its error
    assert entries[1].record is None and "nested deeper" in entries[1].error
    json.dumps(scorer.output_line(entries[1], None))  # and it can be written
    with pytest.raises(SubmissionError, match=f"{path}:2: JSON nested deeper"):
        read_submission(path, ["q1"])


def test_orca_score_on_deep_json_exits_2_with_one_line(tmp_path, capsys):
    path = write_lines(tmp_path / "d.jsonl", [DEEP])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--model", str(tmp_path / "no-model"), "--input", str(path), "--output", str(tmp_path / "o.jsonl")])
    assert exit_.value.code == 2
    assert one_error_line(capsys).startswith(f"error: {path}:1: field '<line>': JSON nested deeper")


def test_a_deep_stored_leaderboard_record_is_unreadable_not_a_crash(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(DEEP)
    with pytest.raises(ValueError, match="nested deeper"):
        read_record(path)


def test_huge_numbers_and_nan_are_clean_errors(tmp_path):
    huge = '{"id": "h", "question": "q", "reference": "r", "candidate": "c", "n": ' + "1" * 5000 + "}"
    path = write_lines(tmp_path / "h.jsonl", [GOOD, huge])
    with pytest.raises(RecordError, match=rf"^{path}:2: field '<line>': malformed JSON: Exceeds the limit"):
        read_records(path)
    assert len(str(pytest.raises(RecordError, read_records, path).value)) < 300
    # a rating of 1e300 is named as given, not as its 301 digits
    with pytest.raises(RecordError, match=r"field 'ratings': item 0 is 1e\+300: outside 1-5$"):
        validate_record({**GOOD, "ratings": [1e300]})
    # NaN and Infinity parse in Python but are not JSON: refused naming the key, never echoed as bare NaN
    for line, field in (('{"id": "n", "question": "q", "reference": "r", "candidate": "c", "x": NaN}', "x"),
                        ('{"id": "n", "question": "q", "reference": "r", "candidate": "c", "metadata": {"s": [Infinity]}}',
                         "metadata")):
        path = write_lines(tmp_path / "n.jsonl", [line])
        with pytest.raises(RecordError, match=rf"^{path}:1: field '{field}': NaN or Infinity is not valid JSON"):
            read_records(path)
        entries, _ = scorer.read_entries(path, "skip")
        line_out = scorer.output_line(entries[0], None)
        json.dumps(line_out, allow_nan=False)  # strict JSON out: the line's text is kept, not its NaN
        assert line_out["orca_input"] == line and field in line_out["orca_error"]
    with pytest.raises(RecordError, match="field 'metadata': not valid JSON"):
        validate_record({**GOOD, "metadata": DEEP})


def test_jsonl_reader_counts_every_line_of_hostile_input(tmp_path):
    lines = [json.dumps(GOOD), DEEP, "1" * 5000, "", "NaN", "[" * 5000]
    path = write_lines(tmp_path / "mix.jsonl", lines)
    reader = JsonLines(path, on_error="keep")
    items = list(reader)
    assert [i.line for i in items] == [1, 2, 3, 5, 6] and reader.blank_lines == 1
    assert [i.error is None for i in items] == [True, False, False, True, False]


# ------------------------------------------------------------------------------------------------ 5. stored records


@pytest.fixture
def board(tmp_path):
    """A local leaderboard (the fake judge of test_leaderboard) with two entries, Alpha and Beta."""
    path = tmp_path / "mmau.json"
    path.write_text(json.dumps(question_rows()))
    questions = {"mmau-test-mini": load_questions("mmau-test-mini", questions=path)}
    lb = make_lb(tmp_path / "results", questions)
    for name, correct in (("Alpha", {1, 2, 3}), ("Beta", {1})):
        lb.submit("mmau-test-mini", name, "", write_sub(tmp_path / f"{name}.jsonl", answers_with(correct)))
    return lb, questions, tmp_path


def edit_record(folder: Path, name: str, **changes) -> Path:
    (path,) = (folder / "mmau-test-mini" / "submissions").glob(f"{name}-*.json")
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("changes, reason", [
    ({"scores": {}}, "field 'scores': 'means' must list 60 finite numbers"),  # before: KeyError 'means' at start
    ({"scores": {"means": [3.0] * 59, "variances": None, "answered": [True] * 60}}, "'means' must list 60"),
    ({"scores": {"means": [3.0] * 60, "variances": "x", "answered": [True] * 60}}, "'variances' must be null or list"),
    ({"scores": {"means": [3.0] * 60, "variances": None, "answered": [1] * 60}}, "'answered' must list 60 true/false"),
    ({"owner": 5}, "field 'owner' must be a Hub username or null, got int"),
    ({"answers": {"q00": 3}}, "field 'answers' must map question ids to strings"),
    ({"question_ids": [1] * 60}, "field 'question_ids' must list strings"),
    ({"model_name": " "}, "field 'model_name' is empty"),
    ({"submission_file": "../../../etc/passwd"}, "field 'submission_file' is not a file name of this store"),
])
def test_a_hand_edited_record_is_listed_not_ranked_with_the_reason(board, changes, reason):
    lb, questions, tmp_path = board
    path = edit_record(tmp_path / "results", "Beta", **changes)
    again = make_lb(tmp_path / "results", questions)  # starts
    assert [e["model_name"] for e in again.results["mmau-test-mini"]["entries"]] == ["Alpha"]
    assert any(x.startswith(f"submissions/{path.name}: ") and reason in x for x in again.excluded["mmau-test-mini"]), \
        again.excluded


def test_an_owner_that_is_not_a_username_cannot_crash_a_replacement(board):
    lb, _, tmp_path = board
    lb.access = Access.from_settings(True, [], daily_limit=5)
    edit_record(tmp_path / "results", "Beta", owner=5)  # before: AttributeError in check_replace
    with pytest.raises(StoreError, match="cannot be read \\(field 'owner' must be a Hub username"):
        lb.submit("mmau-test-mini", "Beta", "", write_sub(tmp_path / "b.jsonl", answers_with({2})), replace=True,
                  profile=type("P", (), {"username": "mallory"})())


@pytest.mark.parametrize("content", [b'{"submissions": null}', b'{"submissions": [{"at": "2026', b"[]", b"\xff"])
def test_a_broken_daily_log_refuses_the_submission_instead_of_resetting_the_limit(board, content):
    from datetime import UTC, datetime

    lb, _, tmp_path = board
    lb.access = Access.from_settings(True, [], daily_limit=5)
    log = tmp_path / "results" / log_path("alice", datetime.now(UTC))
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(content)  # before: TypeError (null), or read as empty (torn): the count reset to 0
    alice = type("P", (), {"username": "alice"})()
    with pytest.raises(StoreError, match="submission log .* cannot be read .* refused"):
        lb.submit("mmau-test-mini", "Gamma", "", write_sub(tmp_path / "g.jsonl", answers_with({4})), profile=alice)
    assert log.read_bytes() == content and "Gamma" not in json.dumps(lb.results["mmau-test-mini"]["entries"])


# ------------------------------------------------------------------------------------------------ 2. and 4. paths


@pytest.fixture
def no_model(monkeypatch):
    """Path checks come before the model loads: loading fails the test."""
    monkeypatch.setattr(scorer, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))


def score_exit(tmp_path, *argv) -> int:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--model", str(tmp_path / "model"), "--no-progress", *map(str, argv)])
    return exit_.value.code


@pytest.mark.parametrize("output", ["same", "dot", "symlink", "hardlink"])
def test_an_output_that_is_the_input_is_refused_and_the_input_kept(tmp_path, capsys, no_model, monkeypatch, output):
    inp = write_lines(tmp_path / "o.jsonl", [GOOD])
    before = inp.read_bytes()
    monkeypatch.chdir(tmp_path)
    out = {"same": Path("o.jsonl"), "dot": Path("./o.jsonl"), "symlink": tmp_path / "link.jsonl",
           "hardlink": tmp_path / "hard.jsonl"}[output]
    if output == "symlink":
        out.symlink_to(inp)
    if output == "hardlink":
        os.link(inp, out)
    assert score_exit(tmp_path, "--input", "o.jsonl", "--output", out) == 2  # before: exit 0, input overwritten
    assert one_error_line(capsys) == (f"error: --output {out}: is the same file as --input o.jsonl; "
                                      "choose another --output")
    assert inp.read_bytes() == before and not list(tmp_path.glob("*.partial*"))


def test_a_summary_that_is_the_input_or_the_output_is_refused(tmp_path, capsys, no_model):
    inp = write_lines(tmp_path / "in.jsonl", [GOOD])
    assert score_exit(tmp_path, "--input", inp, "--output", tmp_path / "o.jsonl", "--summary", inp) == 2
    assert "--summary" in one_error_line(capsys)
    assert score_exit(tmp_path, "--input", inp, "--output", tmp_path / "o.jsonl", "--summary", tmp_path / "o.jsonl") == 2
    assert one_error_line(capsys).endswith("is the same file as --output " + str(tmp_path / "o.jsonl") + "; choose another --summary")


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write in: chmod 555, or for root (whom permissions do not stop) /sys, a
    read-only file system in containers."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys")
    try:
        (folder / "orca-probe").write_bytes(b"")
    except OSError:
        return folder
    pytest.skip("running as root with a writable /sys: no read-only folder to test with")


def test_bad_paths_exit_2_with_one_line_before_the_model_loads(tmp_path, capsys, no_model):
    inp = write_lines(tmp_path / "in.jsonl", [GOOD])
    out = tmp_path / "out.jsonl"
    (tmp_path / "folder").mkdir()
    (tmp_path / "loop").symlink_to("loop")
    cases = [  # before: FileNotFoundError, IsADirectoryError, PermissionError after loading, IsADirectoryError
        (["--input", tmp_path / "missing.jsonl", "--output", out], f"--input {tmp_path / 'missing.jsonl'}: no such file"),
        (["--input", tmp_path / "folder", "--output", out], f"--input {tmp_path / 'folder'}: is a folder, not a file"),
        (["--input", inp, "--output", read_only_folder(tmp_path) / "o.jsonl"], "cannot write in "),
        (["--input", inp, "--output", tmp_path / "folder"], f"--output {tmp_path / 'folder'}: is a folder; name a file"),
        (["--input", inp, "--output", inp / "x.jsonl"], f"{inp} is not a folder"),
        (["--input", inp, "--output", out, "--tune-clamp-on", tmp_path / "dev.jsonl"], "--tune-clamp-on"),
        (["--input", inp, "--output", out, "--summary", tmp_path / "folder"], "--summary"),
        # a symbolic link loop (the fuzzer's layouts): before the fix, RuntimeError from Path.resolve
        (["--input", tmp_path / "loop", "--output", out], "cannot be read (Too many levels of symbolic links)"),
        (["--input", inp, "--output", tmp_path / "loop" / "o.jsonl"], f"{tmp_path / 'loop'} is not a folder"),
    ]
    for argv, message in cases:
        assert score_exit(tmp_path, *argv) == 2, argv
        line = one_error_line(capsys)
        assert line.startswith("error: --") and message in line, (argv, line)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "ro") == ["folder", "in.jsonl", "loop"]  # nothing written


# ------------------------------------------------------------------------------------------------ 3. resume, two models


def test_resume_refuses_a_folder_model_whose_weights_changed_at_the_same_size(tmp_path, model_dir, monkeypatch, capsys):
    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    inp = write_lines(tmp_path / "in.jsonl", [{**GOOD, "id": f"r{i}", "candidate": f"answer {i}"} for i in range(6)])
    args = ["--model", model, "--input", inp, "--output", tmp_path / "out.jsonl", "--chunk-size", "2", "--no-progress"]
    real_write = sharding.write_chunk

    def die_after_first_chunk(fh, lines):
        real_write(fh, lines)
        raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(sharding, "write_chunk", die_after_first_chunk)
    with pytest.raises(KeyboardInterrupt):
        cli.main(list(map(str, args)))
    monkeypatch.setattr(sharding, "write_chunk", real_write)

    weights = model / "model.safetensors"
    size, tensors = weights.stat().st_size, load_file(weights)
    save_file({k: -v for k, v in tensors.items()}, weights, metadata={"format": "pt"})  # another model, same size
    assert weights.stat().st_size == size
    with pytest.raises(SystemExit) as exit_:  # before: exit 0, 4 of the 6 lines from the second model
        cli.main([*map(str, args), "--resume"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "produced with other settings (revision: " in err.splitlines()[-1]
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------------------------------------ sign-in, names


@pytest.fixture
def outside_a_space(monkeypatch):
    for name in ("SYSTEM", "SPACE_ID", "OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES", "OPENID_PROVIDER_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "example.org"])
def test_login_on_outside_a_space_is_refused_before_loading(tmp_path, capsys, monkeypatch, outside_a_space, host):
    from eval_suite.leaderboard import app

    monkeypatch.setattr(app, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    # before: started, and gradio's mocked sign-in made every visitor the account of the server's token
    assert app.main(["--model", str(tmp_path / "m"), "--login", "on", "--host", host]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: --login on outside a Space, serving on {host}: gradio would mock")


def test_login_on_on_loopback_warns_and_a_space_needs_its_oauth_variables(monkeypatch, outside_a_space):
    from eval_suite.leaderboard.access import OAUTH_VARS, login_wanted
    from eval_suite.models.loading import UsageError

    warned = []
    assert login_wanted("on", "127.0.0.1", warn=warned.append) and "sign-in is MOCKED" in warned[0]
    assert not login_wanted("auto", "0.0.0.0") and not login_wanted("off", "0.0.0.0")
    monkeypatch.setenv("SYSTEM", "spaces")
    monkeypatch.setenv("SPACE_ID", "org/board")
    for mode in ("auto", "on"):  # a Space without `hf_oauth: true`
        with pytest.raises(UsageError, match="this Space has no Hub sign-in .*OAUTH_CLIENT_ID"):
            login_wanted(mode, "0.0.0.0")
    for name in OAUTH_VARS:
        monkeypatch.setenv(name, "x")
    assert login_wanted("auto", "0.0.0.0") and login_wanted("on", "0.0.0.0") and not login_wanted("off", "0.0.0.0")


@pytest.mark.parametrize("name, scripts", [("Model \u0410", "Cyrillic, Latin"), ("\u039codel A", "Greek, Latin"),
                                           ("Qwen2-\u0410udio", "Cyrillic, Latin")])
def test_names_that_mix_scripts_are_refused(board, name, scripts):
    lb, _, tmp_path = board
    lb.submit("mmau-test-mini", "Model A", "", write_sub(tmp_path / "a.jsonl", answers_with({1})))
    with pytest.raises(SubmissionError, match=rf"model name mixes scripts \({scripts}\)"):
        # before: "Model А" (Cyrillic А) became a second entry beside "Model A"
        lb.submit("mmau-test-mini", name, "", write_sub(tmp_path / "b.jsonl", answers_with({2})))
    names = [e["model_name"] for e in lb.results["mmau-test-mini"]["entries"]]
    assert sorted(names) == ["Alpha", "Beta", "Model A"]


@pytest.mark.parametrize("name", ["Qwen2-Audio 7B (\u4e2d\u6587)", "\u30e2\u30c7\u30eb Model 7B", "\ud55c\uad6d\uc5b4 model",
                                  "\u041c\u043e\u0434\u0435\u043b\u044c 1", "caf\u00e9 e\u0301 x\u00b2"])
def test_names_in_one_script_or_latin_with_cjk_are_accepted(board, name):
    lb, _, tmp_path = board
    result = lb.submit("mmau-test-mini", name, "", write_sub(tmp_path / "a.jsonl", answers_with({1})))
    assert name in [e["model_name"] for e in result["entries"]]


@pytest.mark.parametrize("line", ["[1, 2]", "3", DEEP])
def test_a_hand_edited_partial_file_is_refused_not_a_crash(tmp_path, line):
    partial = tmp_path / "out.jsonl.partial"
    partial.write_text(json.dumps({"id": "a", "orca_error": None}) + "\n" + line + "\n" + '{"id": "c"}\n')
    entries = [scorer.Entry(i + 1, "", record={"id": x}) for i, x in enumerate("abc")]
    with pytest.raises(UsageError, match=f"{partial}:2: unreadable line in the partial output"):
        sharding.completed_prefix(partial, entries)  # before: AttributeError (a list) or RecursionError


def test_an_input_named_like_the_outputs_partial_file_is_kept(tmp_path, capsys, no_model):
    inp = write_lines(tmp_path / "o.jsonl.partial", [GOOD])
    before = inp.read_bytes()
    assert score_exit(tmp_path, "--input", inp, "--output", tmp_path / "o.jsonl") == 2
    assert one_error_line(capsys).endswith(f"is the same file as --input {inp}; choose another --output")
    assert inp.read_bytes() == before
