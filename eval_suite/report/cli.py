"""orca-eval: turn trained runs (train.py run folders) into the paper's tables and plots.

    orca-eval --runs runs/multi-f0 runs/multi-f1 runs/beta-f0 runs/beta-f1 --out reports/main
    orca-eval --runs runs/* --out reports/mmar --test-file mmar_test.jsonl --baselines exact_match token_f1 bleu

Runs are grouped by what differs in their run_config.yaml: runs that differ only in `data.fold` are folds of one
system (mean +- std over folds); systems that differ only in `model.orca.template_fields` form the input ablation,
systems that differ only in the stages they skip form the curriculum ablation. Each run is scored on its own test
split (test_predictions.jsonl) or, with --test-file, on the given files through its final/ model's `predict`.
Writes report.md, report.json and PNG plots into --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eval_suite.report.ood import ood_evaluation, ood_markdown
from eval_suite.report.plots import make_calibration_plot, make_plots, slug
from eval_suite.report.runs import (
    CURRICULUM_KEY,
    DEFAULT_BASELINES,
    INPUT_KEY,
    ReportError,
    Run,
    curriculum,
    load_run,
    score_results,
    test_records_of,
    varying_keys,
)
from eval_suite.report.tables import (
    ablation_table,
    answerer_table,
    baselines_table,
    folds_table,
    heads_table,
    per_run_table,
    systems,
)
from eval_suite.scoring.cli_args import add_model_arguments, set_quiet
from orca_io.files import write_text_atomic
from orca_io.jsonl import read_jsonl
from orca_io.tables import markdown_table

__all__ = ["build_parser", "build_report", "main"]


def ood_for_runs(runs: list[Run], max_batch_tokens: int | None, out: Path, bootstrap: int, device=None, dtype=None) -> dict:
    """orca-eval --ood: each run's final/ model on the out-of-domain sets of its own fold."""
    from eval_suite.models.loading import load_model

    results = {}
    for run in runs:
        if not (run.path / "final").is_dir():
            raise ReportError(f"{run.path}: no final/ model folder to score the out-of-domain sets with")
        d = run.config.get("data", {})
        in_domain = None
        preds_file = run.path / "test_predictions.jsonl"
        if preds_file.exists():
            test = [p for p in read_jsonl(preds_file) if p.get("ratings")]
            in_domain = (test_records_of(run, test), test)
        model, tokenizer = load_model(str(run.path / "final"), device=device, dtype=dtype)
        results[run.name] = ood_evaluation(model, tokenizer, data_dir=d.get("data_dir"), fold=d.get("fold") or 0,
                                           seed=d.get("seed") or 0, max_batch_tokens=max_batch_tokens, in_domain=in_domain,
                                           bootstrap=bootstrap)
        del model
        make_calibration_plot(results[run.name], out / f"calibration_{slug(run.name)}.png", run.name)
    return results


def build_report(args) -> dict:
    runs = [load_run(Path(p)) for p in args.runs]
    names = [r.name for r in runs]
    for r in runs:
        if names.count(r.name) > 1:  # two folders with one name: use the path given
            r.name = str(r.path)
    notes: list[str] = []
    results = score_results(runs, [Path(p) for p in args.test_file], args.baselines, args.max_batch_tokens, notes,
                            getattr(args, "device", "auto"), getattr(args, "dtype", "auto"))
    test_sets = list(dict.fromkeys(r.test_set for r in results))
    by_system = systems(results, runs)
    answerer, pooled = answerer_table(by_system)
    tables = [
        heads_table(by_system, test_sets),
        folds_table(by_system),
        answerer,
        ablation_table(results, runs, INPUT_KEY, "Input ablations",
                       "Systems that differ only in `model.orca.template_fields` (the fields the model reads)."),
        ablation_table(results, runs, CURRICULUM_KEY, "Curriculum ablations",
                       "Systems that differ only in the training stages they run (`skip_stages`; full = every stage)."),
        baselines_table(by_system, results, test_sets),
        per_run_table(results),
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plots = make_plots(by_system, pooled, test_sets, out)

    run_rows = [[r.name, str(r.path), r.config["model"].get("score_type"), r.fold, curriculum(r.config)] for r in runs]
    md = ["# ORCA evaluation report", "", markdown_table(["run", "path", "head", "fold", "curriculum"], run_rows), ""]
    md += [t.markdown() for t in tables]
    ood = ood_for_runs(runs, args.max_batch_tokens, out, args.bootstrap, args.device, args.dtype) if getattr(args, "ood", False) else {}
    for name, result in ood.items():
        plots.append(f"calibration_{slug(name)}.png")
        md += [f"## Out-of-domain sets: {name}", "",
               f"The in-domain test and sets no training stage read, every judge on the same items; [low, high] = "
               f"95 % bootstrap interval ({result['bootstrap']} resamples, {result['slice_bootstrap']} for slices); "
               "ROC-AUC: correct = human mean >= 4; calib. error: calibration error of the mean (1-5).", "",
               ood_markdown(result), ""]
    md += ["## Plots", ""] + [f"![{p}]({p})" for p in plots]
    if notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    write_text_atomic(out / "report.md", "\n".join(md) + "\n")
    report = {
        "runs": [{"name": r.name, "path": str(r.path), "fold": r.fold, "curriculum": curriculum(r.config),
                  "head": r.config["model"].get("score_type"), "varying_settings": {k: r.settings.get(k) for k in varying_keys(runs)}}
                 for r in runs],
        "test_sets": test_sets,
        "tables": {t.title: t.data for t in tables},
        "plots": plots,
        "notes": notes,
        "ood": ood,
    }
    write_text_atomic(out / "report.json", json.dumps(report, indent=1, default=str) + "\n")
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orca-eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, help="train.py run folders")
    p.add_argument("--out", required=True, help="folder for report.md, report.json and the PNG plots")
    p.add_argument("--test-file", nargs="*", default=[], help="labelled JSONL test sets scored with each run's final/ model")
    p.add_argument("--baselines", nargs="*", default=None,
                   help="baselines beside ORCA (default: those in each run's metrics.json, or "
                        f"{' '.join(DEFAULT_BASELINES)} with --test-file)")
    add_model_arguments(p, model=False)  # --device, --dtype, --max-batch-tokens, --quiet as in orca-score
    p.add_argument("--ood", action="store_true",
                   help="also score each run's final/ model on the out-of-domain sets (EVOUNA-NQ held-out answerers, "
                        "NQ-open graded predictions, NQ-open SAS pairs) beside the in-domain test, with baselines")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the --ood intervals")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    set_quiet(args.quiet)
    if args.baselines:
        from eval_suite.baselines.similarity import BASELINES

        unknown = sorted(set(args.baselines) - set(BASELINES))
        if unknown:
            print(f"error: unknown baselines {unknown}; known: {', '.join(BASELINES)}", file=sys.stderr)
            raise SystemExit(2)
    try:
        report = build_report(args)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"wrote {Path(args.out) / 'report.md'} ({len(report['runs'])} runs, {len(report['plots'])} plots)")
    return 0


if __name__ == "__main__":
    main()
