"""Config value checks the schema's min/max cannot express, added to rlft.config's cross-checks.

Steps and epochs that would train nothing or a wrong amount, a seed outside numpy's range, and GRPO's batch
that does not split into whole groups of G completions (TRL would refuse it only once the run folder exists).
"""

from __future__ import annotations

import os
from typing import Any


def config_problems(method: str, values: dict[str, Any], origins: dict[str, str] | None = None) -> list[str]:
    """Problems of single values and combinations the schema's min/max cannot express, each prefixed with
    where its value came from (flag, --set, recipe file:line) when not a default."""
    problems = [_where(p, origins or {}) for p in _problems(method, values)]
    return problems


def _where(problem: str, origins: dict[str, str]) -> str:
    key = problem.split(" ", 1)[0]
    origin = origins.get(key)
    return f"{origin}: {problem}" if origin and origin != "default" else problem


def _problems(method: str, values: dict[str, Any]) -> list[str]:
    problems = []
    steps, epochs = values.get("train.max_steps"), values.get("train.num_train_epochs")
    if isinstance(steps, int) and (steps == 0 or steps < -1):
        problems.append(f"train.max_steps = {steps}: must be a positive number of steps, or -1 (use epochs)")
    if isinstance(steps, int) and steps == -1 and isinstance(epochs, (int, float)) and epochs <= 0:
        problems.append(f"train.num_train_epochs = {epochs}: must be > 0 (or set train.max_steps)")
    seed = values.get("train.seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < 2**32:
        problems.append(f"train.seed = {seed}: must be between 0 and 2**32 - 1 (numpy's seed range)")
    if method in ("grpo", "rloo"):
        problems += _grpo_batch_problems(values, method)
    if method in ("rloo", "distill") and values.get(f"{method}.temperature") == 0:
        problems.append(f"{method}.temperature = 0: {method} samples its rollouts, and temperature 0 is greedy "
                        "decoding (every sample the same, or a division by zero): use a temperature > 0, e.g. 1.0")
    if method == "kto" and values.get("kto.desirable_weight") == 0 and values.get("kto.undesirable_weight") == 0:
        problems.append("kto.desirable_weight = 0 and kto.undesirable_weight = 0: every loss term is weighted 0, "
                        "the model would learn nothing: keep at least one weight > 0")
    return problems


def _grpo_batch_problems(values: dict[str, Any], method: str = "grpo") -> list[str]:
    """TRL's GRPOTrainer (and RLOOTrainer) samples a generation batch of prompts x G completions: the
    completions per step (batch size x accumulation x processes, or the section's generation_batch_size) must
    split into whole groups of G."""
    g = values.get(f"{method}.num_generations")
    batch, accum = values.get("train.per_device_train_batch_size"), values.get("train.gradient_accumulation_steps")
    if not all(isinstance(v, int) for v in (g, batch, accum)):
        return []
    world = int(os.environ.get("WORLD_SIZE") or 1)
    gen_batch = values.get(f"{method}.generation_batch_size") or batch * accum * world
    if isinstance(gen_batch, int) and gen_batch % g:
        return [f"{method}.num_generations = {g} does not divide the {gen_batch} completions per generation batch "
                f"(per_device_train_batch_size {batch} x gradient_accumulation_steps {accum} x {world} processes): "
                f"set --batch-size to a multiple of {g}, or --num-generations to a divisor of {gen_batch}"]
    return []
