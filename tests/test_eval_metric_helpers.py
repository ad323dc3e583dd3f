"""The one adapter from `predict` outputs to metrics and the one baseline-metric helper (eval_suite.metrics),
checked against scipy and plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from eval_suite.metrics import baseline_metrics, prediction_metrics

RATINGS = [[5, 4, 5], [1, 1, 2], [3, 2, 4], [2], [4, 5]]
PROBS = [[0.05, 0.05, 0.1, 0.3, 0.5], [0.6, 0.2, 0.1, 0.05, 0.05], [0.1, 0.3, 0.3, 0.2, 0.1],
         [0.2, 0.5, 0.2, 0.05, 0.05], [0.0, 0.05, 0.15, 0.4, 0.4]]


def multinomial_preds():
    out = []
    for p in PROBS:
        mean = sum((k + 1) * q for k, q in enumerate(p))
        out.append({"mean": mean, "variance": sum(q * (k + 1 - mean) ** 2 for k, q in enumerate(p)), "probs": p})
    return out


def test_prediction_metrics_of_a_distribution_head():
    preds = multinomial_preds()
    m = prediction_metrics(preds, RATINGS)
    human = [sum(r) / len(r) for r in RATINGS]
    assert m["n"] == 5
    assert m["spearman"] == pytest.approx(stats.spearmanr([p["mean"] for p in preds], human).statistic)
    assert m["mae_mean"] == pytest.approx(np.mean([abs(p["mean"] - h) for p, h in zip(preds, human)]))
    nll = -sum(math.log(max(p["probs"][r - 1], 1e-12)) for p, rs in zip(preds, RATINGS) for r in rs) / sum(map(len, RATINGS))
    assert m["nll"] == pytest.approx(nll)
    # variance metrics on the items with >= 3 ratings only
    assert m["n_variance"] == 3
    human_var = [np.var(r) for r in RATINGS]
    assert m["mae_variance"] == pytest.approx(np.mean([abs(preds[i]["variance"] - human_var[i]) for i in (0, 1, 2)]))


def test_prediction_metrics_of_a_bernoulli_head_and_replaced_means():
    preds = [{"mean": p["mean"], "variance": None, "probs": None} for p in multinomial_preds()]
    m = prediction_metrics(preds, RATINGS)
    assert m["mae_variance"] is None and m["nll"] is None and m["spearman"] is not None
    clamped = [5.0, 1.0, 3.0, 2.0, 5.0]
    assert prediction_metrics(preds, RATINGS, means=clamped)["mae_mean"] == pytest.approx(
        np.mean([abs(c - sum(r) / len(r)) for c, r in zip(clamped, RATINGS)]))
    with pytest.raises(ValueError, match="no predictions"):
        prediction_metrics([], [])


def test_baseline_metrics_scores_rated_records_on_the_rating_scale():
    records = [
        {"id": "a", "question": "q", "reference": ["violin"], "candidate": "violin", "ratings": [5, 5]},
        {"id": "b", "question": "q", "reference": ["violin"], "candidate": "a cello", "ratings": [1]},
        {"id": "c", "question": "q", "reference": ["dog"], "candidate": "Dog.", "ratings": [4, 5, 5]},
        {"id": "d", "question": "q", "reference": ["dog"], "candidate": "dog", "ratings": []},  # unrated: left out
    ]
    m = baseline_metrics(records, ["exact_match"])["exact_match"]
    em = [1.0, 0.0, 1.0]  # exact match after SQuAD normalisation (case, punctuation)
    human = [5.0, 1.0, 14 / 3]
    assert m["n"] == 3
    assert m["mae_mean"] == pytest.approx(np.mean([abs(1 + 4 * s - h) for s, h in zip(em, human)]))
    with pytest.raises(ValueError, match="unknown baselines"):
        baseline_metrics(records, ["exact_match", "nope"])
