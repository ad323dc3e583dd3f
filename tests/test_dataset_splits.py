import itertools
from collections import Counter

import pytest

from dataset_builder.splits import NUM_FOLDS, holdout_pairs, make_splits, question_parts, scenario_b
from orca_io.schema import make_record

MODELS = ["m1", "m2", "m3", "m4", "m5"]


def _records(n_questions=200):
    recs = []
    for q in range(n_questions):
        bench, mod = ("b1", "sound") if q % 4 else ("b2", "speech")
        for m in MODELS:
            recs.append(make_record(id=f"{q}:{m}", question_id=f"q{q}", benchmark=bench, modality=mod,
                                    question="?", reference=["r"], candidate="c", answerer=m, ratings=[3]))
    return recs


def _qids(records):
    return {r["question_id"] for r in records}


@pytest.mark.parametrize("fold", range(NUM_FOLDS))
def test_scenario_a_by_question_and_stratified(fold):
    recs = _records()
    splits, _ = make_splits(recs, scenario="A", fold=fold, seed=3)
    tr, va, te = (_qids(splits[s]) for s in ("train", "validation", "test"))
    assert not (tr & va or tr & te or va & te)
    assert len(tr) + len(va) + len(te) == 200
    assert (len(tr), len(va), len(te)) == (160, 20, 20)
    # Each (benchmark, modality) stratum is split 8:1:1 on its own.
    for part in (va, te):
        assert Counter(int(q[1:]) % 4 == 0 for q in part) == {True: 5, False: 15}


def test_scenario_a_test_parts_of_the_five_folds_are_disjoint():
    recs = _records()
    tests = [_qids(make_splits(recs, fold=k, seed=0)[0]["test"]) for k in range(NUM_FOLDS)]
    for a, b in itertools.combinations(tests, 2):
        assert not a & b


def test_splits_are_deterministic_and_depend_on_seed():
    recs = _records()
    assert question_parts(recs, seed=1) == question_parts(list(reversed(recs)), seed=1)
    assert question_parts(recs, seed=1) != question_parts(recs, seed=2)
    with pytest.raises(ValueError, match="fold"):
        question_parts(recs, fold=5)


@pytest.mark.parametrize("fold", range(NUM_FOLDS))
def test_scenario_b_holds_out_two_models_and_their_questions(fold):
    recs = _records()
    splits, held, left_out = scenario_b(recs, fold=fold, seed=0)
    assert len(set(held)) == 2
    assert {r["answerer"] for r in splits["test"]} == set(held)
    for part in ("train", "validation"):
        assert not {r["answerer"] for r in splits[part]} & set(held)
    seen = _qids(splits["train"]) | _qids(splits["validation"])
    assert not _qids(splits["test"]) & seen
    assert sum(len(v) for v in splits.values()) + sum(left_out.values()) == len(recs)
    assert len(splits["test"]) == 20 * 2


def test_holdout_pairs_differ_across_folds_and_need_three_models():
    pairs = holdout_pairs(MODELS, seed=0)
    assert len(set(pairs)) == NUM_FOLDS
    assert pairs == holdout_pairs(reversed(MODELS), seed=0)
    with pytest.raises(ValueError, match="at least 3"):
        holdout_pairs(["a", "b"])
    with pytest.raises(ValueError, match="scenario"):
        make_splits(_records(10), scenario="C")
