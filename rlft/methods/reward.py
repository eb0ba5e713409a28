"""Reward model training with TRL's RewardTrainer (Bradley-Terry loss on preference pairs).

The model is the start checkpoint with a one-output score head (AutoModelForSequenceClassification,
num_labels=1). After training, held-out pair accuracy (chosen scored above rejected) is measured through
`rlft.reward_scoring.score`, the same function PPO and GRPO use to score completions, so the number
reported is the accuracy those consumers get.
"""

from __future__ import annotations

from pathlib import Path

from rlft.config import RunConfig
from rlft.methods.common import RunResult, build_trl_config, clamp_max_length, train_with

KIND = "preference"
COLUMNS = ("prompt", "chosen", "rejected")


def build(cfg: RunConfig, out: Path, train_rows, eval_rows):
    from trl import RewardConfig, RewardTrainer

    from rlft.data import to_dataset
    from rlft.models import load_model, load_tokenizer

    tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    model = load_model(cfg.model, head="score")
    args = build_trl_config(cfg, RewardConfig, out, bool(eval_rows),
                            max_length=clamp_max_length(cfg.reward.max_length, model))
    return RewardTrainer(model=model, args=args, processing_class=tok,
                         train_dataset=to_dataset(train_rows, COLUMNS),
                         eval_dataset=to_dataset(eval_rows, COLUMNS) if eval_rows else None)


def run(cfg: RunConfig, console=None, **kwargs) -> RunResult:
    from rlft.run import process_console

    console = process_console(console)
    state: dict = {}

    def _prepare(cfg, train_rows, eval_rows):
        state["train_rows"] = train_rows[:200]
        state["eval_rows"] = eval_rows

    def _after(trainer, out):
        from rlft.reward_scoring import pair_accuracy

        out_metrics = {}
        for key, rows in (("train_pair_accuracy", state["train_rows"]), ("heldout_pair_accuracy", state["eval_rows"])):
            if rows:
                out_metrics[key] = pair_accuracy(trainer.model, trainer.processing_class, [r.data for r in rows])
                if console is not None:
                    console.print(f"{key.replace('_', ' ')}: [bold]{out_metrics[key]:.3f}[/] on {len(rows)} pairs")
        return out_metrics

    return train_with(cfg, KIND, build, prepare=_prepare, after=_after, console=console, **kwargs)
