"""Calibration of a trained judge on dev: an affine map of the score head's outputs, z -> z / T + s * d.

Training data that is not human-rated (the synthetic and meaning items kept in s3) can shift the predicted ratings
away from the human ones while the ranking holds; MAE then pays. The map is fitted by the training loss itself (the
NLL of every individual dev rating, `modeling_orca.ratings_nll`) and folded into the score head's weight and bias,
so the saved model scores calibrated with no code or config of its own: every scoring path gives the same numbers.
T is a temperature (how sure), s a shift along d, the direction that moves the predicted rating up (how high).
Both the inverse of the predictions and d are the head's own (heads_orca: `outputs_from_predictions`,
`shift_direction`). `eval_suite.report.final_eval.choose_calibration` fits it on dev and keeps it only where it helps there.
"""

from __future__ import annotations

import torch

from heads_orca import head_for
from modeling_orca import pad_ratings, ratings_nll


def head_outputs(preds: list[dict], config) -> torch.Tensor:
    """(N, num_head_outputs) float64: head outputs that give `preds` (the dicts `predict` returns), up to what the
    likelihood ignores (a constant per row for Multinomial), so that any affine map of them gives the predictions
    the mapped head would."""

    def column(key):  # (N,) or (N, K) float64; None where the head predicts no such thing
        return None if preds[0][key] is None else torch.tensor([p[key] for p in preds], dtype=torch.float64)

    return head_for(config).outputs_from_predictions(column("mean"), column("variance"), column("probs"))


def shift_direction(config) -> torch.Tensor:
    """(num_head_outputs,) float64: the head outputs' direction that moves the predicted rating up: the rating
    itself (centred) as a bias per Multinomial rating, +log alpha -log beta for Beta, the logit for Bernoulli."""
    return head_for(config).shift_direction()


def fit_affine(logits: torch.Tensor, ratings: list[list[int]], config, max_iter: int = 200) -> tuple[float, float]:
    """(T, s) minimising the mean NLL of `ratings` under the head outputs `logits` / T + s * shift_direction (the
    model's own `ratings_nll`; L-BFGS on float64 parameters). Two numbers, not a bias per output: a free bias per
    Multinomial rating reorders items whose distributions differ in shape, and costs ranking for what it gains in
    MAE."""
    target = pad_ratings(ratings)
    logits = logits.detach().to(torch.float64)
    direction = shift_direction(config)
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    shift = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_t, shift], max_iter=max_iter, tolerance_grad=1e-10, tolerance_change=1e-12,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ratings_nll(logits / log_t.exp() + shift * direction, target, config).double().mean()
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().exp()), float(shift.detach())


def fold_into_head(model, temperature: float, shift: float) -> None:
    """Make `model.score_head` give its old outputs / temperature + shift * shift_direction, in place."""
    head = model.score_head
    if head.bias is None:
        raise ValueError("the score head has no bias to fold a calibration into")
    with torch.no_grad():
        bias = shift * shift_direction(model.config)
        head.weight.copy_((head.weight.double() / temperature).to(head.weight.dtype))
        head.bias.copy_((head.bias.double() / temperature + bias).to(head.bias.dtype))
