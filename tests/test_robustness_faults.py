"""The fault matrix (benchmarks/fault_matrix.py): kill -9 at seeded file operations of `orca-score --resume` and
of leaderboard submissions, then resume or restart, compared with an uninterrupted run. Here 3 points each
(26 s at load average 2.5 on 2 cores); docs/robustness.md records a larger run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_the_harness_kills_mid_write_and_leaves_a_torn_file(tmp_path):
    """The kill points are real: a plain (non-atomic) write killed at its first operation leaves half a file."""
    from fault_matrix import KillAt, forked

    target = tmp_path / "out" / "data.json"
    target.parent.mkdir()

    def write_in_place():
        with open(target, "w") as fh:
            fh.write(json.dumps({"rows": list(range(100))}))

    status, ops = forked(write_in_place, KillAt(target.parent, 0))
    assert status == "done" and ops == ["write data.json"]
    full = target.read_text()
    status, _ = forked(write_in_place, KillAt(target.parent, 1))
    assert status == "killed" and target.read_text() == full[: len(full) // 2]


@pytest.mark.timeout(600)
def test_kill_9_then_resume_or_restart_loses_and_mixes_nothing(tmp_path):
    out = tmp_path / "matrix.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fault_matrix.py"), "--points", "3", "--seed", "0",
                          "--json", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    for matrix in ("score", "leaderboard"):
        counts = result[matrix]
        assert counts["points"] == 3 and counts["killed"] == 3, (matrix, counts, run.stderr[-2000:])
        assert counts["equal"] == 3 and counts["failed"] == 0, (matrix, counts, run.stderr[-2000:])
        assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts.get("unreadable", 0) == 0, counts
    # half the leaderboard's points fall on the stored files themselves, not only on the derived board
    assert any("/submissions/" in op for op in result["leaderboard"]["killed_at"])
    assert run.stdout.strip().splitlines()[-1] == "fault_matrix points=6 equal=6 lost=0 duplicated=0"
