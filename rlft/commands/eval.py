"""`rlft eval`: greedy pass@1 and mean reward on held-out verifiable rows (plus pass rate over K samples)."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from rlft.commands.options import AsChat, err_console, out_console


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
) -> None:
    """Greedy pass@1 and mean reward on held-out verifiable rows (plus pass rate over K samples)."""
    from rlft.chat_templates import wrap_as_chat
    from rlft.checks import check_generation, probe_model
    from rlft.data import read_rows, validate_verifiable

    check_generation(max_new_tokens, temperature, samples=samples, limit=limit)
    rows = read_rows(data, max_rows=limit)
    if as_chat:
        rows = wrap_as_chat(rows)
    if verifier:
        from rlft.verifiers.loading import load_verifiers, validate_gold

        validate_gold(rows, verifier)
        scorer, _ = load_verifiers(verifier)
    else:
        validate_verifiable(rows)
        scorer = None
    from rlft.quiet import quiet_libraries

    probe_model(model)
    quiet_libraries()
    from rlft.chat_templates import plain_prompt_note
    from rlft.evaluate import evaluate_rows, exact_match
    from rlft.models import load_for_inference, load_tokenizer

    tok = load_tokenizer(model)
    if note := plain_prompt_note(tok, rows, switch="--as-chat"):
        err_console.print(f"[yellow]note[/]: {note}")
    net = load_for_inference(model)
    result = evaluate_rows(net, tok, [r.data for r in rows], scorer=scorer or exact_match,
                           max_new_tokens=max_new_tokens, samples=samples, temperature=temperature)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        extra = f"  pass rate over {samples} samples={result.sampled_pass_rate:.3f}" if samples else ""
        out_console.print(f"n={result.n}  pass@1={result.pass_at_1:.3f}  mean_reward={result.mean_reward:.3f}{extra}")
