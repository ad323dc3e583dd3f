"""orca-score: score a JSONL file of candidate answers with a trained ORCA model.

    orca-score --model runs/orca/final --input answers.jsonl --output scored.jsonl --summary summary.json
    orca-score --model user/orca-judge --revision v1 --input in.jsonl --output out.jsonl --clamp auto
    orca-score --model out/converted --input in.jsonl --output out.jsonl --output-format reference
    accelerate launch --num_processes 4 -m eval_suite.scoring.cli --model ... --input ... --output ...

Input: one JSON object per line.
  required  id (unique string), question, reference (a string or a list of accepted answers), candidate
  optional  rationale (text describing the audio), transcript (or the reference release's `transcription`),
            ratings (human 1-5 ratings: metrics in the summary), answerer, benchmark, question_id, ...; other keys
            are kept in the output
  example   {"id": "q1-a", "question": "Which instrument plays the melody?", "reference": ["violin", "fiddle"],
             "rationale": "A solo violin plays over soft piano chords.", "candidate": "It's a violin.", "ratings": [5, 4, 5]}

Every non-blank input line gives one output line, in input order: the input object plus `orca_mean`,
`orca_variance` (1-5 scale), `orca_probs`, `orca_score` ([0, 1], clamped when asked) and `orca_error`; with
`--output-format reference`, the reference release's `rating_orca`, `variance_orca` ([0, 1] scale) and `n_ratings`.
It prints a system-level line (n, mean rating, mean score; also without ratings) and, for labelled lines, metrics.
Scores come from the model's own `predict` (the one scoring path). Records are scored question by question (all
answers sharing the text before the candidate together, so `predict` computes that text once); the output is built
in a `.partial` file (one per process under `accelerate launch`), appended in chunks of whole records with fsync,
and put in input order at the end: `--resume` continues an interrupted run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eval_suite.models.loading import UsageError
from eval_suite.scoring.cli_args import add_model_arguments, set_quiet
from eval_suite.scoring.scorer import ScoreOptions, score_file
from orca_io.files import write_json_atomic
from orca_io.tables import markdown_table

EXIT_INVALID = 2  # input that fails validation, or options that cannot work together (argparse uses 2 too)
EXIT_FAILED = 1  # an input/output error during the run
METRIC_COLUMNS = ("n", "spearman", "kendall", "mae_mean", "mae_variance", "nll", "roc_auc")


def system_line(n: int, system: dict) -> str:
    """The system-level result, with or without human ratings."""
    if not n:
        return "system: n=0 (no record scored)"
    line = f"system: n={n}  mean rating {system['mean']:.4f} (1-5)  mean score {system['score']:.4f} ([0, 1])"
    if system["score"] != system["score_unclamped"]:
        line += f", unclamped {system['score_unclamped']:.4f}"
    if system["human_mean"] is not None:
        line += f"  human mean rating {system['human_mean']:.4f} (labelled lines)"
    return line


def print_metrics(metrics: dict) -> None:
    rows = [[name] + ["-" if m.get(c) is None else (str(m[c]) if c == "n" else f"{m[c]:.4f}") for c in METRIC_COLUMNS]
            for name, m in metrics.items()]
    print("\n" + markdown_table(["scores", *METRIC_COLUMNS], rows))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orca-score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--input", required=True, type=Path, help="JSONL records (fields below; also the reference release's format)")
    p.add_argument("--output", required=True, type=Path, help="JSONL, one line per non-blank input line, in order")
    p.add_argument("--output-format", choices=("orca", "reference"), default="orca",
                   help="orca: orca_mean/orca_variance (1-5 scale), orca_probs, orca_score; reference: the reference "
                        "release's rating_orca (mean on [0, 1]), variance_orca (on [0, 1]: 1/16 of the 1-5 "
                        "variance; 0.0 for a bernoulli head) and n_ratings (default: %(default)s)")
    p.add_argument("--clamp", default="config", metavar="auto|THRESHOLD|off",
                   help="clamp confident scores to 0/1: auto = the model config's clamp_variance_threshold, a number "
                        "= that variance threshold (1-5 scale), off = never; default: as the model config says")
    p.add_argument("--tune-clamp-on", metavar="DEV.jsonl", help="tune the clamp threshold on this labelled file, then apply it")
    p.add_argument("--summary", type=Path, help="write a JSON summary (system-level scores, metrics, versions) here")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="a line that fails validation: stop with exit code 2 (raise) or write it with orca_error set (skip)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from its .partial/.shard files")
    p.add_argument("--chunk-size", type=int, default=256, help="records scored and appended to the partial file at a time")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (--quiet implies it)")
    return p


def run(args) -> dict | None:
    """Score the input and print the results; returns the summary on the main process (None on the others)."""
    result = score_file(ScoreOptions.from_namespace(args), warn=lambda text: print(text, file=sys.stderr))
    if result is None:
        return None
    summary, notes = result
    print(system_line(summary["counts"]["scored"], summary["system"]))
    if summary["metrics"]:
        print_metrics(summary["metrics"])
    for text in notes:
        print(text, file=sys.stderr)
    if args.summary:
        write_json_atomic(args.summary, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    set_quiet(args.quiet)
    try:
        run(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    except OSError as err:  # what the checks before loading cannot foresee (a full disk): one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_FAILED) from None
    return 0


if __name__ == "__main__":
    main()
