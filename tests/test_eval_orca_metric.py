"""The `evaluate` module loads from a local path with the network cut off and agrees with compute_metrics."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from eval_suite.metrics import compute_metrics

METRIC_DIR = Path(__file__).resolve().parents[1] / "eval_suite" / "orca_metric"


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access attempted during an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def data(seed=0, n=25):
    rng = np.random.default_rng(seed)
    refs = [rng.integers(1, 6, size=rng.integers(1, 5)).tolist() for _ in range(n)]
    return rng.uniform(1, 5, n).tolist(), refs, rng.uniform(0, 3, n).tolist()


def test_load_offline_and_compute(no_network, tmp_path):
    import evaluate

    preds, refs, pvars = data()
    metric = evaluate.load(str(METRIC_DIR), cache_dir=str(tmp_path))
    out = metric.compute(predictions=preds, references=refs, bootstrap=50)
    expected = compute_metrics(preds, human_ratings=refs, bootstrap=50)
    assert out.keys() == expected.keys()
    for key in ("n", "spearman", "kendall", "mae_mean", "mae_mean_norm", "n_variance"):
        assert out[key] == pytest.approx(expected[key]), key
    assert out["ci"]["spearman"] == pytest.approx(expected["ci"]["spearman"])
    assert out["mae_variance"] is None  # default config takes no variances

    with_var = evaluate.load(str(METRIC_DIR), config_name="with_variance", cache_dir=str(tmp_path))
    # add_batch in two chunks, as an evaluation loop would
    with_var.add_batch(predictions=preds[:10], references=refs[:10], prediction_variances=pvars[:10])
    with_var.add_batch(predictions=preds[10:], references=refs[10:], prediction_variances=pvars[10:])
    out = with_var.compute(min_ratings_for_variance=2)
    expected = compute_metrics(preds, human_ratings=refs, pred_variance=pvars, min_ratings_for_variance=2)
    assert out["mae_variance"] == pytest.approx(expected["mae_variance"])
    assert out["n_variance"] == expected["n_variance"]


def test_relative_path_from_repo_root(no_network, monkeypatch, tmp_path):
    import evaluate

    monkeypatch.chdir(METRIC_DIR.parents[1])
    metric = evaluate.load("eval_suite/orca_metric", cache_dir=str(tmp_path))
    out = metric.compute(predictions=[4.5, 1.5, 3.0], references=[[5, 4, 5], [1, 1, 2], [3, 2, 4]])
    assert out["spearman"] == 1.0 and out["mae_mean"] == pytest.approx(1 / 9)


def test_unknown_config_is_rejected(tmp_path):
    import evaluate

    with pytest.raises(ValueError, match="unknown config"):
        evaluate.load(str(METRIC_DIR), config_name="nope", cache_dir=str(tmp_path))
