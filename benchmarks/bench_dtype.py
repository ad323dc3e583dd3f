"""float32 against bfloat16 (and int8) on this CPU: `predict` on the same EVOUNA-NQ answers (whole questions, shared
prefixes) with the backbone's weights in each dtype, 2 threads; items/s and how far each dtype's scores are from
float32's.

    .venv/bin/python benchmarks/bench_dtype.py --backbone smollm2 --n 1000
    .venv/bin/python benchmarks/bench_dtype.py --backbone qwen2.5-coder-1.5b-instruct --n 100 --json runs/bench_dtype_qwen.json
    .venv/bin/python benchmarks/bench_dtype.py --model runs/qwen-judge/final --dtypes float32,int8 --n 100
    .venv/bin/python benchmarks/bench_dtype.py --config configs/judge.yaml --dtypes float32 --n 1000

The head is a seeded random one (std 0.05, as bench_scoring.py), so the scores spread; the same head in every run.
`--model` times a trained judge instead (its own template and head), so the differences are those its users see;
its weights and config run on this repository's code, not on the copy of the model files saved with it (a judge
trained before a change to the scoring path, e.g. `cpu_batch_tokens`, would otherwise be timed on the old path).
`--config` times the judge a training config makes, before training (its backbone, layers, template and alias
settings; the head as training starts it): what the judge that config trains costs to score, which does not depend
on its trained weights.
`int8` is not a dtype the package offers: the backbone's linear layers replaced by dynamically quantised int8 ones
(`torch.ao.quantization.quantize_dynamic`, int8 weights per tensor, activations quantised per batch; deprecated by
torch in favour of torchao, still in 2.13), measured to see what an int8 path would be worth on CPUs whose
bfloat16 is slow.
Also reports whether torch sees avx512_bf16 / AMX on this CPU and, per dtype, the compute floor as bench_scoring.py
defines it (every distinct token prefix once) at that dtype's GEMM rate: a `--gemm-size`^3 `F.linear` of that
dtype (the op the model's layers call; `torch.mm` in bfloat16 takes a far slower path here, its rate is recorded
too; int8: the quantised linear layer itself), the median of 3 before and of 3 after the timed run, and
`floor_fraction` = floor time / predict time.
Last line: `BACKBONE float32_items_s=X bfloat16_items_s=Y speedup_bfloat16=Z max_abs_mean_diff_bfloat16=D
floor_fraction_float32=F floor_fraction_bfloat16=G` (the fields of each dtype of `--dtypes`, in its order).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch  # noqa: I001
from _common import (
    BACKBONES,
    backbone_flops,
    backbone_folder,
    floor_tokens,
    gemm_gflops,
    load_line,
    load_records,
    orca_model,
    run_info,
)


def cpu_bf16_support() -> dict:
    return {"avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported()), "amx_tile": bool(torch.cpu._is_amx_tile_supported()),
            "capability": torch.backends.cpu.get_cpu_capability()}


def int8_linear(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with its `nn.Linear` layers replaced, in place, by dynamically quantised int8 ones."""
    import warnings

    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # "torch.ao.quantization is deprecated": known, said in the docstring above
        warnings.simplefilter("ignore")
        return quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)


def linear_gflops(size: int, dtype: str) -> float:
    """The GEMM rate of the model's layers in `dtype`: `F.linear` of two `size`^2 matrices; int8: a quantised
    `size` x `size` linear layer on a float32 `size`^2 input (the activations' quantisation included)."""
    if dtype != "int8":
        return gemm_gflops(size, dtype=getattr(torch, dtype), op="linear")
    layer, x = int8_linear(torch.nn.Sequential(torch.nn.Linear(size, size, bias=False))), torch.randn(size, size)
    with torch.inference_mode():
        layer(x)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            layer(x)
            times.append(time.perf_counter() - t)
    return 2 * size**3 / sorted(times)[1] / 1e9


def load_judge(args, folder: str | None, pooling: str | None, dtype: str):
    """(model, tokenizer) in `dtype`: the trained judge of `--model`, the untrained judge of `--config`, or the
    backbone with a seeded head."""
    weights = torch.float32 if dtype == "int8" else getattr(torch, dtype)
    if args.config:
        from training.config import load_run_config
        from training.model import build_model

        model, tokenizer = build_model(load_run_config(args.config, []))
        model = model.to(weights).eval()
    elif args.model:
        from transformers import AutoTokenizer

        from modeling_orca import OrcaForCorrectnessDistribution

        model = OrcaForCorrectnessDistribution.from_pretrained(args.model, dtype=weights, use_safetensors=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=True)  # its config.json names the remote classes
    else:
        model, tokenizer = orca_model(folder, pooling, dtype=weights)
    if dtype == "int8":
        int8_linear(model.backbone)
    return model, tokenizer


def floor_gflop(model, tokenizer, records: list[dict]) -> float:
    """The backbone's GFLOP for every distinct token prefix of the records' inputs (bench_scoring.py's floor)."""
    from processing_orca import encode_fields, input_variants

    token_ids = encode_fields([input_variants(r, model.config)[0] for r in records], tokenizer, model.config)
    return backbone_flops(model, floor_tokens(token_ids, model.prefix_sharing_supported)[1]) / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backbone", default="smollm2", choices=[b for b in BACKBONES if b != "minilm"])
    p.add_argument("--model", default=None, help="a trained judge's folder (or Hub id) instead of --backbone with a seeded head")
    p.add_argument("--config", default=None, help="a training config: the judge it trains, untrained (the same cost)")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated, float32 first: float32, bfloat16, int8 (default: %(default)s)")
    p.add_argument("--n", type=int, default=1000, help="answers (whole questions, EVOUNA-NQ)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--gemm-size", type=int, default=1024, help="the GEMM probe's size (default: %(default)s)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.model and args.config:
        p.error("--model and --config: one judge at a time")
    dtypes = args.dtypes.split(",")
    if dtypes[0] != "float32" or not set(dtypes) <= {"float32", "bfloat16", "int8"} or len(set(dtypes)) != len(dtypes):
        p.error(f"--dtypes {args.dtypes}: float32 first, then any of bfloat16, int8, each once")
    torch.set_num_threads(args.threads)
    records = load_records(args.n)
    print(f"{len(records)} answers, {len({r['question'] for r in records})} questions; {args.threads} threads; {load_line()}", flush=True)
    name = args.model or args.config or args.backbone
    result = {"backbone": None if args.model or args.config else args.backbone, "model": args.model, "config": args.config, "n": len(records), "cpu": cpu_bf16_support(), "runs": {}, **run_info(args)}
    means = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder, pooling = (None, None) if args.model or args.config else backbone_folder(args.backbone, Path(tmp))
        for dtype in dtypes:
            model, tokenizer = load_judge(args, folder, pooling, dtype)
            model.predict(records[:2], tokenizer)  # warm-up: one-time kernel choices
            before = linear_gflops(args.gemm_size, dtype)
            start = time.perf_counter()
            preds = model.predict(records, tokenizer)
            seconds = time.perf_counter() - start
            rate = (before + linear_gflops(args.gemm_size, dtype)) / 2
            means[dtype] = torch.tensor([p["mean"] for p in preds], dtype=torch.float64)
            if dtype == "float32":  # the same FLOPs in every dtype; counted on float32's `nn.Linear` layers
                gflop = floor_gflop(model, tokenizer, records)
            floor_s = gflop / rate
            run = {"seconds": round(seconds, 2), "items_per_s": round(len(records) / seconds, 3), "gemm_gflops": round(rate, 1),
                   "floor_gflop": gflop, "floor_seconds": floor_s, "floor_fraction": floor_s / seconds}
            if dtype != "int8":
                run["mm_gflops"] = round(gemm_gflops(args.gemm_size, dtype=getattr(torch, dtype)), 1)
            result["runs"][dtype] = run
            print(f"{dtype}: {seconds:.1f} s, {len(records) / seconds:.2f} answers/s; GEMM ({'quantised ' if dtype == 'int8' else 'F.'}linear) "
                  f"{rate:.1f} GFLOP/s, floor {floor_s:.1f} s, floor fraction {floor_s / seconds:.2f}", flush=True)
            del model
    from scipy.stats import spearmanr

    summary = [f"{d}_items_s={result['runs'][d]['items_per_s']}" for d in dtypes]
    result["vs_float32"] = {}
    for dtype in dtypes[1:]:
        diff = (means[dtype] - means["float32"]).abs()
        speedup = round(result["runs"]["float32"]["seconds"] / result["runs"][dtype]["seconds"], 3)
        result["vs_float32"][dtype] = dict(max_abs_mean_diff=float(diff.max()), mean_abs_mean_diff=float(diff.mean()), speedup=speedup,
                                           spearman=float(spearmanr(means[dtype], means["float32"]).statistic))
        summary += [f"speedup_{dtype}={speedup}", f"max_abs_mean_diff_{dtype}={float(diff.max()):.4f}"]
    summary += [f"floor_fraction_{d}={result['runs'][d]['floor_fraction']:.3f}" for d in dtypes]
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(name + " " + " ".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
