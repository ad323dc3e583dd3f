"""Batching by question (`training.batching: question`): full batches, every item at most once an epoch, a
question's answers kept together, deterministic across a resume; and training with shared prefixes equal to
training without."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from training.batching import epoch_batches


def grouped_items(sizes: list[int], seed: int = 0) -> tuple[list[int], list[str]]:
    """(lengths, question key per item) for questions of the given sizes, items of a question interleaved with
    others' as in a file sorted by answering system."""
    rng = random.Random(seed)
    items = [(f"q{q}", rng.randint(20, 200)) for q, size in enumerate(sizes) for _ in range(size)]
    rng.shuffle(items)
    return [length for _, length in items], [key for key, _ in items]


def pieces_of(batch: list[int], piece: int) -> list[list[int]]:
    return [batch[i : i + piece] for i in range(0, len(batch), piece)]


@pytest.mark.parametrize("piece", [4, 8, 16])
def test_full_batches_each_item_at_most_once(piece):
    sizes = [random.Random(k).randint(1, 7) for k in range(300)]
    lengths, groups = grouped_items(sizes)
    batches = epoch_batches(lengths, 16, seed=3, epoch=0, groups=groups, piece=piece)
    assert all(len(b) == 16 for b in batches)
    seen = Counter(i for b in batches for i in b)
    assert max(seen.values()) == 1
    assert len(seen) == len(lengths) // 16 * 16  # only the last, incomplete batch is left out


def test_groups_stay_together_when_they_fit():
    # questions of 4 and 2 answers pack into pieces of 8 without splitting any
    lengths, groups = grouped_items([4] * 100 + [2] * 60)
    batches = epoch_batches(lengths, 16, seed=0, epoch=0, groups=groups, piece=8)
    split = {g for b in batches for p in pieces_of(b, 8) for g in {groups[i] for i in p}
             if Counter(groups[i] for i in p)[g] != Counter(groups)[g]}  # fmt: skip
    assert split == set()


def test_real_question_sizes_mostly_whole():
    # EVOUNA-NQ-like: mostly 5 answers a question, some fewer (answers without a verdict dropped)
    rng = random.Random(1)
    sizes = [rng.choice([5, 5, 5, 5, 4, 3, 2, 1]) for _ in range(600)]
    lengths, groups = grouped_items(sizes)
    total = Counter(groups)
    batches = epoch_batches(lengths, 16, seed=0, epoch=0, groups=groups, piece=8)
    placed = [Counter(groups[i] for i in p) for b in batches for p in pieces_of(b, 8)]
    whole = sum(n for c in placed for g, n in c.items() if n == total[g])
    # 80 % of the items sit in a piece with their whole question (cutting the shuffled questions every 8 items: 60 %;
    # a 5-answer question leaves a room of 3 that only smaller questions fill, so 100 % is out of reach)
    assert whole / sum(len(b) for b in batches) > 0.8


def test_group_larger_than_piece_fills_whole_pieces():
    lengths, groups = grouped_items([20, 3, 5, 4, 4, 3, 1, 2, 6])
    batches = epoch_batches(lengths, 16, seed=2, epoch=0, groups=groups, piece=8)
    assert sum(len(b) for b in batches) == 48
    holding = [Counter(groups[i] for i in p)["q0"] for b in batches for p in pieces_of(b, 8)]
    assert sorted(n for n in holding if n) == [4, 8, 8]  # two pieces of its own and its rest beside others


def test_deterministic_per_epoch_and_independent_of_processes():
    lengths, groups = grouped_items([random.Random(k).randint(1, 6) for k in range(200)])
    a = epoch_batches(lengths, 16, seed=5, epoch=2, groups=groups, piece=8)
    assert a == epoch_batches(list(lengths), 16, seed=5, epoch=2, groups=list(groups), piece=8)  # a resumed run
    assert a != epoch_batches(lengths, 16, seed=5, epoch=3, groups=groups, piece=8)
    assert a != epoch_batches(lengths, 16, seed=6, epoch=2, groups=groups, piece=8)
    # the batches depend on the micro-batch size only; 1 process x 2 micro-batches and 2 processes x 1 cut the same
    # global batch at multiples of 8, so a piece (and a whole-packed question) is never cut between processes
    for batch in a:
        two_processes = [batch[r * 8 : (r + 1) * 8] for r in range(2)]
        assert two_processes == pieces_of(batch, 8)


def test_shuffled_order_of_questions_changes_with_epoch():
    lengths, groups = grouped_items([4] * 64)
    first = [groups[b[0]] for b in epoch_batches(lengths, 16, seed=0, epoch=0, groups=groups, piece=8)]
    second = [groups[b[0]] for b in epoch_batches(lengths, 16, seed=0, epoch=1, groups=groups, piece=8)]
    assert first != second


def test_max_group_size_puts_more_questions_in_a_batch():
    lengths, groups = grouped_items([5] * 300)
    whole = epoch_batches(lengths, 16, seed=0, epoch=0, groups=groups, piece=8)
    capped = epoch_batches(lengths, 16, seed=0, epoch=0, groups=groups, piece=8, max_group_size=2)
    assert all(len(b) == 16 for b in capped)
    assert max(Counter(i for b in capped for i in b).values()) == 1
    questions = lambda batches: sum(len({groups[i] for i in b}) for b in batches) / len(batches)  # noqa: E731
    assert questions(whole) < 4.5 < 7.5 < questions(capped)  # 16 answers: 3-4 whole questions, about 8 parts of 2
    assert capped == epoch_batches(lengths, 16, seed=0, epoch=0, groups=groups, piece=8, max_group_size=2)
    assert capped != epoch_batches(lengths, 16, seed=0, epoch=1, groups=groups, piece=8, max_group_size=2)


def test_piece_must_divide_batch():
    with pytest.raises(ValueError, match="multiple"):
        epoch_batches([10] * 40, 16, seed=0, epoch=0, groups=["a"] * 40, piece=6)


def test_shuffled_mode_unchanged_without_groups():
    lengths = [random.Random(k).randint(5, 90) for k in range(400)]
    assert epoch_batches(lengths, 16, seed=1, epoch=0) == epoch_batches(lengths, 16, seed=1, epoch=0, groups=None, piece=8)


# ------------------------------------------------------------------------------------------------ prefix sharing


def write_questions(path, questions: int, answers: int, seed: int) -> str:
    """Records of the benchmark shape: several answers to each question, the question's long rationale first."""
    import json

    rng = random.Random(seed)
    animals = ["dog", "cat", "cow", "owl", "frog", "horse", "sheep", "goat"]
    with open(path, "w") as f:
        for q in range(questions):
            ref = rng.choice(animals)
            rationale = " ".join(rng.choice(animals) for _ in range(rng.randint(10, 30)))
            for a in range(answers):
                cand = rng.choice(animals)
                ratings = [rng.choice([4, 5]) for _ in range(3)] if cand == ref else [rng.choice([1, 2]) for _ in range(2)]
                f.write(json.dumps({"id": f"{path.stem}-{q}-{a}", "question_id": f"{path.stem}-{q}",
                                    "question": "Which animal makes this sound?", "reference": ref,
                                    "rationale": rationale, "candidate": f"a {cand}", "ratings": ratings}) + "\n")  # fmt: skip
    return str(path)


def test_training_with_shared_prefixes_equals_training_without(tmp_path, monkeypatch):
    import json

    import torch
    from safetensors.torch import load_file

    import packing_orca
    import train
    import training.config

    files = {"train": write_questions(tmp_path / "train.jsonl", 24, 4, 0),
             "validation": write_questions(tmp_path / "dev.jsonl", 4, 4, 1), "test": write_questions(tmp_path / "test.jsonl", 4, 4, 2)}  # fmt: skip
    packed_rows = []
    pack = packing_orca.pack_prefix_tree

    def counting_pack(token_ids, pad_token_id, **kwargs):
        out = pack(token_ids, pad_token_id, **kwargs)
        packed_rows.append((len(token_ids), out["input_ids"].shape[0]))
        return out

    monkeypatch.setattr(packing_orca, "pack_prefix_tree", counting_pack)
    runs = {}
    for share in (False, True):
        cfg = training.config.load_run_config(None, ["--model.backbone", "tiny-llama", "--run_dir", str(tmp_path / f"share{share}")])
        cfg["lora"].update(r=4, alpha=4, dropout=0.0)  # dropout masks of shared tokens differ (same distribution)
        # micro-batches of 4 accumulated 4 times, questions of 4 answers: a micro-batch is one question's row
        cfg["training"].update(batching="question", prefix_sharing=share, per_device_batch_size=4, eval_every=3, log_every=1,
                               head_lr=2e-2)  # fmt: skip
        cfg["stages"] = {"s3": {"files": files, "max_steps": 6, "lr": 1e-3}}
        cfg["test"]["compare_reference_modes"] = False
        train.run(cfg)
        log = [json.loads(line) for line in (tmp_path / f"share{share}" / "log.jsonl").read_text().splitlines()]
        losses = [e["loss"] for e in log if "loss" in e]
        weights = load_file(tmp_path / f"share{share}" / "final" / "model.safetensors")
        runs[share] = losses, weights
    assert packed_rows and all(rows < inputs for inputs, rows in packed_rows)  # sharing really happened, rows of whole questions
    assert len(runs[True][0]) == 6
    torch.testing.assert_close(runs[True][0], runs[False][0], rtol=1e-5, atol=1e-6)
    assert runs[True][1].keys() == runs[False][1].keys()
    for name, value in runs[False][1].items():
        torch.testing.assert_close(runs[True][1][name], value, rtol=1e-4, atol=1e-5, msg=name)
    assert len(set(runs[True][0])) == 6  # the model learned between steps: not a comparison of two untouched models


@pytest.mark.parametrize("backbone, pooling, sharing, question_ids, expected", [
    ("tiny-llama", "last", True, ["q1", "q1", "q2"], "question"),   # a decoder and questions of several answers
    ("tiny-gemma3", "last", True, ["q1", "q2", "q2"], "question"),
    ("tiny-llama", "last", True, ["q1", "q2", "q3"], "shuffled"),   # one answer a question: nothing to share
    ("tiny-llama", "last", True, [None, None, None], "shuffled"),
    ("tiny-llama", "last", False, ["q1", "q1", "q2"], "shuffled"),  # sharing switched off
    ("tiny-llama", "mean", True, ["q1", "q1", "q2"], "shuffled"),   # mean pooling: a shared row is not exact
    ("tiny-bert", "cls", True, ["q1", "q1", "q2"], "shuffled"),     # an encoder sees what follows
])  # fmt: skip
def test_auto_batching_takes_questions_where_their_answers_share_prefixes(backbone, pooling, sharing, question_ids, expected):
    import training.config
    from training.model import build_model
    from training.stages import batching_mode

    cfg = training.config.load_run_config(None, ["--model.backbone", backbone, "--model.pooling", pooling])
    assert cfg["training"]["batching"] == "auto"  # the default
    cfg["training"]["prefix_sharing"] = sharing
    model, _ = build_model(cfg)
    records = [{"id": str(i), "question_id": q} for i, q in enumerate(question_ids)]
    assert batching_mode(cfg["training"], model, records) == expected
    for mode in ("shuffled", "question"):  # asked for by name: taken as asked
        assert batching_mode(dict(cfg["training"], batching=mode), model, records) == mode
