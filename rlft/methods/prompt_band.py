"""The learnable band of GRPO/RLOO prompts: per-prompt pass records and the sampler that draws from them; pure.

A group whose G rewards are all equal has zero advantage under GRPO's and RLOO's baselines: a prompt the
model always solves, or never does, costs G rollouts and teaches nothing. `PromptBand` keeps, per prompt
index, the groups sampled (`attempts`), the completions scored and those that passed, and the outcome of
the latest groups, from the rewards of every training step (rlft.methods.prompt_sampler records them). A
prompt is in one of four states:

  unseen    never sampled: counts as in the band (the set is never starved of new prompts);
  band      its latest group was mixed, or all-pass only once: it still teaches;
  retired   its last RETIRE_AFTER groups were all-pass: solved, rarely revisited (weight RETIRED_WEIGHT);
  failed    its latest group was all-fail: put back for later with lower priority (weight FAILED_WEIGHT),
            since the policy improves and may solve it then.

Pass and fail of an all-equal group: its reward is compared with the highest and lowest rewards the run has
seen so far (the weighted sum of the reward functions, as TRL sums them). At the highest it is all-pass; below
it, all-fail (for partial-credit rewards, a group stuck at a middle value has not solved the prompt). Until
the run has seen two different rewards nothing tells the two apart, and the group counts as neither (`flat`).
A completion passes when its reward reaches the highest seen: with a 0/1 verifier, reward 1.

`BandSampler` replaces TRL's RepeatSampler (trl.trainer.utils) with the same shape: chunks of `batch_size`
distinct prompt indices, each index repeated `mini_repeat_count` (G) times in a row and each chunk
`repeat_count` times (TRL's steps_per_generation x num_iterations), `len(data) // batch_size` chunks per pass.
Each chunk is chosen when the trainer's dataloader asks for it (lazily, so from the rewards recorded so
far: with a dataloader that fetches one batch ahead, the record lags by one generation batch): a weighted
draw without replacement (Efraimidis-Spirakis keys u^(1/w)), weight 1 in the band, FAILED_WEIGHT and
RETIRED_WEIGHT outside it, skipping the previous chunk's prompts while enough others remain. Same seed, same
rewards -> same chunks, so every process of a multi-process run draws alike when each records the gathered
rewards of all.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

RETIRE_AFTER = 2  # all-pass groups in a row that retire a prompt (one can be luck: p = 0.9 gives 8/8 43% of the time)
# Draw weights relative to a band prompt. With 1900 prompts of which 500 retired and 400 failed, the band's
# 1000 weigh 1000 against 100 + 25: 89% of a chunk comes from the band; with only 100 left in it, 40%.
FAILED_WEIGHT = 0.25
RETIRED_WEIGHT = 0.05
EPS = 1e-6  # rewards closer than this are equal (TRL's torch.isclose on the group std, in spirit)
STATES = ("unseen", "band", "retired", "failed")


@dataclass
class PromptRecord:
    """One prompt's history: groups sampled, completions scored and passed, the latest outcome, the run of
    all-pass groups ending at the latest one."""

    attempts: int = 0
    samples: int = 0
    passes: int = 0
    last: str = ""  # "mixed", "pass", "fail" or "flat" (all equal, before the run has seen two rewards)
    pass_streak: int = 0

    @property
    def pass_rate(self) -> float | None:
        return self.passes / self.samples if self.samples else None

    @property
    def state(self) -> str:
        if self.attempts == 0:
            return "unseen"
        if self.pass_streak >= RETIRE_AFTER:
            return "retired"
        if self.last == "fail":
            return "failed"
        return "band"


class PromptBand:
    """Per-prompt pass records for `n` prompts (indices 0..n-1), updated from each step's groups."""

    def __init__(self, n: int) -> None:
        self.records = [PromptRecord() for _ in range(n)]
        self.top = -math.inf  # highest and lowest reward seen so far
        self.bottom = math.inf
        self.groups = 0

    def __len__(self) -> int:
        return len(self.records)

    def record(self, indices: Sequence[int], rewards: Sequence[float]) -> None:
        """One generation batch: the prompt index and the (summed) reward of each completion. Completions of
        the same index form its group; NaN rewards (unscorable) are left out; out-of-range indices ignored."""
        groups: dict[int, list[float]] = {}
        for i, r in zip(indices, rewards):
            if r is None or not math.isfinite(float(r)) or not 0 <= int(i) < len(self.records):
                continue
            groups.setdefault(int(i), []).append(float(r))
        for rs in groups.values():
            self.top, self.bottom = max(self.top, *rs), min(self.bottom, *rs)
        for i, rs in groups.items():
            self._update(self.records[i], rs)
        self.groups += len(groups)

    def _update(self, rec: PromptRecord, rs: list[float]) -> None:
        known = self.top - self.bottom > EPS
        rec.attempts += 1
        rec.samples += len(rs)
        rec.passes += sum(1 for r in rs if known and r >= self.top - EPS)
        if max(rs) - min(rs) > EPS:
            rec.last = "mixed"
        elif not known:
            rec.last = "flat"
        else:
            rec.last = "pass" if rs[0] >= self.top - EPS else "fail"
        rec.pass_streak = rec.pass_streak + 1 if rec.last == "pass" else 0

    def states(self) -> list[str]:
        return [r.state for r in self.records]

    def counts(self) -> dict[str, int]:
        """Prompts per state; `in` = band + unseen, `left` = retired + failed (the prompts that left the band)."""
        c = dict.fromkeys(STATES, 0)
        for s in self.states():
            c[s] += 1
        return {**c, "in": c["band"] + c["unseen"], "left": c["retired"] + c["failed"]}

    def weights(self) -> list[float]:
        w = {"unseen": 1.0, "band": 1.0, "failed": FAILED_WEIGHT, "retired": RETIRED_WEIGHT}
        return [w[s] for s in self.states()]


def weighted_draw(weights: Sequence[float], k: int, rng: random.Random, avoid: set[int] = frozenset()) -> list[int]:
    """k distinct indices, drawn without replacement with probability proportional to weight (Efraimidis-
    Spirakis: the k largest keys u^(1/w)); indices in `avoid` only when fewer than k others have weight."""
    pool = [i for i, w in enumerate(weights) if w > 0 and i not in avoid]
    if len(pool) < k:
        pool += [i for i in avoid if 0 <= i < len(weights) and weights[i] > 0]
    keys = ((rng.random() ** (1.0 / weights[i]), i) for i in pool)
    return [i for _, i in heapq.nlargest(k, keys)]


class BandSampler:
    """TRL's RepeatSampler shape (see the module doc) with each chunk drawn from the learnable band."""

    def __init__(self, band: PromptBand, mini_repeat_count: int, batch_size: int = 1, repeat_count: int = 1,
                 seed: int | None = None) -> None:
        self.band = band
        self.mini_repeat_count = mini_repeat_count
        self.batch_size = batch_size
        self.repeat_count = repeat_count
        self.rng = random.Random(seed)
        self.drawn: dict[str, int] = dict.fromkeys(STATES, 0)  # prompts drawn per state, over the run

    def __len__(self) -> int:
        return (len(self.band) // self.batch_size) * self.batch_size * self.mini_repeat_count * self.repeat_count

    def __iter__(self) -> Iterator[int]:
        previous: set[int] = set()
        for _ in range(len(self.band) // self.batch_size):
            states = self.band.states()
            chunk = weighted_draw(self.band.weights(), self.batch_size, self.rng, avoid=previous)
            for i in chunk:
                self.drawn[states[i]] += 1
            previous = set(chunk)
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index
