"""`rlft chat`: one answer with --prompt (plain-text runs, chat models, LoRA runs), the interactive loop
through stdin, multi-line input."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from helpers import DATA, ROOT


def greedy(source: str, prompt, max_new_tokens: int = 256) -> str:
    """What greedy generation gives for `prompt` (a string, or messages through the chat template)."""
    from rlft.evaluate import generate
    from rlft.models import load_for_inference, load_tokenizer

    tok = load_tokenizer(source)
    return generate(load_for_inference(source), tok, [prompt], max_new_tokens=max_new_tokens)[0][0]


def test_prompt_prints_the_greedy_answer_of_a_text_trained_run(cli, sft_model):
    r = cli("chat", sft_model, "--prompt", "12+30=")
    assert r.code == 0, r.text
    answer = r.out.removesuffix("\n")
    assert answer == greedy(str(sft_model), "12+30=")  # the raw prompt: the run trained on plain strings
    assert answer and answer != greedy(str(sft_model), [{"role": "user", "content": "12+30="}])


def test_lora_run_answers_through_its_merged_base(cli, tmp_path):
    run = tmp_path / "lora"
    r = cli("sft", "--data", DATA / "arith/sft_train.jsonl", "-o", run, "--lora", "--max-steps", "3", "--lr", "1e-2",
            "--batch-size", "16", "--set", "sft.max_length=32")
    assert r.code == 0, r.text
    r = cli("chat", run, "--prompt", "7+5=", "--max-new-tokens", "6")
    assert r.code == 0, r.text
    assert r.out.removesuffix("\n") == greedy(str(run), "7+5=", max_new_tokens=6)


def test_interactive_loop_through_stdin(rlft_cache, tiny_dir):
    """/system, a message, /reset, /exit: one streamed answer on stdout, the notices on stderr."""
    env = dict(os.environ, RLFT_CACHE=str(rlft_cache), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "rlft", "chat", "tiny", "--max-new-tokens", "8"],
                          input="/system be brief\nhi\n/reset\n/exit\n", capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "chat format" in proc.stderr and "system prompt set" in proc.stderr and "history cleared" in proc.stderr
    expected = greedy("tiny", [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                      max_new_tokens=8)
    assert proc.stdout == expected + "\n"


def test_history_system_prompt_and_text_mode(sft_model):
    from rlft.chat.session import chat_loop, load_chat

    chat = load_chat("tiny", max_new_tokens=4)
    err = io.StringIO()
    chat_loop(chat, io.StringIO("/system S\none\ntwo\n/bogus\n"), io.StringIO(), err)
    assert [m["role"] for m in chat.history] == ["user", "assistant", "user", "assistant"]
    assert chat.system == "S" and "unknown command /bogus" in err.getvalue()
    rendered = chat.render("three")
    assert rendered.startswith("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\none<|im_end|>")

    text = load_chat(str(sft_model), max_new_tokens=4)
    assert text.fmt == "text" and text.render("1+1=") == "1+1="
    err = io.StringIO()
    chat_loop(text, io.StringIO("/system S\n1+1=\n"), io.StringIO(), err)
    assert text.system is None and text.history == [] and "no system prompt" in err.getvalue()


def test_multi_line_input():
    from rlft.chat.session import read_message

    lines = iter(["first \\\n", "second\n", '"""\n', "a\n", "\n", "b\n", '"""\n', "last\n"])
    err = io.StringIO()
    assert read_message(lines, "> ", err) == "first \nsecond"
    assert read_message(lines, "> ", err) == "a\n\nb"
    assert read_message(lines, "> ", err) == "last"
    assert read_message(lines, "> ", err) is None


def test_refusals(cli, tiny_dir):
    r = cli("chat", "tiny", "--prompt", "x", "--temperature", "-1")
    assert r.code == 2 and "--temperature" in r.err
    r = cli("chat", "tiny", "--prompt", "x", "--format", "jinja")
    assert r.code == 2 and "jinja" in r.err and "chat" in r.err
    r = cli("chat", "./no/such/model", "--prompt", "x")
    assert r.code == 2 and "not a folder here" in r.err


@pytest.mark.slow
def test_well_trained_model_answers_42(cli, tmp_path):
    """The issue's check: a model SFT'd from tiny (recipes/sft_tiny.yaml, ~1.00 held-out) says 42."""
    out = tmp_path / "sft"
    r = cli("sft", "--recipe", ROOT / "recipes/sft_tiny.yaml", "-o", out)
    assert r.code == 0, r.text
    r = cli("chat", out, "--prompt", "12+30=")
    assert r.code == 0 and r.out == "42\n", r.text
