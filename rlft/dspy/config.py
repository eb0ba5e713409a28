"""DSPy train_kwargs -> rlft configs, and the process's one engine (what rlft.dspy.lm, .provider, .reinforce read).

train_kwargs are rlft config keys, checked against rlft's schema when a job starts (one line naming the key
and the fix):
- `lora=True` (model.lora.enabled), `learning_rate`, `output_dir`, `max_steps`, `num_train_epochs`, `seed`,
  `per_device_train_batch_size` (train.*), `lora_r` (model.lora.r), `temperature` (grpo.temperature);
- any dotted rlft key: `train.*`, `model.*`, `watch.*`, `sft.*` (finetune only), `grpo.*` (GRPO only);
- `num_generations` (what DSPy's GRPO adds: its group size) and `groups_per_step` (GRPO groups per step:
  by default read from the calling dspy GRPO, see rlft.dspy.reinforce);
- `valset` and `metric` (GRPO's held-out check, when dspy's GRPO is not given a valset);
- `max_temperature` (GRPO: the hottest the job samples at when groups carry no signal; rlft.dspy.reinforce).
DSPY_DEFAULTS are the settings a DSPy program gets where rlft's method defaults are for other data.
"""

from __future__ import annotations

from typing import Any

from rlft.errors import UserError

# Short names a DSPy user writes -> rlft config keys.
ALIASES = {
    "lora": "model.lora.enabled",
    "lora_r": "model.lora.r",
    "learning_rate": "train.learning_rate",
    "output_dir": "train.output_dir",
    "max_steps": "train.max_steps",
    "num_train_epochs": "train.num_train_epochs",
    "seed": "train.seed",
    "per_device_train_batch_size": "train.per_device_train_batch_size",
    "num_generations": "grpo.num_generations",
    "temperature": "grpo.temperature",
}
# Keys the job itself reads (not rlft config keys).
JOB_KEYS = ("groups_per_step", "valset", "metric", "max_tokens", "max_temperature")

# Defaults for DSPy programs (LoRA on a small instruct model; every one overridable by a train_kwargs key).
# SFT: rank 16, lr 2e-4 for 3 epochs (more on few traces: finetune_epochs), as rlft's LoRA SFT recipes; the
# held-out check is off (BootstrapFinetune's rows are the teacher's accepted traces, often a few dozen: a 5% slice
# is too small to steer by).
# GRPO: lr 2e-4 constant (twice recipes/grpo_smollm2.yaml's 1e-4: a DSPy GRPO run here is 10-20 steps, not 40),
# temperature 1.0 (TRL's default; a typed field is answered by guided choice, and at 0.7 a confident small
# model's groups of 8 mostly agree: 75% had no signal on a two-label program); beta 0 (TRL's default);
# num_iterations 1 (TRL's default): four clipped updates on each step's groups (`grpo.num_iterations: 4`) did not
# measure better in the runs so far (BENCHMARKS.md, "DSPy programs"), so it stays opt-in.
# A BootstrapFinetune fine-tune on few traces: unless train_kwargs set the epochs or max_steps, it runs enough epochs
# for about FINETUNE_MIN_STEPS optimizer steps, between the default 3 and FINETUNE_MAX_EPOCHS (finetune_epochs). On
# ~100 traces at batch 8, 3 epochs are ~36 steps, which fit the traces (loss 0.03) without moving the held-out
# answers much; 6 epochs moved them (BENCHMARKS.md, "DSPy programs": BootstrapFinetune epochs).
FINETUNE_MIN_STEPS = 72
FINETUNE_MAX_EPOCHS = 6
EPOCH_KEYS = ("num_train_epochs", "train.num_train_epochs", "max_steps", "train.max_steps")


def finetune_epochs(rows: int, batch: int, base: float = 3.0) -> float:
    """Epochs for a fine-tune on `rows` traces at `batch` rows a step: at least `base`, enough for
    FINETUNE_MIN_STEPS steps, at most FINETUNE_MAX_EPOCHS."""
    steps_per_epoch = max(1, -(-rows // max(batch, 1)))
    need = -(-FINETUNE_MIN_STEPS // steps_per_epoch)
    return float(max(base, min(FINETUNE_MAX_EPOCHS, need)))


DSPY_DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {"model.lora.enabled": True, "model.lora.r": 16, "model.lora.alpha": 32,
            "train.learning_rate": 2e-4, "train.num_train_epochs": 3.0, "train.per_device_train_batch_size": 8,
            "train.logging_steps": 5, "train.save_steps": 1000, "watch.auto_holdout": False},
    "grpo": {"model.lora.enabled": True, "model.lora.r": 16, "model.lora.alpha": 32,
             "train.learning_rate": 2e-4, "train.lr_scheduler_type": "constant", "grpo.temperature": 1.0,
             "grpo.beta": 0.0, "grpo.num_iterations": 1, "grpo.epsilon": 0.2},
}


def config_flags(method: str, model: str, train_kwargs: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """rlft config flags ({dotted key: (value, origin)}) for `method` (sft or grpo) from DSPy train_kwargs."""
    flags: dict[str, tuple[Any, str]] = {k: (v, "rlft.dspy default") for k, v in DSPY_DEFAULTS[method].items()}
    flags["model.name_or_path"] = (model, "dspy.LM model")
    other = "grpo" if method == "sft" else "sft"
    for key, value in train_kwargs.items():
        if key in JOB_KEYS:
            continue
        dotted = ALIASES.get(key, key)
        section = dotted.split(".", 1)[0]
        if "." not in dotted or section not in ("train", "model", "watch", "data", "sft", "grpo"):
            raise UserError(f"unknown rlft.dspy train_kwargs key '{key}'",
                            f"use {', '.join(ALIASES)}, {', '.join(JOB_KEYS)}, or a dotted rlft key "
                            "(train.*, model.*, watch.*, sft.*, grpo.*)")
        if section == other or (method == "sft" and key in ("num_generations", "temperature")):
            continue  # a key for the other kind of job
        flags[dotted] = (value, "train_kwargs")
    return flags


def resolve(method: str, model: str, train_kwargs: dict[str, Any], data: list[str] | None = None):
    """The validated RunConfig of an rlft `method` run for this model and these train_kwargs."""
    from rlft.config import resolve as resolve_config

    flags = config_flags(method, model, train_kwargs)
    if data is not None:
        flags["data.train"] = (data, "rlft.dspy")
    return resolve_config(method, flags=flags)


_ENGINE = None


def shared_engine():
    """The process's one LocalEngine: every LM local_lm returns (and each of their copies) shares it, so a
    model is loaded once however many LMs name it."""
    global _ENGINE
    if _ENGINE is None:
        from rlft.dspy.engine import LocalEngine

        _ENGINE = LocalEngine()
    return _ENGINE
