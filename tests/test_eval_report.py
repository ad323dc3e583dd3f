"""orca-eval (eval_suite/report/cli.py) on tiny train.py runs: every table and plot, fold grouping, ablation grouping,
per-answerer breakdown and scoring a --test-file through each run's final/ model."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

import train
import training.config
from eval_suite.report import cli as orca_eval

ANIMALS = ["dog", "cat", "cow", "owl", "frog", "horse", "sheep", "goat"]
ANSWERERS = ["model-a", "model-b", "model-c"]


def write_split(path: Path, n: int, seed: int) -> str:
    """Learnable records (right answers rated high) from three answering models."""
    rng = random.Random(seed)
    with path.open("w") as f:
        for i in range(n):
            ref = rng.choice(ANIMALS)
            right = rng.random() < 0.5
            cand = ref if right else rng.choice([a for a in ANIMALS if a != ref])
            ratings = [rng.choice([4, 5]) for _ in range(3)] if right else [rng.choice([1, 2, 3]) for _ in range(3)]
            f.write(json.dumps({"id": f"{path.stem}-{i}", "question": "Which animal makes this sound?", "reference": ref,
                                "rationale": f"A {ref} can be heard.", "candidate": f"a {cand}", "ratings": ratings,
                                "answerer": ANSWERERS[i % 3]}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs that differ only in data.fold, and two copies of fold 0 whose run_config.yaml differs in the
    input template / the skipped stages (the report groups by run_config.yaml; their predictions are fold 0's)."""
    tmp = tmp_path_factory.mktemp("report")
    paths = {}
    for fold in (0, 1):
        files = {split: write_split(tmp / f"{split}-f{fold}.jsonl", n, 10 * fold + k)
                 for k, (split, n) in enumerate([("train", 32), ("validation", 12), ("test", 18)])}
        cfg = training.config.load_run_config(None, ["--model.backbone", "tiny-llama", "--run_dir", str(tmp / f"multi-f{fold}"),
                                           "--data.fold", str(fold)])
        cfg["lora"].update(r=4, alpha=4)
        cfg["training"].update(eval_every=5, per_device_batch_size=16, log_every=1)
        # two stages, s2 skipped: the curriculum variant below runs both
        cfg["stages"] = {name: {"files": files, "max_steps": 2, "lr": 1e-3} for name in ("s2", "s3")}
        cfg["skip_stages"] = ["s2"]
        cfg["test"]["compare_reference_modes"] = False
        train.run(cfg)
        paths[f"f{fold}"] = tmp / f"multi-f{fold}"
    for name, change in {"no-question": {"model": {"orca": {"template_fields": ["reference", "candidate"]}}},
                         "s2-s3": {"skip_stages": []}}.items():
        shutil.copytree(paths["f0"], tmp / name)
        cfg = yaml.safe_load((tmp / name / "run_config.yaml").read_text())
        (tmp / name / "run_config.yaml").write_text(yaml.safe_dump(training.config.merge(cfg, change)))
        paths[name] = tmp / name
    paths["test_file"] = tmp / "test-f0.jsonl"
    return paths


def check_pngs(out: Path, test_set: str) -> None:
    for kind in ("scatter", "reliability", "variance", "answerers"):
        png = out / f"{kind}_{test_set}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, png


def test_report_from_test_predictions_has_every_table_and_plot(runs, tmp_path):
    out = tmp_path / "out"
    names = ["f0", "f1", "no-question", "s2-s3"]
    assert orca_eval.main(["--runs", *[str(runs[n]) for n in names], "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    for header in ("## Heads × test sets", "## Scenario A: mean ± std over folds", "## Scenario B: per answering model",
                   "## Input ablations", "## Curriculum ablations", "## Baselines beside ORCA", "## Per run", "## Plots"):
        assert header in md
    for run in ("multi-f0", "multi-f1", "no-question", "s2-s3"):
        assert f"| {run} |" in md
    assert "_No runs for this table._" not in md  # every table has rows
    check_pngs(out, "s3_test")

    tables = json.loads((out / "report.json").read_text())["tables"]
    # scenario A: the two folds form one system, mean +- sample std of the runs' own test Spearman
    rho = [json.loads((runs[f] / "metrics.json").read_text())["test"]["orca"]["spearman"] for f in ("f0", "f1")]
    folds = [row for row in tables["Scenario A: mean ± std over folds"] if row["folds"] == ["0", "1"]]
    assert len(folds) == 1 and sorted(folds[0]["runs"]) == ["multi-f0", "multi-f1"]
    assert folds[0]["spearman"]["mean"] == pytest.approx(np.mean(rho))
    assert folds[0]["spearman"]["std"] == pytest.approx(np.std(rho, ddof=1))
    assert len(tables["Scenario A: mean ± std over folds"]) == 3  # the two copies are systems of their own

    per_answerer = tables["Scenario B: per answering model"]
    assert {row["answerer"] for row in per_answerer} == set(ANSWERERS)
    two_folds = [row for row in per_answerer if row["system"] == folds[0]["system"]]
    assert sum(row["n"] for row in two_folds) == 2 * 18  # both folds' predictions, pooled

    inputs = tables["Input ablations"]
    assert {row["model.orca.template_fields"] for row in inputs} == {
        "question+reference+rationale+transcript+candidate", "reference+candidate"}
    assert {row["curriculum"] for row in tables["Curriculum ablations"]} == {"s3", "full"}
    judges = {row["judge"] for row in tables["Baselines beside ORCA"]}
    assert {"exact_match", "contains", "token_f1"} <= judges and sum(j.startswith("orca") for j in judges) == 3


def test_report_scores_a_test_file_with_each_final_model(runs, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from eval_suite.metrics import compute_metrics
    from orca_io.jsonl import read_records

    out = tmp_path / "out"
    test_file = runs["test_file"]
    assert orca_eval.main(["--runs", str(runs["f0"]), str(runs["f1"]), "--out", str(out), "--test-file", str(test_file),
                        "--baselines", "exact_match", "token_f1"]) == 0
    check_pngs(out, "test-f0")
    tables = json.loads((out / "report.json").read_text())["tables"]
    judges = {row["judge"] for row in tables["Baselines beside ORCA"]}
    assert judges == {"orca", "exact_match", "token_f1"}  # one system: the runs differ only in their fold

    records = read_records(test_file).records
    model = AutoModel.from_pretrained(runs["f1"] / "final", trust_remote_code=True)
    preds = model.predict(records, AutoTokenizer.from_pretrained(runs["f1"] / "final", trust_remote_code=True))
    expected = compute_metrics([p["mean"] for p in preds], human_ratings=[r["ratings"] for r in records])
    row = next(r for r in tables["Per run"] if r["run"] == "multi-f1")
    assert row["test_set"] == "test-f0" and row["n"] == 18
    assert row["spearman"] == pytest.approx(expected["spearman"], abs=1e-6)


def test_missing_run_folder_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        orca_eval.main(["--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "no run_config.yaml" in capsys.readouterr().err


def test_report_ood_scores_each_final_model_on_the_out_of_domain_sets(runs, tmp_path):
    from scipy import stats

    from dataset_builder.configs import ood_sets
    from dataset_builder.fixtures import write_public_fixture

    data = write_public_fixture(tmp_path / "data", n=40)
    run = tmp_path / "run"
    shutil.copytree(runs["f0"], run)
    cfg = yaml.safe_load((run / "run_config.yaml").read_text())
    cfg["data"]["data_dir"] = str(data)
    (run / "run_config.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    assert orca_eval.main(["--runs", str(run), "--out", str(out), "--ood", "--bootstrap", "20"]) == 0
    ood = json.loads((out / "report.json").read_text())["ood"]["run"]
    assert list(ood["sets"]) == ["in_domain_test", "evouna_nq_heldout", "nq_open_graded", "nq_open_sas"]
    judges = ood["sets"]["nq_open_graded"]["all"]
    assert set(judges) == {"orca", "orca_median", "contains", "token_f1", "embedding_cosine"}
    assert judges["orca"]["n"] == len(ood_sets(data_dir=data)["nq_open_graded"])
    # the in-domain row is the run's own test predictions, checked against scipy
    preds = [json.loads(line) for line in (run / "test_predictions.jsonl").read_text().splitlines()]
    want = stats.spearmanr([p["mean"] for p in preds], [np.mean(p["ratings"]) for p in preds]).statistic
    assert ood["sets"]["in_domain_test"]["all"]["orca"]["spearman"] == pytest.approx(want, abs=1e-9)
    assert (out / "calibration_run.png").stat().st_size > 1000
    assert "## Out-of-domain sets: run" in (out / "report.md").read_text()


def test_ood_evaluation_reports_the_clamped_score_where_the_config_clamps(runs, tmp_path):
    # a clamping that takes every score to 0 or 1 (margin 1/2, any variance): orca_clamped is the side of 3 as 1 or 5
    from scipy import stats

    from dataset_builder.fixtures import write_public_fixture
    from eval_suite.models.loading import load_model
    from eval_suite.report.ood import ood_evaluation, ood_markdown

    data = write_public_fixture(tmp_path / "data", n=40)
    model, tokenizer = load_model(str(runs["f0"] / "final"))
    model.config.update({"clamp": True, "clamp_variance_threshold": 1e9, "clamp_margin": 0.5})
    ood = ood_evaluation(model, tokenizer, data_dir=data, bootstrap=20, keep_predictions=True)
    preds = ood["predictions"]["nq_open_graded"]
    human = [np.mean(p["ratings"]) for p in preds]
    clamped = [5.0 if p["mean"] > 3 else 1.0 for p in preds]  # no mean sits exactly on 3 in this run
    assert [p["score"] for p in preds] == [(c - 1) / 4 for c in clamped]
    want = stats.spearmanr(clamped, human).statistic
    got = ood["sets"]["nq_open_graded"]["all"]["orca_clamped"]["spearman"]
    assert 0 < sum(c == 5.0 for c in clamped) < len(clamped) and got == pytest.approx(want, abs=1e-9)
    # the paired differences are taken against the score users get: the clamped one
    judges = ood["sets"]["nq_open_graded"]["all"]
    assert ood["reference"] == "orca_clamped" and "diff_ci" not in judges["orca_clamped"]
    assert judges["token_f1"]["diff_ci"] and judges["orca"]["diff_ci"]
    assert "| nq_open_graded | token_f1 - orca_clamped |" in ood_markdown(ood)
    model.config.clamp = False
    unclamped = ood_evaluation(model, tokenizer, data_dir=data, bootstrap=20)
    assert "orca_clamped" not in unclamped["sets"]["nq_open_graded"]["all"] and unclamped["reference"] == "orca"
