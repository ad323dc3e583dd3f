"""Each benchmark script runs end to end on a few records with a tiny random backbone and prints its summary line
(the full measurements are not in CI: see benchmarks/README.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


def run(script, *args, timeout=120):
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def test_bench_scoring_smoke(shared_data, tmp_path):
    out = tmp_path / "scoring.json"
    lines = run("bench_scoring.py", "--n", "10", "--backbone", "tiny-llama", "--naive-batch-sizes", "2,4", "--calib", "4",
                "--gemm-size", "256", "--repeats", "2", "--json", str(out))  # fmt: skip
    assert re.fullmatch(r"speedup_vs_naive=\d+\.\d\d floor_fraction=\d+\.\d\d", lines[-1]), lines[-1]
    result = json.loads(out.read_text())["results"][0]
    assert result["agree"] and result["records"] == 10 and result["prefix_sharing"] is True
    assert result["malloc_tuned"] is sys.platform.startswith("linux") and len(result["a"]["runs"]) == 2
    assert result["floor_tokens"] < result["input_tokens"]  # answers to one question share their prefix
    assert any(line.startswith("(a) predict") for line in lines) and any(line.startswith("(b) naive") for line in lines)


def test_bench_scoring_smoke_bfloat16(shared_data, tmp_path):
    # the dtype plumbing of a GPU run (--device cuda --dtype bfloat16), here on the CPU
    out = tmp_path / "scoring.json"
    run("bench_scoring.py", "--n", "6", "--backbone", "tiny-llama", "--naive-batch-sizes", "2", "--gemm-size", "128",
        "--dtype", "bfloat16", "--repeats", "1", "--json", str(out))  # fmt: skip
    result = json.loads(out.read_text())["results"][0]
    assert result["dtype"] == "bfloat16" and result["tolerance"] == 0.05 and result["agree"]
    assert 0 < result["max_abs_mean_diff"]  # 16-bit arithmetic really ran: the two paths differ a little


def test_bench_train_smoke(shared_data):
    lines = run("bench_train.py", "--backbone", "tiny-llama", "--steps", "2", "--warmup", "1", "--n", "80")
    assert re.fullmatch(r"steps_per_s=\d+\.\d\d naive_steps_per_s=\d+\.\d\d speedup_vs_naive=\d+\.\d\d", lines[-1]), lines[-1]


def test_bench_judge_cost_smoke(shared_data):
    lines = run("bench_judge_cost.py", "--n", "4", "--backbone", "tiny-llama", "--max-new-tokens", "2", "--judge-batch-size", "2")
    assert re.fullmatch(r"orca_s_per_item=\d+\.\d{3} judge_s_per_item=\d+\.\d{3} judge_cost_ratio=\d+\.\d\d", lines[-1]), lines[-1]
