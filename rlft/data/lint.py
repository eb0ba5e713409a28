"""Data lint: the problems in a training file that make a run learn nothing, or learn the wrong thing.

Pure and fast (standard library only, one pass per check; 10k rows take milliseconds), so `rlft data lint`
and `rlft choose` can run it before any model loads. Each check returns a `Finding`:

  level    error (the rows cannot train as they are: fix them first), warning (they train, but watch this),
           info (a number worth knowing, e.g. the length balance of preference pairs)
  code     a stable name for scripts and tests (identical_pairs, length_bias, bad_gold, ...)
  message  one line, naming the fix where there is one
  lines    1-based line numbers of the first rows concerned (at most `MAX_LINES`), `count` = all of them

Kinds of rows (`detect_kind`), named after the signal they carry:
  demonstrations  prompt + completion, messages (a chat with an assistant turn), or text
  pairs           prompt + chosen + rejected (strings or message lists)
  verifiable      prompt + gold fields a verifier reads (answer, label, tests, schema), no completion
  ratings         prompt + completion + a numeric score (rating, score, reward, stars)
  thumbs          prompt + completion + label (true/false: thumbs up/down on one completion, for KTO)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from rlft.data.bounded import cell_problems
from rlft.data.rows import (
    DEFAULT_GOLD_FIELDS,
    _as_number,
    _data,
    _empty,
    _key,
    _line,
    _majority,
    _safe_check,
    completion_field,
    gold_field_names,
    rating_field,
    row_kinds,
    text_of,
)
from rlft.errors import UserError

KINDS = ("demonstrations", "pairs", "verifiable", "ratings", "thumbs")
LEVELS = ("error", "warning", "info")
MAX_LINES = 20

# A preference set where the chosen reply is the longer one in 80% of pairs (or the shorter one in 80%)
# teaches "longer (shorter) is better"; the shipped support pairs sit at 38-54% (data/README.md).
LENGTH_BIAS_SHARE = 0.8
# Demonstrations: a completion 10x the median length (and over 2,000 characters) is probably a pasted
# document or a runaway generation; one at 1/10 of a median of 50+ characters is probably truncated.
LONG_FACTOR, LONG_MIN_CHARS = 10, 2000
SHORT_FACTOR, SHORT_MIN_MEDIAN = 10, 50
# The prompt counts as leaked into an answer when the answer starts with it, or contains it and the prompt
# is long enough (40+ characters) that this is not a coincidence.
LEAK_MIN_CHARS = 40


@dataclass
class Finding:
    """One lint result; `lines` holds the first MAX_LINES line numbers, `count` how many rows in all."""

    level: str
    code: str
    message: str
    lines: list[int] = field(default_factory=list)
    count: int = 0
    source: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finding(level: str, code: str, message: str, lines: list[int] | None = None, count: int | None = None,
             **detail) -> Finding:
    lines = lines or []
    return Finding(level, code, message, lines[:MAX_LINES], len(lines) if count is None else count,
                   detail=detail)


def _lines_text(lines: list[int], count: int) -> str:
    if not lines:
        return ""
    shown = ", ".join(str(n) for n in lines[:5])
    return f" (line {shown}{', ...' if count > 5 else ''})" if count == 1 else \
        f" (lines {shown}{', ...' if count > 5 else ''})"


# --------------------------------------------------------------------------- lint

def lint_rows(rows: list[Any], kind: str | None = None, verifier: Any = None) -> list[Finding]:
    """Every finding for `rows` read as `kind` (detected when None); `verifier` checks the gold fields."""
    if not rows:
        return [_finding("error", "no_rows", "no rows")]
    kinds = row_kinds(rows)
    kind = kind or _majority(kinds)
    if kind == "verifiable":  # prompt-only rows suit a verifier that reads no gold field (format)
        kinds = [k or ("verifiable" if "prompt" in _data(r) else None) for k, r in zip(kinds, rows)]
    if kind is None:
        cols = sorted({k for r in rows[:50] for k in _data(r)})
        raise UserError(f"cannot tell what the rows are: columns {', '.join(cols) or '(none)'}",
                        "use prompt+completion or messages (demonstrations), prompt+chosen+rejected (pairs), "
                        "prompt+answer/label/tests/schema (verifiable), or prompt+completion+rating (ratings)")
    if kind not in KINDS:
        raise UserError(f"unknown kind '{kind}'", f"use one of: {', '.join(KINDS)}")
    findings = _shape_findings(rows, kinds, kind)
    findings += {"pairs": _lint_pairs, "demonstrations": _lint_demonstrations,
                 "verifiable": lambda rs: _lint_verifiable(rs, verifier),
                 "ratings": _lint_ratings, "thumbs": _lint_thumbs}[kind](rows)
    findings += _cell_findings(rows)
    source = getattr(rows[0], "source", None)
    for f in findings:
        f.source = f.source or source
    order = {lvl: i for i, lvl in enumerate(LEVELS)}
    return sorted(findings, key=lambda f: order[f.level])


def _cell_findings(rows: list[Any]) -> list[Finding]:
    """Values training would refuse (integers beyond 64 bits, lone surrogates), one error each, by line."""
    return [_finding("error", "bad_value", problem)
            for problem in cell_problems([r for r in rows if hasattr(r, "data")])[:MAX_LINES]]


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.level == "error" for f in findings)


def _shape_findings(rows: list[Any], kinds: list[str | None], kind: str) -> list[Finding]:
    other = [_line(r, i) for i, (r, k) in enumerate(zip(rows, kinds)) if k != kind]
    if not other:
        return []
    return [_finding("error", "mixed_shapes", f"{len(other)} of {len(rows)} rows are not {kind} rows"
                     f"{_lines_text(other, len(other))}: one file should hold one kind of row", other)]


def _row_key(d: dict[str, Any]) -> tuple:
    return tuple((k, v if isinstance(v, (str, int, float, bool)) or v is None else _key(v)) for k, v in d.items())


def _duplicates(rows: list[Any], key) -> list[int]:
    seen: set = set()
    dup = []
    for i, r in enumerate(rows):
        k = key(_data(r))
        if k in seen:
            dup.append(_line(r, i))
        else:
            seen.add(k)
    return dup


def _dup_finding(dup: list[int], n: int, what: str, code: str) -> list[Finding]:
    if not dup:
        return []
    return [_finding("warning", code, f"{len(dup)} of {n} rows repeat an earlier {what}"
                     f"{_lines_text(dup, len(dup))}: repeats weigh those rows double; drop them", dup)]


def _empty_findings(rows: list[Any], fields: tuple[str, ...]) -> list[Finding]:
    out = []
    for name in fields:
        bad = [_line(r, i) for i, r in enumerate(rows) if _empty(_data(r).get(name))]
        if bad:
            out.append(_finding("error", "empty_field", f"field '{name}' is missing or empty in {len(bad)} rows"
                                f"{_lines_text(bad, len(bad))}", bad, field=name))
    return out


# ----- pairs

def _lint_pairs(rows: list[Any]) -> list[Finding]:
    n = len(rows)
    out = _empty_findings(rows, ("prompt", "chosen", "rejected")) if any("prompt" in _data(r) for r in rows) \
        else _empty_findings(rows, ("chosen", "rejected"))
    identical = [_line(r, i) for i, r in enumerate(rows)
                 if not _empty(_data(r).get("chosen"))
                 and _key(_data(r).get("chosen")) == _key(_data(r).get("rejected"))]
    if identical:
        msg = (f"chosen equals rejected in all {n} pairs: there is no preference to learn" if len(identical) == n
               else f"chosen equals rejected in {len(identical)} of {n} pairs{_lines_text(identical, len(identical))}:"
                    " those pairs teach nothing; drop them")
        out.append(_finding("error", "identical_pairs", msg, identical, usable=n - len(identical)))
    out += _dup_finding(_duplicates(rows, lambda d: (_key(d.get("prompt")), _key(d.get("chosen")),
                                                     _key(d.get("rejected")))), n, "(prompt, chosen, rejected)",
                        "duplicate_pairs")
    out += _leak_findings(rows)
    out += _length_findings(rows)
    return out


def _leaks(prompt: Any, answer: Any) -> bool:
    if _empty(prompt) or _empty(answer):
        return False
    if isinstance(prompt, list) and isinstance(answer, list):  # chat: the answer repeats the prompt's turns
        return len(answer) > len(prompt) and answer[: len(prompt)] == prompt
    p, a = text_of(prompt).strip(), text_of(answer).strip()
    return a.startswith(p) or (len(p) >= LEAK_MIN_CHARS and p in a)


def _leak_findings(rows: list[Any]) -> list[Finding]:
    leaked = [_line(r, i) for i, r in enumerate(rows)
              if _leaks(_data(r).get("prompt"), _data(r).get("chosen"))
              or _leaks(_data(r).get("prompt"), _data(r).get("rejected"))]
    if not leaked:
        return []
    return [_finding("warning", "prompt_in_answer", f"the prompt text is repeated inside chosen/rejected in "
                     f"{len(leaked)} of {len(rows)} pairs{_lines_text(leaked, len(leaked))}: the trainer adds the "
                     "prompt itself, so strip it from the answers", leaked)]


def length_stats(rows: list[Any]) -> dict[str, float]:
    """Share of pairs where chosen is longer (characters), and the mean per-pair length ratio."""
    longer = shorter = 0
    ratios = []
    for r in rows:
        d = _data(r)
        c, j = len(text_of(d.get("chosen"))), len(text_of(d.get("rejected")))
        longer += c > j
        shorter += c < j
        if j:
            ratios.append(c / j)
    n = max(len(rows), 1)
    return {"chosen_longer": longer / n, "chosen_shorter": shorter / n,
            "mean_length_ratio": sum(ratios) / len(ratios) if ratios else 0.0}


def _length_findings(rows: list[Any]) -> list[Finding]:
    s = length_stats(rows)
    longer, ratio = s["chosen_longer"], s["mean_length_ratio"]
    numbers = f"chosen is longer in {longer:.1%} of pairs, mean len(chosen)/len(rejected) {ratio:.2f}"
    if s["chosen_longer"] >= LENGTH_BIAS_SHARE or s["chosen_shorter"] >= LENGTH_BIAS_SHARE:
        side = "longer" if longer >= LENGTH_BIAS_SHARE else "shorter"
        return [_finding("warning", "length_bias", f"length bias: {numbers}; the model can learn '{side} is "
                         f"better' instead of the preference: balance lengths, or watch output length",
                         count=len(rows), **s)]
    return [_finding("info", "length_balance", numbers, count=len(rows), **s)]


# ----- demonstrations

def _completion_text(d: dict) -> Any:
    if "messages" in d:
        msgs = d["messages"] if isinstance(d["messages"], list) else []
        return "\n".join(str(m.get("content") or "") for m in msgs
                         if isinstance(m, dict) and m.get("role") == "assistant")
    f = completion_field(d)
    if f:
        return d.get(f)
    return d.get("text")


def _lint_demonstrations(rows: list[Any]) -> list[Finding]:
    n = len(rows)
    empty = [_line(r, i) for i, r in enumerate(rows) if _empty(_completion_text(_data(r)))]
    out = []
    if empty:
        out.append(_finding("error", "empty_completion", f"{len(empty)} of {n} rows have no completion (or no "
                            f"non-empty assistant turn){_lines_text(empty, len(empty))}: nothing to learn from them",
                            empty))
    no_prompt = [_line(r, i) for i, r in enumerate(rows)
                 if completion_field(_data(r)) and _empty(_data(r).get("prompt"))]
    if no_prompt:
        out.append(_finding("error", "empty_field", f"field 'prompt' is missing or empty in {len(no_prompt)} rows"
                            f"{_lines_text(no_prompt, len(no_prompt))}", no_prompt, field="prompt"))
    out += _dup_finding(_duplicates(rows, _row_key), n, "row",
                        "duplicate_rows")
    lengths = [(len(text_of(_completion_text(_data(r))).strip()), _line(r, i)) for i, r in enumerate(rows)]
    sizes = sorted(length for length, _ in lengths)
    median = sizes[len(sizes) // 2] if sizes else 0
    long_ = [ln for length, ln in lengths if length > max(LONG_FACTOR * median, LONG_MIN_CHARS)]
    if long_:
        out.append(_finding("warning", "long_outliers", f"{len(long_)} completions are over "
                            f"{max(LONG_FACTOR * median, LONG_MIN_CHARS):,} characters ({LONG_FACTOR}x the median of "
                            f"{median}){_lines_text(long_, len(long_))}: check they are not pasted documents",
                            long_, median=median))
    if median >= SHORT_MIN_MEDIAN:
        short = [ln for length, ln in lengths if 0 < length < median / SHORT_FACTOR]
        if short:
            out.append(_finding("warning", "short_outliers", f"{len(short)} completions are under "
                                f"{median / SHORT_FACTOR:.0f} characters (1/{SHORT_FACTOR} of the median of {median})"
                                f"{_lines_text(short, len(short))}: check they are not truncated", short,
                                median=median))
    return out


# ----- verifiable

def _lint_verifiable(rows: list[Any], verifier: Any) -> list[Finding]:
    n = len(rows)
    out = _empty_findings(rows, ("prompt",))
    fields = tuple(getattr(verifier, "gold_fields", ()) or ()) if verifier is not None else ()
    if verifier is None:
        gold = gold_field_names()
        missing = [_line(r, i) for i, r in enumerate(rows) if not any(g in _data(r) for g in gold)]
        if missing:
            out.append(_finding("error", "missing_gold", f"{len(missing)} rows carry no gold field "
                                f"({', '.join(gold)}){_lines_text(missing, len(missing))}", missing))
        out.append(_finding("info", "no_verifier", "no registered verifier reads these gold fields: pass "
                            "--verifier NAME to check them"))
    for name in fields:
        missing, bad, why = [], [], None
        for i, r in enumerate(rows):
            d = _data(r)
            if name not in d or d[name] is None or (isinstance(d[name], str) and not d[name].strip()):
                missing.append(_line(r, i))
                continue
            reason = _safe_check(verifier, name, d[name])
            if reason is not None:
                bad.append(_line(r, i))
                why = why or reason
        if missing:
            out.append(_finding("error", "missing_gold", f"field '{name}' (read by the {verifier.name} verifier) is "
                                f"missing or empty in {len(missing)} rows{_lines_text(missing, len(missing))}",
                                missing, field=name))
        if bad:
            out.append(_finding("error", "bad_gold", f"the {verifier.name} verifier cannot parse '{name}' in "
                                f"{len(bad)} of {n} rows{_lines_text(bad, len(bad))}, e.g. {why}: those rows "
                                "would score 0 whatever the model says", bad, field=name))
    out += _dup_finding(_duplicates(rows, lambda d: _key(d.get("prompt"))), n, "prompt", "duplicate_prompts")
    key_field = fields[-1] if fields else next((g for g in DEFAULT_GOLD_FIELDS if g in _data(rows[0])), None)
    if key_field and n >= 10:
        values = Counter(_key(_data(r).get(key_field)) for r in rows)
        top, top_n = values.most_common(1)[0]
        if top_n == n:
            out.append(_finding("warning", "constant_gold", f"every row expects {key_field} = {top[:60]!r}: a model "
                                "that always says that gets full reward without reading the prompt",
                                count=n, field=key_field))
    return out


# ----- ratings

def rating_stats(rows: list[Any]) -> dict[str, Any]:
    """Scale, top-rated rows, and how many prompts have two or more differently rated replies (pairable)."""
    values, by_prompt = [], defaultdict(set)
    for r in rows:
        d = _data(r)
        f = rating_field(d)
        v = _as_number(d.get(f)) if f else None
        if v is None:
            continue
        values.append(v)
        by_prompt[_key(d.get("prompt"))].add(v)
    if not values:
        return {"rated": 0, "min": None, "max": None, "distinct": 0, "top_threshold": None, "top_rows": 0,
                "pairable_prompts": 0}
    lo, hi = min(values), max(values)
    # "top-rated" = the top quarter of the scale used: 4 and 5 on a 1-5 scale, >= 0.75 on 0-1, True on bool.
    threshold = hi - (hi - lo) * 0.25 if hi > lo else hi
    return {"rated": len(values), "min": lo, "max": hi, "distinct": len(set(values)),
            "top_threshold": threshold, "top_rows": sum(v >= threshold for v in values),
            "pairable_prompts": sum(len(s) >= 2 for s in by_prompt.values())}


def _lint_ratings(rows: list[Any]) -> list[Finding]:
    n = len(rows)
    out = []
    bad = [_line(r, i) for i, r in enumerate(rows) if rating_field(_data(r)) is None]
    if bad:
        out.append(_finding("error", "bad_rating", f"{len(bad)} of {n} rows have no numeric rating"
                            f"{_lines_text(bad, len(bad))}", bad))
    empty = [_line(r, i) for i, r in enumerate(rows) if _empty(_completion_text(_data(r)))]
    if empty:
        out.append(_finding("error", "empty_completion", f"{len(empty)} of {n} rows have an empty reply"
                            f"{_lines_text(empty, len(empty))}", empty))
    out += _dup_finding(_duplicates(rows, _row_key), n, "row",
                        "duplicate_rows")
    s = rating_stats(rows)
    if s["rated"] and s["distinct"] == 1:
        out.append(_finding("error", "constant_rating", f"every reply is rated {s['max']:g}: ratings that never "
                            "differ carry no signal", count=n, **s))
    elif s["rated"]:
        out.append(_finding("info", "rating_scale", f"ratings {s['min']:g}..{s['max']:g}; {s['top_rows']} of "
                            f"{s['rated']} replies are top-rated (>= {s['top_threshold']:g}); {s['pairable_prompts']} "
                            "prompts have two or more differently rated replies (pairable)", count=n, **s))
    return out


# ----- thumbs

def _lint_thumbs(rows: list[Any]) -> list[Finding]:
    """Labels must be booleans, both must occur; a rare class (< 10%) gets the KTO weights that compensate."""
    from rlft.data.thumbs import balance_warning, label_value

    n = len(rows)
    out = _empty_findings(rows, ("prompt", "completion"))
    bad = [_line(r, i) for i, r in enumerate(rows) if label_value(_data(r).get("label")) is None]
    if bad:
        out.append(_finding("error", "bad_label", f"{len(bad)} of {n} rows have a label that is not true/false"
                            f"{_lines_text(bad, len(bad))}: write JSON true (thumbs up) or false", bad))
    labels = [label_value(_data(r).get("label")) for r in rows]
    n_true, n_false = labels.count(True), labels.count(False)
    if n_true + n_false and not (n_true and n_false):
        out.append(_finding("error", "one_label", f"every label is {bool(n_true)}: KTO needs desirable (true) and "
                            "undesirable (false) completions", count=n))
    elif (why := balance_warning(n_true, n_false)) is not None:
        out.append(_finding("warning", "label_imbalance", why, count=n, true=n_true, false=n_false))
    else:
        out.append(_finding("info", "label_balance", f"{n_true} true, {n_false} false", count=n, true=n_true,
                            false=n_false))
    out += _dup_finding(_duplicates(rows, _row_key), n, "row", "duplicate_rows")
    return out
