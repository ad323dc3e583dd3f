"""Agreement between predicted and human 1-5 Likert correctness ratings (the ORCA paper's metrics).

Everything is computed from a per-item count matrix of the human ratings (n, 5), so the item bootstrap is
a cheap row resample and the mean, population variance and likelihood of the ratings share one source.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

RATINGS = np.arange(1, 6, dtype=float)
# Metrics that get a bootstrap interval; `n` and `n_variance` are counts, not estimates.
METRIC_KEYS = (
    "spearman",
    "kendall",
    "mae_mean",
    "mae_mean_norm",
    "mae_variance",
    "mae_variance_norm",
    "nll",
    "roc_auc",
)
_PROB_EPS = 1e-12  # a zero predicted probability would give an infinite NLL that swamps the mean


def ratings_to_counts(human_ratings: Sequence[Sequence[int]]) -> np.ndarray:
    """(n, 5) matrix: counts[i, k] = how many annotators gave item i the rating k + 1."""
    counts = np.zeros((len(human_ratings), 5), dtype=float)
    for i, item in enumerate(human_ratings):
        if isinstance(item, str | bytes) or not isinstance(item, Sequence | np.ndarray):
            raise TypeError(f"human_ratings[{i}] must be a list of ratings, got {type(item).__name__}")
        values = np.asarray(item, dtype=float)
        if values.size == 0:
            raise ValueError(f"human_ratings[{i}] is empty: every item needs at least one rating")
        if not np.all(np.isin(values, RATINGS)):
            raise ValueError(f"human_ratings[{i}] = {list(item)}: ratings must be integers in 1..5")
        counts[i] = np.bincount(values.astype(int) - 1, minlength=5)
    return counts


def _vector(name: str, values, n: int | None = None, allow_nan: bool = False) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} items but pred_mean has {n}")
    bad = ~np.isfinite(arr) & ~(allow_nan & np.isnan(arr))
    if bad.any():
        raise ValueError(f"{name} holds non-finite values at positions {np.flatnonzero(bad)[:10].tolist()}")
    return arr


def _is_constant(x: np.ndarray) -> bool:
    return x.size < 2 or bool(np.all(x == x[0]))


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rho (ties get average ranks); None where undefined (n < 2 or a constant side)."""
    if _is_constant(x) or _is_constant(y):
        return None
    return float(stats.spearmanr(x, y).statistic)


def kendall(x: np.ndarray, y: np.ndarray) -> float | None:
    """Kendall tau-b (tie-corrected, as ratings have many ties); None where undefined."""
    if _is_constant(x) or _is_constant(y):
        return None
    return float(stats.kendalltau(x, y, variant="b").statistic)


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """ROC AUC (ties count one half); None when one class is missing.

    The Mann-Whitney U of the positives over the negatives, divided by the pairs: equal to
    sklearn.metrics.roc_auc_score (tests check it to 1e-12), which costs about 11 ms a call on 500 items against
    3 ms here, and this runs once per bootstrap draw."""
    labels = labels.astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    u = stats.mannwhitneyu(scores[labels], scores[~labels], use_continuity=False, method="asymptotic").statistic
    return float(u / (n_pos * n_neg))


def _binary_labels(human_mean: np.ndarray, counts: np.ndarray | None) -> np.ndarray | None:
    """Labels when the human side is binary (correct / incorrect), else None."""
    if counts is not None:
        binary = bool(np.all(counts[:, 1:4] == 0))
    else:
        binary = bool(np.all(np.isin(human_mean, (1.0, 5.0))))
    return human_mean >= 3.0 if binary else None


def _point_metrics(
    pred_mean: np.ndarray,
    human_mean: np.ndarray,
    pred_variance: np.ndarray | None,
    human_variance: np.ndarray | None,
    variance_mask: np.ndarray,
    counts: np.ndarray | None,
    pred_probs: np.ndarray | None,
    labels: np.ndarray | None,
) -> dict:
    out: dict = {
        "n": int(pred_mean.size),
        "spearman": spearman(pred_mean, human_mean),
        "kendall": kendall(pred_mean, human_mean),
    }
    mae = float(np.mean(np.abs(pred_mean - human_mean))) if pred_mean.size else None
    out["mae_mean"] = mae
    out["mae_mean_norm"] = None if mae is None else mae / 4.0  # [1,5] -> [0,1] divides by the range 4

    n_var = int(variance_mask.sum())
    out["n_variance"] = n_var
    if pred_variance is not None and human_variance is not None and n_var > 0:
        mae_v = float(np.mean(np.abs(pred_variance[variance_mask] - human_variance[variance_mask])))
        out["mae_variance"], out["mae_variance_norm"] = mae_v, mae_v / 16.0  # variance scales with range**2
    else:
        out["mae_variance"] = out["mae_variance_norm"] = None

    if pred_probs is not None and counts is not None and counts.sum() > 0:
        log_p = np.log(np.clip(pred_probs, _PROB_EPS, None))
        out["nll"] = float(-(counts * log_p).sum() / counts.sum())
    else:
        out["nll"] = None

    out["roc_auc"] = roc_auc(labels, pred_mean) if labels is not None else None
    return out


def _human_side(human_ratings, human_mean, human_variance, n: int, min_ratings_for_variance: int):
    """(rating counts or None, human mean, human variance or None, mask of the items the variance metrics use)
    from either the individual ratings or the means (and variances) given."""
    counts = None
    if human_ratings is not None:
        if human_variance is not None:
            raise ValueError("human_variance is computed from human_ratings; do not pass both")
        if len(human_ratings) != n:
            raise ValueError(f"human_ratings has {len(human_ratings)} items but pred_mean has {n}")
        counts = ratings_to_counts(human_ratings)
        totals = counts.sum(axis=1)
        h_mean = counts @ RATINGS / totals
        h_var = counts @ RATINGS**2 / totals - h_mean**2  # population variance (ddof=0)
        h_var = np.clip(h_var, 0.0, None)  # float cancellation can leave -1e-16
        variance_mask = totals >= min_ratings_for_variance
    else:
        h_mean = _vector("human_mean", human_mean, n)
        h_var = None
        variance_mask = np.zeros(n, dtype=bool)
        if human_variance is not None:
            h_var = _vector("human_variance", human_variance, n, allow_nan=True)
            variance_mask = ~np.isnan(h_var)
            h_var = np.nan_to_num(h_var)
    if h_var is None:
        variance_mask = np.zeros(n, dtype=bool)
    return counts, h_mean, h_var, variance_mask


def _probabilities(pred_probs, n: int) -> np.ndarray:
    """The (n, 5) predicted probabilities, checked: finite, non-negative, rows summing to 1."""
    probs = np.asarray(pred_probs, dtype=float)
    if probs.shape != (n, 5):
        raise ValueError(f"pred_probs must have shape ({n}, 5), got {probs.shape}")
    if not np.all(np.isfinite(probs)) or np.any(probs < 0):
        raise ValueError("pred_probs must be finite and non-negative")
    if not np.allclose(probs.sum(axis=1), 1.0, atol=1e-3):
        raise ValueError("each row of pred_probs must sum to 1 (probabilities of ratings 1..5)")
    return probs


def compute_metrics(
    pred_mean,
    *,
    human_ratings: Sequence[Sequence[int]] | None = None,
    human_mean=None,
    human_variance=None,
    pred_variance=None,
    pred_probs=None,
    min_ratings_for_variance: int = 3,
    bootstrap: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict:
    """Compare predicted rating distributions with human ratings.

    Args:
        pred_mean: (n,) predicted mean rating on the [1, 5] scale.
        human_ratings: per item, the list of individual human ratings (integers 1..5). Give either this or
            `human_mean`.
        human_mean: (n,) human mean rating per item, when individual ratings are not available.
        human_variance: (n,) human population variance per item (NaN = unknown); only with `human_mean`.
        pred_variance: (n,) predicted variance on the [1, 5] scale.
        pred_probs: (n, 5) predicted probabilities of ratings 1..5 (rows must sum to 1); needs
            `human_ratings` for the NLL.
        min_ratings_for_variance: items with fewer human ratings are left out of the variance metrics,
            because the variance of one or two ratings says little about annotator disagreement.
        bootstrap: number of item-level bootstrap resamples for confidence intervals (0 = none).
        confidence: coverage of the percentile intervals.
        seed: seed of the bootstrap resampling.

    Returns:
        dict with `n`, `spearman`, `kendall` (tau-b), `mae_mean`, `mae_mean_norm` (= mae_mean / 4),
        `n_variance`, `mae_variance`, `mae_variance_norm` (= mae_variance / 16), `nll` (mean over all
        individual human ratings of -log p(rating)), `roc_auc` (only when every human label is 1 or 5;
        positive = mean >= 3) and, when `bootstrap > 0`, `ci`: {metric: (low, high)}. A metric that is
        undefined or lacks its inputs is None.
    """
    pred_mean = _vector("pred_mean", pred_mean)
    n = pred_mean.shape[0]
    if (human_ratings is None) == (human_mean is None):
        raise ValueError("give exactly one of human_ratings (individual ratings) or human_mean")
    if min_ratings_for_variance < 1:
        raise ValueError(f"min_ratings_for_variance must be >= 1, got {min_ratings_for_variance}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0, got {bootstrap}")

    counts, h_mean, h_var, variance_mask = _human_side(human_ratings, human_mean, human_variance, n,
                                                       min_ratings_for_variance)
    p_var = None if pred_variance is None else _vector("pred_variance", pred_variance, n)
    probs = None if pred_probs is None else _probabilities(pred_probs, n)
    labels = _binary_labels(h_mean, counts)

    def metrics_on(idx: np.ndarray | slice) -> dict:
        return _point_metrics(
            pred_mean[idx],
            h_mean[idx],
            None if p_var is None else p_var[idx],
            None if h_var is None else h_var[idx],
            variance_mask[idx],
            None if counts is None else counts[idx],
            None if probs is None else probs[idx],
            None if labels is None else labels[idx],
        )

    result = metrics_on(slice(None))
    if bootstrap > 0:
        result["ci"] = _bootstrap_ci(metrics_on, result, n, bootstrap, confidence, seed)
    return result


def _bootstrap_ci(metrics_on, point: dict, n: int, n_boot: int, confidence: float, seed: int) -> dict:
    """Percentile intervals from resampling items with replacement.

    Not scipy.stats.bootstrap: that gives NaN for a metric when any resample leaves it undefined, while a
    resample of ratings often is constant on one side (no correlation); here such draws are left out for that
    metric only, and all metrics share one set of resampled items.

    Resamples where a metric is undefined (e.g. a constant resample for a correlation) are skipped for that
    metric only; a metric undefined on the full data gets no interval.
    """
    keys = [k for k in METRIC_KEYS if point[k] is not None]
    if n == 0:
        return {k: None for k in METRIC_KEYS}
    rng = np.random.default_rng(seed)
    samples: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(n_boot):
        draw = metrics_on(rng.integers(0, n, size=n))
        for k in keys:
            if draw[k] is not None:
                samples[k].append(draw[k])
    alpha = (1.0 - confidence) / 2.0
    ci: dict[str, tuple[float, float] | None] = {k: None for k in METRIC_KEYS}
    for k in keys:
        if samples[k]:
            low, high = np.quantile(samples[k], [alpha, 1.0 - alpha])
            ci[k] = (float(low), float(high))
    return ci


def prediction_metrics(preds: Sequence[dict], human_ratings: Sequence[Sequence[int]], *, means=None, **kwargs) -> dict:
    """`compute_metrics` of `predict` outputs (dicts with `mean`, `variance`, `probs`; None where the head has
    none) against the human ratings of the same items: the one adapter of training, orca-score, orca-eval and the
    leaderboard. `means` replaces the predicted means (e.g. clamped scores mapped back to 1-5); other keyword
    arguments go to `compute_metrics` (bootstrap, ...)."""
    preds = list(preds)
    if not preds:
        raise ValueError("no predictions to compare")
    has_variance = all(p.get("variance") is not None for p in preds)
    has_probs = all(p.get("probs") is not None for p in preds)
    return compute_metrics(
        [p["mean"] for p in preds] if means is None else means,
        human_ratings=human_ratings,
        pred_variance=[p["variance"] for p in preds] if has_variance else None,
        pred_probs=[p["probs"] for p in preds] if has_probs else None,
        **kwargs,
    )


def baseline_metrics(records: Sequence[dict], names: Sequence[str], **kwargs) -> dict[str, dict]:
    """`compute_metrics` of each named baseline of `eval_suite.baselines.similarity` (scores on [0, 1], mapped to 1-5)
    on the records that have human ratings: the one baseline helper of training and orca-eval."""
    from eval_suite.baselines.similarity import BASELINES
    from modeling_orca import unit_to_rating

    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; known: {', '.join(BASELINES)}")
    rated = [r for r in records if r.get("ratings")]
    ratings = [r["ratings"] for r in rated]
    return {name: compute_metrics(unit_to_rating(np.asarray(BASELINES[name](rated), dtype=float)),
                                  human_ratings=ratings, **kwargs)
            for name in names}


# ------------------------------------------------------------------------------------------------ judges side by side

AGREEMENT_KEYS = ("spearman", "kendall", "mae_mean", "roc_auc", "calibration_error")


def mean_calibration(pred_mean: np.ndarray, human_mean: np.ndarray, edges=(1.0, 1.5, 2.5, 3.5, 4.5, 5.0)) -> dict:
    """Reliability of the predicted mean: items binned by predicted mean (default: to the nearest rating); per
    non-empty bin the mean prediction, the mean human rating and the count, and the calibration error
    sum_b n_b / n |mean pred_b - mean human_b| (on 1-5; 0 = every bin's humans agree on average)."""
    pred_mean, human_mean = np.asarray(pred_mean, dtype=float), np.asarray(human_mean, dtype=float)
    which = np.clip(np.searchsorted(np.asarray(edges), pred_mean, side="right") - 1, 0, len(edges) - 2)
    bins, error = [], 0.0
    for b in range(len(edges) - 1):
        mask = which == b
        if mask.any():
            p, h = float(pred_mean[mask].mean()), float(human_mean[mask].mean())
            bins.append({"low": float(edges[b]), "high": float(edges[b + 1]), "n": int(mask.sum()), "pred": p, "human": h})
            error += mask.sum() / pred_mean.size * abs(p - h)
    return {"bins": bins, "calibration_error": float(error) if pred_mean.size else None}


def _agreement_point(pred: np.ndarray, human: np.ndarray, correct: np.ndarray) -> dict:
    return {
        "spearman": spearman(pred, human),
        "kendall": kendall(pred, human),
        "mae_mean": float(np.mean(np.abs(pred - human))) if pred.size else None,
        "roc_auc": roc_auc(correct, pred),
        "calibration_error": mean_calibration(pred, human)["calibration_error"],
    }


def judge_agreement(
    judges: dict[str, Sequence[float]],
    human_mean,
    *,
    correct_threshold: float = 4.0,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    reference: str | None = None,
) -> dict:
    """Several judges' mean ratings (1-5) against the human mean on the same items, with paired bootstrap intervals.

    Per judge: `spearman`, `kendall` (tau-b), `mae_mean`, `roc_auc` (correct = human mean >= `correct_threshold`,
    so on a 5 / 3 / 1 scale "possibly correct" counts as not correct), `calibration_error` and `calibration` (the
    reliability bins of :func:`mean_calibration`), and `ci`: {metric: (low, high)}. Every judge is resampled with
    the same item draws, so with `reference` (a judge name) each other judge also gets `diff_ci`: the interval of
    (its metric - the reference's), an interval that excludes 0 says the two judges differ on that set.
    """
    human = _vector("human_mean", human_mean)
    preds = {name: _vector(name, values, human.size) for name, values in judges.items()}
    if reference is not None and reference not in preds:
        raise ValueError(f"reference judge {reference!r} is not among {list(preds)}")
    correct = human >= correct_threshold
    out = {}
    for name, pred in preds.items():
        out[name] = {"n": int(human.size), **_agreement_point(pred, human, correct),
                     "calibration": mean_calibration(pred, human)["bins"]}
    # not scipy.stats.bootstrap: the differences need every judge on the same draws, and a draw that leaves a
    # metric undefined (a constant side) is left out for that metric only, where scipy would give NaN
    if bootstrap > 0 and human.size:
        rng = np.random.default_rng(seed)
        draws: dict[str, dict[str, list]] = {name: {k: [] for k in AGREEMENT_KEYS} for name in preds}
        diffs: dict[str, dict[str, list]] = {name: {k: [] for k in AGREEMENT_KEYS} for name in preds}
        for _ in range(bootstrap):
            idx = rng.integers(0, human.size, size=human.size)
            points = {name: _agreement_point(pred[idx], human[idx], correct[idx]) for name, pred in preds.items()}
            for name, point in points.items():
                for k in AGREEMENT_KEYS:
                    if point[k] is not None:
                        draws[name][k].append(point[k])
                        if reference is not None and name != reference and points[reference][k] is not None:
                            diffs[name][k].append(point[k] - points[reference][k])
        alpha = (1.0 - confidence) / 2.0

        def interval(values):
            return tuple(float(q) for q in np.quantile(values, [alpha, 1.0 - alpha])) if values else None

        for name in preds:
            out[name]["ci"] = {k: interval(draws[name][k]) if out[name][k] is not None else None for k in AGREEMENT_KEYS}
            if reference is not None and name != reference:
                out[name]["diff_ci"] = {k: interval(diffs[name][k]) for k in AGREEMENT_KEYS}
    return out
