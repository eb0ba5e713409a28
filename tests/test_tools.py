"""Tools and environments in GRPO (rlft/tools.py, rlft/episodes.py): untrusted tool calls cost their episode, never
the run; checks before training refuse with one line and write nothing; the ids trained on equal the rendering."""

from __future__ import annotations

import json
import re
import time

import pytest
from helpers import DATA, write_jsonl

from rlft.errors import UserError
from rlft.tools import Limits, ToolError, ToolStats, guard, guarded_env_class, load_env

TOOLS = '''
import time


def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return str(a + b)


def boom(x: str) -> str:
    """Always fails.

    Args:
        x: anything
    """
    raise RuntimeError("kaboom")


def slow(x: str) -> str:
    """Sleeps far past any timeout, and swallows whatever interrupts it (a bare-except retry loop).

    Args:
        x: anything
    """
    while True:
        try:
            time.sleep(60)
        except:  # noqa: E722 - the hostile tool: only killing its process ends it
            pass


def spin(x: str) -> str:
    """Loops forever.

    Args:
        x: anything
    """
    while True:
        pass


def huge(x: str) -> str:
    """Returns 10 MB.

    Args:
        x: anything
    """
    return "y" * 10_000_000


def odd(x: str) -> str:
    """Returns a dict, not a string.

    Args:
        x: anything
    """
    return {"not": "a string"}
'''


@pytest.fixture
def tools_file(tmp_path):
    path = tmp_path / "tools.py"
    path.write_text(TOOLS)
    return path


@pytest.fixture
def guarded(tools_file):
    from rlft.tools import load_tools

    stats = ToolStats()
    fns = {f.__name__: guard(f, Limits(timeout=0.3, output_chars=2000), stats) for f in load_tools(str(tools_file))}
    return fns, stats


@pytest.mark.parametrize("name, kwargs, kind", [
    ("boom", {"x": "1"}, "raised"),
    ("slow", {"x": "1"}, "timeout"),
    ("spin", {"x": "1"}, "timeout"),
    ("huge", {"x": "1"}, "too_long"),
    ("odd", {"x": "1"}, "not_string"),
    ("add", {"a": "two", "b": 3}, "bad_arguments"),
    ("add", {"a": 1}, "bad_arguments"),
    ("add", {"a": 1, "b": 2, "c": 3}, "bad_arguments"),
    ("add", {"a": True, "b": 2}, "bad_arguments"),
])
def test_a_bad_call_is_an_error_result_and_counted(guarded, name, kwargs, kind):
    fns, stats = guarded
    start = time.monotonic()
    with pytest.raises(ToolError) as info:
        fns[name](**kwargs)
    assert time.monotonic() - start < 3, "a hanging tool must be cut at its timeout"
    assert info.value.kind == kind
    assert stats.calls == 1 and stats.errors[kind] == 1


def test_a_good_call_passes_and_keeps_its_schema(guarded, tools_file):
    from transformers.utils import get_json_schema

    from rlft.tools import load_tools

    fns, stats = guarded
    assert fns["add"](a=2, b=3) == "5"
    assert stats.calls == 1 and not stats.errors
    original = {f.__name__: f for f in load_tools(str(tools_file))}["add"]
    assert get_json_schema(fns["add"]) == get_json_schema(original)


def test_the_timeout_is_restored_after_a_call(guarded):
    import signal

    fns, _ = guarded
    with pytest.raises(ToolError):
        fns["slow"](x="1")
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert fns["add"](a=1, b=1) == "2"


def test_the_shipped_calculator_environment():
    cls = load_env(str(DATA / "tools/calculator.py") + ":Calculator")
    stats = ToolStats()
    env = guarded_env_class(cls, Limits(), stats)()
    assert env.reset(prompt=[{"role": "user", "content": "2*3"}], answer="6") is None
    assert env.calculate(expression="(23*47)-1") == "1080"
    with pytest.raises(ToolError) as info:
        env.calculate(expression="__import__('os').system('true')")
    assert info.value.kind == "raised" and stats.calls == 2  # the instance itself lives in the tool process


def _env(tmp_path, body: str) -> str:
    path = tmp_path / "env.py"
    path.write_text(body)
    return f"{path}:Env"


GOOD_TOOL = '''
    def look(self, key: str) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return key
'''


@pytest.mark.parametrize("body, message", [
    ("class Env:\n" + GOOD_TOOL, "no reset() method"),
    ("class Env:\n    def reset(self, **row):\n        return None\n", "no tool methods"),
    ("class Env:\n    def reset(self, **row):\n        return None\n    def look(self, key: str) -> str:\n"
     "        return key\n", "no docstring"),
    ("class Env:\n    def reset(self, **row):\n        return None\n    def look(self, key) -> str:\n"
     "        '''Look.\n\n        Args:\n            key: k\n        '''\n        return key\n", "no type hint"),
])
def test_a_broken_environment_is_refused_before_loading(tmp_path, body, message):
    with pytest.raises(UserError, match=re.escape(message)):
        load_env(_env(tmp_path, body))


ROWS = [{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)} for a, b in
        [(2, 3), (10, 7), (4, 4)]]


@pytest.mark.parametrize("env_body, message", [
    ("class Env:\n    def reset(self, **row):\n        raise KeyError('topic')\n" + GOOD_TOOL, "reset"),
    ("class Env:\n    def reset(self, **row):\n        return 3\n" + GOOD_TOOL, "reset returned int"),
    ("class Env:\n    def reset(self, **row):\n        return None\n    def get_reward(self):\n        return 'x'\n"
     + GOOD_TOOL, "get_reward returned str"),
])
def test_grpo_env_dry_episode_refuses_in_one_line_and_writes_nothing(cli, tmp_path, env_body, message):
    data = write_jsonl(tmp_path / "p.jsonl", ROWS)
    out = tmp_path / "run"
    r = cli("grpo", "-d", data, "--env", _env(tmp_path, env_body), "-o", out, "--max-steps", "1")
    assert r.code == 2, r.text
    assert message in r.err and "fix:" in r.err and "Traceback" not in r.text
    assert not out.exists()


def test_rloo_refuses_tools_in_one_line(cli, tmp_path, tools_file):
    data = write_jsonl(tmp_path / "p.jsonl", ROWS)
    r = cli("rloo", "-d", data, "--tools", tools_file, "-o", tmp_path / "run")
    assert r.code == 2 and "no tool-calling loop" in r.err and "rlft grpo --tools" in r.err
    assert not (tmp_path / "run").exists()


def test_plain_string_prompts_are_refused_with_tools(cli, tmp_path, tools_file):
    r = cli("grpo", "-d", DATA / "arith/grpo_prompts.jsonl", "--tools", tools_file, "-o", tmp_path / "run")
    assert r.code == 2 and "plain string" in r.err and "as_chat" in r.err


def test_a_template_without_tools_is_refused(tmp_path):
    from transformers import AutoTokenizer

    from rlft.models import tiny_path
    from rlft.tools import tool_tokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path())
    # SmolLM2-135M-Instruct's template (its GGUF): it renders only `content`, so tool calls would vanish
    tok.chat_template = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                         "{{ '<|im_start|>system\\nYou are a helpful AI assistant<|im_end|>\\n' }}{% endif %}"
                         "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    with pytest.raises(UserError, match="cannot render tool calls"):
        tool_tokenizer(tok, "x")


# One scripted first turn per episode (a random tiny model never writes a tool call); every later turn is the model's.
CALLS = [
    '{"name": "add", "arguments": {"a": 2, "b": 3}}',
    '{"name": "nope", "arguments": {}}',                      # unknown tool
    '{"name": "add", "arguments": {"a": "two", "b": 3}}',     # malformed arguments
    '{"name": "boom", "arguments": {"x": "1"}}',
    '{"name": "slow", "arguments": {"x": "1"}}',
    '{"name": "spin", "arguments": {"x": "1"}}',
    '{"name": "huge", "arguments": {"x": "1"}}',
    '{"name": "odd", "arguments": {"x": "1"}}',
    '{"name": "add", "arguments": {"a": 1, "b": 1}}',
]


def test_grpo_with_misbehaving_tools_completes_counts_them_and_trains_on_the_rendering(cli, tmp_path, tools_file,
                                                                                        monkeypatch, tiny_dir):
    from trl import GRPOTrainer

    from rlft.episodes import first_mismatch, mask_covers_tool_results

    first_turn = GRPOTrainer._generate_single_turn
    episodes = []

    def scripted(self, prompt_ids, images, fields, num_generations, has_tool_images=False):
        if num_generations == 1:  # after a tool result: the model's own turn
            return first_turn(self, prompt_ids, images, fields, num_generations, has_tool_images)
        texts = [f"<tool_call>\n{CALLS[i % len(CALLS)]}\n</tool_call><|im_end|>" for i in range(len(prompt_ids))]
        return [self.processing_class(t)["input_ids"] for t in texts], None

    generate = GRPOTrainer._generate

    def recorded(self, prompts):
        import copy

        out = generate(self, copy.deepcopy(prompts))
        episodes.append((self, prompts, out))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", scripted)
    monkeypatch.setattr(GRPOTrainer, "_generate", recorded)
    data = write_jsonl(tmp_path / "p.jsonl", ROWS)
    out = tmp_path / "run"
    r = cli("grpo", "-d", data, "--tools", tools_file, "-o", out, "--max-steps", "1", "--batch-size", "9",
            "--num-generations", "3", "--set", "grpo.tool_timeout=0.5", "--set", "grpo.max_completion_length=200",
            "--set", "train.logging_steps=1", "--no-preflight")
    assert r.code == 0, r.text
    assert "Traceback" not in r.text and "tokens_mismatch" not in r.text
    counts = json.loads((out / "tools.json").read_text())
    assert counts["by_kind"] == {"bad_arguments": 1, "raised": 1, "timeout": 2, "too_long": 1, "not_string": 1}
    assert counts["tool_calls"] >= 8 and counts["tool_errors"] == 6
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(x for x in logs if "tools/failure_frequency" in x)
    assert step["tools/errors"] == 6 and step["tools/calls"] >= 8
    assert step["tools/failure_frequency"] >= 7 / 9 - 1e-6  # TRL's count: ours plus the unknown name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_metrics"]["tool_errors"] == 6
    report = (out / "report/report.md").read_text()
    assert "6 bad" in report and "timeout 2" in report and "| tools/errors | 6 |" in report
    # Every episode: the ids trained on equal the template's rendering, and only tool results are masked out.
    checked = 0
    for trainer, prompts, (prompt_ids, completion_ids, tool_mask, completions, *_rest) in episodes:
        for i in range(len(prompts)):
            assert first_mismatch(trainer.processing_class, list(prompts[i]), completions[i], prompt_ids[i],
                                  completion_ids[i], trainer.tools, trainer.chat_template) is None
            assert mask_covers_tool_results(trainer.processing_class, list(prompts[i]), completions[i],
                                            prompt_ids[i], completion_ids[i], tool_mask[i], trainer.tools,
                                            trainer.chat_template)
            checked += 1
    assert checked == 9
    assert any(m.get("role") == "tool" and "timed out" in m["content"] for _, _, o in episodes for c in o[3]
               for m in c)


def test_grpo_with_the_calculator_environment_runs_episodes(cli, tmp_path, monkeypatch, tiny_dir):
    """--env through TRL's environment_factory: the guarded subclass's tools are found, called with the model's
    arguments (a bad expression and a wrong argument name cost only their episodes), rows reach reset()."""
    from trl import GRPOTrainer

    from rlft.episodes import first_mismatch

    first_turn = GRPOTrainer._generate_single_turn
    calls = ['{"name": "calculate", "arguments": {"expression": "2+3"}}',
             '{"name": "calculate", "arguments": {"expression": "2**99999999"}}',
             '{"name": "calculate", "arguments": {"expr": "1"}}']
    seen = []

    def scripted(self, prompt_ids, images, fields, num_generations, has_tool_images=False):
        if num_generations == 1:
            return first_turn(self, prompt_ids, images, fields, num_generations, has_tool_images)
        texts = [f"<tool_call>\n{calls[i % 3]}\n</tool_call><|im_end|>" for i in range(len(prompt_ids))]
        return [self.processing_class(t)["input_ids"] for t in texts], None

    generate = GRPOTrainer._generate

    def recorded(self, prompts):
        import copy

        out = generate(self, copy.deepcopy(prompts))
        seen.append((self, prompts, out))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", scripted)
    monkeypatch.setattr(GRPOTrainer, "_generate", recorded)
    out = tmp_path / "run"
    r = cli("grpo", "-d", write_jsonl(tmp_path / "p.jsonl", ROWS), "--env",
            str(DATA / "tools/calculator.py") + ":Calculator", "-o", out, "--max-steps", "1", "--batch-size", "6",
            "--num-generations", "3", "--set", "grpo.max_completion_length=160", "--no-preflight",
            "--eval-data", write_jsonl(tmp_path / "e.jsonl", ROWS[:2]), "--set", "grpo.heldout_max_new_tokens=24")
    assert r.code == 0, r.text
    counts = json.loads((out / "tools.json").read_text())
    assert counts["by_kind"] == {"raised": 2, "bad_arguments": 2} and counts["tool_calls"] >= 6
    final = json.loads((out / "summary.json").read_text())["final_metrics"]
    assert {"heldout_task_success", "heldout_tool_calls_per_episode"} <= set(final)  # episodes, not single turns
    trainer, prompts, (prompt_ids, completion_ids, _mask, completions, *_rest) = seen[0]
    tools = trainer._env_tools[None]
    assert [t.__name__ for t in tools] == ["calculate"]
    for i in range(len(prompts)):
        assert first_mismatch(trainer.processing_class, list(prompts[i]), completions[i], prompt_ids[i],
                              completion_ids[i], tools, trainer.chat_template) is None
    assert completions[0][1] == {"role": "tool", "name": "calculate", "content": "5"}


def test_the_rendering_check_names_a_lost_separator_and_a_shifted_mask(tiny_dir):
    """What users of multi-turn RL report: a separator lost at the assistant -> tool boundary. The check finds its
    position; a loss mask shifted by one token is caught too."""
    from rlft.episodes import first_mismatch, mask_covers_tool_results
    from rlft.models import load_tokenizer
    from rlft.tools import tool_tokenizer

    tok = tool_tokenizer(load_tokenizer("tiny"), "tiny")
    prompt = [{"role": "user", "content": "2+3="}]
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]}
    completion = [call, {"role": "tool", "name": "add", "content": "5"}, {"role": "assistant", "content": "5"}]
    prompt_ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    full = tok.apply_chat_template(prompt + completion, tokenize=True, return_dict=False)
    good = full[len(prompt_ids):-1]  # the trailing newline after the last end-of-turn is never generated
    assert first_mismatch(tok, prompt, completion, prompt_ids, good) is None
    end = tok.convert_tokens_to_ids("<|im_end|>")
    cut = good.index(end) + 1  # the "\n" after the tool call's end-of-turn
    lost = good[:cut] + good[cut + 1:]
    assert first_mismatch(tok, prompt, completion, prompt_ids, lost) == len(prompt_ids) + cut
    tool_start = cut  # the tool turn runs from the newline to the next assistant header
    header = tok("<|im_start|>assistant\n")["input_ids"]
    tool_end = next(i for i in range(tool_start, len(good)) if good[i:i + len(header)] == header) + len(header)
    mask = [1] * cut + [0] * (tool_end - tool_start) + [1] * (len(good) - tool_end)
    assert mask_covers_tool_results(tok, prompt, completion, prompt_ids, good, mask)
    shifted = [1] * (cut + 2) + [0] * (tool_end - tool_start) + [1] * (len(good) - tool_end - 2)
    assert not mask_covers_tool_results(tok, prompt, completion, prompt_ids, good, shifted)


def test_sft_on_tool_demonstrations_trains_the_calls_not_the_results(cli, tmp_path, tiny_dir):
    """SFT rows with tool calls get the tool template: the saved tokenizer renders them, and the assistant-only
    loss covers the tool call and the answer, never the tool's result."""
    from rlft.models import load_tokenizer
    from rlft.tools import TOOL_CHATML_TEMPLATE

    out = tmp_path / "sft"
    r = cli("sft", "-d", DATA / "tools/sft_train.jsonl", "-o", out, "--max-steps", "1", "--batch-size", "4")
    assert r.code == 0, r.text
    tok = load_tokenizer(str(out))
    assert tok.chat_template == TOOL_CHATML_TEMPLATE
    rows = [json.loads(x) for x in (DATA / "tools/sft_train.jsonl").read_text().splitlines()]
    row = next(r for r in rows if len(r["messages"]) > 2)  # the first demonstration that calls the tool
    enc = tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    trained = tok.decode([i for i, m in zip(enc["input_ids"], enc["assistant_masks"]) if m])
    call, result = row["messages"][1]["tool_calls"][0], row["messages"][2]["content"]
    assert trained == (f'<tool_call>\n{json.dumps(call["function"])}\n</tool_call><|im_end|>{result}<|im_end|>')
    assert "<|im_start|>tool" not in trained
