"""orca-leaderboard: rank audio-LM submissions on a benchmark by ORCA's predicted correctness.

    orca-leaderboard --model runs/quickstart/final --benchmark mmau-test-mini \\
        --submissions a.jsonl b.jsonl --out leaderboard/
    orca-leaderboard export-submission --benchmark mmau-test-mini \\
        --lalm-outputs ../shared/data/lalm_outputs_mmau/qwen_audio_chat_results.json --out subs/qwen_audio_chat.jsonl

Every answer goes through the model's own `predict` (the one scoring path) with the benchmark's reference and
rationale; questions a submission leaves out are scored as empty answers and counted as missing. See
docs/leaderboard.md for the submission format, limits and outputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from dataset_builder.filters import MAX_CHARS

from .data import (
    BENCHMARKS,
    MAX_SUBMISSION_BYTES,
    SubmissionError,
    default_data_dir,
    export_lalm_submission,
    load_questions,
    read_submission,
)
from .stats import doubtful_items, paired_bootstrap, summarise

EXIT_INVALID = 2


def load_model(model_id: str, revision: str | None = None, device: str | None = None):
    """An ORCA model and its tokenizer from a folder or the Hub, the way orca-score loads them (safetensors weights
    only: pickle-based `.bin`/`.pt` weights are refused, never unpickled)."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(model_id, trust_remote_code=True, revision=revision, use_safetensors=True)
    if not hasattr(model, "predict"):
        raise SubmissionError([f"{model_id}: {type(model).__name__} is not an ORCA model (no predict method)"])
    tokenizer = AutoTokenizer.from_pretrained(model_id, revision=revision)
    if device:
        model.to(device)
    return model.eval(), tokenizer


def score_answers(model, tokenizer, questions, submissions, *, batch_size: int = 16, progress: bool = False) -> list[dict]:
    """Per submission: predicted means, variances (None for Bernoulli) and the answered mask, over all questions.

    Each distinct (question, answer) pair is scored once: submissions often share answers (and every missing
    answer is the same empty string), and `predict` is deterministic, so this only saves time.
    """
    index: dict[tuple[str, str], int] = {}
    records = []
    for sub in submissions:
        for q in questions:
            key = (q.id, sub.answers.get(q.id, ""))
            if key not in index:
                index[key] = len(records)
                records.append({"id": f"{q.id}#{len(records)}", "question": q.question, "reference": q.reference,
                                "rationale": q.rationale, "transcript": "", "candidate": key[1]})
    preds = model.predict(records, tokenizer, batch_size=batch_size, show_progress=progress)
    scored = []
    for sub in submissions:
        rows = [preds[index[(q.id, sub.answers.get(q.id, ""))]] for q in questions]
        variances = None if any(r["variance"] is None for r in rows) else [r["variance"] for r in rows]
        scored.append({"means": [r["mean"] for r in rows], "variances": variances,
                       "answered": [q.id in sub.answers for q in questions]})
    return scored


def build_leaderboard(questions, submissions, scored, *, scale=(1.0, 5.0), threshold: float = 1.0,
                      doubtful_threshold: float | None = None, doubtful_top: int = 50,
                      resamples: int = 1000, seed: int = 0) -> dict:
    """Ranked entries (best mean first), paired tests between neighbours, and the doubtful items."""
    entries = []
    for sub, s in zip(submissions, scored):
        entry = summarise(sub.model_name, s["means"], s["variances"], s["answered"], questions,
                          scale=scale, threshold=threshold, resamples=resamples, seed=seed)
        entries.append({**entry, "link": sub.link, "file": sub.path.name, "_scored": s, "_answers": sub.answers})
    entries.sort(key=lambda e: (-e["mean"], e["model_name"]))
    for rank, entry in enumerate(entries, start=1):
        entry["rank"] = rank
    for upper, lower in zip(entries, entries[1:]):
        a, b = upper["_scored"], lower["_scored"]
        both = np.array(a["answered"]) & np.array(b["answered"])  # only questions both submissions answered
        test = paired_bootstrap(np.array(a["means"])[both], np.array(b["means"])[both], resamples, seed)
        upper["vs_next"] = {"model_name": lower["model_name"], **test}
    if entries:
        entries[-1]["vs_next"] = None
    doubtful = doubtful_items(questions, [e["_scored"] for e in entries], [e["model_name"] for e in entries],
                              threshold if doubtful_threshold is None else doubtful_threshold, doubtful_top)
    return {"entries": entries, "doubtful": doubtful}


# ------------------------------------------------------------------------------------------------ CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orca-leaderboard", description=__doc__.split("\n\n")[0],
                                epilog="Also: orca-leaderboard export-submission --help")
    p.add_argument("--model", required=True, help="ORCA model folder or Hub id")
    p.add_argument("--revision", help="Hub branch, tag or commit (ignored for a folder)")
    p.add_argument("--benchmark", required=True, choices=sorted(BENCHMARKS))
    p.add_argument("--submissions", required=True, nargs="+", type=Path, help="JSONL files of {question_id, answer}")
    p.add_argument("--model-names", nargs="+", help="one name per submission (default: NAME.meta.json, else file name)")
    p.add_argument("--links", nargs="+", help="one link per submission ('' for none); only http(s) links become anchors")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--data-dir", type=Path, help="benchmark data (default: $ORCA_DATA_DIR, else ../shared/data)")
    p.add_argument("--questions", type=Path, help="the benchmark's question file (required for mmau-pro)")
    p.add_argument("--uncertainty-threshold", type=float, default=1.0,
                   help="an answer is high-uncertainty when its predicted variance (on the 1-5 scale) exceeds this")
    p.add_argument("--doubtful-threshold", type=float,
                   help="a question is doubtful when its mean predicted variance exceeds this (default: --uncertainty-threshold)")
    p.add_argument("--doubtful-top", type=int, default=50, help="most doubtful questions listed")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-submission-bytes", type=int, default=MAX_SUBMISSION_BYTES)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", help="e.g. cuda (default: where the model loads, the CPU)")
    p.add_argument("--no-progress", action="store_true")
    return p


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
            submissions.append(read_submission(path, [q.id for q in questions], model_name=name, link=link,
                                               benchmark=args.benchmark, max_bytes=args.max_submission_bytes))
        except SubmissionError as e:
            errors += e.errors
    if errors:
        raise SubmissionError(errors)
    model, tokenizer = load_model(args.model, args.revision, args.device)
    scored = score_answers(model, tokenizer, questions, submissions, batch_size=args.batch_size,
                           progress=not args.no_progress)
    cfg = model.config
    max_chars = getattr(cfg, "max_chars", MAX_CHARS)  # the paper's rule; a stand-in judge may not carry it
    long = [(sub.model_name, qid) for sub in submissions for qid, a in sub.answers.items() if len(a) > max_chars]
    if long:
        print(f"warning: {len(long)} answer(s) over {max_chars} characters (first: {long[0][0]!r}, question "
              f"{long[0][1]!r}): scored, but training drops such texts and the model cuts its input to its "
              "max_length tokens", file=sys.stderr)
    board = build_leaderboard(questions, submissions, scored, scale=(cfg.rating_min, cfg.rating_max),
                              threshold=args.uncertainty_threshold, doubtful_threshold=args.doubtful_threshold,
                              doubtful_top=args.doubtful_top, resamples=args.bootstrap, seed=args.seed)
    from .render import write_outputs  # matplotlib only once there is something to draw

    spec = BENCHMARKS[args.benchmark]
    meta = {
        "benchmark": {"name": spec.name, "title": spec.title, "n_questions": len(questions)},
        "model": {"id": args.model, "revision": args.revision, "score_type": cfg.score_type},
        "settings": {"bootstrap": args.bootstrap, "seed": args.seed, "confidence": 0.95,
                     "uncertainty_threshold": args.uncertainty_threshold,
                     "doubtful_threshold": board["doubtful"]["threshold"], "scale": [cfg.rating_min, cfg.rating_max]},
    }
    return write_outputs(args.out, meta, board, questions)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["export-submission"]:
            a = build_export_parser().parse_args(argv[1:])
            n, name = export_lalm_submission(a.lalm_outputs, a.out, model_name=a.model_name, link=a.link)
            print(f"wrote {n} answers of {name} to {a.out}")
            return 0
        result = run(build_parser().parse_args(argv))
    except SubmissionError as e:
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

