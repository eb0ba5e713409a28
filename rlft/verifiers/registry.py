"""The verifier registry: built-ins by name, plugins by file, both with an optional weight.

A spec is one of
  NAME                       a built-in (`math`, `label`, ...) or an `rlft.verifiers` entry point
  NAME:WEIGHT                the same, weighted (weights matter when several verifiers are combined)
  path/to/file.py:function   a plugin: the file is loaded with importlib and `function` is the reward
  path/to/file.py:function:WEIGHT
A plugin function has TRL's reward signature `fn(completions, **row_fields) -> list[float | None]`; it
may carry attributes `gold_fields` (tuple of row fields it needs; default: its required parameters other
than TRL's own, e.g. `answer` in `fn(completions, answer, **kwargs)`), `check_gold`,
`format_only` and `partial_credit`, read the same way as the fields of `Verifier`.

The registry is one explicit dict: adding a built-in means adding a line to REGISTRY.
"""

from __future__ import annotations

import difflib
import inspect
import math as pymath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from rlft.errors import UserError, row_problem
from rlft.user_code import load_python_file
from rlft.verifiers import code as code_
from rlft.verifiers import format as format_
from rlft.verifiers import json_schema, label, regex, support
from rlft.verifiers import math as math_
from rlft.verifiers.checked import checked
from rlft.verifiers.common import RewardFn

ENTRY_POINT_GROUP = "rlft.verifiers"


def _accept_any(field: str, value: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Verifier:
    """A named reward function plus what it needs from each row."""

    name: str
    fn: RewardFn
    gold_fields: tuple[str, ...] = ()
    check_gold: Callable[[str, Any], str | None] = _accept_any
    description: str = ""
    format_only: bool = False  # checks only the shape of the output: `rlft choose` warns about it
    partial_credit: bool = False  # rewards between 0 and 1, not only 0 or 1
    forgeable: bool = False  # the checked code can fake its own reward: opt-in only, never picked automatically


REGISTRY: dict[str, Verifier] = {
    "math": Verifier("math", math_.math_reward, ("answer",), math_.check_gold,
                     "final answer (\\boxed{}, 'answer:', or a bare number) equals `answer`"),
    "label": Verifier("label", label.label_reward, ("label",), label.check_gold,
                      "completion is exactly the gold `label` (case-insensitive)"),
    "label_partial": Verifier("label_partial", label.label_partial_reward, ("label",), label.check_gold,
                              "1 for the bare label, 0.5 for the label among words with no other label",
                              partial_credit=True),
    "json": Verifier("json", json_schema.json_reward, ("schema",), json_schema.check_gold,
                     "completion is a JSON object valid under `schema` (required fields, types)"),
    "regex": Verifier("regex", regex.regex_reward, ("pattern",), regex.check_gold,
                      "stripped completion fully matches the regular expression `pattern`"),
    "code": Verifier("code", code_.code_reward, ("tests",), code_.check_gold,
                     "share of the `tests` (literal asserts, I/O pairs) the completion's code passes (sandboxed)",
                     partial_credit=True),
    "code_forgeable": Verifier("code_forgeable", code_.code_forgeable_reward, ("tests",), code_.check_gold_forgeable,
                               "FORGEABLE: any Python tests run beside the code, reward from the exit status",
                               partial_credit=True, forgeable=True),
    "support_policy": Verifier("support_policy", support.support_policy_reward, ("decision", "policy"),
                               support.check_gold, "the reply decides as the store's `policy` does for the row's "
                               "`decision` (refund / exchange / repair / none) and states no wrong policy number"),
    "format": Verifier("format", format_.format_reward, (), format_.check_gold,
                       "<think>...</think><answer>...</answer> structure (format only)", format_only=True),
}


def resolve(spec: str) -> tuple[Verifier, float]:
    """The verifier and weight a spec names (see the module docstring); UserError when it names none.

    >>> verifier, weight = resolve("math:0.5")
    >>> verifier.name, verifier.gold_fields, weight
    ('math', ('answer',), 0.5)
    """
    spec = spec.strip()
    if ".py:" in spec or spec.endswith(".py"):
        return _resolve_plugin(spec)
    name, sep, weight_text = spec.partition(":")
    weight = _weight(weight_text, spec) if sep else 1.0
    if name in REGISTRY:
        if name in ("code", "code_forgeable"):
            code_.require_isolation()  # refuse before any data is read or folder made
        return REGISTRY[name], weight
    plugins = _entry_points()
    if name in plugins:
        try:
            loaded = plugins[name].load()
        except Exception as exc:  # any import error of a third-party package
            raise UserError(f"loading the verifier entry point '{name}' failed: {type(exc).__name__}: {exc}",
                            "reinstall or fix the package that provides it") from exc
        return _from_object(name, loaded, f"entry point '{name}'"), weight
    known = sorted({*REGISTRY, *plugins})
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise UserError(f"unknown verifier '{name}'",
                    f"{hint}known verifiers: {', '.join(known)}; or pass path/to/file.py:function")


def check_rows(verifier: Verifier, rows: Sequence[tuple[int, dict]], source: str) -> list[str]:
    """One problem per missing or unusable gold field, as `file:line: field 'x': what`."""
    problems = []
    for line, row in rows:
        for field in verifier.gold_fields:
            value = row.get(field)
            if value is None:
                why = f"missing (the {verifier.name} verifier needs it)"
                problems.append(row_problem(source, line, field, why))
                continue
            try:
                why = verifier.check_gold(field, value)
            except Exception as exc:  # noqa: BLE001 - a plugin's checker failing is a problem with that row
                why = f"check_gold raised {type(exc).__name__}: {exc}"
            if why:
                problems.append(row_problem(source, line, field, why))
    return problems


def combine(verifiers_with_weights: Sequence[tuple[Verifier, float]]) -> RewardFn:
    """One reward function: the weighted sum of several verifiers.

    None from a verifier means "not applicable" and adds 0; a row where every verifier says None gets
    None (TRL then leaves it out of the mean). The function's `__name__` lists the parts, e.g.
    `math+0.2*format`, and its `gold_fields` is the union of theirs.

    >>> fn = combine([resolve("math"), resolve("format:0.5")])
    >>> fn(["<think>12+34</think><answer>46</answer>", "46"], answer=["46", "46"])
    [1.5, 1.0]
    >>> fn.__name__
    'math+0.5*format'
    """
    parts = list(verifiers_with_weights)
    if not parts:
        raise ValueError("combine() needs at least one verifier")
    return _Combined(parts)


class _Combined:
    # A class, not a closure, so the reward stays picklable (TRL's async GRPO rollout sends reward
    # functions to a spawned process); TRL reads `__name__` for its logs.
    def __init__(self, parts: list[tuple[Verifier, float]]):
        self.parts = parts
        self.__name__ = "+".join(v.name if w == 1 else f"{w:g}*{v.name}" for v, w in parts)
        self.gold_fields = tuple(dict.fromkeys(f for v, _ in parts for f in v.gold_fields))

    def __call__(self, completions: list, **kwargs: Any) -> list[float | None]:
        columns = [v.fn(completions, **kwargs) for v, _ in self.parts]
        out: list[float | None] = []
        for i in range(len(completions)):
            values = [(col[i], w) for col, (_, w) in zip(columns, self.parts)]
            if all(r is None for r, _ in values):
                out.append(None)
            else:
                out.append(float(sum(w * r for r, w in values if r is not None)))
        return out


# ----------------------------------------------------------------------------- plugins


def _weight(text: str, spec: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = pymath.nan
    if not pymath.isfinite(weight):
        raise UserError(f"bad weight '{text}' in verifier '{spec}'",
                        "write NAME:WEIGHT with a number, e.g. math:0.5")
    return weight


def _resolve_plugin(spec: str) -> tuple[Verifier, float]:
    head, _, tail = spec.rpartition(".py:")
    if not head:
        raise UserError(f"verifier '{spec}' names a file but no function", f"write {spec}:FUNCTION_NAME")
    path = Path(head + ".py").expanduser()
    func_name, sep, weight_text = tail.partition(":")
    weight = _weight(weight_text, spec) if sep else 1.0
    module = load_python_file(path, "verifier", prefix="verifier_plugin")
    fn = getattr(module, func_name, None)
    if fn is None:
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        close = difflib.get_close_matches(func_name, names, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise UserError(f"{path} has no function '{func_name}'",
                        f"{hint}functions in the file: {', '.join(sorted(names)) or '(none)'}")
    return _from_object(func_name, fn, f"{path}:{func_name}"), weight


def _from_object(name: str, obj: Any, where: str) -> Verifier:
    if isinstance(obj, Verifier):
        return obj
    if not callable(obj):
        raise UserError(f"{where} is not a function", "point at a function fn(completions, **row_fields)")
    doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    fields = getattr(obj, "gold_fields", None)
    if fields is None:
        fields = signature_gold_fields(obj)
    fn = checked(obj, where)  # user code: its failures and wrong returns become one-line errors
    return Verifier(name=name, fn=fn, gold_fields=(fields,) if isinstance(fields, str) else tuple(fields),
                    check_gold=getattr(obj, "check_gold", _accept_any), description=doc[0] if doc else "",
                    format_only=bool(getattr(obj, "format_only", False)),
                    partial_credit=bool(getattr(obj, "partial_credit", False)))


# What TRL's GRPOTrainer passes besides the dataset's columns (trl/trainer/grpo_trainer.py, reward_kwargs)
_TRL_ARGS = {"completions", "prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}


def signature_gold_fields(fn: Any) -> tuple[str, ...]:
    """The row fields a plugin names as required parameters: `fn(completions, answer, **kw)` -> ('answer',).

    >>> def naive(completions, answer, prompts=None, **kwargs): ...
    >>> signature_gold_fields(naive)
    ('answer',)
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in params
                 if p.kind in kinds and p.default is inspect.Parameter.empty and p.name not in _TRL_ARGS)


def _entry_points() -> dict[str, Any]:
    try:
        return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:  # noqa: BLE001 - a broken installed distribution must not break the built-ins
        return {}
