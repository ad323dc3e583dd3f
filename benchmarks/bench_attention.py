"""Attention over prefix-tree rows: transformers' SDPA against `modeling_orca.tree_attention_forward`.

`predict` (prefix sharing) is run once on N real records with transformers' own SDPA, and the first layer's
query, key, value and mask of every batch are kept. On those inputs this times, interleaved over `--repeats`
rounds (medians reported):

- transformers' `sdpa_attention_forward` on the whole row (what `predict` used before: with a mask it repeats each
  key/value head for every query head it serves, and SDPA computes every query-key pair);
- SDPA with grouped-query attention in the kernel, whole row;
- `tree_attention_forward` (GQA in the kernel, each chunk of queries against the keys up to its last query) at
  several chunk sizes: `predict` uses `tree_attention_queries` (32).

It also counts the query-key pairs each computes against those the tree masks allow, and checks that every variant
agrees with the first within 1e-5. Last line: `attention_speedup=X.XX` (the default chunk against transformers'
SDPA).

    .venv/bin/python benchmarks/bench_attention.py                    # 300 EVOUNA-NQ answers, SmolLM2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import backbone_folder, load_line, load_records, orca_model, run_info


def capture_first_layer(model, tokenizer, records, batch_size):
    """(module, query, key, value, mask, scaling) of layer 0 in each batch of a prefix-shared `predict`."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    captured = []
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def capture(module, query, key, value, attention_mask, **kwargs):
        if module.layer_idx == 0 and attention_mask is not None and attention_mask.dim() == 4:
            captured.append((module, query.clone(), key.clone(), value.clone(), attention_mask.clone(), kwargs.get("scaling")))
        return sdpa(module, query, key, value, attention_mask, **kwargs)

    model.tree_attention_queries = None  # transformers' SDPA on whole rows, through the capture
    ALL_ATTENTION_FUNCTIONS["sdpa"] = capture
    try:
        model.predict(records, tokenizer, batch_size=batch_size)
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa
        del model.tree_attention_queries
    return captured


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=300, help="answers to score (whole questions, EVOUNA-NQ)")
    p.add_argument("--backbone", default="smollm2", choices=["smollm2", "tiny-llama"])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--chunks", default="16,32,64,128", help="query chunk sizes of tree_attention_forward")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="write the results to this file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from modeling_orca import OrcaForCorrectnessDistribution, tree_attention_forward

    records = load_records(args.n, args.data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        folder, pooling = backbone_folder(args.backbone, Path(tmp))
        model, tokenizer = orca_model(folder, pooling, add_special_tokens=False, device="cpu", dtype=torch.float32)
    if not model.prefix_sharing_supported():
        raise SystemExit(f"{args.backbone}: no prefix sharing, so no tree rows to attend over")
    captured = capture_first_layer(model, tokenizer, records, args.batch_size)
    default = OrcaForCorrectnessDistribution.tree_attention_queries
    chunks = [int(c) for c in args.chunks.split(",")]
    if default not in chunks:
        chunks.append(default)

    def whole_row_gqa(module, query, key, value, mask, scaling):
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
        return out.transpose(1, 2)

    variants = {"transformers sdpa, whole row": lambda m, q, k, v, mask, s: sdpa_attention_forward(m, q, k, v, mask, scaling=s)[0],
                "sdpa with GQA in the kernel, whole row": whole_row_gqa}  # fmt: skip
    for c in chunks:
        variants[f"tree_attention_forward, {c}-query chunks"] = lambda m, q, k, v, mask, s, c=c: tree_attention_forward(m, q, k, v, mask, scaling=s, query_chunk=c)[0]

    # query-key pairs: computed by a whole row, by query chunks, allowed by the masks
    def chunked_pairs(c):
        total = 0
        for _, q, k, *_ in captured:
            b, h, t, _ = q.shape
            offset = k.shape[2] - t
            total += sum(b * h * (min(s + c, t) - s) * (offset + min(s + c, t)) for s in range(0, t, c))
        return total

    pairs = dict(whole_row=sum(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] for _, q, k, _, _, _ in captured),
                 allowed=sum(int(mask.sum()) * q.shape[1] for _, q, _, _, mask, _ in captured),
                 **{f"chunks_{c}": chunked_pairs(c) for c in chunks})  # fmt: skip

    reference = [variants["transformers sdpa, whole row"](*x) for x in captured]
    max_diff = {name: max(float((f(*x) - r).abs().max()) for x, r in zip(captured, reference)) for name, f in variants.items()}
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, f in variants.items():
            t = time.perf_counter()
            for x in captured:
                f(*x)
            times[name].append(time.perf_counter() - t)
    ms = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    base = ms["transformers sdpa, whole row"]
    default_name = f"tree_attention_forward, {default}-query chunks"

    shapes = sorted({tuple(q.shape[:1]) + tuple(q.shape[2:3]) for _, q, _, _, _, _ in captured}, key=lambda s: -s[1])
    print(f"{len(records)} records, {len(captured)} batches (rows x width: {', '.join(f'{b}x{t}' for b, t in shapes[:6])}...); "
          f"{torch.get_num_threads()} threads; {load_line()}")  # fmt: skip
    print(f"query-key pairs (x heads): whole row {pairs['whole_row']:,}, allowed by the tree masks {pairs['allowed']:,}; "
          + ", ".join(f"{c}-query chunks {pairs[f'chunks_{c}']:,}" for c in chunks))  # fmt: skip
    print(f"{'variant':<44}{'ms per layer':>14}{'vs sdpa':>10}{'max diff':>11}")
    for name in variants:
        print(f"{name:<44}{ms[name]:>14.1f}{base / ms[name]:>9.2f}x{max_diff[name]:>11.1e}")
    print(load_line())
    agree = all(d < 1e-5 for d in max_diff.values())
    out = dict(
        **run_info(args), records=len(records), batches=len(captured), pairs=pairs,
        variants=[dict(variant=name, ms_per_layer=round(ms[name], 2), runs_ms=[round(t * 1e3, 2) for t in times[name]],
                       speedup_vs_sdpa=round(base / ms[name], 3), max_abs_diff=max_diff[name]) for name in variants],
        default_chunk=default, agree=agree,
    )  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))
    print(f"attention_speedup={base / ms[default_name]:.2f}")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
