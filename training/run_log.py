"""The run's log: `log.jsonl` (main process, one JSON line per event, flushed) and the trackers, with one step
axis over all stages; and the versions a run records."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path


class RunLog:
    def __init__(self, accelerator, path: Path):
        self.accelerator, self.steps_before = accelerator, 0  # steps of the stages before the current one
        self.file = None
        if accelerator.is_main_process:
            drop_torn_last_line(path)
            self.file = path.open("a")

    def __call__(self, entry: dict) -> None:
        entry = {"time": round(time.time(), 2), **entry}
        if self.file is not None:
            self.file.write(json.dumps(entry) + "\n")
            self.file.flush()
        scalars = {}
        if "loss" in entry:
            scalars = {f"{entry['stage']}/loss": entry["loss"], f"{entry['stage']}/lr": entry["lr"]}
        if "step" in entry and "dev" in entry and entry["dev"].get("spearman") is not None:
            scalars = {f"{entry['stage']}/dev_spearman": entry["dev"]["spearman"]}
        if scalars:
            self.accelerator.log(scalars, step=self.steps_before + entry["step"])

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def drop_torn_last_line(path: Path) -> None:
    """A kill mid-write leaves a last line without its newline: cut it, so that a resumed run's lines follow whole ones."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def versions() -> dict:
    import accelerate
    import datasets
    import peft
    import torch
    import transformers

    from orca_io.version import package_version

    return {
        "orca": package_version(), "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "peft": peft.__version__, "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
    }
