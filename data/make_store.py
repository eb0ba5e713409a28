"""Generate a support store for preference training judged by a held-out truth (stdlib only, seeded).

    python data/make_store.py                            # the shipped store, data/support/store/
    python data/make_store.py --out DIR --seed 7 --policy refund=21,exchange=45,warranty=24
                                                         # another store: other numbers, items, wording

A store is a fictional shop with a three-number policy: refunds within `refund` days of purchase, exchanges
within `exchange` days, and a warranty of `warranty` months on defects. A customer message asks for a refund,
an exchange or a warranty repair of one item bought some days (or months) ago; the policy decides the one
right outcome, the `decision`:

  refund    a refund request inside the refund window
  exchange  a refund request past the refund window but inside the exchange window, or an exchange request
            inside the exchange window
  repair    a defect inside the warranty
  none      past every window (refund or exchange request past `exchange` days, defect past the warranty)

Day `refund` and day `exchange` count as inside; a defect at exactly `warranty` months never occurs. The policy
is never written in a prompt: a model learns it from the demonstrations and the pairs.

Files (JSON Lines, ASCII), all prompts distinct across files:
  demos.jsonl        {prompt, completion}: 200 demonstrations, varied wording, about 20% wrong (a wrong
                     decision, or the right one with a wrong policy number), as real support logs are
  pairs_train.jsonl  {prompt, chosen, rejected}: chosen is right; rejected is a wrong decision (40%), a hard
                     negative (the right decision with a wrong policy number, 30%), an evasion (15%) or rude (15%)
  pairs_eval.jsonl   the same, held out (pair accuracy)
  test.jsonl         {prompt, decision, days or months, policy}: the held-out truth's rows (no reply); the
                     `support_policy` verifier (rlft/verifiers/support.py) reads decision, policy, days, months
  policy.json        the store: name, policy numbers, seed, counts

Prompts are plain customer messages: recipes wrap them as chat with `data.as_chat: true`.
`rows(...)` returns every row with its truth fields (decision, days, months, policy, and the kind of each reply),
so a test can score every chosen (1) and rejected (0) reply with the truth.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "support" / "store"
DEFAULT_POLICY = {"refund": 30, "exchange": 60, "warranty": 12}
DEFAULT_SEED = 0
COUNTS = {"demos": 200, "pairs_train": 1000, "pairs_eval": 100, "test": 150}
MAX_TEXT = 240  # characters, exclusive bound on every prompt and reply

STORES = ["Northwind", "Bluebird Goods", "Maple & Co", "Harbor Home", "Cedar Lane", "Pinecrest", "Oakridge",
          "Silverline", "Brightside", "Copper Kettle"]
ITEMS = {
    "wear": ["blue sweater", "rain jacket", "pair of jeans", "wool scarf", "winter coat", "pair of running shoes",
             "leather belt", "denim shirt", "pair of boots", "hoodie", "linen dress", "pair of gloves",
             "flannel shirt", "summer hat", "pair of sandals", "silk tie", "rain coat", "knit cardigan"],
    "home": ["desk lamp", "frying pan", "yoga mat", "pillow", "backpack", "suitcase", "water bottle",
             "board game", "office chair", "wall clock", "picture frame", "bath towel set", "cutting board",
             "flower vase", "duvet cover", "bookshelf", "laundry basket", "dinner plate set"],
    "tech": ["coffee maker", "blender", "toaster", "kettle", "hair dryer", "electric toothbrush",
             "bluetooth speaker", "pair of headphones", "keyboard", "alarm clock", "desk fan", "rice cooker",
             "space heater", "vacuum cleaner", "smart watch", "air fryer", "e-reader", "juicer"],
}
GREETINGS = ["", "", "", "Hi. ", "Hello! ", "Hi there. ", "Good morning. ", "Hey! ", "Hello, support. ",
             "Good afternoon. ", "Hi team. "]
CLOSINGS = ["", "", "", " Thanks.", " Thank you!", " Can you help?", " Please advise.", " What can I do?",
            " Thanks in advance.", " Any ideas?"]
REFUND_ASKS = [
    "I bought {a_item} {ago} and want a refund.",
    "Can I return the {item} I bought {ago} for my money back?",
    "I'd like a refund for {a_item} I got {ago}.",
    "The {item} I bought {ago} isn't what I expected. Can I get a refund?",
    "Is it too late to return my {item}? I bought it {ago}.",
    "I changed my mind about the {item} I bought {ago}. Refund please.",
    "Can I still get my money back for the {item}? It was {ago}.",
    "I want to send back the {item} from {ago} and get refunded.",
    "My {item} from {ago} does not fit my needs. Could you refund it?",
    "I purchased {a_item} {ago}. How do I get a refund?",
]
EXCHANGE_ASKS = [
    "Can I exchange the {item} I bought {ago} for {variant}?",
    "I got {a_item} {ago} and would like to swap it for {variant}.",
    "Is it possible to exchange my {item}? I bought it {ago}.",
    "I want to trade in the {item} from {ago} for {variant}.",
    "Could I swap the {item} I purchased {ago} for {variant}?",
    "The {item} I bought {ago} is the wrong one. Can I exchange it for {variant}?",
    "I'd like to exchange {a_item} I got {ago}.",
]
DEFECT_ASKS = [
    "My {item} stopped working. I bought it {mago}.",
    "The {item} I got {mago} won't turn on anymore.",
    "I bought {a_item} {mago} and it keeps shutting off by itself.",
    "A part of my {item} broke on its own. I have had it for {mlen}.",
    "My {item} from {mago} makes a loud noise and then stops. Is it covered?",
    "The {item} I purchased {mago} is faulty. Can you fix it?",
    "My {item} is defective. I bought it {mago}. What are my options?",
]
VARIANTS = {"wear": ["a different size", "another color"], "home": ["another color", "a different model"],
            "tech": ["another color", "a different model"]}

# Replies by decision: (template, states a policy number). Slots: item, n (the customer's count: "45 days",
# "5 months"), R / E (days), WP ("1-year", "24-month"), WL ("1 year", "24 months"). Templates that state a policy
# number are rendered with a wrong one for the hard negatives.
GOOD = {
    "refund": [
        ("Yes, you can get a full refund. {n} is within our {R}-day window, so bring the {item} back and we will "
         "refund you.", True),
        ("Of course! Purchases can be refunded within {R} days, and yours is {n} old. Return the {item} for a "
         "full refund.", True),
        ("Happy to help. You bought the {item} {n} ago, which is inside our {R}-day refund window, so we will "
         "refund it in full.", True),
        ("Sure, we can refund the {item}. Refunds are possible for {R} days after purchase.", True),
        ("Yes, that is within {R} days. Bring the {item} in and we will refund you.", True),
        ("Sure, a refund is fine. Please bring the {item} back.", False),
        ("Yes, we will refund the {item} in full.", False),
    ],
    "exchange_late": [
        ("I'm sorry, refunds are possible only within {R} days and it has been {n}. You can still exchange the "
         "{item} within {E} days.", True),
        ("Thanks for reaching out. The {R}-day refund window has passed, but the {item} can still be exchanged, "
         "since exchanges are allowed for {E} days.", True),
        ("Sorry, {n} is past the {R}-day refund window. An exchange is still possible.", True),
        ("Sorry, we cannot refund it after {R} days. We can exchange the {item} for you instead.", True),
        ("Sorry, a refund is no longer possible, but we can exchange the {item} for you.", False),
    ],
    "exchange": [
        ("Yes, you can exchange the {item}. Exchanges are allowed within {E} days and it has been {n}.", True),
        ("Of course! We can swap the {item} for you, since it is inside our {E}-day exchange window.", True),
        ("Happy to help. Bring the {item} in within {E} days of purchase and we will exchange it.", True),
        ("Sure, we can exchange the {item}. Just bring it to the store.", False),
        ("Yes, an exchange is fine. We will swap the {item} for you.", False),
    ],
    "repair": [
        ("I'm sorry it stopped working. The {item} is {n} old, so it is under our {WP} warranty and we will "
         "repair or replace it for free.", True),
        ("Thanks for letting us know. Defects are covered for {WL}, so send in the {item} and we will repair or "
         "replace it at no cost.", True),
        ("That is covered by our {WP} warranty. We will repair or replace the {item}.", True),
        ("Sorry about that. Our warranty covers it, so we will fix or replace the {item} for free.", False),
        ("Yes, it is covered. We will repair the {item} at no cost.", False),
    ],
    "none": [
        ("I'm sorry, refunds end after {R} days and exchanges after {E}, and it has been {n}, so we cannot "
         "refund or exchange the {item}.", True),
        ("Thanks for asking. Unfortunately our {E}-day exchange window has passed, so we cannot take the "
         "{item} back.", True),
        ("Sorry, {n} is past our {E}-day window, so a refund or exchange is not possible.", True),
        ("I'm sorry, it is too late to return the {item}. We cannot refund or exchange it.", False),
    ],
    "none_defect": [
        ("I'm sorry, our warranty covers defects for {WL} and the {item} is {n} old, so it is no longer "
         "covered.", True),
        ("Thanks for asking. Unfortunately the {WP} warranty has ended for the {item}, so we cannot repair or "
         "replace it for free.", True),
        ("Sorry, the {WP} warranty has expired for this item.", True),
        ("I'm sorry, the warranty has ended, so we cannot repair the {item} for free.", False),
    ],
}
# A wrong decision for each right one (the policy numbers, where stated, are the store's own).
WRONG = {
    "refund": [
        "Sorry, we cannot refund the {item}, but we can exchange it.",
        "Sorry, the {R}-day refund window has passed, so we cannot refund it.",
        "Sorry, all sales are final. We cannot refund or exchange it.",
        "We cannot refund the {item}, but we can give you store credit.",
        ("I'm sorry, but once an item has been used we cannot refund it. We would be glad to exchange the {item} for "
         "something else in the store instead."),
        ("Thanks for reaching out. Unfortunately refunds are not possible for this kind of item, but store credit "
         "for the {item} is something we can offer you today."),
    ],
    "exchange_late": [
        "No problem, we will refund the {item} in full.",
        "Sure, we can make an exception and refund you this time.",
        "Sorry, it is too late for anything. We cannot refund or exchange it.",
        "Yes, you can get a full refund for the {item}.",
        ("Thanks for reaching out! Even though it has been {n}, we are happy to give you a full refund for the "
         "{item}. Just send it back and the money will be on your card soon."),
        ("Of course. We will refund the {item} in full this time, so please bring it to any store and we will "
         "take care of everything for you."),
    ],
    "exchange": [
        "Sorry, we cannot exchange the {item}. It is too late.",
        "Sorry, exchanges are not possible. All sales are final.",
        "Sorry, the {E}-day exchange window has passed, so we cannot exchange it.",
        ("I'm sorry, but items that have been taken out of the box cannot be exchanged. We cannot swap the {item}, "
         "though we would be glad to help you pick something else."),
        ("Thanks for asking. Unfortunately exchanges are not possible for the {item} at this point, and all sales "
         "are final once it has been used."),
    ],
    "repair": [
        "Sorry, the warranty does not cover this, so the repair will cost extra.",
        "After {n} the warranty no longer applies. You will have to pay for a repair.",
        "Sorry, the {WP} warranty has expired, so we cannot repair it.",
        "We cannot repair the {item}, but you can buy a new one with a discount.",
        ("I'm sorry to hear that. Unfortunately the warranty does not cover this kind of fault, so a repair of the "
         "{item} would be charged. We can send you a quote if you like."),
        ("Thanks for letting us know. Sadly we cannot repair or replace the {item} for free, since the warranty no "
         "longer applies after {n}."),
    ],
    "none": [
        "No problem, we will refund the {item} in full.",
        "Sure, bring the {item} in and we will exchange it.",
        "Yes, we can make an exception and refund it.",
        "Of course, you can still exchange the {item} for something else.",
        ("Thanks for reaching out! Even though it has been {n}, we are happy to exchange the {item}. Bring it to "
         "any store and pick a replacement you like."),
        ("Of course. We can make an exception and give you a full refund for the {item}, so just send it back to "
         "us and the money will follow."),
    ],
    "none_defect": [
        "No problem, we will replace the {item} for free.",
        "Sure, send the {item} in and we will repair it at no cost.",
        "Yes, it is covered by our warranty. We will fix it for free.",
        "Sure, send the {item} in and we will refund the full price.",
        ("I'm sorry to hear that! Even though the {item} is {n} old, we will replace it for free under our "
         "warranty. Please mail it to us with your order number."),
        ("Thanks for letting us know. We can repair the {item} at no cost, so please send it in and we will take "
         "care of it right away."),
    ],
}
EVASIVE = [
    "Please check our website for details on our policies.",
    "It depends on the situation. Please contact the store.",
    "Thank you for contacting us. Your message is important to us and we will get back to you soon.",
    "Thanks for your message. Our team reviews every request carefully. Please allow some time.",
    "Let me look into that for you. Someone from our team will follow up.",
    "Good question! Our policies are listed in the store and online.",
]
RUDE = ["Not my problem.", "We are busy. Try again later.", "I don't know. Ask someone else.",
        "Why are you asking me? Figure it out yourself.", "Read the policy yourself.", "Stop writing to us."]


def a_an(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def parse_policy(text: str) -> dict[str, int]:
    """`refund=21,exchange=45,warranty=24` -> the policy (missing keys keep their defaults); ValueError when bad."""
    policy = dict(DEFAULT_POLICY)
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in policy or not value.strip().isdigit():
            raise ValueError(f"bad policy part {part!r}: expected refund=N, exchange=N or warranty=N")
        policy[key.strip()] = int(value)
    r, e, w = policy["refund"], policy["exchange"], policy["warranty"]
    if not (1 <= r < e <= 300) or not (w * 30 > e + 60) or w > 60:
        raise ValueError(f"policy {policy}: needs 1 <= refund < exchange <= 300 and a warranty (months) longer "
                         "than the exchange window by 2 months or more, at most 60")
    return policy


def truth_policy(policy: dict[str, int]) -> dict[str, int]:
    """The numbers the truth verifier reads (field names of test.jsonl's `policy`)."""
    return {"refund_days": policy["refund"], "exchange_days": policy["exchange"],
            "warranty_months": policy["warranty"]}


def wrong_numbers(policy: dict[str, int], rng: random.Random, days: int | None, months: int | None) -> dict:
    """Policy numbers a hard negative states instead: each differs from every true number and the customer's."""
    taken = {policy["refund"], policy["exchange"], days or -1}
    days_pool = [d for d in (7, 10, 14, 21, 28, 45, 90, 120, 180) if d not in taken]
    r = rng.choice(days_pool)
    e = rng.choice([d for d in days_pool if d != r])
    w = rng.choice([m for m in (3, 6, 18, 24, 36) if m not in (policy["warranty"], months or -1)])
    return {"R": r, "E": e, "WP": f"{w}-month", "WL": f"{w} months"}


class Store:
    """One store: its policy, items and wording, drawn from `seed` (seed 0 keeps the shipped choices)."""

    def __init__(self, policy: dict[str, int], seed: int):
        self.policy, self.seed = policy, seed
        self.rng = random.Random(f"rlft-store-v1:{seed}:{policy['refund']}:{policy['exchange']}:"
                                 f"{policy['warranty']}")
        pick = random.Random(f"rlft-store-v1-wording:{seed}")
        self.name = STORES[0] if seed == 0 else pick.choice(STORES[1:])

        def some(xs: list, k: float = 0.7) -> list:
            return xs if seed == 0 else sorted(pick.sample(xs, max(2, round(len(xs) * k))), key=xs.index)

        self.items = {g: some(xs) for g, xs in ITEMS.items()}
        self.asks = {"refund": some(REFUND_ASKS), "exchange": some(EXCHANGE_ASKS), "defect": some(DEFECT_ASKS)}
        self.good = {k: some(v, 0.8) for k, v in GOOD.items()}
        # every store keeps at least one reply that states a number, for the hard negatives
        for k, v in self.good.items():
            if not any(states for _, states in v):
                v.insert(0, next(t for t in GOOD[k] if t[1]))
        self.wrong = {k: some(v, 0.8) for k, v in WRONG.items()}
        w = policy["warranty"]
        self.slots = {"R": policy["refund"], "E": policy["exchange"],
                      "WP": "1-year" if w == 12 else f"{w}-month",
                      "WL": "1 year" if w == 12 else f"{w} months"}

    # -- customer messages ---------------------------------------------------------------------------------
    def days_for(self, lo: int, hi: int) -> int:
        edges = [d for d in (1, self.policy["refund"], self.policy["refund"] + 1, self.policy["exchange"],
                             self.policy["exchange"] + 1) if lo <= d <= hi]
        if edges and self.rng.random() < 0.25:
            return self.rng.choice(edges)
        return self.rng.randint(lo, hi)

    def case(self) -> dict:
        rng, p = self.rng, self.policy
        request = rng.choices(["refund", "exchange", "defect"], weights=[45, 30, 25])[0]
        group = "tech" if request == "defect" else rng.choice(["wear", "home", "tech"])
        item = rng.choice(self.items[group])
        c: dict = {"item": item, "a_item": a_an(item), "variant": rng.choice(VARIANTS[group])}
        days = months = None
        if request == "refund":
            band = rng.choices([(1, p["refund"]), (p["refund"] + 1, p["exchange"]),
                                (p["exchange"] + 1, p["exchange"] + 150)], weights=[4, 4, 3])[0]
            days = self.days_for(*band)
            decision = "refund" if days <= p["refund"] else "exchange" if days <= p["exchange"] else "none"
            kind = {"refund": "refund", "exchange": "exchange_late", "none": "none"}[decision]
        elif request == "exchange":
            band = rng.choices([(1, p["exchange"]), (p["exchange"] + 1, p["exchange"] + 150)], weights=[3, 2])[0]
            days = self.days_for(*band)
            decision = "exchange" if days <= p["exchange"] else "none"
            kind = decision
        else:
            lo = p["exchange"] // 30 + 2  # past every return window, so only the warranty decides
            months = (rng.randint(lo, p["warranty"] - 1) if rng.random() < 0.5
                      else rng.randint(p["warranty"] + 1, p["warranty"] * 2 + 12))
            decision = "repair" if months < p["warranty"] else "none"
            kind = "repair" if decision == "repair" else "none_defect"
        if days is not None:
            if days == 1:
                ago = "yesterday"
            elif days % 7 == 0 and days <= 56 and rng.random() < 0.5:
                ago = "a week ago" if days == 7 else f"{days // 7} weeks ago"
            else:
                ago = f"{days} days ago"
            c.update(ago=ago, n="1 day" if days == 1 else f"{days} days")
            body = rng.choice(self.asks[request])
        else:
            c.update(mago=f"{months} months ago", mlen=f"{months} months", n=f"{months} months")
            body = rng.choice(self.asks["defect"])
        msg = rng.choice(GREETINGS) + body.format(**c) + rng.choice(CLOSINGS)
        return {"msg": msg, "request": request, "decision": decision, "kind": kind, "days": days,
                "months": months, "slots": c}

    # -- replies -------------------------------------------------------------------------------------------
    def render(self, template: str, case: dict, numbers: dict | None = None) -> str:
        return template.format(**{**case["slots"], **self.slots, **(numbers or {})})

    def reply(self, case: dict, kind: str, near: str | None = None) -> str:
        """One reply of `kind`: good, wrong_decision, wrong_number (hard negative), evasive or rude."""
        rng = self.rng
        if kind == "good":
            return self.render(rng.choice(self.good[case["kind"]])[0], case)
        if kind == "wrong_decision":  # near the chosen reply's length when there is one: no "longer is right"
            texts = [self.render(t, case) for t in self.wrong[case["kind"]]]
            if near is not None:
                texts = sorted(texts, key=lambda t: abs(len(t) - len(near)))[: max(2, (len(texts) + 1) // 2)]
            return rng.choice(texts)
        if kind == "wrong_number":
            template = rng.choice([t for t, states in self.good[case["kind"]] if states])
            return self.render(template, case, wrong_numbers(self.policy, rng, case["days"], case["months"]))
        return rng.choice(EVASIVE if kind == "evasive" else RUDE)

    def truth_fields(self, case: dict) -> dict:
        """decision, the customer's count (`days` or `months`, whichever the message gives) and the policy."""
        count = {"days": case["days"]} if case["days"] is not None else {"months": case["months"]}
        return {"decision": case["decision"], **count, "policy": truth_policy(self.policy)}


def rows(policy: dict[str, int] | None = None, seed: int = DEFAULT_SEED,
         counts: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """Every file's rows, each with its truth fields under `_truth` (and `_kinds` for pairs and demos)."""
    store = Store(policy or dict(DEFAULT_POLICY), seed)
    counts = {**COUNTS, **(counts or {})}
    seen: set[str] = set()

    def fresh() -> dict:
        while True:
            case = store.case()
            if case["msg"] not in seen and len(case["msg"]) < MAX_TEXT:
                seen.add(case["msg"])
                return case

    out: dict[str, list[dict]] = {}
    for name in ("test", "pairs_eval", "pairs_train", "demos"):  # test first: growing a split never moves it
        made = []
        for _ in range(counts[name]):
            case = fresh()
            truth = store.truth_fields(case)
            if name == "test":
                made.append({"prompt": case["msg"], **truth})
                continue
            if name == "demos":
                kind = store.rng.choices(["good", "wrong_decision", "wrong_number"], weights=[80, 10, 10])[0]
                made.append({"prompt": case["msg"], "completion": store.reply(case, kind),
                             "_truth": truth, "_kinds": [kind]})
                continue
            chosen = store.reply(case, "good")
            kind = store.rng.choices(["wrong_decision", "wrong_number", "evasive", "rude"],
                                     weights=[40, 30, 15, 15])[0]
            rejected = store.reply(case, kind, near=chosen)
            made.append({"prompt": case["msg"], "chosen": chosen, "rejected": rejected,
                         "_truth": truth, "_kinds": ["good", kind]})
        out[name] = made
    for name, made in out.items():
        for r in made:
            for key in ("prompt", "completion", "chosen", "rejected"):
                text = r.get(key)
                if text is not None and (len(text) >= MAX_TEXT or not all(32 <= ord(ch) <= 126 for ch in text)):
                    raise ValueError(f"{name}: {key} is too long or not printable ASCII: {text!r}")
    out["_store"] = [{"name": store.name, "seed": seed, "policy": store.policy,
                      "counts": {k: len(v) for k, v in out.items()}}]
    return out


def write(out_dir: Path, made: dict[str, list[dict]]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, made_rows in made.items():
        if name == "_store":
            continue
        clean = [{k: v for k, v in r.items() if not k.startswith("_")} for r in made_rows]
        text = "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in clean)
        (out_dir / f"{name}.jsonl").write_text(text, encoding="ascii", newline="\n")
    (out_dir / "policy.json").write_text(json.dumps(made["_store"][0], indent=2) + "\n", encoding="ascii")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default data/support/store)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="items, wording and store name (0: shipped)")
    ap.add_argument("--policy", default="", help="refund=DAYS,exchange=DAYS,warranty=MONTHS (default 30,60,12)")
    for name, n in COUNTS.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=n, help=f"rows (default {n})")
    args = ap.parse_args(argv)
    try:
        policy = parse_policy(args.policy)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = {name: getattr(args, name) for name in COUNTS}
    made = rows(policy, args.seed, counts)
    write(args.out, made)
    store = made["_store"][0]
    decisions: dict[str, int] = {}
    for r in made["test"]:
        decisions[r["decision"]] = decisions.get(r["decision"], 0) + 1
    print(f"{store['name']}: policy {policy}, seed {args.seed} -> {args.out}: "
          + ", ".join(f"{k} {v}" for k, v in store["counts"].items()) + f"; test decisions {decisions}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
