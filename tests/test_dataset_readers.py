import csv
import json

import pytest

from dataset_builder.readers import (
    read_evouna_nq,
    read_lalm_outputs,
    read_mmar,
    read_mmau,
    read_nq_open_graded,
    read_sas_pairs,
    split_aliases,
)
from orca_io.jsonl import read_records
from orca_io.schema import FLAGS, RecordError


def _release_line(i, **over):
    obj = {"id": f"r{i}", "question": "What plays?", "reference": "violin", "candidate": "a violin",
           "rationale": "bowed strings", "ratings": [5, 4]}
    obj.update(over)
    return json.dumps(obj)


def _write(path, lines, mode="w"):
    if mode == "wb":
        path.write_bytes(b"\n".join(lines) + b"\n")
    else:
        path.write_text("\n".join(lines) + "\n")
    return path


def test_release_file_with_every_flag_and_transcription(tmp_path):
    lines = [_release_line(i, flags=[f]) for i, f in enumerate(FLAGS)]
    lines.append(_release_line(9, transcription="hello", extra_field=[1, 2]))
    lines.append(json.dumps({"id": "p1", "question": "q", "reference": ["a", "b"], "candidate": "a",
                             "ratings": [], "stage": "s2", "metadata": "{}"}))  # project schema
    res = read_records(_write(tmp_path / "s3-mmau-pro-human-judge-ratings.jsonl", lines))
    assert [r["flags"] for r in res.records[:5]] == [[f] for f in FLAGS]
    r9 = res.records[5]
    assert r9["transcript"] == "hello" and json.loads(r9["metadata"]) == {"extra_field": [1, 2]}
    assert r9["stage"] == "s3" and r9["source"] == "s3-mmau-pro-human-judge-ratings.jsonl"
    assert res.records[6]["stage"] == "s2" and res.records[6]["reference"] == ["a", "b"]
    assert not res.skipped


def test_malformed_lines_raise_with_file_line_field(tmp_path):
    cases = {
        "json": ([_release_line(1), "{not json"], "2: field '<line>': malformed JSON"),
        "missing": ([_release_line(1), json.dumps({"id": "x", "question": "q", "candidate": "c"})],
                    "2: field 'reference': missing"),
        "rating": ([_release_line(1, ratings=[7])], "1: field 'ratings'"),
        "flag": ([_release_line(1, flags=["Z"])], "1: field 'flags'"),
    }
    for name, (lines, expected) in cases.items():
        path = _write(tmp_path / f"{name}.jsonl", lines)
        with pytest.raises(RecordError) as e:
            read_records(path)
        assert str(e.value).startswith(f"{path}:{expected}"), name


def test_non_utf8_and_duplicates(tmp_path):
    path = _write(tmp_path / "bytes.jsonl", [_release_line(1).encode(), b'{"id": "\xff"}'], mode="wb")
    with pytest.raises(RecordError, match=r"bytes.jsonl:2: field '<line>': not UTF-8"):
        read_records(path)
    dup = _write(tmp_path / "dup.jsonl", [_release_line(1), _release_line(2), _release_line(1)])
    with pytest.raises(RecordError, match=r"dup.jsonl:3: field 'id': duplicate id 'r1' \(first on line 1\)"):
        read_records(dup)


def test_skip_mode_counts_every_skip(tmp_path):
    lines = [_release_line(1), "{bad", "", _release_line(2, ratings=[9]), _release_line(1), _release_line(3)]
    path = _write(tmp_path / "mixed.jsonl", lines)
    with open(path, "ab") as fh:
        fh.write(b"\xfe\xff\n")
    res = read_records(path, on_error="skip")
    assert [r["id"] for r in res.records] == ["r1", "r3"]
    assert res.skipped == {"malformed JSON": 1, "blank line": 1, "bad field 'ratings'": 1, "duplicate id": 1,
                           "not UTF-8": 1}


def test_empty_file_is_a_clear_error(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty.jsonl: empty file"):
        read_records(tmp_path / "empty.jsonl")
    _write(tmp_path / "junk.jsonl", ["{bad"])
    with pytest.raises(ValueError, match="no valid record"):
        read_records(tmp_path / "junk.jsonl", on_error="skip")


def _mc(i, **over):
    return {"id": f"q{i}", "question": "Which?", "choices": ["Man", "Woman", "Child", "Robot"], "answer": "Man",
            "task": "sound", "category": ["Reasoning"], **over}


def test_mmau_and_mmar(tmp_path):
    (tmp_path / "mmau.json").write_text(json.dumps([_mc(1), _mc(2, answer="Dog")]))
    with pytest.raises(RecordError, match=r"mmau.json:\[1\]: field 'answer'"):
        read_mmau(tmp_path / "mmau.json")
    res = read_mmau(tmp_path / "mmau.json", on_error="skip")
    assert len(res.records) == 1 and res.skipped == {"bad field 'answer'": 1}
    q = res.records[0]
    assert q["question_id"] == "mmau:q1" and q["modality"] == "sound" and q["category"] == "Reasoning"
    assert q["rationale"] == ""
    mmar = [dict(_mc(1, modality="mix-sound-speech", thinking="a deep male voice"), category="Semantic Layer"),
            _mc(2, choices="nope")]
    _write(tmp_path / "mmar.jsonl", [json.dumps(m) for m in mmar])
    res = read_mmar(tmp_path / "mmar.jsonl", on_error="skip")
    assert res.records[0]["rationale"] == "a deep male voice" and res.records[0]["modality"] == "mix-sound-speech"
    assert res.skipped == {"bad field 'choices'": 1}


def test_lalm_outputs_are_unlabeled(tmp_path):
    path = tmp_path / "qwen_audio_chat_results.json"
    path.write_text(json.dumps([{**_mc(1), "model_output": " The voice is a man. "}, {**_mc(2), "model_output": None}]))
    res = read_lalm_outputs(path, on_error="skip")
    (rec,) = res.records
    assert rec["answerer"] == "Qwen-Audio-Chat" and rec["ratings"] == [] and rec["candidate"] == "The voice is a man."
    assert rec["question_id"] == "mmau:q1" and json.loads(rec["metadata"])["choices"][0] == "Man"
    assert res.skipped == {"bad field 'model_output'": 1}


def test_evouna_counts_improper_and_null(tmp_path):
    base = {"question": "who", "golden_answer": "Ann Lee/ A. Lee /", "improper": False}
    systems = ("fid", "gpt35", "chatgpt", "gpt4", "newbing")
    q1 = {**base, **{f"answer_{s}": f"ans {s}" for s in systems}, **{f"judge_{s}": s != "gpt4" for s in systems}}
    q1["judge_newbing"] = None
    q2 = {**q1, "improper": True}
    q3 = {**q1, "answer_fid": None}
    (tmp_path / "NQ.json").write_text(json.dumps([q1, q2, q3]))
    res = read_evouna_nq(tmp_path / "NQ.json")
    assert res.skipped == {"improper question": 1, "null verdict": 2, "missing answer": 1}
    assert len(res.records) == 4 + 3
    r = res.records[0]
    assert r["reference"] == ["Ann Lee", "A. Lee"] and r["ratings"] == [5] and r["answerer"] == "FiD"
    assert [x["ratings"] for x in res.records[:4]] == [[5], [5], [5], [1]]
    assert res.records[0]["question_id"] == res.records[4]["question_id"]  # same question text
    assert split_aliases("Super Bowl LII,/2017") == ["Super Bowl LII", "2017"]


def test_sas_pairs_and_nq_open_graded(tmp_path):
    with open(tmp_path / "SQuAD_SAS.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["answer1", "answer2", "label"], ["Seine", "Epte", "0.0"],
                                  ["dukes", "the dukes", "2.0"], ["NP", "P", "1.0"], ["x", "y", ""], ["a", "b", "7"]])
    with pytest.raises(RecordError, match=r"SQuAD_SAS.csv:6: field 'label'"):
        read_sas_pairs(tmp_path / "SQuAD_SAS.csv")
    res = read_sas_pairs(tmp_path / "SQuAD_SAS.csv", on_error="skip")
    assert [r["ratings"] for r in res.records] == [[1], [5], [3]]
    assert res.skipped == {"empty label": 1, "bad field 'label'": 1}
    assert res.records[0]["question"] == "" and res.records[0]["benchmark"] == "sas_squad"

    with open(tmp_path / "nq.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["", "question", "answer", "def_correct_predictions", "poss_correct_predictions",
                    "def_incorrect_predictions"])
        w.writerow(["1", "how many", "Nine", "['nine']", "['about nine', '9ish']", "['none']"])
        w.writerow(["2", "who", "Amma", "[oops", "[]", "[]"])
    res = read_nq_open_graded(tmp_path / "nq.csv", on_error="skip")
    assert sorted((r["candidate"], r["ratings"][0]) for r in res.records) == [
        ("9ish", 3), ("about nine", 3), ("nine", 5), ("none", 1)]
    assert res.skipped == {"bad field 'def_correct_predictions'": 1}
    assert len({r["id"] for r in res.records}) == 4


def test_on_error_is_checked(tmp_path):
    _write(tmp_path / "a.jsonl", [_release_line(1)])
    with pytest.raises(ValueError, match="on_error"):
        read_records(tmp_path / "a.jsonl", on_error="ignore")


def test_the_one_jsonl_reader_raises_skips_or_keeps_bad_lines_and_stops_after_max_problems(tmp_path):
    from collections import Counter

    from orca_io.jsonl import JsonLines, read_jsonl

    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{not json\n"text"\n\xff\xfe\n[1, 2]\n{"b": 2}')  # BOM, no final newline
    with pytest.raises(RecordError, match=r"mixed.jsonl:3: field '<line>': malformed JSON"):
        read_jsonl(path)

    skipped = Counter()
    lines = JsonLines(path, on_error="skip", skipped=skipped)
    assert [(x.line, x.value) for x in lines] == [(1, {"a": 1}), (4, "text"), (6, [1, 2]), (7, {"b": 2})]
    assert skipped == {"blank line": 1, "malformed JSON": 1, "not UTF-8": 1} and lines.blank_lines == 1
    assert lines.unread is None and lines.lines == 7

    kept = list(JsonLines(path, on_error="keep"))
    assert [x.line for x in kept] == [1, 3, 4, 5, 6, 7]
    assert [x.error.problem.split(":")[0] if x.error else None for x in kept] == [
        None, "malformed JSON", None, "not UTF-8 (byte 0)", None, None]
    assert kept[1].text == "{not json" and kept[0].text == '{"a": 1}'

    # a cap on the problems: reading stops before the next line, and says how many lines were not read
    problems: list[str] = []
    capped = JsonLines(path, on_error="keep", max_problems=2, problems=problems)
    for item in capped:
        if item.error is not None or not isinstance(item.value, dict):
            problems.append(f"line {item.line}")
    assert problems == ["line 3", "line 4"] and capped.unread == 3  # lines 5, 6 and 7
    own = JsonLines(path, on_error="skip", max_problems=1)
    assert [x.line for x in own] == [1] and own.unread == 4  # stopped before line 4: lines 4 to 7
