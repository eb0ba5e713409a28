"""`rlft eval`: greedy pass@1 and mean reward on held-out verifiable rows (plus pass rate over K samples); with
--env / --tools, greedy episodes with the tools (rlft.episodes.score_episodes) and their task success; with
--best-of N --reward-model RM, best-of-n: the reward model's top sampled reply scored by the verifier
(rlft/reward_model/truth.py). A run folder's prompts are rendered as the run trained (its data.as_chat,
rlft/run/prompt_format.py)."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Optional

import typer

from rlft.commands.options import Env, Tools, err_console, out_console


class ChatTemplate(str, Enum):
    """Named chat templates a model can be given (rlft.tools.use_chat_template)."""

    chatml_tools = "chatml-tools"


def eval_(
    model: Annotated[str, typer.Option("--model", "-m", help="Local folder, hub id, .gguf file, `tiny` or `smollm2`.")],
    data: Annotated[str, typer.Option("--data", "-d", help="Verifiable rows: prompt + gold fields.")],
    verifier: Annotated[Optional[list[str]], typer.Option("--verifier", "-v", help="Score with a verifier "
                        "(NAME, NAME:WEIGHT, file.py:fn); default: exact match against `answer`.")] = None,
    samples: Annotated[int, typer.Option("--samples", "-k", help="Also sample K completions per prompt "
                                         "and report their pass rate.", min=0)] = 0,
    temperature: Annotated[float, typer.Option(help="Sampling temperature for --samples.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Generation budget per answer.")] = 32,
    limit: Annotated[Optional[int], typer.Option(help="Evaluate only the first N rows.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print {n, pass_at_1, mean_reward} as JSON.")] = False,
    as_chat: Annotated[Optional[bool], typer.Option(
        "--as-chat/--no-as-chat", help="Wrap plain-string prompts as a user message (chat template applied); default: "
        "what the run trained with (data.as_chat in the run folder's config.yaml), else off.")] = None,
    tools: Tools = None, env: Env = None,
    max_tool_calls: Annotated[int, typer.Option(help="Tool-calling rounds per episode (with --env/--tools).",
                                                min=0)] = 4,
    tool_timeout: Annotated[float, typer.Option(help="Seconds a tool or environment call may take (with "
                                                "--env/--tools): past it its process is killed, the episode "
                                                "costs an error.", min=0.001, max=3600)] = 5.0,
    best_of: Annotated[Optional[list[int]], typer.Option(
        "--best-of", help="Best-of-N (repeatable: --best-of 4 --best-of 8 --best-of 16): sample N replies per prompt, "
        "answer with the --reward-model's top one, score it with the verifier (the baseline PPO must beat).",
        min=1)] = None,
    reward_model: Annotated[Optional[str], typer.Option(
        "--reward-model", help="With --best-of: the reward model (rlft reward run) that picks the reply.")] = None,
    chat_template: Annotated[Optional[ChatTemplate], typer.Option(
        "--chat-template", help="chatml-tools: rlft's tool-capable ChatML for a ChatML model whose own template "
        "cannot render tool calls (training: --set model.chat_template=chatml-tools).")] = None,
) -> None:
    """Greedy pass@1 and mean reward on held-out verifiable rows (plus pass rate over K samples)."""
    from rlft.chat.templates import wrap_as_chat
    from rlft.checks import check_budget, check_generation, check_language_model, probe_model
    from rlft.data import read_rows, validate_verifiable

    check_generation(max_new_tokens, temperature, samples=samples, limit=limit)
    if (best_of or reward_model) and not (best_of and reward_model and verifier):
        from rlft.errors import UserError

        raise UserError("best-of-n needs --best-of N, --reward-model RM and --verifier (the truth that scores the "
                        "picked reply)", "e.g. rlft eval -m runs/sft -d test.jsonl -v support_policy --best-of 4 "
                        "--best-of 8 --reward-model runs/rm")
    rows = read_rows(data, max_rows=limit)
    from rlft.run.prompt_format import resolve_as_chat

    as_chat, format_note = resolve_as_chat(model, as_chat)
    if format_note:
        err_console.print(f"note: {format_note}", highlight=False)
    if as_chat:
        rows = wrap_as_chat(rows)
    setup = _tool_setup(tools, env, rows, samples, verifier, max_tool_calls, tool_timeout)
    if verifier:
        from rlft.verifiers.loading import load_verifiers, validate_gold

        validate_gold(rows, verifier)
        scorer, _ = load_verifiers(verifier)
    else:
        if setup is None:  # episodes without a verifier are scored by the environment's get_reward alone
            validate_verifiable(rows)
        scorer = None
    from rlft.quiet import quiet_libraries

    config = probe_model(model)
    check_language_model(model, config)  # a reward model cannot generate
    check_budget(model, max_new_tokens, config)
    quiet_libraries()
    from rlft.chat.templates import plain_prompt_note
    from rlft.evaluate import evaluate_rows, exact_match
    from rlft.models import load_for_inference, load_tokenizer
    from rlft.tools import use_chat_template

    tok = use_chat_template(load_tokenizer(model), chat_template.value if chat_template else None, model)
    if note := plain_prompt_note(tok, rows, switch="--as-chat"):
        err_console.print(f"[yellow]note[/]: {note}")
    net = load_for_inference(model)
    if setup is not None:
        return _episodes(net, tok, model, rows, setup, scorer, max_new_tokens, json_out)
    if best_of:
        return _best_of(net, tok, [r.data for r in rows], scorer, reward_model, best_of, max_new_tokens,
                        temperature, json_out)
    result = evaluate_rows(net, tok, [r.data for r in rows], scorer=scorer or exact_match,
                           max_new_tokens=max_new_tokens, samples=samples, temperature=temperature)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        extra = f"  pass rate over {samples} samples={result.sampled_pass_rate:.3f}" if samples else ""
        out_console.print(f"n={result.n}  pass@1={result.pass_at_1:.3f}  mean_reward={result.mean_reward:.3f}{extra}")


def _tool_setup(tools, env, rows, samples: int, verifier, max_tool_calls: int, tool_timeout: float = 5.0):
    """--env / --tools checked before any model loads (rlft.tools.make_setup), or None without them."""
    if not tools and not env:
        return None
    from rlft.errors import UserError
    from rlft.tools import make_setup

    if samples:
        raise UserError("--samples does not apply to episodes (--env/--tools): they are scored greedily",
                        "drop --samples")
    plain = next((i for i, r in enumerate(rows) if not isinstance(r.data.get("prompt"), list)), None)
    if plain is not None:
        raise UserError(f"row {plain + 1}: the prompt is a plain string; tools are rendered only into a "
                        "conversation", "give prompts as messages, or add --as-chat")
    if not tool_timeout == tool_timeout:  # NaN passes typer's min/max
        raise UserError(f"--tool-timeout {tool_timeout} is not a number", "give seconds, e.g. --tool-timeout 5")
    from rlft.tools import Limits

    setup = make_setup(tools, env, [r.data for r in rows], Limits(timeout=tool_timeout),
                       max_tool_calls=max_tool_calls)
    if not verifier and not setup.env_reward:
        raise UserError("episodes need a score: no --verifier and the environment has no get_reward()",
                        "pass --verifier NAME (e.g. math), as in training")
    return setup


def _episodes(net, tok, model: str, rows, setup, scorer, max_new_tokens: int, json_out: bool) -> None:
    """Greedy episodes on every row, scored as in training (verifiers + get_reward); prints task success."""
    from rlft.episodes import score_episodes, summarize
    from rlft.tools import tool_tokenizer

    tok = tool_tokenizer(tok, model, switch="--chat-template chatml-tools")
    episodes = score_episodes(net, tok, [r.data for r in rows], setup, scorer, max_new_tokens)
    s = {k.removeprefix("heldout_"): round(v, 4) for k, v in summarize(episodes).items()}
    failed = dict(setup.stats.env.counts)  # episodes a failing reset / get_reward cost (rlft/tools/process.py)
    if json_out:
        print(json.dumps({"n": len(episodes), **s, **({"env_failed_episodes": failed} if failed else {})}, indent=2))
    else:
        out_console.print(f"n={len(episodes)}  task_success={s['task_success']:.3f}  mean_reward="
                          f"{s['mean_reward']:.3f}  tool_calls/episode={s['tool_calls_per_episode']:.2f}  "
                          f"tool_errors/episode={s['tool_errors_per_episode']:.2f}  "
                          f"episodes calling a tool={s['tool_use']:.0%}", highlight=False)
        if failed:
            out_console.print("episodes the environment failed: " + ", ".join(
                f"{m} {n}" for m, n in failed.items()) + f" (last: {setup.stats.env.last})", highlight=False)


def _best_of(net, tok, rows, scorer, reward_model: str, best_of: list[int], max_new_tokens: int, temperature: float,
             json_out: bool) -> None:
    """Greedy pass@1, then best-of-n (rlft.reward_model.truth): the reward model picks among the sampled replies."""
    import time

    from rlft.evaluate import evaluate_rows
    from rlft.reward_model.scoring import RewardModelReward
    from rlft.reward_model.truth import agreement, best_of_n, sample_and_score

    began = time.time()
    rm = RewardModelReward(reward_model)
    rm.load()
    greedy = evaluate_rows(net, tok, rows, scorer=scorer, max_new_tokens=max_new_tokens)
    sampled = sample_and_score(net, tok, rows, scorer, rm, max(best_of), max_new_tokens, temperature)
    result, agree = best_of_n(sampled, best_of), agreement(sampled)
    out = {"n": len(rows), "greedy": round(greedy.pass_at_1, 4), **result.as_dict(), **agree.as_dict(),
           "seconds": round(time.time() - began, 1)}
    if json_out:
        print(json.dumps(out, indent=2))
        return
    parts = [f"greedy {out['greedy']:.3f}", f"one sample {out['sampled_1']:.3f}"]
    parts += [f"best-of-{n} {result.truth[n]:.3f} (any of {n}: {result.oracle[n]:.3f})" for n in result.n]
    out_console.print(f"n={len(rows)}  truth: " + "  ".join(parts), highlight=False)
    out_console.print(agree.line(), highlight=False)
