"""Questions whose candidate answers come from WordNet's relations, for the meaning items of stage s1.

A domain names the answers a question type chooses among (seed words: instruments, emotions, animals, colours,
vehicles, sound sources, places) and the WordNet synset they must descend from, which picks each word's sense.
WordNet then supplies, per answer: its synonyms (the other words of its synsets), derived words (happiness ->
happy, for "She sounds happy."), its hypernym (an under-specific answer: "a bowed stringed instrument" for
violin), the domain's head word (a far too general one: "a musical instrument"), its direct antonyms (happiness
-> sadness, unhappiness) and its co-hyponyms (the other seeds of the domain, siblings first: viola and cello for
violin). Attribute questions (speech rate, loudness, pitch, the speaker's sex and age, distance) choose between
two adjectives that WordNet lists as direct antonyms; their synonyms and WordNet's "similar" satellites
(sluggish for slow, a near-synonym raters disagree on) come along.

A seed written "happiness|joy" joins two synsets that listeners treat as one answer, so that "joyful" counts as
right for happiness. The seeds of one domain are answers a rater tells apart (a listener does not accept a viola
for a violin), which is what makes them co-hyponym negatives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

from .wordnet import Synset, WordNet, default_wordnet


@dataclass(frozen=True)
class Domain:
    anchor: str | None          # the seeds' senses must descend from this noun's first sense; None: first sense
    seeds: tuple[str, ...]
    questions: tuple[str, ...]
    frame: str                  # a sentence around a noun answer, {x}
    modality: str
    category: str
    mass: frozenset = frozenset()   # seeds used without an article ("rain", "happiness")
    adj_frame: str | None = None    # a sentence around a derived adjective ("The speaker sounds {x}.")
    hypernyms: bool = True          # False where WordNet's hypernym is no answer (doorbell -> "push button")


DOMAINS = {
    "instrument": Domain("musical instrument", (
        "violin", "viola", "cello", "double bass", "guitar", "banjo", "harp", "piano", "pipe organ", "accordion",
        "harmonica", "flute", "clarinet", "oboe", "bassoon", "saxophone", "trumpet", "trombone", "tuba",
        "French horn", "drum", "cymbal", "xylophone", "tambourine", "bagpipe", "sitar", "mandolin", "ukulele"),
        ("Which instrument plays the melody?", "What instrument is being played?",
         "Which instrument carries the main theme in this excerpt?"),
        "The melody is played on {x}.", "music", "instrument"),
    "emotion": Domain("feeling", (
        "happiness|joy", "sadness|sorrow", "anger", "fear", "surprise", "disgust", "calmness"),
        ("What emotion does the speaker express?", "How does the speaker feel?",
         "What is the emotional tone of the speaker's voice?"),
        "The speaker expresses {x}.", "speech", "speaker emotion",
        mass=frozenset({"happiness|joy", "sadness|sorrow", "anger", "fear", "surprise", "disgust", "calmness"}),
        adj_frame="The speaker sounds {x}."),
    "animal": Domain("animal", (
        "dog", "cat", "cow", "horse", "sheep", "pig", "goat", "chicken", "duck", "goose", "owl", "crow", "frog",
        "lion", "wolf", "elephant", "monkey", "bee", "donkey", "parrot"),
        ("Which animal makes the sound in the clip?", "What animal can be heard?",
         "Identify the animal vocalising in the recording."),
        "The sound comes from {x}.", "sound", "animal sound"),
    "colour": Domain("color", (
        "red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white", "grey"),
        ("What colour does the speaker say the car is?", "Which colour is mentioned in the recording?"),
        "The colour mentioned is {x}.", "speech", "speech content",
        mass=frozenset({"red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white",
                        "grey"})),
    "vehicle": Domain("conveyance/3", (
        "car", "truck", "bus", "motorcycle", "train", "airplane", "helicopter", "bicycle", "boat", "tractor",
        "streetcar"),
        ("Which vehicle is heard passing?", "What vehicle produces the engine sound?"),
        "The sound is made by {x}.", "sound", "sound event"),
    "sound": Domain(None, (
        "thunder", "rain", "applause", "laughter", "siren/3", "doorbell", "whistle", "footstep", "explosion",
        "cough", "sneeze", "snore", "scream", "alarm clock"),
        ("What is the main sound source in the recording?", "Which sound event is heard in the clip?"),
        "The main sound in the clip is {x}.", "sound", "sound event",
        mass=frozenset({"thunder", "rain", "applause", "laughter"}), hypernyms=False),
    "place": Domain(None, (
        "kitchen", "classroom", "church/2", "hospital", "airport", "beach", "forest", "restaurant", "office",
        "stadium", "library", "bathroom", "garden", "supermarket"),
        ("Where was this recording most likely made?", "What is the acoustic scene of the clip?"),
        "The recording was made in {x}.", "mix-sound-speech", "acoustic scene", hypernyms=False),
}

# Two-sided attribute questions: (question, sentence frame, modality, category, the two adjectives).
ATTRIBUTES = [
    ("How fast does the speaker talk?", "The speaker talks at a {x} pace.", "speech", "speech rate", ("fast", "slow")),
    ("What is the tempo of the music?", "The tempo is {x}.", "music", "tempo", ("fast", "slow")),
    ("How loud is the sound in the clip?", "The sound is {x}.", "sound", "loudness", ("loud", "soft")),
    ("Is the voice high or low in pitch?", "The voice is {x}.", "speech", "pitch", ("high-pitched", "low-pitched")),
    ("What is the sex of the speaker?", "The speaker is {x}.", "speech", "speaker gender", ("male", "female")),
    ("Does the speaker sound old or young?", "The speaker sounds {x}.", "speech", "speaker age", ("old", "young")),
    ("Is the sound source near the microphone or far from it?", "The source is {x}.", "sound", "distance",
     ("near", "far")),
    ("What is the mood of the speaker?", "The speaker sounds {x}.", "speech", "speaker emotion", ("happy", "unhappy")),
    ("Does the speaker sound sad or glad?", "The speaker sounds {x}.", "speech", "speaker emotion", ("sad", "glad")),
]

# The mood of a piece of music, for the music meaning items (dataset_builder.meaning.MUSIC_FAMILIES).
MUSIC_MOODS = [
    ("Which mood best describes the recording?", "The music sounds {x}.", "music", "music mood", ("cheerful", "cheerless")),
    ("How does the track feel?", "The track feels {x}.", "music", "music mood", ("calm", "stormy")),
    ("What character does the performance have?", "The performance is {x}.", "music", "music mood",
     ("energetic", "lethargic")),
    ("What is the emotional tone of the piece?", "The piece sounds {x}.", "music", "music mood", ("tense", "relaxed")),
    ("What is the emotional tone of the piece?", "The piece sounds {x}.", "music", "music mood", ("sad", "glad")),
]


# Words WordNet puts in a seed's synset that, given as the answer, name something else to a listener (a cornet is
# another instrument, "a machine" is not "a car", a roar is not thunder): neither right nor used.
NOT_SYNONYMS = frozenset({"machine", "wheel", "trump", "eggbeater", "bowl", "roar", "roaring", "boom", "cornet",
                          "marimba", "toad", "toad frog", "step", "jitney", "charabanc", "double-decker"})


# Misspellings in WordNet's word lists ("unenrgetic" for unenergetic): never used as an answer.
MISSPELT = frozenset({"unenrgetic"})


def _descends(wn: WordNet, synset: Synset, anchor: Synset, depth: int = 14) -> bool:
    frontier = [synset]
    for _ in range(depth):
        if any(s.key == anchor.key for s in frontier):
            return True
        frontier = [h for s in frontier for h in wn.hypernyms(s)]
    return False


def _sense(wn: WordNet, seed_word: str, anchor: Synset | None) -> Synset:
    """The first sense under ``anchor``; "siren/3" picks WordNet's third sense of siren."""
    word, _, nth = seed_word.partition("/")
    if nth:
        return wn.synsets(word, "n")[int(nth) - 1]
    for s in wn.synsets(word, "n"):
        if anchor is None or _descends(wn, s, anchor):
            return s
    raise LookupError(f"WordNet has no noun sense of {word!r}" + (f" under {anchor.words[0]!r}" if anchor else ""))


@dataclass(frozen=True)
class Concept:
    """One answer of a domain, with what WordNet relates to it."""

    name: str                    # the seed's first word, the canonical answer
    synonyms: tuple[str, ...]    # other words of its synsets
    adjectives: tuple[str, ...]  # derived adjectives (happiness -> happy)
    hypernym: str                # the first word of its first hypernym
    antonyms: tuple[str, ...]    # nouns
    antonym_adjectives: tuple[str, ...]
    parents: frozenset           # hypernym synset keys, to find siblings
    gloss: str


def _concept(wn: WordNet, seed: str, anchor: Synset | None) -> Concept:
    words = [w.partition("/")[0] for w in seed.split("|")]
    synsets = [_sense(wn, w, anchor) for w in seed.split("|")]
    names = list(dict.fromkeys(x for s in synsets for x in s.words))
    antonyms = [s for syn in synsets for s in wn.antonym_synsets(syn)]
    return Concept(
        name=words[0],
        synonyms=tuple(x for x in names if x.lower() != words[0].lower() and x not in NOT_SYNONYMS),
        adjectives=tuple(dict.fromkeys(a for s in synsets for a in wn.derived(s, "a") if a != words[0])),
        hypernym=wn.hypernyms(synsets[0])[0].words[0],
        antonyms=tuple(dict.fromkeys(x for s in antonyms for x in s.words)),
        antonym_adjectives=tuple(dict.fromkeys(a for s in antonyms for a in wn.derived(s, "a"))),
        parents=frozenset(h.key for s in synsets for h in wn.hypernyms(s)),
        gloss=synsets[0].gloss.split(";")[0].strip(),
    )


@cache
def domain_concepts(name: str) -> dict[str, Concept]:
    """The concepts of a domain, read from the installed WordNet once per process."""
    wn = default_wordnet()
    d = DOMAINS[name]
    anchor = _sense(wn, d.anchor, None) if d.anchor else None
    out = {seed: _concept(wn, seed, anchor) for seed in d.seeds}
    # A synonym that is also another seed's name or synonym ("horn": trumpet and French horn) would be right and
    # wrong at once: drop it.
    seen: dict[str, int] = {}
    for c in out.values():
        for x in {c.name.lower(), *(y.lower() for y in c.synonyms)}:
            seen[x] = seen.get(x, 0) + 1
    # Antonymy is a relation between words, listed from one side only at times (sadness -> happiness, yet
    # happiness -> unhappiness): a seed whose antonyms name this one is an antonym of it too.
    def opposites(c: Concept) -> tuple[str, ...]:
        mine = {c.name, *c.synonyms}
        back = [o.name for o in out.values() if o is not c and mine & set(o.antonyms)]
        return tuple(dict.fromkeys([*c.antonyms, *back]))

    return {s: Concept(**{**c.__dict__, "synonyms": tuple(x for x in c.synonyms if seen[x.lower()] == 1),
                          "antonyms": opposites(c)})
            for s, c in out.items()}


@dataclass(frozen=True)
class Adjective:
    word: str
    synonyms: tuple[str, ...]
    similar: tuple[str, ...]     # common words of WordNet's satellite synsets
    antonym: str
    antonym_words: tuple[str, ...]


def _adj_synset(wn: WordNet, word: str, antonym: str) -> tuple[Synset, Synset]:
    for s in wn.synsets(word, "a"):
        for a in wn.antonym_synsets(s):
            if antonym in a.words:
                return s, a
    raise LookupError(f"WordNet lists no antonym {antonym!r} for an adjective sense of {word!r}")


@cache
def attribute(word: str, antonym: str) -> Adjective:
    wn = default_wordnet()
    s, a = _adj_synset(wn, word, antonym)
    sims = [w for sat in wn.related(s, "&") for w in sat.words if wn.is_common(w, sat)]
    anti = [w for w in a.words if w != antonym and w not in MISSPELT] + [
        w for sat in wn.related(a, "&") for w in sat.words if wn.is_common(w, sat)]
    syn = [w for w in s.words if w != word and w not in MISSPELT]
    return Adjective(word, tuple(syn), tuple(dict.fromkeys(x for x in sims if x not in syn and x != word)), antonym,
                     tuple(dict.fromkeys(x for x in anti if x not in (word, *syn))))


def _article(phrase: str, mass: bool, rng: random.Random) -> str:
    if mass or phrase[:1].isupper():
        return phrase
    art = "an" if phrase[0].lower() in "aeiou" else "a"
    return rng.choice([f"{art} {phrase}", f"{art} {phrase}", f"the {phrase}"])  # short answers may drop it


@dataclass
class MeaningQuestion:
    """A question with candidate phrases per content mode; ``frames`` turns a phrase into a sentence."""

    question: str
    reference: list[str]
    modality: str
    category: str
    family: str
    frames: dict[str, str]                  # frame key -> sentence with {x}
    pools: dict[str, list[tuple[str, str]]]  # mode -> (phrase, frame key)
    rationale: str = ""
    transcript: str = ""


def concept_question(domain: str, rng: random.Random) -> MeaningQuestion:
    d = DOMAINS[domain]
    concepts = domain_concepts(domain)
    seed = rng.choice(sorted(concepts))
    c = concepts[seed]
    mass = seed in d.mass
    others = [s for s in sorted(concepts) if s != seed]
    siblings = [s for s in others if concepts[s].parents & c.parents]
    wrong = rng.sample(siblings, min(2, len(siblings))) + rng.sample(others, 3)
    cohyp = [concepts[s].name for s in dict.fromkeys(wrong)][:3]
    art = lambda x, m=mass: _article(x, m, rng)  # noqa: E731
    pools = {
        "exact": [(art(c.name), "noun")],
        "synonym": [(art(x), "noun") for x in c.synonyms],
        "derived": [(x, "adj") for x in c.adjectives] if d.adj_frame else [],
        "hypernym": [(art(c.hypernym, False), "noun")] if d.hypernyms else [],
        "general": [(art(d.anchor.partition("/")[0], False), "noun")] if d.anchor and d.hypernyms else [],
        "antonym": [(x, "noun") for x in c.antonyms] + ([(x, "adj") for x in c.antonym_adjectives]
                                                       if d.adj_frame else []),
        "cohyponym": [(art(x, _is_mass(d, x, concepts)), "noun") for x in cohyp],
    }
    frames = {"noun": d.frame, "adj": d.adj_frame or d.frame}
    reference = [c.name] + ([c.synonyms[0]] if c.synonyms and rng.random() < 0.3 else [])
    rationale = f"What is heard fits this description: {c.gloss}." if rng.random() < 0.3 else ""
    return MeaningQuestion(rng.choice(d.questions), reference, d.modality, d.category, f"lexical:{domain}", frames,
                           pools, rationale)


def _is_mass(d: Domain, name: str, concepts: dict[str, Concept]) -> bool:
    return any(concepts[s].name == name for s in d.mass)


def attribute_question(rng: random.Random, table: list = ATTRIBUTES) -> MeaningQuestion:
    question, frame, modality, category, pair = rng.choice(table)
    right, wrong = pair if rng.random() < 0.5 else pair[::-1]
    a = attribute(right, wrong)
    pools = {"exact": [(a.word, "adj")], "synonym": [(x, "adj") for x in a.synonyms],
             "similar": [(x, "adj") for x in a.similar], "antonym": [(a.antonym, "adj")],
             "antonym_similar": [(x, "adj") for x in a.antonym_words]}
    return MeaningQuestion(question, [a.word], modality, category, f"lexical:{category}", {"adj": frame}, pools)


_CITY_WORDS = {"city", "port", "town", "national capital", "state capital", "provincial capital"}


def _is_city(wn: WordNet, s: Synset) -> bool:
    return any(w in _CITY_WORDS for h in wn.related(s, "@i") for w in h.words)


@cache
def capitals() -> list[tuple[str, tuple[str, ...], str, tuple[str, ...]]]:
    """(capital, its other names, country, other cities of that country) for WordNet's national capitals whose
    country lists them as a part; the other cities are the country's parts, and its parts' parts, that WordNet
    calls a city, port or town (Sydney, part of New South Wales, part of Australia)."""
    wn = default_wordnet()
    out = []
    for cap in wn.related(wn.synsets("national capital")[0], "~i"):
        countries = [c for c in wn.related(cap, "#p") if c.words[0][:1].isupper()]
        if not countries:
            continue
        country = countries[0]
        parts = wn.related(country, "%p")
        cities = [s for s in parts + [x for p in parts for x in wn.related(p, "%p")] if _is_city(wn, s)]
        others = tuple(dict.fromkeys(s.words[0] for s in cities if s.key != cap.key))
        names = tuple(w for w in cap.words[1:] if "capital" not in w.lower())
        out.append((cap.words[0], names, country.words[0], others))
    return sorted(out)


def capital_question(rng: random.Random) -> MeaningQuestion:
    table = capitals()
    capital, names, country, cities = rng.choice(table)
    other_capitals = [c for c, *_ in table if c != capital]
    wrong = rng.sample(cities, min(2, len(cities))) + rng.sample(other_capitals, 3 - min(2, len(cities)))
    pools = {"exact": [(capital, "is")], "synonym": [(x, "is") for x in names],
             "longer": [(f"{capital} is the capital of {country}.", "text"),
                        (f"The capital of {country} is {capital}, not its largest city.", "text")],
             "cohyponym": [(x, "is") for x in wrong]}
    question = f"what is the capital of {country.lower()}" if rng.random() < 0.5 else \
        f"What is the capital of {country}?"
    return MeaningQuestion(question, [capital], "text", "geography", "lexical:capital",
                           {"is": f"The capital of {country} is {{x}}.", "text": "{x}"}, pools)
