"""``python -m dataset_builder build --out DIR [--configs ...] [--release HUB_ID]``: write a Hub-ready dataset
repository. ``python -m dataset_builder fetch``: download the public sources it reads, checked by SHA-256."""

from __future__ import annotations

import argparse
import sys
import time

from .configs import CONFIGS, RELEASE_FILES, default_data_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dataset_builder")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the dataset repository (Parquet + README.md card)")
    b.add_argument("--out", required=True, help="output folder (created)")
    b.add_argument("--sources", "--configs", dest="configs", nargs="+", choices=sorted(CONFIGS), metavar="CONFIG",
                   help=f"configs to build (default: every config whose inputs exist): {', '.join(CONFIGS)}")
    b.add_argument("--data-dir", default=None, help=f"public data folder (default: $ORCA_DATA_DIR or {default_data_dir()})")
    b.add_argument("--release-dir", default=None, help="folder with the ORCA release JSONL files (s3_mmau_*)")
    b.add_argument("--release", default=None, metavar="HUB_ID",
                   help="the ORCA release as a Hub dataset instead (e.g. BUT-FIT/orca-audio-qa-annotations)")
    b.add_argument("--release-revision", default=None, help="its branch, tag or commit (default: the default branch)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--s1-size", type=int, default=None)
    b.add_argument("--all-folds", action="store_true", help="also write scenario A folds 1-4 and scenario B folds 0-4")
    b.add_argument("--for-upload", action="store_true", help="leave out sources without a licence")
    f = sub.add_parser("fetch", help="download the public sources, pinned and checked by SHA-256")
    f.add_argument("--data-dir", default=None, help=f"where to put them (default: $ORCA_DATA_DIR or {default_data_dir()})")
    f.add_argument("--sources", nargs="+", default=None, help="only these (e.g. evouna_nq sas; default: all)")
    f.add_argument("--base-url", default=None, help="a mirror laid out as raw.githubusercontent.com/OWNER/REPO/COMMIT/PATH")
    f.add_argument("--force", action="store_true", help="replace a file already there whose hash differs")
    args = p.parse_args(argv)
    if args.command == "fetch":
        from . import fetch

        return fetch.main(args.data_dir or default_data_dir(), base_url=args.base_url or fetch.BASE_URL,
                          sources=args.sources, force=args.force)
    if args.release and args.release_dir:
        p.error("give --release (a Hub dataset) or --release-dir (a folder), not both")

    from .export import available_configs, build_repo  # imported late so that --help is fast
    from .release import HubRelease

    release_dir = HubRelease(args.release, args.release_revision) if args.release else args.release_dir
    configs = args.configs or (available_configs(args.data_dir, None) + list(RELEASE_FILES) if args.release else None)
    t0 = time.perf_counter()
    stats = build_repo(args.out, configs=configs, data_dir=args.data_dir, release_dir=release_dir,
                       seed=args.seed, s1_size=args.s1_size, all_folds=args.all_folds, for_upload=args.for_upload)
    for name, c in stats["configs"].items():
        sp = c["splits"].get(name, {})
        print(f"{name:14s} train {sp.get('train', 0):6d}  validation {sp.get('validation', 0):5d}  "
              f"test {sp.get('test', 0):5d}  filtered {c['filtered'] or '{}'}  "
              f"alpha(int) {c['summary']['alpha_interval']}")
    if args.release:
        print(f"release files from {release_dir.tag} (every record's metadata names it)", file=sys.stderr)
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
