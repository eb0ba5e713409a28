"""The support store's truth (`support_policy`, rlft/verifiers/support.py) and its generator (data/make_store.py).

Fast, no model: the case table (paraphrases and adversarial replies), every chosen (1) and rejected (0) reply and
every demonstration of the shipped store and of other stores, and the shipped files equal a fresh run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlft.verifiers import REGISTRY, resolve
from rlft.verifiers.support import check_gold, decision_of, score_reply

DATA = Path(__file__).resolve().parents[1] / "data"
STORE = DATA / "support" / "store"
sys.path.insert(0, str(DATA))
import make_store  # noqa: E402

P = {"refund_days": 30, "exchange_days": 60, "warranty_months": 12}
P2 = {"refund_days": 21, "exchange_days": 45, "warranty_months": 24}

# (reply, row fields, expected score)
CASES = [
    # right decision, paraphrased
    ("Yes, you can get a full refund, it is within 30 days.", dict(decision="refund", days=12), 1.0),
    ("No problem, we will refund the hoodie.", dict(decision="refund", days=3), 1.0),
    ("Absolutely, bring it back and we'll refund you.", dict(decision="refund", days=30), 1.0),
    ("We can refund it, and an exchange within 60 days is possible too.", dict(decision="refund", days=5), 1.0),
    ("Sorry, refunds end after 30 days. We can exchange the kettle for you instead.",
     dict(decision="exchange", days=45), 1.0),
    ("The 30-day refund window has passed, but you can still swap it.", dict(decision="exchange", days=31), 1.0),
    ("Sure, we can exchange the coat for another color.", dict(decision="exchange", days=20), 1.0),
    ("That is covered by our 1-year warranty. We will repair or replace it.", dict(decision="repair", months=5), 1.0),
    ("It is under our 24-month warranty, so we will fix it for free.", dict(decision="repair", months=20, policy=P2),
     1.0),
    ("I'm sorry, it is too late to return it. We cannot refund or exchange it.", dict(decision="none", days=90), 1.0),
    ("Sorry, the 1-year warranty has expired for this item.", dict(decision="none", months=14), 1.0),
    ("Sorry, 3 weeks is past our 21-day window, so a refund is not possible.",
     dict(decision="exchange", days=21, policy=P2), 0.0),  # a denial where an exchange is owed: no exchange offered
    ("Refunds are possible for 30 days; yours is 3 weeks old, so we will refund it.",
     dict(decision="refund", days=21), 1.0),  # the customer's own count in weeks is allowed
    # wrong decision
    ("Sorry, we cannot refund the lamp, but we can exchange it.", dict(decision="refund", days=10), 0.0),
    ("No problem, we will refund the lamp in full.", dict(decision="exchange", days=40), 0.0),
    ("Sure, bring it in and we will exchange it.", dict(decision="none", days=120), 0.0),
    ("Sorry, the warranty does not cover this, so the repair will cost extra.", dict(decision="repair", months=4), 0.0),
    ("No problem, we will replace it for free.", dict(decision="none", months=30), 0.0),
    ("We can exchange it or refund it, whichever you like.", dict(decision="exchange", days=45), 0.0),
    # hard negatives: right decision, wrong policy number
    ("Yes, that is within our 14-day window, so we will refund you.", dict(decision="refund", days=10), 0.0),
    ("Sorry, refunds end after 45 days. We can exchange it instead.", dict(decision="exchange", days=50), 0.0),
    ("That is covered by our 3-year warranty. We will repair it.", dict(decision="repair", months=6), 0.0),
    ("Sorry, our 90-day exchange window has passed, so we cannot take it back.", dict(decision="none", days=100), 0.0),
    ("Yes, we will refund it: refunds are allowed for thirty days... or ninety days.", dict(decision="refund", days=2),
     0.0),
    # evasions and adversarial replies
    ("Please check our website for details on our policies.", dict(decision="refund", days=3), 0.0),
    ("", dict(decision="none", days=100), 0.0),
    ("Not my problem.", dict(decision="none", days=100), 0.0),  # rude and names no decision: evades
    ("refund refund refund exchange repair", dict(decision="refund", days=3), 0.0),  # keyword spam offers nothing
    ("If you still have it, we may refund it.", dict(decision="refund", days=3), 0.0),  # conditional: no decision
    ("Sorry, we cannot refund it. Yes, we will refund it.", dict(decision="refund", days=3), 0.0),  # contradiction
    ("We will refund it. We will exchange it. We will repair it.", dict(decision="exchange", days=40), 0.0),
]


@pytest.mark.parametrize("reply,fields,expected", CASES, ids=[c[0][:40] for c in CASES])
def test_case_table(reply, fields, expected):
    fields = {"policy": P, **fields}
    assert score_reply(reply, fields["decision"], fields["policy"], fields.get("days"), fields.get("months")) \
        == expected, decision_of(reply)


def test_registered_like_the_others():
    verifier, weight = resolve("support_policy")
    assert verifier is REGISTRY["support_policy"] and weight == 1.0
    assert verifier.gold_fields == ("decision", "policy")
    assert verifier.fn(["Yes, we will refund it.", "Sorry, no."], decision=["refund", "refund"], policy=[P, P],
                       days=[3, 3]) == [1.0, 0.0]
    assert check_gold("decision", "maybe") and check_gold("policy", {"refund_days": 30})
    assert check_gold("decision", "none") is None and check_gold("policy", P) is None


STORES = [(None, 0), ({"refund": 21, "exchange": 45, "warranty": 24}, 7), ({"refund": 14, "exchange": 30,
                                                                              "warranty": 6}, 3)]


@pytest.mark.parametrize("policy,seed", STORES)
def test_chosen_score_1_rejected_and_wrong_demos_0(policy, seed):
    made = make_store.rows(policy, seed)
    kinds_seen = set()
    for name in ("pairs_train", "pairs_eval", "demos"):
        for r in made[name]:
            t = r["_truth"]
            texts = [r["chosen"], r["rejected"]] if "chosen" in r else [r["completion"]]
            for text, kind in zip(texts, r["_kinds"]):
                kinds_seen.add(kind)
                got = score_reply(text, t["decision"], t["policy"], t.get("days"), t.get("months"))
                assert got == (1.0 if kind == "good" else 0.0), (name, kind, t, text)
    assert kinds_seen == {"good", "wrong_decision", "wrong_number", "evasive", "rude"}


def test_shipped_store_is_a_fresh_run(tmp_path):
    proc = subprocess.run([sys.executable, str(DATA / "make_store.py"), "--out", str(tmp_path)], check=False,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for f in sorted(STORE.iterdir()):
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f"{f} differs: run python data/make_store.py"
    counts = {f.stem: len(f.read_text().splitlines()) for f in STORE.glob("*.jsonl")}
    assert counts == {"demos": 200, "pairs_train": 1000, "pairs_eval": 100, "test": 150}
    test_rows = [json.loads(x) for x in (STORE / "test.jsonl").read_text().splitlines()]
    assert {r["decision"] for r in test_rows} == {"refund", "exchange", "repair", "none"}
    prompts = [json.loads(x)["prompt"] for f in STORE.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert len(prompts) == len(set(prompts)), "a prompt occurs twice across the store's files"


def test_another_store_is_one_command(tmp_path):
    proc = subprocess.run([sys.executable, str(DATA / "make_store.py"), "--out", str(tmp_path), "--seed", "7",
                           "--policy", "refund=21,exchange=45,warranty=24"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    store = json.loads((tmp_path / "policy.json").read_text())
    assert store["policy"] == {"refund": 21, "exchange": 45, "warranty": 24} and store["name"] != "Northwind"
    shipped = {json.loads(x)["prompt"] for x in (STORE / "pairs_train.jsonl").read_text().splitlines()}
    other = [json.loads(x) for x in (tmp_path / "pairs_train.jsonl").read_text().splitlines()]
    assert not shipped & {r["prompt"] for r in other}
    assert any("21-day" in r["chosen"] for r in other) and not any("30-day" in r["chosen"] for r in other)
    bad = subprocess.run([sys.executable, str(DATA / "make_store.py"), "--out", str(tmp_path / "x"), "--policy",
                          "refund=90,exchange=30"], capture_output=True, text=True)
    assert bad.returncode == 2 and "refund < exchange" in bad.stderr and not (tmp_path / "x").exists()
