"""One stage of the curriculum: its inputs, the training loop (one optimiser step per global batch), dev
evaluations with early stopping, checkpoints; the model ends holding the stage's best weights."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
from pathlib import Path

from eval_suite.report.final_eval import evaluate_records, run_batch_tokens
from training.batching import epoch_batches, micro_batch_inputs, process_share
from training.checkpoints import (
    StageProgress,
    load_best,
    load_training_checkpoint,
    restore_stage_end_rng,
    save_best,
    save_training_checkpoint,
)
from training.data import sample_records, tokenize_records
from training.model import unwrap_orca
from training.schedule import make_optimizer


class NonFiniteLoss(RuntimeError):
    pass


def main_process_value(accelerator, value):
    """The main process's `value` on every process: decisions (a new best, out of time) are taken once."""
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0] if accelerator.num_processes > 1 else value


def batching_mode(t: dict, model, records: list[dict]) -> str:
    """`training.batching` resolved: `auto` batches whole questions where their answers share one prefix-tree row
    (causal decoders pooled at the last token, `prefix_sharing` on, questions with several answers): as good at
    equal wall time and faster (docs/training-speed.md); elsewhere nothing would be shared, and shuffled batches
    rank better at equal steps."""
    if t["batching"] != "auto":
        return t["batching"]
    shares = t["prefix_sharing"] and unwrap_orca(model).prefix_sharing_supported
    keys = [r.get("question_id") for r in records if r.get("question_id")]
    return "question" if shares and len(set(keys)) < len(keys) else "shuffled"


def stage_inputs(name: str, stage: dict, data: dict, model, tokenizer, cfg: dict, world: int) -> dict:
    """The stage's rated training items tokenized, their lengths and groups, its dev sample, the pad id."""
    t = cfg["training"]
    if t["effective_batch_size"] % (t["per_device_batch_size"] * world):
        raise SystemExit(
            f"effective_batch_size {t['effective_batch_size']} is not a multiple of "
            f"per_device_batch_size x processes ({t['per_device_batch_size']} x {world})"
        )
    records = [r for r in data["train"] if r.get("ratings")]
    if len(records) < t["effective_batch_size"]:
        raise SystemExit(f"stage {name}: {len(records)} rated training items, fewer than one batch")
    config = unwrap_orca(model).config
    if stage.get("max_length"):  # a shorter token budget for this stage's training inputs (fields cut in order)
        config = copy.deepcopy(config)
        config.max_length = stage["max_length"]
    token_ids = tokenize_records(records, tokenizer, config)
    batching = batching_mode(t, model, records)
    groups = [r.get("question_id") or r["id"] for r in records] if batching == "question" else None
    return {
        "batching": batching,
        "records": records, "token_ids": token_ids, "lengths": [len(ids) for ids in token_ids], "groups": groups,
        # a question's answers in one micro-batch share one prefix-tree row: exact (see packing_orca.pack_prefix_tree)
        "share": bool(groups and t["prefix_sharing"] and unwrap_orca(model).prefix_sharing_supported),
        "pad_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
        "dev": sample_records(data["validation"], t["max_dev_items"], cfg["seed"]),
    }


def train_step(accelerator, model, global_batch: list[int], inputs: dict, micro: int) -> float:
    """Forward and backward passes over this process's share of one global batch, in micro-batches; returns the
    global batch's mean loss (the same on every process). No optimiser step."""
    import torch

    world = accelerator.num_processes
    mine = process_share(global_batch, accelerator.process_index, world)
    pieces = [mine[i : i + micro] for i in range(0, len(mine), micro)]
    loss_sum = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    for k, piece in enumerate(pieces):
        micro_batch = micro_batch_inputs(piece, inputs["token_ids"], inputs["records"], inputs["pad_id"],
                                         share_prefix=inputs["share"], groups=inputs["groups"])
        batch = {key: v.to(accelerator.device) for key, v in micro_batch.items()}
        # gradients are all-reduced once, after the last micro-batch
        with contextlib.nullcontext() if k == len(pieces) - 1 else accelerator.no_sync(model):
            loss = model(**batch).loss  # mean over the micro-batch's items
            # its share of the mean over the global batch (DDP averages gradients over processes)
            accelerator.backward(loss * (len(piece) * world / len(global_batch)))
        loss_sum += loss.detach().double() * len(piece)
    return accelerator.reduce(loss_sum, "sum").item() / len(global_batch)


def evaluate_dev(accelerator, model, tokenizer, inputs: dict, progress: StageProgress, max_batch_tokens: int, best_dir: Path) -> dict:
    """Every process scores the dev sample on the same weights (a sharded model needs them all); the main process's
    figures decide, so the best step (saved to `best_dir`) is the same everywhere."""
    _, dev = evaluate_records(unwrap_orca(model), tokenizer, inputs["dev"], max_batch_tokens=max_batch_tokens)
    dev = main_process_value(accelerator, dev)
    model.train()
    improved = progress.stopper.update(dev["spearman"])
    progress.state["history"].append({"step": progress.state["step"], "dev": dev})
    if improved:
        progress.state["best_step"] = progress.state["step"]
        save_best(accelerator, model, best_dir)
    return {"dev": dev, "improved": improved}


def train_stage(name, stage, data, model, tokenizer, cfg, accelerator, run_dir: Path, resume: bool, log) -> dict:
    """Train one stage (from its latest checkpoint with `resume`); returns its summary. The model ends holding the
    stage's best weights on every process."""
    from tqdm.auto import tqdm

    t, micro, max_steps = cfg["training"], cfg["training"]["per_device_batch_size"], stage["max_steps"]
    inputs = stage_inputs(name, stage, data, model, tokenizer, cfg, accelerator.num_processes)
    optimizer, scheduler = make_optimizer(model, stage, t)
    accelerator.free_memory()  # forget the previous stage's model, optimizer and scheduler (save_state saves all)
    # the scheduler steps once per optimiser step (Accelerator(step_scheduler_with_optimizer=False))
    prepared_model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    eval_tokens = run_batch_tokens(unwrap_orca(model), cfg)  # the dev evaluations' token budget, on the model's device
    progress = StageProgress(name, t["patience"])
    stage_dir = run_dir / "checkpoints" / name
    if resume:
        load_training_checkpoint(accelerator, stage_dir / "latest", prepared_model, progress)
        log({"event": "resumed", "stage": name, "step": progress.state["step"]})
    state, stopper = progress.state, progress.stopper
    bar = tqdm(total=max_steps, initial=state["step"], desc=f"{name}", disable=not accelerator.is_main_process)
    last_rho, started = None, time.time()
    prepared_model.train()
    # optional wall-clock budget per stage (minutes of training, evaluations included), for fixed-time comparisons;
    # the main process's clock decides for all
    deadline = started + 60 * stage["max_minutes"] if stage.get("max_minutes") else None

    def go_on() -> bool:
        out_of_time = deadline is not None and main_process_value(accelerator, time.time() >= deadline)
        return state["step"] < max_steps and not stopper.should_stop and not state.get("done") and not out_of_time

    while go_on():
        batches = epoch_batches(inputs["lengths"], t["effective_batch_size"], cfg["seed"], state["epoch"],
                                groups=inputs["groups"], piece=micro, max_group_size=t["max_answers_per_question"])
        while state["batch_in_epoch"] < len(batches) and go_on():
            step_loss = train_step(accelerator, prepared_model, batches[state["batch_in_epoch"]], inputs, micro)
            state["batch_in_epoch"] += 1
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
            if state["step"] % t["eval_every"] == 0 or state["step"] == max_steps:
                evaluation = evaluate_dev(accelerator, prepared_model, tokenizer, inputs, progress, eval_tokens, stage_dir / "best")
                last_rho = evaluation["dev"]["spearman"]
                log({"stage": name, "step": state["step"], **evaluation})
            if state["step"] % (t["checkpoint_every"] or t["eval_every"]) == 0:
                save_training_checkpoint(accelerator, stage_dir / "latest", progress.state_dict())
        if state["batch_in_epoch"] >= len(batches):
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    bar.close()
    summary = finish_stage(accelerator, prepared_model, progress, stage_dir, started, deadline, max_steps)
    return {**summary, "batching": inputs["batching"], "prefix_sharing": inputs["share"]}


def finish_stage(accelerator, model, progress: StageProgress, stage_dir: Path, started: float, deadline, max_steps: int) -> dict:
    """The stage's end: its best weights saved (the last ones if no evaluation happened) and loaded, a last
    checkpoint that marks it done, its summary."""
    state, stopper = progress.state, progress.stopper
    if state["best_step"] is None:  # no evaluation happened (max_steps < eval_every): keep the last weights
        save_best(accelerator, model, stage_dir / "best")
        state["best_step"] = state["step"]
    if not state.get("done"):
        state["done"] = True  # a resume after this point goes straight to the stage's end
        save_training_checkpoint(accelerator, stage_dir / "latest", progress.state_dict())
    load_best(accelerator, model, stage_dir / "best")
    return {
        "steps": state["step"], "best_step": state["best_step"], "stopped_early": stopper.should_stop,
        "stopped_by_time": deadline is not None and time.time() >= deadline and state["step"] < max_steps,
        "best_dev_spearman": None if stopper.best == -math.inf else stopper.best,
        "train_seconds": round(time.time() - started, 1), "history": state["history"],
    }


def train_curriculum(cfg: dict, model, tokenizer, accelerator, run_dir: Path, resume: bool, log) -> tuple[dict, dict, None]:
    """Every stage not skipped, in order, each from the previous one's best weights; a stage that finished before
    an interruption gets its best weights restored and is not trained again. Stage summaries (with dev and test
    scores on at most max_dev_items items) go to progress.json. Returns (progress, the last stage's data, None: the
    final model is the judge of the final evaluation)."""
    from orca_io.files import write_json_atomic
    from training.data import load_stage_data

    t = cfg["training"]
    progress_path = run_dir / "progress.json"
    progress = json.loads(progress_path.read_text()) if resume and progress_path.exists() else {"stages": {}}
    stages = [(n, s) for n, s in cfg["stages"].items() if n not in cfg["skip_stages"]]
    data = None
    for index, (name, stage) in enumerate(stages):
        summary = progress["stages"].get(name)
        data = load_stage_data(stage, cfg)
        counts = {split: len(records) for split, records in data.items()}
        if summary is not None:  # finished before the interruption: restore its best weights and move on
            load_best(accelerator, model, run_dir / "checkpoints" / name / "best")
            restore_stage_end_rng(accelerator, run_dir / "checkpoints" / name / "latest")
        else:
            interrupted = resume and (run_dir / "checkpoints" / name / "latest" / "trainer_state.json").exists()
            log({"event": "stage_start", "stage": name, "counts": counts})
            summary = train_stage(name, stage, data, model, tokenizer, cfg, accelerator, run_dir, interrupted, log)
            summary["counts"] = counts
            tokens, k = run_batch_tokens(unwrap_orca(model), cfg), t["max_dev_items"]
            # stage-end scores on at most max_dev_items items (n is in the metrics); the last stage's full test
            # split is scored by the final evaluation, beside the baselines
            _, summary["dev"] = evaluate_records(unwrap_orca(model), tokenizer, sample_records(data["validation"], k, cfg["seed"]), max_batch_tokens=tokens)
            if index < len(stages) - 1:
                _, summary["test"] = evaluate_records(unwrap_orca(model), tokenizer, sample_records(data["test"], k, cfg["seed"]), max_batch_tokens=tokens)
            progress["stages"][name] = summary
            if accelerator.is_main_process:
                write_json_atomic(progress_path, progress)
            log({"event": "stage_end", "stage": name, "dev": summary["dev"]})
        log.steps_before += summary["steps"]
    return progress, data, None
