"""Training throughput of SmolLM2-135M-Instruct with LoRA r=128 (q/k/v/o/gate/up/down projections, the head trained
fully), float32, micro-batches of 8 x 2 accumulated (16 answers an optimiser step), AdamW, gradient clipping:

- (a) today's path: `training.batching: shuffled` (`training.batching.epoch_batches`, batches of similar lengths from all
  questions), one padded row per answer (`training.batching.micro_batch_inputs`), the model's `forward`;
- (b) shared prefix: `training.batching: question` and `training.prefix_sharing`: a micro-batch's answers to one
  question laid out as one prefix-tree row (`packing_orca.pack_prefix_tree`), the shared fields computed once;
- (d) with `--max-answers-per-question k`: (b) with `training.max_answers_per_question: k` (a question's answers
  in random parts of at most k each epoch, so that a step holds more questions; less is shared);
- (c) naive, the reference trainer's way: `AutoModelForCausalLM` with the same LoRA, vocabulary logits at every
  position (`output_hidden_states=True` for the last hidden state), fixed batches in a seeded shuffled order without
  length sorting, the loss summed over a micro-batch.

All three train on the same token ids, from the same initial weights. Data: benchmark-shaped, several answers to a
question with a rationale in front of it (the reference release's input string, `_common.RELEASE_TEMPLATE`): MMAR
items of the `s2_benchmark` config (8 answers a question, its `thinking` text as rationale), then EVOUNA-NQ (5
answers a question, no rationale). Reported per path: optimiser steps/s; input tokens/s (each answer's whole
input, what one unpadded row per answer computes); computed tokens/s (positions of the model's input tensors,
padding included: fewer than the input tokens when prefixes are shared); peak memory (process RSS over its level
before the path's model was built: the model, its optimiser state and the activations).

Timed: `--warmup` steps, then one whole epoch of the `--n` answers (`--steps 0`, the default: every path sees the
same answers, in its own batches) or `--steps` steps.

`dev_rho_delta`: (a) and (b) (and (d)) train on for `--dev-steps` steps in all (the timed steps included, same schedule) on
the EVOUNA-NQ training answers (`--dev-train-n`), then both score the validation split (`predict`); dev Spearman of (b) minus (a).

    .venv/bin/python benchmarks/bench_train.py --json runs/bench_train.json    # timed: one epoch of 160 MMAR / 480 EVOUNA answers
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_train.py --clock cpu   # on a machine busy with other jobs
    .venv/bin/python benchmarks/bench_train.py --smoke                       # tiny random Llama, a few items (CI)
Last line: `train_speedup_vs_naive=X dev_rho_delta=Y` (X: (b) / (c) steps/s on the MMAR data; with `--clock cpu`
steps per CPU-second of the training thread, for a machine shared with other jobs: run with OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import random
import tempfile
import time
from pathlib import Path

import torch  # noqa: I001
from _common import RELEASE_TEMPLATE, PeakMemory, backbone_folder, load_line, run_info

LORA = {"enabled": True, "r": 128, "alpha": 128, "dropout": 0.05, "target_modules": "auto"}
PATHS = {"a": "today (shuffled, row per answer)", "b": "shared prefix (by question)", "c": "naive (full logits)",
         "d": "shared prefix (by question, capped)"}


def whole_questions(records: list[dict], n: int) -> list[dict]:
    """The first `n` answers in file order, whole questions only (at least one question)."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r["question_id"]] = counts.get(r["question_id"], 0) + 1
    out, seen = [], set()
    for r in records:
        if r["question_id"] not in seen:
            if out and len(out) + counts[r["question_id"]] > n:
                break
            seen.add(r["question_id"])
        out.append(r)
    return out


def load_data(name: str, n: int, dev_n: int) -> tuple[list[dict], list[dict]]:
    """(train answers, dev answers) of a benchmark data set: `mmar` (the s2_benchmark config's MMAR items) or
    `evouna` (s3_evouna_nq)."""
    import dataset_builder

    splits = dataset_builder.load_config("s2_benchmark" if name == "mmar" else "s3_evouna_nq")
    train = [r for r in splits["train"].to_list() if r.get("ratings") and (name != "mmar" or r["benchmark"] == "mmar")]
    dev = [r for r in splits["validation"].to_list() if r.get("ratings") and (name != "mmar" or r["benchmark"] == "mmar")]
    train.sort(key=lambda r: r["question_id"])  # a question's answers next to each other, as a benchmark file lists them
    return whole_questions(train, n), dev[:dev_n]


def build(folder: str, head_seed: int = 0):
    """The ORCA model on the backbone (release template, float32) with LoRA; a seeded head."""
    import training.model
    from modeling_orca import OrcaForCorrectnessDistribution

    model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(folder, dtype=torch.float32, **RELEASE_TEMPLATE)
    torch.manual_seed(head_seed)
    torch.nn.init.normal_(model.score_head.weight, std=0.05)
    torch.nn.init.zeros_(model.score_head.bias)
    torch.manual_seed(head_seed)  # LoRA's initialisation
    return training.model.add_lora(model, {"lora": LORA}), tokenizer


def optimizer_for(model, lr: float, head_lr: float):
    head = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" in n]
    body = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" not in n]
    return torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr}], weight_decay=0.0)


class Trainer:
    """One path's model, optimiser and schedule; `step(batch)` runs one optimiser step over 16 item indices."""

    def __init__(self, path: str, folder: str, token_ids, records, args):
        import training.model
        from modeling_orca import pad_ratings, ratings_nll
        from packing_orca import pad_token_ids

        self.path, self.token_ids, self.records, self.args = path, token_ids, records, args
        self.groups = [r["question_id"] for r in records]
        model, tokenizer = build(folder)
        self.pad_id = tokenizer.pad_token_id
        self.config = training.model.unwrap_orca(model).config
        if path == "c":  # the same LoRA and head on the causal LM (its vocabulary head computes logits)
            from peft import LoraConfig, get_peft_model
            from transformers import AutoModelForCausalLM

            lm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            torch.manual_seed(0)
            lm = get_peft_model(lm, LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                                               target_modules=training.model.LORA_TARGETS["default"]))  # fmt: skip
            self.head = training.model.unwrap_orca(model).score_head
            self.head.requires_grad_(True)
            del model
            self.lm = lm
            params = [p for p in lm.parameters() if p.requires_grad]
            self.opt = torch.optim.AdamW([{"params": params, "lr": args.lr}, {"params": list(self.head.parameters()), "lr": args.head_lr}],
                                         weight_decay=0.0)
            self.params = params + list(self.head.parameters())
            lm.train()
        else:
            self.model = model
            self.opt = optimizer_for(model, args.lr, args.head_lr)
            self.params = [p for p in model.parameters() if p.requires_grad]
            model.train()
            self.share = path in "bd" and training.model.unwrap_orca(model).prefix_sharing_supported
        self._pad, self._ratings, self._nll = pad_token_ids, pad_ratings, ratings_nll
        self.real_tokens = self.computed_tokens = 0

    def set_schedule(self, total_steps: int) -> None:
        import training.schedule

        warmup = max(1, total_steps // 10)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: training.schedule.lr_lambda(s, warmup_steps=warmup, max_steps=total_steps, floor=0.1)
        )

    def batches(self, epoch: int) -> list[list[int]]:
        import training.batching

        lengths = [len(t) for t in self.token_ids]
        bs = 2 * self.args.micro
        if self.path == "a":
            return training.batching.epoch_batches(lengths, bs, 0, epoch)
        if self.path in "bd":
            cap = self.args.max_answers_per_question if self.path == "d" else None
            return training.batching.epoch_batches(lengths, bs, 0, epoch, groups=self.groups, piece=self.args.micro, max_group_size=cap)
        order = list(range(len(lengths)))
        random.Random(epoch).shuffle(order)
        return [order[i : i + bs] for i in range(0, len(order) - bs + 1, bs)]

    def step(self, batch: list[int]) -> float:
        import training.batching

        micro = self.args.micro
        total = 0.0
        for k in range(0, len(batch), micro):
            idx = batch[k : k + micro]
            self.real_tokens += sum(len(self.token_ids[i]) for i in idx)
            if self.path == "c":
                input_ids, mask = self._pad([self.token_ids[i] for i in idx], self.pad_id)
                out = self.lm(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)  # logits (B, T, V) too
                hidden = out.hidden_states[-1]
                pooled = hidden[torch.arange(len(idx)), mask.sum(1) - 1]  # the last real token (right padding)
                loss = self._nll(self.head(pooled), self._ratings([self.records[i]["ratings"] for i in idx]), self.config).sum()
                self.computed_tokens += input_ids.numel()
            else:
                batch_k = training.batching.micro_batch_inputs(idx, self.token_ids, self.records, self.pad_id, share_prefix=self.share, groups=self.groups)
                loss = self.model(**batch_k).loss / (len(batch) // micro)
                self.computed_tokens += batch_k["input_ids"].numel()
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.scheduler.step()
        self.opt.zero_grad()
        return total

    def orca(self):
        import training.model

        return training.model.unwrap_orca(self.model)


def release_freed_memory() -> None:
    """Free the previous path's objects and hand glibc's freed heap back to the system, so that a path's peak RSS
    over its start counts its own model, optimiser and activations (not memory the previous path left behind)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: peaks of later paths may come out low
        pass


def time_path(path: str, folder: str, token_ids, records, args, total_steps: int, keep: bool = False) -> tuple[dict, object]:
    """Run at least `total_steps` optimiser steps of a path: `--warmup` steps, the timed ones (`--steps` steps, or
    with `--steps 0` all of the next epoch's batches: the same answers for every path), then the rest; returns its
    figures and (with `keep`) the trainer."""
    release_freed_memory()
    with PeakMemory() as mem:
        trainer = Trainer(path, folder, token_ids, records, args)
        stream, epoch = [], 0
        if args.steps:
            while len(stream) < max(total_steps, args.warmup + args.steps):
                stream += trainer.batches(epoch)
                epoch += 1
            warm, timed_batches, rest = stream[: args.warmup], stream[args.warmup : args.warmup + args.steps], stream[args.warmup + args.steps : total_steps]
        else:
            warm, timed_batches, epoch = trainer.batches(0)[: args.warmup], trainer.batches(1), 2
            while len(stream) < total_steps - args.warmup - len(timed_batches):
                stream += trainer.batches(epoch)
                epoch += 1
            rest = stream[: max(0, total_steps - args.warmup - len(timed_batches))]
        trainer.set_schedule(len(warm) + len(timed_batches) + len(rest))
        losses = [trainer.step(b) for b in warm]
        trainer.real_tokens = trainer.computed_tokens = 0
        started, started_cpu = time.perf_counter(), time.thread_time()
        losses += [trainer.step(b) for b in timed_batches]
        seconds, cpu_seconds = time.perf_counter() - started, time.thread_time() - started_cpu
        timed = (trainer.real_tokens, trainer.computed_tokens)
        losses += [trainer.step(b) for b in rest]
    steps = len(timed_batches)
    result = dict(path=path, name=PATHS[path], steps_per_s=steps / seconds, seconds=seconds, cpu_seconds=cpu_seconds,
                  steps_per_cpu_s=steps / cpu_seconds, timed_steps=steps,
                  input_tokens_per_cpu_s=timed[0] / cpu_seconds,
                  input_tokens_per_s=timed[0] / seconds, computed_tokens_per_s=timed[1] / seconds,
                  computed_per_input=timed[1] / timed[0], peak_mib=mem.extra_mib, steps=len(losses),
                  first_loss=losses[0], last_loss=losses[-1])  # fmt: skip
    if path in "bd":
        result["prefix_sharing"] = trainer.share
    return result, (trainer if keep else None)


def dev_spearman(trainer, tokenizer, dev: list[dict]) -> float:
    from scipy.stats import spearmanr

    preds = trainer.orca().predict(dev, tokenizer)
    human = [sum(r["ratings"]) / len(r["ratings"]) for r in dev]
    return float(spearmanr([p["mean"] for p in preds], human).statistic)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backbone", default="smollm2", help="smollm2, or tiny-llama (a random 2-layer Llama) for smoke runs")
    p.add_argument("--data", default="mmar,evouna", help="data sets, in order; the first one gives the speedup")
    p.add_argument("--n", type=int, default=160, help="training answers of each data set the batches come from")
    p.add_argument("--steps", type=int, default=0, help="timed optimiser steps of each path; 0: one whole epoch of the --n answers")
    p.add_argument("--warmup", type=int, default=2, help="optimiser steps before the timed ones")
    p.add_argument("--dev-steps", type=int, default=40, help="optimiser steps of (a) and (b) before the dev comparison")
    p.add_argument("--dev-n", type=int, default=400, help="EVOUNA-NQ dev answers scored for dev_rho_delta")
    p.add_argument("--dev-train-n", type=int, default=480, help="EVOUNA-NQ training answers for dev_rho_delta")
    p.add_argument("--micro", type=int, default=8, help="micro-batch size (2 accumulated a step)")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--head-lr", type=float, default=2e-3)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="speedups from wall time, or (on a loaded machine, with OMP_NUM_THREADS=1) from the CPU time of "
                        "the thread that trains: the work a step takes, not the wait for a core")
    p.add_argument("--max-answers-per-question", type=int, default=None, help="adds path (d): (b) with this cap")
    p.add_argument("--paths", default=None, help="paths timed, in order (default abc, abdc with the cap; the speedup needs b and c)")
    p.add_argument("--smoke", action="store_true", help="tiny random Llama, few items and steps (CI)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    paths = args.paths or ("abdc" if args.max_answers_per_question else "abc")
    if "d" in paths and not args.max_answers_per_question:
        p.error("path d needs --max-answers-per-question")
    if args.smoke:
        args.backbone, args.n, args.steps, args.warmup, args.dev_steps, args.dev_n, args.dev_train_n = "tiny-llama", 48, 2, 1, 4, 30, 48

    import training.data
    import training.model

    tmp = tempfile.TemporaryDirectory()
    folder, _ = backbone_folder(args.backbone, Path(tmp.name))
    model, tokenizer = build(folder)
    config = copy.deepcopy(training.model.unwrap_orca(model).config)
    config.max_length = args.max_length
    del model
    print(f"{args.backbone}: LoRA r={LORA['r']} float32, micro-batches {args.micro} x 2, {torch.get_num_threads()} threads; {load_line()}", flush=True)
    results = []
    dev_rho = {}
    for name in args.data.split(","):
        n = args.dev_train_n if name == "evouna" else args.n
        records, dev = load_data(name, n, args.dev_n)
        token_ids = training.data.tokenize_records(records, tokenizer, config)
        questions = len({r["question_id"] for r in records})
        print(f"\n{name}: {len(records)} answers to {questions} questions, {sum(map(len, token_ids)) / len(token_ids):.0f} tokens "
              f"an answer on average", flush=True)  # fmt: skip
        print(f"{'path':<36}{'steps/s':>9}{'steps/cpu-s':>12}{'input tok/s':>12}{'computed tok/s':>16}{'comp/input':>11}{'peak MiB':>10}")
        for path in paths:
            dev_run = name == "evouna" and path in "abd" and args.dev_steps
            total = max(args.dev_steps, args.warmup + args.steps) if dev_run else args.warmup + args.steps
            result, trainer = time_path(path, folder, token_ids, records, args, total, keep=bool(dev_run))
            result["data"] = name
            if dev_run:
                result["dev_spearman"] = dev_rho[path] = dev_spearman(trainer, tokenizer, dev)
            del trainer
            results.append(result)
            print(f"{result['name']:<36}{result['steps_per_s']:>9.4f}{result['steps_per_cpu_s']:>12.4f}{result['input_tokens_per_s']:>12.0f}"
                  f"{result['computed_tokens_per_s']:>16.0f}{result['computed_per_input']:>11.2f}{result['peak_mib']:>10.0f}"
                  + (f"  dev rho {result['dev_spearman']:.4f}" if "dev_spearman" in result else ""), flush=True)  # fmt: skip
    first = args.data.split(",")[0]
    key = "steps_per_s" if args.clock == "wall" else "steps_per_cpu_s"
    rate = {r["path"]: r[key] for r in results if r["data"] == first}
    speedup = rate["b"] / rate["c"] if {"b", "c"} <= set(rate) else float("nan")
    delta = dev_rho["b"] - dev_rho["a"] if {"a", "b"} <= set(dev_rho) else float("nan")
    summary = dict(train_speedup_vs_naive=speedup, today_speedup_vs_naive=rate["a"] / rate["c"] if {"a", "c"} <= set(rate) else float("nan"),
                   dev_rho_delta=delta,
                   dev_spearman=dev_rho, speedup_data=first, clock=args.clock)  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(**run_info(args), results=results, summary=summary, lora=LORA,
                                                   load=load_line()), indent=1))  # fmt: skip
    print(load_line())
    print(f"train_speedup_vs_naive={speedup:.2f} dev_rho_delta={delta:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
