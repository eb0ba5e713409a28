"""Stress a verifier with junk completions that a sound reward must reject.

GRPO gives a positive advantage to any sampled completion that beats its group, so a junk output that
a verifier accepts even once can be learned and spread ("billing bug account" for every ticket). This
builds families of junk from the rows' own gold values and reports how often the verifier accepts each
(reward >= 0.5). A family with `must_fail` that is ever accepted makes the verifier gameable.

Families (each row gives at most one completion per family; rows where a family cannot be built,
e.g. `other_gold` when every row has the same gold, are left out of it; a family no row can build is
reported as not tested (`tested=False`, with why), never as passed):
  empty           ""                                               must fail
  whitespace      the right answer inside ~12k chars of padding     may pass (it is still the answer)
  repetition      a gold-free sentence repeated ~300 times          must fail
  all_candidates  every distinct gold of the rows in one string     must fail
  other_gold      another row's gold (or another of the row's `labels`) must fail
  format_only     <think></think><answer></answer>, no content      must fail
  format_junk     the tags around filler text                       must fail: a format-only verifier
                                                                      accepts it, and that is the hack
  wrapped_junk    the gold between decoys (other golds, gold +- 1)  must fail: accepting it rewards
                  inside filler text                                  spraying candidates
The "right answer" padded by `whitespace` is the row's `completion` when the verifier accepts it, else
the gold when the verifier accepts the gold as a completion (a number, a label), else the row is left
out (a schema, a pattern or tests are not answers).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from rlft.verifiers.registry import Verifier

PAD_CHARS = 6000  # each side: 12k chars of padding, past the 10k "very long output" mark
MAX_CANDIDATES = 50  # all_candidates joins at most this many golds
_SENTENCE = "Let me think about this step by step. "
_FORMAT_JUNK = "<think>Let me think.</think><answer>banana</answer>"
_PAD_BEFORE, _PAD_AFTER = "\n" * PAD_CHARS, " " * PAD_CHARS  # newlines first: code stays valid Python
_REPEAT = 300  # x 38 chars = ~11k chars


@dataclass(frozen=True)
class FamilyResult:
    """How often one family of junk completions was accepted (reward >= 0.5)."""

    name: str
    must_fail: bool
    acceptance: float
    n: int
    example: str = ""
    tested: bool = True
    why_not: str = ""  # when not tested: why no completion of this family could be built

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "must_fail": self.must_fail, "acceptance": round(self.acceptance, 4),
                "n": self.n, "example": self.example, "tested": self.tested, "why_not": self.why_not}


def stress(verifier: Verifier, rows: Sequence[dict]) -> list[FamilyResult]:
    """Score every junk family against the rows; one FamilyResult per family (untested ones included).

    >>> from rlft.verifiers import resolve
    >>> results = stress(resolve("math")[0], [{"answer": "46"}, {"answer": "98"}])
    >>> gameable(results), [r.name for r in results if r.acceptance > 0], untested(results)
    (False, ['whitespace'], [])
    """
    rows = [dict(r) for r in rows]
    golds = [_gold_text(verifier, r) for r in rows]
    pool = list(dict.fromkeys(g for g in golds if g))
    rights = _right_answers(verifier, rows, golds)
    families: list[tuple[str, bool, Callable[[int], str | None]]] = [
        ("empty", True, lambda i: ""),
        ("whitespace", False, lambda i: None if rights[i] is None else _PAD_BEFORE + rights[i] + _PAD_AFTER),
        ("repetition", True, lambda i: None if golds[i] and golds[i] in _SENTENCE else _SENTENCE * _REPEAT),
        ("all_candidates", True, lambda i: _all_candidates(golds[i], pool, rows[i])),
        ("other_gold", True, lambda i: _other_gold(golds[i], pool, rows[i])),
        ("format_only", True, lambda i: "<think></think><answer></answer>"),
        ("format_junk", True, lambda i: None if golds[i] and golds[i] in _FORMAT_JUNK else _FORMAT_JUNK),
        ("wrapped_junk", True, lambda i: _wrapped(golds[i], pool, rows[i])),
    ]
    results = []
    for name, must_fail, build in families:
        picked = [(i, c) for i in range(len(rows)) if (c := build(i)) is not None]
        if not picked:
            results.append(FamilyResult(name, must_fail, 0.0, 0, "", False, _why_not(name, verifier, pool)))
            continue
        rewards = _score(verifier, [rows[i] for i, _ in picked], [c for _, c in picked])
        accepted = sum(1 for r in rewards if r is not None and r >= 0.5)
        example = _preview(picked[0][1])
        results.append(FamilyResult(name, must_fail, accepted / len(picked), len(picked), example))
    return results


def gameable(results: Sequence[FamilyResult]) -> bool:
    """True when any must-fail family was accepted at least once."""
    return any(r.must_fail and r.tested and r.acceptance > 0 for r in results)


def untested(results: Sequence[FamilyResult]) -> list[str]:
    """The must-fail families that could not be built from the rows (so they prove nothing)."""
    return [r.name for r in results if r.must_fail and not r.tested]


def _why_not(name: str, verifier: Verifier, pool: list[str]) -> str:
    if name == "whitespace":
        return "no row's completion or gold is accepted as a right answer"
    if not verifier.gold_fields:
        return "the verifier names no gold field (pass --gold FIELD)"
    if not pool:
        return f"no row has a value in '{verifier.gold_fields[0]}'"
    return "needs rows with at least two different golds" if len(pool) < 2 else "the rows' golds cannot build it"


def _score(verifier: Verifier, rows: list[dict], completions: list[str]) -> list:
    keys = dict.fromkeys(k for r in rows for k in r if k != "completion")
    return verifier.fn(completions, **{k: [r.get(k) for r in rows] for k in keys})


def _gold_text(verifier: Verifier, row: dict) -> str:
    if not verifier.gold_fields:
        return ""
    value = row.get(verifier.gold_fields[0])
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _right_answers(verifier: Verifier, rows: list[dict], golds: list[str]) -> list[str | None]:
    """Each row's known-good completion: its `completion`, else its gold, if the verifier accepts it."""
    right: list[str | None] = [None] * len(rows)
    for candidates in ([r.get("completion") for r in rows], golds):
        picked = [i for i, c in enumerate(candidates) if right[i] is None and isinstance(c, str) and c]
        if not picked:
            continue
        rewards = _score(verifier, [rows[i] for i in picked], [candidates[i] for i in picked])
        for i, reward in zip(picked, rewards):
            if reward is not None and reward >= 0.5:
                right[i] = candidates[i]
    return right


def _candidates(gold: str, pool: list[str], row: dict) -> list[str]:
    labels = row.get("labels")
    extra = [str(x) for x in labels] if isinstance(labels, list) else []
    return [g for g in dict.fromkeys(pool + extra) if g != gold]


def _other_gold(gold: str, pool: list[str], row: dict) -> str | None:
    others = _candidates(gold, pool, row)
    return others[0] if gold and others else None


def _all_candidates(gold: str, pool: list[str], row: dict) -> str | None:
    others = _candidates(gold, pool, row)[:MAX_CANDIDATES - 1]
    if not gold or not others:
        return None
    middle = len(others) // 2
    return " ".join(others[:middle] + [gold] + others[middle:])


def _wrapped(gold: str, pool: list[str], row: dict) -> str | None:
    if not gold:
        return None
    decoys = _candidates(gold, pool, row)[:2]
    try:
        value = Decimal(gold.replace(",", ""))
        decoys += [str(value + 1), str(value - 1)]
    except InvalidOperation:
        pass
    if len(decoys) < 2:
        return None
    return f"Lorem ipsum {decoys[0]} dolor sit {gold} amet, consectetur {decoys[1]} adipiscing."


def _preview(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    if len(text) <= limit:
        return flat if flat == text else repr(text)
    return f"{flat[:limit]}... ({len(text)} chars)"
