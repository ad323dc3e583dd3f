"""Cost per item: ORCA (one forward pass per item, shared prefixes computed once) against the LLM-judge baseline
(eval_suite.baselines.llm_judge: a chat prompt per item and greedy generation of a 'Rating: N' reply) on the same items,
with the same backbone (SmolLM2-135M-Instruct) on this CPU.

    .venv/bin/python benchmarks/bench_judge_cost.py            # 100 EVOUNA-NQ answers, judge batch 8, 16 new tokens
Last line: `orca_s_per_item=X.XXX judge_s_per_item=Y.YYY judge_cost_ratio=Z.ZZ`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch  # noqa: I001
from _common import BACKBONES, PeakMemory, backbone_folder, load_line, load_records, orca_model, run_info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--backbone", default="smollm2", choices=[b for b in BACKBONES if b != "minilm"])
    p.add_argument("--condition", default="ref_question", help="judge prompting condition (eval_suite.baselines.llm_judge)")
    p.add_argument("--judge-batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from eval_suite.baselines.llm_judge import judge_records, load_judge

    records = load_records(args.n)
    print(f"{len(records)} answers, {len({r['question'] for r in records})} questions; {torch.get_num_threads()} threads; {load_line()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder, pooling = backbone_folder(args.backbone, Path(tmp))
        model, tokenizer = orca_model(folder, pooling)
        model.predict(records[:4], tokenizer)
        with PeakMemory() as mem_o:
            t = time.perf_counter()
            model.predict(records, tokenizer)
            t_orca = time.perf_counter() - t
        del model
        judge, jtok = load_judge(folder)
        if jtok.pad_token is None:
            jtok.pad_token = jtok.eos_token
        judge_records(records[:2], judge, jtok, condition=args.condition, batch_size=2, max_new_tokens=2)
        with PeakMemory() as mem_j:
            t = time.perf_counter()
            result = judge_records(records, judge, jtok, condition=args.condition, batch_size=args.judge_batch_size,
                                   max_new_tokens=args.max_new_tokens)  # fmt: skip
            t_judge = time.perf_counter() - t
    n = len(records)
    orca_s, judge_s = t_orca / n, t_judge / n
    print(f"{'method':<44}{'s/item':>9}{'items/s':>9}{'peak MiB':>10}")
    print(f"{'ORCA predict (one pass, shared prefixes)':<44}{orca_s:>9.3f}{1 / orca_s:>9.2f}{mem_o.peak_mib:>10.0f}")
    judge_label = f"LLM judge ({args.condition}, {args.max_new_tokens} new tokens)"
    print(f"{judge_label:<44}{judge_s:>9.3f}{1 / judge_s:>9.2f}{mem_j.peak_mib:>10.0f}")
    print(f"judge replies without a usable rating: {result.n_failed}/{n}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(**run_info(args), orca_s_per_item=orca_s, judge_s_per_item=judge_s, judge_failed=result.n_failed, n=n, load=load_line()), indent=1))
    print(load_line())
    print(f"orca_s_per_item={orca_s:.3f} judge_s_per_item={judge_s:.3f} judge_cost_ratio={judge_s / orca_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
