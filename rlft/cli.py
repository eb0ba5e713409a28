"""The `rlft` command line: parse flags, resolve one RunConfig, hand it to a method.

This module is imported for `rlft --help`, so it must stay light: torch, transformers, trl, peft and
datasets are imported inside the commands that need them (a test asserts this).

Errors the user can fix are `rlft.errors.UserError`; `main()` prints them as one line naming the problem
and the fix and exits with code 2. `--debug` (or RLFT_DEBUG=1) shows the traceback instead.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from rlft.errors import UserError

app = typer.Typer(
    name="rlft",
    help="Fine-tune LLMs with SFT, DPO, GRPO or reward model + PPO, on Hugging Face TRL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
out_console = Console()
err_console = Console(stderr=True)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks (also RLFT_DEBUG=1).")] = False,
) -> None:
    if debug:
        os.environ["RLFT_DEBUG"] = "1"


# ----------------------------------------------------------------------------- shared options
Recipe = Annotated[Optional[Path], typer.Option("--recipe", "-r", help="YAML recipe (see recipes/).")]
Model = Annotated[Optional[str], typer.Option("--model", "-m", help="Local folder, hub id, or `tiny`.")]
OutputDir = Annotated[Optional[str], typer.Option("--output-dir", "-o", help="Run folder.")]
EvalData = Annotated[Optional[str], typer.Option("--eval-data", help="Held-out file for eval loss.")]
MaxSteps = Annotated[Optional[int], typer.Option("--max-steps", help="Stop after N optimizer steps.")]
Epochs = Annotated[Optional[float], typer.Option("--epochs", help="Epochs over the data.")]
LR = Annotated[Optional[float], typer.Option("--lr", help="Learning rate.")]
Batch = Annotated[Optional[int], typer.Option("--batch-size", help="Rows per device per step.")]
Seed = Annotated[Optional[int], typer.Option("--seed", help="Random seed.")]
Lora = Annotated[Optional[bool], typer.Option("--lora/--no-lora", help="Train a LoRA adapter.")]
Sets = Annotated[Optional[list[str]], typer.Option("--set", help="Override any field: section.key=value "
                                                   "(any TRL config field too). Repeatable.")]
PrintConfig = Annotated[bool, typer.Option("--print-config", help="Print the resolved config and exit.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace a non-empty output_dir.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue from the last checkpoint in output_dir.")]
OnAlarm = Annotated[Optional[str], typer.Option("--on-alarm", help="warn (default) or stop: stop saves a "
                                                "checkpoint and ends the run when an alarm fires.")]
Holdout = Annotated[Optional[str], typer.Option("--holdout", help="Held-out prompts + gold, scored greedily "
                                                "every watch.holdout_every steps (reward-hacking check).")]
HoldoutVerifier = Annotated[Optional[str], typer.Option("--holdout-verifier", help="Verifier for --holdout "
                                                        "(default math).")]


def _flags(**pairs) -> dict:
    """{dotted.key: (value, origin)} for the flags the user actually passed."""
    names = {"data.train": "--data", "data.eval": "--eval-data", "model.name_or_path": "--model",
             "train.output_dir": "--output-dir", "train.max_steps": "--max-steps",
             "train.num_train_epochs": "--epochs", "train.learning_rate": "--lr",
             "train.per_device_train_batch_size": "--batch-size", "train.seed": "--seed",
             "model.lora.enabled": "--lora", "grpo.verifiers": "--verifier",
             "grpo.num_generations": "--num-generations", "grpo.preflight": "--preflight",
             "grpo.filter_prompts": "--filter-prompts", "dpo.beta": "--beta", "watch.on_alarm": "--on-alarm",
             "watch.holdout": "--holdout", "watch.holdout_verifier": "--holdout-verifier",
             "grpo.reward_model": "--reward-model"}
    return {key: (value, names.get(key, key)) for key, value in pairs.items() if value is not None}


def _common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed, lora, on_alarm,
                  holdout, holdout_verifier) -> dict:
    """The dotted config keys of the options every training command shares."""
    return {"data.eval": eval_data, "model.name_or_path": model, "train.output_dir": output_dir,
            "train.max_steps": max_steps, "train.num_train_epochs": epochs, "train.learning_rate": lr,
            "train.per_device_train_batch_size": batch_size, "train.seed": seed, "model.lora.enabled": lora,
            "watch.on_alarm": on_alarm, "watch.holdout": holdout, "watch.holdout_verifier": holdout_verifier}


def _resolve(method: str, recipe, flags: dict, sets, print_config: bool, resume: bool = False):
    from rlft.config import resolve
    from rlft.run import default_output_dir

    cfg = resolve(method, recipe, flags, sets)
    if resume and not cfg.train.output_dir:
        raise UserError("--resume needs the run folder", "pass --output-dir DIR of the interrupted run")
    if not cfg.train.output_dir:
        cfg.values["train"]["output_dir"] = default_output_dir(method)
    if print_config:
        sys.stdout.write(cfg.to_yaml())  # plain text: rich would wrap long paths
        raise typer.Exit(0)
    return cfg


def _finish(result) -> None:
    from rlft.run import is_main_process

    if result.status == "completed" and is_main_process():
        shown = {k: round(v, 4) for k, v in result.metrics.items() if isinstance(v, float)}
        err_console.print(f"[green]done[/]: {result.output_dir}  {shown}")
    raise typer.Exit(result.exit_code)


# ----------------------------------------------------------------------------- commands
@app.command("init-model")
def init_model(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the tiny model to.")],
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
    overwrite: Overwrite = False,
) -> None:
    """Build the tiny character-level Llama (~0.5M parameters) locally and save it with its tokenizer."""
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"'{out}' is not empty", "pass --overwrite or choose another --out")
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.models import build_tiny_model, count_parameters

    build_tiny_model(out, seed=seed)
    from transformers import AutoModelForCausalLM

    _, total = count_parameters(AutoModelForCausalLM.from_pretrained(out))
    err_console.print(f"tiny model ({total:,} parameters) written to {out}")


@app.command()
def sft(
    data: Annotated[Optional[list[str]], typer.Option("--data", "-d", help="Demonstrations: prompt/completion "
                                                      "or messages rows. Repeatable.")] = None,
    eval_data: EvalData = None, model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """Supervised fine-tuning on demonstrations (TRL SFTTrainer)."""
    flags = _flags(**{"data.train": data,
                      **_common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier)})
    cfg = _resolve("sft", recipe, flags, set_, print_config, resume)
    from rlft.methods import sft as method

    _finish(method.run(cfg, overwrite=overwrite, resume=resume, console=err_console))


@app.command()
def dpo(
    pairs: Annotated[Optional[list[str]], typer.Option("--pairs", "-d", help="Preference pairs: prompt/chosen/"
                                                       "rejected rows. Repeatable.")] = None,
    eval_data: EvalData = None, model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    beta: Annotated[Optional[float], typer.Option(help="KL strength (default 0.1).")] = None,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """Direct Preference Optimization on chosen/rejected pairs (TRL DPOTrainer)."""
    flags = _flags(**{"data.train": pairs,
                      **_common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier), "dpo.beta": beta})
    cfg = _resolve("dpo", recipe, flags, set_, print_config, resume)
    from rlft.methods import dpo as method

    _finish(method.run(cfg, overwrite=overwrite, resume=resume, console=err_console))


@app.command()
def reward(
    pairs: Annotated[Optional[list[str]], typer.Option("--pairs", "-d", help="Preference pairs: prompt/chosen/"
                                                       "rejected rows. Repeatable.")] = None,
    eval_data: EvalData = None, model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """Train a reward model on preference pairs (TRL RewardTrainer); reports held-out pair accuracy."""
    flags = _flags(**{"data.train": pairs,
                      **_common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier)})
    cfg = _resolve("reward", recipe, flags, set_, print_config, resume)
    from rlft.methods import reward as method

    _finish(method.run(cfg, overwrite=overwrite, resume=resume, console=err_console))


@app.command()
def grpo(
    prompts: Annotated[Optional[list[str]], typer.Option("--prompts", "-d", help="Prompts with gold fields "
                                                         "(answer, label, schema, tests, ...). Repeatable.")] = None,
    verifier: Annotated[Optional[list[str]], typer.Option("--verifier", "-v", help="Reward: NAME, NAME:WEIGHT "
                        "or file.py:function. Repeatable (weighted sum).")] = None,
    reward_model: Annotated[Optional[str], typer.Option("--reward-model", help="A reward model folder "
                            "(rlft reward) as a reward; alone unless --verifier is given too.")] = None,
    eval_data: Annotated[Optional[str], typer.Option("--eval-data", help="Held-out rows: greedy pass@1 "
                                                     "after training.")] = None,
    model: Model = None, recipe: Recipe = None, output_dir: OutputDir = None,
    max_steps: MaxSteps = None, epochs: Epochs = None, lr: LR = None, batch_size: Batch = None,
    seed: Seed = None, lora: Lora = None,
    num_generations: Annotated[Optional[int], typer.Option(help="Completions per prompt (G).")] = None,
    preflight: Annotated[Optional[bool], typer.Option("--preflight/--no-preflight", help="Probe the model "
                         "first and refuse when too few groups have mixed rewards (default on).")] = None,
    filter_prompts: Annotated[bool, typer.Option("--filter-prompts", help="Train only on prompts whose "
                              "pre-flight group had mixed rewards.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the rollout plan and exit.")] = False,
    on_alarm: OnAlarm = None, holdout: Holdout = None, holdout_verifier: HoldoutVerifier = None,
    set_: Sets = None, print_config: PrintConfig = False, overwrite: Overwrite = False, resume: Resume = False,
) -> None:
    """GRPO against verifiers (TRL GRPOTrainer): RL from a program that checks answers."""
    flags = _flags(**{"data.train": prompts,
                      **_common_flags(eval_data, model, output_dir, max_steps, epochs, lr, batch_size, seed,
                                      lora, on_alarm, holdout, holdout_verifier), "grpo.verifiers": verifier,
                      "grpo.num_generations": num_generations, "grpo.preflight": preflight,
                      "grpo.filter_prompts": filter_prompts or None, "grpo.reward_model": reward_model})
    if reward_model and not verifier:
        flags["grpo.verifiers"] = ([], "--reward-model")  # the reward model is the only reward
    cfg = _resolve("grpo", recipe, flags, set_, print_config, resume)
    if dry_run:
        _print_plan(cfg)
        raise typer.Exit(0)
    from rlft.methods import grpo as method

    _finish(method.run(cfg, overwrite=overwrite, resume=resume, console=err_console))


def _print_plan(cfg) -> None:
    from rlft.data import read_many
    from rlft.methods.grpo import plan, validate_gold

    rows = read_many(cfg.data.train, fields=cfg.data.fields, split=cfg.data.split, max_rows=cfg.data.max_rows)
    validate_gold(rows, list(cfg.grpo.verifiers))
    p = plan(cfg, len(rows))
    out_console.print(
        f"GRPO plan: {p['steps']} steps x {p['prompts_per_step']} prompts x G={p['num_generations']} "
        f"= {p['rollouts']:,} sampled completions\n"
        f"generated tokens: at most {p['max_generated_tokens']:,} "
        f"({p['rollouts']:,} x max_completion_length {cfg.grpo.max_completion_length})\n"
        f"SFT on the same prompts would train on {p['sft_rows_same_prompts']:,} rows, one target each: GRPO "
        f"samples {p['rollouts_per_sft_row']}x as many sequences, and needs no written answers",
        highlight=False)


@app.command("preflight")
def preflight_(
    model: Annotated[str, typer.Option("--model", "-m", help="Local folder, hub id, or `tiny`.")],
    prompts: Annotated[str, typer.Option("--prompts", "-d", help="Prompts with gold fields.")],
    verifier: Annotated[list[str], typer.Option("--verifier", "-v", help="Verifier spec(s).")],
    num_generations: Annotated[int, typer.Option("--num-generations", "-g", help="Samples per prompt (G).",
                                                 min=2)] = 8,
    max_prompts: Annotated[int, typer.Option(help="Prompts to probe.", min=1)] = 32,
    max_new_tokens: Annotated[int, typer.Option(help="Generation budget per completion.")] = 64,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    min_mixed: Annotated[float, typer.Option(help="Refuse below this share of mixed groups.")] = 0.1,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Will GRPO learn? Sample G completions per prompt, score them, and say go or refuse (exit 3)."""
    from rlft.data import read_rows
    from rlft.preflight import run_preflight

    result = run_preflight(model, read_rows(prompts), verifier, num_generations=num_generations,
                           max_prompts=max_prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                           min_mixed=min_mixed)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        out_console.print(f"pass rate {result.pass_rate:.2f}  mixed groups {result.mixed_fraction:.2f}  "
                          f"truncated {result.truncation_rate:.2f}  unparsed {result.parse_failures:.2f}  "
                          f"({result.prompts} prompts x {result.num_generations})")
        out_console.print(f"verdict: [bold]{result.verdict}[/]")
        for line in result.advice:
            out_console.print(f"  - {line}", highlight=False)
    raise typer.Exit(3 if result.verdict == "refuse" else 0)


@app.command("eval")
def eval_(
    model: Annotated[str, typer.Option("--model", "-m", help="Local folder, hub id, or `tiny`.")],
    data: Annotated[str, typer.Option("--data", "-d", help="Verifiable rows: prompt + gold fields.")],
    verifier: Annotated[Optional[list[str]], typer.Option("--verifier", "-v", help="Score with a verifier "
                        "(NAME, NAME:WEIGHT, file.py:fn); default: exact match against `answer`.")] = None,
    samples: Annotated[int, typer.Option("--samples", "-k", help="Also sample K completions per prompt "
                                         "and report their pass rate.", min=0)] = 0,
    temperature: Annotated[float, typer.Option(help="Sampling temperature for --samples.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Generation budget per answer.")] = 32,
    limit: Annotated[Optional[int], typer.Option(help="Evaluate only the first N rows.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print {n, pass_at_1, mean_reward} as JSON.")] = False,
) -> None:
    """Greedy pass@1 and mean reward on held-out verifiable rows (plus pass rate over K samples)."""
    from rlft.data import read_rows, validate_verifiable

    rows = read_rows(data, max_rows=limit)
    if verifier:
        from rlft.methods.grpo import load_verifiers, validate_gold

        validate_gold(rows, verifier)
        scorer, _ = load_verifiers(verifier)
    else:
        validate_verifiable(rows)
        scorer = None
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.evaluate import evaluate_rows, exact_match
    from rlft.models import load_for_inference, load_tokenizer

    tok = load_tokenizer(model)
    net = load_for_inference(model)
    result = evaluate_rows(net, tok, [r.data for r in rows], scorer=scorer or exact_match,
                           max_new_tokens=max_new_tokens, samples=samples, temperature=temperature)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        extra = f"  pass rate over {samples} samples={result.sampled_pass_rate:.3f}" if samples else ""
        out_console.print(f"n={result.n}  pass@1={result.pass_at_1:.3f}  mean_reward={result.mean_reward:.3f}{extra}")


from rlft.commands.choose import choose  # noqa: E402  (light modules: typer only at import)
from rlft.commands.data import data_app  # noqa: E402
from rlft.commands.ppo import ppo  # noqa: E402
from rlft.commands.report import report  # noqa: E402
from rlft.commands.verify import verify  # noqa: E402

app.command("choose")(choose)
app.command("verify")(verify)
app.command("ppo")(ppo)
app.command("report")(report)
app.add_typer(data_app, name="data", help="Inspect data files: lint.")


# ----------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> None:
    """Console-script entry: run the app, turning user errors into one line and exit code 2."""
    debug = os.environ.get("RLFT_DEBUG") == "1" or "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        app(args=argv, prog_name="rlft")
    except UserError as exc:
        if debug:
            raise
        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False, soft_wrap=True)
        if exc.fix:
            err_console.print(f"  [bold]fix:[/] {escape(exc.fix)}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # an rlft bug or a library failure: say so in one line
        if debug:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        err_console.print(f"[bold red]error:[/] {type(exc).__name__}: {escape(first)}", highlight=False, soft_wrap=True)
        err_console.print("  [bold]fix:[/] rerun with --debug for the traceback", highlight=False)
        sys.exit(1)


if __name__ == "__main__":
    main()
