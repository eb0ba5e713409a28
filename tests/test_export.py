"""`rlft export --gguf`: round trips through transformers' GGUF loader, and the refusals.

The fast round trips use a tiny Llama with a byte-level BPE tokenizer trained here (tokenizers, no
downloads); the real-model check (smollm2 + LoRA, the issue's acceptance check) is marked `real`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import write_jsonl

TEXT = "The lazy fox: 12+30=42 <|im_end|> hello world"
# Max abs logit difference against the source, per outtype, on the tiny Llama below (logits up to ~2.7;
# measured here: f32 0.0, f16 2.1e-3, q8_0 5.0e-2; the thresholds leave ~2x room).
TOLERANCE = {"f32": 1e-4, "f16": 5e-3, "q8_0": 1e-1}


def build_bpe_llama(out: Path) -> Path:
    """A 2-layer Llama (GQA: 4 heads, 2 KV heads) with a 300-token byte-level BPE and a ChatML template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    text = ["The quick brown fox jumps over the lazy dog. 12+30=42, 7*6=42."] * 50 + ["hello world, how are you?"] * 20
    core.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", unk_token="<|endoftext|>", chat_template=template)
    # vocab_size 320 > 300 tokens: the converter pads with llama.cpp's [PAD{i}] placeholders.
    config = LlamaConfig(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger weights than the 0.02-std init, so logits (and any mistake) are not tiny
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(4.0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def bpe_llama(tmp_path_factory):
    return build_bpe_llama(tmp_path_factory.mktemp("bpe-llama") / "model")


def _logits(model, tok, text=TEXT):
    import torch

    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        return model(ids).logits


def _load_gguf(path: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.mark.parametrize("outtype", ["f32", "f16", "q8_0"])
def test_round_trip_through_transformers(cli, bpe_llama, tmp_path, outtype):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # stdout is the path as it is: never wrapped at 80 columns, brackets not read as markup
    out = tmp_path / f"{'a-long-file-name-' * 6}[red]m[b]-{outtype}.gguf"
    r = cli("export", bpe_llama, "--gguf", out, "--outtype", outtype)
    assert r.code == 0, r.text
    assert r.out.strip() == str(out) and "gpt-2 pre-tokenizer" in r.err
    src, src_tok = AutoModelForCausalLM.from_pretrained(bpe_llama, dtype=torch.float32), \
        AutoTokenizer.from_pretrained(bpe_llama)
    model, tok = _load_gguf(out)
    assert tok(TEXT)["input_ids"] == src_tok(TEXT)["input_ids"]  # same tokens, special token kept whole
    assert tok.chat_template == src_tok.chat_template and tok.eos_token == "<|im_end|>"
    diff = (_logits(model, src_tok) - _logits(src, src_tok)).abs().max().item()
    assert diff <= TOLERANCE[outtype], diff


def test_qk_permutation_is_what_makes_the_round_trip_exact(bpe_llama, tmp_path, monkeypatch):
    """Without llama.cpp's Q/K row order the file loads but computes something else."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rlft.export as export

    monkeypatch.setattr(export, "permute_qk", lambda w, n_head: w)
    out = tmp_path / "unpermuted.gguf"
    export.export_gguf(str(bpe_llama), out, "f32")
    src_tok = AutoTokenizer.from_pretrained(bpe_llama)
    src = AutoModelForCausalLM.from_pretrained(bpe_llama, dtype=torch.float32)
    model, _ = _load_gguf(out)
    assert (_logits(model, src_tok) - _logits(src, src_tok)).abs().max().item() > 1e-2


def test_lora_run_is_merged_before_export(cli, bpe_llama, tmp_path):
    """An adapter folder exports as base + adapter: the same logits as the run loaded with plain peft."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(bpe_llama, dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      init_lora_weights=False)  # random A and B: the adapter changes the logits
    get_peft_model(base, lora).save_pretrained(tmp_path / "run")
    out = tmp_path / "lora.gguf"
    r = cli("export", tmp_path / "run", "--gguf", out)
    assert r.code == 0, r.text
    tok = AutoTokenizer.from_pretrained(bpe_llama)
    run = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(bpe_llama, dtype=torch.float32),
                                    tmp_path / "run")
    plain = AutoModelForCausalLM.from_pretrained(bpe_llama, dtype=torch.float32)
    model, _ = _load_gguf(out)
    assert (_logits(run, tok) - _logits(plain, tok)).abs().max().item() > 1e-2  # the adapter matters
    assert (_logits(model, tok) - _logits(run, tok)).abs().max().item() <= TOLERANCE["f32"]


def test_tiny_models_character_tokenizer_is_refused(cli, tiny_dir, tmp_path):
    out = tmp_path / "tiny.gguf"
    r = cli("export", "tiny", "--gguf", out)
    assert r.code == 2
    assert "supports byte-level BPE tokenizers" in r.err and "WordLevel" in r.err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_adapter_without_its_base_is_refused(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone"),
                                                         "peft_type": "LORA"}))
    r = cli("export", run, "--gguf", tmp_path / "x.gguf")
    assert r.code == 2 and "not a folder here" in r.err
    (run / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    r = cli("export", run, "--gguf", tmp_path / "x.gguf")
    assert r.code == 2 and "does not name its base model" in r.err
    assert not (tmp_path / "x.gguf").exists()


def test_unknown_outtype_and_existing_file_are_refused(cli, bpe_llama, tmp_path):
    r = cli("export", bpe_llama, "--gguf", tmp_path / "x.gguf", "--outtype", "q4_0")
    assert r.code == 2 and "q4_0" in r.err and "f32" in r.err and "q8_0" in r.err
    kept = tmp_path / "kept.gguf"
    kept.write_bytes(b"not yours")
    r = cli("export", bpe_llama, "--gguf", kept)
    assert r.code == 2 and "exists" in r.err and "--overwrite" in r.err
    assert kept.read_bytes() == b"not yours"


def test_other_architectures_are_refused(tmp_path):
    from transformers import Qwen2Config

    from rlft.errors import UserError
    from rlft.export import check_config

    with pytest.raises(UserError, match="supports Llama-family models"):
        check_config(Qwen2Config())


@pytest.mark.real
def test_smollm2_lora_run_exports_with_the_runs_logits(cli, tmp_path):
    """The issue's check: a 2-step LoRA SFT of smollm2, exported f32, loads in transformers with the
    logits of the run loaded through plain peft (within 1e-3)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = write_jsonl(tmp_path / "c.jsonl", [
        {"messages": [{"role": "user", "content": f"What is {a}+{b}?"},
                      {"role": "assistant", "content": str(a + b)}]} for a, b in [(12, 30), (5, 7), (40, 2), (9, 9)]])
    run = tmp_path / "run"
    r = cli("sft", "--model", "smollm2", "--lora", "--data", data, "--max-steps", "2", "--batch-size", "2",
            "--set", f"train.output_dir={run}")
    assert r.code == 0, r.text
    out = tmp_path / "run.gguf"
    r = cli("export", run, "--gguf", out, "--outtype", "f32")
    assert r.code == 0, r.text
    base = json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"]
    tok = AutoTokenizer.from_pretrained(run)
    ref = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), run)
    model, gguf_tok = _load_gguf(out)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 12+30?"}], tokenize=False,
                                   add_generation_prompt=True) + "42"
    assert gguf_tok(text)["input_ids"] == tok(text)["input_ids"]
    assert (_logits(model, tok, text) - _logits(ref, tok, text)).abs().max().item() <= 1e-3

