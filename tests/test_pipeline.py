"""`pipeline("orca-scoring", model=folder, trust_remote_code=True)` on a saved model, in a fresh offline process,
returns what `predict` returns; the task comes from the saved config, not from a registry changed at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from configuration_orca import OrcaConfig
from modeling_orca import PIPELINE_TASK, OrcaForCorrectnessDistribution
from training.model import tiny_backbone_config

RECORDS = [
    dict(id="a", question="Which instrument plays?", reference=["violin", "fiddle"], rationale="A solo violin.", candidate="a violin", ratings=[5, 4]),
    dict(id="b", question="Which instrument plays?", reference=["violin", "fiddle"], rationale="A solo violin.", candidate="a piano"),
    dict(id="c", question="How many speakers?", reference="two", candidate="three people, I think", ratings=[1]),
]  # fmt: skip


def test_importing_the_model_file_registers_no_pipeline_task():
    from transformers.pipelines import PIPELINE_REGISTRY

    assert PIPELINE_TASK not in PIPELINE_REGISTRY.get_supported_tasks()


@pytest.mark.parametrize("score_type", ["beta", "multinomial"])
def test_pipeline_in_a_fresh_process_returns_predicts_numbers(score_type, tmp_path, smollm2_tokenizer):
    torch.manual_seed(0)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=tiny_backbone_config("llama", len(smollm2_tokenizer)), score_type=score_type))
    torch.nn.init.normal_(model.score_head.weight, std=0.5)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    smollm2_tokenizer.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    from transformers.pipelines import PIPELINE_REGISTRY

    assert PIPELINE_TASK not in PIPELINE_REGISTRY.get_supported_tasks()  # saving registered nothing process-wide
    assert saved["custom_pipelines"][PIPELINE_TASK]["impl"] == "modeling_orca.OrcaScoringPipeline"
    # the entry transformers' Pipeline.save_pretrained writes for a registered pipeline (not one written by hand)
    assert saved["custom_pipelines"] == {PIPELINE_TASK: {"impl": "modeling_orca.OrcaScoringPipeline", "pt": ["AutoModel"], "type": "text"}}
    want = model.eval().predict(RECORDS, smollm2_tokenizer)

    script = textwrap.dedent(f"""
        import json
        from transformers import pipeline
        records = json.loads({json.dumps(RECORDS)!r})
        scorer = pipeline({PIPELINE_TASK!r}, model={str(folder)!r}, trust_remote_code=True)
        inferred = pipeline(model={str(folder)!r}, trust_remote_code=True)  # the task read from the config
        print(json.dumps(dict(module=type(scorer).__module__, many=scorer(records), one=scorer(records[2]),
                              batched=scorer(records, batch_size=2), inferred=inferred(records))))
    """)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["module"].startswith("transformers_modules.")  # the class came from the saved folder
    for key in ("many", "batched", "inferred"):
        assert len(got[key]) == len(RECORDS)
        for a, b in zip(got[key], want):
            assert a.keys() == b.keys()
            # predict fills prefix-tree rows with the questions of its call: other calls, other rows, float rounding
            for field in ("mean", "variance", "score", "nll"):
                assert a.get(field) == pytest.approx(b.get(field), abs=1e-5), (key, field)
            assert a["probs"] == pytest.approx(b["probs"], abs=1e-5)
    assert got["one"]["mean"] == pytest.approx(want[2]["mean"], abs=1e-6)


def test_the_pipelines_batch_size_counts_records_and_max_batch_tokens_goes_to_predict(smollm2_tokenizer, monkeypatch):
    """Issue 50: `predict`'s deprecated `batch_size` was a token budget; the pipeline's `batch_size` keeps
    transformers' meaning, a count of records (at most that many per `predict` call), and `max_batch_tokens` goes
    to `predict` as it is, with no deprecation warning on the way."""
    import warnings

    from modeling_orca import OrcaScoringPipeline

    torch.manual_seed(0)
    model = OrcaForCorrectnessDistribution(OrcaConfig(backbone_config=tiny_backbone_config("llama", len(smollm2_tokenizer)))).eval()
    want = model.predict(RECORDS, smollm2_tokenizer)
    calls = []
    predict = model.predict
    monkeypatch.setattr(model, "predict", lambda records, tokenizer, **kw: calls.append((len(records), kw)) or predict(records, tokenizer, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        got = {"one call": OrcaScoringPipeline(model=model, tokenizer=smollm2_tokenizer)(RECORDS),
               "per call": OrcaScoringPipeline(model=model, tokenizer=smollm2_tokenizer)(RECORDS, batch_size=2, max_batch_tokens=512),
               "pipeline's": OrcaScoringPipeline(model=model, tokenizer=smollm2_tokenizer, batch_size=1)(RECORDS)}
    assert calls == [(3, {}), (2, {"max_batch_tokens": 512}), (1, {"max_batch_tokens": 512}), (1, {}), (1, {}), (1, {})]
    for preds in got.values():
        assert [p["mean"] for p in preds] == pytest.approx([p["mean"] for p in want], abs=1e-6)
