"""``python -m dataset_builder build --out DIR [--configs ...]``: write a Hub-ready dataset repository."""

from __future__ import annotations

import argparse
import sys
import time

from .configs import CONFIGS, default_data_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dataset_builder")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the dataset repository (Parquet + README.md card)")
    b.add_argument("--out", required=True, help="output folder (created)")
    b.add_argument("--sources", "--configs", dest="configs", nargs="+", choices=sorted(CONFIGS), metavar="CONFIG",
                   help=f"configs to build (default: every config whose inputs exist): {', '.join(CONFIGS)}")
    b.add_argument("--data-dir", default=None, help=f"public data folder (default: $ORCA_DATA_DIR or {default_data_dir()})")
    b.add_argument("--release-dir", default=None, help="folder with the ORCA release JSONL files (s3_mmau_*)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--s1-size", type=int, default=None)
    b.add_argument("--all-folds", action="store_true", help="also write scenario A folds 1-4 and scenario B folds 0-4")
    b.add_argument("--for-upload", action="store_true", help="leave out sources without a licence")
    args = p.parse_args(argv)

    from .export import build_repo  # imported late so that --help is fast

    t0 = time.perf_counter()
    stats = build_repo(args.out, configs=args.configs, data_dir=args.data_dir, release_dir=args.release_dir,
                       seed=args.seed, s1_size=args.s1_size, all_folds=args.all_folds, for_upload=args.for_upload)
    for name, c in stats["configs"].items():
        sp = c["splits"].get(name, {})
        print(f"{name:14s} train {sp.get('train', 0):6d}  validation {sp.get('validation', 0):5d}  "
              f"test {sp.get('test', 0):5d}  filtered {c['filtered'] or '{}'}  "
              f"alpha(int) {c['summary']['alpha_interval']}")
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
