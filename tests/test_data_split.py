"""rlft.data.load_split on its own (every method reads its data through it): train and eval files validated
together, max_rows, the seeded eval_fraction split, and the missing-data error. Pure Python, no model."""

from __future__ import annotations

import json

import pytest

from rlft.config import Section
from rlft.data import load_split
from rlft.errors import DataError, UserError


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
