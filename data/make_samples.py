"""Generate the small sample data sets shipped under data/ (stdlib only, fixed seed).

    python data/make_samples.py              # rewrite the shipped files in data/
    python data/make_samples.py --out DIR    # write the same files under DIR (the test compares them)

Every set is JSON Lines, plain ASCII, one object per line, "\\n" line endings. Re-running the script gives
byte-identical files: each set draws from its own `random.Random` seeded with a fixed string
(`"rlft-samples-v1:<set>"`; string seeds are hashed with SHA-512, so they do not depend on
PYTHONHASHSEED), nothing iterates over a set or depends on the clock. Editing one generator leaves the
other sets unchanged.

The data are synthetic and small: enough to run every rlft command end to end on the tiny model and to
show each data shape, not enough to train a useful model. data/README.md describes every file.
data/arith/ belongs to another generator; this script never writes there.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SEED = "rlft-samples-v1"
HERE = Path(__file__).resolve().parent

# Bounds the shipped texts keep (tests/test_sample_data.py checks them): a character-level tiny model with a
# vocabulary of printable ASCII + newline trains on the support pairs, so they stay short and plain.
MAX_PROMPT = 160  # characters, exclusive bound, support prompts
MAX_ANSWER = 200  # characters, exclusive bound, chosen / rejected / completions / demo answers

# Row counts per output file.
N_PAIRS_TRAIN, N_PAIRS_EVAL, N_PAIRS_CHAT, N_DEMOS, N_RATINGS = 600, 100, 50, 200, 100
N_TRIAGE_TRAIN, N_TRIAGE_EVAL = 400, 100  # 100 / 25 per label
N_JSON_TRAIN, N_JSON_EVAL = 200, 50


def rng_for(name: str) -> random.Random:
    return random.Random(f"{SEED}:{name}")


def check_text(s: str, limit: int, what: str) -> str:
    if len(s) >= limit:
        raise ValueError(f"{what} is {len(s)} chars (limit {limit}): {s!r}")
    bad = [c for c in s if not (c == "\n" or 32 <= ord(c) <= 126)]
    if bad:
        raise ValueError(f"{what} has characters outside printable ASCII + newline: {bad!r} in {s!r}")
    return s


# --------------------------------------------------------------------------------------------------------
# 1. Support bot: a small fictional store policy, customer requests, policy-correct vs policy-breaking replies
# --------------------------------------------------------------------------------------------------------

STORE = "Northwind"
POLICY = (
    f"You are the support assistant of {STORE}, a small home and clothing store. Policy: refunds within "
    "30 days of purchase with a receipt (paper or email). Exchanges within 60 days with a receipt. Gift "
    "cards are never refunded. Items damaged in shipping are always refunded, at any time. The warranty "
    "covers defects for 1 year. Day 30 and day 60 still count as inside the windows. Answer politely and "
    "briefly."
)

# (item, group): "wear" items are exchanged for a size or color; "tech" items are the warranty cases.
ITEMS = [
    ("blue sweater", "wear"), ("rain jacket", "wear"), ("pair of jeans", "wear"), ("wool scarf", "wear"),
    ("winter coat", "wear"), ("pair of running shoes", "wear"), ("leather belt", "wear"),
    ("denim shirt", "wear"), ("pair of boots", "wear"), ("hoodie", "wear"), ("linen dress", "wear"),
    ("desk lamp", "home"), ("frying pan", "home"), ("yoga mat", "home"), ("pillow", "home"),
    ("backpack", "home"), ("suitcase", "home"), ("water bottle", "home"), ("board game", "home"),
    ("office chair", "home"), ("wall clock", "home"), ("picture frame", "home"), ("bath towel set", "home"),
    ("coffee maker", "tech"), ("blender", "tech"), ("toaster", "tech"), ("kettle", "tech"),
    ("hair dryer", "tech"), ("electric toothbrush", "tech"), ("bluetooth speaker", "tech"),
    ("pair of headphones", "tech"), ("keyboard", "tech"), ("alarm clock", "tech"), ("desk fan", "tech"),
    ("rice cooker", "tech"), ("space heater", "tech"), ("vacuum cleaner", "tech"), ("smart watch", "tech"),
]
TECH = [name for name, group in ITEMS if group == "tech"]

GREETINGS = ["", "", "Hi. ", "Hello! ", "Hi there. ", "Good morning. ", "Hey! ", "Hello, support. "]
CLOSINGS = ["", "", " Thanks.", " Thank you!", " Can you help?", " Please advise.", " What can I do?"]
RECEIPT_YES = ["I have the receipt.", "I still have my receipt.", "I kept the receipt.",
               "The receipt is in my email."]
RECEIPT_NO = ["I lost the receipt.", "I don't have the receipt anymore.", "I threw away the receipt.",
              "I can't find my receipt."]

REFUND_BODIES = [
    "I bought {a_item} {ago} and want a refund. {receipt}",
    "Can I return the {item} I bought {ago} for my money back? {receipt}",
    "I'd like a refund for {a_item} I got {ago}. {receipt}",
    "The {item} I bought {ago} isn't what I expected. Can I get a refund? {receipt}",
    "Is it too late to return my {item}? I bought it {ago}. {receipt}",
    "I changed my mind about the {item} I bought {ago}. Refund please. {receipt}",
]
EXCHANGE_BODIES = [
    "Can I exchange the {item} I bought {ago} for {variant}? {receipt}",
    "I got {a_item} {ago} and would like to swap it for {variant}. {receipt}",
    "Is it possible to exchange my {item}? I bought it {ago}. {receipt}",
    "I want to trade in the {item} from {ago} for {variant}. {receipt}",
]
GIFT_BODIES = [
    "Can I get a refund for a ${amt} gift card I bought {ago}? {receipt}",
    "I have an unused ${amt} gift card. Can I return it for cash?",
    "I'd like my money back for the ${amt} gift card I got {ago}. {receipt}",
    "My aunt gave me a ${amt} gift card. Can you refund it to my bank account?",
    "I bought a ${amt} gift card {ago} by mistake. Can I return it? {receipt}",
]
DAMAGE_BODIES = [
    "My {item} arrived {dmg}. I ordered it {ago}.",
    "The {item} I ordered {ago} came {dmg} in the box.",
    "The box was crushed and the {item} inside is {dmg}. Ordered {ago}.",
    "I ordered {a_item} {ago} and it arrived {dmg}.",
    "Your courier delivered my {item} {dmg}. I ordered it {ago}.",
]
DAMAGE_WORDS = {"wear": ["torn", "stained", "damaged", "ripped"],
                "home": ["damaged", "crushed", "ruined"],
                "tech": ["broken", "cracked", "damaged", "smashed"]}
WARRANTY_BODIES = [
    "My {item} stopped working. I bought it {mago}.",
    "The {item} I got {mago} won't turn on anymore.",
    "I bought {a_item} {mago} and it keeps shutting off by itself.",
    "A part of my {item} broke on its own. I have had it for {mlen}.",
    "My {item} from {mago} makes a loud noise and then stops. Is it covered?",
]
GENERAL = [
    ("How long do I have to return something for a refund?",
     ["You have 30 days from purchase to get a refund, as long as you have the receipt.",
      "Refunds are possible within 30 days of purchase with a receipt, paper or email."],
     ["You have 90 days to return anything for a refund.", "Refunds are possible for 1 year."]),
    ("What is your exchange policy?",
     ["You can exchange items within 60 days of purchase with a receipt.",
      "Exchanges are possible for 60 days from purchase. Please bring the receipt."],
     ["Exchanges are only possible within 7 days.", "We do not do exchanges, only refunds."]),
    ("Can I return a gift card?",
     ["Sorry, gift cards cannot be refunded, but you can spend them on anything in the store.",
      "I'm sorry, gift cards are not refundable."],
     ["Yes, gift cards can be refunded within 30 days.", "Sure, we refund gift cards in cash."]),
    ("How long is your warranty?",
     ["Our warranty covers defects for 1 year from purchase.",
      "Defects are covered for 1 year. We repair or replace the item for free."],
     ["Our warranty covers defects for 3 months.", "We do not offer any warranty."]),
    ("What happens if my order arrives damaged?",
     ["Items damaged in shipping are always refunded. Just send us a photo of the damage.",
      "We always refund items damaged in shipping, no matter when you ordered."],
     ["Damaged deliveries are the courier's problem, not ours.",
      "Damaged items are refunded only within 7 days."]),
    ("Do I need a receipt to return something?",
     ["Yes, refunds and exchanges need a receipt. An emailed receipt works too.",
      "Yes, please bring the receipt. A paper or email receipt is fine."],
     ["No, you never need a receipt.", "No receipt needed, we refund everything."]),
]

GENERIC_RUDE = [
    "Read the policy on our website.",
    "Not my problem.",
    "We are busy. Try again later.",
    "I don't know. Ask someone else.",
    "Why are you asking me? Figure it out yourself.",
    ("Honestly, I don't see why you are writing to us about this. You made the purchase, so it is your "
     "problem. Please stop sending us emails about it."),
]
GENERIC_VAGUE = [
    "Please check our website for details on our policies.",
    "It depends on the situation. Please contact the store.",
    "Thank you for contacting us. Your message is important to us and we will get back to you soon.",
    "Thanks for your message. Our team reviews every request carefully. Please allow some time.",
    (f"Thank you for contacting {STORE}. We value every customer. Our policies are listed on our website "
     "and in store, and our team will review your request as soon as possible."),
]


def a_an(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def n_days(d: int) -> str:
    return "1 day" if d == 1 else f"{d} days"


def n_months(m: int) -> str:
    return "1 month" if m == 1 else f"{m} months"


def days_ago(d: int, rng: random.Random) -> str:
    if d == 1:
        return "yesterday"
    if d % 7 == 0 and d <= 42 and rng.random() < 0.5:
        return "a week ago" if d == 7 else f"{d // 7} weeks ago"
    return f"{d} days ago"


def pick_days(rng: random.Random, lo: int, hi: int) -> int:
    """A day count in [lo, hi]; the window edges (30, 31, 60, 61) come up more often than chance."""
    edges = [d for d in (1, 29, 30, 31, 32, 59, 60, 61, 62) if lo <= d <= hi]
    if edges and rng.random() < 0.25:
        return rng.choice(edges)
    return rng.randint(lo, hi)


def answers(outcome: str, c: dict) -> dict[str, list[str]]:
    """Replies for one outcome by kind: good / curt (policy-correct), wrong (policy-breaking), rude, vague."""
    item, n, m, amt, variant = c.get("item"), c.get("n"), c.get("m"), c.get("amt"), c.get("variant")
    A: dict[str, list[str]] = {}
    if outcome == "refund_ok":
        A["good"] = [
            (f"Yes, you can get a full refund. {n} is within our 30-day window, so bring the {item} and "
             "your receipt and we will refund your original payment."),
            (f"Of course! Purchases can be refunded within 30 days with a receipt, and yours is {n} old. "
             f"Return the {item} with the receipt for a full refund."),
            (f"Happy to help. You bought the {item} {n} ago, so you qualify for a full refund. Just bring "
             "the receipt."),
        ]
        A["curt"] = [f"Yes, that is within 30 days. Bring the {item} and receipt for a full refund.",
                     "Sure, a refund is fine. Please bring the receipt."]
        A["wrong"] = [
            f"Sorry, refunds are only possible within 14 days, so we cannot refund the {item}.",
            f"We cannot refund the {item}, but we can give you store credit.",
            "Refunds are not possible once an item has been used. You can only exchange it.",
            "Sorry, all sales are final. We do not offer refunds.",
            (f"I'm sorry, but our refund window is only 14 days, so the {item} is no longer eligible. We "
             "can offer store credit instead if that helps. Thank you for your understanding."),
            ("Thank you for reaching out! Unfortunately refunds are not possible on items that have been "
             "taken out of the box, but we would be glad to help you pick something else."),
        ]
        if not c["receipt_said"]:
            A["wrong"].append(f"No receipt needed, we will refund the {item} right away.")
        A["rude"] = ["You bought it, you keep it.", "Why would you buy it if you didn't want it? No."]
    elif outcome == "refund_no_receipt":
        A["good"] = [
            (f"I'm sorry, refunds need a receipt. An emailed receipt works too, so if you can find it we "
             f"can refund the {item} within 30 days of purchase."),
            (f"Thanks for asking. We can only refund with a receipt. Please check your email for the "
             f"order receipt; it has been {n}, so you still have time."),
        ]
        A["curt"] = ["Sorry, a refund needs the receipt. An emailed one is fine."]
        A["wrong"] = [
            f"No problem, no receipt needed. We will refund the {item} right away.",
            f"Sure, just bring the {item} and we will refund you in cash.",
            "Without a receipt we will still refund the full price.",
            f"Refunds without a receipt are fine within {n}. Come by any time.",
            (f"Thanks for reaching out! No worries about the receipt, we can refund the {item} in full "
             "without it. Just bring it to any store and we will take care of everything."),
        ]
        A["rude"] = ["No receipt, no refund. Next time keep it.", "You lost it? That's on you."]
    elif outcome == "refund_late":
        A["good"] = [
            (f"I'm sorry, refunds are only possible within 30 days and it has been {n}. You can still "
             f"exchange the {item} within 60 days with your receipt."),
            (f"Thanks for reaching out. The 30-day refund window has passed, but the {item} can still be "
             "exchanged, since exchanges are allowed for 60 days."),
        ]
        A["curt"] = [f"Sorry, {n} is past the 30-day refund window. An exchange is still possible."]
        A["wrong"] = [
            f"No problem, we will refund the {item} in full.",
            "Sure, we can make an exception and refund you this time.",
            "Yes, refunds are allowed for 60 days, so you will get your money back.",
            "Sorry, it is too late for anything. We cannot refund or exchange it.",
            (f"Thanks for reaching out! Even though it has been {n}, we are happy to give you a full "
             f"refund for the {item}. Just send it back and the money will be on your card soon."),
        ]
        A["rude"] = ["That was ages ago. Not our problem.", "You waited too long. Deal with it."]
    elif outcome == "refund_late_no_receipt":
        A["good"] = [
            (f"I'm sorry, it has been {n}, past our 30-day refund window. If you find the receipt, you "
             f"can still exchange the {item} within 60 days."),
            ("Sorry, refunds end after 30 days and need a receipt. With the receipt (an email copy is "
             "fine) you could still make an exchange."),
        ]
        A["curt"] = ["Sorry, no refund after 30 days. With the receipt you could still exchange it."]
        A["wrong"] = [
            f"No problem, we will refund the {item} without a receipt.",
            "Sure, we will give you a full refund in cash.",
            "Refunds are allowed for 60 days even without a receipt.",
            (f"Thanks for your message! We can refund the {item} even without a receipt and after {n}. "
             "Bring it to any store and we will give you your money back."),
        ]
        A["rude"] = ["No receipt and that late? Forget it.", "Too late and no receipt. Goodbye."]
    elif outcome == "refund_too_late":
        A["good"] = [
            (f"I'm sorry, at {n} the {item} is past our 30-day refund and 60-day exchange windows, so "
             "we cannot take it back."),
            (f"Thanks for asking. Refunds end after 30 days and exchanges after 60, and it has been {n}. "
             "If it is defective, our 1-year warranty may help."),
        ]
        A["curt"] = [f"Sorry, {n} is past both our refund and exchange windows."]
        A["wrong"] = [
            f"Sure, we will refund the {item} in full.",
            f"We can exchange the {item} for you, no problem.",
            "Refunds are allowed within 1 year, so you are fine.",
            (f"Thank you for your patience! Although it has been {n}, we will make an exception and "
             f"refund the {item} in full. Please mail it back to us with a note."),
        ]
        A["rude"] = ["Seriously? That was months ago. No.", "You had your chance. Not happening."]
    elif outcome == "exchange_ok":
        A["good"] = [
            (f"Yes, you can exchange the {item}. Exchanges are allowed within 60 days with a receipt, "
             f"and it has been {n}."),
            f"Of course! Bring the {item} and your receipt to any store and swap it for {variant}.",
            (f"Happy to help. It has been {n}, so you are inside our 60-day exchange window. Please "
             "bring the receipt."),
        ]
        A["curt"] = ["Yes, exchanges are fine within 60 days. Bring the receipt."]
        A["wrong"] = [
            "Sorry, exchanges are only possible within 14 days.",
            "We do not do exchanges. You can only return it for store credit.",
            f"Sorry, we cannot exchange the {item} once it has been opened.",
            (f"Thank you for reaching out. Unfortunately exchanges are only possible within 14 days of "
             f"purchase, so we cannot swap the {item}. We hope you understand."),
        ]
        A["rude"] = ["Should have picked the right one the first time.", "Exchanges are a pain. No."]
    elif outcome == "exchange_no_receipt":
        A["good"] = [
            ("I'm sorry, exchanges need a receipt. An emailed receipt works, so please look for it; you "
             "have 60 days from purchase."),
            (f"Thanks for asking. We can exchange the {item} within 60 days, but only with a receipt. A "
             "copy from your email is fine."),
        ]
        A["curt"] = ["Sorry, an exchange needs the receipt. An emailed copy is fine."]
        A["wrong"] = [
            f"No receipt needed, just bring the {item} in and swap it.",
            "Sure, we will exchange it, receipts are optional.",
            "Without a receipt we will refund it instead.",
            (f"Thanks for reaching out! A receipt is not needed for exchanges, so bring the {item} to any "
             f"store and we will swap it for {variant}."),
        ]
        A["rude"] = ["No receipt? Then no exchange. Bye.", "Keep your receipts next time."]
    elif outcome == "exchange_late":
        A["good"] = [
            (f"I'm sorry, exchanges are only possible within 60 days of purchase, and it has been {n}, "
             f"so we cannot exchange the {item}."),
            ("Thanks for asking. Unfortunately our 60-day exchange window has passed. If the item is "
             "defective, the 1-year warranty may cover it."),
        ]
        A["curt"] = [f"Sorry, {n} is past our 60-day exchange window."]
        A["wrong"] = [
            f"Sure, bring the {item} in and we will exchange it.",
            "Exchanges are allowed for 90 days, so that is fine.",
            "We can't exchange it, but we will refund it instead.",
            (f"Thank you for your message! Even though it has been {n}, we are happy to exchange the "
             f"{item}. Bring it to any store and pick a replacement."),
        ]
        A["rude"] = ["Way too late. Stop asking.", "That's your problem, not ours."]
    elif outcome == "gift_card":
        A["good"] = [
            (f"I'm sorry, gift cards cannot be refunded, even with a receipt. You can still use the "
             f"${amt} card on anything in our store."),
            (f"Thanks for asking. Our policy does not allow refunds on gift cards, but the ${amt} balance "
             "can be spent in store or online."),
        ]
        A["curt"] = ["Sorry, gift cards are not refundable.", "I'm sorry, we cannot refund gift cards."]
        A["wrong"] = [
            f"Sure, we will refund the ${amt} to your original payment method.",
            "Gift cards can be refunded within 30 days, so you are all set.",
            f"Yes, bring the card in and we will pay out the ${amt} in cash.",
            (f"Thanks for asking! Gift cards can be refunded like any other purchase, so we will send the "
             f"${amt} back to your bank account within 5 business days."),
        ]
        A["rude"] = ["A gift card is a gift card. Just spend it.", "No. Why would we refund that?"]
    elif outcome == "damage":
        A["good"] = [
            (f"I'm so sorry the {item} arrived damaged. Items damaged in shipping are always refunded, so "
             "we will refund you in full. A photo of the damage helps."),
            (f"Sorry about that! Shipping damage is always covered. Please send a photo and we will "
             f"refund the {item} right away."),
        ]
        A["curt"] = ["Sorry about that. Shipping damage is always refunded in full."]
        A["wrong"] = [
            "Damage in transit is the courier's fault. Please file a claim with them.",
            f"We can only refund the {item} if you have the receipt.",
            "Sorry, damaged items can only be exchanged, not refunded.",
            (f"I'm sorry to hear that, but damage during delivery is handled by the courier, not by us. "
             f"Please contact them directly to file a claim for the {item}."),
        ]
        if c["days"] > 30:
            A["wrong"].append("Sorry, the 30-day refund window has passed, so we cannot refund it.")
            A["wrong"].append(f"Thank you for letting us know. Unfortunately it has been {n} since your "
                              f"order, past our 30-day refund window, so we cannot refund the {item}.")
        A["rude"] = ["Are you sure you did not break it yourself?", "Boxes get crushed. Happens."]
    elif outcome == "warranty_ok":
        A["good"] = [
            (f"I'm sorry it stopped working. The {item} is {m} old, so it is under our 1-year warranty "
             "and we will repair or replace it for free."),
            (f"Thanks for letting us know. Defects are covered for 1 year, so bring in or mail the {item} "
             "and we will fix or replace it at no cost."),
        ]
        A["curt"] = ["That is covered by our 1-year warranty. We will repair or replace it."]
        A["wrong"] = [
            "Sorry, the warranty only lasts 30 days, so the repair will cost extra.",
            f"After {m} the warranty no longer applies. You will have to pay for a repair.",
            "We cannot help with that, since the refund window has passed.",
            (f"I'm sorry to hear that. Our warranty only covers the first 30 days, so a repair of the "
             f"{item} would be charged. We can send you a quote if you like."),
        ]
        A["rude"] = ["It probably broke because you dropped it.", "Things break. Buy a new one."]
    elif outcome == "warranty_expired":
        A["good"] = [
            (f"I'm sorry, our warranty covers defects for 1 year and the {item} is {m} old, so it is no "
             "longer covered."),
            (f"Thanks for asking. Unfortunately the 1-year warranty has ended for the {item}, so we "
             "cannot repair or replace it for free."),
        ]
        A["curt"] = ["Sorry, the 1-year warranty has expired for this item."]
        A["wrong"] = [
            f"No problem, we will replace the {item} for free.",
            "Our warranty lasts 3 years, so it is covered.",
            f"Sure, send the {item} in and we will refund the full price.",
            (f"I'm sorry to hear that! Even though the {item} is {m} old, we will replace it for free "
             "under our warranty. Please mail it to us with your order number."),
        ]
        A["rude"] = ["It's old. What did you expect?", "Not covered. Stop asking."]
    elif outcome == "general":
        A["good"], A["wrong"] = list(c["good"]), list(c["wrong"])
        A["curt"] = []
        A["rude"] = []
    else:
        raise ValueError(outcome)
    A["rude"] = A["rude"] + GENERIC_RUDE
    A["vague"] = list(GENERIC_VAGUE)
    return A


def support_case(rng: random.Random) -> tuple[str, str, dict]:
    """One customer message, its outcome under the policy, and the slots the replies use."""
    intent = rng.choices(["refund", "exchange", "gift", "damage", "warranty", "general"],
                         weights=[34, 20, 10, 12, 18, 6])[0]
    item, group = rng.choice(ITEMS)
    c: dict = {"item": item}
    if intent == "refund":
        band = rng.choices(["in", "late", "too_late"], weights=[5, 3, 2])[0]
        days = pick_days(rng, *{"in": (1, 30), "late": (31, 60), "too_late": (61, 300)}[band])
        receipt = rng.choices(["yes", "said_no", "unsaid"], weights=[4, 3, 3])[0]
        if band == "too_late":
            outcome = "refund_too_late"
        elif receipt == "said_no":
            outcome = "refund_no_receipt" if band == "in" else "refund_late_no_receipt"
        else:
            outcome = "refund_ok" if band == "in" else "refund_late"
        rtext = {"yes": rng.choice(RECEIPT_YES), "said_no": rng.choice(RECEIPT_NO), "unsaid": ""}[receipt]
        body = rng.choice(REFUND_BODIES)
    elif intent == "exchange":
        days = pick_days(rng, *rng.choices([(1, 60), (61, 300)], weights=[3, 1])[0])
        receipt = rng.choices(["yes", "said_no", "unsaid"], weights=[4, 3, 3])[0]
        if days > 60:
            outcome = "exchange_late"
        else:
            outcome = "exchange_no_receipt" if receipt == "said_no" else "exchange_ok"
        rtext = {"yes": rng.choice(RECEIPT_YES), "said_no": rng.choice(RECEIPT_NO), "unsaid": ""}[receipt]
        body = rng.choice(EXCHANGE_BODIES)
        c["variant"] = rng.choice(["a different size", "another color"] if group == "wear"
                                  else ["another color", "a different model"])
    elif intent == "gift":
        days = pick_days(rng, 1, 90)
        receipt = rng.choice(["yes", "unsaid"])
        rtext = rng.choice(RECEIPT_YES) if receipt == "yes" else ""
        outcome = "gift_card"
        body = rng.choice(GIFT_BODIES)
        c["amt"] = rng.choice([10, 15, 20, 25, 30, 40, 50, 75, 100, 150, 200])
    elif intent == "damage":
        days = pick_days(rng, 1, 90)
        receipt, rtext, outcome = "unsaid", "", "damage"
        body = rng.choice(DAMAGE_BODIES)
        c["dmg"] = rng.choice(DAMAGE_WORDS[group])
    elif intent == "warranty":
        item = rng.choice(TECH)
        c["item"] = item
        # Half covered, half expired; exactly 12 months is left out as ambiguous.
        months = rng.randint(1, 11) if rng.random() < 0.5 else rng.randint(13, 36)
        days, receipt, rtext = months * 30, "unsaid", ""
        outcome = "warranty_ok" if months < 12 else "warranty_expired"
        body = rng.choice(WARRANTY_BODIES)
        c["m"] = n_months(months)
        c["mago"] = "last month" if months == 1 and rng.random() < 0.5 else f"{n_months(months)} ago"
        c["mlen"] = n_months(months)
    else:
        q, good, wrong = rng.choice(GENERAL)
        days, receipt, rtext, outcome = 0, "unsaid", "", "general"
        body = q
        c.update(good=good, wrong=wrong)
    c.update(days=days, n=n_days(days), ago=days_ago(days, rng), receipt=rtext, a_item=a_an(c["item"]),
             receipt_said=receipt != "unsaid")
    text = body.format(**c).strip()
    msg = rng.choice(GREETINGS) + text + rng.choice(CLOSINGS)
    return msg, outcome, c


def support_prompt(msg: str) -> str:
    return f"Customer: {msg}\nAgent:"


def support_rows(rng: random.Random, n: int, seen: set[str]) -> list[dict]:
    """n pairs with unique customer messages (not in `seen`), rejected length balanced against chosen."""
    rows = []
    while len(rows) < n:
        msg, outcome, c = support_case(rng)
        if msg in seen or len(support_prompt(msg)) >= MAX_PROMPT:
            continue
        seen.add(msg)
        A = answers(outcome, c)
        # Length balance on purpose (a preference set where chosen is always longer teaches "longer is
        # better"): flip a coin for "chosen is longer", pick a chosen reply for which some rejected reply
        # can satisfy the coin, then a rejected reply of the drawn kind that satisfies it (falling back to
        # any kind that does), from the closer half in length, so that the length ratio stays near 1 too.
        want_longer = rng.random() < 0.5

        def fits(r: str, ch: str, want_longer: bool = want_longer) -> bool:
            return r != ch and ((len(r) < len(ch)) if want_longer else (len(r) > len(ch)))

        every_rejected = [r for k in ("wrong", "rude", "vague") for r in A[k]]
        chosen_pool = [ch for ch in A["good"] + A["curt"] if any(fits(r, ch) for r in every_rejected)]
        chosen = rng.choice(chosen_pool or A["good"] + A["curt"])
        kind = rng.choices(["wrong", "rude", "vague"], weights=[60, 25, 15])[0]
        pool = ([r for r in A[kind] if fits(r, chosen)] or [r for r in every_rejected if fits(r, chosen)]
                or [r for r in A["wrong"] if r != chosen])
        pool = sorted(pool, key=lambda r: abs(len(r) - len(chosen)))[: (len(pool) + 1) // 2]
        rejected = rng.choice(pool)
        rows.append({"msg": msg, "outcome": outcome, "chosen": chosen, "rejected": rejected, "A": A})
    return rows


def length_bias(pairs: list[tuple[str, str]]) -> tuple[float, float, float]:
    """(share of pairs where chosen is longer, mean of len(chosen) / len(rejected) per pair,
    mean len(chosen) / mean len(rejected))."""
    longer = sum(len(c) > len(r) for c, r in pairs) / len(pairs)
    ratio = sum(len(c) / len(r) for c, r in pairs) / len(pairs)
    of_means = sum(len(c) for c, _ in pairs) / sum(len(r) for _, r in pairs)
    return longer, ratio, of_means


def make_support() -> dict[str, list[dict]]:
    rng = rng_for("support")
    seen: set[str] = set()
    # Eval first, so growing the train set later never changes the eval rows.
    groups = {name: support_rows(rng, k, seen) for name, k in
              [("eval", N_PAIRS_EVAL), ("train", N_PAIRS_TRAIN), ("chat", N_PAIRS_CHAT),
               ("demos", N_DEMOS), ("ratings", N_RATINGS)]}
    out: dict[str, list[dict]] = {}
    for split in ("train", "eval"):
        out[f"support/pairs_{split}.jsonl"] = [
            {"prompt": check_text(support_prompt(r["msg"]), MAX_PROMPT, "prompt"),
             "chosen": check_text(" " + r["chosen"], MAX_ANSWER, "chosen"),
             "rejected": check_text(" " + r["rejected"], MAX_ANSWER, "rejected")}
            for r in groups[split]]
    out["support/pairs_chat.jsonl"] = [
        {"prompt": [{"role": "user", "content": r["msg"]}],
         "chosen": [{"role": "assistant", "content": r["chosen"]}],
         "rejected": [{"role": "assistant", "content": r["rejected"]}]}
        for r in groups["chat"]]
    out["support/demos.jsonl"] = [
        {"messages": [{"role": "system", "content": check_text(POLICY, 10**6, "policy")},
                      {"role": "user", "content": r["msg"]},
                      {"role": "assistant", "content": r["chosen"]}]}
        for r in groups["demos"]]
    # Scalar feedback: one reply per prompt of a random kind, rated by kind, with some rater noise.
    base = {"good": 5, "curt": 4, "vague": 3, "rude": 2, "wrong": 1}
    ratings = []
    for r in groups["ratings"]:
        kinds = [k for k in ("good", "curt", "vague", "rude", "wrong") if r["A"][k]]
        kind = rng.choice(kinds)
        completion = rng.choice(r["A"][kind])
        rating = base[kind]
        if rng.random() < 0.15:  # raters disagree now and then: one step up or down
            rating = min(5, max(1, rating + rng.choice([-1, 1])))
        ratings.append({"prompt": support_prompt(r["msg"]),
                        "completion": check_text(" " + completion, MAX_ANSWER, "completion"),
                        "rating": rating})
    out["ratings/ratings.jsonl"] = ratings
    return out


# --------------------------------------------------------------------------------------------------------
# 2. Ticket triage (GRPO with the `label` verifier)
# --------------------------------------------------------------------------------------------------------

LABELS = ["billing", "bug", "account", "shipping"]
TRIAGE_HEADER = "Classify the ticket into one of: billing, bug, account, shipping.\nTicket: "
TICKETS = {
    "billing": [
        "I was charged twice for order #{order}.",
        "My card was billed ${amt} but the order total was ${amt2}.",
        "Please send me an invoice for my last payment.",
        "Why did my subscription renew at ${amt} instead of ${amt2}?",
        "My refund of ${amt} still hasn't reached my card.",
        "The coupon {code} was not applied and I paid full price.",
        "I see a charge of ${amt} on my statement that I don't recognize.",
        "Can I pay for order #{order} with PayPal instead of my card?",
        "I cancelled my plan but was still charged ${amt} this month.",
        "The tax on my invoice for order #{order} looks wrong.",
        "The app works fine, but I was charged ${amt} twice.",  # distractor: app
        "My account is fine, but the bill for order #{order} is ${amt} too high.",  # distractor: account
        "The package arrived, but I was billed for express shipping I didn't choose.",  # distractor: package
    ],
    "bug": [
        "The app crashes every time I open {screen}.",
        "I get error {err} when I try to {action}.",
        "The {button} button does nothing on {platform}.",
        "The page keeps loading forever in {browser}.",
        "Product images don't load on {platform}.",
        "Search returns no results, even for '{term}'.",
        "The app freezes after the latest update on {platform}.",
        "Dark mode makes the text unreadable on {screen}.",
        "Notifications show the wrong order number.",
        "When I try to pay, checkout shows error {err} and freezes.",  # distractor: pay
        "The tracking page crashes on {platform}, so I can't see my package.",  # distractor: package
        "The login button does nothing on {platform}.",  # distractor: login
    ],
    "account": [
        "I can't log in and the password reset email never arrives.",
        "How do I change the email address on my account?",
        "My account was locked after too many login attempts.",
        "Please delete my account and all my data.",
        "I want to turn on two-factor authentication.",
        "I think someone else has access to my account.",
        "How do I change my username?",
        "I have two accounts and want to merge them.",
        "I need to update the phone number on my profile.",
        "I changed my card last week and now I can't sign in.",  # distractor: card
        "Before my next order ships, I need to change the email on my account.",  # distractor: ships
        "The verification code for my new account never arrives by text.",
    ],
    "shipping": [
        "My package {track} hasn't moved in {n} days.",
        "Tracking says delivered, but nothing arrived.",
        "Can I change the delivery address for order #{order}?",
        "How long does shipping to {country} take?",
        "Order #{order} arrived with an item missing.",
        "The courier left my parcel at the wrong address.",
        "Do you ship to {country}?",
        "My order #{order} is {n} days late.",
        "Can I pick up order #{order} in store instead of having it delivered?",
        # distractor: paid
        "I paid for express shipping but order #{order} is still not here after {n} days.",
        "The carrier says tracking number {track} does not exist.",
        "My parcel was sent back to the warehouse. Can you reship it?",
    ],
}
TICKET_PREFIX = ["", "", "", "Hi, ", "Hello. ", "Urgent: ", "Help! ", "Quick question: "]
TICKET_SUFFIX = ["", "", "", " Thanks.", " Please help.", " This is my second message about it.",
                 " Any update?", " Thank you in advance."]
SLOTS = {
    "screen": ["the cart", "my orders", "settings", "the checkout page", "my wishlist", "the home screen"],
    "action": ["add an item to the cart", "save my address", "upload a photo", "apply a filter",
               "open my order history"],
    "button": ["Buy now", "Save", "Add to cart", "Continue", "Apply", "Next"],
    "platform": ["Android", "iPhone", "my iPad", "Windows", "a Mac", "my tablet"],
    "browser": ["Chrome", "Firefox", "Safari", "Edge"],
    "term": ["shoes", "lamp", "blue jacket", "kettle", "gift card"],
    "country": ["Canada", "Mexico", "Ireland", "Portugal", "Japan", "Australia", "Norway", "Chile"],
}


def ticket_text(rng: random.Random, label: str) -> str:
    tpl = rng.choice(TICKETS[label])
    amt = rng.randint(5, 300)
    vals = {k: rng.choice(v) for k, v in SLOTS.items()}
    vals.update(order=rng.randint(10000, 99999), amt=f"{amt}.{rng.randint(0, 99):02d}",
                amt2=f"{amt + rng.randint(3, 60)}.{rng.randint(0, 99):02d}",
                code=rng.choice(["SAVE10", "SPRING20", "WELCOME5", "FREESHIP", "VIP15"]),
                err=f"E{rng.randint(100, 999)}", track=f"NW{rng.randint(10**8, 10**9 - 1)}",
                n=rng.randint(3, 21))
    return rng.choice(TICKET_PREFIX) + tpl.format(**vals) + rng.choice(TICKET_SUFFIX)


def make_triage() -> dict[str, list[dict]]:
    rng = rng_for("triage")
    seen: set[str] = set()
    out = {}
    for split, n in (("eval", N_TRIAGE_EVAL), ("train", N_TRIAGE_TRAIN)):
        rows = []
        for label in LABELS:  # exactly n / 4 per label, shuffled below
            k = 0
            while k < n // len(LABELS):
                prompt = check_text(TRIAGE_HEADER + ticket_text(rng, label) + "\nLabel:", 10**6, "prompt")
                if prompt in seen:
                    continue
                seen.add(prompt)
                rows.append({"prompt": prompt, "label": label, "labels": list(LABELS)})
                k += 1
        rng.shuffle(rows)
        out[f"triage/tickets_{split}.jsonl"] = rows
    return {k: out[k] for k in ("triage/tickets_train.jsonl", "triage/tickets_eval.jsonl")}


# --------------------------------------------------------------------------------------------------------
# 3. JSON extraction (GRPO with the `json` verifier)
# --------------------------------------------------------------------------------------------------------

FIRST = ["Maria", "James", "Aisha", "Chen", "Lukas", "Sofia", "Omar", "Priya", "Ethan", "Hana", "Diego",
         "Nora", "Kofi", "Elena", "Yuki", "Sam", "Ingrid", "Rafael", "Mei", "Tomas"]
LAST = ["Lopez", "Smith", "Khan", "Wang", "Becker", "Rossi", "Haddad", "Patel", "Brown", "Sato", "Silva",
        "Novak", "Mensah", "Petrov", "Tanaka", "Reed", "Berg", "Costa", "Lin", "Horvat"]
CITIES = ["Lisbon", "Denver", "Nairobi", "Osaka", "Hamburg", "Turin", "Beirut", "Pune", "Leeds", "Kyoto",
          "Recife", "Brno", "Accra", "Sofia", "Sapporo", "Austin", "Bergen", "Porto", "Taipei", "Zagreb"]
PRODUCTS = ["desk lamp", "yoga mat", "coffee grinder", "notebook", "steel bottle", "phone charger",
            "garden hose", "wool blanket", "tea kettle", "bike light"]
EVENTS = ["spring fair", "book club meeting", "charity run", "jazz night", "team offsite", "science talk",
          "cooking class", "chess tournament", "film screening", "open house"]
FIELD_TYPES = {"name": "string", "age": "integer", "city": "string", "email": "string",
               "is_member": "boolean", "order_id": "string", "item": "string", "quantity": "integer",
               "unit_price": "number", "paid": "boolean", "title": "string", "date": "string",
               "attendees": "integer"}


def json_record(rng: random.Random) -> tuple[str, dict, list[str]]:
    """(text, all values stated in the text, the fields this kind of record can ask for)."""
    kind = rng.choice(["person", "order", "event"])
    if kind == "person":
        first, last = rng.choice(FIRST), rng.choice(LAST)
        v = {"name": f"{first} {last}", "age": rng.randint(18, 79), "city": rng.choice(CITIES),
             "email": f"{first.lower()}.{last.lower()}@example.com", "is_member": rng.random() < 0.5}
        member = f"{first} is a loyalty member." if v["is_member"] else f"{first} is not a member yet."
        text = rng.choice([
            "{name} is {age} years old and lives in {city}. {member} Email: {email}.",
            "Meet {name}, {age}, from {city}. Contact: {email}. {member}",
            "{name} ({age}) moved to {city} last year. {member} Reach out at {email}.",
            "New signup from {city}: {name}, age {age}, email {email}. {member}",
        ]).format(member=member, **v)
        return text, v, ["name", "age", "city", "email", "is_member"]
    if kind == "order":
        cents = rng.randint(199, 9999)
        v = {"order_id": f"A-{rng.randint(1000, 9999)}", "item": rng.choice(PRODUCTS),
             "quantity": rng.randint(1, 12), "unit_price": cents / 100, "paid": rng.random() < 0.5}
        price = f"{cents // 100}.{cents % 100:02d}"
        text = rng.choice([
            "Order {order_id}: {quantity} x {item} at ${price} each. Payment {p1}.",
            ("Please ship {quantity} units of {item} (order {order_id}, ${price} per unit). The customer "
             "has {p2}."),
            "Order {order_id} is for {quantity} of the {item}, priced ${price} apiece; {p2}.",
        ]).format(price=price, p1="received" if v["paid"] else "pending",
                  p2="already paid" if v["paid"] else "not paid yet", **v)
        return text, v, ["order_id", "item", "quantity", "unit_price", "paid"]
    date = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    v = {"title": rng.choice(EVENTS), "date": date, "city": rng.choice(CITIES),
         "attendees": rng.randint(5, 400)}
    text = rng.choice([
        "The {title} takes place in {city} on {date}, with {attendees} attendees expected.",
        "Save the date: {title}, {date}, {city}. Seats booked: {attendees}.",
        "On {date} we host the {title} in {city}; {attendees} people have signed up.",
    ]).format(**v)
    return text, v, ["title", "date", "city", "attendees"]


def english_list(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def make_json_extract() -> dict[str, list[dict]]:
    rng = rng_for("json_extract")
    seen: set[str] = set()
    out = {}
    for split, n in (("eval", N_JSON_EVAL), ("train", N_JSON_TRAIN)):
        rows = []
        while len(rows) < n:
            text, values, fields = json_record(rng)
            k = rng.randint(2, min(4, len(fields)))
            picked = rng.sample(fields, k)
            asked = [f for f in fields if f in picked]  # in the record's field order
            prompt = (f"Extract {english_list(asked)} from the text as a JSON object with exactly these "
                      f"keys.\nText: {text}\nJSON:")
            if prompt in seen:
                continue
            seen.add(prompt)
            schema = {"type": "object", "required": list(asked),
                      "properties": {f: {"type": FIELD_TYPES[f]} for f in asked}}
            rows.append({"prompt": check_text(prompt, 10**6, "prompt"), "schema": schema,
                         "answer": {f: values[f] for f in asked}})
        out[f"json_extract/{split}.jsonl"] = rows
    return {k: out[k] for k in ("json_extract/train.jsonl", "json_extract/eval.jsonl")}


# --------------------------------------------------------------------------------------------------------
# 4. Small Python tasks (GRPO with the `code` verifier). Expected values come from running the reference
#    solution here, so a test and its solution can never disagree.
# --------------------------------------------------------------------------------------------------------

def code_tasks(rng: random.Random) -> list[tuple[str, str, list[tuple]]]:
    """(prompt, solution source, argument tuples for the tests)."""
    T: list[tuple[str, str, list[tuple]]] = []

    def task(prompt: str, solution: str, args: list[tuple]) -> None:
        T.append((prompt, solution, args))

    def ints(k: int, lo: int = -50, hi: int = 50) -> list[int]:
        return [rng.randint(lo, hi) for _ in range(k)]

    for name, op, word in [("add", "+", "a + b"), ("subtract", "-", "a - b"), ("multiply", "*", "a * b")]:
        task(f"Write a Python function {name}(a, b) that returns {word}.",
             f"def {name}(a, b):\n    return a {op} b\n",
             [(1, 2), (0, 0), (-3, 7)] + [tuple(ints(2))])
    for k in (5, 10):
        task(f"Write a Python function add_{k}(x) that returns x plus {k}.",
             f"def add_{k}(x):\n    return x + {k}\n", [(0,), (-k,), (ints(1)[0],)])
    task("Write a Python function reverse_string(s) that returns the string s reversed.",
         "def reverse_string(s):\n    return s[::-1]\n",
         [("abc",), ("",), ("racecar",), ("Hello, world",)])
    task("Write a Python function is_even(n) that returns True if the integer n is even, else False.",
         "def is_even(n):\n    return n % 2 == 0\n", [(0,), (7,), (-4,), (11,)])
    task("Write a Python function is_odd(n) that returns True if the integer n is odd, else False.",
         "def is_odd(n):\n    return n % 2 != 0\n", [(0,), (7,), (-3,), (10,)])
    task(("Write a Python function max_of_list(xs) that returns the largest number in the non-empty "
          "list xs."), "def max_of_list(xs):\n    return max(xs)\n",
         [([3, 1, 2],), ([-5, -2, -9],), ([7],), (ints(6),)])
    task(("Write a Python function min_of_list(xs) that returns the smallest number in the non-empty "
          "list xs."), "def min_of_list(xs):\n    return min(xs)\n",
         [([3, 1, 2],), ([-5, -2, -9],), ([7],), (ints(6),)])
    task(("Write a Python function count_vowels(s) that returns how many vowels (a, e, i, o, u, upper or "
          "lower case) are in s."),
         "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')\n",
         [("hello",), ("",), ("AEIOU xyz",), ("rhythm",), ("Programming Is Fun",)])
    for a, b, wa, wb in [(3, 5, "Fizz", "Buzz"), (2, 7, "Ping", "Pong")]:
        name = f"{wa.lower()}{wb.lower()}"
        task((f"Write a Python function {name}(n) that returns '{wa}{wb}' if n is divisible by both {a} "
              f"and {b}, '{wa}' if only by {a}, '{wb}' if only by {b}, and otherwise str(n)."),
             (f"def {name}(n):\n    if n % {a * b} == 0:\n        return '{wa}{wb}'\n"
              f"    if n % {a} == 0:\n        return '{wa}'\n"
              f"    if n % {b} == 0:\n        return '{wb}'\n"
              f"    return str(n)\n"),
             [(a,), (b,), (a * b,), (1,), (a * b * 2 + 1,)])
    task("Write a Python function factorial(n) that returns n! for an integer n >= 0.",
         ("def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n"
          "    return result\n"), [(0,), (1,), (5,), (10,)])
    task(("Write a Python function sum_list(xs) that returns the sum of the numbers in xs (0 for an "
          "empty list)."), "def sum_list(xs):\n    return sum(xs)\n", [([1, 2, 3],), ([],), (ints(5),)])
    task(("Write a Python function product_list(xs) that returns the product of the numbers in xs (1 "
          "for an empty list)."),
         ("def product_list(xs):\n    result = 1\n    for x in xs:\n        result *= x\n"
          "    return result\n"),
         [([1, 2, 3, 4],), ([],), ([5, -2],), ([0, 9],)])
    task(("Write a Python function is_palindrome(s) that returns True if s reads the same forwards and "
          "backwards, else False."), "def is_palindrome(s):\n    return s == s[::-1]\n",
         [("racecar",), ("abca",), ("",), ("noon",), ("ab",)])
    task(("Write a Python function fib(n) that returns the n-th Fibonacci number, with fib(0) == 0 and "
          "fib(1) == 1."),
         ("def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
          "    return a\n"), [(0,), (1,), (2,), (10,), (20,)])
    task(("Write a Python function count_char(s, c) that returns how many times the character c occurs "
          "in the string s."), "def count_char(s, c):\n    return s.count(c)\n",
         [("banana", "a"), ("hello", "z"), ("", "x"), ("mississippi", "s")])
    task("Write a Python function clamp(x, lo, hi) that returns x limited to the range [lo, hi].",
         "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
         [(5, 0, 10), (-3, 0, 10), (42, 0, 10), (10, 0, 10)])
    task(("Write a Python function square_all(xs) that returns a new list with every number in xs "
          "squared."), "def square_all(xs):\n    return [x * x for x in xs]\n",
         [([1, 2, 3],), ([],), ([-4, 0],)])
    task("Write a Python function only_evens(xs) that returns the even numbers of xs, in order.",
         "def only_evens(xs):\n    return [x for x in xs if x % 2 == 0]\n",
         [([1, 2, 3, 4],), ([],), ([5, 7],), (ints(7),)])
    task(("Write a Python function capitalize_words(s) that returns s with the first letter of every "
          "space-separated word in upper case and the rest unchanged."),
         "def capitalize_words(s):\n    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))\n",
         [("hello world",), ("",), ("a bC d",), ("python is fun",)])
    task(("Write a Python function gcd(a, b) that returns the greatest common divisor of two positive "
          "integers."), "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n",
         [(12, 18), (7, 5), (100, 75), (9, 9)])
    task(("Write a Python function digit_sum(n) that returns the sum of the decimal digits of the "
          "integer n >= 0."), "def digit_sum(n):\n    return sum(int(d) for d in str(n))\n",
         [(0,), (123,), (9999,), (rng.randint(10**5, 10**6),)])
    for k in (3, 4, 7):
        task((f"Write a Python function is_divisible_by_{k}(n) that returns True if n is divisible by "
              f"{k}, else False."), f"def is_divisible_by_{k}(n):\n    return n % {k} == 0\n",
             [(0,), (k,), (k + 1,), (k * 11,), (k * 11 - 1,)])
    task("Write a Python function repeat_string(s, n) that returns s repeated n times.",
         "def repeat_string(s, n):\n    return s * n\n", [("ab", 3), ("x", 0), ("hi", 1)])
    for k, word in ((2, "square"), (3, "cube")):
        task(f"Write a Python function {word}(x) that returns x to the power {k}.",
             f"def {word}(x):\n    return x ** {k}\n", [(0,), (3,), (-2,), (ints(1, -9, 9)[0],)])
    task(("Write a Python function word_count(s) that returns the number of whitespace-separated words "
          "in s."), "def word_count(s):\n    return len(s.split())\n",
         [("hello world",), ("",), ("  one   two three ",)])
    task(("Write a Python function average(xs) that returns the mean of the non-empty list of numbers "
          "xs."), "def average(xs):\n    return sum(xs) / len(xs)\n",
         [([1, 2, 3],), ([5],), ([2, 4, 6, 8],)])
    task(("Write a Python function celsius_to_fahrenheit(c) that converts a temperature from Celsius to "
          "Fahrenheit."), "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32\n",
         [(0,), (100,), (-40,)])
    task("Write a Python function remove_spaces(s) that returns s with all space characters removed.",
         "def remove_spaces(s):\n    return s.replace(' ', '')\n", [("a b c",), ("",), ("  hi  ",)])
    task(("Write a Python function is_sorted(xs) that returns True if the list xs is in non-decreasing "
          "order, else False."),
         "def is_sorted(xs):\n    return all(a <= b for a, b in zip(xs, xs[1:]))\n",
         [([1, 2, 2, 3],), ([3, 1],), ([],), ([5],)])
    task("Write a Python function unique_count(xs) that returns how many distinct values are in xs.",
         "def unique_count(xs):\n    return len(set(xs))\n",
         [([1, 1, 2],), ([],), (['a', 'b', 'a', 'c'],)])
    task("Write a Python function last_element(xs) that returns the last item of the non-empty list xs.",
         "def last_element(xs):\n    return xs[-1]\n", [([1, 2, 3],), (['x'],), ([None, 0],)])
    task("Write a Python function triangle_number(n) that returns 1 + 2 + ... + n (0 for n == 0).",
         "def triangle_number(n):\n    return n * (n + 1) // 2\n", [(0,), (1,), (4,), (100,)])
    task(("Write a Python function count_words_longer_than(s, k) that returns how many space-separated "
          "words in s have more than k characters."),
         "def count_words_longer_than(s, k):\n    return sum(1 for w in s.split() if len(w) > k)\n",
         [("the quick brown fox", 3), ("", 1), ("a bb ccc", 0), ("a bb ccc", 2)])
    task("Write a Python function abs_diff(a, b) that returns the absolute difference of a and b.",
         "def abs_diff(a, b):\n    return abs(a - b)\n", [(3, 8), (8, 3), (-2, 2), (5, 5)])
    task(("Write a Python function second_largest(xs) that returns the second largest distinct value "
          "in xs, which has at least two distinct values."),
         "def second_largest(xs):\n    return sorted(set(xs))[-2]\n",
         [([1, 2, 3],), ([5, 5, 4],), ([-1, -7, -3],)])
    task("Write a Python function count_upper(s) that returns how many upper-case letters are in s.",
         "def count_upper(s):\n    return sum(1 for c in s if c.isupper())\n",
         [("Hello World",), ("",), ("ABC def",)])
    return T


def make_code() -> dict[str, list[dict]]:
    rng = rng_for("code")
    rows = []
    for prompt, solution, arg_sets in code_tasks(rng):
        env: dict = {}
        exec(solution, env)  # noqa: S102 -- our own reference solution, written above
        name = solution.split("(", 1)[0].removeprefix("def ")
        fn = env[name]
        tests = []
        for args in arg_sets:
            call = f"{name}({', '.join(repr(a) for a in args)})"
            tests.append(f"assert {call} == {fn(*args)!r}")
        rows.append({"prompt": check_text(prompt, 10**6, "prompt"), "tests": tests,
                     "solution": check_text(solution, 10**6, "solution")})
    return {"code/tasks.jsonl": rows}


# --------------------------------------------------------------------------------------------------------
# Word problems: one-step arithmetic in a sentence, with the number answer (`answer`, for the math verifier)
# and a worked demonstration (`completion`, ending "The answer is N.", for SFT). Held out by (operation,
# numbers): a test question never differs from a training one by the name or the item alone.

N_WORD_TRAIN, N_WORD_TEST = 600, 150
WORD_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo", "Kemal", "Lena",
              "Mo", "Nia", "Omar", "Pia", "Raj", "Sofia", "Tom", "Uma"]
WORD_ITEMS = ["apples", "stickers", "marbles", "books", "pencils", "cards", "coins", "stamps", "shells",
              "cookies"]


def word_problem(rng: random.Random) -> tuple[str, str, int]:
    """(question, worked solution "a op b = c. The answer is c.", answer) for one of four operations."""
    name, item = rng.choice(WORD_NAMES), rng.choice(WORD_ITEMS)
    op = rng.choice(["add", "sub", "mul", "div"])
    if op == "add":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        q = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
        return q, f"{a} + {b} = {a + b}. The answer is {a + b}.", a + b
    if op == "sub":
        a = rng.randint(20, 99)
        b = rng.randint(10, a - 1)
        q = f"{name} had {a} {item} and gave {b} away. How many {item} are left?"
        return q, f"{a} - {b} = {a - b}. The answer is {a - b}.", a - b
    k, a = rng.randint(2, 9), rng.randint(3, 12)
    if op == "mul":
        q = f"A box holds {a} {item}. How many {item} are in {k} boxes?"
        return q, f"{k} x {a} = {k * a}. The answer is {k * a}.", k * a
    q = f"{name} shares {k * a} {item} equally among {k} friends. How many {item} does each friend get?"
    return q, f"{k * a} / {k} = {a}. The answer is {a}.", a


def make_word_problems() -> dict[str, list[dict]]:
    rng = rng_for("word_problems")
    seen: set[str] = set()
    split: dict[str, str] = {}  # the worked equation (operation + numbers) -> "train" | "test"
    rows: dict[str, list[dict]] = {"train": [], "test": []}
    size = {"train": N_WORD_TRAIN, "test": N_WORD_TEST}
    while len(rows["train"]) < N_WORD_TRAIN or len(rows["test"]) < N_WORD_TEST:
        q, worked, answer = word_problem(rng)
        key = worked.split(".")[0]
        if key not in split:
            split[key] = "test" if rng.random() < 0.2 else "train"
        part = split[key]
        if q in seen or len(rows[part]) >= size[part]:
            continue
        seen.add(q)
        row = {"prompt": check_text(q, MAX_ANSWER, "prompt"), "answer": str(answer)}
        rows[part].append({**row, "completion": worked} if part == "train" else row)
    train = [{"prompt": r["prompt"], "completion": r["completion"], "answer": r["answer"]} for r in rows["train"]]
    return {"word_problems/train.jsonl": train, "word_problems/test.jsonl": rows["test"]}


# --------------------------------------------------------------------------------------------------------

def build() -> dict[str, list[dict]]:
    files: dict[str, list[dict]] = {}
    for part in (make_support(), make_triage(), make_json_extract(), make_code(), make_word_problems()):
        files.update(part)
    return files


def dump(rows: list[dict]) -> bytes:
    lines = [json.dumps(r, ensure_ascii=True) for r in rows]
    return ("\n".join(lines) + "\n").encode("ascii")


def stats(files: dict[str, list[dict]]) -> list[str]:
    out = []
    for path, rows in files.items():
        out.append(f"{path}: {len(rows)} rows")
    for path in ("support/pairs_train.jsonl", "support/pairs_eval.jsonl", "support/pairs_chat.jsonl"):
        pairs = []
        for r in files[path]:
            c, j = r["chosen"], r["rejected"]
            if isinstance(c, list):
                c, j = c[-1]["content"], j[-1]["content"]
            pairs.append((c, j))
        longer, ratio, of_means = length_bias(pairs)
        out.append(f"length bias {path}: chosen longer in {longer:.1%} of pairs; len(chosen)/len(rejected): "
                   f"mean per pair {ratio:.2f}, ratio of means {of_means:.2f}")
    counts = {}
    for r in files["ratings/ratings.jsonl"]:
        counts[r["rating"]] = counts.get(r["rating"], 0) + 1
    out.append("ratings: " + ", ".join(f"{k}: {counts.get(k, 0)}" for k in range(1, 6)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE, help="folder to write into (default: data/ itself)")
    ap.add_argument("--quiet", action="store_true", help="do not print row counts and length bias")
    args = ap.parse_args(argv)
    files = build()
    for rel, rows in files.items():
        path = args.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(dump(rows))
    if not args.quiet:
        print("\n".join(stats(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
