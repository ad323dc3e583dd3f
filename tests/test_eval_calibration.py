"""The dev calibration of the head (eval_suite.scoring.calibration, final_eval.choose_calibration): head outputs recovered
from predictions, the fit against scipy on the same likelihood, folding into a tiny model's head, keep-or-undo."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import optimize, special

from configuration_orca import OrcaConfig
from eval_suite.scoring.calibration import fit_affine, fold_into_head, head_outputs, shift_direction
from modeling_orca import distribution_statistics
from tests.conftest import tiny_llama_orca


def predictions_of(logits: torch.Tensor, config) -> list[dict]:
    mean, variance, probs = distribution_statistics(logits, config)
    return [{"mean": float(mean[i]), "variance": None if variance is None else float(variance[i]),
             "probs": None if probs is None else probs[i].tolist()} for i in range(len(mean))]


@pytest.mark.parametrize("score_type", ["multinomial", "beta", "bernoulli"])
def test_head_outputs_give_the_predictions_back_and_map_like_the_logits(score_type):
    config = OrcaConfig(score_type=score_type)
    torch.manual_seed(0)
    logits = torch.randn(50, config.num_head_outputs, dtype=torch.float64) * 1.5
    recovered = head_outputs(predictions_of(logits, config), config)
    scale, bias = 0.6, torch.linspace(-0.5, 0.7, config.num_head_outputs, dtype=torch.float64)
    for a, b in ((logits, recovered), (logits * scale + bias, recovered * scale + bias)):
        ma, va, _ = distribution_statistics(a, config)
        mb, vb, _ = distribution_statistics(b, config)
        torch.testing.assert_close(mb, ma, atol=1e-5, rtol=1e-5)
        if va is not None:
            torch.testing.assert_close(vb, va, atol=1e-5, rtol=1e-5)


def sampled_ratings(probs: np.ndarray, per_item: int, rng) -> list[list[int]]:
    return [list(rng.choice(5, size=per_item, p=p) + 1) for p in probs]


def test_multinomial_fit_matches_scipy_and_recovers_the_map():
    rng = np.random.default_rng(0)
    z = rng.normal(0, 2, size=(3000, 5))
    d = np.arange(5) - 2.0
    true_t, true_s = 2.0, 0.4
    ratings = sampled_ratings(special.softmax(z / true_t + true_s * d, axis=1), 3, rng)
    t, s = fit_affine(torch.tensor(z), ratings, OrcaConfig(score_type="multinomial"))

    counts = np.zeros_like(z)  # (N, 5): how often each rating was given
    for i, r in enumerate(ratings):
        np.add.at(counts[i], np.array(r) - 1, 1)

    def nll(params):  # the same likelihood, written out in numpy: log T, s
        logp = special.log_softmax(z / np.exp(params[0]) + params[1] * d, axis=1)
        return -(counts * logp).sum() / len(z)

    ref = optimize.minimize(nll, np.zeros(2), method="BFGS").x
    assert t == pytest.approx(np.exp(ref[0]), rel=1e-4) and s == pytest.approx(ref[1], abs=1e-4)
    assert t == pytest.approx(true_t, rel=0.1) and s == pytest.approx(true_s, abs=0.05)


def test_bernoulli_fit_is_platt_scaling_on_the_mean_rating():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 2, size=400)
    right = special.expit(z / 2 + 0.5)  # each rater says 5 with this probability, else 1
    ratings = [list(np.where(rng.random(4) < p, 5, 1)) for p in right]
    target = np.array([(np.mean(r) - 1) / 4 for r in ratings])
    t, b = fit_affine(torch.tensor(z[:, None]), ratings, OrcaConfig(score_type="bernoulli"))

    def bce(params):
        p = special.expit(z / np.exp(params[0]) + params[1])
        return -np.mean(target * np.log(p) + (1 - target) * np.log1p(-p))

    ref = optimize.minimize(bce, np.zeros(2), method="BFGS").x
    assert t == pytest.approx(np.exp(ref[0]), rel=1e-4) and b == pytest.approx(ref[1], abs=1e-4)
    assert t == pytest.approx(2.0, rel=0.25) and b == pytest.approx(0.5, abs=0.25)


def dev_records(n: int, ratings) -> list[dict]:
    return [{"id": f"d{i}", "question": f"What is sound number {i}?", "reference": "a dog barking",
             "rationale": "A dog barks twice.", "candidate": ["a dog", "a cat", "barking", "silence"][i % 4] + f" {i}",
             "ratings": ratings(i)} for i in range(n)]


def test_folding_into_the_head_gives_the_mapped_predictions_and_survives_saving(tmp_path):
    from modeling_orca import OrcaForCorrectnessDistribution

    model, tokenizer = tiny_llama_orca()
    records = dev_records(12, lambda i: [5])
    before = model.predict(records, tokenizer)
    t, s = 1.7, 0.3
    fold_into_head(model, t, s)
    after = model.predict(records, tokenizer)
    expected, _, _ = distribution_statistics(head_outputs(before, model.config) / t + s * (torch.arange(5.0) - 2).double(),
                                             model.config)
    np.testing.assert_allclose([p["mean"] for p in after], expected.numpy(), atol=1e-5)
    model.save_pretrained(tmp_path)
    loaded = OrcaForCorrectnessDistribution.from_pretrained(tmp_path)
    np.testing.assert_allclose([p["mean"] for p in loaded.predict(records, tokenizer)], [p["mean"] for p in after], atol=1e-6)


def test_calibration_is_kept_where_it_helps_dev_and_undone_exactly_where_it_does_not(monkeypatch):
    from eval_suite.report.final_eval import choose_calibration, evaluate_records
    from eval_suite.scoring import calibration

    model, tokenizer = tiny_llama_orca()
    # a head whose items differ along one axis of quality, as a trained judge's mostly do (a random head's differ in
    # shape, which a shift can reorder); humans agree with its order but rate everything higher than its means of 3
    with torch.no_grad():
        axis = shift_direction(model.config).float()
        model.score_head.weight.copy_(30 * axis[:, None] * model.score_head.weight[:1])
    records = dev_records(40, lambda i: [5])
    order = np.argsort([p["mean"] for p in model.predict(records, tokenizer)])
    for rank, i in enumerate(order):
        records[i]["ratings"] = [5, 5, 5] if rank >= 20 else [3, 4, 5]
    dev_preds, _ = evaluate_records(model, tokenizer, records)
    preds, record = choose_calibration(model, tokenizer, records, dev_preds)
    assert record["enabled"] and record["dev"]["calibrated"]["mae"] < record["dev"]["uncalibrated"]["mae"] - 0.2
    assert record["dev"]["calibrated"]["nll"] < record["dev"]["uncalibrated"]["nll"]
    assert record["dev"]["calibrated"]["spearman"] == pytest.approx(record["dev"]["uncalibrated"]["spearman"])
    assert [p["mean"] for p in preds] == [p["mean"] for p in model.predict(records, tokenizer)]  # what the model gives

    # a map that pulls towards 1 is worse on dev: refused, the head as it was, bit for bit
    head = {k: v.clone() for k, v in model.score_head.state_dict().items()}
    monkeypatch.setattr(calibration, "fit_affine", lambda *a, **k: (1.0, -2.0))
    dev_preds, _ = evaluate_records(model, tokenizer, records)
    preds, record = choose_calibration(model, tokenizer, records, dev_preds)
    assert not record["enabled"] and preds is dev_preds
    for k, v in model.score_head.state_dict().items():
        assert torch.equal(v, head[k])
