"""Tiny fixture files in every source format, written by the project itself (invented text).

Used by the tests (and usable by other tests of the package) to exercise every reader and config
without ../shared/data or the Hub: :func:`write_public_fixture` lays out a data folder like
../shared/data; :func:`write_release_fixture` writes an ORCA release JSONL file.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from .configs import RELEASE_FILES

_OBJECTS = ["bell", "drum", "whistle", "violin", "engine", "bird", "dog", "rain", "piano", "siren", "crowd", "flute"]
_PLACES = ["harbour", "forest", "kitchen", "station", "stadium", "church", "market", "library"]


def _mc_items(prefix: str, n: int, rng: random.Random, modalities: list[str]) -> list[dict]:
    items = []
    for i in range(n):
        choices = rng.sample(_OBJECTS, 4)
        items.append({"id": f"{prefix}-{i:03d}", "question": f"Which sound source is heard in clip {i}?",
                      "choices": choices, "answer": choices[i % 4], "modality": modalities[i % len(modalities)],
                      "category": ["Perception", "Reasoning"][i % 2]})
    return items


def write_public_fixture(data_dir, *, n: int = 40, seed: int = 0) -> Path:
    """Write a data folder with the same layout and formats as ../shared/data, ``n`` items each."""
    rng = random.Random(seed)
    d = Path(data_dir)
    for sub in ("mmau_test_mini", "mmar", "lalm_outputs_mmau", "evouna_nq", "sas"):
        (d / sub).mkdir(parents=True, exist_ok=True)

    mmau = [{"id": it["id"], "audio_id": f"./a/{it['id']}.wav", "question": it["question"], "choices": it["choices"],
             "answer": it["answer"], "dataset": "fixture", "task": it["modality"], "split": "test-mini",
             "category": it["category"], "sub-category": "fixture", "difficulty": "easy"}
            for it in _mc_items("mmau", n, rng, ["sound", "music", "speech"])]
    (d / "mmau_test_mini" / "mmau-test-mini.json").write_text(json.dumps(mmau, indent=1))

    with open(d / "mmar" / "MMAR-meta.jsonl", "w") as fh:
        for it in _mc_items("mmar", n, rng, ["sound", "music", "mix-sound-speech"]):
            fh.write(json.dumps({**it, "sub-category": "fixture", "language": None, "source": "fixture",
                                 "thinking": f"A clear {it['answer']} is audible throughout the clip.",
                                 "cue": [], "rubric": []}) + "\n")

    styles = {"qwen2_audio_7b_instruct": lambda c: c, "qwen_audio_chat": lambda c: f"The sound source is a {c}."}
    for stem, fmt in styles.items():
        out = [{**m, "model_output": fmt(m["answer"] if i % 3 else m["choices"][(m["choices"].index(m["answer"]) + 1) % 4])
                if i % 5 else "I cannot tell."} for i, m in enumerate(mmau)]
        (d / "lalm_outputs_mmau" / f"{stem}_results.json").write_text(json.dumps(out, indent=1))

    evouna = []
    for i in range(n):
        place = rng.choice(_PLACES)
        rec = {"question": f"where was fixture event {i} held", "golden_answer": f"the {place}/{place}",
               "improper": i % 13 == 12}
        for j, sysname in enumerate(("fid", "gpt35", "chatgpt", "gpt4", "newbing")):
            right = (i + j) % 3 != 0
            ans = place if right else rng.choice([p for p in _PLACES if p != place])
            rec[f"answer_{sysname}"] = ans if sysname == "fid" else f"The event was held at the {ans}."
            rec[f"judge_{sysname}"] = None if (i == 3 and sysname == "newbing") else right
        evouna.append(rec)
    (d / "evouna_nq" / "NQ.json").write_text(json.dumps(evouna, indent=1))

    nq_rows = []
    for name in ("SQuAD", "GermanQuAD", "NQ-open"):
        with open(d / "sas" / f"{name}_SAS.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["answer1", "answer2", "label"])
            for i in range(n):
                a = rng.choice(_OBJECTS)
                label = ["0.0", "1.0", "2.0", ""][i % 4] if name == "GermanQuAD" else ["0.0", "1.0", "2.0"][i % 3]
                b = a if label == "2.0" else f"a {a}" if label == "1.0" else rng.choice(_PLACES)
                w.writerow([a, b, label])
                if name == "NQ-open" and label:
                    nq_rows.append((a, b, label))
    with open(d / "sas" / "nq_open_filtered.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["", "question", "answer", "def_correct_predictions", "poss_correct_predictions",
                    "def_incorrect_predictions", "answer_and_def_correct_predictions", "length"])
        for i, (a, b, label) in enumerate(nq_rows):
            cols = {"2.0": [[b], [], []], "1.0": [[], [b], []], "0.0": [[], [], [b]]}[label]
            w.writerow([i, f"what makes sound number {i}", a, *map(repr, cols), repr([a]), 1])
    return d


def write_release_fixture(path, *, n: int = 40, seed: int = 0, benchmark: str = "mmau") -> Path:
    """An ORCA release JSONL file: ``id, question, reference, candidate, rationale, ratings``,
    sometimes ``transcription``, plus extra fields (``model``, ``flags``) as a release may carry."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    models = ["model-a", "model-b", "model-c", "model-d"]
    with open(path, "w") as fh:
        for i in range(n):
            ref = rng.choice(_OBJECTS)
            right = i % 3 != 0
            obj = {"id": f"{benchmark}-{i:03d}", "question": f"What is the loudest sound in clip {i}?",
                   "reference": ref, "candidate": ref if right else rng.choice(_PLACES),
                   "rationale": f"The {ref} dominates the clip.",
                   "ratings": [rng.choice([4, 5]) if right else rng.choice([1, 2]) for _ in range(rng.randint(2, 5))],
                   "model": models[i % 4], "benchmark_name": benchmark}
            if i % 4 == 0:
                obj["transcription"] = f"clip {i} transcript"
            if i % 10 == 9:
                obj["flags"] = ["U"]
            fh.write(json.dumps(obj) + "\n")
    return path


def write_release_dir(release_dir, *, n: int = 40) -> Path:
    d = Path(release_dir)
    for name, fname in RELEASE_FILES.items():
        write_release_fixture(d / fname, n=n, benchmark=name.removeprefix("s3_"))
    return d
