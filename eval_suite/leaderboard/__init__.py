"""orca-leaderboard: rank audio-LM submissions on a benchmark by ORCA's predicted correctness.

Examples:
    orca-leaderboard --model runs/quickstart/final --benchmark mmau-test-mini \\
        --submissions a.jsonl b.jsonl --out leaderboard/
    orca-leaderboard export-submission --benchmark mmau-test-mini \\
        --lalm-outputs ../shared/data/lalm_outputs_mmau/qwen_audio_chat_results.json --out subs/qwen_audio_chat.jsonl
    python -m eval_suite.leaderboard.app --model runs/quickstart/final --results results/   # the web app (Space)

Every answer goes through the model's own `predict` (the one scoring path) with the benchmark's reference and
rationale; questions a submission leaves out are scored as empty answers and counted as missing. See
docs/leaderboard.md for the submission format, limits and outputs.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from dataset_builder.filters import MAX_CHARS
from eval_suite.models.loading import UsageError, load_model, resolve_revision
from eval_suite.scoring.cli_args import add_model_arguments, set_quiet
from orca_io.version import package_version

from .data import (
    BENCHMARKS,
    MAX_SUBMISSION_BYTES,
    SubmissionError,
    default_data_dir,
    export_lalm_submission,
    load_questions,
    read_submission,
    scoring_record,
)
from .stats import ALPHA, CONFIDENCE, doubtful_items, paired_bootstrap, summarise

EXIT_INVALID = 2


def score_answers(model, tokenizer, questions, submissions, *, max_batch_tokens: int | None = None,
                  progress: bool = False) -> list[dict]:
    """Per submission: predicted means, variances (None for Bernoulli) and the answered mask, over all questions.

    Each distinct (question, answer) pair is scored once: submissions often share answers (and every missing
    answer is the same empty string), and `predict` is deterministic, so this only saves time. `max_batch_tokens`:
    predict's (tokens per forward pass; None: its default).
    """
    index: dict[tuple[str, str], int] = {}
    records = []
    for sub in submissions:
        for q in questions:
            key = (q.id, sub.answers.get(q.id, ""))
            if key not in index:
                index[key] = len(records)
                records.append({**scoring_record(q, key[1]), "id": f"{q.id}#{len(records)}"})
    preds = model.predict(records, tokenizer, max_batch_tokens=max_batch_tokens, show_progress=progress)
    scored = []
    for sub in submissions:
        rows = [preds[index[(q.id, sub.answers.get(q.id, ""))]] for q in questions]
        variances = None if any(r["variance"] is None for r in rows) else [r["variance"] for r in rows]
        scored.append({"means": [r["mean"] for r in rows], "variances": variances,
                       "answered": [q.id in sub.answers for q in questions]})
    return scored


PERCENT_DIGITS = 1  # the precision the ranking shows; ranks are decided at this precision


def shown_percent(value: float) -> float:
    """A score as the page shows it. Rounded to 9 places first, so float noise (55.04999999999 vs 55.05) cannot
    put two equal scores on either side of a rounding boundary."""
    return round(round(value, 9), PERCENT_DIGITS)


def build_leaderboard(questions, submissions, scored, *, scale=(1.0, 5.0), threshold: float = 1.0,
                      doubtful_threshold: float | None = None, doubtful_top: int = 50,
                      resamples: int = 1000, seed: int = 0, alpha: float = ALPHA) -> dict:
    """Ranked entries (best shown score first), paired tests between neighbours, and the doubtful items.

    Ranks: submissions whose scores are equal as shown (`PERCENT_DIGITS` decimals) share a rank (1, 2, 2, 4),
    listed by name; a neighbour whose paired test is not significant at `alpha` is marked tied
    (`vs_next["tied"]`). Differences to the next rank are given in rating points and in percentage points.
    """
    entries = []
    for sub, s in zip(submissions, scored):
        entry = summarise(sub.model_name, s["means"], s["variances"], s["answered"], questions,
                          scale=scale, threshold=threshold, resamples=resamples, seed=seed)
        entries.append({**entry, "link": sub.link, "file": sub.path.name, "_scored": s, "_answers": sub.answers})
    entries.sort(key=lambda e: (-shown_percent(e["percent"]), e["model_name"]))
    for i, entry in enumerate(entries):
        same = i > 0 and shown_percent(entry["percent"]) == shown_percent(entries[i - 1]["percent"])
        entry["rank"] = entries[i - 1]["rank"] if same else i + 1
    to_pp = 100.0 / (scale[1] - scale[0])  # rating points -> percentage points
    for upper, lower in zip(entries, entries[1:]):
        a, b = upper["_scored"], lower["_scored"]
        both = np.array(a["answered"]) & np.array(b["answered"])  # only questions both submissions answered
        test = paired_bootstrap(np.array(a["means"])[both], np.array(b["means"])[both], resamples, seed)
        same_rank = upper["rank"] == lower["rank"]
        significant = test["p_value"] is not None and test["p_value"] < alpha
        upper["vs_next"] = {
            "model_name": lower["model_name"], **test,
            "diff_pp": round(shown_percent(upper["percent"]) - shown_percent(lower["percent"]), PERCENT_DIGITS),
            "ci_pp": None if test["ci"] is None else [c * to_pp for c in test["ci"]],
            "same_score": same_rank, "tied": same_rank or not significant,
        }
    if entries:
        entries[-1]["vs_next"] = None
    doubtful = doubtful_items(questions, [e["_scored"] for e in entries], [e["model_name"] for e in entries],
                              threshold if doubtful_threshold is None else doubtful_threshold, doubtful_top)
    return {"entries": entries, "doubtful": doubtful}


def judge_meta(model, model_id: str, revision_id: str) -> dict:
    """What a page and a stored result say about the judge: id, revision, head and the clamping in its config."""
    cfg = model.config
    return {"id": model_id, "revision": revision_id, "score_type": cfg.score_type,
            "clamp": {k: getattr(cfg, k, None) for k in ("clamp", "clamp_margin", "clamp_variance_threshold")}}


def board_meta(benchmark: str, n_questions: int, judge: dict, cfg, *, resamples: int, seed: int,
               threshold: float, doubtful_threshold: float, alpha: float = ALPHA, how_to_submit: str = "") -> dict:
    spec = BENCHMARKS[benchmark]
    return {
        "benchmark": {"name": spec.name, "title": spec.title, "n_questions": n_questions},
        "model": judge,
        "package_version": package_version(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "how_to_submit": how_to_submit,
        "settings": {"bootstrap": resamples, "seed": seed, "confidence": CONFIDENCE, "alpha": alpha,
                     "percent_digits": PERCENT_DIGITS, "uncertainty_threshold": threshold,
                     "doubtful_threshold": doubtful_threshold, "scale": [cfg.rating_min, cfg.rating_max]},
    }


# ------------------------------------------------------------------------------------------------ CLI


SUBMIT_HINT = ("Submit a JSONL file of {\"question_id\": ..., \"answer\": ...} lines, one per question "
               "(orca-leaderboard export-submission converts an audio-LM answer file); see docs/leaderboard.md.")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orca-leaderboard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Subcommand: orca-leaderboard export-submission --help")
    add_model_arguments(p)  # --model --revision --device --dtype --max-batch-tokens --quiet
    p.add_argument("--benchmark", required=True, choices=sorted(BENCHMARKS))
    p.add_argument("--submissions", required=True, nargs="+", type=Path, help="JSONL files of {question_id, answer}")
    p.add_argument("--model-names", nargs="+", help="one name per submission (default: NAME.meta.json, else file name)")
    p.add_argument("--links", nargs="+", help="one link per submission ('' for none); only http(s) links become anchors")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--data-dir", type=Path, help="benchmark data (default: $ORCA_DATA_DIR, else ../shared/data)")
    p.add_argument("--questions", type=Path, help="the benchmark's question file (required for mmau-pro)")
    add_ranking_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (--quiet also silences transformers)")
    return p


def add_ranking_arguments(p: argparse.ArgumentParser) -> None:
    """The options of the ranking itself, shared by the CLI and the web app."""
    p.add_argument("--uncertainty-threshold", type=float, default=1.0,
                   help="an answer is high-uncertainty when its predicted variance (on the 1-5 scale) exceeds this "
                        "(default: %(default)s)")
    p.add_argument("--doubtful-threshold", type=float,
                   help="a question is doubtful when its mean predicted variance exceeds this (default: --uncertainty-threshold)")
    p.add_argument("--doubtful-top", type=int, default=50, help="most doubtful questions listed (default: %(default)s)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the questions (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="numpy seed of the bootstrap (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=ALPHA,
                   help="significance level of the paired test between neighbours (default: %(default)s)")
    p.add_argument("--max-submission-bytes", type=int, default=MAX_SUBMISSION_BYTES,
                   help="size limit of one submission file (default: %(default)s = 16 MiB)")


def build_export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orca-leaderboard export-submission",
                                description="Turn an audio-LM answer file (lalm_outputs_mmau/*.json) into a submission "
                                            "and its NAME.meta.json header.")
    p.add_argument("--benchmark", default="mmau-test-mini", choices=["mmau-test-mini"],
                   help="the LALM answer files are MMAU test-mini answers")
    p.add_argument("--lalm-outputs", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path, help="submission JSONL to write")
    p.add_argument("--model-name", help="default: from the file name (e.g. Qwen-Audio-Chat)")
    p.add_argument("--link", default="")
    return p


def _per_submission(values: list | None, n: int, flag: str) -> list:
    if values is None:
        return [None] * n
    if len(values) != n:
        raise SubmissionError([f"{flag}: {len(values)} values for {n} submissions"])
    return values


def run(args) -> dict:
    questions = load_questions(args.benchmark, args.data_dir or default_data_dir(), args.questions)
    names = _per_submission(args.model_names, len(args.submissions), "--model-names")
    links = _per_submission(args.links, len(args.submissions), "--links")
    submissions, errors = [], []
    for path, name, link in zip(args.submissions, names, links):
        try:  # every submission is checked before the model loads, and all problems are reported at once
            submissions.append(read_submission(path, questions, model_name=name, link=link,
                                               benchmark=args.benchmark, max_bytes=args.max_submission_bytes))
        except SubmissionError as e:
            errors += e.errors
    if errors:
        raise SubmissionError(errors)
    load_revision, revision_id = resolve_revision(args.model, args.revision)
    model, tokenizer = load_model(args.model, revision=load_revision, device=args.device, dtype=args.dtype)
    scored = score_answers(model, tokenizer, questions, submissions, max_batch_tokens=args.max_batch_tokens,
                           progress=not (args.no_progress or args.quiet))
    cfg = model.config
    max_chars = getattr(cfg, "max_chars", MAX_CHARS)  # the paper's rule; a stand-in judge may not carry it
    long = [(sub.model_name, qid) for sub in submissions for qid, a in sub.answers.items() if len(a) > max_chars]
    if long:
        print(f"warning: {len(long)} answer(s) over {max_chars} characters (first: {long[0][0]!r}, question "
              f"{long[0][1]!r}): scored, but training drops such texts and the model cuts its input to its "
              "max_length tokens", file=sys.stderr)
    board = build_leaderboard(questions, submissions, scored, scale=(cfg.rating_min, cfg.rating_max),
                              threshold=args.uncertainty_threshold, doubtful_threshold=args.doubtful_threshold,
                              doubtful_top=args.doubtful_top, resamples=args.bootstrap, seed=args.seed,
                              alpha=args.alpha)
    from .render import write_outputs  # matplotlib only once there is something to draw

    meta = board_meta(args.benchmark, len(questions), judge_meta(model, args.model, revision_id), cfg,
                      resamples=args.bootstrap, seed=args.seed, threshold=args.uncertainty_threshold,
                      doubtful_threshold=board["doubtful"]["threshold"], alpha=args.alpha, how_to_submit=SUBMIT_HINT)
    return write_outputs(args.out, meta, board, questions)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["export-submission"]:
            a = build_export_parser().parse_args(argv[1:])
            n, name = export_lalm_submission(a.lalm_outputs, a.out, model_name=a.model_name, link=a.link)
            print(f"wrote {n} answers of {name} to {a.out}")
            return 0
        args = build_parser().parse_args(argv)
        set_quiet(args.quiet)
        result = run(args)
    except (SubmissionError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:  # a model that cannot be loaded, an output folder that cannot be written
        print(f"error: {e}", file=sys.stderr)
        return 1
    for entry in result["entries"]:
        print(f"{entry['rank']:>3}  {entry['percent']:6.1f} %  [{entry['percent_ci'][0]:.1f}, "
              f"{entry['percent_ci'][1]:.1f}]  missing {entry['n_missing']:>4}  {entry['model_name']}")
    print(f"wrote {result['out']}/index.html")
    return 0

