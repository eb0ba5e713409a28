"""The shipped sample sets in data/: reproducible from data/make_samples.py, and of the documented shape.

Stdlib only (no torch, no rlft import): it checks the files, not the code that reads them.
"""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
SCRIPT = DATA / "make_samples.py"

# file -> (rows, shape); the counts data/README.md states.
FILES = {
    "support/pairs_train.jsonl": (600, "pairs"),
    "support/pairs_eval.jsonl": (100, "pairs"),
    "support/pairs_chat.jsonl": (50, "pairs_chat"),
    "support/demos.jsonl": (200, "demos"),
    "ratings/ratings.jsonl": (100, "ratings"),
    "triage/tickets_train.jsonl": (400, "triage"),
    "triage/tickets_eval.jsonl": (100, "triage"),
    "json_extract/train.jsonl": (200, "json_extract"),
    "json_extract/eval.jsonl": (50, "json_extract"),
    "code/tasks.jsonl": (43, "code"),
    "word_problems/train.jsonl": (600, "word_problems"),
    "word_problems/test.jsonl": (150, "word_problems"),
}
MAX_PROMPT, MAX_ANSWER = 160, 200  # exclusive bounds on support texts (the tiny char model's budget)
MAX_FILE_BYTES = 300_000
LABELS = ["billing", "bug", "account", "shipping"]


def rows(rel: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / rel).read_text(encoding="ascii").splitlines()]


def tiny_vocab(s: str) -> bool:
    """Printable ASCII + newline: the character-level tiny model's vocabulary."""
    return all(c == "\n" or 32 <= ord(c) <= 126 for c in s)


def test_regenerates_byte_identical(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "length bias" in proc.stdout
    made = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert made == sorted(FILES), "make_samples.py writes a different file list than the test expects"
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (DATA / rel).read_bytes(), (
            f"data/{rel} differs from a fresh `python data/make_samples.py` run: regenerate and commit")


@pytest.mark.parametrize("rel", sorted(FILES))
def test_file_is_clean_jsonl(rel):
    raw = (DATA / rel).read_bytes()
    assert len(raw) < MAX_FILE_BYTES, f"{rel} is {len(raw)} bytes"
    assert all(b < 128 for b in raw), f"{rel} is not plain ASCII"
    assert b"\r" not in raw and raw.endswith(b"\n")
    lines = raw.decode("ascii").split("\n")[:-1]
    assert len(lines) == FILES[rel][0]
    assert all(lines), "blank line"
    assert len(set(lines)) == len(lines), "duplicate rows"
    for i, line in enumerate(lines, 1):
        assert isinstance(json.loads(line), dict), f"{rel}:{i} is not an object"


def check_pair_texts(prompt: str, chosen: str, rejected: str, where: str) -> None:
    assert chosen != rejected, where
    assert chosen.strip() and rejected.strip() and prompt.strip(), where
    assert len(prompt) < MAX_PROMPT, where
    assert len(chosen) < MAX_ANSWER and len(rejected) < MAX_ANSWER, where
    assert tiny_vocab(prompt + chosen + rejected), where


@pytest.mark.parametrize("rel", ["support/pairs_train.jsonl", "support/pairs_eval.jsonl"])
def test_pairs(rel):
    data = rows(rel)
    for i, r in enumerate(data, 1):
        assert set(r) == {"prompt", "chosen", "rejected"}, f"{rel}:{i}"
        assert all(isinstance(r[k], str) for k in r), f"{rel}:{i}"
        assert r["prompt"].startswith("Customer: ") and r["prompt"].endswith("\nAgent:"), f"{rel}:{i}"
        assert r["chosen"].startswith(" ") and r["rejected"].startswith(" "), f"{rel}:{i}"
        check_pair_texts(r["prompt"], r["chosen"], r["rejected"], f"{rel}:{i}")
    assert len({r["prompt"] for r in data}) == len(data), "duplicate prompts"
    # Length balanced on purpose: chosen is the longer reply in roughly half of the pairs.
    longer = sum(len(r["chosen"]) > len(r["rejected"]) for r in data) / len(data)
    assert 0.35 <= longer <= 0.65, longer
    of_means = sum(len(r["chosen"]) for r in data) / sum(len(r["rejected"]) for r in data)
    assert 0.8 <= of_means <= 1.25, of_means


def test_pairs_chat():
    rel = "support/pairs_chat.jsonl"
    for i, r in enumerate(rows(rel), 1):
        assert set(r) == {"prompt", "chosen", "rejected"}, f"{rel}:{i}"
        for key, role in (("prompt", "user"), ("chosen", "assistant"), ("rejected", "assistant")):
            msgs = r[key]
            assert isinstance(msgs, list) and len(msgs) == 1, f"{rel}:{i}:{key}"
            assert set(msgs[0]) == {"role", "content"} and msgs[0]["role"] == role, f"{rel}:{i}:{key}"
            assert isinstance(msgs[0]["content"], str), f"{rel}:{i}:{key}"
        check_pair_texts(r["prompt"][0]["content"], r["chosen"][0]["content"], r["rejected"][0]["content"],
                         f"{rel}:{i}")


def test_support_splits_do_not_share_customer_messages():
    def msg(r: dict) -> str:
        p = r["prompt"] if "prompt" in r else r["messages"][1]["content"]
        if isinstance(p, list):
            return p[0]["content"]
        return p.removeprefix("Customer: ").removesuffix("\nAgent:")

    seen: dict[str, str] = {}
    for rel in ("support/pairs_train.jsonl", "support/pairs_eval.jsonl", "support/pairs_chat.jsonl",
                "support/demos.jsonl", "ratings/ratings.jsonl"):
        for r in rows(rel):
            m = msg(r)
            assert m not in seen, f"{rel} repeats a customer message of {seen.get(m)}: {m!r}"
            seen[m] = rel


def test_demos():
    rel = "support/demos.jsonl"
    systems = set()
    for i, r in enumerate(rows(rel), 1):
        assert set(r) == {"messages"}, f"{rel}:{i}"
        msgs = r["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant"], f"{rel}:{i}"
        for m in msgs:
            assert set(m) == {"role", "content"} and isinstance(m["content"], str), f"{rel}:{i}"
            assert m["content"].strip(), f"{rel}:{i}"
            assert tiny_vocab(m["content"]), f"{rel}:{i}"
        assert len(msgs[1]["content"]) < MAX_PROMPT and len(msgs[2]["content"]) < MAX_ANSWER, f"{rel}:{i}"
        systems.add(msgs[0]["content"])
    assert len(systems) == 1, "every demo carries the same policy as its system message"


def test_ratings():
    rel = "ratings/ratings.jsonl"
    data = rows(rel)
    for i, r in enumerate(data, 1):
        assert set(r) == {"prompt", "completion", "rating"}, f"{rel}:{i}"
        assert isinstance(r["prompt"], str) and isinstance(r["completion"], str), f"{rel}:{i}"
        assert type(r["rating"]) is int and 1 <= r["rating"] <= 5, f"{rel}:{i}"
        assert len(r["prompt"]) < MAX_PROMPT and len(r["completion"]) < MAX_ANSWER, f"{rel}:{i}"
        assert tiny_vocab(r["prompt"] + r["completion"]), f"{rel}:{i}"
    assert set(Counter(r["rating"] for r in data)) == {1, 2, 3, 4, 5}


@pytest.mark.parametrize("rel", ["triage/tickets_train.jsonl", "triage/tickets_eval.jsonl"])
def test_triage(rel):
    data = rows(rel)
    for i, r in enumerate(data, 1):
        assert set(r) == {"prompt", "label", "labels"}, f"{rel}:{i}"
        assert r["labels"] == LABELS, f"{rel}:{i}"
        assert r["label"] in LABELS, f"{rel}:{i}"
        assert r["prompt"].startswith("Classify the ticket into one of: billing, bug, account, shipping.\n"
                                      "Ticket: "), f"{rel}:{i}"
        assert r["prompt"].endswith("\nLabel:"), f"{rel}:{i}"
        assert tiny_vocab(r["prompt"]), f"{rel}:{i}"
    counts = Counter(r["label"] for r in data)
    assert set(counts) == set(LABELS)
    assert max(counts.values()) <= 2 * min(counts.values()), counts


def test_triage_splits_disjoint():
    train = {r["prompt"] for r in rows("triage/tickets_train.jsonl")}
    assert not train & {r["prompt"] for r in rows("triage/tickets_eval.jsonl")}


JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) in (int, float) and math.isfinite(v),
    "boolean": lambda v: type(v) is bool,
}


@pytest.mark.parametrize("rel", ["json_extract/train.jsonl", "json_extract/eval.jsonl"])
def test_json_extract(rel):
    for i, r in enumerate(rows(rel), 1):
        where = f"{rel}:{i}"
        assert set(r) == {"prompt", "schema", "answer"}, where
        s = r["schema"]
        assert s["type"] == "object" and isinstance(s["required"], list) and s["required"], where
        assert set(s["required"]) == set(s["properties"]), where
        assert set(r["answer"]) == set(s["required"]), where
        for key, spec in s["properties"].items():
            assert spec["type"] in JSON_TYPES, where
            assert JSON_TYPES[spec["type"]](r["answer"][key]), f"{where}: {key} is not {spec['type']}"
            assert key in r["prompt"], f"{where}: the prompt does not name {key}"
        assert r["prompt"].endswith("\nJSON:") and tiny_vocab(r["prompt"]), where
        text = r["prompt"].split("\nText: ", 1)[1]
        for key, value in r["answer"].items():
            if isinstance(value, str):
                assert value in text, f"{where}: {key}={value!r} is not in the text"


def test_json_extract_splits_disjoint():
    train = {r["prompt"] for r in rows("json_extract/train.jsonl")}
    assert not train & {r["prompt"] for r in rows("json_extract/eval.jsonl")}


def run_tests(source: str, tests: list[str]) -> list[bool]:
    env: dict = {}
    exec(source, env)  # noqa: S102 -- the repository's own reference solutions and stubs
    passed = []
    for t in tests:
        try:
            exec(t, dict(env))  # noqa: S102
            passed.append(True)
        except Exception:  # noqa: BLE001 -- any error is a failed test
            passed.append(False)
    return passed


def test_code_tasks():
    rel = "code/tasks.jsonl"
    data = rows(rel)
    names = []
    for i, r in enumerate(data, 1):
        where = f"{rel}:{i}"
        assert set(r) == {"prompt", "tests", "solution"}, where
        assert isinstance(r["prompt"], str) and isinstance(r["solution"], str), where
        assert isinstance(r["tests"], list) and len(r["tests"]) >= 3, where
        assert all(isinstance(t, str) and t.startswith("assert ") for t in r["tests"]), where
        fn = [n for n in ast.parse(r["solution"]).body if isinstance(n, ast.FunctionDef)]
        assert len(fn) == 1, where
        name = fn[0].name
        names.append(name)
        assert f"{name}(" in r["prompt"], f"{where}: the prompt does not name {name}"
        # The reference solution passes every test ...
        assert all(run_tests(r["solution"], r["tests"])), f"{where}: the reference solution fails"
        # ... a stub passes none, and no constant answer passes them all (the tests check values).
        args = ", ".join(a.arg for a in fn[0].args.args)
        assert not any(run_tests(f"def {name}({args}):\n    return None\n", r["tests"])), where
        expected = {t.rsplit(" == ", 1)[1] for t in r["tests"]}
        assert len(expected) > 1, f"{where}: every test expects the same value"
    assert len(set(names)) == len(names), "duplicate function names"
    assert len({r["prompt"] for r in data}) == len(data)


def test_readme_names_every_file_and_quotes_real_rows():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for rel in FILES:
        assert rel in readme, f"data/README.md does not describe {rel}"
    shipped = [r for rel in FILES for r in rows(rel)]
    examples = re.findall(r"```json\n(.*?)\n```", readme, re.DOTALL)
    assert examples
    for text in examples:
        assert json.loads(text) in shipped, f"data/README.md quotes a row that is not shipped: {text[:80]}"


@pytest.mark.parametrize("rel", ["word_problems/train.jsonl", "word_problems/test.jsonl"])
def test_word_problems(rel):
    data = rows(rel)
    assert len(data) == FILES[rel][0]
    ops = Counter()
    for i, r in enumerate(data, 1):
        where = f"{rel}:{i}"
        assert set(r) == ({"prompt", "completion", "answer"} if "train" in rel else {"prompt", "answer"}), where
        assert r["prompt"].endswith("?") and tiny_vocab(r["prompt"]) and r["answer"].isdigit(), where
        if "completion" in r:
            m = re.fullmatch(r"(\d+) ([-+x/]) (\d+) = (\d+)\. The answer is (\d+)\.", r["completion"])
            assert m, f"{where}: {r['completion']!r}"
            a, op, b, c, final = m.groups()
            value = {"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b), "/": int(a) / int(b)}[op]
            assert value == int(c) == int(final) == int(r["answer"]), where
            assert a in r["prompt"] and b in r["prompt"], f"{where}: the numbers come from the question"
            ops[op] += 1
    if ops:
        assert set(ops) == {"+", "-", "x", "/"} and min(ops.values()) > 100, ops


def word_problem_key(prompt: str) -> tuple:
    """(kind, numbers): the question without its name and item."""
    kind = next(k for k in ("gets", "gave", "box", "shares") if k in prompt)
    return kind, tuple(re.findall(r"\d+", prompt))


def test_word_problem_splits_disjoint():
    train = {r["prompt"] for r in rows("word_problems/train.jsonl")}
    test = {r["prompt"] for r in rows("word_problems/test.jsonl")}
    assert len(train) == 600 and len(test) == 150 and not train & test
    # Held out by operation and numbers, not only by wording: no test question is a training one renamed.
    assert not {word_problem_key(p) for p in train} & {word_problem_key(p) for p in test}
