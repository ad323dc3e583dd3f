"""Each benchmark script runs end to end on a few records with a tiny random backbone and prints its summary line
(the full measurements are not in CI: see benchmarks/README.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


def run(script, *args, timeout=120):
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def test_bench_scoring_smoke(shared_data, tmp_path):
    out = tmp_path / "scoring.json"
    lines = run("bench_scoring.py", "--n", "10", "--backbone", "tiny-llama", "--naive-batch-sizes", "2,4", "--calib", "4",
                "--gemm-size", "256", "--repeats", "2", "--ablations", "--ablation-repeats", "2", "--profile", "--json", str(out))  # fmt: skip
    assert re.fullmatch(r"speedup_vs_naive=\d+\.\d\d floor_fraction=\d+\.\d\d", lines[-1]), lines[-1]
    top = json.loads(out.read_text())
    assert top["package"]["name"] == "orca-judge" and top["args"]["n"] == 10 and "git_revision" in top
    result = top["results"][0]
    assert result["agree"] and result["records"] == 10 and result["prefix_sharing"] is True
    assert len(result["a"]["runs"]) == 2
    assert result["floor_tokens"] < result["input_tokens"]  # answers to one question share their prefix
    assert any(line.startswith("(a) predict") for line in lines) and any(line.startswith("(b) naive") for line in lines)
    variants = [a["variant"] for a in result["ablations"]]
    assert "no prefix sharing" in variants
    assert all(len(a["runs"]) == 2 and a["time_vs_default"] > 0 for a in result["ablations"])
    profile = result["profile"]
    assert sum(profile["share"].values()) == pytest.approx(1, abs=0.01) and profile["mm_gflops"] > 0


def test_bench_scoring_smoke_bfloat16(shared_data, tmp_path):
    # the dtype plumbing of a GPU run (--device cuda --dtype bfloat16), here on the CPU
    out = tmp_path / "scoring.json"
    run("bench_scoring.py", "--n", "6", "--backbone", "tiny-llama", "--naive-batch-sizes", "2", "--gemm-size", "128",
        "--dtype", "bfloat16", "--repeats", "1", "--json", str(out))  # fmt: skip
    result = json.loads(out.read_text())["results"][0]
    assert result["dtype"] == "bfloat16" and result["tolerance"] == 0.05 and result["agree"]
    assert 0 < result["max_abs_mean_diff"]  # 16-bit arithmetic really ran: the two paths differ a little


def test_bench_train_smoke(shared_data, tmp_path):
    out = tmp_path / "train.json"
    lines = run("bench_train.py", "--smoke", "--max-answers-per-question", "2", "--json", str(out), timeout=300)
    assert re.fullmatch(r"train_speedup_vs_naive=\d+\.\d\d dev_rho_delta=-?\d+\.\d{4}", lines[-1]), lines[-1]
    top = json.loads(out.read_text())
    assert top["package"]["name"] == "orca-judge" and top["args"]["smoke"] and top["lora"]["r"] == 128
    results = {(r["data"], r["path"]): r for r in top["results"]}
    assert set(results) == {(d, p) for d in ("mmar", "evouna") for p in "abcd"}
    assert all(r["steps_per_s"] > 0 and r["steps_per_cpu_s"] > 0 and r["peak_mib"] >= 0 for r in results.values())
    assert results["mmar", "b"]["prefix_sharing"] is True
    # shared prefixes: fewer positions computed than the answers' inputs hold; one row per answer: at least as many
    assert results["mmar", "b"]["computed_per_input"] < 1 <= results["mmar", "a"]["computed_per_input"]
    # at most 2 answers of a question together: still shared, less than whole questions (8 answers each)
    assert results["mmar", "b"]["computed_per_input"] < results["mmar", "d"]["computed_per_input"] < 1
    assert set(top["summary"]["dev_spearman"]) == {"a", "b", "d"}


def test_compare_batching_smoke(tmp_path):
    # a one-stage config on a few fixture records (several answers a question), so each train.py run takes seconds
    rows = [{"id": f"{q}-{a}", "question_id": str(q), "question": f"question {q}?", "reference": "yes", "candidate": ["yes", "no"][a % 2],
             "ratings": [5 - 4 * (a % 2)]} for q in range(12) for a in range(4)]  # fmt: skip
    files = {}
    for split, part in (("train", rows[:32]), ("validation", rows[32:40]), ("test", rows[40:])):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in part))
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"model": {"backbone": "tiny-llama"}, "lora": {"r": 4, "alpha": 4},
                                  "stages": {"s3": {"files": {k: str(v) for k, v in files.items()}, "max_steps": 2, "lr": 1e-3}}}))  # fmt: skip
    out = tmp_path / "batching.json"
    lines = run("compare_batching.py", "--config", str(config), "--steps", "2", "--seeds", "0", "--modes", "shuffled,question,question:2@3",
                "--json", str(out), timeout=600)  # fmt: skip
    assert re.fullmatch(r"shuffled_rho=-?\d\.\d{4} question_rho=-?\d\.\d{4} delta=-?\d\.\d{4}", lines[-2]), lines[-2]
    assert re.fullmatch(r"shuffled_rho=-?\d\.\d{4} question:2@3_rho=-?\d\.\d{4} delta=-?\d\.\d{4}", lines[-1]), lines[-1]
    top = json.loads(out.read_text())
    assert [(r["mode"], r["seed"]) for r in top["runs"]] == [("shuffled", 0), ("question", 0), ("question:2@3", 0)]
    assert [r["steps"] for r in top["runs"]] == [2, 2, 3]  # `@3`: that mode's own step count
    assert all(r["dev_n"] == 8 and 0 < r["train_seconds"] <= r["seconds"] for r in top["runs"])
    for i, mode in ((1, "question"), (2, "question:2@3")):
        assert top["summary"]["delta"][mode]["deltas"] == [top["runs"][i]["dev_spearman"] - top["runs"][0]["dev_spearman"]]


def test_bench_judge_cost_smoke(shared_data):
    lines = run("bench_judge_cost.py", "--n", "4", "--backbone", "tiny-llama", "--max-new-tokens", "2", "--judge-batch-size", "2")
    assert re.fullmatch(r"orca_s_per_item=\d+\.\d{3} judge_s_per_item=\d+\.\d{3} judge_cost_ratio=\d+\.\d\d", lines[-1]), lines[-1]


def test_gpu_check_cpu_smoke(shared_data, tmp_path):
    # `make gpu-check`'s script end to end on CPU with a tiny model, so it cannot rot where CI has no GPU
    out = tmp_path / "gpu_check.json"
    lines = run("gpu_check.py", "--cpu-smoke", "--json", str(out), timeout=600)
    assert re.fullmatch(r"gpu_check train_steps_per_s=\d+\.\d{3} shared_prefix_steps_per_s=\d+\.\d{3} "
                        r"predict_items_per_s=\d+\.\d bf16_max_abs_diff=\d\.\d{4}", lines[-1]), lines[-1]  # fmt: skip
    top = json.loads(out.read_text())
    assert top["args"]["cpu_smoke"] and top["accelerate"] and top["peft"] and top["package"]["name"] == "orca-judge"
    shuffled, question = top["training"]
    assert (shuffled["batching"], question["batching"]) == ("shuffled", "question") and question["prefix_sharing"] is True
    assert question["computed_tokens_per_s"] < question["input_tokens_per_s"]  # the shared prefixes were computed once
    assert top["scoring"]["records"] == 40 and top["scoring"]["items_per_s"] > 0
    # bf16 really ran (scores differ a little from float32) and stays close on the rating scale
    assert 0 < top["bf16_vs_float32"]["max_abs_diff"] < 0.1 and top["bf16_vs_float32"]["records"] == 20


def test_compare_judges_pairs_the_runs_items_against_scipy(tmp_path):
    # two fake run folders: the same 40 in-domain items (one more in the second run, left out) and 30 items of one
    # out-of-domain set, and the probe suite with different failing ids; differences checked against scipy / numpy
    import numpy as np
    from scipy.stats import spearmanr

    from eval_suite.report.probes import load_probes

    rng = np.random.default_rng(0)
    human = rng.integers(1, 6, size=40)
    probe_ids = [r["id"] for r in load_probes()]
    runs, means, scores = [], {}, {}
    for k, noise in enumerate((0.5, 2.0)):
        run_dir = tmp_path / f"run{k}"
        run_dir.mkdir()
        means[k] = human + rng.normal(0, noise, size=40)
        scores[k] = np.clip(np.round(means[k]) - 1, 0, 4) / 4  # a stand-in for the clamped [0, 1] score
        test = [{"id": f"t{i}", "ratings": [int(h)], "mean": float(m), "score": float(u)}
                for i, (h, m, u) in enumerate(zip(human, means[k], scores[k]))]
        if k == 1:
            test.append({"id": "only-here", "ratings": [3], "mean": 3.0, "score": 0.5})
        (run_dir / "test_predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in test))
        ood = [{"set": "nq_open_graded", "id": f"o{i}", "ratings": [int(human[i])], "mean": float(means[k][i]),
                "score": float(scores[k][i])} for i in range(30)]  # fmt: skip
        (run_dir / "ood_predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in ood))
        failed = probe_ids[: 100 + 50 * k]
        (run_dir / "metrics.json").write_text(json.dumps({"probes": {"n": len(probe_ids), "failed_ids": failed}}))
        runs.append(run_dir)
    out = tmp_path / "judges.json"
    lines = run("compare_judges.py", "--runs", *map(str, runs), "--bootstrap", "200", "--json", str(out))
    assert lines[-2] == f"judges={runs[0]},{runs[1]}"
    assert re.fullmatch(r"run1_minus_run0: in_domain_test=[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\] "
                        r"nq_open_graded=[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", lines[-1]), lines[-1]  # fmt: skip
    top = json.loads(out.read_text())
    assert top["left_out"]["in_domain_test"] == {str(runs[0]): 0, str(runs[1]): 1}
    for set_name, n in (("in_domain_test", 40), ("nq_open_graded", 30)):
        judges = top["sets"][set_name]
        for k in (0, 1):
            assert judges[str(runs[k])]["n"] == n
            assert abs(judges[str(runs[k])]["spearman"] - spearmanr(means[k][:n], human[:n]).statistic) < 1e-12
        low, high = judges[str(runs[1])]["diff_ci"]["spearman"]
        assert low <= judges[str(runs[1])]["spearman"] - judges[str(runs[0])]["spearman"] <= high
    probes = top["probes"][str(runs[1])]
    assert abs(probes["diff"] - (-50 / len(probe_ids))) < 1e-12 and probes["diff_ci"][0] < probes["diff"] < probes["diff_ci"][1]
    # --clamped: the scores on 1-5, not the means
    run("compare_judges.py", "--runs", *map(str, runs), "--bootstrap", "50", "--clamped", "--json", str(out))
    top = json.loads(out.read_text())
    assert top["statistic"] == "clamped score"
    for k in (0, 1):
        expected = spearmanr(1 + 4 * scores[k][:30], human[:30]).statistic
        assert abs(top["sets"]["nq_open_graded"][str(runs[k])]["spearman"] - expected) < 1e-12
    # an item predicted twice in one run is refused, naming the file, not silently replaced
    with open(runs[1] / "ood_predictions.jsonl", "a") as f:
        f.write(json.dumps({"set": "nq_open_graded", "id": "o3", "ratings": [1], "mean": 1.0}) + "\n")
    proc = subprocess.run([sys.executable, str(BENCH / "compare_judges.py"), "--runs", *map(str, runs)], cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode != 0 and f"{runs[1] / 'ood_predictions.jsonl'}: id 'o3' appears twice in set nq_open_graded" in proc.stderr


def test_first_examples_are_valid_scoring_input():
    """benchmarks/first_examples.jsonl (the README's first examples) reads as orca-score reads its input."""
    from eval_suite.scoring.scorer import read_entries

    entries, blank = read_entries(REPO / "benchmarks" / "first_examples.jsonl", "raise")
    assert blank == 0 and len(entries) == 6


def test_probe_ceiling_keeps_the_held_out_questions_out_of_train(shared_data, tmp_path):
    import numpy as np

    from eval_suite.report.probes import labels, load_probes

    out = tmp_path / "data"
    run("probe_ceiling.py", "write", "--out", str(out), "--repeat", "2")
    halves = json.loads((out / "split.json").read_text())
    probes = load_probes()
    assert sorted(halves["train"] + halves["held_out"]) == sorted({p["question_id"] for p in probes})
    assert not set(halves["train"]) & set(halves["held_out"])
    train = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    added = [r for r in train if r["id"].startswith("probe-train-")]
    in_train = [p for p in probes if p["question_id"] in set(halves["train"])]
    assert len(added) == 2 * len(in_train) and len({r["id"] for r in train}) == len(train)
    assert all(r["ratings"] == [5 if labels(r)["expected"] == "right" else 1] * 3 for r in added)
    assert not {p["id"] for p in probes if p["question_id"] in set(halves["held_out"])} & {r["id"].split("-", 3)[-1] for r in added}
    # score: accuracy on the held-out half from a run's failed_ids, against numpy
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    failed = [p["id"] for p in probes][::3]
    (run_dir / "metrics.json").write_text(json.dumps({"probes": {"n": len(probes), "failed_ids": failed}}))
    line = run("probe_ceiling.py", "score", "--split", str(out / "split.json"), "--runs", str(run_dir))[-1]
    held = np.array([p["question_id"] in set(halves["held_out"]) for p in probes])
    passed = np.array([p["id"] not in set(failed) for p in probes])
    assert (f"held-out half {passed[held].mean():.3f} ({passed[held].sum()}/{held.sum()}), the other half "
            f"{passed[~held].mean():.3f} ({passed[~held].sum()}/{(~held).sum()})") in line


def test_bench_dtype_smoke(shared_data, tmp_path):
    out = tmp_path / "dtype.json"
    lines = run("bench_dtype.py", "--backbone", "tiny-llama", "--n", "6", "--gemm-size", "128", "--dtypes", "float32,bfloat16,int8",
                "--json", str(out))  # fmt: skip
    assert re.fullmatch(r"tiny-llama float32_items_s=\S+ bfloat16_items_s=\S+ int8_items_s=\S+ speedup_bfloat16=\S+ "
                        r"max_abs_mean_diff_bfloat16=\d+\.\d{4} speedup_int8=\S+ max_abs_mean_diff_int8=\d+\.\d{4} "
                        r"floor_fraction_float32=\S+ floor_fraction_bfloat16=\S+ floor_fraction_int8=\S+", lines[-1]), lines[-1]
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"float32", "bfloat16", "int8"} and result["n"] <= 6 and "avx512_bf16" in result["cpu"]
    for run_ in result["runs"].values():  # the floor at each dtype's own GEMM rate, against that dtype's time
        assert run_["floor_seconds"] > 0 and run_["gemm_gflops"] > 0 and run_["floor_fraction"] > 0
    assert len({run_["floor_gflop"] for run_ in result["runs"].values()}) == 1  # the same work in each dtype
    for dtype in ("bfloat16", "int8"):  # the same head on the same inputs: rounding only, but rounding that really ran
        assert 0 < result["vs_float32"][dtype]["max_abs_mean_diff"] < 0.5


def test_bench_dtype_refuses_bad_dtypes(shared_data):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_dtype.py"), "--dtypes", "int8,float32"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "--dtypes int8,float32: float32 first" in proc.stderr


def test_bench_dtype_times_a_saved_judge(shared_data, tmp_path):
    from conftest import tiny_llama_orca

    model, tokenizer = tiny_llama_orca()
    model.save_pretrained(tmp_path / "judge")
    tokenizer.save_pretrained(tmp_path / "judge")
    # the judge is timed on this repository's code, not on the copy saved with it (which may be older)
    (tmp_path / "judge" / "modeling_orca.py").write_text("raise RuntimeError('the saved copy of the code ran')\n")
    out = tmp_path / "dtype.json"
    lines = run("bench_dtype.py", "--model", str(tmp_path / "judge"), "--n", "6", "--gemm-size", "128", "--dtypes", "float32,int8",
                "--json", str(out))  # fmt: skip
    assert lines[-1].startswith(f"{tmp_path / 'judge'} float32_items_s=") and "speedup_int8=" in lines[-1]
    result = json.loads(out.read_text())
    assert result["model"] == str(tmp_path / "judge") and set(result["runs"]) == {"float32", "int8"}


def test_bench_dtype_times_a_config_before_training(shared_data, tmp_path):
    """--config: the judge a training config makes, untrained; its layers count (half the layers, half the floor)."""
    floors = {}
    for layers in (None, 1):
        config = tmp_path / f"judge-{layers}.yaml"
        config.write_text(f"model: {{backbone: tiny-llama, backbone_layers: {'null' if layers is None else layers}}}\n")
        out = tmp_path / f"dtype-{layers}.json"
        lines = run("bench_dtype.py", "--config", str(config), "--n", "6", "--gemm-size", "128", "--dtypes", "float32",
                    "--json", str(out))  # fmt: skip
        assert lines[-1].startswith(f"{config} float32_items_s="), lines[-1]
        result = json.loads(out.read_text())
        assert result["config"] == str(config) and result["backbone"] is None and result["model"] is None
        floors[layers] = result["runs"]["float32"]["floor_gflop"]
    assert floors[1] == pytest.approx(floors[None] / 2, rel=1e-9)
    proc = subprocess.run([sys.executable, str(BENCH / "bench_dtype.py"), "--config", str(config), "--model", "x"], cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "--model and --config: one judge at a time" in proc.stderr


def test_layer_scan_smoke(shared_data, tmp_path):
    out = tmp_path / "scan.json"
    lines = run("layer_scan.py", "--config", "configs/qwen-judge.yaml", "--model.backbone", "tiny-llama", "--train-items", "40",
                "--eval-items", "30", "--json", str(out), timeout=300)  # fmt: skip
    assert re.fullmatch(r"best_dev_layer=[12] test_spearman=-?\d\.\d{3} probes=\d\.\d{3} last_layer_test_spearman=-?\d\.\d{3} "
                        r"last_layer_probes=\d\.\d{3}", lines[-1]), lines[-1]  # fmt: skip
    top = json.loads(out.read_text())
    assert top["package"]["name"] == "orca-judge" and top["config"]["model"]["backbone"] == "tiny-llama"
    assert [row["layer"] for row in top["layers"]] == [1, 2]  # every layer of the 2-layer backbone, one pass
    assert top["counts"]["train"] <= 40 and top["counts"]["probes"] >= 300
    assert all(row["C"] in (1e-4, 3e-4, 1e-3, 3e-3, 1e-2) and 0 <= row["probes"] <= 1 for row in top["layers"])
