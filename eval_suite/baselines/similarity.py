"""Reference-based baselines that score a candidate answer in [0, 1] without a trained judge.

Every baseline takes a list of records (dicts with `question`, `reference` -- a list of accepted answers --,
`candidate`, `rationale`, `transcript`) and returns one score per record: the best score over the reference
aliases, because matching any accepted answer makes the candidate correct. Map to the Likert scale with
`1 + 4 * score`.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def check_records(records: Sequence[dict]) -> None:
    """Fail early with the offending index instead of deep inside a metric."""
    for i, rec in enumerate(records):
        for key in ("question", "candidate"):
            if not isinstance(rec.get(key), str):
                raise TypeError(f"record {i}: `{key}` must be a str, got {type(rec.get(key)).__name__}")
        refs = rec.get("reference")
        # a bare string would be iterated character by character and silently score nonsense
        if isinstance(refs, str) or not isinstance(refs, Sequence):
            raise TypeError(f"record {i}: `reference` must be a list of str (answer aliases), got {refs!r}")
        if not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"record {i}: `reference` must be a non-empty list of str, got {refs!r}")


def _max_over_refs(records: Sequence[dict], score_one: Callable[[str, str], float]) -> list[float]:
    check_records(records)
    return [max(score_one(rec["candidate"], ref) for ref in rec["reference"]) for rec in records]


def _exact_match(candidate: str, reference: str) -> float:
    return float(normalize_answer(candidate) == normalize_answer(reference))


def _contains(candidate: str, reference: str) -> float:
    ref = normalize_answer(reference)
    if not ref:  # an empty reference would be "contained" in everything
        return 0.0
    # padding with spaces turns a substring test into a whole-word test on normalised text
    return float(f" {ref} " in f" {normalize_answer(candidate)} ")


def _token_f1(candidate: str, reference: str) -> float:
    cand, ref = normalize_answer(candidate).split(), normalize_answer(reference).split()
    if not cand or not ref:  # SQuAD convention: two empty answers agree, one empty answer scores 0
        return float(cand == ref)
    overlap = sum((Counter(cand) & Counter(ref)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(cand), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def _bleu(candidate: str, reference: str) -> float:
    import sacrebleu

    # sentence BLEU is mostly 0 for short answers without smoothing; sacrebleu's default "exp" smoothing
    # keeps partial n-gram overlap visible
    return sacrebleu.sentence_bleu(candidate, [reference]).score / 100.0


@functools.cache
def _rouge_scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"])


def _rouge_l(candidate: str, reference: str) -> float:
    return _rouge_scorer().score(reference, candidate)["rougeL"].fmeasure


def exact_match(records: Sequence[dict]) -> list[float]:
    return _max_over_refs(records, _exact_match)


def contains(records: Sequence[dict]) -> list[float]:
    return _max_over_refs(records, _contains)


def token_f1(records: Sequence[dict]) -> list[float]:
    return _max_over_refs(records, _token_f1)


def bleu(records: Sequence[dict]) -> list[float]:
    return _max_over_refs(records, _bleu)


def rouge_l(records: Sequence[dict]) -> list[float]:
    return _max_over_refs(records, _rouge_l)


@functools.cache
def _minilm():
    from transformers import AutoModel, AutoTokenizer

    from eval_suite.models.backbones import minilm_path

    path = minilm_path()
    model = AutoModel.from_pretrained(path).eval()
    return AutoTokenizer.from_pretrained(path), model


def embed(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """all-MiniLM-L6-v2 sentence embeddings: masked mean pooling, L2-normalised, shape (len(texts), 384)."""
    import torch

    tokenizer, model = _minilm()
    chunks = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                list(texts[start : start + batch_size]),
                padding=True,
                truncation=True,
                max_length=256,
                return_tensors="pt",
            )
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            chunks.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    return np.concatenate(chunks) if chunks else np.zeros((0, model.config.hidden_size), dtype=np.float32)


def embedding_cosine(records: Sequence[dict], batch_size: int = 64) -> list[float]:
    """Cosine between candidate and reference embeddings; negative cosines mean unrelated, so clip at 0."""
    check_records(records)
    texts = sorted({rec["candidate"] for rec in records} | {r for rec in records for r in rec["reference"]})
    index = {t: i for i, t in enumerate(texts)}  # embed each distinct string once
    vectors = embed(texts, batch_size=batch_size)
    scores = []
    for rec in records:
        cand = vectors[index[rec["candidate"]]]
        best = max(float(vectors[index[r]] @ cand) for r in rec["reference"])
        scores.append(min(max(best, 0.0), 1.0))  # clip the top too: fp rounding can give 1.0000001
    return scores


BASELINES: dict[str, Callable[[Sequence[dict]], list[float]]] = {
    "exact_match": exact_match,
    "contains": contains,
    "token_f1": token_f1,
    "bleu": bleu,
    "rouge_l": rouge_l,
    "embedding_cosine": embedding_cosine,
}

