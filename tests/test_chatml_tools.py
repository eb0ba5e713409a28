"""`model.chat_template: chatml-tools` (rlft.tools.use_chat_template): rlft's tool-capable ChatML, opt-in, for a
ChatML model whose own template cannot render tool calls (SmolLM2-135M-Instruct's). Checked before any model loads,
refused with one line for a tokenizer that is not ChatML, saved with the run so `rlft eval --env` reads it back.
On the tiny model, given SmolLM2's template (tests/test_real_tools.py runs SmolLM2 itself)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import DATA

from rlft.errors import UserError

# SmolLM2-135M-Instruct's template (its GGUF): a default system turn, then `content` only (tool calls vanish)
SMOL_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                 "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
ENV = str(DATA / "tools/calculator.py") + ":Calculator"
PROMPTS = DATA / "tools/grpo_prompts.jsonl"
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "25*58"}}}]}


@pytest.fixture
def smol_like(tmp_path, tiny_dir):
    """The tiny model with SmolLM2's chat template: ChatML tokens, no tool support."""
    path = tmp_path / "smol-like"
    shutil.copytree(tiny_dir, path)
    (path / "chat_template.jinja").write_text(SMOL_TEMPLATE)
    return path


@pytest.fixture
def not_chatml(tmp_path, tiny_dir):
    """The tiny model with its ChatML tokens renamed <s> / </s>: a tokenizer that is not ChatML."""
    path = tmp_path / "not-chatml"
    shutil.copytree(tiny_dir, path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        f = path / name
        f.write_text(f.read_text().replace("<|im_start|>", "<s>").replace("<|im_end|>", "</s>"))
    return path


def _tok(path):
    from rlft.models import load_tokenizer

    return load_tokenizer(str(path))


def test_chatml_tools_renders_plain_chats_as_the_models_template_and_tool_calls_too(smol_like):
    from trl.chat_template_utils import supports_tool_calling

    from rlft.episodes import first_mismatch
    from rlft.tools import TOOL_CHATML_TEMPLATE, tool_tokenizer, use_chat_template

    with pytest.raises(UserError) as refused:  # without the option: the fix names it
        tool_tokenizer(_tok(smol_like), "smol-like")
    assert "--set model.chat_template=chatml-tools" in refused.value.fix
    own, tok = _tok(smol_like), use_chat_template(_tok(smol_like), "chatml-tools", "smol-like")
    assert tok.chat_template != own.chat_template and supports_tool_calling(tok)
    chats = [[{"role": "user", "content": "2+3="}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3="}],
             [{"role": "user", "content": "2+3="}, {"role": "assistant", "content": "5"}]]
    for chat in chats:  # the default system turn kept: without tool calls, the model's own rendering
        for gen in (False, True):
            assert (tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
                    == own.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen))
    tok = tool_tokenizer(tok, "smol-like")  # recognised as rlft's tool ChatML: kept, with its response template
    assert tok.chat_template.endswith(TOOL_CHATML_TEMPLATE) and "SmolLM" in tok.chat_template
    prompt = [{"role": "user", "content": "25*58="}]
    completion = [CALL, {"role": "tool", "name": "calculate", "content": "1450"},
                  {"role": "assistant", "content": "1450"}]
    text = tok.apply_chat_template(prompt + completion, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert '<tool_call>\n{"name": "calculate", "arguments": {"expression": "25*58"}}\n</tool_call>' in text
    prompt_ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    turn = tok.apply_chat_template(prompt + [CALL], tokenize=True, return_dict=False)[len(prompt_ids):-1]
    from trl.chat_template_utils import parse_response

    assert parse_response(tok, turn, prefix=prompt_ids)["tool_calls"] == CALL["tool_calls"]
    full = tok.apply_chat_template(prompt + completion, tokenize=True, return_dict=False)
    assert first_mismatch(tok, prompt, completion, prompt_ids, full[len(prompt_ids):-1]) is None


def test_chatml_tools_on_the_tiny_models_own_template_is_its_tool_template(tiny_dir):
    from rlft.tools import TOOL_CHATML_TEMPLATE, use_chat_template

    assert use_chat_template(_tok(tiny_dir), "chatml-tools", "tiny").chat_template == TOOL_CHATML_TEMPLATE
    assert use_chat_template(_tok(tiny_dir), None, "tiny").chat_template != TOOL_CHATML_TEMPLATE  # opt-in


def test_chatml_tools_needs_chatml_tokens_and_im_end_as_eos(not_chatml, tiny_dir):
    from rlft.tools import use_chat_template

    with pytest.raises(UserError, match=r"needs a ChatML tokenizer.*no <\|im_start\|> or <\|im_end\|> token"):
        use_chat_template(_tok(not_chatml), "chatml-tools", "not-chatml")
    tok = _tok(tiny_dir)
    tok.eos_token = "<|pad|>"
    with pytest.raises(UserError, match=r"needs <\|im_end\|> as the tokenizer's eos"):
        use_chat_template(tok, "chatml-tools", "tiny")


def test_chatml_tools_on_a_tokenizer_that_is_not_chatml_is_one_line_before_any_model_loads(cli, tmp_path,
                                                                                          not_chatml, monkeypatch):
    import rlft.models

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(rlft.models, "load_model", no_model)
    monkeypatch.setattr(rlft.models, "load_for_inference", no_model)
    for method in ("grpo", "sft"):
        data = PROMPTS if method == "grpo" else DATA / "tools/sft_train.jsonl"
        extra = ("--env", ENV) if method == "grpo" else ()
        r = cli(method, "--model", not_chatml, "-d", data, *extra, "-o", tmp_path / method,
                "--set", "model.chat_template=chatml-tools")
        assert r.code == 2 and "needs a ChatML tokenizer" in r.err and "Traceback" not in r.text, r.text
        assert not (tmp_path / method).exists()
    r = cli("eval", "-m", not_chatml, "-d", DATA / "tools/test.jsonl", "--env", ENV, "--verifier", "math",
            "--chat-template", "chatml-tools")
    assert r.code == 2 and "needs a ChatML tokenizer" in r.err, r.text


def test_an_unknown_chat_template_name_is_refused_by_the_config(cli, tmp_path):
    r = cli("grpo", "-d", PROMPTS, "--env", ENV, "-o", tmp_path / "run", "--set", "model.chat_template=chatml")
    assert r.code == 2 and "chatml-tools" in r.err
    assert not (tmp_path / "run").exists()


def test_grpo_with_chatml_tools_saves_the_template_and_eval_env_reads_it(cli, tmp_path, smol_like):
    from rlft.tools import TOOL_CHATML_TEMPLATE

    out = tmp_path / "run"
    args = ("grpo", "--model", smol_like, "-d", PROMPTS, "--env", ENV, "--verifier", "math", "-o", out,
            "--max-steps", "1", "--batch-size", "2", "--num-generations", "2", "--no-preflight",
            "--set", "grpo.max_completion_length=16", "--set", "train.logging_steps=1")
    r = cli(*args)
    assert r.code == 2 and "--set model.chat_template=chatml-tools" in r.err and not out.exists(), r.text
    r = cli(*args, "--set", "model.chat_template=chatml-tools")
    assert r.code == 0, r.text
    assert "tokens_mismatch" not in r.text
    saved = _tok(out)
    assert saved.chat_template.endswith(TOOL_CHATML_TEMPLATE) and "SmolLM" in saved.chat_template
    assert saved.response_template is not None
    logged = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(x for x in logged if "tools/calls" in x)
    assert step["tools/render_mismatches"] == 0 and "tools/call_frequency" in step
    evaluate = ("eval", "-d", DATA / "tools/test.jsonl", "--env", ENV, "--verifier", "math", "--limit", "2",
                "--max-new-tokens", "8", "--json")
    r = cli(*evaluate, "-m", out)  # the run's tokenizer carries the template: no option needed
    assert r.code == 0, r.text
    assert json.loads(r.out[r.out.index("{"):])["n"] == 2
    r = cli(*evaluate, "-m", smol_like)
    assert r.code == 2 and "--chat-template chatml-tools" in r.err, r.text
    r = cli(*evaluate, "-m", smol_like, "--chat-template", "chatml-tools")
    assert r.code == 0, r.text


@pytest.mark.parametrize("turn", ["1450\n<|im_end|>", " 1450 <|im_end|>",
                                  'Let me see.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": '
                                  '"25*58"}}\n</tool_call><|im_end|>'])
def test_a_parsed_turn_renders_back_to_its_ids_whitespace_included(smol_like, turn):
    """TRL trains on the generated ids and scores the parsed turn: parsing must not strip what the model wrote
    (SmolLM2 ended a turn with a newline before <|im_end|>, which a stripping parser lost)."""
    from trl.chat_template_utils import parse_response

    from rlft.episodes import first_mismatch
    from rlft.tools import use_chat_template

    tok = use_chat_template(_tok(smol_like), "chatml-tools", "smol-like")
    prompt = [{"role": "user", "content": "25*58="}]
    prompt_ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    ids = tok(turn)["input_ids"]
    message = parse_response(tok, ids, prefix=prompt_ids)
    assert first_mismatch(tok, prompt, [message], prompt_ids, ids) is None
