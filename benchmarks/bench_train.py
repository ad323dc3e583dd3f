"""Training throughput: optimiser steps per second and peak memory of the quickstart configuration
(configs/quickstart.yaml: all-MiniLM-L6-v2, full fine-tuning, batch 16, max_length 256, multinomial head, mean
pooling) on EVOUNA-NQ training answers, against a naive loop.

- package: train.py's own pieces (`build_model`, `tokenize_records`, `epoch_batches` length bucketing, `collate`,
  the model's `forward` on the base model) and its optimiser step (AdamW with a head LR, grad clipping);
- naive: the same data and optimiser, batches in shuffled order without length bucketing, and the vocabulary
  logits computed (`AutoModelForMaskedLM` / `AutoModelForCausalLM` with `output_hidden_states=True`, the head
  on the pooled last hidden state).

    .venv/bin/python benchmarks/bench_train.py                # 40 timed steps each after 3 warm-up steps
Last line: `steps_per_s=X.XX naive_steps_per_s=Y.YY speedup_vs_naive=Z.ZZ`.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch  # noqa: I001
from _common import REPO, PeakMemory, is_decoder, load_line, load_records, run_info


def optimizer_for(model, lr, head_lr):
    head = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" in n]
    body = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" not in n]
    return torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr}], weight_decay=0.0)


def run_steps(step_fn, batches, warmup: int, steps: int) -> tuple[float, PeakMemory]:
    for b in batches[:warmup]:
        step_fn(b)
    with PeakMemory() as mem:
        t = time.perf_counter()
        for b in batches[warmup : warmup + steps]:
            step_fn(b)
        seconds = time.perf_counter() - t
    return steps / seconds, mem


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "configs" / "quickstart.yaml"))
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--n", type=int, default=3000, help="training answers the batches are drawn from")
    p.add_argument("--backbone", default=None, help="override model.backbone (e.g. tiny-llama for smoke runs)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import train
    from modeling_orca import distribution_statistics, ratings_nll  # noqa: F401

    overrides = ["--model.backbone", args.backbone] if args.backbone else []
    cfg = train.load_run_config(args.config, overrides)
    t = cfg["training"]
    lr = next(iter(cfg["stages"].values()))["lr"]
    head_lr = t["head_lr"] or lr
    bs = t["effective_batch_size"]
    records = [r for r in load_records(args.n) if r.get("ratings")]
    needed = (args.warmup + args.steps) * bs
    print(f"{cfg['model']['backbone']} ({cfg['model']['pooling']} pooling), batch {bs}, lr {lr}, head lr {head_lr}; "
          f"{len(records)} answers; torch {torch.get_num_threads()} threads; {load_line()}", flush=True)  # fmt: skip

    # --- package: train.py's pieces
    torch.manual_seed(0)
    model, tokenizer = train.build_model(cfg)
    config = model.config
    token_ids = train.tokenize_records(records, tokenizer, config)
    lengths = [len(x) for x in token_ids]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batches = []
    epoch = 0
    while len(batches) < args.warmup + args.steps:
        batches += train.epoch_batches(lengths, bs, cfg["seed"], epoch)
        epoch += 1
    model.train()
    opt = optimizer_for(model, lr, head_lr)

    def package_step(idx):
        loss = model(**train.collate(idx, token_ids, records, pad_id)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t["max_grad_norm"])
        opt.step()
        opt.zero_grad()

    rate_a, mem_a = run_steps(package_step, batches, args.warmup, args.steps)
    tokens_a = sum(max(lengths[i] for i in b) * len(b) for b in batches[args.warmup : args.warmup + args.steps])

    # --- naive: unbucketed batches, full vocabulary logits
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    torch.manual_seed(0)
    orca, _ = train.build_model(cfg)  # the head (same seed) and the folder it came from
    folder = orca.backbone.name_or_path
    causal = is_decoder(orca.backbone)
    lm_cls = AutoModelForCausalLM if causal else AutoModelForMaskedLM
    # a tiny random backbone (smoke runs) has no folder: same architecture with its vocabulary head
    lm = lm_cls.from_pretrained(folder) if folder else lm_cls.from_config(orca.backbone.config)
    head = orca.score_head
    lm.train()
    params = list(lm.parameters()) + list(head.parameters())
    naive_opt = torch.optim.AdamW([{"params": list(lm.parameters()), "lr": lr}, {"params": list(head.parameters()), "lr": head_lr}], weight_decay=0.0)
    order = list(range(len(records)))
    random.Random(cfg["seed"]).shuffle(order)
    naive_batches = [order[i : i + bs] for i in range(0, len(order) - bs + 1, bs)]
    while len(naive_batches) < needed // bs:
        naive_batches += naive_batches
    pooling = cfg["model"]["pooling"]

    def naive_step(idx):
        batch = train.collate(idx, token_ids, records, pad_id)
        out = lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
        hidden, mask = out.hidden_states[-1], batch["attention_mask"].bool()
        if pooling == "mean":
            pooled = hidden.masked_fill(~mask[..., None], 0).sum(1) / mask.sum(1, keepdim=True)
        else:
            pooled = hidden[torch.arange(len(hidden)), mask.long().cumsum(1).argmax(1)]
        loss = ratings_nll(head(pooled), batch["ratings"], config).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, t["max_grad_norm"])
        naive_opt.step()
        naive_opt.zero_grad()

    rate_b, mem_b = run_steps(naive_step, naive_batches, args.warmup, args.steps)
    tokens_b = sum(max(lengths[i] for i in b) * len(b) for b in naive_batches[args.warmup : args.warmup + args.steps])

    print(f"{'loop':<34}{'steps/s':>9}{'padded tokens/step':>20}{'peak MiB':>10}")
    print(f"{'package (bucketed, base model)':<34}{rate_a:>9.3f}{tokens_a / args.steps:>20.0f}{mem_a.peak_mib:>10.0f}")
    print(f"{'naive (unbucketed, full logits)':<34}{rate_b:>9.3f}{tokens_b / args.steps:>20.0f}{mem_b.peak_mib:>10.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(**run_info(args), steps_per_s=rate_a, naive_steps_per_s=rate_b, peak_mib=mem_a.peak_mib,
                                                    naive_peak_mib=mem_b.peak_mib, load=load_line()), indent=1))  # fmt: skip
    print(load_line())
    print(f"steps_per_s={rate_a:.2f} naive_steps_per_s={rate_b:.2f} speedup_vs_naive={rate_a / rate_b:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
