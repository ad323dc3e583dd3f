"""Scoring throughput: the package's `predict` against the reference release's naive path and the compute floor.

(a) `OrcaForCorrectnessDistribution.predict` (base model, no vocabulary logits, token-budget batches of similar
    length, inference mode, SDPA, prefix sharing on causal decoders).
(b) the naive path of the reference release's `orca-infer`: `AutoModelForCausalLM` (`AutoModelForMaskedLM` for an
    encoder) with `output_hidden_states=True`, fixed batches in file order, the last layer's hidden state pooled
    like (a) and the same head; at its best batch size (picked on a calibration subset).
(c) the floor: the backbone's FLOPs for the tokens that must be computed at least once (for a causal decoder
    pooled at the last token: every distinct token prefix of the inputs once; otherwise every input's tokens),
    divided by the float32 matrix-multiply rate measured in the same run with the same threads.

Both paths get the same backbone weights, the same head and the same input string (the release template); the
means must agree within 1e-4. Last line: `speedup_vs_naive=X.XX floor_fraction=Y.YY` (first backbone).

    .venv/bin/python benchmarks/bench_scoring.py                      # 1,000 EVOUNA-NQ answers, SmolLM2 + MiniLM
    .venv/bin/python benchmarks/bench_scoring.py --backbone smollm2 --ablations
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch  # noqa: I001
from _common import (
    BACKBONES,
    PeakMemory,
    backbone_folder,
    gemm_gflops,
    is_decoder,
    load_line,
    load_records,
    orca_model,
)


def naive_means(model, tokenizer, texts, head, pooling, batch_size, add_special_tokens, config) -> torch.Tensor:
    """The release's loop: fixed batches in file order, all hidden states stored, vocabulary logits computed."""
    from modeling_orca import distribution_statistics

    tokenizer.padding_side = "right"
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(texts[start : start + batch_size], add_special_tokens=add_special_tokens, padding=True, return_tensors="pt")
            res = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True)
            hidden, mask = res.hidden_states[-1], enc["attention_mask"].bool()
            if pooling == "mean":
                pooled = hidden.masked_fill(~mask[..., None], 0).sum(1) / mask.sum(1, keepdim=True)
            else:
                pooled = hidden[torch.arange(len(hidden)), mask.long().cumsum(1).argmax(1)]
            out.append(distribution_statistics(head(pooled), config)[0])
    return torch.cat(out)


def floor_tokens(token_ids: list[list[int]], causal: bool) -> tuple[int, list[int]]:
    """(tokens computed at least once, the attention context of each): a causal decoder pooled at the last token
    needs each distinct token prefix once (a trie over all inputs, context = depth); otherwise each distinct input's
    tokens, each seeing the whole input."""
    contexts = []
    if causal:
        seen = set()
        for ids in token_ids:
            for k in range(len(ids)):
                key = tuple(ids[: k + 1])
                if key not in seen:
                    seen.add(key)
                    contexts.append(k + 1)
    else:
        for ids in {tuple(t) for t in token_ids}:
            contexts += [len(ids)] * len(ids)
    return len(contexts), contexts


def backbone_flops(model, contexts: list[int]) -> float:
    """Matrix FLOPs of the backbone: 2 x linear weights per token + 4 x attention width x context per token and layer."""
    backbone = model.backbone
    cfg = backbone.config.get_text_config()
    linear = sum(m.weight.numel() for n, m in backbone.named_modules() if isinstance(m, torch.nn.Linear) and "pooler" not in n)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    width = cfg.num_attention_heads * head_dim
    return 2.0 * linear * len(contexts) + 4.0 * width * cfg.num_hidden_layers * sum(contexts)


def timed(fn):
    with PeakMemory() as mem:
        t = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t
    return result, seconds, mem


def bench_backbone(name: str, records: list[dict], args, tmp: Path) -> dict:
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    from modeling_orca import encode_fields, format_input, input_variants

    folder, pooling = backbone_folder(name, tmp)
    add_special = name == "minilm"  # BERT needs its [CLS] ... [SEP]
    model, tokenizer = orca_model(folder, pooling, add_special_tokens=add_special)
    config = model.config
    causal = model.prefix_sharing_supported()
    token_ids = encode_fields([input_variants(r, config)[0] for r in records], tokenizer, config)
    texts = [format_input(r, config) for r in records]
    whole = tokenizer(texts, add_special_tokens=add_special)["input_ids"]
    same_ids = sum(a == b for a, b in zip(token_ids, whole))
    n_tokens = sum(len(t) for t in token_ids)
    gemm = [gemm_gflops(args.gemm_size) for _ in range(3)]

    # (a) the package's predict (warm-up on a few records first)
    model.predict(records[:4], tokenizer, batch_size=args.batch_size)
    preds, t_a, mem_a = timed(lambda: model.predict(records, tokenizer, batch_size=args.batch_size))
    gemm += [gemm_gflops(args.gemm_size) for _ in range(3)]
    mean_a = torch.tensor([p["mean"] for p in preds])

    ablations = []
    if args.ablations:
        runs = [("no prefix sharing", dict(share_prefix=False))]
        runs += [(f"max_batch_tokens={b}", dict(max_batch_tokens=b)) for b in (512, 1024, 2048, 8192)]
        runs += [("no sharing, batch_size=8 (items)", dict(share_prefix=False, max_batch_tokens=8 * max(map(len, token_ids))))]
        for label, kw in runs:
            _, t, mem = timed(lambda kw=kw: model.predict(records, tokenizer, batch_size=args.batch_size, **kw))
            ablations.append(dict(variant=label, seconds=round(t, 2), items_per_s=round(len(records) / t, 2), peak_mib=round(mem.peak_mib)))
            print(f"  ablation {label:<36} {len(records) / t:8.2f} items/s  ({t:.1f} s)", flush=True)
        gemm += [gemm_gflops(args.gemm_size) for _ in range(3)]

    # (b) the naive path at its best batch size
    naive_cls = AutoModelForCausalLM if is_decoder(model.backbone) else AutoModelForMaskedLM
    naive = naive_cls.from_pretrained(folder).eval()
    head = model.score_head
    sizes = [int(s) for s in args.naive_batch_sizes.split(",")]
    calib = []
    if len(sizes) > 1:
        sub = texts[: args.calib]
        naive_means(naive, tokenizer, sub[:4], head, pooling, 4, add_special, config)
        for bs in sizes:
            _, t, _ = timed(lambda bs=bs: naive_means(naive, tokenizer, sub, head, pooling, bs, add_special, config))
            calib.append((len(sub) / t, bs))
        best = max(calib)[1]
    else:
        best = sizes[0]
        naive_means(naive, tokenizer, texts[:4], head, pooling, best, add_special, config)
    mean_b, t_b, mem_b = timed(lambda: naive_means(naive, tokenizer, texts, head, pooling, best, add_special, config))
    gemm += [gemm_gflops(args.gemm_size) for _ in range(3)]


    # (c) the floor
    n_floor, contexts = floor_tokens(token_ids, causal)
    flops = backbone_flops(model, contexts)
    rate = statistics.median(gemm)
    t_floor = flops / (rate * 1e9)
    diff = float((mean_a - mean_b).abs().max())
    n = len(records)
    return dict(
        backbone=name,
        records=n,
        questions=len({r["question"] for r in records}),
        input_tokens=n_tokens,
        floor_tokens=n_floor,
        token_ids_equal_to_whole_text=f"{same_ids}/{n}",
        prefix_sharing=causal and config.share_prefix,
        a=dict(seconds=round(t_a, 2), items_per_s=round(n / t_a, 2), tokens_per_s=round(n_tokens / t_a, 1), peak_mib=round(mem_a.peak_mib), extra_mib=round(mem_a.extra_mib)),
        b=dict(seconds=round(t_b, 2), items_per_s=round(n / t_b, 2), tokens_per_s=round(n_tokens / t_b, 1), peak_mib=round(mem_b.peak_mib), extra_mib=round(mem_b.extra_mib), batch_size=best,
               calibration={bs: round(r, 2) for r, bs in calib}),
        floor=dict(gflop=round(flops / 1e9, 1), gemm_gflops_median=round(rate, 1), gemm_gflops_all=[round(g, 1) for g in gemm], seconds=round(t_floor, 2),
                   items_per_s=round(n / t_floor, 2)),
        speedup_vs_naive=t_b / t_a,
        floor_fraction=t_floor / t_a,
        max_abs_mean_diff=diff,
        agree=diff <= 1e-4,
        ablations=ablations,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="answers to score (whole questions, EVOUNA-NQ)")
    p.add_argument("--backbone", action="append", choices=BACKBONES, help="repeatable; default smollm2 then minilm")
    p.add_argument("--data-dir", default=None, help="../shared/data by default")
    p.add_argument("--batch-size", type=int, default=16, help="predict's batch_size (token budget = 256 x this)")
    p.add_argument("--naive-batch-sizes", default="4,8,16", help="batch sizes tried for the naive path")
    p.add_argument("--calib", type=int, default=120, help="records of the naive batch-size calibration")
    p.add_argument("--gemm-size", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, = cores)")
    p.add_argument("--ablations", action="store_true", help="also time predict without each technique")
    p.add_argument("--json", default=None, help="write all results to this file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    backbones = args.backbone or ["smollm2", "minilm"]
    records = load_records(args.n, args.data_dir)
    print(f"{len(records)} records, {len({r['question'] for r in records})} questions; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {load_line()}", flush=True)  # fmt: skip
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in backbones:
            r = bench_backbone(name, records, args, Path(tmp))
            results.append(r)
            a, b, f = r["a"], r["b"], r["floor"]
            print(f"\n== {name}: {r['records']} items, {r['input_tokens']} input tokens, {r['floor_tokens']} to compute at least once; "
                  f"token ids = whole-text ids for {r['token_ids_equal_to_whole_text']}; prefix sharing {r['prefix_sharing']}")  # fmt: skip
            print(f"{'path':<28}{'items/s':>10}{'tokens/s':>11}{'seconds':>10}{'peak MiB':>10}")
            print(f"{'(a) predict':<28}{a['items_per_s']:>10.2f}{a['tokens_per_s']:>11.1f}{a['seconds']:>10.1f}{a['peak_mib']:>10}")
            print(f"{'(b) naive, batch ' + str(b['batch_size']):<28}{b['items_per_s']:>10.2f}{b['tokens_per_s']:>11.1f}{b['seconds']:>10.1f}{b['peak_mib']:>10}")
            print(f"{'(c) floor':<28}{f['items_per_s']:>10.2f}{'':>11}{f['seconds']:>10.1f}{'':>10}")
            print(f"floor: {f['gflop']} GFLOP at {f['gemm_gflops_median']} GFLOP/s (float32 {args.gemm_size}^3 GEMM, median of {f['gemm_gflops_all']})")
            print(f"a/b = {r['speedup_vs_naive']:.2f}x   floor/a = {r['floor_fraction']:.2f}   "
                  f"max |mean a - mean b| = {r['max_abs_mean_diff']:.2e} ({'agree' if r['agree'] else 'DISAGREE'} within 1e-4)", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(dict(results=results, load=load_line()), indent=1))
    print(load_line())
    first = results[0]
    print(f"speedup_vs_naive={first['speedup_vs_naive']:.2f} floor_fraction={first['floor_fraction']:.2f}")
    return 0 if all(r["agree"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
