"""Samples and reports of runs on chat prompts (message lists): a DPO run on `as_chat` / messages pairs with a
held-out truth crashed at its end when the watch printed its held-out samples
(`AttributeError: 'list' object has no attribute 'replace'`, rlft.watch.monitor._short)."""

from __future__ import annotations

import io
import json

CHAT = [{"role": "system", "content": "You answer for the shop."},
        {"role": "user", "content": "I bought a kettle 12 days ago.\nCan I get a refund?"}]


def test_heldout_samples_of_chat_prompts_print_their_last_message(tmp_path):
    from rich.console import Console

    from rlft.watch.monitor import Watcher
    from rlft.watch.setup import Holdout, WatchSetup

    console = Console(file=io.StringIO(), width=200)
    w = Watcher(tmp_path, console, WatchSetup(holdout=Holdout([], None, "support_policy", 5, 48)))
    w.last_heldout = [{"prompt": CHAT, "completion": "Yes, a refund is fine.", "reward": 1.0},
                      {"prompt": [{"role": "user", "content": "Broken after 3 years."}], "completion": "Sure!",
                       "reward": 0.0}]
    entry = w.samples(5)
    w.close()
    out = console.file.getvalue()
    assert entry["samples"][0]["prompt"] == CHAT  # samples.jsonl keeps the prompt as it was
    assert "I bought a kettle 12 days ago." in out and "Can I" in out and "Broken after 3 years." in out
    assert "'role'" not in out
    assert json.loads((tmp_path / "samples.jsonl").read_text())["samples"][1]["best"]["reward"] == 0.0


def test_rollouts_of_chat_prompts_group_by_their_last_message():
    from rlft.watch.monitor import RolloutRecorder, best_and_worst

    rec = RolloutRecorder()
    wrapped = rec.wrap(lambda completions, **_: [float("yes" in c[-1]["content"]) for c in completions])
    other = [{"role": "user", "content": "Exchange?"}]
    comps = [[{"role": "assistant", "content": t}] for t in ("yes", "no", "yes", "yes")]
    wrapped(prompts=[CHAT, CHAT, other, other], completions=comps, trainer_state=None)
    groups = best_and_worst(rec.latest(), 2)
    assert sorted((g["prompt"], g["n"]) for g in groups) == [("Exchange?", 2), (CHAT[-1]["content"], 2)]
    mixed = next(g for g in groups if g["prompt"] == CHAT[-1]["content"])
    assert mixed["best"]["reward"] == 1.0 and mixed["worst"]["reward"] == 0.0


def test_the_report_shows_a_chat_prompt_as_its_last_message():
    from rlft.report import _cell

    assert _cell(CHAT, 40) == "`I bought a kettle 12 days ago.\\nCan I g…`"
