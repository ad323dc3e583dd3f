"""The three heads against independent float64 computations, pooling, formatting, predict, configuration errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from configuration_orca import OrcaConfig
from modeling_orca import (
    RATING_PAD,
    OrcaForCorrectnessDistribution,
    distribution_statistics,
    pad_ratings,
    ratings_nll,
)
from processing_orca import encode_fields, format_input, input_fields
from training.model import tiny_backbone_config

HEADS = ("beta", "multinomial", "bernoulli")


def random_case(score_type, seed=0, n=7):
    g = torch.Generator().manual_seed(seed)
    width = {"beta": 2, "multinomial": 5, "bernoulli": 1}[score_type]
    logits = torch.randn(n, width, generator=g, dtype=torch.float64) * 1.5
    ratings = [[1, 5], [5], [1], [3, 3, 4], [2, 5, 1, 4], [4], [5, 5, 5, 1]][:n]
    return logits, ratings


def config_for(score_type, **kw):
    return OrcaConfig(backbone_config=tiny_backbone_config("llama", 100), score_type=score_type, **kw)


# ---------------------------------------------------------------------------------------------------- likelihoods


@pytest.mark.parametrize("score_type", HEADS)
def test_item_nll_matches_independent_float64_loop(score_type):
    config = config_for(score_type)
    logits, ratings = random_case(score_type)
    got = ratings_nll(logits, pad_ratings(ratings), config).double().numpy()
    for i, item in enumerate(ratings):
        z = logits[i].numpy()
        if score_type == "beta":
            a, b = math.exp(z[0]), math.exp(z[1])
            y = np.clip((np.array(item) - 1) / 4, config.beta_epsilon, 1 - config.beta_epsilon)
            want = -stats.beta.logpdf(y, a, b).sum()
        elif score_type == "multinomial":
            log_phi = z - np.log(np.exp(z).sum())
            want = -sum(log_phi[r - 1] for r in item)
        else:
            phi = 1 / (1 + math.exp(-z[0]))
            t = np.mean((np.array(item) - 1) / 4)
            want = -(t * math.log(phi) + (1 - t) * math.log(1 - phi))
        assert got[i] == pytest.approx(want, rel=1e-5, abs=1e-5), (score_type, i)


@pytest.mark.parametrize("score_type", ("beta", "multinomial"))
def test_multinomial_and_beta_nll_equal_torch_distributions(score_type):
    config = config_for(score_type)
    logits, ratings = random_case(score_type, seed=3)
    got = ratings_nll(logits, pad_ratings(ratings), config)
    for i, item in enumerate(ratings):
        r = torch.tensor(item)
        if score_type == "beta":
            dist = torch.distributions.Beta(logits[i, 0].exp(), logits[i, 1].exp())
            y = ((r - 1) / 4).double().clamp(config.beta_epsilon, 1 - config.beta_epsilon)
            want = -dist.log_prob(y).sum()
        else:
            want = -torch.distributions.Categorical(logits=logits[i]).log_prob(r - 1).sum()
        assert float(got[i]) == pytest.approx(float(want), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("score_type", HEADS)
def test_statistics_match_closed_forms(score_type):
    config = config_for(score_type)
    logits, _ = random_case(score_type, seed=1)
    mean, variance, probs = distribution_statistics(logits, config)
    for i in range(len(logits)):
        z = logits[i].numpy()
        if score_type == "beta":
            a, b = math.exp(z[0]), math.exp(z[1])
            assert float(mean[i]) == pytest.approx(1 + 4 * stats.beta.mean(a, b), rel=1e-5)
            assert float(variance[i]) == pytest.approx(16 * stats.beta.var(a, b), rel=1e-4)
            # Beta mass of each fifth of [0, 1], by numerical integration of the density
            for k in range(5):
                mass, _ = integrate.quad(stats.beta.pdf, k / 5, (k + 1) / 5, args=(a, b), limit=200)
                assert float(probs[i, k]) == pytest.approx(mass, abs=2e-5)
        elif score_type == "multinomial":
            phi = np.exp(z) / np.exp(z).sum()
            mu = sum((k + 1) * phi[k] for k in range(5))
            assert float(mean[i]) == pytest.approx(mu, rel=1e-5)
            assert float(variance[i]) == pytest.approx(sum(phi[k] * (k + 1 - mu) ** 2 for k in range(5)), rel=1e-5)
            np.testing.assert_allclose(probs[i].numpy(), phi, rtol=1e-5)
        else:
            assert float(mean[i]) == pytest.approx(1 + 4 / (1 + math.exp(-z[0])), rel=1e-6)
            assert variance is None and probs is None
    if probs is not None:
        np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0, atol=1e-5)


@pytest.mark.parametrize("score_type", HEADS)
@pytest.mark.parametrize("scale", [1.0, 60.0])
def test_losses_and_gradients_finite_for_extreme_ratings_and_logits(score_type, scale):
    config = config_for(score_type)
    logits, ratings = random_case(score_type, seed=2)
    logits = (logits.float() * scale).requires_grad_()
    loss = ratings_nll(logits, pad_ratings(ratings), config).mean()
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all()
    mean, variance, _ = distribution_statistics(logits.detach(), config)
    assert torch.isfinite(mean).all() and (mean >= 1).all() and (mean <= 5).all()
    if variance is not None:
        assert torch.isfinite(variance).all() and (variance >= 0).all()


def test_bad_ratings_raise_clear_errors():
    config = config_for("multinomial")
    logits = torch.zeros(2, 5)
    with pytest.raises(ValueError, match="rating 6 .*outside 1..5"):
        ratings_nll(logits, torch.tensor([[6, RATING_PAD], [1, 2]]), config)
    with pytest.raises(ValueError, match="rating 0 "):
        ratings_nll(logits, torch.tensor([[0, 1], [1, 2]]), config)
    with pytest.raises(ValueError, match="item 1 has no ratings"):
        ratings_nll(logits, torch.tensor([[3, 1], [RATING_PAD, RATING_PAD]]), config)
    with pytest.raises(TypeError, match="integer tensor"):
        ratings_nll(logits, torch.tensor([[3.0], [2.5]]), config)


# ---------------------------------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(score_type="gaussian"), "score_type='gaussian' is not supported; allowed values: beta, multinomial, bernoulli"),
        (dict(pooling="max"), "pooling='max' is not supported; allowed values: last, mean, cls"),
        (dict(template_fields=["question", "audio", "candidate"]), "'audio' is not supported; allowed values: question"),
        (dict(template_fields=["question", "reference"]), "must include 'candidate'"),
        (dict(reference_mode="first"), "reference_mode='first' is not supported"),
        (dict(rating_min=5, rating_max=1), "rating_min < rating_max"),
        (dict(template_suffix=None), "template_suffix must be a string, got None"),
    ],
)
def test_bad_configuration_is_rejected_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OrcaConfig(**kwargs)


def test_config_round_trips_with_nested_backbone(tmp_path):
    config = OrcaConfig(backbone_config=tiny_backbone_config("olmo2", 100).to_dict(), score_type="beta", pooling="mean")
    config.save_pretrained(tmp_path)
    again = OrcaConfig.from_pretrained(tmp_path)
    assert type(again.backbone_config).__name__ == "Olmo2Config"
    assert again.backbone_config.hidden_size == 32
    assert (again.score_type, again.pooling, again.template_fields) == ("beta", "mean", config.template_fields)


# ---------------------------------------------------------------------------------------------------- formatting

RECORD = {
    "id": "x1",
    "question": "Which instrument plays the melody?",
    "reference": ["violin", "fiddle"],
    "rationale": "A solo violin plays over soft piano chords.",
    "transcript": "",
    "candidate": "It is a violin.",
}


def test_format_input_follows_template_and_ablations():
    config = config_for("multinomial")
    text = format_input(RECORD, config)
    assert text == (
        "Question: Which instrument plays the melody?\nReference answer: violin / fiddle\n"
        "Audio description: A solo violin plays over soft piano chords.\nCandidate answer: It is a violin."
    )
    no_context = config_for("multinomial", template_fields=["reference", "candidate"], field_separator=" | ")
    assert format_input(RECORD, no_context) == "Reference answer: violin / fiddle | Candidate answer: It is a violin."
    release = config_for(
        "multinomial",
        template_fields=["rationale", "question", "reference", "candidate"],
        field_labels={"rationale": "|context: ", "question": "|question: ", "reference": "|correct answer: ", "candidate": "|candidate answer: "},
        field_separator=" ",
        template_prefix=" ",
        skip_empty_fields=False,
    )
    assert format_input(dict(RECORD, reference="violin"), release) == (
        " |context: A solo violin plays over soft piano chords. |question: Which instrument plays the melody?"
        " |correct answer: violin |candidate answer: It is a violin."
    )


def test_long_alias_lists_are_bounded_and_missing_fields_named():
    config = config_for("multinomial", max_joined_references=3)
    text = format_input(dict(RECORD, reference=[f"alias{i}" for i in range(20)]), config)
    assert "alias0 / alias1 / alias2\n" in text and "alias3" not in text
    with pytest.raises(ValueError, match="missing field 'candidate'"):
        format_input({k: v for k, v in RECORD.items() if k != "candidate"}, config)
    with pytest.raises(ValueError, match="field 'reference' is empty"):
        format_input(dict(RECORD, reference=[]), config)
    with pytest.raises(TypeError, match="field 'rationale' must be a string"):
        format_input(dict(RECORD, rationale=3), config)


def test_truncation_cuts_rationale_before_candidate(smollm2_tokenizer):

    config = config_for("multinomial", max_length=48)
    record = dict(RECORD, rationale="violin " * 200, candidate="The melody is played by a violin, clearly.")
    (ids,) = encode_fields([input_fields(record, config)], smollm2_tokenizer, config)
    text = smollm2_tokenizer.decode(ids)
    assert len(ids) <= 48
    assert text.endswith("Candidate answer: The melody is played by a violin, clearly.")
    assert "Question: Which instrument plays the melody?" in text


# ---------------------------------------------------------------------------------------------------- model


def tiny_model(kind, score_type, vocab_size, seed=0, **kw):
    torch.manual_seed(seed)
    config = OrcaConfig(backbone_config=tiny_backbone_config(kind, vocab_size), score_type=score_type, **kw)
    model = OrcaForCorrectnessDistribution(config).eval()
    # a visible head: the default gain 0.01 makes every item's distribution nearly identical
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    return model


@pytest.mark.parametrize("kind, pooling", [("llama", "last"), ("llama", "mean"), ("bert", "cls"), ("bert", "mean"), ("gemma3", "last")])
def test_padded_batches_equal_items_one_at_a_time(kind, pooling, smollm2_tokenizer):
    model = tiny_model(kind, "multinomial", len(smollm2_tokenizer), pooling=pooling)
    texts = ["short one", "a much longer input text with many more tokens in it than the first", "mid length text here"]
    single = [model(**smollm2_tokenizer([t], return_tensors="pt")).logits for t in texts]
    for side in ("right", "left"):
        smollm2_tokenizer.padding_side = side
        batch = smollm2_tokenizer(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            logits = model(**batch).logits
        for i in range(len(texts)):
            torch.testing.assert_close(logits[i], single[i][0], atol=1e-5, rtol=1e-5)
    smollm2_tokenizer.padding_side = "right"


@pytest.mark.parametrize("score_type", HEADS)
def test_forward_returns_everything_and_trains(score_type, smollm2_tokenizer):
    model = tiny_model("llama", score_type, len(smollm2_tokenizer)).train()
    batch = smollm2_tokenizer(["a b c", "d e f g"], return_tensors="pt", padding=True)
    out = model(**batch, ratings=pad_ratings([[1, 5, 5], [3]]))
    assert out.logits.shape == (2, model.config.num_head_outputs)
    assert out.mean.shape == (2,) and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.score_head.weight.grad.abs().sum() > 0


def test_head_initialisation_leaves_backbone_alone(smollm2_tokenizer):
    from transformers import AutoModel

    torch.manual_seed(0)
    backbone = AutoModel.from_config(tiny_backbone_config("llama", len(smollm2_tokenizer)))
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    config = OrcaConfig(backbone_config=backbone.config, head_init_gain=0.01, head_init_bias=0.0)
    model = OrcaForCorrectnessDistribution(config, backbone=backbone)
    for k, v in model.backbone.state_dict().items():
        torch.testing.assert_close(v, before[k])
    assert float(model.score_head.bias.detach().abs().max()) == 0.0
    fan_in, fan_out = 32, 5
    assert float(model.score_head.weight.detach().std()) < 0.01 * math.sqrt(2 / (fan_in + fan_out)) * 3


def test_predict_restores_order_and_matches_forward(smollm2_tokenizer):
    model = tiny_model("llama", "beta", len(smollm2_tokenizer))
    records = [dict(RECORD, id=str(i), candidate="word " * (i * 7 % 11 + 1), ratings=[1 + i % 5]) for i in range(9)]
    preds = model.predict(records, smollm2_tokenizer, max_batch_tokens=1024)
    assert len(preds) == len(records)
    for record, pred in zip(records, preds):
        enc = smollm2_tokenizer([model.format_input(record)], return_tensors="pt")
        with torch.no_grad():
            out = model(**enc, ratings=pad_ratings([record["ratings"]]))
        assert pred["mean"] == pytest.approx(float(out.mean[0]), abs=1e-5)
        assert pred["variance"] == pytest.approx(float(out.variance[0]), abs=1e-5)
        assert pred["nll"] == pytest.approx(float(out.loss), abs=1e-4)
        assert pred["score"] == pytest.approx((pred["mean"] - 1) / 4, abs=1e-7)
        assert sum(pred["probs"]) == pytest.approx(1.0, abs=1e-5)


def test_reference_mode_max_keeps_the_best_alias(smollm2_tokenizer):
    model = tiny_model("llama", "multinomial", len(smollm2_tokenizer), reference_mode="max")
    record = dict(RECORD, reference=["violin", "fiddle", "a bowed string instrument"])
    (pred,) = model.predict([record], smollm2_tokenizer)
    means = []
    for ref in record["reference"]:
        enc = smollm2_tokenizer([model.format_input(record, reference=ref)], return_tensors="pt")
        with torch.no_grad():
            means.append(float(model(**enc).mean[0]))
    assert pred["mean"] == pytest.approx(max(means), abs=1e-5)


def test_gradient_checkpointing_passes_through(smollm2_tokenizer):
    model = tiny_model("llama", "multinomial", len(smollm2_tokenizer)).train()
    model.activation_checkpointing_enable()
    assert model.backbone.gradient_checkpointing or any(getattr(m, "gradient_checkpointing", False) for m in model.backbone.modules())
    batch = smollm2_tokenizer(["a b c", "d e"], return_tensors="pt", padding=True)
    model(**batch, ratings=pad_ratings([[2], [4]])).loss.backward()


def test_wrapping_a_live_backbone_config_keeps_its_attention_implementation():
    from transformers import AutoModel

    backbone = AutoModel.from_config(tiny_backbone_config("llama", 100), attn_implementation="eager")
    config = OrcaConfig(backbone_config=backbone.config)
    assert backbone.config._attn_implementation == "eager" and config._attn_implementation == "eager"


# ---------------------------------------------------------------------------------------------------- exact formatting

RELEASE = dict(
    template_fields=["rationale", "question", "reference", "candidate"],
    field_labels={"rationale": "|context: ", "question": "|question: ", "reference": "|correct answer: ", "candidate": "|candidate answer: "},
    field_separator=" ", template_prefix=" ", skip_empty_fields=False, add_special_tokens=False,
    max_joined_references=100, max_reference_chars=10_000, max_length=4096,
)  # fmt: skip

EDGE_RECORDS = [
    dict(question="  What plays?\t", reference=[" violin ", "fiddle\n"], rationale="\nA violin.  ", candidate="a violin "),
    dict(question="Which one?", reference=["dog", "", " hound"], rationale="", candidate="\tdog"),
    dict(question="Ünïcödé ✓ ?", reference="naïve café ", rationale=None, candidate="  "),
    dict(question="q", reference="r", rationale=" x " * 50, candidate="c\n\n"),
]


def release_string(record):
    """The reference release's input string, built as it builds it (no stripping, every alias joined)."""
    refs = record["reference"]
    ref = refs if isinstance(refs, str) else " / ".join(refs)
    return (f" |context: {record.get('rationale') or ''} |question: {record['question']} "
            f"|correct answer: {ref} |candidate answer: {record['candidate']}")  # fmt: skip


def test_strip_fields_off_keeps_every_character_as_the_reference_release(smollm2_tokenizer):

    exact = config_for("multinomial", strip_fields=False, **RELEASE)
    for record in EDGE_RECORDS:
        assert format_input(record, exact) == release_string(record)
        # split tokenisation (shared part + candidate part) = the whole string's ids for byte-level BPE
        (ids,) = encode_fields([input_fields(record, exact)], smollm2_tokenizer, exact)
        assert ids == smollm2_tokenizer(release_string(record), add_special_tokens=False)["input_ids"]
    stripped = config_for("multinomial", **RELEASE)  # strip_fields=True, the default
    assert stripped.strip_fields is True
    assert format_input(EDGE_RECORDS[0], stripped) == (
        " |context: A violin. |question: What plays? |correct answer: violin / fiddle |candidate answer: a violin"
    )
    assert "dog /  /  hound" in format_input(EDGE_RECORDS[1], exact) and "dog / hound" in format_input(EDGE_RECORDS[1], stripped)


def test_empty_fields_special_tokens_and_truncation_follow_the_config(smollm2_tokenizer, bert_tokenizer):

    record = dict(EDGE_RECORDS[1], rationale="")
    keep = config_for("multinomial", skip_empty_fields=False)
    skip = config_for("multinomial", skip_empty_fields=True)
    assert "Audio description: \n" in format_input(record, keep) and "Audio description" not in format_input(record, skip)
    # special tokens: BERT's [CLS] ... [SEP] around the text when asked, none otherwise
    for add in (True, False):
        config = config_for("multinomial", add_special_tokens=add)
        (ids,) = encode_fields([input_fields(record, config)], bert_tokenizer, config)
        assert ids == bert_tokenizer(format_input(record, config), add_special_tokens=add)["input_ids"]
        assert (ids[0] == bert_tokenizer.cls_token_id and ids[-1] == bert_tokenizer.sep_token_id) is add
    # truncation without stripping: within max_length, the rationale cut first, the candidate whole
    exact = config_for("multinomial", strip_fields=False, **dict(RELEASE, max_length=40))
    long = dict(EDGE_RECORDS[3], rationale=" violin " * 100, candidate=" The violin. ")
    (ids,) = encode_fields([input_fields(long, exact)], smollm2_tokenizer, exact)
    assert len(ids) <= 40 and smollm2_tokenizer.decode(ids).endswith("|candidate answer:  The violin. ")
