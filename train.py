"""Train ORCA with the paper's curriculum: s1 (synthetic) -> s2 (benchmark answers, machine-rated) -> s3 (human).

    python train.py --config configs/quickstart.yaml [--training.eval_every 50 --stages.s1.max_steps 100 ...]
    accelerate launch train.py --config configs/paper/orca-llama3.2-3b-multi.yaml   # many GPUs: DDP/FSDP

Each stage trains from the best checkpoint of the previous one, with its own data, max steps and peak LR: linear
warmup, linear decay to a floor of 0.1 x peak, effective batch 16 through gradient accumulation, early stopping on
dev Spearman. The final model (LoRA merged) is a plain HF folder loadable with AutoModel + trust_remote_code.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import difflib
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
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import torch

    from configuration_orca import OrcaConfig
    from modeling_orca import OrcaForCorrectnessDistribution

# torch, transformers and the model are imported where they are used: `train.py --help` and a config error answer
# at once

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
        # trackers through accelerate: "tensorboard", "wandb", "mlflow", ... (installed), a list of them, or "none"
        "report_to": "tensorboard",
        # "shuffled": batches of similar lengths from all questions; "question": a question's answers together
        # (faster with prefix_sharing, but 0.024 lower dev Spearman at equal steps: benchmarks/compare_batching.py)
        "batching": "shuffled",
        # with batching by question: a question's answers share one prefix-tree row where that is exact (causal
        # decoders pooled at the last token); no effect otherwise
        "prefix_sharing": True,
    },
    # data.seed drives s1/s2 generation and the splits, apart from the training seed
    "data": {"data_dir": None, "release_dir": None, "scenario": "A", "fold": 0, "seed": 0, "s1_size": None},
    "stages": {
        "s1": {"dataset": "s1_synthetic", "max_steps": 10000, "lr": 5e-5},
        "s2": {"dataset": "s2_benchmark", "max_steps": 5000, "lr": 2e-5},
        "s3": {"dataset": "s3_mmau_mmar", "max_steps": 2000, "lr": 2e-5},
    },
    "skip_stages": [],
    # ood: also score the out-of-domain sets (eval_suite.report.ood_evaluation), with ood_bootstrap resamples, at most
    # ood_max_items (a seeded sample) of each set
    "test": {"baselines": ["exact_match", "contains", "token_f1"], "compare_reference_modes": True, "ood": False,
             "ood_bootstrap": 1000, "ood_max_items": None},
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


# the type of each key whose default is None (other keys take the type of their default)
KEY_TYPES: dict[str, type | tuple] = {
    "model.backbone": str, "model.revision": str, "model.family": str, "lora.target_modules": (str, list),
    "training.head_lr": float, "training.max_dev_items": int, "training.checkpoint_every": int,
    "training.report_to": (str, list), "test.ood_max_items": int, "data.data_dir": str, "data.release_dir": str, "data.s1_size": int,
}
# the keys of one stage (stages.NAME.KEY), with what they default to
STAGE_KEYS: dict[str, tuple[type | tuple, str]] = {
    "dataset": (str, "a dataset_builder config: s1_synthetic, s2_benchmark, s3_mmau_mmar, s3_evouna_nq, ..."),
    "files": (dict, "instead of dataset: {train: FILE, validation: FILE, test: FILE} (JSONL records)"),
    "max_steps": (int, "required"),
    "lr": (float, "required: the peak learning rate"),
    "warmup_steps": (int, "training.warmup_ratio x max_steps"),
    "max_minutes": (float, "none: a wall-clock budget for the stage"),
    "max_length": (int, "model.orca.max_length: a shorter token budget for this stage's training inputs"),
}
TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
              dict: "a mapping"}


def leaf_keys(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{"a.b.c": value} of a nested dict's leaves."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value and not f"{prefix}{key}".endswith((".files", "model.orca")):
            out.update(leaf_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def has_type(value, expected) -> bool:
    if value is None:  # null: "unset" for every key that may be unset, checked where it is used otherwise
        return True
    for kind in expected if isinstance(expected, tuple) else (expected,):
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if kind is int and isinstance(value, bool):
            continue
        if isinstance(value, kind):
            return True
    return False


def orca_config_fields() -> dict[str, str]:
    """OrcaConfig's fields and their defaults (as written in configuration_orca.py), read without importing it:
    importing transformers would make `--help` slow."""
    import ast

    tree = ast.parse((REPO / "configuration_orca.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OrcaConfig")
    out = {}
    for node in cls.body:
        # backbone_config comes from model.backbone; score_type and pooling from model.score_type / model.pooling
        if isinstance(node, ast.AnnAssign) and node.target.id not in ("backbone_config", "score_type", "pooling"):
            try:
                out[node.target.id] = ast.literal_eval(node.value)
            except ValueError:
                out[node.target.id] = ast.unparse(node.value)
    return out


def check_config(tree: dict, source: str) -> None:
    """Refuse an unknown key (naming the nearest valid one) or a value of the wrong type, in a config file's
    content or the command line's overrides (`source` says which)."""

    known = {k: KEY_TYPES.get(k, type(v)) for k, v in leaf_keys(DEFAULTS).items() if not k.startswith("stages.")}
    names = list(known) + ["config", "resume"]

    def refuse(key: str, candidates) -> None:
        close = difflib.get_close_matches(key, list(candidates) + names, n=1, cutoff=0.6)
        raise SystemExit(f"{source}: unknown key {key}" + (f"; did you mean {close[0]}?" if close else "; see train.py --help"))

    for key, value in leaf_keys(tree).items():
        if key == "model.orca" and isinstance(value, dict):  # any OrcaConfig field; OrcaConfig checks the values
            fields = [f"model.orca.{f}" for f in orca_config_fields()]
            for field in value:
                if f"model.orca.{field}" not in fields:
                    refuse(f"model.orca.{field}", fields)
            continue
        parts = key.split(".")
        if parts[0] == "stages" and len(parts) > 2:
            candidates = {f"stages.{parts[1]}.{k}": kind for k, (kind, _) in STAGE_KEYS.items()}
            expected = candidates.get(".".join(parts[:3])) if len(parts) == 3 or parts[2] == "files" else None
        elif key == "stages":
            candidates, expected = {}, dict
        else:
            candidates, expected = known, known.get(key)
        if expected is None:
            refuse(key, candidates)
        if not has_type(value, expected):
            kinds = expected if isinstance(expected, tuple) else (expected,)
            raise SystemExit(f"{source}: {key} must be {' or '.join(TYPE_NAMES[k] for k in kinds)}, got {value!r}")


def parse_overrides(pairs: list[str]) -> dict:
    """`--a.b.c value` (or `--a.b.c=value`) pairs -> nested dict; values parsed as YAML (numbers, booleans, lists)."""
    pairs = [part for arg in pairs for part in (arg.split("=", 1) if arg.startswith("--") and "=" in arg else [arg])]
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
        if not Path(path).is_file():
            raise SystemExit(f"--config {path}: no such file (the configs are in {REPO / 'configs'})")
        data = read_yaml_with_base(Path(path))
        check_config(data, path)
        if "stages" in data:  # a file's curriculum replaces the default one (stage by stage merging would add stages)
            config["stages"] = {}
        config = deep_update(config, data)
    update = parse_overrides(overrides)
    check_config(update, "command line")
    config = deep_update(config, update)
    if config["model"]["backbone"] is None:
        raise SystemExit("model.backbone is not set (a folder, a Hub id, 'minilm' or 'smollm2')")
    unknown = set(config["skip_stages"]) - set(config["stages"])
    if unknown:
        raise SystemExit(f"skip_stages names unknown stages {sorted(unknown)}; stages are {list(config['stages'])}")
    # a misspelt stage name in an override (`--stages.s4.lr`) would add a stage with no data: refuse it before any work
    for name, stage in config["stages"].items():
        if name in config["skip_stages"]:
            continue
        missing = [key for key in ("max_steps", "lr") if stage.get(key) is None]
        if not stage.get("dataset") and not stage.get("files"):
            missing.insert(0, "dataset (or files)")
        if missing:
            others = [s for s in config["stages"] if s != name]
            near = difflib.get_close_matches(name, others, n=1)
            hint = f"; did you mean {near[0]}?" if near else f"; stages are {others}"
            raise SystemExit(f"stage {name}: {', '.join(missing)} not set{hint}")
    if config["training"]["batching"] not in ("shuffled", "question"):
        raise SystemExit(f"training.batching is {config['training']['batching']!r}; choose shuffled or question")
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
    import torch
    from transformers import AutoTokenizer

    from configuration_orca import OrcaConfig
    from modeling_orca import OrcaForCorrectnessDistribution

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
    import torch

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
    from modeling_orca import encode_fields, input_variants

    return encode_fields([input_variants(r, config)[0] for r in records], tokenizer, config)


def epoch_batches(lengths: list[int], batch_size: int, seed: int, epoch: int, groups: list | None = None,
                  piece: int | None = None) -> list[list[int]]:
    """Global batches (one per optimiser step) of similar lengths in a seeded random order: shuffle, sort within
    windows of 50 batches, shuffle the batches. Full batches only, so every step sees `batch_size` items, and the
    same items whatever the split into processes and micro-batches.

    With `groups` (one key per item, e.g. its question id; batching by question), a group's items stay together:
    groups are shuffled, sorted by mean length within windows of 50 batches and packed into pieces of `piece` items
    (the micro-batch size; default `batch_size`), whole groups first (the best fit among the next 16 groups), a
    group split over consecutive pieces only when none fits the room left; `batch_size // piece` consecutive pieces
    make a batch and the batches are shuffled. A global batch cut into processes at multiples of `piece` keeps
    every whole-packed group on one process and in one micro-batch, and the batches do not depend on the number
    of processes."""
    rng = random.Random(seed * 100_003 + epoch)
    if groups is not None:
        return _group_batches(lengths, groups, batch_size, piece or batch_size, rng)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)]
    rng.shuffle(batches)
    return batches


def _group_batches(lengths: list[int], groups: list, batch_size: int, piece: int, rng: random.Random) -> list[list[int]]:
    if batch_size % piece:
        raise ValueError(f"batch size {batch_size} is not a multiple of the piece size {piece}")
    members: dict = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    units = list(members.values())  # in order of first appearance: deterministic
    rng.shuffle(units)
    for unit in units:
        rng.shuffle(unit)
    ordered, window, start = [], batch_size * 50, 0
    while start < len(units):  # windows of about 50 batches' items, sorted by mean length (less padding)
        end, size = start, 0
        while end < len(units) and size < window:
            size += len(units[end])
            end += 1
        ordered += sorted(units[start:end], key=lambda u: sum(lengths[i] for i in u) / len(u))
        start = end
    pieces, current, queue = [], [], collections.deque(ordered)
    while queue:
        room = piece - len(current)
        fits = [k for k in range(min(16, len(queue))) if len(queue[k]) <= room]
        if fits:
            k = max(fits, key=lambda k: len(queue[k]))  # the largest that fits, the first of equals
            current += queue[k]
            del queue[k]
        else:  # no group nearby fits whole: the next one fills the piece, its rest starts the next piece
            unit = queue.popleft()
            current += unit[:room]
            queue.appendleft(unit[room:])
        if len(current) == piece:
            pieces.append(current)
            current = []
    per_batch = batch_size // piece
    batches = [sum(pieces[i : i + per_batch], []) for i in range(0, len(pieces) - per_batch + 1, per_batch)]
    rng.shuffle(batches)
    return batches


def collate(indices: list[int], token_ids: list[list[int]], records: list[dict], pad_id: int, *, share_prefix: bool = False,
            groups: list | None = None) -> dict[str, torch.Tensor]:
    """A micro-batch's model inputs and ratings: one padded row per item, or with `share_prefix` prefix-tree rows
    (`pack_prefix_tree`: the items of one group, e.g. a question's answers, share a row and their common tokens)."""
    from modeling_orca import pack_prefix_tree, pad_ratings, pad_token_ids

    ratings = pad_ratings([records[i]["ratings"] for i in indices])
    if share_prefix:
        packed = pack_prefix_tree([token_ids[i] for i in indices], pad_id, groups=None if groups is None else [groups[i] for i in indices])
        return {**packed, "ratings": ratings}
    input_ids, attention_mask = pad_token_ids([token_ids[i] for i in indices], pad_id)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "ratings": ratings}


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
    from eval_suite.metrics import prediction_metrics

    preds = unwrap_orca(model).predict(records, tokenizer, batch_size=batch_size, show_progress=show_progress)
    return preds, prediction_metrics(preds, [r["ratings"] for r in records])


# ------------------------------------------------------------------------------------------------ checkpoints


def atomic_save_dir(target: Path, write) -> None:
    """Write a checkpoint into a temporary folder, then rename: a crash mid-write leaves the old one intact."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        write(tmp)
        replace_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(tmp: Path, target: Path) -> None:
    """Put the complete folder `tmp` in place of `target` by renames (the old one is removed last)."""
    old = target.with_name(f".{target.name}-old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def trainable_names(model) -> list[str]:
    model = getattr(model, "module", model)
    return [n for n, p in model.named_parameters() if p.requires_grad]


def keep_trainable_weights(models, weights, output_dir) -> None:
    """accelerate save_state hook: checkpoints hold the trained weights only (LoRA adapters and the head, or
    everything with full fine-tuning), not a copy of the frozen backbone."""
    for model, state in zip(models, weights):
        keep = set(trainable_names(model)) | {f"module.{n}" for n in trainable_names(model)}
        for key in [k for k in state if k not in keep]:
            del state[key]


def save_checkpoint(accelerator, path: Path, trainer_state: dict) -> None:
    """accelerate's save_state (trained weights, optimizer, scheduler, every process's RNG, the registered stage
    progress) into a temporary folder that the main process then renames into place: a crash mid-write leaves the
    previous checkpoint intact. Every process calls it."""
    tmp = path.with_name(f".{path.name}-tmp")
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    if accelerator.is_main_process:
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=1))  # for people and --resume
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        replace_dir(tmp, path)
    accelerator.wait_for_everyone()


def load_checkpoint(accelerator, path: Path, model) -> None:
    from safetensors import safe_open

    # frozen weights are not in the checkpoint (keep_trainable_weights), so the load is not strict: check instead
    # that it holds exactly the trained ones
    if accelerator.distributed_type != "FSDP":
        with safe_open(path / "model.safetensors", "pt") as f:
            saved = {k.removeprefix("module.") for k in f.keys()}
        expected = set(trainable_names(model))
        if saved != expected:
            raise RuntimeError(f"{path}: checkpoint does not match the model: missing {sorted(expected - saved)[:3]}, "
                               f"unexpected {sorted(saved - expected)[:3]}")
        accelerator.load_state(str(path), strict=False)
    else:
        accelerator.load_state(str(path))


def save_best(accelerator, model, path: Path) -> None:
    """The trained weights as they are now into `path`. Every process calls it (gathering a sharded model is
    collective); the main process alone writes, and nobody goes on before the folder is complete."""
    from safetensors.torch import save_file

    state = accelerator.get_state_dict(model)  # full weights (gathered from the shards under FSDP) on the main process
    if accelerator.is_main_process:
        names = trainable_names(accelerator.unwrap_model(model))
        weights = {n: state[n].detach().cpu().contiguous() for n in names}
        atomic_save_dir(path, lambda d: save_file(weights, d / "trainable.safetensors"))
    accelerator.wait_for_everyone()


def load_best(accelerator, model, path: Path) -> None:
    """Every process loads the same saved weights (after save_best's barrier)."""
    from safetensors.torch import load_file

    state = load_file(path / "trainable.safetensors")
    if accelerator.distributed_type == "FSDP":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))
    else:
        load_trainable_state(model, state)


class StageProgress:
    """Where the current stage is: step, data position, evaluations, best step, early stopping. Saved and restored
    with every checkpoint through accelerator.register_for_checkpointing."""

    def __init__(self):
        self.state: dict = {}
        self.stopper = EarlyStopping(0)

    def start(self, stage: str, patience: int) -> None:
        self.state = {"stage": stage, "step": 0, "epoch": 0, "batch_in_epoch": 0, "history": [], "best_step": None}
        self.stopper = EarlyStopping(patience)

    def state_dict(self) -> dict:
        return {**self.state, "early_stopping": self.stopper.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        self.stopper.load_state_dict(state.pop("early_stopping"))
        self.state = state


# ------------------------------------------------------------------------------------------------ training


class NonFiniteLoss(RuntimeError):
    pass


class DataError(ValueError):
    pass


def versions() -> dict:
    import accelerate
    import datasets
    import peft
    import torch
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


def process_share(batch: list[int], rank: int, world: int) -> list[int]:
    """This process's part of a global batch: equal consecutive slices (epoch_batches cuts batches so that slices
    at multiples of the micro-batch size keep a question's items together)."""
    size = len(batch) // world
    return batch[rank * size : (rank + 1) * size]


def main_process_value(accelerator, value):
    """The main process's `value` on every process: decisions (a new best, out of time) are taken once."""
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0] if accelerator.num_processes > 1 else value


def train_stage(name, stage, data, model, tokenizer, cfg, accelerator, run_dir: Path, resume_state: dict | None, log,
                progress: StageProgress):
    """Train one stage; returns its summary. The model ends holding the stage's best weights on every process."""
    import torch
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
    groups = [r.get("question_id") or r["id"] for r in train_records] if t["batching"] == "question" else None
    # a question's answers in one micro-batch share one prefix-tree row: exact (see modeling_orca.pack_prefix_tree)
    share = bool(groups and t["prefix_sharing"] and unwrap_orca(model).prefix_sharing_supported)
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
    accelerator.free_memory()  # forget the previous stage's model, optimizer and scheduler (save_state saves all)
    # the scheduler steps once per optimiser step (Accelerator(step_scheduler_with_optimizer=False))
    prepared_model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    progress.start(name, t["patience"])
    stage_dir = run_dir / "checkpoints" / name
    if resume_state is not None:
        load_checkpoint(accelerator, stage_dir / "latest", prepared_model)  # weights, optimizer, scheduler, RNG, progress
        log({"event": "resumed", "stage": name, "step": progress.state["step"]})
    state, stopper = progress.state, progress.stopper

    eval_every = t["eval_every"]
    ckpt_every = t["checkpoint_every"] or eval_every
    rank = accelerator.process_index
    bar = tqdm(total=max_steps, initial=state["step"], desc=f"{name}", disable=not accelerator.is_main_process)
    last_rho, started = None, time.time()
    prepared_model.train()
    # optional wall-clock budget per stage (minutes of training, evaluations included), for fixed-time comparisons;
    # the main process's clock decides for all
    deadline = started + 60 * stage["max_minutes"] if stage.get("max_minutes") else None

    def out_of_time() -> bool:
        return deadline is not None and main_process_value(accelerator, time.time() >= deadline)

    while state["step"] < max_steps and not stopper.should_stop and not state.get("done") and not out_of_time():
        batches = epoch_batches(lengths, t["effective_batch_size"], cfg["seed"], state["epoch"], groups=groups, piece=micro)
        while state["batch_in_epoch"] < len(batches) and state["step"] < max_steps and not stopper.should_stop and not out_of_time():
            # one optimiser step = one global batch: this process's share, in micro-batches
            global_batch = batches[state["batch_in_epoch"]]
            mine = process_share(global_batch, rank, world)
            state["batch_in_epoch"] += 1
            pieces = [mine[i : i + micro] for i in range(0, len(mine), micro)]
            loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
            for k, piece in enumerate(pieces):
                micro_batch = collate(piece, token_ids, train_records, pad_id, share_prefix=share, groups=groups)
                batch = {key: v.to(accelerator.device) for key, v in micro_batch.items()}
                # gradients are all-reduced once, after the last micro-batch
                with contextlib.nullcontext() if k == len(pieces) - 1 else accelerator.no_sync(prepared_model):
                    loss = prepared_model(**batch).loss  # mean over the micro-batch's items
                    # its share of the mean over the global batch (DDP averages gradients over processes)
                    accelerator.backward(loss * (len(piece) * world / len(global_batch)))
                loss_sum += loss.detach().double() * len(piece)
            step_loss = accelerator.reduce(loss_sum, "sum").item() / len(global_batch)  # the global batch's mean
            if not math.isfinite(step_loss):  # every process sees the same value and stops here, before any update
                raise NonFiniteLoss(
                    f"stage {name} step {state['step']}: loss is {step_loss}; the last good checkpoint is "
                    f"{stage_dir / 'latest'} (lower the LR or check the data)"
                )
            if t["max_grad_norm"]:
                accelerator.clip_grad_norm_(prepared_model.parameters(), t["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            state["step"] += 1
            bar.update(1)
            bar.set_postfix(loss=f"{step_loss:.3f}", dev_rho="-" if last_rho is None else f"{last_rho:.3f}")
            if state["step"] % t["log_every"] == 0:
                log({"stage": name, "step": state["step"], "loss": step_loss, "lr": scheduler.get_last_lr()[0]})
            if state["step"] % eval_every == 0 or state["step"] == max_steps:
                # every process scores the full dev set on the same weights (a sharded model needs them all); the
                # main process's figures decide, so the best step is the same everywhere
                _, dev = evaluate_records(prepared_model, tokenizer, dev_records, micro)
                dev = main_process_value(accelerator, dev)
                prepared_model.train()
                last_rho = dev["spearman"]
                improved = stopper.update(last_rho)
                state["history"].append({"step": state["step"], "dev": dev})
                log({"stage": name, "step": state["step"], "dev": dev, "improved": improved})
                if improved:
                    state["best_step"] = state["step"]
                    save_best(accelerator, prepared_model, stage_dir / "best")
            if state["step"] % ckpt_every == 0:
                save_checkpoint(accelerator, stage_dir / "latest", progress.state_dict())
        if state["batch_in_epoch"] >= len(batches):
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    bar.close()
    if state["best_step"] is None:  # no evaluation happened (max_steps < eval_every): keep the last weights
        save_best(accelerator, prepared_model, stage_dir / "best")
        state["best_step"] = state["step"]
    if not state.get("done"):
        state["done"] = True  # a resume after this point goes straight to the stage's end
        save_checkpoint(accelerator, stage_dir / "latest", progress.state_dict())
    load_best(accelerator, prepared_model, stage_dir / "best")
    return {
        "steps": state["step"], "best_step": state["best_step"], "stopped_early": stopper.should_stop,
        "stopped_by_time": deadline is not None and time.time() >= deadline and state["step"] < max_steps,
        "best_dev_spearman": None if stopper.best == -math.inf else stopper.best,
        "train_seconds": round(time.time() - started, 1), "history": state["history"],
    }


def flat_config(cfg: dict, prefix: str = "") -> dict:
    """The run config as flat `a.b.c` keys with scalar values (what trackers' hyperparameter tables take)."""
    out = {}
    for key, value in cfg.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value if isinstance(value, bool | int | float | str) else json.dumps(value)
    return out


def choose_clamping(config, dev_records: list[dict], dev_preds: list[dict]) -> dict:
    """The paper's protocol: tune the clamping threshold on dev (maximising rho + tau - MAE), switch clamping on in
    `config` only where it beats no clamping there. Returns the record for metrics.json."""
    import numpy as np

    from eval_suite.clamping import tune_clamp_threshold
    from modeling_orca import rating_to_unit

    if dev_preds[0]["variance"] is None:  # Bernoulli: no variance to gate on
        config.clamp, config.clamp_variance_threshold = False, None
        return {"enabled": False, "reason": f"the {config.score_type} head predicts no variance"}
    human_mean = [sum(r["ratings"]) / len(r["ratings"]) for r in dev_records]
    threshold, table = tune_clamp_threshold(
        rating_to_unit(np.array([p["mean"] for p in dev_preds])), [p["variance"] for p in dev_preds], human_mean,
        margin=config.clamp_margin,
    )
    best = next(row for row in table if row["threshold"] == threshold)
    unclamped = next(row for row in table if row["threshold"] == -math.inf)
    enabled = threshold != -math.inf  # ties go to no clamping, so a finite threshold strictly helped
    config.clamp = enabled
    config.clamp_variance_threshold = threshold if enabled else None
    return {
        "enabled": enabled, "threshold": config.clamp_variance_threshold, "margin": config.clamp_margin,
        "dev_n": len(dev_records), "dev_n_clamped": best["n_clamped"],
        "dev_objective": {"unclamped": unclamped["objective"], "clamped": best["objective"]},
    }


def run(cfg: dict, resume: bool = False) -> dict:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, set_seed

    t = cfg["training"]
    mp = t["mixed_precision"]
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    run_dir = Path(cfg["run_dir"])
    report_to = t["report_to"]
    report_to = [] if report_to in (None, "none") else [report_to] if isinstance(report_to, str) else report_to
    from accelerate.tracking import get_available_trackers

    available = [str(tracker) for tracker in get_available_trackers()]
    missing = [name for name in report_to if name != "all" and name not in available]
    if missing:  # accelerate would leave them out without a word
        raise SystemExit(f"training.report_to: {missing} not installed (pip install it); installed trackers: {available}")
    accelerator = Accelerator(
        mixed_precision=mp,
        cpu=not torch.cuda.is_available(),  # without it each process of a multi-process CPU launch thinks it is alone
        step_scheduler_with_optimizer=False,  # stepped once per optimiser step, whatever the number of processes
        log_with=report_to or None,
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir / "logs")),
    )
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and accelerator.distributed_type != "FSDP":
        # accelerate shards only on accelerators: a CPU launch with --use_fsdp would silently replicate the model
        raise SystemExit(f"FSDP was asked for, but accelerate runs these processes as {accelerator.distributed_type} "
                         "(it supports FSDP on GPUs and other accelerators, not on CPU processes)")
    accelerator.register_save_state_pre_hook(keep_trainable_weights)
    stage_progress = StageProgress()
    accelerator.register_for_checkpointing(stage_progress)
    set_seed(cfg["seed"])
    main = accelerator.is_main_process
    if resume and not (run_dir / "run_config.yaml").exists():
        raise SystemExit(f"--resume: {run_dir} holds no run to resume")
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run_config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    accelerator.wait_for_everyone()
    log_file = (run_dir / "log.jsonl").open("a") if main else None
    accelerator.init_trackers("orca", config=flat_config(cfg))
    step_offset = {"steps": 0}  # trackers get one step axis over all stages

    def log(entry: dict):
        entry = {"time": round(time.time(), 2), **entry}
        if main:
            log_file.write(json.dumps(entry) + "\n")
            log_file.flush()
        scalars = {}
        if "loss" in entry:
            scalars = {f"{entry['stage']}/loss": entry["loss"], f"{entry['stage']}/lr": entry["lr"]}
        if "step" in entry and "dev" in entry and entry["dev"].get("spearman") is not None:
            scalars = {f"{entry['stage']}/dev_spearman": entry["dev"]["spearman"]}
        if scalars:
            accelerator.log(scalars, step=step_offset["steps"] + entry["step"])

    started = time.time()
    log({"event": "run_start", "resume": resume, "versions": versions(), "model_revision": cfg["model"]["revision"],
         "num_processes": accelerator.num_processes, "distributed_type": str(accelerator.distributed_type), "config": cfg})
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
            load_best(accelerator, model, run_dir / "checkpoints" / name / "best")
        else:
            interrupted = resume and (run_dir / "checkpoints" / name / "latest" / "trainer_state.json").exists()
            log({"event": "stage_start", "stage": name, "counts": counts})
            summary = train_stage(name, stage, data, model, tokenizer, cfg, accelerator, run_dir,
                                  {} if interrupted else None, log, stage_progress)
            summary["counts"] = counts
            bs, k = t["per_device_batch_size"], t["max_dev_items"]
            # stage-end scores on at most max_dev_items items (n is in the metrics); the last stage's full test
            # split is scored below, beside the baselines
            _, summary["dev"] = evaluate_records(model, tokenizer, sample_records(data["validation"], k, cfg["seed"]), bs)
            if index < len(stages) - 1:
                _, summary["test"] = evaluate_records(model, tokenizer, sample_records(data["test"], k, cfg["seed"]), bs)
            progress["stages"][name] = summary
            if main:
                progress_path.write_text(json.dumps(progress, indent=1))
            log({"event": "stage_end", "stage": name, "dev": summary["dev"]})
        step_offset["steps"] += summary["steps"]
        last_data = data
    if accelerator.distributed_type == "FSDP":  # the main process goes on alone: it needs the whole model
        full_state = accelerator.get_state_dict(model)  # gathered from the shards (a collective step)
        if main:
            model = add_lora(build_model(cfg)[0], cfg)
            model.load_state_dict(full_state)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # trackers closed; the rest runs on the main process alone
    if not main:
        return {}

    # the final model: LoRA merged into the backbone, a plain HF folder with both code files and the tokenizer
    final = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    final = unwrap_orca(final)
    dev_records, test_records = last_data["validation"], last_data["test"]
    bs = t["per_device_batch_size"]
    results = {"stages": progress["stages"], "test": {}}
    dev_preds = None
    if cfg["test"]["compare_reference_modes"] and "reference" in final.config.template_fields:
        modes = {}
        for mode in ("join", "max"):
            final.config.reference_mode = mode
            modes[mode] = evaluate_records(final, tokenizer, dev_records, bs)
        spearman = {m: modes[m][1]["spearman"] for m in modes}
        final.config.reference_mode = max(modes, key=lambda m: -math.inf if spearman[m] is None else spearman[m])
        dev_preds = modes[final.config.reference_mode][0]
        results["reference_mode_dev_spearman"] = spearman
        results["reference_mode"] = final.config.reference_mode
    final.config.clamp = False  # scored unclamped; the clamping is chosen on dev below
    if dev_preds is None:
        dev_preds, _ = evaluate_records(final, tokenizer, dev_records, bs)
    test_preds, results["test"]["orca"] = evaluate_records(final, tokenizer, test_records, bs, show_progress=True)
    results["clamping"] = choose_clamping(final.config, dev_records, dev_preds)
    if test_preds[0]["variance"] is not None:
        import numpy as np

        from eval_suite.clamping import clamp_scores
        from eval_suite.metrics import prediction_metrics
        from modeling_orca import rating_to_unit, unit_to_rating

        # test with the dev-tuned threshold, whether or not it is switched on in the saved model
        threshold = results["clamping"]["threshold"]
        clamped = clamp_scores(rating_to_unit(np.array([p["mean"] for p in test_preds])), [p["variance"] for p in test_preds],
                               threshold=-math.inf if threshold is None else threshold, margin=final.config.clamp_margin)
        # beside results["test"], whose entries other than "orca" are baselines
        results["clamping"]["test"] = prediction_metrics(test_preds, [r["ratings"] for r in test_records],
                                                         means=list(unit_to_rating(clamped)))
        results["clamping"]["test"]["mae"] = results["clamping"]["test"]["mae_mean"]
        for pred, score in zip(test_preds, clamped):
            pred["score"] = float(score) if final.config.clamp else pred["score"]  # as the saved model scores it
    from eval_suite.metrics import baseline_metrics

    results["test"].update(baseline_metrics(test_records, cfg["test"]["baselines"]))
    for entry in results["test"].values():
        entry["mae"] = entry.get("mae_mean")

    def write_final(d: Path):
        final.save_pretrained(d)
        tokenizer.save_pretrained(d)

    atomic_save_dir(run_dir / "final", write_final)
    with (run_dir / "test_predictions.jsonl").open("w") as f:
        for record, pred in zip(test_records, test_preds):
            keep = {k: record[k] for k in ("benchmark", "question_id", "answerer", "modality", "category") if k in record}
            f.write(json.dumps({"id": record["id"], **keep, **pred, "ratings": record["ratings"]}) + "\n")
    results["ood"] = out_of_domain(final, tokenizer, cfg, test_records, test_preds, run_dir)
    results.update(
        wall_seconds=round(time.time() - started, 1), versions=versions(), config=cfg,
        model_revision=cfg["model"]["revision"], backbone=cfg["model"]["backbone"],
        num_processes=accelerator.num_processes, distributed_type=str(accelerator.distributed_type),
    )
    (run_dir / "metrics.json").write_text(json.dumps(results, indent=1, default=str))
    clamped = {"orca, clamped (dev-tuned)": results["clamping"]["test"]} if "test" in results["clamping"] else {}
    print_table({"orca": results["test"]["orca"], **clamped, **results["test"]})
    log_file.close()
    return results


def print_table(test: dict) -> None:
    cols = ("spearman", "kendall", "mae", "roc_auc")
    print("\n| judge | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, m in test.items():
        cells = ["-" if m.get(c) is None else f"{m[c]:.4f}" for c in cols]
        print(f"| {name} | " + " | ".join(cells) + " |")


def out_of_domain(final, tokenizer, cfg: dict, test_records: list[dict], test_preds: list[dict], run_dir: Path) -> dict | None:
    """`test.ood: true`: the out-of-domain sets beside the in-domain test, with the baselines on the same items
    (eval_suite.report.ood_evaluation); writes ood.md and ood_predictions.jsonl, returns the section of metrics.json."""
    if not cfg["test"].get("ood"):
        return None
    from eval_suite.report import ood_evaluation, ood_markdown

    d = cfg["data"]
    ood = ood_evaluation(final, tokenizer, data_dir=d["data_dir"], fold=d["fold"], seed=d["seed"],
                         batch_size=cfg["training"]["per_device_batch_size"], bootstrap=cfg["test"].get("ood_bootstrap", 1000),
                         in_domain=(test_records, test_preds), keep_predictions=True,
                         max_items=cfg["test"].get("ood_max_items"))
    with (run_dir / "ood_predictions.jsonl").open("w") as f:
        for set_name, preds in ood.pop("predictions").items():
            for pred in preds:
                f.write(json.dumps({"set": set_name, **pred}) + "\n")
    (run_dir / "ood.md").write_text(ood_markdown(ood) + "\n")
    print("\n" + ood_markdown(ood, slices=False))
    return ood


def override_help() -> str:
    """Every override key with its default, for --help."""

    def show(value) -> str:
        if isinstance(value, str) and not value.isprintable():
            return json.dumps(value)  # "\n": a YAML double-quoted string too
        return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("\n...").strip()

    lines = ["override keys (`--KEY VALUE`, VALUE read as YAML; a config file sets the same keys) and their defaults:"]
    for key, value in leaf_keys(DEFAULTS).items():
        if key.startswith("stages."):
            continue
        if key == "model.orca":  # OrcaConfig's fields: the input template, max_length, reference_mode, clamping, ...
            lines += [f"  --model.orca.{field} {show(default)}" for field, default in orca_config_fields().items()]
            continue
        lines.append(f"  --{key} {show(value)}")
    lines.append("  --stages.NAME.KEY: the curriculum, one entry per stage (a config file's stages replace these):")
    for name, stage in DEFAULTS["stages"].items():
        lines.append("    " + "  ".join(f"--stages.{name}.{k} {show(v)}" for k, v in stage.items()))
    for key, (_, default) in STAGE_KEYS.items():
        lines.append(f"    --stages.NAME.{key}: {default}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=override_help())
    parser.add_argument("--config", help="YAML run config (configs/*.yaml)")
    parser.add_argument("--resume", action="store_true", help="continue the run in run_dir exactly where it stopped")
    args, overrides = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("accelerate").setLevel(logging.WARNING)  # not a line per checkpoint file
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
