"""`local_lm(model, **train_kwargs) -> dspy.LM` and the translation of DSPy train_kwargs into rlft configs.

The LM is a plain `dspy.LM` (no subclass): `engine=` one shared rlft.dspy.engine.LocalEngine, `provider=`
rlft.dspy.provider.RlftProvider, `model=` the model as `--model` takes it. Its train_kwargs are rlft config
keys, checked against rlft's schema when a job starts (one line naming the key and the fix):
- `lora=True` (model.lora.enabled), `learning_rate`, `output_dir`, `max_steps`, `num_train_epochs`, `seed`,
  `per_device_train_batch_size` (train.*), `lora_r` (model.lora.r);
- any dotted rlft key: `train.*`, `model.*`, `watch.*`, `sft.*` (finetune only), `grpo.*` (GRPO only);
- `num_generations` (what DSPy's GRPO adds: its group size) and `groups_per_step` (GRPO groups per step:
  by default read from the calling dspy GRPO, see rlft.dspy.reinforce);
- `valset` and `metric` (GRPO's held-out check, when dspy's GRPO is not given a valset).
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
JOB_KEYS = ("groups_per_step", "valset", "metric", "max_tokens")

# Defaults for DSPy programs (LoRA on a small instruct model; every one overridable by a train_kwargs key).
# SFT: rank 16, lr 2e-4 for 3 epochs, as rlft's LoRA SFT recipes; the held-out check is off (BootstrapFinetune's
# rows are the teacher's accepted traces, often a few dozen: a 5% slice is too small to steer by).
# GRPO: lr 1e-4 constant and temperature 0.7, recipes/grpo_smollm2.yaml's settings; beta 0 (TRL's default).
DSPY_DEFAULTS: dict[str, dict[str, Any]] = {
    "sft": {"model.lora.enabled": True, "model.lora.r": 16, "model.lora.alpha": 32,
            "train.learning_rate": 2e-4, "train.num_train_epochs": 3.0, "train.per_device_train_batch_size": 8,
            "train.logging_steps": 5, "train.save_steps": 1000, "watch.auto_holdout": False},
    "grpo": {"model.lora.enabled": True, "model.lora.r": 16, "model.lora.alpha": 32,
             "train.learning_rate": 1e-4, "train.lr_scheduler_type": "constant", "grpo.temperature": 0.7,
             "grpo.beta": 0.0},
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


def local_lm(model: str = "smollm2", *, temperature: float | None = None, max_tokens: int = 128,
             cache: bool = False, **train_kwargs: Any):
    """A dspy.LM served in-process by rlft: `model` as `--model` takes it, train_kwargs as rlft config keys
    (module docstring). Greedy unless `temperature` is set (a GRPO job samples at grpo.temperature while it
    trains). `max_tokens` 128: a DSPy ChatAdapter answer of a few short fields is 15-60 tokens. DSPy's response
    cache is off by default (a local model changes as it trains; `cache=True` turns it on).

    The model is checked now (a missing folder or a bad key: one line, nothing loaded); it loads at the first
    request."""
    import dspy

    from rlft.dspy.provider import RlftProvider
    from rlft.models import resolve_model_path

    resolve_model_path(model)  # a wrong name fails here, in one line, not inside a DSPy thread
    config_flags("grpo", model, train_kwargs)
    config_flags("sft", model, train_kwargs)
    return dspy.LM(model, engine=shared_engine(), provider=RlftProvider(), temperature=temperature,
                   max_tokens=max_tokens, cache=cache, train_kwargs=dict(train_kwargs), num_retries=0)
