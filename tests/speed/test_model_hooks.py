"""The LM head gets a contiguous input wherever rlft asks a model for its last positions' logits.

transformers slices the hidden states for an int `logits_to_keep` into a strided view, and torch's CPU linear
multiplies such a view with the head's weight expanded per row: 7.9 s and +3.6 GB for 64 rows of SmolLM2 in
bf16 against 0.02 s (bench/lm_head_slice.py). rlft's own passes give an index tensor (rlft.speed.decode.last_positions),
and every model rlft loads gets a hook that makes the head's input contiguous
(rlft.speed.model_hooks.contiguous_head) for the paths it does not drive (transformers' `generate`). These tests
fail if a strided input comes back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _watch_head(model) -> tuple[list, object]:
    """(inputs seen by the LM head: (shape, contiguous), the hook handle)."""
    seen: list = []
    head = model.get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda _m, args: seen.append((tuple(args[0].shape),
                                                                        args[0].is_contiguous())))
    return seen, handle


@pytest.fixture(scope="module")
def model(tiny_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_dir).eval()


def test_last_positions_index_the_last_columns_of_transformers_models_only(model):
    from peft import LoraConfig, get_peft_model

    from rlft.speed.decode import last_positions

    ids = torch.zeros(3, 7, dtype=torch.long)
    assert last_positions(model, ids).tolist() == [6]
    assert last_positions(model, ids, 3).tolist() == [4, 5, 6]
    wrapped = get_peft_model(type(model)(model.config), LoraConfig(r=2, target_modules="all-linear"))
    assert last_positions(wrapped, ids, 3).tolist() == [4, 5, 6]

    class RemoteCode(torch.nn.Module):  # trust_remote_code classes may slice with the int themselves
        pass

    RemoteCode.__module__ = "transformers_modules.someone.model"  # where transformers puts remote code
    assert last_positions(RemoteCode(), ids, 3) == 3
    assert last_positions(model, ids, 0) == 0 and last_positions(model, ids, 7) == 7  # the int means these


def test_decode_prefill_hands_the_head_a_contiguous_input(model):
    from transformers import GenerationConfig

    from rlft.speed.decode import decode

    ids = torch.tensor([[0, 0, 10, 20, 30], [5, 6, 7, 8, 9], [0, 11, 12, 13, 14]])
    mask = ids.ne(0).long()
    cfg = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=[3])
    seen, handle = _watch_head(model)
    try:
        with torch.no_grad():
            got = decode(model, input_ids=ids, attention_mask=mask, generation_config=cfg)
    finally:
        handle.remove()
    prefill = [s for s in seen if s[0][0] == 3]
    assert prefill and prefill[0] == ((3, 1, model.config.hidden_size), True)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    assert torch.equal(got, want)


def test_ppo_scoring_hands_the_head_a_contiguous_input_and_the_same_log_probs(model):
    from rlft.methods.ppo_rollout import response_logprobs

    torch.manual_seed(1)
    ids = torch.randint(4, 60, (3, 9))
    mask = torch.ones_like(ids)
    position = torch.arange(9).expand(3, 9)
    responses = ids[:, -4:]
    seen, handle = _watch_head(model)
    try:
        with torch.no_grad():
            got = response_logprobs(model, ids, mask, position, responses, temperature=0.7)
    finally:
        handle.remove()
    assert seen == [((3, 5, model.config.hidden_size), True)]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position).logits[:, -5:-1]
    want = torch.log_softmax(logits.float() / 0.7, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(got, want, atol=1e-6)


def test_prompt_sharing_prefill_hands_the_head_a_contiguous_input(tiny_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from rlft.speed.prompt_sharing import per_token_logps

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))  # as TRL's GRPO scores
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    prompts = [[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]]
    ids = torch.tensor([prompts[i % 2] + [30 + i, 40 + i, 3] for i in range(4)])
    mask = ids.ne(0).long()
    seen, handle = _watch_head(model)
    try:
        with torch.no_grad():
            got = per_token_logps(model, ids, mask, 3)
    finally:
        handle.remove()
    prefill = [s for s in seen if s[0][0] == 2]  # the two distinct prompts' pass
    assert prefill and all(contiguous for _, contiguous in prefill), seen
    assert got is not None and got[0].shape == (4, 3)



def test_ppo_loss_forward_hands_the_head_a_contiguous_input_with_gradients(model, tiny_dir):
    from transformers import AutoModelForSequenceClassification

    from rlft.methods.ppo_rollout import policy_and_value

    value = AutoModelForSequenceClassification.from_pretrained(tiny_dir, num_labels=1)
    value.config.pad_token_id = 0
    ids = torch.randint(4, 60, (2, 9))
    mask = torch.ones_like(ids)
    position = torch.arange(9).expand(2, 9)
    net = policy_and_value(model, value)
    seen, handle = _watch_head(model)
    try:
        logits, values = net(ids, mask, position, 5)
    finally:
        handle.remove()
    assert logits.requires_grad and logits.shape[:2] == (2, 5) and values.shape == (2, 9)
    assert seen == [((2, 5, model.config.hidden_size), True)]
    with torch.no_grad():
        assert torch.allclose(logits, model(input_ids=ids, attention_mask=mask, position_ids=position).logits[:, -5:],
                              atol=1e-6)


def test_models_rlft_loads_give_the_head_a_contiguous_input_under_generate(tiny_dir):
    import copy
    import pickle

    from rlft.models import load_for_inference
    from rlft.speed.model_hooks import contiguous_head

    model = load_for_inference(tiny_dir)
    assert not contiguous_head(model)  # already there: load_model added it
    seen, handle = _watch_head(model)  # registered after rlft's hook: sees what the head computes on
    ids = torch.tensor([[0, 0, 10, 20, 30], [5, 6, 7, 8, 9]])
    try:
        with torch.no_grad():  # transformers' own generate: an int logits_to_keep, a strided slice
            model.generate(input_ids=ids, attention_mask=ids.ne(0).long(), max_new_tokens=3, do_sample=False,
                           pad_token_id=0)
    finally:
        handle.remove()
    assert seen and all(contiguous for _, contiguous in seen), seen
    pickle.dumps(model.get_output_embeddings())  # the hook is a module-level function: still picklable
    copy.deepcopy(model)
