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

from orca_io.schema import make_record

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
        if meta.get("kind") == "synonym":  # the answer in other words: string rules cannot tell
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


# ----------------------------------------------------------------------------- the right choice in other words

_SURFACES = ["{a}", "{A}.", "It is {a}.", "{A}, I think.", "It's {a}."]
_NOUN_SURFACES = _SURFACES + ["I hear {a}.", "The sound of {a}.", "Sounds like {a} to me."]


def _common_noun(word: str, wordnet) -> bool:
    senses = wordnet.synsets(word.lower(), "n") if word.isalpha() else []
    return bool(senses) and wordnet.is_common(word.lower(), senses[0])


def _with_article(choice: str, wordnet, rng: random.Random) -> str:
    """ "Dog" -> "a dog" or "dog"; "A quiet road" -> "quiet road" or "a quiet road"; names and numbers as they are."""
    words = choice.split()
    if words[0].lower() in ("a", "an", "the") and len(words) > 1:
        return " ".join(words[1:]) if rng.random() < 0.5 else choice[0].lower() + choice[1:]
    if len(words) == 1 and _number_variant(choice) is None and _common_noun(choice, wordnet) and rng.random() < 0.5:
        return f"{'an' if choice[0].lower() in 'aeiou' else 'a'} {choice.lower()}"
    return choice


def _number_variant(answer: str) -> str | None:
    """ "3" <-> "three", "Six times" -> "6 times" (numbers 0-20, the first word)."""
    from .synthetic import number_words

    words = answer.split()
    head = words[0].lower()
    names = {number_words(n): n for n in range(21)}
    if len(words) > 2 or len(words) == 2 and words[1][0].isupper():  # "2 Pac" is a name
        return None
    if head.isdigit() and int(head) <= 20:
        return " ".join([number_words(int(head)), *words[1:]])
    if head in names:
        return " ".join([str(names[head]), *words[1:]])
    return None


def synonym_variants(answer: str, choices: list[str], wordnet) -> list[str]:
    """The answer in other words: a number in digits or words, or its head word (the last of one or two words)
    replaced by a WordNet synonym of that word's first sense, both the word and the synonym tagged in that sense
    by SemCor ("Watching TV" -> "Watching television", "A kid" -> "A child"). Names, verb forms and synonyms
    sharing a content word with another choice are left out, so no variant can read as a wrong choice."""
    words = answer.split()
    out = [v] if (v := _number_variant(answer)) else []
    head = words[-1] if 1 <= len(words) <= 2 else ""
    if (head.isalpha() and head.lower() not in _STOP and not head.lower().endswith(("ing", "ed", "ly"))
            and not (len(words) == 2 and words[1][0].isupper()) and v is None):
        taken = set().union(*(_content(c) for c in choices if c != answer))
        for pos in ("n",) if len(words) == 2 else ("n", "a"):
            senses = wordnet.synsets(head.lower(), pos)
            if not senses:
                continue
            if len(senses) > 3 or not wordnet.is_common(head.lower(), senses[0]):
                break  # a word of many senses ("program", "call"): its first sense is too often not the one meant
            for syn in senses[0].words:
                if syn.lower() == head.lower() or not wordnet.is_common(syn, senses[0]) or _content(syn) & taken:
                    continue
                syn = syn[0].upper() + syn[1:] if head[0].isupper() and len(words) == 1 else syn
                out.append(" ".join([*words[:-1], syn]))
            break
    return [t for t in dict.fromkeys(out) if not mentioned_choices(t, choices)]


class SynonymRater:
    """Rates a candidate built as the right choice with a WordNet synonym (``kind == "synonym"``); None otherwise.
    ``rating`` below 5 for a strict rater: a first-sense synonym can miss the sense the question meant."""

    def __init__(self, rater_id: str, rating: int):
        self.rater_id, self.rating = rater_id, rating

    def __call__(self, record: dict) -> int | None:
        return self.rating if json.loads(record["metadata"]).get("kind") == "synonym" else None


def build_s2_paraphrases(questions: list[dict], *, seed: int = 0, wordnet=None, per_question: int = 2) -> list[dict]:
    """Positives s2 lacks: per question ``per_question`` surface forms of the right choice ("a dog", "It is a
    dog.", rated by the rule raters) and up to ``per_question`` WordNet-synonym forms ("adult male" for "Man",
    rated by :class:`SynonymRater`s). ``questions`` as for :func:`build_s2`."""
    if wordnet is None:
        from .wordnet import default_wordnet

        wordnet = default_wordnet()
    raters: dict[str, Rater] = {r.rater_id: r for r in rule_panel()}
    raters.update({r.rater_id: r for r in (SynonymRater("wordnet-strict", 4), SynonymRater("wordnet-middle", 5),
                                          SynonymRater("wordnet-lenient", 5))})
    out = []
    for q in questions:
        rng = random.Random(f"orca-s2-paraphrase:{seed}:{q['question_id']}")
        answer = q["answer"].strip()
        # answers of more than four words are sentences already (mc-sentence wraps them)
        templates = (_NOUN_SURFACES if _common_noun(answer, wordnet) or _common_noun(answer.split()[-1], wordnet)
                     else _SURFACES) if len(answer.split()) <= 4 else []
        surfaces = list(dict.fromkeys(rng.choice(templates).format(a=(a := _with_article(answer, wordnet, rng)),
                                                                    A=a[0].upper() + a[1:])
                                      for _ in range(per_question) if templates))
        synonyms = synonym_variants(answer, q["choices"], wordnet)
        synonyms = rng.sample(synonyms, min(per_question, len(synonyms)))
        source = "mmau_test_mini/mmau-test-mini.json" if q["benchmark"] == "mmau" else "mmar/MMAR-meta.jsonl"
        cands = [("mc-paraphrase", "surface", t) for t in surfaces if t != answer]
        cands += [("mc-synonym", "synonym", t if rng.random() < 0.5 else
                   rng.choice(["It is {x}.", "The answer is {x}."]).format(x=t if t[:2].isupper() else t[0].lower() + t[1:]))
                  for t in synonyms]
        for j, (answerer, kind, text) in enumerate(cands):
            rec = make_record(
                id=f"s2p:{q['question_id']}:{j}", benchmark=q["benchmark"], question_id=q["question_id"],
                question=q["question"], reference=[answer], rationale=q["rationale"], candidate=text,
                answerer=answerer, modality=q["modality"], category=q["category"], stage="s2", source=source,
                metadata={**q["metadata"], "choices": q["choices"], "kind": kind},
            )
            out.append(rate(rec, raters))
    return out


def paraphrases_of(records: list[dict], *, seed: int = 0) -> list[dict]:
    """:func:`build_s2_paraphrases` for the multiple-choice questions that s2 ``records`` (e.g. one split) hold;
    audio-LM answers carry the same question fields, so every question counts once."""
    questions: dict[str, dict] = {}
    for r in records:
        meta = json.loads(r["metadata"])
        if r["question_id"] in questions or not meta.get("choices") or r["reference"][0] not in meta["choices"]:
            continue
        questions[r["question_id"]] = {
            "question_id": r["question_id"], "benchmark": r["benchmark"], "question": r["question"],
            "choices": meta["choices"], "answer": r["reference"][0], "modality": r["modality"],
            "category": r["category"], "rationale": r["rationale"],
            "metadata": {k: v for k, v in meta.items() if k not in ("choices", "kind", "exclusive_only")}}
    return build_s2_paraphrases(list(questions.values()), seed=seed)
