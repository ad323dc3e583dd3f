"""The paper's released judges: a Hub id or a folder in the reference release's layout becomes an ORCA model folder.

    from eval_suite.models.release import load_judge
    model, tokenizer = load_judge("BUT-FIT/orca-olmo-2-1b-multinomial")   # any ORCA folder or Hub id works too

The reference release (github.com/BUTSpeechFIT/ORCA) publishes its judges as `model/config.yaml`, `model/lm/`
(a PEFT adapter or a full causal LM), `model/model_minus_lm.pt` (the head) and `tokenizer/`. Such a checkpoint is
downloaded with `snapshot_download` at one commit (the revision given, else what the default branch points to),
converted once by the converter (eval_suite.models.reference_checkpoint, checked against the release's computation)
and kept in a cache keyed by repository and commit: the next load of the same commit converts nothing. The
release's clamping threshold, calibrated by its authors on dev, becomes the converted model's clamping default.

The user's entry points live here; the work is done below, so that imports run one way (release -> loading ->
reference_checkpoint): eval_suite.models.reference_checkpoint finds, converts and caches a released checkpoint,
eval_suite.models.loading is the one loader (orca-score's too), which resolves a released judge through it first.
"""

from __future__ import annotations

from pathlib import Path

from eval_suite.models.loading import load_model
from eval_suite.models.reference_checkpoint import (
    PROVENANCE,
    RELEASED_JUDGES,
    ConversionError,
    ReleaseError,
    convert_source,
    converted_judge,
    reference_source,
    released_threshold,
    resolve_judge,
)
from orca_io.files import staged_dir

__all__ = ["PROVENANCE", "RELEASED_JUDGES", "ReleaseError", "convert_to_folder", "converted_judge", "load_judge",
           "resolve_judge"]

# (model, tokenizer) of any judge: a released reference checkpoint (Hub id or folder, converted once and cached) or
# an ORCA folder or Hub id. The one loader itself under the name the README documents, not a wrapper around it.
load_judge = load_model


def convert_to_folder(src: str, out: Path, *, revision: str | None = None, base_model: str | None = None,
                      dtype: str = "float32") -> None:
    """`push_to_hub.py convert-reference --src`: a folder or a Hub id (downloaded at `revision`) into `out`; problems
    raise ConversionError (the command reports it in one line)."""
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
