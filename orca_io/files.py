"""The one way orca puts a file or a folder in place: written beside the target, forced to disk, renamed (and
the one file hash).

A crash (kill -9, power loss) at any point leaves either the old content or the new one, never a torn file and
never neither: `replace_dir` swaps folders by two renames and `recover_dir` (called by `replace_dir` itself and
by whoever reads the folder at start) finishes or undoes a swap that was interrupted between them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(folder: Path) -> None:
    """Make a rename inside `folder` durable (POSIX: the directory entry lives in the folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not possible on every platform (Windows); the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def open_atomic(path: Path, mode: str = "wb", **open_kwargs) -> Iterator:
    """A file open for writing beside `path`; when the block succeeds it is flushed, fsynced and renamed over
    `path` (then the folder fsynced); when it fails it is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, fsync it, rename it over `path`, fsync the folder."""
    with open_atomic(path, "wb") as fh:
        fh.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data, indent: int | None = 1) -> None:
    write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False, default=str) + "\n")


def _old_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.old")


def recover_dir(target: Path, keep: Path | None = None) -> None:
    """Finish or undo a `replace_dir` that a crash interrupted: with no `target` but its old copy, the old copy
    comes back (the new one never got in place); with both, the old copy goes. Leftover staging folders go too,
    except `keep` (the one being staged now)."""
    target = Path(target)
    old = _old_name(target)
    if old.exists():
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, target)
            fsync_dir(target.parent)
    if target.parent.is_dir():
        for leftover in target.parent.glob(f".{target.name}.staged-*"):
            if keep is None or leftover.resolve() != Path(keep).resolve():
                shutil.rmtree(leftover, ignore_errors=True)


def replace_dir(staged: Path, target: Path) -> None:
    """Put the complete folder `staged` in place of `target`: target -> old, staged -> target, old removed.
    Both renames stay on one filesystem (stage with `staged_dir`, beside the target)."""
    staged, target = Path(staged), Path(target)
    old = _old_name(target)
    recover_dir(target, keep=staged)
    if target.exists():
        os.replace(target, old)
    os.replace(staged, target)
    fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """A fresh folder beside `target` to build in; it replaces `target` only if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.staged-"))
    try:
        yield tmp
        replace_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_dir_atomic(target: Path, write: Callable[[Path], None]) -> None:
    """`write(folder)` into a staged folder, then swap it in place of `target`."""
    with staged_dir(target) as tmp:
        write(tmp)
