"""What the Hub file does to its process and its model: `predict` leaves the model exactly as it was (weights,
config, every module's attention-related attributes, train/eval modes), also when it fails half-way; a checkpoint
loads and runs without scipy; the Beta bin masses computed in torch equal scipy's; hidden states and attentions
pass through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from configuration_orca import OrcaConfig
from modeling_orca import OrcaForCorrectnessDistribution, betainc, distribution_statistics
from training.model import tiny_backbone_config

REPO = Path(__file__).resolve().parents[1]

RECORDS = [
    dict(id=f"{q}-{a}", question=question, reference=["violin", "fiddle"], rationale="A solo violin plays.",
         candidate=f"answer {a} " + "word " * a, ratings=[1 + a % 5])
    for q, question in enumerate(["Which instrument plays?", "How many speakers are there?", "What is the mood?"])
    for a in range(5)
]  # fmt: skip


def tiny(kind="llama", attn="sdpa", **kw):
    from transformers import AutoModel

    torch.manual_seed(0)
    backbone = AutoModel.from_config(tiny_backbone_config(kind, 49152), attn_implementation=attn)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone.config, **kw), backbone=backbone)
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    return model


def snapshot(model) -> dict:
    """Everything `predict` could change: weights, both configs, each module (same object, same children, train
    mode and plain attributes such as is_causal, sliding_window, scaling, layer_idx) and transformers' registry
    of attention functions."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    modules = {}
    for name, module in model.named_modules():
        plain = {k: v for k, v in vars(module).items() if isinstance(v, (bool, int, float, str, type(None)))}
        children = {k: id(v) for k, v in module._modules.items()}
        modules[name] = (id(module), type(module).__name__, module.training, plain, children, sorted(module._forward_hooks))
    return dict(
        state={k: v.clone() for k, v in model.state_dict().items()},
        config=json.dumps(model.config.to_dict(), sort_keys=True, default=str),
        backbone_config=json.dumps(model.backbone.config.to_dict(), sort_keys=True, default=str),
        attn=(model.config._attn_implementation, model.backbone.config._attn_implementation),
        modules=modules,
        attention_functions=sorted(ALL_ATTENTION_FUNCTIONS.keys()),
    )


def assert_same_state(before, after):
    assert before["state"].keys() == after["state"].keys()
    for k, v in before["state"].items():
        assert torch.equal(v, after["state"][k]), k
    for key in ("config", "backbone_config", "attn", "attention_functions"):
        assert before[key] == after[key], key
    assert before["modules"].keys() == after["modules"].keys()
    for name, value in before["modules"].items():
        assert value == after["modules"][name], name


@pytest.mark.parametrize("kind, attn, share", [("llama", "sdpa", True), ("gemma3", "eager", True), ("llama", "sdpa", False)])
def test_predict_leaves_the_model_as_it_was(kind, attn, share, smollm2_tokenizer):
    model = tiny(kind, attn, score_type="beta")
    model.train()
    model.backbone.layers[0].eval()  # a mixed train/eval state comes back as it was, not as all-train
    before = snapshot(model)
    preds = model.predict(RECORDS, smollm2_tokenizer, max_batch_tokens=256, share_prefix=share)
    assert len(preds) == len(RECORDS)
    assert_same_state(before, snapshot(model))


@pytest.mark.parametrize("share", [True, False])
def test_predict_leaves_the_model_as_it_was_after_an_error_half_way(share, smollm2_tokenizer, monkeypatch):
    model = tiny("llama", "sdpa", score_type="multinomial").train()
    before = snapshot(model)
    calls = []
    forward = model.backbone.norm.forward  # the backbone's last layer: runs once per batch

    def fail_on_second_batch(x):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("backbone failed")
        return forward(x)

    monkeypatch.setattr(model.backbone.norm, "forward", fail_on_second_batch)
    with pytest.raises(RuntimeError, match="backbone failed"):
        model.predict(RECORDS, smollm2_tokenizer, max_batch_tokens=64, share_prefix=share)
    assert len(calls) == 2  # it failed half-way, after a batch went through
    monkeypatch.undo()
    assert_same_state(before, snapshot(model))


def test_a_checkpoint_loads_and_runs_without_scipy(tmp_path, smollm2_tokenizer):
    model = tiny("llama", "sdpa", score_type="beta").eval()
    model.save_pretrained(tmp_path)
    smollm2_tokenizer.save_pretrained(tmp_path)
    want = model.predict(RECORDS[:4], smollm2_tokenizer)
    script = textwrap.dedent(f"""
        import json, sys

        sys.modules["scipy"] = None  # as if not installed: find_spec gives None, `import scipy` raises ImportError
        import torch
        from transformers import AutoModel, AutoTokenizer
        folder = {str(tmp_path)!r}
        model = AutoModel.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        out = model.eval()(input_ids=torch.tensor([[1, 2, 3, 4]]))
        assert out.probs is not None and abs(float(out.probs.sum()) - 1) < 1e-5
        records = json.loads({json.dumps(RECORDS[:4])!r})
        print(json.dumps(model.predict(records, tokenizer)))
        assert sys.modules["scipy"] is None
    """)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for a, b in zip(got, want):
        assert a["mean"] == pytest.approx(b["mean"], abs=1e-6) and a["probs"] == pytest.approx(b["probs"], abs=1e-6)


def test_betainc_equals_scipy_over_the_whole_parameter_range():
    from scipy.special import betainc as scipy_betainc

    # log alpha, log beta over the clamped range (beta_log_param_limit = 15), and random typical heads
    grid = torch.linspace(-15, 15, 31, dtype=torch.float64)
    la, lb = torch.meshgrid(grid, grid, indexing="ij")
    g = torch.Generator().manual_seed(0)
    la = torch.cat([la.flatten(), torch.randn(200, generator=g, dtype=torch.float64) * 2])
    lb = torch.cat([lb.flatten(), torch.randn(200, generator=g, dtype=torch.float64) * 2])
    a, b = la.exp()[:, None], lb.exp()[:, None]
    x = torch.tensor([[0.2, 0.4, 0.6, 0.8, 1e-3, 0.999]], dtype=torch.float64)
    got = betainc(a, b, x).numpy()
    want = scipy_betainc(a.numpy(), b.numpy(), x.numpy())
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_beta_bin_probs_equal_scipy_and_skip_in_training():
    from scipy.special import betainc as scipy_betainc

    config = OrcaConfig(backbone_config=tiny_backbone_config("llama", 100), score_type="beta")
    logits = torch.randn(50, 2, generator=torch.Generator().manual_seed(1)) * 3
    _, _, probs = distribution_statistics(logits, config)
    alpha, beta = logits.double().clamp(-15, 15).exp().unbind(-1)
    cdf = scipy_betainc(alpha[:, None].numpy(), beta[:, None].numpy(), np.linspace(0, 1, 6)[None])
    np.testing.assert_allclose(probs.numpy(), np.diff(cdf, axis=1), atol=1e-6)
    assert distribution_statistics(logits, config, with_probs=False)[2] is None
    model = OrcaForCorrectnessDistribution(config)
    ids = torch.tensor([[5, 6, 7]])
    assert model.train()(input_ids=ids).probs is None and model.eval()(input_ids=ids).probs.shape == (1, 5)


@pytest.mark.parametrize("kind, pooling", [("llama", "last"), ("bert", "cls")])
def test_hidden_states_and_attentions_pass_through(kind, pooling):
    from transformers import AutoModel

    torch.manual_seed(0)
    backbone = AutoModel.from_config(tiny_backbone_config(kind, 100), attn_implementation="eager")
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone.config, pooling=pooling), backbone=backbone).eval()
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    plain = model(input_ids=ids, attention_mask=mask)
    assert plain.hidden_states is None and plain.attentions is None
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    layers = backbone.config.num_hidden_layers
    assert len(out.hidden_states) == layers + 1 and len(out.attentions) == layers
    assert out.hidden_states[0].shape == (2, 4, backbone.config.hidden_size)
    assert out.attentions[0].shape == (2, backbone.config.num_attention_heads, 4, 4)
    direct = backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    torch.testing.assert_close(out.hidden_states[-1][0], direct.hidden_states[-1][0])  # row 0: no padding
    torch.testing.assert_close(out.logits, plain.logits)
