"""Prefix-tree rows in training (`pack_prefix_tree` + `forward(..., position_ids, pool_index)`): the loss and every
parameter gradient equal those of each input alone in its own row, in float64, on tiny Llama, OLMo-2 and Gemma 3 (with
sliding-window layers), all three heads, LoRA and full fine-tuning, dropout off."""

from __future__ import annotations

import pytest
import torch

from configuration_orca import OrcaConfig
from modeling_orca import OrcaForCorrectnessDistribution, pad_ratings
from packing_orca import pack_prefix_tree, prefix_tree_rows
from training.model import tiny_backbone_config

VOCAB = 300
PAD = 0


def grouped_inputs(seed=0):
    """(token ids, group of each, ratings): 3 questions with shared starts of 14-40 tokens and 2-5 answers each,
    one answer a prefix of another, one duplicate; questions interleaved."""
    g = torch.Generator().manual_seed(seed)
    ids, groups, ratings = [], [], []
    for q, (start, answers) in enumerate([(14, 3), (40, 5), (22, 2)]):
        prefix = torch.randint(1, VOCAB, (start,), generator=g).tolist()
        for a in range(answers):
            tail = torch.randint(1, VOCAB, (1 + (3 * a + q) % 7,), generator=g).tolist()
            ids.append(prefix + tail)
            groups.append(q)
            ratings.append(torch.randint(1, 6, (1 + a % 3,), generator=g).tolist())
    ids.append(ids[4][:-1])  # an input that ends inside another one's branch
    groups.append(groups[4])
    ratings.append([2, 4])
    ids.append(list(ids[1]))  # a duplicate
    groups.append(groups[1])
    ratings.append([5])
    order = torch.randperm(len(ids), generator=g).tolist()
    return [ids[i] for i in order], [groups[i] for i in order], [ratings[i] for i in order]


def tiny_model(kind, attn, score_type, lora):
    from transformers import AutoModel

    torch.manual_seed(0)
    backbone_config = tiny_backbone_config(kind, VOCAB)
    if kind == "gemma3":  # a 16-token window on the first layer; the rows are longer
        backbone_config.layer_types = ["sliding_attention", "full_attention"]
    backbone = AutoModel.from_config(backbone_config, attn_implementation=attn)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone.config, score_type=score_type), backbone=backbone)
    torch.nn.init.normal_(model.score_head.weight, std=0.3)
    model = model.double().train()  # dropout probabilities are 0 in the tiny configs
    assert not any(m.p for m in model.modules() if isinstance(m, torch.nn.Dropout))
    if lora:
        from peft import LoraConfig, get_peft_model

        # init_lora_weights=False: B is random too, so every LoRA matrix gets a non-zero gradient
        config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj"],
                            modules_to_save=["score_head"], init_lora_weights=False)  # fmt: skip
        model = get_peft_model(model, config)
        model.double()
    return model


def grads_of(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def one_row_each(model, ids, ratings):
    """(logits, loss, gradients) with each input alone in its own unpadded row: the loss is the mean over inputs."""
    model.zero_grad(set_to_none=True)
    logits, losses = [], []
    for i, row in enumerate(ids):
        out = model(input_ids=torch.tensor([row]), ratings=ratings[i : i + 1])
        (out.loss / len(ids)).backward()
        logits.append(out.logits.detach())
        losses.append(out.loss.detach())
    return torch.cat(logits), torch.stack(losses).mean(), grads_of(model)


def tree_rows(model, packed, ratings):
    model.zero_grad(set_to_none=True)
    out = model(**packed, ratings=ratings)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), grads_of(model)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("score_type", ["beta", "multinomial", "bernoulli"])
@pytest.mark.parametrize("kind, attn", [("llama", "sdpa"), ("olmo2", "sdpa"), ("gemma3", "sdpa"), ("gemma3", "eager")])
def test_tree_rows_give_the_loss_and_gradients_of_one_row_per_input(kind, attn, score_type, lora):
    model = tiny_model(kind, attn, score_type, lora)
    ids, groups, ratings = grouped_inputs()
    ratings = pad_ratings(ratings)
    plain_logits, plain_loss, plain_grads = one_row_each(model, ids, ratings)
    packed = pack_prefix_tree(ids, PAD, groups=groups)
    assert packed["input_ids"].shape[0] == 3 and packed["attention_mask"].shape[1:] == (1, *packed["input_ids"].shape[1:] * 2)
    tree_logits, tree_loss, tree_grads = tree_rows(model, packed, ratings)

    # float64, but the backbones compute their RMSNorms (and eager attention its softmax) in float32: agreement to
    # float32's precision (the differences seen are up to ~5e-6 relative), while a wrong mask gives differences of 1e-2
    torch.testing.assert_close(tree_logits, plain_logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tree_loss, plain_loss, rtol=1e-5, atol=1e-6)
    assert plain_grads.keys() == tree_grads.keys()
    assert len(plain_grads) > (4 if lora else 10)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(tree_grads[name], grad, rtol=1e-4, atol=1e-5 * float(grad.abs().max()), msg=name)
    if lora:  # the LoRA matrices and the head are trained, the base weights are frozen
        assert any("lora_A" in n for n in plain_grads) and not any("base_layer" in n for n in plain_grads)
    assert all(g.abs().sum() > 0 for n, g in plain_grads.items() if "lora" in n or "score_head" in n)


def test_packing_shares_each_prefix_once_per_group_in_input_order():
    ids, groups, _ = grouped_inputs()
    packed = pack_prefix_tree(ids, PAD, groups=groups)
    # one row per question; its real tokens are the distinct prefixes of its inputs
    assert packed["input_ids"].shape[0] == 3
    distinct = {(g, tuple(t[: k + 1])) for t, g in zip(ids, groups) for k in range(len(t))}
    real = packed["attention_mask"][:, 0].diagonal(dim1=-2, dim2=-1) & (packed["input_ids"] != PAD)
    assert int(real.sum()) == len(distinct) < sum(map(len, ids))
    # each input's pooled node holds its last token at position len - 1, and its ancestors are its own tokens
    for i, (row, node) in enumerate(packed["pool_index"].tolist()):
        assert packed["input_ids"][row, node] == ids[i][-1] and packed["position_ids"][row, node] == len(ids[i]) - 1
        seen = packed["attention_mask"][row, 0, node].nonzero().flatten()
        assert packed["input_ids"][row, seen].tolist() == ids[i]
    # without groups every input shares one trie; max_row_tokens splits it
    assert pack_prefix_tree(ids, PAD)["input_ids"].shape[0] == 1
    small = pack_prefix_tree(ids, PAD, max_row_tokens=50)
    assert small["input_ids"].shape[0] > 1 and (small["attention_mask"][:, 0].sum(-1) > 0).all()
    with pytest.raises(ValueError, match="input 1 has no tokens"):
        pack_prefix_tree([[1, 2], []], PAD)


def test_small_groups_share_rows_up_to_max_row_tokens_and_stay_exact():
    """Several questions' tries merged into one row (less padding in `predict`'s batches, a common start such as an
    instruction computed once per row): each input still sees exactly its own tokens at its own positions, no row
    passes `max_row_tokens`, and the loss and gradients are those of one row per input."""
    ids, groups, ratings = grouped_inputs()
    instruction = [7, 8, 9, 10, 11]
    ids = [instruction + t for t in ids]
    sizes = sorted(len(r.tokens) for r in prefix_tree_rows(ids, groups))  # one trie per question: 31, 36, 64 tokens
    assert len(sizes) == 3 and sizes[0] + sizes[1] - len(instruction) <= sizes[2]
    shared = len(instruction)
    # (max_row_tokens, rows, real tokens): all in one row, the instruction once; the largest alone, the others
    # together; smaller than the largest, which splits (only the limit and exactness are checked)
    for limit, n_rows, real_tokens in ((sum(sizes) - 2 * shared, 1, sum(sizes) - 2 * shared), (sum(sizes) - 2 * shared - 1, 2, sum(sizes) - shared),
                                       (sizes[2], 2, sum(sizes) - shared), (max(map(len, ids)) + 2, None, None)):  # fmt: skip
        packed = pack_prefix_tree(ids, PAD, groups=groups, max_row_tokens=limit)
        real = packed["attention_mask"][:, 0].diagonal(dim1=-2, dim2=-1) & (packed["input_ids"] != PAD)
        if n_rows:
            assert (packed["input_ids"].shape[0], int(real.sum())) == (n_rows, real_tokens), limit
        assert int(real.sum(-1).max()) <= limit
        for i, (row, node) in enumerate(packed["pool_index"].tolist()):
            seen = packed["attention_mask"][row, 0, node].nonzero().flatten()
            assert packed["input_ids"][row, seen].tolist() == ids[i]
            assert packed["position_ids"][row, seen].tolist() == list(range(len(ids[i])))
    model = tiny_model("llama", "sdpa", "multinomial", lora=False)
    ratings = pad_ratings(ratings)
    plain_logits, plain_loss, plain_grads = one_row_each(model, ids, ratings)
    tree_logits, tree_loss, tree_grads = tree_rows(model, pack_prefix_tree(ids, PAD, groups=groups, max_row_tokens=sum(sizes)), ratings)
    torch.testing.assert_close(tree_logits, plain_logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tree_loss, plain_loss, rtol=1e-5, atol=1e-6)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(tree_grads[name], grad, rtol=1e-4, atol=1e-5 * float(grad.abs().max()), msg=name)


@pytest.mark.parametrize("kind, pooling", [("bert", "cls"), ("llama", "mean")])
def test_tree_rows_are_refused_where_they_would_not_be_exact(kind, pooling):
    torch.manual_seed(0)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=tiny_backbone_config(kind, VOCAB), pooling=pooling))
    assert not model.prefix_sharing_supported
    ids, groups, _ = grouped_inputs()
    with pytest.raises(ValueError, match="prefix-tree rows need a causal decoder pooled at the last token"):
        model(**pack_prefix_tree(ids, PAD, groups=groups))
    with pytest.raises(ValueError, match="needs position_ids and pool_index"):
        packed = pack_prefix_tree(ids, PAD, groups=groups)
        model(input_ids=packed["input_ids"], attention_mask=packed["attention_mask"])
