"""Where the leaderboard app keeps its results: a local folder, mirrored to a Hub dataset repository when one is
given. Layout (the same locally and in the repository):

    BENCHMARK/submissions/KEY.json            one scored submission: name, owner, link, time, judge, package
                                              version, answers, scores, and the name of its submitted file
    BENCHMARK/submissions/KEY.SHA12.jsonl     the submitted file as received (named by its content: a replacement
                                              adds a file, never overwrites one)
    BENCHMARK/leaderboard.json                the ranking after the last change (derived; rebuilt at start)
    submission_log/DAY/USER.json              who submitted what on a day (UTC), for the per-user daily limit

KEY is the slug of the name as first submitted and the digest of the name as compared (`data.name_key`).

A change is staged as complete files first. With a repository it is uploaded as one commit on top of the commit
this copy was synced to (`parent_commit`): if the upload fails nothing is committed and the local folder is left
as it was; if another writer committed first (HTTP 412), the copy is re-synced and `StoreConflict` says so, for
the caller to decide again. Local files are then written one by one atomically (`orca_io.files`: fsync,
rename, fsync the folder), the record last.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import tempfile
from pathlib import Path

from orca_io.files import write_bytes_atomic
from orca_io.schema import MAX_DEPTH, too_deep

from .data import name_key, slugify

# what the app needs of a record to rank it; a record without them is listed as unreadable
RECORD_FIELDS = {"model_name": str, "link": str, "submitted_at": str, "judge": dict, "question_ids": list,
                 "answers": dict, "scores": dict}
SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")  # as submitted_file_name writes them

class StoreError(RuntimeError):
    """A change that could not be saved; nothing of it was kept."""


class StoreConflict(StoreError):
    """Another writer committed to the repository first; nothing was kept and the local copy is re-synced."""


def key_digest(model_name: str) -> str:
    return hashlib.sha256(name_key(model_name).encode("utf-8")).hexdigest()[:10]


def submission_key(model_name: str) -> str:
    """The file name of a new entry's record: readable, ending in the digest of the name as compared (names that
    slugify alike stay apart; names that are one entry share the digest)."""
    return f"{slugify(model_name)}-{key_digest(model_name)}"


def submitted_file_name(key: str, content: bytes) -> str:
    return f"{key}.{hashlib.sha256(content).hexdigest()[:12]}.jsonl"


def read_json_file(path: Path):
    """A stored JSON file (a record, a submission log); ValueError saying why it cannot be read."""
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except RecursionError:  # json's own guard, at about 1,000 levels
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError, or an integer of over 4,300 digits
        raise ValueError(f"not a UTF-8 JSON file ({str(err)[:200]})") from None
    if too_deep(value):
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def read_record(path: Path) -> dict:
    """One stored record, checked in full (a stored file is untrusted input: a hand edit, a torn write, another
    version's record); ValueError saying what is wrong with it."""
    record = read_json_file(path)
    problem = record_problem(record)
    if problem:
        raise ValueError(problem)
    return record


def _numbers(values, n: int) -> bool:
    return isinstance(values, list) and len(values) == n and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def record_problem(record) -> str | None:
    """What keeps a stored record from being ranked (None: nothing): every field the app reads, with its type,
    and scores that match the record's questions."""
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    for field, kind in RECORD_FIELDS.items():
        if not isinstance(record.get(field), kind):
            return f"field {field!r} missing or not a {kind.__name__}"
    if not record["model_name"].strip():
        return "field 'model_name' is empty"
    if not isinstance(record.get("owner"), str | None):
        return f"field 'owner' must be a Hub username or null, got {type(record['owner']).__name__}"
    file = record.get("submission_file")
    if file is not None and not (isinstance(file, str) and SAFE_FILE_NAME.fullmatch(file)):
        return "field 'submission_file' is not a file name of this store"
    ids = record["question_ids"]
    if not all(isinstance(q, str) for q in ids):
        return "field 'question_ids' must list strings"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in record["answers"].items()):
        return "field 'answers' must map question ids to strings"
    scores, n = record["scores"], len(ids)
    if not _numbers(scores.get("means"), n):
        return f"field 'scores': 'means' must list {n} finite numbers (one per question)"
    if scores.get("variances") is not None and not _numbers(scores["variances"], n):
        return f"field 'scores': 'variances' must be null or list {n} finite numbers"
    answered = scores.get("answered")
    if not (isinstance(answered, list) and len(answered) == n and all(isinstance(a, bool) for a in answered)):
        return f"field 'scores': 'answered' must list {n} true/false values"
    return None


def is_conflict(err: Exception) -> bool:
    """The Hub's answer to a commit whose parent_commit is no longer the head (HfHubHTTPError, 412; 409 too)."""
    return getattr(getattr(err, "response", None), "status_code", None) in (409, 412)


class ResultStore:
    def __init__(self, folder, repo_id: str | None = None, *, token: str | None = None, api=None, private: bool = True):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.repo_id = repo_id
        self.api = None
        self.head: str | None = None  # the repository commit the local copy was synced to
        if repo_id:
            if api is None:
                from huggingface_hub import HfApi

                api = HfApi(token=token)
            self.api = api
            self.api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            self.sync()

    def sync(self) -> None:
        """The repository is the truth: its files at its head replace the local copy's."""
        head = self.api.repo_info(self.repo_id, repo_type="dataset").sha
        self.api.snapshot_download(repo_id=self.repo_id, repo_type="dataset", revision=head, local_dir=self.folder)
        self.head = head

    def where(self) -> str:
        return f"Hub dataset {self.repo_id}" if self.repo_id else f"folder {self.folder}"

    def load(self, benchmark: str) -> tuple[list[dict], list[str]]:
        """Every readable record of a benchmark (oldest first; `_file` is its file name), and one line per
        record that cannot be read: `submissions/F.json: reason`. One bad file never hides the others."""
        records, unreadable = [], []
        for path in sorted((self.folder / benchmark / "submissions").glob("*.json")):
            try:
                records.append({**read_record(path), "_file": path.name})
            except (OSError, ValueError) as err:
                unreadable.append(f"submissions/{path.name}: {err}")
        return sorted(records, key=lambda r: (r["submitted_at"], r["model_name"])), unreadable

    def records(self, benchmark: str) -> list[dict]:
        return self.load(benchmark)[0]

    def find(self, benchmark: str, model_name: str) -> dict | None:
        """The entry's newest record (names compared by `name_key`), or None. An unreadable file where this
        name's record belongs raises StoreError: it is kept as it is, never overwritten."""
        for own in (self.folder / benchmark / "submissions").glob(f"*-{key_digest(model_name)}.json"):
            try:
                read_record(own)
            except (OSError, ValueError) as err:
                raise StoreError(f"the stored record {own.name} for this name cannot be read ({err}); it is kept "
                                 "as it is: the leaderboard's maintainers can repair or remove it") from None
        key = name_key(model_name)
        same = [r for r in self.records(benchmark) if name_key(r["model_name"]) == key]
        return same[-1] if same else None

    def read_log(self, rel: str) -> dict:
        """A user's submission log of a day (`access.log_path`): {"submissions": [...]}, empty when there is none.
        One that exists but cannot be read raises StoreError: the daily limit fails closed, since reading a torn or
        hand-edited log as empty would reset the user's count."""
        path = self.folder / rel
        if not path.exists():
            return {"submissions": []}
        try:
            log = read_json_file(path)
        except (OSError, ValueError) as err:
            problem = str(err)
        else:
            if isinstance(log, dict) and isinstance(log.get("submissions"), list):
                return log
            problem = 'expected {"submissions": [...]}'
        raise StoreError(f"the submission log {rel} cannot be read ({problem}), so today's count of this account "
                         "is unknown: its submissions are refused until the leaderboard's maintainers repair or "
                         "remove the file")

    def _inside(self, rel: str) -> Path:
        path = (self.folder / rel).resolve()
        if not path.is_relative_to(self.folder.resolve()):
            raise StoreError(f"refusing to write outside the store: {rel!r}")
        return path

    def save(self, files: dict[str, bytes], message: str) -> None:
        """Write `files` (path relative to the store -> content) all together, or none of them."""
        targets = {rel: self._inside(rel) for rel in files}
        if self.api is not None:
            self._commit(files, message)
        # the record last: a reader that finds it also finds its submitted file
        for rel in sorted(files, key=lambda r: r.endswith(".json") and "/submissions/" in r):
            write_bytes_atomic(targets[rel], files[rel])

    def _commit(self, files: dict[str, bytes], message: str) -> None:
        staging = Path(tempfile.mkdtemp(dir=self.folder, prefix=".staging-"))
        try:
            for rel, content in files.items():
                (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                (staging / rel).write_bytes(content)
            try:
                info = self.api.upload_folder(repo_id=self.repo_id, repo_type="dataset", folder_path=staging,
                                              commit_message=message, parent_commit=self.head)
            except Exception as err:  # network, permissions, a refused commit: nothing was committed
                if is_conflict(err):
                    self.sync()
                    raise StoreConflict(f"the Hub dataset {self.repo_id} changed since it was read") from err
                raise StoreError(f"could not save to the Hub dataset {self.repo_id}: {type(err).__name__}: {err}") from err
            self.head = info.oid
        finally:
            shutil.rmtree(staging, ignore_errors=True)
