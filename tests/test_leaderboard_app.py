"""The leaderboard web app (eval_suite/leaderboard/app.py): validation before scoring, storage (local folder, a Hub
dataset through a mocked HfApi, failures that keep nothing), replacement, restarts, one submission at a time,
the Space folder of `push_to_hub.py leaderboard`, and the real page in headless chromium through selenium."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import test_leaderboard
from test_leaderboard import FakeOrca, N, answers_with, expected_percent, question_rows, write_sub

from eval_suite.leaderboard import ALPHA, MAX_SUBMISSION_BYTES
from eval_suite.leaderboard.app import Leaderboard
from eval_suite.leaderboard.data import SubmissionError, load_questions
from eval_suite.leaderboard.store import ResultStore, StoreError

REPO = Path(__file__).resolve().parents[1]
tiny_model_dir = test_leaderboard.tiny_model_dir  # the fixture: a tiny random ORCA saved as a folder
JUDGE = {"id": "fake-judge", "revision": "r1", "score_type": "multinomial", "clamp": {}}


def settings(**over) -> argparse.Namespace:
    base = dict(uncertainty_threshold=1.0, doubtful_threshold=None, doubtful_top=50, bootstrap=200, seed=0,
                alpha=ALPHA, max_submission_bytes=MAX_SUBMISSION_BYTES, max_batch_tokens=None)
    return argparse.Namespace(**{**base, **over})


@pytest.fixture
def questions(tmp_path):
    path = tmp_path / "mmau.json"
    path.write_text(json.dumps(question_rows()))
    return {"mmau-test-mini": load_questions("mmau-test-mini", questions=path)}


def make_lb(folder, questions, fake=None, store=None, **over) -> Leaderboard:
    return Leaderboard(fake or FakeOrca(), None, JUDGE, store or ResultStore(folder), questions, settings(**over))


def stored_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and "board" not in p.parts)


def test_invalid_submission_is_reported_by_line_and_nothing_is_scored_or_stored(tmp_path, questions):
    fake = FakeOrca()
    lb = make_lb(tmp_path / "results", questions, fake)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"question_id": "q00", "answer": "dog"}\n{"question_id": "zz", "answer": "x"}\n'
                    b'{"question_id": "q01", "answer": 3}\nnot json\n')
    with pytest.raises(SubmissionError) as err:
        lb.submit("mmau-test-mini", "Broken", "", bad)
    assert err.value.errors == ["line 2: unknown question_id 'zz' for mmau-test-mini",
                                "line 3: 'answer' must be a string, got int",
                                "line 4: malformed JSON: Expecting value at column 1"]
    with pytest.raises(SubmissionError, match="empty model name"):
        lb.submit("mmau-test-mini", "  ", "", write_sub(tmp_path / "ok.jsonl", answers_with({1})))
    assert fake.records == [] and stored_files(tmp_path / "results") == []
    assert lb.results["mmau-test-mini"]["entries"] == []


def test_valid_submissions_are_judged_stored_ranked_and_replaced_only_when_asked(tmp_path, questions):
    fake = FakeOrca()
    lb = make_lb(tmp_path / "results", questions, fake)
    good = write_sub(tmp_path / "good.jsonl", answers_with(set(range(N)), skip={5}))
    poor = write_sub(tmp_path / "poor.jsonl", answers_with(set(range(0, N, 3))))
    lb.submit("mmau-test-mini", "Good LM", "https://example.org/good", good)
    result = lb.submit("mmau-test-mini", "Poor LM", "", poor)
    assert [e["model_name"] for e in result["entries"]] == ["Good LM", "Poor LM"]
    assert result["entries"][1]["percent"] == pytest.approx(expected_percent(1 / 3))
    assert result["entries"][0]["n_missing"] == 1
    record = json.loads(next((tmp_path / "results/mmau-test-mini/submissions").glob("Good-LM-*.json")).read_text())
    assert record["judge"] == JUDGE and record["package_version"] and record["submitted_at"]
    assert record["answers"]["q00"] == question_rows()[0]["answer"] and "q05" not in record["answers"]
    assert len(record["scores"]["means"]) == N and record["scores"]["answered"][5] is False
    assert json.loads((tmp_path / "results/mmau-test-mini/leaderboard.json").read_text())["entries"][0]["model_name"] == "Good LM"

    n_scored = len(fake.records)
    better = write_sub(tmp_path / "better.jsonl", answers_with(set(range(N))))
    with pytest.raises(SubmissionError, match="tick \"replace\""):
        lb.submit("mmau-test-mini", "Poor LM", "", better)
    assert len(fake.records) == n_scored  # refused before scoring
    result = lb.submit("mmau-test-mini", "Poor LM", "", better, replace=True)
    assert [e["model_name"] for e in result["entries"]] == ["Poor LM", "Good LM"]
    assert len(list((tmp_path / "results/mmau-test-mini/submissions").glob("*.json"))) == 2

    # a restart ranks the stored scores again without scoring anything
    class NoScoring(FakeOrca):
        def predict(self, *a, **k):
            raise AssertionError("scored twice")

    again = make_lb(tmp_path / "results", questions, NoScoring())
    assert again.results["mmau-test-mini"]["entries"] == result["entries"]


def test_size_limit_is_checked_before_the_file_is_read(tmp_path, questions, monkeypatch):
    lb = make_lb(tmp_path / "results", questions, max_submission_bytes=100)
    big = write_sub(tmp_path / "big.jsonl", answers_with(set(range(N))))
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("read a file over the limit"))
    with pytest.raises(SubmissionError, match=r"^file: \d+ bytes, over the limit of 100 bytes$"):
        lb.submit("mmau-test-mini", "Big", "", big)


def test_two_submissions_at_once_are_queued_not_interleaved(tmp_path, questions):
    events = []

    class Slow(FakeOrca):
        def predict(self, records, *a, **k):
            events.append(("start", records[0]["candidate"]))
            time.sleep(0.3)
            out = super().predict(records, *a, **k)
            events.append(("end", records[0]["candidate"]))
            return out

    lb = make_lb(tmp_path / "results", questions, Slow())
    subs = {name: write_sub(tmp_path / f"{name}.jsonl", answers_with(set(range(k, N, 2)))) for k, name in enumerate("ab")}
    threads = [threading.Thread(target=lb.submit, args=("mmau-test-mini", name, "", path)) for name, path in subs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [e[0] for e in events] == ["start", "end", "start", "end"]
    assert len(lb.results["mmau-test-mini"]["entries"]) == 2


class FakeHub:
    """The HfApi calls the store makes, against a folder standing for the dataset repository. A commit whose
    `parent_commit` is not the head is refused as the Hub refuses it (HfHubHTTPError, 412), no network."""

    def __init__(self, remote: Path, fail: bool = False):
        self.remote, self.fail, self.commits, self.refused = remote, fail, [], 0
        self.head = "0" * 40
        remote.mkdir(parents=True, exist_ok=True)

    def create_repo(self, repo_id, repo_type, private, exist_ok):
        assert repo_type == "dataset" and exist_ok

    def repo_info(self, repo_id, repo_type):
        return SimpleNamespace(sha=self.head)

    def snapshot_download(self, repo_id, repo_type, local_dir, revision=None):
        assert revision in (None, self.head)  # this fake keeps no history
        shutil.copytree(self.remote, local_dir, dirs_exist_ok=True)

    def conflict(self):
        import httpx2
        from huggingface_hub.utils import hf_raise_for_status

        self.refused += 1
        url = "https://huggingface.co/api/datasets/org/results/commit/main"
        hf_raise_for_status(httpx2.Response(412, request=httpx2.Request("POST", url),
                                            json={"error": "A commit has happened since. Please refresh and try again."}))

    def upload_folder(self, repo_id, repo_type, folder_path, commit_message, parent_commit=None):
        if self.fail:
            raise ConnectionError("network unreachable")
        if parent_commit is not None and parent_commit != self.head:  # without one, the last writer wins
            self.conflict()
        files = sorted(str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file())
        self.commits.append((commit_message, files))
        shutil.copytree(folder_path, self.remote, dirs_exist_ok=True)
        self.head = hashlib.sha1(f"{self.head}{commit_message}".encode()).hexdigest()
        return SimpleNamespace(oid=self.head)


def test_hub_results_are_one_commit_per_submission_and_a_failed_upload_keeps_nothing(tmp_path, questions):
    hub = FakeHub(tmp_path / "remote")
    lb = make_lb(tmp_path / "local", questions, store=ResultStore(tmp_path / "local", "org/results", api=hub))
    lb.submit("mmau-test-mini", "First", "", write_sub(tmp_path / "a.jsonl", answers_with(set(range(N)))))
    (message, files), = hub.commits
    assert message == "Add First on mmau-test-mini" and len(files) == 3
    assert {f.rsplit(".", 1)[-1] for f in files} == {"json", "jsonl"} and "mmau-test-mini/leaderboard.json" in files

    before_local, before_remote = stored_files(tmp_path / "local"), stored_files(tmp_path / "remote")
    hub.fail = True
    with pytest.raises(StoreError, match="network unreachable"):
        lb.submit("mmau-test-mini", "Second", "", write_sub(tmp_path / "b.jsonl", answers_with({1})))
    assert stored_files(tmp_path / "local") == before_local and stored_files(tmp_path / "remote") == before_remote
    assert [e["model_name"] for e in lb.results["mmau-test-mini"]["entries"]] == ["First"]
    assert not list((tmp_path / "local").glob(".staging-*")) and not list((tmp_path / "local").glob(".board-*"))

    # a fresh app on another machine starts from the repository
    hub.fail = False
    fresh = make_lb(tmp_path / "elsewhere", questions, store=ResultStore(tmp_path / "elsewhere", "org/results", api=hub))
    assert [e["model_name"] for e in fresh.results["mmau-test-mini"]["entries"]] == ["First"]


def test_app_refuses_a_results_repo_without_token_and_bad_flags(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    from eval_suite.leaderboard import app

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    assert app.main(["--model", str(tmp_path / "none"), "--results-repo", "org/results"]) == 2
    assert "error: --results-repo needs a Hugging Face token" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        app.build_parser().parse_args(["--model", "m", "--questions", "no-such-benchmark=x.json"])
    assert "expected BENCHMARK=FILE" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ faults and abuse


def records_dir(folder: Path) -> Path:
    return folder / "mmau-test-mini" / "submissions"


def test_an_unreadable_record_is_listed_not_ranked_and_the_rest_is_served(tmp_path, questions):
    from eval_suite.leaderboard.app import ranking_html

    lb = make_lb(tmp_path / "results", questions)
    for name, correct in (("Alpha", set(range(N))), ("Beta", {1, 2}), ("Gamma", {3})):
        lb.submit("mmau-test-mini", name, "", write_sub(tmp_path / f"{name}.jsonl", answers_with(correct)))
    beta = next(records_dir(tmp_path / "results").glob("Beta-*.json"))
    gamma = next(records_dir(tmp_path / "results").glob("Gamma-*.json"))
    beta.write_bytes(beta.read_bytes()[: beta.stat().st_size // 2])  # torn (a crash between write and rename)
    gamma.write_text("[1, 2]")  # a hand edit
    torn, edited = beta.read_bytes(), gamma.read_bytes()

    again = make_lb(tmp_path / "results", questions)  # starts: no JSONDecodeError
    assert [e["model_name"] for e in again.results["mmau-test-mini"]["entries"]] == ["Alpha"]
    reasons = again.excluded["mmau-test-mini"]
    assert any(r.startswith(f"submissions/{beta.name}: not a UTF-8 JSON file") for r in reasons)
    assert any(r.startswith(f"submissions/{gamma.name}: expected a JSON object, got list") for r in reasons)
    page = ranking_html(again, "mmau-test-mini")
    assert 'id="not-ranked"' in page and beta.name in page and gamma.name in page

    # later submissions still work; the unreadable files are kept as they are, never overwritten
    result = again.submit("mmau-test-mini", "Delta", "", write_sub(tmp_path / "d.jsonl", answers_with({4, 5})))
    assert [e["model_name"] for e in result["entries"]] == ["Alpha", "Delta"]
    with pytest.raises(StoreError, match=f"{beta.name} for this name cannot be read"):
        again.submit("mmau-test-mini", "Beta", "", write_sub(tmp_path / "b2.jsonl", answers_with({1})), replace=True)
    assert beta.read_bytes() == torn and gamma.read_bytes() == edited


def test_store_files_are_fsynced_before_the_rename_and_the_folder_after(tmp_path, questions, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}")).name))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", Path(src).name, Path(dst).name))
        real_replace(src, dst)

    lb = make_lb(tmp_path / "results", questions)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    lb.submit("mmau-test-mini", "Alpha", "", write_sub(tmp_path / "a.jsonl", answers_with({1})))
    monkeypatch.undo()
    stored = stored_files(tmp_path / "results")
    renames = [(i, e) for i, e in enumerate(events) if e[0] == "rename" and e[2] in {Path(f).name for f in stored}]
    assert len(renames) == 3  # the submitted file, leaderboard.json, the record (last)
    assert renames[-1][1][2].endswith(".json") and renames[-1][1][2].startswith("Alpha-")
    for i, (_, tmp, target) in renames:
        assert events[i - 1] == ("fsync", tmp), f"{target}: renamed without fsync"
        folder = (tmp_path / "results" / next(f for f in stored if f.endswith(target))).parent.name
        assert events[i + 1] == ("fsync", folder), f"{target}: folder not fsynced after the rename"


def test_a_file_of_junk_stops_after_50_problems_fast_and_bounded(tmp_path, questions):
    import tracemalloc

    from eval_suite.leaderboard.app import errors_html
    from eval_suite.leaderboard.data import MAX_PROBLEMS, read_submission

    junk = tmp_path / "junk.jsonl"
    lines = 8 * 2**20  # 16 MiB of 2-byte lines: the upload limit, filled with the most problems it can hold
    junk.write_bytes(b"x\n" * lines)
    assert junk.stat().st_size == MAX_SUBMISSION_BYTES
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(SubmissionError) as err:
        read_submission(junk, questions["mmau-test-mini"], model_name="Junk", where="")
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    errors = err.value.errors
    assert len(errors) == MAX_PROBLEMS + 1 and errors[0] == "line 1: malformed JSON: Expecting value at column 1"
    assert errors[-1] == f"file: stopped after {MAX_PROBLEMS} problems; {lines - MAX_PROBLEMS} more line(s) not read"
    assert seconds < 2.0, f"{seconds:.1f} s"
    assert peak < 3 * MAX_SUBMISSION_BYTES, f"{peak / 2**20:.0f} MiB"  # the file once, not a list of its lines
    # every form that shows problems keeps the note that reading stopped
    assert str(err.value).splitlines()[-1] == errors[-1]
    assert f"<li>{errors[-1]}</li></ul>" in errors_html(errors, limit=10)


@pytest.mark.parametrize("variant", ["model a", "Model  A", "MODEL A", " Model\u00a0A ", "\uff2dodel A"])
def test_names_that_differ_in_case_spacing_or_width_are_one_entry(tmp_path, questions, variant):
    lb = make_lb(tmp_path / "results", questions)
    lb.submit("mmau-test-mini", "Model A", "", write_sub(tmp_path / "a.jsonl", answers_with({1})))
    again = write_sub(tmp_path / "b.jsonl", answers_with(set(range(N))))
    with pytest.raises(SubmissionError, match="a submission named 'Model A' exists"):
        lb.submit("mmau-test-mini", variant, "", again)
    result = lb.submit("mmau-test-mini", variant, "", again, replace=True)
    assert [e["model_name"] for e in result["entries"]] == [variant.strip()]
    assert len(list(records_dir(tmp_path / "results").glob("*.json"))) == 1


@pytest.mark.parametrize("name, shown", [("Model\u200bA", "U+200B"), ("Model\nA", "U+000A"),
                                         ("Model \u202eA", "U+202E"), ("\u2066Model A\u2069", "U+2066, U+2069")])
def test_names_with_control_or_format_characters_are_refused(tmp_path, questions, name, shown):
    fake = FakeOrca()
    lb = make_lb(tmp_path / "results", questions, fake)
    with pytest.raises(SubmissionError, match=re.escape(f"model name contains control or format characters ({shown})")):
        lb.submit("mmau-test-mini", name, "", write_sub(tmp_path / "a.jsonl", answers_with({1})))
    assert fake.records == [] and stored_files(tmp_path / "results") == []


def test_records_stored_before_names_were_compared_rank_once(tmp_path, questions):
    """Two records of one entry under the old file names: both kept, the newest ranked, the other listed."""
    lb = make_lb(tmp_path / "results", questions)
    lb.submit("mmau-test-mini", "Model A", "", write_sub(tmp_path / "a.jsonl", answers_with({1})))
    folder = records_dir(tmp_path / "results")
    (first,) = folder.glob("*.json")
    record = json.loads(first.read_text())
    first.rename(folder / "Model-A-0000000000.json")
    record.update(model_name="model a", submitted_at="2999-01-01T00:00:00+00:00")
    (folder / "model-a-1111111111.json").write_text(json.dumps(record))
    again = make_lb(tmp_path / "results", questions)
    assert [e["model_name"] for e in again.results["mmau-test-mini"]["entries"]] == ["model a"]
    assert any("Model A: an older record of the entry 'model a'" in x for x in again.excluded["mmau-test-mini"])
    again.submit("mmau-test-mini", "MODEL A", "", write_sub(tmp_path / "b.jsonl", answers_with({2})), replace=True)
    assert sorted(p.name for p in folder.glob("*.json")) == ["Model-A-0000000000.json", "model-a-1111111111.json"]
    assert json.loads((folder / "model-a-1111111111.json").read_text())["model_name"] == "MODEL A"


def user(name: str):
    return SimpleNamespace(username=name, name=name.title())  # what gr.OAuthProfile offers


def test_sign_in_owner_admin_and_daily_limit_decisions():
    from eval_suite.leaderboard.access import Access

    access = Access.from_settings(True, ["Root"], daily_limit=2)
    with pytest.raises(SubmissionError, match="sign in with your Hugging Face account"):
        access.user(None)
    assert access.user(user("alice")) == "alice"
    old = {"model_name": "A", "submitted_at": "2026-01-01T00:00:00+00:00", "owner": "alice"}
    access.check_replace(None, "bob", replace=False)
    with pytest.raises(SubmissionError, match="tick \"replace\""):
        access.check_replace(old, "alice", replace=False)
    access.check_replace(old, "Alice", replace=True)
    with pytest.raises(SubmissionError, match="'A' belongs to alice; only alice or an admin can replace it"):
        access.check_replace(old, "bob", replace=True)
    access.check_replace(old, "root", replace=True)  # admins, case-insensitively
    with pytest.raises(SubmissionError, match="stored without an owner"):
        access.check_replace({**old, "owner": None}, "alice", replace=True)
    access.check_daily_limit("alice", {"submissions": [{}]})
    with pytest.raises(SubmissionError, match="alice has submitted 2 times today \\(UTC\\); the limit is 2 a day"):
        access.check_daily_limit("alice", {"submissions": [{}, {}]})
    access.check_daily_limit("root", {"submissions": [{}] * 9})

    local = Access(login=False)  # a local run: today's behaviour
    assert local.user(None) is None and local.user(user("alice")) is None
    local.check_replace({**old, "owner": "alice"}, None, replace=True)
    local.check_daily_limit(None, {"submissions": [{}] * 99})
    assert "Sign-in is off" in local.note() and "2 submissions per user per day" in access.note()


def test_signed_in_submissions_keep_their_owner_and_count_per_day(tmp_path, questions):
    from eval_suite.leaderboard.access import Access

    fake = FakeOrca()
    lb = make_lb(tmp_path / "results", questions, fake)
    lb.access = Access.from_settings(True, ["root"], daily_limit=2)
    sub = write_sub(tmp_path / "a.jsonl", answers_with({1}))
    with pytest.raises(SubmissionError, match="sign in"):
        lb.submit("mmau-test-mini", "A", "", sub)
    lb.submit("mmau-test-mini", "A", "", sub, profile=user("alice"))
    (path,) = records_dir(tmp_path / "results").glob("A-*.json")
    assert json.loads(path.read_text())["owner"] == "alice"
    n_scored = len(fake.records)
    with pytest.raises(SubmissionError, match="belongs to alice"):
        lb.submit("mmau-test-mini", "a", "", sub, replace=True, profile=user("bob"))
    assert len(fake.records) == n_scored  # refused before scoring
    lb.submit("mmau-test-mini", "A", "", sub, replace=True, profile=user("alice"))
    with pytest.raises(SubmissionError, match="alice has submitted 2 times today"):
        lb.submit("mmau-test-mini", "B", "", sub, profile=user("alice"))
    lb.submit("mmau-test-mini", "A", "", sub, replace=True, profile=user("root"))
    assert json.loads(path.read_text())["owner"] == "root"
    (log,) = (tmp_path / "results" / "submission_log").rglob("alice-*.json")
    assert [x["model_name"] for x in json.loads(log.read_text())["submissions"]] == ["A", "A"]
    assert len(list(records_dir(tmp_path / "results").glob("*.json"))) == 1


def test_the_page_signs_in_with_the_hub_only_in_a_space(tmp_path, questions, monkeypatch):
    import gradio.oauth

    from eval_suite.leaderboard.access import Access, login_wanted
    from eval_suite.leaderboard.app import build_demo

    lb = make_lb(tmp_path / "results", questions)
    local = build_demo(lb)
    assert not local.expects_oauth and "Sign-in is off" in json.dumps(local.config)
    assert not login_wanted("auto") and login_wanted("on") and not login_wanted("off")
    # what the Hub sets in a Space with `hf_oauth: true` (no request leaves this machine: the routes are lazy)
    monkeypatch.setenv("SYSTEM", "spaces")
    monkeypatch.setenv("SPACE_ID", "org/board")
    for name, value in (("OAUTH_CLIENT_ID", "id"), ("OAUTH_CLIENT_SECRET", "secret"), ("OAUTH_SCOPES", "openid profile"),
                        ("OPENID_PROVIDER_URL", "https://huggingface.co")):
        monkeypatch.setattr(gradio.oauth, name, value)
        monkeypatch.setenv(name, value)  # gradio read them at import; login_wanted reads them now
    assert login_wanted("auto")
    lb.access = Access(login=True)
    space = build_demo(lb)
    assert space.expects_oauth and "/login/huggingface" in {getattr(r, "path", "") for r in space.app.routes}


def test_two_replicas_never_overwrite_each_other(tmp_path, questions):
    """Each replica commits on top of the commit it last read; a commit refused because the other replica
    committed first (412) is decided again on the new state: nothing is lost, a name is never taken twice."""
    hub = FakeHub(tmp_path / "remote")
    a = make_lb(tmp_path / "a", questions, store=ResultStore(tmp_path / "a", "org/results", api=hub))
    b = make_lb(tmp_path / "b", questions, store=ResultStore(tmp_path / "b", "org/results", api=hub))
    a.submit("mmau-test-mini", "From A", "", write_sub(tmp_path / "a.jsonl", answers_with({1, 2})))
    result = b.submit("mmau-test-mini", "From B", "", write_sub(tmp_path / "b.jsonl", answers_with({1})))
    assert hub.refused == 1 and [e["model_name"] for e in result["entries"]] == ["From A", "From B"]
    remote = json.loads((tmp_path / "remote/mmau-test-mini/leaderboard.json").read_text())
    assert [e["model_name"] for e in remote["entries"]] == ["From A", "From B"]

    a.submit("mmau-test-mini", "Same", "", write_sub(tmp_path / "s1.jsonl", answers_with({3})))
    with pytest.raises(SubmissionError, match="a submission named 'Same' exists"):  # seen after the re-sync
        b.submit("mmau-test-mini", "same", "", write_sub(tmp_path / "s2.jsonl", answers_with({4})))
    (same,) = (tmp_path / "remote/mmau-test-mini/submissions").glob("Same-*.json")
    assert json.loads(same.read_text())["answers"] == answers_with({3})
    assert len(list((tmp_path / "remote/mmau-test-mini/submissions").glob("*.json"))) == 3

    # a repository that keeps moving: a bounded number of tries, then nothing stored
    before, refused = stored_files(tmp_path / "b"), hub.refused
    hub.upload_folder = lambda *a, **k: hub.conflict()
    with pytest.raises(StoreError, match="changed 3 times"):
        b.submit("mmau-test-mini", "Late", "", write_sub(tmp_path / "l.jsonl", answers_with({5})))
    assert hub.refused == refused + 3 and stored_files(tmp_path / "b") == before


def test_plots_show_the_top_entries_of_a_board_of_1500(tmp_path, questions):
    from PIL import Image

    from eval_suite.leaderboard import build_leaderboard
    from eval_suite.leaderboard.app import ranking_html
    from eval_suite.leaderboard.render import MAX_PLOTTED, write_plots

    lb = make_lb(tmp_path / "results", questions)
    for name, correct in (("Alpha", set(range(N))), ("Beta", set(range(0, N, 2)))):
        lb.submit("mmau-test-mini", name, "", write_sub(tmp_path / f"{name}.jsonl", answers_with(correct)))
    subs, scored, _ = lb._stored("mmau-test-mini")
    real = build_leaderboard(lb.questions["mmau-test-mini"], subs, scored, resamples=20)["entries"]
    # 1,500 entries as the ranking makes them (these two, repeated under new names and ranks)
    entries = [{**real[i % 2], "model_name": f"LM {i:04d}", "rank": i + 1} for i in range(1500)]
    (tmp_path / "plots").mkdir()
    written = write_plots(tmp_path / "plots", entries, threshold=1.0)  # before: 751-inch figures, over 150 s
    assert written == ["ranking.png", "breakdown.png", "uncertainty.png"]
    for name in written:
        with Image.open(tmp_path / "plots" / name) as image:
            assert image.height < 100 * (2 + 0.5 * MAX_PLOTTED), (name, image.size)

    result = {**lb.results["mmau-test-mini"], "entries": [{k: v for k, v in e.items() if not k.startswith("_")}
                                                          for e in entries]}
    page = ranking_html(SimpleNamespace(results={"b": result}, plots={"b": [("ranking.png", b"")]}, excluded={},
                                        store=lb.store), "b")
    assert f"The plots show the top {MAX_PLOTTED} of 1500 entries; every entry is in the" in page


# ------------------------------------------------------------------------------------------------ the Space folder


def test_push_leaderboard_dry_run_writes_a_space_folder(tmp_path, monkeypatch):
    import push_to_hub
    from orca_io.version import package_version

    out = tmp_path / "space"
    qfile = tmp_path / "mmau.json"
    qfile.write_text(json.dumps(question_rows()))
    common = ["--model", "org/orca", "--questions", f"mmau-test-mini={qfile}"]
    assert push_to_hub.main(["leaderboard", "--repo-id", "org/orca-board", *common, "--model-revision", "abc123",
                             "--results-repo", "org/orca-results", "--dry-run", "--local-dir", str(out)]) == 0
    assert json.loads((out / "data/mmau_test_mini/mmau-test-mini.json").read_text()) == question_rows()
    readme = (out / "README.md").read_text()
    header = readme.split("---")[1]
    from importlib.metadata import version

    import yaml

    card = yaml.safe_load(header)
    assert card["sdk"] == "gradio" and card["sdk_version"] == version("gradio") and card["app_file"] == "app.py"
    assert f"orca-judge[space]=={package_version()}" in (out / "requirements.txt").read_text()
    app = (out / "app.py").read_text()
    compile(app, "app.py", "exec")
    assert app == (REPO / "eval_suite" / "hub_assets" / "leaderboard_space_app.py").read_text()  # a real file, copied
    space_args = json.loads((out / "space_args.json").read_text())
    assert (space_args["judge"], space_args["judge_revision"]) == ("org/orca", "abc123")
    assert "org/orca-results" in space_args["args"] and "org/orca-results" in space_args["results"]

    calls = []

    class Api:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw.get("repo_type"), kw.get("space_sdk")))
            return f"https://huggingface.co/spaces/{repo_id}"

        def upload_folder(self, repo_id, folder_path, repo_type, revision, commit_message):
            calls.append(("upload_folder", repo_id, repo_type, sorted(p.name for p in Path(folder_path).iterdir())))
            return type("Info", (), {"oid": "f" * 40})()

    monkeypatch.setattr(push_to_hub, "HfApi", Api)
    monkeypatch.setattr(push_to_hub, "get_token", lambda: "hf_test")
    assert push_to_hub.main(["leaderboard", "--repo-id", "org/orca-board", *common]) == 0
    assert calls[0] == ("create_repo", "org/orca-board", "space", "gradio")
    assert calls[1][:3] == ("upload_folder", "org/orca-board", "space") and {"app.py", "README.md",
                                                                           "requirements.txt"} <= set(calls[1][3])


def test_the_space_folder_serves_the_app(tmp_path, tiny_model_dir):
    """`python app.py` in the written Space folder, as the Space runs it, serves the leaderboard page."""
    import urllib.request

    import push_to_hub

    space = tmp_path / "space"
    qfile = tmp_path / "mmau.json"
    qfile.write_text(json.dumps(question_rows()))
    assert push_to_hub.main(["leaderboard", "--repo-id", "org/board", "--model", str(tiny_model_dir), "--questions",
                             f"mmau-test-mini={qfile}", "--dry-run", "--local-dir", str(space)]) == 0
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(REPO)}
    with open(tmp_path / "space.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=space, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline, page = time.time() + 300, None
        while page is None and time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "space.log").read_text()[-3000:]
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
            except OSError:
                time.sleep(0.5)
        assert page is not None and "ORCA leaderboard" in page
        assert (space / "leaderboard-results" / "mmau-test-mini" / "board" / "leaderboard.json").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ------------------------------------------------------------------------------------------------ a real browser

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (make browser: apt-get install chromium chromium-driver)")


class App:
    """The app as a user starts it (`python -m eval_suite.leaderboard.app ...`) on a free localhost port: in a
    process of its own, or (the fast test) in this process with the same arguments, skipping a second import of
    torch, transformers and gradio."""

    def __init__(self, tmp_path: Path, model: Path, results: Path, questions: Path, *, own_process: bool):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/"
        argv = ["--model", str(model), "--questions", f"mmau-test-mini={questions}", "--results", str(results),
                "--port", str(port), "--bootstrap", "200", "--device", "cpu", "--quiet"]
        self.proc = self.demo = None
        if own_process:
            self.log = tmp_path / f"app-{port}.log"
            with open(self.log, "w") as log:
                self.proc = subprocess.Popen([sys.executable, "-m", "eval_suite.leaderboard.app", *argv], cwd=REPO,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"})
        else:
            from eval_suite.leaderboard import app

            lb = app.from_args(app.build_parser().parse_args(argv))
            self.demo = app.build_demo(lb)
            app.launch(self.demo, lb, port=port, block=False)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"the app exited: {self.log.read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise AssertionError("the app did not answer within 300 s")

    def stop(self) -> None:
        if self.demo is not None:
            self.demo.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def chrome(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1300,1100",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):  # localhost only
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)


def wait_for(driver, condition, timeout=120, what="the page"):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.3).until(condition, message=f"waiting for {what}")


def open_tab(driver, title: str) -> None:
    from selenium.webdriver.common.by import By

    wait_for(driver, lambda d: d.find_elements(By.XPATH, f"//button[@role='tab' and contains(., '{title}')]"),
             what=f"the {title} tab")[0].click()


def submit_in_page(driver, name: str, path: Path, *, replace: bool = False) -> str:
    """Fill the submit tab like a person and return the message the page shows (a new one: callers never expect
    the message that was there before)."""
    from selenium.webdriver.common.by import By

    open_tab(driver, "Submit")
    box = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#submit-name input, #submit-name textarea"),
                   what="the name box")[0]
    box.clear()
    box.send_keys(name)
    old = driver.find_element(By.ID, "submit-result").text
    clear = driver.find_elements(By.CSS_SELECTOR, "#submit-file button[aria-label='Clear']")
    if clear:
        clear[0].click()
    driver.find_element(By.CSS_SELECTOR, "#submit-file input[type=file]").send_keys(str(path))
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'#submit-file td.filename[aria-label="{path.name}"]'),
             what="the upload")
    tick = driver.find_element(By.CSS_SELECTOR, "#submit-replace input[type=checkbox]")
    if tick.is_selected() != replace:
        tick.click()
    driver.find_element(By.ID, "submit-button").click()
    busy = "#submit-result [data-testid=status-tracker]:not(.hide)"  # gradio's progress/timer overlay

    def final_text(d):
        # gradio may hide its overlay a moment before it writes the new message: the message before the click is
        # not this submission's result (each step of these tests gets a message different from the one before)
        text = d.find_element(By.ID, "submit-result").text
        done = text != old and text.startswith(("Accepted", "Not "))
        return text if done and not d.find_elements(By.CSS_SELECTOR, busy) else None

    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, busy) or (final_text(d) or old) != old,
             what=f"{name} to be taken")
    return wait_for(driver, final_text, timeout=600, what=f"the result of submitting {name}")


def page_ranking(driver) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    open_tab(driver, "Ranking")
    rows = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#ranking table#board tbody tr") or
                    d.find_elements(By.ID, "empty-board"), what="the ranking table")
    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")] for tr in rows if tr.tag_name == "tr"]


def json_ranking(results: Path) -> list[list[str]]:
    from eval_suite.leaderboard.render import ranking_cells, ranking_columns

    board = json.loads((results / "mmau-test-mini" / "leaderboard.json").read_text())
    keys = [k for k, _ in ranking_columns(board)]
    return [[ranking_cells(e)[k] for k in keys] for e in board["entries"]]


def browser_session(tmp_path, model: Path, questions: Path, good: list[tuple[str, Path]], broken: Path,
                    broken_errors: list[str], shots: Path, *, own_process: bool) -> list[list[str]]:
    """Everything a visitor and a submitter do, in a real browser: returns the final ranking as the page shows it."""
    from selenium.webdriver.common.by import By

    results = tmp_path / "results"
    app = App(tmp_path, model, results, questions, own_process=own_process)
    driver = chrome(tmp_path / "profile")
    try:
        driver.get(app.url)
        assert page_ranking(driver) == []  # nothing yet
        message = submit_in_page(driver, "Broken LM", broken)
        assert message.startswith("Not accepted"), message
        shown = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#submit-errors li")]
        assert shown == broken_errors
        driver.save_screenshot(str(shots / "1-broken-submission.png"))
        assert not (results / "mmau-test-mini" / "submissions").exists()
        for name, path in good:
            message = submit_in_page(driver, name, path)
            assert message.startswith(f"Accepted: {name} is ranked"), message
        driver.save_screenshot(str(shots / "2-accepted.png"))
        message = submit_in_page(driver, good[0][0], good[0][1])  # again, without ticking "replace"
        assert "tick \"replace\"" in message, message
        assert submit_in_page(driver, good[0][0], good[0][1], replace=True).startswith("Accepted")
        ranking = page_ranking(driver)
        assert ranking == json_ranking(results) and len(ranking) == len(good)
        driver.save_screenshot(str(shots / "3-ranking.png"))
        plots = driver.find_elements(By.CSS_SELECTOR, "#ranking img.plot")
        assert [p.get_attribute("alt") for p in plots] == ["plots/ranking.png", "plots/breakdown.png", "plots/uncertainty.png"]
        for plot in plots:
            assert plot.get_property("naturalWidth") > 300  # the image decoded
            driver.execute_script("arguments[0].scrollIntoView();", plot)
            plot.screenshot(str(shots / f"3-plot-{plot.get_attribute('alt').split('/')[1]}"))
        driver.set_window_size(420, 1100)  # a phone: the table scrolls inside its box, the page does not widen
        driver.execute_script("document.querySelector('#ranking .scroll').scrollIntoView();")
        time.sleep(0.5)
        box = driver.execute_script("const b = document.querySelector('#ranking .scroll');"
                                    "return [b.scrollWidth, b.clientWidth, document.documentElement.scrollWidth,"
                                    " window.innerWidth];")
        assert box[0] > box[1] and box[2] <= box[3] + 1, box
        driver.save_screenshot(str(shots / "4-narrow.png"))
        driver.set_window_size(1300, 1100)
        app.stop()
        app = App(tmp_path, model, results, questions, own_process=own_process)  # a restart: results still there
        driver.get(app.url)
        after = page_ranking(driver)
        assert after == ranking
        driver.save_screenshot(str(shots / "5-after-restart.png"))
    finally:
        driver.quit()
        app.stop()
    return after


def shots_dir(tmp_path) -> Path:
    """Screenshots go to $ORCA_SCREENSHOTS when set (to look at them), else beside the test's files."""
    folder = Path(os.environ.get("ORCA_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


BROKEN = (b'{"question_id": "q00", "answer": "dog"}\n{"question_id": "nope", "answer": "dog"}\n'
          b'{"question_id": "q01", "answer": null}\n{"question_id": "q00", "answer": "cat"}\n')
BROKEN_ERRORS = ["line 2: unknown question_id 'nope' for mmau-test-mini",
                 "line 3: 'answer' must be a string, got NoneType",
                 "line 4: duplicate question_id 'q00' (first on line 1)"]


def test_app_in_headless_chromium_tiny_model(tmp_path, tiny_model_dir):
    """The fast variant: the fixture benchmark and a tiny random ORCA, through the real page."""
    need_browser()
    questions = tmp_path / "mmau.json"
    questions.write_text(json.dumps(question_rows()))
    good = [("Half right", write_sub(tmp_path / "half.jsonl", answers_with(set(range(0, N, 2))))),
            ("All right <b>&</b>", write_sub(tmp_path / "all.jsonl", answers_with(set(range(N)), skip={3})))]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(BROKEN)
    ranking = browser_session(tmp_path, tiny_model_dir, questions, good, broken, BROKEN_ERRORS, shots_dir(tmp_path),
                              own_process=False)
    assert sorted(r[1] for r in ranking) == sorted(name for name, _ in good)  # names shown as text, not markup


@pytest.mark.real
def test_app_in_headless_chromium_real_answers(tmp_path, shared_data):
    """The two real audio-LM answer sets on MMAU test-mini (converted with `orca-leaderboard export-submission`),
    judged by an ORCA on the real MiniLM backbone (head freshly initialised: no trained judge exists in CI),
    through the real page of the app in its own process."""
    need_browser()
    import torch

    from eval_suite.models.backbones import minilm_path
    from modeling_orca import OrcaForCorrectnessDistribution

    torch.manual_seed(0)
    model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(minilm_path(), score_type="multinomial", pooling="mean")
    torch.nn.init.normal_(model.score_head.weight, std=0.05)  # a head that tells answers apart (untrained)
    judge = tmp_path / "orca-minilm"
    model.save_pretrained(judge)
    tokenizer.save_pretrained(judge)
    good = []
    for stem, name in (("qwen2_audio_7b_instruct", "Qwen2-Audio-7B-Instruct"), ("qwen_audio_chat", "Qwen-Audio-Chat")):
        out = tmp_path / f"{stem}.jsonl"
        subprocess.run([sys.executable, "-m", "eval_suite.leaderboard", "export-submission", "--lalm-outputs",
                        str(shared_data / "lalm_outputs_mmau" / f"{stem}_results.json"), "--out", str(out)],
                       cwd=REPO, check=True, capture_output=True)
        good.append((name, out))
    lines = good[1][1].read_bytes().splitlines()
    first = json.loads(lines[0])["question_id"]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\n".join([lines[0], b'{"question_id": "nope", "answer": "dog"}', b'{"question_id": 7}',
                                   lines[0], *lines[1:5]]) + b"\n")
    errors = ["line 2: unknown question_id 'nope' for mmau-test-mini", "line 3: 'question_id' must be a string, got int",
              f"line 4: duplicate question_id '{first}' (first on line 1)"]
    questions = shared_data / "mmau_test_mini" / "mmau-test-mini.json"
    ranking = browser_session(tmp_path, judge, questions, good, broken, errors, shots_dir(tmp_path), own_process=True)
    assert sorted(r[1] for r in ranking) == sorted(name for name, _ in good)
    assert all(r[7] == "1000" and r[8] == "0" for r in ranking)  # every question answered
