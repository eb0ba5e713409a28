"""rlft.methods.zero_advantage: skipping zero-advantage rows gives TRL's update, with fewer rows through the model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

PROMPTS = [f"{i} + {i} =" for i in range(8)]


def _reward(prompts, completions, **_):
    """Half the prompts score every completion alike (a zero-advantage group), the rest vary with the text."""
    return [1.0 if int(p.split()[0]) % 2 else float(len(c) % 5) for p, c in zip(prompts, completions)]


def _run(cls, tiny_dir, out, monkeypatch, trl_cls, config_cls, all_equal=False, **kw):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = []  # rows of each gradient pass through TRL's own log-prob method
    real = trl_cls._get_per_token_logps_and_entropies

    def counted(self, model, input_ids, *a, **k):
        if torch.is_grad_enabled():
            rows.append(input_ids.size(0))
        return real(self, model, input_ids, *a, **k)

    monkeypatch.setattr(trl_cls, "_get_per_token_logps_and_entropies", counted)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    args = config_cls(output_dir=str(out), per_device_train_batch_size=4, num_generations=2, max_completion_length=8,
                      max_steps=3, learning_rate=1e-2, use_cpu=True, report_to=[], save_strategy="no", seed=3,
                      logging_steps=1, disable_tqdm=True, **kw)
    reward = (lambda completions, **_: [1.0] * len(completions)) if all_equal else _reward
    trainer = cls(model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(
                      [{"prompt": p} for p in PROMPTS]), processing_class=AutoTokenizer.from_pretrained(tiny_dir),
                  peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    trainer.train()
    monkeypatch.setattr(trl_cls, "_get_per_token_logps_and_entropies", real)
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    return weights, rows, trainer


def _same_update(want, got):
    assert want.keys() == got.keys() and any(not torch.allclose(p, torch.zeros_like(p)) for n, p in want.items()
                                             if "lora_B" in n)  # the steps moved the adapter
    # The two runs put different batch shapes through the model, so fp32 sums in another order; AdamW then
    # turns a near-zero gradient's rounding into a visible step (lr 1e-2): on an AMX Xeon single weights differ by
    # up to 2e-3 and whole tensors by 0.2% of their norm (1e-7 on a Zen 3/4). Each tensor is held to 1% of its norm.
    for name, p in want.items():
        assert float((got[name] - p).norm()) <= 1e-2 * float(p.norm()), name


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo", "dr_grpo"])
def test_grpo_skips_zero_advantage_rows_and_gives_trls_update(tiny_dir, tmp_path, monkeypatch, loss_type):
    from trl import GRPOConfig, GRPOTrainer

    from rlft.methods.zero_advantage import with_zero_advantage_skip

    kw = dict(loss_type=loss_type, beta=0.0)
    want, trl_rows, _ = _run(GRPOTrainer, tiny_dir, tmp_path / "trl", monkeypatch, GRPOTrainer, GRPOConfig, **kw)
    got, rows, trainer = _run(with_zero_advantage_skip(GRPOTrainer), tiny_dir, tmp_path / "rlft", monkeypatch,
                              GRPOTrainer, GRPOConfig, **kw)
    _same_update(want, got)
    assert trl_rows == [4, 4, 4] and sum(rows) < sum(trl_rows)  # one of the two groups had nothing to learn
    assert any("skipped_rows" in r and r["skipped_rows"] > 0 for r in trainer.state.log_history)


def test_a_step_with_no_signal_still_steps_the_optimizer(tiny_dir, tmp_path, monkeypatch):
    """Every reward equal: no row through the model, and the adapter moves as TRL's does with zero gradients
    (AdamW's weight decay)."""
    from trl import GRPOConfig, GRPOTrainer

    from rlft.methods.zero_advantage import with_zero_advantage_skip

    kw = dict(beta=0.0, weight_decay=0.5)
    want, _, _ = _run(GRPOTrainer, tiny_dir, tmp_path / "trl", monkeypatch, GRPOTrainer, GRPOConfig,
                      all_equal=True, **kw)
    got, rows, _ = _run(with_zero_advantage_skip(GRPOTrainer), tiny_dir, tmp_path / "rlft", monkeypatch,
                        GRPOTrainer, GRPOConfig, all_equal=True, **kw)
    assert rows == []
    for name, p in want.items():
        assert torch.allclose(got[name], p, atol=1e-7), name


def test_a_kl_term_keeps_every_row(tiny_dir, tmp_path, monkeypatch):
    """With beta > 0 every row's KL term has a gradient: nothing is skipped."""
    from trl import GRPOConfig, GRPOTrainer

    from rlft.methods.zero_advantage import with_zero_advantage_skip

    _, rows, _ = _run(with_zero_advantage_skip(GRPOTrainer), tiny_dir, tmp_path / "kl", monkeypatch, GRPOTrainer,
                      GRPOConfig, beta=0.05)
    assert rows == [4, 4, 4]


def test_rloo_skips_zero_advantage_rows_and_gives_trls_update(tiny_dir, tmp_path, monkeypatch):
    """RLOO as rlft builds it: the skip outside rlft's own old-log-probabilities hook."""
    from trl import RLOOConfig, RLOOTrainer

    from rlft.methods.rloo import with_current_old_logps
    from rlft.methods.zero_advantage import with_zero_advantage_skip

    want, trl_rows, _ = _run(RLOOTrainer, tiny_dir, tmp_path / "trl", monkeypatch, RLOOTrainer, RLOOConfig, beta=0.0)
    cls = with_zero_advantage_skip(with_current_old_logps(RLOOTrainer))
    got, rows, _ = _run(cls, tiny_dir, tmp_path / "rlft", monkeypatch, RLOOTrainer, RLOOConfig, beta=0.0)
    _same_update(want, got)
    assert sum(rows) < sum(trl_rows)
