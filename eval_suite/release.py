"""The paper's released judges: a Hub id or a folder in the reference release's layout becomes an ORCA model folder.

    from eval_suite.release import load_judge
    model, tokenizer = load_judge("BUT-FIT/orca-olmo-2-1b-multinomial")   # any ORCA folder or Hub id works too

The reference release (github.com/BUTSpeechFIT/ORCA) publishes its judges as `model/config.yaml`, `model/lm/`
(a PEFT adapter or a full causal LM), `model/model_minus_lm.pt` (the head) and `tokenizer/`. Such a checkpoint is
downloaded with `snapshot_download` at one commit (the revision given, else what the default branch points to),
converted once by the converter (eval_suite.reference_checkpoint, checked against the release's computation)
and kept in a cache keyed by repository and commit: the next load of the same commit converts nothing. The
release's clamping threshold, calibrated by its authors on dev, becomes the converted model's clamping default.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from dataset_builder.files import staged_dir, write_json_atomic

# Variance thresholds of the release's variance-gated clamping, on its [0, 1] score scale, calibrated on dev by the
# authors (BUTSpeechFIT/ORCA, download_and_infer.py, MODEL_VAR_THRESHOLDS). The Hub repositories themselves do not
# hold them.
RELEASED_JUDGES = {
    "BUT-FIT/orca-gemma-3-4b-it-multinomial": 0.05,
    "BUT-FIT/orca-llama-3.2-3b-it-multinomial": 0.05,
    "BUT-FIT/orca-olmo-2-1b-multinomial": 0.005,
}
REFERENCE_FILES = ("model/config.yaml", "model/model_minus_lm.pt", "model/lm", "tokenizer")
PROVENANCE = "orca_release.json"  # written beside the converted weights: where they came from


class ReleaseError(Exception):
    """A released checkpoint that cannot be found or converted; the message says which repository, which file and
    what to do."""


def cache_root() -> Path:
    """Where converted judges are kept: orca's one cache folder ($ORCA_CACHE, default ~/.cache/orca), beside the
    converted backbones."""
    from eval_suite.backbones import cache_dir

    return cache_dir()


def is_reference_layout(folder: Path) -> bool:
    return (Path(folder) / "model" / "config.yaml").is_file()


def _hub_cache_has(repo_id: str) -> bool:
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return (Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")).is_dir()


def hub_snapshot(repo_id: str, revision: str | None, allow_patterns=None) -> Path | None:
    """The snapshot folder of `repo_id` at `revision` (its name is the commit), with the files matching
    `allow_patterns` (all when None) downloaded. None when no such repository is known (on the Hub, or in the cache
    when offline): the caller's usual loader then reports it in its own words."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    wanted = revision or "the default branch"
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=allow_patterns))
    except RevisionNotFoundError:
        raise ReleaseError(f"{repo_id}: no revision {wanted!r} on the Hub; pass --revision with a branch, tag or "
                           "commit hash the repository has") from None
    except (RepositoryNotFoundError, HFValidationError):
        return None
    except LocalEntryNotFoundError:  # offline, or the Hub unreachable
        if not _hub_cache_has(repo_id):
            return None
        raise ReleaseError(f"{repo_id}: revision {wanted!r} is not in the local Hugging Face cache and the Hub cannot "
                           "be reached (HF_HUB_OFFLINE or no network); download it once online, or pass --revision "
                           "with a commit the cache holds") from None


def reference_source(name_or_path: str, revision: str | None = None) -> tuple[Path, str, str] | None:
    """(checkpoint folder, what it is: `repo@commit` or the folder, cache key) when `name_or_path` is a
    reference-release checkpoint (a folder, or a Hub id: downloaded whole at one commit); None when it is something
    else for the usual loader (an ORCA folder or Hub id, or a name that is neither, which that loader reports)."""
    folder = Path(name_or_path)
    if folder.is_dir():
        if not is_reference_layout(folder):
            return None
        return folder, str(folder.resolve()), f"local/{_folder_digest(folder)}"
    if name_or_path.count("/") != 1 or name_or_path.startswith((".", "/")):
        return None
    revision = getattr(revision, "resolved", None) or revision  # a ResolvedRevision: its commit
    heads = hub_snapshot(name_or_path, revision, allow_patterns=["config.json", "model/config.yaml"])
    if heads is None:
        return None
    if not is_reference_layout(heads):
        if (heads / "config.json").is_file():
            return None  # an ORCA (transformers) repository
        raise ReleaseError(f"{name_or_path}@{heads.name}: neither an ORCA model (no config.json) nor a reference-release "
                           "checkpoint (no model/config.yaml): check the repository id and --revision")
    commit = heads.name
    snapshot = hub_snapshot(name_or_path, commit, allow_patterns=["model/*", "tokenizer/*"])  # at the heads' commit
    for need in REFERENCE_FILES:
        if not (snapshot / need).exists():
            raise ReleaseError(f"{name_or_path}@{commit}: {need} not found in {snapshot}; a reference checkpoint holds "
                               f"{', '.join(REFERENCE_FILES)} (download it again with `hf download {name_or_path} "
                               f"--revision {commit}`)")
    return snapshot, f"{name_or_path}@{commit}", f"{name_or_path.replace('/', '--')}/{commit}"


def _folder_digest(folder: Path) -> str:
    """A local checkpoint has no commit: it is identified by its path and its files' names, sizes and times."""
    files = sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256(json.dumps([str(folder.resolve()), files]).encode()).hexdigest()[:20]


def released_threshold(name_or_path: str) -> float | None:
    """The release's calibrated variance threshold ([0, 1] scale) of a released judge; None for any other."""
    return RELEASED_JUDGES.get(name_or_path)


def set_clamp_default(folder: Path, threshold01: float) -> None:
    """Turn clamping on in a converted folder's config.json with the release's threshold. The release compares it
    with the variance on its [0, 1] scale, `predict` with the variance on the rating scale: times (max - min)^2."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    span = config.get("rating_max", 5) - config.get("rating_min", 1)
    config.update(clamp=True, clamp_variance_threshold=threshold01 * span**2)
    write_json_atomic(path, config, indent=2)


def convert_source(src: Path, described: str, threshold01: float | None, out: Path, *, base_model: str | None = None,
                   dtype: str = "float32") -> None:
    """Run the converter on a reference checkpoint folder into the empty folder `out`, then set the clamping
    default and write where it came from. Conversion problems come back as ReleaseError naming the source."""
    from eval_suite.reference_checkpoint import ConversionError, convert_reference

    try:
        convert_reference(src, base_model, out, dtype)
    except ConversionError as err:
        repo, _, commit = described.partition("@")
        again = f"hf download {repo} --revision {commit} --force-download" if commit else "copy it again"
        raise ReleaseError(f"{described}: {err}. A damaged file: download it again (`{again}`) and retry; a LoRA base "
                           f"model that cannot be loaded: `push_to_hub.py convert-reference --src {repo} --base-model "
                           "HUB_ID --out DIR`, then score DIR") from None
    if threshold01 is not None:
        set_clamp_default(out, threshold01)
    # a local folder's path stays out: a converted folder may be published, and paths describe only this machine
    source = "a local folder" if Path(described).is_absolute() else described
    base = None if base_model is None or Path(base_model).exists() else base_model
    write_json_atomic(out / PROVENANCE, {"source": source, "release_clamp_threshold": threshold01,
                                         "base_model": base, "dtype": dtype})


def converted_judge(name_or_path: str, revision: str | None = None) -> Path | None:
    """The converted folder of a reference-release checkpoint (Hub id or folder), converting it on first use; None
    when `name_or_path` is not one (load it as it is)."""
    from filelock import FileLock

    found = reference_source(name_or_path, revision)
    if found is None:
        return None
    src, described, key = found
    target = cache_root() / "converted" / key
    if (target / PROVENANCE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):  # two processes converting the same commit: the second waits, then reuses
        if not (target / PROVENANCE).is_file():
            print(f"converting {described} into {target} (once)", file=sys.stderr)
            with staged_dir(target) as tmp:
                convert_source(src, described, released_threshold(name_or_path), tmp)
    return target


def resolve_judge(name_or_path: str, revision: str | None = None) -> tuple[str, str | None]:
    """(what to load, revision to load it at): a reference-release checkpoint's converted folder (no revision), else
    the arguments unchanged. The loader of every command calls this first."""
    converted = converted_judge(str(name_or_path), revision)
    return (str(converted), None) if converted is not None else (name_or_path, revision)


def load_judge(name_or_path: str, *, revision: str | None = None, device=None, dtype=None):
    """(model, tokenizer) of any judge: a released reference checkpoint (Hub id or folder, converted once and cached)
    or an ORCA folder or Hub id; the same loader as orca-score's."""
    from eval_suite.loading import load_model

    return load_model(name_or_path, revision=revision, device=device, dtype=dtype)


def convert_to_folder(src: str, out: Path, *, revision: str | None = None, base_model: str | None = None,
                      dtype: str = "float32") -> None:
    """`push_to_hub.py convert-reference --src`: a folder or a Hub id (downloaded at `revision`) into `out`; problems
    raise ConversionError (the command reports it in one line)."""
    from eval_suite.reference_checkpoint import ConversionError

    try:
        out = Path(out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ReleaseError(f"{out} already exists and is not empty; remove it or choose another folder")
        # a folder goes to the converter as it is (its checks name what is missing)
        found = (Path(src), str(Path(src).resolve())) if Path(src).is_dir() else reference_source(src, revision)
        if found is None:
            raise ReleaseError(f"--src {src}: no such folder, and no reference-release checkpoint of that id on the "
                               "Hub (or in the cache when offline); an ORCA model needs no conversion")
        with staged_dir(out) as tmp:  # the threshold is in place before the folder is
            convert_source(found[0], found[1], released_threshold(src), tmp, base_model=base_model, dtype=dtype)
    except ReleaseError as err:
        raise ConversionError(str(err)) from None
    print(f"wrote {out}" + (f" (clamping on by default: the release's threshold {released_threshold(src)})"
                            if released_threshold(src) is not None else ""))
