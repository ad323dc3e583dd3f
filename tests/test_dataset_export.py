import hashlib
import json

import datasets
import pytest
from huggingface_hub import DatasetCard

from dataset_builder import CONFIGS, load_config
from dataset_builder.__main__ import main
from dataset_builder.export import build_repo, size_category
from dataset_builder.fixtures import write_public_fixture, write_release_dir
from dataset_builder.hf_builder import OrcaDataset
from orca_io.schema import FEATURES

S1 = 300


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("orca")
    return write_public_fixture(root / "data"), write_release_dir(root / "release")


@pytest.fixture(scope="module")
def repo(dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("repo")
    stats = build_repo(out, data_dir=dirs[0], release_dir=dirs[1], s1_size=S1, progress=False)
    return out, stats


def _hashes(path):
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_load_dataset_round_trip(repo, dirs, name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    out, _ = repo
    expected = load_config(name, data_dir=dirs[0], release_dir=dirs[1], s1_size=S1)
    for split in ("train", "validation", "test"):
        ds = datasets.load_dataset(str(out), name, split=split, cache_dir=str(tmp_path))
        assert ds.features == FEATURES
        assert ds.to_list() == expected[split].to_list()
        assert len(ds) > 0


def test_card_and_stats(repo):
    out, stats = repo
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "configs:\n- config_name: s1_synthetic\n  default: true" in card
    for name in CONFIGS:
        assert f"`{name}`" in card
    assert "not for redistribution" in card and "Apache-2.0" in card
    data = DatasetCard(card).data  # the YAML through huggingface_hub's DatasetCardData
    records = sum(c["summary"]["records"] for c in stats["configs"].values())
    assert data.size_categories == [size_category(records)] and data.pretty_name == "ORCA correctness ratings"
    assert {"apache-2.0", "cc-by-sa-4.0", "other"} <= set(data.license) and "license_name" in data.to_dict()
    assert 'load_dataset("<this repo>"' in card and "@article{sedlacek2025orca" in card
    assert stats["configs"]["s3_evouna_nq"]["read_skipped"]["NQ.json"] == {"improper question": 3, "null verdict": 1}
    assert stats["configs"]["s3_mmau_pro"]["filtered"] == {"flagged": 4}
    assert stats["configs"]["s1_synthetic"]["summary"]["alpha_interval"] > 0.5
    assert json.loads((out / "stats.json").read_text()) == stats


def test_same_seed_same_bytes(repo, dirs, tmp_path):
    out, _ = repo
    build_repo(tmp_path / "again", data_dir=dirs[0], release_dir=dirs[1], s1_size=S1, progress=False)
    assert _hashes(out) == _hashes(tmp_path / "again")
    build_repo(tmp_path / "seed1", configs=["s1_synthetic"], data_dir=dirs[0], s1_size=S1, seed=1, progress=False)
    assert (_hashes(tmp_path / "seed1")["data/s1_synthetic/train-00000-of-00001.parquet"]
            != _hashes(out)["data/s1_synthetic/train-00000-of-00001.parquet"])


def test_for_upload_leaves_out_unlicensed_sources(dirs, tmp_path):
    stats = build_repo(tmp_path, configs=["s2_benchmark", "s3_mmau_pro", "sas"], data_dir=dirs[0],
                       release_dir=dirs[1], for_upload=True, all_folds=True, progress=False)
    s2 = stats["configs"]["s2_benchmark"]
    assert set(s2["withheld_not_for_redistribution"]) == {"mmar", "lalm_outputs_mmau"}
    ds = datasets.load_dataset(str(tmp_path), "s2_benchmark", split="train", cache_dir=str(tmp_path / "c"))
    assert {s.split("/")[0] for s in ds["source"]} == {"mmau_test_mini"}
    assert not (tmp_path / "data" / "s3_mmau_pro").exists()  # release file has no licence
    assert (tmp_path / "data" / "s2_benchmark_B4").is_dir() and (tmp_path / "data" / "sas_A4").is_dir()
    assert not (tmp_path / "data" / "sas_B0").exists()  # SAS answerers are unknown: no scenario B
    card = (tmp_path / "README.md").read_text()
    assert "left out of this export" in card
    assert set(DatasetCard(card).data.license) == {"apache-2.0", "cc-by-sa-4.0", "cc-by-sa-3.0", "cc-by-4.0"}


def test_size_categories():
    assert [size_category(n) for n in (0, 999, 1000, 54_321, 100_000, 2_000_000)] == [
        "n<1K", "n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "1M<n<10M"]


def test_generator_based_builder_matches_load_config(dirs, tmp_path):
    b = OrcaDataset(config_name="s3_evouna_nq", data_dir=str(dirs[0]), scenario="B", fold=1,
                    cache_dir=str(tmp_path))
    b.download_and_prepare()
    ds = b.as_dataset()
    expected = load_config("s3_evouna_nq", scenario="B", fold=1, data_dir=dirs[0])
    for split in ("train", "validation", "test"):
        assert sorted(ds[split]["id"]) == sorted(expected[split]["id"])


def test_missing_sources_are_clear_errors(tmp_path, dirs):
    with pytest.raises(FileNotFoundError, match="NQ.json not found.*ORCA_DATA_DIR"):
        load_config("s3_evouna_nq", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="s3-mmau-pro-human-judge-ratings.jsonl.*Hub.*release_dir"):
        load_config("s3_mmau_pro", data_dir=dirs[0], release_dir=None)
    with pytest.raises(ValueError, match="unknown config"):
        load_config("s9")


def test_cli_build(dirs, tmp_path, capsys):
    assert main(["build", "--out", str(tmp_path / "o"), "--sources", "s3_evouna_nq", "sas",
                 "--data-dir", str(dirs[0])]) == 0
    assert "s3_evouna_nq" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "o" / "data").iterdir()) == ["s3_evouna_nq", "sas"]
