"""Loading an ORCA model for scoring: the one loader (orca-score, orca-eval, orca-leaderboard, the Space app),
what identifies the model that scored (its Hub commit or a hash of a folder's files) and the reference release's
field names for a prediction."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

# the release's field names live with its converter; imported here too, where scoring (scorer.py) has always found them
from eval_suite.models.reference_checkpoint import ReleaseError, reference_fields, resolve_judge

__all__ = ["UsageError", "folder_digest", "load_model", "reference_fields", "resolve_device",
           "resolve_revision"]


class UsageError(Exception):
    """A problem with the input or the options; reported as `error: ...` with exit code 2."""


def resolve_revision(model_id: str, revision: str | None) -> tuple[str | None, str]:
    """(revision to load, what to report). A Hub id is pinned to its commit, so the model and the tokenizer come
    from one repository state and the summary names it; a local folder is identified by its path and a hash of
    its files' contents (it has no commit; see `folder_digest`)."""
    folder = Path(model_id)
    if folder.is_dir():
        return revision, f"{folder.resolve()}#files-sha256:{folder_digest(folder)}"
    from huggingface_hub import ResolvedRevision
    from transformers.utils.hub import resolve_revision as hf_resolve

    resolved = hf_resolve(model_id, revision)
    if isinstance(resolved, ResolvedRevision):
        return resolved, resolved.resolved
    if resolved and re.fullmatch(r"[0-9a-f]{40}", resolved):
        return resolved, resolved
    return resolved, resolved or "unresolved (default branch)"


def folder_digest(folder: Path) -> str:
    """SHA-256 over the name and content of every file at the top of a model folder but its Markdown and hidden
    files: config, weights, tokenizer files and the code `trust_remote_code` runs all change scores. Names and
    sizes alone let `--resume` mix two models (weights overwritten with others of the same size). Computed once
    per run, by reading every byte (measured in docs/robustness.md)."""
    total = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.name.startswith(".") and path.suffix != ".md":
            with open(path, "rb") as fh:
                digest = hashlib.file_digest(fh, "sha256").hexdigest()
            total.update(json.dumps([path.name, digest]).encode())
    return total.hexdigest()[:16]


def resolve_device(device: str | None) -> str:
    """`auto`/None -> cuda when available, else cpu; anything else as given."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_model(name_or_path: str, *, revision: str | None = None, device=None, dtype=None):
    """The one loader of an ORCA model and its tokenizer (orca-score, orca-eval, orca-leaderboard): a folder or a
    Hub id, in eval mode, on `device` (None: where it loads, the CPU; "auto": the GPU when there is one) in `dtype`
    (None or "auto": as saved; a name such as "bfloat16" or a torch dtype). Weights are read from safetensors files
    only: a checkpoint with only pickle-based `.bin`/`.pt` weights is refused, never unpickled. Problems the user
    can fix (no such folder, Hub id or revision, not an ORCA model) raise `UsageError`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    try:  # a reference-release checkpoint (Hub id or folder) loads as its converted folder, converted once
        name_or_path, revision = resolve_judge(name_or_path, revision)
    except ReleaseError as err:
        raise UsageError(str(err)) from None

    kwargs = {}
    if dtype not in (None, "auto"):
        kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    try:
        model = AutoModel.from_pretrained(name_or_path, trust_remote_code=True, revision=revision, use_safetensors=True, **kwargs)
    except OSError as err:  # no such folder, Hub id or revision: transformers' message says which
        raise UsageError(f"--model {name_or_path}: {err}") from None
    if not hasattr(model, "predict"):
        raise UsageError(f"{name_or_path}: {type(model).__name__} is not an ORCA model (no predict method)")
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, revision=revision, trust_remote_code=True)
    if device is not None:
        model.to(resolve_device(device))
    return model.eval(), tokenizer
