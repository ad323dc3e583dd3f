"""The curriculum for a big backbone on a small machine: the backbone frozen, only the head trained, on pooled states
computed once per input and cached on disk (training/state_cache.py).

`training.frozen_backbone: true` selects it (train.py). Each stage samples at most `max_items` rated training items (whole questions),
reads or computes their states, then trains the head on them with the stage's schedule (the paper's: warmup, linear
decay to a floor, effective batch 16, early stopping on dev Spearman), the dev sample scored from its cached states
with the model's own `predict_from_states`. The loss is the one `forward` computes: for a frozen backbone in eval
mode the two give the same losses and gradients (tests/test_frozen_training.py). A stage takes seconds once its
states are cached; a finished stage's head is saved, so `--resume` skips it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from training.data import load_stage_data, sample_questions
from training.schedule import EarlyStopping, make_optimizer
from training.state_cache import CachedStatesJudge, StateCache


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


def dev_spearman(model, records: list[dict], states: torch.Tensor, owner: list[int]) -> dict:
    from eval_suite.metrics import prediction_metrics

    preds = model.predict_from_states(records, states, owner)
    return prediction_metrics(preds, [r["ratings"] for r in records])


def train_head(name: str, stage: dict, data: dict, model, tokenizer, cfg: dict, cache: StateCache, log) -> dict:
    """One stage on cached states; the head ends holding the stage's best weights. Returns the stage's summary."""
    t, seed = cfg["training"], cfg["seed"]
    started = time.time()
    # whole questions: their answers share the prefix, computed once
    records = sample_questions([r for r in data["train"] if r.get("ratings")], stage.get("max_items"), seed)
    dev = sample_questions(data["validation"], t["max_dev_items"], seed)
    if len(records) < t["effective_batch_size"]:
        raise SystemExit(f"stage {name}: {len(records)} rated training items, fewer than one batch")
    # training inputs are each record's first variant, as in the uncached curriculum (training.data.tokenize_records)
    states = torch.stack([s[0] for s in cache.states(model, tokenizer, records, desc=f"{name} train states")])  # (N, H)
    dev_states, dev_owner = cache.encode(model, tokenizer, dev)
    states_seconds = time.time() - started
    ratings = [r["ratings"] for r in records]

    optimizer, scheduler = make_optimizer(model, stage, t)
    stopper, history, best_step = EarlyStopping(t["patience"]), [], 0
    best = {k: v.detach().clone() for k, v in model.score_head.state_dict().items()}
    # step 0: the head as the stage gets it (the previous stage's best; in the first, its initialisation)
    metrics = dev_spearman(model, dev, dev_states, dev_owner)
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
            loss = head_loss(model, states[idx], [ratings[i] for i in idx])
            loss.backward()
            if t["max_grad_norm"]:
                torch.nn.utils.clip_grad_norm_(model.score_head.parameters(), t["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            bar.update(1)
            if step % t["log_every"] == 0:
                log({"stage": name, "step": step, "loss": loss.item(), "lr": scheduler.get_last_lr()[0]})
            if step % t["eval_every"] == 0 or step == max_steps:
                metrics = dev_spearman(model, dev, dev_states, dev_owner)
                history.append({"step": step, "dev": metrics})
                if stopper.update(metrics["spearman"]):
                    best_step, best = step, {k: v.detach().clone() for k, v in model.score_head.state_dict().items()}
                log({"stage": name, "step": step, "dev": metrics})
                bar.set_postfix(loss=f"{loss.item():.3f}", dev_rho=f"{metrics['spearman']:.3f}")
            if step >= max_steps or stopper.should_stop:
                break
    bar.close()
    model.score_head.load_state_dict(best)
    return {
        "steps": step, "best_step": best_step, "stopped_early": stopper.should_stop,
        "best_dev_spearman": stopper.best, "train_items": len(records), "states_seconds": round(states_seconds, 1),
        "train_seconds": round(time.time() - started - states_seconds, 1), "history": history,
        "dev": dev_spearman(model, dev, dev_states, dev_owner),
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
    progress_path = run_dir / "progress.json"
    progress = json.loads(progress_path.read_text()) if resume and progress_path.exists() else {"stages": {}}
    data = None
    for name, stage in cfg["stages"].items():
        data = load_stage_data(stage, cfg)
        head_file = run_dir / "checkpoints" / name / "head.safetensors"
        if name in cfg["skip_stages"]:
            continue
        if name in progress["stages"]:  # finished before an interruption
            model.score_head.load_state_dict(load_file(head_file))
            continue
        log({"event": "stage_start", "stage": name, "counts": {s: len(r) for s, r in data.items()}})
        summary = train_head(name, stage, data, model, tokenizer, cfg, cache, log)
        summary["counts"] = {split: len(records) for split, records in data.items()}
        head_file.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.score_head.state_dict().items()}, head_file)
        progress["stages"][name] = summary
        write_json_atomic(progress_path, progress)
        log({"event": "stage_end", "stage": name, "dev": summary["dev"]})
    return progress, data, CachedStatesJudge(model, cache)
