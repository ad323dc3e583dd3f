"""orca-eval's plots: per test set, predicted against human mean, reliability of the predicted distribution,
variance against disagreement and metrics per answering model; per run, the calibration of the mean out of domain."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from eval_suite.report.tables import SHORT


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "test"


def human_stats(ratings: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, population variance, number of ratings) per item."""
    from eval_suite.metrics import RATINGS, ratings_to_counts

    counts = ratings_to_counts(ratings)
    total = counts.sum(1)
    mean = counts @ RATINGS / total
    return mean, np.clip(counts @ RATINGS**2 / total - mean**2, 0, None), total


def reliability(probs: np.ndarray, ratings: list[list[int]], bins: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Binned predicted probability of each rating vs the observed share of annotators giving it (all 5 ratings
    of every item pooled). Returns (mean predicted, observed frequency, count) per non-empty bin."""
    from eval_suite.metrics import ratings_to_counts

    counts = ratings_to_counts(ratings)
    observed = (counts / counts.sum(1, keepdims=True)).ravel()
    p = probs.ravel()
    which = np.minimum((p * bins).astype(int), bins - 1)
    keep = [b for b in range(bins) if np.any(which == b)]
    return (np.array([p[which == b].mean() for b in keep]), np.array([observed[which == b].mean() for b in keep]),
            np.array([int(np.sum(which == b)) for b in keep]))


def make_plots(by_system, pooled_answerers: dict, test_sets: list[str], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    import matplotlib.pyplot as plt

    files = []

    def legend(ax):
        # below the axes: system labels can be long and would hide the points
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.14), frameon=False)

    def save(fig, name):
        fig.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
        files.append(name)

    for t in test_sets:
        members = {label: per_test[t] for label, per_test in by_system.items() if t in per_test}
        pooled = {}
        for label, results in members.items():
            pooled[label] = {
                "mean": np.concatenate([r.mean for r in results]),
                "ratings": [x for r in results for x in r.ratings],
                "variance": None if any(r.variance is None for r in results) else np.concatenate([r.variance for r in results]),
                "probs": None if any(r.probs is None for r in results) else np.concatenate([r.probs for r in results]),
            }

        fig, ax = plt.subplots(figsize=(5, 5))
        for label, d in pooled.items():
            ax.scatter(human_stats(d["ratings"])[0], d["mean"], s=12, alpha=0.6, label=label)
        ax.plot([1, 5], [1, 5], "k--", lw=1)
        ax.set(xlabel="human mean rating", ylabel="predicted mean rating", title=f"{t}: predicted vs human mean", xlim=(0.8, 5.2), ylim=(0.8, 5.2))
        legend(ax)
        save(fig, f"scatter_{slug(t)}.png")

        fig, ax = plt.subplots(figsize=(5, 5))
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
        for label, d in pooled.items():
            if d["probs"] is not None:  # a bernoulli head predicts no distribution
                x, y, _ = reliability(d["probs"], d["ratings"])
                ax.plot(x, y, "o-", label=label)
        ax.set(xlabel="predicted probability of a rating", ylabel="observed share of annotators", title=f"{t}: reliability", xlim=(0, 1), ylim=(0, 1))
        legend(ax)
        save(fig, f"reliability_{slug(t)}.png")

        fig, ax = plt.subplots(figsize=(5, 5))
        for label, d in pooled.items():
            _, h_var, n = human_stats(d["ratings"])
            if d["variance"] is not None:
                multi = n >= 2  # one rating has no disagreement to compare with
                ax.scatter(h_var[multi], d["variance"][multi], s=12, alpha=0.6, label=label)
        ax.plot([0, 4], [0, 4], "k--", lw=1)
        ax.set(xlabel="human rating variance (items with >= 2 ratings)", ylabel="predicted variance", title=f"{t}: variance vs disagreement")
        legend(ax)
        save(fig, f"variance_{slug(t)}.png")

        answerers = sorted({a for (label, ts, a) in pooled_answerers if ts == t})
        fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.2 * len(answerers) * max(1, len(members))), 4))
        width = 0.8 / max(1, len(members))
        for j, label in enumerate(members):
            for ax, key in zip(axes, ("spearman", "mae_mean")):
                values = [pooled_answerers.get((label, t, a), {}).get(key) for a in answerers]
                ax.bar(np.arange(len(answerers)) + j * width, [np.nan if v is None else v for v in values], width, label=label)
        for ax, key in zip(axes, ("spearman", "mae_mean")):
            ax.set_xticks(np.arange(len(answerers)) + 0.4 - width / 2, answerers, rotation=30, ha="right", fontsize=8)
            ax.set(ylabel=SHORT[key], title=f"{t}: {SHORT[key]} per answering model")
        legend(axes[0])
        save(fig, f"answerers_{slug(t)}.png")
    return files


def make_calibration_plot(ood: dict, path: Path, title: str) -> None:
    """Reliability diagram of the predicted mean: per set, mean human rating against mean prediction per bin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([1, 5], [1, 5], "k--", lw=1, label="calibrated")
    for set_name, per_slice in ood["sets"].items():
        bins = per_slice["all"]["orca"]["calibration"]
        ax.plot([b["pred"] for b in bins], [b["human"] for b in bins], "o-", label=set_name)
    ax.set(xlabel="predicted mean rating (bin mean)", ylabel="human mean rating", xlim=(0.8, 5.2), ylim=(0.8, 5.2),
           title=f"{title}: calibration of the mean")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.14), frameon=False)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
