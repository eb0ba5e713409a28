"""The learnable band of GRPO/RLOO prompts (rlft/methods/prompt_band.py, rlft/methods/prompt_sampler.py): per-prompt
records, the sampler's shape and draws, the zero_signal alarm's band count, and one short run's metrics."""

from __future__ import annotations

import json
import random
from collections import Counter

from helpers import ROOT

from rlft import alarms
from rlft.methods.prompt_band import FAILED_WEIGHT, BandSampler, PromptBand, weighted_draw

G = 4


def group(band: PromptBand, index: int, rewards: list[float]) -> None:
    band.record([index] * len(rewards), rewards)


def test_states_follow_each_prompts_groups():
    band = PromptBand(5)
    assert band.counts() == {"unseen": 5, "band": 0, "retired": 0, "failed": 0, "in": 5, "left": 0}
    group(band, 0, [1, 0, 1, 0])  # mixed: stays in the band
    group(band, 1, [0, 0, 0, 0])  # all-fail: put back for later
    group(band, 2, [1, 1, 1, 1])  # all-pass once: still in the band (could be luck)
    states = band.states()
    assert states[:4] == ["band", "failed", "band", "unseen"]
    group(band, 2, [1, 1, 1, 1])  # all-pass twice in a row: retired
    group(band, 1, [1, 0, 0, 0])  # the failed one, retried, is mixed now: back in the band
    assert band.states() == ["band", "band", "retired", "unseen", "unseen"]
    assert band.counts() == {"unseen": 2, "band": 2, "retired": 1, "failed": 0, "in": 4, "left": 1}
    assert band.records[0].pass_rate == 0.5 and band.records[2].pass_rate == 1.0
    assert band.records[1].attempts == 2 and band.records[1].pass_rate == 1 / 8


def test_a_mixed_group_breaks_the_pass_streak():
    band = PromptBand(2)
    group(band, 1, [0, 1, 0, 0])
    group(band, 0, [1, 1, 1, 1])
    group(band, 0, [1, 0, 1, 1])
    group(band, 0, [1, 1, 1, 1])
    assert band.states()[0] == "band"  # pass, mixed, pass: never two all-pass in a row


def test_all_equal_groups_are_neither_pass_nor_fail_until_two_rewards_are_seen():
    band = PromptBand(3)
    group(band, 0, [0, 0, 0, 0])  # the run has seen only 0: no telling fail from pass
    assert band.records[0].last == "flat" and band.states()[0] == "band"
    group(band, 1, [0.5, 1.0, 0.5, 0.5])
    group(band, 2, [0.5, 0.5, 0.5, 0.5])  # partial credit, below the best seen: failed, not solved
    assert band.states()[2] == "failed" and band.records[2].passes == 0
    band.record([0, 0, 0, 0], [float("nan")] * 4)  # unscorable completions are not a group
    assert band.records[0].attempts == 1


def test_sampler_has_trls_repeat_sampler_shape_and_length():
    from trl.trainer.utils import RepeatSampler

    data = list(range(23))
    band = PromptBand(len(data))
    sampler = BandSampler(band, mini_repeat_count=G, batch_size=3, repeat_count=2, seed=0)
    trl = RepeatSampler(data, mini_repeat_count=G, batch_size=3, repeat_count=2, seed=0)
    out = list(sampler)
    assert len(out) == len(sampler) == len(trl) == len(list(trl))
    blocks = [out[i:i + 3 * G] for i in range(0, len(out), 3 * G)]  # one chunk, G copies of each prompt
    for first, second in zip(blocks[::2], blocks[1::2]):
        assert first == second  # the chunk repeated repeat_count times
        prompts = first[::G]
        assert len(set(prompts)) == 3 and first == [p for p in prompts for _ in range(G)]
    assert len({i for b in blocks for i in b}) >= 12  # unseen prompts all weigh alike: the draws spread


def test_next_chunks_read_the_records_made_since_the_last():
    band = PromptBand(200)
    sampler = iter(BandSampler(band, mini_repeat_count=G, batch_size=8, seed=3))
    first = {next(sampler) for _ in range(8 * G)}
    # all but 40 prompts leave the band, half solved twice, half failed: 40 x 1 against 80 x 0.05 + 80 x 0.25
    kept = set([i for i in range(200) if i not in first][:40])
    for i in (i for i in range(200) if i not in kept):
        for _ in range(2 if i % 2 else 1):
            group(band, i, [1, 1, 1, 1] if i % 2 else [0, 0, 0, 0])
    rest = list(sampler)[::G]
    assert len(rest) == 24 * 8
    share = sum(i in kept for i in rest) / len(rest)
    assert 0.5 < share < 0.75  # 40 / 64 = 0.625 by weight; a uniform draw: 0.2


def test_draws_favour_the_band_and_never_starve():
    rng = random.Random(0)
    weights = [1.0] * 10 + [FAILED_WEIGHT] * 40  # 10 in the band weigh 10 against 40 x 0.25 = 10
    drawn = Counter(i < 10 for _ in range(2000) for i in weighted_draw(weights, 1, rng))
    assert 0.45 < drawn[True] / 2000 < 0.55
    assert len(weighted_draw(weights, 30, rng)) == 30  # more than the band holds: the rest come from outside it
    chunk = weighted_draw([0.05] * 8, 8, rng, avoid={0, 1})  # all retired, previous chunk avoided only if need be
    assert sorted(chunk) == list(range(8))


def test_same_seed_same_records_same_chunks():
    def chunks(seed):
        band = PromptBand(30)
        group(band, 3, [1, 1, 1, 1])
        group(band, 3, [1, 1, 1, 1])
        group(band, 4, [0, 0, 0, 1])
        return list(BandSampler(band, mini_repeat_count=2, batch_size=5, seed=seed))

    assert chunks(7) == chunks(7) and chunks(7) != chunks(8)


def test_zero_signal_alarm_names_the_prompts_that_left_the_band():
    th = alarms.Thresholds()
    history = [{"step": s, "reward": 0.9, "frac_reward_zero_std": 0.9, "band/in": 150, "band/left": 1750,
                "band/retired": 1700, "band/failed": 50, "band/on": 0} for s in (10, 20, 30)]
    alarm = alarms.zero_signal(history, th)
    assert "1750 of 1900 prompts left the learnable band (1700 solved" in alarm.message
    assert "prompt_sampler: band" in alarm.fix and alarm.evidence["band_left"] == 1750
    for r in history:
        r["band/on"], r["band/in"], r["band/left"] = 1, 50, 1850
    assert "add prompts at the edge" in alarms.zero_signal(history, th).fix
    plain = [{"step": s, "reward": 0.9, "frac_reward_zero_std": 0.9} for s in (10, 20, 30)]
    assert "band" not in alarms.zero_signal(plain, th).message  # runs logged before the records: as before


CHECKER = '''
def exact(completions, answer, **kwargs):
    assert "rlft_prompt_index" not in kwargs, "the sampler's index reached the reward function"
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]
'''


def test_a_short_run_logs_the_band_counts(cli, tmp_path, sft_short):
    """40 prompts x 20 steps of 8: four draws per prompt, enough for prompts to leave the band; a plugin
    verifier that fails the run if the sampler's index column reaches it."""
    checker = tmp_path / "checker.py"
    checker.write_text(CHECKER)
    out = tmp_path / "grpo-band"
    r = cli("grpo", "--recipe", ROOT / "recipes/grpo_math_tiny.yaml", "--model", sft_short, "-o", out,
            "--verifier", f"{checker}:exact", "--max-steps", "20",
            "--no-preflight", "--set", "train.logging_steps=5", "--set", "data.max_rows=40",
            "--set", "grpo.prompt_sampler=band", "--set", "watch.auto_holdout=false")
    assert r.code == 0, r.text
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [m for m in logged if "reward" in m]
    assert [m["step"] for m in logged] == [5, 10, 15, 20]
    for m in logged:
        assert m["band/in"] + m["band/left"] == 40 and m["band/on"] == 1
        assert m["band/left"] == m["band/retired"] + m["band/failed"]
    assert logged[0]["band/unseen"] > logged[-1]["band/unseen"]
    assert logged[-1]["band/left"] > 0  # some prompts were solved twice or failed in every sample
