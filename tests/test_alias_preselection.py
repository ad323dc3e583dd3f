"""reference_mode='max' over the aliases closest to the candidate (OrcaConfig.max_scored_references)."""

import sys
from pathlib import Path

import pytest
import torch

from configuration_orca import OrcaConfig
from modeling_orca import OrcaForCorrectnessDistribution
from processing_orca import closest_references, input_variants
from training.model import tiny_backbone_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _config(vocab=100, **kw):
    return OrcaConfig(backbone_config=tiny_backbone_config("llama", vocab), **{"reference_mode": "max", **kw})


def test_closest_references_picks_aliases_the_candidate_contains():
    refs = ["Canberra", "ACT capital", "Canberra, Australia", "the bush capital", "Kamberra"]
    assert closest_references(refs, "The capital is Canberra, in the Australian Capital Territory.", 2) == [
        "Canberra", "Canberra, Australia"]
    # a wrong answer covers nothing: the first aliases in order (ties keep the earlier alias)
    assert closest_references(refs, "Sydney", 2) == ["Canberra", "ACT capital"]
    assert closest_references(refs, "anything", 0) == refs and closest_references(refs, "x", 9) == refs
    # case and punctuation do not matter; the result keeps the aliases' order
    assert closest_references(["B. D. Wong", "Ice-T", "Mariska Hargitay"], "it was ICE T and mariska", 2) == [
        "Ice-T", "Mariska Hargitay"]


def test_input_variants_score_only_k_aliases():
    rec = {"question": "q", "reference": [f"alias {i}" for i in range(50)] + ["Canberra"], "candidate": "Canberra"}
    assert len(input_variants(rec, _config())) == 51
    variants = input_variants(rec, _config(max_scored_references=3))
    assert [v["reference"] for v in variants] == ["alias 0", "alias 1", "Canberra"]
    assert len(input_variants(rec, _config(max_scored_references=3, reference_mode="join"))) == 1
    with pytest.raises(ValueError, match="max_scored_references"):
        _config(max_scored_references=-1)


def test_predict_with_preselection_equals_max_over_the_selected_aliases(smollm2_tokenizer):
    torch.manual_seed(0)
    model = OrcaForCorrectnessDistribution(_config(len(smollm2_tokenizer), max_scored_references=2)).eval()
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    rec = {"id": "r", "question": "capital of australia", "candidate": "It is Canberra.",
           "reference": ["Sydney", "Canberra", "Melbourne", "canberra city", "Perth"]}
    got = model.predict([rec], smollm2_tokenizer)[0]["mean"]
    kept = closest_references(rec["reference"], rec["candidate"], 2)
    assert kept == ["Canberra", "canberra city"]
    model.config.max_scored_references = 0
    singles = [model.predict([{**rec, "reference": [a]}], smollm2_tokenizer)[0]["mean"] for a in kept]
    assert got == pytest.approx(max(singles), abs=1e-6)
    every = model.predict([rec], smollm2_tokenizer)[0]["mean"]
    assert every >= got - 1e-6  # max over all aliases can only be higher


def test_bench_trivia_aliases_keep_the_real_ones():
    from bench_aliases import trivia_aliases

    out = trivia_aliases(["Ice-T", "Mariska Hargitay"], 50, seed=0)
    assert len(out) == len(set(out)) == 50 and {"Ice-T", "Mariska Hargitay"} <= set(out)
    assert trivia_aliases(["Ice-T"], 50, seed=0) == trivia_aliases(["Ice-T"], 50, seed=0)
