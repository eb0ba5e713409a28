"""`rlft eval`: greedy pass@1 and mean reward on held-out verifiable rows (plus pass rate over K samples); with
--env / --tools, greedy episodes with the tools (rlft.episodes.score_episodes) and their task success."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Optional

import typer

from rlft.commands.options import AsChat, Env, Tools, err_console, out_console


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
    as_chat: AsChat = False,
    tools: Tools = None, env: Env = None,
    max_tool_calls: Annotated[int, typer.Option(help="Tool-calling rounds per episode (with --env/--tools).",
                                                min=0)] = 4,
    chat_template: Annotated[Optional[ChatTemplate], typer.Option(
        "--chat-template", help="chatml-tools: rlft's tool-capable ChatML for a ChatML model whose own template "
        "cannot render tool calls (training: --set model.chat_template=chatml-tools).")] = None,
) -> None:
    """Greedy pass@1 and mean reward on held-out verifiable rows (plus pass rate over K samples)."""
    from rlft.chat_templates import wrap_as_chat
    from rlft.checks import check_budget, check_generation, check_language_model, probe_model
    from rlft.data import read_rows, validate_verifiable

    check_generation(max_new_tokens, temperature, samples=samples, limit=limit)
    rows = read_rows(data, max_rows=limit)
    if as_chat:
        rows = wrap_as_chat(rows)
    setup = _tool_setup(tools, env, rows, samples, verifier, max_tool_calls)
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
    from rlft.chat_templates import plain_prompt_note
    from rlft.evaluate import evaluate_rows, exact_match
    from rlft.models import load_for_inference, load_tokenizer
    from rlft.tools import use_chat_template

    tok = use_chat_template(load_tokenizer(model), chat_template.value if chat_template else None, model)
    if note := plain_prompt_note(tok, rows, switch="--as-chat"):
        err_console.print(f"[yellow]note[/]: {note}")
    net = load_for_inference(model)
    if setup is not None:
        return _episodes(net, tok, model, rows, setup, scorer, max_new_tokens, json_out)
    result = evaluate_rows(net, tok, [r.data for r in rows], scorer=scorer or exact_match,
                           max_new_tokens=max_new_tokens, samples=samples, temperature=temperature)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        extra = f"  pass rate over {samples} samples={result.sampled_pass_rate:.3f}" if samples else ""
        out_console.print(f"n={result.n}  pass@1={result.pass_at_1:.3f}  mean_reward={result.mean_reward:.3f}{extra}")


def _tool_setup(tools, env, rows, samples: int, verifier, max_tool_calls: int):
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
    setup = make_setup(tools, env, [r.data for r in rows], max_tool_calls=max_tool_calls)
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
    if json_out:
        print(json.dumps({"n": len(episodes), **s}, indent=2))
    else:
        out_console.print(f"n={len(episodes)}  task_success={s['task_success']:.3f}  mean_reward="
                          f"{s['mean_reward']:.3f}  tool_calls/episode={s['tool_calls_per_episode']:.2f}  "
                          f"tool_errors/episode={s['tool_errors_per_episode']:.2f}  "
                          f"episodes calling a tool={s['tool_use']:.0%}", highlight=False)
