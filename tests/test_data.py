"""Data loading and validation: each bad row is named by file, line and field; nothing is written."""

from __future__ import annotations

import json

import pytest
from conftest import DATA, write_jsonl

from rlft.data import read_rows, validate_preference, validate_sft, validate_verifiable
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
