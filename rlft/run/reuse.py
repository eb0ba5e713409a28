"""The same training done once: an implicit reward model takes the model of the rlft dpo run that already trained it.

`rlft reward` with `reward.objective: implicit` trains with TRL's DPOTrainer, the DPO loss and beta that `rlft dpo`
uses; with the same start, pairs and settings the two runs are one computation (with LoRA on the tiny model the
two adapters are bitwise equal, whatever held-out checks either runs, and equal to float noise when one of them
precomputed its reference: tests/test_reuse.py). The shipped recipes
are such a pair (recipes/dpo_smollm2.yaml, recipes/reward_smollm2.yaml), so `make demo-prefs` and anyone who runs
both would train the same model twice: on a 2-core CPU about 30 minutes.

- `training_key`: a digest of everything the trained weights depend on, read from the trainer that is about to
  train: its TrainingArguments (every field but the few that only say where and how often to log, evaluate and
  save, and, with dropout disabled, whether DPO precomputes its reference: IGNORED, PRECOMPUTE), the tokenized
  training rows (so the tokenizer, chat template, max_length and row order are in it; not the reference
  log-probs a precompute adds), the start model's weights (a digest of its files), the LoRA config, the model's
  dtype, rlft's speed layer switch, and the versions of torch, transformers, trl and peft. Anything not known to
  be harmless is in it, so a setting that differs makes a miss, never a wrong reuse. None (no reuse) without
  LoRA: the adapter is what is kept and loaded.
- `register`: a completed, un-resumed rlft dpo run records its last model (the run folder's, or `last/` when the
  folder kept an earlier check's) under that key in the cache ($RLFT_CACHE/trained/KEY.json): the folder and a
  digest of its weights, not a copy.
- `lookup`: the folder for a key when it still holds those weights (a run trained again into it misses).

The reward run then loads that adapter into its own trainer's model instead of training, and goes on as a
trained run does: TRL's eval, pair accuracy, the truth checks, the save. It says so in one line and in
summary.json (`reused_training`); `--set reward.reuse_dpo=false` trains anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

# TrainingArguments fields that do not change the trained weights: where the run writes, how often it logs,
# evaluates and saves (the held-out checks and evals were measured not to move the weights: tests/test_reuse.py)
IGNORED = frozenset({"output_dir", "logging_dir", "logging_steps", "logging_strategy", "logging_first_step",
                     "eval_steps", "eval_strategy", "save_steps", "save_strategy", "save_total_limit", "report_to",
                     "run_name", "disable_tqdm"})
# DPOConfig's precompute_ref_log_probs: the reference's log-probs computed in one pass before training instead of
# at each step, the same forward of the same frozen weights (batched otherwise, so equal to rounding: the weights
# of the two trainings agree to float noise, tests/test_reuse.py). Ignored only with DPOConfig's disable_dropout
# (TRL's default): the extra pass draws from torch's global generator, so with dropout on every later mask differs
# and the two are other trainings.
PRECOMPUTE = frozenset({"precompute_ref_log_probs", "precompute_ref_batch_size"})
# the columns that precompute adds to the training rows (TRL's DPOTrainer): the reference's numbers, not data
PRECOMPUTED = frozenset({"ref_chosen_logps", "ref_rejected_logps"})
FOLDER = "trained"


def _plain(value: Any) -> Any:
    """A set as its sorted list (peft keeps target_modules as a set, whose order changes between processes)."""
    return sorted(map(str, value)) if isinstance(value, (set, frozenset)) else str(value)


def _numbers(value: Any) -> Any:
    """Every number as a float: a setting given as 1 and as 1.0 (one schema's int list, another's floats) is one."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_numbers(v) for v in value]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(_numbers(value), sort_keys=True, default=_plain).encode()).hexdigest()


def _rows_digest(dataset) -> str:
    digest = hashlib.sha256()
    for name in sorted(set(dataset.column_names) - PRECOMPUTED):
        digest.update(name.encode() + b"\0")
        for value in dataset[name]:
            digest.update(json.dumps(value, sort_keys=True, default=_plain).encode() + b"\n")
    return digest.hexdigest()


def training_key(cfg, trainer) -> str | None:
    """The digest of what `trainer` (a TRL trainer about to train) will produce; None when it cannot be known
    (no LoRA adapter, a start that is not a local folder)."""
    import peft
    import torch
    import transformers
    import trl

    from rlft.models import resolve_model_path
    from rlft.run.guard import weights_digest

    model = trainer.model
    if not cfg.model.lora.enabled or not hasattr(model, "peft_config"):
        return None
    try:
        start = weights_digest(resolve_model_path(cfg.model.name_or_path))
    except Exception:  # noqa: BLE001 - a start that does not resolve to a local folder: no key
        return None
    if start is None:
        return None
    ignored = IGNORED | PRECOMPUTE if getattr(trainer.args, "disable_dropout", False) else IGNORED
    args = {k: v for k, v in trainer.args.to_dict().items() if k not in ignored}
    lora = {name: c.to_dict() for name, c in model.peft_config.items()}
    parts = {
        "trainer": type(trainer).__name__, "args": args, "rows": _rows_digest(trainer.train_dataset),
        "start": start, "revision": cfg.model.get("revision"), "lora": lora,
        "dtype": str(next(model.parameters()).dtype), "speedups": bool(cfg.train.get("speedups", True)),
        "versions": [torch.__version__, transformers.__version__, trl.__version__, peft.__version__]}
    return _digest(parts)


def _entry(key: str) -> Path:
    from rlft.sources import cache_dir

    return cache_dir() / FOLDER / f"{key}.json"


def register(key: str | None, folder: Path, run: Path, steps: int) -> None:
    """Record `folder` (a completed DPO run's last model, after `steps` steps) as the result of the training
    `key`."""
    from rlft.run.guard import weights_digest

    weights = weights_digest(folder)
    if key is None or weights is None:
        return
    path = _entry(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"folder": str(folder.resolve()), "weights": weights, "run": str(run.resolve()),
                                   "steps": int(steps)}, indent=2) + "\n")
        tmp.replace(path)
    except OSError:  # a read-only cache: the next reward run trains, as it would have
        pass


def lookup(key: str | None) -> dict | None:
    """{folder, run, steps} of the model trained as `key` describes, when that folder still holds it; else None."""
    from rlft.run.guard import weights_digest

    if key is None:
        return None
    try:
        entry = json.loads(_entry(key).read_text())
        folder = Path(entry["folder"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (folder / "adapter_model.safetensors").is_file() or weights_digest(folder) != entry.get("weights"):
        return None
    return {"folder": folder, "run": entry.get("run"), "steps": int(entry.get("steps") or 0)}


def load_adapter(model, folder: Path) -> None:
    """Put the adapter weights saved in `folder` into `model` (a peft model with the same LoRA config)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    state = load_file(str(folder / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, state)
    if unexpected := list(getattr(result, "unexpected_keys", None) or []):  # the key matched: a bug if reached
        raise RuntimeError(f"the adapter in {folder} does not fit this model: {unexpected[:3]}")
