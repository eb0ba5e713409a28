"""Kahneman-Tversky Optimization with TRL's KTOTrainer: unpaired thumbs up/down on single completions.

Rows are prompt, completion, label (true = desirable). Per row the implied reward is
r = beta * (log pi(y|x) - log pi_ref(y|x)); the loss is 1 - sigmoid(r - z) for desirable rows and
1 - sigmoid(z - r) for undesirable ones, each weighted by desirable_weight / undesirable_weight, where z is
TRL's batch estimate of KL(pi || pi_ref) from mismatched (prompt, other row's completion) pairs, clamped at 0.
With policy == reference every r and z is 0, so the first loss is exactly 0.5 (any weights, when both
labels' weights are 1; in general the label-weighted mean of 0.5 x weight).

The reference is the starting policy, passed explicitly as in rlft's DPO (a frozen copy; under LoRA the
adapter-disabled policy). Departure from TRL's defaults: TRL reads the training rows in file order
(`train_sampling_strategy="sequential"`, needed by its KL pairing), so a file sorted by label would give
one-label batches; rlft shuffles the rows once, with train.seed, before handing them over. Class balance:
when one label is under 10% of the rows and the weights do not compensate, a warning names the
desirable_weight / undesirable_weight range TRL recommends (rlft.data.thumbs).
"""

from __future__ import annotations

import random
from pathlib import Path

from rlft.config import RunConfig
from rlft.methods.common import Prepared, build_trl_config, clamp_max_length, load_run_tokenizer

KIND = "thumbs"
COLUMNS = ("prompt", "completion", "label")


def thumbs_records(rows, seed: int) -> list[dict]:
    """The rows as TRL records (label as a bool), shuffled once with `seed`."""
    from rlft.data.thumbs import label_value

    records = [{"prompt": r.data["prompt"], "completion": r.data["completion"],
                "label": label_value(r.data["label"])} for r in rows]
    random.Random(seed).shuffle(records)
    return records


def balance_note(cfg: RunConfig, rows) -> str | None:
    """The class-balance warning for these rows and the run's weights (None when fine)."""
    from rlft.data.thumbs import balance_warning, label_value

    n_true = sum(bool(label_value(r.data["label"])) for r in rows)
    return balance_warning(n_true, len(rows) - n_true, cfg.kto.desirable_weight, cfg.kto.undesirable_weight)


def prepare(cfg: RunConfig, train_rows, eval_rows, console) -> Prepared:
    """The tokenizer, and the class-balance warning before the run folder exists."""
    note = balance_note(cfg, train_rows)
    if note:
        console.print(f"[yellow]warning[/]: {note}", highlight=False, soft_wrap=True)
    return Prepared(train_rows, eval_rows, tok=load_run_tokenizer(cfg))


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    from rlft import models

    model = models.load_model(cfg.model)
    ref = None if cfg.model.lora.enabled else models.load_model(cfg.model, trainable=False, with_lora=False)
    eval_rows = prepared.eval_rows
    args = build_trl_config(cfg, KTOConfig, out, bool(eval_rows),
                            max_length=clamp_max_length(cfg.kto.max_length, model))
    trainer = KTOTrainer(model=model, ref_model=ref, args=args, processing_class=prepared.tok,
                         train_dataset=Dataset.from_list(thumbs_records(prepared.train_rows, cfg.train.seed)),
                         eval_dataset=Dataset.from_list(thumbs_records(eval_rows, cfg.train.seed)) if eval_rows
                         else None)
    models.drop_fresh_ref_adapter(trainer.model)  # a fresh adapter's reference is its base: no "ref" copy
    return trainer


def after(cfg: RunConfig, trainer, prepared: Prepared, console) -> dict:
    return {}
