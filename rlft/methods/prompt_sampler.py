"""GRPO/RLOO trainers that keep per-prompt pass records while training, and may draw prompts from the band.

`with_band(trainer_cls, sampler)` returns a small subclass of TRL's GRPOTrainer or RLOOTrainer that uses three
of its extension points:
  _calculate_rewards   after TRL's own (whose rewards are gathered over processes), the weighted sum of the
                       reward functions per completion and the gathered prompt indices go into the run's
                       rlft.methods.prompt_band.PromptBand (training batches only);
  _get_train_sampler   `sampler: band`: rlft.methods.prompt_band.BandSampler, TRL's RepeatSampler shape with each
                       chunk drawn from the learnable band; `plain`: TRL's own sampler, unchanged;
  log                  each training log carries the band counts (band/in, band/unseen, band/retired,
                       band/failed, band/left; band/on: 1 under the band sampler), the mean pass rate of the
                       prompts sampled so far (band/pass_rate) and the share of the groups scored since the
                       last log whose prompt was in the band (band/scored_in_band); the zero_signal alarm
                       (rlft.alarms) names band/left.
The records are kept under both samplers, so a plain run's metrics say how many prompts left the band too.
Each row of the training dataset carries its index in the column INDEX (added by `indexed`); it is taken
out of the rows before the reward functions see them. On --resume the record starts empty (all unseen).
"""

from __future__ import annotations

import math

from rlft.methods.prompt_band import BandSampler, PromptBand

INDEX = "rlft_prompt_index"


def indexed(dataset):
    """The training dataset with each row's position in INDEX (the key of its pass record)."""
    return dataset.add_column(INDEX, list(range(len(dataset))))


def with_band(trainer_cls, sampler: str):
    """A subclass of `trainer_cls` (TRL's GRPOTrainer or RLOOTrainer) that records per-prompt pass rates and,
    with sampler == "band", draws the next prompts from the learnable band."""

    class BandTrainer(trainer_cls):
        prompt_sampler = sampler

        def _band(self) -> PromptBand:
            if getattr(self, "prompt_band", None) is None:
                self.prompt_band = PromptBand(len(self.train_dataset))
                self.band_scored = [0, 0]  # groups scored since the last log: in the band before, all
            return self.prompt_band

        def _get_train_sampler(self, dataset=None):
            if self.prompt_sampler != "band":
                return super()._get_train_sampler(dataset)
            band = self._band()
            return BandSampler(band, mini_repeat_count=self.num_generations,
                               batch_size=self.args.generation_batch_size // self.num_generations,
                               repeat_count=self.num_iterations * self.args.steps_per_generation,
                               seed=self.args.seed)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            local = [row.pop(INDEX, -1) for row in inputs]  # the reward functions never see the index
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            if self.model.training:
                from accelerate.utils import gather_object

                indices = gather_object(local) if self.accelerator.num_processes > 1 else local
                weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
                summed = (rewards_per_func * weights).nansum(dim=1)
                unscorable = rewards_per_func.isnan().all(dim=1)
                rewards = [math.nan if u else float(r) for r, u in zip(summed.tolist(), unscorable.tolist())]
                band = self._band()
                states = band.states()
                seen = {int(i) for i in indices if 0 <= int(i) < len(states)}
                self.band_scored[0] += sum(1 for i in seen if states[i] in ("unseen", "band"))
                self.band_scored[1] += len(seen)
                band.record(indices, rewards)
            return rewards_per_func

        def log(self, logs, start_time=None):
            if self.model.training and self._metrics["train"].get("reward"):
                band = self._band()
                logs.update({f"band/{k}": v for k, v in band.counts().items()})
                logs["band/on"] = int(self.prompt_sampler == "band")
                rates = [r.pass_rate for r in band.records if r.pass_rate is not None]
                if rates:
                    logs["band/pass_rate"] = round(sum(rates) / len(rates), 4)
                if self.band_scored[1]:
                    logs["band/scored_in_band"] = round(self.band_scored[0] / self.band_scored[1], 4)
                self.band_scored = [0, 0]
            return super().log(logs, start_time)

    BandTrainer.__name__ = BandTrainer.__qualname__ = f"Band{trainer_cls.__name__}"
    return BandTrainer
