"""What a run keeps on disk to resume and to pick a stage's best weights, each folder swapped in whole.

`checkpoints/STAGE/latest/`: accelerate's save_state (trained weights, optimizer, scheduler, every process's RNG)
and `trainer_state.json`, the stage's progress (step, data position, evaluations, early stopping), which is read
back from that JSON: no resume unpickles anything. `checkpoints/STAGE/best/`: the trained weights of the best dev
evaluation. Folders are swapped by orca_io.files.replace_dir; `recover_checkpoints` finishes or undoes a swap
that a kill interrupted, before anything reads them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from orca_io.files import recover_dir, replace_dir, save_dir_atomic, write_json_atomic
from training.model import load_trainable_state, trainable_names
from training.schedule import EarlyStopping


class StageProgress:
    """Where the current stage is: step, data position, evaluations, best step, early stopping."""

    def __init__(self, stage: str, patience: int):
        self.state: dict = {"stage": stage, "step": 0, "epoch": 0, "batch_in_epoch": 0, "history": [], "best_step": None}
        self.stopper = EarlyStopping(patience)

    def state_dict(self) -> dict:
        return {**self.state, "early_stopping": self.stopper.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        self.stopper.load_state_dict(state.pop("early_stopping"))
        self.state = state


def recover_checkpoints(run_dir: Path) -> None:
    """Finish or undo every folder swap a kill interrupted (main process, before anything is read)."""
    for stage_dir in sorted((run_dir / "checkpoints").glob("*")) if (run_dir / "checkpoints").is_dir() else []:
        for name in ("latest", "best"):
            recover_dir(stage_dir / name)
    recover_dir(run_dir / "final")


def keep_trainable_weights(models, weights, output_dir) -> None:
    """accelerate save_state hook: checkpoints hold the trained weights only (LoRA adapters and the head, or
    everything with full fine-tuning), not a copy of the frozen backbone."""
    for model, state in zip(models, weights):
        keep = set(trainable_names(model)) | {f"module.{n}" for n in trainable_names(model)}
        for key in [k for k in state if k not in keep]:
            del state[key]


def save_training_checkpoint(accelerator, path: Path, trainer_state: dict) -> None:
    """accelerate's save_state and `trainer_state.json` into a folder beside `path` that the main process then
    swaps in: a crash mid-write leaves the previous checkpoint intact. Every process calls it."""
    staged = path.with_name(f".{path.name}.staged-checkpoint")
    if accelerator.is_main_process:
        shutil.rmtree(staged, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staged))
    if accelerator.is_main_process:
        write_json_atomic(staged / "trainer_state.json", trainer_state)  # for people and for --resume
    accelerator.wait_for_everyone()  # every process's RNG file is in the folder before it moves
    if accelerator.is_main_process:
        replace_dir(staged, path)
    accelerator.wait_for_everyone()


def load_training_checkpoint(accelerator, path: Path, model, progress: StageProgress) -> None:
    """Weights, optimizer, scheduler and RNG states (accelerate loads them with weights_only=True) and the stage's
    progress (JSON) from `path`."""
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
    progress.load_state_dict(json.loads((path / "trainer_state.json").read_text()))


def restore_stage_end_rng(accelerator, path: Path) -> None:
    """The RNG states (python, numpy, torch) a finished stage ended with, from its last checkpoint: the next stage
    then starts from the RNG state it has in an uninterrupted run (its dropout masks depend on it). Called before
    any stage is prepared in this process, so accelerate has no model or optimizer to load: only the RNG states."""
    accelerator.load_state(str(path))


def save_best(accelerator, model, path: Path) -> None:
    """The trained weights as they are now into `path`. Every process calls it (gathering a sharded model is
    collective); the main process alone writes, and nobody goes on before the folder is complete."""
    from safetensors.torch import save_file

    state = accelerator.get_state_dict(model)  # full weights (gathered from the shards under FSDP) on the main process
    if accelerator.is_main_process:
        names = trainable_names(accelerator.unwrap_model(model))
        weights = {n: state[n].detach().cpu().contiguous() for n in names}
        save_dir_atomic(path, lambda d: save_file(weights, d / "trainable.safetensors"))
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


def check_resume(run_dir: Path, cfg: dict) -> None:
    """Refuse a --resume whose config differs from the run's saved one in a key that would change the run, naming
    each (training.config.resume_conflicts says which keys may change)."""
    import yaml

    from training.config import resume_conflicts

    saved_path = run_dir / "run_config.yaml"
    if not saved_path.exists():
        raise SystemExit(f"--resume: {run_dir} holds no run to resume")
    saved = yaml.safe_load(saved_path.read_text())
    progress_path = run_dir / "progress.json"
    finished = set(json.loads(progress_path.read_text())["stages"]) if progress_path.exists() else set()
    checkpointed = {p.parent.parent.name for p in run_dir.glob("checkpoints/*/latest/trainer_state.json")}
    conflicts = resume_conflicts(saved, cfg, finished | checkpointed, in_progress=bool(checkpointed - finished))
    if conflicts:
        raise SystemExit(f"--resume: the config differs from {saved_path} in what the run has already used: "
                         + "; ".join(conflicts) + " (keys that may change: the test.* keys, log_every, report_to, "
                         "checkpoint_every, gradient_checkpointing, a stage's max_minutes, and the keys of stages "
                         "not started yet)")
