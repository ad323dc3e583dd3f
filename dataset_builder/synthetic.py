"""Stage s1: synthetic rated data, generated from scratch (standard library + numpy, seeded).

Why it looks like this: the judge trained on s1 must rate *correctness*, not answer *style*. So
every question is answered by several simulated answering systems with different styles (short
spans, one sentence, long verbose text, hedging, weak) and each style occurs with right, partly
right and wrong content. The simulated panel rates from the latent correctness of the content
only; style never enters the rating except through that correctness.

Two question families are mixed:

* audio-flavoured questions (sound / music / speech) with a text rationale standing in for the
  audio, sometimes a transcript;
* general-knowledge questions in open-domain-QA style (often lower case without '?'), about
  invented people, places, works and organisations, with references of 1 to 12+ aliases.

All names are invented (syllable generator + short word lists written for this module), so a
judge must compare the candidate with the reference instead of recalling world knowledge.

Candidate content modes and their latent quality (the panel's mean before bias and noise):
exact 5.0, alias / paraphrase (other alias, number in words, other date format, surname only,
unlisted synonym) ~4.8, correct but verbose ~4.7, correct with a wrong side detail ~3.8,
partial (first name only, year without month, one of two items, region instead of town, broader
class) ~3.0, hedge between right and wrong ~2.3, a list naming the right answer among wrong ones ~2.0,
close numeric miss ~1.6, wrong entity of the same kind ~1.1, mentions the right answer only to reject it
("It is Sydney, not Canberra as many think.") ~1.2, the right answer asserted against a wrong one
("It is Canberra, not Sydney as many think.") ~4.6, the answer to a neighbouring question (another item's
right answer) 1.0, refusal 1.0. The two "reject" modes use the same sentence templates, so only which answer
is asserted tells them apart. References sometimes carry long alias lists (other forms of the same answer),
as trivia datasets do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from orca_io.schema import make_record

# ----------------------------------------------------------------------------- vocabulary

_SYL = ["ka", "ve", "lor", "min", "tha", "dor", "ri", "sen", "mo", "bal", "qui", "zel", "an", "tor", "el",
        "ia", "ros", "ven", "ul", "mar", "ket", "osa", "bren", "vi", "dal", "nor", "pe", "sta", "gu", "lin"]
_FIRST = ["Marta", "Tomasz", "Aiko", "Ravi", "Elena", "Kwame", "Ingrid", "Mateo", "Leila", "Oskar", "Priya",
          "Jonas", "Amara", "Felix", "Noor", "Hugo", "Sina", "Diego", "Yara", "Emil", "Chiara", "Tariq",
          "Freya", "Kenji", "Lucia", "Anton", "Zanele", "Pavel", "Ines", "Rohan", "Maeve", "Idris"]
_MIDDLE = ["Ilse", "James", "Rosa", "Kai", "Maria", "Lee", "Ann", "Jun", "Elif", "Paul"]
_ADJ = ["Silver", "Quiet", "Northern", "Broken", "Hidden", "Last", "Crimson", "Paper", "Distant", "Winter",
        "Golden", "Hollow", "Endless", "Salt", "Glass", "Iron"]
_NOUN = ["Harbor", "Orchard", "Lantern", "Signal", "River", "Garden", "Bridge", "Letter", "Machine", "Season",
         "Tide", "Compass", "Meadow", "Furnace", "Archive", "Chorus"]
_ORG_KIND = ["University", "Rail Company", "Symphony Orchestra", "Football Club", "Observatory",
             "Museum of Art", "Shipping Line", "Botanical Society", "Film Studio", "Public Library"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]

# Audio concepts: synonyms (first is canonical), broader class for partial answers, and cues
# the rationale uses to describe what is heard.
_SOUNDS = {
    "dog barking": (["a dog barking", "dog", "barking dog"], "an animal", "sharp repeated barks with short pauses"),
    "church bells": (["church bells", "bells ringing", "a bell tower"], "a musical sound", "slow metallic strikes with a long ringing decay"),
    "rain": (["rain", "rainfall", "raindrops"], "weather", "dense broadband patter that rises and falls"),
    "car horn": (["a car horn", "car honking", "horn"], "traffic", "a loud sustained two-tone blast"),
    "train passing": (["a train passing", "train", "railway train"], "a vehicle", "rhythmic clatter growing louder then fading"),
    "baby crying": (["a baby crying", "infant crying", "crying baby"], "a human sound", "high-pitched wailing in short bursts"),
    "thunder": (["thunder", "a thunderclap", "thunderstorm"], "weather", "a deep rumble rolling for several seconds"),
    "typing": (["typing on a keyboard", "keyboard typing", "typing"], "an office sound", "fast irregular plastic clicks"),
    "birdsong": (["birds singing", "birdsong", "bird chirping"], "an animal", "bright warbling phrases at high pitch"),
    "running water": (["running water", "a stream", "flowing water"], "water", "steady gurgling with bubbling detail"),
    "applause": (["applause", "people clapping", "clapping"], "a crowd sound", "many overlapping claps forming a wash"),
    "siren": (["a siren", "an ambulance siren", "emergency siren"], "traffic", "a wailing tone sweeping up and down"),
}
_INSTRUMENTS = {
    "violin": (["violin", "a violin", "fiddle"], "a string instrument", "a bowed, bright string timbre with vibrato"),
    "cello": (["cello", "a cello", "violoncello"], "a string instrument", "a low bowed string voice"),
    "piano": (["piano", "a piano", "grand piano"], "a keyboard instrument", "struck notes with sustain pedal resonance"),
    "flute": (["flute", "a flute", "transverse flute"], "a wind instrument", "a breathy, pure tone in the upper register"),
    "trumpet": (["trumpet", "a trumpet", "brass trumpet"], "a brass instrument", "a bright, brassy attack"),
    "acoustic guitar": (["acoustic guitar", "guitar", "a steel-string guitar"], "a string instrument", "plucked steel strings with body resonance"),
    "saxophone": (["saxophone", "a sax", "tenor saxophone"], "a wind instrument", "a reedy, husky tone"),
    "drums": (["drums", "a drum kit", "drum set"], "percussion", "kick, snare and cymbal hits"),
    "harp": (["harp", "a harp", "concert harp"], "a string instrument", "cascading plucked arpeggios"),
    "accordion": (["accordion", "an accordion", "squeezebox"], "a keyboard instrument", "a reedy tone that swells with the bellows"),
}
_GENRES = {
    "jazz": (["jazz", "jazz music", "swing jazz"], "popular music", "swung rhythm and improvised solos"),
    "heavy metal": (["heavy metal", "metal", "metal music"], "rock music", "distorted guitars and fast double-kick drums"),
    "classical": (["classical music", "classical", "orchestral music"], "instrumental music", "an orchestra with strings and woodwinds"),
    "reggae": (["reggae", "reggae music", "roots reggae"], "popular music", "offbeat guitar skank and a heavy bass line"),
    "electronic dance": (["electronic dance music", "EDM", "dance music"], "electronic music", "four-on-the-floor kick and synthesizer build-ups"),
    "folk": (["folk music", "folk", "acoustic folk"], "traditional music", "acoustic guitar and a plain sung melody"),
    "hip hop": (["hip hop", "rap", "hip-hop music"], "popular music", "rhymed spoken vocals over a drum loop"),
}
_EMOTIONS = {
    "angry": (["angry", "anger", "furious"], "a negative emotion", "raised volume, clipped words and a tense voice"),
    "happy": (["happy", "joyful", "cheerful"], "a positive emotion", "a bright voice with rising intonation and laughter"),
    "sad": (["sad", "sadness", "sorrowful"], "a negative emotion", "slow speech, low pitch and long pauses"),
    "surprised": (["surprised", "surprise", "astonished"], "a strong emotion", "a sudden pitch jump and a sharp intake of breath"),
    "calm": (["calm", "relaxed", "composed"], "a neutral state", "an even pace and steady pitch"),
    "fearful": (["fearful", "afraid", "scared"], "a negative emotion", "a trembling voice and quick breathing"),
}
_SCENES = {
    "train station": (["a train station", "railway station", "train platform"], "a public place", "announcements over a PA and rolling wheels"),
    "kitchen": (["a kitchen", "kitchen", "home kitchen"], "indoors", "sizzling oil, clinking cutlery and a running tap"),
    "beach": (["a beach", "the seaside", "beach"], "outdoors", "breaking waves and distant gulls"),
    "classroom": (["a classroom", "school classroom", "classroom"], "indoors", "a teacher's voice and scraping chairs"),
    "forest": (["a forest", "woods", "woodland"], "outdoors", "rustling leaves, birds and a woodpecker"),
    "restaurant": (["a restaurant", "a cafe", "restaurant dining room"], "a public place", "chatter, plates and an espresso machine"),
    "airport": (["an airport", "airport terminal", "airport"], "a public place", "jet engines and boarding calls"),
}
_LANGS = {
    "Spanish": (["Spanish", "Castilian", "Spanish language"], "a Romance language", "rolled r's and syllable-timed rhythm"),
    "Japanese": (["Japanese", "Japanese language", "Nihongo"], "an Asian language", "mora-timed rhythm and pitch accent"),
    "German": (["German", "German language", "Deutsch"], "a Germanic language", "compound words and final devoicing"),
    "Hindi": (["Hindi", "Hindi language", "Hindustani"], "an Indo-Aryan language", "retroflex consonants and aspirated stops"),
    "French": (["French", "French language", "francais"], "a Romance language", "nasal vowels and liaison between words"),
    "Swahili": (["Swahili", "Kiswahili", "Swahili language"], "a Bantu language", "open syllables and penultimate stress"),
}

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n: int) -> str:
    """English words for 0 <= n < 1,000,000 (e.g. 291 -> 'two hundred ninety-one')."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else "-" + _ONES[n % 10])
    if n < 1000:
        return _ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + number_words(n % 100))
    return number_words(n // 1000) + " thousand" + ("" if n % 1000 == 0 else " " + number_words(n % 1000))


def _ordinal(d: int) -> str:
    return f"{d}{'th' if 10 <= d % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(d % 10, 'th')}"


# ----------------------------------------------------------------------------- items

@dataclass
class Item:
    """A synthetic question with everything needed to realise right and wrong candidates."""

    question: str
    kind: str            # name | number | date | year | place | concept | members | pair
    value: object        # the correct value in structured form
    wrong: list          # wrong values of the same kind
    subject: str         # noun phrase the sentence frames talk about
    frame: str           # sentence with {x} for the answer, e.g. "{subject} was written by {x}."
    modality: str
    category: str
    rationale: str = ""
    transcript: str = ""
    reference: list[str] = field(default_factory=list)
    fillers: list[str] = field(default_factory=list)


def _coin(rng: random.Random, n: int | None = None) -> str:
    return "".join(rng.choice(_SYL) for _ in range(n or rng.choice((2, 2, 3)))).capitalize()


def _person(rng):
    return (rng.choice(_FIRST), rng.choice(_MIDDLE) if rng.random() < 0.3 else None, _coin(rng))


def _title(rng):
    return f"The {rng.choice(_ADJ)} {rng.choice(_NOUN)}"


def _nq_style(rng, text: str) -> str:
    """Half the knowledge questions look like NQ queries: lower case, no question mark."""
    if rng.random() < 0.5:
        return text[0].upper() + text[1:] + "?"
    return text.lower()


def _concept_item(rng, table, modality, category, question, frame, subject, cue_fmt):
    key = rng.choice(sorted(table))
    syn, broad, cue = table[key]
    wrong = rng.sample([k for k in sorted(table) if k != key], 3)
    rationale = cue_fmt.format(cue=cue) if rng.random() < 0.75 else ""
    return Item(question, "concept", (key, table), wrong, subject, frame, modality, category, rationale)


def _gen_sound(rng):
    return _concept_item(rng, _SOUNDS, "sound", "sound event", rng.choice([
        "What is the main sound source in the recording?", "Which sound event is heard in the clip?",
        "Identify the sound in this audio."]), "The main sound in the clip is {x}.", "the clip",
        "The clip contains {cue}, over faint background noise.")


def _gen_instrument(rng):
    return _concept_item(rng, _INSTRUMENTS, "music", "instrument", rng.choice([
        "Which instrument plays the melody?", "What instrument carries the main theme in this excerpt?"]),
        "The melody is played on {x}.", "the melody", "The melody has {cue}; the accompaniment stays soft.")


def _gen_genre(rng):
    return _concept_item(rng, _GENRES, "music", "genre", rng.choice([
        "What genre is this music?", "Which musical genre best describes the track?"]),
        "The track is {x}.", "the track", "The track features {cue}.")


def _gen_emotion(rng):
    it = _concept_item(rng, _EMOTIONS, "speech", "speaker emotion", rng.choice([
        "What emotion does the speaker convey?", "How does the speaker feel?"]),
        "The speaker sounds {x}.", "the speaker", "The speaker uses {cue}.")
    if rng.random() < 0.4:
        it.transcript = rng.choice(["I told you this would happen, and nobody listened.",
                                    "We finally got the results back this morning.",
                                    "Please, just wait here until I come back.",
                                    "I can't believe you remembered after all this time."])
    return it


def _gen_scene(rng):
    return _concept_item(rng, _SCENES, rng.choice(["sound", "mix-sound-speech"]), "acoustic scene", rng.choice([
        "Where was this recording most likely made?", "What is the acoustic scene of the clip?"]),
        "The recording was made in {x}.", "the recording", "One hears {cue}.")


def _gen_language(rng):
    it = _concept_item(rng, _LANGS, "speech", "language identification", rng.choice([
        "What language is the speaker using?", "Which language is spoken in the audio?"]),
        "The speaker is speaking {x}.", "the speaker", "The speech has {cue}.")
    return it


def _gen_count(rng):
    key = rng.choice(sorted(_SOUNDS))
    n = rng.randint(2, 14)
    name = _SOUNDS[key][0][0].removeprefix("a ").removeprefix("an ")
    times = ", ".join(f"0:{rng.randint(1, 59):02d}" for _ in range(min(n, 4)))
    rationale = f"The {name} occurs {n} times, first around {times}." if rng.random() < 0.7 else ""
    return Item(f"How many times is the {name} heard in the clip?", "number", (n, "times"),
                [], "the count", f"The {name} is heard {{x}} in the clip.", "sound", "counting", rationale)


def _gen_tempo(rng):
    n = rng.randrange(60, 181, 2)
    return Item("What is the tempo of the piece in beats per minute?", "number", (n, "BPM"), [],
                "the tempo", "The tempo is {x}.", "music", "tempo",
                f"The kick drum repeats every {60 / n:.2f} seconds." if rng.random() < 0.7 else "")


def _gen_speech_time(rng):
    h, m = rng.randint(1, 11), rng.choice([0, 15, 30, 45])
    who = rng.choice(_FIRST)
    spoken = f"{number_words(h)}{'' if m == 0 else ' ' + number_words(m)}"
    it = Item(f"At what time does {who} say the meeting starts?", "clock", (h, m), [], "the meeting",
              "The meeting starts at {x}.", "speech", "speech content",
              transcript=f"{who} here. Just a reminder that the meeting starts at {spoken} this afternoon.")
    return it


def _gen_author(rng):
    title = _title(rng)
    return Item(_nq_style(rng, f"who wrote {title.lower() if rng.random() < 0.5 else title}"), "name", _person(rng),
                [_person(rng) for _ in range(3)], title, f"{title} was written by {{x}}.", "text", "literature")


def _gen_founded(rng):
    org = f"the {_coin(rng)} {rng.choice(_ORG_KIND)}"
    y = rng.randint(1780, 2015)
    if rng.random() < 0.5:
        return Item(_nq_style(rng, f"when was {org} founded"), "year", y, [], org,
                    f"{org[0].upper() + org[1:]} was founded in {{x}}.", "text", "history")
    return Item(_nq_style(rng, f"on what date did {org} open"), "date", (y, rng.randint(1, 12), rng.randint(1, 28)),
                [], org, f"{org[0].upper() + org[1:]} opened on {{x}}.", "text", "history")


def _gen_place(rng):
    landmark = f"the {_coin(rng)} {rng.choice(['Bridge', 'Cathedral', 'Lighthouse', 'Dam', 'Opera House', 'Tower'])}"
    value = (_coin(rng), _coin(rng) + rng.choice(["ia", "land", "a", " Province"]))
    wrong = [(_coin(rng), value[1] if rng.random() < 0.4 else _coin(rng) + "ia") for _ in range(3)]
    return Item(_nq_style(rng, f"where is {landmark} located"), "place", value, wrong, landmark,
                f"{landmark[0].upper() + landmark[1:]} is located in {{x}}.", "text", "geography")


def _gen_quantity(rng):
    thing = f"the {_coin(rng)} {rng.choice(['series', 'league', 'parliament', 'festival'])}"
    unit = {"series": "episodes", "league": "teams", "parliament": "seats", "festival": "stages"}[thing.split()[-1]]
    n = rng.choice([rng.randint(3, 30), rng.randint(31, 400)])
    return Item(_nq_style(rng, f"how many {unit} are there in {thing}"), "number", (n, unit), [], thing,
                f"There are {{x}} in {thing}.", "text", "quantity")


def _gen_members(rng):
    band = f"the {rng.choice(_ADJ)} {rng.choice(_NOUN)}s"
    k = rng.choice([2, 3, 4, 5, 6, 8, 10, 12])
    members = [_person(rng) for _ in range(k)]
    return Item(_nq_style(rng, f"who is a member of {band}" if rng.random() < 0.5 else f"who plays in {band}"),
                "members", members, [_person(rng) for _ in range(3)], band, f"{{x}} is a member of {band}.",
                "text", "music trivia")


def _gen_pair(rng):
    a, b = rng.sample(sorted(_INSTRUMENTS), 2)
    wrong = rng.sample([k for k in sorted(_INSTRUMENTS) if k not in (a, b)], 3)
    return Item("Which two instruments are playing?", "pair", (a, b), wrong, "the duet",
                "The duet is played by {x}.", "music", "instrument",
                f"Two voices alternate: {_INSTRUMENTS[a][2]}, and {_INSTRUMENTS[b][2]}." if rng.random() < 0.7 else "")


_GENERATORS = [
    (_gen_sound, 3), (_gen_instrument, 2), (_gen_genre, 1), (_gen_emotion, 2), (_gen_scene, 2),
    (_gen_language, 1), (_gen_count, 2), (_gen_tempo, 1), (_gen_speech_time, 1), (_gen_pair, 1),
    (_gen_author, 3), (_gen_founded, 3), (_gen_place, 2), (_gen_quantity, 2), (_gen_members, 3),
]

_FILLERS = [
    "This is well documented in several sources.", "It is a detail many listeners notice right away.",
    "Of course, recordings and records can vary slightly.", "I hope this helps answer your question.",
    "The context makes this fairly clear.", "There is more background information available if you need it.",
    "Several accounts agree on this point.", "It is worth mentioning that the surrounding details are consistent.",
]
_REFUSALS = [
    "I'm sorry, but I can't determine that from the information available.",
    "As an AI language model, I don't have access to that information.",
    "It is not possible to tell from this.", "I don't know.",
]
_AUDIO_REFUSALS = ["The audio is too unclear for me to answer this question.",
                   "I cannot make out enough of the recording to say."]


# ----------------------------------------------------------------------------- realising answers

def _name_str(p, style="full"):
    first, middle, last = p
    if style == "full":
        return f"{first} {last}"
    if style == "middle":
        return f"{first} {middle} {last}" if middle else f"{first} {last}"
    if style == "initial":
        return f"{first[0]}. {last}"
    if style == "last":
        return last
    if style == "first":
        return first
    raise ValueError(style)


def _date_str(d, fmt):
    y, m, day = d
    return {"us": f"{_MONTHS[m - 1]} {day}, {y}", "eu": f"{day} {_MONTHS[m - 1]} {y}",
            "iso": f"{y}-{m:02d}-{day:02d}", "ord": f"the {_ordinal(day)} of {_MONTHS[m - 1]} {y}"}[fmt]


def _clock_str(c, fmt):
    h, m = c
    if fmt == "digits":
        return f"{h}:{m:02d} pm"
    if fmt == "24h":
        return f"{h + 12}:{m:02d}"
    if fmt == "words":
        return number_words(h) + (" o'clock" if m == 0 else " " + number_words(m)) + " in the afternoon"
    return {0: f"{h} o'clock", 15: f"quarter past {h}", 30: f"half past {h}", 45: f"quarter to {h % 12 + 1}"}[m]


def build_reference(item: Item, rng: random.Random) -> list[str]:
    """The reference list: canonical answer first, then 0..n aliases (members: every member)."""
    k, v = item.kind, item.value
    if k == "name":
        refs = [_name_str(v)] + ([_name_str(v, "middle")] if v[1] and rng.random() < 0.6 else [])
        if rng.random() < 0.3:
            refs.append(_name_str(v, "initial"))
    elif k == "members":
        refs = [_name_str(p) for p in v]
    elif k == "number":
        n, unit = v
        refs = [str(n) if rng.random() < 0.6 else f"{n} {unit}"] + ([number_words(n)] if rng.random() < 0.4 else [])
    elif k == "year":
        refs = [str(v)]
    elif k == "date":
        refs = [_date_str(v, rng.choice(["us", "eu"]))]
    elif k == "clock":
        refs = [_clock_str(v, "digits")] + ([_clock_str(v, "half")] if rng.random() < 0.5 else [])
    elif k == "place":
        refs = [v[0]] + ([f"{v[0]}, {v[1]}"] if rng.random() < 0.6 else [])
    elif k == "concept":
        syn = v[1][v[0]][0]
        refs = syn[: rng.choice((1, 1, 2))]
    elif k == "pair":
        refs = [f"{v[0]} and {v[1]}"]
    else:
        raise ValueError(k)
    if rng.random() < 0.15:  # a trivia-style list: many forms of one answer (EVOUNA / TriviaQA alias lists)
        refs += _more_aliases(item, rng)
    return list(dict.fromkeys(refs))


def _more_aliases(item: Item, rng: random.Random) -> list[str]:
    k, v = item.kind, item.value
    if k == "name":
        first, middle, last = v
        out = [f"{first} {last}".lower(), f"{last}, {first}", f"{first[0]}. {last}", f"Dr. {first} {last}",
               f"{first} {middle or ''} {last}".replace("  ", " "), last, f"{first[0]}.{(middle or 'J')[0]}. {last}"]
    elif k == "number":
        n, unit = v
        out = [str(n), number_words(n), f"{n} {unit}", f"{number_words(n)} {unit}", f"{n:,}", f"about {n}"]
    elif k == "year":
        out = [f"{v} AD", f"in {v}", f"the year {v}", f"'{str(v)[2:]}"]
    elif k == "date":
        out = [_date_str(v, f) for f in ("us", "eu", "iso", "ord")] + [f"{_MONTHS[v[1] - 1][:3]}. {v[2]}, {v[0]}"]
    elif k == "place":
        out = [v[0], f"{v[0]}, {v[1]}", f"the town of {v[0]}", f"{v[0]} ({v[1]})", v[0].upper(), f"{v[0]} city"]
    elif k == "concept":
        out = list(v[1][v[0]][0])
    else:
        return []
    return rng.sample(out, rng.randint(max(1, len(out) - 3), len(out)))


def _wrong_value(item: Item, rng: random.Random, close: bool = False):
    k, v = item.kind, item.value
    if k == "number":
        n, unit = v
        delta = rng.choice([-2, -1, 1, 2]) if close else rng.choice([-1, 1]) * rng.randint(3, max(4, n // 2 + 3))
        return (max(0, n + delta) if n + delta != n else n + 5, unit)
    if k == "year":
        return v + (rng.choice([-1, 1]) if close else rng.choice([-1, 1]) * rng.randint(2, 60))
    if k == "date":
        return (v[0] + rng.choice([-1, 1]) * rng.randint(1, 30), rng.randint(1, 12), rng.randint(1, 28))
    if k == "clock":
        return ((v[0] + rng.randint(1, 5)) % 11 + 1, rng.choice([m for m in (0, 15, 30, 45) if m != v[1]]))
    if k == "pair":
        return tuple(rng.sample(item.wrong, 2))
    return rng.choice(item.wrong)


def _surface(item: Item, value, rng: random.Random, variant: bool) -> str:
    """Text for a value; ``variant`` picks a form different from the canonical one."""
    k = item.kind
    if k in ("name",):
        return _name_str(value, rng.choice(["last", "initial", "middle"]) if variant else "full")
    if k == "members":
        if isinstance(value, list):  # the correct set: name one member
            p = rng.choice(value)
            return _name_str(p, "last") if variant and rng.random() < 0.3 else _name_str(p)
        return _name_str(value)
    if k == "number":
        n, unit = value
        if not variant:
            return str(n) if rng.random() < 0.5 else f"{n} {unit}"
        return rng.choice([number_words(n), f"{number_words(n)} {unit}", f"{n:,} {unit}", f"roughly {n}"])
    if k == "year":
        return rng.choice([f"the year {value}", f"{value} AD"]) if variant else str(value)
    if k == "date":
        return _date_str(value, rng.choice(["iso", "ord", "eu"]) if variant else "us")
    if k == "clock":
        return _clock_str(value, rng.choice(["24h", "half", "words"]) if variant else "digits")
    if k == "place":
        return rng.choice([f"the town of {value[0]}", f"{value[0]} in {value[1]}"]) if variant else value[0]
    if k == "concept":
        key, table = value if isinstance(value, tuple) else (value, item.value[1])
        syn = table[key][0]
        return rng.choice(syn[1:]) if variant else syn[0]
    if k == "pair":
        a, b = value
        return f"{b} and {a}" if variant else f"{a} and {b}"
    raise ValueError(k)


def _partial(item: Item, rng: random.Random) -> str | None:
    k, v = item.kind, item.value
    if k == "name":
        return _name_str(v, "first")
    if k == "date":
        return rng.choice([f"sometime in {v[0]}", f"{_MONTHS[v[1] - 1]} {v[0] + rng.choice([-1, 1])}"])
    if k == "year":
        decade = v // 10 * 10
        return f"the {'early' if v % 10 < 4 else 'mid' if v % 10 < 7 else 'late'} {decade}s"
    if k == "number":
        n = v[0]
        return f"between {max(0, n - rng.randint(2, 5))} and {n + rng.randint(2, 5)}"
    if k == "place":
        return v[1]
    if k == "concept":
        return v[1][v[0]][1]
    if k == "pair":
        return rng.choice(v) if rng.random() < 0.5 else f"{rng.choice(v)} and {item.wrong[0]}"
    if k == "clock":
        return "in the afternoon"
    return None


# Content modes: name -> latent quality. "ambiguous" modes get more rater disagreement.
QUALITY = {"exact": 5.0, "variant": 4.8, "verbose": 4.7, "reject_wrong": 4.6, "side_error": 3.8, "partial": 3.0,
           "hedge": 2.3, "list": 2.0, "close_miss": 1.6, "wrong": 1.1, "reject_right": 1.2, "neighbour": 1.0,
           "refusal": 1.0}
AMBIGUOUS = {"side_error", "partial", "hedge", "list", "close_miss"}

# Simulated answering systems: style weights and content-mode weights.
SYSTEMS = {
    "sim-span": ({"short": 0.9, "sentence": 0.1},
                 {"exact": 0.35, "variant": 0.2, "partial": 0.1, "close_miss": 0.05, "wrong": 0.3}),
    "sim-sentence": ({"short": 0.15, "sentence": 0.8, "long": 0.05},
                     {"exact": 0.3, "variant": 0.25, "partial": 0.1, "hedge": 0.05, "close_miss": 0.05,
                      "wrong": 0.22, "refusal": 0.03}),
    "sim-verbose": ({"sentence": 0.2, "long": 0.8},
                    {"exact": 0.22, "variant": 0.2, "verbose": 0.1, "reject_wrong": 0.06, "side_error": 0.08,
                     "partial": 0.07, "wrong": 0.15, "reject_right": 0.07, "refusal": 0.05}),
    "sim-cautious": ({"short": 0.2, "sentence": 0.5, "long": 0.3},
                     {"exact": 0.2, "variant": 0.15, "partial": 0.15, "hedge": 0.2, "list": 0.08, "wrong": 0.1,
                      "refusal": 0.12}),
    "sim-weak": ({"short": 0.5, "sentence": 0.4, "long": 0.1},
                 {"exact": 0.15, "variant": 0.1, "partial": 0.1, "close_miss": 0.1, "wrong": 0.42,
                  "neighbour": 0.08, "reject_right": 0.05}),
    "sim-chat": ({"short": 0.1, "sentence": 0.5, "long": 0.4},
                 {"exact": 0.27, "variant": 0.27, "verbose": 0.05, "reject_wrong": 0.04, "side_error": 0.05,
                  "partial": 0.05, "hedge": 0.05, "list": 0.03, "wrong": 0.15, "reject_right": 0.03,
                  "neighbour": 0.02, "refusal": 0.03}),
}


def _pick(rng: random.Random, weights: dict) -> str:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def _sentence(item: Item, x: str, rng: random.Random) -> str:
    frames = [item.frame, "The answer is {x}.", "I believe it is {x}.", "That would be {x}."]
    s = rng.choice(frames).replace("{x}", x)
    return s[0].upper() + s[1:]


def _asserted(item: Item, x: str, other: str, rng: random.Random) -> str:
    """``x`` asserted and ``other`` rejected, in one of the shapes LLM answers take."""
    claim = item.frame.replace("{x}", x)
    claim = claim[0].upper() + claim[1:]
    return rng.choice([f"Although some say {other}, the correct answer is {x}.", f"It is not {other}; it is {x}.",
                       f"Many people assume {other}, but {item.frame.replace('{x}', x)}",
                       f"{claim[:-1]}, not {other} as many think.", f"It is {x}, not {other}.",
                       f"Contrary to what is often said, the answer is {x} rather than {other}.",
                       f"{x}. {other[0].upper() + other[1:]} is a common mistake here."])


def realise(item: Item, style: str, mode: str, rng: random.Random, neighbour: Item | None = None) -> tuple[str, str]:
    """Candidate text for a content mode in a style; returns (text, effective mode). ``neighbour``: another
    question's item, whose right answer is the candidate in mode "neighbour"."""
    if mode == "neighbour":
        if neighbour is None or neighbour.kind == item.kind:
            mode = "wrong"
        else:
            x = _surface(neighbour, neighbour.value, rng, variant=False)
            if style == "short":
                return x, mode
            return _sentence(neighbour, x, rng), mode
    if mode == "refusal":
        return rng.choice(_REFUSALS + (_AUDIO_REFUSALS if item.modality != "text" else [])), mode
    if mode == "partial":
        part = _partial(item, rng)
        if part is None:
            mode = "wrong"
        else:
            x = part
    if mode in ("exact", "variant", "verbose", "side_error"):
        x = _surface(item, item.value, rng, variant=(mode == "variant"))
    elif mode in ("wrong", "close_miss", "reject_right"):
        if mode == "close_miss" and item.kind not in ("number", "year"):
            mode = "wrong"
        x = _surface(item, _wrong_value(item, rng, close=mode == "close_miss"), rng, variant=rng.random() < 0.3)
    elif mode == "hedge":
        a = _surface(item, item.value, rng, variant=False)
        b = _surface(item, _wrong_value(item, rng), rng, variant=False)
        a, b = (a, b) if rng.random() < 0.5 else (b, a)
        return rng.choice([f"It could be {a} or {b}.", f"Either {a} or {b}, I am not sure which.",
                           f"{a}, or possibly {b}", f"Probably {a}, but it might also be {b}.",
                           f"I am not sure, maybe {a} or {b}.", f"Perhaps {a}; {b} is also possible."]), mode
    elif mode == "list":
        wrongs = {_surface(item, _wrong_value(item, rng), rng, variant=False) for _ in range(rng.randint(2, 3))}
        options = [_surface(item, item.value, rng, variant=rng.random() < 0.3), *sorted(wrongs)]
        rng.shuffle(options)
        listed = ", ".join(options[:-1]) + rng.choice([" and ", " or ", ", "]) + options[-1]
        return rng.choice([listed, f"Possible answers include {listed}.", f"It is one of these: {listed}.",
                           f"Candidates are {listed}."]), mode
    elif mode == "reject_wrong":
        x = _surface(item, item.value, rng, variant=rng.random() < 0.3)
        return _asserted(item, x, _surface(item, _wrong_value(item, rng), rng, variant=False), rng), mode

    if mode == "reject_right":
        return _asserted(item, x, _surface(item, item.value, rng, variant=False), rng), mode
    if style == "short" and mode not in ("verbose", "side_error"):
        return (x.lower() if rng.random() < 0.2 else x), mode
    text = _sentence(item, x, rng)
    if mode == "side_error":
        text += " " + rng.choice([f"This was first reported in {rng.randint(1700, 2020)}, in a different region.",
                                  "It is also the only example of its kind, which is often disputed.",
                                  "It was later renamed twice, according to a few accounts."])
    if style == "long" or mode == "verbose":
        # Long, LLM-like answers: the verdict sits anywhere among sentences that carry no answer.
        pre = rng.choice(["Based on the available information, ", "According to what I know, ", ""])
        text = pre + text[0].lower() + text[1:] if pre else text
        fill = rng.sample(_FILLERS, rng.randint(1, 6))
        cut = rng.randint(0, min(2, len(fill)))
        text = " ".join([*fill[:cut], text, *fill[cut:]])
    return text, mode


# ----------------------------------------------------------------------------- panel

@dataclass
class Rater:
    rater_id: str
    bias: float       # overall leniency
    noise: float      # sd of per-rating noise
    ambiguity: float  # extra leniency on partial / hedged answers (raters disagree most there)


def make_panel(n: int, rng: np.random.Generator) -> list[Rater]:
    return [Rater(f"sim-rater-{i:02d}", float(rng.normal(0, 0.3)), float(rng.uniform(0.3, 0.8)),
                  float(rng.normal(0, 0.6))) for i in range(n)]


def panel_ratings(quality: float, ambiguous: bool, raters: list[Rater], rng: np.random.Generator) -> list[int]:
    item_shift = float(rng.normal(0, 0.5)) if ambiguous else 0.0
    out = []
    for r in raters:
        x = quality + r.bias + item_shift + (r.ambiguity if ambiguous else 0.0) + rng.normal(0, r.noise)
        out.append(int(min(5, max(1, round(x)))))
    return out


# ----------------------------------------------------------------------------- generation

def generate_s1(size: int = 10_000, *, seed: int = 0, answers_per_question: int = 4, panel_size: int = 24,
                flag_rate: float = 0.015) -> list[dict]:
    """Generate ``size`` rated records (stage s1). Same seed and size -> identical records.

    Each question gets ``answers_per_question`` answers from distinct simulated systems; each
    answer is rated by 3 to 5 raters drawn from a pool of ``panel_size`` simulated raters. About
    ``flag_rate`` of the items carry a rater flag (and are dropped by the standard filters, like
    flagged human items).
    """
    rng = random.Random(f"orca-s1:{seed}")
    nrng = np.random.default_rng([seed, 0x0C0A])
    panel = make_panel(panel_size, nrng)
    gens, weights = zip(*_GENERATORS)
    systems = sorted(SYSTEMS)
    records: list[dict] = []
    q = 0
    previous = None  # the last question's item: its right answer is a neighbouring question's answer
    while len(records) < size:
        item = rng.choices(gens, weights=weights)[0](rng)
        item.reference = build_reference(item, rng)
        for system in rng.sample(systems, min(answers_per_question, len(systems))):
            if len(records) >= size:
                break
            styles, modes = SYSTEMS[system]
            style, mode = _pick(rng, styles), _pick(rng, modes)
            text, mode = realise(item, style, mode, rng, neighbour=previous)
            raters = [panel[i] for i in sorted(nrng.choice(panel_size, size=int(nrng.integers(3, 6)), replace=False))]
            ratings = panel_ratings(QUALITY[mode], mode in AMBIGUOUS, raters, nrng)
            flags = [rng.choice(["Q", "R", "A", "U", "E"])] if rng.random() < flag_rate else []
            records.append(make_record(
                id=f"s1:{seed}:{q}:{system}", benchmark="synthetic", question_id=f"s1:{seed}:{q}",
                question=item.question, reference=item.reference, rationale=item.rationale,
                transcript=item.transcript, candidate=text, answerer=system, modality=item.modality,
                category=item.category, ratings=ratings, rater_ids=[r.rater_id for r in raters],
                flags=flags, stage="s1", source="synthetic (dataset_builder.synthetic)",
                metadata={"mode": mode, "style": style, "latent_quality": QUALITY[mode], "seed": seed},
            ))
        q += 1
        previous = item
    return records
