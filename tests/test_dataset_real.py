"""Checks on the real public data in ../shared/data (skipped when it is absent)."""

import time
from pathlib import Path

import datasets
import pytest

from dataset_builder import build_config, load_config
from dataset_builder.export import build_repo

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
pytestmark = [pytest.mark.real,
              pytest.mark.skipif(not (DATA / "evouna_nq" / "NQ.json").exists(),
                                 reason=f"real data not found at {DATA} (see its README.md)")]


def test_evouna_counts_and_fast_load():
    t = time.perf_counter()
    dd = load_config("s3_evouna_nq", data_dir=DATA)
    assert time.perf_counter() - t < 30
    assert {k: len(v) for k, v in dd.items()} == {"train": 11046, "validation": 1379, "test": 1379}
    b = build_config("s3_evouna_nq", data_dir=DATA)
    assert b.read_skipped[str(DATA / "evouna_nq" / "NQ.json")]["improper question"] == 549
    assert set(dd["test"]["answerer"]) == {"FiD", "GPT-3.5", "ChatGPT", "GPT-4", "New Bing"}
    assert max(len(r) for r in dd["train"]["reference"]) >= 10


def test_s2_real_data():
    b = build_config("s2_benchmark", data_dir=DATA)
    answerers = {r["answerer"] for r in b.records}
    assert {"Qwen2-Audio-7B-Instruct", "Qwen-Audio-Chat", "mc-choice", "mc-hedge"} <= answerers
    assert b.filtered["text over 1000 characters"] > 0 and b.filtered["unrated"] > 0
    mmar = [r for r in b.records if r["benchmark"] == "mmar"]
    assert all(r["rationale"] for r in mmar[:50])
    assert all(r["rationale"] == "" for r in b.records if r["benchmark"] == "mmau")
    splits = load_config("s2_benchmark", scenario="B", fold=0, data_dir=DATA)
    assert len(set(splits["test"]["answerer"])) == 2


def test_full_build_and_load(tmp_path):
    t = time.perf_counter()
    stats = build_repo(tmp_path, data_dir=DATA, progress=False)
    assert time.perf_counter() - t < 120
    assert set(stats["configs"]) == {"s1_synthetic", "s2_benchmark", "s3_evouna_nq", "sas"}
    ds = datasets.load_dataset(str(tmp_path), "s3_evouna_nq", split="test", cache_dir=str(tmp_path / "c"))
    assert len(ds) == 1379
