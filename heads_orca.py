"""ORCA's heads: each likelihood of the 1-5 ratings is one class, looked up by name in `HEADS`.

A head reads the score head's outputs z (N, num_outputs) as the parameters of a distribution of ratings: its
statistics on the rating scale (mean, variance, the probability of each rating), the negative log-likelihood of
individual ratings (the training loss), whether it predicts a variance at all (clamping needs one), and how it
calibrates (the outputs that give back its own predictions, the direction of z that moves the predicted rating up:
eval_suite.scoring.calibration). `OrcaConfig.score_type` names one; callers ask `head_for(config)`, never the name.

Adding a head: a subclass of `OrcaHead`, an entry in `HEADS`, its name in `OrcaConfig.score_type`'s Literal and
tests (docs/model.md). `HEADS` is a plain dict of this file's own, like transformers' ACT2CLS: nothing is
registered anywhere else. This file travels to the Hub with the model (modeling_orca.py and configuration_orca.py
import it), so it needs only torch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def rating_to_unit(x, rating_min: float = 1, rating_max: float = 5):
    """A rating on the rating_min..rating_max scale (float, numpy array or tensor) on [0, 1]: (x - 1) / 4."""
    return (x - rating_min) / (rating_max - rating_min)


def unit_to_rating(u, rating_min: float = 1, rating_max: float = 5):
    """The inverse of `rating_to_unit`: 1 + 4 u."""
    return rating_min + (rating_max - rating_min) * u


def betainc(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, max_terms: int = 4096) -> torch.Tensor:
    """The regularised incomplete beta function I_x(a, b) (the Beta CDF), elementwise in float64, by its continued
    fraction (modified Lentz; Numerical Recipes 6.4). torch has no betainc; this stays on the tensors' device. Not
    differentiable. Up to `max_terms` terms: the fraction needs about sqrt(max(a, b)) of them near the mean of a
    very concentrated Beta, a handful elsewhere; convergence is checked every 16 terms."""
    dtype = torch.float32 if a.device.type == "mps" else torch.float64  # MPS has no float64
    a, b, x = (t.detach().to(dtype) for t in torch.broadcast_tensors(a, b, x))
    # the fraction converges fast for x < (a + 1) / (a + b + 2); beyond it, I_x(a, b) = 1 - I_{1-x}(b, a)
    flip = x > (a + 1) / (a + b + 2)
    a, b, x = torch.where(flip, b, a), torch.where(flip, a, b), torch.where(flip, 1 - x, x)
    log_front = a * x.log() + b * torch.log1p(-x) + torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b) - a.log()
    negligible = log_front < math.log(torch.finfo(dtype).tiny)  # x^a (1-x)^b / (a B(a, b)) underflows: I = 0
    tiny = torch.finfo(dtype).tiny * 1e10

    def nonzero(t):
        return torch.where(t.abs() < tiny, tiny, t)

    c = torch.ones_like(x)
    d = 1 / nonzero(1 - (a + b) * x / (a + 1))
    h = d
    for m in range(1, max_terms + 1):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        for coef in (even, odd):
            d = 1 / nonzero(1 + coef * d)
            c = nonzero(1 + coef / c)
            h = h * d * c
        if m % 16 == 0 and bool((((d * c - 1).abs() < 4 * torch.finfo(dtype).eps) | negligible).all()):
            break
    value = torch.where(negligible, 0.0, log_front.exp() * h)
    return torch.where(flip, 1 - value, value)


def beta_bin_probs(alpha: torch.Tensor, beta: torch.Tensor, num_bins: int) -> torch.Tensor:
    """(B, num_bins) float32: the Beta(alpha, beta) mass of each of `num_bins` equal parts of [0, 1] (not
    differentiable)."""
    edges = torch.linspace(0, 1, num_bins + 1, dtype=torch.float64, device=alpha.device)[1:-1]  # (K - 1,)
    cdf = betainc(alpha[:, None], beta[:, None], edges[None].to(alpha.device))  # (B, K - 1)
    cdf = torch.cat([torch.zeros_like(cdf[:, :1]), cdf, torch.ones_like(cdf[:, :1])], dim=1)
    return cdf.diff(dim=1).clamp_min(0).float()


# ----------------------------------------------------------------------------------------------------------------
# The heads. Each reads its config (an OrcaConfig: the rating scale and the head's own fields) at every call.


class OrcaHead:
    """One likelihood of the ratings. Subclasses set `has_variance` and define the five methods below; statistics
    and NLL are float32 (the logits are cast), calibration float64."""

    has_variance = True  # False: the head predicts a mean only (variance and probs None), so there is no clamping
    logit_per_rating = False  # True: output k is the logit of rating rating_min + k (a softmax over them)

    def __init__(self, config):
        self.config = config

    @property
    def num_outputs(self) -> int:
        """Width of the score head's linear layer."""
        raise NotImplementedError

    def statistics(self, logits: torch.Tensor, with_probs: bool = True):
        """(mean (B,), variance (B,) or None, probs (B, K) or None) on the rating scale. `with_probs=False` lets a
        head skip probs that cost more than the rest (Beta's bin masses): `forward` does while training."""
        raise NotImplementedError

    def nll(self, logits: torch.Tensor, ratings: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """(B,) negative log-likelihood of each item's ratings: `ratings` (B, R) long, all on the scale (padding
        clamped onto it), `present` (B, R) bool marks the real ones."""
        raise NotImplementedError

    def outputs_from_predictions(self, mean, variance, probs) -> torch.Tensor:
        """(N, num_outputs) float64 head outputs that give back the predictions (`mean` (N,), `variance` (N,),
        `probs` (N, K), float64, None where the head predicts none), up to what the likelihood ignores, so that an
        affine map of them gives what the mapped head would predict (eval_suite.scoring.calibration)."""
        raise NotImplementedError

    def shift_direction(self) -> torch.Tensor:
        """(num_outputs,) float64: the direction of the head outputs that moves the predicted rating up."""
        raise NotImplementedError

    def _scaled(self, ratings: torch.Tensor) -> torch.Tensor:
        return rating_to_unit(ratings.float(), self.config.rating_min, self.config.rating_max)  # (B, R) in [0, 1]


class BetaHead(OrcaHead):
    """z = (log alpha, log beta) of a Beta over ratings scaled to [0, 1]."""

    num_outputs = 2

    def params(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # clamped so that extreme logits still give finite statistics and losses
        limit = self.config.beta_log_param_limit
        log_ab = logits.float().clamp(-limit, limit)  # (B, 2)
        return log_ab[..., 0].exp(), log_ab[..., 1].exp()

    def statistics(self, logits, with_probs=True):
        lo, hi = self.config.rating_min, self.config.rating_max
        alpha, beta = self.params(logits)
        total = alpha + beta
        mean = unit_to_rating(alpha / total, lo, hi)
        variance = (hi - lo) ** 2 * alpha * beta / (total**2 * (total + 1))
        return mean, variance, beta_bin_probs(alpha, beta, self.config.num_ratings) if with_probs else None

    def nll(self, logits, ratings, present):
        alpha, beta = self.params(logits)
        eps = self.config.beta_epsilon
        y = self._scaled(ratings).clamp(eps, 1 - eps)  # ratings 1 and 5 get a finite log-density
        a, b = alpha[:, None], beta[:, None]
        log_pdf = (a - 1) * y.log() + (b - 1) * torch.log1p(-y) + torch.lgamma(a + b) - torch.lgamma(a) - torch.lgamma(b)
        return -(log_pdf * present).sum(-1)

    def outputs_from_predictions(self, mean, variance, probs):
        span = self.config.rating_max - self.config.rating_min
        mean = rating_to_unit(mean, self.config.rating_min, self.config.rating_max)  # (N,) in [0, 1]
        variance = variance / span**2
        total = mean * (1 - mean) / variance - 1  # alpha + beta
        return torch.stack([(mean * total).log(), ((1 - mean) * total).log()], dim=1)

    def shift_direction(self):
        return torch.tensor([1.0, -1.0], dtype=torch.float64)  # +log alpha -log beta


class MultinomialHead(OrcaHead):
    """z = one logit per rating, a categorical distribution over rating_min..rating_max."""

    logit_per_rating = True

    @property
    def num_outputs(self):
        return self.config.num_ratings

    def statistics(self, logits, with_probs=True):
        probs = logits.float().softmax(-1)  # (B, K)
        values = torch.arange(self.config.rating_min, self.config.rating_min + self.num_outputs, device=logits.device, dtype=probs.dtype)
        mean = probs @ values
        variance = (probs * (values - mean[:, None]) ** 2).sum(-1)
        return mean, variance, probs

    def nll(self, logits, ratings, present):
        log_probs = logits.float().log_softmax(-1)  # (B, K)
        index = (ratings - self.config.rating_min).long()
        return -(log_probs.gather(-1, index) * present).sum(-1)

    def outputs_from_predictions(self, mean, variance, probs):
        return probs.clamp_min(torch.finfo(torch.float32).tiny).log()  # the log-probabilities, a constant per row off

    def shift_direction(self):
        k = self.num_outputs
        return torch.arange(k, dtype=torch.float64) - (k - 1) / 2  # a bias per rating: the rating itself, centred


class BernoulliHead(OrcaHead):
    """z = 1 logit, sigmoid(z) the mean rating scaled to [0, 1] (mean only, the paper's baseline)."""

    num_outputs = 1
    has_variance = False

    def statistics(self, logits, with_probs=True):
        phi = torch.sigmoid(logits.float()[..., 0])  # (B,)
        return unit_to_rating(phi, self.config.rating_min, self.config.rating_max), None, None

    def nll(self, logits, ratings, present):
        # cross-entropy against the mean rating scaled to [0, 1]: not summed over ratings as the others are
        target = (self._scaled(ratings) * present).sum(-1) / present.sum(-1)  # (B,)
        return F.binary_cross_entropy_with_logits(logits.float()[..., 0], target, reduction="none")

    def outputs_from_predictions(self, mean, variance, probs):
        return torch.logit(rating_to_unit(mean, self.config.rating_min, self.config.rating_max))[:, None]

    def shift_direction(self):
        return torch.tensor([1.0], dtype=torch.float64)


# the registry: OrcaConfig.score_type -> head class (OrcaConfig.score_type's Literal lists these names, in this order)
HEADS: dict[str, type[OrcaHead]] = {"beta": BetaHead, "multinomial": MultinomialHead, "bernoulli": BernoulliHead}


def head_for(config) -> OrcaHead:
    """The head `config.score_type` names."""
    if config.score_type not in HEADS:
        raise ValueError(f"score_type={config.score_type!r} is not a head; known heads: {', '.join(HEADS)}")
    return HEADS[config.score_type](config)


__all__ = [
    "HEADS",
    "BernoulliHead",
    "BetaHead",
    "MultinomialHead",
    "OrcaHead",
    "beta_bin_probs",
    "betainc",
    "head_for",
    "rating_to_unit",
    "unit_to_rating",
]
