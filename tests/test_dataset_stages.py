import json
from collections import defaultdict

import numpy as np

from dataset_builder.benchmark import RuleRater, build_s2, mentioned_choices, rule_panel
from dataset_builder.filters import apply_filters
from dataset_builder.synthetic import generate_s1, number_words
from orca_io.schema import make_record, validate_record


def test_s1_is_seeded_and_valid():
    a, b = generate_s1(600, seed=4), generate_s1(600, seed=4)
    assert a == b and len(a) == 600
    assert a != generate_s1(600, seed=5)
    for r in a:
        assert validate_record(r) == r
        assert r["stage"] == "s1" and 3 <= len(r["ratings"]) <= 5 and len(r["rater_ids"]) == len(r["ratings"])


def test_s1_mixes_styles_and_rates_correctness_not_style():
    recs = generate_s1(3000, seed=0)
    meta = [json.loads(r["metadata"]) for r in recs]
    by_cell = defaultdict(list)
    for r, m in zip(recs, meta):
        by_cell[(m["mode"], m["style"])].append(np.mean(r["ratings"]))
    for style in ("short", "sentence", "long"):
        # Right content rates high and wrong content low in every style.
        assert np.mean(by_cell[("exact", style)]) > 4.2
        assert np.mean(by_cell[("wrong", style)]) < 1.8
    modes = {m["mode"] for m in meta}
    assert {"exact", "variant", "partial", "hedge", "wrong", "refusal", "verbose"} <= modes
    assert {r["modality"] for r in recs} >= {"sound", "music", "speech", "text"}
    assert max(len(r["reference"]) for r in recs) >= 10  # alias lists as long as EVOUNA's
    assert any(len(r["candidate"]) > 250 for r in recs)
    # The panel disagrees, most on ambiguous answers.
    var = defaultdict(list)
    for r, m in zip(recs, meta):
        var[m["mode"]].append(np.var(r["ratings"]))
    assert np.mean(var["partial"]) > np.mean(var["exact"]) > 0


def test_s1_styles_judges_meet():
    """Answers that mention the reference while asserting another one, the reverse, lists, neighbouring questions'
    answers and long alias lists are all there, rated from what is asserted."""
    recs = generate_s1(3000, seed=0)
    by_mode = defaultdict(list)
    for r in recs:
        by_mode[json.loads(r["metadata"])["mode"]].append(r)
    mean = {m: np.mean([np.mean(r["ratings"]) for r in rs]) for m, rs in by_mode.items()}
    assert mean["reject_wrong"] > 4.0 and mean["reject_right"] < 2.0
    assert 1.5 < mean["list"] < 3.0 and mean["neighbour"] < 1.6
    lowered = [(r["candidate"].lower(), [a.lower() for a in r["reference"]]) for r in by_mode["reject_right"]]
    # a wrong answer that names the reference: the string match a baseline would count as correct
    assert np.mean([any(a in c for a in refs) for c, refs in lowered]) > 0.7
    var = {m: np.mean([np.var(r["ratings"]) for r in rs]) for m, rs in by_mode.items()}
    assert var["list"] > var["exact"] and var["hedge"] > var["exact"]
    assert np.mean([len(r["reference"]) >= 5 for r in recs]) > 0.05


def test_number_words():
    assert number_words(291) == "two hundred ninety-one"
    assert number_words(1000) == "one thousand" and number_words(14) == "fourteen"


def _rec(candidate, answer="Man", choices=("Man", "Woman", "Child", "Robot"), **meta):
    return make_record(id="x", question="Who speaks?", reference=[answer], candidate=candidate,
                       metadata={"choices": list(choices), **meta})


def test_mentioned_choices_respects_word_boundaries_and_nesting():
    choices = ["Man", "Woman", "Man and woman", "A#"]
    assert mentioned_choices("The speaker is a woman.", choices) == ["Woman"]
    assert mentioned_choices("It is a man and woman talking", choices) == ["Man and woman"]
    assert mentioned_choices("The note is A#", choices) == ["A#"]


def test_rule_raters():
    strict, middle, lenient = rule_panel()
    assert [r(_rec("It is a man.")) for r in rule_panel()] == [5, 5, 5]
    assert strict(_rec("Probably a man.")) == 4
    assert middle(_rec("a robot")) == 1
    assert [r(_rec("a man or a woman")) for r in rule_panel()] == [1, 2, 3]
    rec = _rec("the old harbour", answer="An old harbour at dawn", choices=["An old harbour at dawn", "A city"])
    assert [r(rec) for r in rule_panel()] == [2, 3, 4]
    assert middle(_rec("no idea")) is None
    assert RuleRater("x", hedge=2, partial=3)(_rec("man or woman", exclusive_only=True)) is None


def _questions():
    return [{"question_id": f"mmau:{i}", "benchmark": "mmau", "question": "Which voice?",
             "choices": ["Man", "Woman", "Child", "Robot"], "answer": "Woman", "modality": "speech",
             "category": "c", "rationale": "", "metadata": {}} for i in range(3)]


def test_s2_candidates_and_llm_judge_hook():
    lalm = [make_record(id="l1", question_id="mmau:0", question="Which voice?", reference=["Woman"],
                        candidate="A woman is speaking, or maybe a child.", answerer="Qwen-Audio-Chat",
                        metadata={"choices": ["Man", "Woman", "Child", "Robot"]}),
            make_record(id="l2", question_id="mmau:1", question="Which voice?", reference=["Woman"],
                        candidate="It is a woman.", answerer="Qwen-Audio-Chat",
                        metadata={"choices": ["Man", "Woman", "Child", "Robot"]})]
    calls = []

    def judge(record):
        calls.append(record["id"])
        return 4

    recs = build_s2(_questions(), lalm, extra_raters={"llm-judge": judge})
    assert build_s2(_questions(), lalm, extra_raters={"llm-judge": judge}) == recs  # deterministic
    kinds = [(r["answerer"], json.loads(r["metadata"]).get("kind")) for r in recs if r["question_id"] == "mmau:0"]
    assert kinds.count(("mc-choice", "wrong")) == 3 and ("mc-choice", "correct") in kinds
    assert {"mc-sentence", "mc-hedge"} <= {a for a, _ in kinds}
    correct = next(r for r in recs if r["candidate"] == "Woman")
    assert correct["ratings"] == [5, 5, 5, 4] and correct["rater_ids"][-1] == "llm-judge"
    by_id = {r["id"]: r for r in recs}
    assert by_id["l1"]["rater_ids"] == ["llm-judge"]  # hedged free text: only the judge decides
    assert by_id["l2"]["ratings"] == [5, 5, 5, 4]
    assert len(calls) == 2 * len(recs)  # every record went to the judge, in both builds
    unjudged = build_s2([], lalm)
    kept, dropped = apply_filters(unjudged)
    assert [r["id"] for r in kept] == ["l2"] and dropped == {"unrated": 1}


def test_filters_count_each_reason_once():
    base = dict(question="q", reference=["r"], candidate="c", ratings=[3])
    recs = [make_record(id="ok", **base), make_record(id="long", **{**base, "candidate": "x" * 1001}),
            make_record(id="longref", **{**base, "reference": ["y" * 600, "z" * 600]}),
            make_record(id="flag", flags=["E"], **base), make_record(id="both", flags=["Q"], rationale="w" * 2000,
                                                                     **base),
            make_record(id="unrated", **{**base, "ratings": []})]
    kept, dropped = apply_filters(recs)
    assert [r["id"] for r in kept] == ["ok"]
    assert dropped == {"text over 1000 characters": 3, "flagged": 1, "unrated": 1}
    assert len(apply_filters(recs, require_rated=False)[0]) == 2


def test_s2_default_has_no_paraphrases_and_rules_skip_synonyms():
    """The paraphrase positives come only with the `s2_benchmark_paraphrase*` variants: build_s2 is unchanged."""
    recs = build_s2(_questions(), [])
    assert not {"mc-paraphrase", "mc-synonym"} & {r["answerer"] for r in recs}
    assert all(r(_rec("adult female", answer="Woman", kind="synonym")) is None for r in rule_panel())
    assert rule_panel()[1](_rec("adult female", answer="Woman")) is None  # unchanged without the kind
