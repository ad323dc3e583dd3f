"""orca-leaderboard (eval_suite/leaderboard): submission validation, ranking of submissions of known quality,
outputs, and the static page in a real headless browser."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from eval_suite import leaderboard as lb
from eval_suite.leaderboard.data import SubmissionError, load_questions, meta_path, read_submission, slugify
from eval_suite.leaderboard.render import inside, safe_link

CHROMIUM = Path("/usr/bin/chromium")
N = 60  # questions in the fixture benchmark
TASKS = ("sound", "music", "speech")
WORDS = "dog cat cow owl frog horse sheep goat bird fish lion bear wolf fox deer".split()
AMBIGUOUS = {"q07", "q31", "q50"}  # the fake judge predicts high variance on these: the doubtful items


def question_rows():
    rows = []
    for i in range(N):
        qid = f"q{i:02d}"
        choices = WORDS[i % 10 : i % 10 + 4]
        rows.append({"id": qid, "question": f"Which animal is heard in clip {i}?" + (" (ambiguous)" if qid in AMBIGUOUS else ""),
                     "choices": choices, "answer": choices[i % 4], "task": TASKS[i % 3],
                     "category": "Reasoning" if i % 2 else "Information Extraction", "thinking": f"clip {i} has a call"})
    return rows


@pytest.fixture
def mmau_file(tmp_path) -> Path:
    path = tmp_path / "mmau.json"
    path.write_text(json.dumps(question_rows()))
    return path


def write_sub(path: Path, answers: dict, meta: dict | None = None) -> Path:
    path.write_text("".join(json.dumps({"question_id": q, "answer": a}) + "\n" for q, a in answers.items()))
    if meta is not None:
        meta_path(path).write_text(json.dumps(meta))
    return path


def answers_with(correct: set[int], skip: set[int] = frozenset()) -> dict:
    """Right answers on the questions in `correct`, a wrong choice elsewhere, no line for `skip`."""
    rows = question_rows()
    return {r["id"]: (r["answer"] if i in correct else next(c for c in r["choices"] if c != r["answer"]))
            for i, r in enumerate(rows) if i not in skip}


class FakeOrca:
    """A judge of known behaviour behind the same `predict` interface: 4.6 for the exact reference, else 1.4;
    variance 2.5 on the ambiguous questions, 0.3 elsewhere (None for a Bernoulli head)."""

    class config:  # noqa: N801 - mimics model.config
        rating_min, rating_max, score_type = 1, 5, "multinomial"

    def __init__(self, bernoulli=False):
        self.bernoulli, self.records = bernoulli, []

    def predict(self, records, tokenizer, *, max_batch_tokens=None, show_progress=False, clamp_threshold=None):
        self.records += records
        out = []
        for r in records:
            right = r["candidate"] == r["reference"][0]
            var = None if self.bernoulli else (2.5 if "ambiguous" in r["question"] else 0.3)
            out.append({"mean": 4.6 if right else 1.4, "variance": var, "probs": None, "score": 0.0})
        return out


def expected_percent(share_right: float) -> float:
    return 100 * (share_right * 4.6 + (1 - share_right) * 1.4 - 1) / 4


def run_cli(tmp_path, monkeypatch, fake, *args) -> dict:
    monkeypatch.setattr(lb, "load_model", lambda *a, **k: (fake, None))
    out = tmp_path / "board"
    assert lb.main(["--model", "fake", "--out", str(out), "--no-progress", "--bootstrap", "500", *args]) == 0
    return json.loads((out / "leaderboard.json").read_text())


# ------------------------------------------------------------------------------------------------ validation


BAD = {
    "unknown id": (b'{"question_id": "nope", "answer": "dog"}\n', "unknown question_id 'nope'"),
    "duplicate id": (b'{"question_id": "q01", "answer": "dog"}\n{"question_id": "q01", "answer": "cat"}\n',
                     "duplicate question_id 'q01' (first on line 1)"),
    "non-UTF-8": (b'{"question_id": "q01", "answer": "caf\xe9"}\n', ":1: not UTF-8"),
    "id not a string": (b'{"question_id": 1, "answer": "dog"}\n', "'question_id' must be a string, got int"),
    "answer null": (b'{"question_id": "q01", "answer": null}\n', "'answer' must be a string, got NoneType"),
    "answer a list": (b'{"question_id": "q01", "answer": ["dog"]}\n', "'answer' must be a string, got list"),
    "not an object": (b'["q01", "dog"]\n', "expected an object"),
    "malformed JSON": (b'{"question_id": "q01", "answer": "dog"\n', "malformed JSON"),
    "unknown key": (b'{"question_id": "q01", "answer": "dog", "anwser": "x"}\n', "unknown keys ['anwser']"),
    "answer too long": (b'{"question_id": "q01", "answer": "' + b"a" * 10_001 + b'"}\n', "over the limit of 10000"),
    "empty file": (b"\n\n", "no answers"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_submission_is_rejected_with_file_and_line(tmp_path, case):
    content, message = BAD[case]
    path = tmp_path / "sub.jsonl"
    path.write_bytes(content)
    with pytest.raises(SubmissionError) as err:
        read_submission(path, [r["id"] for r in question_rows()], benchmark="mmau-test-mini")
    assert message in str(err.value) and str(path) in str(err.value)


def test_oversize_bad_metadata_and_missing_file_are_rejected(tmp_path):
    ids = [r["id"] for r in question_rows()]
    path = write_sub(tmp_path / "a.jsonl", answers_with(set(range(N))))
    with pytest.raises(SubmissionError, match="over the limit of 100 bytes"):
        read_submission(path, ids, max_bytes=100)
    meta_path(path).write_text(json.dumps({"model_name": 7, "homepage": "x"}))
    with pytest.raises(SubmissionError) as err:
        read_submission(path, ids)
    assert "'model_name' must be a string" in str(err.value) and "unknown key 'homepage'" in str(err.value)
    meta_path(path).write_text(json.dumps({"model_name": "m", "benchmark": "mmar"}))
    with pytest.raises(SubmissionError, match="for benchmark 'mmar', not 'mmau-test-mini'"):
        read_submission(path, ids, benchmark="mmau-test-mini")
    with pytest.raises(SubmissionError, match="no such file"):
        read_submission(tmp_path / "missing.jsonl", ids)


def test_cli_reports_all_problems_of_all_files_before_loading_the_model(tmp_path, mmau_file, capsys):
    a = tmp_path / "a.jsonl"
    a.write_bytes(b'{"question_id": "zz", "answer": "dog"}\n{"question_id": "q01", "answer": 3}\n')
    b = tmp_path / "b.jsonl"
    b.write_bytes(b"\xff\xfe\n")
    code = lb.main(["--model", str(tmp_path / "no-such-model"), "--benchmark", "mmau-test-mini", "--questions",
                    str(mmau_file), "--submissions", str(a), str(b), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{a}:1: unknown question_id 'zz'" in err and f"{a}:2: 'answer' must be a string" in err
    assert f"{b}:1: not UTF-8" in err
    assert not (tmp_path / "o").exists()


def test_bad_flags_and_benchmark_files_exit_2(tmp_path, mmau_file, capsys):
    sub = write_sub(tmp_path / "s.jsonl", answers_with({1}))
    base = ["--model", "unused", "--benchmark", "mmau-test-mini", "--submissions", str(sub), "--out", str(tmp_path / "o")]
    assert lb.main([*base, "--questions", str(mmau_file), "--model-names", "a", "b"]) == 2
    assert "--model-names: 2 values for 1 submissions" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": "x", "question": "q"}]')
    assert lb.main([*base, "--questions", str(broken)]) == 2
    assert "not a MMAU test-mini question file" in capsys.readouterr().err
    assert lb.main([*base, "--data-dir", str(tmp_path)]) == 2
    assert "benchmark file not found" in capsys.readouterr().err


def test_benchmark_references_and_rationales(tmp_path, mmau_file):
    rows = question_rows()
    mmau = load_questions("mmau-test-mini", questions=mmau_file)
    assert [q.id for q in mmau] == [r["id"] for r in rows]
    assert mmau[3].reference == [rows[3]["answer"]] and mmau[3].rationale == ""
    assert (mmau[3].modality, mmau[3].category) == ("sound", "Reasoning")
    mmar_file = tmp_path / "mmar.jsonl"
    mmar_file.write_text("".join(json.dumps({**r, "modality": r.pop("task")}) + "\n" for r in question_rows()))
    mmar = load_questions("mmar", questions=mmar_file)
    assert mmar[3].reference == [rows[3]["answer"]] and mmar[3].rationale == "clip 3 has a call"
    pro = tmp_path / "pro.jsonl"
    pro.write_text(json.dumps({"id": 5, "question": "Q?", "answer": ["a", "b"], "task": "music"}) + "\n")
    assert load_questions("mmau-pro", questions=pro)[0].reference == ["a", "b"]
    with pytest.raises(SubmissionError, match="pass --questions FILE"):
        load_questions("mmau-pro", data_dir=tmp_path)


# ------------------------------------------------------------------------------------------------ ranking


def test_ranking_of_submissions_of_known_quality(tmp_path, mmau_file, monkeypatch):
    shares = {"good": 0.9, "mid": 0.6, "mid-twin": 0.6, "poor": 0.3}
    subs = []
    for k, (name, share) in enumerate(shares.items()):
        # the twins have the same quality on different questions
        correct = {(i + 7 * k) % N for i in range(round(share * N))}
        subs.append(str(write_sub(tmp_path / f"{name}.jsonl", answers_with(correct), {"model_name": name})))
    fake = FakeOrca()
    board = run_cli(tmp_path, monkeypatch, fake, "--benchmark", "mmau-test-mini", "--questions", str(mmau_file),
                    "--submissions", *subs)
    entries = board["entries"]
    assert [e["model_name"] for e in entries][0] == "good" and entries[-1]["model_name"] == "poor"
    for e in entries:
        assert e["percent"] == pytest.approx(expected_percent(shares[e["model_name"]]))
        assert e["percent_ci"][0] < e["percent"] < e["percent_ci"][1]
        assert e["percent_ci"][1] - e["percent_ci"][0] < 40
        assert (e["n_questions"], e["n_answered"], e["n_missing"]) == (N, N, 0)
        assert e["high_uncertainty"] == {"threshold": 1.0, "count": 3, "share": 3 / N}
        assert sum(g["n"] for g in e["by_modality"].values()) == N and set(e["by_modality"]) == set(TASKS)
    assert entries[0]["vs_next"]["p_value"] < 0.05 and entries[0]["vs_next"]["diff"] > 0
    twins = entries[1]["vs_next"]  # mid vs mid-twin: equal quality
    assert twins["diff"] == pytest.approx(0) and twins["p_value"] > 0.5
    assert entries[2]["vs_next"]["p_value"] < 0.05 and entries[-1]["vs_next"] is None
    # neighbours not significantly apart are shown as tied; the difference is in the score's unit (% points)
    assert [e["vs_next"]["tied"] for e in entries[:3]] == [False, True, False]
    assert entries[0]["vs_next"]["diff_pp"] == pytest.approx(round(entries[0]["percent"], 1) - round(entries[1]["percent"], 1))
    # each distinct (question, answer) pair went through predict once, with the benchmark's reference
    assert len(fake.records) == len({(r["question"], r["candidate"]) for r in fake.records})
    assert all(r["rationale"] == "" and r["reference"] in ([c] for c in WORDS) for r in fake.records)
    doubtful = board["doubtful"]
    assert doubtful["count"] == 3 and {d["question_id"] for d in doubtful["items"]} == AMBIGUOUS
    out = tmp_path / "board"
    md = (out / "leaderboard.md").read_text()
    assert md.index("| 1 | good |") < md.index("| 4 | poor |") and "q07" in md
    for png in ("ranking", "breakdown", "uncertainty"):
        assert (out / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [json.loads(x) for x in (out / entries[0]["answers_file"]).read_text().splitlines()]
    assert len(rows) == N and rows[0]["question_id"] == "q00"


def scored_as(means, variance=0.3):
    return {"means": list(means), "variances": [variance] * len(means), "answered": [True] * len(means)}


def test_equal_scores_share_a_rank_and_float_noise_orders_nothing(tmp_path, mmau_file):
    from eval_suite.leaderboard.data import Submission

    questions = load_questions("mmau-test-mini", questions=mmau_file)
    base = [1.4 + 3.2 * (i % 3 == 0) for i in range(N)]
    noisy = [m + 1e-13 for m in base]  # the same answers scored in another batch order
    lower = [m - 0.2 * (i % 2) for i, m in enumerate(base)]
    subs = [Submission(tmp_path / f"{n}.jsonl", n, "", {}) for n in ("zeta", "alpha", "mid", "beta")]
    board = lb.build_leaderboard(questions, subs, [scored_as(noisy), scored_as(base), scored_as(lower), scored_as(base)],
                                 resamples=300)
    entries = board["entries"]
    # equal as shown: one rank, listed by name (the 1e-13 of "zeta" does not put it first)
    assert [(e["rank"], e["model_name"]) for e in entries] == [(1, "alpha"), (1, "beta"), (1, "zeta"), (4, "mid")]
    assert entries[0]["vs_next"]["same_score"] and entries[0]["vs_next"]["tied"] and entries[0]["vs_next"]["diff_pp"] == 0
    gap = entries[2]["vs_next"]
    assert not gap["same_score"] and not gap["tied"] and gap["p_value"] < 0.05
    assert gap["diff_pp"] == pytest.approx(round(entries[2]["percent"], 1) - round(entries[3]["percent"], 1))
    assert gap["ci_pp"][0] <= 100 * 0.1 / 4 <= gap["ci_pp"][1]  # mean gap 0.1 rating points = 2.5 % points
    # a score on a rounding boundary, give or take float noise, is shown and ranked once
    assert lb.shown_percent(55.04999999999999) == lb.shown_percent(55.05000000000001)


def test_missing_answers_are_scored_as_empty_and_counted(tmp_path, mmau_file, monkeypatch):
    skip = set(range(0, N, 4))
    sub = write_sub(tmp_path / "partial.jsonl", answers_with(set(range(N)), skip=skip))
    fake = FakeOrca()
    board = run_cli(tmp_path, monkeypatch, fake, "--benchmark", "mmau-test-mini", "--questions", str(mmau_file),
                    "--submissions", str(sub))
    e = board["entries"][0]
    assert (e["n_answered"], e["n_missing"]) == (N - len(skip), len(skip))
    assert e["percent"] == pytest.approx(expected_percent(1 - len(skip) / N))  # an empty answer is wrong
    assert sum(r["candidate"] == "" for r in fake.records) == len(skip)
    assert sum(g["n_missing"] for g in e["by_category"].values()) == len(skip)


def test_mmar_rationale_reaches_the_model(tmp_path, monkeypatch):
    mmar_file = tmp_path / "mmar.jsonl"
    mmar_file.write_text("".join(json.dumps({**r, "modality": r.pop("task")}) + "\n" for r in question_rows()))
    sub = write_sub(tmp_path / "s.jsonl", answers_with({1, 2}))
    fake = FakeOrca()
    run_cli(tmp_path, monkeypatch, fake, "--benchmark", "mmar", "--questions", str(mmar_file), "--submissions", str(sub))
    by_q = {r["question"]: r for r in fake.records}
    assert by_q["Which animal is heard in clip 2?"]["rationale"] == "clip 2 has a call"


def test_bernoulli_judge_reports_uncertainty_as_not_available(tmp_path, mmau_file, monkeypatch):
    sub = write_sub(tmp_path / "s.jsonl", answers_with({1, 2}))
    board = run_cli(tmp_path, monkeypatch, FakeOrca(bernoulli=True), "--benchmark", "mmau-test-mini",
                    "--questions", str(mmau_file), "--submissions", str(sub), "--model-names", "From flag",
                    "--links", "https://example.org")
    assert (board["entries"][0]["model_name"], board["entries"][0]["link"]) == ("From flag", "https://example.org")
    unc = board["entries"][0]["high_uncertainty"]
    assert unc["share"] is None and unc["count"] is None and "not available" in unc["note"]
    assert board["doubtful"]["count"] is None and "not available" in board["doubtful"]["note"]
    assert board["plots"] == ["plots/ranking.png", "plots/breakdown.png"]


def test_names_and_links_are_sanitised(tmp_path):
    assert slugify("../../x") == "x" and slugify("..") == "submission" and "/" not in slugify("a/b\\c")
    with pytest.raises(ValueError, match="outside"):
        inside(tmp_path, "../x.jsonl")
    assert safe_link("https://example.org/a?b=1&c=2") and safe_link("HTTP://x.org")
    for bad in ("javascript:alert(1)", "data:text/html,x", "//evil.org", "https://x.org/\"onmouseover=1", ""):
        assert safe_link(bad) == ""


# ------------------------------------------------------------------------------------------------ real model + browser


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny random ORCA (BERT, the quickstart's architecture) saved as a loadable folder."""
    import torch
    from transformers import AutoTokenizer

    from configuration_orca import OrcaConfig
    from eval_suite.models.backbones import minilm_path
    from modeling_orca import OrcaForCorrectnessDistribution
    from training.model import tiny_backbone_config

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    torch.manual_seed(0)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=tiny_backbone_config("bert", len(tokenizer)),
                                                      pooling="mean"))
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    folder = tmp_path_factory.mktemp("model") / "orca-tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def chromium(*args) -> str:
    result = subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                             "--disable-component-update", "--disable-sync", "--no-first-run", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def board_names(dom: str) -> list[str]:
    board = dom[dom.index('id="board"') : dom.index("</table>", dom.index('id="board"'))]
    cells = re.findall(r'<td class="text model"[^>]*>(.*?)</td>', board, re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells]


def test_tiny_model_end_to_end_page_in_headless_chromium(tmp_path, mmau_file, tiny_model_dir):
    hostile = '<script>alert(1)</script> & "q"'
    subs = [write_sub(tmp_path / "a.jsonl", answers_with(set(range(0, N, 2))), {"model_name": "../../evil", "link": "javascript:alert(1)"}),
            write_sub(tmp_path / "b.jsonl", answers_with(set(range(N)), skip={3}), {"model_name": hostile}),
            write_sub(tmp_path / "c.jsonl", answers_with(set()), {"model_name": "Zeta $x$", "link": "https://example.org/z?a=1&b=2"})]
    out = tmp_path / "out" / "board"
    assert lb.main(["--model", str(tiny_model_dir), "--benchmark", "mmau-test-mini", "--questions", str(mmau_file),
                    "--submissions", *map(str, subs), "--out", str(out), "--no-progress", "--bootstrap", "200"]) == 0
    board = json.loads((out / "leaderboard.json").read_text())
    names = [e["model_name"] for e in board["entries"]]
    assert sorted(names) == sorted(["../../evil", hostile, "Zeta $x$"])
    assert board["entries"][[e["model_name"] for e in board["entries"]].index(hostile)]["n_missing"] == 1
    # nothing written outside --out, whatever the names say
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert all(p.resolve().is_relative_to(out.resolve()) for p in written) and not (tmp_path / "evil").exists()
    assert "<script>alert(1)" not in (out / "index.html").read_text()

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install -y chromium); the browser half of this test needs it")
    profile = tmp_path / "chromium-profile"
    page = (out / "index.html").as_uri()
    shot = tmp_path / "shot.png"
    chromium(f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,900", page)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    dom = chromium(f"--user-data-dir={profile}", "--dump-dom", page)
    assert board_names(dom) == names  # rows built by the page's script, in rank order
    assert 'href="https://example.org/z?a=1&amp;b=2"' in dom and "javascript:" not in dom.split("leaderboard-data")[0]
    assert "<script>alert(1)</script>" not in dom.replace('"', "")  # escaped as text everywhere
    dom = chromium(f"--user-data-dir={profile}", "--dump-dom", page + "#sort=model:asc")
    assert board_names(dom) == sorted(names, key=str.lower)


@pytest.mark.real
def test_export_real_lalm_outputs_as_valid_submissions(tmp_path, shared_data):
    ids = [q.id for q in load_questions("mmau-test-mini", data_dir=shared_data)]
    for stem, name in (("qwen2_audio_7b_instruct", "Qwen2-Audio-7B-Instruct"), ("qwen_audio_chat", "Qwen-Audio-Chat")):
        out = tmp_path / f"{stem}.jsonl"
        assert lb.main(["export-submission", "--lalm-outputs", str(shared_data / "lalm_outputs_mmau" / f"{stem}_results.json"),
                        "--out", str(out)]) == 0
        sub = read_submission(out, ids, benchmark="mmau-test-mini")
        assert sub.model_name == name and len(sub.answers) == len(ids) == 1000
        assert all(isinstance(a, str) for a in sub.answers.values())


# ------------------------------------------------------------------------------------------------ statistics


def test_bootstrap_interval_matches_a_hand_written_percentile_bootstrap_within_monte_carlo_error():
    from eval_suite.leaderboard.stats import CONFIDENCE, bootstrap_ci, paired_bootstrap

    values = np.random.default_rng(4).uniform(1, 5, 60)
    resamples, alpha = 20_000, (1 - CONFIDENCE) / 2
    idx = np.random.default_rng(99).integers(0, len(values), size=(resamples, len(values)))
    by_hand = np.quantile(values[idx].mean(axis=1), [alpha, 1 - alpha])
    # each end is a quantile of 20,000 resampled means: Monte-Carlo sd about 0.003 here, so 0.015 is about 5 sd
    np.testing.assert_allclose(bootstrap_ci(values, resamples, seed=0), by_hand, atol=0.015)
    d = values - np.random.default_rng(5).uniform(1, 5, 60)
    by_hand_d = np.quantile(d[idx].mean(axis=1), [alpha, 1 - alpha])
    np.testing.assert_allclose(paired_bootstrap(d, np.zeros_like(d), resamples, seed=0)["ci"], by_hand_d, atol=0.03)


def test_paired_p_value_equals_the_exact_sign_flip_test_on_few_questions():
    import itertools

    from eval_suite.leaderboard.stats import paired_bootstrap

    a = np.array([4.6, 1.4, 4.6, 4.6, 3.0, 4.6, 1.4, 4.6, 4.2, 2.2])
    b = np.array([1.4, 1.4, 4.6, 1.4, 2.0, 4.6, 1.4, 1.4, 4.0, 2.6])
    d = a - b
    flipped = [abs(np.mean(d * np.array(signs))) for signs in itertools.product((1, -1), repeat=len(d))]
    exact = np.mean(np.array(flipped) >= abs(d.mean()) - 1e-12)  # 2^10 sign patterns, the observed one included
    assert paired_bootstrap(a, b, resamples=5000, seed=0)["p_value"] == pytest.approx(exact, abs=1e-12)
    assert paired_bootstrap(a, a, resamples=5000, seed=0)["p_value"] == pytest.approx(1.0)
