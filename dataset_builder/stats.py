"""Agreement and rating statistics per config."""

from __future__ import annotations

from collections import Counter

import krippendorff
import numpy as np

from orca_io.schema import rating_histogram


def reliability_matrix(records: list[dict]) -> np.ndarray:
    """(max ratings per item) x (items) with NaN for missing values.

    Krippendorff's alpha depends only on the values each unit received, not on which rater gave
    them, so ratings are placed by position; rows are not raters.
    """
    width = max((len(r["ratings"]) for r in records), default=0)
    m = np.full((width, len(records)), np.nan)
    for j, rec in enumerate(records):
        m[: len(rec["ratings"]), j] = rec["ratings"]
    return m


def alpha(records: list[dict], level: str = "interval") -> float | None:
    """Krippendorff's alpha (``interval`` or ``ordinal``) over items with >= 2 ratings; None when
    no item has two ratings or all values are equal (alpha undefined)."""
    multi = [r for r in records if len(r["ratings"]) >= 2]
    if not multi:
        return None
    values = {v for r in multi for v in r["ratings"]}
    if len(values) < 2:
        return None
    return float(krippendorff.alpha(reliability_data=reliability_matrix(multi), level_of_measurement=level,
                                    value_domain=[1, 2, 3, 4, 5] if level == "ordinal" else None))


def summarize(records: list[dict]) -> dict:
    """Counts, ratings per item, rating histogram and alpha for a list of records."""
    all_ratings = [v for r in records for v in r["ratings"]]
    return {
        "records": len(records),
        "questions": len({r["question_id"] for r in records}),
        "answerers": dict(sorted(Counter(r["answerer"] for r in records).items())),
        "ratings_per_item": dict(sorted(Counter(len(r["ratings"]) for r in records).items())),
        "rating_histogram": rating_histogram(all_ratings),
        "mean_rating": round(float(np.mean(all_ratings)), 4) if all_ratings else None,
        "alpha_interval": _round(alpha(records, "interval")),
        "alpha_ordinal": _round(alpha(records, "ordinal")),
    }


def _round(x):
    return None if x is None else round(x, 4)
