"""RlftProvider: a `dspy.Provider` that is finetunable (an rlft SFT run) and reinforceable (rlft.dspy.reinforce).

`finetune(job, model, train_data, train_data_format, train_kwargs) -> model id` is what dspy.LM.finetune runs on
the thread it starts (BootstrapFinetune then waits on `job.result()`). Here it is an rlft SFT run through
rlft.methods.common.train, the code path `rlft sft` takes: DSPy's {"messages": [...]} rows are written to
`<output_dir>.train.jsonl` beside the run folder (the run's config.yaml names that file), the model is `model`
(LoRA by default, rlft.dspy.config.DSPY_DEFAULTS; on few traces enough epochs for FINETUNE_MIN_STEPS steps,
rlft.dspy.config.finetune_epochs), and the run folder is like any other (config.yaml, versions.json,
metrics.jsonl, summary.json, report, the final model). The id returned is the run folder's path: the LM DSPy
copies from it (`lm.copy(model=id)`) is served the new weights by the same engine, and `rlft eval / merge / export
/ chat --model <id>` take it as any run.

Where it departs from DSPy's LocalProvider (dspy/clients/lm_local.py, which fails on TRL >= 1.13: dspy issue
8762): no server is launched (`launch` / `kill` do nothing: the engine loads a model at its first request) and
the format must be "chat" (DSPy's only format for its ChatAdapter).

Ctrl-C: signals reach the main thread only, which BootstrapFinetune parks in `job.result()`. RlftTrainingJob's
`result` turns the KeyboardInterrupt into the run's interrupt (the SFT run checkpoints at the end of the step
and records `interrupted` in summary.json), waits for that, and raises one line; a second Ctrl-C leaves at once.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from dspy.clients.provider import Provider, TrainingJob

from rlft.errors import UserError


class RlftTrainingJob(TrainingJob):
    """DSPy's future for one finetune, with the rlft run's interrupt and folder."""

    def __init__(self, *args: Any, **kwargs: Any):
        from rlft.run.folder import Interrupt

        super().__init__(*args, **kwargs)
        self.interrupt = Interrupt()
        self.output_dir: str | None = None

    def status(self) -> str:
        if self.done():
            return "failed" if self.exception() is not None or isinstance(self.result(), Exception) else "completed"
        return "interrupting" if self.interrupt.signum is not None else "running"

    def cancel(self) -> bool:
        self.interrupt.signum = signal.SIGINT  # the run checkpoints at the end of its step and ends interrupted
        return False

    def result(self, timeout: float | None = None):
        try:
            return super().result(timeout)
        except KeyboardInterrupt:
            self.cancel()
            try:
                super().result()  # the run saves its checkpoint and records `interrupted`
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: leave without waiting
            raise KeyboardInterrupt(f"rlft finetune interrupted; checkpoint and summary in {self.output_dir}") from None


class RlftProvider(Provider):
    """finetunable and reinforceable, in this process (module docstring)."""

    def __init__(self):
        from rlft.dspy.reinforce import RlftReinforceJob

        super().__init__()
        self.finetunable = True
        self.reinforceable = True
        self.TrainingJob = RlftTrainingJob
        self.ReinforceJob = RlftReinforceJob

    @staticmethod
    def finetune(job: RlftTrainingJob, model: str, train_data: list[dict[str, Any]], train_data_format,
                 train_kwargs: dict[str, Any] | None = None) -> str:
        return finetune(job, model, train_data, train_data_format, train_kwargs or {})


def finetune(job, model: str, train_data: list[dict[str, Any]], train_data_format, train_kwargs: dict[str, Any],
             console=None) -> str:
    """One rlft SFT run on DSPy's chat rows; the run folder's path (module docstring)."""
    from rlft.dspy.config import EPOCH_KEYS, FINETUNE_MIN_STEPS, finetune_epochs, resolve
    from rlft.methods import sft
    from rlft.methods.common import train
    from rlft.run.folder import check_run_folder

    fmt = getattr(train_data_format, "value", train_data_format)
    if fmt not in (None, "chat"):
        raise UserError(f"rlft.dspy finetune takes DSPy's chat rows, not '{fmt}'",
                        "use DSPy's ChatAdapter (the default) for the program being fine-tuned")
    rows = [{"messages": row["messages"]} for row in train_data if row.get("messages")]
    if not rows:
        raise UserError("BootstrapFinetune handed rlft no training rows: the metric accepted none of the teacher's "
                        "traces", "use a teacher that passes sometimes, or a metric with partial credit")
    answers = {str(row["messages"][-1].get("content", "")) for row in rows}
    if len(rows) >= 4 and len(answers) == 1:
        from rich.console import Console

        (console or Console(stderr=True)).print(
            f"warning: all {len(rows)} accepted traces give the same answer ({next(iter(answers))[:60]!r}): "
            "fine-tuning on them teaches the model that one answer; a teacher that is right on other inputs, "
            "or dspy.GRPO, teaches more", highlight=False)
    cfg = resolve("sft", model, train_kwargs)
    if not any(k in train_kwargs for k in EPOCH_KEYS):  # few traces: enough epochs for FINETUNE_MIN_STEPS steps
        batch = int(cfg.train.per_device_train_batch_size) * int(cfg.train.get("gradient_accumulation_steps") or 1)
        epochs = finetune_epochs(len(rows), batch, float(cfg.train.num_train_epochs))
        if epochs != cfg.train.num_train_epochs:
            cfg.values["train"]["num_train_epochs"] = epochs
            from rich.console import Console

            (console or Console(stderr=True)).print(
                f"rlft.dspy: {len(rows)} traces at {batch} a step: {epochs:g} epochs, for at least "
                f"{FINETUNE_MIN_STEPS} steps (train_kwargs num_train_epochs or max_steps to choose)", highlight=False)
    out = Path(cfg.train.output_dir).resolve()
    cfg.values["train"]["output_dir"] = str(out)
    check_run_folder(cfg)
    data = out.parent / f"{out.name}.train.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg.values["data"]["train"] = [str(data)]
    if job is not None:
        job.output_dir = str(out)
    result = train(cfg, sft, console=console, interrupt=getattr(job, "interrupt", None))
    if result.status != "completed":
        raise RuntimeError(f"rlft finetune ended {result.status}; see {out}/summary.json")
    return str(out)
