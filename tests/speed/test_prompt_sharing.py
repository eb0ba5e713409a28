"""rlft.speed.prompt_sharing: each prompt computed once gives TRL's log-probabilities, entropies and gradients."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _policy(tiny_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    with torch.no_grad():  # a trained adapter: B away from its zero start, so the LoRA path carries gradient
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


def _batch():
    """2 prompts x G 3 as TRL lays a step out: prompts left-padded to one width, completions right-padded
    after their stop token, the groups interleaved so that sharing must find them by content."""
    prompts = [[0, 0, 0, 11, 12, 13, 14], [21, 22, 23, 24, 25, 26, 27]]
    completions = [[31, 32, 33, 3, 0, 0], [34, 35, 3, 0, 0, 0], [36, 37, 38, 39, 40, 41],
                   [42, 3, 0, 0, 0, 0], [43, 44, 45, 46, 3, 0], [47, 48, 49, 50, 51, 52]]
    ids = torch.tensor([prompts[i % 2] + c for i, c in enumerate(completions)])
    prompt_mask = torch.tensor([[int(t != 0) for t in prompts[i % 2]] for i in range(6)])
    completion_mask = torch.tensor([[1 if j <= (c.index(3) if 3 in c else 99) else 0 for j in range(6)]
                                    for c in completions])
    return ids, torch.cat([prompt_mask, completion_mask], dim=1), 6


def _run(fn, model):
    model.zero_grad()
    logps, entropy = fn()
    (logps.sum() + 0.5 * entropy.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps.detach(), entropy.detach(), grads


def _shared_equals_full(model, monkeypatch) -> list:
    """rlft's shared pass against the model's full pass on _batch: log-probs, entropies and gradients equal on
    the scored positions (asserted); returns one entry per lane pass that ran."""
    import rlft.speed.prompt_sharing as sharing

    used = []
    real_lane_pass = sharing._lane_pass
    monkeypatch.setattr(sharing, "_lane_pass", lambda *a, **k: used.append(1) or real_lane_pass(*a, **k))
    ids, mask, keep = _batch()

    def full():
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-keep] = -100
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -keep:], out.entropy[:, -keep:]

    assert sharing.applies(model, ids, keep)
    want = _run(full, model)
    got = _run(lambda: sharing.per_token_logps(model, ids, mask, keep, compute_entropy=True), model)
    scored = mask[:, -keep:].bool()
    assert torch.allclose(got[0][scored], want[0][scored], atol=1e-5, rtol=1e-4)
    assert torch.allclose(got[1][scored], want[1][scored], atol=1e-5, rtol=1e-4)
    assert want[2].keys() == got[2].keys() and any("lora_A" in n for n in want[2])
    for name, grad in want[2].items():
        assert torch.allclose(got[2][name], grad, atol=1e-5, rtol=1e-3), name
    assert (want[0][scored] != 0).all()  # a real comparison: the scored positions carry log-probabilities
    return used


@pytest.mark.parametrize("lanes", ["per prompt", "capped", "rows"])
def test_shared_prompt_pass_equals_the_full_pass(tiny_dir, monkeypatch, lanes):
    """Every layout: the rows' padding dropped (each prompt's completions end to end in one lane; or several
    lanes per prompt, capped at 8 positions) and the row layout."""
    import rlft.speed.prompt_sharing as sharing

    # this batch's lanes are 36 of the row layout's 42 positions: over the default share, allowed here
    monkeypatch.setattr(sharing, "LANE_SHARE", 0 if lanes == "rows" else 1.0)
    if lanes == "capped":  # 5 lanes of 7 (3 for one prompt): its cache rows copied to its lanes
        monkeypatch.setattr(sharing, "LANE_POSITIONS", 8)
    used = _shared_equals_full(_policy(tiny_dir), monkeypatch)
    assert used == ([] if lanes == "rows" else [1])


def test_nothing_shared_or_not_applicable_falls_back(tiny_dir):
    from rlft.speed.prompt_sharing import applies, per_token_logps

    model = _policy(tiny_dir)
    ids, mask, keep = _batch()
    assert per_token_logps(model, ids[:2], mask[:2], keep) is None  # two different prompts: nothing to share
    assert not applies(model, ids[:, :8], 7)  # a one-token prompt block
    model.base_model.model.gradient_checkpointing_enable()
    assert not applies(model, ids, keep)


def test_lanes_only_where_their_mask_is_right_and_they_pay(tiny_dir, monkeypatch):
    """The lane layout (padding dropped) needs sdpa, full attention, tails that are ones then zeros, and
    enough padding dropped to pay for its wider attention."""
    import rlft.speed.prompt_sharing as sharing
    from rlft.speed.prompt_sharing import _inner, _lanes

    model = _policy(tiny_dir)
    ids, mask, keep = _batch()
    inner, tail = _inner(model), mask[:, -keep - 1:]
    inverse = torch.tensor([0, 1, 0, 1, 0, 1])
    assert _lanes(inner, tail, inverse, 2) is None  # 36 of 42 positions: over LANE_SHARE, the row layout
    monkeypatch.setattr(sharing, "LANE_SHARE", 1.0)
    lanes = _lanes(inner, tail, inverse, 2)
    assert lanes is not None and lanes.width == 18 and int(tail.sum()) == lanes.row.numel()
    holed = tail.clone()
    holed[2, 3] = 0  # a masked position inside a completion (not TRL's stop-token mask)
    assert _lanes(inner, holed, inverse, 2) is None
    inner.config._attn_implementation = "eager"  # eager adds a float mask: the boolean one would be wrong
    assert _lanes(inner, tail, inverse, 2) is None
    inner.config._attn_implementation = "sdpa"
    inner.config.sliding_window, inner.config.use_sliding_window = 4, True
    assert _lanes(inner, tail, inverse, 2) is None


@pytest.mark.parametrize("share", [None, 1.0])
def test_grpo_trainer_with_prompt_sharing_matches_trls_method(tiny_dir, tmp_path, monkeypatch, share):
    """The subclass's override returns what TRL's own method returns, through the trainer's own call (the row
    layout at the default LANE_SHARE for this batch, the lanes when allowed)."""
    import rlft.speed.prompt_sharing as sharing

    if share is not None:
        monkeypatch.setattr(sharing, "LANE_SHARE", share)

    shared = []
    real = sharing.per_token_logps
    monkeypatch.setattr(sharing, "per_token_logps", lambda *a, **k: shared.append(1) or real(*a, **k))
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlft.speed.prompt_sharing import with_prompt_sharing

    model = _policy(tiny_dir)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=6, num_generations=3,
                      max_completion_length=6, use_cpu=True, report_to=[], temperature=0.7,
                      bf16=False)  # fp32 as rlft on a CPU without fast bf16: the layouts agree to float rounding
    cls = with_prompt_sharing(GRPOTrainer)
    from transformers import AutoTokenizer

    trainer = cls(model=model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)], args=args,
                  train_dataset=Dataset.from_list([{"prompt": "a b"}] * 4),
                  processing_class=AutoTokenizer.from_pretrained(tiny_dir))
    ids, mask, keep = _batch()
    plain = GRPOTrainer._get_per_token_logps_and_entropies
    want, want_h, _ = plain(trainer, trainer.model, ids, mask, keep, batch_size=6, compute_entropy=True)
    got, got_h, aux = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep, batch_size=6,
                                                                 compute_entropy=True)
    scored = mask[:, -keep:].bool()
    assert shared == [1]  # the trainer's call went through the shared-prompt path
    assert aux is None and got.shape == want.shape
    assert torch.allclose(got[scored], want[scored], atol=1e-5, rtol=1e-4)
    assert torch.allclose(got_h[scored], want_h[scored], atol=1e-5, rtol=1e-4)


def _family_policy(model_type: str):
    """A random two-layer model of `model_type` with a LoRA adapter and TRL's fused head, as _policy's."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    shape = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, max_position_embeddings=256, pad_token_id=0, head_dim=16)
    if model_type == "mistral":
        shape["sliding_window"] = None  # Mistral v0.2 on (v0.1's 4096-token window: the row layout)
    if model_type == "opt":
        shape = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                     word_embed_proj_dim=64, max_position_embeddings=256, pad_token_id=0)
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, **shape)
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model.eval()  # no dropout (OPT's default is 0.1): the passes must be comparable


_LANE_TYPES = sorted(__import__("rlft.speed.prompt_sharing").speed.prompt_sharing.LANE_MODEL_TYPES)


@pytest.mark.parametrize("model_type", _LANE_TYPES)
def test_lanes_give_the_full_pass_in_every_family_they_take(model_type, monkeypatch):
    """Each model type the lanes are allowed for: log-probs, entropies and gradients of the full pass."""
    import rlft.speed.prompt_sharing as sharing

    monkeypatch.setattr(sharing, "LANE_SHARE", 1.0)  # this batch's 36 of 42 positions: lanes allowed
    assert _shared_equals_full(_family_policy(model_type), monkeypatch) == [1]


def test_opt_takes_positions_from_the_mask_and_keeps_the_row_layout(monkeypatch):
    """OPT counts positions over the mask's ones (left padding skipped); the lanes' column positions would shift
    them, so OPT keeps the row layout, which gives the full pass."""
    import rlft.speed.prompt_sharing as sharing

    monkeypatch.setattr(sharing, "LANE_SHARE", 1.0)  # only the family keeps this batch in rows
    model = _family_policy("opt")
    ids, mask, keep = _batch()
    inverse = torch.tensor([0, 1, 0, 1, 0, 1])
    assert sharing._lanes(sharing._inner(model), mask[:, -keep - 1:], inverse, 2) is None
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs[:, -keep:]
        got = sharing.per_token_logps(model, ids, mask, keep)[0]
    scored = mask[:, -keep:].bool()
    assert torch.allclose(got[scored], want[scored], atol=1e-5, rtol=1e-4)


def _sft_trainer(tiny_dir, tmp_path, rows):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from rlft.speed.prompt_sharing import with_head_sharing

    model = _policy(tiny_dir)
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=len(rows), use_cpu=True, report_to=[],
                     bf16=False, max_length=512)
    return with_head_sharing(SFTTrainer)(model=model, args=args, train_dataset=Dataset.from_list(rows),
                                         processing_class=AutoTokenizer.from_pretrained(tiny_dir))


def test_sft_with_a_common_head_once_matches_trls_loss_and_gradients(tiny_dir, tmp_path, monkeypatch):
    """Rows that open with one long system message (a DSPy fine-tune's): the loss with the head run once equals
    TRL's compute_loss on the same batch, and so do the adapter's gradients; TRL's metrics are logged as well."""
    from trl import SFTTrainer

    import rlft.speed.prompt_sharing as sharing

    head = "Your input fields are: ticket. Your output field is: label, one of billing, bug, account. " * 3
    rows = [{"prompt": head + f"ticket {t}", "completion": f" label {c}"}
            for t, c in [("charged twice", "billing"), ("app crashes when I open it", "bug"), ("login", "account")]]
    trainer = _sft_trainer(tiny_dir, tmp_path, rows)
    batch = next(iter(trainer.get_train_dataloader()))
    model = trainer.model
    model.train()
    assert sharing.shared_head(model, dict(batch)) >= sharing.MIN_HEAD
    calls = []
    real = sharing._HeadOnce.__call__
    monkeypatch.setattr(sharing._HeadOnce, "__call__", lambda self, **kw: calls.append(1) or real(self, **kw))

    def run(fn):
        model.zero_grad()
        loss = fn(trainer, model, dict(batch))
        loss.backward()
        return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want = run(SFTTrainer.compute_loss)
    assert not calls
    got = run(type(trainer).compute_loss)
    assert calls  # the loss went through the head-once pass
    assert got[0] == pytest.approx(want[0], rel=1e-5) and want[0] > 0
    assert got[1].keys() == want[1].keys() and any("lora_A" in n for n in want[1])
    for name, grad in want[1].items():
        assert torch.allclose(got[1][name], grad, atol=1e-6, rtol=1e-3), name
    assert trainer._metrics["train"]["mean_token_accuracy"]  # TRL's metrics still read the outputs


def test_sft_without_a_long_common_head_is_trls_path(tiny_dir, tmp_path):
    """Rows sharing under MIN_HEAD tokens, or a head that reaches a scored label, take TRL's own pass."""
    import rlft.speed.prompt_sharing as sharing

    rows = [{"prompt": f"ticket {t}", "completion": " label"} for t in ("one", "two words")]
    trainer = _sft_trainer(tiny_dir, tmp_path, rows)
    assert sharing.shared_head(trainer.model, dict(next(iter(trainer.get_train_dataloader())))) == 0
    same = "the same long prompt for every row, and then some more words to pass the minimum head length " * 2
    rows = [{"prompt": same, "completion": f" label {c}"} for c in ("billing", "bug")]
    trainer = _sft_trainer(tiny_dir, tmp_path, rows)
    batch = dict(next(iter(trainer.get_train_dataloader())))
    first_scored = int((batch["labels"] != -100).any(0).nonzero()[0])
    assert sharing.shared_head(trainer.model, batch) == first_scored - 1
