"""`python -m dataset_builder fetch`: the quickstart's public inputs from their public homes, pinned and checked.

Each file comes from its GitHub repository at a fixed commit (raw.githubusercontent.com/OWNER/REPO/COMMIT/PATH) and
must have the SHA-256 and size recorded here, taken from the repository's own file at that commit; a file that
differs is refused (never written) and named. It lands in the folder the dataset builder reads ($ORCA_DATA_DIR),
laid out as `dataset_builder.configs` expects. A file already there with the right hash is not downloaded again;
one with another hash is left alone and reported, unless `--force` replaces it with the pinned file.
"""

from __future__ import annotations

import hashlib
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from orca_io.files import sha256_of, write_bytes_atomic

BASE_URL = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class PublicFile:
    source: str     # the builder's name of the source (dataset_builder.configs.SOURCES)
    dest: str       # where the builder reads it, under the data folder
    repo: str       # OWNER/NAME on GitHub
    commit: str
    path: str       # in the repository
    size: int
    sha256: str

    def url(self, base_url: str = BASE_URL) -> str:
        return f"{base_url.rstrip('/')}/{self.repo}/{self.commit}/{self.path}"


_MMAU = ("Sakshi113/MMAU", "110127f54c0dfba3faa5ec9feee4a7e4148679c5")
_MMAR = ("ddlBoJack/MMAR", "3bce090a967db576c8ad433b290a8da582d6d2a0")
_LALM = ("nguyentuc/Steering_ALMs", "801236d0286cdadda0e9115e9bd4eb8175e598af")
_EVOUNA = ("wangcunxiang/QA-Eval", "90007d39d4ef0720984f80d56a586c66d6241e70")
_SAS = ("e184633/semantic-answer-similarity", "8395a87a851988ab9cd241500310d1931334e406")

PUBLIC_FILES = (
    PublicFile("mmau_test_mini", "mmau_test_mini/mmau-test-mini.json", *_MMAU, "mmau-test-mini.json", 590823,
               "9f18fda99f8dbc2bc5ecd6323fb5063309f54969810b5c6f1caeb3b8d904cf1c"),
    PublicFile("mmar", "mmar/MMAR-meta.jsonl", *_MMAR, "MMAR-meta.jsonl", 2700936,
               "1c9a343e7bebf1037482b935c54eacd43cc63df7b2c668724b5560caf1f84fad"),
    PublicFile("lalm_outputs_mmau", "lalm_outputs_mmau/qwen2_audio_7b_instruct_results.json", *_LALM,
               "qwen2_audio_7b_instruct_results.json", 683726,
               "08ac9430d23af898d315a64db6b5fb7dc96dbfd3ba365cc8909dbf9935a04ef1"),
    PublicFile("lalm_outputs_mmau", "lalm_outputs_mmau/qwen_audio_chat_results.json", *_LALM,
               "qwen_audio_chat_results.json", 723441,
               "c67e05af9544129054bc50f1e152fda2e97dae9471f47e471938bed2ee70a878"),
    PublicFile("evouna_nq", "evouna_nq/NQ.json", *_EVOUNA, "EVOUNA/NQ.json", 3638758,
               "617c7fd95fe4177f39e2304c943cc0abbdbf539bc8a4fb61aeaef255bed503a1"),
    PublicFile("sas", "sas/SQuAD_SAS.csv", *_SAS, "data/data/SQuAD_SAS.csv", 48874,
               "cef4bc0f273ad7d125c8acf4dad0a755d60d4f4c5db09d1379058de62bef97d6"),
    PublicFile("sas", "sas/GermanQuAD_SAS.csv", *_SAS, "data/data/GermanQuAD_SAS.csv", 61289,
               "fad168d37476e267b8b0f714b21d858bd2c997d541d066becdf6aefbfa5d639e"),
    PublicFile("sas", "sas/NQ-open_SAS.csv", *_SAS, "data/data/NQ-open_SAS.csv", 117794,
               "e62d3cb175513a41ed97bcf5fd59214c5024ce31f50451f0d75a65b70dcc2439"),
    PublicFile("sas", "sas/nq_open_filtered.csv", *_SAS, "data/data/nq/nq_open_filtered.csv", 168712,
               "11d8098c903c0230ee96b4905df2d4fe552fd8248efcaeb1f003c9b3e4d9e276"),
)


def download(url: str, limit: int, timeout: float = 60) -> bytes:
    """The body at `url` (https, http or file), refused once it is longer than `limit` bytes."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read(limit + 1)
    if len(body) > limit:
        raise ValueError(f"longer than the pinned file ({limit} bytes)")
    return body


def fetch_one(item: PublicFile, data_dir: Path, base_url: str, force: bool) -> tuple[bool, str]:
    """(verified, what happened) for one file."""
    target = data_dir / item.dest
    if target.exists():
        have = sha256_of(target)
        if have == item.sha256:
            return True, "ok, already there"
        if not force:
            return False, (f"already there with sha256 {have}, not the pinned {item.sha256}: left as it is (pass "
                           "--force to replace it with the pinned file, or fetch into another folder)")
    url = item.url(base_url)
    try:
        body = download(url, item.size)
    except ValueError as err:
        return False, f"refused: {url} is {err}, sha256 {item.sha256}; nothing written"
    except OSError as err:  # urllib's URLError and HTTPError
        return False, f"could not download {url}: {err}"
    got = hashlib.sha256(body).hexdigest()
    if got != item.sha256 or len(body) != item.size:
        return False, (f"refused: {url} has sha256 {got} ({len(body)} bytes), the pinned file has {item.sha256} "
                       f"({item.size} bytes); nothing written")
    write_bytes_atomic(target, body)
    return True, f"ok, downloaded from {item.repo}@{item.commit[:8]}"


def fetch(data_dir, *, base_url: str = BASE_URL, sources=None, force: bool = False,
          files=PUBLIC_FILES) -> dict[str, tuple[bool, str]]:
    """Fetch and verify every file of `sources` (default: all) into `data_dir`; dest -> (verified, message)."""
    data_dir = Path(data_dir)
    known = {f.source for f in files}
    unknown = set(sources or ()) - known
    if unknown:
        raise ValueError(f"unknown source(s) {', '.join(sorted(unknown))}; choose from {', '.join(sorted(known))}")
    chosen = [f for f in files if not sources or f.source in sources]
    return {f.dest: fetch_one(f, data_dir, base_url, force) for f in chosen}


def main(data_dir, *, base_url: str = BASE_URL, sources=None, force: bool = False) -> int:
    """The command: one line per file; exit code 2 when any file is not verified."""
    results = fetch(data_dir, base_url=base_url, sources=sources, force=force)
    for dest, (_, message) in results.items():
        print(f"{dest}: {message}")
    bad = [dest for dest, (ok, _) in results.items() if not ok]
    if bad:
        print(f"error: {len(bad)} of {len(results)} file(s) not verified: {', '.join(bad)}", file=sys.stderr)
        return 2
    print(f"{len(results)} file(s) verified in {data_dir}", file=sys.stderr)
    return 0
