"""The run config: defaults, a YAML file (with `base:`), `--key value` overrides; checks; `--help`; resume checks.

OmegaConf reads the files, parses the overrides (a dotted key per value, values as YAML with `1e-4` a float) and
merges them. Two things stay here because OmegaConf does not do them: the type check (OmegaConf converts rather
than refuses: `1` becomes true, `"5"` becomes 5, and an untyped key takes anything) and naming the nearest key of
a typo (OmegaConf names the key it did not find, not the one meant); and the `--help` listing of every key.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

REPO = Path(__file__).resolve().parents[1]

DEFAULTS: dict[str, Any] = {
    "run_dir": "runs/orca",
    "seed": 0,
    "model": {
        "backbone": None,  # HF folder or Hub id; "minilm" / "smollm2" / "gemma3-270m" / "qwen2.5-coder-1.5b-instruct" (offline wheels); "tiny-llama" etc. (tests)
        "revision": None,
        "score_type": "multinomial",
        "pooling": "last",
        "orca": {},  # any other OrcaConfig field (template, max_length, reference_mode, ...)
        "dtype": None,  # the backbone's dtype ("bfloat16", "float32"); null: float32
        # keep only the backbone's first N decoder layers (its final norm stays): the head reads the state after layer
        # N, and the saved judge is an ordinary model N layers deep (a causal decoder; training/model.py); null: all
        "backbone_layers": None,
        # "verdict": the head starts as the backbone's own answer, its LM-head rows of verdict_tokens: yes and no, or one
        # token per rating (the digits "1" ... "5", for the multinomial head; training/model.py); null: a random head
        "head_init": None,
        "verdict_tokens": ["Yes", "No"],
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
        # (faster with prefix_sharing; 0.024 lower dev Spearman at equal steps, higher at equal wall time:
        # benchmarks/compare_batching.py); "auto": question where the answers share prefixes, shuffled elsewhere
        "batching": "auto",
        # with batching by question: a question's answers share one prefix-tree row where that is exact (causal
        # decoders pooled at the last token); no effect otherwise
        "prefix_sharing": True,
        # with batching by question: a question's answers are cut into random parts of at most this many per epoch
        # (more questions in a step); null keeps every question whole
        "max_answers_per_question": None,
        # the backbone frozen and only the head trained, on pooled states computed once and cached on disk
        # (training/frozen.py): a big backbone on a CPU. LoRA (lora.*) only in stages with top_layers
        "frozen_backbone": False,
        "state_cache": None,  # the states' folder; null: $ORCA_CACHE/states
    },
    # data.seed drives s1/s2 generation and the splits, apart from the training seed
    # release: the annotation release's Hub dataset id (e.g. BUT-FIT/orca-audio-qa-annotations) instead of release_dir,
    # at release_revision (default: its default branch; the commit used is in every record's metadata)
    "data": {"data_dir": None, "release_dir": None, "release": None, "release_revision": None, "scenario": "A",
             "fold": 0, "seed": 0, "s1_size": None},
    "stages": {
        "s1": {"dataset": "s1_synthetic", "max_steps": 10000, "lr": 5e-5},
        "s2": {"dataset": "s2_benchmark", "max_steps": 5000, "lr": 2e-5},
        "s3": {"dataset": "s3_mmau_mmar", "max_steps": 2000, "lr": 2e-5},
    },
    "skip_stages": [],
    # ood: also score the out-of-domain sets (eval_suite.report.ood.ood_evaluation), with ood_bootstrap resamples, at most
    # ood_max_items (a seeded sample) of each set; probes: also the probe suite (eval_suite.report.probes); calibration: fit
    # z -> z / T + s * d of the head's outputs on dev and fold it into the head where it helps (eval_suite.scoring.calibration);
# max_items: the final evaluation's dev and test splits cut to at most this many records (whole questions, seeded)
    "test": {"baselines": ["exact_match", "contains", "token_f1"], "compare_reference_modes": True, "ood": False,
             "ood_bootstrap": 1000, "ood_max_items": None, "probes": False, "calibration": False, "max_items": None},
}

# the type of each key whose default is None (other keys take the type of their default)
KEY_TYPES: dict[str, type | tuple] = {
    "model.backbone": str, "model.revision": str, "model.dtype": str, "model.head_init": str, "model.backbone_layers": int,
    "training.state_cache": str, "lora.target_modules": (str, list),
    "training.head_lr": float, "training.max_dev_items": int, "training.checkpoint_every": int,
    "training.report_to": (str, list), "training.max_answers_per_question": int, "test.ood_max_items": int, "test.max_items": int, "data.data_dir": str, "data.release_dir": str, "data.s1_size": int,
    "data.release": str, "data.release_revision": str,
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
    "max_items": (int, "none: with training.frozen_backbone, a seeded sample of at most this many training items"),
    "top_layers": (int, "0: with training.frozen_backbone, LoRA (lora.*) on the backbone's last N layers too, trained on "
                        "cached states of the layer below them (training/top_layers.py)"),
}
TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
              dict: "a mapping"}


def leaf_keys(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{"a.b.c": value} of a nested dict's leaves (a stage's `files` and `model.orca` count as one leaf each)."""
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


def orca_config_fields() -> dict[str, Any]:
    """OrcaConfig's fields and their defaults (as written in configuration_orca.py), read without importing it:
    importing it imports transformers, which takes seconds (about 10 s on a busy 2-core machine), and `--help`
    must answer in under 3."""
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


def parse_overrides(args: list[str]) -> dict:
    """`--a.b.c value` (or `--a.b.c=value`) pairs -> nested dict; values read as YAML (numbers, booleans, lists)."""
    args = [part for arg in args for part in (arg.split("=", 1) if arg.startswith("--") and "=" in arg else [arg])]
    if len(args) % 2:
        raise SystemExit(f"overrides come in `--key value` pairs, got: {' '.join(args)}")
    dotlist = []
    for key, value in zip(args[::2], args[1::2]):
        if not key.startswith("--"):
            raise SystemExit(f"expected an override like --training.eval_every, got {key!r}")
        dotlist.append(f"{key[2:].replace('-', '_')}={value}")
    try:  # resolve=False: every string as written (a "${" in a value is text, not an interpolation) ...
        return OmegaConf.to_container(OmegaConf.from_dotlist(dotlist), resolve=False)
    except OmegaConfBaseException:  # ... unless it is not even an interpolation's syntax: escaped, then resolved
        pass
    try:
        escaped = [f"{item.split('=', 1)[0]}={literal(item.split('=', 1)[1])}" for item in dotlist]
        return OmegaConf.to_container(OmegaConf.from_dotlist(escaped), resolve=True)
    except (OmegaConfBaseException, yaml.YAMLError) as err:
        raise SystemExit(f"command line: cannot read an override: {err}") from None


def read_yaml_with_base(path: Path) -> dict:
    """A YAML run config; a `base: other.yaml` key (relative to the file) is read first and updated."""
    try:  # resolve=False: every string as written (a "${" in a value is text, not an interpolation)
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) if path.read_text().strip() else {}
    except (OmegaConfBaseException, yaml.YAMLError) as err:
        raise SystemExit(f"{path}: {err}") from None
    base = data.pop("base", None)
    return merge(read_yaml_with_base(path.parent / base), data) if base else data


def literal(tree):
    """`tree` with every "${" escaped: OmegaConf reads it as the start of an interpolation, and a run config's
    strings (templates, labels, paths) are text; resolving the escaped tree gives back every string as written."""
    if isinstance(tree, dict):
        return {key: literal(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [literal(value) for value in tree]
    if isinstance(tree, str):
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", tree)
    return tree


def merge(base: dict, update: dict) -> dict:
    """`update` over `base`: mappings merged key by key, anything else (lists included) replaced."""
    return OmegaConf.to_container(OmegaConf.merge(literal(base), literal(update)), resolve=True)


def load_run_config(path: str | None, overrides: list[str]) -> dict:
    config = copy.deepcopy(DEFAULTS)
    if path:
        if not Path(path).is_file():
            raise SystemExit(f"--config {path}: no such file (the configs are in {REPO / 'configs'})")
        data = read_yaml_with_base(Path(path))
        check_config(data, path)
        if "stages" in data:  # a file's curriculum replaces the default one (stage by stage merging would add stages)
            config["stages"] = {}
        config = merge(config, data)
    update = parse_overrides(overrides)
    check_config(update, "command line")
    config = merge(config, update)
    check_stages(config)
    return config


def check_stages(config: dict) -> None:
    """The curriculum and the choices the type check does not cover, refused before any work."""
    if config["model"]["backbone"] is None:
        raise SystemExit("model.backbone is not set (a folder, a Hub id, 'minilm', 'smollm2', 'gemma3-270m' or 'qwen2.5-coder-1.5b-instruct')")
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
    floor = config["training"]["lr_floor_ratio"]
    if not 0 <= floor < 1:  # transformers' schedule (training/schedule.py) decays from the peak to a lower floor
        raise SystemExit(f"training.lr_floor_ratio is {floor}; it must be at least 0 and below 1")
    if config["training"]["batching"] not in ("auto", "shuffled", "question"):
        raise SystemExit(f"training.batching is {config['training']['batching']!r}; choose auto, shuffled or question")
    check_top_layers(config)
    if config["model"]["head_init"] not in (None, "verdict"):
        raise SystemExit(f"model.head_init is {config['model']['head_init']!r}; choose verdict or null")
    cap = config["training"]["max_answers_per_question"]
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise SystemExit(f"training.max_answers_per_question is {cap!r}; it must be a whole number of at least 1 or null")


def check_top_layers(config: dict) -> None:
    """stages.NAME.top_layers: only with a frozen backbone and LoRA on, one value for every stage that sets it, and
    those stages last (the head-only stages read pooled states of the backbone without adapters)."""
    stages = [(name, s.get("top_layers") or 0) for name, s in config["stages"].items() if name not in config["skip_stages"]]
    tops = [k for _, k in stages if k]
    frozen, lora = config["training"]["frozen_backbone"], config["lora"]["enabled"]
    if any(not isinstance(k, int) or isinstance(k, bool) or k < 0 for _, k in stages):
        raise SystemExit(f"top_layers must be a whole number of at least 0; stages have {dict(stages)}")
    if tops and not frozen:
        raise SystemExit("stages.NAME.top_layers needs training.frozen_backbone true (LoRA on the whole backbone is lora.enabled alone)")
    if frozen and lora and not tops:
        raise SystemExit("training.frozen_backbone trains the head only: set lora.enabled false, or stages.NAME.top_layers "
                         "for LoRA on the top layers")
    if tops and not lora:
        raise SystemExit("stages.NAME.top_layers trains LoRA adapters: set lora.enabled true")
    targets = config["lora"]["target_modules"]
    if tops and isinstance(targets, str) and targets != "auto":  # training/top_layers.py joins names into its own regex
        raise SystemExit(f"stages.NAME.top_layers needs lora.target_modules as a list of module names or auto, got {targets!r}")
    if len(set(tops)) > 1:
        raise SystemExit(f"stages set different top_layers {dict(stages)}: use one value")
    first = next((i for i, (_, k) in enumerate(stages) if k), len(stages))
    if any(not k for _, k in stages[first:]):
        raise SystemExit(f"a head-only stage follows one with top_layers {dict(stages)}: put the top_layers stages last")


# ------------------------------------------------------------------------------------------------ resume

# keys a resume may change at any point: where the run lives, what is logged and how often the state is saved,
# the final evaluation, a stage's wall-clock budget. Everything else shapes the weights.
RESUME_MAY_CHANGE = ("run_dir", "training.log_every", "training.report_to", "training.checkpoint_every",
                     "training.gradient_checkpointing")


def resume_conflicts(saved: dict, config: dict, started: set[str], in_progress: bool) -> list[str]:
    """The keys in which `config` differs from the run's saved config and may not: a resume continues the same run.
    `started`: stages finished or checkpointed. The keys of stages not started yet (and which of them to skip) may
    change, and with no stage half-way the training keys too (they shape only the stages to come)."""
    old, new = leaf_keys(saved), leaf_keys(config)
    conflicts = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key) or key in RESUME_MAY_CHANGE or key.startswith("test."):
            continue
        parts = key.split(".")
        if parts[0] == "stages" and len(parts) > 2 and (parts[1] not in started or parts[2] == "max_minutes"):
            continue
        if key == "skip_stages" and not (set(old.get(key) or []) ^ set(new.get(key) or [])) & started:
            continue
        if parts[0] == "training" and not in_progress:
            continue
        conflicts.append(f"{key} ({json.dumps(old.get(key), default=str)} -> {json.dumps(new.get(key), default=str)})")
    return conflicts


# ------------------------------------------------------------------------------------------------ --help


def override_help() -> str:
    """Every override key with its default, for --help (OmegaConf has no help text of its own)."""

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


def flat_config(cfg: dict) -> dict:
    """The run config as flat `a.b.c` keys with scalar values (what trackers' hyperparameter tables take)."""
    from orca_io.tables import flatten

    return flatten(cfg, leaf=lambda value: value if isinstance(value, bool | int | float | str) else json.dumps(value))
