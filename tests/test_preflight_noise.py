"""The pre-flight's verdict accounts for its own noise: refuse only when the mixed share is clearly below the
threshold, sample more prompts when it is within noise, and name the run's own section."""

from __future__ import annotations

import pytest

from rlft import preflight
from rlft.preflight import probe, verdict_for, wilson


def fake_sampler(mixed_of_prompt):
    """Stand-in for the generation: prompt i's group is mixed when mixed_of_prompt(i); half the samples pass."""
    calls = []

    def sample(net, tok, rows, reward_fn, g, max_new_tokens, temperature, batch_size):
        calls.append(len(rows))
        mixed = [mixed_of_prompt(r["i"]) for r in rows]
        return mixed, len(rows) * g // 2, len(rows) * g, 0, len(rows) * g
    return sample, calls


ROWS = [{"prompt": f"{i}+1=", "answer": str(i + 1), "i": i} for i in range(400)]


def test_wilson_interval_matches_the_formula():
    lo, hi = wilson(3, 32)
    assert (round(lo, 3), round(hi, 3)) == (0.038, 0.213)
    assert wilson(0, 32)[0] == 0.0 and wilson(0, 32)[1] < 0.1  # 0 of 32 is clearly below 0.1
    assert wilson(32, 32)[1] == 1.0


def test_three_mixed_groups_of_32_is_not_a_refusal():
    # the demo's RLOO stage on an Intel machine: 3 of 32 (0.09) against 0.10 used to refuse
    got, _ = verdict_for(0.38, 3 / 32, 0.0, 0.1, 4, "rloo", interval=wilson(3, 32))
    assert got == "go"
    got, advice = verdict_for(0.38, 0 / 64, 0.0, 0.1, 4, "rloo", interval=wilson(0, 64))
    assert got == "refuse" and any("rloo.num_generations=8" in a for a in advice)
    assert not any("grpo." in a for a in advice)


def test_probe_samples_more_prompts_when_within_noise(monkeypatch):
    sample, calls = fake_sampler(lambda i: i % 10 == 0)  # one prompt in ten mixed: right at the threshold
    monkeypatch.setattr(preflight, "_sample", sample)
    r = probe(None, None, ROWS, None, num_generations=4, max_prompts=32, min_mixed=0.1, max_prompts_cap=128)
    assert calls == [32, 32, 64]  # doubled twice, up to the cap
    assert r.prompts == 128 and r.verdict == "go" and r.within_noise
    assert r.mixed_interval[0] < 0.1 <= r.mixed_interval[1]
    assert r.as_dict()["mixed_interval"] == [round(x, 4) for x in r.mixed_interval]


@pytest.mark.parametrize("rule, verdict, prompts", [
    (lambda i: False, "refuse", 32),           # never mixed: clearly below after the first 32
    (lambda i: i % 2 == 0, "go", 32),          # half mixed: clearly above after the first 32
    (lambda i: i % 25 == 0, "refuse", 128),    # 4%: within noise at 32 and 64, clearly below at 128
])
def test_probe_stops_as_soon_as_the_verdict_is_clear(monkeypatch, rule, verdict, prompts):
    sample, _ = fake_sampler(rule)
    monkeypatch.setattr(preflight, "_sample", sample)
    r = probe(None, None, ROWS, None, num_generations=4, max_prompts=32, min_mixed=0.1, max_prompts_cap=256)
    assert (r.verdict, r.prompts, r.within_noise) == (verdict, prompts, False)


def test_choose_does_not_send_a_within_noise_share_back_to_sft():
    from rlft.choose.rules import Signal, recommend

    measured = dict(kind="verifier", rows=2000, has_sft_model=True, verifier="math", pass_rate=0.38)
    noisy = recommend(Signal(**measured, mixed_fraction=3 / 32, mixed_interval=wilson(3, 32), preflight_prompts=32))
    clear = recommend(Signal(**measured, mixed_fraction=0.0, mixed_interval=wilson(0, 64), preflight_prompts=64))
    assert noisy.method in ("grpo", "rloo", "bootstrap"), noisy.as_dict()
    text = str(noisy.as_dict())
    assert "zero_signal_within_noise" in text and "90% interval 4%-21% over 32 prompts" in text
    assert clear.method == "sft" and "'zero_signal'" in str(clear.as_dict())
