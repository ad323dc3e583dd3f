"""The leaderboard's files: leaderboard.json, leaderboard.md, answers/*.jsonl, plots/*.png and index.html, and
the HTML tables the static page and the web app (app.py) both show.

Every user-provided string (model names, links, file names) is treated as hostile: file names are slugs
checked to stay inside the output folder, HTML comes from Jinja2 templates (assets/) with
autoescape, only http(s) links become anchors, and matplotlib never sees `$`."""

from __future__ import annotations

import functools
import html
import json
import re
from pathlib import Path

from orca_io.tables import markdown_table

from .data import slugify

SAFE_LINK = re.compile(r"https?://[^\s<>\"'`\\]+", re.IGNORECASE)
PLOT_DPI = 100
MAX_PLOTTED = 30  # entries in the plots (the top ranks); every entry is in the tables


def safe_link(link: str) -> str:
    """The link if it is a plain http(s) URL, else "" (javascript:, data:, relative paths... never become anchors)."""
    return link if SAFE_LINK.fullmatch(link or "") else ""


def inside(out: Path, relative: str) -> Path:
    """out / relative, refusing anything that would land outside `out`."""
    path = (out / relative).resolve()
    if not path.is_relative_to(out.resolve()):
        raise ValueError(f"refusing to write outside {out}: {relative!r}")
    return path


def public_entries(board: dict) -> list[dict]:
    return [{k: v for k, v in e.items() if not k.startswith("_")} for e in board["entries"]]


# ------------------------------------------------------------------------------------------------ table cells


def fmt(x, digits=1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def ranking_columns(meta: dict) -> list[tuple[str, str]]:
    """(key, header) of the ranking table; every header states its unit."""
    s = meta["settings"]
    lo, hi = s["scale"]
    return [
        ("rank", "Rank"),
        ("model", "Model"),
        ("percent", "Correct (%)"),
        ("percent_ci", f"{100 * s['confidence']:g}% CI (%)"),
        ("delta", "Δ to next rank (% points)"),
        ("vs_next", f"vs next rank (paired bootstrap, α = {s.get('alpha', 0.05):g})"),
        ("mean", f"Mean rating ({lo:g}-{hi:g} scale)"),
        ("answered", "Answered (questions)"),
        ("missing", "Missing (questions)"),
        ("uncertain", "High-uncertainty (% of answers)"),
    ]


def ranking_cells(e: dict, digits: int = 1) -> dict[str, str]:
    """The ranking table's text of one entry, shared by the Markdown, the static page and the app."""
    nxt = e.get("vs_next")
    share = e["high_uncertainty"]["share"]
    if not nxt:
        delta = vs = ""
    else:
        ci = nxt.get("ci_pp")
        delta = f"{nxt['diff_pp']:+.{digits}f}" + ("" if ci is None else f" [{ci[0]:+.{digits}f}, {ci[1]:+.{digits}f}]")
        if nxt.get("same_score"):
            vs = "tied (same score)"
        elif nxt["p_value"] is None:
            vs = "tied (too few shared questions to test)"
        else:
            vs = f"{'tied' if nxt['tied'] else 'ahead'} (p = {nxt['p_value']:.3f}, n = {nxt['n']})"
    return {
        "rank": str(e["rank"]),
        "model": e["model_name"],
        "percent": f"{e['percent']:.{digits}f}",
        "percent_ci": f"[{e['percent_ci'][0]:.{digits}f}, {e['percent_ci'][1]:.{digits}f}]",
        "delta": delta,
        "vs_next": vs,
        "mean": f"{e['mean']:.3f}",
        "answered": str(e["n_answered"]),
        "missing": str(e["n_missing"]),
        "uncertain": fmt(None if share is None else 100 * share, digits),
    }


def breakdown_columns(entries: list[dict]) -> list[tuple[str, str, str]]:
    """(key, group, header) of the per-modality and per-category table."""
    cols = []
    for key, title in (("by_modality", "modality"), ("by_category", "category")):
        for g in sorted({g for e in entries for g in e[key]}):
            cols.append((key, g, f"{title}: {g} (correct %, n questions)"))
    return cols


def breakdown_cell(e: dict, key: str, group: str, digits: int = 1) -> str:
    v = e[key].get(group)
    return "" if v is None else f"{v['percent']:.{digits}f} (n={v['n']})"


def doubtful_note(doubtful: dict) -> str:
    if doubtful["count"] is None:
        return doubtful["note"]
    return (f"{doubtful['count']} questions with a mean predicted variance above {doubtful['threshold']:g} "
            f"(the {len(doubtful['items'])} highest listed); review them for flawed questions or references.")


DOUBTFUL_COLUMNS = ("Question id", "Mean predicted variance (rating², 0-4)", "Modality", "Category", "Question",
                    "Reference")


def doubtful_cells(d: dict) -> list[str]:
    return [d["question_id"], f"{d['mean_variance']:.2f}", d["modality"], d["category"], d["question"],
            " / ".join(d["reference"])]


def header_lines(meta: dict) -> list[str]:
    """What every page says about itself: the judge, the package, the date, the statistics and how to submit."""
    bench, s, judge = meta["benchmark"], meta["settings"], meta["model"]
    lines = [
        f"Judge: {judge['id']} (revision {judge.get('revision') or 'unpinned'}; {judge['score_type']} head); "
        f"orca-judge {meta.get('package_version', 'unknown')}; updated {meta.get('date', 'unknown')}.",
        f"{bench['n_questions']} questions. Scores are ORCA's predicted mean correctness, 0 % = rating {s['scale'][0]:g}, "
        f"100 % = rating {s['scale'][1]:g}; {100 * s['confidence']:g}% bootstrap intervals over questions "
        f"({s['bootstrap']} resamples, seed {s['seed']}). Equal scores at the shown precision share a rank; "
        f"a neighbour whose paired bootstrap test is not significant at α = {s.get('alpha', 0.05):g} is shown as tied. "
        f"High uncertainty = predicted rating variance > {s['uncertainty_threshold']:g}.",
    ]
    if meta.get("how_to_submit"):
        lines.append(f"How to submit: {meta['how_to_submit']}")
    return lines


# ------------------------------------------------------------------------------------------------ markdown


def md(text) -> str:
    """A user string as inert Markdown table text."""
    text = html.escape(" ".join(str(text).split()), quote=False)  # <, >, & only: quotes are inert in Markdown
    return re.sub(r"([\\`*_\[\]|#])", r"\\\1", text)


def render_markdown(meta: dict, entries: list[dict], doubtful: dict) -> str:
    digits = meta["settings"].get("percent_digits", 1)
    cols = ranking_columns(meta)
    lines = [f"# {meta['benchmark']['title']} leaderboard (ORCA)", ""]
    lines += [md(x) for x in header_lines(meta)]
    rows = []
    for e in entries:
        cells = {k: md(v) for k, v in ranking_cells(e, digits).items()}
        link = safe_link(e["link"])
        if link:
            cells["model"] = f"[{cells['model']}]({link.replace('(', '%28').replace(')', '%29')})"
        rows.append([cells[k] for k, _ in cols])
    lines += ["", markdown_table([h for _, h in cols], rows, ["" if k == "model" else "right" for k, _ in cols])]
    bcols = breakdown_columns(entries)
    rows = [[md(e["model_name"])] + [breakdown_cell(e, k, g, digits) for k, g, _ in bcols] for e in entries]
    lines += ["", "## Correct % per modality and category", "",
              markdown_table(["model"] + [md(h) for _, _, h in bcols], rows, [""] + ["right"] * len(bcols))]
    lines += ["", "## Doubtful items", "", md(doubtful_note(doubtful))]
    if doubtful["count"] and doubtful["items"]:
        rows = [[md(c) for c in doubtful_cells(d)] for d in doubtful["items"]]
        lines += ["", markdown_table(DOUBTFUL_COLUMNS, rows, ["", "right", "", "", "", ""])]
    lines += ["", "Plots: `plots/ranking.png`, `plots/breakdown.png`, `plots/uncertainty.png`; page: `index.html`.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ HTML tables


@functools.cache
def _templates():
    import jinja2

    # autoescape: every value that reaches a page is escaped, user strings included
    env = jinja2.Environment(loader=jinja2.PackageLoader("eval_suite.leaderboard", "assets"), autoescape=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return env, env.get_template("tables.html").module


def _cell(text: str, cls: str = "", value=None, href: str = "") -> dict:
    return {"text": text, "cls": cls, "v": value, "href": href}


def ranking_table_html(meta: dict, entries: list[dict], table_id: str = "board") -> str:
    """The ranking as an HTML table inside a box that scrolls sideways on a narrow screen. Every user string is
    escaped; only http(s) links become anchors. `data-v` holds the raw value a column sorts by."""
    digits = meta["settings"].get("percent_digits", 1)
    cols = ranking_columns(meta)
    sort_value = {"rank": lambda e: e["rank"], "model": lambda e: e["model_name"].lower(),
                  "percent": lambda e: e["percent"], "percent_ci": lambda e: e["percent_ci"][0],
                  "delta": lambda e: e["vs_next"]["diff_pp"] if e.get("vs_next") else "",
                  "vs_next": lambda e: e["vs_next"]["p_value"] if e.get("vs_next") and e["vs_next"]["p_value"] is not None else "",
                  "mean": lambda e: e["mean"], "answered": lambda e: e["n_answered"], "missing": lambda e: e["n_missing"],
                  "uncertain": lambda e: "" if e["high_uncertainty"]["share"] is None else e["high_uncertainty"]["share"]}
    rows = []
    for e in entries:
        cells = ranking_cells(e, digits)
        row = [_cell(cells[k], "text model", sort_value[k](e), safe_link(e["link"])) if k == "model"
               else _cell(cells[k], "text" if k == "vs_next" else "", sort_value[k](e)) for k, _ in cols]
        rows.append({"rank": e["rank"], "tied": bool(e.get("vs_next") and e["vs_next"]["tied"]), "cells": row})
    return str(_templates()[1].ranking(table_id, cols, rows))


def breakdown_table_html(meta: dict, entries: list[dict], table_id: str = "breakdown") -> str:
    digits = meta["settings"].get("percent_digits", 1)
    cols = breakdown_columns(entries)
    head = [_cell("Model", "text")] + [_cell(h) for _, _, h in cols]
    rows = [{"cells": [_cell(e["model_name"], "text")] + [_cell(breakdown_cell(e, k, g, digits)) for k, g, _ in cols]}
            for e in entries]
    return str(_templates()[1].plain(table_id, head, rows))


def doubtful_table_html(doubtful: dict, table_id: str = "doubtful") -> str:
    rows = []
    if doubtful["count"] and doubtful["items"]:
        rows = [{"cells": [_cell(c, "" if i == 1 else "text") for i, c in enumerate(doubtful_cells(d))]}
                for d in doubtful["items"]]
    head = [_cell(h, "text") for h in DOUBTFUL_COLUMNS]
    return str(_templates()[1].doubtful(table_id, doubtful_note(doubtful), head, rows))


# tables scroll inside their box on a narrow screen instead of widening the page
TABLE_CSS = """
.scroll { overflow-x: auto; max-width: 100%; }
.scroll table { border-collapse: collapse; margin: .4rem 0 1.2rem; font-size: .92rem; }
.scroll th, .scroll td { border-bottom: 1px solid #ddd; padding: .35rem .6rem; text-align: right; vertical-align: top; white-space: nowrap; }
.scroll th { background: #f3f5f8; white-space: normal; min-width: 4.5rem; max-width: 11rem; }
.scroll td.text, .scroll th.text { text-align: left; }
.scroll td.text { white-space: normal; min-width: 8rem; }
.scroll tr.tied td { border-bottom: 1px dashed #bbb; }
"""


# ------------------------------------------------------------------------------------------------ plots


def _label(text: str) -> str:
    return str(text).replace("$", r"\$")  # `$...$` would be parsed as mathtext


def write_plots(plots: Path, entries: list[dict], threshold: float) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not entries:  # an app with no submissions yet
        return []
    # 50 px a row: over ~1,300 entries the figure passes matplotlib's size limit, and far earlier it is unreadable
    total, entries = len(entries), entries[:MAX_PLOTTED]
    names = [_label(f"{e['rank']}. {e['model_name']}") for e in entries]
    written = []
    y = list(range(len(entries)))[::-1]  # rank 1 at the top

    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(entries)))
    pct = [e["percent"] for e in entries]
    err = [[e["percent"] - e["percent_ci"][0] for e in entries], [e["percent_ci"][1] - e["percent"] for e in entries]]
    ax.barh(y, pct, xerr=err, capsize=4, color="#4c78a8")
    ax.set_yticks(y, names)
    ax.set_xlim(0, 100)
    ax.set_xlabel("predicted correctness % (95% bootstrap CI)")
    if total > len(entries):
        ax.set_title(f"top {len(entries)} of {total} entries (all are in the ranking table)", fontsize=9)
    fig.tight_layout()
    fig.savefig(plots / "ranking.png", dpi=PLOT_DPI)
    plt.close(fig)
    written.append("ranking.png")

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, key, title in ((axes[0], "by_modality", "per modality"), (axes[1], "by_category", "per category")):
        groups = sorted({g for e in entries for g in e[key]})
        width = 0.8 / max(len(entries), 1)
        for i, e in enumerate(entries):
            xs = [j - 0.4 + width * (i + 0.5) for j in range(len(groups))]
            ax.bar(xs, [e[key].get(g, {}).get("percent", 0.0) for g in groups], width, label=names[i])
        ax.set_xticks(range(len(groups)), [_label(g) for g in groups], rotation=20, ha="right")
        ax.set_ylim(0, 100)
        ax.set_ylabel("correct %")
        ax.set_title(f"correct % {title}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(entries), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(entries) - 1) // 4), 1, 1))
    fig.savefig(plots / "breakdown.png", dpi=PLOT_DPI)
    plt.close(fig)
    written.append("breakdown.png")

    if entries and all(e["_scored"]["variances"] is not None for e in entries):
        # one row per submission (a box of its answers' predicted variances), so every submission stays visible
        fig, ax = plt.subplots(figsize=(8, 1.4 + 0.5 * len(entries)))
        old_mpl = tuple(int(x) for x in matplotlib.__version__.split(".")[:2]) < (3, 10)  # no `orientation` yet
        ax.boxplot([e["_scored"]["variances"] for e in entries], positions=y, widths=0.6, showfliers=True,
                   flierprops={"markersize": 2}, **({"vert": False} if old_mpl else {"orientation": "horizontal"}))
        for yi, e in zip(y, entries):
            share = e["high_uncertainty"]["share"]
            ax.annotate(f"{100 * share:.1f}% > {threshold:g}", (4.0, yi), xytext=(-4, 0), textcoords="offset points",
                        ha="right", va="center", fontsize=8)
        ax.axvline(threshold, color="k", linestyle="--", label=f"high-uncertainty threshold {threshold:g}")
        ax.set_yticks(y, names)
        ax.set_xlim(0, 4)
        ax.set_xlabel("predicted variance of the rating (rating², 1-5 scale: 0-4)")
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(plots / "uncertainty.png", dpi=PLOT_DPI)
        plt.close(fig)
        written.append("uncertainty.png")
    return written


# ------------------------------------------------------------------------------------------------ static page


def render_html(meta: dict, entries: list[dict], doubtful: dict, plots: list[str]) -> str:
    from markupsafe import Markup

    return _templates()[0].get_template("page.html").render(
        title=f"{meta['benchmark']['title']} leaderboard (ORCA)", css=Markup(TABLE_CSS), subtitle=header_lines(meta),
        board=Markup(ranking_table_html(meta, entries)), breakdown=Markup(breakdown_table_html(meta, entries)),
        doubtful=Markup(doubtful_table_html(doubtful)), plots=plots)


def write_outputs(out: Path, meta: dict, board: dict, questions) -> dict:
    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "answers").mkdir(exist_ok=True)
    entries = board["entries"]
    for position, e in enumerate(entries, start=1):
        # position prefix: two submissions with the same name (or rank) still get two files
        rel = f"answers/{position:02d}-{slugify(e['model_name'])}.jsonl"
        s = e["_scored"]
        with open(inside(out, rel), "w", encoding="utf-8") as fh:
            for i, q in enumerate(questions):
                row = {"question_id": q.id, "answer": e["_answers"].get(q.id), "missing": not s["answered"][i],
                       "mean": s["means"][i], "variance": None if s["variances"] is None else s["variances"][i]}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        e["answers_file"] = rel
    plots = write_plots(out / "plots", entries, meta["settings"]["uncertainty_threshold"])
    public = public_entries(board)
    result = {**meta, "entries": public, "doubtful": board["doubtful"], "plots": [f"plots/{p}" for p in plots]}
    # plain writes: the web app builds this folder staged and swaps it in whole (orca_io.files.staged_dir)
    (out / "leaderboard.json").write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (out / "leaderboard.md").write_text(render_markdown(meta, public, board["doubtful"]), encoding="utf-8")
    (out / "index.html").write_text(render_html(meta, public, board["doubtful"], plots), encoding="utf-8")
    return {**result, "out": str(out)}
