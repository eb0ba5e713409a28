r"""`math`: 1.0 when the completion's final answer equals the gold `answer`, else 0.0.

What counts as the final answer, in order:
1. the last `\boxed{...}` (all boxed answers must agree, else 0: boxing every candidate is gaming);
2. else the last `<answer>...</answer>` block (the R1 format that the `format` verifier checks; as
   for boxes, all blocks must agree);
3. else the text after the last marker `the answer is`, `answer:` or `####`, up to the end of its
   sentence (the first number there counts: "The answer is 46 because ... 34");
4. else the whole completion when it is short (<= SHORT_CHARS after stripping), e.g. the tiny model's
   bare "46" for the prompt "12+34=". A longer completion with no box, tag or marker scores 0: it never
   committed to an answer, and taking its last number would reward streams of numbers.
Inside that text an `=` chain keeps its last side ("12 + 34 = 46" -> "46").

Comparison: when gold and answer are plain numbers (sign, digits, thousands commas, decimals, also
`$`, `%` or a trailing unit word around them) they are compared exactly with `Decimal`, without sympy:
the fast path, ~100x the throughput of TRL's `accuracy_reward` (bench/bench_verifiers.py). Fractions,
LaTeX and expressions go through math-verify (imported on first use), like TRL's `accuracy_reward`,
with one difference: a gold or answer without `$...$` is wrapped in it first, so `2\sqrt{2}` parses
whole (TRL's call reads only its leading 2).

Anti-gaming, where this departs from "take the last number":
- With a single-number gold, an answer that lists several different numbers ("46 or 47", "46, 47, 48",
  "1 2 3 ... 46") or hedges between them ("maybe 46, or 47") scores 0.
- The same value repeated ("46 46 46", "\boxed{46} ... \boxed{46.0}") scores 1: it commits to one
  value, so it cannot cover more candidates than the bare answer.
- Empty output scores 0; very long output is scanned in linear time (a boxed answer is at most
  MAX_ANSWER_CHARS long, so `\boxed{` spam cannot make the scan quadratic).
A gold that is not a number and that math-verify cannot parse gives None (not applicable), and
`check_gold` reports it before training.
"""

from __future__ import annotations

import re
import threading
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from rlft.verifiers.common import column, completion_text

SHORT_CHARS = 100  # a completion this short may be the bare answer ("46", "x = 46", "It is 46.")
MAX_ANSWER_CHARS = 300  # longer "answers" are not answers; also bounds the \boxed scan
MAX_BOXES = 20  # more boxed answers than this is spraying candidates, not answering

_NUM = r"[-+\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+\u2212]?\.\d+"
_NUM_RE = re.compile(_NUM)
# "$46", "46%", "46 apples": one number with a currency sign, a percent sign or a unit word
_PLAIN_RE = re.compile(rf"\s*(?:\\?\$)?\s*({_NUM})\s*(?:\\?%|[A-Za-z]{{2,}})?\s*")
_MARKER_RE = re.compile(r"the\s+(?:final\s+)?answer\s+is\b|answer\s*[:：]|####", re.IGNORECASE)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_LIST_SEP_RE = re.compile(
    r"(?:[\s,;|&]|\.{2,}|…|\b(?:or|and|either|maybe|perhaps|possibly|probably|etc)\b)*", re.IGNORECASE)
_SENTENCE_END_RE = re.compile(r"\.\s|;\s|,\s+(?=[A-Za-z])")  # "46, because ..." -> "46"; "46, 47" stays
_HEDGE_RE = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|probably)\b", re.IGNORECASE)
_OPERATOR_RE = re.compile(r"[*/^×÷\\]|\d\s*[-+]\s*[\d(]")
_TEXT_CMD_RE = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}\s*$")
_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_MATH_WORDS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "sqrt", "inf", "infty", "arcsin",
               "arccos", "arctan", "sinh", "cosh", "tanh", "max", "min", "mod", "gcd", "lcm", "det", "deg"}
_AMBIGUOUS = object()  # several different boxed answers


def math_reward(completions: list, answer: list, **kwargs: Any) -> list[float | None]:
    r"""1.0 when the final answer of each completion equals its gold `answer`, else 0.0.

    >>> math_reward(["46", "The answer is \\boxed{46}", "46 or 47", ""], answer=["46"] * 4)
    [1.0, 1.0, 0.0, 0.0]
    >>> math_reward([[{"role": "assistant", "content": "so x = \\frac{1}{2}"}]], answer=["0.5"])
    [1.0]
    """
    golds = column(answer, len(completions), "answer")
    return [score(completion_text(c), g) for c, g in zip(completions, golds)]


def score(text: str, gold: Any) -> float | None:
    """Reward of one completion text against one gold answer (None when the gold is unusable)."""
    gold_text = _gold_text(gold)
    if gold_text is None:
        return None
    gold_num = _plain_number(gold_text)
    if gold_num is None and _gold_problem(gold_text):
        return None
    kind, found = _locate(text)
    if found is None or found is _AMBIGUOUS:
        return 0.0
    return 1.0 if _matches(_clean(found), gold_text, gold_num, first=kind == "marker") else 0.0


def final_answer(text: str) -> Any:
    r"""The final-answer text of a completion, None when there is none.

    >>> final_answer("so we get \\boxed{\\frac{1}{2}}. Done")
    '\\frac{1}{2}'
    >>> final_answer("Add them. #### 46")
    '46'
    """
    found = _locate(text)[1]
    return None if found is _AMBIGUOUS else found


def _locate(text: str) -> tuple[str, Any]:
    """(kind, answer text): kind is boxed, tag, marker or short; answer None or _AMBIGUOUS when unusable."""
    stripped = text.strip()
    if not stripped:
        return "none", None
    if len(_BOXED_RE.findall(stripped)) > MAX_BOXES:
        return "boxed", _AMBIGUOUS
    boxed = _boxed(stripped)
    if boxed:
        values = {_value_key(b) for b in boxed}
        return "boxed", boxed[-1] if len(values) == 1 else _AMBIGUOUS
    tagged = _tagged(stripped)
    if tagged:
        if len(tagged) > MAX_BOXES or len({_value_key(t) for t in tagged}) > 1:
            return "tag", _AMBIGUOUS
        return "tag", tagged[-1] if 0 < len(tagged[-1]) <= MAX_ANSWER_CHARS else None
    marker = None
    for marker in _MARKER_RE.finditer(stripped):  # noqa: B007 - keep the last marker
        pass
    if marker is not None:
        rest = stripped[marker.end():].lstrip(" \t\r\n:：")
        line = _SENTENCE_END_RE.split(rest.partition("\n")[0], 1)[0].strip()
        return "marker", line or None
    return "short", stripped if len(stripped) <= SHORT_CHARS else None


def check_gold(field: str, value: Any) -> str | None:
    """None when `value` is a usable gold answer, else why not."""
    text = _gold_text(value)
    if text is None:
        return f"expected a number or a math expression, got {type(value).__name__}"
    if not text:
        return "empty answer"
    return None if _plain_number(text) is not None else _gold_problem(text)


# ----------------------------------------------------------------------------- extraction


def _boxed(text: str) -> list[str]:
    """Contents of the top-level \\boxed{...} groups; each scan stops after MAX_ANSWER_CHARS."""
    found, end = [], 0
    for m in _BOXED_RE.finditer(text):
        if m.start() < end:  # nested inside the previous box
            continue
        depth, i, limit = 1, m.end(), min(len(text), m.end() + MAX_ANSWER_CHARS)
        while i < limit and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            inner = text[m.end():i - 1].strip()
            while (nested := _boxed(inner)) and _BOXED_RE.match(inner) and inner.endswith("}"):
                inner = nested[-1]
            found.append(inner)
            end = i
    return found


def _tagged(text: str) -> list[str]:
    """Contents of the <answer>...</answer> blocks, in one linear pass."""
    found = []
    for piece in text.split("<answer>")[1:]:
        inner, closed, _ = piece.partition("</answer>")
        if closed:
            found.append(inner.strip())
    return found


def _clean(text: str) -> str:
    """Strip what surrounds an answer: spaces, end punctuation, one pair of $ or \\( \\), thin spaces."""
    t = text.strip().rstrip(".!;").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if t.startswith(left) and t.endswith(right) and len(t) > len(left) + len(right) \
                and left not in t[len(left):-len(right)]:
            t = t[len(left):-len(right)].strip()
            break
    for spacing, plain in (("\\,", ""), ("\\!", ""), ("\\ ", " "), ("\\left", ""), ("\\right", "")):
        t = t.replace(spacing, plain)
    untexted = _TEXT_CMD_RE.sub("", t).strip()  # "46 \\text{ apples}" -> "46"
    return untexted or t


def _gold_text(gold: Any) -> str | None:
    if isinstance(gold, bool) or gold is None or isinstance(gold, (list, dict)):
        return None
    text = str(gold).strip()
    if "####" in text:  # GSM8K-style gold: reasoning, then "#### 72"
        text = text.rsplit("####", 1)[1].strip()
    boxed = _boxed(text)
    text = _clean(boxed[-1] if boxed else text)
    if "=" in text and text.rsplit("=", 1)[1].strip():  # "x = 46": the value, as for answers
        text = _clean(text.rsplit("=", 1)[1])
    return text


def _value_key(text: str) -> Any:
    value = _plain_number(_clean(text))
    return _clean(text).replace(" ", "") if value is None else value


@lru_cache(maxsize=4096)
def _gold_problem(text: str) -> str | None:
    """Why a non-numeric gold cannot be used: words are not math (math-verify reads them as symbols)."""
    words = [w for w in _WORD_RE.findall(text) if w.lower() not in _MATH_WORDS]
    if words or not _gold_parsed(text):
        return f"cannot parse {text[:60]!r} as a number or LaTeX math"
    return None


def _plain_number(text: str) -> Decimal | None:
    m = _PLAIN_RE.fullmatch(text)
    if m is None:
        return None
    try:
        return Decimal(m.group(1).replace(",", "").replace("\u2212", "-"))
    except InvalidOperation:
        return None


# ----------------------------------------------------------------------------- comparison


def _matches(answer: str, gold_text: str, gold_num: Decimal | None, first: bool = False) -> bool:
    """Does the answer text equal the gold? `first`: after a marker the answer leads its sentence."""
    if len(answer) > MAX_ANSWER_CHARS or not answer:
        return False
    if "=" in answer and answer.rsplit("=", 1)[1].strip():
        answer = _clean(answer.rsplit("=", 1)[1])
    if gold_num is None:
        return _verify(gold_text, answer)
    value = _plain_number(answer)
    if value is not None:
        return value == gold_num
    if _OPERATOR_RE.search(answer):  # an expression or LaTeX: let math-verify evaluate it
        return _verify(gold_text, answer)
    values = [Decimal(n.replace(",", "").replace("\u2212", "-")) for n in _NUM_RE.findall(answer)]
    if not values:
        return False
    listed = _LIST_SEP_RE.fullmatch(_NUM_RE.sub(" ", answer)) or _HEDGE_RE.search(answer)
    if len(set(values)) > 1 and listed:
        return False  # a list of candidates, or hedging between them
    return (values[0] if first else values[-1]) == gold_num  # "The sum of 12 and 34 is 46"


def _verify(gold_text: str, answer: str) -> bool:
    gold = _gold_parsed(gold_text)
    if not gold:
        return False
    from math_verify import parse, verify

    timeout = _timeout()
    try:
        parsed = parse(_latex(answer), parsing_timeout=timeout)
        return bool(parsed) and bool(verify(gold, parsed, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 - math-verify raises on some malformed LaTeX and on timeouts
        return False


@lru_cache(maxsize=4096)
def _gold_parsed(gold_text: str) -> list:
    from math_verify import parse

    try:
        return parse(_latex(gold_text), parsing_timeout=_timeout())
    except Exception:  # noqa: BLE001 - an unparseable gold is reported by check_gold
        return []


def _latex(text: str) -> str:
    """math-verify finds LaTeX between $...$ (a bare \\sqrt{2} or x^2+1 is not extracted)."""
    return text if "$" in text or "\\boxed" in text else f"${text}$"


def _timeout() -> int | None:
    # math-verify times out with signal.alarm, which works only in the main thread (as in TRL).
    return 5 if threading.current_thread() is threading.main_thread() else None
