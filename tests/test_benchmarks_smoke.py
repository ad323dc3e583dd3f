"""Each benchmark script runs end to end on a few records with a tiny random backbone and prints its summary line
(the full measurements are not in CI: see benchmarks/README.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


def run(script, *args, timeout=120):
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def test_bench_scoring_smoke(shared_data, tmp_path):
    out = tmp_path / "scoring.json"
    lines = run("bench_scoring.py", "--n", "10", "--backbone", "tiny-llama", "--naive-batch-sizes", "2,4", "--calib", "4",
                "--gemm-size", "256", "--repeats", "2", "--ablations", "--ablation-repeats", "2", "--profile", "--json", str(out))  # fmt: skip
    assert re.fullmatch(r"speedup_vs_naive=\d+\.\d\d floor_fraction=\d+\.\d\d", lines[-1]), lines[-1]
    top = json.loads(out.read_text())
    assert top["package"]["name"] == "orca-judge" and top["args"]["n"] == 10 and "git_revision" in top
    result = top["results"][0]
    assert result["agree"] and result["records"] == 10 and result["prefix_sharing"] is True
    assert result["malloc_tuned"] is sys.platform.startswith("linux") and len(result["a"]["runs"]) == 2
    assert result["floor_tokens"] < result["input_tokens"]  # answers to one question share their prefix
    assert any(line.startswith("(a) predict") for line in lines) and any(line.startswith("(b) naive") for line in lines)
    variants = [a["variant"] for a in result["ablations"]]
    assert {"no prefix sharing", "no query-chunked tree attention", "last layer's MLP at every position"} <= set(variants)
    assert all(len(a["runs"]) == 2 and a["time_vs_default"] > 0 for a in result["ablations"])
    profile = result["profile"]
    assert sum(profile["share"].values()) == pytest.approx(1, abs=0.01) and profile["mm_gflops"] > 0


def test_bench_scoring_smoke_bfloat16(shared_data, tmp_path):
    # the dtype plumbing of a GPU run (--device cuda --dtype bfloat16), here on the CPU
    out = tmp_path / "scoring.json"
    run("bench_scoring.py", "--n", "6", "--backbone", "tiny-llama", "--naive-batch-sizes", "2", "--gemm-size", "128",
        "--dtype", "bfloat16", "--repeats", "1", "--json", str(out))  # fmt: skip
    result = json.loads(out.read_text())["results"][0]
    assert result["dtype"] == "bfloat16" and result["tolerance"] == 0.05 and result["agree"]
    assert 0 < result["max_abs_mean_diff"]  # 16-bit arithmetic really ran: the two paths differ a little


def test_bench_attention_smoke(shared_data, tmp_path):
    out = tmp_path / "attention.json"
    lines = run("bench_attention.py", "--n", "10", "--backbone", "tiny-llama", "--chunks", "2,4", "--repeats", "1", "--json", str(out))
    assert re.fullmatch(r"attention_speedup=\d+\.\d\d", lines[-1]), lines[-1]
    result = json.loads(out.read_text())
    assert result["agree"] and result["batches"] >= 1 and result["git_revision"] and result["args"]["n"] == 10
    names = [v["variant"] for v in result["variants"]]
    assert names[:2] == ["transformers sdpa, whole row", "sdpa with GQA in the kernel, whole row"]
    assert "tree_attention_forward, 32-query chunks" in names  # predict's default, always measured
    pairs = result["pairs"]
    assert pairs["allowed"] < pairs["chunks_2"] < pairs["chunks_4"] <= pairs["whole_row"]


def test_bench_train_smoke(shared_data):
    lines = run("bench_train.py", "--backbone", "tiny-llama", "--steps", "2", "--warmup", "1", "--n", "80")
    assert re.fullmatch(r"steps_per_s=\d+\.\d\d naive_steps_per_s=\d+\.\d\d speedup_vs_naive=\d+\.\d\d", lines[-1]), lines[-1]


def test_bench_judge_cost_smoke(shared_data):
    lines = run("bench_judge_cost.py", "--n", "4", "--backbone", "tiny-llama", "--max-new-tokens", "2", "--judge-batch-size", "2")
    assert re.fullmatch(r"orca_s_per_item=\d+\.\d{3} judge_s_per_item=\d+\.\d{3} judge_cost_ratio=\d+\.\d\d", lines[-1]), lines[-1]
