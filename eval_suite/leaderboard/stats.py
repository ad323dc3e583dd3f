"""Summaries of scored submissions: means with bootstrap intervals over questions, breakdowns, uncertainty,
paired tests between neighbouring ranks, and the doubtful items. Resampling is scipy.stats' (bootstrap,
permutation_test), seeded."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy import stats

CONFIDENCE = 0.95  # of the bootstrap intervals
ALPHA = 0.05  # significance level of the paired test between neighbouring ranks


def percent(mean: float, lo: float = 1.0, hi: float = 5.0) -> float:
    """A mean rating on [lo, hi] as a correctness percentage (1 -> 0 %, 5 -> 100 %)."""
    return 100.0 * (mean - lo) / (hi - lo)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def bootstrap_ci(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """Percentile interval of the mean, resampling questions with replacement (scipy.stats.bootstrap)."""
    if len(values) < 2 or resamples <= 0:
        return float(np.mean(values)), float(np.mean(values))
    ci = stats.bootstrap((values,), _mean, n_resamples=resamples, confidence_level=CONFIDENCE, method="percentile",
                         rng=np.random.default_rng(seed)).confidence_interval
    return float(ci.low), float(ci.high)


def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> dict:
    """Mean difference a - b over paired questions, its bootstrap interval (scipy.stats.bootstrap) and a two-sided
    p-value of the paired sign-flip permutation test (scipy.stats.permutation_test: under the null that neither
    answer set is better, each question's difference is as likely to have either sign; +1 smoothing, so a
    randomised p-value is never exactly 0)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(d)
    if n < 2 or resamples <= 0:
        return {"n": n, "diff": float(d.mean()) if n else None, "ci": None, "p_value": None}
    rng = np.random.default_rng(seed)
    observed = float(d.mean())
    interval = stats.bootstrap((d,), _mean, n_resamples=resamples, confidence_level=CONFIDENCE, method="percentile",
                               rng=rng).confidence_interval
    ci = [float(interval.low), float(interval.high)]
    test = stats.permutation_test((d,), _mean, permutation_type="samples", n_resamples=resamples,
                                  alternative="two-sided", rng=rng)
    return {"n": n, "diff": observed, "ci": ci, "p_value": float(test.pvalue)}


def breakdown(means: np.ndarray, answered: np.ndarray, groups: list[str], scale: tuple[float, float]) -> dict:
    """Per group (modality or category): questions, missing answers, mean rating and percentage."""
    members = defaultdict(list)
    for i, g in enumerate(groups):
        members[g or "(none)"].append(i)
    out = {}
    for g in sorted(members):
        idx = np.array(members[g])
        m = float(means[idx].mean())
        out[g] = {"n": len(idx), "n_missing": int((~answered[idx]).sum()), "mean": m, "percent": percent(m, *scale)}
    return out


def summarise(name: str, means, variances, answered, questions, *, scale, threshold, resamples, seed) -> dict:
    """The leaderboard entry of one submission. `means`/`variances` cover every question (missing answers were
    scored as empty answers); `variances` is None for a model that predicts no variance (Bernoulli)."""
    means = np.asarray(means, dtype=float)
    answered = np.asarray(answered, dtype=bool)
    mean = float(means.mean())
    lo, hi = bootstrap_ci(means, resamples, seed)
    if variances is None:
        uncertainty = {"threshold": threshold, "count": None, "share": None,
                       "note": "not available: the model predicts no variance (Bernoulli head)"}
    else:
        high = np.asarray(variances, dtype=float) > threshold
        uncertainty = {"threshold": threshold, "count": int(high.sum()), "share": float(high.mean())}
    return {
        "model_name": name,
        "n_questions": len(means),
        "n_answered": int(answered.sum()),
        "n_missing": int((~answered).sum()),
        "mean": mean,
        "mean_ci": [lo, hi],
        "percent": percent(mean, *scale),
        "percent_ci": [percent(lo, *scale), percent(hi, *scale)],
        "high_uncertainty": uncertainty,
        "by_modality": breakdown(means, answered, [q.modality for q in questions], scale),
        "by_category": breakdown(means, answered, [q.category for q in questions], scale),
    }


def doubtful_items(questions, scored: list[dict], names: list[str], threshold: float, top: int) -> dict:
    """Questions whose predicted variance, averaged over the submissions that answered them, exceeds the
    threshold: the model expects annotators to disagree whatever the answer, a sign of a flawed item."""
    if any(s["variances"] is None for s in scored):
        return {"threshold": threshold, "count": None, "items": [],
                "note": "not available: the model predicts no variance (Bernoulli head)"}
    flagged = []
    for i, q in enumerate(questions):
        var = [s["variances"][i] for s in scored if s["answered"][i]]
        if not var or float(np.mean(var)) <= threshold:
            continue
        flagged.append({
            "question_id": q.id, "question": q.question, "reference": q.reference, "modality": q.modality,
            "category": q.category, "mean_variance": float(np.mean(var)), "n_answers": len(var),
            "means": {n: float(s["means"][i]) for n, s in zip(names, scored) if s["answered"][i]},
        })
    flagged.sort(key=lambda x: (-x["mean_variance"], x["question_id"]))
    return {"threshold": threshold, "count": len(flagged), "items": flagged[:top]}
