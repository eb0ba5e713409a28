"""Sampling from a merged copy of a LoRA policy that follows every update (rlft.speed.sampling)."""

from __future__ import annotations

import pytest


@pytest.fixture
def policy(tiny_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    with torch.no_grad():  # a non-zero adapter, so merged and unmerged paths differ from the base
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return peft


def _greedy(model, ids):
    return model.generate(input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=12, do_sample=False,
                          pad_token_id=0, eos_token_id=3)


@pytest.mark.parametrize("mode", ["live", "merged"])
def test_the_copy_samples_what_the_policy_would_and_follows_each_update(policy, mode, monkeypatch, one_thread):
    """Both kinds of copy: live (the adapter re-merged into the packs at every decode: nothing to refresh) and
    merged (rebuilt at the first decode after an optimizer step, and only then)."""
    import torch

    import rlft.speed.sampling
    from rlft.speed import packed_linear
    from rlft.speed.sampling import attach

    if mode == "merged":
        monkeypatch.setattr(rlft.speed.sampling, "_can_keep_adapter_out", lambda *a: False)
    elif not packed_linear.available():
        pytest.skip("this torch has no MKL packed gemm")

    ids = torch.tensor([[10, 20, 30, 40], [11, 21, 31, 41]])
    own = type(policy).generate(policy, input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=12,
                                do_sample=False, pad_token_id=0, eos_token_id=3)
    sampler = attach(policy)
    try:
        assert sampler is not None and policy.generate == sampler.generate
        assert sampler.live == (mode == "live")
        assert torch.equal(_greedy(policy, ids), own)  # fp32 base: the copy decodes the same tokens
        assert sampler.refreshes == (1 if mode == "merged" else 0)
        _greedy(policy, ids)
        assert sampler.refreshes == (1 if mode == "merged" else 0)  # no update, no refresh
        # one optimizer step on the adapter: the copy must follow
        opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=5.0)
        loss = policy(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        assert sampler.stale == (mode == "merged")
        after = _greedy(policy, ids)
        assert sampler.refreshes == (2 if mode == "merged" else 0)
        assert not torch.equal(after, own)  # the step changed what is sampled: a real test of following it
        assert torch.equal(after, type(policy).generate(policy, input_ids=ids, attention_mask=ids.ne(-1),
                                                        max_new_tokens=12, do_sample=False, pad_token_id=0,
                                                        eos_token_id=3))
        with torch.no_grad():
            merged_logits = sampler.copy(input_ids=ids).logits
            policy_logits = policy(input_ids=ids).logits
        assert torch.allclose(merged_logits, policy_logits, atol=1e-4)
        # with the adapter disabled, generate is the base model's (the copy holds the adapted weights)
        with policy.disable_adapter():
            base = _greedy(policy, ids)
            with torch.no_grad():
                assert torch.equal(base, type(policy).generate(policy, input_ids=ids, attention_mask=ids.ne(-1),
                                                                max_new_tokens=12, do_sample=False, pad_token_id=0,
                                                                eos_token_id=3))
    finally:
        sampler.detach()
    assert "generate" not in policy.__dict__


def test_fp32_sampling_shares_the_base_packs_it_once_and_reads_the_adapter_live(policy, one_thread):
    """Live-adapter mode: the copy holds the policy's own base tensors (no second set), its linear layers are
    packed at the first decode with the adapter merged in and re-packed into the same buffers after an update,
    and the sampled tokens follow the adapter's updates as the policy's own generate does."""
    import torch

    from rlft.speed import packed_linear
    from rlft.speed.sampling import attach

    if not packed_linear.available():
        pytest.skip("this torch has no MKL packed gemm")
    ids = torch.tensor([[10, 20, 30, 40], [11, 21, 31, 41]])
    sampler = attach(policy)
    try:
        assert sampler.live
        q = policy.get_base_model().model.layers[0].self_attn.q_proj
        assert sampler.copy.model.layers[0].self_attn.q_proj.weight.data_ptr() == q.base_layer.weight.data_ptr()
        out = policy.generate(input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=6, do_sample=False,
                              pad_token_id=0, eos_token_id=3)
        assert torch.equal(out, type(policy).generate(policy, input_ids=ids, attention_mask=ids.ne(-1),
                                                      max_new_tokens=6, do_sample=False, pad_token_id=0,
                                                      eos_token_id=3))
        layer = sampler.copy.model.layers[0].self_attn.q_proj
        pack, state = layer.rlft_packed, layer.rlft_packed_state[-1]
        opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=5.0)
        policy(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        after = _greedy(policy, ids)
        assert layer.rlft_packed is pack  # re-packed in place: no new memory
        assert layer.rlft_packed_state[-1] != state  # with the updated adapter
        assert torch.equal(after, type(policy).generate(policy, input_ids=ids, attention_mask=ids.ne(-1),
                                                        max_new_tokens=12, do_sample=False, pad_token_id=0,
                                                        eos_token_id=3))
        with torch.no_grad():
            assert torch.allclose(sampler.copy(input_ids=ids).logits, policy(input_ids=ids).logits, atol=1e-4)
    finally:
        sampler.detach()


def test_a_trainable_weight_outside_the_adapter_keeps_the_merged_copy(policy, one_thread):
    """A weight the optimizer changes outside the adapter (here the output head) would need re-packing every
    step: the copy is a merged one, refreshed after each update, and samples what the policy would."""
    import torch

    from rlft.speed.sampling import attach

    ids = torch.tensor([[10, 20, 30, 40], [11, 21, 31, 41]])
    head = policy.get_base_model().lm_head.weight
    head.requires_grad_(True)
    sampler = attach(policy)
    try:
        assert not sampler.live
        opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=5.0)
        policy(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        assert torch.equal(_greedy(policy, ids), type(policy).generate(
            policy, input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=12, do_sample=False, pad_token_id=0,
            eos_token_id=3))
        assert sampler.copy.lm_head.weight.data_ptr() != head.data_ptr()
    finally:
        sampler.detach()


def _own(policy, ids, n=12):
    return type(policy).generate(policy, input_ids=ids, attention_mask=ids.ne(-1), max_new_tokens=n,
                                 do_sample=False, pad_token_id=0, eos_token_id=3)


def test_the_shared_copy_sees_in_place_changes_of_the_policys_base(policy, one_thread):
    """The live copy's weights are the policy's tensors with their version counter: a pack made before an
    in-place change of a base weight is not used after it (review: `param.data =` kept a counter of its own)."""
    import torch

    from rlft.speed.sampling import attach

    ids = torch.tensor([[10, 20, 30, 40], [11, 21, 31, 41]])
    sampler = attach(policy)
    try:
        _greedy(policy, ids)
        with torch.no_grad():
            for layer in sampler.lora_layers:
                layer.base_layer.weight.mul_(1.5)
        assert torch.equal(_greedy(policy, ids), _own(policy, ids))
    finally:
        sampler.detach()


def test_merged_adapters_embeddings_and_b_biases_sample_what_the_policy_would(tiny_dir, one_thread):
    """peft's merge_adapter (the base then holds the adapter: generate is the policy's own), a LoRA on the
    embedding (the merged copy, through peft's delta), a bias on B (no copy: neither computes it)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlft.speed.sampling import attach

    ids = torch.tensor([[10, 20, 30, 40], [11, 21, 31, 41]])

    def build(**kw):
        torch.manual_seed(0)
        peft = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=4, lora_alpha=8, **kw))
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_B" in name or "lora_embedding_B" in name:
                    p.normal_(0, 0.5)
        return peft

    merged = build(target_modules="all-linear")
    sampler = attach(merged)
    _greedy(merged, ids)
    merged.merge_adapter()
    assert torch.equal(_greedy(merged, ids), _own(merged, ids))
    merged.unmerge_adapter()
    assert torch.equal(_greedy(merged, ids), _own(merged, ids))
    sampler.detach()

    embedded = build(target_modules=["q_proj", "embed_tokens"])
    sampler = attach(embedded)
    assert sampler is not None and not sampler.live
    assert torch.equal(_greedy(embedded, ids), _own(embedded, ids))
    sampler.detach()

    assert attach(build(target_modules="all-linear", lora_bias=True)) is None


def test_a_deep_copied_or_pickled_policy_samples_its_own_weights(policy, one_thread):
    """The policy's `generate` is the sampler's: a deep copy (or pickle) of the policy after sampling carries
    no MKL packs (they cannot be copied) and rebuilds its copy for the new policy at its first `generate`."""
    import copy
    import io

    import torch

    from rlft.speed.sampling import attach

    ids = torch.tensor([[10, 20, 30, 40], [11, 21, 31, 41]])
    sampler = attach(policy)
    try:
        _greedy(policy, ids)
        twin = copy.deepcopy(policy)
        torch.save(policy, io.BytesIO())
        with torch.no_grad():
            for name, p in twin.named_parameters():
                if "lora_B" in name:
                    p.mul_(-1.0)
        assert twin.rlft_sampler is not sampler and twin.rlft_sampler.policy is twin
        assert torch.equal(_greedy(twin, ids), _own(twin, ids))
        assert torch.equal(_greedy(policy, ids), _own(policy, ids))
        assert not torch.equal(_own(twin, ids), _own(policy, ids))
    finally:
        sampler.detach()


def test_no_copy_without_an_adapter(tiny_dir):
    from transformers import AutoModelForCausalLM

    from rlft.speed.sampling import attach

    assert attach(AutoModelForCausalLM.from_pretrained(tiny_dir)) is None
