"""The fuzzer of benchmarks/fuzz_inputs.py, bounded for CI (GitHub issue 49): every reader of untrusted input
(the JSONL reader, the record schema, orca-score's input reader and its checks before the model loads, the
leaderboard's submission and stored-record readers) on a few dozen hypothesis cases each. The only allowed
outcomes are a correct result or a clean error naming file, line and field; a failure here is a crash hypothesis
found (shrunk). The longer run and its counts: docs/robustness.md."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fuzz_inputs import TARGETS, run_target  # noqa: E402

CASES = {"orca_score_paths": 25}  # each case runs orca-score's main up to the model load: slower than the others


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_target_gives_a_result_or_a_clean_error(name):
    counts = Counter()
    crash = run_target(name, CASES.get(name, 60), seed_=0, counts=counts)
    assert crash is None, crash
    assert counts["cases"] >= CASES.get(name, 60) // 2 and counts["ok"] + counts["error"] == counts["cases"]
