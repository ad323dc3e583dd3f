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

    from eval_suite.models.backbones import smollm2_path

    return AutoTokenizer.from_pretrained(smollm2_path())


@pytest.fixture(scope="session")
def bert_tokenizer():
    from transformers import AutoTokenizer

    from eval_suite.models.backbones import minilm_path

    return AutoTokenizer.from_pretrained(minilm_path())


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "README.md").exists():
        pytest.skip(f"shared data not found at {SHARED_DATA} (set ORCA_DATA_DIR)")
    return SHARED_DATA


def tiny_llama_orca(**config_kwargs):
    """A tiny random Llama ORCA (seed 0) with SmolLM2's tokenizer, pad token set: `(model, tokenizer)`."""
    import torch
    from transformers import AutoTokenizer

    from configuration_orca import OrcaConfig
    from eval_suite.models.backbones import smollm2_path
    from modeling_orca import OrcaForCorrectnessDistribution
    from processing_orca import set_pad_token
    from training.model import tiny_backbone_config

    tokenizer = set_pad_token(AutoTokenizer.from_pretrained(smollm2_path()), "smollm2")
    torch.manual_seed(0)
    config = OrcaConfig(backbone_config=tiny_backbone_config("llama", len(tokenizer)), **config_kwargs)
    return OrcaForCorrectnessDistribution(config), tokenizer
