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
