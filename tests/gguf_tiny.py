"""Write a tiny Llama GGUF (float32, byte-level BPE tokenizer, ChatML template) with the gguf package, so the
GGUF path is tested without a download. Returns the model whose weights it holds."""

from __future__ import annotations

TINY_GGUF_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _permute(t, heads):
    """llama.cpp's row order for q/k (rotary halves interleaved); transformers undoes it when loading."""
    return t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)


def write_tiny_gguf(path, seed: int = 0, extra_tokens: int = 0, eos: int = 258):
    """`extra_tokens` more tokens in the tokenizer than embedding rows, or an `eos` id past them, make a
    damaged GGUF whose tokenizer names ids the model cannot embed."""
    import gguf
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    # 256 byte symbols + one merge result ("he"; transformers needs at least one merge) + 2 control tokens.
    tokens = list(bytes_to_unicode().values()) + ["he", "<|im_start|>", "<|im_end|>"]
    heads, kv_heads, hidden, ffn, layers = 4, 2, 64, 128, 2
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=ffn,
                         max_position_embeddings=256, tie_word_embeddings=True, rms_norm_eps=1e-5,
                         rope_theta=10000.0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)  # LlamaConfig's default rope_theta
    w.add_vocab_size(len(tokens))
    tokens += [f"<|extra_{i}|>" for i in range(extra_tokens)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * 257 + [3, 3] + [3] * extra_tokens)  # 1 normal, 3 control
    w.add_token_merges(["h e"])
    w.add_bos_token_id(257)
    w.add_eos_token_id(eos)
    w.add_pad_token_id(258)  # pad == eos, as in SmolLM2
    w.add_chat_template(TINY_GGUF_TEMPLATE)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(layers):
        for hf, gg in names.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if gg in ("attn_q", "attn_k"):
                t = _permute(t, heads if gg == "attn_q" else kv_heads)
            w.add_tensor(f"blk.{i}.{gg}.weight", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model
