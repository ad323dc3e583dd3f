"""Variance-gated clamping and its threshold search."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from eval_suite.scoring.clamping import clamp_scores, tune_clamp_threshold
from modeling_orca import rating_to_unit, unit_to_rating


def test_clamp_scores_gates_on_margin_and_variance():
    score = np.array([0.05, 0.05, 0.125, 0.5, 0.9, 0.9, 0.875])
    var = np.array([0.01, 0.09, 0.01, 0.0, 0.02, 0.03, 0.0])
    out = clamp_scores(score, var, threshold=0.02)
    # margin is strict as in the reference release: exactly 0.125 / 0.875 stays
    np.testing.assert_array_equal(out, [0.0, 0.05, 0.125, 0.5, 1.0, 0.9, 0.875])
    np.testing.assert_array_equal(score, [0.05, 0.05, 0.125, 0.5, 0.9, 0.9, 0.875])  # input untouched
    np.testing.assert_array_equal(clamp_scores(score, var, threshold=-np.inf), score)


def test_scale_conversions_round_trip():
    np.testing.assert_allclose(rating_to_unit(np.array([1, 3, 5])), [0, 0.5, 1])
    np.testing.assert_allclose(unit_to_rating(rating_to_unit(np.array([1.7, 4.2]))), [1.7, 4.2])


def synthetic_dev(seed: int = 0):
    """Near-edge items: confident ones (var <= 0.02) really sit at the edge for humans, unsure ones
    (var >= 0.05) are human-rated in the middle. So the best threshold is exactly 0.02."""
    rng = np.random.default_rng(seed)
    n = 40
    conf_score = np.concatenate([rng.uniform(0.0, 0.1, n), rng.uniform(0.9, 1.0, n)])
    conf_var = rng.uniform(0.005, 0.02, 2 * n)
    conf_var[0] = 0.02
    conf_human = np.where(conf_score < 0.5, 1.0, 5.0)
    unsure_score = np.concatenate([rng.uniform(0.0, 0.1, n), rng.uniform(0.9, 1.0, n)])
    unsure_var = rng.uniform(0.05, 0.2, 2 * n)
    unsure_human = np.where(unsure_score < 0.5, 2.0, 4.0)  # clamping these moves them away from humans
    mid_score = rng.uniform(0.2, 0.8, n)
    mid_var = rng.uniform(0.0, 0.2, n)
    mid_human = 1 + 4 * mid_score + rng.normal(0, 0.3, n)
    score = np.concatenate([conf_score, unsure_score, mid_score])
    var = np.concatenate([conf_var, unsure_var, mid_var])
    human = np.concatenate([conf_human, unsure_human, mid_human])
    return score, var, human


def test_tune_finds_the_known_threshold():
    score, var, human = synthetic_dev()
    best, table = tune_clamp_threshold(score, var, human)
    assert best == pytest.approx(0.02)
    thresholds = [row["threshold"] for row in table]
    assert thresholds == sorted(thresholds) and thresholds[0] == -np.inf
    assert table[0]["n_clamped"] == 0

    # the winning row's objective recomputed independently with scipy
    row = next(r for r in table if r["threshold"] == best)
    clamped = clamp_scores(score, var, threshold=best)
    h01 = (human - 1) / 4
    rho = stats.spearmanr(clamped, h01).statistic
    tau = stats.kendalltau(clamped, h01).statistic
    mae = np.mean(np.abs(clamped - h01))
    assert row["objective"] == pytest.approx(rho + tau - mae)
    assert row["n_clamped"] == 80  # every confident near-edge item, nothing else
    assert all(r["objective"] <= row["objective"] for r in table)


def test_tune_returns_no_clamping_when_it_only_hurts():
    rng = np.random.default_rng(1)
    score = np.concatenate([rng.uniform(0.0, 0.1, 30), rng.uniform(0.9, 1.0, 30), rng.uniform(0.2, 0.8, 30)])
    var = rng.uniform(0.0, 0.1, 90)
    human = 1 + 4 * score  # already perfect: snapping to 0/1 can only add error
    best, table = tune_clamp_threshold(score, var, human)
    assert best == -np.inf
    assert table[0]["mae"] == pytest.approx(0.0)


def test_explicit_candidates_and_mae_weight():
    score, var, human = synthetic_dev(2)
    best, table = tune_clamp_threshold(score, var, human, candidates=[0.5, 0.0, 0.02])
    assert [r["threshold"] for r in table] == [0.0, 0.02, 0.5]
    assert best == 0.02
    _, table0 = tune_clamp_threshold(score, var, human, candidates=[0.02], mae_weight=0.0)
    assert table0[0]["objective"] == pytest.approx(table0[0]["spearman"] + table0[0]["kendall"])


def test_errors():
    with pytest.raises(ValueError, match="equal length"):
        clamp_scores([0.1, 0.2], [0.1], threshold=0.1)
    with pytest.raises(ValueError, match="margin"):
        clamp_scores([0.1], [0.1], threshold=0.1, margin=0.7)
    with pytest.raises(ValueError, match="undefined for every threshold"):
        tune_clamp_threshold([0.5, 0.5], [0.1, 0.1], [1, 5])


def test_tune_on_predictions_is_the_table_row_of_the_tuned_threshold_and_none_when_clamping_does_not_help():
    from eval_suite.scoring.clamping import tune_clamp_threshold, tune_on_predictions

    rng = np.random.default_rng(3)
    human = rng.integers(1, 6, 80).astype(float)
    means = np.clip(human + rng.normal(0, 0.3, 80), 1, 5)  # confident and close: clamping helps
    preds = [{"mean": m, "variance": v} for m, v in zip(means, rng.uniform(0.01, 0.5, 80))]
    tuned = tune_on_predictions(preds, human, margin=0.125)
    threshold, table = tune_clamp_threshold((means - 1) / 4, [p["variance"] for p in preds], human, margin=0.125)
    assert tuned["threshold"] == threshold and np.isfinite(threshold)
    assert tuned["clamped"] == next(r for r in table if r["threshold"] == threshold) and tuned["unclamped"] == table[0]
    assert tuned["clamped"]["objective"] > tuned["unclamped"]["objective"]
    middle = [{"mean": 3.0 + 0.01 * i, "variance": 0.1} for i in range(10)]  # nothing near an end: nothing to clamp
    assert tune_on_predictions(middle, [1, 5] * 5)["threshold"] is None
