"""The leaderboard's files: leaderboard.json, leaderboard.md, answers/*.jsonl, plots/*.png and index.html.

Every user-provided string (model names, links, file names) is treated as hostile: file names are slugs
checked to stay inside the output folder, HTML text goes in through `textContent` or html.escape, the embedded
JSON cannot close its <script> element, only http(s) links become anchors, and matplotlib never sees `$`."""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path

from .data import slugify

SAFE_LINK = re.compile(r"https?://[^\s<>\"'`\\]+", re.IGNORECASE)
PLOT_DPI = 100


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


# ------------------------------------------------------------------------------------------------ markdown


def md(text) -> str:
    """A user string as inert Markdown table text."""
    text = html.escape(" ".join(str(text).split()), quote=False)  # <, >, & only: quotes are inert in Markdown
    return re.sub(r"([\\`*_\[\]|#])", r"\\\1", text)


def fmt(x, digits=1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def render_markdown(meta: dict, entries: list[dict], doubtful: dict) -> str:
    bench, s = meta["benchmark"], meta["settings"]
    lines = [
        f"# {bench['title']} leaderboard (ORCA)",
        "",
        f"Judge: {md(meta['model']['id'])} ({meta['model']['score_type']}); {bench['n_questions']} questions; "
        f"95% bootstrap intervals over questions ({s['bootstrap']} resamples, seed {s['seed']}); "
        f"high uncertainty = predicted variance > {s['uncertainty_threshold']:g}.",
        "",
        "| rank | model | mean (1-5) | correct % | 95% CI (%) | answered | missing | high-uncertainty % | vs next: diff (p) |",
        "|---:|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for e in entries:
        name = md(e["model_name"])
        link = safe_link(e["link"])
        if link:
            name = f"[{name}]({link.replace('(', '%28').replace(')', '%29')})"
        share = e["high_uncertainty"]["share"]
        nxt = e.get("vs_next")
        vs = "" if not nxt else f"{fmt(nxt['diff'], 3)} (p={fmt(nxt['p_value'], 3)}, n={nxt['n']})"
        lines.append(f"| {e['rank']} | {name} | {e['mean']:.3f} | {e['percent']:.1f} | "
                     f"[{e['percent_ci'][0]:.1f}, {e['percent_ci'][1]:.1f}] | {e['n_answered']} | {e['n_missing']} | "
                     f"{fmt(None if share is None else 100 * share)} | {vs} |")
    for key, title in (("by_modality", "modality"), ("by_category", "category")):
        groups = sorted({g for e in entries for g in e[key]})
        lines += ["", f"## Correct % per {title}", "", "| model | " + " | ".join(md(g) for g in groups) + " |",
                  "|---|" + "---:|" * len(groups)]
        for e in entries:
            cells = [fmt(e[key][g]["percent"]) + f" (n={e[key][g]['n']})" if g in e[key] else "" for g in groups]
            lines.append(f"| {md(e['model_name'])} | " + " | ".join(cells) + " |")
    lines += ["", "## Doubtful items", ""]
    if doubtful["count"] is None:
        lines.append(doubtful["note"])
    else:
        lines.append(f"{doubtful['count']} questions with a mean predicted variance above {doubtful['threshold']:g} "
                     f"(the {len(doubtful['items'])} highest listed); review them for flawed questions or references.")
        if doubtful["items"]:
            lines += ["", "| question id | mean variance | modality | question | reference |", "|---|---:|---|---|---|"]
            for d in doubtful["items"]:
                lines.append(f"| {md(d['question_id'])} | {d['mean_variance']:.2f} | {md(d['modality'])} | "
                             f"{md(d['question'])} | {md(' / '.join(d['reference']))} |")
    lines += ["", "Plots: `plots/ranking.png`, `plots/breakdown.png`, `plots/uncertainty.png`; page: `index.html`.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ plots


def _label(text: str) -> str:
    return str(text).replace("$", r"\$")  # `$...$` would be parsed as mathtext


def write_plots(plots: Path, entries: list[dict], threshold: float) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [_label(f"{e['rank']}. {e['model_name']}") for e in entries]
    written = []

    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(entries)))
    y = list(range(len(entries)))[::-1]  # rank 1 at the top
    pct = [e["percent"] for e in entries]
    err = [[e["percent"] - e["percent_ci"][0] for e in entries], [e["percent_ci"][1] - e["percent"] for e in entries]]
    ax.barh(y, pct, xerr=err, capsize=4, color="#4c78a8")
    ax.set_yticks(y, names)
    ax.set_xlim(0, 100)
    ax.set_xlabel("predicted correctness % (95% bootstrap CI)")
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
        ax.set_title(f"correct % {title}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(entries), 4), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(entries) - 1) // 4), 1, 1))
    fig.savefig(plots / "breakdown.png", dpi=PLOT_DPI)
    plt.close(fig)
    written.append("breakdown.png")

    if all(e["_scored"]["variances"] is not None for e in entries):
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, e in zip(names, entries):
            ax.hist(e["_scored"]["variances"], bins=30, range=(0, 4), histtype="step", label=name)
        ax.axvline(threshold, color="k", linestyle="--", label=f"threshold {threshold:g}")
        ax.set_xlabel("predicted variance of the rating (1-5 scale)")
        ax.set_ylabel("answers")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plots / "uncertainty.png", dpi=PLOT_DPI)
        plt.close(fig)
        written.append("uncertainty.png")
    return written


# ------------------------------------------------------------------------------------------------ HTML


def embed_json(obj) -> str:
    """JSON that is safe inside <script type="application/json">: no `<`, `>` or `&` can end the element."""
    text = json.dumps(obj, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(meta: dict, entries: list[dict], doubtful: dict, plots: list[str]) -> str:
    template = resources.files("eval_suite").joinpath("leaderboard_assets/page.html").read_text(encoding="utf-8")
    data = {"meta": meta, "entries": [{**e, "link_url": safe_link(e["link"])} for e in entries], "doubtful": doubtful}
    s = meta["settings"]
    values = {
        "TITLE": html.escape(f"{meta['benchmark']['title']} leaderboard (ORCA)"),
        "SUBTITLE": html.escape(
            f"Judge {meta['model']['id']} ({meta['model']['score_type']}); {meta['benchmark']['n_questions']} questions; "
            f"95% bootstrap intervals over questions ({s['bootstrap']} resamples, seed {s['seed']}); high uncertainty = "
            f"predicted variance > {s['uncertainty_threshold']:g}."),
        "PLOTS": "\n".join(f'<img src="plots/{html.escape(p)}" alt="{html.escape(p)}">' for p in plots),
        "DATA": embed_json(data),
    }
    # one pass, so a placeholder-like string inside user data is never substituted again
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)


def write_outputs(out: Path, meta: dict, board: dict, questions) -> dict:
    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "answers").mkdir(exist_ok=True)
    entries = board["entries"]
    for e in entries:
        # rank prefix: two submissions with the same name still get two files
        rel = f"answers/{e['rank']:02d}-{slugify(e['model_name'])}.jsonl"
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
    (out / "leaderboard.json").write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (out / "leaderboard.md").write_text(render_markdown(meta, public, board["doubtful"]), encoding="utf-8")
    (out / "index.html").write_text(render_html(meta, public, board["doubtful"], plots), encoding="utf-8")
    return {**result, "out": str(out)}
