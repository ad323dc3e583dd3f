"""orca-score (eval_suite/scoring/cli.py) on a tiny random ORCA model saved to a folder: order, validation, clamping,
scoring question by question (the shard plan), resume after an interruption, and a 2-process `accelerate launch`
run equal to the single-process one."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from eval_suite.models import loading
from eval_suite.scoring import cli, scorer, sharding

REPO = Path(__file__).resolve().parents[1]
WORDS = "dog cat cow owl frog horse sheep goat bird fish lion bear wolf fox deer".split()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny llama ORCA with a large random head, so predictions vary and some are confident near 1 or 5
    (what clamping acts on)."""
    from transformers import AutoTokenizer

    from configuration_orca import OrcaConfig
    from eval_suite.models.backbones import smollm2_path
    from modeling_orca import OrcaForCorrectnessDistribution
    from training.model import tiny_backbone_config

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())  # our own copy: we set its pad token
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(0)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=tiny_backbone_config("llama", len(tokenizer))))
    with torch.no_grad():
        model.score_head.weight.copy_(torch.randn(model.score_head.weight.shape, generator=torch.Generator().manual_seed(1)))
    folder = tmp_path_factory.mktemp("model") / "orca-tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_lines(n: int, seed: int, labelled: bool = True) -> list[dict]:
    """Release-format records (reference as a string, `transcription`), plus an extra key that must survive."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        line = {"id": f"s{seed}-{i}", "question": "Which animal can be heard?", "reference": rng.choice(WORDS),
                "rationale": "An animal call.", "transcription": "", "candidate": " ".join(rng.sample(WORDS, 3)),
                "note": f"kept-{i}"}
        if labelled:
            line["ratings"] = [rng.randint(1, 5) for _ in range(rng.choice([1, 3]))]
        lines.append(line)
    return lines


def by_system(questions: int, systems: str, seed: int) -> list[dict]:
    """Answers listed system by system, as benchmark exports often are: every question once per system, so the
    answers to one question lie `questions` lines apart (file-order chunks of a system share no prefix)."""
    rng = random.Random(seed)
    refs = [rng.choice(WORDS) for _ in range(questions)]
    return [{"id": f"{s}-{q}", "question": f"Which animal is number {q}?", "reference": refs[q],
             "rationale": "An animal call.", "transcription": "", "candidate": " ".join(rng.sample(WORDS, 2)),
             "ratings": [rng.randint(1, 5)]} for s in systems for q in range(questions)]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def score(model_dir, inp, out, *extra) -> dict:
    summary = out.with_suffix(".summary.json")
    assert cli.main(["--model", str(model_dir), "--input", str(inp), "--output", str(out), "--summary", str(summary),
                     "--no-progress", *extra]) == 0
    return json.loads(summary.read_text())


def test_every_line_in_order_with_predict_scores_and_summary(tmp_path, model_dir):
    from transformers import AutoModel, AutoTokenizer

    from orca_io.schema import validate_record

    lines = make_lines(10, 0) + make_lines(4, 1, labelled=False)
    random.Random(2).shuffle(lines)
    inp = write_jsonl(tmp_path / "in.jsonl", lines[:7] + [""] + lines[7:])  # a blank line is counted, not output
    summary = score(model_dir, inp, tmp_path / "out.jsonl", "--max-batch-tokens", "768", "--chunk-size", "5", "--clamp", "off")

    out = read_jsonl(tmp_path / "out.jsonl")
    assert [o["id"] for o in out] == [x["id"] for x in lines]
    assert all(o["note"] == x["note"] and o["orca_error"] is None for o, x in zip(out, lines))
    model = AutoModel.from_pretrained(model_dir, trust_remote_code=True)
    expected = model.predict([validate_record(x) for x in lines], AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True))
    np.testing.assert_allclose([o["orca_mean"] for o in out], [p["mean"] for p in expected], atol=1e-5)
    np.testing.assert_allclose([o["orca_probs"] for o in out], [p["probs"] for p in expected], atol=1e-5)
    np.testing.assert_allclose([o["orca_score"] for o in out], [(o["orca_mean"] - 1) / 4 for o in out], atol=1e-9)
    assert not (tmp_path / "out.jsonl.partial").exists()

    assert summary["counts"] == {
        "lines": 15, "blank_lines": 1, "records": 14, "scored": 14, "errors": 0, "labelled": 10, "resumed_from": 0, "processes": 1,
        "over_max_chars": 0}
    assert summary["package"]["version"] not in ("", None)
    assert summary["model"]["revision"].startswith(str(model_dir.resolve()) + "#files-sha256:")
    assert summary["system"]["mean"] == pytest.approx(np.mean([o["orca_mean"] for o in out]))
    assert summary["metrics"]["unclamped"]["n"] == 10 and "clamped" not in summary["metrics"]
    assert summary["config"]["model"]["score_type"] == "multinomial"


def test_shard_plan_example():
    keys = list("aabcbaddd")  # groups a: 0 1 5, b: 2 4, c: 3, d: 6 7 8
    assert sharding.shard_plan(keys, 1) == [[0, 1, 5, 2, 4, 3, 6, 7, 8]]
    assert sharding.shard_plan(keys, 2) == [[0, 1, 5, 2, 4], [3, 6, 7, 8]]
    assert sharding.shard_plan(keys, 5) == [[0, 1, 5], [6, 7, 8], [2, 4], [3], []]
    assert sharding.shard_plan(list("abc"), 1) == [[0, 1, 2]] and sharding.shard_plan([], 2) == [[], []]


@pytest.mark.parametrize("seed", range(30))
def test_shard_plan_keeps_groups_whole_balanced_and_deterministic(seed):
    rng = random.Random(seed)
    alphabet = "abcdefghijkl"[: rng.randint(1, 12)]
    keys = [rng.choice(alphabet) if rng.random() < 0.8 else alphabet[0] for _ in range(rng.randint(1, 80))]
    keys += [("line", i) for i in range(rng.randint(0, 3))]  # lines that failed validation: their own groups
    first = {k: keys.index(k) for k in keys}
    for count in range(1, 7):
        plan = sharding.shard_plan(keys, count)
        assert len(plan) == count and sorted(i for shard in plan for i in shard) == list(range(len(keys)))
        owners = {keys[i]: k for k, shard in enumerate(plan) for i in shard}
        assert all(owners[keys[i]] == k for k, shard in enumerate(plan) for i in shard)  # no group split
        for shard in plan:  # group by group, in first appearance order, input order within a group
            assert shard == sorted(shard, key=lambda i: (first[keys[i]], i))
        loads = [len(shard) for shard in plan]
        assert max(loads) - min(loads) <= max(keys.count(k) for k in first)
        assert sharding.shard_plan(list(keys), count) == plan


def test_group_key_is_the_text_before_the_candidate():
    from configuration_orca import OrcaConfig
    from orca_io.schema import validate_record

    def key(line: int, **change) -> object:
        obj = {"id": "a", "question": "Which animal?", "reference": "dog", "rationale": "A call.", "candidate": "a dog"}
        return sharding.group_key(scorer.Entry(line, "", obj | change, validate_record(obj | change)), OrcaConfig())

    assert key(1) == key(2, id="b", candidate="a cat") and "Which animal?" in key(1) and "a dog" not in key(1)
    assert key(1) != key(3, reference="cat") and key(1) != key(4, question="Which bird?")
    bad = [sharding.group_key(scorer.Entry(line, "x", None, None, "bad"), OrcaConfig()) for line in (5, 6)]
    assert bad[0] != bad[1]  # lines that failed validation are groups of one


def test_finalise_merges_in_input_order_and_refuses_a_shard_off_plan(tmp_path):
    entries, _ = scorer.read_entries(write_jsonl(tmp_path / "in.jsonl", by_system(2, "AB", 12)), "raise")  # A-0 A-1 B-0 B-1
    out = tmp_path / "out.jsonl"
    for plan in ([[0, 2, 1, 3]], [[0, 2], [1, 3]]):
        for k, shard in enumerate(plan):
            write_jsonl(sharding.shard_path(out, k, len(plan)), [{"id": entries[i].obj["id"], "orca_error": None} for i in shard])
        lines = sharding.finalise(out, entries, plan)
        assert [o["id"] for o in lines] == [o["id"] for o in read_jsonl(out)] == ["A-0", "A-1", "B-0", "B-1"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]
    write_jsonl(sharding.shard_path(out, 0, 1), [{"id": e.obj["id"], "orca_error": None} for e in entries])  # input order
    with pytest.raises(RuntimeError, match="out of order"):
        sharding.finalise(out, entries, [[0, 2, 1, 3]])


def test_answers_sorted_by_system_are_scored_question_by_question_in_input_order(tmp_path, model_dir, monkeypatch):
    from transformers import AutoModel, AutoTokenizer

    from orca_io.schema import validate_record

    lines = by_system(4, "ABC", 11)
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    real_write, written = sharding.write_chunk, []

    def spy(fh, chunk):
        written.append([o["id"] for o in chunk])
        real_write(fh, chunk)

    monkeypatch.setattr(sharding, "write_chunk", spy)
    score(model_dir, inp, tmp_path / "out.jsonl", "--chunk-size", "6", "--max-batch-tokens", "1024", "--clamp", "off")
    # each chunk (one predict call) holds whole questions; file order would give one system per chunk, nothing shared
    assert written[:2] == [["A-0", "B-0", "C-0", "A-1", "B-1", "C-1"], ["A-2", "B-2", "C-2", "A-3", "B-3", "C-3"]]
    assert written[2] == [x["id"] for x in lines]  # the merged output, in input order

    out = read_jsonl(tmp_path / "out.jsonl")
    assert [o["id"] for o in out] == [x["id"] for x in lines] and not (tmp_path / "out.jsonl.partial").exists()
    assert all({k: o[k] for k in x} == x for o, x in zip(out, lines))
    model, tokenizer = AutoModel.from_pretrained(model_dir, trust_remote_code=True), AutoTokenizer.from_pretrained(model_dir)
    alone = [model.predict([validate_record(x)], tokenizer)[0] for x in lines]
    np.testing.assert_allclose([o["orca_mean"] for o in out], [p["mean"] for p in alone], atol=1e-5)
    np.testing.assert_allclose([o["orca_probs"] for o in out], [p["probs"] for p in alone], atol=1e-5)


def test_unlabelled_input_gives_scores_and_no_metrics(tmp_path, model_dir, capsys):
    inp = write_jsonl(tmp_path / "in.jsonl", make_lines(5, 3, labelled=False))
    summary = score(model_dir, inp, tmp_path / "out.jsonl")
    out = read_jsonl(tmp_path / "out.jsonl")
    assert len(out) == 5 and all(0 <= o["orca_score"] <= 1 and len(o["orca_probs"]) == 5 for o in out)
    assert summary["metrics"] == {} and summary["system"]["human_mean"] is None
    assert "spearman" not in capsys.readouterr().out  # no metric table without ratings


BAD = [
    ('{"id": "x1", "question": "q", "candidate": "a dog"}', "field 'reference'"),
    ("this is not json", "malformed JSON"),
    ('{"id": "x2", "question": "q", "reference": "dog", "candidate": "dog", "ratings": [7]}', "field 'ratings'"),
    ('{"id": "s4-0", "question": "q", "reference": "dog", "candidate": "dog"}', "duplicate id"),
]


def test_bad_lines_raise_exit_2_naming_file_line_field(tmp_path, model_dir, capsys):
    good = make_lines(3, 4)
    for bad, what in BAD:
        inp = write_jsonl(tmp_path / "in.jsonl", [good[0], good[1], bad, good[2]])
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["--model", str(model_dir), "--input", str(inp), "--output", str(tmp_path / "out.jsonl")])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert f"{inp}:3: " in err and what in err
        assert not list(tmp_path.glob("out.jsonl*"))  # nothing written


def test_bad_lines_skip_are_written_in_place_and_counted(tmp_path, model_dir):
    good = make_lines(4, 4)
    inp = write_jsonl(tmp_path / "in.jsonl", [good[0], BAD[0][0], good[1], BAD[1][0], good[2], BAD[2][0], BAD[3][0], good[3]])
    summary = score(model_dir, inp, tmp_path / "out.jsonl", "--on-error", "skip", "--chunk-size", "3")
    out = read_jsonl(tmp_path / "out.jsonl")
    assert len(out) == 8
    assert [o["id"] for o in out if o["orca_error"] is None] == [g["id"] for g in good]
    errors = [o for o in out if o["orca_error"] is not None]
    assert [o["orca_line"] for o in errors] == [2, 4, 6, 7]
    assert all(o["orca_score"] is None and o["orca_mean"] is None for o in errors)
    assert errors[1]["orca_input"] == "this is not json" and errors[0]["id"] == "x1"  # the input is kept
    assert summary["counts"]["errors"] == 4 and summary["counts"]["scored"] == 4
    assert [e["line"] for e in summary["errors"]] == [2, 4, 6, 7]


def test_clamp_modes(tmp_path, model_dir):
    inp = write_jsonl(tmp_path / "in.jsonl", make_lines(40, 5))
    score(model_dir, inp, tmp_path / "off.jsonl", "--clamp", "off")
    summary = score(model_dir, inp, tmp_path / "num.jsonl", "--clamp", "0.3")
    off, num = read_jsonl(tmp_path / "off.jsonl"), read_jsonl(tmp_path / "num.jsonl")
    changed = 0
    for a, b in zip(off, num):
        s, v = a["orca_score"], a["orca_variance"]
        should = v <= 0.3 and (s < 0.125 or s > 0.875)
        assert b["orca_score"] == (round(s) if should else pytest.approx(s, abs=1e-6))
        changed += should
    assert 0 < changed < len(off)  # the fixture model has confident and unconfident items near the ends
    assert summary["clamp"]["threshold"] == 0.3 and {"clamped", "unclamped"} <= set(summary["metrics"])
    assert summary["metrics"]["clamped"]["mae_mean"] != summary["metrics"]["unclamped"]["mae_mean"]

    # auto: the threshold stored in the config; none stored is an error
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--model", str(model_dir), "--input", str(inp), "--output", str(tmp_path / "auto.jsonl"), "--clamp", "auto"])
    assert exit_info.value.code == 2 and not list(tmp_path.glob("auto.jsonl*"))
    config = json.loads((model_dir / "config.json").read_text())
    clamped_dir = shutil.copytree(model_dir, tmp_path / "clamped-model")
    (clamped_dir / "config.json").write_text(json.dumps(config | {"clamp": True, "clamp_variance_threshold": 0.3}))
    score(clamped_dir, inp, tmp_path / "auto.jsonl", "--clamp", "auto")
    score(clamped_dir, inp, tmp_path / "default.jsonl")  # default: as the config says
    score(clamped_dir, inp, tmp_path / "off2.jsonl", "--clamp", "off")  # off wins over config.clamp
    assert read_jsonl(tmp_path / "auto.jsonl") == read_jsonl(tmp_path / "default.jsonl") == num
    assert [o["orca_score"] for o in read_jsonl(tmp_path / "off2.jsonl")] == [o["orca_score"] for o in off]


def test_tune_clamp_on_dev_applies_the_tuned_threshold(tmp_path, model_dir):
    from transformers import AutoModel, AutoTokenizer

    from eval_suite.scoring.clamping import tune_clamp_threshold
    from orca_io.schema import validate_record

    dev_lines = make_lines(40, 6)
    model = AutoModel.from_pretrained(model_dir, trust_remote_code=True)
    preds = model.predict([validate_record(x) for x in dev_lines], AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True))
    for line, p in zip(dev_lines, preds):  # humans side with the model's call: clamping confident items pays off
        line["ratings"] = [5, 5, 5] if p["mean"] >= 3 else [1, 1, 1]
    dev = write_jsonl(tmp_path / "dev.jsonl", dev_lines)
    inp = write_jsonl(tmp_path / "in.jsonl", make_lines(20, 7))
    expected, _ = tune_clamp_threshold([p["score"] for p in preds], [p["variance"] for p in preds],
                                       [line["ratings"][0] for line in dev_lines])
    assert expected > 0  # some clamping helps on this dev set

    summary = score(model_dir, inp, tmp_path / "out.jsonl", "--tune-clamp-on", str(dev))
    assert summary["clamp"]["mode"] == "tuned" and summary["clamp"]["dev_items"] == 40
    assert summary["clamp"]["threshold"] == pytest.approx(expected)
    assert {"clamped", "unclamped"} <= set(summary["metrics"])
    assert summary["clamp"]["dev_clamped"]["objective"] > summary["clamp"]["dev_unclamped"]["objective"]
    with pytest.raises(SystemExit):
        cli.main(["--model", str(model_dir), "--input", str(inp), "--output", str(tmp_path / "x.jsonl"),
                  "--tune-clamp-on", str(dev), "--clamp", "0.1"])


def test_resume_after_interruption_has_no_gaps_or_duplicates(tmp_path, model_dir, monkeypatch):
    inp = write_jsonl(tmp_path / "in.jsonl", by_system(5, "ABCD", 8))  # chunks of 4: one question each
    args = ["--chunk-size", "4", "--max-batch-tokens", "1024"]
    score(model_dir, inp, tmp_path / "straight.jsonl", *args)

    out = tmp_path / "out.jsonl"
    real_write, calls = sharding.write_chunk, []

    def write_then_die(fh, lines):
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated kill after two chunks")
        calls.append(len(lines))
        real_write(fh, lines)

    monkeypatch.setattr(sharding, "write_chunk", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        score(model_dir, inp, out, *args)
    monkeypatch.setattr(sharding, "write_chunk", real_write)
    partial = tmp_path / "out.jsonl.partial"
    assert [o["id"] for o in read_jsonl(partial)] == ["A-0", "B-0", "C-0", "D-0", "A-1", "B-1", "C-1", "D-1"]
    assert not out.exists()
    with partial.open("a") as fh:
        fh.write('{"id": "A-2", "orca_me')  # a torn line from a kill mid-write

    with pytest.raises(SystemExit) as exit_info:  # an existing partial file needs --resume
        cli.main(["--model", str(model_dir), "--input", str(inp), "--output", str(out), *args])
    assert exit_info.value.code == 2
    summary = score(model_dir, inp, out, *args, "--resume")
    assert summary["counts"]["resumed_from"] == 8
    resumed, straight = read_jsonl(out), read_jsonl(tmp_path / "straight.jsonl")
    assert [o["id"] for o in resumed] == [o["id"] for o in straight]
    np.testing.assert_allclose([o["orca_mean"] for o in resumed], [o["orca_mean"] for o in straight], atol=1e-6)
    assert not partial.exists()


def test_resume_refuses_a_partial_file_produced_with_other_settings(tmp_path, model_dir, monkeypatch, capsys):
    """A partial file records what produced it (beside it, PARTIAL.meta.json): a resume with another model,
    clamping threshold or output format would mix two runs in one output, so it is refused naming what differs."""
    inp = write_jsonl(tmp_path / "in.jsonl", by_system(3, "AB", 4))
    out, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    args = ["--model", str(model_dir), "--input", str(inp), "--output", str(out), "--chunk-size", "2", "--no-progress"]
    real_write = sharding.write_chunk

    def die_after_first_chunk(fh, lines):
        real_write(fh, lines)
        raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(sharding, "write_chunk", die_after_first_chunk)
    with pytest.raises(KeyboardInterrupt):
        cli.main([*args, "--clamp", "off"])
    monkeypatch.setattr(sharding, "write_chunk", real_write)
    assert len(read_jsonl(partial)) == 2 and json.loads((tmp_path / "out.jsonl.partial.meta.json").read_text())["clamp_threshold"] is None

    other_model = tmp_path / "other-model"
    shutil.copytree(model_dir, other_model)
    changed = {"clamp_threshold": ["--clamp", "0.5"], "output_format": ["--clamp", "off", "--output-format", "reference"],
               "model": ["--clamp", "off", "--model", str(other_model)]}
    for what, extra in changed.items():
        with pytest.raises(SystemExit) as exit_info:
            cli.main([*args, *extra, "--resume"])
        assert exit_info.value.code == cli.EXIT_INVALID
        err = capsys.readouterr().err
        assert f"produced with other settings ({what}: " in err, err
        assert not out.exists() and len(read_jsonl(partial)) == 2  # refused before anything was appended

    summary = score(model_dir, inp, out, "--chunk-size", "2", "--clamp", "off", "--resume")
    assert summary["counts"]["resumed_from"] == 2 and [o["id"] for o in read_jsonl(out)] == [x["id"] for x in read_jsonl(inp)]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out.jsonl")) == ["out.jsonl"]

    partial.write_text(read_jsonl(out)[0] and json.dumps(read_jsonl(out)[0]) + "\n")  # no meta file: cannot be checked
    with pytest.raises(SystemExit):
        cli.main([*args, "--clamp", "off", "--resume"])
    assert "cannot be checked" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_accelerate_launch_equals_single_process(tmp_path, model_dir):
    answers = by_system(5, "ABC", 9)  # interleaved questions: each process must get whole questions
    lines = answers[:7] + ["not json"] + answers[7:] + make_lines(4, 10, labelled=False)
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    common = ["--model", str(model_dir), "--input", str(inp), "--on-error", "skip", "--chunk-size", "3", "--no-progress"]
    single = score(model_dir, inp, tmp_path / "single.jsonl", "--on-error", "skip", "--chunk-size", "3")

    # `accelerate launch --cpu` starts one process unless MPI is set up; --multi_gpu is its torchrun launcher, which
    # on a machine without GPUs gives CPU processes (the CLI then asks PartialState for a gloo group)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
           "-m", "eval_suite.scoring.cli", *common, "--output", str(tmp_path / "multi.jsonl"),
           "--summary", str(tmp_path / "multi.summary.json")]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    a, b = read_jsonl(tmp_path / "single.jsonl"), read_jsonl(tmp_path / "multi.jsonl")
    assert [o.get("id") for o in b] == [o.get("id") for o in a] and len(b) == 20
    assert [o["orca_error"] is None for o in b] == [o["orca_error"] is None for o in a]
    for key in ("orca_mean", "orca_score"):
        np.testing.assert_allclose([o[key] or 0.0 for o in b], [o[key] or 0.0 for o in a], atol=1e-6)
    multi = json.loads((tmp_path / "multi.summary.json").read_text())
    assert multi["counts"]["processes"] == 2 and multi["counts"]["errors"] == single["counts"]["errors"] == 1
    assert not list(tmp_path.glob("multi.jsonl.*"))  # shards merged and removed


def test_dtype_bfloat16_loads_and_scores_close_to_float32(tmp_path, model_dir):
    inp = write_jsonl(tmp_path / "in.jsonl", make_lines(6, 3))
    full = score(model_dir, inp, tmp_path / "f32.jsonl", "--clamp", "off")
    half = score(model_dir, inp, tmp_path / "bf16.jsonl", "--clamp", "off", "--dtype", "bfloat16")
    assert half["config"]["args"]["dtype"] == "bfloat16" and full["config"]["args"]["dtype"] == "auto"
    f32, bf16 = read_jsonl(tmp_path / "f32.jsonl"), read_jsonl(tmp_path / "bf16.jsonl")
    assert [o["id"] for o in bf16] == [o["id"] for o in f32]
    diffs = [abs(a["orca_mean"] - b["orca_mean"]) for a, b in zip(f32, bf16)]
    assert max(diffs) < 0.1 and any(d > 0 for d in diffs)  # bf16 really ran: close to float32, not equal


# ------------------------------------------------------------------------------------------------ shared flags


def test_model_flags_are_shared_with_visible_defaults_and_help_lists_the_input_fields(capsys):
    from eval_suite.report import cli as orca_eval

    for parser in (cli.build_parser(), orca_eval.build_parser()):
        text = parser.format_help()
        for flag in ("--device", "--dtype", "--max-batch-tokens", "--batch-size", "--quiet"):
            assert flag in text, (parser.prog, flag)
        flat = " ".join(text.split())  # argparse wraps long help lines
        assert "(default: auto = the GPU" in flat and "(default: the model's, 1,024 on the CPU, 4,096 elsewhere)" in flat
    text = " ".join(cli.build_parser().format_help().split())
    for words in ("required id (unique string), question, reference", "optional rationale", "ratings",
                  'example {"id": "q1-a"', "--output-format"):
        assert words in text, words


def test_the_deprecated_batch_size_flag_is_its_token_budget_and_says_so_once(tmp_path, model_dir, capsys):
    """Issue 50: --batch-size N never counted inputs (N x 256 tokens); it stays for a release as an alias of
    --max-batch-tokens N x 256, with one deprecation line on stderr, and scores exactly as that."""
    inp = write_jsonl(tmp_path / "in.jsonl", make_lines(8, 3))
    new = score(model_dir, inp, tmp_path / "new.jsonl", "--max-batch-tokens", "768", "--clamp", "off")
    assert "deprecated" not in capsys.readouterr().err
    old = score(model_dir, inp, tmp_path / "old.jsonl", "--batch-size", "3", "--clamp", "off")
    err = capsys.readouterr().err
    assert [x for x in err.splitlines() if "deprecated" in x] == [
        "warning: --batch-size is deprecated (it never counted inputs: N x 256 tokens); use --max-batch-tokens 768"]
    assert read_jsonl(tmp_path / "old.jsonl") == read_jsonl(tmp_path / "new.jsonl")
    assert old["config"]["args"]["max_batch_tokens"] == new["config"]["args"]["max_batch_tokens"] == 768
    assert cli.build_parser().parse_args(["--model", "m", "--input", "i", "--output", "o"]).max_batch_tokens is None
    for flags in (["--batch-size", "3", "--max-batch-tokens", "768"], ["--max-batch-tokens", "0"], ["--batch-size", "0"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["--model", "m", "--input", "i", "--output", "o", *flags])


def test_system_line_without_ratings_and_quiet_silences_libraries(tmp_path, model_dir, capfd):
    from transformers.utils import logging as hf_logging

    inp = write_jsonl(tmp_path / "in.jsonl", make_lines(5, 3, labelled=False))
    try:
        assert cli.main(["--model", str(model_dir), "--input", str(inp), "--output", str(tmp_path / "out.jsonl"),
                         "--quiet"]) == 0
        assert hf_logging.get_verbosity() == hf_logging.ERROR and not hf_logging.is_progress_bar_enabled()
    finally:
        cli.set_quiet(False)
    out, err = capfd.readouterr()
    means = [o["orca_mean"] for o in read_jsonl(tmp_path / "out.jsonl")]
    scores = [o["orca_score"] for o in read_jsonl(tmp_path / "out.jsonl")]
    line = next(x for x in out.splitlines() if x.startswith("system:"))
    assert f"n=5  mean rating {sum(means) / 5:.4f} (1-5)  mean score {sum(scores) / 5:.4f}" in line
    assert "human mean" not in line and "| scores |" not in out  # no ratings: no metric table
    assert "Loading weights" not in err and "orca-score:" not in err and "%|" not in err, err[-500:]


def test_load_model_refuses_what_is_not_an_orca_model(tmp_path):
    with pytest.raises(loading.UsageError, match="--model"):
        loading.load_model(str(tmp_path / "missing"))


def test_score_file_from_python_with_score_options_equals_the_cli(tmp_path, model_dir):
    """Issue 50: a Python caller builds `ScoreOptions` (no argparse namespace to fake); the output is the CLI's, and
    the summary lists the same options, every flag in the parser's order."""
    inp = write_jsonl(tmp_path / "in.jsonl", make_lines(6, 3))
    flags = ["--clamp", "off", "--chunk-size", "4"]
    cli_summary = score(model_dir, inp, tmp_path / "cli.jsonl", *flags)
    options = scorer.ScoreOptions(model=str(model_dir), input=str(inp), output=str(tmp_path / "py.jsonl"), clamp="off",
                                   chunk_size=4, no_progress=True)
    summary, notes = scorer.score_file(options)
    assert read_jsonl(tmp_path / "py.jsonl") == read_jsonl(tmp_path / "cli.jsonl") and notes == []
    parsed = cli.build_parser().parse_args(["--model", "m", "--input", "i", "--output", "o"])
    assert list(summary["config"]["args"]) == list(cli_summary["config"]["args"]) == list(vars(parsed))
    differ = {k for k, v in summary["config"]["args"].items() if cli_summary["config"]["args"][k] != v}
    assert differ == {"output", "summary"}
    assert summary["system"] == cli_summary["system"] and summary["model"] == cli_summary["model"]
    assert scorer.ScoreOptions.from_namespace(parsed) == scorer.ScoreOptions(model="m", input="i", output="o")
