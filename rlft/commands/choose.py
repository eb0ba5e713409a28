"""`rlft choose`: recommend SFT, DPO, KTO, GRPO, RLOO, reward model + PPO or distillation from the signal.

Three ways in: flags (`--signal pairs --rows 2000`), data (`--data FILE`, read and linted, the signal
inferred from the rows), or, with neither, questions on a terminal (without one it prints what it needs
and exits 2). The rules are in rlft/choose/rules.py; this module only parses, asks and prints. It imports no
torch: the pre-flight (`--model` with verifiable data) is the one step that loads a model, through a
lazy import of rlft.preflight.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from rlft.commands.options import AsChat
from rlft.errors import UserError


class SignalKind(str, Enum):
    demonstrations = "demonstrations"
    pairs = "pairs"
    verifier = "verifier"
    ratings = "ratings"
    taste = "taste"
    thumbs = "thumbs"
    teacher = "teacher"
    environment = "environment"


class Budget(str, Enum):
    low = "low"
    medium = "medium"
    high = "high"


SIGNAL_HELP = {
    "demonstrations": "correct outputs written out (prompt + completion, or chats)",
    "pairs": "a chosen and a rejected answer per prompt",
    "verifier": "a program that checks answers (math, labels, JSON, unit tests)",
    "ratings": "a score (e.g. 1-5) per answer",
    "taste": "human judgement of quality that fixed pairs cannot cover",
    "thumbs": "thumbs up/down (true/false) on single answers, unpaired",
    "teacher": "a stronger model with the same tokenizer that you can run",
    "environment": "tools or an environment the model acts in, with a reward or a verifier on its answer",
}

NEEDS_TEXT = (
    "rlft choose needs to know what signal you have. Either read it from your data:\n"
    "  rlft choose --data FILE [--data FILE ...]\n"
    "or say it with flags:\n"
    "  rlft choose --signal demonstrations|pairs|verifier|ratings|taste|thumbs|teacher|environment --rows N "
    "[--sft-model/--no-sft-model] [--budget low|medium|high]\n"
    "or run `rlft choose` on a terminal to be asked."
)

LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def _is_terminal() -> bool:
    """Whether we may ask questions (a function, so tests can pretend)."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def choose(
    signal: Annotated[Optional[SignalKind], typer.Option(
        "--signal", "-s", help="What you have: demonstrations, pairs, verifier, ratings, taste (human "
        "judgement that pairs cannot cover), thumbs (true/false labels), teacher (a stronger model) or "
        "environment (tools the model calls: grpo --env). With "
        "--data, only `taste` (or `teacher`: the files are its prompts) may be added.")] = None,
    data: Annotated[Optional[list[str]], typer.Option(
        "--data", "-d", help="Data file(s) to read the signal from (.jsonl/.json/.csv). Repeatable.")] = None,
    rows: Annotated[Optional[int], typer.Option(
        "--rows", "-n", min=1,
        help="How many rows you have (pairs, prompts, demonstrations); read from --data when given.")] = None,
    sft_model: Annotated[Optional[bool], typer.Option(
        "--sft-model/--no-sft-model", help="Your model already answers usably (SFT'd or instruct) / it is a "
        "base model.")] = None,
    budget: Annotated[Optional[Budget], typer.Option(
        "--budget", help="Compute budget: high = you can afford an online RL loop (4 networks, sampling).")] = None,
    verifier: Annotated[Optional[str], typer.Option(
        "--verifier",
        help="Registered verifier for verifiable rows (picked from the gold fields if not given).")] = None,
    format_only: Annotated[bool, typer.Option(
        "--format-only", help="Your verifier checks the format only, not correctness.")] = False,
    model: Annotated[Optional[str], typer.Option(
        "--model", "-m", help="Your model; with verifiable --data, a pre-flight measures its pass rate.")] = None,
    pass_rate: Annotated[Optional[float], typer.Option(
        "--pass-rate", min=0.0, max=1.0,
        help="Measured share of sampled answers that pass (skip the pre-flight).")] = None,
    mixed_fraction: Annotated[Optional[float], typer.Option(
        "--mixed-fraction", min=0.0, max=1.0, help="Measured share of prompts whose G rewards differ.")] = None,
    num_generations: Annotated[int, typer.Option(
        "--num-generations", min=2, help="Pre-flight: samples per prompt (G).")] = 8,
    max_prompts: Annotated[int, typer.Option("--max-prompts", min=1, help="Pre-flight: prompts to sample.")] = 64,
    json_out: Annotated[bool, typer.Option("--json", help="Print the recommendation as one JSON object.")] = False,
    as_chat: AsChat = False,
) -> None:
    """Recommend SFT, DPO, KTO, GRPO, RLOO, reward model + PPO or distillation, and the exact next command."""
    from rlft.choose.from_data import get_verifier, infer_signal, preflight
    from rlft.choose.rules import Signal, recommend

    kind = signal.value if signal else None
    common = {"has_sft_model": sft_model, "budget": budget.value if budget else None, "model": model,
              "format_only": format_only}
    if data and kind == "teacher":  # the files are the prompts the student will sample on
        from rlft.data import read_many

        s = Signal(kind="teacher", rows=len(read_many(data)), paths=list(data), **common)
    elif data:
        s = infer_signal(data, verifier=verifier, **common)
        if kind == "taste":
            if s.kind not in ("pairs", "ratings"):
                raise UserError(f"--signal taste needs comparisons, but the data holds {s.kind} rows",
                                "pass preference pairs (prompt/chosen/rejected) with --signal taste")
            s.taste = True
        elif kind and kind != s.kind:
            raise UserError(f"--signal {kind}, but the data holds {s.kind} rows ({', '.join(s.paths)})",
                            "drop --signal (the data decides), or pass the file that holds that signal")
        if model and s.kind == "verifier" and pass_rate is None:
            if not s.verifier:
                raise UserError("the pre-flight needs a verifier and none was recognised for these rows",
                                "pass --verifier NAME")
            from rlft.chat.templates import wrap_as_chat

            preflight(s, num_generations=num_generations, max_prompts=max_prompts,
                      rows=wrap_as_chat(s.data_rows) if as_chat else None)
    else:
        if kind is None:
            if not _is_terminal():
                typer.echo(NEEDS_TEXT, err=True)
                raise typer.Exit(2)
            answers = _ask()
            kind, rows = answers.pop("kind"), answers.pop("rows")
            common.update(answers)
            verifier = common.pop("verifier", verifier)
        if verifier and kind != "verifier":
            raise UserError(f"--verifier is for --signal verifier, not {kind}", "drop --verifier")
        s = Signal(kind=kind, rows=rows, verifier=verifier, **common)
        if verifier:
            v = get_verifier(verifier)
            s.format_only = s.format_only or bool(getattr(v, "format_only", False))
            s.partial_credit = bool(getattr(v, "partial_credit", False))
    _check_measured(pass_rate, mixed_fraction, num_generations)
    rec = recommend(s, pass_rate=pass_rate, mixed_fraction=mixed_fraction)
    if json_out:
        typer.echo(json.dumps(rec.as_dict(), indent=2))
    else:
        _print(rec)


def _check_measured(pass_rate: float | None, mixed_fraction: float | None, g: int) -> None:
    """A mixed group holds at least one pass and one fail among its G samples, so with a share p of passing
    samples at most G*p (and G*(1-p)) of the groups can be mixed: 0 when p is 0 or 1."""
    if pass_rate is None or mixed_fraction is None:
        return
    bound = min(1.0, g * pass_rate, g * (1 - pass_rate))
    if mixed_fraction > bound + 1e-9:
        raise UserError(f"--mixed-fraction {mixed_fraction:g} is impossible with --pass-rate {pass_rate:g} and "
                        f"{g} samples per prompt (at most {bound:.3g} of the groups can be mixed)",
                        "pass the numbers the pre-flight measured (rlft preflight), or drop one of them")


# --------------------------------------------------------------------------- asking

def _ask_choice(question: str, choices: list[str], default: str | None = None) -> str:
    while True:
        answer = typer.prompt(f"{question} [{'/'.join(choices)}]", default=default).strip().lower()
        matches = [c for c in choices if c.startswith(answer)] if answer else []
        if len(matches) == 1:
            return matches[0]
        typer.echo(f"  please answer one of: {', '.join(choices)}", err=True)


def _ask() -> dict:
    """The few questions that decide it."""
    typer.echo("Which training signal do you have?", err=True)
    for name, text in SIGNAL_HELP.items():
        typer.echo(f"  {name:<15} {text}", err=True)
    kind = _ask_choice("Signal", list(SIGNAL_HELP))
    what = {"demonstrations": "demonstrations", "pairs": "pairs", "verifier": "prompts", "ratings": "rated replies",
            "taste": "comparison pairs", "thumbs": "labelled answers", "teacher": "prompts",
            "environment": "prompts"}[kind]
    import click  # only when asking: its import is not paid by every `rlft` command

    rows = typer.prompt(f"How many {what} do you have?", type=click.IntRange(min=1))
    answers: dict = {"kind": kind, "rows": rows}
    answers["has_sft_model"] = typer.confirm("Does your model already give usable answers (SFT'd or instruct)?",
                                             default=True)
    if kind == "verifier":
        from rlft.data.rows import verifier_registry

        names = list(verifier_registry())
        if names:
            answers["verifier"] = _ask_choice("Which verifier", names)
        answers["format_only"] = typer.confirm("Does the verifier check only the format (not correctness)?",
                                               default=False)
    if kind == "pairs" and typer.confirm("Is quality a matter of taste that your pairs cannot cover?",
                                         default=False):
        kind = answers["kind"] = "taste"
    if kind in ("taste", "verifier"):
        answers["budget"] = _ask_choice("Budget for online sampling in training", ["low", "medium", "high"],
                                        default="medium")
    return answers


# --------------------------------------------------------------------------- printing

def _print(rec) -> None:
    from rich.console import Console
    from rich.markup import escape

    con = Console(highlight=False, soft_wrap=True)
    head = f"[bold]{rec.method.upper()}[/]"
    if rec.then:
        head = f"[bold]SFT first, then {rec.then.upper()}[/]"
    state = "[green]ready[/]" if rec.ready else "[bold red]not ready: see the errors below[/]"
    con.print(f"method: {head}  ({state})")
    for title, items in (("why", rec.reasons), ("needs", rec.needs), ("fails by", rec.fails_by),
                         ("watch", rec.watch)):
        con.print(f"[bold]{title}[/]")
        for item in items:
            con.print(f"  - {escape(item)}")
    if rec.warnings:
        con.print("[bold]warnings[/]")
        for n in rec.warnings:
            con.print(f"  [{LEVEL_STYLE[n.level]}]{n.level:<7}[/] {n.code}: {escape(n.message)}")
    e = rec.rollout_estimate
    if e:
        con.print(f"[bold]rollouts[/] for {e['prompts']:,} prompts at pass rate {e['pass_rate']:.0%} (estimate)")
        for name in ("bootstrap", "grpo"):
            minutes = e[f"{name}_minutes"]
            con.print(f"  {name:<9} {e[f'{name}_rollouts']:>9,} rollouts, {e[f'{name}_trained_rows']:>9,} rows "
                      f"trained" + (f", ~{minutes:g} min on this machine" if minutes is not None else ""))
        con.print(f"  [dim]{escape(e['assumes'])}[/]")
    con.print("[bold]next[/]" + (f" (recipe {rec.recipe})" if rec.recipe else ""))
    for cmd in rec.commands:
        con.print(f"  {escape(cmd)}")
