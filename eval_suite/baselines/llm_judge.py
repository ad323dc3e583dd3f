"""LLM-as-a-judge baselines: ask a local causal LM for a 1-5 correctness rating.

Four prompting conditions follow the ORCA paper:
    ref                   reference answer(s) + candidate
    ref_question          + the question
    ref_question_context  + the rationale (text standing in for the audio) and the transcript
    context_only          question + rationale + candidate, no reference (the judge must decide from context)

Replies that do not contain one clear rating are failures: they are kept as None in `JudgeResult.ratings`
and counted in `n_failed`, never silently mapped to a default score.
Also here: `average_of_judges` and a small learned fusion of baseline/judge scores (`fit_fusion`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

CONDITIONS = ("ref", "ref_question", "ref_question_context", "context_only")

# ---------------------------------------------------------------------------------------------------------
# Rating parser
# ---------------------------------------------------------------------------------------------------------

_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
          "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}  # fmt: skip
_NUM = r"(?:\d+(?:\.\d+)?|" + "|".join(_WORDS) + r")"
# A number with an optional "/N" or "out of N" denominator, matched as one unit so the 5 of "4/5" is never
# read as a second rating.
_RATED = re.compile(rf"(?<![\w.])(?P<num>{_NUM})(?!\w)(?:\s*(?:/|out\s+of)\s*(?P<den>{_NUM})(?!\w))?")
# The scale itself is often echoed ("on a scale of 1 to 5", "(1-5)"); its numbers are not ratings.
_SCALE = re.compile(
    r"(?:on\s+a\s+|using\s+a\s+|a\s+)?scale\s+(?:of|from)?\s*(?:1|one)\s*(?:-|–|—|to)\s*(?:5|five)"
    r"|(?:from|between)\s+(?:1|one)\s+(?:to|and)\s+(?:5|five)"
    r"|[(\[]\s*1\s*(?:-|–|—|to)\s*5\s*[)\]]"
    r"|\b1\s*(?:-|–|—)\s*5\s+scale"
    r"|[(\[]\s*out\s+of\s+(?:5|five)\s*[)\]]"
    # definitions of the scale ends: "1 = wrong", "where 5 means fully correct", "1 being the worst"
    # only after "where"/"with"/"and"/","/"(" so that "Rating: 5 = fully correct" keeps its rating
    r"|(?:\bwhere|\bwith|\band|,|\()\s*[15]\s*(?:=|means\b|being\b|is\s+(?:the\s+)?(?:lowest|highest|worst|best)\b)"
)
# Words that announce the rating, strongest first: an explanation may mention a "score" or what the candidate
# "gave", but "rating" is almost always the verdict. The number must follow within a short clause.
_LABEL_TIERS = (r"rating|rate|rated", r"score|grade|verdict|give|assign|assigned")
_LABELS = [
    re.compile(
        rf"\b(?:{words})\b[^\d.!?\n]{{0,40}}?(?<![\w.])(?P<num>{_NUM})(?!\w)"
        rf"(?:\s*(?:/|out\s+of)\s*(?P<den>{_NUM})(?!\w))?"
        r"(?P<range>\s*(?:-|–|—|to|or)\s*\d)?"
    )
    for words in _LABEL_TIERS
]
_MARKUP = re.compile(r"[*_#`>]")
_SHORT_REPLY_WORDS = 3
# A verdict first, explanation after: "4\nThe answer..." or "4 - mostly right" (not "1. first point").
_LEADING = re.compile(r"\s*(?P<num>\d)(?:\s*/\s*5)?(?:\s*\n|\s+[-–—:]\s)")
_FAIL = object()  # a labelled number that is not a usable rating (range, 8/10, 3.5)


def _value(num: str, den: str | None):
    """1..5 as int, or _FAIL when the number cannot be a rating on the 1-5 scale."""
    value = _WORDS[num] if num in _WORDS else float(num)
    if den is not None:
        denominator = _WORDS[den] if den in _WORDS else float(den)
        if denominator != 5:  # "8/10" is on another scale; rescaling would invent precision
            return _FAIL
    if value != int(value) or not 1 <= value <= 5:
        return _FAIL
    return int(value)


def _single(values: list) -> int | None:
    """The rating when all mentions agree on one valid value, else None."""
    if not values or any(v is _FAIL for v in values) or len(set(values)) != 1:
        return None
    return values[0]


def parse_rating(text: str | None) -> int | None:
    """Extract one 1-5 rating from a judge's free-text reply, or None when there is no unambiguous one.

    Labelled mentions ("Rating: 4", "I'd give it a 4", "score of 4/5") win over bare numbers, so an
    explanation that cites other numbers does not matter. Without a label, a number counts only with a "/5"
    or "out of 5" or in a reply of at most three words. Ranges ("3-4"), disagreeing mentions, other scales
    ("8/10"), half points and out-of-range values give None.
    """
    if not text:
        return None
    clean = _SCALE.sub(" ", _MARKUP.sub(" ", text.lower()))
    for label in _LABELS:
        labelled = [_FAIL if m["range"] else _value(m["num"], m["den"]) for m in label.finditer(clean)]
        if labelled:
            return _single(labelled)
    lead = _LEADING.match(clean)
    if lead:
        return _single([_value(lead["num"], None)])
    # An unlabelled number in a sentence ("The answer is 3.") is as likely an echo of the answer as a rating,
    # so bare numbers only count in a reply of a few words ("4", "**4**", "4 stars") or with a "/5".
    short = len(re.findall(r"\w+", clean)) <= _SHORT_REPLY_WORDS
    bare = []
    for m in _RATED.finditer(clean):
        num, den = m["num"], m["den"]
        if den is None and (num in _WORDS or not short):
            continue  # and "one" is a pronoun far more often than a rating
        bare.append(_value(num, den))
    if not bare:
        # a reply that is just a number word ("Four.")
        word = clean.strip(" \t\n.!:")
        return _value(word, None) if word in _WORDS and _value(word, None) is not _FAIL else None
    return _single(bare)


# ---------------------------------------------------------------------------------------------------------
# Prompts and generation
# ---------------------------------------------------------------------------------------------------------

_INSTRUCTION = (
    "Rate how correct the candidate answer is on a scale from 1 to 5, where 1 means completely wrong and "
    "5 means completely correct. Reply with one line of the form 'Rating: N'."
)


def build_prompt(record: dict, condition: str) -> str:
    """The user message for one record under one prompting condition."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; choose one of {CONDITIONS}")
    refs = record.get("reference")
    if isinstance(refs, str) or not refs:
        raise TypeError(f"`reference` must be a non-empty list of str, got {refs!r}")
    parts = ["You are grading an answer to a question about an audio clip."]
    if condition != "ref":
        parts.append(f"Question: {record['question']}")
    if condition in ("ref_question_context", "context_only"):
        if record.get("rationale"):
            parts.append(f"Description of the audio: {record['rationale']}")
        if condition == "ref_question_context" and record.get("transcript"):
            parts.append(f"Transcript of the audio: {record['transcript']}")
    if condition != "context_only":
        label = "Reference answer" if len(refs) == 1 else "Accepted reference answers"
        parts.append(f"{label}: " + " | ".join(refs))
    parts.append(f"Candidate answer: {record['candidate']}")
    parts.append(_INSTRUCTION)
    return "\n".join(parts)


def _render(tokenizer, prompt: str) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
    return prompt + "\nRating:"  # base models need the answer slot opened for them


@dataclass
class JudgeResult:
    """Ratings of one judge under one condition; None in `ratings` marks an unparseable reply."""

    condition: str
    ratings: list[int | None]
    outputs: list[str] = field(repr=False)

    @property
    def n_failed(self) -> int:
        return sum(r is None for r in self.ratings)

    @property
    def failure_rate(self) -> float:
        return self.n_failed / len(self.ratings) if self.ratings else 0.0

    def means(self) -> list[float | None]:
        """Ratings as floats for `compute_metrics`; failures stay None so the caller must decide."""
        return [None if r is None else float(r) for r in self.ratings]


def judge_records(
    records: Sequence[dict],
    model,
    tokenizer,
    *,
    condition: str = "ref_question",
    batch_size: int = 8,
    max_new_tokens: int = 16,
) -> JudgeResult:
    """Greedy-decode a rating for every record with a causal LM and parse it.

    The tokenizer's padding side is switched to left for the call (decoder-only models continue from the
    last position, so right padding would put pad tokens between prompt and answer) and restored after.
    """
    import torch

    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; choose one of {CONDITIONS}")
    prompts = [_render(tokenizer, build_prompt(rec, condition)) for rec in records]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        raise ValueError("the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token")
    old_side, old_pad = tokenizer.padding_side, tokenizer.pad_token
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    outputs: list[str] = []
    try:
        with torch.inference_mode():
            for start in range(0, len(prompts), batch_size):
                # chat templates already contain BOS; adding special tokens again would double it
                batch = tokenizer(
                    prompts[start : start + batch_size],
                    return_tensors="pt",
                    padding=True,
                    add_special_tokens=not getattr(tokenizer, "chat_template", None),
                ).to(model.device)
                # only ids and mask: some tokenizers add token_type_ids, which decoder LMs reject
                generated = model.generate(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=pad_id,
                )
                new_tokens = generated[:, batch["input_ids"].shape[1] :]
                outputs.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side, tokenizer.pad_token = old_side, old_pad
    return JudgeResult(condition=condition, ratings=[parse_rating(o) for o in outputs], outputs=outputs)


def load_judge(path, *, dtype=None):
    """(model, tokenizer) of a local causal LM folder, in eval mode on CPU."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    return model, tokenizer


# ---------------------------------------------------------------------------------------------------------
# Combining judges and baselines
# ---------------------------------------------------------------------------------------------------------


def average_of_judges(results: Sequence[JudgeResult | Sequence[int | float | None]]) -> list[float | None]:
    """Per-item mean rating over the judges that produced one; None where every judge failed."""
    columns = [r.ratings if isinstance(r, JudgeResult) else list(r) for r in results]
    if not columns:
        raise ValueError("no judge results to average")
    if len({len(c) for c in columns}) != 1:
        raise ValueError(f"judge results cover different numbers of items: {[len(c) for c in columns]}")
    averaged = []
    for item in zip(*columns):
        valid = [float(v) for v in item if v is not None]
        averaged.append(sum(valid) / len(valid) if valid else None)
    return averaged


@dataclass
class Fusion:
    """Ridge regression from feature scores to the human mean, optionally followed by an isotonic map.

    The ridge fit on train finds how much each baseline/judge is worth; the isotonic map, fitted on dev
    outputs of that ridge, corrects the monotone miscalibration a linear model leaves on a bounded 1-5
    scale without touching the ranking learnt on train.
    """

    ridge: object
    calibrator: object | None = None

    def predict(self, features) -> np.ndarray:
        x = _features(features)
        raw = self.ridge.predict(x)
        if self.calibrator is not None:
            raw = self.calibrator.predict(raw)
        return np.clip(raw, 1.0, 5.0)


def _features(features) -> np.ndarray:
    x = np.asarray(features, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2:
        raise ValueError(f"features must be (n_items, n_features), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        # a failed judge (None -> NaN) must be imputed by the caller, e.g. with the average of the others
        raise ValueError("features contain NaN/inf (failed judge ratings?); impute them before fusion")
    return x


def fit_fusion(
    train_features,
    train_human_mean,
    *,
    dev_features=None,
    dev_human_mean=None,
    alpha: float = 1.0,
) -> Fusion:
    """Fit the fusion: ridge on train, then (when dev data is given) isotonic calibration on dev.

    Args:
        train_features: (n, d) feature scores per item, e.g. columns of `BASELINES` outputs and judge means.
        train_human_mean: (n,) human mean rating on the [1, 5] scale.
        dev_features, dev_human_mean: held-out data for the calibration step; skipped when None.
        alpha: ridge penalty.
    """
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import Ridge

    x, y = _features(train_features), np.asarray(train_human_mean, dtype=float)
    if x.shape[0] != y.shape[0] or x.shape[0] < 2:
        raise ValueError(f"need >= 2 train items with one target each, got {x.shape[0]} and {y.shape[0]}")
    ridge = Ridge(alpha=alpha).fit(x, y)
    if (dev_features is None) != (dev_human_mean is None):
        raise ValueError("give both dev_features and dev_human_mean, or neither")
    calibrator = None
    if dev_features is not None:
        dx, dy = _features(dev_features), np.asarray(dev_human_mean, dtype=float)
        if dx.shape != (dy.shape[0], x.shape[1]):
            raise ValueError(f"dev features must have shape ({dy.shape[0]}, {x.shape[1]}), got {dx.shape}")
        calibrator = IsotonicRegression(y_min=1.0, y_max=5.0, out_of_bounds="clip").fit(ridge.predict(dx), dy)
    return Fusion(ridge=ridge, calibrator=calibrator)
