"""LLM judge: rating parser, prompts, generation plumbing, failure counting, averaging and fusion."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eval_suite.baselines.llm_judge import (
    CONDITIONS,
    JudgeResult,
    average_of_judges,
    build_prompt,
    fit_fusion,
    judge_records,
    parse_rating,
)

RECORDS = [
    {
        "question": "What animal is heard?",
        "reference": ["dog", "a barking dog"],
        "candidate": "A dog barking.",
        "rationale": "A dog barks three times near a road.",
        "transcript": "",
    },
    {
        "question": "What instrument plays the melody?",
        "reference": ["violin"],
        "candidate": "a piano",
        "rationale": "A solo violin plays a slow melody.",
        "transcript": "",
    },
    {
        "question": "What does the speaker ask for?",
        "reference": ["a glass of water"],
        "candidate": "Some water.",
        "rationale": "A man in a cafe asks the waiter for something to drink.",
        "transcript": "Could I get a glass of water, please?",
    },
    {
        "question": "How many times does the bell ring?",
        "reference": ["three", "3"],
        "candidate": "It rings twice.",
        "rationale": "A church bell rings three times.",
        "transcript": "",
    },
    {
        "question": "What is the weather like?",
        "reference": ["rainy", "raining"],
        "candidate": "It is raining heavily with thunder.",
        "rationale": "Heavy rain and distant thunder.",
        "transcript": "",
    },
    {
        "question": "Which language is spoken?",
        "reference": ["French"],
        "candidate": "Spanish",
        "rationale": "A woman reads a news bulletin in French.",
        "transcript": "Bonjour, voici les informations.",
    },
    {
        "question": "What emotion does the speaker convey?",
        "reference": ["anger", "angry"],
        "candidate": "The speaker sounds frustrated and angry.",
        "rationale": "A man shouts angrily at someone on the phone.",
        "transcript": "I told you three times already!",
    },
    {
        "question": "What vehicle passes by?",
        "reference": ["motorcycle"],
        "candidate": "a car",
        "rationale": "A motorcycle accelerates past the microphone.",
        "transcript": "",
    },
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Rating: 4", 4),
        ("4", 4),
        ("5.", 5),
        ("4/5", 4),
        ("**4**", 4),
        ("**Rating:** 3", 3),
        ("I'd give it a 4 out of 5", 4),
        ("I would rate this answer 2 because it misses the point.", 2),
        ("four", 4),
        ("Four out of five.", 4),
        ("Rating: four", 4),
        ("Rating:\n\n2", 2),
        ("Rating: [4]", 4),
        ("Rating: 4.0", 4),
        ("Score: 3/5", 3),
        ("Rating (1-5): 2", 2),
        ("Rating (out of 5): 4", 4),
        ("On a scale of 1 to 5, I would rate this a 3.", 3),
        ("where 1 means completely wrong and 5 means completely correct, I rate it 4", 4),
        ("Rating: 5 = fully correct", 5),
        ("Rating: 4 - one fact is missing", 4),
        ("Rating: 4. The answer names 2 of the 3 instruments.", 4),
        ("The answer 1945 is correct. Rating: 5", 5),
        ("The final score was 3-1 in the match. Rating: 4", 4),
        ("The candidate gave 3 reasons, so I give it a 2.", 2),
        ("2 out of 5 stars", 2),
        ("4 stars", 4),
        ("4\nThe answer names the right animal but 2 details are off.", 4),
        ("2 - the candidate names the wrong instrument", 2),
        ("The answer is correct, 4/5.", 4),
        ("Rating: 4\nRating: 4", 4),
        # failures: no rating, ranges, disagreement, other scales, half points, out of range
        ("", None),
        (None, None),
        ("The answer is correct.", None),
        ("The answer is 3.", None),  # echoes the answer, not a rating
        ("Three | 3\nThe answer is correct.", None),
        ("I am 100% sure it is 5", None),
        ("rating: N", None),
        ("3-4", None),
        ("Rating: 3-4", None),
        ("Rating: 3 or 4", None),
        ("Rating: 3\nFinal rating: 4", None),
        ("1. accurate 2. complete", None),
        ("7\nThe answer is fine.", None),
        ("10/10", None),
        ("Score: 8/10", None),
        ("3.5", None),
        ("Rating: 0", None),
        ("0/5", None),
        ("6", None),
        ("one of the answers is right", None),
    ],
)
def test_parse_rating(text, expected):
    assert parse_rating(text) == expected


def test_prompts_follow_the_four_conditions():
    record = RECORDS[2]
    prompts = {c: build_prompt(record, c) for c in CONDITIONS}
    for cond, prompt in prompts.items():
        assert record["candidate"] in prompt and "1 to 5" in prompt, cond
    assert record["question"] not in prompts["ref"]
    assert all(record["question"] in prompts[c] for c in CONDITIONS[1:])
    assert "glass of water" in prompts["ref"] and "Reference" in prompts["ref_question"]
    assert "Reference" not in prompts["context_only"] and "a glass of water" not in prompts["context_only"]
    assert (
        record["rationale"] in prompts["ref_question_context"]
        and record["rationale"] in prompts["context_only"]
    )
    assert record["transcript"] in prompts["ref_question_context"]
    assert record["rationale"] not in prompts["ref_question"]
    assert "dog | a barking dog" in build_prompt(RECORDS[0], "ref")
    with pytest.raises(ValueError, match="unknown condition"):
        build_prompt(record, "oracle")
    with pytest.raises(TypeError, match="list of str"):
        build_prompt({**record, "reference": "water"}, "ref")


class ScriptedLM:
    """Stands in for a causal LM: appends a scripted reply to each row and records what it was given."""

    device = torch.device("cpu")

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.calls = tokenizer, list(replies), []

    def generate(self, input_ids, attention_mask, do_sample, max_new_tokens, pad_token_id):
        self.calls.append({"mask": attention_mask.clone(), "do_sample": do_sample})
        rows = []
        for _ in range(input_ids.shape[0]):
            ids = self.tokenizer(self.replies.pop(0), add_special_tokens=False)["input_ids"][:max_new_tokens]
            rows.append(ids + [pad_token_id] * (max_new_tokens - len(ids)))
        return torch.cat([input_ids, torch.tensor(rows)], dim=1)


def test_judge_counts_failures_and_pads_left(smollm2_tokenizer):
    replies = ["Rating: 5", "no idea", "Rating: 2", "3-4", "4/5", "Rating: 1", "ten out of ten", "**3**"]
    lm = ScriptedLM(smollm2_tokenizer, replies)
    side_before = smollm2_tokenizer.padding_side
    result = judge_records(RECORDS, lm, smollm2_tokenizer, condition="ref_question", batch_size=3)
    assert result.ratings == [5, None, 2, None, 4, 1, None, 3]
    assert result.n_failed == 3 and result.failure_rate == pytest.approx(3 / 8)
    assert result.outputs[1] == "no idea"
    assert result.means() == [5.0, None, 2.0, None, 4.0, 1.0, None, 3.0]
    assert len(lm.calls) == 3  # 3 + 3 + 2 records
    for call in lm.calls:
        assert not call["do_sample"]
        assert bool(call["mask"][:, -1].all())  # left padding: every row ends on a real token
    assert any(not bool(call["mask"][:, 0].all()) for call in lm.calls)  # and some row was padded
    assert smollm2_tokenizer.padding_side == side_before


def test_judge_runs_a_tiny_random_llama(smollm2_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(smollm2_tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=smollm2_tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config).eval()
    for condition in CONDITIONS:
        result = judge_records(RECORDS[:4], model, smollm2_tokenizer, condition=condition, max_new_tokens=4)
        assert isinstance(result, JudgeResult) and result.condition == condition
        assert len(result.ratings) == len(result.outputs) == 4
        assert all(isinstance(o, str) for o in result.outputs)
        assert result.n_failed == sum(r is None for r in result.ratings)
        assert all(r is None or 1 <= r <= 5 for r in result.ratings)


def test_average_of_judges():
    a = JudgeResult("ref", [5, None, 2, None], ["", "", "", ""])
    assert average_of_judges([a, [3, 4, None, None], [4, 2, 2, None]]) == [4.0, 3.0, 2.0, None]
    with pytest.raises(ValueError, match="different numbers"):
        average_of_judges([a, [1, 2]])
    with pytest.raises(ValueError, match="no judge"):
        average_of_judges([])


def test_fusion_learns_weights_and_calibrates_on_dev():
    rng = np.random.default_rng(0)

    def make(n):
        x = rng.uniform(0, 1, size=(n, 3))
        # saturating truth: a linear model is miscalibrated at the ends, which isotonic calibration fixes
        y = 1 + 4 / (1 + np.exp(-8 * (0.8 * x[:, 0] + 0.2 * x[:, 1] - 0.5)))
        return x, np.clip(y + rng.normal(0, 0.1, n), 1, 5)

    (xt, yt), (xd, yd), (xs, ys) = make(300), make(300), make(300)
    plain = fit_fusion(xt, yt)
    assert abs(plain.ridge.coef_[0]) > 3 * abs(plain.ridge.coef_[1]) > 0
    assert abs(plain.ridge.coef_[2]) < 0.1 * abs(plain.ridge.coef_[0])  # the noise feature is ignored
    calibrated = fit_fusion(xt, yt, dev_features=xd, dev_human_mean=yd)
    pred = calibrated.predict(xs)
    assert pred.min() >= 1 and pred.max() <= 5
    mse = lambda p: float(np.mean((p - ys) ** 2))  # noqa: E731
    assert mse(pred) < 0.7 * mse(plain.predict(xs))
    with pytest.raises(ValueError, match="impute"):
        calibrated.predict(np.array([[0.1, np.nan, 0.2]]))
    with pytest.raises(ValueError, match="both dev"):
        fit_fusion(xt, yt, dev_features=xd)


@pytest.mark.real
def test_smollm2_judge_on_eight_records():
    from eval_suite.baselines.llm_judge import load_judge
    from eval_suite.models.backbones import smollm2_path

    model, tokenizer = load_judge(smollm2_path())
    torch.set_num_threads(2)
    report = {}
    for condition in CONDITIONS:
        result = judge_records(
            RECORDS, model, tokenizer, condition=condition, batch_size=8, max_new_tokens=16
        )
        assert len(result.ratings) == 8
        assert all(r is None or 1 <= r <= 5 for r in result.ratings)
        report[condition] = (result.n_failed, result.ratings, result.outputs)
    for condition, (failed, ratings, outputs) in report.items():
        print(f"SmolLM2 judge [{condition}]: {failed}/8 failed, ratings={ratings}, outputs={outputs}")
    # an instruction-tuned model that cannot produce one parseable rating anywhere means broken prompting
    assert sum(failed for failed, _, _ in report.values()) < 4 * 8
