"""Stage s2: candidates built from MMAU / MMAR multiple-choice items, rated by machine raters.

Candidates per question (``answerer`` names the process, so scenario B can hold processes out):

* ``mc-choice``: the correct choice, and each wrong choice, verbatim;
* ``mc-sentence``: the correct choice in a sentence, and one wrong choice in a sentence;
* ``mc-hedge``: a hedge between the correct choice and a wrong one, and between two wrong ones;
* ``mc-partial``: part of a multi-word correct answer (only when it names no other choice);
* real audio-LM answers (``Qwen2-Audio-7B-Instruct``, ``Qwen-Audio-Chat``) to MMAU, kept when the
  raters can decide (an answer naming exactly one choice); the rest stay unlabeled.

Raters are callables ``(record) -> int | None`` (None = cannot decide). The default panel is
three rule raters that read the choices from ``metadata["choices"]`` and differ in strictness; an
LLM judge (any ``(record) -> rating`` function, e.g. one wrapping a local instruct model) can be
added with ``extra_raters``. Items no rater can decide get no ratings and are later dropped by
the "unrated" filter.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable

from .schema import make_record

Rater = Callable[[dict], "int | None"]

_STOP = {"a", "an", "the", "of", "and", "or", "in", "on", "is", "are", "to", "with", "by", "for", "it", "this",
         "that", "be", "was", "as", "at", "from"}


def normalize(text: str) -> str:
    # '#' and '+' survive: musical notes ("A#") and similar are choices too.
    return " ".join(re.sub(r"[^\w\s#+]", " ", text.lower()).split())


def _choice_key(choice: str) -> str:
    # "A quiet road" should match "the quiet road": drop a leading article of the choice only.
    words = normalize(choice).split()
    if len(words) > 1 and words[0] in ("a", "an", "the"):
        words = words[1:]
    return " ".join(words)


def mentioned_choices(candidate: str, choices: list[str]) -> list[str]:
    """Distinct choices named in the candidate as whole phrases; a choice inside a longer named
    choice ("man" inside "man and woman") does not count separately."""
    cand = f" {normalize(candidate)} "
    hits = [c for c in dict.fromkeys(choices) if _choice_key(c) and f" {_choice_key(c)} " in cand]
    return [c for c in hits if not any(c != o and f" {_choice_key(c)} " in f" {_choice_key(o)} " for o in hits)]


_HEDGE_WORDS = re.compile(r"\b(maybe|perhaps|possibly|probably|might|could be|not sure|either)\b", re.I)


def _content(text: str) -> set[str]:
    return {w for w in normalize(text).split() if w not in _STOP}


class RuleRater:
    """Decides from which choices a candidate names.

    exactly the correct choice -> 5 (4 when hedged with "maybe"/"probably"... for a strict rater);
    only wrong choices -> 1; correct and wrong together (a hedge) -> ``hedge``; no choice named
    but part of the correct answer's words and none of a wrong choice's -> ``partial``;
    otherwise None (cannot decide). ``exclusive_only`` restricts it to answers naming exactly one
    choice, which is what is trusted for free-form audio-LM answers.
    """

    def __init__(self, rater_id: str, *, hedge: int, partial: int | None, hedge_word_penalty: int = 0):
        self.rater_id, self.hedge, self.partial, self.penalty = rater_id, hedge, partial, hedge_word_penalty

    def __call__(self, record: dict) -> int | None:
        meta = json.loads(record["metadata"])
        choices, answer = meta.get("choices"), record["reference"][0]
        if not choices or answer not in choices:
            return None
        named = mentioned_choices(record["candidate"], choices)
        if meta.get("exclusive_only") and len(named) != 1:
            return None
        if named == [answer]:
            return 5 - (self.penalty if _HEDGE_WORDS.search(record["candidate"]) else 0)
        if named and answer not in named:
            return 1
        if named:
            return self.hedge
        if self.partial is None:
            return None
        cand, right = _content(record["candidate"]), _content(answer)
        wrong = set().union(*(_content(c) for c in choices if c != answer)) - right
        if cand & right and not cand & wrong:
            return self.partial
        return None


def rule_panel() -> list[RuleRater]:
    """Three rule raters from strict to lenient, so machine ratings carry some disagreement."""
    return [RuleRater("rule-strict", hedge=1, partial=2, hedge_word_penalty=1),
            RuleRater("rule-middle", hedge=2, partial=3),
            RuleRater("rule-lenient", hedge=3, partial=4)]


def rate(record: dict, raters: dict[str, Rater]) -> dict:
    """Fill ``ratings`` / ``rater_ids`` from the raters that can decide (in a new record)."""
    ratings, ids = [], []
    for rater_id, rater in raters.items():
        r = rater(record)
        if r is not None:
            r = int(r)
            if not 1 <= r <= 5:
                raise ValueError(f"rater {rater_id} returned {r} for {record['id']}; ratings are 1..5")
            ratings.append(r)
            ids.append(rater_id)
    return {**record, "ratings": ratings, "rater_ids": ids}


_SENTENCES = ["The audio suggests {x}.", "It sounds like {x}.", "Based on what can be heard, the answer is {x}.",
              "From the recording, I would say {x}.", "The answer is {x}.", "This is {x}."]
_HEDGES = ["It could be {a} or {b}.", "Either {a} or {b}; it is hard to tell.", "Probably {a}, but possibly {b}.",
           "{a} or {b}"]


def _partial_of(answer: str, choices: list[str], rng: random.Random) -> str | None:
    words = answer.split()
    if len(words) < 3:
        return None
    part = " ".join(words[: max(1, len(words) // 2)])
    other = [c for c in choices if c != answer]
    # Useless as a "partially right" answer if it carries no content word, or if it also reads
    # as (part of) a wrong choice.
    if (not _content(part) or mentioned_choices(part, choices)
            or _content(part) & set().union(*(_content(c) for c in other))):
        return None
    return part


def choice_candidates(q: dict, rng: random.Random) -> Iterable[tuple[str, str, str]]:
    """(answerer, kind, text) candidates for one multiple-choice question."""
    answer = q["answer"]
    # Some MMAR items carry an empty or repeated choice; neither makes a candidate.
    wrong = [c for c in dict.fromkeys(q["choices"]) if c.strip() and normalize(c) != normalize(answer)]
    yield "mc-choice", "correct", answer
    for w in wrong:
        yield "mc-choice", "wrong", w
    yield "mc-sentence", "correct", rng.choice(_SENTENCES).format(x=answer)
    yield "mc-sentence", "wrong", rng.choice(_SENTENCES).format(x=rng.choice(wrong))
    a, b = (answer, rng.choice(wrong)) if rng.random() < 0.5 else (rng.choice(wrong), answer)
    yield "mc-hedge", "hedge", rng.choice(_HEDGES).format(a=a, b=b)
    if len(wrong) >= 2:
        a, b = rng.sample(wrong, 2)
        yield "mc-hedge", "wrong", rng.choice(_HEDGES).format(a=a, b=b)
    part = _partial_of(answer, q["choices"], rng)
    if part:
        yield "mc-partial", "partial", part


def build_s2(questions: list[dict], lalm_records: list[dict], *, seed: int = 0,
             extra_raters: dict[str, Rater] | None = None) -> list[dict]:
    """Rated s2 records from MMAU/MMAR questions (see :func:`dataset_builder.readers.read_mmau`)
    and unlabeled audio-LM answers. Unlabeled results (no rater decided) are returned too, with
    ``ratings == []``; the filters count and drop them."""
    raters: dict[str, Rater] = {r.rater_id: r for r in rule_panel()}
    raters.update(extra_raters or {})
    out = []
    for q in questions:
        rng = random.Random(f"orca-s2:{seed}:{q['question_id']}")
        meta = {**q["metadata"], "choices": q["choices"]}
        source = "mmau_test_mini/mmau-test-mini.json" if q["benchmark"] == "mmau" else "mmar/MMAR-meta.jsonl"
        for j, (answerer, kind, text) in enumerate(choice_candidates(q, rng)):
            rec = make_record(
                id=f"s2:{q['question_id']}:{j}", benchmark=q["benchmark"], question_id=q["question_id"],
                question=q["question"], reference=[q["answer"]], rationale=q["rationale"], candidate=text,
                answerer=answerer, modality=q["modality"], category=q["category"], stage="s2", source=source,
                metadata={**meta, "kind": kind},
            )
            out.append(rate(rec, raters))
    for rec in lalm_records:
        meta = json.loads(rec["metadata"])
        # Free-form answers: only trust the rule raters when exactly one choice is named.
        rec = {**rec, "metadata": json.dumps({**meta, "exclusive_only": True}, ensure_ascii=False, sort_keys=True)}
        out.append(rate(rec, raters))
    return out
