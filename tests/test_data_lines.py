"""A bad row is named by its line in the file, blank lines counted (the README promises file and line)."""

from __future__ import annotations

import json

import pytest

from rlft.data import read_rows, validate_sft
from rlft.errors import DataError

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
