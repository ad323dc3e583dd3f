"""Confidence-gated clamping of ORCA scores to the ends of the scale.

A model trained on noisy Likert ratings rarely predicts exactly "fully correct" or "fully wrong" even when it
is sure, which costs MAE on the many items humans agree on. Clamping snaps a score to 0 or 1 when it is
already close to that end (strictly within `margin`) *and* the predicted variance says the model is confident
(variance <= `threshold`). The threshold is tuned on dev data; the margin is fixed, as in the reference release
(BUTSpeechFIT/ORCA, orca_score/clamp.py), whose variances are on the [0, 1] score scale (variance / 16).
"""

from __future__ import annotations

import numpy as np

from eval_suite.metrics import kendall, spearman
from modeling_orca import clamp_confident_score as clamp_one
from modeling_orca import rating_to_unit

DEFAULT_MARGIN = 0.125


def clamp_scores(score01, variance, *, threshold: float, margin: float = DEFAULT_MARGIN) -> np.ndarray:
    """Return a copy of `score01` where confident scores near 0 or 1 are set to exactly 0 or 1.

    `variance` is the predicted variance on whatever scale `threshold` was chosen on (the tuning below reads
    candidates from the same array, so any consistent scale works).
    """
    score = np.asarray(score01, dtype=float)
    var = np.asarray(variance, dtype=float)
    if score.shape != var.shape or score.ndim != 1:
        raise ValueError(
            f"score01 and variance must be 1-D of equal length, got {score.shape} and {var.shape}"
        )
    if not 0.0 <= margin <= 0.5:
        raise ValueError(f"margin must be in [0, 0.5], got {margin}")
    # the model's own rule (modeling_orca.clamp_confident_score), so tuning here and clamping in `predict` agree
    return np.array([clamp_one(float(s), float(v), margin, threshold) for s, v in zip(score, var)], dtype=float)


def clamp_objective(score01, human_score01, mae_weight: float = 1.0) -> dict:
    """rho + tau - mae_weight * MAE on the [0, 1] scale (None when a correlation is undefined)."""
    s, h = np.asarray(score01, dtype=float), np.asarray(human_score01, dtype=float)
    rho, tau = spearman(s, h), kendall(s, h)
    mae = float(np.mean(np.abs(s - h)))
    objective = None if rho is None or tau is None else rho + tau - mae_weight * mae
    return {"spearman": rho, "kendall": tau, "mae": mae, "objective": objective}


def tune_clamp_threshold(
    score01,
    variance,
    human_mean,
    *,
    candidates=None,
    margin: float = DEFAULT_MARGIN,
    mae_weight: float = 1.0,
) -> tuple[float, list[dict]]:
    """Pick the variance threshold that maximises rho + tau - MAE on dev data.

    Instead of the reference release's hill climb over thresholds this scores every threshold at which the
    set of clamped items changes, so the optimum on dev is exact. `mae_weight=0` gives the reference
    release's default objective (rho + tau).

    Args:
        score01: (n,) predicted scores in [0, 1].
        variance: (n,) predicted variances.
        human_mean: (n,) human mean ratings on the [1, 5] scale (converted to [0, 1] for the MAE).
        candidates: thresholds to try. Default: -inf (no clamping) and every distinct variance of an item
            that clamping could touch, since the objective only changes at those values. A returned -inf
            means clamping does not help on dev: leave scores unclamped.

    Returns:
        (best threshold, table) where the table has one dict per candidate in ascending order with keys
        threshold, n_clamped, spearman, kendall, mae, objective. Ties go to the smallest threshold, i.e. the
        least clamping.
    """
    score = np.asarray(score01, dtype=float)
    var = np.asarray(variance, dtype=float)
    human = rating_to_unit(np.asarray(human_mean, dtype=float))
    if not (score.shape == var.shape == human.shape) or score.ndim != 1:
        raise ValueError("score01, variance and human_mean must be 1-D of equal length")
    if candidates is None:
        eligible = (score < margin) | (score > 1.0 - margin)
        candidates = np.concatenate([[-np.inf], np.unique(var[eligible])])
    # np.unique sorts, so ties below resolve to the least clamping
    candidates = np.unique(np.asarray(candidates, dtype=float))
    if candidates.size == 0:
        raise ValueError("no candidate thresholds")

    table = []
    for threshold in candidates:
        clamped = clamp_scores(score, var, threshold=threshold, margin=margin)
        row = {"threshold": float(threshold), "n_clamped": int(np.sum(clamped != score))}
        row.update(clamp_objective(clamped, human, mae_weight))
        table.append(row)
    scored = [row for row in table if row["objective"] is not None]
    if not scored:
        raise ValueError("the objective is undefined for every threshold (constant scores or human means)")
    best = max(scored, key=lambda row: row["objective"])  # max() keeps the first of equal maxima
    return best["threshold"], table


def tune_on_predictions(preds, human_mean, *, margin: float = DEFAULT_MARGIN) -> dict:
    """Tune the threshold on unclamped `predict` outputs (dicts with mean and variance on the 1-5 scale) against
    human mean ratings: the one tuning step of train.py's final evaluation and orca-score --tune-clamp-on.

    Returns threshold (None where no threshold beats no clamping on dev: ties go to no clamping, so a finite
    threshold strictly helped), `clamped` (the chosen row of the table) and `unclamped` (the -inf row)."""
    threshold, table = tune_clamp_threshold(
        rating_to_unit(np.array([p["mean"] for p in preds], dtype=float)), [p["variance"] for p in preds],
        human_mean, margin=margin,
    )
    best = next(row for row in table if row["threshold"] == threshold)
    unclamped = next(row for row in table if row["threshold"] == -np.inf)
    return {"threshold": None if np.isinf(threshold) else threshold, "clamped": best, "unclamped": unclamped}

