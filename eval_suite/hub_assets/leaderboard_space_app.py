"""The ORCA leaderboard Space's entry point (copied unchanged by `push_to_hub.py leaderboard`): runs
eval_suite/leaderboard/app.py of orca-judge with the arguments in space_args.json beside this file (the judge,
its revision, the benchmarks and where results are kept)."""

import json
from pathlib import Path

from eval_suite.leaderboard.app import main

ARGS = json.loads((Path(__file__).resolve().parent / "space_args.json").read_text(encoding="utf-8"))["args"]

if __name__ == "__main__":
    raise SystemExit(main(ARGS))
