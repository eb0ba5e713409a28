"""Row shapes: which signal a row carries (demonstrations, pairs, verifiable, ratings, thumbs), its text and
fields, and which registered verifier can read a file's gold values.

Pure and fast (standard library; the verifier registry is imported lazily). Shared by rlft/data/lint.py (`rlft
data lint`) and rlft/choose/from_data.py (`rlft choose --data`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

# Gold fields the shipped verifiers read; the registry's own `gold_fields` are added when it is importable.
DEFAULT_GOLD_FIELDS = ("answer", "label", "tests", "schema", "pattern")
RATING_FIELDS = ("rating", "score", "reward", "stars")
COMPLETION_FIELDS = ("completion", "response")


# --------------------------------------------------------------------------- text helpers

def text_of(value: Any) -> str:
    """The text of a field: a string as is, a message list as its contents joined, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value):
        return "\n".join(str(m.get("content") or "") for m in value)
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list):
        return not value or not text_of(value).strip()
    return False


def _key(value: Any) -> str:
    """A hashable, exact form of a field value (for duplicates and equality of message lists)."""
    return value if isinstance(value, str) else text_of(value)


def completion_field(d: dict) -> str | None:
    return next((k for k in COMPLETION_FIELDS if k in d), None)


def rating_field(d: dict) -> str | None:
    if "label" not in d and not any(k in d for k in RATING_FIELDS):
        return None
    for k in RATING_FIELDS:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return k
        if isinstance(v, str) and _as_number(v) is not None:  # CSV cells are text
            return k
    if isinstance(d.get("label"), bool):  # KTO-style thumbs up / down on one completion
        return "label"
    return None


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


# --------------------------------------------------------------------------- kinds

def gold_field_names() -> tuple[str, ...]:
    """The gold fields any registered verifier reads (plus the defaults)."""
    names = list(DEFAULT_GOLD_FIELDS)
    for v in verifier_registry().values():
        names += [f for f in getattr(v, "gold_fields", ()) if f not in names]
    return tuple(names)


def verifier_registry() -> dict[str, Any]:
    """`rlft.verifiers.REGISTRY` (imported here, not at module level: `rlft data lint` without gold needs none)."""
    from rlft.verifiers import REGISTRY

    return REGISTRY


def row_kind(d: dict[str, Any], gold: Iterable[str] = DEFAULT_GOLD_FIELDS) -> str | None:
    """The kind of one row from its fields (None when it is none of them)."""
    if "chosen" in d and "rejected" in d:
        return "pairs"
    completion = completion_field(d)
    if completion and "label" in d and not any(k in d for k in RATING_FIELDS):
        return "thumbs"
    if (completion or "messages" in d) and rating_field(d):
        return "ratings"
    if "messages" in d or completion or ("text" in d and "prompt" not in d):
        return "demonstrations"
    if "prompt" in d and any(g in d for g in gold):
        return "verifiable"
    return None


def detect_kind(rows: list[Any]) -> str | None:
    """The kind most rows have (rows may be `rlft.data.Row`s or plain dicts); None if no row has one."""
    return _majority(row_kinds(rows))


def row_kinds(rows: list[Any]) -> list[str | None]:
    gold = gold_field_names()
    return [row_kind(_data(r), gold) for r in rows]


def _majority(kinds: list[str | None]) -> str | None:
    counts = Counter(kinds)
    counts.pop(None, None)
    return counts.most_common(1)[0][0] if counts else None


def _data(row: Any) -> dict[str, Any]:
    return row.data if hasattr(row, "data") else row


def _line(row: Any, i: int) -> int:
    return getattr(row, "line", i + 1)


# --------------------------------------------------------------------------- verifier choice

def pick_verifier(rows: list[Any], registry: dict[str, Any] | None = None, sample: int = 200):
    """The registered verifier whose gold fields the rows carry and can parse best, or None.

    Candidates are the verifiers all of whose `gold_fields` are present in most rows; among them the one
    whose `check_gold` accepts the largest share of a sample of rows wins, ties going to the verifier that
    reads more fields (json reads schema + answer, math only answer).
    """
    registry = verifier_registry() if registry is None else registry
    if not registry or not rows:
        return None
    head = [_data(r) for r in rows[:sample]]
    best, best_score = None, None
    for name, v in registry.items():
        fields = tuple(getattr(v, "gold_fields", ()) or ())
        if not fields or getattr(v, "forgeable", False):
            continue
        present = sum(all(f in d for f in fields) for d in head)
        if present * 2 <= len(head):
            continue
        ok = 0
        for d in head:
            if all(f in d and _safe_check(v, f, d[f]) is None for f in fields):
                ok += 1
        score = (ok / len(head), len(fields), -list(registry).index(name))
        if best_score is None or score > best_score:
            best, best_score = v, score
    return best


def _safe_check(verifier: Any, field_name: str, value: Any) -> str | None:
    try:
        return verifier.check_gold(field_name, value)
    except Exception as exc:  # noqa: BLE001 - a verifier bug must not crash the lint: report it as unparseable
        return f"{type(exc).__name__}: {exc}"
