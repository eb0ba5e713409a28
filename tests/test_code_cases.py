"""How the code verifier reads tests: what converts into cases, what is refused (one line, exit 2), how the code
is found in a completion, and that shipped and benchmark-style rows score 1.0 with their reference solutions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlft.cli import app
from rlft.verifiers import code as code_verifier
from rlft.verifiers.sandbox import convert, explain

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [ROOT / "data/code/tasks.jsonl", *sorted((ROOT / "tests/fixtures/code").glob("*.jsonl"))]


def readings(tests) -> list[str]:
    c = convert.convert(tests)
    assert not c.refusals, c.refusals
    return [explain(case) for t in c.tests for case in t.cases]


@pytest.mark.parametrize("tests,want", [
    ("assert add(1, 2) == 3", ["call add(1, 2); pass when result == 3"]),
    ("assert 3 == add(1, 2), 'msg'", ["call add(1, 2); pass when 3 == result"]),
    ("assert f(x=[1, -2], y=None) != (1,)", ["call f(x=[1, -2], y=None); pass when result != (1,)"]),
    ("assert f('a') is None", ["call f('a'); pass when result is None"]),
    ("assert not f(0)", ["call f(0); pass when bool(result) is False"]),
    ("assert f(0)", ["call f(0); pass when bool(result) is True"]),
    ("assert 'x' in f(0)", ["call f(0); pass when 'x' in result"]),
    ("assert sorted(set(f(0))) == [1]", ["call f(0), then set(result), then sorted(result); pass when result == [1]"]),
    ("assert round(f(0), 2) == 0.33", ["call f(0), then round(result, 2); pass when result == 0.33"]),
    ("assert f(float('inf')) == set()", ["call f(inf); pass when result == set()"]),
    ("import math\nassert math.isclose(f(1), 2.5, rel_tol=0.001)",
     ["call f(1); pass when math.isclose(result, 2.5, rel_tol=0.001, abs_tol=0.0)"]),
    ("assert abs(f(1) - 2.5) < 1e-6", ["call f(1); pass when abs(result - 2.5) < 1e-06"]),
    ("assert abs(2.5 - f(1)) <= 1e-6", ["call f(1); pass when abs(2.5 - result) <= 1e-06"]),
    ("import pytest\nassert f(1) == pytest.approx(2.5)", ["call f(1); pass when result == pytest.approx(2.5)"]),
    ("import pytest\nassert f(1) == pytest.approx({'a': 1.0}, abs=0.1)",
     ["call f(1); pass when result == pytest.approx({'a': 1.0}, abs=0.1)"]),
    ("import numpy as np\nassert np.isclose(f(1), 2.5)",
     ["call f(1); pass when numpy.isclose(result, 2.5, rtol=1e-05, atol=1e-08)"]),
    ("from numpy import allclose\nassert allclose(f(1), [2.5], atol=0.1)",
     ["call f(1); pass when numpy.allclose(result, [2.5], rtol=1e-05, atol=0.1)"]),
    ("assert f(1) == 2.0 / 3.0", ["call f(1); pass when result == 0.6666666666666666"]),
    ("assert f(3 * 19) == 0 ** 0", ["call f(57); pass when result == 1"]),
    ("assert f('a' + 'b') == 'ab' * 2", ["call f('ab'); pass when result == 'abab'"]),
    ("from fractions import Fraction\nassert f() == Fraction(1, 3)", ["call f(); pass when result == Fraction(1, 3)"]),
    ("def check(candidate):\n    '''doc'''\n    assert candidate(1) == 2\n    assert True\ncheck(inc)",
     ["call inc(1); pass when result == 2"]),
    ({"inputs": ["1 2\n"], "outputs": ["3\n"]},
     ["run as a program with stdin '1 2\\n'; pass when stdout equals '3\\n' (1 line; trailing spaces and blank lines "
      "ignored)"]),
    ([{"fn": "f", "args": [[1]], "expected": [2], "abs_tol": 0.5}],
     ["call f([1]); pass when result == [2] within rel 0, abs 0.5 (JSON: tuples compare as lists)"]),
])
def test_supported_shapes_convert(tests, want):
    assert readings(tests) == want


@pytest.mark.parametrize("tests,why", [
    ("x = [3, 1]\nf(x)\nassert x == [1, 3]", "is a statement, not an assert"),  # mutation checks
    ("expected = []\nfor i in range(3):\n    expected.append(i)\nassert f(3) == expected", "is a statement"),
    ("assert f(1) is g(1)", "both sides call functions"),
    ("assert f(1) is 1", "`is` compares identity"),
    ("def test_f():\n    assert f(1) == 2", "defines `test_f` but never calls it"),
    ("def check(candidate):\n    assert candidate(1) == 2", "defines `check` but never calls it"),
    ("def check(candidate):\n    try:\n        candidate(1)\n    except ValueError:\n        pass\ncheck(f)",
     "`Try` in the test"),
    ("def check(candidate):\n    x = 1\n    assert type(candidate(x)) == int\ncheck(f)", "the test uses `type`"),
    ("def check(candidate):\n    x = 1\n    assert candidate(x) is x\ncheck(f)", "`is` compares identity"),
    ("def check(candidate):\n    import numpy\n    x = 1\n    assert candidate(x) == 2\ncheck(f)",
     "not in the standard library"),
    ("def check(candidate):\n    x = [1]\n    assert candidate.__name__ == 'f'\ncheck(f)", "private attribute"),
    ("check(f)\ndef check(candidate):\n    assert candidate(1) == 2", "before it is defined"),
    ("def check(candidate):\n    s = candidate()\n    assert s.two_sum([2, 7], 9) == [0, 1]\ncheck(Solution)",
     "the test uses `.two_sum` of what the code returns"),
    ("assert f(1) == 2 ** 100000", "over 65,536 bits"),
    ("assert f(1) == 1 / 0", "raises ZeroDivisionError"),
    ("assert f(g(1)) == 2", "an argument `g(1)` is not a literal"),
    ("assert f(1) == OrderedDict(x)", "is not a literal"),
    ("assert f(1) == " + " + ".join(["x"] * 400), "is not a literal"),  # used to crash ast.unparse
    ("assert f(1) == 2 == 2", "a chained comparison"),
    ("assert f(1).x == 2", "neither side is a call"),
    ("assert f(1) == Decimal('" + "1" * 1001 + "')", "at most 1,000 characters"),
    ("with pytest.raises(ValueError):\n    f(-1)", "is a statement"),
    ("assert f(", "not valid Python"),
    ("x = 1", "is a statement"),
    ("", "has no assert"),
    ({"inputs": ["1"], "outputs": []}, "differ in length"),
    ({"inputs": [[1]], "outputs": [[2]], "fn_name": "f"}, "APPS call-based"),
    ([{"input": "1", "output": "2", "testtype": "functional"}], "testtype functional"),
    ([{"fn": "f", "args": 1, "expected": 2}], "needs fn (a name), args (a list) and expected"),
    ([], "no tests"),
    (7, "no tests"),
    ("assert f(" + "[" * 150 + "]" * 150 + ") == 1", "nested too deep"),  # would not cross the wall
    ([{"fn": "f", "args": [json.loads("[" * 120 + "]" * 120)], "expected": 1}], "nested too deep"),
])
def test_unsupported_shapes_are_refused(tests, why):
    refusals = convert.convert(tests).refusals
    assert refusals and why in refusals[0].why, refusals
    line = refusals[0].line()
    assert "\n" not in line and "rewrite as" in line and len(line) < 600


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_convert_and_reference_solutions_score_one(path):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert all(code_verifier.check_gold("tests", r["tests"]) is None for r in rows)
    rewards = code_verifier.code_reward([r["solution"] for r in rows], tests=[r["tests"] for r in rows])
    assert rewards == [1.0] * len(rows)
    wrong = code_verifier.code_reward(["def f(*a, **k):\n    return None\nprint()"] * len(rows),
                                      tests=[r["tests"] for r in rows])
    assert all(w < 1.0 for w in wrong), wrong


@pytest.mark.parametrize("text,want", [
    ("Here:\n```python\ndef f():\n    return '```'\n```\nDone.", "def f():\n    return '```'\n"),  # ``` in a string
    ("```py\na = 1\n```\n```python\nb = 2\n```", "b = 2\n"),  # the last python block
    ("```\nc = 3\n```", "c = 3\n"),
    ("```js\nx\n```", ""),  # other languages only: no Python
    ("```python\ncut = 1", "cut = 1"),  # cut off at max tokens
    ("plain = 1", "plain = 1"),
])
def test_extract_code(text, want):
    assert code_verifier.extract_code(text) == want


def test_extraction_is_linear_on_runs_of_spaces():
    started = time.monotonic()
    for text in ("```" + " " * 1_000_000 + "x", "```python\n" + " " * 1_000_000, ("``` " * 200_000)):
        code_verifier.extract_code(text)
    assert time.monotonic() - started < 2.0  # the old regexes backtracked: 13 s on 200k spaces


def test_a_refused_row_never_crashes_the_batch_nor_scores_zero():
    rows = ["assert f(1) == " + " + ".join(["x"] * 400), "assert f(1) == 2"]
    assert "is not a literal" in code_verifier.check_gold("tests", rows[0])
    assert code_verifier.code_reward(["def f(x): return x + 1"] * 2, tests=rows) == [None, 1.0]


def _rows(tmp_path, rows) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_cli_refuses_unsupported_tests_with_one_line_each(tmp_path):
    data = _rows(tmp_path, [{"tests": "assert f(1) == 2", "completion": "def f(x): return 2"},
                            {"tests": "x = 1\nassert f(x) == 2", "completion": "def f(x): return 2"}])
    r = subprocess.run([sys.executable, "-m", "rlft", "verify", "code", "--data", data], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"error: {data}:2: field 'tests': test 1 `x = 1 assert f(x) == 2`")
    assert "rewrite as assert f(<literal args>) == <literal>" in lines[0] and lines[1].startswith("  fix: ")


def test_cli_explain_prints_how_each_test_was_read(tmp_path):
    data = _rows(tmp_path, [{"tests": ["assert f(1) == 2", "assert sorted(f(2)) == [1]"]}])
    r = CliRunner().invoke(app, ["verify", "code", "--data", data, "--explain"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [f"{data}:1: test 1: call f(1); pass when result == 2",
                                     f"{data}:1: test 2: call f(2), then sorted(result); pass when result == [1]"]


def test_cli_table_escapes_terminal_control_sequences(tmp_path):
    completion = "def f(x):\n    return 2  # \x1b[2J\x1b]0;pwned\x07\u202e"
    data = _rows(tmp_path, [{"tests": ["assert f(1) == 2"], "completion": completion}])
    r = CliRunner().invoke(app, ["verify", "code", "--data", data])
    assert r.exit_code == 0, r.output
    assert not any(c in r.output for c in "\x1b\x07\u202e")
    assert "\\x1b[2J" in r.output


def test_the_forgeable_mode_is_never_picked_automatically():
    from rlft.data.rows import pick_verifier

    rows = [{"prompt": "p", "tests": "x = 1\nassert f(x) == 2"}] * 3  # only code_forgeable accepts these
    assert pick_verifier(rows).name != "code_forgeable"
