"""`label` and `label_partial`: classification rewards against the gold `label`.

`label`: 1.0 when the completion is exactly the label, after stripping spaces, quotes and end
punctuation and ignoring case ("Billing." is billing); else 0.0. Never "contains": with a contains-check
the answer "billing bug account" names every label and scores 1 on every ticket (the reward hack the
seeds describe).

`label_partial` (opt-in partial credit): 1.0 for the bare right label; 0.5 when the right label appears
as a whole word inside other words and NO other known label appears ("It is billing, I think");
0.0 otherwise. The known labels are the row's optional `labels` field (a list), else the set of gold
labels in the batch. Give `labels` when you can: with a batch whose golds are all "billing", the
batch cannot tell that "bug" is a label, so "billing bug" would earn 0.5.
"""

from __future__ import annotations

import re
from typing import Any

from rlft.verifiers.common import column, completion_text

_STRIP = " \t\r\n\"'`.,!?;:*()[]{}<>"


def label_reward(completions: list, label: list, **kwargs: Any) -> list[float | None]:
    """1.0 when the completion is exactly the gold label (case and end punctuation ignored).

    >>> label_reward(["billing", " Billing. ", "billing bug account", "bug"], label=["billing"] * 4)
    [1.0, 1.0, 0.0, 0.0]
    """
    golds = column(label, len(completions), "label")
    out: list[float | None] = []
    for c, gold in zip(completions, golds):
        g = normalize(gold)
        out.append(None if not g else float(normalize(completion_text(c)) == g))
    return out


def label_partial_reward(completions: list, label: list, labels: list | None = None,
                         **kwargs: Any) -> list[float | None]:
    """1.0 for the bare label, 0.5 for the label among other words with no other label, else 0.0.

    >>> label_partial_reward(["billing", "It is billing, I think", "billing bug account"],
    ...                      label=["billing"] * 3, labels=[["billing", "bug", "account"]] * 3)
    [1.0, 0.5, 0.0]
    """
    n = len(completions)
    golds = column(label, n, "label")
    row_labels = column(labels, n, "labels") if labels is not None else [None] * n
    batch = {normalize(g) for g in golds} - {""}
    out: list[float | None] = []
    for c, gold, known in zip(completions, golds, row_labels):
        g = normalize(gold)
        if not g:
            out.append(None)
            continue
        text = normalize(completion_text(c))
        if text == g:
            out.append(1.0)
            continue
        others = ({normalize(x) for x in known} if isinstance(known, (list, tuple)) else batch) - {g, ""}
        if _has_word(text, g) and not any(_has_word(text, o) for o in others):
            out.append(0.5)
        else:
            out.append(0.0)
    return out


def normalize(value: Any) -> str:
    """Casefolded label with spaces collapsed and surrounding quotes/punctuation removed."""
    if value is None or isinstance(value, (list, dict)):
        return ""
    return " ".join(str(value).split()).strip(_STRIP).casefold()


def check_gold(field: str, value: Any) -> str | None:
    """None when `value` is a usable gold label, else why not."""
    if field == "labels":
        return None if isinstance(value, list) and all(normalize(v) for v in value) else \
            "expected a list of label strings"
    if isinstance(value, (list, dict, bool)):
        return f"expected a label string, got {type(value).__name__}"
    if not normalize(value):
        return "empty label"
    return None


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None
