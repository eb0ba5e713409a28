"""Direct Preference Optimization with TRL's DPOTrainer (beta 0.1, sigmoid loss: the paper's defaults).

The reference is the starting policy, passed explicitly: a second frozen copy loaded from the same
weights, or, under LoRA, the policy itself with its adapter disabled (one base model in memory; TRL's own
"ref" copy of a fresh adapter is dropped, rlft.models.drop_fresh_ref_adapter).
rlft never leaves `ref_model=None` on a full model: DPOTrainer would then reload the reference from
`config._name_or_path`, which fails for a model built in memory and silently gives a wrong reference
when that path points elsewhere. With policy == reference the first loss is ln 2 = 0.6931.
"""

from __future__ import annotations

from pathlib import Path

from rlft.config import RunConfig
from rlft.methods.common import Prepared, build_trl_config, clamp_max_length, load_run_tokenizer

KIND = "pairs"
COLUMNS = ("prompt", "chosen", "rejected")


def prepare(cfg: RunConfig, train_rows, eval_rows, console) -> Prepared:
    return Prepared(train_rows, eval_rows, tok=load_run_tokenizer(cfg))


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from trl import DPOConfig, DPOTrainer

    from rlft import models
    from rlft.data.table import to_dataset

    model = models.load_model(cfg.model)
    ref = None if cfg.model.lora.enabled else models.load_model(cfg.model, trainable=False, with_lora=False)
    args = build_trl_config(cfg, DPOConfig, out, bool(prepared.eval_rows),
                            max_length=clamp_max_length(cfg.dpo.max_length, model))
    trainer = DPOTrainer(model=model, ref_model=ref, args=args, processing_class=prepared.tok,
                         train_dataset=to_dataset(prepared.train_rows, COLUMNS),
                         eval_dataset=to_dataset(prepared.eval_rows, COLUMNS) if prepared.eval_rows else None)
    models.drop_fresh_ref_adapter(trainer.model)  # a fresh adapter's reference is its base: no "ref" copy
    return trainer


def after(cfg: RunConfig, trainer, prepared: Prepared, console) -> dict:
    return {}
