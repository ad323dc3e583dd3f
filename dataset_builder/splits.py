"""Train / validation / test splits by question, for scenario A and scenario B.

Scenario A (in-distribution): within each stratum (benchmark, modality) the questions are
shuffled with the seed and dealt round-robin, from a seeded offset, into ten chunks. Fold ``k``
(0..4) uses chunk ``2k`` as test, chunk ``2k+1`` as validation and the other eight as train: an
8:1:1 split by question, and the five test parts are disjoint.

Scenario B (unseen answerers): fold ``k`` holds out a pair of answering models (the k-th of the
pairs in a seeded order). Questions are split as in scenario A fold ``k``; train and validation
keep only the other models' answers to their questions, test only the held-out models' answers
to the test questions. Records that fit neither (held-out models' answers to train/validation
questions, other models' answers to test questions) are left out and counted.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict

SPLITS = ("train", "validation", "test")
SCENARIOS = ("A", "B")
NUM_FOLDS = 5
_CHUNKS = 10


def _check_fold(fold: int) -> None:
    if not 0 <= fold < NUM_FOLDS:
        raise ValueError(f"fold must be 0..{NUM_FOLDS - 1}, got {fold}")


def question_parts(records: list[dict], *, fold: int = 0, seed: int = 0) -> dict[str, str]:
    """question_id -> split name for scenario A fold ``fold``."""
    _check_fold(fold)
    strata: dict[tuple, set] = defaultdict(set)
    for rec in records:
        strata[(rec["benchmark"], rec["modality"])].add(rec["question_id"])
    parts = {}
    for stratum in sorted(strata):
        qids = sorted(strata[stratum])
        rng = random.Random(f"orca-split:{seed}:{stratum[0]}:{stratum[1]}")
        rng.shuffle(qids)
        offset = rng.randrange(_CHUNKS)  # so that small strata do not all fill chunk 0
        for i, qid in enumerate(qids):
            chunk = (offset + i) % _CHUNKS
            if qid in parts:
                # A question id under two strata would leak across parts; refuse it.
                raise ValueError(f"question_id {qid!r} appears under more than one (benchmark, modality)")
            parts[qid] = "test" if chunk == 2 * fold else "validation" if chunk == 2 * fold + 1 else "train"
    return parts


def scenario_a(records: list[dict], *, fold: int = 0, seed: int = 0) -> dict[str, list[dict]]:
    parts = question_parts(records, fold=fold, seed=seed)
    out = {s: [] for s in SPLITS}
    for rec in records:
        out[parts[rec["question_id"]]].append(rec)
    return out


def holdout_pairs(answerers, *, seed: int = 0, n: int = NUM_FOLDS) -> list[tuple[str, str]]:
    """``n`` pairs of answerers to hold out, in a seeded order (pairs repeat only if fewer exist)."""
    names = sorted(set(answerers))
    if len(names) < 3:
        raise ValueError(f"scenario B needs at least 3 answering models, found {len(names)}: {names}")
    pairs = list(itertools.combinations(names, 2))
    random.Random(f"orca-holdout:{seed}").shuffle(pairs)
    return [pairs[i % len(pairs)] for i in range(n)]


def scenario_b(records: list[dict], *, fold: int = 0, seed: int = 0) -> tuple[dict[str, list[dict]], tuple, Counter]:
    """Returns (splits, held-out answerer pair, counts of records left out)."""
    held = holdout_pairs((r["answerer"] for r in records), seed=seed)[fold]
    parts = question_parts(records, fold=fold, seed=seed)
    out, left_out = {s: [] for s in SPLITS}, Counter()
    for rec in records:
        part, is_held = parts[rec["question_id"]], rec["answerer"] in held
        if part == "test" and is_held or part != "test" and not is_held:
            out[part].append(rec)
        elif is_held:
            left_out[f"held-out answerer, {part} question"] += 1
        else:
            left_out["seen answerer, test question"] += 1
    return out, held, left_out


def make_splits(records: list[dict], *, scenario: str = "A", fold: int = 0, seed: int = 0):
    """(splits, info) for either scenario; info has ``held_out`` and ``left_out`` for B."""
    if scenario == "A":
        return scenario_a(records, fold=fold, seed=seed), {}
    if scenario == "B":
        splits, held, left_out = scenario_b(records, fold=fold, seed=seed)
        return splits, {"held_out": list(held), "left_out": dict(left_out)}
    raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
