"""`python -m dataset_builder fetch`: every public file pinned by commit and checked by SHA-256, tried on local copies
laid out as their public homes (raw.githubusercontent.com/OWNER/REPO/COMMIT/PATH), served over HTTP on 127.0.0.1
and as file:// URLs; the download code is the real one."""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import pytest

from dataset_builder import fetch
from dataset_builder.fetch import PUBLIC_FILES, PublicFile

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/'mirror'; yields (base URL, mirror folder, paths requested)."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(mirror)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", mirror, requested
    httpd.shutdown()
    httpd.server_close()


def pinned(source: str, dest: str, path: str, data: bytes) -> PublicFile:
    return PublicFile(source, dest, "owner/repo", "c" * 40, path, len(data), hashlib.sha256(data).hexdigest())


def serve(mirror: Path, item: PublicFile, data: bytes) -> None:
    target = mirror / item.repo / item.commit / item.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def test_a_pinned_file_is_fetched_and_a_changed_one_refused(server, tmp_path):
    base, mirror, requested = server
    good, changed = b'[{"q": "which instrument?"}]\n', b"answer1,answer2,label\nviolin,fiddle,2\n"
    items = [pinned("mmau_test_mini", "mmau/q.json", "data/q.json", good),
             pinned("sas", "sas/pairs.csv", "data/pairs.csv", changed)]
    serve(mirror, items[0], good)
    serve(mirror, items[1], changed.replace(b"2\n", b"0\n"))  # one byte differs from the pinned file
    out = tmp_path / "data"
    results = fetch.fetch(out, base_url=base, files=items)
    assert (out / "mmau/q.json").read_bytes() == good and results["mmau/q.json"][0]
    ok, message = results["sas/pairs.csv"]
    assert not ok and not (out / "sas/pairs.csv").exists()
    assert f"{base}/owner/repo/{'c' * 40}/data/pairs.csv" in message and items[1].sha256 in message
    assert hashlib.sha256(changed.replace(b"2\n", b"0\n")).hexdigest() in message

    # a second run downloads nothing that is already there and verified
    requested.clear()
    results = fetch.fetch(out, base_url=base, files=items[:1])
    assert results["mmau/q.json"] == (True, "ok, already there") and requested == []


def test_a_file_already_there_with_another_hash_is_kept_unless_forced(server, tmp_path):
    base, mirror, _ = server
    data = b"question,answer\nwho,me\n"
    item = pinned("sas", "sas/x.csv", "x.csv", data)
    serve(mirror, item, data)
    mine = tmp_path / "data" / "sas" / "x.csv"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"my own edit\n")
    ok, message = fetch.fetch(tmp_path / "data", base_url=base, files=[item])["sas/x.csv"]
    assert not ok and "--force" in message and mine.read_bytes() == b"my own edit\n"
    assert fetch.fetch(tmp_path / "data", base_url=base, files=[item], force=True)["sas/x.csv"][0]
    assert mine.read_bytes() == data


def test_a_longer_file_or_no_file_is_refused(server, tmp_path):
    base, mirror, _ = server
    data = b"0123456789\n"
    longer, missing = pinned("sas", "a.txt", "a.txt", data), pinned("sas", "b.txt", "b.txt", data)
    serve(mirror, longer, data * 1000)
    results = fetch.fetch(tmp_path / "data", base_url=base, files=[longer, missing])
    assert "longer than the pinned file" in results["a.txt"][1] and "404" in results["b.txt"][1]
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.txt"))


def test_every_public_source_is_pinned_by_a_full_commit_and_named_once():
    assert {f.source for f in PUBLIC_FILES} == {"mmau_test_mini", "mmar", "lalm_outputs_mmau", "evouna_nq", "sas"}
    assert all(len(f.commit) == 40 and len(f.sha256) == 64 and f.size > 0 for f in PUBLIC_FILES)
    assert len({f.dest for f in PUBLIC_FILES}) == len(PUBLIC_FILES)


@pytest.mark.real
def test_fetch_command_on_the_shared_copies_laid_out_as_their_public_homes(shared_data, tmp_path):
    """The real manifest against ../shared/data served as file:// URLs. Seven files there are byte for byte the
    public ones; two are not (EVOUNA NQ.json is a subset of the public file, nq_open_filtered.csv has CRLF line
    ends where the repository has LF) and must be refused."""
    mirror = tmp_path / "mirror"
    for item in PUBLIC_FILES:
        target = mirror / item.repo / item.commit / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_data / item.dest, target)
    out = tmp_path / "data"
    env = dict(os.environ, ORCA_DATA_DIR=str(out))
    proc = subprocess.run([sys.executable, "-m", "dataset_builder", "fetch", "--base-url", mirror.as_uri()],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    refused = {"evouna_nq/NQ.json", "sas/nq_open_filtered.csv"}
    assert f"2 of {len(PUBLIC_FILES)} file(s) not verified" in proc.stderr
    for item in PUBLIC_FILES:
        line = next(x for x in proc.stdout.splitlines() if x.startswith(item.dest + ":"))
        if item.dest in refused:
            assert "refused" in line and item.sha256 in line and not (out / item.dest).exists()
        else:
            assert "ok, downloaded" in line
            assert (out / item.dest).read_bytes() == (shared_data / item.dest).read_bytes()
