"""Tool and environment code is contained where rlft can contain it: results become text with caps before the
tokenizer (huge ints, lone surrogates: an error result), SystemExit / CancelledError / prints / chdir of a tool are
that call's business, signatures are checked against how rlft calls them before the model loads (positional-only,
two tools of one name, static methods, reset's keywords), SystemExit at import is one line, and a failing reset or
get_reward (raises, wrong type, NaN, sys.exit) costs its episode, counted, never the run."""

from __future__ import annotations

import math
import os
import re

import pytest

from rlft.errors import UserError
from rlft.tools import Limits, ToolError, ToolStats, dry_episode, guard, guarded_env_class, load_env, load_tools

DOC = '''"""A tool.

    Args:
        x: anything
    """'''


def _tool(body: str, params: str = "x: str"):
    ns: dict = {}
    exec(f"import asyncio, os, sys\ndef t({params}) -> str:\n    {DOC}\n    {body}\n", ns)
    return ns["t"]


def _call(body: str, **kw):
    stats = ToolStats()
    g = guard(_tool(body), Limits(timeout=2, output_chars=2000), stats)
    with pytest.raises(ToolError) as info:
        g(x="1", **kw)
    return info.value, stats


@pytest.mark.parametrize("body, kind, says", [
    ("return 10 ** 5000", "too_long", "digits"),
    ("return 10 ** 100000", "too_long", "digits"),
    ("return 'a\\ud800b'", "not_string", "UTF-8"),
    ("return [1, 2]", "not_string", "list"),
    ("raise SystemExit(0)", "raised", "SystemExit"),
    ("raise asyncio.CancelledError()", "raised", "CancelledError"),
    ("sys.exit(3)", "raised", "SystemExit"),
])
def test_a_bad_result_or_exit_is_that_calls_error(body, kind, says):
    err, stats = _call(body)
    assert err.kind == kind and says in str(err) and stats.errors[kind] == 1


def test_prints_are_captured_and_the_working_directory_restored(tmp_path, capsys):
    cwd = os.getcwd()
    g = guard(_tool(f"print('noise'); os.chdir({str(tmp_path)!r}); return 'ok'"), Limits(), ToolStats())
    assert g(x="1") == "ok"
    assert os.getcwd() == cwd
    out, err = capsys.readouterr()
    assert "noise" not in out and "noise" not in err


def _file(tmp_path, text: str, name: str = "t.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_positional_only_tools_are_refused(tmp_path):
    f = _file(tmp_path, f"def t(x: str, /) -> str:\n    {DOC}\n    return x\n")
    with pytest.raises(UserError, match="positional-only"):
        load_tools(f)


def test_two_tools_of_one_name_are_refused(tmp_path):
    f = _file(tmp_path, f"def t(x: str) -> str:\n    {DOC}\n    return x\n\n"
                        f"def make():\n    def t(x: str) -> str:\n        {DOC}\n        return x\n    return t\n\n"
                        "TOOLS = [t, make()]\n")
    with pytest.raises(UserError, match="two tools are named 't'"):
        load_tools(f)


def test_system_exit_at_import_is_one_line(tmp_path):
    f = _file(tmp_path, "raise SystemExit(0)\n")
    with pytest.raises(UserError, match="SystemExit"):
        load_tools(f)


GOOD_TOOL = '''
    def look(self, key: str) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return key
'''


def _env(tmp_path, body: str):
    return f"{_file(tmp_path, body, 'env.py')}:Env"


def test_a_static_method_tool_is_refused(tmp_path):
    body = ("class Env:\n    def reset(self, **row):\n        return None\n    @staticmethod\n"
            "    def look(key: str) -> str:\n        '''Look.\n\n        Args:\n            key: k\n        '''\n"
            "        return key\n")
    with pytest.raises(UserError, match="staticmethod"):
        load_env(_env(tmp_path, body))


ROW = {"prompt": [{"role": "user", "content": "1+1="}], "answer": "2"}


@pytest.mark.parametrize("reset, says", [
    ("def reset(self, prompt):\n        return None", "cannot take the training rows' fields"),
    ("def reset(self, **row):\n        import sys; sys.exit(0)", "SystemExit"),
])
def test_the_dry_episode_is_one_line(tmp_path, reset, says):
    cls = load_env(_env(tmp_path, f"class Env:\n    {reset}\n" + GOOD_TOOL))
    with pytest.raises(UserError, match=re.escape(says)):
        dry_episode(cls, ROW, "env.py:Env")


def test_a_nan_reward_is_refused_by_the_dry_episode(tmp_path):
    cls = load_env(_env(tmp_path, "class Env:\n    def reset(self, **row):\n        return None\n"
                                  "    def get_reward(self):\n        return float('nan')\n" + GOOD_TOOL))
    with pytest.raises(UserError, match="nan"):
        dry_episode(cls, ROW, "env.py:Env")


ENV = '''
import math, sys, time


class Env:
    def reset(self, prompt, answer):
        self.answer = answer
        if answer == "raise":
            raise KeyError("topic")
        if answer == "int":
            return 3
        if answer == "exit":
            sys.exit(0)
        if answer == "hang":
            time.sleep(30)
        return None

    def get_reward(self):
        if self.answer == "nan":
            return math.nan
        if self.answer == "boom":
            raise ValueError("no reward")
        return 1.0
''' + GOOD_TOOL


def test_reset_gets_the_row_without_rlfts_own_keys(tmp_path):
    """reset(self, prompt, answer) without **kwargs: TRL passes the row with rlft_prompt_index too."""
    stats = ToolStats()
    env = guarded_env_class(load_env(_env(tmp_path, ENV)), Limits(timeout=1), stats)()
    assert env.reset(prompt=ROW["prompt"], answer="2", rlft_prompt_index=0) is None
    assert env.get_reward() == 1.0 and env.look(key="k") == "k"
    assert not stats.env.counts


@pytest.mark.parametrize("answer, method", [("raise", "reset"), ("int", "reset"), ("exit", "reset"),
                                            ("hang", "reset"), ("nan", "get_reward"), ("boom", "get_reward")])
def test_a_failing_reset_or_reward_costs_its_episode_counted(tmp_path, answer, method):
    stats = ToolStats()
    env = guarded_env_class(load_env(_env(tmp_path, ENV)), Limits(timeout=1), stats)()
    assert env.reset(prompt=ROW["prompt"], answer=answer, rlft_prompt_index=3) is None
    reward = env.get_reward()
    assert reward == 0.0 and not math.isnan(reward)
    assert stats.env.counts[method] == 1
    assert stats.as_dict()["env_failed_episodes"] == {method: 1}
    if method == "reset":
        with pytest.raises(ToolError, match="reset failed"):
            env.look(key="k")
        assert stats.env.last["reset"]["row"]["answer"] == answer
