"""Data lint (rlft/data/lint.py) and `rlft data lint`: each check on a small bad file, the shipped data clean."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest
import typer
from helpers import DATA, write_jsonl
from typer.testing import CliRunner

from rlft.commands.data import data_app
from rlft.data import Row, read_rows
from rlft.data.lint import has_errors, length_stats, lint_rows, rating_stats
from rlft.data.rows import detect_kind, pick_verifier


@dataclass
class FakeVerifier:
    """The registry's Verifier interface, with a gold check that accepts digit strings only."""

    name: str = "digits"
    gold_fields: tuple = ("answer",)
    format_only: bool = False
    partial_credit: bool = False

    def fn(self, completions, **kw):  # pragma: no cover - not called by the lint
        return [0.0] * len(completions)

    def check_gold(self, field, value):
        return None if isinstance(value, str) and value.isdigit() else f"'{value}' is not a number"


def rows_of(dicts) -> list[Row]:
    return [Row("mem.jsonl", i + 1, d) for i, d in enumerate(dicts)]


def codes(findings) -> dict[str, object]:
    return {f.code: f for f in findings}


def pairs(n, chosen=lambda i: f"right {i}", rejected=lambda i: f"wrong {i}"):
    return [{"prompt": f"question {i}?", "chosen": chosen(i), "rejected": rejected(i)} for i in range(n)]


# --------------------------------------------------------------------------- kinds

@pytest.mark.parametrize("path, kind", [
    ("support/pairs_train.jsonl", "pairs"), ("support/pairs_chat.jsonl", "pairs"),
    ("support/demos.jsonl", "demonstrations"), ("arith/sft_train.jsonl", "demonstrations"),
    ("arith/grpo_prompts.jsonl", "verifiable"), ("triage/tickets_train.jsonl", "verifiable"),
    ("json_extract/train.jsonl", "verifiable"), ("code/tasks.jsonl", "verifiable"),
    ("ratings/ratings.jsonl", "ratings"),
])
def test_detect_kind_of_shipped_files(path, kind):
    assert detect_kind(read_rows(str(DATA / path))) == kind


def test_detect_kind_edge_cases():
    assert detect_kind([{"prompt": "p", "completion": "c", "label": True}]) == "thumbs"  # thumbs up/down
    assert detect_kind([{"prompt": "p", "completion": "c", "label": 1}]) == "thumbs"  # linted: label not boolean
    assert detect_kind([{"prompt": "p", "completion": "c", "label": True, "rating": 4}]) == "ratings"
    assert detect_kind([{"prompt": "p", "completion": "c", "score": "0.5"}]) == "ratings"  # CSV text number
    assert detect_kind([{"prompt": "p", "completion": "c"}]) == "demonstrations"
    assert detect_kind([{"text": "all of it"}]) == "demonstrations"
    assert detect_kind([{"question": "q", "reply": "r"}]) is None


@pytest.mark.parametrize("path", sorted(str(p.relative_to(DATA)) for p in DATA.glob("*/*.jsonl")))
def test_shipped_data_has_no_errors(path):
    findings = lint_rows(read_rows(str(DATA / path)))
    assert not has_errors(findings), [f.message for f in findings if f.level == "error"]


# --------------------------------------------------------------------------- pairs

def test_identical_pairs_all_is_no_preference():
    found = codes(lint_rows(rows_of(pairs(100, rejected=lambda i: f"right {i}"))))
    f = found["identical_pairs"]
    assert f.level == "error" and f.count == 100 and "no preference" in f.message


def test_identical_pairs_some_are_counted_with_lines():
    data = pairs(50)
    for i in (3, 7):
        data[i]["rejected"] = data[i]["chosen"]
    f = codes(lint_rows(rows_of(data)))["identical_pairs"]
    assert f.count == 2 and f.lines == [4, 8] and f.detail["usable"] == 48


def test_identical_chat_pairs_are_caught():
    msg = [{"role": "assistant", "content": "same"}]
    data = [{"prompt": [{"role": "user", "content": f"q{i}"}], "chosen": msg, "rejected": list(msg)} for i in range(5)]
    assert codes(lint_rows(rows_of(data)))["identical_pairs"].count == 5


def test_empty_fields_are_errors_with_lines():
    data = pairs(10)
    data[2]["chosen"] = "  "
    del data[5]["prompt"]
    found = [f for f in lint_rows(rows_of(data)) if f.code == "empty_field"]
    assert {f.detail["field"]: f.lines for f in found} == {"prompt": [6], "chosen": [3]}
    assert all(f.level == "error" for f in found)


def test_duplicate_pairs_are_a_warning():
    data = pairs(10) + pairs(3)
    f = codes(lint_rows(rows_of(data)))["duplicate_pairs"]
    assert f.level == "warning" and f.count == 3 and f.lines == [11, 12, 13]


def test_prompt_leaking_into_answers():
    data = pairs(10)
    data[1]["chosen"] = data[1]["prompt"] + " right"
    data[4]["rejected"] = "Sure. " + "x" * 50 + " " + data[4]["prompt"]  # short prompt inside: not a leak
    f = codes(lint_rows(rows_of(data)))["prompt_in_answer"]
    assert f.level == "warning" and f.lines == [2]


def test_prompt_leaking_into_chat_answers():
    user = [{"role": "user", "content": "hello?"}]
    data = [{"prompt": user, "chosen": user + [{"role": "assistant", "content": "hi"}],
             "rejected": [{"role": "assistant", "content": "go away"}]}]
    assert "prompt_in_answer" in codes(lint_rows(rows_of(data)))


def test_length_bias_warning_and_numbers():
    # chosen longer in 9 of 10 pairs: 90% >= the 80% line
    data = [{"prompt": f"q{i}", "chosen": "a long and careful answer", "rejected": "short"} for i in range(9)]
    data.append({"prompt": "q9", "chosen": "ok", "rejected": "a long rambling reply"})
    f = codes(lint_rows(rows_of(data)))["length_bias"]
    assert f.level == "warning"
    assert f.detail["chosen_longer"] == pytest.approx(0.9)
    assert "90.0%" in f.message and "longer is better" in f.message


def test_length_numbers_match_the_data_readme():
    """data/README.md: support pairs_train 47.0% chosen longer, mean per-pair ratio 1.34; chat 38.0%, 1.25."""
    s = length_stats(read_rows(str(DATA / "support/pairs_train.jsonl")))
    assert round(s["chosen_longer"], 3) == 0.47 and round(s["mean_length_ratio"], 2) == 1.34
    s = length_stats(read_rows(str(DATA / "support/pairs_chat.jsonl")))
    assert round(s["chosen_longer"], 3) == 0.38 and round(s["mean_length_ratio"], 2) == 1.25
    info = codes(lint_rows(read_rows(str(DATA / "support/pairs_train.jsonl"))))["length_balance"]
    assert info.level == "info" and "47.0%" in info.message


# --------------------------------------------------------------------------- verifiable

def test_unparseable_gold_is_an_error_with_lines():
    data = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    data[4]["answer"] = "five"
    data[9]["answer"] = ""
    found = codes(lint_rows(rows_of(data), "verifiable", FakeVerifier()))
    assert found["bad_gold"].lines == [5] and "five" in found["bad_gold"].message
    assert found["missing_gold"].lines == [10]
    assert found["bad_gold"].level == found["missing_gold"].level == "error"


def test_duplicate_prompts_and_constant_gold():
    data = [{"prompt": f"q{i % 8}", "answer": "7"} for i in range(12)]
    found = codes(lint_rows(rows_of(data), "verifiable", FakeVerifier()))
    assert found["duplicate_prompts"].count == 4 and found["duplicate_prompts"].level == "warning"
    assert found["constant_gold"].level == "warning"


def test_pick_verifier_prefers_the_one_that_parses():
    class Json(FakeVerifier):
        def check_gold(self, field, value):
            return None if isinstance(value, dict) else "not a schema"

    registry = {"digits": FakeVerifier(), "json": Json(name="json", gold_fields=("schema", "answer"))}
    numeric = rows_of([{"prompt": "1+1=", "answer": "2"}] * 5)
    assert pick_verifier(numeric, registry).name == "digits"
    schema = rows_of([{"prompt": "p", "schema": {"type": "object"}, "answer": {"a": 1}}] * 5)
    assert pick_verifier(schema, registry).name == "json"
    assert pick_verifier(rows_of([{"prompt": "p", "tests": ["assert 1"]}]), registry) is None


def test_shipped_verifiable_files_pick_their_verifier():
    from rlft.data.rows import verifier_registry

    if not verifier_registry():
        pytest.skip("rlft.verifiers.REGISTRY not there yet")
    for path, name in [("arith/grpo_prompts.jsonl", "math"), ("triage/tickets_train.jsonl", "label"),
                       ("json_extract/train.jsonl", "json")]:
        v = pick_verifier(read_rows(str(DATA / path)))
        assert v is not None and v.name == name, (path, v)


# --------------------------------------------------------------------------- demonstrations

def test_demonstration_checks():
    data = [{"prompt": f"q{i}", "completion": f"a fine answer, number {i}, with enough words in it to be typical"}
            for i in range(40)]
    data[1]["completion"] = ""
    data[2] = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}]}
    data[3]["completion"] = "x" * 5000                   # 5000 > max(10 x median, 2000)
    data[4]["completion"] = "ok"                         # 2 < median / 10
    data.append(dict(data[10]))
    found = codes(lint_rows(rows_of(data)))
    assert found["empty_completion"].lines == [2, 3] and found["empty_completion"].level == "error"
    assert found["long_outliers"].lines == [4]
    assert found["short_outliers"].lines == [5]
    assert found["duplicate_rows"].lines == [41]


def test_short_answers_are_not_outliers_when_all_are_short():
    assert lint_rows(read_rows(str(DATA / "arith/sft_train.jsonl"))) == []


# --------------------------------------------------------------------------- ratings

def test_ratings_checks():
    data = [{"prompt": f"q{i}", "completion": f"r{i}", "rating": 3} for i in range(10)]
    assert codes(lint_rows(rows_of(data)))["constant_rating"].level == "error"
    data[0]["rating"] = 5
    data[1]["rating"] = "great"
    found = codes(lint_rows(rows_of(data), "ratings"))
    assert found["bad_rating"].lines == [2]
    assert "constant_rating" not in found


def test_rating_stats_of_the_shipped_file():
    """data/README.md: 100 rows, counts 1: 28, 2: 23, 3: 13, 4: 13, 5: 23, one reply per prompt."""
    s = rating_stats(read_rows(str(DATA / "ratings/ratings.jsonl")))
    assert (s["min"], s["max"], s["top_threshold"], s["top_rows"], s["pairable_prompts"]) == (1, 5, 4, 36, 0)


def test_mixed_shapes_are_an_error():
    data = pairs(5) + [{"prompt": "q", "completion": "c"}]
    f = codes(lint_rows(rows_of(data)))["mixed_shapes"]
    assert f.level == "error" and f.lines == [6]


def test_lint_does_not_blow_up_on_10k_rows():
    # a guard against quadratic checks (minutes on 10k rows), not a speed goal: a loaded CI machine must pass
    data = rows_of(pairs(10_000))
    start = time.perf_counter()
    lint_rows(data)
    assert time.perf_counter() - start < 5.0


# --------------------------------------------------------------------------- the command

def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    app.add_typer(data_app, name="data")
    return app


runner = CliRunner()


def test_data_lint_clean_file_exits_0_with_a_table():
    r = runner.invoke(_app(), ["data", "lint", str(DATA / "support/pairs_train.jsonl")])
    assert r.exit_code == 0, r.output
    assert "600 pairs rows" in r.output and "length_balance" in r.output


def test_data_lint_error_exits_1(tmp_path):
    f = write_jsonl(tmp_path / "same.jsonl", pairs(100, rejected=lambda i: f"right {i}"))
    r = runner.invoke(_app(), ["data", "lint", str(f)])
    assert r.exit_code == 1
    assert "identical_pairs" in r.output and "no preference" in r.output


def test_data_lint_json(tmp_path):
    data = pairs(20)
    data[0]["rejected"] = data[0]["chosen"]
    f = write_jsonl(tmp_path / "p.jsonl", data)
    r = runner.invoke(_app(), ["data", "lint", str(f), "--json"])
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert out["ok"] is False
    (rep,) = out["files"]
    assert rep["kind"] == "pairs" and rep["rows"] == 20
    f0 = next(x for x in rep["findings"] if x["code"] == "identical_pairs")
    assert f0["level"] == "error" and f0["lines"] == [1] and f0["count"] == 1


def test_data_lint_warnings_only_exit_0(tmp_path):
    f = write_jsonl(tmp_path / "p.jsonl", pairs(10) + pairs(2))
    r = runner.invoke(_app(), ["data", "lint", str(f), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"] is True


def test_data_lint_invalid_kind_and_unknown_columns(tmp_path):
    r = runner.invoke(_app(), ["data", "lint", str(DATA / "support/pairs_train.jsonl"), "--kind", "bogus"])
    assert r.exit_code == 2
    from rlft.errors import UserError

    f = write_jsonl(tmp_path / "odd.jsonl", [{"question": "q", "reply": "r"}])
    r = runner.invoke(_app(), ["data", "lint", str(f)])
    assert isinstance(r.exception, UserError) and "cannot tell" in r.exception.message
    r = runner.invoke(_app(), ["data", "lint", str(tmp_path / "missing.jsonl")])
    assert isinstance(r.exception, UserError) and "does not exist" in r.exception.message
