"""Agreement, speed and memory of a converted reference checkpoint against the reference release's own inference.

The reference release (github.com/BUTSpeechFIT/ORCA) is not part of this repository: give the path of a checkout
and the Python of an environment it is installed in (its `orca_score` package with transformers 4.57.1, CPU torch).
This script

1. builds a checkpoint in the release's layout (model/config.yaml, model/lm/, model/model_minus_lm.pt, tokenizer/)
   on SmolLM2-135M-Instruct (`eval_suite.models.backbones`): a LoRA adapter (r=16, random non-zero update) or a full model,
   and a random head scaled so that its predicted means spread over the rating scale;
2. runs the release's `python -m orca_score.infer --cpu` on the edge-case records of `push_to_hub.py`
   (REFERENCE_EDGE_RECORDS) and on `--n` EVOUNA-NQ answers, written in the release's record format;
3. converts the checkpoint with `push_to_hub.py convert-reference` and scores the same files with
   `orca-score --output-format reference`;
4. compares `rating_orca` and `variance_orca` record by record (max absolute difference, count within 1e-5) and
   reports wall time and peak memory (max RSS) of each command.

    python benchmarks/compare_reference.py --reference-checkout /tmp/ORCA --reference-python /tmp/refvenv/bin/python \\
        --out runs/compare-reference --n 1000

Both sides run on the CPU in float32 with `--threads` threads each, one after the other. Writes
OUT/compare_reference.json (figures, versions, arguments) and the four output files; last line:
`max_abs_diff=... within_1e-5=K/N speedup=... memory_ratio=...`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, load_line, load_records, run_info

from orca_io.jsonl import read_jsonl

# peak RSS of one command: run it as a child of a small wrapper and read the children's ru_maxrss
MEASURE = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[1:]).returncode
print("MEASURED", code, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def measure(cmd: list[str], *, env: dict, cwd: Path, log: Path) -> dict:
    with open(log, "w") as fh:
        proc = subprocess.run([sys.executable, "-c", MEASURE, *cmd], env=env, cwd=cwd, stdout=fh, stderr=subprocess.PIPE, text=True)
        fh.write(proc.stderr)
    line = next((x for x in proc.stderr.splitlines() if x.startswith("MEASURED ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}; see {log}")
    _, _, seconds, maxrss_kib = line.split()
    return {"seconds": round(float(seconds), 2), "peak_rss_mib": round(int(maxrss_kib) / 1024, 1)}


def compatible_config(folder: Path) -> None:
    """Let transformers 4.x read a config.json written by transformers 5: the RoPE base as `rope_theta` too (v5
    writes it only inside `rope_parameters`; v4 would fall back to its default 10,000)."""
    path = folder / "config.json"
    data = json.loads(path.read_text())
    rope = data.get("rope_parameters") or {}
    if "rope_theta" in rope:
        data["rope_theta"] = rope["rope_theta"]
    path.write_text(json.dumps(data, indent=2))


def build_reference_checkpoint(root: Path, score_type: str, lora: bool, seed: int) -> None:
    """The release's layout on SmolLM2-135M-Instruct, saved as the release saves it (yaml.dump, save_pretrained,
    torch.save of the head)."""
    import torch
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eval_suite.models.backbones import smollm2_path
    from eval_suite.models.reference_checkpoint import REFERENCE_HEADS

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    lm = AutoModelForCausalLM.from_pretrained(smollm2_path(), dtype=torch.float32)
    base = root / "base"
    lm.save_pretrained(base)
    compatible_config(base)
    lm = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if lora:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(lm, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                           init_lora_weights=False))
        with torch.no_grad():  # a small update: a different model, not a broken one
            for name, p in lm.named_parameters():
                if "lora_B" in name:
                    p.mul_(0.05)
    else:
        with torch.no_grad():
            for layer in lm.model.layers:
                layer.mlp.down_proj.weight.mul_(1 + 0.02 * torch.randn_like(layer.mlp.down_proj.weight))
    lm.eval()
    model_dir = root / "model"
    (model_dir / "lm").mkdir(parents=True)
    lm.save_pretrained(model_dir / "lm")
    if not lora:
        compatible_config(model_dir / "lm")
    # a head whose outputs vary by a few units over real inputs, so the predicted means spread over the scale
    texts = [" |context: A dog barks. |question: What animal is it? |correct answer: dog |candidate answer: " + c
             for c in ("a dog", "a cat", "a parrot", "it is a dog barking", "no idea", "the wind", "dog", "cow")]
    with torch.no_grad():
        batch = tokenizer(texts, add_special_tokens=False, padding=True, padding_side="right", return_tensors="pt")
        hidden = lm(**batch, output_hidden_states=True).hidden_states[-1]
        pooled = hidden[torch.arange(len(texts)), batch["attention_mask"].sum(-1) - 1]  # [8, H]
    outputs = REFERENCE_HEADS[score_type].outputs  # the release's head: 2 logits for bernoulli, not our 1
    weight = torch.randn(outputs, pooled.shape[1])
    weight *= 1.5 / (pooled @ weight.T).std(0).mean()
    bias = -(pooled @ weight.T).mean(0)
    torch.save({"linear.weight": weight, "linear.bias": bias}, model_dir / "model_minus_lm.pt")
    (model_dir / "config.yaml").write_text(yaml.dump({"score_type": score_type, "use_cls_token": False, "init_type": "xavier_normal"}))
    tokenizer.save_pretrained(root / "tokenizer")
    # transformers 4.x does not know v5's class name; both read tokenizer.json through this one
    config = json.loads((root / "tokenizer" / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def release_record(record: dict) -> dict:
    """A record in the release's JSONL format (one reference string: aliases joined by ' / ')."""
    ref = record["reference"]
    return {"id": record["id"], "question": record["question"], "reference": ref if isinstance(ref, str) else " / ".join(ref),
            "candidate": record["candidate"], "rationale": record.get("rationale") or "", "ratings": record["ratings"]}


def compare(ref_lines: list[dict], our_lines: list[dict]) -> dict:
    ours = {x["id"]: x for x in our_lines}
    diffs = []
    for x in ref_lines:
        o = ours[x["id"]]
        diffs.append((max(abs(x["rating_orca"] - o["rating_orca"]), abs(x["variance_orca"] - o["variance_orca"])), x["id"]))
    worst = max(diffs)
    means = [1 + 4 * x["rating_orca"] for x in ref_lines]
    return {"n": len(diffs), "n_ours": len(our_lines), "max_abs_diff": worst[0], "worst_id": worst[1],
            "within_1e-5": sum(d <= 1e-5 for d, _ in diffs), "reference_mean_rating_range": [min(means), max(means)]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference-checkout", required=True, type=Path, help="a checkout of github.com/BUTSpeechFIT/ORCA")
    p.add_argument("--reference-python", required=True, help="Python of an environment with the release's dependencies")
    p.add_argument("--out", required=True, type=Path, help="output folder (created; must be empty)")
    p.add_argument("--n", type=int, default=1000, help="EVOUNA-NQ answers (default: %(default)s)")
    p.add_argument("--score-type", default="multinomial", choices=("multinomial", "beta", "bernoulli"))
    p.add_argument("--full-model", action="store_true", help="a fully fine-tuned model/lm instead of a LoRA adapter")
    p.add_argument("--batch-size", type=int, default=16, help="the reference's --batch_size (default: %(default)s)")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="ours (default: orca-score's own, the model's)")
    p.add_argument("--threads", type=int, default=1, help="OMP/torch threads of each side (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    checkout = args.reference_checkout.resolve()
    if not (checkout / "orca_score" / "infer.py").exists():
        raise SystemExit(f"{checkout} is not a checkout of the reference release (no orca_score/infer.py)")
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    from eval_suite.models.reference_checkpoint import REFERENCE_EDGE_RECORDS

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    started = time.time()
    build_reference_checkpoint(out / "ref-checkpoint", args.score_type, not args.full_model, args.seed)
    files = {"edge": [release_record(r) for r in REFERENCE_EDGE_RECORDS],
             "evouna": [release_record(r) for r in load_records(args.n)]}
    for name, records in files.items():
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    ref_env = dict(env, PYTHONPATH=str(checkout))  # the checkout's code, whatever the environment has installed
    runs, results = {}, {}
    converted = out / "converted"
    runs["convert"] = measure([sys.executable, str(REPO / "push_to_hub.py"), "convert-reference", "--src",
                               str(out / "ref-checkpoint"), "--out", str(converted)], env=env, cwd=REPO, log=out / "convert.log")
    for name in files:
        runs[f"reference_{name}"] = measure(
            [args.reference_python, "-m", "orca_score.infer", "--model_path", str(out / "ref-checkpoint" / "model"),
             "--data_jsonl", str(out / f"{name}.jsonl"), "--output_dir", str(out / "reference"), "--cpu",
             "--batch_size", str(args.batch_size), "--do_not_evaluate"], env=ref_env, cwd=checkout, log=out / f"reference_{name}.log")
        runs[f"ours_{name}"] = measure(
            [sys.executable, "-m", "eval_suite.scoring.cli", "--model", str(converted), "--input", str(out / f"{name}.jsonl"),
             "--output", str(out / f"ours_{name}.jsonl"), "--output-format", "reference", "--device", "cpu",
             *(["--max-batch-tokens", str(args.max_batch_tokens)] if args.max_batch_tokens else []), "--quiet"], env=env, cwd=REPO, log=out / f"ours_{name}.log")
        results[name] = compare(read_jsonl(out / "reference" / name / "final_result.jsonl"), read_jsonl(out / f"ours_{name}.jsonl"))

    ref, ours = runs["reference_evouna"], runs["ours_evouna"]
    summary = {
        "results": results, "runs": runs,
        "speedup": round(ref["seconds"] / ours["seconds"], 2),
        "memory_ratio": round(ours["peak_rss_mib"] / ref["peak_rss_mib"], 3),
        "reference_checkout": str(checkout),
        "reference_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip() or None,
        "reference_versions": subprocess.run([args.reference_python, "-c", "import torch, transformers, peft; "
                                              "print(torch.__version__, transformers.__version__, peft.__version__)"],
                                             capture_output=True, text=True).stdout.strip(),
        "load": load_line(), "wall_seconds": round(time.time() - started, 1), **run_info(args),
    }
    (out / "compare_reference.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(json.dumps({"results": results, "runs": runs}, indent=1))
    worst = max(r["max_abs_diff"] for r in results.values())
    within = sum(r["within_1e-5"] for r in results.values())
    total = sum(r["n"] for r in results.values())
    print(f"max_abs_diff={worst:.2e} within_1e-5={within}/{total} speedup={summary['speedup']} memory_ratio={summary['memory_ratio']}")


if __name__ == "__main__":
    main()
