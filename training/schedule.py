"""The optimiser and LR schedule of a stage, and early stopping on dev Spearman."""

from __future__ import annotations

import math


def make_optimizer(model, stage: dict, training: dict):
    """AdamW with the stage's peak LR for the backbone (or its adapters) and `training.head_lr` for the head, and
    the paper's schedule: linear warmup from 0 to the peak, then linear decay to `lr_floor_ratio` x peak at
    max_steps, held there after. Returns (optimizer, scheduler); the scheduler steps once per optimiser step.

    transformers' polynomial schedule with power 1 is that schedule (equal to 4e-16 in float64 at every step:
    tests/test_train.py); `get_wsd_schedule(min_lr_ratio=...)` is not: its warmup starts at the floor, not at 0."""
    import torch
    from transformers import get_polynomial_decay_schedule_with_warmup

    head_lr = training["head_lr"] or stage["lr"]
    head_params = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" in n]
    body_params = [p for n, p in model.named_parameters() if p.requires_grad and "score_head" not in n]
    optimizer = torch.optim.AdamW(  # lr: the reference of lr_end below; each group has its own
        [{"params": body_params, "lr": stage["lr"]}, {"params": head_params, "lr": head_lr}], lr=stage["lr"],
        weight_decay=training["weight_decay"],
    )
    max_steps = stage["max_steps"]
    warmup = stage.get("warmup_steps", int(round(training["warmup_ratio"] * max_steps)))
    # lr_end is absolute (a ratio of the optimizer's default LR applied to every group); at least one decay step,
    # so that max_steps == warmup ends at the peak then drops to the floor, and nothing divides by zero
    scheduler = get_polynomial_decay_schedule_with_warmup(
        optimizer, warmup, max(max_steps, warmup + 1), lr_end=training["lr_floor_ratio"] * stage["lr"], power=1.0
    )
    return optimizer, scheduler


def lr_lambda(step: int, *, warmup_steps: int, max_steps: int, floor: float) -> float:
    """Multiplier of the peak LR, written out: 0 -> 1 linearly over warmup, then linearly down to `floor` at
    max_steps (what make_optimizer's transformers schedule is checked against)."""
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
