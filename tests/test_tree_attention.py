"""The two CPU savings of `predict` beyond prefix sharing: prefix-tree rows attend in chunks of queries (each chunk
against the keys up to its last query, grouped-query attention in the kernel), and the backbone's last layer runs
its MLP at the pooled positions only. Both are checked against an independent computation and against scoring each
input through `forward` alone, and both leave the model as it was, on success or on error."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_prefix_sharing import assert_same, one_by_one, records, tiny

from modeling_orca import tree_attention_forward


def random_tree_mask(batch: int, length: int, offset: int, generator) -> torch.Tensor:
    """(B, 1, T, offset + T) bool: every query sees the `offset` cached keys, itself and its ancestors in a random
    tree whose parents come before their children (a prefix-tree row); the last rows are padding seeing only
    themselves."""
    mask = torch.zeros(batch, 1, length, offset + length, dtype=torch.bool)
    mask[..., :offset] = True
    for b in range(batch):
        real = length - 3 * b  # shorter rows, padded
        for i in range(length):
            if i >= real:
                mask[b, 0, i, offset + i] = True
                continue
            if i:
                parent = int(torch.randint(-1, i, (1,), generator=generator))
                if parent >= 0:
                    mask[b, 0, i] = mask[b, 0, parent]
            mask[b, 0, i, offset + i] = True
    return mask


def attention_float64(query, key, value, mask, scale):
    """Masked softmax attention in float64, key/value heads repeated for their query heads: (B, T, Hq, D)."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.double().repeat_interleave(groups, 1), value.double().repeat_interleave(groups, 1)
    scores = (query.double() @ key.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ value).transpose(1, 2)


@pytest.mark.parametrize("chunk", [1, 3, 8, 64])
@pytest.mark.parametrize("offset", [0, 5])
@pytest.mark.parametrize("heads", [(4, 2), (4, 4)])
def test_tree_attention_equals_masked_attention(chunk, offset, heads):
    generator = torch.Generator().manual_seed(chunk * 10 + offset)
    q_heads, kv_heads = heads
    batch, length, dim = 3, 21, 8
    query = torch.randn(batch, q_heads, length, dim, generator=generator)
    key = torch.randn(batch, kv_heads, offset + length, dim, generator=generator)
    value = torch.randn(batch, kv_heads, offset + length, dim, generator=generator)
    mask = random_tree_mask(batch, length, offset, generator)
    module = SimpleNamespace(is_causal=True, num_key_value_groups=q_heads // kv_heads)
    out, weights = tree_attention_forward(module, query, key, value, mask, scaling=dim**-0.5, query_chunk=chunk)
    assert weights is None and out.shape == (batch, length, q_heads, dim)
    torch.testing.assert_close(out.double(), attention_float64(query, key, value, mask, dim**-0.5), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_predict_attends_in_query_chunks_and_equals_forward(kind, smollm2_tokenizer, monkeypatch):
    model = tiny(kind, len(smollm2_tokenizer))
    if kind == "gemma3":
        model.backbone.config.sliding_window = 128  # rows fit the window (16 in the tiny config: nothing is shared)
    model.tree_attention_queries = 4  # the tiny rows are longer than 4 tokens
    recs = records()
    seen = []  # (attention implementation, query length, key length) of each attention call of the shared path
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, **kwargs):
        seen.append((model.backbone.config._attn_implementation, query.shape[2], key.shape[2]))
        return sdpa(query, key, value, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    shared = model.predict(recs, smollm2_tokenizer, batch_size=2)
    chunked = [(q, k) for name, q, k in seen if name == "orca_tree_sdpa_4"]
    assert chunked and max(q for q, _ in chunked) <= 4
    assert any(k > q for q, k in chunked)  # a chunk sees the keys before it, not the rest of the row
    monkeypatch.undo()
    assert [p["mean"] for p in shared] == pytest.approx(one_by_one(model, recs, smollm2_tokenizer), abs=1e-5)
    model.tree_attention_queries = None  # transformers' SDPA on the whole row
    assert_same(shared, model.predict(recs, smollm2_tokenizer, batch_size=2))


@pytest.mark.parametrize("share", [True, False])
def test_last_layer_mlp_runs_at_pooled_positions_only(share, smollm2_tokenizer):
    model = tiny("llama", len(smollm2_tokenizer))
    recs = records()
    mlp = model.backbone.layers[-1].mlp
    rows = []
    handle = mlp.register_forward_hook(lambda module, args, out: rows.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))
    pruned = model.predict(recs, smollm2_tokenizer, share_prefix=share)
    distinct = len(recs) - 1  # one duplicate input, scored once
    assert sum(rows) == distinct
    rows.clear()
    model.prune_last_mlp = False
    full = model.predict(recs, smollm2_tokenizer, share_prefix=share)
    assert sum(rows) > 5 * distinct  # every token of every row
    handle.remove()
    assert_same(pruned, full)
    assert [p["mean"] for p in pruned] == pytest.approx(one_by_one(model, recs, smollm2_tokenizer), abs=1e-5)


def test_the_model_is_left_as_it_was_after_an_error(smollm2_tokenizer, monkeypatch):
    model = tiny("llama", len(smollm2_tokenizer))
    model.tree_attention_queries = 4
    mlp = model.backbone.layers[-1].mlp

    def fail(*args, **kwargs):
        raise RuntimeError("head failed")

    monkeypatch.setattr(model.score_head, "forward", fail)
    with pytest.raises(RuntimeError, match="head failed"):
        model.predict(records(), smollm2_tokenizer)
    assert model.backbone.config._attn_implementation == "sdpa"
    assert model.backbone.layers[-1].mlp is mlp
    monkeypatch.undo()
    model.predict(records(), smollm2_tokenizer)
    assert model.backbone.config._attn_implementation == "sdpa" and model.backbone.layers[-1].mlp is mlp
