"""The probe suite on one model: accuracy overall, per question type and per kind, and the failing cases.

    .venv/bin/python benchmarks/bench_probes.py --model runs/quickstart/final --json runs/probes.json
    .venv/bin/python benchmarks/bench_probes.py --model runs/qwen-zero-shot/final --set template_prefix='"<|im_start|>system\n..."'
`--set FIELD=VALUE` changes a field of the loaded model's config for this run only (a prompt tried without saving a
model); VALUE is read as JSON when it parses (a quoted string with \n escapes, a number, a list), else as text.
Last line: `probe_accuracy=X (P/N) worst_type=TYPE:Y`. The cases and the pass rule: eval_suite/report/probes.py.
"""

from __future__ import annotations

import argparse
import sys
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


def config_changes(items: list[str], config) -> dict:
    """`--set FIELD=VALUE` items as {field: value}; an unknown field or a missing `=` ends the run (exit 2)."""
    import json

    changes = {}
    for item in items:
        field, sep, text = item.partition("=")
        if not sep or not hasattr(config, field):
            print(f"error: --set {item!r}: expected FIELD=VALUE with a field of the model's config", file=sys.stderr)
            raise SystemExit(2)
        try:
            changes[field] = json.loads(text)
        except ValueError:
            changes[field] = text
    return changes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="an ORCA folder or Hub id, e.g. runs/quickstart/final")
    p.add_argument("--revision", default=None, help="a Hub revision (branch, tag or commit)")
    p.add_argument("--probes", nargs="+", default=None, help=f"probe files or folders (default {PROBES_DIR})")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="predict's (default: its own, 1,024 on the CPU)")
    p.add_argument("--device", default=None, help="cpu, cuda, auto (default: where the model loads)")
    p.add_argument("--dtype", default=None, help="e.g. bfloat16 (default: as saved)")
    p.add_argument("--max-failures", type=int, default=40, help="failing probes printed (all are in --json)")
    p.add_argument("--json", default=None, help="write the summary and every probe's row here")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="repeatable: a config field for this run")
    args = p.parse_args(argv)

    from eval_suite.models.loading import load_model, resolve_revision
    from orca_io.files import write_json_atomic

    records = load_probes(args.probes)
    model, tokenizer = load_model(args.model, revision=args.revision, device=args.device, dtype=args.dtype)
    for field, value in config_changes(args.set, model.config).items():
        setattr(model.config, field, value)
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
