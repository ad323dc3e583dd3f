"""`tune_cpu_malloc`: freed activation-sized blocks are reused instead of faulted in again, it is switched off by
ORCA_TUNE_MALLOC=0, and `predict` applies it on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import modeling_orca

REPO = Path(__file__).resolve().parents[1]

# a layer's worth of activations (8 MiB hidden states, 24 MiB MLP tensors; about 130 MiB written), allocated,
# written and freed 30 times; prints the page faults that takes
PROBE = """
import json, resource, sys, torch
sys.path.insert(0, {repo!r})
import modeling_orca
tuned = modeling_orca.tune_cpu_malloc()
def layer():
    x = torch.empty(2 << 20).fill_(1.0)
    g, u = torch.empty(6 << 20).fill_(1.0), torch.empty(6 << 20).fill_(2.0)
    h = g * u
    del g, u
    y = torch.empty(6 << 20).fill_(3.0) * h
    return x + y[: 2 << 20]
layer()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    layer()
print(json.dumps(dict(tuned=tuned, faults=resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)))
"""
LAYER_PAGES = (130 << 20) // 4096


def probe(tune: str) -> dict:
    # glibc's static defaults, not its adaptive thresholds (whose effect varies with the address layout from run
    # to run): every freed block goes back to the kernel, as it often does under the adaptive ones
    env = dict(os.environ, ORCA_TUNE_MALLOC=tune, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")
    out = subprocess.run([sys.executable, "-c", PROBE.format(repo=str(REPO))], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_malloc_reuses_freed_blocks_instead_of_faulting_them_in():
    plain, tuned = probe("0"), probe("1")
    assert plain["tuned"] is False and tuned["tuned"] is True
    assert plain["faults"] > 30 * LAYER_PAGES // 2  # measured here: 1,044,690 (each layer faulted in afresh)
    assert tuned["faults"] < 30 * LAYER_PAGES // 20  # measured here: 2,048 to 14,337


def test_predict_tunes_malloc_on_cpu_unless_switched_off(monkeypatch, smollm2_tokenizer):
    from test_prefix_sharing import records, tiny

    model = tiny("llama", len(smollm2_tokenizer))
    calls = []
    monkeypatch.setattr(modeling_orca, "tune_cpu_malloc", lambda: calls.append(1) or True)
    model.predict(records(), smollm2_tokenizer)
    assert calls == [1]
    monkeypatch.undo()
    monkeypatch.setattr(modeling_orca, "_malloc_tuned", False)
    monkeypatch.setenv("ORCA_TUNE_MALLOC", "0")
    assert modeling_orca.tune_cpu_malloc() is False
