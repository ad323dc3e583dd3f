"""Out-of-domain evaluation: judge_agreement (paired bootstrap), slices, the held-out / extra-train data variants."""

from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from dataset_builder import load_config
from dataset_builder.configs import OOD_SETS, held_out_answerers, ood_sets
from dataset_builder.fixtures import write_public_fixture
from eval_suite.metrics import judge_agreement, mean_calibration
from eval_suite.report.ood import distribution_median, judge_sets, ood_markdown, ood_slices

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _calibration_loop(pred, human, edges):
    """float64 loop: per bin of predicted mean, |mean pred - mean human| weighted by the bin's share."""
    total, err = len(pred), 0.0
    for b in range(len(edges) - 1):
        members = [i for i in range(total)
                   if (edges[b] <= pred[i] < edges[b + 1]) or (b == len(edges) - 2 and pred[i] >= edges[-1])]
        if members:
            err += len(members) / total * abs(sum(pred[i] for i in members) / len(members)
                                              - sum(human[i] for i in members) / len(members))
    return err


def test_judge_agreement_matches_independent_computations():
    rng = np.random.default_rng(0)
    human = rng.choice([1.0, 3.0, 5.0], size=300, p=[0.6, 0.2, 0.2])
    a = np.clip(human + rng.normal(0, 1.2, 300), 1, 5)
    b = np.clip(human + rng.normal(0, 2.5, 300), 1, 5)
    out = judge_agreement({"a": a, "b": b}, human, bootstrap=200, seed=1, reference="a")
    m = out["a"]
    assert m["spearman"] == pytest.approx(stats.spearmanr(a, human).statistic, abs=1e-12)
    assert m["kendall"] == pytest.approx(stats.kendalltau(a, human).statistic, abs=1e-12)
    assert m["mae_mean"] == pytest.approx(np.abs(a - human).mean(), abs=1e-12)
    assert m["roc_auc"] == pytest.approx(roc_auc_score(human >= 4, a), abs=1e-12)  # "possibly correct" (3) = not
    edges = (1.0, 1.5, 2.5, 3.5, 4.5, 5.0)
    assert m["calibration_error"] == pytest.approx(_calibration_loop(list(a), list(human), edges), abs=1e-12)
    assert sum(b_["n"] for b_ in m["calibration"]) == 300
    for key, (low, high) in m["ci"].items():
        assert low <= m[key] <= high, key
    # paired differences: b is noisier than a, so b - a < 0 on Spearman with an interval excluding 0
    low, high = out["b"]["diff_ci"]["spearman"]
    assert high < 0 and low < out["b"]["spearman"] - m["spearman"] < high
    assert "diff_ci" not in m


def test_paired_bootstrap_of_identical_judges_is_zero():
    human = np.array([1, 5, 3, 1, 5, 5, 1, 3] * 5, dtype=float)
    pred = human + np.linspace(-0.4, 0.4, human.size)
    out = judge_agreement({"x": pred, "y": pred.copy()}, human, bootstrap=50, reference="x")
    assert out["y"]["diff_ci"]["spearman"] == (0.0, 0.0)
    assert out["x"]["ci"] == out["y"]["ci"]


def test_mean_calibration_bins():
    cal = mean_calibration([1.0, 1.2, 4.9, 5.0], [1, 3, 5, 5])
    assert [(b["low"], b["n"]) for b in cal["bins"]] == [(1.0, 2), (4.5, 2)]
    assert cal["calibration_error"] == pytest.approx(0.5 * abs(1.1 - 2.0) + 0.5 * abs(4.95 - 5.0))


def test_distribution_median_against_a_loop():
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(5) * 0.5, size=200)
    probs[0] = [0.5, 0, 0, 0, 0.5]  # exactly one half reached at rating 1
    want = []
    for row in probs:
        total = 0.0
        for k, p in enumerate(row, start=1):
            total += p
            if total >= 0.5 - 1e-9:
                want.append(k)
                break
    assert distribution_median(probs).tolist() == want
    records = [_rec(i, "x", ["y"], r) for i, r in enumerate([1, 5, 3])]
    out = judge_sets({"s": (records, {"orca": [1.5, 4.0, 3.0], "orca_median": [1.0, 5.0, 3.0]})}, baselines=(),
                     bootstrap=5)
    assert out["s"]["all"]["orca_median"]["mae_mean"] == 0.0 and "diff_ci" in out["s"]["all"]["orca_median"]


def test_judge_agreement_rejects_bad_input():
    with pytest.raises(ValueError, match="reference judge"):
        judge_agreement({"a": [1, 2]}, [1, 5], reference="b")
    with pytest.raises(ValueError, match="has 3 items"):
        judge_agreement({"a": [1, 2, 3]}, [1, 5])


def _rec(i, cand, refs, rating, answerer="sys-a"):
    return {"id": str(i), "question": "q", "reference": refs, "candidate": cand, "ratings": [rating], "answerer": answerer}


def test_slices_and_judge_sets():
    records = [_rec(0, "Paris", ["Paris"], 5), _rec(1, "It is the city of Paris in France.", ["Paris", "Paris, France"], 5),
               _rec(2, "Lyon", ["Paris"], 1, "sys-b"), _rec(3, "I think it is Lyon, not Paris.", ["Paris"], 1, "sys-b"),
               _rec(4, "Marseille", ["Paris", "the capital"], 3)]
    slices = ood_slices(records)
    assert slices["short (<= 5 words)"].tolist() == [True, False, True, False, True]
    assert slices["many aliases"].tolist() == [False, True, False, False, True]
    assert slices["answerer sys-b"].tolist() == [False, False, True, True, False]
    # "Paris" inside the rejecting sentence still shares a word: the slice is lexical, not a verdict
    assert slices["shares a word with the reference"].tolist() == [True, True, False, True, False]
    assert slices["no word in common with the reference"].tolist() == [False, False, True, False, True]
    assert set(ood_slices(records[:1])) == {"all", "short (<= 5 words)", "one alias", "answerer sys-a"} - {
        "short (<= 5 words)", "one alias", "answerer sys-a"}  # a slice equal to the whole set is left out
    out = judge_sets({"toy": (records, [5.0, 4.5, 1.2, 2.0, 2.5])}, baselines=("contains", "token_f1"), bootstrap=20,
                     slice_bootstrap=10)
    judges = out["toy"]["all"]
    assert set(judges) == {"orca", "contains", "token_f1"}
    # contains: 1 for records 0, 1 and 3 ("Paris" inside the sentence) -> 5.0
    assert judges["contains"]["mae_mean"] == pytest.approx(np.mean([0, 0, 0, 4, 2]))
    assert judges["orca"]["roc_auc"] == 1.0
    md = ood_markdown({"sets": out})
    assert "| toy | 5 | **orca** |" in md and "answerer sys-b" in md
    with pytest.raises(ValueError, match="5 records but"):
        judge_sets({"toy": (records, [1.0, 2.0])}, baselines=())


def test_heldout_and_extra_train_variants(tmp_path):
    data = write_public_fixture(tmp_path / "data", n=60)
    base = load_config("s3_evouna_nq", data_dir=data)
    held = set(held_out_answerers(base["train"].to_list() + base["validation"].to_list() + base["test"].to_list()))
    assert len(held) == 2
    v = load_config("s3_evouna_nq_heldout_sas", data_dir=data)
    assert not held & set(list(v["validation"]["answerer"]))
    assert not held & {r["answerer"] for r in v["train"] if r["benchmark"] == "evouna_nq"}
    assert list(v["test"]["id"]) == list(base["test"]["id"])  # the in-domain test is scenario A's, unchanged
    extra = [r for r in v["train"] if r["benchmark"] != "evouna_nq"]
    assert extra and {r["benchmark"] for r in extra} <= {"sas_squad", "sas_germanquad"}
    assert not {r["id"] for r in extra} & set(list(v["validation"]["id"]) + list(v["test"]["id"]))
    replay = load_config("s3_evouna_nq_heldout_sas_s1", data_dir=data)
    s1_train = set(load_config("s1_synthetic")["train"]["id"])
    rehearsed = [r["id"] for r in replay["train"] if r["stage"] == "s1"]
    assert len(rehearsed) == len(set(rehearsed)) == 2000 and set(rehearsed) <= s1_train  # s1's own train items only
    assert [r["id"] for r in replay["train"] if r["stage"] != "s1"] == list(v["train"]["id"])
    assert list(replay["validation"]["id"]) == list(v["validation"]["id"])  # dev and test untouched
    assert rehearsed == [r["id"] for r in load_config("s3_evouna_nq_heldout_sas_s1", data_dir=data)["train"]
                         if r["stage"] == "s1"]  # seeded
    meaning = load_config("s3_evouna_nq_heldout_sas_s1_meaning", data_dir=data)
    music = load_config("s3_evouna_nq_heldout_sas_s1_meaning_music", data_dir=data)
    added = list(music["train"]["id"])[len(meaning["train"]):]
    assert list(music["train"]["id"])[:len(meaning["train"])] == list(meaning["train"]["id"])  # the base, unchanged
    assert len(added) == 1000 and all(i.startswith("s1m-music:0:") for i in added)
    assert list(music["validation"]["id"]) == list(meaning["validation"]["id"])
    sets = ood_sets(data_dir=data)
    assert set(sets) == set(OOD_SETS)
    assert {r["answerer"] for r in sets["evouna_nq_heldout"]} <= held
    assert {r["id"] for r in sets["evouna_nq_heldout"]} <= set(base["test"]["id"])  # scenario B test part of A test
    assert {r["benchmark"] for r in sets["nq_open_sas"]} == {"sas_nq_open"}
    with pytest.raises(ValueError, match="unknown out-of-domain set"):
        ood_sets(data_dir=data, names=["nope"])


@pytest.mark.real
@pytest.mark.skipif(not (DATA / "sas" / "nq_open_filtered.csv").exists(), reason=f"real data not found at {DATA}")
def test_real_ood_sets_and_baselines():
    sets = ood_sets(data_dir=DATA)
    assert {k: len(v) for k, v in sets.items()} == {"evouna_nq_heldout": 552, "nq_open_graded": 3658, "nq_open_sas": 3658}
    assert {r["answerer"] for r in sets["evouna_nq_heldout"]} == {"ChatGPT", "FiD"}
    train = load_config("s3_evouna_nq_heldout_sas", data_dir=DATA)
    assert not {"ChatGPT", "FiD"} & set(list(train["train"]["answerer"]) + list(train["validation"]["answerer"]))
    assert len(train["test"]) == 1379
    graded = sets["nq_open_graded"]
    human = np.array([r["ratings"][0] for r in graded])
    assert (np.bincount(human)[[1, 3, 5]] == [2621, 593, 444]).all()
    # contains and token F1 on the real set: better than chance, far from perfect (the candidates are not exact
    # matches of the reference; token F1 is the stronger of the two)
    out = judge_sets({"nq_open_graded": (graded, list(human.astype(float)))}, baselines=("contains", "token_f1"),
                     bootstrap=20, slice_bootstrap=10)["nq_open_graded"]["all"]
    for name in ("contains", "token_f1"):
        assert 0.5 < out[name]["roc_auc"] < 0.9
    assert out["orca"]["spearman"] == 1.0  # the human means themselves as the "judge"


def test_train_out_of_domain_writes_tables_and_predictions(tmp_path, smollm2_tokenizer):
    import json

    import torch

    import training.config
    import training.model
    from configuration_orca import OrcaConfig
    from eval_suite.report import final_eval
    from modeling_orca import OrcaForCorrectnessDistribution

    data = write_public_fixture(tmp_path / "data", n=30)
    torch.manual_seed(0)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=training.model.tiny_backbone_config(
        "llama", len(smollm2_tokenizer)))).eval()
    test = load_config("s3_evouna_nq", data_dir=data)["test"].to_list()
    cfg = training.config.load_run_config(None, ["--model.backbone", "tiny-llama", "--data.data_dir", str(data)])
    assert final_eval.out_of_domain(model, smollm2_tokenizer, cfg, test, [], tmp_path) is None  # test.ood off
    cfg["test"].update(ood=True, ood_bootstrap=10)
    preds = model.predict(test, smollm2_tokenizer)
    ood = final_eval.out_of_domain(model, smollm2_tokenizer, cfg, test, preds, tmp_path)
    sets = ood_sets(data_dir=data)
    assert list(ood["sets"]) == ["in_domain_test", *sets] and "predictions" not in ood
    lines = [json.loads(x) for x in (tmp_path / "ood_predictions.jsonl").read_text().splitlines()]
    assert [(x["set"], x["id"]) for x in lines] == [(k, r["id"]) for k, recs in sets.items() for r in recs]
    assert ood["sets"]["in_domain_test"]["all"]["orca"]["n"] == len(test)
    assert "| nq_open_graded |" in (tmp_path / "ood.md").read_text()
