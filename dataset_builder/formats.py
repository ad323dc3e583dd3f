"""Questions about numbers, years, dates, measures and names, for the meaning items of stage s1.

The same value written another way is right ("1945", "nineteen forty-five", "in 1945"; "3", "three", "3 times";
"12 km", "twelve kilometres", "12,000 metres"; a date in another format or inside a longer sentence; a surname
for a full name). A value off by one (the year before, one count more, the next day), the right number with
another unit ("12 miles" for 12 km) and a tenfold slip are wrong. Under-specific answers (the decade for a year,
the month for a date, the first name for a full name) are where raters disagree. Names are invented, as in
:mod:`dataset_builder.synthetic`.
"""

from __future__ import annotations

import random

from .lexical import MeaningQuestion
from .synthetic import _MONTHS, _coin, _ordinal, _person, number_words


def year_words(y: int) -> str:
    """How a year is read aloud: 1945 -> 'nineteen forty-five', 1905 -> 'nineteen oh five', 2008 -> 'two
    thousand eight', 1900 -> 'nineteen hundred'."""
    if 2000 <= y < 2010:
        return number_words(y)
    hi, lo = divmod(y, 100)
    tail = "hundred" if lo == 0 else f"oh {number_words(lo)}" if lo < 10 else number_words(lo)
    return f"{number_words(hi)} {tail}"


def _year_forms(y: int) -> list[str]:
    return [str(y), year_words(y), f"in {y}", f"the year {y}", f"{y} AD", f"in {year_words(y)}"]


def year_question(rng: random.Random) -> MeaningQuestion:
    thing = f"the {_coin(rng)} {rng.choice(['treaty', 'expedition', 'strike', 'festival', 'war', 'flood'])}"
    verb = {"treaty": "signed", "expedition": "return", "strike": "end", "festival": "begin", "war": "end",
            "flood": "happen"}[thing.split()[-1]]
    aux = "was" if verb == "signed" else "did"
    question = f"in what year {aux} {thing} {verb}" if rng.random() < 0.5 else f"When {aux} {thing} {verb}?"
    y = rng.randint(1600, 2020)
    pools = {"exact": [(str(y), "in")], "format": [(x, "plain") for x in _year_forms(y)[1:]],
             "longer": [(f"{thing[0].upper() + thing[1:]} dates from {y}, as the records of the time show.", "text"),
                        (f"It was in {year_words(y)}.", "text")],
             "off_by_one": [(x, "plain") for d in (-1, 1) for x in _year_forms(y + d)[:3]],
             "tenfold": [(str(y + rng.choice([-1, 1]) * rng.randint(10, 60)), "in")],
             "under_specific": [(f"the {y // 10 * 10}s", "plain"), (f"the {_ordinal(y // 100 + 1)} century", "plain")]}
    frames = {"in": "It happened in {x}.", "plain": "It was {x}.", "text": "{x}"}
    reference = [str(y)] + ([f"in {y}"] if rng.random() < 0.2 else [])
    return MeaningQuestion(question, reference, "text", "history", "format:year", frames, pools)


def _count_forms(n: int, unit: str) -> list[str]:
    return [str(n), number_words(n), f"{n} {unit}", f"{number_words(n)} {unit}"]


_COUNT_QUESTIONS = [("How many times does the dog bark?", "The dog barks {x}."),
                    ("How many times does the bell ring?", "The bell rings {x}."),
                    ("How many times does the door slam in the clip?", "The door slams {x}."),
                    ("How many times does the speaker cough?", "The speaker coughs {x}."),
                    ("How many times is the drum struck?", "The drum is struck {x}.")]


def count_question(rng: random.Random) -> MeaningQuestion:
    question, frame = rng.choice(_COUNT_QUESTIONS)
    n = rng.randint(1, 12)
    unit = "time" if n == 1 else "times"
    wrong = [m for m in (n - 1, n + 1) if m >= 1]
    pools = {"exact": [(str(n), "count")], "format": [(x, "count") for x in _count_forms(n, unit)[1:]],
             "longer": [(f"I counted {number_words(n)} in total.", "text"),
                        (f"It happens exactly {n} {unit} in the recording.", "text")],
             "off_by_one": [(x, "count") for m in wrong for x in _count_forms(m, "time" if m == 1 else "times")],
             "tenfold": [(str(n * 10), "count")]}
    reference = [str(n) if rng.random() < 0.6 else number_words(n)]
    return MeaningQuestion(question, reference, "sound", "counting", "format:count", {"count": frame, "text": "{x}"},
                           pools)


# unit: (singular, plural, symbol, other spellings, (smaller unit plural, factor) or None, a wrong unit)
UNITS = {
    "km": ("kilometre", "kilometres", "km", ["kilometers"], ("metres", 1000), "miles"),
    "kg": ("kilogram", "kilograms", "kg", ["kilos"], ("grams", 1000), "pounds"),
    "min": ("minute", "minutes", "min", ["mins"], ("seconds", 60), "hours"),
    "s": ("second", "seconds", "s", ["secs"], ("milliseconds", 1000), "minutes"),
    "Hz": ("hertz", "hertz", "Hz", ["cycles per second"], None, "kilohertz"),
    "BPM": ("beat per minute", "beats per minute", "BPM", ["bpm"], None, "beats per second"),
    "dB": ("decibel", "decibels", "dB", ["decibel units"], None, "hertz"),
    "°C": ("degree Celsius", "degrees Celsius", "°C", ["degrees centigrade"], None, "degrees Fahrenheit"),
}
_MEASURE_QUESTIONS = {
    "km": ("how long is the {t} tunnel", "The tunnel is {x} long.", "text", "quantity"),
    "kg": ("how much does the {t} bell weigh", "The bell weighs {x}.", "text", "quantity"),
    "min": ("How long does the {t} recording last?", "The recording lasts {x}.", "sound", "duration"),
    "s": ("How long is the pause before the {t} chime?", "The pause lasts {x}.", "sound", "duration"),
    "Hz": ("What is the frequency of the {t} test tone?", "The tone is at {x}.", "sound", "pitch"),
    "BPM": ("What is the tempo of the {t} track?", "The tempo is {x}.", "music", "tempo"),
    "dB": ("How loud is the {t} alarm?", "The alarm reaches {x}.", "sound", "loudness"),
    "°C": ("what is the average temperature in {t} in july", "It averages {x}.", "text", "geography"),
}


def _measure_forms(n: int, key: str) -> list[str]:
    sing, plural, symbol, other, _, _ = UNITS[key]
    name = sing if n == 1 else plural
    sep = "" if symbol == "°C" else " "
    return [f"{n}{sep}{symbol}", f"{n} {name}", f"{number_words(n)} {name}", *(f"{n} {o}" for o in other)]


def measure_question(rng: random.Random) -> MeaningQuestion:
    key = rng.choice(sorted(UNITS))
    template, frame, modality, category = _MEASURE_QUESTIONS[key]
    n = rng.randint(2, 90)
    sing, plural, symbol, _, smaller, wrong_unit = UNITS[key]
    forms = _measure_forms(n, key)
    right = forms[1:] + ([f"{n * smaller[1]:,} {smaller[0]}"] if smaller else [])
    pools = {"exact": [(forms[0], "frame")], "format": [(x, "frame") for x in right],
             "off_by_one": [(x, "frame") for d in (-1, 1) for x in _measure_forms(n + d, key)[:2]],
             "other_unit": [(f"{n} {wrong_unit}", "frame")], "tenfold": [(_measure_forms(n * 10, key)[0], "frame")]}
    question = template.format(t=_coin(rng))
    reference = [forms[0] if rng.random() < 0.5 else forms[1]]
    return MeaningQuestion(question, reference, modality, category, f"format:{key}", {"frame": frame}, pools)


def _date_forms(y: int, m: int, d: int) -> list[str]:
    month = _MONTHS[m - 1]
    return [f"{d} {month} {y}", f"{month} {d}, {y}", f"{y}-{m:02d}-{d:02d}", f"the {_ordinal(d)} of {month} {y}",
            f"{month} {_ordinal(d)}, {y}", f"{month[:3]}. {d}, {y}"]


def date_question(rng: random.Random) -> MeaningQuestion:
    org = f"the {_coin(rng)} {rng.choice(['Observatory', 'Library', 'Museum', 'Bridge'])}"
    y, m, d = rng.randint(1800, 2020), rng.randint(1, 12), rng.randint(2, 27)
    forms = _date_forms(y, m, d)
    pools = {"exact": [(forms[0], "on")], "format": [(x, "on") for x in forms[1:]],
             "longer": [(f"{org[0].upper() + org[1:]} opened on {rng.choice(forms)}, after four years of building "
                         f"work.", "text"), (f"It was on {rng.choice(forms)}, a {rng.choice(['cold', 'rainy', 'bright'])} "
                                           f"day.", "text")],
             "off_by_one": [(_date_forms(y, m, d + dd)[k], "on") for dd in (-1, 1) for k in (0, 1)]
             + [(_date_forms(y + dy, m, d)[0], "on") for dy in (-1, 1)],
             "under_specific": [(f"{_MONTHS[m - 1]} {y}", "in"), (str(y), "in")]}
    frames = {"on": f"{org[0].upper() + org[1:]} opened on {{x}}.", "in": f"{org[0].upper() + org[1:]} opened in {{x}}.",
              "text": "{x}"}
    question = f"when did {org} open" if rng.random() < 0.5 else f"On what date did {org} open?"
    return MeaningQuestion(question, [forms[rng.choice([0, 1])]], "text", "history", "format:date", frames, pools)


def name_question(rng: random.Random) -> MeaningQuestion:
    first, middle, last = _person(rng)
    other = _person(rng)
    title = f"The {_coin(rng)} {rng.choice(['Letters', 'Variations', 'Chronicle', 'Suite'])}"
    full = f"{first} {last}"
    pools = {"exact": [(full, "by")],
             "format": [(last, "by"), (f"{first[0]}. {last}", "by"), (f"{last}, {first}", "by")]
             + ([(f"{first} {middle} {last}", "by")] if middle else []),
             "longer": [(f"It was written by {full}, early in a long career.", "text"),
                        (f"{last} wrote it, as the first edition says.", "text")],
             "cohyponym": [(f"{first} {other[2]}", "by"), (f"{other[0]} {other[2]}", "by")],
             "under_specific": [(first, "by")]}
    frames = {"by": f"{title} was written by {{x}}.", "text": "{x}"}
    question = f"who wrote {title.lower()}" if rng.random() < 0.5 else f"Who wrote {title}?"
    return MeaningQuestion(question, [full], "text", "literature", "format:name", frames, pools)


# Musical keys: the same key written another way is right ("E-flat major", "E♭ major", "Eb major", "Ebm" for E-flat
# minor); the other mode of the same tonic is its opposite ("A major" for A minor), another tonic of the same mode is
# a same-kind wrong answer, a semitone off is a near miss, and the enharmonic spelling ("D-sharp minor" for E-flat
# minor) is where raters disagree. E-sharp, B-sharp, F-flat and C-flat are left out: they read as other keys.
_ACCIDENTALS = {"": ("", "", "", ""), "flat": ("-flat", " flat", "♭", "b"), "sharp": ("-sharp", " sharp", "♯", "#")}
_LETTERS = "CDEFGAB"
_SEMITONE = {"C": 0, "D": 2, "E": 4, "F": 5, "G": 7, "A": 9, "B": 11}


def _key_spellings(letter: str, accidental: str, mode: str) -> list[str]:
    word, spaced, symbol, ascii_ = _ACCIDENTALS[accidental]
    forms = [f"{letter}{word} {mode}", f"{letter}{spaced} {mode}", f"{letter}{symbol} {mode}",
             f"{letter}{ascii_} {mode}", f"{letter}{ascii_} {mode[:3]}"]
    if mode == "minor":
        forms.append(f"{letter}{ascii_}m")
    return list(dict.fromkeys(forms))


def _valid_key(letter: str, accidental: str) -> bool:
    return (letter + accidental) not in ("Esharp", "Bsharp", "Fflat", "Cflat")


def _enharmonic(letter: str, accidental: str) -> tuple[str, str] | None:
    if not accidental:
        return None
    pitch = (_SEMITONE[letter] + (1 if accidental == "sharp" else -1)) % 12
    for other in _LETTERS:
        for acc in ("flat", "sharp"):
            if acc != accidental and (_SEMITONE[other] + (1 if acc == "sharp" else -1)) % 12 == pitch:
                return other, acc
    return None


_KEY_QUESTIONS = ["What key is the {t} piece written in?", "In which key does the {t} ensemble play the piece?",
                  "Name the key of the {t} recording.", "what key is the {t} sonata in"]
_MODE_QUESTIONS = ["Is the {t} track in a major or a minor key?", "Does the {t} piece use a major or a minor mode?"]


def key_question(rng: random.Random) -> MeaningQuestion:
    mode = rng.choice(["major", "minor"])
    other_mode = "minor" if mode == "major" else "major"
    if rng.random() < 0.3:  # the mode alone
        pools = {"exact": [(mode, "mode")], "format": [(f"a {mode} key", "text"), (f"in {mode}", "text"),
                                                        (f"the {mode} mode", "mode")],
                 "longer": [(f"It is in a {mode} key, as the opening chords make clear.", "text")],
                 "antonym": [(other_mode, "mode"), (f"a {other_mode} key", "text")]}
        frames = {"mode": "The piece is in {x}.", "text": "{x}"}
        return MeaningQuestion(rng.choice(_MODE_QUESTIONS).format(t=_coin(rng)), [mode], "music", "key",
                               "format:key", frames, pools)
    letter = rng.choice(_LETTERS)
    accidental = rng.choices(["", "flat", "sharp"], weights=[0.6, 0.25, 0.15])[0]
    if not _valid_key(letter, accidental):
        accidental = ""
    forms = _key_spellings(letter, accidental, mode)
    semitone = [(letter, a) for a in _ACCIDENTALS if a != accidental and _valid_key(letter, a)]
    others = rng.sample([x for x in _LETTERS if x != letter], 2)
    enharmonic = _enharmonic(letter, accidental)
    pools = {"exact": [(forms[0], "in")], "format": [(x, "in") for x in forms[1:]] + [(f"the key of {forms[0]}", "in")],
             "longer": [(f"It is written in {rng.choice(forms[:3])}, which suits the strings.", "text")],
             "antonym": [(x, "in") for x in _key_spellings(letter, accidental, other_mode)[:3]],
             "cohyponym": [(_key_spellings(x, "", mode)[0], "in") for x in others],
             "off_by_one": [(_key_spellings(x, a, mode)[0], "in") for x, a in semitone],
             "similar": [(_key_spellings(*enharmonic, mode)[0], "in")] if enharmonic else [],
             "under_specific": [(mode, "in"), (f"a {mode} key", "text")]}
    frames = {"in": "The piece is in {x}.", "text": "{x}"}
    return MeaningQuestion(rng.choice(_KEY_QUESTIONS).format(t=_coin(rng)), [forms[0]], "music", "key", "format:key",
                           frames, pools)
