"""The head registry (heads_orca.HEADS): every head, and a toy fourth one registered in a local copy, against an
independent float64 computation (scipy.stats, torch.distributions); the contract every head keeps (shapes, ranges,
the calibration's inverse and shift direction); the model, its loss, `predict` and the calibration running a new
head with nothing but a registry entry; and no code outside the heads branching on a head's name."""

from __future__ import annotations

import math
import os
import re
import typing
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import special, stats

import configuration_orca
import heads_orca
from configuration_orca import OrcaConfig
from eval_suite.scoring.calibration import fit_affine, fold_into_head, head_outputs
from heads_orca import HEADS, OrcaHead, head_for
from modeling_orca import check_ratings, distribution_statistics, pad_ratings, ratings_nll
from tests.conftest import REPO, tiny_llama_orca


class BinomialHead(OrcaHead):
    """A toy fourth head: 1 logit, rating - 1 ~ Binomial(K - 1, sigmoid(z))."""

    num_outputs = 1

    def log_pmf(self, logits):  # (B, K): log P(rating = rating_min + k)
        n = self.config.num_ratings - 1
        k = torch.arange(n + 1, dtype=torch.float32)
        z = logits.float()[..., :1]  # (B, 1)
        log_comb = math.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
        return log_comb + k * F.logsigmoid(z) + (n - k) * F.logsigmoid(-z)

    def statistics(self, logits, with_probs=True):
        n, p = self.config.num_ratings - 1, torch.sigmoid(logits.float()[..., 0])
        probs = self.log_pmf(logits).exp() if with_probs else None
        return self.config.rating_min + n * p, n * p * (1 - p), probs

    def nll(self, logits, ratings, present):
        return -(self.log_pmf(logits).gather(-1, ratings - self.config.rating_min) * present).sum(-1)

    def outputs_from_predictions(self, mean, variance, probs):
        return torch.logit((mean - self.config.rating_min) / (self.config.num_ratings - 1))[:, None]

    def shift_direction(self):
        return torch.tensor([1.0], dtype=torch.float64)


REGISTRY = {**HEADS, "binomial": BinomialHead}  # a local copy: heads_orca.HEADS is left as it is


# ---------------------------------------------------------------------------------------------------- references
# one per head, in float64 and written without heads_orca: (mean, variance or None, probs or None, NLL of ratings)


def reference_beta(z, ratings, config):
    a, b = math.exp(z[0]), math.exp(z[1])
    cdf = stats.beta.cdf(np.linspace(0, 1, 6), a, b)
    y = np.clip((np.array(ratings) - 1) / 4, config.beta_epsilon, 1 - config.beta_epsilon)
    return 1 + 4 * stats.beta.mean(a, b), 16 * stats.beta.var(a, b), np.diff(cdf), -stats.beta.logpdf(y, a, b).sum()


def reference_multinomial(z, ratings, config):
    dist = torch.distributions.Categorical(logits=torch.tensor(z, dtype=torch.float64))
    values = torch.arange(1.0, 6.0, dtype=torch.float64)
    mean = float((dist.probs * values).sum())
    variance = float((dist.probs * (values - mean) ** 2).sum())
    return mean, variance, dist.probs.numpy(), -float(dist.log_prob(torch.tensor(ratings) - 1).sum())


def reference_bernoulli(z, ratings, config):
    phi, target = special.expit(z[0]), np.mean((np.array(ratings) - 1) / 4)
    return 1 + 4 * phi, None, None, -(target * math.log(phi) + (1 - target) * math.log1p(-phi))


def reference_binomial(z, ratings, config):
    dist = stats.binom(4, special.expit(z[0]))
    return 1 + dist.mean(), dist.var(), dist.pmf(np.arange(5)), -dist.logpmf(np.array(ratings) - 1).sum()


REFERENCES = {"beta": reference_beta, "multinomial": reference_multinomial, "bernoulli": reference_bernoulli,
              "binomial": reference_binomial}
RATINGS = [[1, 5], [5], [1], [3, 3, 4], [2, 5, 1, 4], [4], [5, 5, 5, 1], [2]]


def config_for(name: str) -> OrcaConfig:
    return OrcaConfig(score_type=name if name in HEADS else "multinomial")  # the toy head reads only the scale


def head_of(name: str) -> OrcaHead:
    return REGISTRY[name](config_for(name))


def random_logits(head: OrcaHead, n: int = len(RATINGS), seed: int = 0, scale: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, head.num_outputs, generator=g, dtype=torch.float64) * scale


def item_nll(head: OrcaHead, logits, ratings: list[list[int]]) -> torch.Tensor:
    """The head's NLL as `ratings_nll` asks it: checked, padded ratings clamped onto the scale."""
    padded = pad_ratings(ratings)
    present = check_ratings(padded, head.config)
    return head.nll(logits, padded.clamp(head.config.rating_min, head.config.rating_max), present)


# ---------------------------------------------------------------------------------------------------- the registry


def test_every_head_has_an_independent_reference():
    assert set(REFERENCES) == set(REGISTRY), "a new head needs its independent computation here"


def test_the_config_accepts_exactly_the_registered_heads():
    # the field's annotation is a string (postponed annotations): read it in the config file's namespace
    literal = eval(OrcaConfig.__dataclass_fields__["score_type"].type, vars(configuration_orca))
    assert typing.get_args(literal) == tuple(HEADS) == configuration_orca.SCORE_TYPES
    for name, cls in HEADS.items():
        config = OrcaConfig(score_type=name)
        assert type(head_for(config)) is cls and config.num_head_outputs == cls(config).num_outputs
    with pytest.raises(ValueError, match="'gaussian' is not a head; known heads: beta, multinomial, bernoulli"):
        head_for(SimpleNamespace(score_type="gaussian"))


@pytest.mark.parametrize("name", list(HEADS))
def test_the_model_functions_are_the_heads(name):
    head, config = head_of(name), config_for(name)
    logits = random_logits(head)
    for got, want in zip(distribution_statistics(logits, config), head.statistics(logits)):
        assert (got is None and want is None) or torch.equal(got, want)
    assert torch.equal(ratings_nll(logits, pad_ratings(RATINGS), config), item_nll(head, logits, RATINGS))


# ---------------------------------------------------------------------------------------------------- each head


@pytest.mark.parametrize("name", list(REGISTRY))
def test_statistics_and_nll_equal_the_independent_computation(name):
    head = head_of(name)
    logits = random_logits(head, seed=1)
    mean, variance, probs = head.statistics(logits)
    nll = item_nll(head, logits, RATINGS)
    for i, ratings in enumerate(RATINGS):
        want_mean, want_var, want_probs, want_nll = REFERENCES[name](logits[i].numpy(), ratings, head.config)
        assert float(mean[i]) == pytest.approx(want_mean, rel=1e-5)
        assert float(nll[i]) == pytest.approx(want_nll, rel=1e-5, abs=1e-5)
        if want_var is None:
            assert variance is None and not head.has_variance
        else:
            assert float(variance[i]) == pytest.approx(want_var, rel=1e-4) and head.has_variance
        if want_probs is None:
            assert probs is None
        else:
            np.testing.assert_allclose(probs[i].numpy(), want_probs, atol=2e-5)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_head_keeps_the_contract(name):
    head = head_of(name)
    lo, hi = head.config.rating_min, head.config.rating_max
    logits = random_logits(head, n=64, seed=2, scale=3.0)
    mean, variance, probs = head.statistics(logits)
    assert mean.shape == (64,) and mean.dtype == torch.float32 and bool(((mean >= lo) & (mean <= hi)).all())
    if variance is not None:  # at most (span / 2)^2 on a bounded scale
        assert variance.shape == (64,) and bool(((variance >= 0) & (variance <= (hi - lo) ** 2 / 4 + 1e-4)).all())
    if probs is not None:
        assert probs.shape == (64, head.config.num_ratings) and bool((probs >= 0).all())
        torch.testing.assert_close(probs.sum(-1), torch.ones(64), atol=1e-5, rtol=0)
    no_probs = head.statistics(logits, with_probs=False)
    assert torch.equal(no_probs[0], mean) and (no_probs[1] is None) == (variance is None)

    # the loss: finite, with finite gradients, also for extreme logits; padding changes nothing
    extreme = (random_logits(head, seed=3) * 40).float().requires_grad_()
    loss = item_nll(head, extreme, RATINGS).mean()
    loss.backward()
    assert torch.isfinite(loss) and bool(torch.isfinite(extreme.grad).all())
    short = item_nll(head, logits[:2], [[1, 5], [3]])
    padded = item_nll(head, logits[:3], [[1, 5], [3], [1, 2, 3, 4, 5, 5]])[:2]  # (3, 6) ratings: more padding
    assert torch.equal(short, padded)

    # the calibration: the outputs recovered from the predictions give them back, also through an affine map,
    # and a step along the shift direction raises every predicted rating
    d = head.shift_direction()
    assert d.shape == (head.num_outputs,) and d.dtype == torch.float64
    recovered = head.outputs_from_predictions(
        mean.double(), None if variance is None else variance.double(), None if probs is None else probs.double())
    assert recovered.shape == logits.shape and recovered.dtype == torch.float64
    scale, bias = 0.6, torch.linspace(-0.5, 0.7, head.num_outputs, dtype=torch.float64)
    for a, b in ((logits, recovered), (logits * scale + bias, recovered * scale + bias)):
        ma, va, _ = head.statistics(a)
        mb, vb, _ = head.statistics(b)
        torch.testing.assert_close(mb, ma, atol=1e-4, rtol=1e-4)
        if va is not None:
            torch.testing.assert_close(vb, va, atol=1e-4, rtol=1e-4)
    moderate = random_logits(head, seed=4)  # not saturated: a float32 mean of 5.0 cannot rise
    assert bool((head.statistics(moderate + 0.1 * d)[0] > head.statistics(moderate)[0]).all())


# ---------------------------------------------------------------------------------------------------- a new head


def test_a_new_head_runs_through_the_model_with_only_a_registry_entry(monkeypatch):
    # the toy head in a local copy of the registry, under a name the config's Literal accepts: the model, its
    # loss, `predict`, the clamping guard and the calibration find it by asking the registry, with no other change
    monkeypatch.setattr(heads_orca, "HEADS", {**HEADS, "multinomial": BinomialHead})
    model, tokenizer = tiny_llama_orca(score_type="multinomial")
    assert model.score_head.out_features == 1 and isinstance(head_for(model.config), BinomialHead)
    with torch.no_grad():
        model.score_head.bias.fill_(0.7)

    batch = tokenizer(["a violin", "a cello, maybe"], return_tensors="pt", padding=True)
    model.train()
    out = model(**batch, ratings=pad_ratings([[5, 4], [2]]))
    out.loss.backward()
    assert torch.isfinite(out.loss) and out.probs is None and model.score_head.weight.grad is not None
    p = torch.sigmoid(out.logits.detach().double()[:, 0]).numpy()
    want = np.mean([-stats.binom(4, p[0]).logpmf([4, 3]).sum(), -stats.binom(4, p[1]).logpmf([1]).sum()])
    assert float(out.loss.detach()) == pytest.approx(want, rel=1e-5)

    records = [{"question": "Which instrument?", "reference": "violin", "candidate": c, "ratings": r}
               for c, r in (("a violin", [5, 4]), ("a cello, maybe", [2]), ("no idea", [1, 1, 2]))]
    preds = model.predict(records, tokenizer)
    for pred, record in zip(preds, records):
        dist = stats.binom(4, (pred["mean"] - 1) / 4)
        assert pred["variance"] == pytest.approx(dist.var(), rel=1e-4)
        np.testing.assert_allclose(pred["probs"], dist.pmf(np.arange(5)), atol=1e-5)
        assert pred["nll"] == pytest.approx(-dist.logpmf(np.array(record["ratings"]) - 1).sum(), rel=1e-4)
    assert head_for(model.config).has_variance  # so the clamping may gate on it

    z = head_outputs(preds, model.config)  # (3, 1)
    t, s = fit_affine(z, [r["ratings"] for r in records], model.config)
    fold_into_head(model, t, s)
    calibrated = model.predict(records, tokenizer)
    z_mapped = z / t + s * head_for(model.config).shift_direction()
    want = (1 + 4 * torch.sigmoid(z_mapped[:, 0])).tolist()
    assert [c["mean"] for c in calibrated] == pytest.approx(want, rel=1e-4)


# ---------------------------------------------------------------------------------------------------- the callers


def test_no_code_outside_the_heads_branches_on_a_head_name():
    # a comparison of score_type with a name or a literal set of names, or of anything with a head's name: ask
    # the head (heads_orca.head_for)
    names = "|".join(HEADS)
    pattern = re.compile(rf"score_type\W*\s*(==|!=|(not\s+)?in\s*[(\[{{])|(==|!=)\s*[\"']({names})[\"']")
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("tests", "runs", "build", "__pycache__"))
        for name in sorted(f for f in files if f.endswith(".py") and f != "heads_orca.py"):
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if pattern.search(line):
                        found.append(f"{os.path.relpath(path, REPO)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
