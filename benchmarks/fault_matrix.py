"""Kill -9 at seeded points of `orca-score --resume` and of leaderboard submissions, then resume or restart, and
compare with an uninterrupted run. Tiny random ORCA (BERT), no network.

    .venv/bin/python benchmarks/fault_matrix.py --points 40 --seed 0 --json runs/fault_matrix.json

A point is the k-th file operation of the run under its output folder (a write, an fsync, a rename): the run is a
fork of this process that SIGKILLs itself there, a write first writing half its bytes (a torn write). k is drawn
(seeded) from the operations an uninterrupted run makes, which is also the reference run. Then:
- scoring: `orca-score --resume` again until it finishes; equal = the same lines in the same order with the same
  fields as the reference's, scores within 1e-6 (identical = byte for byte); lost / duplicated = input ids
  missing from / repeated in the output.
- leaderboard: the app restarts on the store (it must start), every submission not acknowledged before the kill
  is submitted again (with "replace" when its record is there); equal = every record (but its time) and every
  stored file equals the reference's; lost = an acknowledged record missing or changed after the restart,
  duplicated = two records of one entry, unreadable = a record the restart could not read.
Last line: `fault_matrix points=N equal=E lost=L duplicated=D`.
"""

from __future__ import annotations

import argparse
import builtins
import hashlib
import io
import json
import os
import random
import signal
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import matplotlib  # noqa: E402  - imported once here, not in every forked run

matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402, F401
import torch  # noqa: E402

torch.set_num_threads(1)
# what every run imports, imported once before the forks (the runs themselves then take about a second each)
import accelerate  # noqa: E402, F401
import scipy.stats  # noqa: E402, F401
import transformers  # noqa: E402, F401

import eval_suite.leaderboard.app  # noqa: E402, F401
import eval_suite.metrics  # noqa: E402, F401
import eval_suite.scoring.cli  # noqa: E402, F401

WORDS = "dog cat cow owl frog horse sheep goat bird fish lion bear wolf fox deer".split()


# ------------------------------------------------------------------------------------------------ kill points


class KillAt:
    """Counts file operations on paths under `root`; SIGKILLs this process at the `at`-th (0: never)."""

    def __init__(self, root: Path, at: int):
        self.root, self.at, self.count = os.path.realpath(root), at, 0
        self.ops: list[str] = []  # "kind path" of each operation, path relative to root

    def watched(self, target) -> bool:
        if isinstance(target, int):
            try:
                target = os.readlink(f"/proc/self/fd/{target}")
            except OSError:
                return False
        path = os.path.realpath(os.fspath(target))
        return path == self.root or path.startswith(self.root + os.sep)

    def tick(self, kind: str, target, before_death=None) -> None:
        self.count += 1
        if isinstance(target, int):
            target = os.readlink(f"/proc/self/fd/{target}")
        self.ops.append(f"{kind} {os.path.relpath(os.path.realpath(os.fspath(target)), self.root)}")
        if self.count == self.at:
            if before_death is not None:
                before_death()
            os.kill(os.getpid(), signal.SIGKILL)

    def install(self) -> None:
        real_open = io.open
        killer = self

        class Watched:
            def __init__(self, fh):
                self._fh = fh

            def write(self, data):
                def torn():
                    self._fh.write(data[: len(data) // 2])
                    self._fh.flush()

                killer.tick("write", self._fh.name, torn)
                return self._fh.write(data)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return self._fh.__exit__(*exc)

            def __iter__(self):
                return iter(self._fh)

            def __getattr__(self, name):
                return getattr(self._fh, name)

        def open_(file, mode="r", *args, **kwargs):
            fh = real_open(file, mode, *args, **kwargs)
            return Watched(fh) if any(m in mode for m in "wax+") and killer.watched(file) else fh

        def before(path_arg: int, real):
            def op(*args, **kwargs):
                if killer.watched(args[path_arg]):
                    killer.tick(real.__name__, args[path_arg])
                return real(*args, **kwargs)
            return op

        builtins.open = io.open = open_
        os.replace, os.rename = before(1, os.replace), before(1, os.rename)
        os.fsync, os.truncate = before(0, os.fsync), before(0, os.truncate)


def forked(job, kill: KillAt | None) -> tuple[str, list[str]]:
    """Run `job()` in a fork: ("killed", []), or ("done" or "failed: ...", the operations it made)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the runs' own printing is not this script's output
        status = "done"
        try:
            if kill is not None:
                kill.install()
            job()
        except BaseException as err:  # reported to the parent, which counts it
            status = f"failed: {type(err).__name__}: {err}"[:500]
        with os.fdopen(write_fd, "w") as fh:
            fh.write(json.dumps([status, kill.ops if kill else []]))
        os._exit(0)
    os.close(write_fd)
    _, wait_status = os.waitpid(pid, 0)
    with os.fdopen(read_fd, "rb") as fh:
        report = fh.read()
    if os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) == signal.SIGKILL:
        return "killed", []
    status, ops = json.loads(report) if report else ("failed: no report", [])
    return status, ops


def points(ops: list[str], n: int, rng: random.Random, keep=lambda op: True) -> list[int]:
    """n operations (1-based) drawn without replacement: half among those `keep` selects, the rest among all."""
    chosen = [i for i, op in enumerate(ops, start=1) if keep(op)]
    picked = set(rng.sample(chosen, min((n + 1) // 2, len(chosen))))
    rest = [i for i in range(1, len(ops) + 1) if i not in picked]
    picked |= set(rng.sample(rest, min(n - len(picked), len(rest))))
    return sorted(picked)


# ------------------------------------------------------------------------------------------------ fixtures


def tiny_model(folder: Path) -> Path:
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
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def score_input(path: Path, n: int) -> Path:
    rng = random.Random(0)
    lines = [{"id": f"r{i}", "question": "Which animal can be heard?", "reference": rng.choice(WORDS),
              "candidate": " ".join(rng.sample(WORDS, 2)), "ratings": [rng.randint(1, 5)]} for i in range(n)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def mmau_questions(path: Path, n: int) -> Path:
    rows = [{"id": f"q{i:02d}", "question": f"Which animal is heard in clip {i}?", "choices": WORDS[i % 10: i % 10 + 4],
             "answer": WORDS[i % 10 + i % 4], "task": ("sound", "music", "speech")[i % 3], "category": "Reasoning"}
            for i in range(n)]
    path.write_text(json.dumps(rows))
    return path


# ------------------------------------------------------------------------------------------------ scoring


def same(a, b, atol: float) -> bool:
    """Equal JSON values, floats within `atol`."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= atol
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, atol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], atol) for k in a)
    return a == b


def first_difference(got: list[str], want: list[str], atol: float = 1e-6) -> str | None:
    """Where two outputs differ: line count, or the first line whose fields differ (floats beyond `atol`)."""
    if len(got) != len(want):
        return f"{len(got)} lines, expected {len(want)}"
    for i, (a, b) in enumerate(zip(got, want), start=1):
        if not same(json.loads(a), json.loads(b), atol):
            return f"line {i} differs"
    return None


def scoring_matrix(work: Path, model: Path, n_points: int, rng: random.Random) -> dict:
    from eval_suite.scoring import cli

    inp = score_input(work / "in.jsonl", 12)
    ids = [json.loads(x)["id"] for x in inp.read_text().splitlines()]

    def run(out: Path):
        return lambda: cli.main(["--model", str(model), "--input", str(inp), "--output", str(out / "scores.jsonl"),
                                 "--summary", str(out / "summary.json"), "--chunk-size", "2", "--max-batch-tokens", "512",
                                 "--device", "cpu", "--resume", "--quiet", "--no-progress"])

    ref = work / "score-ref"
    ref.mkdir()
    status, ops = forked(run(ref), KillAt(ref, 0))
    assert status == "done", status
    reference = (ref / "scores.jsonl").read_bytes()
    counts = {"points": 0, "killed": 0, "equal": 0, "identical": 0, "lost": 0, "duplicated": 0, "failed": 0,
              "operations": len(ops), "killed_at": []}
    for k in points(ops, n_points, rng):
        counts["killed_at"].append(ops[k - 1])
        out = work / f"score-{k}"
        out.mkdir()
        counts["points"] += 1
        status, _ = forked(run(out), KillAt(out, k))
        counts["killed"] += status == "killed"
        status, _ = forked(run(out), None)  # --resume, uninterrupted
        if status != "done":
            counts["failed"] += 1
            print(f"score point {k}: resume {status}", file=sys.stderr)
            continue
        got = [json.loads(x)["id"] for x in (out / "scores.jsonl").read_text().splitlines()]
        counts["lost"] += len(set(ids) - set(got))
        counts["duplicated"] += len(got) - len(set(got))
        text = (out / "scores.jsonl").read_bytes()
        counts["identical"] += text == reference
        differs = first_difference(text.decode().splitlines(), reference.decode().splitlines())
        counts["equal"] += differs is None
        if differs is not None:
            print(f"score point {k} ({ops[k - 1]}): {differs}", file=sys.stderr)
    return counts


# ------------------------------------------------------------------------------------------------ leaderboard


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lost_submissions(records: dict, done: list[int], answers: dict) -> list[str]:
    """Each name's newest acknowledged submission must be stored as it was sent, or replaced by the one that was in
    flight when the kill came (stored, but its answer never reached the user)."""
    newest = {answers[i][0]: i for i in done}
    problems = []
    for name, i in newest.items():
        have = [r["submission_sha256"] for r in records.values() if r["model_name"] == name]
        allowed = {sha(answers[j][1]) for j in (i, len(done)) if j < len(answers) and answers[j][0] == name}
        if not (len(have) == 1 and have[0] in allowed):
            problems.append(f"{name} stored as {have}, sent {sorted(allowed)}")
    return problems


def leaderboard_matrix(work: Path, model_dir: Path, n_points: int, rng: random.Random) -> dict:
    from eval_suite.leaderboard import ALPHA, MAX_SUBMISSION_BYTES, judge_meta
    from eval_suite.leaderboard.app import Leaderboard
    from eval_suite.leaderboard.data import load_questions, name_key
    from eval_suite.leaderboard.store import ResultStore
    from eval_suite.models.loading import load_model

    questions = {"mmau-test-mini": load_questions("mmau-test-mini", questions=mmau_questions(work / "q.json", 8))}
    settings = argparse.Namespace(uncertainty_threshold=1.0, doubtful_threshold=None, doubtful_top=5, bootstrap=50,
                                  seed=0, alpha=ALPHA, max_submission_bytes=MAX_SUBMISSION_BYTES, max_batch_tokens=2048)
    answers = {}
    for i, name in enumerate(["Alpha", "Beta", "Alpha"]):  # two entries, then a replacement
        path = work / f"sub{i}.jsonl"
        path.write_text("".join(json.dumps({"question_id": q.id, "answer": WORDS[(j + i) % 7]}) + "\n"
                                for j, q in enumerate(questions["mmau-test-mini"])))
        answers[i] = (name, path)

    def app(folder: Path) -> Leaderboard:
        model, tokenizer = load_model(str(model_dir), device="cpu")
        return Leaderboard(model, tokenizer, judge_meta(model, str(model_dir), "local"), ResultStore(folder),
                           questions, settings)

    def submit_all(folder: Path, acked: Path, start: int = 0, redo_replace: bool = False):
        def job():
            lb = app(folder)
            for i in range(start, len(answers)):
                name, path = answers[i]
                lb.submit("mmau-test-mini", name, "", path, replace=i == 2 or (redo_replace and i == start))
                with open(acked, "a") as fh:  # outside the store: what the user was told was accepted
                    fh.write(f"{i}\n")
        return job

    def state(folder: Path) -> tuple[dict, list[str]]:
        records, unreadable = ResultStore(folder).load("mmau-test-mini")
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.jsonl"))
                 if "submissions" in p.parts}
        recs = {r["_file"]: {k: v for k, v in r.items() if k != "submitted_at"} for r in records}
        return {"records": recs, "files": files}, unreadable

    ref = work / "board-ref"
    status, ops = forked(submit_all(ref, work / "ref.acked"), KillAt(ref, 0))
    assert status == "done", status
    reference, _ = state(ref)
    counts = {"points": 0, "killed": 0, "equal": 0, "lost": 0, "duplicated": 0, "unreadable": 0, "failed": 0,
              "operations": len(ops), "killed_at": []}
    # half the points on the stored files themselves (the rest of the operations build the derived board)
    for k in points(ops, n_points, rng, keep=lambda op: "/board/" not in op and ".board-" not in op):
        counts["killed_at"].append(ops[k - 1])
        folder, acked = work / f"board-{k}", work / f"board-{k}.acked"
        counts["points"] += 1
        status, _ = forked(submit_all(folder, acked), KillAt(folder, k))
        counts["killed"] += status == "killed"
        done = [int(x) for x in acked.read_text().split()] if acked.exists() else []
        after, unreadable = state(folder) if folder.exists() else ({"records": {}, "files": {}}, [])
        counts["unreadable"] += len(unreadable)
        keys = [name_key(r["model_name"]) for r in after["records"].values()]
        counts["duplicated"] += len(keys) - len(set(keys))
        for problem in lost_submissions(after["records"], done, answers):
            counts["lost"] += 1
            print(f"leaderboard point {k} ({ops[k - 1]}): {problem}", file=sys.stderr)
        start = len(done)
        name = answers[start][0] if start < len(answers) else None
        redo_replace = name is not None and any(r["model_name"] == name for r in after["records"].values())
        status, _ = forked(submit_all(folder, acked, start, redo_replace), None)  # restart, submit the rest again
        if status != "done":
            counts["failed"] += 1
            print(f"leaderboard point {k}: restart {status}", file=sys.stderr)
            continue
        final, _ = state(folder)
        counts["equal"] += final == reference
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=20, help="kill points per matrix (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=["score", "leaderboard"])
    p.add_argument("--json", type=Path, help="write the counts here")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="fault-matrix-") as tmp:
        work = Path(tmp)
        model = work / "orca-tiny"
        tiny_model(model)
        from eval_suite.models.loading import load_model

        load_model(str(model), device="cpu")  # transformers' lazy imports happen here once, not in every run
        result = {"seed": args.seed, "points_requested": args.points}
        if args.only in (None, "score"):
            result["score"] = scoring_matrix(work, model, args.points, rng)
        if args.only in (None, "leaderboard"):
            result["leaderboard"] = leaderboard_matrix(work, model, args.points, rng)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    parts = [result[m] for m in ("score", "leaderboard") if m in result]
    print(f"fault_matrix points={sum(c['points'] for c in parts)} equal={sum(c['equal'] for c in parts)} "
          f"lost={sum(c['lost'] for c in parts)} duplicated={sum(c['duplicated'] for c in parts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
