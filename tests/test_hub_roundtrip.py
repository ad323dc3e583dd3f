"""save_pretrained -> AutoModel.from_pretrained(trust_remote_code=True) in a fresh offline process, for every
architecture the paper uses (tiny random configs) and every head; real backbones through `from_backbone`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from modeling_orca import OrcaForCorrectnessDistribution
from tests.test_modeling import RECORD, tiny_model

LOADER = """
import json, sys
from transformers import AutoConfig, AutoModel, AutoTokenizer
out = {}
records = json.loads(sys.argv[2])
for folder in sys.argv[1].split(","):
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    assert type(config).__name__ == "OrcaConfig", type(config)
    assert "transformers_modules" in type(model).__module__, type(model).__module__
    out[folder] = model.predict(records, tokenizer, max_batch_tokens=512)
# every file of the model came from the saved folders (transformers_modules), none from the repository
repo_modules = {"modeling_orca", "configuration_orca", "heads_orca", "processing_orca", "packing_orca"} & set(sys.modules)
assert not repo_modules, repo_modules
print(json.dumps(out))
"""

RECORDS = [
    RECORD,
    dict(RECORD, id="x2", candidate="A piano, I think.", reference="violin"),
    dict(RECORD, id="x3", candidate="", rationale=""),
]


def test_round_trip_through_automodel_in_fresh_process(tmp_path, smollm2_tokenizer, bert_tokenizer):
    expected, folders = {}, []
    for kind in ("llama", "olmo2", "gemma3", "bert"):
        tokenizer = bert_tokenizer if kind == "bert" else smollm2_tokenizer
        for score_type in ("beta", "multinomial", "bernoulli"):
            model = tiny_model(kind, score_type, len(tokenizer), pooling="cls" if kind == "bert" else "last")
            folder = tmp_path / f"{kind}-{score_type}"
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            assert sorted(p.name for p in folder.glob("*.py")) == ["configuration_orca.py", "heads_orca.py", "modeling_orca.py", "packing_orca.py", "processing_orca.py"]
            config = json.loads((folder / "config.json").read_text())
            assert config["auto_map"] == {
                "AutoConfig": "configuration_orca.OrcaConfig",
                "AutoModel": "modeling_orca.OrcaForCorrectnessDistribution",
            }
            assert not list(folder.glob("*.bin")) and (folder / "model.safetensors").exists()
            expected[str(folder)] = model.predict(RECORDS, tokenizer, max_batch_tokens=512)
            folders.append(str(folder))
    # a clean process whose cwd is not the repository: the code must come from the saved folder
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH="", HF_MODULES_CACHE=str(tmp_path / "modules"))
    proc = subprocess.run(
        [sys.executable, "-c", LOADER, ",".join(folders), json.dumps(RECORDS)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    for folder in folders:
        for want, got in zip(expected[folder], loaded[folder]):
            assert got["mean"] == pytest.approx(want["mean"], abs=1e-5), folder
            if want["variance"] is not None:
                assert got["variance"] == pytest.approx(want["variance"], abs=1e-5), folder
                assert got["probs"] == pytest.approx(want["probs"], abs=1e-5), folder


def test_loading_the_saved_model_registers_nothing_global(tmp_path, smollm2_tokenizer):
    """The saved folder loads through `auto_map` with trust_remote_code; importing the model file registers no
    model type with transformers' Auto classes (a Hub file must not change process-wide registries)."""
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    assert "orca" not in CONFIG_MAPPING
    model = tiny_model("llama", "multinomial", len(smollm2_tokenizer))
    model.save_pretrained(tmp_path)
    again = AutoModel.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(again).__name__ == "OrcaForCorrectnessDistribution"
    assert "orca" not in CONFIG_MAPPING
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        torch.testing.assert_close(a, b)


@pytest.mark.real
def test_from_backbone_on_real_backbones(tmp_path, shared_data):
    from eval_suite.models.backbones import minilm_path, smollm2_path

    nq = json.loads((shared_data / "evouna_nq" / "NQ.json").read_text())[:4]
    records = [
        {"id": f"{i}-{system}", "question": item["question"], "reference": item["golden_answer"].split("/"),
         "rationale": "", "candidate": item[f"answer_{system}"]}
        for i, item in enumerate(nq) for system in ("fid", "chatgpt")
    ]
    for path, pooling in ((minilm_path(), "mean"), (smollm2_path(), "last")):
        model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(path, score_type="multinomial", pooling=pooling)
        assert tokenizer.pad_token is not None
        # the pre-trained weights are really there (not re-initialised)
        from transformers import AutoModel

        reference = AutoModel.from_pretrained(path)
        name, weight = next(iter(reference.state_dict().items()))
        torch.testing.assert_close(model.backbone.state_dict()[name], weight)
        preds = model.predict(records, tokenizer, max_batch_tokens=1024)
        assert len(preds) == len(records)
        assert all(1 <= p["mean"] <= 5 and abs(sum(p["probs"]) - 1) < 1e-4 for p in preds)
        model.save_pretrained(tmp_path / path.name)
        tokenizer.save_pretrained(tmp_path / path.name)
        again = AutoModel.from_pretrained(tmp_path / path.name, trust_remote_code=True)
        assert [p["mean"] for p in again.predict(records, tokenizer)] == pytest.approx([p["mean"] for p in preds], abs=1e-5)
