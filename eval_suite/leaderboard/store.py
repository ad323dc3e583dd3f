"""Where the leaderboard app keeps its results: a local folder, mirrored to a Hub dataset repository when one is
given. Layout (the same locally and in the repository):

    BENCHMARK/submissions/KEY.json    one scored submission: name, link, time, judge, package version, answers, scores
    BENCHMARK/submissions/KEY.jsonl   the submitted file as received
    BENCHMARK/leaderboard.json        the ranking after the last change (derived; rebuilt from the records at start)

A change is staged as complete files first. With a repository it is uploaded as one commit (`upload_folder` of the
staged folder): if the upload fails nothing is committed and the local folder is left as it was. The files then
replace the local ones (`os.replace`, atomic per file; the record is the last one a reader needs).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .data import slugify


class StoreError(RuntimeError):
    """A change that could not be saved; nothing of it was kept."""


def submission_key(model_name: str) -> str:
    """The file name of a model's submission: readable, and distinct for names that slugify alike."""
    return f"{slugify(model_name)}-{hashlib.sha256(model_name.encode('utf-8')).hexdigest()[:10]}"


class ResultStore:
    def __init__(self, folder, repo_id: str | None = None, *, token: str | None = None, api=None, private: bool = True):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.repo_id = repo_id
        self.api = None
        if repo_id:
            if api is None:
                from huggingface_hub import HfApi

                api = HfApi(token=token)
            self.api = api
            # the repository is the truth: its files replace the local copy's
            self.api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            self.api.snapshot_download(repo_id=repo_id, repo_type="dataset", local_dir=self.folder)

    def where(self) -> str:
        return f"Hub dataset {self.repo_id}" if self.repo_id else f"folder {self.folder}"

    def records(self, benchmark: str) -> list[dict]:
        """Every stored submission of a benchmark, oldest first."""
        folder = self.folder / benchmark / "submissions"
        records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
        return sorted(records, key=lambda r: (r["submitted_at"], r["model_name"]))

    def find(self, benchmark: str, model_name: str) -> dict | None:
        path = self.folder / benchmark / "submissions" / f"{submission_key(model_name)}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def save(self, files: dict[str, bytes], message: str) -> None:
        """Write `files` (path relative to the store -> content) all together, or none of them."""
        staging = Path(tempfile.mkdtemp(dir=self.folder, prefix=".staging-"))  # same filesystem: os.replace is atomic
        try:
            for rel, content in files.items():
                path = (staging / rel).resolve()
                if not path.is_relative_to(staging.resolve()):
                    raise StoreError(f"refusing to write outside the store: {rel!r}")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
            if self.api is not None:
                try:
                    self.api.upload_folder(repo_id=self.repo_id, repo_type="dataset", folder_path=staging,
                                           commit_message=message)
                except Exception as err:  # network, permissions, a refused commit: nothing was committed
                    raise StoreError(f"could not save to the Hub dataset {self.repo_id}: {type(err).__name__}: {err}") from err
            # the record last: a reader that finds it also finds the submission file
            for rel in sorted(files, key=lambda r: r.endswith(".json") and "/submissions/" in r):
                target = self.folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / rel, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
