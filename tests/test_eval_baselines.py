"""String-overlap and embedding baselines."""

from __future__ import annotations

import numpy as np
import pytest

from eval_suite.baselines import similarity
from eval_suite.baselines.similarity import BASELINES, normalize_answer


def rec(candidate: str, *reference: str, question: str = "What is heard?") -> dict:
    return {
        "question": question,
        "reference": list(reference),
        "candidate": candidate,
        "rationale": "",
        "transcript": "",
    }


def test_normalize_answer():
    assert normalize_answer("  The Dog, barking!  ") == "dog barking"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("there") == "there"  # articles only as whole words


def test_exact_match_uses_normalisation_and_aliases():
    records = [rec("The dog.", "dog"), rec("a cat", "dog", "Cat"), rec("dogs", "dog")]
    assert similarity.exact_match(records) == [1.0, 1.0, 0.0]


def test_contains_is_whole_word():
    records = [
        rec("I think it is a dog barking", "dog"),
        rec("a doghouse", "dog"),
        rec("the big red car", "red car"),
        rec("anything", "the"),  # reference normalises to "" and must not match everything
    ]
    assert similarity.contains(records) == [1.0, 0.0, 1.0, 0.0]


def test_token_f1_by_hand():
    # candidate tokens {big, red, dog}, reference {red, dog}: P = 2/3, R = 1, F1 = 0.8
    assert similarity.token_f1([rec("the big red dog", "a red dog")]) == [pytest.approx(0.8)]
    # duplicates count once per occurrence in both: P = 1/3, R = 1/2
    assert similarity.token_f1([rec("dog dog cat", "dog bird")]) == [pytest.approx(0.4)]
    assert similarity.token_f1([rec("nothing", "dog", "nothing at all")]) == [
        pytest.approx(2 * (1 / 3) / (4 / 3))
    ]


def lcs(a: list[str], b: list[str]) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def test_rouge_l_matches_hand_lcs():
    cand, ref = "the cat sat on the mat", "a cat was on the mat today"
    n = lcs(cand.split(), ref.split())  # cat on the mat = 4
    p, r = n / 6, n / 7
    assert similarity.rouge_l([rec(cand, ref)]) == [pytest.approx(2 * p * r / (p + r))]


def test_bleu_bounds_and_alias_max():
    same, other = "a dog is barking loudly outside", "violin music plays softly here"
    scores = similarity.bleu([rec(same, same), rec(same, other), rec(same, other, same)])
    assert scores[0] == pytest.approx(1.0)
    assert scores[1] == pytest.approx(0.0, abs=0.05)
    assert scores[2] == pytest.approx(1.0)


def test_registry_scores_are_in_unit_interval():
    records = [
        rec("A dog is barking.", "dog barking", "a barking dog"),
        rec("Piano music", "violin"),
        rec("", "silence"),
        rec("It is raining heavily", "heavy rain"),
    ]
    assert set(BASELINES) == {"exact_match", "contains", "token_f1", "bleu", "rouge_l", "embedding_cosine"}
    for name, fn in BASELINES.items():
        scores = fn(records)
        assert len(scores) == len(records), name
        assert all(0.0 <= s <= 1.0 for s in scores), (name, scores)


def test_embedding_cosine_is_semantic_and_padding_invariant():
    records = [
        rec("A dog is barking loudly", "a barking dog"),
        rec("A dog is barking loudly", "an orchestra playing classical music in a concert hall"),
        rec("rain falling on a tin roof", "rain falling on a tin roof"),
    ]
    scores = similarity.embedding_cosine(records)
    assert scores[0] > scores[1] + 0.3
    assert scores[2] == pytest.approx(1.0, abs=1e-5)
    # batch of mixed lengths (padded) must embed like one sentence at a time: the mask must work
    texts = ["short", "a much longer sentence that forces padding of the short one"]
    np.testing.assert_allclose(similarity.embed(texts), similarity.embed(texts, batch_size=1), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(similarity.embed(texts), axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ({"question": "q", "reference": "dog", "candidate": "dog"}, TypeError),
        ({"question": "q", "reference": [], "candidate": "dog"}, ValueError),
        ({"question": "q", "reference": ["dog", 3], "candidate": "dog"}, ValueError),
        ({"question": "q", "reference": ["dog"], "candidate": None}, TypeError),
    ],
)
def test_bad_records_fail_clearly(record, error):
    with pytest.raises(error, match="record 0"):
        similarity.exact_match([record])
