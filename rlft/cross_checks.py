"""Config checks across fields, and of single values, that the schema's min/max cannot express.

`cross_checks(method, values)` returns (key, message) pairs; rlft.config.validate prefixes each message with
where its key's value came from (flag, --set, recipe file:line) when that is not a default. Among them: steps
and epochs that would train nothing, a seed outside numpy's range, GRPO's and RLOO's batch that does not split
into whole groups of G completions (TRL would refuse it only once the run folder exists), vLLM options, and
KTO's batch of at least two rows.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from typing import Any

VLLM_MODES = ("colocate", "server")


def did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def cross_checks(method: str, values: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for every problem of `values` (flat {dotted.key: value}) the schema cannot see alone."""
    problems = []
    if values.get("data.eval") and values.get("data.eval_fraction"):
        problems.append(("data.eval", "data.eval and data.eval_fraction are both set: use one"))
    if values.get("train.bf16") and values.get("train.fp16"):
        problems.append(("train.bf16", "train.bf16 and train.fp16 are both true: pick one"))
    if values.get("model.load_in_4bit") and not values.get("model.lora.enabled"):
        problems.append(("model.load_in_4bit", "model.load_in_4bit = true needs model.lora.enabled = true (4-bit "
                         "weights cannot be trained directly; QLoRA trains an adapter)"))
    if method in ("grpo", "rloo"):
        problems += _vllm_problems(values, method)
    if method == "kto" and (values.get("train.per_device_train_batch_size") or 2) < 2:
        problems.append(("train.per_device_train_batch_size", "train.per_device_train_batch_size must be >= 2 for "
                         "KTO: its KL estimate pairs each prompt with another row's completion in the same batch"))
    if method == "distill" and not values.get("distill.teacher_model_name_or_path"):
        problems.append(("distill.teacher_model_name_or_path", "distill.teacher_model_name_or_path is not set: "
                         "pass --teacher MODEL (folder, hub id, tiny)"))
    steps, epochs = values.get("train.max_steps"), values.get("train.num_train_epochs")
    if isinstance(steps, int) and (steps == 0 or steps < -1):
        problems.append(("train.max_steps", f"train.max_steps = {steps}: must be a positive number of steps, "
                         "or -1 (use epochs)"))
    if isinstance(steps, int) and steps == -1 and isinstance(epochs, (int, float)) and epochs <= 0:
        problems.append(("train.num_train_epochs", f"train.num_train_epochs = {epochs}: must be > 0 (or set "
                         "train.max_steps)"))
    minutes = values.get("train.max_minutes")
    if isinstance(minutes, (int, float)) and minutes <= 0:
        problems.append(("train.max_minutes", f"train.max_minutes = {minutes}: must be > 0 (minutes of training), "
                         "or unset for no limit"))
    seed = values.get("train.seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < 2**32:
        problems.append(("train.seed", f"train.seed = {seed}: must be between 0 and 2**32 - 1 (numpy's seed range)"))
    if method in ("grpo", "rloo"):
        problems += _group_batch_problems(values, method)
    if method in ("rloo", "distill") and values.get(f"{method}.temperature") == 0:
        problems.append((f"{method}.temperature", f"{method}.temperature = 0: {method} samples its rollouts, and "
                         "temperature 0 is greedy decoding (every sample the same): use a temperature > 0, e.g. 1.0"))
    if method == "bootstrap" and (values.get("bootstrap.tools") or values.get("bootstrap.env")):
        problems.append(("bootstrap.tools", "bootstrap does not play tool episodes (--tools / --env): its kept rows "
                         "would have to be whole episodes; use rlft grpo --tools/--env, or drop them"))
    samples = values.get("bootstrap.samples") or 8
    if method == "bootstrap" and values.get("bootstrap.temperature") == 0 and samples > 1:
        problems.append(("bootstrap.temperature", "bootstrap.temperature = 0 with bootstrap.samples > 1: greedy "
                         "decoding gives every sample the same answer: use a temperature > 0, or --samples 1"))
    if method == "kto" and values.get("kto.desirable_weight") == 0 and values.get("kto.undesirable_weight") == 0:
        problems.append(("kto.desirable_weight", "kto.desirable_weight = 0 and kto.undesirable_weight = 0: every "
                         "loss term is weighted 0, the model would learn nothing: keep at least one weight > 0"))
    return problems


def _group_batch_problems(values: dict[str, Any], method: str) -> list[tuple[str, str]]:
    """TRL's GRPOTrainer and RLOOTrainer sample a generation batch of prompts x G completions: the completions
    per step (batch size x accumulation x processes, or generation_batch_size) must split into whole groups."""
    g = values.get(f"{method}.num_generations")
    batch, accum = values.get("train.per_device_train_batch_size"), values.get("train.gradient_accumulation_steps")
    if not all(isinstance(v, int) for v in (g, batch, accum)):
        return []
    world = int(os.environ.get("WORLD_SIZE") or 1)
    gen_batch = values.get(f"{method}.generation_batch_size") or batch * accum * world
    if isinstance(gen_batch, int) and gen_batch % g:
        return [(f"{method}.num_generations",
                 f"{method}.num_generations = {g} does not divide the {gen_batch} completions per generation batch "
                 f"(per_device_train_batch_size {batch} x gradient_accumulation_steps {accum} x {world} processes): "
                 f"set --batch-size to a multiple of {g}, or --num-generations to a divisor of {gen_batch}")]
    return []


def _vllm_problems(values: dict[str, Any], method: str) -> list[tuple[str, str]]:
    """GRPO's and RLOO's vLLM options pass straight to TRL's config, which accepts any vllm_mode string and only
    finds a missing vLLM once the trainer is built: both are caught here, before any model loads."""
    problems = []
    mode = values.get(f"{method}.vllm_mode")
    if mode is not None and mode not in VLLM_MODES:
        problems.append((f"{method}.vllm_mode", f"{method}.vllm_mode = {mode}: expected one of "
                         f"{', '.join(VLLM_MODES)}{did_you_mean(str(mode), VLLM_MODES)}"))
    if values.get(f"{method}.use_vllm") and importlib.util.find_spec("vllm") is None:
        problems.append((f"{method}.use_vllm", f"{method}.use_vllm = true but vLLM is not installed: `pip install "
                         "vllm` on the GPU machine (server mode: start `trl vllm-serve --model ...` first), or set "
                         f"{method}.use_vllm=false"))
    return problems
