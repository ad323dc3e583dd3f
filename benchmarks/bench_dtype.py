"""float32 against bfloat16 on this CPU: `predict` on the same EVOUNA-NQ answers (whole questions, shared prefixes)
with the backbone's weights in each dtype, 2 threads; items/s and how far the bfloat16 scores are from float32's.

    .venv/bin/python benchmarks/bench_dtype.py --backbone smollm2 --n 1000
    .venv/bin/python benchmarks/bench_dtype.py --backbone qwen2.5-coder-1.5b-instruct --n 100 --json runs/bench_dtype_qwen.json

The head is a seeded random one (std 0.05, as bench_scoring.py), so the scores spread; the same head in both runs.
Also reports whether torch sees avx512_bf16 / AMX on this CPU and, per dtype, the compute floor as bench_scoring.py
defines it (every distinct token prefix once) at that dtype's GEMM rate: a `--gemm-size`^3 `F.linear` of that
dtype (the op the model's layers call; `torch.mm` in bfloat16 takes a far slower path here, its rate is recorded
too), the median of 3 before and of 3 after the timed run, and `floor_fraction` = floor time / predict time.
Last line: `BACKBONE float32_items_s=X bfloat16_items_s=Y speedup_bf16=Z max_abs_mean_diff=D`.
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


def floor_gflop(model, tokenizer, records: list[dict]) -> float:
    """The backbone's GFLOP for every distinct token prefix of the records' inputs (bench_scoring.py's floor)."""
    from processing_orca import encode_fields, input_variants

    token_ids = encode_fields([input_variants(r, model.config)[0] for r in records], tokenizer, model.config)
    return backbone_flops(model, floor_tokens(token_ids, model.prefix_sharing_supported)[1]) / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backbone", default="smollm2", choices=[b for b in BACKBONES if b != "minilm"])
    p.add_argument("--n", type=int, default=1000, help="answers (whole questions, EVOUNA-NQ)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--gemm-size", type=int, default=1024, help="the GEMM probe's size (default: %(default)s)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    records = load_records(args.n)
    print(f"{len(records)} answers, {len({r['question'] for r in records})} questions; {args.threads} threads; {load_line()}", flush=True)
    result = {"backbone": args.backbone, "n": len(records), "cpu": cpu_bf16_support(), "runs": {}, **run_info(args)}
    means = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder, pooling = backbone_folder(args.backbone, Path(tmp))
        for dtype in (torch.float32, torch.bfloat16):
            name = str(dtype).removeprefix("torch.")
            model, tokenizer = orca_model(folder, pooling, dtype=dtype)
            model.predict(records[:2], tokenizer)  # warm-up: one-time kernel choices
            before = gemm_gflops(args.gemm_size, dtype=dtype, op="linear")
            start = time.perf_counter()
            preds = model.predict(records, tokenizer)
            seconds = time.perf_counter() - start
            rate = (before + gemm_gflops(args.gemm_size, dtype=dtype, op="linear")) / 2
            means[name] = torch.tensor([p["mean"] for p in preds], dtype=torch.float64)
            floor_s = floor_gflop(model, tokenizer, records) / rate
            result["runs"][name] = {"seconds": round(seconds, 2), "items_per_s": round(len(records) / seconds, 3),
                                    "gemm_gflops": round(rate, 1), "mm_gflops": round(gemm_gflops(args.gemm_size, dtype=dtype), 1), "floor_seconds": floor_s, "floor_fraction": floor_s / seconds}
            print(f"{name}: {seconds:.1f} s, {len(records) / seconds:.2f} answers/s; GEMM (F.linear) {rate:.1f} GFLOP/s, floor {floor_s:.1f} s, "
                  f"floor fraction {floor_s / seconds:.2f}", flush=True)
            del model
    from scipy.stats import spearmanr

    diff = (means["bfloat16"] - means["float32"]).abs()
    result.update(max_abs_mean_diff=float(diff.max()), mean_abs_mean_diff=float(diff.mean()),
                  spearman_bf16_vs_f32=float(spearmanr(means["bfloat16"], means["float32"]).statistic),
                  speedup_bf16=round(result["runs"]["float32"]["seconds"] / result["runs"]["bfloat16"]["seconds"], 3))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.backbone} float32_items_s={result['runs']['float32']['items_per_s']} bfloat16_items_s={result['runs']['bfloat16']['items_per_s']} "
          f"speedup_bf16={result['speedup_bf16']} max_abs_mean_diff={result['max_abs_mean_diff']:.4f} "
          f"floor_fraction_float32={result['runs']['float32']['floor_fraction']:.3f} floor_fraction_bfloat16={result['runs']['bfloat16']['floor_fraction']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
