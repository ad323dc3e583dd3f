"""The ORCA annotation release by its Hub id: `python -m dataset_builder build --release BUT-FIT/orca-audio-qa-annotations`.

Each file is fetched with `hf_hub_download(repo_type="dataset")`; the first fixes the commit and every later file
comes from that same commit, so one build never mixes two states of the repository. The files are then read by the
same reader as a folder given by hand (`orca_io.jsonl.read_records`), and every record says where it came from: its
`metadata` holds `release: REPO@COMMIT` (and a `source` left to the file name becomes `REPO@COMMIT/FILE`).
"""

from __future__ import annotations

import json
from pathlib import Path

RELEASE_REPO = "BUT-FIT/orca-audio-qa-annotations"


class HubRelease:
    """The release dataset on the Hub at one revision (None: its default branch, pinned at the first download)."""

    def __init__(self, repo_id: str = RELEASE_REPO, revision: str | None = None):
        self.repo_id, self.revision, self.commit = repo_id, revision, None

    def __repr__(self) -> str:
        return f"HubRelease({self.repo_id!r}, revision={self.commit or self.revision!r})"

    @property
    def tag(self) -> str:
        return f"{self.repo_id}@{self.commit}"

    def download(self, filename: str) -> Path:
        """The local path of `filename` at the pinned commit (downloaded, or from the cache when offline)."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        wanted = self.commit or self.revision
        where = f"{self.repo_id} (dataset) at {wanted or 'its default branch'}"
        try:
            path = Path(hf_hub_download(self.repo_id, filename, repo_type="dataset", revision=wanted))
        except RevisionNotFoundError:
            raise FileNotFoundError(f"{where}: no such revision; pass a branch, tag or commit the dataset has") from None
        except RepositoryNotFoundError:
            raise FileNotFoundError(f"{self.repo_id}: no such dataset repository on the Hub (or it is private: "
                                    "log in with `hf auth login`)") from None
        except LocalEntryNotFoundError:  # offline, or the Hub unreachable, and not in the cache
            raise FileNotFoundError(f"{filename} of {where} is not in the local Hugging Face cache and the Hub cannot "
                                    "be reached; download it once online (or pass release_dir=FOLDER holding it)") from None
        except EntryNotFoundError:
            raise FileNotFoundError(f"{filename} not found in {where}") from None
        # huggingface_hub keeps a file under snapshots/<commit>/<its path in the repository>
        snapshot = path.parents[len(Path(filename).parts) - 1]
        if self.commit is None:
            self.commit = snapshot.name
        return path

    def tag_record(self, record: dict, filename: str) -> dict:
        """The record with the release it came from in its metadata (and source, when that is the file name)."""
        meta = json.loads(record["metadata"]) if isinstance(record["metadata"], str) else dict(record["metadata"])
        meta["release"] = self.tag
        source = f"{self.tag}/{filename}" if record["source"] == filename else record["source"]
        return {**record, "source": source, "metadata": json.dumps(meta, ensure_ascii=False, sort_keys=True)}


def as_release(release, revision: str | None = None) -> HubRelease | None:
    """A HubRelease from a Hub id (or one given as it is); None for None."""
    if release is None or isinstance(release, HubRelease):
        return release
    return HubRelease(str(release), revision)
