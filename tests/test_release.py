"""The paper's released judges and annotations by their Hub ids, without the Hub: a Hugging Face cache laid out on
disk as huggingface_hub lays it out (models--ORG--NAME / datasets--ORG--NAME with blobs/, refs/main and
snapshots/<commit>/), holding tiny reference-layout checkpoints and annotation files written here; the real
commands run with HF_HUB_OFFLINE=1 and HF_HUB_CACHE pointing at it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_convert_reference import base_lm, make_reference_checkpoint, reference_math  # noqa: F401 (base_lm: a fixture)

import push_to_hub
from eval_suite.models.reference_checkpoint import REFERENCE_EDGE_RECORDS

REPO = Path(__file__).resolve().parents[1]
OLMO = "BUT-FIT/orca-olmo-2-1b-multinomial"  # a released judge: its calibrated threshold is 0.005
OLMO_COMMIT, REF_COMMIT, PLAIN_COMMIT, CORRUPT_COMMIT, DATA_COMMIT = (c * 40 for c in "abcde")
ANNOTATIONS = "BUT-FIT/orca-audio-qa-annotations"


def hub_repo(cache: Path, repo_id: str, commit: str, files: dict[str, bytes], repo_type: str = "model") -> Path:
    """`files` (path in the repository -> bytes) as huggingface_hub caches them: each in blobs/<sha256>, linked from
    snapshots/<commit>/<path>; refs/main names the commit. Returns the snapshot folder."""
    root = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return snapshot


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def confident_head(src: Path) -> None:
    """A head whose ratings come out near 5 with small variances for some inputs and not for others (seeded), so
    that the release's threshold decides which are clamped."""
    hidden = torch.load(src / "model" / "model_minus_lm.pt", weights_only=True)["linear.weight"].shape[1]
    torch.manual_seed(2)
    torch.save({"linear.weight": torch.randn(5, hidden), "linear.bias": torch.tensor([0.0, 0, 0, 0, 5])},
               src / "model" / "model_minus_lm.pt")


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory, base_lm, smollm2_tokenizer):  # noqa: F811
    """The cache: the released OLMo judge's id (LoRA, multinomial), another reference checkpoint (full LM), a
    repository in neither layout, one with a damaged head file, and the annotation dataset."""
    tmp = tmp_path_factory.mktemp("release")
    cache = tmp / "hub"
    olmo = make_reference_checkpoint(tmp / "olmo", base_lm, smollm2_tokenizer, "multinomial", lora=True)
    confident_head(olmo)
    hub_repo(cache, OLMO, OLMO_COMMIT, folder_files(olmo))
    ref = make_reference_checkpoint(tmp / "ref", base_lm, smollm2_tokenizer, "multinomial", lora=False)
    hub_repo(cache, "someone/orca-ref", REF_COMMIT, folder_files(ref))
    hub_repo(cache, "someone/not-a-judge", PLAIN_COMMIT, {"README.md": b"# a model card\n", "weights.txt": b"0\n"})
    corrupt = folder_files(ref)
    corrupt["model/model_minus_lm.pt"] = corrupt["model/model_minus_lm.pt"][:100]  # a download cut short
    hub_repo(cache, "someone/corrupt-head", CORRUPT_COMMIT, corrupt)
    hub_repo(cache, ANNOTATIONS, DATA_COMMIT, {name: release_lines(name) for name in ANNOTATION_FILES},
             repo_type="dataset")
    return {"cache": cache, "olmo": olmo, "ref": ref, "base": base_lm}


@pytest.fixture
def offline_cache(hub_cache, tmp_path, monkeypatch):
    """This process reads that cache, and converts into a fresh folder of its own."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache["cache"]))
    monkeypatch.setenv("ORCA_CACHE", str(tmp_path / "orca-cache"))
    return hub_cache


def release_clamp(rating: float, variance: float, threshold: float) -> float:
    """The release's clamp_orca_score (orca_score/clamp.py), written out: [0, 1] scale, strict inequalities."""
    if variance <= threshold:
        if rating < 0.125:
            return 0.0
        if rating > 0.875:
            return 1.0
    return rating


def write_edge_input(path: Path) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in REFERENCE_EDGE_RECORDS))
    return path


def orca_score(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eval_suite.scoring.cli", *args, "--quiet"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600, stdin=subprocess.DEVNULL)


def test_orca_score_takes_a_released_judge_by_id_converts_it_once_and_clamps_at_its_threshold(hub_cache, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub_cache["cache"]),
               ORCA_CACHE=str(tmp_path / "orca-cache"), HF_MODULES_CACHE=str(tmp_path / "modules"))
    inp = write_edge_input(tmp_path / "answers.jsonl")
    args = ["--model", OLMO, "--input", str(inp), "--output-format", "reference"]
    first = orca_score([*args, "--output", str(tmp_path / "a.jsonl"), "--summary", str(tmp_path / "a.json")], env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"converting {OLMO}@{OLMO_COMMIT}" in first.stderr

    converted = tmp_path / "orca-cache" / "converted" / OLMO.replace("/", "--") / OLMO_COMMIT
    config = json.loads((converted / "config.json").read_text())
    assert config["clamp"] is True and config["clamp_variance_threshold"] == pytest.approx(0.005 * 16)
    summary = json.loads((tmp_path / "a.json").read_text())
    assert summary["model"]["id"] == OLMO and summary["model"]["revision"] == OLMO_COMMIT
    assert summary["clamp"]["threshold"] == pytest.approx(0.08)

    lines = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == [r["id"] for r in REFERENCE_EDGE_RECORDS]
    want = reference_math(hub_cache["olmo"], hub_cache["base"], True, "multinomial", REFERENCE_EDGE_RECORDS)
    for line, w in zip(lines, want):
        assert line["rating_orca"] == pytest.approx(w["rating_orca"], abs=1e-5), line["id"]
        assert line["variance_orca"] == pytest.approx(w["variance_orca"], abs=1e-5), line["id"]
        assert line["rating_orca_clamped"] == pytest.approx(release_clamp(w["rating_orca"], w["variance_orca"], 0.005), abs=1e-5)
    clamped = [line["rating_orca_clamped"] in (0.0, 1.0) for line in lines]
    near_one_but_unsure = [w["rating_orca"] > 0.875 and w["variance_orca"] > 0.005 for w in want]
    assert any(clamped) and not all(clamped) and any(near_one_but_unsure)  # the threshold really decides

    # a second run, and the revision given explicitly: the same commit, so nothing is converted again
    stamps = {p.name: p.stat().st_mtime_ns for p in converted.iterdir()}
    second = orca_score([*args, "--revision", OLMO_COMMIT, "--output", str(tmp_path / "b.jsonl")], env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "converting" not in second.stderr
    assert {p.name: p.stat().st_mtime_ns for p in converted.iterdir()} == stamps
    assert (tmp_path / "b.jsonl").read_text() == (tmp_path / "a.jsonl").read_text()


def test_load_judge_is_the_one_line_for_library_users(offline_cache, capsys):
    from eval_suite.models.release import load_judge

    model, tokenizer = load_judge(OLMO)
    assert "converting" in capsys.readouterr().err
    model, tokenizer = load_judge(OLMO)  # from the cache
    assert "converting" not in capsys.readouterr().err
    got = model.predict(REFERENCE_EDGE_RECORDS, tokenizer)
    want = reference_math(offline_cache["olmo"], offline_cache["base"], True, "multinomial", REFERENCE_EDGE_RECORDS)
    for g, w in zip(got, want):
        assert (g["mean"] - 1) / 4 == pytest.approx(w["rating_orca"], abs=1e-5)
        assert g["score"] == pytest.approx(release_clamp(w["rating_orca"], w["variance_orca"], 0.005), abs=1e-5)


def test_convert_reference_takes_a_hub_id(offline_cache, tmp_path):
    from transformers import AutoTokenizer

    from modeling_orca import OrcaForCorrectnessDistribution

    out = tmp_path / "converted"
    argv = ["convert-reference", "--src", "someone/orca-ref", "--revision", REF_COMMIT, "--out", str(out)]
    assert push_to_hub.main(argv) == 0
    provenance = json.loads((out / "orca_release.json").read_text())
    assert provenance["source"] == f"someone/orca-ref@{REF_COMMIT}"
    model = OrcaForCorrectnessDistribution.from_pretrained(out)
    assert model.config.clamp is False  # not a released judge: no calibrated threshold to default to
    tokenizer = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    got = model.predict(REFERENCE_EDGE_RECORDS, tokenizer, max_batch_tokens=1024)
    want = reference_math(offline_cache["ref"], offline_cache["base"], False, "multinomial", REFERENCE_EDGE_RECORDS)
    for g, w in zip(got, want):
        assert (g["mean"] - 1) / 4 == pytest.approx(w["rating_orca"], abs=1e-5)
        assert g["variance"] / 16 == pytest.approx(w["variance_orca"], abs=1e-5)

    released = tmp_path / "released"
    assert push_to_hub.main(["convert-reference", "--src", OLMO, "--out", str(released)]) == 0
    config = json.loads((released / "config.json").read_text())
    assert config["clamp"] is True and config["clamp_variance_threshold"] == pytest.approx(0.08)


@pytest.mark.parametrize("model, revision, says", [
    ("someone/not-a-judge", None, [f"someone/not-a-judge@{PLAIN_COMMIT}", "neither an ORCA model (no config.json)",
                                   "model/config.yaml", "check the repository id"]),
    (OLMO, "f" * 40, [OLMO, f"revision {'f' * 40!r}", "not in the local Hugging Face cache", "--revision"]),
    ("someone/corrupt-head", None, [f"someone/corrupt-head@{CORRUPT_COMMIT}", "model_minus_lm.pt",
                                    "not a plain tensor state dict", "download it again"]),
])
def test_clear_errors_name_the_repository_the_file_and_what_to_do(model, revision, says, offline_cache, tmp_path, capsys):
    from eval_suite.scoring import cli

    argv = ["--model", model, "--input", str(write_edge_input(tmp_path / "in.jsonl")), "--output",
            str(tmp_path / "out.jsonl"), "--quiet"] + (["--revision", revision] if revision else [])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    for part in says:
        assert part in err, (part, err)
    converted = tmp_path / "orca-cache" / "converted"
    assert not converted.exists() or not [p for p in converted.rglob("config.json")]  # nothing half-converted kept


# ------------------------------------------------------------------------------------------------ annotations

ANNOTATION_FILES = ("s3-mmau-mmar-human-judge-ratings.jsonl", "s3-mmau-pro-human-judge-ratings.jsonl")


def release_lines(name: str) -> bytes:
    """20 questions x 3 answers in the release's record format (id, question, reference, candidate, rationale,
    ratings; transcription on some)."""
    lines = []
    for q in range(20):
        for a, candidate in enumerate(["a violin", "a cello", "I cannot tell"]):
            record = {"id": f"{name[:12]}-{q}-{a}", "question": f"Which instrument plays in clip {q}?",
                      "reference": "violin", "candidate": candidate, "rationale": f"Clip {q}: a solo violin.",
                      "ratings": [5, 5, 4] if a == 0 else [1, 2, 1]}
            if q % 4 == 0:
                record["transcription"] = "no speech"
            lines.append(json.dumps(record))
    return ("\n".join(lines) + "\n").encode()


def test_dataset_builder_builds_the_s3_configs_from_the_release_id(hub_cache, tmp_path):
    import datasets

    from dataset_builder import build_config

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub_cache["cache"]))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "dataset_builder", "build", "--out", str(out), "--release", ANNOTATIONS,
                           "--configs", "s3_mmau_mmar", "s3_mmau_pro"], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{ANNOTATIONS}@{DATA_COMMIT}" in proc.stderr

    snapshot = hub_cache["cache"] / f"datasets--{ANNOTATIONS.replace('/', '--')}" / "snapshots" / DATA_COMMIT
    for name, fname in (("s3_mmau_mmar", ANNOTATION_FILES[0]), ("s3_mmau_pro", ANNOTATION_FILES[1])):
        built = datasets.load_dataset(str(out), name)
        rows = [r for split in ("train", "validation", "test") for r in built[split]]
        by_hand = {r["id"]: r for r in build_config(name, release_dir=snapshot).records}  # the folder, read as today
        assert sorted(r["id"] for r in rows) == sorted(by_hand) and len(rows) == 60
        for row in rows:
            meta = json.loads(row["metadata"])
            assert meta.pop("release") == f"{ANNOTATIONS}@{DATA_COMMIT}"
            assert row["source"] == f"{ANNOTATIONS}@{DATA_COMMIT}/{fname}"
            want = by_hand[row["id"]]
            assert meta == json.loads(want["metadata"])
            assert {k: v for k, v in row.items() if k not in ("source", "metadata")} == \
                   {k: v for k, v in want.items() if k not in ("source", "metadata")}


def test_load_config_takes_the_release_id_and_names_a_missing_revision(offline_cache):
    from dataset_builder import load_config

    splits = load_config("s3_mmau_pro", release=ANNOTATIONS, release_revision=DATA_COMMIT)
    assert sum(len(splits[s]) for s in splits) == 60
    assert {json.loads(m)["release"] for s in splits for m in splits[s]["metadata"]} == {f"{ANNOTATIONS}@{DATA_COMMIT}"}
    with pytest.raises(FileNotFoundError, match=r"s3-mmau-pro-human-judge-ratings.jsonl of BUT-FIT/orca-audio-qa-annotations.*"
                                                r"not in the local Hugging Face cache"):
        load_config("s3_mmau_pro", release=ANNOTATIONS, release_revision="0" * 40)


def test_the_cache_folder_is_keyed_by_repository_and_commit(offline_cache, tmp_path):
    from eval_suite.models.release import converted_judge

    first = converted_judge(OLMO)
    assert first == tmp_path / "orca-cache" / "converted" / OLMO.replace("/", "--") / OLMO_COMMIT
    # a new commit on main is another cache entry; the old one stays as it was
    root = offline_cache["cache"] / f"models--{OLMO.replace('/', '--')}"
    shutil.copytree(root / "snapshots" / OLMO_COMMIT, root / "snapshots" / ("9" * 40), symlinks=True)
    (root / "refs" / "main").write_text("9" * 40)
    try:
        second = converted_judge(OLMO)
    finally:
        (root / "refs" / "main").write_text(OLMO_COMMIT)
        shutil.rmtree(root / "snapshots" / ("9" * 40))
    assert second == first.parent / ("9" * 40) and first.is_dir()


def test_training_reads_the_release_by_id_from_its_config(offline_cache):
    from training.config import load_run_config
    from training.data import load_stage_data

    cfg = load_run_config(None, ["--model.backbone", "tiny-llama", "--data.release", ANNOTATIONS,
                                 "--data.release_revision", DATA_COMMIT])
    splits = load_stage_data({"dataset": "s3_mmau_mmar"}, cfg)
    records = [r for split in splits.values() for r in split]
    assert len(records) == 60 and {r["source"] for r in records} == {f"{ANNOTATIONS}@{DATA_COMMIT}/{ANNOTATION_FILES[0]}"}
