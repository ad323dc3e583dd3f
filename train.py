"""Train ORCA with the paper's curriculum: s1 (synthetic) -> s2 (benchmark answers, machine-rated) -> s3 (human).

    python train.py --config configs/quickstart.yaml [--training.eval_every 50 --stages.s1.max_steps 100 ...]
    accelerate launch train.py --config configs/paper/orca-llama3.2-3b-multi.yaml   # many GPUs: DDP/FSDP

Each stage trains from the best checkpoint of the previous one, with its own data, max steps and peak LR: linear
warmup, linear decay to a floor of 0.1 x peak, effective batch 16 through gradient accumulation, early stopping on
dev Spearman. The final model (LoRA merged) is a plain HF folder loadable with AutoModel + trust_remote_code.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import yaml

from training.config import flat_config, load_run_config, override_help

# torch, transformers and the model are imported where they are used: `train.py --help` and a config error answer
# at once


def make_accelerator(cfg: dict):
    """accelerate's Accelerator for this run: mixed precision, trackers, the run folder; refuses the set-ups it
    would get wrong without a word (a tracker not installed, FSDP version 1, FSDP on CPU processes)."""
    import torch
    from accelerate import Accelerator
    from accelerate.tracking import get_available_trackers
    from accelerate.utils import ProjectConfiguration

    t, run_dir = cfg["training"], Path(cfg["run_dir"])
    mp = t["mixed_precision"]
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    report_to = t["report_to"]
    report_to = [] if report_to in (None, "none") else [report_to] if isinstance(report_to, str) else report_to
    available = [str(tracker) for tracker in get_available_trackers()]
    missing = [name for name in report_to if name != "all" and name not in available]
    if missing:  # accelerate would leave them out without a word
        raise SystemExit(f"training.report_to: {missing} not installed (pip install it); installed trackers: {available}")
    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if fsdp and os.environ.get("FSDP_VERSION", "1") != "2":
        # version 1 wraps the model in one root FSDP module: the dev evaluation calls predict on the model inside
        # it, past the root forward that gathers the shards
        raise SystemExit("FSDP version 1 (accelerate's default) is not supported: launch with --fsdp_version 2")
    accelerator = Accelerator(
        mixed_precision=mp,
        cpu=not torch.cuda.is_available(),  # without it each process of a multi-process CPU launch thinks it is alone
        step_scheduler_with_optimizer=False,  # stepped once per optimiser step, whatever the number of processes
        log_with=report_to or None,
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir / "logs")),
    )
    if fsdp and accelerator.distributed_type != "FSDP":
        # accelerate shards only on accelerators: a CPU launch with --use_fsdp would silently replicate the model
        raise SystemExit(f"FSDP was asked for, but accelerate runs these processes as {accelerator.distributed_type} "
                         "(it supports FSDP on GPUs and other accelerators, not on CPU processes)")
    return accelerator


def run(cfg: dict, resume: bool = False) -> dict:
    from accelerate.utils import set_seed

    from eval_suite.report.final_eval import (
        final_evaluation,
        out_of_domain,
        print_table,
        probe_suite,
        write_test_predictions,
    )
    from orca_io.files import save_dir_atomic, write_json_atomic, write_text_atomic
    from training.checkpoints import check_resume, keep_trainable_weights, recover_checkpoints
    from training.data import sample_questions
    from training.frozen import train_curriculum_frozen
    from training.model import add_lora, build_model, unwrap_orca
    from training.run_log import RunLog, versions
    from training.stages import train_curriculum

    accelerator = make_accelerator(cfg)
    accelerator.register_save_state_pre_hook(keep_trainable_weights)
    set_seed(cfg["seed"])
    run_dir, main = Path(cfg["run_dir"]), accelerator.is_main_process
    if main:
        recover_checkpoints(run_dir)  # finish or undo a folder swap that a kill interrupted
    accelerator.wait_for_everyone()
    if resume:
        check_resume(run_dir, cfg)  # every process, so that all stop together; the saved run_config.yaml stays
    elif main:
        write_text_atomic(run_dir / "run_config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    accelerator.wait_for_everyone()
    log = RunLog(accelerator, run_dir / "log.jsonl")
    accelerator.init_trackers("orca", config=flat_config(cfg))
    started = time.time()
    log({"event": "run_start", "resume": resume, "versions": versions(), "model_revision": cfg["model"]["revision"],
         "num_processes": accelerator.num_processes, "distributed_type": str(accelerator.distributed_type), "config": cfg})
    model, tokenizer = build_model(cfg)
    if cfg["training"]["gradient_checkpointing"]:
        model.activation_checkpointing_enable()
    if not cfg["training"]["frozen_backbone"]:  # a frozen backbone's stages put LoRA on its top layers only
        model = add_lora(model, cfg)
    # judge: what scores the final evaluation when it is not the final model (a frozen backbone's cached states)
    curriculum = train_curriculum_frozen if cfg["training"]["frozen_backbone"] else train_curriculum
    progress, last_data, judge = curriculum(cfg, model, tokenizer, accelerator, run_dir, resume, log)
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
    final = unwrap_orca(model.merge_and_unload() if hasattr(model, "merge_and_unload") else model)
    # test.max_items: a seeded sample of whole questions, for a backbone too slow to score every item
    dev_records, test_records = (sample_questions(last_data[s], cfg["test"]["max_items"], cfg["seed"]) for s in ("validation", "test"))
    judge = judge or final
    results, test_preds = final_evaluation(judge, tokenizer, cfg, dev_records, test_records)
    results = {"stages": progress["stages"], **results}

    def write_final(folder: Path) -> None:
        final.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    save_dir_atomic(run_dir / "final", write_final)
    write_test_predictions(run_dir / "test_predictions.jsonl", test_records, test_preds)
    results["ood"] = out_of_domain(judge, tokenizer, cfg, test_records, test_preds, run_dir)
    results["probes"] = probe_suite(judge, tokenizer, cfg)
    results.update(
        wall_seconds=round(time.time() - started, 1), versions=versions(), config=cfg,
        model_revision=cfg["model"]["revision"], backbone=cfg["model"]["backbone"],
        num_processes=accelerator.num_processes, distributed_type=str(accelerator.distributed_type),
    )
    write_json_atomic(run_dir / "metrics.json", results)
    print_table(results)
    log.close()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=override_help())
    parser.add_argument("--config", help="YAML run config (configs/*.yaml)")
    parser.add_argument("--resume", action="store_true", help="continue the run in run_dir exactly where it stopped")
    args, overrides = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("accelerate").setLevel(logging.WARNING)  # not a line per checkpoint file
    cfg = load_run_config(args.config, overrides)
    from orca_io.schema import RecordError
    from training.data import DataError
    from training.stages import NonFiniteLoss

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
