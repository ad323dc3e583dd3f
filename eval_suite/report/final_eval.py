"""The final evaluation of a trained judge (train.py's last step): on dev, the reference mode, the calibration of
the head (where asked) and the clamping (the paper's protocol: tuned there, switched on only where it helps); on
test, ORCA with and without that clamping beside the baselines; the out-of-domain sets where asked. Writes
test_predictions.jsonl, ood.md and ood_predictions.jsonl; returns what metrics.json holds of it."""

from __future__ import annotations

import json
import math
from pathlib import Path

from orca_io.files import write_text_atomic

PREDICTION_FIELDS = ("benchmark", "question_id", "answerer", "modality", "category")


def run_batch_tokens(model, cfg: dict) -> int:
    """`predict`'s max_batch_tokens for a run's evaluations: training.per_device_batch_size x 256 tokens, at most the
    model's cpu_batch_tokens on the CPU, which is what `predict(batch_size=per_device_batch_size)` gave before
    `batch_size` was named for what it is, so a run's scores follow predict's (16: 4,096 tokens, 1,024 on the CPU)."""
    from modeling_orca import TOKENS_PER_BATCH_SIZE_UNIT

    budget = cfg["training"]["per_device_batch_size"] * TOKENS_PER_BATCH_SIZE_UNIT
    return min(budget, model.cpu_batch_tokens) if model.device.type == "cpu" else budget


def evaluate_records(model, tokenizer, records: list[dict], *, max_batch_tokens: int | None = None,
                     show_progress: bool = False) -> tuple[list[dict], dict]:
    """Predictions of `model` on `records` (`max_batch_tokens`: predict's; None: its default) and their metrics
    against the records' ratings."""
    from eval_suite.metrics import prediction_metrics

    preds = model.predict(records, tokenizer, max_batch_tokens=max_batch_tokens, show_progress=show_progress)
    return preds, prediction_metrics(preds, [r["ratings"] for r in records])


def choose_clamping(config, dev_records: list[dict], dev_preds: list[dict]) -> dict:
    """The paper's protocol: tune the clamping threshold on dev (maximising rho + tau - MAE), switch clamping on in
    `config` only where it beats no clamping there. Returns the record for metrics.json."""
    from eval_suite.scoring.clamping import tune_on_predictions
    from heads_orca import head_for

    if not head_for(config).has_variance:  # e.g. Bernoulli: no variance to gate on
        config.clamp, config.clamp_variance_threshold = False, None
        return {"enabled": False, "reason": f"the {config.score_type} head predicts no variance"}
    human_mean = [sum(r["ratings"]) / len(r["ratings"]) for r in dev_records]
    tuned = tune_on_predictions(dev_preds, human_mean, margin=config.clamp_margin)
    enabled = tuned["threshold"] is not None  # ties go to no clamping, so a finite threshold strictly helped
    config.clamp = enabled
    config.clamp_variance_threshold = tuned["threshold"]
    return {
        "enabled": enabled, "threshold": config.clamp_variance_threshold, "margin": config.clamp_margin,
        "dev_n": len(dev_records), "dev_n_clamped": tuned["clamped"]["n_clamped"],
        "dev_objective": {"unclamped": tuned["unclamped"]["objective"], "clamped": tuned["clamped"]["objective"]},
    }


def choose_calibration(final, tokenizer, dev_records: list[dict], dev_preds: list[dict], *,
                       max_batch_tokens: int | None = None) -> tuple[list[dict], dict]:
    """Fit the affine calibration of the head on dev (eval_suite.scoring.calibration), fold it into `final`'s head and keep
    it only where it raises the dev objective the clamping uses (rho + tau - MAE). Returns the dev predictions of
    the model as it is left and the record for metrics.json."""
    import torch

    from eval_suite.scoring.calibration import fit_affine, fold_into_head, head_outputs
    from eval_suite.scoring.clamping import clamp_objective
    from modeling_orca import rating_to_unit

    human = [rating_to_unit(sum(r["ratings"]) / len(r["ratings"])) for r in dev_records]

    def summary(preds):
        return {"nll": sum(p["nll"] for p in preds) / len(preds),
                **clamp_objective([rating_to_unit(p["mean"]) for p in preds], human)}

    temperature, shift = fit_affine(head_outputs(dev_preds, final.config), [r["ratings"] for r in dev_records], final.config)
    if not (math.isfinite(temperature) and math.isfinite(shift)):  # T = exp(log T) is positive by construction
        raise ValueError(f"the calibration fitted on dev gave temperature {temperature}, shift {shift}")
    head = final.score_head
    saved = head.weight.detach().clone(), head.bias.detach().clone()
    fold_into_head(final, temperature, shift)
    calibrated_preds, _ = evaluate_records(final, tokenizer, dev_records, max_batch_tokens=max_batch_tokens)
    before, after = summary(dev_preds), summary(calibrated_preds)
    kept = before["objective"] is not None and after["objective"] is not None and after["objective"] > before["objective"]
    if not kept:
        with torch.no_grad():
            head.weight.copy_(saved[0])
            head.bias.copy_(saved[1])
    record = {"enabled": kept, "temperature": temperature, "shift": shift, "dev_n": len(dev_records),
              "dev": {"uncalibrated": before, "calibrated": after}}
    return (calibrated_preds if kept else dev_preds), record


def choose_reference_mode(final, tokenizer, dev_records: list[dict], *,
                          max_batch_tokens: int | None = None) -> tuple[list[dict], dict]:
    """Score dev with all aliases joined and with the best single alias; keep the mode with the higher Spearman.
    Returns its dev predictions and the record for metrics.json."""
    modes = {}
    for mode in ("join", "max"):
        final.config.reference_mode = mode
        modes[mode] = evaluate_records(final, tokenizer, dev_records, max_batch_tokens=max_batch_tokens)
    spearman = {m: modes[m][1]["spearman"] for m in modes}
    final.config.reference_mode = max(modes, key=lambda m: -math.inf if spearman[m] is None else spearman[m])
    return modes[final.config.reference_mode][0], {"reference_mode_dev_spearman": spearman,
                                                   "reference_mode": final.config.reference_mode}


def clamped_test_metrics(final, test_records: list[dict], test_preds: list[dict], threshold: float | None) -> dict:
    """Test metrics with the dev-tuned threshold, whether or not it is switched on in the saved model; the
    predictions' scores become what the saved model gives."""
    import numpy as np

    from eval_suite.metrics import prediction_metrics
    from eval_suite.scoring.clamping import clamp_scores
    from modeling_orca import rating_to_unit, unit_to_rating

    clamped = clamp_scores(rating_to_unit(np.array([p["mean"] for p in test_preds])), [p["variance"] for p in test_preds],
                           threshold=-math.inf if threshold is None else threshold, margin=final.config.clamp_margin)
    metrics = prediction_metrics(test_preds, [r["ratings"] for r in test_records], means=list(unit_to_rating(clamped)))
    metrics["mae"] = metrics["mae_mean"]
    for pred, score in zip(test_preds, clamped):
        pred["score"] = float(score) if final.config.clamp else pred["score"]  # as the saved model scores it
    return metrics


def final_evaluation(final, tokenizer, cfg: dict, dev_records: list[dict], test_records: list[dict]) -> tuple[dict, list[dict]]:
    """Tune the reference mode and the clamping of `final` (its config is changed) on dev, score test with the
    baselines. Returns (the results for metrics.json, the test predictions)."""
    from eval_suite.metrics import baseline_metrics

    tokens = run_batch_tokens(final, cfg)
    results: dict = {"test": {}}
    dev_preds = None
    if cfg["test"]["compare_reference_modes"] and "reference" in final.config.template_fields:
        dev_preds, modes = choose_reference_mode(final, tokenizer, dev_records, max_batch_tokens=tokens)
        results.update(modes)
    final.config.clamp = False  # scored unclamped; the clamping is chosen on dev below
    if dev_preds is None:
        dev_preds, _ = evaluate_records(final, tokenizer, dev_records, max_batch_tokens=tokens)
    if cfg["test"]["calibration"]:
        dev_preds, cal = choose_calibration(final, tokenizer, dev_records, dev_preds, max_batch_tokens=tokens)
        results["calibration"] = cal
        print(f"calibration on dev: T = {cal['temperature']:.3f}, shift = {cal['shift']:+.3f}, MAE [0, 1] "
              f"{cal['dev']['uncalibrated']['mae']:.4f} -> {cal['dev']['calibrated']['mae']:.4f}, "
              + ("kept" if cal["enabled"] else "not kept (the dev objective did not rise)"))
    test_preds, results["test"]["orca"] = evaluate_records(final, tokenizer, test_records, max_batch_tokens=tokens, show_progress=True)
    results["clamping"] = choose_clamping(final.config, dev_records, dev_preds)
    if test_preds[0]["variance"] is not None:
        # beside results["test"], whose entries other than "orca" are baselines
        results["clamping"]["test"] = clamped_test_metrics(final, test_records, test_preds, results["clamping"]["threshold"])
    results["test"].update(baseline_metrics(test_records, cfg["test"]["baselines"]))
    for entry in results["test"].values():
        entry["mae"] = entry.get("mae_mean")
    return results, test_preds


def write_test_predictions(path: Path, test_records: list[dict], test_preds: list[dict]) -> None:
    """One line per test item, in input order: its id and slice fields, the prediction, the human ratings."""
    lines = []
    for record, pred in zip(test_records, test_preds):
        keep = {k: record[k] for k in PREDICTION_FIELDS if k in record}
        lines.append(json.dumps({"id": record["id"], **keep, **pred, "ratings": record["ratings"]}) + "\n")
    write_text_atomic(path, "".join(lines))


def out_of_domain(final, tokenizer, cfg: dict, test_records: list[dict], test_preds: list[dict], run_dir: Path) -> dict | None:
    """`test.ood: true`: the out-of-domain sets beside the in-domain test, with the baselines on the same items
    (eval_suite.report.ood.ood_evaluation); writes ood.md and ood_predictions.jsonl, returns the section of metrics.json."""
    if not cfg["test"].get("ood"):
        return None
    from eval_suite.report.ood import ood_evaluation, ood_markdown

    d = cfg["data"]
    ood = ood_evaluation(final, tokenizer, data_dir=d["data_dir"], fold=d["fold"], seed=d["seed"],
                         max_batch_tokens=run_batch_tokens(final, cfg), bootstrap=cfg["test"].get("ood_bootstrap", 1000),
                         in_domain=(test_records, test_preds), keep_predictions=True,
                         max_items=cfg["test"].get("ood_max_items"))
    lines = [json.dumps({"set": set_name, **pred}) + "\n" for set_name, preds in ood.pop("predictions").items() for pred in preds]
    write_text_atomic(run_dir / "ood_predictions.jsonl", "".join(lines))
    write_text_atomic(run_dir / "ood.md", ood_markdown(ood) + "\n")
    print("\n" + ood_markdown(ood, slices=False))
    return ood


def probe_suite(final, tokenizer, cfg: dict) -> dict | None:
    """`test.probes: true`: the probe suite's accuracy overall, per question type and per kind, and the ids of the
    failing probes (eval_suite.report.probes); the section of metrics.json."""
    if not cfg["test"].get("probes"):
        return None
    from eval_suite.report.probes import probe_accuracy

    summary = probe_accuracy(final, tokenizer, max_batch_tokens=run_batch_tokens(final, cfg))
    failures = summary.pop("failures")
    print(f"\nprobes: {summary['passed']}/{summary['n']} = {summary['accuracy']:.3f}")
    return {**summary, "failed_ids": [row["id"] for row in failures]}


def print_table(results: dict) -> None:
    """The test metrics of ORCA (unclamped and with the dev-tuned clamping) and the baselines, as Markdown."""
    from orca_io.tables import markdown_table

    clamped = {"orca, clamped (dev-tuned)": results["clamping"]["test"]} if "test" in results["clamping"] else {}
    test = {"orca": results["test"]["orca"], **clamped, **results["test"]}
    cols = ("spearman", "kendall", "mae", "roc_auc")
    rows = [[name] + ["-" if m.get(c) is None else f"{m[c]:.4f}" for c in cols] for name, m in test.items()]
    print("\n" + markdown_table(["judge", *cols], rows))
