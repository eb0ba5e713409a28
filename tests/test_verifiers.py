"""The verifier registry: a table of (completion, gold, expected reward) per built-in, adversarial cases
included; gold checks; resolve (names, weights, plugin files, did-you-mean); combine; stress; the
`verify` command through CliRunner. Pure Python and fast: no model, no torch."""

from __future__ import annotations

import doctest
import importlib
import json
import pickle
import subprocess
import sys
import time

import pytest
import typer
from typer.testing import CliRunner

from rlft.errors import UserError
from rlft.verifiers import REGISTRY, Verifier, check_rows, combine, completion_text, gameable, resolve, stress

LONG = "word " * 4000  # 20k chars

# ----------------------------------------------------------------------------- math

MATH_CASES = [
    # the tiny model's bare answer, and the usual ways to state one
    ("46", "46", 1.0),
    ("46\n", "46", 1.0),
    ("46.", "46", 1.0),
    ("The answer is 46.", "46", 1.0),
    ("Add the tens, then the ones.\n#### 46", "46", 1.0),
    ("Answer: 46 apples", "46", 1.0),
    ("12 + 34 = 46", "46", 1.0),
    ("The sum of 12 and 34 is 46", "46", 1.0),
    ("So the total is \\boxed{46}.", "46", 1.0),
    ("<think>12+34</think><answer>46</answer>", "46", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("0.50", "0.5", 1.0),
    ("-3", "-3", 1.0),
    ("$46", "46", 1.0),
    ("46%", "46", 1.0),
    ("Natalia sold 72 clips", "She sold 48/2 = 24 in May, 48+24 = 72 in all. #### 72", 1.0),
    # wrong
    ("45", "46", 0.0),
    ("\\boxed{45}", "46", 0.0),
    ("1 + 2 + 46", "46", 0.0),
    ("The answer is 46 because 12 + 34 = 46", "47", 0.0),
    # slow path: fractions, LaTeX, expressions (math-verify)
    ("so x = \\frac{1}{2}", "0.5", 1.0),
    ("\\boxed{\\frac{92}{2}}", "46", 1.0),
    ("The answer is \\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1.0),
    ("answer: 1/3", "\\frac{1}{3}", 1.0),
    ("answer: 1/4", "\\frac{1}{3}", 0.0),
    ("\\boxed{x^2+1}", "1+x^2", 1.0),
    # adversarial: candidate lists, hedging, several boxes, format without content, padding, length
    ("46 or 47", "46", 0.0),
    ("46, 47, 48", "46", 0.0),
    ("1 2 3 4 5 6 7 8 9 ... 46", "46", 0.0),
    ("maybe 46, or perhaps 47", "46", 0.0),
    ("The answer is 46 or 47", "46", 0.0),
    ("$46$ or $47$", "46", 0.0),
    ("\\boxed{46} \\boxed{47}", "46", 0.0),
    ("\\boxed{47} \\boxed{46}", "46", 0.0),
    ("<answer>46</answer><answer>47</answer>", "46", 0.0),
    ("46 46 46", "46", 1.0),  # one value repeated commits to one answer: it scores (module docstring)
    ("\\boxed{46} so \\boxed{46.0}", "46", 1.0),
    ("<think></think><answer></answer>", "46", 0.0),
    ("<think>it is 46</think><answer>47</answer>", "46", 0.0),  # right format, wrong content
    ("", "46", 0.0),
    ("   \n ", "46", 0.0),
    (" " * 6000 + "46" + "\n" * 6000, "46", 1.0),  # padding around the answer: still the answer
    (LONG + " 46", "46", 0.0),  # long, no box, tag or marker: never committed to an answer
    (LONG + "\n#### 46", "46", 1.0),
    ("\\boxed{" * 3000, "46", 0.0),
    (" ".join(str(i) for i in range(1, 200)), "46", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", MATH_CASES)
def test_math(completion, gold, expected):
    assert REGISTRY["math"].fn([completion], answer=[gold]) == [expected]


def test_math_chat_shaped_and_extra_kwargs():
    completions = [[{"role": "assistant", "content": "\\boxed{46}"}],
                   [{"role": "assistant", "content": "47"}]]
    out = REGISTRY["math"].fn(completions, answer=["46", "46"], prompts=["12+34=", "12+34="],
                              completion_ids=[[1], [2]], trainer_state=None)
    assert out == [1.0, 0.0]


def test_math_unusable_gold_is_none_and_long_output_is_fast():
    assert REGISTRY["math"].fn(["46"], answer=["billing"]) == [None]
    started = time.perf_counter()
    huge = ["1 " * 500_000 + "#### 46", "\\boxed{" * 100_000, "<answer>" * 100_000, "x" * 1_000_000]
    REGISTRY["math"].fn(huge, answer=["46"] * len(huge))
    assert time.perf_counter() - started < 1.0


# ----------------------------------------------------------------------------- label

LABELS = ["billing", "bug", "account"]
LABEL_CASES = [
    ("billing", "billing", 1.0),
    (" Billing. ", "billing", 1.0),
    ('"billing"', "billing", 1.0),
    ("bug", "billing", 0.0),
    ("billing bug account", "billing", 0.0),  # label stuffing
    ("billing billing", "billing", 0.0),
    ("The label is billing", "billing", 0.0),
    ("", "billing", 0.0),
    ("billingx", "billing", 0.0),
    (LONG + "billing", "billing", 0.0),
]
LABEL_PARTIAL_CASES = [
    ("billing", "billing", 1.0),
    ("Billing!", "billing", 1.0),
    ("It is billing, I think", "billing", 0.5),
    ("billing billing billing", "billing", 0.5),
    ("billing bug account", "billing", 0.0),  # label stuffing: other labels appear
    ("billing or bug", "billing", 0.0),
    ("rebilling", "billing", 0.0),  # whole words only, never substring "contains"
    ("bug", "billing", 0.0),
    ("", "billing", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", LABEL_CASES)
def test_label(completion, gold, expected):
    assert REGISTRY["label"].fn([completion], label=[gold]) == [expected]


@pytest.mark.parametrize("completion,gold,expected", LABEL_PARTIAL_CASES)
def test_label_partial(completion, gold, expected):
    assert REGISTRY["label_partial"].fn([completion], label=[gold], labels=[LABELS]) == [expected]


def test_label_partial_known_labels_from_batch():
    # no `labels` field: the labels are the golds seen in the batch
    out = REGISTRY["label_partial"].fn(["billing bug", "it is bug", "account"], label=LABELS)
    assert out == [0.0, 0.5, 1.0]


# ----------------------------------------------------------------------------- json

CITY = {"type": "object", "required": ["city", "pincode"],
        "properties": {"city": {"type": "string", "minLength": 1}, "pincode": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string"}}}}
STRICT = {**CITY, "additionalProperties": False}
JSON_CASES = [
    ('{"city": "Pune", "pincode": 411001}', CITY, 1.0),
    ('```json\n{"city": "Pune", "pincode": 411001}\n```', CITY, 1.0),
    ('{"city": "Pune", "pincode": 411001, "tags": ["a"]}', json.dumps(CITY), 1.0),  # schema as a JSON string
    ('{"city": "Pune", "pincode": 411001.0}', CITY, 1.0),  # JSON Schema: 1.0 is an integer
    ('{"city": "Pune"}', CITY, 0.0),  # missing required
    ('{"city": "Pune", "pincode": "411001"}', CITY, 0.0),  # wrong type
    ('{"city": "Pune", "pincode": true}', CITY, 0.0),  # bool is not an integer
    ('{"city": "", "pincode": 411001}', CITY, 0.0),  # minLength
    ('{"city": "Pune", "pincode": 1, "tags": [1]}', CITY, 0.0),  # items
    ('{"city": "Pune", "pincode": 1, "extra": 1}', STRICT, 0.0),  # additionalProperties: false
    ('{"city": "Pune", "city": "X", "pincode": 1}', CITY, 0.0),  # duplicate key
    ('Here it is: {"city": "Pune", "pincode": 411001}', CITY, 0.0),  # prose around the object
    ('[{"city": "Pune", "pincode": 411001}]', CITY, 0.0),  # not an object
    ('{"city": "Pune", "pincode": NaN}', CITY, 0.0),
    ("city: Pune, pincode: 411001", CITY, 0.0),
    ("", CITY, 0.0),
    ("[" * 100_000, CITY, 0.0),
]


@pytest.mark.parametrize("completion,schema,expected", JSON_CASES)
def test_json(completion, schema, expected):
    assert REGISTRY["json"].fn([completion], schema=[schema]) == [expected]


# ----------------------------------------------------------------------------- regex

DATE = r"\d{4}-\d{2}-\d{2}"
REGEX_CASES = [
    ("2024-05-01", DATE, 1.0),
    ("  2024-05-01\n", DATE, 1.0),
    ("on 2024-05-01", DATE, 0.0),  # full match, not search
    ("2024-05-01 2024-05-02", DATE, 0.0),
    ("", DATE, 0.0),
    ("a" * 20_000, r"(a+)+$", 0.0),  # longer than MAX_CHARS: no backtracking at all
]


@pytest.mark.parametrize("completion,pattern,expected", REGEX_CASES)
def test_regex(completion, pattern, expected):
    assert REGISTRY["regex"].fn([completion], pattern=[pattern]) == [expected]


# ----------------------------------------------------------------------------- code

ADD_TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0"
CODE_CASES = [
    ("```python\ndef add(a, b):\n    return a + b\n```", ADD_TESTS, 1.0),
    ("def add(a, b):\n    return a + b", ["assert add(1, 2) == 3", "assert add(2, 2) == 4"], 1.0),
    ("Sure!\n```python\ndef add(a, b):\n    return a * b\n```\nHope it helps.", ADD_TESTS, 0.0),
    ("```python\ndef add(a, b):\n    return a - b if a < 0 else a + b\n```", ADD_TESTS, 0.5),
    ("```python\ndef add(a, b):\n    return a + b", ADD_TESTS, 1.0),  # fence cut off by max tokens
    ("```js\nfunction add(a, b) { return a + b }\n```", ADD_TESTS, 0.0),
    ("def add(a, b) return a + b", ADD_TESTS, 0.0),  # syntax error
    ("", ADD_TESTS, 0.0),
    ("import os\nos._exit(0)", ADD_TESTS, 0.0),  # exits before the tests: no pass is reported
    ("class A:\n    def __eq__(s, o): return True\ndef add(a, b): return A()", ADD_TESTS, 0.0),  # AlwaysEqual
]


def test_code_table():
    completions, tests, expected = zip(*CODE_CASES)
    assert REGISTRY["code"].fn(list(completions), tests=list(tests)) == list(expected)


# ----------------------------------------------------------------------------- format

FORMAT_CASES = [
    ("<think>12 + 34 is 46</think>\n<answer>46</answer>", 1.0),
    ("  <think>x</think><answer>y</answer>\n", 1.0),
    ("<think></think><answer></answer>", 0.0),  # the format with no content
    ("<think>x</think>", 0.0),
    ("<answer>46</answer><think>x</think>", 0.0),
    ("<think>a</think><answer>b</answer><answer>c</answer>", 0.0),
    ("Sure. <think>x</think><answer>y</answer>", 0.0),
    ("46", 0.0),
    ("", 0.0),
]


@pytest.mark.parametrize("completion,expected", FORMAT_CASES)
def test_format(completion, expected):
    assert REGISTRY["format"].fn([completion]) == [expected]
    assert REGISTRY["format"].fn([[{"role": "assistant", "content": completion}]]) == [expected]


def test_registry_flags():
    assert REGISTRY["format"].format_only and not REGISTRY["math"].format_only
    assert REGISTRY["label_partial"].partial_credit and REGISTRY["code"].partial_credit
    assert {name: v.gold_fields for name, v in REGISTRY.items()} == {
        "math": ("answer",), "label": ("label",), "label_partial": ("label",), "json": ("schema",),
        "regex": ("pattern",), "code": ("tests",), "code_forgeable": ("tests",), "format": (),
        "support_policy": ("decision", "policy")}
    assert all(v.description for v in REGISTRY.values())


def test_completion_text_shapes():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "x"}]) == "x"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]) == "x"
    assert completion_text(None) == ""


# ----------------------------------------------------------------------------- gold checks

GOLD_CASES = [
    ("math", "answer", "46", None),
    ("math", "answer", 46, None),
    ("math", "answer", "\\frac{1}{3}", None),
    ("math", "answer", "billing", "cannot parse"),
    ("math", "answer", "", "empty"),
    ("math", "answer", True, "expected a number"),
    ("label", "label", "billing", None),
    ("label", "label", "  ", "empty label"),
    ("label", "label", ["a"], "expected a label string"),
    ("json", "schema", CITY, None),
    ("json", "schema", "{not json", "expected a JSON schema"),
    ("json", "schema", {"type": "object"}, "checks nothing"),
    ("json", "schema", {"required": ["a"], "properties": {"a": {"type": "strnig"}}}, "unknown type"),
    ("regex", "pattern", DATE, None),
    ("regex", "pattern", "([a-z", "bad regular expression"),
    ("code", "tests", ADD_TESTS, None),
    ("code", "tests", ["assert f() == 1"], None),
    ("code", "tests", "assert f(", "not valid Python"),
    ("code", "tests", "x = 1", "is a statement, not an assert"),
    ("code", "tests", "assert f(1) == g(2)", "both sides call functions"),
    ("code_forgeable", "tests", "x = 1\nassert f(x) == g(2)", None),
    ("code_forgeable", "tests", ["x = 1"], "has no assert"),
    ("code", "tests", [], "expected a string"),
]


@pytest.mark.parametrize("name,field,value,problem", GOLD_CASES)
def test_check_gold(name, field, value, problem):
    why = REGISTRY[name].check_gold(field, value)
    assert (why is None) if problem is None else (problem in why), why


def test_check_rows_reports_file_line_field():
    rows = [(1, {"answer": "46"}), (2, {"prompt": "x"}), (3, {"answer": "billing"})]
    problems = check_rows(REGISTRY["math"], rows, "data.jsonl")
    assert len(problems) == 2
    assert problems[0].startswith("data.jsonl:2: field 'answer': missing")
    assert problems[1].startswith("data.jsonl:3: field 'answer': cannot parse")


# ----------------------------------------------------------------------------- resolve / combine

PLUGIN = '''
def contains(completions, answer, **kwargs):
    """A deliberately bad verifier: the answer appears anywhere in the completion."""
    return [1.0 if str(a) in str(c) else 0.0 for c, a in zip(completions, answer)]
contains.gold_fields = ("answer",)

def exact(completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]
'''


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(PLUGIN)
    return path


def test_resolve_names_and_weights():
    assert resolve("math") == (REGISTRY["math"], 1.0)
    assert resolve("label_partial:0.5") == (REGISTRY["label_partial"], 0.5)
    assert resolve(" format:-1 ")[1] == -1.0


def test_resolve_plugin(plugin):
    verifier, weight = resolve(f"{plugin}:contains")
    assert (verifier.name, verifier.gold_fields, weight) == ("contains", ("answer",), 1.0)
    assert verifier.description.startswith("A deliberately bad verifier")
    assert verifier.fn(["x46y"], answer=["46"]) == [1.0]
    verifier, weight = resolve(f"{plugin}:exact:0.25")
    assert (verifier.gold_fields, weight) == (("answer",), 0.25)  # no attribute: the required parameters


@pytest.mark.parametrize("spec,message,fix", [
    ("mth", "unknown verifier 'mth'", "did you mean 'math'?"),
    ("lable_partial", "unknown verifier", "did you mean 'label_partial'?"),
    ("zzz", "unknown verifier 'zzz'", "known verifiers: code, code_forgeable, format, json"),
    ("math:heavy", "bad weight 'heavy'", "NAME:WEIGHT"),
    ("math:nan", "bad weight", "NAME:WEIGHT"),
    ("nowhere/rewards.py:fn", "not found", "check the path"),
])
def test_resolve_errors(spec, message, fix):
    with pytest.raises(UserError) as info:
        resolve(spec)
    assert message in info.value.message and fix in info.value.fix


def test_resolve_plugin_errors(plugin, tmp_path):
    with pytest.raises(UserError, match="has no function 'contain'") as info:
        resolve(f"{plugin}:contain")
    assert "did you mean 'contains'?" in info.value.fix
    with pytest.raises(UserError, match="names a file but no function"):
        resolve(str(plugin))
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(UserError, match="RuntimeError: boom"):
        resolve(f"{broken}:fn")
    with pytest.raises(UserError, match="bad weight"):
        resolve(f"{plugin}:contains:x")


def test_resolve_entry_point(monkeypatch):
    from rlft.verifiers import registry

    class FakeEntryPoint:
        name = "yes"

        @staticmethod
        def load():
            def always(completions, **kwargs):
                return [1.0] * len(completions)
            return always

    monkeypatch.setattr(registry, "_entry_points", lambda: {"yes": FakeEntryPoint})
    verifier, weight = resolve("yes:2")
    assert (verifier.name, weight, verifier.fn(["a"])) == ("yes", 2.0, [1.0])


def test_combine_weights_and_none():
    def only_first(completions, **kwargs):
        return [1.0] + [None] * (len(completions) - 1)

    never = Verifier("never", lambda completions, **kw: [None] * len(completions))
    fn = combine([(REGISTRY["math"], 1.0), (REGISTRY["format"], 0.5), (Verifier("first", only_first), 2.0)])
    assert fn.__name__ == "math+0.5*format+2*first"
    assert fn.gold_fields == ("answer",)
    out = fn(["<think>a</think><answer>46</answer>", "46", "45"], answer=["46"] * 3)
    assert out == [3.5, 1.0, 0.0]
    assert combine([(never, 1.0)])(["x"]) == [None]
    assert pickle.loads(pickle.dumps(combine([resolve("math")])))(["46"], answer=["46"]) == [1.0]  # picklable


# ----------------------------------------------------------------------------- stress

ARITH = [{"answer": "46", "completion": "46"}, {"answer": "98"}, {"answer": "112"}, {"answer": "63"}]


def test_stress_math_not_gameable():
    results = {r.name: r for r in stress(REGISTRY["math"], ARITH)}
    assert set(results) == {"empty", "whitespace", "repetition", "all_candidates", "other_gold",
                            "format_only", "format_junk", "wrapped_junk"}
    assert not gameable(results.values())
    assert results["whitespace"].acceptance == 1.0 and not results["whitespace"].must_fail
    assert all(r.acceptance == 0 and r.n == 4 for r in results.values() if r.must_fail)


def test_stress_contains_plugin_gameable(plugin):
    results = {r.name: r for r in stress(resolve(f"{plugin}:contains")[0], ARITH)}
    assert gameable(results.values())
    assert results["all_candidates"].acceptance == 1.0 and results["wrapped_junk"].acceptance == 1.0


def test_stress_format_only_verifier_is_gameable():
    results = {r.name: r for r in stress(REGISTRY["format"], [{"prompt": "x"}, {"prompt": "y"}])}
    assert gameable(results.values()) and results["format_junk"].acceptance == 1.0
    assert results["format_only"].acceptance == 0.0  # the empty tags alone do not pass


def test_stress_labels():
    rows = [{"label": g, "labels": LABELS} for g in LABELS]
    assert not gameable(stress(REGISTRY["label"], rows))
    assert not gameable(stress(REGISTRY["label_partial"], rows))


# ----------------------------------------------------------------------------- the verify command

@pytest.fixture
def app():
    from rlft.commands.verify import verify

    app = typer.Typer()
    app.callback()(lambda: None)
    app.command("verify")(verify)
    return app


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_verify_command_json(app, tmp_path):
    data = _jsonl(tmp_path / "rows.jsonl", [
        {"prompt": "12+34=", "answer": "46", "completion": "46"},
        {"prompt": "12+34=", "answer": "46", "completion": [{"role": "assistant", "content": "46 or 47"}]},
        "",
        {"prompt": "1+1=", "answer": "2"},
    ])
    result = CliRunner().invoke(app, ["verify", "math", "--data", str(data), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"line": 1, "reward": 1.0}, {"line": 2, "reward": 0.0},
                                         {"line": 4, "reward": None}]


def test_verify_command_table(app, tmp_path):
    data = _jsonl(tmp_path / "rows.jsonl", [{"label": "billing", "completion": "billing bug account"}])
    result = CliRunner().invoke(app, ["verify", "label", "-d", str(data)])
    assert result.exit_code == 0, result.output
    assert "billing bug account" in result.output and "mean reward 0.000" in result.output


def test_verify_command_stress(app, tmp_path, plugin):
    data = _jsonl(tmp_path / "rows.jsonl", ARITH)
    ok = CliRunner().invoke(app, ["verify", "math", "--data", str(data), "--stress", "--json"])
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.output)
    assert report["gameable"] is False
    assert {f["name"] for f in report["families"]} >= {"empty", "all_candidates"}
    bad = CliRunner().invoke(app, ["verify", f"{plugin}:contains", "--data", str(data), "--stress"])
    assert bad.exit_code == 1 and "GAMEABLE" in bad.output


NAIVE = '''
def naive(completions, answer, **kwargs):
    return [1.0 if str(a) in c else 0.0 for c, a in zip(completions, answer)]

def unnamed(completions, **kwargs):
    return [1.0 if str(a) in c else 0.0 for c, a in zip(completions, kwargs["solution"])]
'''


def test_stress_takes_gold_fields_from_the_signature(app, tmp_path):
    path = tmp_path / "naive.py"
    path.write_text(NAIVE)
    data = _jsonl(tmp_path / "rows.jsonl", [{"prompt": "12+34=", "answer": "46", "solution": "46"},
                                            {"prompt": "50+48=", "answer": "98", "solution": "98"}])
    result = CliRunner().invoke(app, ["verify", f"{path}:naive", "--data", str(data), "--stress", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    accepted = {f["name"] for f in report["families"] if f["must_fail"] and f["acceptance"] > 0}
    assert report["gameable"] and {"all_candidates", "wrapped_junk"} <= accepted and report["untested"] == []
    table = CliRunner().invoke(app, ["verify", f"{path}:naive", "--data", str(data), "--stress"])
    assert table.exit_code == 1 and "gameable: junk completions earn reward (all_candidates" in table.output


def test_stress_reports_families_it_could_not_build(app, tmp_path):
    path = tmp_path / "naive.py"
    path.write_text(NAIVE)
    data = _jsonl(tmp_path / "rows.jsonl", [{"prompt": "12+34=", "solution": "46"},
                                            {"prompt": "50+48=", "solution": "98"}])
    blind = CliRunner().invoke(app, ["verify", f"{path}:unnamed", "--data", str(data), "--stress", "--json"])
    report = json.loads(blind.output)
    assert blind.exit_code == 0 and not report["gameable"]  # nothing it could test games it...
    assert set(report["untested"]) == {"all_candidates", "other_gold", "wrapped_junk"}  # ...and it says so
    by_name = {f["name"]: f for f in report["families"]}
    assert not by_name["all_candidates"]["tested"] and "--gold" in by_name["all_candidates"]["why_not"]
    table = CliRunner().invoke(app, ["verify", f"{path}:unnamed", "--data", str(data), "--stress"])
    assert "not tested" in table.output and "NOT TESTED: all_candidates" in table.output
    assert "not gameable by these families" not in table.output
    named = CliRunner().invoke(app, ["verify", f"{path}:unnamed", "--data", str(data), "--stress", "--gold",
                                     "solution"])
    assert named.exit_code == 1 and "GAMEABLE" in named.output


@pytest.mark.parametrize("name,rows,message", [
    ("mth", [{"answer": "46", "completion": "46"}], "unknown verifier 'mth'"),
    ("math", [{"prompt": "x", "completion": "46"}], "rows.jsonl:1: field 'answer': missing"),
    ("math", [{"answer": "billing", "completion": "46"}], "cannot parse 'billing'"),
    ("regex", [{"pattern": "([a-z", "completion": "a"}], "bad regular expression"),
    ("math", ['{"answer": "46"', {"answer": "1"}], "rows.jsonl:1: bad JSON"),
    ("math", [{"answer": "46"}], "no row has a `completion`"),
])
def test_verify_command_bad_input(app, tmp_path, name, rows, message):
    data = _jsonl(tmp_path / "rows.jsonl", rows)
    result = CliRunner().invoke(app, ["verify", name, "--data", str(data)])
    assert isinstance(result.exception, UserError), result.output
    assert message in result.exception.message


# ----------------------------------------------------------------------------- hygiene

VERIFIER_MODULES = ["common", "math", "label", "json_schema", "regex", "code", "format", "registry", "stress",
                    "sandbox.run", "sandbox.values", "sandbox.convert", "sandbox.cases"]


@pytest.mark.parametrize("module", VERIFIER_MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"rlft.verifiers.{module}"))
    assert result.failed == 0 and result.attempted > 0


def test_no_heavy_imports():
    code = ("import sys, rlft.verifiers\nv = rlft.verifiers.resolve('math')[0]\nv.fn(['46'], answer=['46'])\n"
            "heavy = {'torch', 'transformers', 'trl', 'datasets', 'sympy', 'math_verify'}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
