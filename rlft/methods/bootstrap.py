"""Rejection-sampling fine-tuning (expert iteration; STaR, RFT, DSPy's BootstrapFinetune) against verifiers.

What it is. Each round, for each prompt of the round:
  1. sample N completions (`samples`) at `temperature` from the teacher: by default the model being trained as it
     stands after the previous round (expert iteration); with `teacher`, a fixed model (RFT / distillation by
     filtering), whose text is trained on (so its tokenizer may differ from the student's);
  2. score them with the run's verifiers (any built-in, plugin file or weighted sum, as GRPO scores them);
  3. keep at most M (`keep_per_prompt`) distinct accepted completions: reward >= `threshold`, ended by a stop token
     (a cut-off answer would teach the model not to stop), the highest reward first (partial credit), then the
     shorter; distinct after whitespace is normalised;
  4. fine-tune on the kept (prompt, completion) rows with TRL's SFTTrainer (loss on the completion only), LoRA or
     full as the run's `model` section says. The same model object trains in every round, so a LoRA run keeps one
     adapter (on the merged parent when it starts from an earlier LoRA stage: rlft.models.load_model).
The next round samples from the fine-tuned model. After every round the held-out check (watch.holdout, the eval
rows, or a seeded slice of the prompts: rlft.watch.auto_holdout) scores the model greedily; the run folder keeps
the round chosen by rlft.watch.overfit.kept_check (the start unless a round beats it by more than its noise; of the
rounds that do, the last when within noise of the best, else the best), the last round beside it in last/.

Before anything is written, the pre-flight samples the first `preflight_prompts` prompts exactly as round 1 will
(same model, temperature, N) and refuses the run (exit 3) when not one sample is accepted: there is nothing to
keep, and the fix is demonstrations (rlft sft), a higher temperature, more samples or a lower threshold. Those
samples are round 1's samples for those prompts (not drawn twice).

Written per round into metrics.jsonl (`step` is the round): sampled, accepted, acceptance rate, prompts solved,
prompts by acceptance band (none / under half / half or more / all), kept rows, tokens trained, the round's
training loss, sampled tokens per second, and the held-out score. unsolved.jsonl lists the prompts no round
solved. Alarms: `acceptance_collapse` (a round accepts under half the first round's share), `format_only_reward`
(a verifier that checks the format only: the model learns the format), `template_answers` (one accepted text
kept for many different prompts).

Where it departs from the papers: RFT (Yuan et al. 2023) samples once from the SFT model and keeps distinct
reasoning paths by their equations; here distinct means distinct text, and rounds re-sample (expert iteration,
Anthony et al. 2017; Havrilla et al. 2024). STaR's rationalisation (hinting the answer for unsolved prompts) is
not done: unsolved prompts are listed instead. Each round continues the same weights (STaR restarts from the base).
Tools and environments (`--tools`, `--env`) are refused: the kept rows would have to be whole episodes.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from rlft.config import RunConfig
from rlft.errors import UserError
from rlft.methods.bootstrap_sampling import (
    bands,
    completion_row,
    judge,
    keep_accepted,
    sample_rows,
    template_share,
)
from rlft.methods.common import Prepared, RunResult, build_trl_config, load_run_tokenizer, start_run

KIND = "verifiable"
SECTION = "bootstrap"
COLLAPSE_RATIO = 0.5  # acceptance_collapse: a round's acceptance under half the first round's
TEMPLATE_SHARE, TEMPLATE_MIN = 0.3, 5  # template_answers: one text kept for >= 30% of the kept rows (and >= 5 prompts)
SAMPLING_SHARE = 0.6  # with train.max_minutes: a round samples for at most this share of its time


def round_fits(now: float, began: float, limit_minutes: float, tail_seconds: float) -> bool:
    """Whether another round fits in train.max_minutes: what is left after its sampling (1 - SAMPLING_SHARE of
    the time left, sampling_deadline's last-round share) holds the last round's fine-tune and check again, so the
    run ends near its limit instead of a whole fine-tune and check past it."""
    left = began + 60 * limit_minutes - now
    return left > 0 and (1 - SAMPLING_SHARE) * left >= tail_seconds


def sampling_deadline(now: float, began: float, limit_minutes: float, k: int, rounds: int) -> float:
    """When round k (of `rounds`) stops sampling under train.max_minutes: SAMPLING_SHARE of its part of the time
    left, the time left shared equally by the rounds still to run (k..rounds); the rest of its part is for its
    fine-tune and held-out check. What the start's held-out check or a slow round took comes out of every later
    round, not the next one alone (a fixed k/rounds schedule left round 1 a fifth of its share after the start's
    check on a loaded machine).
    """
    left = max(0.0, began + 60 * limit_minutes - now)
    return now + SAMPLING_SHARE * left / max(1, rounds - k + 1)


# --------------------------------------------------------------------------- plan (--dry-run)


def plan(cfg: RunConfig, n_prompts: int) -> dict[str, Any]:
    sec = cfg.values[SECTION]
    per_round = min(n_prompts, sec.get("prompts_per_round") or n_prompts)
    rollouts = per_round * sec["samples"] * sec["rounds"]
    return {"rounds": sec["rounds"], "prompts_per_round": per_round, "samples": sec["samples"], "rollouts": rollouts,
            "max_generated_tokens": rollouts * sec["max_new_tokens"],
            "max_kept_rows_per_round": per_round * sec["keep_per_prompt"]}


def plan_text(cfg: RunConfig) -> str:
    """`rlft bootstrap --dry-run`: the rollout plan of the run's prompts (read and gold-checked, no model loaded)."""
    from rlft.data import read_many
    from rlft.verifiers.loading import validate_gold

    rows = read_many(cfg.data.train, fields=cfg.data.fields, split=cfg.data.split, max_rows=cfg.data.max_rows)
    validate_gold(rows, list(cfg.values[SECTION]["verifiers"]))
    p = plan(cfg, len(rows))
    return (f"BOOTSTRAP plan: {p['rounds']} rounds x {p['prompts_per_round']} prompts x N={p['samples']} = "
            f"{p['rollouts']:,} sampled completions\n"
            f"generated tokens: at most {p['max_generated_tokens']:,}\n"
            f"fine-tuned on at most {p['max_kept_rows_per_round']:,} kept rows a round "
            f"(keep_per_prompt {cfg.values[SECTION]['keep_per_prompt']})")


# --------------------------------------------------------------------------- prepare


def prepare(cfg: RunConfig, train_rows, eval_rows, console: Console) -> Prepared:
    """Before the run folder exists: refuse tools, validate gold, load the student (and teacher), pre-flight."""
    from rlft.chat.templates import stop_token_ids
    from rlft.models import load_for_inference, load_model, load_tokenizer
    from rlft.preflight import PreflightRefused
    from rlft.speed import attach
    from rlft.verifiers.loading import build_reward, validate_gold

    sec = cfg.values[SECTION]
    if sec.get("tools") or sec.get("env"):
        raise UserError("bootstrap does not play tool episodes (--tools / --env): the kept rows would have to be "
                        "whole episodes", "use rlft grpo --tools/--env, or drop them")
    specs = list(sec["verifiers"])
    if not specs:
        raise UserError("bootstrap needs a verifier to accept samples", "pass --verifier NAME (e.g. math)")
    validate_gold(train_rows + eval_rows, specs)
    reward_fn = build_reward(specs, None)
    tok = load_run_tokenizer(cfg)
    model = load_model(cfg.model)
    model.generation_config.eos_token_id = stop_token_ids(tok, model)
    attach(model, console)  # a LoRA policy on the CPU samples from its plain copy (rlft.speed.sampling)
    teacher = teacher_tok = None
    if sec.get("teacher"):
        teacher, teacher_tok = load_for_inference(sec["teacher"]), load_tokenizer(sec["teacher"])
        teacher.generation_config.eos_token_id = stop_token_ids(teacher_tok, teacher)
    prepared = Prepared(train_rows, eval_rows, tok=tok, model=model, reward_fn=reward_fn)
    prepared.teacher = (teacher, teacher_tok)  # type: ignore[attr-defined]
    prepared.early = []  # type: ignore[attr-defined]
    if not sec["preflight"]:
        return prepared
    import torch

    torch.manual_seed(cfg.train.seed)
    rows = [r.data for r in train_rows[:sec["preflight_prompts"]]]
    net, ntok = (teacher, teacher_tok) if teacher is not None else (model, tok)
    done, _, _ = sample_rows(net, ntok, rows, reward_fn, samples=sec["samples"], temperature=sec["temperature"],
                             max_new_tokens=sec["max_new_tokens"], batch=sec["sample_batch"])
    prepared.early = done  # type: ignore[attr-defined]  # round 1's samples for these prompts
    result = judge(done, sec)
    prepared.preflight = result
    console.print(f"pre-flight: {result.line()}", highlight=False)
    if result.verdict == "refuse":
        raise PreflightRefused(f"pre-flight refused: no sample of {result.prompts} prompts x {result.samples} at "
                               f"temperature {result.temperature:g} was accepted (pass rate {result.pass_rate:.0%}): "
                               "bootstrap would have nothing to keep", "; ".join(result.advice))
    return prepared


# --------------------------------------------------------------------------- the run


def run(cfg: RunConfig, overwrite: bool = False, resume: bool = False, console: Console | None = None) -> RunResult:
    """Rounds of sample -> keep -> fine-tune (see the module docstring); the run folder as every method's."""
    from rlft.run.folder import Interrupt

    if resume:
        raise UserError("bootstrap has no --resume: a round is minutes of sampling and one short SFT",
                        "rerun the same command with --overwrite (or another --output-dir)")
    run_, prepared = start_run(cfg, KIND, prepare, overwrite=overwrite, console=console, held_out=True)
    interrupt = Interrupt()
    with run_.record.closing_on_error():
        with interrupt.installed():
            return _rounds(cfg, run_, prepared, interrupt)


def _rounds(cfg: RunConfig, run_, prepared: Prepared, interrupt) -> RunResult:
    import torch

    from rlft.alarms import Alarm
    from rlft.run.folder import write_json
    from rlft.watch.overfit import Check, summary

    sec = cfg.values[SECTION]
    out, console, watch = run_.out, run_.console, run_.watch
    model, tok, reward_fn = prepared.model, prepared.tok, prepared.reward_fn
    teacher, teacher_tok = getattr(prepared, "teacher", (None, None))
    early = {id(s.row): s for s in getattr(prepared, "early", [])}
    if prepared.preflight is not None:
        write_json(out / "preflight.json", prepared.preflight.as_dict())
    rows = [r.data for r in prepared.train_rows]
    per_round = min(len(rows), sec.get("prompts_per_round") or len(rows))
    limit = cfg.train.get("max_minutes")
    began = time.time()
    metrics_path, alarms_path = out / "metrics.jsonl", out / "alarms.jsonl"
    alarms: list[Alarm] = []
    checks: list[Check] = []
    solved: dict[int, int] = {}  # row index -> rounds that kept a sample of it
    sampled_idx: set[int] = set()

    def log(record: dict) -> None:
        with metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def alarm(a: Alarm) -> None:
        if a.name in set(cfg.watch.get("ignore") or ()):
            return
        alarms.append(a)
        with alarms_path.open("a") as f:
            f.write(json.dumps(a.as_dict()) + "\n")
        console.print(f"[bold red]ALARM[/] {a.name} at round {a.step}: {a.message}\n  fix: {a.fix}", highlight=False)

    def save(path: Path) -> None:
        model.save_pretrained(str(path))
        tok.save_pretrained(str(path))

    def check(step: int) -> Check | None:
        if watch.holdout is None:
            return None
        from rlft.watch.heldout import measure

        h = watch.holdout
        m = measure(h.kind, model, tok, h.rows, scorer=h.scorer,
                    max_new_tokens=sec.get("heldout_max_new_tokens") or h.max_new_tokens)
        c = Check(step, m.value, m.per_row, m.metric, m.stderr)
        checks.append(c)
        log({"step": step, "round": step, **m.record()})
        console.print(f"held-out {m.metric} after round {step}: {m.value:.3f} +- {m.stderr:.3f} ({m.n} rows)",
                      highlight=False)
        return c

    for name in sec["verifiers"]:
        from rlft.verifiers import resolve

        v, _ = resolve(name)
        if getattr(v, "format_only", False):
            alarm(Alarm("format_only_reward", 0, f"the {v.name} verifier checks the format only: bootstrap keeps "
                        "any well-formed answer, right or wrong, and the model learns the format",
                        {"verifier": v.name}, "add a correctness verifier (e.g. --verifier math)"))
    start_check = check(0)
    best_step: int | None = None
    if start_check is not None and watch.keep_best:
        save(out / "start")
    console.print(f"[bold]rlft bootstrap[/]: {len(rows)} prompts, {sec['rounds']} rounds x {per_round} prompts x "
                  f"N={sec['samples']} -> {out}", highlight=False)
    first_rate: float | None = None
    rounds_done, total_rollouts, total_tokens, last_gain = 0, 0, 0, None
    timed_out = None
    tail = 0.0  # the last round's fine-tune + held-out check, seconds
    for k in range(1, sec["rounds"] + 1):
        if interrupt.signum is not None:
            break
        now = time.time()
        # round 1 always runs (its pre-flight samples at least); a later one only when its fine-tune and check fit
        if limit and k > 1 and not round_fits(now, began, limit, tail):
            timed_out = (f"train.max_minutes={limit:g} reached before round {k}" if now - began > 60 * limit else
                         f"train.max_minutes={limit:g}: round {k}'s fine-tune and check ({tail:.0f} s last round) "
                         "would not fit in what is left")
            console.print(f"[yellow]time limit[/]: {timed_out}; the run ends with the rounds it has", highlight=False)
            break
        deadline = sampling_deadline(now, began, limit, k, sec["rounds"]) if limit else None
        idx = [((k - 1) * per_round + i) % len(rows) for i in range(per_round)]
        todo = [i for i in idx if id(rows[i]) not in early or k > 1]
        torch.manual_seed(cfg.train.seed + k)
        net, ntok = (teacher, teacher_tok) if teacher is not None else (model, tok)
        fresh, tokens, secs = sample_rows(net, ntok, [rows[i] for i in todo], reward_fn, samples=sec["samples"],
                                          temperature=sec["temperature"], max_new_tokens=sec["max_new_tokens"],
                                          batch=sec["sample_batch"], deadline=deadline)
        by_row = {id(s.row): s for s in fresh}
        if k == 1:
            by_row.update(early)
        results = [(i, by_row[id(rows[i])]) for i in idx if id(rows[i]) in by_row]
        kept_rows, kept_texts, shares = [], [], []
        for i, s in results:
            sampled_idx.add(i)
            kept = keep_accepted(s.samples, s.rewards, sec["threshold"], sec["keep_per_prompt"])
            shares.append(sum(1 for (t, f), r in zip(s.samples, s.rewards) if f and r >= sec["threshold"])
                          / max(len(s.samples), 1))
            if kept:
                solved[i] = solved.get(i, 0) + 1
            kept_texts.append([t for t, _ in kept])
            kept_rows += [completion_row(s.row["prompt"], t) for t, _ in kept]
        n_sampled = sum(len(s.samples) for _, s in results)
        accepted = sum(round(x * len(s.samples)) for x, (_, s) in zip(shares, results))
        rate = accepted / max(n_sampled, 1)
        total_rollouts += n_sampled
        record = {"step": k, "round": k, "bootstrap/prompts": len(results), "bootstrap/sampled": n_sampled,
                  "bootstrap/accepted": accepted, "bootstrap/acceptance_rate": round(rate, 4),
                  "bootstrap/prompts_solved": sum(1 for t in kept_texts if t),
                  "bootstrap/kept_rows": len(kept_rows), "reward": round(sum(r for _, s in results for r in s.rewards)
                                                                        / max(n_sampled, 1), 4),
                  **bands(shares)}
        if secs > 0 and tokens:
            record["bootstrap/sampled_tokens_per_s"] = round(tokens / secs, 1)
        console.print(f"round {k}: {n_sampled} samples of {len(results)} prompts, {accepted} accepted ({rate:.0%}), "
                      f"{record['bootstrap/prompts_solved']} prompts solved, {len(kept_rows)} rows kept",
                      highlight=False)
        if first_rate is None:
            first_rate = rate
        elif first_rate > 0 and rate < COLLAPSE_RATIO * first_rate:
            alarm(Alarm("acceptance_collapse", k, f"round {k} accepted {rate:.0%} of its samples against "
                        f"{first_rate:.0%} in round 1: the model is getting worse at what it is trained on",
                        {"acceptance": {1: round(first_rate, 4), k: round(rate, 4)}},
                        "fewer epochs per round or a lower learning rate; the run keeps the best round"))
        share, text, n_prompts = template_share(kept_texts)
        if n_prompts >= TEMPLATE_MIN and share >= TEMPLATE_SHARE:
            alarm(Alarm("template_answers", k, f"one accepted text was kept for {n_prompts} prompts ({share:.0%} of "
                        f"the kept rows): {text[:80]!r}; the verifier accepts a template, not a worked answer",
                        {"text": text[:200], "prompts": n_prompts, "share": round(share, 4)},
                        "check the verifier (it may accept a guess), or raise --threshold"))
        sampled_at = time.time()
        if kept_rows:
            loss, trained_tokens = _fine_tune(cfg, out / f"round-{k}", model, tok, kept_rows)
            record.update({"loss": round(loss, 4), "bootstrap/tokens_trained": trained_tokens})
            total_tokens += trained_tokens
        log(record)
        rounds_done = k
        c = check(k)
        tail = time.time() - sampled_at
        if c is not None and watch.keep_best:
            from rlft.watch.overfit import best_check

            if best_check(checks) is c:
                save(out / "best")
                best_step = k
            if len(checks) >= 2:
                last_gain = checks[-1].score - checks[-2].score
        if not kept_rows:
            console.print(f"round {k} kept nothing: stopping", highlight=False)
            break
    # unsolved prompts: sampled in some round, never kept
    unsolved = [rows[i] for i in sorted(sampled_idx) if i not in solved]
    with (out / "unsolved.jsonl").open("w") as f:
        for r in unsolved:
            f.write(json.dumps(r, default=str) + "\n")
    if unsolved:
        console.print(f"{len(unsolved)} of {len(sampled_idx)} prompts were never solved (unsolved.jsonl): they "
                      "need demonstrations (rlft sft) or GRPO with a partial-credit verifier", highlight=False)
    fields: dict[str, Any] = {"rounds": rounds_done, "rollouts": total_rollouts, "tokens_trained": total_tokens,
                              "unsolved_prompts": len(unsolved), "sampled_prompts": len(sampled_idx)}
    if last_gain is not None:
        fields["last_round_gain"] = round(last_gain, 4)
    if timed_out:
        fields["time_limit"] = timed_out
    kept_info = _keep(out, checks, best_step, rounds_done, save, console, watch.keep_best)
    if interrupt.signum is not None:
        # no checkpoint to resume from: the rounds so far are in the run folder as a finished model
        run_.record.finish("interrupted", global_step=rounds_done, signal=interrupt.signum,
                           alarms=[a.name for a in alarms], **fields, **kept_info)
        console.print(f"[yellow]interrupted[/] after round {rounds_done}; the model so far is in {out}")
        return RunResult("interrupted", out, 128 + interrupt.signum)
    final: dict[str, Any] = {}
    if prepared.eval_rows:
        from rlft.evaluate import evaluate_rows
        from rlft.verifiers.loading import load_verifiers

        checker = load_verifiers(list(sec["verifiers"]))[0]
        res = evaluate_rows(model, tok, [r.data for r in prepared.eval_rows], scorer=checker,
                            max_new_tokens=sec.get("heldout_max_new_tokens") or sec["max_new_tokens"], served=True)
        final = {"heldout_pass_at_1": res.pass_at_1, "heldout_mean_reward": res.mean_reward}
    if checks:
        final.setdefault("heldout/score", checks[-1].score)
    return run_.end("completed", rounds_done, alarms=[a.name for a in alarms], final=final,
                    train_seconds=round(time.time() - began, 2), **fields,
                    **({"heldout": summary(checks)} if checks else {}), **kept_info)


def _keep(out: Path, checks, best_step, last_step: int, save, console, enabled: bool) -> dict[str, Any]:
    """The kept round's model into the run folder (rlft.watch.overfit.kept_check), the last one in last/ when they
    differ; start/ removed, and best/ unless the last round is kept within noise of it (rlft.methods.keep)."""
    import shutil

    from rlft.methods.keep import beside, tidy
    from rlft.watch.overfit import kept_check

    info: dict[str, Any] = {}
    kept, why = kept_check(checks) if checks else (None, "no held-out check ran")
    source = None
    if enabled and kept is not None and kept.step != last_step:
        source = out / ("start" if kept.step == 0 else "best")
        if kept.step not in (0, best_step) or not source.is_dir():
            source = None
    if source is not None:
        save(out / "last")
        for f in source.iterdir():
            if f.is_file():
                shutil.copy2(f, out / f.name)
        console.print(f"[bold]kept[/] the model of round {kept.step}: {why}", highlight=False)
    else:
        save(out)
    better = None if source is not None else beside(checks, best_step, kept, last_step, out, enabled)
    tidy(out, better, console)
    if kept is not None:
        info["kept"] = {"step": kept.step if source is not None else last_step,
                        "score": round(kept.score if source is not None else checks[-1].score, 4), "why": why}
        if better is not None:
            info["kept"]["best_beside"] = {"step": better.step, "score": round(better.score, 4), "folder": "best"}
    return info


def _fine_tune(cfg: RunConfig, folder: Path, model, tok, kept_rows: list[dict]) -> tuple[float, int]:
    """One round's SFT on the kept rows (TRL SFTTrainer, completion-only loss) of the same model object: (mean
    training loss, completion tokens trained on). The round's folder keeps no checkpoint."""
    import shutil

    from trl import SFTConfig, SFTTrainer

    from rlft.data import Row
    from rlft.data.table import to_dataset
    from rlft.methods.common import clamp_max_length

    sec = cfg.values[SECTION]
    args = build_trl_config(cfg, SFTConfig, folder, False, max_length=clamp_max_length(sec["max_length"], model),
                            save_strategy="no", report_to=[])
    data = to_dataset([Row("bootstrap", i + 1, r) for i, r in enumerate(kept_rows)], ("prompt", "completion"))
    trainer = SFTTrainer(model=model, args=args, processing_class=tok, train_dataset=data)
    _drop_printer(trainer)
    result = trainer.train()
    tokens = 0
    for ex in trainer.train_dataset:
        mask = ex.get("completion_mask") or ex.get("assistant_masks")
        tokens += int(sum(mask)) if mask is not None else len(ex.get("input_ids", []))
    model.eval()
    shutil.rmtree(folder, ignore_errors=True)
    loss = float(result.training_loss) if result.training_loss is not None else math.nan
    return loss, tokens


def _drop_printer(trainer) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)

