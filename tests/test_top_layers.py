"""LoRA on the top layers of a frozen backbone from cached states of the layer below (training/top_layers.py): the
same losses and gradients as the whole model's forward, evaluations equal to `predict`, caches kept apart by layer,
a run that trains, resumes and saves an ordinary ORCA model, and configs that cannot work refused."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_llama_orca
from test_frozen_training import RECORDS, tiny_frozen_run

import train
from dataset_builder.configs import default_data_dir
from modeling_orca import pad_ratings
from training.config import load_run_config
from training.frozen import head_loss
from training.state_cache import CachedStatesJudge, StateCache
from training.top_layers import add_top_lora, num_layers, pooled_from_layer

LORA = {"lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "auto"}}


def tiny_qwen2_orca():
    """A 3-layer random Qwen2 ORCA (biases on q, k, v; grouped-query attention) with SmolLM2's tokenizer."""
    from transformers import Qwen2Config

    from configuration_orca import OrcaConfig
    from modeling_orca import OrcaForCorrectnessDistribution

    _, tokenizer = tiny_llama_orca()
    torch.manual_seed(0)
    backbone = Qwen2Config(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=64, vocab_size=len(tokenizer))
    return OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone)), tokenizer


def tiny_gemma3_orca():
    """A 2-layer random Gemma 3 ORCA, a 16-token sliding window on its first layer (the inputs are longer)."""
    from configuration_orca import OrcaConfig
    from modeling_orca import OrcaForCorrectnessDistribution
    from training.model import tiny_backbone_config

    _, tokenizer = tiny_llama_orca()
    torch.manual_seed(0)
    backbone = tiny_backbone_config("gemma3", len(tokenizer))
    backbone.layer_types = ["sliding_attention", "full_attention"]
    return OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone)), tokenizer


def adapted(model, k: int):
    """(model, peft wrapper of its backbone): frozen, in eval mode, LoRA on its last k layers, the adapters' B
    random (not 0) so that every adapter weight gets a gradient."""
    model.eval()
    for p in model.backbone.parameters():
        p.requires_grad_(False)
    wrapper = add_top_lora(model, LORA, k)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.backbone.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model, wrapper


@pytest.mark.parametrize("build,k", [(tiny_llama_orca, 1), (tiny_qwen2_orca, 2), (tiny_qwen2_orca, 3), (tiny_gemma3_orca, 1)])
def test_the_top_layers_from_the_cache_give_the_whole_model_s_losses_and_gradients(tmp_path, build, k):
    from packing_orca import pad_token_ids
    from processing_orca import encode_fields, input_variants

    model, tokenizer = build()
    cache = StateCache(tmp_path, model, layer=num_layers(model) - k)  # before the adapters, as the curriculum does
    model, _ = adapted(model, k)
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n, _ in trained) and any("score_head" in n for n, _ in trained)
    ids = encode_fields([input_variants(r, model.config)[0] for r in RECORDS], tokenizer, model.config)
    input_ids, mask = pad_token_ids(ids, tokenizer.pad_token_id)
    out = model(input_ids=input_ids, attention_mask=mask, ratings=pad_ratings([r["ratings"] for r in RECORDS]))
    out.loss.backward()
    want = {n: p.grad.clone() for n, p in trained}
    model.zero_grad()

    states = [s[0] for s in cache.states(model, tokenizer, RECORDS)]  # (tokens, H) each, computed on prefix-tree rows
    assert [len(s) for s in states] == [len(i) for i in ids]
    loss = head_loss(model, pooled_from_layer(model, states, cache.layer, max_batch_tokens=40), [r["ratings"] for r in RECORDS])
    loss.backward()
    torch.testing.assert_close(loss, out.loss, rtol=1e-6, atol=1e-6)
    for name, p in trained:
        torch.testing.assert_close(p.grad, want[name], rtol=1e-5, atol=1e-7, msg=name)


def test_the_cached_judge_equals_predict_before_and_after_merging_and_reads_the_cache_back(tmp_path, monkeypatch):
    model, tokenizer = tiny_qwen2_orca()
    model.config.reference_mode = "max"  # several input variants per record
    cache = StateCache(tmp_path, model, layer=1)
    model, wrapper = adapted(model, 2)
    want = model.predict(RECORDS, tokenizer)
    got = CachedStatesJudge(model, cache).predict(RECORDS, tokenizer)
    for a, b in zip(got, want):
        assert a["mean"] == pytest.approx(b["mean"], abs=1e-5) and a["variance"] == pytest.approx(b["variance"], abs=1e-5)
    model.backbone = wrapper.merge_and_unload()  # what the run saves
    merged = CachedStatesJudge(model, cache).predict(RECORDS, tokenizer)
    assert [p["mean"] for p in merged] == pytest.approx([p["mean"] for p in got], abs=1e-5)
    # a second cache on the same backbone (as a resumed run makes it, before the adapters) reads the shards back
    import training.top_layers

    again = StateCache(tmp_path, tiny_qwen2_orca()[0], layer=1)
    monkeypatch.setattr(training.top_layers, "layer_states", lambda *a, **k: pytest.fail("computed a cached state again"))
    assert [p["mean"] for p in CachedStatesJudge(model, again).predict(RECORDS, tokenizer)] == [p["mean"] for p in merged]


@pytest.mark.real
@pytest.mark.skipif(not (default_data_dir() / "evouna_nq" / "NQ.json").exists(), reason="real data not found (ORCA_DATA_DIR)")
@pytest.mark.parametrize("backbone,k", [("smollm2", 3), ("gemma3-270m", 2)])
def test_the_top_layers_on_cached_states_score_as_predict_on_real_backbones(tmp_path, backbone, k):
    """SmolLM2-135M and Gemma 3 270M (sliding-window layers), 12 EVOUNA-NQ answers: the layers above a cached layer
    give `predict`'s means (no adapters: the backbone as it is)."""
    import dataset_builder
    from eval_suite.models.backbones import BACKBONES
    from modeling_orca import OrcaForCorrectnessDistribution

    records = dataset_builder.load_config("s3_evouna_nq")["test"].to_list()[:12]
    torch.manual_seed(0)
    model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(BACKBONES[backbone](), score_type="multinomial")
    torch.nn.init.normal_(model.score_head.weight, std=0.05)
    want = [p["mean"] for p in model.predict(records, tokenizer)]
    got = CachedStatesJudge(model, StateCache(tmp_path, model, layer=num_layers(model) - k)).predict(records, tokenizer)
    assert [p["mean"] for p in got] == pytest.approx(want, abs=1e-5)


def test_pooled_states_by_layer_are_each_layer_s_output_at_the_last_token():
    """layer_states(pooled_by_layer=True): each input's last-token state after every layer, from prefix-tree rows,
    twice (a second call must not record a layer twice), equals the hidden states transformers returns for that
    input alone, unpadded, on an identical model never run through a view (its last one after the final norm)."""
    from processing_orca import encode_fields, input_variants
    from training.top_layers import layer_states

    model, tokenizer = tiny_qwen2_orca()
    model.eval()
    layer_states(model, tokenizer, RECORDS[:3], num_layers(model), pooled_by_layer=True)
    states, owner = layer_states(model, tokenizer, RECORDS, num_layers(model), pooled_by_layer=True)
    assert owner == list(range(len(RECORDS)))  # one input variant per record here
    reference = tiny_qwen2_orca()[0].backbone.eval()  # the same seed: the same weights
    ids = encode_fields([input_variants(r, model.config)[0] for r in RECORDS], tokenizer, model.config)
    with torch.no_grad():
        for got, i in zip(states, ids):
            want = reference(input_ids=torch.tensor([i]), output_hidden_states=True).hidden_states  # embeddings, layers
            assert got.shape == (num_layers(model), model.config.backbone_config.hidden_size)
            torch.testing.assert_close(got[:-1], torch.stack([h[0, -1] for h in want[1:-1]]), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(reference.norm(got[-1]), want[-1][0, -1], rtol=1e-5, atol=1e-5)


def test_caches_of_other_layers_are_other_folders(tmp_path):
    model, tokenizer = tiny_qwen2_orca()
    folders = {StateCache(tmp_path, model, layer=layer).folder for layer in (None, 0, 1, 2)}
    assert len(folders) == 4
    pooled = StateCache(tmp_path, model)
    assert pooled.folder == StateCache(tmp_path, model, layer=None).folder  # pooled states stay where they were


def test_a_torn_layer_shard_is_computed_again(tmp_path):
    model, tokenizer = tiny_qwen2_orca()
    cache = StateCache(tmp_path, model, layer=2)
    want = cache.states(model, tokenizer, RECORDS)
    shard = next(cache.folder.glob("shard-*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:200])
    fresh = StateCache(tmp_path, model, layer=2)
    assert not fresh.index
    for a, b in zip(fresh.states(model, tokenizer, RECORDS), want):
        assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


class LastIsBest:
    """Early stopping that keeps the last evaluation's weights (a tiny random model's dev Spearman is noise)."""

    def __init__(self, patience):
        self.best, self.should_stop = None, False

    def update(self, value):
        self.best = value
        return True


def test_a_run_with_top_layers_trains_resumes_and_saves_an_ordinary_model(tmp_path, monkeypatch):
    import training.frozen

    monkeypatch.setattr(training.frozen, "EarlyStopping", LastIsBest)
    cfg, files = tiny_frozen_run(tmp_path, 48, ["--lora.r", "4", "--lora.alpha", "4", "--stages.s3.top_layers", "1", "--training.eval_every", "4"],
                                 {"s1": {"max_steps": 6, "lr": 1e-2, "max_items": 32}, "s3": {"max_steps": 8, "lr": 1e-2, "top_layers": 1}})
    before = {k: v.clone() for k, v in tiny_llama_orca()[0].backbone.state_dict().items()}
    results = train.run(cfg)
    assert results["stages"]["s3"]["top_layers"] == 1 and results["stages"]["s1"]["top_layers"] == 0
    assert results["stages"]["s3"]["best_step"] == 8
    from eval_suite.models.loading import load_model

    model, tokenizer = load_model(str(tmp_path / "run" / "final"))
    state = model.backbone.state_dict()
    assert set(state) == set(before)  # adapters merged: an ordinary model
    changed = {name for name in state if not torch.equal(state[name], before[name])}
    assert changed and all(name.startswith("layers.1.") for name in changed)  # only the top layer moved
    preds = [json.loads(line) for line in (tmp_path / "run" / "test_predictions.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in open(files["test"])]
    direct = model.predict(records, tokenizer)  # the cached evaluation is what the saved model gives
    assert [p["mean"] for p in preds] == pytest.approx([p["mean"] for p in direct], abs=1e-5)
    again = train.run(cfg, resume=True)  # finished stages (head and adapters) loaded, not trained again
    assert again["test"]["orca"] == pytest.approx(results["test"]["orca"], abs=1e-6)


@pytest.mark.parametrize("overrides,message", [
    (["--stages.s3.top_layers", "2"], "needs training.frozen_backbone"),
    (["--training.frozen_backbone", "true", "--lora.enabled", "false", "--stages.s3.top_layers", "2"], "set lora.enabled true"),
    (["--training.frozen_backbone", "true", "--stages.s2.top_layers", "1", "--stages.s3.top_layers", "2"], "different top_layers"),
    (["--training.frozen_backbone", "true", "--stages.s2.top_layers", "2"], "head-only stage follows"),
    (["--training.frozen_backbone", "true", "--stages.s3.top_layers", "2", "--lora.target_modules", "q_proj"], "list of module names"),
])
def test_top_layers_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(SystemExit, match=message):
        load_run_config(None, ["--model.backbone", "tiny-llama", *overrides])
