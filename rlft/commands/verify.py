"""`rlft verify NAME --data FILE`: score completions with a verifier, or stress-test the verifier.

Each row of the .jsonl file carries the verifier's gold fields (answer, label, schema, pattern, tests)
and, to be scored, a `completion` (a string or a message list). Without `--stress` every row is
scored: a table, or with `--json` a list with one object per row, in file order (`line`, `reward`;
rows without a completion get `reward: null`). Rewards are unweighted: a NAME:WEIGHT spec is accepted
and its weight ignored here. With `--stress` the rows' gold values seed junk
completions (rlft/verifiers/stress.py) and the acceptance of each family is printed; the exit code is
1 when a must-fail family was accepted (the verifier is gameable), else 0. A plugin's gold fields are
its `gold_fields` attribute, else its required parameters (`fn(completions, answer, **kw)` -> answer);
`--gold FIELD` names them outright. A family that cannot be built from the rows (no gold field known,
a single distinct gold) is reported as "not tested", never as passed. Bad input (unknown verifier,
bad JSON, a missing or unparseable gold field) is a UserError: `error: ...` and exit 2.

With `--reward-model RM --model POLICY` the verifier is the truth a reward model is checked against: replies
sampled from POLICY for the rows' prompts are scored by both, and the share of the truth's pairs the reward model
orders right is printed (rlft/reward_model/truth.py), with its pair accuracy on `--pairs`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from rlft.errors import DataError, UserError, row_problem


def verify(
    name: Annotated[str, typer.Argument(help="Verifier: a built-in (math, label, label_partial, json, regex, "
                                             "code, code_forgeable, format), NAME:WEIGHT, or "
                                             "path/to/file.py:function.")],
    data: Annotated[Path, typer.Option("--data", "-d", help="JSONL rows: the verifier's gold fields, plus "
                                                            "`completion` for the rows to score.")],
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print JSON: a list of {line, reward} per row, or with --stress "
                       "{verifier, gameable, families}.")] = False,
    stress: Annotated[bool, typer.Option(
        "--stress", help="Score junk completions built from the gold values; exit 1 when any must-fail "
                         "family is accepted.")] = False,
    gold: Annotated[list[str] | None, typer.Option(
        "--gold", help="Row field holding the gold value (repeatable); default: the verifier's own gold "
                       "fields, for a plugin its required parameters.")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="code: print how each test of each row was read (the call and the comparison, or "
                          "why it is refused), then check the rows.")] = False,
    reward_model: Annotated[str | None, typer.Option(
        "--reward-model", help="Check a reward model against this verifier (the truth): sample replies of --model "
                               "for the rows' prompts and report how often the reward model orders them as the "
                               "truth does (rlft/reward_model/truth.py), with its pair accuracy on --pairs.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="With --reward-model: the policy whose sampled replies are scored (e.g. the SFT run "
                              "PPO would start from).")] = None,
    pairs: Annotated[Path | None, typer.Option(
        "--pairs", help="With --reward-model: held-out prompt/chosen/rejected pairs for its pair accuracy.")] = None,
    samples: Annotated[int, typer.Option("--samples", help="With --reward-model: replies sampled per prompt.",
                                         min=2)] = 4,
    limit: Annotated[int, typer.Option("--limit", help="With --reward-model: prompts sampled.", min=1)] = 32,
    max_new_tokens: Annotated[int, typer.Option(help="With --reward-model: budget per sampled reply.", min=1)] = 48,
    temperature: Annotated[float, typer.Option(
        help="With --reward-model: sampling temperature (PPO's ppo.temperature: the replies PPO will score).",
        min=0.01)] = 1.0,
) -> None:
    """Score completions with a verifier, or check with --stress that junk cannot earn reward."""
    from dataclasses import replace

    from rlft.verifiers import check_rows, resolve

    verifier, _weight = resolve(name)
    if reward_model or model or pairs:
        return _reward_model(name, data, reward_model, model, pairs, samples, limit, max_new_tokens, temperature,
                             json_out)
    if gold:
        verifier = replace(verifier, gold_fields=tuple(dict.fromkeys(g.strip() for g in gold if g.strip())))
    rows = read_jsonl(data)
    if explain and verifier.name == "code":
        from rlft.verifiers.code import explain_rows

        for line in explain_rows(rows, str(data), verifier.gold_fields[0]):
            typer.echo(line)
    problems = check_rows(verifier, rows, str(data))
    if problems:
        fields = ", ".join(verifier.gold_fields)
        raise DataError(problems, f"every row needs {fields} in a form the {verifier.name} verifier can read")
    if verifier.format_only and not json_out:
        typer.echo(f"note: '{verifier.name}' checks the format only; pair it with a correctness verifier",
                   err=True)
    if stress:
        _stress(verifier, [row for _, row in rows], json_out)
        return
    if explain:
        return
    scored = [(line, row) for line, row in rows if row.get("completion") is not None]
    if not scored:
        raise UserError(f"{data}: no row has a `completion` to score",
                        "add a completion to the rows, or pass --stress to test the verifier with junk")
    keys = dict.fromkeys(k for _, row in scored for k in row if k != "completion")
    rewards = verifier.fn([row["completion"] for _, row in scored],
                          **{k: [row.get(k) for _, row in scored] for k in keys})
    by_line = {line: reward for (line, _), reward in zip(scored, rewards)}
    if json_out:
        mark = {"forgeable": True} if verifier.forgeable else {}
        typer.echo(json.dumps([{"line": line, "reward": by_line.get(line), **mark} for line, _ in rows]))
    else:
        _print_rewards(verifier, rows, by_line)


def _reward_model(spec: str, data: Path, reward_model: str | None, model: str | None, pairs: Path | None,
                  samples: int, limit: int, max_new_tokens: int, temperature: float, json_out: bool) -> None:
    """A reward model against the truth `spec` on --model's sampled replies (and its pair accuracy on --pairs).
    The prompts are wrapped as chat when the policy's run trained that way (rlft.run.prompt_format)."""
    if not (reward_model and model):
        raise UserError("checking a reward model needs --reward-model RM and --model POLICY",
                        "e.g. rlft verify support_policy -d test.jsonl --reward-model runs/rm --model runs/sft")
    from rlft.reward_model.scoring import RewardModelReward, reads_the_prompt_line
    from rlft.reward_model.truth import policy_agreement, truth_rows
    from rlft.run.prompt_format import resolve_as_chat

    as_chat, _ = resolve_as_chat(model, None)
    rows = truth_rows(str(data), spec, limit, as_chat)
    rm = RewardModelReward(reward_model)
    out: dict[str, Any] = {}
    if pairs is not None:
        from rlft.chat.templates import wrap_as_chat
        from rlft.data import read_rows
        from rlft.reward_model.scoring import pair_accuracy, prompt_swapped_accuracy

        held = [r.data for r in (wrap_as_chat(read_rows(str(pairs))) if as_chat else read_rows(str(pairs)))]
        out["pair_accuracy"] = round(pair_accuracy(rm, held), 4)
        out["pairs"] = len(held)
        swapped = prompt_swapped_accuracy(rm, held)
        if swapped is not None:
            out["pair_accuracy_prompt_swapped"] = round(swapped, 4)
    a = policy_agreement(model, rm, rows, spec, samples, max_new_tokens, temperature)
    out.update(a.as_dict())
    from rlft.models import load_tokenizer, resolve_model_path
    from rlft.reward_model.implicit import ImplicitReward
    from rlft.reward_model.truth import policy_gain, ppo_refusal, refusal_note

    # where PPO with per-token rewards goes: the model's own policy (generated with --model's tokenizer, so only
    # where the two read the same token ids)
    scorer, gain, refusal = rm.load(), None, None
    if isinstance(scorer, ImplicitReward) and scorer.same_tokens_as(load_tokenizer(resolve_model_path(model))):
        gain = policy_gain(model, scorer.policy, rows, spec, max_new_tokens)
        out.update(gain.as_dict())
        refusal = ppo_refusal(gain, reward_model)  # PPO's gate on it, said as rlft reward says it at its end
        out["ppo_gate"] = "refuses" if refusal else "passes"
    if json_out:
        typer.echo(json.dumps(out))
        return
    if "pair_accuracy" in out:
        typer.echo(f"pair accuracy: {out['pair_accuracy']:.3f} on {out['pairs']} pairs")
        if "pair_accuracy_prompt_swapped" in out:
            typer.echo(reads_the_prompt_line(out["pair_accuracy"], out["pair_accuracy_prompt_swapped"],
                                             out["pairs"]))
    typer.echo(a.line())
    if gain is not None:
        typer.echo(gain.line())
        if refusal:
            typer.echo(refusal_note(refusal))


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, row) for every non-blank line; all bad lines reported at once as file:line."""
    if path.is_dir():
        raise UserError(f"data file '{path}' is a folder", "pass the .jsonl file inside it")
    if not path.is_file():
        from rlft.data.bounded import kind_of

        raise UserError(f"data file '{path}' {f'is {kind_of(path)}, not a file' if kind_of(path) else 'not found'}",
                        "check the path")
    if path.suffix.lower() != ".jsonl":
        raise UserError(f"{path}: `rlft verify` reads .jsonl files only", "convert the file to JSON lines")
    from rlft.data.bounded import check_text_file, json_depth_problem

    check_text_file(path, str(path))  # a sparse or binary file, before reading it
    rows, problems = [], []
    with path.open(encoding="utf-8-sig") as f:  # -sig: a byte-order mark is not part of line 1
        try:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if deep := json_depth_problem(line):
                    problems.append(row_problem(str(path), number, None, deep))
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    why = f"bad JSON: {exc.msg} (column {exc.colno})"
                    problems.append(row_problem(str(path), number, None, why))
                    continue
                if not isinstance(value, dict):
                    problems.append(row_problem(str(path), number, None, "expected a JSON object"))
                    continue
                rows.append((number, value))
        except UnicodeDecodeError as exc:
            raise UserError(f"{path} is not UTF-8 text ({exc.reason})", "save the file as UTF-8") from exc
    if problems:
        raise DataError(problems, "each line must be one JSON object")
    if not rows:
        raise UserError(f"{path} has no rows", "add rows, one JSON object per line")
    return rows


def _stress(verifier: Any, rows: list[dict], json_out: bool) -> None:
    from rlft.verifiers.stress import gameable, stress, untested

    results = stress(verifier, rows)
    bad, missing = gameable(results), untested(results)
    if json_out:
        typer.echo(json.dumps({"verifier": verifier.name, "gameable": bad, "untested": missing,
                               "families": [r.as_dict() for r in results]}))
    else:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"stress: {verifier.name} on {len(rows)} rows")
        for column in ("family", "must fail", "accepted", "n", "verdict", "example"):
            table.add_column(column)
        for r in results:
            if not r.tested:
                verdict = "not tested"
            else:
                verdict = ("GAMEABLE" if r.acceptance > 0 else "ok") if r.must_fail else "info"
            style = {"GAMEABLE": "bold red", "ok": "green", "info": "dim", "not tested": "yellow"}[verdict]
            table.add_row(r.name, "yes" if r.must_fail else "no", f"{r.acceptance:.0%}" if r.tested else "-",
                          str(r.n), Text(verdict, style=style), Text(r.example if r.tested else r.why_not))
        console = Console()
        console.print(table)
        if bad:
            games = ", ".join(r.name for r in results if r.must_fail and r.tested and r.acceptance > 0)
            console.print(Text(f"gameable: junk completions earn reward ({games}); tighten the verifier",
                               style="bold red"))
        elif missing:
            console.print(Text(f"not gameable by the families tested; NOT TESTED: {', '.join(missing)} (see the "
                               "table; --gold FIELD names the gold field)", style="yellow"))
        else:
            console.print(Text("not gameable by these families", style="green"))
    if bad:
        raise typer.Exit(1)


def _print_rewards(verifier: Any, rows: list[tuple[int, dict]], by_line: dict[int, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from rlft.verifiers import completion_text

    table = Table(title=f"{verifier.name}: {verifier.description}")
    for column in ("line", "reward", "completion", *verifier.gold_fields):
        table.add_column(column, overflow="fold")
    for line, row in rows:
        reward = by_line.get(line)
        shown = "skipped" if line not in by_line else ("n/a" if reward is None else f"{reward:g}")
        table.add_row(str(line), shown, Text(_short(completion_text(row.get("completion")))),
                      *(Text(_short(_as_text(row.get(f)))) for f in verifier.gold_fields))
    scored = [r for r in by_line.values() if r is not None]
    console = Console()
    console.print(table)
    if scored:
        console.print(f"mean reward {sum(scored) / len(scored):.3f} over {len(scored)} scored rows")
    if verifier.forgeable:
        console.print(Text("FORGEABLE: these rewards come from exit statuses the code controls", style="bold red"))


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _short(text: str, limit: int = 60) -> str:
    """One line of at most `limit` characters; control characters (ESC sequences, ...) escaped, since the
    completion is model-written and goes to the user's terminal."""
    flat = " ".join(text.split())[:limit * 4]
    flat = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in flat)
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."
