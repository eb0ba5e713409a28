"""Tool and environment code runs in its own process (rlft/tools/process.py, worker.py): what it does there cannot
reach the run. One test per rule: a hard timeout (the process killed, a bare `except:` cannot swallow it), output
captured, cwd its own, threads and forks unable to keep rlft alive, any raise (SystemExit, CancelledError) an error
result, a failing or hanging reset/get_reward costing its episode (counted), every episode failing one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import write_jsonl

from rlft.errors import UserError
from rlft.tools import Limits, ToolError, ToolStats, guard, guarded_env_class, load_env, load_tools

ROOT = Path(__file__).resolve().parents[1]
ROWS = [{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)} for a, b in
        [(2, 3), (10, 7), (4, 4)]]


def _file(tmp_path, body: str, name: str = "t.py") -> str:
    path = tmp_path / name
    path.write_text("import os, sys, time, threading, asyncio\n" + textwrap.dedent(body))
    return str(path)


def _tool(tmp_path, body: str, timeout: float = 1.0):
    """A tool `t(x: str)` running `body`, guarded, and its stats."""
    src = "def t(x: str) -> str:\n    \"\"\"A tool.\n\n    Args:\n        x: anything\n    \"\"\"\n" + \
          textwrap.indent(textwrap.dedent(body), "    ")
    stats = ToolStats()
    (fn,) = load_tools(_file(tmp_path, src), Limits(timeout=timeout))
    return guard(fn, Limits(timeout=timeout), stats), stats


def test_a_bare_except_retry_loop_is_killed_at_the_timeout(tmp_path):
    g, stats = _tool(tmp_path, """
        while True:
            try:
                time.sleep(30)
            except:  # noqa: E722 - the hostile tool
                pass
    """)
    began = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 1s"):
        g(x="a")
    assert time.monotonic() - began < 3 and stats.errors["timeout"] == 1
    with pytest.raises(ToolError):  # a fresh worker serves the next call (and loops again)
        g(x="b")
    assert g.__wrapped__._rlft_worker.restarts == 2


def test_a_tool_that_prints_or_changes_folder_touches_neither_stdout_nor_cwd(tmp_path, capfd):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    g, _ = _tool(tmp_path, f"""
        print("noise"); os.write(1, b"raw noise\\n"); os.write(2, b"err noise\\n")
        os.chdir({str(elsewhere)!r})
        return os.getcwd()
    """)
    cwd = os.getcwd()
    assert g(x="a") == str(elsewhere)
    assert os.getcwd() == cwd
    out, err = capfd.readouterr()
    assert "noise" not in out and "noise" not in err


@pytest.mark.parametrize("raise_", ["raise SystemExit(0)", "raise asyncio.CancelledError()", "raise KeyboardInterrupt",
                                    "os._exit(3)"])
def test_any_raise_or_exit_of_a_tool_is_that_calls_error(tmp_path, raise_):
    g, stats = _tool(tmp_path, f"""
        if x == "bad":
            {raise_}
        return x
    """)
    with pytest.raises(ToolError):
        g(x="bad")
    assert g(x="good") == "good" and stats.errors["raised"] == 1


@pytest.mark.parametrize("result, kind", [("10 ** 5000", "too_long"), ("'a\\ud800b'", "not_string"),
                                          ("[1, 2]", "not_string"), ("object()", "not_string")])
def test_results_become_capped_text_in_rlfts_process(tmp_path, result, kind):
    g, stats = _tool(tmp_path, f"return {result}")
    with pytest.raises(ToolError):
        g(x="a")
    assert stats.errors[kind] == 1


SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from rlft.tools import Limits, ToolStats
from rlft.tools.process import guard_remote, remote_tools
(fn,) = remote_tools({path!r}, timeout=2)
print(guard_remote(fn, Limits(timeout=2), ToolStats())(x="a"), flush=True)
"""


@pytest.mark.parametrize("body", [
    "threading.Thread(target=time.sleep, args=(120,)).start()\nreturn 'started'",  # non-daemon
    "pid = os.fork()\nif pid == 0:\n    open({pidfile!r}, 'w').write(str(os.getpid())); time.sleep(120); os._exit(0)\n"
    "time.sleep(0.3)\nreturn 'forked'",
])
def test_a_tools_threads_and_forks_cannot_keep_rlft_alive(tmp_path, body):
    pidfile = tmp_path / "child.pid"
    src = "def t(x: str) -> str:\n    \"\"\"A tool.\n\n    Args:\n        x: anything\n    \"\"\"\n" + \
          textwrap.indent(body.format(pidfile=str(pidfile)), "    ")
    path = _file(tmp_path, src)
    began = time.monotonic()
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(ROOT), path=path)], capture_output=True,
                       text=True, timeout=90)
    assert r.returncode == 0 and r.stdout.strip() in ("started", "forked"), r.stderr
    assert time.monotonic() - began < 60  # in-process, the thread or the fork's 120 s would hold the exit
    if pidfile.exists():  # the fork was killed with the worker's process group (gone, or a zombie not yet reaped)
        time.sleep(0.2)
        stat = Path(f"/proc/{int(pidfile.read_text())}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_system_exit_at_import_is_one_line_and_rlft_goes_on(tmp_path):
    with pytest.raises(UserError, match="SystemExit"):
        load_tools(_file(tmp_path, "raise SystemExit(0)\n"))
    with pytest.raises(UserError, match="SystemExit"):
        load_env(_file(tmp_path, "raise SystemExit(0)\n", "e.py") + ":Env")


def test_importing_the_file_happens_only_in_the_worker(tmp_path):
    marker = tmp_path / "imported_in"
    path = _file(tmp_path, f"open({str(marker)!r}, 'a').write(str(os.getpid()) + ' ')\n"
                           "def t(x: str) -> str:\n    \"\"\"A tool.\n\n    Args:\n        x: anything\n    \"\"\"\n"
                           "    return x\n")
    load_tools(path)
    assert str(os.getpid()) not in marker.read_text().split()


@pytest.mark.parametrize("sig, says", [
    ("x: str, /", "positional-only"),
    ("*, x: str, **rest: str", r"takes \*rest"),
    ("x", "no type hint"),
    ("x: set", "cannot pass"),
])
def test_signatures_are_checked_as_rlft_will_call_them(tmp_path, sig, says):
    path = _file(tmp_path, f"def t({sig}) -> str:\n    \"\"\"A tool.\n\n    Args:\n        x: anything\n"
                           f"        rest: more\n    \"\"\"\n    return 'x'\n")
    with pytest.raises(UserError, match=says):
        load_tools(path)


ENV = """
class Env:
    def reset(self, prompt, answer):  # no **kwargs: rlft passes no keyword of its own
        {reset}
        self.answer = answer

    def get_reward(self) -> float:
        {reward}
        return 1.0

    def look(self, key: str) -> str:
        \"\"\"Look.

        Args:
            key: the key
        \"\"\"
        return key
"""


def _env(tmp_path, reset: str = "pass", reward: str = "pass") -> str:
    return _file(tmp_path, ENV.format(reset=reset, reward=reward), "env.py") + ":Env"


@pytest.mark.parametrize("reset, reward, method", [
    ("if answer == '17':\n            raise KeyError('topic')", "pass", "reset"),
    ("if answer == '17':\n            while True:\n                try:\n                    time.sleep(30)\n"
     "                except:\n                    pass", "pass", "reset"),
    ("if answer == '17':\n            sys.exit(3)", "pass", "reset"),
    ("pass", "if self.answer == '17':\n            return float('nan')", "get_reward"),
])
def test_a_failing_or_hanging_reset_or_reward_costs_one_episode_in_eval(cli, tmp_path, tiny_dir, reset, reward,
                                                                         method):
    data = write_jsonl(tmp_path / "t.jsonl", ROWS)
    began = time.monotonic()
    r = cli("eval", "-m", "tiny", "-d", data, "--env", _env(tmp_path, reset, reward), "--max-new-tokens", "4",
            "--tool-timeout", "1", "--json")
    assert r.code == 0, r.text
    out = json.loads(r.out[r.out.index("{"):])
    assert out["n"] == 3 and out["env_failed_episodes"] == {method: 1}
    assert time.monotonic() - began < 20


def test_every_episode_failing_is_one_line_naming_the_method_and_row(cli, tmp_path, tiny_dir):
    data = write_jsonl(tmp_path / "t.jsonl", ROWS)
    # The dry episode (the first row, once) passes; every episode after it fails.
    env = _env(tmp_path, "global N\n        N = globals().get('N', 0) + 1\n        if N > 1:\n"
                         "            raise ValueError('no more')")
    r = cli("eval", "-m", "tiny", "-d", data, "--env", env, "--verifier", "math", "--max-new-tokens", "4",
            "--tool-timeout", "1", "--json")
    assert r.code == 2 and "Traceback" not in r.text
    assert "all 3 episodes failed in the environment's reset: ValueError: no more" in r.err and "answer=" in r.err


def test_a_hanging_reset_on_one_row_costs_its_episode_in_grpo(cli, tmp_path, tiny_dir):
    data = write_jsonl(tmp_path / "p.jsonl", ROWS[:2])  # one batch: both rows, the second hangs
    out = tmp_path / "run"
    env = _env(tmp_path, "if answer == '17':\n            while True:\n                try:\n"
                         "                    time.sleep(30)\n                except:\n                    pass")
    began = time.monotonic()
    r = cli("grpo", "-d", data, "--env", env, "--verifier", "math", "-o", out, "--max-steps", "1",
            "--batch-size", "4", "--num-generations", "2", "--set", "grpo.tool_timeout=1",
            "--set", "grpo.max_completion_length=4", "--no-preflight")
    assert r.code == 0, r.text
    counts = json.loads((out / "tools.json").read_text())
    assert counts["env_failed_episodes"].get("reset", 0) >= 1
    assert "environment: episodes a failing method cost" in (out / "report/report.md").read_text()
    assert json.loads((out / "summary.json").read_text())["final_metrics"]["env_failed_episodes"] >= 1
    assert time.monotonic() - began < 60


def test_every_episode_of_a_grpo_batch_failing_ends_the_run_in_one_line(cli, tmp_path, tiny_dir):
    data = write_jsonl(tmp_path / "p.jsonl", ROWS)
    env = _env(tmp_path, "global N\n        N = globals().get('N', 0) + 1\n        if N > 1:\n"
                         "            raise ValueError('no more')")
    r = cli("grpo", "-d", data, "--env", env, "--verifier", "math", "-o", tmp_path / "run", "--max-steps", "1",
            "--batch-size", "6", "--num-generations", "2", "--set", "grpo.max_completion_length=8", "--no-preflight")
    assert r.code != 0 and "Traceback" not in r.text
    assert "every episode of a batch (6) failed in the environment's reset: ValueError: no more" in r.err


def test_eval_json_stays_json_when_the_environment_prints(tmp_path, capfd, tiny_dir):
    from rlft.cli import main

    data = write_jsonl(tmp_path / "t.jsonl", ROWS)
    env = _env(tmp_path, "print('noise from reset'); os.write(1, b'raw noise\\n'); os.write(2, b'err noise\\n')")
    with pytest.raises(SystemExit) as info:
        main(["eval", "-m", "tiny", "-d", str(data), "--env", env, "--verifier", "math", "--max-new-tokens", "4",
              "--json"])
    out, err = capfd.readouterr()  # what reached rlft's own file descriptors 1 and 2
    assert info.value.code in (0, None), err
    assert json.loads(out[out.index("{"):])["n"] == 3 and "noise" not in out + err


def test_an_environment_instance_rebuilt_after_its_worker_was_killed(tmp_path):
    cls = load_env(_env(tmp_path, "if answer == 'hang':\n            time.sleep(30)"), Limits(timeout=1))
    stats = ToolStats()
    env_cls = guarded_env_class(cls, Limits(timeout=1), stats)
    a, b = env_cls(), env_cls()
    assert a.reset(prompt="p", answer="1") is None and a.look(key="k") == "k"
    assert b.reset(prompt="p", answer="hang") is None and stats.env.counts["reset"] == 1  # killed: b's episode lost
    with pytest.raises(ToolError, match="lost"):
        a.look(key="k")  # a lived in the killed worker
    assert a.reset(prompt="p", answer="1") is None and a.look(key="k") == "k"  # rebuilt at its next reset


@pytest.mark.parametrize("value", ["nan", "0", "-1"])
def test_eval_tool_timeout_must_be_a_positive_number(cli, tmp_path, value):
    data = write_jsonl(tmp_path / "t.jsonl", ROWS)
    r = cli("eval", "-m", "tiny", "-d", data, "--env", _env(tmp_path), "--verifier", "math", "--tool-timeout", value)
    assert r.code == 2 and "Traceback" not in r.text and "tool-timeout" in r.text
