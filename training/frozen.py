"""The curriculum for a big backbone on a small machine: the backbone frozen, only the head trained, on pooled states
computed once per input and cached on disk (training/state_cache.py); or, in stages with `top_layers: k`, LoRA on
the backbone's last k layers as well, on cached states of the layer below them (training/top_layers.py).

`training.frozen_backbone: true` selects it (train.py). Each stage samples at most `max_items` rated training items (whole questions),
reads or computes their states, then trains the head on them with the stage's schedule (the paper's: warmup, linear
decay to a floor, effective batch 16, early stopping on dev Spearman), the dev sample scored from its cached states
with the model's own `predict_from_states`. The loss is the one `forward` computes: for a frozen backbone in eval
mode the two give the same losses and gradients (tests/test_frozen_training.py, tests/test_top_layers.py). A
head-only stage takes seconds once its states are cached; a finished stage's head (and adapters) are saved, so
`--resume` skips it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from training.data import load_stage_data, sample_questions
from training.model import load_trainable_state
from training.schedule import EarlyStopping, make_optimizer
from training.state_cache import CachedStatesJudge, StateCache
from training.top_layers import add_top_lora, check_supported, num_layers, pooled_from_layer


def state_cache_root(cfg: dict) -> Path:
    """`training.state_cache` or $ORCA_CACHE/states: shared by runs, so a second run on the same backbone and
    inputs (another head, seed or recipe) computes nothing again."""
    from eval_suite.models.backbones import cache_dir

    return Path(cfg["training"]["state_cache"] or cache_dir() / "states")


def head_loss(model, states: torch.Tensor, ratings: list[list[int]]) -> torch.Tensor:
    """The mean NLL of `ratings` under the head on `states` (N, H): what `forward` computes after the backbone."""
    from modeling_orca import pad_ratings, ratings_nll

    head = model.score_head
    logits = head(states.to(head.weight.device, head.weight.dtype))  # (N, num_head_outputs)
    return ratings_nll(logits, pad_ratings(ratings, device=logits.device), model.config).mean()


def dev_spearman(model, records: list[dict], states, owner: list[int], layer: int | None) -> dict:
    from eval_suite.metrics import prediction_metrics

    if layer is not None:
        with torch.inference_mode():
            states = pooled_from_layer(model, states, layer)
    preds = model.predict_from_states(records, states, owner)
    return prediction_metrics(preds, [r["ratings"] for r in records])


def trained_state(model) -> dict[str, torch.Tensor]:
    """A copy of the weights a stage trains (the head; the adapters in a stage with top_layers)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def train_stage(name: str, stage: dict, data: dict, model, tokenizer, cfg: dict, cache: StateCache, log) -> dict:
    """One stage on cached states (pooled; with `cache.layer`, each token's after that layer: the adapters above
    it train too); the model ends holding the stage's best weights. Returns the stage's summary."""
    t, seed, layer = cfg["training"], cfg["seed"], cache.layer
    started = time.time()
    # whole questions: their answers share the prefix, computed once
    records = sample_questions([r for r in data["train"] if r.get("ratings")], stage.get("max_items"), seed)
    dev = sample_questions(data["validation"], t["max_dev_items"], seed)
    if len(records) < t["effective_batch_size"]:
        raise SystemExit(f"stage {name}: {len(records)} rated training items, fewer than one batch")
    # training inputs are each record's first variant, as in the uncached curriculum (training.data.tokenize_records)
    states = [s[0] for s in cache.states(model, tokenizer, records, desc=f"{name} train states")]  # (H,) or (tokens, H)
    dev_states, dev_owner = cache.encode(model, tokenizer, dev)
    states_seconds = time.time() - started
    ratings = [r["ratings"] for r in records]
    if layer is None:
        states = torch.stack(states)  # (N, H)

    def pooled(idx: list[int]) -> torch.Tensor:  # (len(idx), H)
        return states[idx] if layer is None else pooled_from_layer(model, [states[i] for i in idx], layer)

    optimizer, scheduler = make_optimizer(model, stage, t)
    trained = [p for p in model.parameters() if p.requires_grad]
    stopper, history, best_step = EarlyStopping(t["patience"]), [], 0
    best = trained_state(model)
    # step 0: the model as the stage gets it (the previous stage's best; in the first, its initialisation)
    metrics = dev_spearman(model, dev, dev_states, dev_owner, layer)
    history.append({"step": 0, "dev": metrics})
    stopper.update(metrics["spearman"])
    log({"stage": name, "step": 0, "dev": metrics})
    generator = torch.Generator().manual_seed(seed)
    batch, max_steps, step = t["effective_batch_size"], stage["max_steps"], 0
    bar = tqdm(total=max_steps, desc=name)
    while step < max_steps and not stopper.should_stop:
        order = torch.randperm(len(records), generator=generator)
        for start in range(0, len(records) - batch + 1, batch):  # whole batches only, as the paper's loader
            idx = order[start : start + batch].tolist()
            loss = head_loss(model, pooled(idx), [ratings[i] for i in idx])
            loss.backward()
            if t["max_grad_norm"]:
                torch.nn.utils.clip_grad_norm_(trained, t["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            bar.update(1)
            if step % t["log_every"] == 0:
                log({"stage": name, "step": step, "loss": loss.item(), "lr": scheduler.get_last_lr()[0]})
            if step % t["eval_every"] == 0 or step == max_steps:
                metrics = dev_spearman(model, dev, dev_states, dev_owner, layer)
                history.append({"step": step, "dev": metrics})
                if stopper.update(metrics["spearman"]):
                    best_step, best = step, trained_state(model)
                log({"stage": name, "step": step, "dev": metrics})
                bar.set_postfix(loss=f"{loss.item():.3f}", dev_rho=f"{metrics['spearman']:.3f}")
            if step >= max_steps or stopper.should_stop:
                break
    bar.close()
    load_trainable_state(model, best)
    return {
        "steps": step, "best_step": best_step, "stopped_early": stopper.should_stop,
        "best_dev_spearman": stopper.best, "train_items": len(records), "states_seconds": round(states_seconds, 1),
        "train_seconds": round(time.time() - started - states_seconds, 1), "history": history,
        "dev": dev_spearman(model, dev, dev_states, dev_owner, layer), "top_layers": stage.get("top_layers") or 0,
    }


def train_curriculum_frozen(cfg: dict, model, tokenizer, accelerator, run_dir: Path, resume: bool, log):
    """Every stage not skipped, in order, the head starting from the previous stage's best. Returns (progress,
    the last stage's data, a judge whose `predict` reads cached states for the final evaluation). One process:
    the head trains in seconds (`accelerator` is taken for the signature `train_curriculum` has)."""
    from safetensors.torch import load_file, save_file

    from orca_io.files import write_json_atomic

    if accelerator.num_processes > 1:
        raise SystemExit("training.frozen_backbone runs in one process (the head trains in seconds): launch without accelerate")
    for p in model.backbone.parameters():
        p.requires_grad_(False)
    model.eval()  # no dropout: the cached states are the eval-mode states
    cache = StateCache(state_cache_root(cfg), model)
    log({"event": "state_cache", "folder": str(cache.folder), "cached_records": len(cache.index)})
    # stages with top_layers k (config.py: all the same k, after the head-only ones): adapters on the last k layers,
    # trained on each token's cached state after the first L - k; the caches name the backbone before the adapters
    top = max((stage.get("top_layers") or 0 for n, stage in cfg["stages"].items() if n not in cfg["skip_stages"]), default=0)
    if top:
        check_supported(model, top)
        layer_cache = StateCache(state_cache_root(cfg), model, layer=num_layers(model) - top)
        log({"event": "state_cache", "folder": str(layer_cache.folder), "cached_records": len(layer_cache.index), "layer": layer_cache.layer})
        adapted = add_top_lora(model, cfg, top)
    progress_path = run_dir / "progress.json"
    progress = json.loads(progress_path.read_text()) if resume and progress_path.exists() else {"stages": {}}
    data = None
    for name, stage in cfg["stages"].items():
        data = load_stage_data(stage, cfg)
        folder = run_dir / "checkpoints" / name
        if name in cfg["skip_stages"]:
            continue
        k = stage.get("top_layers") or 0
        for n, p in model.backbone.named_parameters():
            p.requires_grad_(bool(k) and "lora_" in n)
        if name in progress["stages"]:  # finished before an interruption
            model.score_head.load_state_dict(load_file(folder / "head.safetensors"))
            if (folder / "adapters.safetensors").exists():
                unexpected = model.load_state_dict(load_file(folder / "adapters.safetensors"), strict=False).unexpected_keys
                if unexpected:
                    raise SystemExit(f"{folder / 'adapters.safetensors'}: adapters this model does not have: {unexpected[:3]}")
            continue
        log({"event": "stage_start", "stage": name, "counts": {s: len(r) for s, r in data.items()}})
        summary = train_stage(name, stage, data, model, tokenizer, cfg, layer_cache if k else cache, log)
        summary["counts"] = {split: len(records) for split, records in data.items()}
        folder.mkdir(parents=True, exist_ok=True)
        save_file({key: v.contiguous() for key, v in model.score_head.state_dict().items()}, folder / "head.safetensors")
        if top:
            adapters = {n: p.detach().contiguous() for n, p in model.named_parameters() if "lora_" in n}
            save_file(adapters, folder / "adapters.safetensors")
        progress["stages"][name] = summary
        write_json_atomic(progress_path, progress)
        log({"event": "stage_end", "stage": name, "dev": summary["dev"]})
    if top:  # the adapters folded into the top layers' weights: the final model is an ordinary one
        model.backbone = adapted.merge_and_unload()
        return progress, data, CachedStatesJudge(model, layer_cache)
    return progress, data, CachedStatesJudge(model, cache)
