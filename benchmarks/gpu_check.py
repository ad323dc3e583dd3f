"""GPU check (`make gpu-check`): what a CUDA machine does with ORCA, in under 10 minutes on one GPU.

(a) training: a random-weight model of Llama-3.2-1B's sizes, LoRA r=128 on q/k/v/o/gate/up/down (head trained
    fully), bf16 mixed precision through accelerate (`Accelerator(mixed_precision="bf16")`), micro-batches of 8 x 2,
    AdamW, `--train-steps` optimiser steps on MMAR answers (the `s2_benchmark` config; 8 answers a question, a
    rationale in front): today's path (`training.batching: shuffled`, one row per answer) and shared-prefix training
    (`batching: question`, `pack_prefix_tree` rows). steps/s, input and computed tokens/s, peak GPU memory.
(b) scoring: `predict` on `--n` real EVOUNA-NQ records with a random-weight model of Llama-3.2-3B's sizes in bf16:
    items/s, peak GPU memory.
(c) bf16 against float32: the same 3B model's scores (`predict` means, rating scale) on 100 records in both dtypes,
    max and mean absolute difference.

Random models use SmolLM2's tokenizer (49,152 ids, not Llama 3's 128,256), the reference release's input string and
a seeded head (std 0.05). One JSON (`--json`) with versions, arguments, the device and every figure.

    make gpu-check                                           # python benchmarks/gpu_check.py --json runs/gpu_check.json
    .venv/bin/python benchmarks/gpu_check.py --cpu-smoke     # the same code on CPU with a tiny model (CI)
Last line: `gpu_check train_steps_per_s=A shared_prefix_steps_per_s=B predict_items_per_s=C bf16_max_abs_diff=D`.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch  # noqa: I001
from _common import RELEASE_TEMPLATE, load_line, load_records, run_info

SIZES = {
    # Llama-3.2-1B and -3B (config.json of meta-llama/Llama-3.2-1B / -3B), vocabulary aside
    "llama1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                    head_dim=64, rope_theta=500000.0, tie_word_embeddings=True, max_position_embeddings=131072),
    "llama3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
                    head_dim=128, rope_theta=500000.0, tie_word_embeddings=True, max_position_embeddings=131072),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
}  # fmt: skip


def random_orca(size: str, tokenizer, device: str, dtype=torch.float32, seed: int = 0):
    """An ORCA model on a random-weight Llama of the given sizes, built on `device` (a 3B model initialises in
    seconds on a GPU, minutes on a CPU)."""
    from transformers import LlamaConfig

    from configuration_orca import OrcaConfig
    from modeling_orca import OrcaForCorrectnessDistribution

    backbone = LlamaConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **SIZES[size])
    torch.manual_seed(seed)
    with torch.device(device):
        model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=backbone, **RELEASE_TEMPLATE))
        torch.nn.init.normal_(model.score_head.weight, std=0.05)
    return model.to(dtype)


class GpuMemory:
    """Peak GPU memory allocated while the block runs (None on CPU)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.peak_mib = None

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak_mib = torch.cuda.max_memory_allocated() / 2**20


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def train_check(args, tokenizer, batching: str) -> dict:
    """(a): `--train-steps` optimiser steps of train.py's pieces through accelerate in bf16 mixed precision."""
    from accelerate import Accelerator

    import dataset_builder
    import training.batching
    import training.data
    import training.model

    accelerator = Accelerator(mixed_precision=args.mixed_precision, cpu=args.device == "cpu")
    records = [r for r in dataset_builder.load_config("s2_benchmark")["train"].to_list() if r["benchmark"] == "mmar" and r.get("ratings")]
    records = records[: args.train_n]
    model = random_orca(args.train_size, tokenizer, args.device)
    model = training.model.add_lora(model, {"lora": {"enabled": True, "r": 128, "alpha": 128, "dropout": 0.05, "target_modules": "auto"}})
    config = copy.deepcopy(training.model.unwrap_orca(model).config)
    config.max_length = 512
    token_ids = training.data.tokenize_records(records, tokenizer, config)
    lengths = [len(t) for t in token_ids]
    groups = [r["question_id"] for r in records] if batching == "question" else None
    share = groups is not None and training.model.unwrap_orca(model).prefix_sharing_supported
    micro, accum = 8, 2
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5)
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    batches, epoch = [], 0
    while len(batches) < args.warmup + args.train_steps:
        batches += training.batching.epoch_batches(lengths, micro * accum, 0, epoch, groups=groups, piece=micro)
        epoch += 1
    input_tokens = computed = 0
    with GpuMemory(args.device) as mem:
        for step, batch in enumerate(batches[: args.warmup + args.train_steps]):
            if step == args.warmup:
                sync(args.device)
                started = time.perf_counter()
                input_tokens = computed = 0
            for k in range(accum):
                idx = batch[k * micro : (k + 1) * micro]
                inputs = training.batching.micro_batch_inputs(idx, token_ids, records, tokenizer.pad_token_id, share_prefix=share, groups=groups)
                inputs = {key: v.to(accelerator.device) for key, v in inputs.items()}
                loss = model(**inputs).loss
                accelerator.backward(loss / accum)
                input_tokens += sum(lengths[i] for i in idx)
                computed += inputs["input_ids"].numel()
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        sync(args.device)
        seconds = time.perf_counter() - started
    accelerator.free_memory()
    return dict(batching=batching, prefix_sharing=share, size=args.train_size, mixed_precision=args.mixed_precision,
                steps=args.train_steps, steps_per_s=args.train_steps / seconds, input_tokens_per_s=input_tokens / seconds,
                computed_tokens_per_s=computed / seconds, gpu_peak_mib=mem.peak_mib, last_loss=loss.item())  # fmt: skip


def predict_check(args, tokenizer) -> tuple[dict, dict]:
    """(b) items/s of `predict` in bf16; (c) bf16 against float32 on 100 records."""
    records = load_records(args.n)
    model = random_orca(args.predict_size, tokenizer, args.device, torch.bfloat16).eval()
    model.predict(records[:64], tokenizer, max_batch_tokens=args.max_batch_tokens)  # warm-up
    with GpuMemory(args.device) as mem:
        started = time.perf_counter()
        preds = model.predict(records, tokenizer, max_batch_tokens=args.max_batch_tokens)
        sync(args.device)
        seconds = time.perf_counter() - started
    assert len(preds) == len(records)
    scoring = dict(size=args.predict_size, dtype="bfloat16", records=len(records), items_per_s=len(records) / seconds,
                   seconds=seconds, gpu_peak_mib=mem.peak_mib)  # fmt: skip
    few = records[: args.compare_n]
    low = torch.tensor([p["mean"] for p in model.predict(few, tokenizer, max_batch_tokens=args.max_batch_tokens)])
    model = model.float()  # the same weights (bf16 values) in float32
    high = torch.tensor([p["mean"] for p in model.predict(few, tokenizer, max_batch_tokens=args.max_batch_tokens)])
    diff = (low - high).abs()
    compare = dict(records=len(few), max_abs_diff=float(diff.max()), mean_abs_diff=float(diff.mean()),
                   spread_float32=float(high.max() - high.min()), scale="rating 1-5 (predict's mean)")  # fmt: skip
    return scoring, compare


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--train-steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--train-n", type=int, default=6034, help="MMAR training answers the batches come from")
    p.add_argument("--n", type=int, default=10_000, help="EVOUNA-NQ records scored in (b)")
    p.add_argument("--compare-n", type=int, default=100, help="records of the bf16 / float32 comparison (c)")
    p.add_argument("--max-batch-tokens", type=int, default=16384, help="predict's max_batch_tokens (default: %(default)s)")
    p.add_argument("--train-size", default="llama1b", choices=SIZES)
    p.add_argument("--predict-size", default="llama3b", choices=SIZES)
    p.add_argument("--mixed-precision", default="bf16")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny random model on CPU, a few records and steps (CI)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.cpu_smoke:
        args.device, args.train_size, args.predict_size = "cpu", "tiny", "tiny"
        args.train_steps, args.warmup, args.train_n, args.n, args.compare_n, args.max_batch_tokens = 3, 1, 64, 40, 20, 2048
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or --cpu-smoke for the CPU check")

    from transformers import AutoTokenizer

    from eval_suite.models.backbones import smollm2_path
    from processing_orca import set_pad_token

    tokenizer = set_pad_token(AutoTokenizer.from_pretrained(smollm2_path()), "smollm2")
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {torch.get_num_threads()} threads"
    print(f"gpu check on {device_name}; {load_line()}", flush=True)
    started = time.time()
    training = []
    for batching in ("shuffled", "question"):
        result = train_check(args, tokenizer, batching)
        training.append(result)
        print(f"(a) train {result['size']} LoRA r=128 {result['mixed_precision']}, batching {batching}"
              f"{' + shared prefix' if result['prefix_sharing'] else ''}: {result['steps_per_s']:.3f} steps/s, "
              f"{result['input_tokens_per_s']:.0f} input tok/s, {result['computed_tokens_per_s']:.0f} computed tok/s, "
              f"peak {result['gpu_peak_mib'] or float('nan'):.0f} MiB", flush=True)  # fmt: skip
    scoring, compare = predict_check(args, tokenizer)
    print(f"(b) predict {scoring['size']} bf16 on {scoring['records']} records: {scoring['items_per_s']:.1f} items/s, "
          f"peak {scoring['gpu_peak_mib'] or float('nan'):.0f} MiB", flush=True)  # fmt: skip
    print(f"(c) bf16 vs float32 on {compare['records']} records: max |mean diff| {compare['max_abs_diff']:.4f}, "
          f"mean {compare['mean_abs_diff']:.4f} (float32 means span {compare['spread_float32']:.4f})")  # fmt: skip
    if args.json:
        import accelerate
        import peft

        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        info = dict(**run_info(args), peft=peft.__version__, accelerate=accelerate.__version__, device=device_name,
                    cuda=torch.version.cuda, wall_s=round(time.time() - started, 1))  # fmt: skip
        Path(args.json).write_text(json.dumps(dict(**info, training=training, scoring=scoring, bf16_vs_float32=compare), indent=1))
    print(f"gpu_check train_steps_per_s={training[0]['steps_per_s']:.3f} shared_prefix_steps_per_s={training[1]['steps_per_s']:.3f} "
          f"predict_items_per_s={scoring['items_per_s']:.1f} bf16_max_abs_diff={compare['max_abs_diff']:.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
