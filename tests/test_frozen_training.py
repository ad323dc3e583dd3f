"""Training the head on cached pooled states of a frozen backbone (training/frozen.py, training/state_cache.py):
the same losses and gradients as the uncached forward, a cache that never serves another backbone's or input's
states, survives a torn shard, and a run that trains, evaluates and saves an ordinary ORCA model."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_llama_orca

import train
from training.config import load_run_config
from training.frozen import head_loss
from training.state_cache import CachedStatesJudge, StateCache

RECORDS = [
    {"id": f"r{i}", "question": f"Which animal is heard in clip {i % 3}?", "reference": ["dog", "puppy"][: 1 + i % 2],
     "rationale": "A dog barks twice.", "candidate": ["a dog", "a cat", "it is a puppy", "no idea"][i % 4],
     "ratings": [[5, 4], [1], [4, 5, 5], [2, 1]][i % 4]}
    for i in range(12)
]


def test_training_from_the_cache_gives_the_uncached_losses_and_gradients(tmp_path):
    from packing_orca import pad_token_ids
    from processing_orca import encode_fields, input_variants

    model, tokenizer = tiny_llama_orca()
    model.eval()
    for p in model.backbone.parameters():
        p.requires_grad_(False)
    ids = encode_fields([input_variants(r, model.config)[0] for r in RECORDS], tokenizer, model.config)
    input_ids, mask = pad_token_ids(ids, tokenizer.pad_token_id)
    from modeling_orca import pad_ratings

    out = model(input_ids=input_ids, attention_mask=mask, ratings=pad_ratings([r["ratings"] for r in RECORDS]))
    out.loss.backward()
    want = [p.grad.clone() for p in model.score_head.parameters()]
    model.zero_grad()

    cache = StateCache(tmp_path, model)
    states = torch.stack([s[0] for s in cache.states(model, tokenizer, RECORDS)])
    loss = head_loss(model, states, [r["ratings"] for r in RECORDS])
    loss.backward()
    torch.testing.assert_close(loss, out.loss, rtol=1e-6, atol=1e-6)
    for got, ref in zip((p.grad for p in model.score_head.parameters()), want):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-7)


def test_cached_predictions_equal_predict_and_the_cache_is_read_back(tmp_path):
    model, tokenizer = tiny_llama_orca(reference_mode="max")
    want = model.predict(RECORDS, tokenizer)
    judge = CachedStatesJudge(model, StateCache(tmp_path, model))
    got = judge.predict(RECORDS, tokenizer)
    for a, b in zip(got, want):
        assert a["mean"] == pytest.approx(b["mean"], abs=1e-5) and a["variance"] == pytest.approx(b["variance"], abs=1e-5)
    # a second cache on the same backbone reads the shard and computes nothing
    again = StateCache(tmp_path, model)
    model.encode = lambda *a, **k: pytest.fail("computed a cached state again")
    assert [p["mean"] for p in CachedStatesJudge(model, again).predict(RECORDS, tokenizer)] == [p["mean"] for p in got]


def test_another_backbone_template_or_record_is_not_read_back(tmp_path):
    model, tokenizer = tiny_llama_orca()
    cache = StateCache(tmp_path, model)
    cache.states(model, tokenizer, RECORDS[:4])
    with torch.no_grad():  # a fine-tuned copy: other weights, another folder
        next(model.backbone.parameters()).add_(1e-3)
    assert StateCache(tmp_path, model).folder != cache.folder
    model2, _ = tiny_llama_orca(template_suffix="\nCorrect?")  # same weights, another template: other keys
    assert StateCache(tmp_path, model2).folder == StateCache(tmp_path, tiny_llama_orca()[0]).folder
    from training.state_cache import record_keys

    assert not set(record_keys(model2, tokenizer, RECORDS[:4])) & set(cache.index)
    edited = [dict(RECORDS[0], candidate="a wolf")]
    assert record_keys(tiny_llama_orca()[0], tokenizer, edited)[0] not in cache.index


def test_a_torn_shard_is_computed_again_not_trusted(tmp_path):
    model, tokenizer = tiny_llama_orca()
    cache = StateCache(tmp_path, model)
    want = cache.states(model, tokenizer, RECORDS)
    shard = next(cache.folder.glob("shard-*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:100])  # what a kill -9 without the atomic rename would leave
    fresh = StateCache(tmp_path, model)
    assert not fresh.index
    got = fresh.states(model, tokenizer, RECORDS)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def write_split(path, n, seed):
    import random

    rng = random.Random(seed)
    animals = ["dog", "cat", "cow", "owl", "frog", "horse"]
    with path.open("w") as f:
        for i in range(n):
            ref = rng.choice(animals)
            cand = ref if rng.random() < 0.5 else rng.choice([a for a in animals if a != ref])
            ratings = [5, 4] if cand == ref else [1, 2]
            f.write(json.dumps({"id": f"{path.stem}-{i}", "question": f"Which animal? ({i % 7})", "reference": ref,
                                "candidate": f"a {cand}", "ratings": ratings}) + "\n")
    return str(path)


def tiny_frozen_run(tmp_path, train_items: int, overrides: list[str], stages: dict) -> tuple[dict, dict]:
    """(run config, split files) of a frozen-backbone run on tiny-llama under tmp_path: `stages` (name -> keys
    besides the files) all on the same generated train/validation/test files."""
    files = {s: write_split(tmp_path / f"{s}.jsonl", n, k) for k, (s, n) in enumerate((("train", train_items), ("validation", 16), ("test", 16)))}
    cfg = load_run_config(None, ["--model.backbone", "tiny-llama", "--run_dir", str(tmp_path / "run"),
                                 "--training.frozen_backbone", "true", "--training.state_cache", str(tmp_path / "states"),
                                 "--training.log_every", "1", *overrides])
    cfg["stages"] = {name: {"files": files, **keys} for name, keys in stages.items()}
    cfg["test"]["compare_reference_modes"] = False
    return cfg, files


def test_a_frozen_run_trains_the_head_resumes_and_saves_an_orca_model(tmp_path):
    cfg, files = tiny_frozen_run(tmp_path, 64, ["--lora.enabled", "false", "--training.eval_every", "5"],
                                 {"s1": {"max_steps": 10, "lr": 1e-2, "max_items": 32}, "s3": {"max_steps": 20, "lr": 1e-2}})
    before = {k: v.clone() for k, v in tiny_llama_orca()[0].backbone.state_dict().items()}
    results = train.run(cfg)
    assert results["stages"]["s1"]["train_items"] == 32 and results["stages"]["s3"]["train_items"] == 64
    assert results["test"]["orca"]["n"] == 16
    from eval_suite.models.loading import load_model

    model, tokenizer = load_model(str(tmp_path / "run" / "final"))
    for name, value in model.backbone.state_dict().items():  # the backbone is the one it started from
        torch.testing.assert_close(value, before[name])
    preds = [json.loads(line) for line in (tmp_path / "run" / "test_predictions.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in open(files["test"])]
    direct = model.predict(records, tokenizer)  # the cached evaluation is what the saved model gives
    assert [p["mean"] for p in preds] == pytest.approx([p["mean"] for p in direct], abs=1e-5)
    # resume after the end: finished stages are not trained again, the result is the same
    again = train.run(cfg, resume=True)
    assert again["test"]["orca"] == results["test"]["orca"]


def test_frozen_backbone_with_lora_is_refused():
    with pytest.raises(SystemExit, match="lora.enabled false"):
        load_run_config(None, ["--model.backbone", "tiny-llama", "--training.frozen_backbone", "true"])


def verdict_model(tmp_path, score_type: str, verdict_tokens: list[str]):
    """(the tiny causal LM, the ORCA model on it with its head from `verdict_tokens`, the tokenizer, the records'
    token ids as the model formats them)."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from eval_suite.models.backbones import smollm2_path
    from modeling_orca import OrcaForCorrectnessDistribution
    from processing_orca import encode_fields, input_variants
    from training.model import init_head_from_verdict, tiny_backbone_config

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    torch.manual_seed(0)
    lm = LlamaForCausalLM(tiny_backbone_config("llama", len(tokenizer))).eval()  # untied LM head
    lm.save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    model, tok = OrcaForCorrectnessDistribution.from_backbone(tmp_path / "lm", score_type=score_type)
    init_head_from_verdict(model, tok, str(tmp_path / "lm"), verdict_tokens)
    ids = encode_fields([input_variants(r, model.config)[0] for r in RECORDS], tok, model.config)
    return lm, model, tok, ids


def lm_next_token_probs(lm, tok, ids, words: list[str]) -> list[list[float]]:
    """float64 P(word | one of `words`) at each input's last token, from the causal LM's own logits."""
    word_ids = [tok(w, add_special_tokens=False)["input_ids"][0] for w in words]
    with torch.no_grad():
        return [torch.softmax(lm(torch.tensor([i])).logits[0, -1, word_ids].double(), 0).tolist() for i in ids]


@pytest.mark.parametrize("score_type", ["bernoulli", "multinomial", "beta"])
def test_the_verdict_head_reads_the_lm_s_own_yes_no_answer(tmp_path, score_type):
    """model.head_init: verdict. The Bernoulli head's mean is 1 + 4 P(yes | yes or no) of the causal LM at the last
    token (computed here with its LM head, an independent path); the other heads rank the records the same way."""
    from scipy.stats import spearmanr

    lm, model, tok, ids = verdict_model(tmp_path, score_type, ["Yes", "No"])
    want = [p[0] for p in lm_next_token_probs(lm, tok, ids, ["Yes", "No"])]
    means = [p["mean"] for p in model.predict(RECORDS, tok)]
    if score_type == "bernoulli":
        assert means == pytest.approx([1 + 4 * w for w in want], abs=1e-5)
    assert spearmanr(means, want).statistic == pytest.approx(1.0)


def test_the_digit_verdict_is_the_lm_s_distribution_over_the_ratings(tmp_path):
    """verdict_tokens "1" ... "5" with the multinomial head: its probabilities are the LM's next-token
    probabilities of the five digits, renormalised over them (float64, from the LM head)."""
    digits = ["1", "2", "3", "4", "5"]
    lm, model, tok, ids = verdict_model(tmp_path, "multinomial", digits)
    want = lm_next_token_probs(lm, tok, ids, digits)
    preds = model.predict(RECORDS, tok)
    for p, w in zip(preds, want):
        assert p["probs"] == pytest.approx(w, abs=1e-6)
        assert p["mean"] == pytest.approx(sum((k + 1) * q for k, q in enumerate(w)), abs=1e-5)


@pytest.mark.parametrize("score_type", ["bernoulli", "beta"])
def test_a_verdict_per_rating_needs_a_logit_per_rating(tmp_path, score_type):
    with pytest.raises(SystemExit, match="a logit per rating"):
        verdict_model(tmp_path, score_type, ["1", "2", "3", "4", "5"])


def test_sample_questions_keeps_whole_questions_in_input_order():
    from training.data import sample_questions

    records = [{"id": f"{q}-{a}", "question_id": f"q{q}", "question": "?"} for q in range(20) for a in range(1 + q % 4)]
    picked = sample_questions(records, 15, seed=3)
    assert len(picked) <= 15 and picked == [r for r in records if r in picked]  # a subset, in input order
    chosen = {r["question_id"] for r in picked}
    assert all(r in picked for r in records if r["question_id"] in chosen)  # every answer of a chosen question
    assert sample_questions(records, 15, seed=3) == picked and sample_questions(records, 15, seed=4) != picked
    assert sample_questions(records, None, seed=3) == records


def test_backbone_layers_keeps_the_first_layers_and_saves_an_ordinary_shallower_model(tmp_path):
    """model.backbone_layers: n. The head reads layer n's state after the final norm (here from the uncut model's
    own hidden states, in float64); the saved judge is n layers deep, holds no weight of the layers cut, and
    loads and scores as the trained one."""
    from transformers import AutoModel, AutoTokenizer, Qwen2Config

    from eval_suite.models.backbones import smollm2_path
    from eval_suite.models.loading import load_model
    from processing_orca import encode_fields, input_variants
    from training.model import build_model

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, vocab_size=len(tokenizer))
    AutoModel.from_config(config).save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    cfg = load_run_config(None, ["--model.backbone", str(tmp_path / "lm"), "--model.backbone_layers", "2"])
    model, tok = build_model(cfg)
    model.eval()
    assert len(model.backbone.layers) == 2
    assert model.config.backbone_config.num_hidden_layers == 2 and len(model.config.backbone_config.layer_types) == 2

    uncut = AutoModel.from_pretrained(tmp_path / "lm").eval()
    ids = encode_fields([input_variants(r, model.config)[0] for r in RECORDS], tok, model.config)
    want = []
    with torch.no_grad():
        for i in ids:
            hidden = uncut(torch.tensor([i]), output_hidden_states=True).hidden_states[2][0, -1]  # after layer 2
            z = model.score_head(uncut.norm(hidden[None]))[0].double()  # (5,)
            want.append(float((torch.softmax(z, 0) * torch.arange(1, 6, dtype=torch.float64)).sum()))
    got = [p["mean"] for p in model.predict(RECORDS, tok)]
    assert got == pytest.approx(want, abs=1e-5)
    full = [p["mean"] for p in build_model(load_run_config(None, ["--model.backbone", str(tmp_path / "lm")]))[0].eval().predict(RECORDS, tok)]
    assert max(abs(a - b) for a, b in zip(got, full)) > 1e-3  # the third layer mattered: the test can fail

    model.save_pretrained(tmp_path / "judge")
    tok.save_pretrained(tmp_path / "judge")
    from safetensors import safe_open

    with safe_open(tmp_path / "judge" / "model.safetensors", framework="pt") as fh:
        assert not [k for k in fh.keys() if ".layers.2." in k]
    loaded, loaded_tok = load_model(str(tmp_path / "judge"))
    assert len(loaded.backbone.layers) == 2
    assert [p["mean"] for p in loaded.predict(RECORDS, loaded_tok)] == pytest.approx(got, abs=1e-6)


@pytest.mark.parametrize("n", [0, 4])
def test_backbone_layers_out_of_range_is_refused(n):
    from training.model import build_model

    cfg = load_run_config(None, ["--model.backbone", "tiny-llama", "--model.backbone_layers", str(n)])
    with pytest.raises(SystemExit, match=f"backbone_layers is {n}; the backbone has 2 layers"):
        build_model(cfg)


def test_backbone_layers_needs_a_causal_decoder():
    from training.model import build_model

    cfg = load_run_config(None, ["--model.backbone", "tiny-bert", "--model.backbone_layers", "1"])
    with pytest.raises(SystemExit, match="causal decoder"):
        build_model(cfg)
