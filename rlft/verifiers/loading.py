"""Verifier specs -> one reward function, and the check that every row's gold fields are usable.

Shared by every method that scores completions (GRPO, PPO, eval, pre-flight, the held-out watch, pipelines);
it lives in the verifier layer so that nothing outside rlft/methods imports a method.
"""

from __future__ import annotations

from rlft.errors import DataError


def load_verifiers(specs: list[str]):
    """One reward function for the specs (weighted sum when several) and the gold fields they need."""
    from rlft.verifiers import combine, resolve

    parts = [resolve(s) for s in specs]
    fn = parts[0][0].fn if len(parts) == 1 and parts[0][1] == 1.0 else combine(parts)
    fields = tuple(dict.fromkeys(f for v, _ in parts for f in v.gold_fields))
    return fn, fields


def validate_gold(rows, specs: list[str]) -> None:
    """Every row has a prompt and each verifier's gold fields, in a form the verifier can parse."""
    from rlft.data import validate_verifiable
    from rlft.verifiers import check_rows, resolve

    validate_verifiable(rows, gold_fields=())
    problems: list[str] = []
    for spec in specs:
        verifier, _ = resolve(spec)
        by_source: dict[str, list] = {}
        for r in rows:
            by_source.setdefault(r.source, []).append((r.line, r.data))
        for source, items in by_source.items():
            problems += check_rows(verifier, items, source)
    if problems:
        raise DataError(problems, "fix the gold values, or pick the verifier that matches them (rlft verify "
                                  "NAME --data FILE shows how it scores)")


def build_reward(verifier_specs: list[str], reward_model: str | None):
    """One reward function from verifier specs and/or a reward model folder (shared by GRPO and PPO)."""
    parts = []
    if verifier_specs:
        parts.append(load_verifiers(verifier_specs)[0])
    if reward_model:
        from rlft.reward_model.scoring import RewardModelReward

        parts.append(RewardModelReward(reward_model))
    if len(parts) == 1:
        return parts[0]
    return _Sum(parts)


class _Sum:
    def __init__(self, parts):
        self.parts = parts
        self.__name__ = "+".join(getattr(p, "__name__", "reward") for p in parts)

    def __call__(self, completions, **kwargs):
        columns = [p(completions, **kwargs) for p in self.parts]
        return [sum(0.0 if c[i] is None else float(c[i]) for c in columns) for i in range(len(completions))]
