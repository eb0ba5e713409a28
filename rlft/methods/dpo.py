"""Direct Preference Optimization with TRL's DPOTrainer (beta 0.1, sigmoid loss: the paper's defaults).

The reference is the starting policy, passed explicitly: a second frozen copy loaded from the same
weights, or, under LoRA, the policy itself with its adapter disabled (one base model in memory).
rlft never leaves `ref_model=None` on a full model: DPOTrainer would then reload the reference from
`config._name_or_path`, which fails for a model built in memory and silently gives a wrong reference
when that path points elsewhere. With policy == reference the first loss is ln 2 = 0.6931.
"""

from __future__ import annotations

from pathlib import Path

from rlft.config import RunConfig
from rlft.methods.common import RunResult, build_trl_config, clamp_max_length, train_with

KIND = "preference"
COLUMNS = ("prompt", "chosen", "rejected")


def build(cfg: RunConfig, out: Path, train_rows, eval_rows):
    from trl import DPOConfig, DPOTrainer

    from rlft.data import to_dataset
    from rlft.models import load_model, load_tokenizer

    tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    model = load_model(cfg.model)
    ref = None if cfg.model.lora.enabled else load_model(cfg.model, trainable=False, with_lora=False)
    args = build_trl_config(cfg, DPOConfig, out, bool(eval_rows),
                            max_length=clamp_max_length(cfg.dpo.max_length, model))
    return DPOTrainer(model=model, ref_model=ref, args=args, processing_class=tok,
                      train_dataset=to_dataset(train_rows, COLUMNS),
                      eval_dataset=to_dataset(eval_rows, COLUMNS) if eval_rows else None)


def run(cfg: RunConfig, **kwargs) -> RunResult:
    return train_with(cfg, KIND, build, **kwargs)
