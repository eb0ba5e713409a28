"""What every method shares: the TRL config from rlft's config, hardware defaults, and one run lifecycle.

A TRL-backed method module (sft, dpo, kto, reward, grpo, rloo, distill) is four names at module level, the
same in each (torchtune's setup/train/cleanup, without a class):
  KIND                                              the rows it trains on (rlft.data)
  prepare(cfg, train_rows, eval_rows, console)      before the run folder exists: checks that need the data
      -> Prepared                                   or the tokenizer, models loaded early, rows filtered
                                                    (returned, never written into the caller's list)
  build(cfg, out, prepared) -> trainer              the TRL trainer
  after(cfg, trainer, prepared, console) -> dict    extra final metrics (held-out scores), often {}
and two optional ones, the two ends of rlft.run.reuse (the same training done once):
  reused(cfg, trainer, console) -> dict | None     the model of a run that already did this training, put into
                                                    the trainer's model instead of training (reward, implicit)
  completed(cfg, trainer, out)                      after a completed, un-resumed run (dpo: records its model)
and `train(cfg, module)` runs it: validated config + data -> prepare -> the run folder -> build -> train under
signal handling -> save the final model -> summary.json and the report.

`start_run` and `Run.end` are the lifecycle that rlft's PPO shares with `train`: data and watch checks, the
folder check before any slow work, `prepare`, the run folder with config.yaml + versions.json, the RunRecord
(summary.json), and the three endings (interrupted, stopped, completed) with their console lines and report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

from rlft.config import RunConfig, trl_kwargs
from rlft.errors import UserError
from rlft.run.folder import (
    Interrupt,
    RunRecord,
    is_main_process,
    last_checkpoint,
    prepare_output_dir,
    process_console,
    versions,
    wait_for_everyone,
    write_json,
)
from rlft.run.guard import FINGERPRINT, acquire_lock, read_run_file, release_lock, write_fingerprint
from rlft.run.outputs import write_problem, write_text


@dataclass
class RunResult:
    """What a training command reports back to the CLI."""

    status: str
    output_dir: Path
    exit_code: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)


def hardware_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Precision and checkpointing from the hardware, unless the user set them.

    bf16/fp16 follow rlft.speed.precision (`trl_flags`: the rule `precision.apply` already wrote into a run's
    config; TRL configs default to bf16=True, which raises on a CPU-only machine); gradient checkpointing (TRL's
    default on) recomputes each layer's forward during the backward pass (about a third more compute per step:
    an estimate from that arithmetic, not measured here) and saves memory only where memory is short, so
    it is on for GPUs and off on the CPU.
    """
    from rlft.speed.precision import Device, trl_flags

    device = Device.here()
    cuda = device.cuda
    kwargs["bf16"], kwargs["fp16"] = trl_flags(kwargs.get("bf16"), kwargs.get("fp16"), device)
    if kwargs.get("gradient_checkpointing") is None:
        kwargs["gradient_checkpointing"] = cuda
    # Under torchrun on a machine without CUDA, transformers only sets up DDP (gloo) with use_cpu; without it
    # every process trains alone on the whole data set.
    # TRL's bf16 autocast on a CPU (full fine-tuning with train.bf16=true on a CPU with bf16 units:
    # rlft.speed.precision)
    # is refused by transformers unless use_cpu says the CPU is meant.
    if not cuda and (int(os.environ.get("WORLD_SIZE") or 1) > 1 or kwargs.get("bf16")):
        kwargs["use_cpu"] = True
    return kwargs


# The trackers transformers' Trainer knows (its report_to names), with the package each needs; another name is
# refused before the run folder exists, as is a tracker whose package is missing.
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio", "mlflow": "mlflow",
                    "comet_ml": "comet_ml", "clearml": "clearml", "neptune": "neptune", "dvclive": "dvclive",
                    "codecarbon": "codecarbon", "swanlab": "swanlab", "dagshub": "dagshub", "flyte": "flytekit",
                    "azure_ml": "azureml"}


def tracker_names(report_to: Any) -> list[str]:
    """`train.report_to` as a list of tracker names ([] for none), each named tracker's package installed.

    The TRL methods hand report_to to transformers' Trainer; rlft's PPO hands the same list to accelerate's
    trackers. Checked before the run folder is written, so a missing package is one line, not a traceback.
    """
    import importlib.util

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    names = [str(n) for n in names if n and n != "none"]
    for name in names:
        package = TRACKER_PACKAGES.get(name)
        if package is None and name != "all":
            from rlft.cross_checks import did_you_mean

            raise UserError(f"train.report_to={name} is not a tracker transformers knows"
                            f"{did_you_mean(name, TRACKER_PACKAGES)}",
                            f"use one of {', '.join(TRACKER_PACKAGES)}, or none")
        if package and importlib.util.find_spec(package) is None:
            raise UserError(f"train.report_to={name} needs the {package} package, which is not installed",
                            f"pip install {package}" + (" (or rlft[track])" if name == "tensorboard" else ""))
    return names


def tracker_config(cfg: RunConfig) -> dict[str, Any]:
    """The resolved config flattened to `section.key` scalars, as trackers store hyperparameters."""
    flat: dict[str, Any] = {}
    for section, values in cfg.values.items():
        if not isinstance(values, dict):
            flat[section] = values if isinstance(values, (int, float, str, bool)) else str(values)
            continue
        for key, value in values.items():
            flat[f"{section}.{key}"] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return flat


def build_trl_config(cfg: RunConfig, config_cls, out: Path, has_eval: bool, **overrides: Any):
    """TRL config for a method: rlft's `train` + method section, hardware defaults, our logging choices."""
    kwargs = hardware_defaults(trl_kwargs(cfg, cfg.method))
    kwargs.setdefault("save_strategy", "steps")  # `--set train.save_strategy=no` (a TRL field) is the user's
    kwargs.update(output_dir=str(out), disable_tqdm=True, logging_strategy="steps")
    if has_eval:
        kwargs["eval_strategy"] = "steps"
        kwargs["eval_steps"] = kwargs.get("eval_steps") or kwargs.get("save_steps")
    else:
        kwargs.pop("eval_steps", None)
        kwargs["eval_strategy"] = "no"
    kwargs.update(overrides)
    try:
        return config_cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise UserError(f"{config_cls.__name__} rejected the config: {str(exc).splitlines()[0]}",
                        "fix the train/method settings named above") from exc


def dpo_trainer(cfg: RunConfig, out: Path, prepared: Prepared, max_length: int, columns: tuple,
                **overrides):
    """TRL's DPOTrainer on the run's model with its reference (rlft.methods.dpo's docstring says how the reference is
    built), shared by rlft dpo and rlft reward's implicit objective; `overrides` go to DPOConfig."""
    from trl import DPOConfig, DPOTrainer

    from rlft import models
    from rlft.data.table import to_dataset

    model = models.load_model(cfg.model)
    ref = None if cfg.model.lora.enabled else models.load_model(cfg.model, trainable=False, with_lora=False)
    args = build_trl_config(cfg, DPOConfig, out, bool(prepared.eval_rows),
                            max_length=clamp_max_length(max_length, model), **overrides)
    trainer = DPOTrainer(model=model, ref_model=ref, args=args, processing_class=prepared.tok,
                         train_dataset=to_dataset(prepared.train_rows, columns),
                         eval_dataset=to_dataset(prepared.eval_rows, columns) if prepared.eval_rows else None)
    models.drop_fresh_ref_adapter(trainer.model)  # a fresh adapter's reference is its base: no "ref" copy
    return trainer


def clamp_max_length(cfg_value: int, model) -> int:
    """The configured max_length, capped at what the model's position embeddings allow."""
    limit = getattr(model.config, "max_position_embeddings", None)
    return min(cfg_value, limit) if limit else cfg_value


@dataclass
class Prepared:
    """What a method's `prepare` hands to `build` and `after`: the rows to train and score on (filtered when the
    method filters them), and whatever it loaded or measured before the run folder existed."""

    train_rows: list
    eval_rows: list
    tok: Any = None
    model: Any = None
    reward_fn: Any = None
    preflight: Any = None  # rlft.preflight.ProbeResult, written to preflight.json
    tools: Any = None  # rlft.tools.ToolSetup of a GRPO run with --tools / --env
    summary: dict[str, Any] = field(default_factory=dict)  # extra summary.json fields (PPO's memory estimate)


@dataclass
class Run:
    """One run between its folder's creation and its ending: where it writes and how it ends."""

    cfg: RunConfig
    out: Path
    record: RunRecord
    watch: Any  # rlft.watch.setup.WatchSetup
    console: Console
    main: bool
    checkpoint: Path | None = None  # the checkpoint a --resume continues from
    prior: dict[str, Any] = field(default_factory=dict)  # summary.json as the earlier part of the run left it

    def end(self, status: str, step: int, *, alarms: list[str], signum: int | None = None, stopped_by=None,
            final: dict[str, Any] | None = None, **fields: Any) -> RunResult:
        """Record one of the three endings in summary.json, say it, write the report; the CLI's result.

        interrupted: a checkpoint was saved at `step` (exit 128 + signum); stopped: an alarm under
        watch.on_alarm=stop ended the run after saving a checkpoint (exit 4); completed: `final` metrics."""
        from rlft.report import report_and_print
        from rlft.watch.monitor import STOPPED_EXIT_CODE

        out, console = self.out, self.console
        if status == "interrupted":
            self.record.finish("interrupted", global_step=step, signal=signum,
                               checkpoint=str(last_checkpoint(out)), alarms=alarms, **fields)
            console.print(f"[yellow]interrupted[/] at step {step}; checkpoint saved. "
                          f"Continue with the same command plus --resume --output-dir {out}")
            result = RunResult("interrupted", out, 128 + signum)
        elif status == "stopped":
            self.record.finish("stopped", global_step=step, stopped_by=stopped_by.as_dict(),
                               checkpoint=str(last_checkpoint(out)), alarms=alarms, **fields)
            console.print(f"[red]stopped[/] at step {step} by the {stopped_by.name} alarm "
                          f"(watch.on_alarm=stop); checkpoint saved: {last_checkpoint(out)}")
            result = RunResult("stopped", out, STOPPED_EXIT_CODE)
        else:
            self.record.finish("completed", global_step=step, final_metrics=final or {}, alarms=alarms, **fields)
            result = RunResult("completed", out, 0, final or {})
        if self.main:
            report_and_print(out, console)
        return result


def start_run(cfg: RunConfig, kind: str, prepare: Callable, *, overwrite: bool = False, resume: bool = False,
              console: Console | None = None, held_out: bool = False) -> tuple[Run, Prepared]:
    """Everything before training, for every method (`kind` of rows, the method's `prepare`): see the module
    docstring. Nothing is written before `prepare` returns (a refused pre-flight leaves nothing behind); from
    the RunRecord on, any ending is recorded in summary.json (the caller wraps training in
    `run.record.closing_on_error()`). With `held_out` (the TRL methods), a run without watch.holdout gets its
    held-out check (rlft.watch.setup.auto_holdout: the eval rows, else a seeded slice of the training rows); every
    run says when its planned passes over the data are too many (rlft.run.budget)."""
    from rlft.data import load_split
    from rlft.quiet import quiet_libraries
    from rlft.watch.setup import mark_reward_scored_heldout, prepare_watch

    quiet_libraries()
    # Under torchrun / accelerate launch every process runs this; only the main one checks, creates and writes
    # the run folder (a secondary process would otherwise find it "not empty") and prints.
    main = is_main_process()
    console = process_console(console)
    from rlft.speed import precision

    precision.apply(cfg, console)  # model.dtype / train.bf16 from the hardware, before any model loads
    from rlft import speed

    speed.set_enabled(cfg.train.get("speedups", True))  # train.speedups=false: plain transformers/TRL
    read_hashes: dict[str, str] = {}  # sha256 of the bytes read: fingerprint.json records what was trained on
    train_rows, eval_rows = load_split(cfg.data, kind, seed=cfg.train.seed, hashes=read_hashes)
    tracker_names(cfg.train.report_to)  # a tracker whose package is missing: refused before writing
    watch = prepare_watch(cfg)  # thresholds, alarm names, the holdout file: also before writing
    if cfg.model.get("chat_template"):  # a tokenizer that cannot take it: refused before any model loads
        load_run_tokenizer(cfg)
    if not resume and main:  # refuse a busy output_dir before any slow work
        prepare_output_dir(cfg.train.output_dir, overwrite=overwrite, check_only=True)
    if held_out:
        from rlft.watch.setup import auto_holdout

        train_rows = auto_holdout(cfg, kind, train_rows, eval_rows, watch, console)
    if mark_reward_scored_heldout(cfg, watch) and main:
        console.print(f"note: {watch.holdout.verifier} is both the reward and the held-out scorer, so reward_hacking "
                      "fires only on a held-out fall (gaming the verifier would lift the held-out score too)",
                      highlight=False)
    note_plain_prompts(cfg, train_rows, console)
    from rlft.run.budget import warning

    if main and (line := warning(cfg, len(train_rows))):
        console.print(f"[yellow]warning[/]: {line}", highlight=False, soft_wrap=True)
    from transformers import set_seed

    # GRPO and RLOO load their model here (their pre-flight samples from it), and LoRA's A matrices are drawn at
    # that load: from train.seed, so a seeded run repeats (the trainer seeds again after this, as before)
    set_seed(cfg.train.seed)
    prepared = prepare(cfg, train_rows, eval_rows, console)
    if prepared.tools is not None and watch.holdout is not None:  # a tool run's check plays whole episodes
        watch.holdout.tools = prepared.tools
        sec = cfg.values[cfg.method]
        watch.holdout.max_new_tokens = sec.get("heldout_max_new_tokens") or sec["max_completion_length"]
    if main:
        out = prepare_output_dir(cfg.train.output_dir, overwrite=overwrite, resume=resume)
    else:
        out = Path(cfg.train.output_dir)
    wait_for_everyone()  # the others start only once the main process has (re)made the folder
    ckpt = last_checkpoint(out) if resume else None
    prior = read_run_file(out, "summary.json", "json", {}) if resume else {}
    if main:
        acquire_lock(out)  # held until the run ends (rlft.run.guard): no --overwrite/--resume of a live run
        try:
            if not resume or not (out / FINGERPRINT).exists():
                write_fingerprint(cfg, out, read_hashes)
            write_text(out / "config.yaml", cfg.to_yaml())  # staged: replaces a symlink, never writes through it
            write_json(out / "versions.json", versions())
            record = RunRecord(out, cfg.method, resumed_from=str(ckpt) if ckpt else None, write=main)
        except (OSError, UserError) as exc:  # a full or read-only disk
            release_lock(out)
            if isinstance(exc, UserError):
                raise
            raise write_problem(out, exc, "output_dir") from exc
    else:
        record = RunRecord(out, cfg.method, resumed_from=str(ckpt) if ckpt else None, write=main)
    with record.closing_on_error():
        record.update(train_rows=len(prepared.train_rows), eval_rows=len(prepared.eval_rows),
                      data=list(cfg.data.train), **prepared.summary)
    return Run(cfg, out, record, watch, console, main, ckpt, prior), prepared


def train(cfg: RunConfig, method: ModuleType, *, overwrite: bool = False, resume: bool = False,
          console: Console | None = None, on_check: Callable | None = None,
          interrupt: Interrupt | None = None) -> RunResult:
    """Run one TRL-backed training job end to end; see the module docstring.

    The run is watched (rlft.methods.callback: alarms, samples, the held-out check of `watch`); with
    `watch.on_alarm: stop` an alarm saves a checkpoint and ends the run as `stopped` (exit code 4). Every run
    that ends, completed, interrupted or stopped, gets its report. `on_check(step, score) -> stop?` hears every
    held-out check (rlft sweep's pruner); True ends training there, as a completed (shorter) run.
    """
    from rlft.methods.callback import RunCallback

    run, prepared = start_run(cfg, method.KIND, method.prepare, overwrite=overwrite, resume=resume,
                              console=console, held_out=True)
    out, console, ckpt = run.out, run.console, run.checkpoint
    run.watch.on_check = on_check
    interrupt = interrupt or Interrupt()  # a caller may pass its own (one it can set from another thread)
    callback = None
    with run.record.closing_on_error():  # from here on, any ending is recorded in summary.json
        try:
            from rlft.data import PROGRESS_ROWS

            rows = prepared.train_rows
            # whether the starting model may be what the run keeps (not a reward model: its score head is new)
            keep_start = getattr(method, "START_IS_A_MODEL", True)
            if len(rows) >= PROGRESS_ROWS:
                console.print(f"loading the model and tokenizing {len(rows):,} rows...", highlight=False)
            from transformers import set_seed

            # Weights the start lacks (a reward model's score head, LoRA's A matrices) are drawn while the model
            # loads, before the trainer seeds itself: from train.seed, so a seeded run repeats.
            set_seed(cfg.train.seed)
            trainer = method.build(cfg, out, prepared)
            if getattr(method, "SAMPLES_WHILE_TRAINING", False):  # fast sampling and TRL's CPU patches
                from rlft import speed

                speed.attach(trainer.model, console, trl_patches=True)
            callback = RunCallback(out, interrupt, console, f"{cfg.method}", watch=run.watch,
                                   max_minutes=cfg.train.get("max_minutes"))
            callback.attach(trainer)
            trainer.add_callback(callback)
            _drop_printer(trainer)
            console.print(f"[bold]rlft {cfg.method}[/]: {len(rows)} rows -> {out}")
            start = time.time()
            # a method may take the model of a run that already did this exact training (rlft.run.reuse)
            reused = method.reused(cfg, trainer, console) if hasattr(method, "reused") and not ckpt else None
            with interrupt.installed():
                if reused is None:
                    result = trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
                else:
                    trainer.state.global_step = reused["steps"]
            # the callback stays open: trainer.evaluate() below still logs through it (closed in `finally`)
            step = trainer.state.global_step
            alarms = [a["name"] for a in callback.alarms]
            if interrupt.signum is not None:
                return run.end("interrupted", step, alarms=alarms, signum=interrupt.signum)
            if callback.stopped_by is not None:
                kept = (callback.kept.finish(step, console, keep_start=keep_start)
                        if callback.stopped_by.name == "overfitting" else {})
                return run.end("stopped", step, alarms=alarms, stopped_by=callback.stopped_by,
                               last_log=callback.last, **kept)
            kept = callback.kept.finish(step, console, end=True, keep_start=keep_start)
            if callback.timed_out:
                kept["time_limit"] = callback.timed_out
            alarms = [a["name"] for a in callback.alarms]  # finish may add the end-of-run no_gain alarm
            final = dict(result.metrics) if reused is None else {}
            if reused is not None:
                kept["reused_training"] = reused
            elif ckpt is None and not callback.timed_out and run.main and hasattr(method, "completed"):
                method.completed(cfg, trainer, out)  # e.g. DPO records its model for an implicit reward model
            if getattr(trainer, "eval_dataset", None) is not None:
                evals = [h for h in trainer.state.log_history if "eval_loss" in h]
                if evals and evals[-1].get("step") == step:  # the trainer just evaluated: reuse it
                    final.update({k: v for k, v in evals[-1].items() if k.startswith("eval_")})
                else:
                    final.update(trainer.evaluate())
            final.update(method.after(cfg, trainer, prepared, console))
            return run.end("completed", step, alarms=alarms, final=final,
                           train_seconds=round(time.time() - start, 2), last_log=callback.last, **kept)
        finally:
            if callback is not None:
                callback.close()


def load_run_tokenizer(cfg: RunConfig):
    """The run's tokenizer (model.name_or_path at model.revision), with model.chat_template applied when it is
    set (rlft.tools.use_chat_template: refused with one line when the tokenizer is not ChatML)."""
    from rlft.models import load_tokenizer
    from rlft.tools import use_chat_template

    tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    return use_chat_template(tok, cfg.model.get("chat_template"), cfg.model.name_or_path)


def note_plain_prompts(cfg: RunConfig, rows, console: Console) -> None:
    """Say so before training when plain-string prompts meet a model with a chat template (rlft.chat.templates)."""
    from rlft.chat.templates import has_plain_prompts, plain_prompt_note

    as_chat = cfg.data.get("as_chat")
    if not as_chat and not has_plain_prompts(rows):
        return
    from rlft.models import load_tokenizer

    try:
        tok = load_tokenizer(cfg.model.name_or_path, cfg.model.revision, cfg.model.trust_remote_code)
    except (UserError, OSError):  # the trainer's own load reports it
        return
    if as_chat and not getattr(tok, "chat_template", None):
        raise UserError(f"data.as_chat wraps the prompts as chat messages, but '{cfg.model.name_or_path}' has no "
                        "chat template to render them", "drop --as-chat (plain prompts go in as text), or train "
                        "a model that has a chat template")
    if as_chat:
        return
    if note := plain_prompt_note(tok, rows):
        console.print(f"[yellow]note[/]: {note}")


def _drop_printer(trainer) -> None:
    """With tqdm off, transformers prints every log dict; rlft's own progress line replaces it."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
