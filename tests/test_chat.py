"""Chat templates: which tokens SFT learns (assistant-only or last-turn fallback), stop tokens, `as_chat`."""

from __future__ import annotations

import shutil

import pytest
from helpers import DATA, write_jsonl

from rlft.chat.templates import wrap_as_chat
from rlft.config import resolve
from rlft.data import Row

# SmolLM2-135M-Instruct's template (ChatML + a default system prompt): no {% generation %} markers and no TRL
# training variant.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CHATS = [{"messages": [{"role": "user", "content": f"add {i} and 1"}, {"role": "assistant", "content": f"is {i+1}"},
                       {"role": "user", "content": "again"}, {"role": "assistant", "content": f"still {i+1}"}]}
         for i in range(6)]


def flat(text: str) -> str:
    """Console output with rich's line wrapping undone."""
    return " ".join(text.split())


def _tiny_with_template(tmp_path, tiny_dir, template: str):
    """A copy of the tiny model whose tokenizer carries `template` (tiny's vocabulary has <|im_start|>/<|im_end|>)."""
    from transformers import AutoTokenizer

    folder = tmp_path / "tiny-templated"
    shutil.copytree(tiny_dir, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = template
    tok.save_pretrained(folder)
    return folder


def _learned_text(folder, tmp_path, sets=()):
    """Build rlft's SFT trainer on CHATS and decode the tokens of the first row that carry a loss."""
    from rich.console import Console

    from rlft.methods.sft import build, prepare

    cfg = resolve("sft", None, {}, [f"model.name_or_path={folder}", "sft.max_length=512", *sets])
    rows = [Row("chats", i + 1, r) for i, r in enumerate(CHATS)]
    trainer = build(cfg, tmp_path / "out", prepare(cfg, rows, [], Console(quiet=True)))
    batch = trainer.data_collator([trainer.train_dataset[0]])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    learned = trainer.processing_class.decode(ids[labels != -100])
    return learned, trainer.processing_class.decode(ids)


def test_qwen25_template_learns_assistant_tokens_only(tmp_path, tiny_dir):
    """Qwen2.5's template has no generation markers; TRL's training variant of it masks all but the answers."""
    from trl.chat_template_utils import qwen2_5_chat_template

    from rlft.chat.templates import ASSISTANT_ONLY, sft_chat_loss
    from rlft.models import load_tokenizer

    folder = _tiny_with_template(tmp_path, tiny_dir, qwen2_5_chat_template)
    assert sft_chat_loss(load_tokenizer(str(folder)), None) == (ASSISTANT_ONLY, None)
    learned, whole = _learned_text(folder, tmp_path)
    assert "You are Qwen" in whole and "add 0 and 1" in whole  # the default system prompt and the user turns...
    assert learned == "\nis 1<|im_end|>\n\nstill 1<|im_end|>\n"  # ...carry no loss: both answers and their ends do


def test_template_without_training_variant_falls_back_to_the_last_turn(tmp_path, tiny_dir, cli):
    from rlft.chat.templates import LAST_TURN, sft_chat_loss
    from rlft.models import load_tokenizer

    folder = _tiny_with_template(tmp_path, tiny_dir, SMOLLM2_TEMPLATE)
    mode, note = sft_chat_loss(load_tokenizer(str(folder)), None)
    assert mode == LAST_TURN and "no {% generation %} markers" in note
    learned, whole = _learned_text(folder, tmp_path)
    assert "SmolLM" in whole and "is 1" in whole  # earlier turns are context...
    assert learned == "still 1<|im_end|>\n"  # ...only the last assistant turn is learned
    data = write_jsonl(tmp_path / "chats.jsonl", CHATS)
    # Asking for assistant-only loss on such a template: one line, exit 2, nothing written.
    out = tmp_path / "refused"
    r = cli("sft", "--model", folder, "--data", data, "-o", out, "--max-steps", "1",
            "--set", "sft.assistant_only_loss=true")
    assert r.code == 2 and "sft.assistant_only_loss=true cannot be done" in flat(r.err) and not out.exists()
    r = cli("sft", "--model", folder, "--data", data, "-o", tmp_path / "ok", "--max-steps", "1",
            "--batch-size", "2")
    assert r.code == 0, r.text
    assert "learning each chat's last assistant turn" in flat(r.err)


def test_plain_prompts_note_and_as_chat_switch(cli, tmp_path):
    rows = [Row("f", 1, {"prompt": "1+1=", "completion": "2"}), Row("f", 2, {"prompt": [{"role": "user",
                                                                                          "content": "hi"}]})]
    wrapped = wrap_as_chat(rows)
    assert wrapped[0].data == {"prompt": [{"role": "user", "content": "1+1="}],
                               "completion": [{"role": "assistant", "content": "2"}]}
    assert wrapped[1] is rows[1] and rows[0].data["prompt"] == "1+1="  # conversational rows and inputs untouched
    data = DATA / "arith/sft_train.jsonl"
    r = cli("sft", "--data", data, "-o", tmp_path / "plain", "--max-steps", "1", "--set", "sft.max_length=64")
    assert r.code == 0 and "prompts are plain strings but the model has a chat template" in flat(r.err)
    assert "--set data.as_chat=true" in flat(r.err)
    r = cli("sft", "--data", data, "-o", tmp_path / "chat", "--max-steps", "1", "--set", "sft.max_length=64",
            "--set", "data.as_chat=true")
    assert r.code == 0, r.text
    assert "prompts are plain strings" not in flat(r.err)
    r = cli("eval", "--model", "tiny", "--data", DATA / "arith/test.jsonl", "--limit", "2", "--json")
    assert r.code == 0 and "--as-chat wraps each prompt" in flat(r.err)
    r = cli("eval", "--model", "tiny", "--data", DATA / "arith/test.jsonl", "--limit", "2", "--json", "--as-chat")
    assert r.code == 0 and "prompts are plain strings" not in flat(r.err)


def test_stop_tokens_include_the_templates_end_of_turn(tiny_dir):
    from rlft.chat.templates import end_of_turn_token, stop_token_ids
    from rlft.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    assert end_of_turn_token(tok) == "<|im_end|>"
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert stop_token_ids(tok) == [im_end]
    tok.add_special_tokens({"eos_token": "<|endoftext|>"})  # a base-model eos that the chat template never emits
    assert stop_token_ids(tok) == [tok.convert_tokens_to_ids("<|endoftext|>"), im_end]
    tok.chat_template = None
    assert end_of_turn_token(tok) is None


@pytest.mark.parametrize("template", [None, "{{ messages[0]['content'] }}"])
def test_no_usable_template_has_no_end_of_turn(tiny_dir, template):
    from rlft.chat.templates import end_of_turn_token
    from rlft.models import load_tokenizer

    tok = load_tokenizer(str(tiny_dir))
    tok.chat_template = template
    assert end_of_turn_token(tok) is None
