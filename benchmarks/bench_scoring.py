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
means must agree within 1e-4 (0.05 in 16-bit types). (a) runs `--repeats` times, each between GEMM probes; medians
are reported. Last line:
`speedup_vs_naive=X.XX floor_fraction=Y.YY` (first backbone).

    .venv/bin/python benchmarks/bench_scoring.py                      # 1,000 EVOUNA-NQ answers, SmolLM2 + MiniLM
    .venv/bin/python benchmarks/bench_scoring.py --backbone smollm2 --ablations
    .venv/bin/python benchmarks/bench_scoring.py --n 300 --backbone smollm2 --ablation sharing --ablation-repeats 5
    git show REV:modeling_orca.py > /tmp/old.py && .venv/bin/python benchmarks/bench_scoring.py --compare-with /tmp/old.py
    python benchmarks/bench_scoring.py --backbone llama3b-random --device cuda --dtype bfloat16 --n 10000 --max-batch-tokens 16384
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch  # noqa: I001
from _common import (
    BACKBONES,
    PeakMemory,
    backbone_flops,
    backbone_folder,
    floor_tokens,
    gemm_gflops,
    is_decoder,
    load_line,
    load_records,
    orca_model,
    run_info,
)


def naive_means(model, tokenizer, texts, head, pooling, batch_size, add_special_tokens, config) -> torch.Tensor:
    """The release's loop: fixed batches in file order, all hidden states stored, vocabulary logits computed."""
    from modeling_orca import distribution_statistics

    tokenizer.padding_side = "right"
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(texts[start : start + batch_size], add_special_tokens=add_special_tokens, padding=True, return_tensors="pt")
            enc = enc.to(model.device)
            res = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_hidden_states=True)
            hidden, mask = res.hidden_states[-1], enc["attention_mask"].bool()
            if pooling == "mean":
                pooled = hidden.masked_fill(~mask[..., None], 0).sum(1) / mask.sum(1, keepdim=True)
            else:
                pooled = hidden[torch.arange(len(hidden)), mask.long().cumsum(1).argmax(1)]
            out.append(distribution_statistics(head(pooled.to(head.weight.dtype)), config)[0].cpu())
    return torch.cat(out)


def profile_predict(fn) -> dict:
    """One run of `fn` under the torch profiler: the share of its operators' time spent in matrix multiplies (and
    their GFLOP/s), in SDPA kernels, and in everything else (the profiler's own overhead falls mostly on the many
    small operators of the last group)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        fn()
    groups = {"matrix multiplies": 0.0, "attention kernels": 0.0, "other operators": 0.0}
    mm_flops = 0
    for event in prof.key_averages():
        seconds = event.self_cpu_time_total / 1e6
        if event.key in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"):
            groups["matrix multiplies"] += seconds
            mm_flops += event.flops or 0
        elif "scaled_dot_product" in event.key or "flash_attention" in event.key:
            groups["attention kernels"] += seconds
        else:
            groups["other operators"] += seconds
    total = sum(groups.values())
    return dict(seconds={k: round(v, 2) for k, v in groups.items()}, share={k: round(v / total, 3) for k, v in groups.items()},
                mm_gflops=round(mm_flops / groups["matrix multiplies"] / 1e9, 1) if groups["matrix multiplies"] else None)  # fmt: skip


def timed(fn):
    """(result, seconds, PeakMemory); on a GPU the memory also has `gpu_peak_mib` (results come back to the CPU,
    so the time includes the GPU's work)."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    with PeakMemory() as mem:
        t = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t
    mem.page_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults  # minor: fresh pages zeroed
    mem.gpu_peak_mib = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    return result, seconds, mem


def predict_runs(model, tokenizer, records: list[dict], args, gemm: list[float], gemm_kw: dict):
    """(a) the package's predict (warm-up on a few records first), `--repeats` times, each run between two GEMM
    probes (appended to `gemm`): this shared machine's speed drifts by tens of percent within minutes, so each run
    is held against the GEMM rate around it (the mean of the probe medians before and after). Returns (the last
    run's predictions, [(seconds, GEMM GFLOP/s around the run)], the last run's memory)."""
    model.predict(records[:4], tokenizer, max_batch_tokens=args.max_batch_tokens)
    runs = []
    for _ in range(args.repeats):
        before = statistics.median(gemm[-3:])
        preds, t, mem = timed(lambda: model.predict(records, tokenizer, max_batch_tokens=args.max_batch_tokens))
        gemm += [gemm_gflops(args.gemm_size, **gemm_kw) for _ in range(3)]
        runs.append((t, (before + statistics.median(gemm[-3:])) / 2))
    return preds, runs, mem


def run_ablations(model, tokenizer, records: list[dict], token_ids: list[list[int]], args) -> list[dict]:
    """`--ablation`: predict without each technique, each variant run right after a default run (time ratios)."""
    ablations = []
    # key: (label, predict keywords, model attributes for the run)
    variants = {
        "sharing": [("no prefix sharing", dict(share_prefix=False), {})],
        "budgets": [(f"max_batch_tokens={b}", dict(max_batch_tokens=b), {}) for b in (512, 2048, 4096, 8192)],
        "items": [("no sharing, batch_size=8 (items)", dict(share_prefix=False, max_batch_tokens=8 * max(map(len, token_ids))), {})],
    }
    keys = list(variants) if "all" in args.ablation else args.ablation

    def default():
        return model.predict(records, tokenizer, max_batch_tokens=args.max_batch_tokens)

    for label, kw, attrs in [v for key in keys for v in variants[key]]:
        pairs = []  # (default seconds, variant seconds): each variant run right after a default run
        for _ in range(args.ablation_repeats):
            _, t_default, _ = timed(default)
            saved = {name: getattr(model, name) for name in attrs}
            for name, value in attrs.items():
                setattr(model, name, value)
            try:
                _, t, mem = timed(lambda kw=kw: model.predict(records, tokenizer, **{"max_batch_tokens": args.max_batch_tokens, **kw}))
            finally:
                for name, value in saved.items():
                    setattr(model, name, value)
            pairs.append((t_default, t))
        t = statistics.median(v for _, v in pairs)
        ratio = statistics.median(v / d for d, v in pairs)
        ablations.append(dict(variant=label, seconds=round(t, 2), items_per_s=round(len(records) / t, 2), time_vs_default=round(ratio, 3),
                              runs=[dict(default_s=round(d, 2), variant_s=round(v, 2)) for d, v in pairs],
                              peak_mib=round(mem.peak_mib), page_faults=mem.page_faults))  # fmt: skip
        print(f"  ablation {label:<36} {len(records) / t:8.2f} items/s  time x{ratio:.3f} of the default run before it "
              f"(median of {len(pairs)}; last: {mem.page_faults} page faults)", flush=True)  # fmt: skip
    return ablations


def naive_batch_size(naive, tokenizer, texts: list[str], head, pooling: str, add_special: bool, config, args) -> tuple[int, list]:
    """The naive path's best batch size among `--naive-batch-sizes` on the first `--calib` texts, and the
    (items/s, batch size) of each tried (after a warm-up)."""
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
    return best, calib


def bench_backbone(name: str, records: list[dict], args, tmp: Path) -> dict:
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    from modeling_orca import DEFAULT_BATCH_TOKENS
    from processing_orca import encode_fields, format_input, input_variants

    folder, pooling = backbone_folder(name, tmp)
    add_special = name == "minilm"  # BERT needs its [CLS] ... [SEP]
    dtype = getattr(torch, args.dtype)
    model, tokenizer = orca_model(folder, pooling, add_special_tokens=add_special, device=args.device, dtype=dtype)
    gemm_kw = dict(device=args.device, dtype=dtype)
    config = model.config
    causal = model.prefix_sharing_supported
    token_ids = encode_fields([input_variants(r, config)[0] for r in records], tokenizer, config)
    texts = [format_input(r, config) for r in records]
    whole = tokenizer(texts, add_special_tokens=add_special)["input_ids"]
    same_ids = sum(a == b for a, b in zip(token_ids, whole))
    n_tokens = sum(len(t) for t in token_ids)
    gemm = [gemm_gflops(args.gemm_size, **gemm_kw) for _ in range(3)]

    preds, runs_a, mem_a = predict_runs(model, tokenizer, records, args, gemm, gemm_kw)
    t_a = statistics.median(t for t, _ in runs_a)
    mean_a = torch.tensor([p["mean"] for p in preds])

    ablations = []
    if args.ablation:
        ablations = run_ablations(model, tokenizer, records, token_ids, args)
        gemm += [gemm_gflops(args.gemm_size, **gemm_kw) for _ in range(3)]

    # (b) the naive path at its best batch size
    naive_cls = AutoModelForCausalLM if is_decoder(model.backbone) else AutoModelForMaskedLM
    naive = naive_cls.from_pretrained(folder, dtype=dtype).to(args.device).eval()
    head = model.score_head
    best, calib = naive_batch_size(naive, tokenizer, texts, head, pooling, add_special, config, args)
    mean_b, t_b, mem_b = timed(lambda: naive_means(naive, tokenizer, texts, head, pooling, best, add_special, config))
    gemm += [gemm_gflops(args.gemm_size, **gemm_kw) for _ in range(3)]

    # last, as the profiler keeps memory that would count in the peaks above
    profile = None
    if args.profile:
        profile = profile_predict(lambda: model.predict(records, tokenizer, max_batch_tokens=args.max_batch_tokens))
        gemm += [gemm_gflops(args.gemm_size, **gemm_kw) for _ in range(3)]
        profile["gemm_gflops_after"] = round(statistics.median(gemm[-3:]), 1)

    # (c) the floor
    n_floor, contexts = floor_tokens(token_ids, causal)
    flops = backbone_flops(model, contexts)
    rate = statistics.median(r for _, r in runs_a)
    t_floor = flops / (rate * 1e9)
    fractions = [flops / (r * 1e9) / t for t, r in runs_a]
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
        default_batch_tokens=args.max_batch_tokens or (model.cpu_batch_tokens if model.device.type == "cpu" else DEFAULT_BATCH_TOKENS),
        device=args.device,
        dtype=args.dtype,
        a=dict(seconds=round(t_a, 2), runs=[dict(seconds=round(t, 2), gemm_gflops=round(r, 1), floor_fraction=round(f, 3)) for (t, r), f in zip(runs_a, fractions)],
               page_faults_last_run=mem_a.page_faults,
               items_per_s=round(n / t_a, 2), tokens_per_s=round(n_tokens / t_a, 1), peak_mib=round(mem_a.peak_mib), extra_mib=round(mem_a.extra_mib),
               gpu_peak_mib=mem_a.gpu_peak_mib),
        b=dict(seconds=round(t_b, 2), items_per_s=round(n / t_b, 2), tokens_per_s=round(n_tokens / t_b, 1), peak_mib=round(mem_b.peak_mib), extra_mib=round(mem_b.extra_mib), batch_size=best,
               calibration={bs: round(r, 2) for r, bs in calib}),
        floor=dict(gflop=round(flops / 1e9, 1), gemm_gflops_around_a=round(rate, 1), gemm_gflops_all=[round(g, 1) for g in gemm], seconds=round(t_floor, 2),
                   items_per_s=round(n / t_floor, 2)),
        speedup_vs_naive=t_b / t_a,
        floor_fraction=statistics.median(fractions),
        max_abs_mean_diff=diff,
        tolerance=args.tolerance,
        agree=diff <= args.tolerance,
        ablations=ablations,
        profile=profile,
    )


def predict_once(name: str, records: list[dict], args, tmp: Path) -> dict:
    """One warmed-up, timed `predict` of `records` (for --compare-with; runs in its own process). With
    `--modeling FILE` the model class comes from FILE instead of the repository's modeling_orca.py."""
    if args.modeling:
        import importlib.util
        import sys

        spec = importlib.util.spec_from_file_location("modeling_orca", args.modeling)
        module = importlib.util.module_from_spec(spec)
        sys.modules["modeling_orca"] = module
        spec.loader.exec_module(module)
    folder, pooling = backbone_folder(name, tmp)
    model, tokenizer = orca_model(folder, pooling, add_special_tokens=name == "minilm", device=args.device, dtype=getattr(torch, args.dtype))
    budget = {"max_batch_tokens": args.max_batch_tokens} if args.max_batch_tokens else {}  # an older file may lack it
    model.predict(records[:4], tokenizer, **budget)
    t = time.perf_counter()
    preds = model.predict(records, tokenizer, **budget)
    return dict(seconds=time.perf_counter() - t, means=[p["mean"] for p in preds], modeling=args.modeling)


def compare_with(name: str, args) -> dict:
    """`--compare-repeats` pairs of processes, one timing this repository's `predict` and one the `predict` of
    `--compare-with FILE` (an older modeling_orca.py), in alternating order: on a shared machine whose speed drifts,
    the median of the pairs' time ratios is the measure. Separate processes, as an older file may change
    process-wide settings."""
    import subprocess
    import sys

    budget = ["--max-batch-tokens", str(args.max_batch_tokens)] if args.max_batch_tokens else []
    base = [sys.executable, __file__, "--predict-once", "--backbone", name, "--n", str(args.n), *budget,
            "--device", args.device, "--dtype", args.dtype] + (["--data-dir", args.data_dir] if args.data_dir else []) \
        + (["--threads", str(args.threads)] if args.threads else [])  # fmt: skip

    def run(modeling):
        cmd = base + (["--modeling", modeling] if modeling else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    pairs = []
    for k in range(args.compare_repeats):
        first, second = (None, args.compare_with) if k % 2 == 0 else (args.compare_with, None)
        out = {first: run(first)}
        out[second] = run(second)
        pairs.append((out[None], out[args.compare_with]))
        print(f"  pair {k + 1}: this {out[None]['seconds']:.1f} s, {args.compare_with} {out[args.compare_with]['seconds']:.1f} s", flush=True)
    ratio = statistics.median(old["seconds"] / new["seconds"] for new, old in pairs)
    diff = max(abs(a - b) for new, old in pairs for a, b in zip(new["means"], old["means"]))
    n = args.n
    return dict(backbone=name, records=n, compared_with=args.compare_with,
                this_items_per_s=round(n / statistics.median(new["seconds"] for new, _ in pairs), 2),
                other_items_per_s=round(n / statistics.median(old["seconds"] for _, old in pairs), 2),
                speedup_vs_other=ratio, max_abs_mean_diff=diff, agree=diff <= args.tolerance,
                pairs=[dict(this_s=round(new["seconds"], 2), other_s=round(old["seconds"], 2)) for new, old in pairs])  # fmt: skip


def print_result(name: str, r: dict, args) -> None:
    """One backbone's result of (a)-(c) as a table, the floor, the runs, the profile."""
    a, b, f = r["a"], r["b"], r["floor"]
    print(f"\n== {name}: {r['records']} items, {r['input_tokens']} input tokens, {r['floor_tokens']} to compute at least once; "
          f"token ids = whole-text ids for {r['token_ids_equal_to_whole_text']}; prefix sharing {r['prefix_sharing']}; "
          f"{r['default_batch_tokens']}-token batches")  # fmt: skip
    print(f"{'path':<28}{'items/s':>10}{'tokens/s':>11}{'seconds':>10}{'peak MiB':>10}")
    print(f"{'(a) predict':<28}{a['items_per_s']:>10.2f}{a['tokens_per_s']:>11.1f}{a['seconds']:>10.1f}{a['peak_mib']:>10}")
    print(f"{'(b) naive, batch ' + str(b['batch_size']):<28}{b['items_per_s']:>10.2f}{b['tokens_per_s']:>11.1f}{b['seconds']:>10.1f}{b['peak_mib']:>10}")
    print(f"{'(c) floor':<28}{f['items_per_s']:>10.2f}{'':>11}{f['seconds']:>10.1f}{'':>10}")
    print(f"floor: {f['gflop']} GFLOP at {f['gemm_gflops_around_a']} GFLOP/s ({args.dtype} {args.gemm_size}^3 GEMM around the runs of (a); "
          f"all probes {f['gemm_gflops_all']})")  # fmt: skip
    print("(a) runs: " + ", ".join(f"{x['seconds']} s at {x['gemm_gflops']} GFLOP/s -> {x['floor_fraction']:.2f}" for x in a["runs"])
          + f"; {a['page_faults_last_run']} page faults in the last")  # fmt: skip
    print(f"a/b = {r['speedup_vs_naive']:.2f}x   floor/a = {r['floor_fraction']:.2f} (median over runs)   "
          f"max |mean a - mean b| = {r['max_abs_mean_diff']:.2e} ({'agree' if r['agree'] else 'DISAGREE'} within {args.tolerance:g})", flush=True)  # fmt: skip
    if r["profile"]:
        prof = r["profile"]
        print("profile of one run of (a): " + ", ".join(f"{k} {v:.0%} ({prof['seconds'][k]} s)" for k, v in prof["share"].items())
              + f"; matrix multiplies at {prof['mm_gflops']} GFLOP/s (GEMM probe after: {prof['gemm_gflops_after']})")  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="answers to score (whole questions, EVOUNA-NQ)")
    p.add_argument("--backbone", action="append", choices=BACKBONES, help="repeatable; default smollm2 then minilm")
    p.add_argument("--data-dir", default=None, help="../shared/data by default")
    p.add_argument("--max-batch-tokens", type=int, default=None, help="predict's max_batch_tokens (default: its own, 1,024 on the CPU)")
    p.add_argument("--naive-batch-sizes", default="4,8,16", help="batch sizes tried for the naive path")
    p.add_argument("--calib", type=int, default=120, help="records of the naive batch-size calibration")
    p.add_argument("--gemm-size", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, = cores)")
    p.add_argument("--ablations", dest="ablation", action="append_const", const="all", help="also time predict without each technique (= --ablation all)")
    p.add_argument("--ablation", action="append", choices=("all", "sharing", "budgets", "items"),
                   help="repeatable: time predict without this technique, each run right after a default run")
    p.add_argument("--ablation-repeats", type=int, default=1, help="(default, variant) pairs per ablation; the median time ratio is reported")
    p.add_argument("--profile", action="store_true", help="also profile one run of predict, after (b): matrix multiplies (their GFLOP/s), attention, the rest; "
                   "the profiler's memory stays with the process, so later peaks (a next backbone's) count it: profile one backbone at a time")
    p.add_argument("--repeats", type=int, default=5, help="timed runs of (a), each between GEMM probes; medians reported")
    p.add_argument("--device", default="cpu", help="e.g. cuda: both paths and the GEMM probe run there")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"), help="weights, activations, GEMM probe")
    p.add_argument("--tolerance", type=float, default=None, help="largest |mean a - mean b| allowed (1e-4 in float32, 0.05 otherwise)")
    p.add_argument("--json", default=None, help="write all results to this file")
    p.add_argument("--compare-with", default=None, metavar="FILE",
                   help="instead of (a)-(c): time this predict against FILE's (an older modeling_orca.py, e.g. from "
                        "`git show REV:modeling_orca.py`), in --compare-repeats pairs of alternating processes")
    p.add_argument("--compare-repeats", type=int, default=5, help="process pairs of --compare-with")
    p.add_argument("--predict-once", action="store_true", help=argparse.SUPPRESS)  # one process of --compare-with
    p.add_argument("--modeling", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tolerance is None:
        args.tolerance = 1e-4 if args.dtype == "float32" else 0.05  # 16-bit sums in another order differ by ~1e-2
    if args.threads:
        torch.set_num_threads(args.threads)
    backbones = args.backbone or ["smollm2", "minilm"]
    records = load_records(args.n, args.data_dir)
    if args.predict_once:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(predict_once(backbones[0], records, args, Path(tmp))))
        return 0
    if args.compare_with:
        print(f"{len(records)} records; this predict against {args.compare_with}'s; {load_line()}", flush=True)
        results = []
        for name in backbones:
            r = compare_with(name, args)
            results.append(r)
            print(f"== {name}: this {r['this_items_per_s']} items/s, other {r['other_items_per_s']} items/s (medians); "
                  f"time other/this = {r['speedup_vs_other']:.3f} (median of {len(r['pairs'])} pairs); "
                  f"max |mean diff| = {r['max_abs_mean_diff']:.1e}", flush=True)  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps(dict(**run_info(args), results=results, load=load_line()), indent=1))
        print(load_line())
        print(f"speedup_vs_other={results[0]['speedup_vs_other']:.3f}")
        return 0 if all(r["agree"] for r in results) else 1
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"{torch.get_num_threads()} threads"
    print(f"{len(records)} records, {len({r['question'] for r in records})} questions; torch {torch.__version__}, "
          f"{where}, {args.dtype}; {load_line()}", flush=True)  # fmt: skip
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in backbones:
            r = bench_backbone(name, records, args, Path(tmp))
            results.append(r)
            print_result(name, r, args)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(**run_info(args), results=results, load=load_line()), indent=1))
    print(load_line())
    first = results[0]
    print(f"speedup_vs_naive={first['speedup_vs_naive']:.2f} floor_fraction={first['floor_fraction']:.2f}")
    return 0 if all(r["agree"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
