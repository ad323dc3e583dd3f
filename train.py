"""Train ORCA with the paper's curriculum: s1 (synthetic) -> s2 (benchmark answers, machine-rated) -> s3 (human).

    python train.py --config configs/quickstart.yaml [--training.eval_every 50 --stages.s1.max_steps 100 ...]
    accelerate launch train.py --config configs/llama3b-multi.yaml     # many GPUs: DDP/FSDP through accelerate

Each stage trains from the best checkpoint of the previous one, with its own data, max steps and peak LR: linear
warmup, linear decay to a floor of 0.1 x peak, effective batch 16 through gradient accumulation, early stopping on
dev Spearman. The final model (LoRA merged) is a plain HF folder loadable with AutoModel + trust_remote_code.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors.torch import load_file, save_file

from configuration_orca import OrcaConfig
from modeling_orca import (
    OrcaForCorrectnessDistribution,
    encode_fields,
    input_variants,
    pad_ratings,
    pad_token_ids,
)

REPO = Path(__file__).resolve().parent
logger = logging.getLogger("orca.train")

DEFAULTS: dict[str, Any] = {
    "run_dir": "runs/orca",
    "seed": 0,
    "model": {
        "backbone": None,  # HF folder or Hub id; "minilm" / "smollm2" (offline wheels); "tiny-llama" etc. (tests)
        "revision": None,
        "score_type": "multinomial",
        "pooling": "last",
        "family": None,  # architecture family of a Hub backbone (llama, olmo2, gemma3): documentation and tests
        "orca": {},  # any other OrcaConfig field (template, max_length, reference_mode, ...)
    },
    "lora": {"enabled": True, "r": 128, "alpha": 128, "dropout": 0.05, "target_modules": "auto"},
    "training": {
        "effective_batch_size": 16,
        "per_device_batch_size": 16,
        "warmup_ratio": 0.1,
        "lr_floor_ratio": 0.1,
        "head_lr": None,  # defaults to the stage's LR
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "eval_every": 250,
        "patience": 5,
        "max_dev_items": None,
        "mixed_precision": "auto",  # bf16 where the device supports it
        "gradient_checkpointing": False,
        "checkpoint_every": None,  # defaults to eval_every
        "log_every": 10,
    },
    # data.seed drives s1/s2 generation and the splits, apart from the training seed
    "data": {"data_dir": None, "release_dir": None, "scenario": "A", "fold": 0, "seed": 0, "s1_size": None},
    "stages": {
        "s1": {"dataset": "s1_synthetic", "max_steps": 10000, "lr": 5e-5},
        "s2": {"dataset": "s2_benchmark", "max_steps": 5000, "lr": 2e-5},
        "s3": {"dataset": "s3_mmau_mmar", "max_steps": 2000, "lr": 2e-5},
    },
    "skip_stages": [],
    "test": {"baselines": ["exact_match", "contains", "token_f1"], "compare_reference_modes": True},
}

# LoRA targets per architecture family: attention and MLP projections
LORA_TARGETS = {
    "bert": ["query", "key", "value", "dense"],
    "default": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


# ------------------------------------------------------------------------------------------------ configuration


def deep_update(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = deep_update(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def parse_overrides(pairs: list[str]) -> dict:
    """`--a.b.c value` pairs -> nested dict; values parsed as YAML (numbers, booleans, lists)."""
    if len(pairs) % 2:
        raise SystemExit(f"overrides come in `--key value` pairs, got: {' '.join(pairs)}")
    out: dict = {}
    for key, value in zip(pairs[::2], pairs[1::2]):
        if not key.startswith("--"):
            raise SystemExit(f"expected an override like --training.eval_every, got {key!r}")
        node = out
        *parents, leaf = key[2:].replace("-", "_").split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parse_value(value)
    return out


def parse_value(text: str):
    """YAML scalar, except that `1e-4` is a float (YAML 1.1, which PyYAML follows, would keep it a string)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def read_yaml_with_base(path: Path) -> dict:
    """A YAML run config; a `base: other.yaml` key (relative to the file) is read first and updated."""
    data = yaml.safe_load(path.read_text()) or {}
    base = data.pop("base", None)
    return deep_update(read_yaml_with_base(path.parent / base), data) if base else data


def load_run_config(path: str | None, overrides: list[str]) -> dict:
    config = copy.deepcopy(DEFAULTS)
    if path:
        data = read_yaml_with_base(Path(path))
        if "stages" in data:  # a file's curriculum replaces the default one (stage by stage merging would add stages)
            config["stages"] = {}
        config = deep_update(config, data)
    config = deep_update(config, parse_overrides(overrides))
    if config["model"]["backbone"] is None:
        raise SystemExit("model.backbone is not set (a folder, a Hub id, 'minilm' or 'smollm2')")
    unknown = set(config["skip_stages"]) - set(config["stages"])
    if unknown:
        raise SystemExit(f"skip_stages names unknown stages {sorted(unknown)}; stages are {list(config['stages'])}")
    return config


# ------------------------------------------------------------------------------------------------ model


def tiny_backbone_config(kind: str, vocab_size: int):
    """A 2-layer random backbone of each paper architecture: fast tests and smoke runs of the paper configs."""
    from transformers import BertConfig, Gemma3TextConfig, LlamaConfig, Olmo2Config

    common = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=vocab_size)
    if kind == "llama":
        return LlamaConfig(num_key_value_heads=2, **common)
    if kind == "olmo2":
        return Olmo2Config(num_key_value_heads=2, **common)
    if kind == "gemma3":
        return Gemma3TextConfig(num_key_value_heads=2, head_dim=8, sliding_window=16, **common)
    if kind == "bert":
        return BertConfig(max_position_embeddings=512, **common)
    raise ValueError(f"no tiny backbone {kind!r}; choose llama, olmo2, gemma3 or bert")


def resolve_backbone(name: str) -> str:
    from eval_suite import backbones

    if name == "minilm":
        return str(backbones.minilm_path())
    if name == "smollm2":
        return str(backbones.smollm2_path())
    return name


def build_model(cfg: dict):
    from transformers import AutoTokenizer

    m = cfg["model"]
    orca_kwargs = dict(m["orca"], score_type=m["score_type"], pooling=m["pooling"])
    if m["backbone"].startswith("tiny-"):
        kind = m["backbone"][len("tiny-") :]
        tokenizer = AutoTokenizer.from_pretrained(resolve_backbone("minilm" if kind == "bert" else "smollm2"))
        torch.manual_seed(cfg["seed"])
        model = OrcaForCorrectnessDistribution(
            OrcaConfig(backbone_config=tiny_backbone_config(kind, len(tokenizer)), **orca_kwargs)
        )
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer
    torch.manual_seed(cfg["seed"])  # the head's initialisation
    return OrcaForCorrectnessDistribution.from_backbone(resolve_backbone(m["backbone"]), revision=m["revision"], **orca_kwargs)


def add_lora(model, cfg: dict):
    lora = cfg["lora"]
    if not lora["enabled"]:
        return model
    from peft import LoraConfig, get_peft_model

    targets = lora["target_modules"]
    if targets == "auto":
        family = "bert" if model.config.backbone_config.model_type == "bert" else "default"
        targets = LORA_TARGETS[family]
    peft_config = LoraConfig(
        r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"], target_modules=targets,
        modules_to_save=["score_head"],  # the head is trained fully
    )
    return get_peft_model(model, peft_config)


def unwrap_orca(model) -> OrcaForCorrectnessDistribution:
    """The ORCA model inside DDP / PEFT wrappers (for predict: LoRA layers stay active)."""
    model = getattr(model, "module", model)
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


def trainable_state(model) -> dict[str, torch.Tensor]:
    model = getattr(model, "module", model)
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model, state: dict[str, torch.Tensor]) -> None:
    model = getattr(model, "module", model)
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in state]
    unknown = [n for n in state if n not in params]
    if missing or unknown:
        raise RuntimeError(f"checkpoint does not match the model: missing {missing[:3]}, unexpected {unknown[:3]}")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


# ------------------------------------------------------------------------------------------------ data


def load_stage_data(stage: dict, cfg: dict) -> dict[str, list[dict]]:
    """Records of a stage: a dataset_builder config, or JSONL files of the record schema / the release format."""
    if "files" in stage:
        from dataset_builder.filters import apply_filters
        from dataset_builder.readers import read_records

        out = {}
        for split, path in stage["files"].items():
            # the paper's rules apply to user files too: over-long, flagged and unrated items out (dev and test
            # need ratings to be scored against)
            out[split], dropped = apply_filters(read_records(path).records, require_rated=True)
            if dropped:
                logger.warning("%s: dropped %s", path, dict(dropped))
        seen: dict[str, str] = {}
        for split, records in out.items():
            for r in records:
                if seen.setdefault(r["id"], split) != split:  # the same item in two splits leaks into the scores
                    raise DataError(f"id {r['id']!r} is in both {seen[r['id']]} ({stage['files'][seen[r['id']]]}) and {split} ({stage['files'][split]})")
        return out
    import dataset_builder

    d = cfg["data"]
    splits = dataset_builder.load_config(
        stage["dataset"], scenario=d["scenario"], fold=d["fold"], data_dir=d["data_dir"],
        release_dir=d["release_dir"], seed=d["seed"], s1_size=d["s1_size"],
    )
    return {name: split.to_list() for name, split in splits.items()}


def sample_records(records: list[dict], k: int | None, seed: int) -> list[dict]:
    """At most k records, a seeded sample in input order (dev evaluations during training stay cheap)."""
    if not k or len(records) <= k:
        return records
    keep = set(random.Random(seed).sample(range(len(records)), k))
    return [r for i, r in enumerate(records) if i in keep]


def tokenize_records(records: list[dict], tokenizer, config: OrcaConfig) -> list[list[int]]:
    """Training inputs: the first input variant (all aliases joined, or the first alias for reference_mode='max')."""
    return encode_fields([input_variants(r, config)[0] for r in records], tokenizer, config)


def epoch_batches(lengths: list[int], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Global batches (one per optimiser step) of similar lengths in a seeded random order: shuffle, sort within
    windows of 50 batches, shuffle the batches. Full batches only, so every step sees `batch_size` items, and the
    same items whatever the split into processes and micro-batches."""
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)]
    rng.shuffle(batches)
    return batches


def collate(indices: list[int], token_ids: list[list[int]], records: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    input_ids, attention_mask = pad_token_ids([token_ids[i] for i in indices], pad_id)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "ratings": pad_ratings([records[i]["ratings"] for i in indices])}


# ------------------------------------------------------------------------------------------------ schedule


def lr_lambda(step: int, *, warmup_steps: int, max_steps: int, floor: float) -> float:
    """Multiplier of the peak LR: 0 -> 1 linearly over warmup, then linearly down to `floor` at max_steps."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
    return max(floor, 1.0 - (1.0 - floor) * min(1.0, progress))


class EarlyStopping:
    def __init__(self, patience: int):
        self.patience, self.best, self.bad_evals = patience, -math.inf, 0

    def update(self, value: float) -> bool:
        """Record one evaluation; True when it is a new best."""
        value = -math.inf if value is None or math.isnan(value) else value
        if value > self.best:
            self.best, self.bad_evals = value, 0
            return True
        self.bad_evals += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.bad_evals >= self.patience

    def state_dict(self):
        return {"patience": self.patience, "best": self.best, "bad_evals": self.bad_evals}

    def load_state_dict(self, state):
        self.patience, self.best, self.bad_evals = state["patience"], state["best"], state["bad_evals"]


# ------------------------------------------------------------------------------------------------ evaluation


def evaluate_records(model, tokenizer, records: list[dict], batch_size: int, show_progress: bool = False) -> tuple[list[dict], dict]:
    from eval_suite.metrics import compute_metrics

    preds = unwrap_orca(model).predict(records, tokenizer, batch_size=batch_size, show_progress=show_progress)
    metrics = compute_metrics(
        [p["mean"] for p in preds],
        human_ratings=[r["ratings"] for r in records],
        pred_variance=None if preds[0]["variance"] is None else [p["variance"] for p in preds],
        pred_probs=None if preds[0]["probs"] is None else [p["probs"] for p in preds],
    )
    return preds, metrics


def baseline_metrics(records: list[dict], names: list[str]) -> dict[str, dict]:
    from eval_suite.baselines import BASELINES
    from eval_suite.metrics import compute_metrics

    out = {}
    for name in names:
        scores = BASELINES[name](records)
        out[name] = compute_metrics([1 + 4 * s for s in scores], human_ratings=[r["ratings"] for r in records])
    return out


# ------------------------------------------------------------------------------------------------ checkpoints


def atomic_save_dir(target: Path, write) -> None:
    """Write a checkpoint into a temporary folder, then rename: a crash mid-write leaves the old one intact."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        write(tmp)
        old = target.with_name(f".{target.name}-old")
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rng_state() -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def save_training_checkpoint(path: Path, model, optimizer, scheduler, trainer_state: dict) -> None:
    def write(tmp: Path):
        save_file(trainable_state(model), tmp / "trainable.safetensors")
        # optimizer / RNG states are our own files, read back with weights_only=True (no arbitrary unpickling)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": _rng_for_save()}, tmp / "state.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=1))

    atomic_save_dir(path, write)


def _rng_for_save() -> dict:
    state = rng_state()
    py = state["python"]
    np_state = state["numpy"]
    # tuples of ints and numpy arrays -> lists/tensors so torch.load(weights_only=True) accepts them
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "torch": state["torch"],
        "cuda": state["cuda"],
    }


def load_training_checkpoint(path: Path, model, optimizer, scheduler) -> dict:
    load_trainable_state(model, load_file(path / "trainable.safetensors"))
    state = torch.load(path / "state.pt", weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    py, np_state = state["rng"]["python"], state["rng"]["numpy"]
    set_rng_state({
        "python": (py[0], tuple(py[1]), py[2]),
        "numpy": (np_state[0], np_state[1].numpy().astype(np.uint32), *np_state[2:]),
        "torch": state["rng"]["torch"],
        "cuda": state["rng"]["cuda"],
    })
    return json.loads((path / "trainer_state.json").read_text())


# ------------------------------------------------------------------------------------------------ training


class NonFiniteLoss(RuntimeError):
    pass


class DataError(ValueError):
    pass


def versions() -> dict:
    import accelerate
    import datasets
    import peft
    import transformers

    return {
        "orca": _package_version(), "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "peft": peft.__version__, "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
    }


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("orca-judge")
    except PackageNotFoundError:
        return "unknown"


def train_stage(name, stage, data, model, tokenizer, cfg, accelerator, run_dir: Path, resume_state: dict | None, log):
    """Train one stage; returns its summary. The model ends holding the stage's best weights."""
    from tqdm.auto import tqdm

    t = cfg["training"]
    config = unwrap_orca(model).config
    world = accelerator.num_processes
    micro = t["per_device_batch_size"]
    if t["effective_batch_size"] % (micro * world):
        raise SystemExit(
            f"effective_batch_size {t['effective_batch_size']} is not a multiple of "
            f"per_device_batch_size x processes ({micro} x {world})"
        )
    accum = t["effective_batch_size"] // (micro * world)
    accelerator.gradient_accumulation_steps = accum

    train_records = [r for r in data["train"] if r.get("ratings")]
    dev_records = sample_records(data["validation"], t["max_dev_items"], cfg["seed"])
    if len(train_records) < t["effective_batch_size"]:
        raise SystemExit(f"stage {name}: {len(train_records)} rated training items, fewer than one batch")
    train_config = config
    if stage.get("max_length"):  # a shorter token budget for this stage's training inputs (fields cut in order)
        train_config = copy.deepcopy(config)
        train_config.max_length = stage["max_length"]
    token_ids = tokenize_records(train_records, tokenizer, train_config)
    lengths = [len(ids) for ids in token_ids]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    head_lr = t["head_lr"] or stage["lr"]
    head_params = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" in n]
    body_params = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" not in n]
    optimizer = torch.optim.AdamW(
        [{"params": body_params, "lr": stage["lr"]}, {"params": head_params, "lr": head_lr}], weight_decay=t["weight_decay"]
    )
    max_steps = stage["max_steps"]
    warmup = stage.get("warmup_steps", int(round(t["warmup_ratio"] * max_steps)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_lambda(s, warmup_steps=warmup, max_steps=max_steps, floor=t["lr_floor_ratio"])
    )
    # the scheduler is stepped by hand once per optimiser step (accelerate would step it once per process)
    prepared_model, optimizer = accelerator.prepare(model, optimizer)
    stopper = EarlyStopping(t["patience"])
    state = {"stage": name, "step": 0, "epoch": 0, "batch_in_epoch": 0, "history": [], "best_step": None}
    stage_dir = run_dir / "checkpoints" / name
    if resume_state is not None:
        state = load_training_checkpoint(stage_dir / "latest", prepared_model, optimizer, scheduler)
        stopper.load_state_dict(state["early_stopping"])
        log({"event": "resumed", "stage": name, "step": state["step"]})

    eval_every = t["eval_every"]
    ckpt_every = t["checkpoint_every"] or eval_every
    rank = accelerator.process_index
    bar = tqdm(total=max_steps, initial=state["step"], desc=f"{name}", disable=not accelerator.is_main_process)
    last_rho, started = None, time.time()
    prepared_model.train()
    # optional wall-clock budget per stage (minutes of training, evaluations included), for fixed-time comparisons
    deadline = started + 60 * stage["max_minutes"] if stage.get("max_minutes") else math.inf
    while state["step"] < max_steps and not stopper.should_stop and time.time() < deadline:
        batches = epoch_batches(lengths, t["effective_batch_size"], cfg["seed"], state["epoch"])
        while (state["batch_in_epoch"] < len(batches) and state["step"] < max_steps and not stopper.should_stop
               and time.time() < deadline):
            # one optimiser step = one global batch: this process's slice, in `accum` micro-batches
            mine = batches[state["batch_in_epoch"]][rank * micro * accum : (rank + 1) * micro * accum]
            state["batch_in_epoch"] += 1
            step_loss = 0.0
            for k in range(accum):
                micro_batch = collate(mine[k * micro : (k + 1) * micro], token_ids, train_records, pad_id)
                batch = {key: v.to(accelerator.device) for key, v in micro_batch.items()}
                with accelerator.accumulate(prepared_model):
                    loss = prepared_model(**batch).loss
                    if not torch.isfinite(loss):
                        raise NonFiniteLoss(
                            f"stage {name} step {state['step']}: loss is {loss.item()}; the last good checkpoint is "
                            f"{stage_dir / 'latest'} (lower the LR or check the data)"
                        )
                    accelerator.backward(loss)
                    if accelerator.sync_gradients and t["max_grad_norm"]:
                        accelerator.clip_grad_norm_(prepared_model.parameters(), t["max_grad_norm"])
                    optimizer.step()  # a no-op until the last micro-batch of the step
                    optimizer.zero_grad()
                step_loss += loss.item() / accum
            scheduler.step()
            state["step"] += 1
            bar.update(1)
            bar.set_postfix(loss=f"{step_loss:.3f}", dev_rho="-" if last_rho is None else f"{last_rho:.3f}")
            if state["step"] % t["log_every"] == 0:
                log({"stage": name, "step": state["step"], "loss": step_loss, "lr": scheduler.get_last_lr()[0]})
            if state["step"] % eval_every == 0 or state["step"] == max_steps:
                _, dev = evaluate_records(prepared_model, tokenizer, dev_records, micro)
                prepared_model.train()
                last_rho = dev["spearman"]
                improved = stopper.update(last_rho)
                state["history"].append({"step": state["step"], "dev": dev})
                log({"stage": name, "step": state["step"], "dev": dev, "improved": improved})
                if improved and accelerator.is_main_process:
                    state["best_step"] = state["step"]
                    atomic_save_dir(stage_dir / "best", lambda d: save_file(trainable_state(prepared_model), d / "trainable.safetensors"))
            if state["step"] % ckpt_every == 0 and accelerator.is_main_process:
                state["early_stopping"] = stopper.state_dict()
                save_training_checkpoint(stage_dir / "latest", prepared_model, optimizer, scheduler, state)
            accelerator.wait_for_everyone()
        if state["batch_in_epoch"] >= len(batches):
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    bar.close()
    if state["best_step"] is None:  # no evaluation happened (max_steps < eval_every): keep the last weights
        atomic_save_dir(stage_dir / "best", lambda d: save_file(trainable_state(prepared_model), d / "trainable.safetensors"))
        state["best_step"] = state["step"]
    state["early_stopping"] = stopper.state_dict()
    if accelerator.is_main_process:
        save_training_checkpoint(stage_dir / "latest", prepared_model, optimizer, scheduler, dict(state, done=True))
    load_trainable_state(prepared_model, load_file(stage_dir / "best" / "trainable.safetensors"))
    return {
        "steps": state["step"], "best_step": state["best_step"], "stopped_early": stopper.should_stop,
        "stopped_by_time": time.time() >= deadline and state["step"] < max_steps,
        "best_dev_spearman": None if stopper.best == -math.inf else stopper.best,
        "train_seconds": round(time.time() - started, 1), "history": state["history"],
    }


def run(cfg: dict, resume: bool = False) -> dict:
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    t = cfg["training"]
    mp = t["mixed_precision"]
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    # cpu=True without a GPU: otherwise each process of a multi-process CPU launch thinks it is alone
    accelerator = Accelerator(mixed_precision=mp, cpu=not torch.cuda.is_available())
    set_seed(cfg["seed"])
    run_dir = Path(cfg["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    if resume and not (run_dir / "run_config.yaml").exists():
        raise SystemExit(f"--resume: {run_dir} holds no run to resume")
    (run_dir / "run_config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    log_file = (run_dir / "log.jsonl").open("a")
    writer = None
    if accelerator.is_main_process:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(entry: dict):
        entry = {"time": round(time.time(), 2), **entry}
        if accelerator.is_main_process:
            log_file.write(json.dumps(entry) + "\n")
            log_file.flush()
            if "loss" in entry:
                writer.add_scalar(f"{entry['stage']}/loss", entry["loss"], entry["step"])
                writer.add_scalar(f"{entry['stage']}/lr", entry["lr"], entry["step"])
            if "step" in entry and "dev" in entry and entry["dev"].get("spearman") is not None:
                writer.add_scalar(f"{entry['stage']}/dev_spearman", entry["dev"]["spearman"], entry["step"])

    started = time.time()
    model, tokenizer = build_model(cfg)
    if t["gradient_checkpointing"]:
        model.activation_checkpointing_enable()
    model = add_lora(model, cfg)
    progress_path = run_dir / "progress.json"
    progress = json.loads(progress_path.read_text()) if resume and progress_path.exists() else {"stages": {}}

    stages = [(n, s) for n, s in cfg["stages"].items() if n not in cfg["skip_stages"]]
    last_data = None
    for index, (name, stage) in enumerate(stages):
        summary = progress["stages"].get(name)
        data = load_stage_data(stage, cfg)
        counts = {split: len(records) for split, records in data.items()}
        if summary is not None:  # finished before the interruption: restore its best weights and move on
            load_trainable_state(model, load_file(run_dir / "checkpoints" / name / "best" / "trainable.safetensors"))
        else:
            interrupted = resume and (run_dir / "checkpoints" / name / "latest" / "trainer_state.json").exists()
            log({"event": "stage_start", "stage": name, "counts": counts})
            summary = train_stage(name, stage, data, model, tokenizer, cfg, accelerator, run_dir, {} if interrupted else None, log)
            summary["counts"] = counts
            bs, k = t["per_device_batch_size"], t["max_dev_items"]
            # stage-end scores on at most max_dev_items items (n is in the metrics); the last stage's full test
            # split is scored below, beside the baselines
            _, summary["dev"] = evaluate_records(model, tokenizer, sample_records(data["validation"], k, cfg["seed"]), bs)
            if index < len(stages) - 1:
                _, summary["test"] = evaluate_records(model, tokenizer, sample_records(data["test"], k, cfg["seed"]), bs)
            progress["stages"][name] = summary
            progress_path.write_text(json.dumps(progress, indent=1))
            log({"event": "stage_end", "stage": name, "dev": summary["dev"]})
        last_data = data

    # the final model: LoRA merged into the backbone, a plain HF folder with both code files and the tokenizer
    final = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    final = unwrap_orca(final)
    test_records = last_data["test"]
    bs = t["per_device_batch_size"]
    results = {"stages": progress["stages"], "test": {}}
    if cfg["test"]["compare_reference_modes"] and "reference" in final.config.template_fields:
        modes = {}
        for mode in ("join", "max"):
            final.config.reference_mode = mode
            modes[mode] = evaluate_records(final, tokenizer, last_data["validation"], bs)[1]["spearman"]
        final.config.reference_mode = max(modes, key=lambda m: -math.inf if modes[m] is None else modes[m])
        results["reference_mode_dev_spearman"] = modes
        results["reference_mode"] = final.config.reference_mode
    test_preds, results["test"]["orca"] = evaluate_records(final, tokenizer, test_records, bs, show_progress=accelerator.is_main_process)
    results["test"].update(baseline_metrics(test_records, cfg["test"]["baselines"]))
    for entry in results["test"].values():
        entry["mae"] = entry.get("mae_mean")
    if accelerator.is_main_process:
        def write_final(d: Path):
            final.save_pretrained(d)
            tokenizer.save_pretrained(d)

        atomic_save_dir(run_dir / "final", write_final)
        with (run_dir / "test_predictions.jsonl").open("w") as f:
            for record, pred in zip(test_records, test_preds):
                keep = {k: record[k] for k in ("benchmark", "question_id", "answerer", "modality", "category") if k in record}
                f.write(json.dumps({"id": record["id"], **keep, **pred, "ratings": record["ratings"]}) + "\n")
    results.update(
        wall_seconds=round(time.time() - started, 1), versions=versions(), config=cfg,
        model_revision=cfg["model"]["revision"], backbone=cfg["model"]["backbone"],
    )
    if accelerator.is_main_process:
        (run_dir / "metrics.json").write_text(json.dumps(results, indent=1, default=str))
        writer.close()
        print_table(results["test"])
    log_file.close()
    return results


def print_table(test: dict) -> None:
    cols = ("spearman", "kendall", "mae", "roc_auc")
    print("\n| judge | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, m in test.items():
        cells = ["-" if m.get(c) is None else f"{m[c]:.4f}" for c in cols]
        print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML run config (configs/*.yaml)")
    parser.add_argument("--resume", action="store_true", help="continue the run in run_dir exactly where it stopped")
    args, overrides = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_run_config(args.config, overrides)
    from dataset_builder.schema import RecordError

    try:
        run(cfg, resume=args.resume)
    except (RecordError, DataError, FileNotFoundError) as err:  # bad or missing data: one line, like the other entry points
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from err
    except NonFiniteLoss as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(3) from err


if __name__ == "__main__":
    main()
