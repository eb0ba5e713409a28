"""RL rollouts on tokenizers shaped like real chat models, on tiny models (fast):
  - pad == eos (SmolLM2, Qwen2.5): the mask keeps the first eos and drops the padding after it, and the
    left-padded prompt's attention mask comes from the tokenizer (the template's own <|im_end|> tokens are
    the pad id, yet real);
  - an eos that is not the chat template's end-of-turn token (a base tokenizer with `<|endoftext|>`):
    generation still stops at `<|im_end|>`, in PPO's rollout and in TRL's GRPO.
The policies get a bias toward the stop token so that sampled responses end at different lengths.
"""

from __future__ import annotations

import pytest
import torch

from rlft.methods.ppo_math import response_mask

PROMPTS = [[{"role": "user", "content": "1+1?"}], [{"role": "user", "content": "What is 12 + 30?"}],
           [{"role": "user", "content": "7"}], [{"role": "user", "content": "How many legs has a cat?"}]]


def test_response_mask_keeps_the_first_stop_and_drops_pad_equal_to_eos():
    responses = torch.tensor([[5, 6, 2, 2, 2], [2, 2, 2, 2, 2], [5, 6, 7, 8, 9], [5, 3, 6, 2, 2]])
    mask, ended = response_mask(responses, [2, 3])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert ended.tolist() == [True, True, False, True]


def _tiny_variant(root, kind: str) -> str:
    """The tiny model saved with pad == eos (`pad_is_eos`) or with a separate `<|endoftext|>` eos (`base_eos`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlft.models import tiny_path

    tok = AutoTokenizer.from_pretrained(tiny_path())
    model = AutoModelForCausalLM.from_pretrained(tiny_path())
    if kind == "pad_is_eos":
        tok.pad_token = tok.eos_token
    else:
        tok.add_special_tokens({"eos_token": "<|endoftext|>"})
        model.resize_token_embeddings(len(tok))
    model.config.pad_token_id = model.generation_config.pad_token_id = tok.pad_token_id
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    out = root / kind
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def _biased_toward(model, token_id: int, bias: float = 4.0):
    """Give the output layer a bias toward one token (about a third of the probability on a random model)."""
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[token_id] = bias
    model.lm_head = head
    return model


def _ppo_rollout(path: str, stop_token: str):
    from rlft.config import resolve
    from rlft.methods.ppo_rollout import rollout
    from rlft.models import load_model, load_tokenizer

    cfg = resolve("ppo", None, {}, [f"model.name_or_path={path}", "ppo.verifiers=[math]", "ppo.response_length=12",
                                    "ppo.forward_batch_size=3"])
    tok = load_tokenizer(path)
    policy = _biased_toward(load_model(cfg.model, trainable=False), tok.convert_tokens_to_ids(stop_token))
    value = load_model(cfg.model, head="score")
    rows = [{"prompt": p, "answer": "2"} for p in PROMPTS * 2]
    torch.manual_seed(0)
    ro = rollout(policy, value, policy, tok, rows, lambda completions, **_: [0.0] * len(completions), cfg, "cpu")
    return tok, ro


def test_ppo_rollout_with_pad_equal_to_eos(tmp_path):
    from rlft.evaluate import render_prompt

    tok, ro = _ppo_rollout(_tiny_variant(tmp_path, "pad_is_eos"), "<|im_end|>")
    eos = tok.eos_token_id
    assert tok.pad_token_id == eos
    lengths = ro.mask.sum(1).long()
    ended = (ro.responses == eos).any(1)
    assert ended.any() and (lengths < ro.responses.shape[1]).any()  # some stopped early, so padding follows
    for row, n in zip(range(len(lengths)), lengths.tolist()):
        stops = (ro.responses[row] == eos).nonzero().flatten().tolist()
        if stops:  # the mask ends exactly at the first eos; everything after it is padding (eos ids too)
            assert n == stops[0] + 1 and ro.responses[row, n - 1] == eos
            assert (ro.responses[row, n:] == eos).all() and ro.mask[row, n:].sum() == 0
        else:
            assert n == ro.responses.shape[1]
    # the prompt part: the tokenizer's mask, not `!= pad` (the template's own <|im_end|> tokens are kept)
    side, tok.padding_side = tok.padding_side, "left"
    enc = tok([render_prompt(tok, r) for r in ro.prompts], padding=True, add_special_tokens=False,
              return_tensors="pt")
    tok.padding_side = side
    plen = enc["input_ids"].shape[1]
    assert torch.equal(ro.attention_mask[:, :plen], enc["attention_mask"])
    in_prompt_eos = (ro.input_ids[:, :plen] == eos) & (ro.attention_mask[:, :plen] == 1)
    assert in_prompt_eos.sum() >= len(ro.prompts)  # each user turn closes with <|im_end|> == pad
    assert torch.equal(ro.attention_mask[:, plen:], ro.mask.long())
    assert all("<|im_end|>" not in c for c in ro.completions)
    assert ro.stats["eos_missing"] == pytest.approx(1 - ended.float().mean().item())


def test_ppo_rollout_stops_at_the_template_end_of_turn_when_eos_differs(tmp_path):
    tok, ro = _ppo_rollout(_tiny_variant(tmp_path, "base_eos"), "<|im_end|>")
    assert tok.eos_token == "<|endoftext|>"
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    has_eot = (ro.responses == eot).any(1)
    assert has_eot.any()
    for row in has_eot.nonzero().flatten().tolist():  # generation stopped there: nothing real after it
        first = (ro.responses[row] == eot).nonzero()[0].item()
        assert ro.mask[row].sum() == first + 1
    assert ro.stats["eos_missing"] < 1.0  # ended at end-of-turn counts as ended (no missing-eos penalty)


def test_grpo_stops_at_the_template_end_of_turn_when_eos_differs(tmp_path):
    from rich.console import Console

    from rlft.config import resolve
    from rlft.data import Row
    from rlft.methods.grpo import build, prepare

    path = _tiny_variant(tmp_path, "base_eos")
    cfg = resolve("grpo", None, {}, [f"model.name_or_path={path}", "grpo.preflight=false", "grpo.num_generations=2",
                                     "train.per_device_train_batch_size=2", "train.max_steps=1",
                                     f"train.output_dir={tmp_path / 'run'}"])
    rows = [Row("p", i + 1, {"prompt": p, "answer": "2"}) for i, p in enumerate(PROMPTS)]
    prepared = prepare(cfg, rows, [], Console(quiet=True))
    trainer = build(cfg, tmp_path / "run", prepared)
    tok = prepared.tok
    assert tok.convert_tokens_to_ids("<|im_end|>") in trainer.eos_token_ids
    assert tok.eos_token_id in trainer.eos_token_ids
