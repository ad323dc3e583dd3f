"""Shared fixtures: tokenizers of the offline backbones, the shared data folder. Tiny random backbones come from
train.tiny_backbone_config (the same ones `train.py` smoke runs use)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ORCA_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from eval_suite.backbones import smollm2_path

    return AutoTokenizer.from_pretrained(smollm2_path())


@pytest.fixture(scope="session")
def bert_tokenizer():
    from transformers import AutoTokenizer

    from eval_suite.backbones import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "README.md").exists():
        pytest.skip(f"shared data not found at {SHARED_DATA} (set ORCA_DATA_DIR)")
    return SHARED_DATA
