"""The one Markdown table writer and the one flattener of nested dicts (`{"a": {"b": 1}}` -> `{"a.b": 1}`), for
the tables that orca-score, orca-eval, train.py, the leaderboard and the model card print."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence], align: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table; cells are written with str(). `align`: per column "" (default), "left" or
    "right". The cells are written as given: escape `|` in text from users before."""
    marks = {"": "---", "left": ":---", "right": "---:"}
    rule = [marks[a] for a in (align or [""] * len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def flatten(tree: dict, prefix: str = "", leaf: Callable = lambda value: value) -> dict:
    """Nested dicts as one dict of dotted keys, each leaf passed through `leaf`. An empty dict adds no key, so
    `{"orca": {}}` and `{}` flatten alike."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + ".", leaf))
        else:
            out[name] = leaf(value)
    return out
