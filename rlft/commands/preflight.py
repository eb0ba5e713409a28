"""`rlft preflight`: will GRPO learn? Sample G completions per prompt, score them, go or refuse (exit 3)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from rlft.commands.options import AsChat, err_console, out_console


def preflight_(
    model: Annotated[str, typer.Option("--model", "-m", help="Local folder, hub id, .gguf file, `tiny` or `smollm2`.")],
    prompts: Annotated[str, typer.Option("--prompts", "-d", help="Prompts with gold fields.")],
    verifier: Annotated[list[str], typer.Option("--verifier", "-v", help="Verifier spec(s).")],
    num_generations: Annotated[int, typer.Option("--num-generations", "-g", help="Samples per prompt (G).",
                                                 min=2)] = 8,
    max_prompts: Annotated[int, typer.Option(help="Prompts to probe first.", min=1)] = 32,
    max_prompts_cap: Annotated[int, typer.Option(help="Prompts it may sample in all, doubling, while the mixed "
                                                 "share is within noise of --min-mixed.", min=1)] = 128,
    method: Annotated[str, typer.Option(help="The run it is for (grpo or rloo): the advice names its section.")]
    = "grpo",
    max_new_tokens: Annotated[int, typer.Option(help="Generation budget per completion.")] = 64,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    min_mixed: Annotated[float, typer.Option(help="Refuse when the share of mixed groups is clearly below this "
                                             "(its 90% interval's upper bound under it).")] = 0.1,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    as_chat: AsChat = False,
) -> None:
    """Will GRPO learn? Sample G completions per prompt, score them, and say go or refuse (exit 3)."""
    from rlft.chat.templates import wrap_as_chat
    from rlft.checks import check_budget, check_generation, check_language_model, probe_model
    from rlft.data import read_rows
    from rlft.preflight import run_preflight

    check_generation(max_new_tokens, temperature, sampling=True)
    if method not in ("grpo", "rloo"):
        from rlft.errors import UserError

        raise UserError(f"--method {method}: the pre-flight is for grpo or rloo", "pass --method grpo or rloo")
    config = probe_model(model)
    check_language_model(model, config)  # a reward model cannot generate
    check_budget(model, max_new_tokens, config)
    rows = wrap_as_chat(read_rows(prompts)) if as_chat else read_rows(prompts)
    result = run_preflight(model, rows, verifier, num_generations=num_generations,
                           max_prompts=max_prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                           min_mixed=min_mixed, console=err_console, max_prompts_cap=max_prompts_cap,
                           section=method)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        lo, hi = result.mixed_interval
        out_console.print(f"pass rate {result.pass_rate:.2f}  mixed groups {result.mixed_fraction:.2f} "
                          f"(90% interval {lo:.2f}-{hi:.2f})  truncated {result.truncation_rate:.2f}  "
                          f"unparsed {result.parse_failures:.2f}  ({result.prompts} prompts x "
                          f"{result.num_generations})", highlight=False)
        noise = (f" (the mixed share is within noise of {min_mixed:g} after {result.prompts} prompts: it goes, "
                 "and the run's zero_signal alarm watches it)") if result.within_noise else ""
        out_console.print(f"verdict: [bold]{result.verdict}[/]{noise}", highlight=False)
        for line in result.advice:
            out_console.print(f"  - {line}", highlight=False)
    raise typer.Exit(3 if result.verdict == "refuse" else 0)
