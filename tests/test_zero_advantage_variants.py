"""rlft.methods.zero_advantage against TRL's own trainers over more of GRPOConfig/RLOOConfig (a hostile review's
cases; ~3 minutes, so `make test-slow`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

import tests.test_zero_advantage as base  # noqa: E402
from tests.test_zero_advantage import _run, _same_update  # noqa: E402


def _varied_reward(prompts, completions, **_):
    """Odd prompts: every completion alike (zero advantage); even prompts: varies with the text."""
    return [1.0 if int(p.split()[0]) % 2 else float(sum(map(ord, c)) % 7) for p, c in zip(prompts, completions)]


@pytest.fixture(autouse=True)
def varied(monkeypatch):
    monkeypatch.setattr(base, "_reward", _varied_reward)


GRPO_CASES = {
    "sapo": dict(loss_type="sapo"),
    "luspo": dict(loss_type="luspo", importance_sampling_level="sequence"),
    "cispo": dict(loss_type="cispo"),
    "grpo_ga2": dict(loss_type="grpo", gradient_accumulation_steps=2),
    "dapo_spg2": dict(loss_type="dapo", steps_per_generation=2),
    "bnpo_iter2": dict(loss_type="bnpo", num_iterations=2),
    "grpo_seq": dict(loss_type="grpo", importance_sampling_level="sequence"),
    "dr_grpo_batch_scale": dict(loss_type="dr_grpo", scale_rewards="batch"),
    "grpo_noscale": dict(loss_type="grpo", scale_rewards="none"),
    "dapo_delta": dict(loss_type="dapo", delta=1.5, epsilon_high=0.28),
}


@pytest.mark.parametrize("case", list(GRPO_CASES))
def test_grpo_config_variants_give_trls_update(tiny_dir, tmp_path, monkeypatch, case):
    from trl import GRPOConfig, GRPOTrainer

    from rlft.methods.zero_advantage import with_zero_advantage_skip

    kw = dict(beta=0.0, **GRPO_CASES[case])
    want, trl_rows, _ = _run(GRPOTrainer, tiny_dir, tmp_path / "trl", monkeypatch, GRPOTrainer, GRPOConfig, **kw)
    got, rows, _ = _run(with_zero_advantage_skip(GRPOTrainer), tiny_dir, tmp_path / "rlft", monkeypatch,
                        GRPOTrainer, GRPOConfig, **kw)
    _same_update(want, got)
    assert sum(rows) < sum(trl_rows)


@pytest.mark.parametrize("kw", [dict(beta=0.0, normalize_advantages=True), dict(beta=0.05),
                                dict(beta=0.0, gradient_accumulation_steps=2, num_iterations=2)])
def test_rloo_config_variants_give_trls_update(tiny_dir, tmp_path, monkeypatch, kw):
    from trl import RLOOConfig, RLOOTrainer

    from rlft.methods.rloo import with_current_old_logps
    from rlft.methods.zero_advantage import with_zero_advantage_skip

    want, _, _ = _run(with_current_old_logps(RLOOTrainer), tiny_dir, tmp_path / "trl", monkeypatch, RLOOTrainer,
                      RLOOConfig, **kw)
    got, _, _ = _run(with_zero_advantage_skip(with_current_old_logps(RLOOTrainer)), tiny_dir, tmp_path / "rlft",
                     monkeypatch, RLOOTrainer, RLOOConfig, **kw)
    _same_update(want, got)
