"""compute_metrics against independent computations (scipy, sklearn, brute force)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from sklearn.metrics import roc_auc_score

from eval_suite.metrics import compute_metrics


def random_data(seed: int, n: int = 60):
    rng = np.random.default_rng(seed)
    ratings = [rng.integers(1, 6, size=rng.integers(1, 7)).tolist() for _ in range(n)]
    # rounding to halves creates ties on the prediction side too
    pred = np.round(rng.uniform(1, 5, size=n) * 2) / 2
    pred_var = rng.uniform(0, 4, size=n)
    logits = rng.normal(size=(n, 5))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return ratings, pred, pred_var, probs


def brute_force_tau_b(x, y) -> float:
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif dx == dy:
            concordant += 1
        else:
            discordant += 1
    return (concordant - discordant) / np.sqrt(
        (concordant + discordant + ties_x) * (concordant + discordant + ties_y)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_scipy_and_direct_computation(seed):
    ratings, pred, pred_var, probs = random_data(seed)
    out = compute_metrics(pred, human_ratings=ratings, pred_variance=pred_var, pred_probs=probs)

    human_mean = np.array([np.mean(r) for r in ratings])
    assert out["n"] == len(ratings)
    assert out["spearman"] == pytest.approx(stats.spearmanr(pred, human_mean).statistic, abs=1e-12)
    assert out["kendall"] == pytest.approx(stats.kendalltau(pred, human_mean).statistic, abs=1e-12)
    assert out["kendall"] == pytest.approx(brute_force_tau_b(pred, human_mean), abs=1e-12)
    assert out["mae_mean"] == pytest.approx(np.mean(np.abs(pred - human_mean)))
    assert out["mae_mean_norm"] == pytest.approx(out["mae_mean"] / 4)

    keep = [i for i, r in enumerate(ratings) if len(r) >= 3]
    human_var = np.array([np.var(ratings[i]) for i in keep])  # np.var is ddof=0
    assert out["n_variance"] == len(keep)
    assert out["mae_variance"] == pytest.approx(np.mean(np.abs(pred_var[keep] - human_var)))
    assert out["mae_variance_norm"] == pytest.approx(out["mae_variance"] / 16)

    log_liks = [np.log(probs[i, r - 1]) for i, item in enumerate(ratings) for r in item]
    assert out["nll"] == pytest.approx(-np.mean(log_liks))
    assert out["roc_auc"] is None  # ratings 2..4 occur, so the labels are not binary
    assert "ci" not in out


def test_min_ratings_for_variance_is_respected():
    ratings, pred, pred_var, _ = random_data(3)
    counts = [len(r) for r in ratings]
    for k in (1, 3, 6):
        out = compute_metrics(pred, human_ratings=ratings, pred_variance=pred_var, min_ratings_for_variance=k)
        assert out["n_variance"] == sum(c >= k for c in counts)


@pytest.mark.parametrize("seed", [0, 5])
def test_roc_auc_on_binary_ratings_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    ratings = [rng.choice([1, 5], size=rng.integers(1, 4)).tolist() for _ in range(80)]
    pred = np.round(rng.uniform(1, 5, size=80), 1)
    labels = np.array([np.mean(r) >= 3 for r in ratings])
    out = compute_metrics(pred, human_ratings=ratings)
    assert out["roc_auc"] == pytest.approx(roc_auc_score(labels, pred), abs=1e-12)

    # the same labels given as binary per-item means
    binary_mean = rng.choice([1.0, 5.0], size=80)
    out = compute_metrics(pred, human_mean=binary_mean)
    assert out["roc_auc"] == pytest.approx(roc_auc_score(binary_mean >= 3, pred), abs=1e-12)


def test_human_mean_and_variance_input():
    rng = np.random.default_rng(7)
    pred, human = rng.uniform(1, 5, 30), rng.uniform(1, 5, 30)
    pred_var, human_var = rng.uniform(0, 2, 30), rng.uniform(0, 2, 30)
    human_var[:10] = np.nan  # unknown variance for the first ten items
    out = compute_metrics(pred, human_mean=human, human_variance=human_var, pred_variance=pred_var)
    assert out["spearman"] == pytest.approx(stats.spearmanr(pred, human).statistic)
    assert out["n_variance"] == 20
    assert out["mae_variance"] == pytest.approx(np.mean(np.abs(pred_var[10:] - human_var[10:])))
    assert out["nll"] is None and out["roc_auc"] is None


def test_undefined_metrics_are_none_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's ConstantInputWarning must not leak either
        out = compute_metrics([3.0, 3.0, 3.0], human_ratings=[[1, 2], [4], [5, 5, 5]])
        assert out["spearman"] is None and out["kendall"] is None
        assert out["mae_mean"] == pytest.approx((1.5 + 1 + 2) / 3)
        assert out["mae_variance"] is None  # no predicted variance given
        one = compute_metrics([2.0], human_mean=[4.0], bootstrap=20)
        assert one["spearman"] is None and one["mae_mean"] == 2.0
        assert one["ci"]["spearman"] is None
        empty = compute_metrics([], human_mean=[])
        assert empty["n"] == 0 and empty["mae_mean"] is None


def test_bootstrap_interval_matches_normal_approximation():
    rng = np.random.default_rng(11)
    n = 400
    human = rng.uniform(1, 5, n)
    pred = human + rng.normal(0, 0.8, n)
    out = compute_metrics(pred, human_mean=human, bootstrap=600, seed=3)
    errors = np.abs(pred - human)
    half_width = 1.96 * errors.std() / np.sqrt(n)  # CLT interval for a mean
    low, high = out["ci"]["mae_mean"]
    assert low < out["mae_mean"] < high
    assert (high - low) / 2 == pytest.approx(half_width, rel=0.15)
    assert out["ci"]["mae_mean_norm"] == pytest.approx((low / 4, high / 4))
    assert out["ci"]["spearman"][0] < out["spearman"] < out["ci"]["spearman"][1]
    # seeded: same seed, same interval; other seed, other interval
    again = compute_metrics(pred, human_mean=human, bootstrap=600, seed=3)
    other = compute_metrics(pred, human_mean=human, bootstrap=600, seed=4)
    assert again["ci"] == out["ci"]
    assert other["ci"]["mae_mean"] != out["ci"]["mae_mean"]


def test_wider_confidence_gives_wider_interval():
    ratings, pred, _, _ = random_data(4, n=80)
    narrow = compute_metrics(pred, human_ratings=ratings, bootstrap=300, confidence=0.5)["ci"]["kendall"]
    wide = compute_metrics(pred, human_ratings=ratings, bootstrap=300, confidence=0.99)["ci"]["kendall"]
    assert wide[0] < narrow[0] < narrow[1] < wide[1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one"),
        ({"human_ratings": [[1], [2]], "human_mean": [1, 2]}, "exactly one"),
        ({"human_ratings": [[1], [2], [3]]}, "3 items but pred_mean has 2"),
        ({"human_ratings": [[1], [6]]}, "integers in 1..5"),
        ({"human_ratings": [[1], [2.5]]}, "integers in 1..5"),
        ({"human_ratings": [[1], []]}, "empty"),
        ({"human_ratings": ["1", [2]]}, "list of ratings"),
        ({"human_mean": [1, np.nan]}, "non-finite"),
        ({"human_ratings": [[1], [2]], "pred_probs": np.ones((2, 4)) / 4}, "shape"),
        ({"human_ratings": [[1], [2]], "pred_probs": np.ones((2, 5))}, "sum to 1"),
        ({"human_ratings": [[1], [2]], "human_variance": [0, 0]}, "do not pass both"),
        ({"human_mean": [1, 2], "bootstrap": -1}, "bootstrap"),
        ({"human_mean": [1, 2], "confidence": 1.0}, "confidence"),
    ],
)
def test_clear_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        compute_metrics([1.0, 2.0], **kwargs)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 5), st.lists(st.integers(1, 5), min_size=1, max_size=4)),
        min_size=2,
        max_size=25,
    )
)
def test_correlations_match_scipy_on_arbitrary_ties(items):
    pred = np.array([p for p, _ in items], dtype=float)
    ratings = [r for _, r in items]
    human = np.array([np.mean(r) for r in ratings])
    out = compute_metrics(pred, human_ratings=ratings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho, tau = stats.spearmanr(pred, human).statistic, stats.kendalltau(pred, human).statistic
    if np.isnan(rho):
        assert out["spearman"] is None and out["kendall"] is None
    else:
        assert out["spearman"] == pytest.approx(rho, abs=1e-9)
        assert out["kendall"] == pytest.approx(tau, abs=1e-9)


def test_spearman_and_roc_auc_equal_the_rank_formulas_on_random_data_with_ties():
    from scipy.stats import rankdata

    from eval_suite.metrics import roc_auc, spearman

    rng = np.random.default_rng(7)
    for trial in range(20):
        n = int(rng.integers(5, 300))
        x = rng.integers(1, 6, n).astype(float) if trial % 2 else rng.normal(size=n).round(1)  # many ties
        y = x + rng.normal(scale=2.0, size=n).round(1)
        rx, ry = rankdata(x), rankdata(y)  # average ranks, then Pearson: Spearman's definition with ties
        by_hand = np.sum((rx - rx.mean()) * (ry - ry.mean())) / np.sqrt(np.sum((rx - rx.mean()) ** 2) * np.sum((ry - ry.mean()) ** 2))
        assert spearman(x, y) == pytest.approx(by_hand, abs=1e-12)
        labels = x >= 3 if trial % 2 else x > 0
        pos, neg = y[labels], y[~labels]
        # Mann-Whitney: share of (positive, negative) pairs ordered right, ties one half
        pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
        assert roc_auc(labels, y) == pytest.approx(pairs / (len(pos) * len(neg)), abs=1e-12)
        assert roc_auc(labels, y) == pytest.approx(roc_auc_score(labels, y), abs=1e-12)
    assert roc_auc(np.ones(4, bool), np.arange(4.0)) is None and spearman(np.ones(3), np.arange(3.0)) is None
