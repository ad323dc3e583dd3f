"""Meaning items for stage s1: answers that mean the reference in other words, and answers that look like it
but mean something else, rated by the simulated panel of :mod:`dataset_builder.synthetic`.

Questions come from :mod:`dataset_builder.lexical` (WordNet: synonyms, derived words, hypernyms, antonyms,
co-hyponyms) and :mod:`dataset_builder.formats` (numbers, years, dates, measures, names). Each question gets
``answers_per_question`` candidates in distinct content modes, drawn so that about half are right; each is
rated by 3 to 5 of the panel's raters from the mode's latent quality (:data:`QUALITY`), with the panel's extra
disagreement on :data:`AMBIGUOUS` modes (a hypernym, an under-specific or a near-synonym answer, a hedge).
Same seed and size, same records.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np

from orca_io.schema import make_record

from . import formats, lexical
from .synthetic import _FILLERS, make_panel, panel_ratings

QUALITY = {
    "exact": 5.0, "synonym": 4.8, "derived": 4.8, "format": 4.8, "longer": 4.7, "affirm": 4.6,   # right
    "similar": 3.8, "hypernym": 3.0, "under_specific": 3.0, "hedge": 2.3, "general": 2.0,     # raters disagree
    "negation": 1.2, "reject": 1.2, "other_unit": 1.2, "off_by_one": 1.1, "cohyponym": 1.1,  # wrong
    "antonym": 1.0, "antonym_similar": 1.2, "tenfold": 1.0,
}
AMBIGUOUS = {"similar", "hypernym", "under_specific", "hedge", "general"}
# How often a mode is drawn when the question has it: the hard negatives and the paraphrases dominate.
WEIGHT = {"exact": 1.0, "synonym": 3.0, "derived": 3.0, "format": 3.0, "longer": 1.0, "affirm": 0.3, "similar": 0.8,
          "hypernym": 1.0, "under_specific": 1.0, "hedge": 0.3, "general": 0.5, "negation": 0.3, "reject": 0.5,
          "other_unit": 1.0, "off_by_one": 2.5, "cohyponym": 2.0, "antonym": 3.0, "antonym_similar": 1.0,
          "tenfold": 0.5}
_WRONG_POOLS = ("antonym", "cohyponym", "off_by_one", "other_unit")
_RIGHT_POOLS = ("exact", "synonym", "derived", "format")

# Question families and their weights: the lexical ones (WordNet) and the format ones.
FAMILIES = [(lambda rng, d=d: lexical.concept_question(d, rng), w) for d, w in
            (("instrument", 3), ("emotion", 3), ("animal", 2), ("colour", 1), ("vehicle", 1), ("sound", 2),
             ("place", 1))] + [
    (lexical.attribute_question, 3), (lexical.capital_question, 2), (formats.year_question, 2), (formats.count_question, 2),
    (formats.measure_question, 2), (formats.date_question, 1), (formats.name_question, 1)]
# Music questions (keys and moods), a set of their own so that the meaning items above stay as they were measured.
MUSIC_FAMILIES = [(formats.key_question, 3), (lambda rng: lexical.attribute_question(rng, lexical.MUSIC_MOODS), 2)]
FAMILY_SETS = {"meaning": FAMILIES, "music": MUSIC_FAMILIES}

_STYLE_ANSWERER = {"short": "sim-span", "sentence": "sim-sentence", "long": "sim-verbose"}


def _frame(q: lexical.MeaningQuestion, entry: tuple[str, str], rng: random.Random) -> str:
    text, key = entry
    s = q.frames.get(key, "{x}").replace("{x}", text)
    if s.startswith("The speaker "):
        s = rng.choice(["The speaker ", "She ", "He "]) + s.removeprefix("The speaker ")
    return s[0].upper() + s[1:]


def _composed(q: lexical.MeaningQuestion, mode: str, rng: random.Random) -> str | None:
    """Sentences built from two pools: a negated reference, a wrong answer asserted against the right one (and the
    reverse, in the same templates), a hedge between right and wrong."""
    right = [e for p in _RIGHT_POOLS for e in q.pools.get(p, [])]
    wrong = [e for p in _WRONG_POOLS for e in q.pools.get(p, [])]
    x = q.pools["exact"][0][0]
    if mode == "negation":
        return rng.choice([f"It is not {x}.", f"Definitely not {x}.", f"Not {x}, that much is clear."])
    if not wrong:
        return None
    a, b = rng.choice(right)[0], rng.choice(wrong)[0]
    if mode == "hedge":
        a, b = (a, b) if rng.random() < 0.5 else (b, a)
        return rng.choice([f"It could be {a} or {b}.", f"Either {a} or {b}, I am not sure which.",
                           f"Probably {a}, but it might also be {b}."])
    said, denied = (a, b) if mode == "affirm" else (b, a)
    return rng.choice([f"It is {said}, not {denied}.", f"Although some would say {denied}, it is {said}.",
                       f"{said[0].upper() + said[1:]}. {denied[0].upper() + denied[1:]} is a common mistake here."])


def candidate(q: lexical.MeaningQuestion, mode: str, style: str, rng: random.Random) -> str | None:
    """A candidate text for ``mode`` in ``style`` (short / sentence / long), or None when the question has none."""
    if mode in ("negation", "reject", "affirm", "hedge"):
        text = _composed(q, mode, rng)
    elif not q.pools.get(mode):
        return None
    else:
        entry = rng.choice(q.pools[mode])
        text = entry[0] if style == "short" and entry[1] != "text" else _frame(q, entry, rng)
        if style == "short" and text.split(" ", 1)[0] in ("a", "an", "the") and rng.random() < 0.4:
            text = text.split(" ", 1)[1]  # "violin" as often as "a violin" in a short answer
    if text is not None and style == "long":
        fill = rng.sample(_FILLERS, rng.randint(1, 4))
        cut = rng.randint(0, len(fill))
        text = " ".join([*fill[:cut], text, *fill[cut:]])
    return text


def _draw_modes(q: lexical.MeaningQuestion, k: int, rng: random.Random) -> list[str]:
    """k distinct modes the question can realise, weighted, at least one right and one wrong."""
    composed = {"negation", "hedge"} | ({"reject", "affirm"} if any(q.pools.get(p) for p in _WRONG_POOLS) else set())
    modes = sorted(m for m in QUALITY if q.pools.get(m) or m in composed)
    keyed = sorted(modes, key=lambda m: rng.random() ** (1.0 / WEIGHT[m]), reverse=True)[:k]
    if not any(QUALITY[m] >= 4 for m in keyed):
        keyed[-1] = "exact"
    if not any(QUALITY[m] < 2 for m in keyed):
        keyed[-1 if keyed[-1] != "exact" else 0] = rng.choice([m for m in modes if QUALITY[m] < 2])
    return keyed


def generate_meaning(size: int = 5_000, *, seed: int = 0, answers_per_question: int = 4, panel_size: int = 24,
                     counts: Counter | None = None, family_set: str = "meaning") -> list[dict]:
    """``size`` rated meaning records (stage s1) from the question families of ``FAMILY_SETS[family_set]``.
    ``counts``, when given, gets one count per (family, mode)."""
    rng = random.Random(f"orca-s1-{family_set}:{seed}")
    # the same simulated raters as generate_s1's (same ids, same biases), so a mixed s1 keeps one panel
    panel = make_panel(panel_size, np.random.default_rng([seed, 0x0C0A]))
    salt = list(FAMILY_SETS).index(family_set)
    nrng = np.random.default_rng([seed, 0x5E1A] + ([salt] if salt else []))
    prefix = "s1m" if family_set == "meaning" else f"s1m-{family_set}"
    gens, weights = zip(*FAMILY_SETS[family_set])
    records: list[dict] = []
    q = 0
    while len(records) < size:
        item = rng.choices(gens, weights=weights)[0](rng)
        for j, mode in enumerate(_draw_modes(item, answers_per_question, rng)):
            style = rng.choices(["short", "sentence", "long"], weights=[0.45, 0.4, 0.15])[0]
            text = candidate(item, mode, style, rng)
            if text is None or len(records) >= size:
                continue
            raters = [panel[i] for i in sorted(nrng.choice(panel_size, size=int(nrng.integers(3, 6)), replace=False))]
            ratings = panel_ratings(QUALITY[mode], mode in AMBIGUOUS, raters, nrng)
            if counts is not None:
                counts[(item.family, mode)] += 1
            records.append(make_record(
                id=f"{prefix}:{seed}:{q}:{j}", benchmark="synthetic", question_id=f"{prefix}:{seed}:{q}",
                question=item.question, reference=item.reference, rationale=item.rationale,
                transcript=item.transcript, candidate=text, answerer=_STYLE_ANSWERER[style],
                modality=item.modality, category=item.category, ratings=ratings,
                rater_ids=[r.rater_id for r in raters], stage="s1", source="synthetic (dataset_builder.meaning)",
                metadata={"mode": mode, "style": style, "family": item.family, "latent_quality": QUALITY[mode],
                          "seed": seed},
            ))
        q += 1
    return records
