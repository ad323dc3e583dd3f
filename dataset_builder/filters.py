"""The standard filters, with a count for every record they drop."""

from __future__ import annotations

from collections import Counter

MAX_CHARS = 1000
"""The paper's rule: an instance is dropped when any of its texts exceeds 1,000 characters."""

TEXT_FIELDS = ("question", "rationale", "transcript", "candidate")

REASON_LONG = f"text over {MAX_CHARS} characters"
REASON_FLAGGED = "flagged"
REASON_UNRATED = "unrated"


def too_long(record: dict, max_chars: int = MAX_CHARS) -> bool:
    # The reference counts as one text: its aliases joined the way EVOUNA writes them.
    texts = [record[f] for f in TEXT_FIELDS] + [" / ".join(record["reference"])]
    return any(len(t) > max_chars for t in texts)


def apply_filters(records: list[dict], *, require_rated: bool = True,
                  max_chars: int = MAX_CHARS) -> tuple[list[dict], Counter]:
    """Drop over-long, flagged and (if ``require_rated``) unrated records.

    Each dropped record is counted once, under the first reason that applies in that order.
    Returns the kept records (order preserved) and the counts.
    """
    kept, dropped = [], Counter()
    for rec in records:
        if too_long(rec, max_chars):
            dropped[REASON_LONG] += 1
        elif rec["flags"]:
            dropped[REASON_FLAGGED] += 1
        elif require_rated and not rec["ratings"]:
            dropped[REASON_UNRATED] += 1
        else:
            kept.append(rec)
    return kept, dropped
