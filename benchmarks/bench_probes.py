"""The probe suite on one model: accuracy overall, per question type and per kind, and the failing cases.

    .venv/bin/python benchmarks/bench_probes.py --model runs/quickstart/final --json runs/probes.json
Last line: `probe_accuracy=X (P/N) worst_type=TYPE:Y`. The cases and the pass rule: eval_suite/report/probes.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import load_line, run_info  # sets the offline defaults and puts the repository on sys.path

from eval_suite.report.probes import PROBES_DIR, load_probes, probe_files, score_probes, summarise


def _fmt(tally: dict) -> str:
    return "-" if tally["accuracy"] is None else f"{tally['accuracy']:.3f} ({tally['passed']}/{tally['n']})"


def print_table(summary: dict, max_failures: int) -> None:
    print(f"overall {_fmt(summary)}; right {_fmt(summary['by_expected']['right'])}, "
          f"wrong {_fmt(summary['by_expected']['wrong'])}")
    print(f"\n{'type':<16}{'all':>16}{'right':>16}{'wrong':>16}")
    for name, tally in summary["by_type"].items():
        print(f"{name:<16}{_fmt(tally):>16}{_fmt(tally['right']):>16}{_fmt(tally['wrong']):>16}")
    print(f"\n{'kind':<16}{'all':>16}")
    for name, tally in summary["by_kind"].items():
        print(f"{name:<16}{_fmt(tally):>16}")
    failures = summary["failures"]
    print(f"\n{len(failures)} failing probes" + (f" (first {max_failures})" if len(failures) > max_failures else ""))
    for row in failures[:max_failures]:
        print(f"  {row['id']:<22}{row['expected']:<6} {row['kind']:<14}{row['mean']:5.2f}  [{row['reference'][0]}] "
              f"{row['candidate']}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="an ORCA folder or Hub id, e.g. runs/quickstart/final")
    p.add_argument("--revision", default=None, help="a Hub revision (branch, tag or commit)")
    p.add_argument("--probes", nargs="+", default=None, help=f"probe files or folders (default {PROBES_DIR})")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="predict's (default: its own, 4,096)")
    p.add_argument("--device", default=None, help="cpu, cuda, auto (default: where the model loads)")
    p.add_argument("--dtype", default=None, help="e.g. bfloat16 (default: as saved)")
    p.add_argument("--max-failures", type=int, default=40, help="failing probes printed (all are in --json)")
    p.add_argument("--json", default=None, help="write the summary and every probe's row here")
    args = p.parse_args(argv)

    from eval_suite.models.loading import load_model, resolve_revision
    from orca_io.files import write_json_atomic

    records = load_probes(args.probes)
    model, tokenizer = load_model(args.model, revision=args.revision, device=args.device, dtype=args.dtype)
    print(f"{len(records)} probes from {len(probe_files(args.probes))} files; model {args.model}; {load_line()}", flush=True)
    rows = score_probes(model, tokenizer, records, max_batch_tokens=args.max_batch_tokens)
    summary = summarise(rows)
    print_table(summary, args.max_failures)

    worst = min(summary["by_type"].items(), key=lambda item: item[1]["accuracy"])
    line = (f"probe_accuracy={summary['accuracy']:.3f} ({summary['passed']}/{summary['n']}) "
            f"worst_type={worst[0]}:{worst[1]['accuracy']:.3f}")
    if args.json:
        # a Hub id's commit, or a folder's path with a hash of its files' contents (as orca-score reports it)
        model_info = {"name_or_path": args.model, "revision": resolve_revision(args.model, args.revision)[1],
                      "config": model.config.to_dict()}
        write_json_atomic(Path(args.json), {"summary_line": line, "model": model_info, "probe_files": [
            str(f) for f in probe_files(args.probes)], **{k: v for k, v in summary.items() if k != "failures"},
            "rows": rows, **run_info(args)})
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
