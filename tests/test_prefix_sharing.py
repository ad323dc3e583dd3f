"""Prefix sharing in `predict`: the ids shared by all answers to a question are computed once, and the predictions
equal those of scoring every input on its own row (within 1e-5), on tiny random decoders and on SmolLM2."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from configuration_orca import OrcaConfig
from dataset_builder.configs import default_data_dir
from modeling_orca import OrcaForCorrectnessDistribution
from processing_orca import encode_fields, encode_segments, input_fields, render_fields, split_fields
from training.model import tiny_backbone_config

QUESTIONS = [
    ("Which instrument plays the melody?", ["violin", "fiddle"], "A solo violin plays over soft piano chords."),
    ("How many speakers are there?", ["two", "2"], "Two people talk about the weather, then a door closes."),
    ("What is the mood of the music?", ["calm"], ""),
]
ANSWERS = ["It is a violin.", "Two", "calm and slow", "A piano, I think, with some strings behind it", "two speakers", "no idea"]


def records(n_answers=4):
    out = []
    for q, (question, refs, rationale) in enumerate(QUESTIONS):
        for a in range(n_answers):
            candidate = ANSWERS[(q + a) % len(ANSWERS)] + " extra words" * a
            out.append(dict(id=f"{q}-{a}", question=question, reference=refs, rationale=rationale, candidate=candidate, ratings=[1 + (q + a) % 5]))
    # interleave questions so that a question's answers are not adjacent, plus one duplicate input
    out = out[::2] + out[1::2]
    return out + [dict(out[0], id="dup")]


def tiny(kind, vocab, **kw):
    torch.manual_seed(0)
    config = OrcaConfig(backbone_config=tiny_backbone_config(kind, vocab), score_type="multinomial", **kw)
    model = OrcaForCorrectnessDistribution(config).eval()
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    return model


def assert_same(shared, plain):
    assert len(shared) == len(plain)
    for a, b in zip(shared, plain):
        assert a["mean"] == pytest.approx(b["mean"], abs=1e-5)
        assert a["probs"] == pytest.approx(b["probs"], abs=1e-5)
        assert a["nll"] == pytest.approx(b["nll"], abs=1e-4)


def one_by_one(model, recs, tokenizer):
    """Each record through `forward` alone (the definition of the prediction)."""
    means = []
    for r in recs:
        (ids,) = encode_fields([input_fields(r, model.config)], tokenizer, model.config)
        with torch.no_grad():
            means.append(float(model(input_ids=torch.tensor([ids])).mean[0]))
    return means


@pytest.mark.parametrize("kind", ["llama", "olmo2", "gemma3"])
def test_shared_prefix_equals_plain_scoring_on_tiny_decoders(kind, smollm2_tokenizer):
    model = tiny(kind, len(smollm2_tokenizer))
    assert model.prefix_sharing_supported
    recs = records()
    shared = model.predict(recs, smollm2_tokenizer, max_batch_tokens=512, share_prefix=True)
    plain = model.predict(recs, smollm2_tokenizer, max_batch_tokens=512, share_prefix=False)
    assert_same(shared, plain)
    assert [p["mean"] for p in shared] == pytest.approx(one_by_one(model, recs, smollm2_tokenizer), abs=1e-5)


def test_shared_prefix_with_a_template_suffix_equals_one_by_one_scoring(smollm2_tokenizer):
    # the suffix is the last text of every input, after each answer: sharing must not move or drop it
    model = tiny("gemma3", len(smollm2_tokenizer), template_suffix="\nIs the candidate answer correct? Answer:")
    recs = records()
    shared = model.predict(recs, smollm2_tokenizer, max_batch_tokens=512, share_prefix=True)
    assert [p["mean"] for p in shared] == pytest.approx(one_by_one(model, recs, smollm2_tokenizer), abs=1e-5)
    plain = tiny("gemma3", len(smollm2_tokenizer)).predict(recs, smollm2_tokenizer, max_batch_tokens=512)
    assert max(abs(a["mean"] - b["mean"]) for a, b in zip(shared, plain)) > 1e-4  # the suffix is read


def test_sharing_is_the_config_default_and_the_kwarg_switches_it(smollm2_tokenizer, monkeypatch):
    model = tiny("llama", len(smollm2_tokenizer))
    assert model.config.share_prefix is True
    calls = []
    original = model._states_shared
    monkeypatch.setattr(model, "_states_shared", lambda *a, **k: calls.append(1) or original(*a, **k))
    model.predict(records(), smollm2_tokenizer)
    assert calls
    calls.clear()
    model.predict(records(), smollm2_tokenizer, share_prefix=False)
    model.config.share_prefix = False
    model.predict(records(), smollm2_tokenizer)
    assert not calls


def test_small_rows_and_token_budgets_split_groups_exactly(smollm2_tokenizer):
    model = tiny("llama", len(smollm2_tokenizer))
    recs = records(n_answers=6)
    plain = model.predict(recs, smollm2_tokenizer, share_prefix=False)
    model.share_row_tokens = 40  # a question's answers over several rows
    for budget in (1, 64, 10_000):
        assert_same(model.predict(recs, smollm2_tokenizer, max_batch_tokens=budget), plain)


@pytest.mark.parametrize(
    "shape, expected",
    [
        (dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536), 256),  # SmolLM2
        (dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960), 512),  # Qwen2.5-1.5B
        (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64), 128),  # tiny
    ],
)
def test_rows_stop_where_attention_costs_a_tenth_of_the_linear_layers(shape, expected):
    """The row length `predict` shares prefixes in, against the rule worked out from the shapes in float64."""
    from transformers import LlamaConfig

    with torch.device("meta"):  # the shapes only
        model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=LlamaConfig(vocab_size=1000, **shape)))
    h, layers, heads, kv, inter = (shape[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size"))
    linear = layers * (2 * h * h + 2 * h * (h // heads * kv) + 3 * h * inter)  # q, o; k, v; gate, up, down
    longest = 0.1 * 2.0 * linear / (4.0 * h * layers)  # attention over this many keys = a tenth of the linear FLOPs
    rule = min(512, max(128, 2 ** int(np.floor(np.log2(longest)))))
    assert model.share_row_tokens == rule == expected


def test_the_deprecated_batch_size_warns_and_equals_its_token_budget(smollm2_tokenizer, monkeypatch):
    """Issue 50: `batch_size` was a token budget (N x 256 tokens) under a name that means a count of inputs;
    `max_batch_tokens` is the knob, `batch_size` still works for a release with a FutureWarning, and scores
    exactly as its budget. The defaults: 1,024 tokens on the CPU (issues 52 and 51), 4,096 off it."""
    import warnings

    model = tiny("llama", len(smollm2_tokenizer))
    recs = records()
    with pytest.warns(FutureWarning, match="max_batch_tokens") as caught:
        old = model.predict(recs, smollm2_tokenizer, batch_size=2)
    assert caught[0].filename == __file__  # it names the caller's line
    assert old == model.predict(recs, smollm2_tokenizer, max_batch_tokens=512)  # identical, not just close
    with pytest.warns(FutureWarning, match="max_batch_tokens"):
        states, owner = model.encode(recs, smollm2_tokenizer, batch_size=2)
    new_states, new_owner = model.encode(recs, smollm2_tokenizer, max_batch_tokens=512)
    assert torch.equal(states, new_states) and owner == new_owner
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning without batch_size
        assert model.predict(recs, smollm2_tokenizer) == model.predict(recs, smollm2_tokenizer, max_batch_tokens=1024)
    with pytest.raises(ValueError, match="not both"):
        model.predict(recs, smollm2_tokenizer, max_batch_tokens=512, batch_size=2)
    with pytest.raises(TypeError):
        model.predict(recs, smollm2_tokenizer, 16)  # keyword-only: a positional 16 read as inputs would mislead
    budget = model._batch_token_budget
    assert budget(None, None) == 1024 and budget(1000, None) == 1000
    with pytest.warns(FutureWarning):
        assert budget(None, 64) == model.cpu_batch_tokens == 1024  # the CPU cap
    monkeypatch.setattr(type(model), "device", property(lambda self: torch.device("cuda")))
    assert budget(None, None) == 4096 and budget(100_000, None) == 100_000
    with pytest.warns(FutureWarning):
        assert budget(None, 64) == 64 * 256


def test_eager_attention_takes_an_additive_mask(smollm2_tokenizer):
    from transformers import AutoModel

    torch.manual_seed(0)
    backbone = AutoModel.from_config(tiny_backbone_config("llama", len(smollm2_tokenizer)), attn_implementation="eager")
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone.config), backbone=backbone).eval()
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    assert model.prefix_sharing_supported
    assert_same(model.predict(records(), smollm2_tokenizer), model.predict(records(), smollm2_tokenizer, share_prefix=False))


def test_reference_mode_max_and_truncation(smollm2_tokenizer):
    model = tiny("llama", len(smollm2_tokenizer), reference_mode="max", max_length=40)
    recs = records()
    recs.append(dict(recs[0], id="long", rationale="violin " * 80))  # cut to max_length: scored on its own
    shared = model.predict(recs, smollm2_tokenizer)
    assert_same(shared, model.predict(recs, smollm2_tokenizer, share_prefix=False))
    # max over aliases, each alias its own shared prefix
    record = recs[0]
    means = []
    for ref in record["reference"]:
        (ids,) = encode_fields([input_fields(record, model.config, ref)], smollm2_tokenizer, model.config)
        with torch.no_grad():
            means.append(float(model(input_ids=torch.tensor([ids])).mean[0]))
    assert shared[0]["mean"] == pytest.approx(max(means), abs=1e-5)


@pytest.mark.parametrize("kind, pooling", [("bert", "cls"), ("bert", "mean"), ("llama", "mean")])
def test_encoders_and_mean_pooling_fall_back(kind, pooling, smollm2_tokenizer, monkeypatch):
    model = tiny(kind, len(smollm2_tokenizer), pooling=pooling)
    assert not model.prefix_sharing_supported
    monkeypatch.setattr(model, "_states_shared", lambda *a, **k: pytest.fail("shared a prefix"))
    preds = model.predict(records(), smollm2_tokenizer, share_prefix=True)
    assert [p["mean"] for p in preds] == pytest.approx(one_by_one(model, records(), smollm2_tokenizer), abs=1e-5)


@pytest.mark.parametrize("suffix", ["", "\nIs the candidate answer correct? Answer:"])
def test_split_encoding_concatenates_to_the_template(suffix, smollm2_tokenizer, bert_tokenizer):
    config = OrcaConfig(backbone_config=tiny_backbone_config("llama", 100), template_suffix=suffix)
    for r in records():
        fields = input_fields(r, config)
        shared, item = split_fields(fields, config)
        assert shared + item == render_fields(fields, config)
        # byte-level BPE and WordPiece: tokenising the two parts apart gives the whole text's ids
        for tok in (smollm2_tokenizer, bert_tokenizer):
            ((s, i),) = encode_segments([fields], tok, config)
            assert s + i == tok(render_fields(fields, config), add_special_tokens=True)["input_ids"]
        assert item.endswith(suffix)  # the suffix follows the candidate, on the item's side
    only = OrcaConfig(backbone_config=tiny_backbone_config("llama", 100), template_fields=["candidate"], template_prefix=">",
                      template_suffix=suffix)
    assert split_fields(input_fields(records()[0], only), only) == ("", ">Candidate answer: " + records()[0]["candidate"] + suffix)


@pytest.mark.real
@pytest.mark.skipif(not (default_data_dir() / "evouna_nq" / "NQ.json").exists(), reason="real data not found (ORCA_DATA_DIR)")
def test_shared_prefix_equals_plain_scoring_on_smollm2():
    import dataset_builder
    from eval_suite.models.backbones import smollm2_path

    recs = dataset_builder.load_config("s3_evouna_nq")["test"].to_list()[:10]
    torch.manual_seed(0)
    model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(smollm2_path(), score_type="multinomial")
    torch.nn.init.normal_(model.score_head.weight, std=0.05)
    shared = model.predict(recs, tokenizer)
    assert_same(shared, model.predict(recs, tokenizer, share_prefix=False))
    assert [p["mean"] for p in shared] == pytest.approx(one_by_one(model, recs, tokenizer), abs=1e-5)


@pytest.mark.parametrize("kind, attn", [("gemma3", "sdpa"), ("gemma3", "eager"), ("olmo2", "eager")])
def test_rows_longer_than_a_sliding_window_and_eager_attention_stay_exact(kind, attn, smollm2_tokenizer, monkeypatch):
    from transformers import AutoModel

    torch.manual_seed(0)
    backbone_config = tiny_backbone_config(kind, len(smollm2_tokenizer))
    if kind == "gemma3":  # a 16-token window (rows are several times longer) on one of the two layers
        backbone_config.layer_types = ["sliding_attention", "full_attention"]
    backbone = AutoModel.from_config(backbone_config, attn_implementation=attn)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone.config), backbone=backbone).eval()
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    assert model.prefix_sharing_supported
    rows = []
    original = model._states_shared
    monkeypatch.setattr(model, "_states_shared", lambda ids, *a: rows.append(max(map(len, ids))) or original(ids, *a))
    recs = records()
    shared = model.predict(recs, smollm2_tokenizer)
    if kind == "gemma3":
        assert rows and rows[0] > 2 * backbone_config.sliding_window
    assert_same(shared, model.predict(recs, smollm2_tokenizer, share_prefix=False))
    assert [p["mean"] for p in shared] == pytest.approx(one_by_one(model, recs, smollm2_tokenizer), abs=1e-5)
