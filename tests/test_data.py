"""rlft.data: loading and validation (each bad row named by file, line and field, blank lines counted;
nothing is written), and load_split (train and eval validated together, max_rows, the seeded eval_fraction
split, the missing-data error). Pure Python, no model."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, write_jsonl

from rlft.config import Section
from rlft.data import load_split, read_rows, validate_preference, validate_sft, validate_verifiable
from rlft.errors import DataError, UserError


def test_reads_jsonl_json_csv_parquet(tmp_path):
    rows = [{"prompt": "1+1=", "completion": "2"}, {"prompt": "2+2=", "completion": "4"}]
    write_jsonl(tmp_path / "a.jsonl", rows)
    (tmp_path / "a.json").write_text(json.dumps(rows, indent=2))
    (tmp_path / "a.csv").write_text("prompt,completion\n1+1=,2\n2+2=,4\n")
    import pandas as pd

    pd.DataFrame(rows).to_parquet(tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.json", "a.csv", "a.parquet"):
        got = read_rows(str(tmp_path / name))
        assert [r.data["prompt"] for r in got] == ["1+1=", "2+2="], name
        assert str(got[1].data["completion"]) == "4"
    assert [r.line for r in read_rows(str(tmp_path / "a.json"))] == [2, 6]
    assert [r.line for r in read_rows(str(tmp_path / "a.csv"))] == [2, 3]


def test_field_mapping_renames_columns(tmp_path):
    write_jsonl(tmp_path / "q.jsonl", [{"question": "1+1=", "solution": "2"}])
    rows = read_rows(str(tmp_path / "q.jsonl"), fields={"prompt": "question", "answer": "solution"})
    assert rows[0].data == {"prompt": "1+1=", "answer": "2"}


@pytest.mark.parametrize("content, expected", [
    (b'{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": }\n', "bad.jsonl:2: malformed JSON"),
    (b'{"prompt": "a", "completion": "b"}\n[1, 2]\n', "bad.jsonl:2: expected a JSON object, got list"),
    (b'{"prompt": "a", "completion": "\xff"}\n', "bad.jsonl:1: not UTF-8 (byte 0xff)"),
    (b"", "bad.jsonl: file is empty"),
    (b"\n\n", "bad.jsonl: file is empty"),
])
def test_unreadable_files_name_file_and_line(tmp_path, content, expected):
    (tmp_path / "bad.jsonl").write_bytes(content)
    with pytest.raises(DataError) as info:
        read_rows(str(tmp_path / "bad.jsonl"))
    assert expected in info.value.message


def test_sft_rows_validated_field_by_field(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [
        {"prompt": "1+1=", "completion": "2"},
        {"prompt": "1+2="},
        {"prompt": "1+3=", "completion": "  "},
        {"prompt": 5, "completion": "4"},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "robot", "content": "hi"}]},
    ])
    with pytest.raises(DataError) as info:
        validate_sft(read_rows(str(path)))
    problems = info.value.problems
    assert f"{path}:2: field 'completion': missing" in problems
    assert f"{path}:3: field 'completion': empty string" in problems
    assert f"{path}:4: field 'prompt': expected a string or a list of messages, got int" in problems
    assert f"{path}:5: field 'messages': no non-empty assistant message to learn from" in problems
    assert any(p.startswith(f"{path}:6: field 'messages': message 0 has role 'robot'") for p in problems)
    assert len(problems) == 5


def test_preference_identical_in_every_row_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": f"q{i}", "chosen": "same", "rejected": "same"}
                                              for i in range(100)])
    with pytest.raises(DataError, match="chosen equals rejected in all 100 rows"):
        validate_preference(read_rows(str(path)))
    # One identical pair among good ones is an error too (as in `data lint`), named by file:line.
    write_jsonl(path, [{"prompt": "b", "chosen": "y", "rejected": "z"},
                       {"prompt": "a", "chosen": "x", "rejected": "x"}])
    with pytest.raises(DataError) as info:
        validate_preference(read_rows(str(path)))
    assert info.value.problems == [f"{path}:2: field 'chosen': equals rejected: no preference to learn"]


def test_verifiable_rows_need_answer(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "1+1=", "answer": "2"}, {"prompt": "1+2="}])
    with pytest.raises(DataError, match=r"v.jsonl:2: field 'answer': missing"):
        validate_verifiable(read_rows(str(path)))


def test_shipped_arithmetic_sets_validate():
    validate_sft(read_rows(str(DATA / "arith/sft_train.jsonl")))
    validate_preference(read_rows(str(DATA / "arith/pairs_train.jsonl")))
    validate_verifiable(read_rows(str(DATA / "arith/test.jsonl")))


def test_missing_file_and_wrong_type(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_rows(str(tmp_path / "nope.jsonl"))
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(UserError, match="unsupported file type '.txt'"):
        read_rows(str(tmp_path / "x.txt"))


# --------------------------------------------------------------------------- line numbers (blank lines counted)


GOOD = json.dumps({"prompt": "1+1=", "completion": "2"})


def test_rows_keep_their_file_line_across_blank_lines(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_text(f"\n{GOOD}\n\n   \n{GOOD}\n\n")
    assert [r.line for r in read_rows(str(path))] == [2, 5]


def test_a_row_missing_a_field_after_blank_lines_is_reported_at_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD}\n\n\n" + json.dumps({"prompt": "2+2="}) + "\n")
    with pytest.raises(DataError) as info:
        validate_sft(read_rows(str(path)))
    assert f"{path}:4: field 'completion': missing" in info.value.message


def test_malformed_json_after_blank_lines_is_reported_at_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD}\n\n{GOOD}\n\n\n" + '{"prompt": "a", "completion": }\n')
    with pytest.raises(DataError) as info:
        read_rows(str(path))
    assert "bad.jsonl:6: malformed JSON" in info.value.message


def test_the_cli_names_the_line_after_blank_lines(cli, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD}\n\n" + json.dumps({"prompt": "2+2="}) + "\n")
    out = tmp_path / "never"
    r = cli("sft", "--data", path, "-o", out)
    assert r.code == 2
    assert f"{path}:3: field 'completion': missing" in r.err
    assert not out.exists()


# --------------------------------------------------------------------------- load_split


def cfg(train, eval_=None, max_rows=None, eval_fraction=None, fields=None):
    return Section(train=train, eval=eval_, max_rows=max_rows, eval_fraction=eval_fraction, fields=fields,
                   split="train")


def sft_file(path, n, start=0):
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=", "completion": str(i + 1)}) + "\n"
                            for i in range(start, start + n)))
    return str(path)


def test_train_and_eval_files_are_read_and_kept_apart(tmp_path):
    train, evals = load_split(cfg([sft_file(tmp_path / "t.jsonl", 5)], sft_file(tmp_path / "e.jsonl", 2, 100)),
                              "demonstrations")
    assert [r.data["prompt"] for r in train] == [f"{i}+1=" for i in range(5)]
    assert [r.data["prompt"] for r in evals] == ["100+1=", "101+1="]


def test_bad_rows_in_train_and_eval_are_reported_together(tmp_path):
    bad_train = tmp_path / "t.jsonl"
    bad_train.write_text(json.dumps({"prompt": "1+1="}) + "\n")
    bad_eval = tmp_path / "e.jsonl"
    bad_eval.write_text(json.dumps({"completion": "2"}) + "\n")
    with pytest.raises(DataError) as info:
        load_split(cfg([str(bad_train)], str(bad_eval)), "demonstrations")
    assert f"{bad_train}:1: field 'completion': missing" in info.value.message
    assert f"{bad_eval}:1: field 'prompt': missing" in info.value.message
    assert "SFT rows need prompt + completion" in info.value.fix


def test_max_rows_and_a_seeded_eval_fraction(tmp_path):
    path = sft_file(tmp_path / "t.jsonl", 20)
    train, evals = load_split(cfg([path], max_rows=10), "demonstrations")
    assert len(train) == 10 and evals == []
    train, evals = load_split(cfg([path], max_rows=10, eval_fraction=0.3), "demonstrations", seed=1)
    assert len(train) == 7 and len(evals) == 3
    assert {r.data["prompt"] for r in train + evals} == {f"{i}+1=" for i in range(10)}
    again = load_split(cfg([path], max_rows=10, eval_fraction=0.3), "demonstrations", seed=1)[1]
    other = load_split(cfg([path], max_rows=10, eval_fraction=0.3), "demonstrations", seed=2)[1]
    assert [r.line for r in again] == [r.line for r in evals] != [r.line for r in other]
    assert len(load_split(cfg([path], eval_fraction=0.01), "demonstrations")[1]) == 1  # at least one row held out
    # an eval file wins over eval_fraction
    train, evals = load_split(cfg([path], sft_file(tmp_path / "e.jsonl", 2, 50), eval_fraction=0.5), "demonstrations")
    assert len(train) == 20 and len(evals) == 2


def test_no_training_data_is_a_user_error():
    with pytest.raises(UserError) as info:
        load_split(cfg([]), "demonstrations")
    assert info.value.message == "no training data given" and "--data FILE" in info.value.fix
