"""`evaluate` wrapper around `eval_suite.metrics.compute_metrics` (Spearman, Kendall, MAE of mean/variance).

Load it from a local path, no Hub access needed:
    evaluate.load("eval_suite/orca_metric")                                   # predictions = means
    evaluate.load("eval_suite/orca_metric", config_name="with_variance")      # + prediction_variances
"""

import datasets
import evaluate

from eval_suite.metrics import compute_metrics

_CITATION = r"""
@article{sedlacek2025orca,
  title   = {{ORCA}: Open-ended Response Correctness Assessment for Audio Question Answering},
  author  = {Sedl{\'a}{\v{c}}ek, {\v{S}}imon and Barahona, Sara and Yusuf, Bolaji and others},
  journal = {arXiv preprint arXiv:2512.09066},
  year    = {2025}
}
"""

_DESCRIPTION = """\
Agreement between predicted and human 1-5 Likert correctness ratings: Spearman rho, Kendall tau-b and the
MAE of the mean rating (on [1, 5] and normalised to [0, 1]); with the `with_variance` config also the MAE of
the variance over items with at least `min_ratings_for_variance` human ratings (population variance).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `float`): predicted mean rating per item, on the [1, 5] scale.
    references (`list` of `list` of `int`): the individual human ratings (1..5) of each item.
    prediction_variances (`list` of `float`, config `with_variance` only): predicted variance per item.
    pred_probs (`list` of 5 floats per item, optional): predicted probabilities of ratings 1..5 (adds `nll`).
    min_ratings_for_variance (`int`, default 3): minimum number of human ratings for the variance metrics.
    bootstrap (`int`, default 0): number of item bootstrap resamples for 95% intervals (`ci`).
    confidence (`float`, default 0.95), seed (`int`, default 0): bootstrap settings.
Returns:
    dict with n, spearman, kendall, mae_mean, mae_mean_norm, n_variance, mae_variance, mae_variance_norm,
    nll, roc_auc (binary human labels only) and ci (when bootstrap > 0); undefined metrics are None.
Examples:
    >>> orca = evaluate.load("eval_suite/orca_metric")
    >>> out = orca.compute(predictions=[4.5, 1.5, 3.0], references=[[5, 4, 5], [1, 1, 2], [3, 2, 4]])
    >>> out["spearman"], round(out["mae_mean"], 3)
    (1.0, 0.111)
"""

_BASE = {"predictions": datasets.Value("float64"), "references": datasets.Sequence(datasets.Value("int32"))}
_CONFIGS = {
    "default": datasets.Features(_BASE),
    "with_variance": datasets.Features({**_BASE, "prediction_variances": datasets.Value("float64")}),
}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class OrcaMetric(evaluate.Metric):
    def _info(self):
        if self.config_name not in _CONFIGS:
            raise ValueError(f"unknown config {self.config_name!r}; choose one of {sorted(_CONFIGS)}")
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=_CONFIGS[self.config_name],
            reference_urls=["https://arxiv.org/abs/2512.09066"],
        )

    def _compute(
        self,
        predictions,
        references,
        prediction_variances=None,
        pred_probs=None,
        min_ratings_for_variance=3,
        bootstrap=0,
        confidence=0.95,
        seed=0,
    ):
        return compute_metrics(
            predictions,
            human_ratings=[list(r) for r in references],
            pred_variance=prediction_variances,
            pred_probs=pred_probs,
            min_ratings_for_variance=min_ratings_for_variance,
            bootstrap=bootstrap,
            confidence=confidence,
            seed=seed,
        )
