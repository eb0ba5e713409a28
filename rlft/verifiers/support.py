"""`support_policy`: the held-out truth of a support store (data/make_store.py): does the reply decide as the
store's policy does?

Row fields: `decision` (refund / exchange / repair / none: what the policy decides for this message), `policy`
({refund_days, exchange_days, warranty_months}) and, optionally, the customer's own count, `days` or `months`.
The score is 1.0 when the reply's decision is the row's decision and every policy number it states is the
store's; else 0.0. In detail:

- The reply is cut into clauses (at . ! ? ; and at "but" / "instead"). A clause names an action when it has a
  word for it: refund (refund, money back, reimburse), exchange (exchange, swap, trade), repair (repair,
  replace, fix, cover(s/ed), warranty). A clause that names an action is a denial when it has a negation
  ("not", "n't", "cannot", "no longer", "past", "passed", "expired", "ended", "too late", "only ... within",
  "unfortunately", a clause opening with "sorry," or "I'm sorry,", "final"), an offer when it has an offer word
  ("yes", "sure", "of course", "we can", "we will", "you can", "happy to", "is fine", "possible", "allowed",
  "eligible", "qualify", "covered", "inside", "within" ...), and says nothing when it is conditional ("if", "may",
  "might") or has neither (keyword spam: "refund refund refund" offers nothing).
  "No problem" / "no worries" are not negations.
- Decisions: `refund` needs a refund offered and not denied; `exchange` an exchange offered and no refund
  offered; `repair` a repair offered and no refund or exchange offered; `none` something denied and nothing
  offered. An action both offered and denied is a contradiction (0). A reply that neither offers nor denies
  anything evades (0).
- Numbers: each count with a unit ("14 days", "30-day", "1 year", "24-month", "3 weeks") must be a policy number
  of that unit (refund_days or exchange_days for days; warranty_months for months, warranty_months / 12 for
  years) or the customer's own count (`days`, `days` / 7 weeks, `months`). Any other count is a wrong policy
  number (0), even when the decision is right: the hard negatives of the pairs.

It reads text with patterns, not a model: it is exact on the generator's wording (tests/test_support_truth.py
checks every chosen and rejected reply of the shipped store, a table of paraphrases and adversarial cases),
and a reply in wording far from the store's may be misread. Where it departs from a human grader: it does
not judge tone (a rude reply with the right decision scores 1) or receipts, gift cards and shipping damage
(the store data/make_store.py writes has none of those).
"""

from __future__ import annotations

import re
from typing import Any

from rlft.verifiers.common import column, completion_text

DECISIONS = ("refund", "exchange", "repair", "none")
POLICY_KEYS = ("refund_days", "exchange_days", "warranty_months")

_ACTIONS = {
    "refund": re.compile(r"\b(refund\w*|money back|reimburs\w*|pay you back|get your money)\b"),
    "exchange": re.compile(r"\b(exchang\w*|swap\w*|trade\w*)\b"),
    "repair": re.compile(r"\b(repair\w*|replac\w*|fix\w*|covered|covers|cover|warranty)\b"),
}
_NEG = re.compile(r"\b(not|no|never|cannot|can't|won't|isn't|aren't|doesn't|don't|unable|no longer|past|passed|"
                  r"expired|ended|end|ends|closed|too late|unfortunately|final|only possible|possible only|"
                  r"only within|denied|declined?)\b|n't\b")
_POS = re.compile(r"\b(yes|sure|of course|we can|we will|we'll|we would|you can|you may still|you'll|can still|"
                  r"happy to|glad to|is fine|are fine|possible|allowed|eligible|qualify|qualifies|covered|covers|"
                  r"inside|within|no problem|certainly|absolutely|go ahead|bring|send|return the)\b")
_SORRY = re.compile(r"^(i'm |i am |we're |we are )?(so |very )?sorry,")
_COND = re.compile(r"\b(if|may|might|whether|unless)\b")
_NOT_NEG = re.compile(r"\b(no problem|no worries|not a problem|no issue|at no cost|no charge|no extra cost)\b")
_SPLIT = re.compile(r"[.!?;\n]+|,?\s+\bbut\b\s+|,?\s+\binstead\b|,\s+so\s+")
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "eleven": 11, "twelve": 12, "fourteen": 14, "fifteen": 15, "twenty": 20, "thirty": 30,
          "forty": 40, "forty-five": 45, "sixty": 60, "ninety": 90, "a": 1, "an": 1}
_COUNT = re.compile(r"\b(\d+|" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")[ -](day|month|year|week)s?\b")


def _clauses(text: str) -> list[str]:
    return [c.strip() for c in _SPLIT.split(text.lower()) if c and c.strip()]


def read_reply(text: str) -> tuple[set[str], set[str]]:
    """(actions offered, actions denied) in a reply.

    >>> read_reply("Sorry, the 30-day refund window has passed, but we can exchange the hoodie.")
    ({'exchange'}, {'refund'})
    """
    offered: set[str] = set()
    denied: set[str] = set()
    for clause in _clauses(text):
        named = {a for a, pat in _ACTIONS.items() if pat.search(clause)}
        if not named or _COND.search(clause):
            continue
        bare = _NOT_NEG.sub(" ", clause)
        if _NEG.search(bare) or _SORRY.search(bare):
            denied |= named
        elif _POS.search(clause):
            offered |= named
    return offered, denied


def decision_of(text: str) -> str | None:
    """The decision a reply states (refund / exchange / repair / none), or None when it evades or contradicts
    itself.

    >>> decision_of("Sorry, refunds end after 30 days. We can exchange it for you instead.")
    'exchange'
    >>> decision_of("Please check our website.") is None
    True
    """
    offered, denied = read_reply(text)
    if offered & denied:
        return None
    if "refund" in offered:
        return "refund"
    if "exchange" in offered:
        return "exchange"
    if "repair" in offered:
        return "repair"
    return "none" if denied else None


def stated_counts(text: str) -> list[tuple[int, str]]:
    """Every count with a unit in the reply, as (number, unit).

    >>> stated_counts("Refunds end after 30 days; our 1-year warranty and a 24-month plan")
    [(30, 'day'), (1, 'year'), (24, 'month')]
    """
    return [(int(n) if n.isdigit() else _WORDS[n], unit) for n, unit in _COUNT.findall(text.lower())]


def wrong_numbers(text: str, policy: dict, days: Any = None, months: Any = None) -> list[str]:
    """The counts a reply states that are neither a policy number of their unit nor the customer's own."""
    allowed = {"day": {policy.get("refund_days"), policy.get("exchange_days")},
               "month": {policy.get("warranty_months")}, "year": set(), "week": set()}
    w = policy.get("warranty_months")
    if isinstance(w, int) and w % 12 == 0:
        allowed["year"].add(w // 12)
    if isinstance(days, int):
        allowed["day"].add(days)
        if days % 7 == 0:
            allowed["week"].add(days // 7)
    if isinstance(months, int):
        allowed["month"].add(months)
        if months % 12 == 0:
            allowed["year"].add(months // 12)
    return [f"{n} {unit}" for n, unit in stated_counts(text) if n not in allowed[unit]]


def score_reply(text: str, decision: str, policy: dict, days: Any = None, months: Any = None) -> float:
    """1.0 when the reply decides `decision` and states no wrong policy number, else 0.0."""
    if decision_of(text) != decision:
        return 0.0
    return 0.0 if wrong_numbers(text, policy, days, months) else 1.0


def support_policy_reward(completions: list, decision: list, policy: list, days: list | None = None,
                          months: list | None = None, **kwargs: Any) -> list[float | None]:
    """The truth of each reply against its row's policy decision (module docstring).

    >>> support_policy_reward(
    ...     ["Yes, that is within 30 days, so we will refund you.",
    ...      "Yes, that is within 14 days, so we will refund you.",
    ...      "Please check our website."], decision=["refund"] * 3,
    ...     policy=[{"refund_days": 30, "exchange_days": 60, "warranty_months": 12}] * 3, days=[12] * 3)
    [1.0, 0.0, 0.0]
    """
    n = len(completions)
    decisions, policies = column(decision, n, "decision"), column(policy, n, "policy")
    all_days = column(days, n, "days") if days is not None else [None] * n
    all_months = column(months, n, "months") if months is not None else [None] * n
    out: list[float | None] = []
    for c, d, p, dd, mm in zip(completions, decisions, policies, all_days, all_months):
        if d not in DECISIONS or not isinstance(p, dict):
            out.append(None)
            continue
        out.append(score_reply(completion_text(c), d, p, dd, mm))
    return out


def check_gold(field: str, value: Any) -> str | None:
    """None when `value` is a usable `decision` or `policy`, else why not."""
    if field == "decision":
        return None if value in DECISIONS else f"expected one of {', '.join(DECISIONS)}, got {value!r}"
    if field == "policy":
        if not isinstance(value, dict):
            return f"expected an object with {', '.join(POLICY_KEYS)}, got {type(value).__name__}"
        missing = [k for k in POLICY_KEYS if not (isinstance(value.get(k), int) and not isinstance(value.get(k), bool)
                                                 and value.get(k) > 0)]
        return f"needs a positive integer {', '.join(missing)}" if missing else None
    return None
