"""Direct Preference Optimization with TRL's DPOTrainer (beta 0.1, sigmoid loss: the paper's defaults).

The reference is the starting policy, passed explicitly: a second frozen copy loaded from the same
weights, or, under LoRA, the policy itself with its adapter disabled (one base model in memory; TRL's own
"ref" copy of a fresh adapter is dropped, rlft.models.drop_fresh_ref_adapter).
rlft never leaves `ref_model=None` on a full model: DPOTrainer would then reload the reference from
`config._name_or_path`, which fails for a model built in memory and silently gives a wrong reference
when that path points elsewhere. With policy == reference the first loss is ln 2 = 0.6931.
A completed run records its last model for `rlft reward --set reward.objective=implicit` with the same start,
pairs and settings, which is the same training (rlft.run.reuse).
"""

from __future__ import annotations

from pathlib import Path

from rlft.config import RunConfig
from rlft.methods.common import Prepared, dpo_trainer, load_run_tokenizer

KIND = "pairs"
COLUMNS = ("prompt", "chosen", "rejected")


def prepare(cfg: RunConfig, train_rows, eval_rows, console) -> Prepared:
    return Prepared(train_rows, eval_rows, tok=load_run_tokenizer(cfg))


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    return dpo_trainer(cfg, out, prepared, cfg.dpo.max_length, COLUMNS)


def after(cfg: RunConfig, trainer, prepared: Prepared, console) -> dict:
    return {}


def completed(cfg: RunConfig, trainer, out: Path) -> None:
    """A completed, un-resumed run: record its last model as the result of this training, for an implicit reward
    model trained the same way (rlft.run.reuse)."""
    from rlft.run.reuse import register, training_key

    register(training_key(cfg, trainer), out / "last" if (out / "last").is_dir() else out, out,
             trainer.state.global_step)
