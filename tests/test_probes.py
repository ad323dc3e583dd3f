"""The probe suite (benchmarks/probes/*.jsonl) and benchmarks/bench_probes.py: the files validate through the
project's reader, labels are consistent, and the benchmark's accuracy on a tiny random model equals a count made
here from the model's own predictions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from conftest import tiny_llama_orca

from eval_suite.report import probes as probe_suite
from orca_io.jsonl import read_records
from orca_io.schema import RecordError, validate_record

REPO = Path(__file__).resolve().parents[1]

RIGHT_KINDS = {"exact", "paraphrase", "synonym", "hypernym", "unit", "format", "sentence", "contrast", "surname"}
WRONG_KINDS = {"opposite", "same_kind", "off_by_one", "contradiction", "negation", "hedge", "wrong_unit"}


@pytest.fixture(scope="module")
def probes():
    return probe_suite.load_probes()


def test_suite_size_ids_and_labels(probes):
    assert len(probes) >= 300
    ids = [r["id"] for r in probes]
    assert len(set(ids)) == len(ids)
    by_type = defaultdict(set)
    for record in probes:
        found = probe_suite.labels(record)
        by_type[found["type"]].add(found["expected"])
        # a kind belongs to one side: a paraphrase labelled wrong is a labelling slip
        assert found["kind"] in (RIGHT_KINDS if found["expected"] == "right" else WRONG_KINDS), record["id"]
        assert validate_record(record) == record  # already normalised by the schema
    assert len(by_type) >= 15 and "trivia" in by_type
    assert all(sides == {"right", "wrong"} for sides in by_type.values()), dict(by_type)


def test_every_file_reads_and_groups_share_their_question(probes):
    files = probe_suite.probe_files()
    assert sum(len(read_records(f).records) for f in files) == len(probes)
    groups = defaultdict(set)
    for record in probes:
        groups[record["question_id"]].add((record["question"], tuple(record["reference"]), record["rationale"]))
        # audio questions carry a rationale standing in for the audio; trivia has none
        assert bool(record["rationale"]) == (probe_suite.labels(record)["type"] != "trivia"), record["id"]
    assert all(len(v) == 1 for v in groups.values())


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def probe(i, **labels):
    return {"id": f"x{i}", "question": "q?", "reference": ["a"], "candidate": "a",
            **{"type": "count", "kind": "format", "expected": "right", **labels}}


def test_bad_labels_name_file_line_and_field(tmp_path):
    bad = write(tmp_path / "bad.jsonl", [probe(0), probe(1, expected="maybe")])
    with pytest.raises(RecordError, match=r"bad\.jsonl:2: field 'expected'"):
        probe_suite.load_probes([bad])
    (tmp_path / "gap.jsonl").write_text(json.dumps(probe(0)) + "\n\n" + json.dumps({**probe(1), "kind": ""}) + "\n")
    with pytest.raises(RecordError, match=r"gap\.jsonl:3: field 'kind'"):
        probe_suite.load_probes([tmp_path / "gap.jsonl"])
    one, two = write(tmp_path / "one.jsonl", [probe(0)]), write(tmp_path / "two.jsonl", [probe(1), probe(0)])
    with pytest.raises(RecordError, match=r"two\.jsonl:2: field 'id'.*one\.jsonl:1"):
        probe_suite.load_probes([one, two])
    with pytest.raises(FileNotFoundError, match="missing"):
        probe_suite.load_probes([tmp_path / "missing"])


class FixedMeans:
    """A stand-in judge whose predicted mean is the candidate read as a number."""

    def predict(self, records, tokenizer, max_batch_tokens=None):
        return [{"mean": float(r["candidate"])} for r in records]


def test_pass_rule_and_tallies():
    rows = [(4.2, "right"), (3.0, "right"), (2.9, "right"), (1.5, "wrong"), (3.0, "wrong"), (3.01, "wrong")]
    records = [validate_record({**probe(i, expected=e, type="t" if i < 3 else "u", kind="k"), "candidate": str(m)})
               for i, (m, e) in enumerate(rows)]
    summary = probe_suite.probe_accuracy(FixedMeans(), None, records)
    assert (summary["passed"], summary["n"]) == (2, 6)  # 4.2 right and 1.5 wrong; exactly 3 fails both sides
    assert summary["by_type"]["t"]["right"] == {"n": 3, "passed": 1, "accuracy": 1 / 3}
    assert summary["by_type"]["u"]["right"] == {"n": 0, "passed": 0, "accuracy": None}
    assert summary["by_expected"]["wrong"]["passed"] == 1
    assert [r["id"] for r in summary["failures"]] == ["x1", "x2", "x4", "x5"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    model, tokenizer = tiny_llama_orca()
    with torch.no_grad():  # a large random head, so means fall on both sides of 3
        model.score_head.weight.copy_(torch.randn(model.score_head.weight.shape, generator=torch.Generator().manual_seed(1)))
    folder = tmp_path_factory.mktemp("model") / "orca-tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_bench_probes_end_to_end(model_dir, probes, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path / "probes.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_probes.py"), "--model", str(model_dir),
                           "--json", str(out), "--max-batch-tokens", "8192"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"probe_accuracy=\d\.\d{3} \(\d+/\d+\) worst_type=\w+:\d\.\d{3}", last), last
    result = json.loads(out.read_text())
    assert result["package"]["name"] == "orca-judge" and result["model"]["revision"].startswith(str(model_dir.resolve()) + "#files-sha256:")
    assert result["model"]["config"]["model_type"] == "orca" and "git_revision" in result

    # the independent count: the saved model's own predictions, compared with 3 here
    model = AutoModel.from_pretrained(model_dir, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    means = [p["mean"] for p in model.predict(probes, tokenizer)]
    expected = [json.loads(r["metadata"])["expected"] for r in probes]
    passed = [(m > 3) if e == "right" else (m < 3) for m, e in zip(means, expected, strict=True)]
    assert 0 < sum(passed) < len(probes)  # a count that could differ from a constant
    assert (result["passed"], result["n"]) == (sum(passed), len(probes))
    assert result["accuracy"] == pytest.approx(sum(passed) / len(probes))
    assert [r["id"] for r in result["rows"]] == [r["id"] for r in probes]
    assert [r["mean"] for r in result["rows"]] == pytest.approx(means, abs=1e-5)
    for name, tally in result["by_type"].items():
        chosen = [ok for ok, r in zip(passed, probes, strict=True) if json.loads(r["metadata"])["type"] == name]
        assert (tally["passed"], tally["n"]) == (sum(chosen), len(chosen)), name
    assert f"({sum(passed)}/{len(probes)})" in last
    # what eval code calls gives the same figures
    assert probe_suite.probe_accuracy(model, tokenizer)["passed"] == sum(passed)


def test_bench_probes_set_changes_the_config_for_the_run_only(model_dir, probes, tmp_path):
    """`--set template_prefix=...` scores the probes as a model saved with that prefix would; the folder is unchanged;
    an unknown field or a missing `=` is a one-line error (exit 2)."""
    from transformers import AutoModel, AutoTokenizer

    before = (model_dir / "config.json").read_text()
    out = tmp_path / "probes.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_probes.py"), "--model", str(model_dir), "--json", str(out)]
    proc = subprocess.run([*cmd, "--set", 'template_prefix="Judge this:\\n"'], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (model_dir / "config.json").read_text() == before
    model = AutoModel.from_pretrained(model_dir, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    plain = [p["mean"] for p in model.predict(probes, tokenizer)]
    model.config.template_prefix = "Judge this:\n"
    prompted = [p["mean"] for p in model.predict(probes, tokenizer)]
    assert prompted != pytest.approx(plain, abs=1e-4)  # the prefix reaches the backbone
    assert [r["mean"] for r in json.loads(out.read_text())["rows"]] == pytest.approx(prompted, abs=1e-5)
    for bad in ("no_such_field=1", "template_prefix"):
        proc = subprocess.run([*cmd, "--set", bad], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 2 and "expected FIELD=VALUE" in proc.stderr and "Traceback" not in proc.stderr
