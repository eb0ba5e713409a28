"""The `watch` section read before the run folder exists: alarm thresholds, on_alarm, the held-out check.

`prepare_watch(cfg)` validates it (alarm names, the holdout file and its gold fields), so a bad holdout file
leaves nothing behind; rlft.watch.monitor.Watcher then applies it while the run trains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlft.alarms import Thresholds
from rlft.errors import UserError


@dataclass
class Holdout:
    """The held-out check: its rows, how they are scored (rlft.watch.heldout: the metric follows `kind`; `scorer` is the
    verifier's reward function for pass@1), and when to run (`every`: None = a tenth of the run's steps)."""

    rows: list[dict]
    scorer: Callable | None
    verifier: str | None
    every: int | None
    max_new_tokens: int
    kind: str = "verifiable"
    source: str = "file"  # file (watch.holdout) | eval (data.eval) | slice (watch.auto_holdout)
    reward_model: bool = False  # score pairs with the reward model's head (rlft reward)
    tools: Any = None  # rlft.tools.ToolSetup of a tool run: the check plays whole greedy episodes with the tools

    def every_for(self, max_steps: int) -> int:
        return self.every or max(1, -(-max_steps // 10))


@dataclass
class WatchSetup:
    thresholds: Thresholds = field(default_factory=Thresholds)
    on_alarm: str = "warn"
    holdout: Holdout | None = None
    samples: int = 3
    overfit_checks: int = 3
    keep_best: bool = True
    on_check: Callable | None = None  # (step, score) -> stop training? (rlft sweep's pruner)
    holdout_path: str | None = None  # watch.holdout as given (for messages)


def prepare_watch(cfg) -> WatchSetup:
    """Read and validate the `watch` section: thresholds, alarm names, the held-out file and its gold.
    Called before the run folder is touched, so a bad holdout file leaves nothing behind."""
    watch = dict(cfg.values.get("watch") or {}) if cfg is not None else {}
    setup = WatchSetup(Thresholds.from_watch(watch, getattr(cfg, "method", None)), watch.get("on_alarm") or "warn",
                       samples=int(watch.get("samples", 3) if watch.get("samples") is not None else 3),
                       overfit_checks=int(watch.get("overfit_checks") or 3),
                       keep_best=watch.get("keep_best", True) is not False)
    if watch.get("holdout"):
        from rlft.data import read_rows
        from rlft.verifiers.loading import load_verifiers, validate_gold
        from rlft.watch.heldout import holdout_kind

        spec = watch.get("holdout_verifier") or "math"
        rows = read_rows(watch["holdout"], max_rows=watch.get("holdout_max_rows") or 100)
        if (cfg.values.get("data") or {}).get("as_chat"):  # held-out prompts are wrapped like the training prompts
            from rlft.chat.templates import wrap_as_chat

            rows = wrap_as_chat(rows)
        kind = holdout_kind([r.data for r in rows])  # the metric follows the rows: pairs, thumbs, or gold
        if kind == "verifiable":
            validate_gold(rows, [spec])
            scorer, _ = load_verifiers([spec])
        else:
            from rlft.data import validate_preference, validate_thumbs

            (validate_preference if kind == "pairs" else validate_thumbs)(rows)
            scorer, spec = None, None
        setup.holdout = Holdout([r.data for r in rows], scorer, spec, watch.get("holdout_every"),
                                int(watch.get("holdout_max_new_tokens") or 32), kind,
                                reward_model=score_head(cfg))
        setup.holdout_path = str(watch["holdout"])
    return setup


def score_head(cfg) -> bool:
    """Whether the run trains a score-head reward model (its held-out check scores pairs with the head); an
    implicit one (reward.objective implicit) is a language model, checked as DPO's runs are."""
    return getattr(cfg, "method", None) == "reward" and (cfg.values.get("reward") or {}).get("objective") != "implicit"


def check_heldout_rows(cfg, held: list[dict], train_rows: list, what: str, console) -> None:
    """Held-out rows that check something: their prompts are of the training prompts' type (plain strings, or
    chat messages: one line, not a TypeError while scoring), and a warning with the overlap when most of them
    share their prompt with a training row (the check would measure recall of the training data)."""
    from rlft.watch.heldout import prompt_key

    train = [r.data if hasattr(r, "data") else r for r in train_rows]

    def kinds(rows):
        return {"messages" if isinstance(r.get("prompt"), list) else "plain strings" for r in rows if "prompt" in r}

    mine, theirs = kinds(held), kinds(train)
    if len(mine) == 1 and len(theirs) == 1 and mine != theirs:
        raise UserError(f"{what}: its prompts are {mine.pop()}, the training prompts are {theirs.pop()}, so the "
                        "held-out check would not score what training does",
                        "write the held-out prompts in the training rows' form (or --set data.as_chat=true to "
                        "wrap plain prompts as user messages on both)")
    seen, held_keys = {prompt_key(r) for r in train}, {prompt_key(r) for r in held}
    shared = sum(prompt_key(r) in seen for r in held)
    covered = len(seen & held_keys) / max(len(seen), 1)  # the training prompts the held-out rows repeat
    if held and (shared / len(held) >= 0.5 or covered >= 0.5):
        import os

        train_files = (cfg.values.get("data") or {}).get("train") or []
        files = {os.path.realpath(os.path.expanduser(str(f))) for f in train_files}
        path = what.partition("'")[2].rstrip("'")
        same = " (it is the training file)" if os.path.realpath(os.path.expanduser(path)) in files else ""
        console.print(f"[yellow]warning[/]: {what}: {shared} of {len(held)} held-out rows ({shared / len(held):.0%}) "
                      f"share their prompt with training rows{same}: the check measures recall of the training "
                      "data, not what the model learned; hold out rows the run does not train on",
                      highlight=False, soft_wrap=True)


# Runs shorter than this (watch.auto_holdout_min_steps) get no automatic held-out check: ~10 checks of 50+
# rows would cost more than the training (a 4-step SmolLM2 GRPO run: each check ~ one step), and a few
# steps cannot over-train.
AUTO_HOLDOUT_MIN_STEPS = 20


def auto_holdout(cfg, kind: str, train_rows: list, eval_rows: list, setup: WatchSetup, console) -> list:
    """Give a run without `watch.holdout` its held-out check (rlft.watch.heldout): on its eval rows, else on a seeded
    slice of its training rows, which it returns without that slice. Says which, once."""
    from rlft.watch.heldout import metric_for, prompt_groups, slice_size, split_by_prompt

    watch = dict(cfg.values.get("watch") or {})
    if setup.holdout is not None:
        check_heldout_rows(cfg, setup.holdout.rows, train_rows, f"watch.holdout '{setup.holdout_path}'", console)
        return train_rows
    if eval_rows:
        check_heldout_rows(cfg, [r.data if hasattr(r, "data") else r for r in eval_rows], train_rows,
                           f"data.eval '{(cfg.values.get('data') or {}).get('eval')}'", console)
    if not watch.get("auto_holdout", True):
        console.print("[yellow]note[/]: no held-out check (watch.auto_holdout=false): a falling held-out score "
                      "(over-training) goes unseen, and the final model is the last one", highlight=False)
        return train_rows
    steps = int(cfg.train.get("max_steps") or 0)
    least = watch.get("auto_holdout_min_steps")
    if 0 < steps < (AUTO_HOLDOUT_MIN_STEPS if least is None else int(least)):
        console.print(f"[yellow]note[/]: no held-out check: {steps} steps are too few to over-train and each "
                      "check would cost as much as steps (--holdout FILE asks for one)", highlight=False)
        return train_rows
    limit = int(watch.get("holdout_max_rows") or 100)
    source, held = "eval", eval_rows[:limit]
    if not held:
        n = slice_size(len(prompt_groups(train_rows)), float(watch.get("auto_holdout_fraction") or 0.05), limit)
        if n < 10:
            console.print(f"[yellow]note[/]: no held-out check: {len(train_rows)} rows are too few to hold any "
                          "out", highlight=False)
            return train_rows
        source = "slice"
        train_rows, held = split_by_prompt(train_rows, n, cfg.train.seed)
    rows = [r.data for r in held]
    scorer, spec = None, None
    if kind in ("verifiable", "prompts"):
        from rlft.verifiers.loading import load_verifiers

        section = cfg.values.get(cfg.method) or {}
        specs = list(section.get("verifiers") or []) or [section.get("heldout_verifier")
                                                          or watch.get("holdout_verifier") or "math"]
        spec = specs[0]
        scorer, gold = load_verifiers([spec])
        if any(any(k not in r for k in gold) for r in rows):
            console.print(f"[yellow]note[/]: no held-out check: the rows carry no gold for {spec} "
                          f"({', '.join(sorted(gold))})", highlight=False)
            return train_rows if source == "eval" else train_rows + held
    metric = "pair_accuracy" if score_head(cfg) else metric_for(kind, rows)
    section = cfg.values.get(cfg.method) or {}
    if section.get("tools") or section.get("env"):  # common.start_run hands the check the run's tools
        metric = "task_success (greedy episodes with the tools)"
    setup.holdout = Holdout(rows, scorer, spec, watch.get("holdout_every"),
                            int(watch.get("holdout_max_new_tokens") or 32), kind, source, score_head(cfg))
    where = ("the eval rows" if source == "eval" else
             f"a seeded {len(rows) / (len(rows) + len(train_rows)):.0%} of the training rows, not trained on")
    console.print(f"held-out check: {metric} on {len(rows)} rows ({where}); turn off with --set "
                  "watch.auto_holdout=false", highlight=False)
    return train_rows


def mark_reward_scored_heldout(cfg, setup: WatchSetup) -> bool:
    """Tell the alarms when the held-out check is scored by the run's whole reward: one built-in 0/1 verifier
    that judges the task (math, label, json, regex; not partial credit, a format-only check, a forgeable or a
    plugin verifier), the held-out check's own spec, no reward model, no tools or environment. Whatever games
    such a verifier passes the held-out rows too, so alarms.reward_hacking then judges only a held-out fall.
    Returns whether it marked."""
    from rlft.verifiers.registry import REGISTRY

    if setup.holdout is None or not setup.holdout.verifier:
        return False
    section = cfg.values.get(cfg.method) or {}
    verifiers = [str(v).strip() for v in section.get("verifiers") or []]
    builtin = REGISTRY.get(verifiers[0]) if len(verifiers) == 1 else None
    if (builtin is None or builtin.partial_credit or builtin.forgeable or builtin.format_only
            or verifiers != [setup.holdout.verifier.strip()]
            or any(section.get(k) for k in ("reward_model", "tools", "env"))):
        return False
    setup.thresholds.reward_scores_heldout = True
    return True
