"""The run folder: what ran, on what, with which versions, and how it ended.

Layout of `output_dir`:
  config.yaml      the resolved config (every default filled in)
  versions.json    library versions and the device
  metrics.jsonl    one JSON object per logging step (`step` plus the trainer's keys, e.g. `loss`)
  summary.json     status (running / completed / interrupted / failed), steps, final metrics, timings
  fingerprint.json what defines the run (method, models, LoRA, verifiers, data and its content hash): --resume
                   refuses any difference (rlft.run.guard)
  .rlft.lock       while a process trains here: its PID, held with flock (removed when the run ends)
  checkpoint-N/    trainer checkpoints (what --resume continues from)
  the final model  weights + tokenizer, loadable with plain transformers (or a peft adapter)
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from rlft.errors import Terminated, UserError, disk_errno
from rlft.run.guard import LOCK, check_not_live, check_own_files, check_same_run, read_run_file, release_lock
from rlft.run.outputs import check_output, input_paths

RUN_MARKERS = ("summary.json", "config.yaml")


def is_main_process() -> bool:
    """True unless this is a secondary process of a multi-process launch (torchrun, `accelerate launch`,
    deepspeed: they all set RANK). Only the main process creates, deletes or writes the run folder."""
    return int(os.environ.get("RANK") or 0) == 0


def process_console(console=None):
    """`console` (default: a stderr console) on the main process, a silent one on the others."""
    from rich.console import Console

    if not is_main_process():
        return Console(quiet=True)
    return console or Console(stderr=True)


def wait_for_everyone() -> None:
    """Barrier across the processes of a multi-process launch; returns at once in a single process. Through
    accelerate's PartialState, which sets up the process group the trainers then reuse.

    A secondary process waits here with SIGTERM and SIGINT at their default (die at once): when the main one
    exits first (a refused output folder, a bad input), the launcher's SIGTERM would otherwise wait for a Python
    handler that cannot run inside the blocking collective, and torchrun kills the process only 30 s later.
    It has written nothing yet, so there is nothing to save."""
    if int(os.environ.get("WORLD_SIZE") or 1) <= 1:
        return
    import signal

    import torch
    from accelerate import PartialState

    previous = {}
    if not is_main_process():
        try:
            previous = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGINT)}
        except ValueError:  # off the main thread, where handlers cannot be set
            pass
    try:  # the first call also joins the process group: it waits for the main process to join too
        PartialState(cpu=not torch.cuda.is_available()).wait_for_everyone()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def any_process(accelerator, flag: bool) -> bool:
    """True on every process when it is true on one: a signal, an alarm or the time limit must stop all of
    them at the same step, or one would wait in a collective for a step the others never take."""
    if accelerator is None or accelerator.num_processes == 1:
        return flag
    import torch

    return bool(accelerator.reduce(torch.tensor(float(flag), device=accelerator.device), reduction="sum") > 0)


def default_output_dir(method: str) -> str:
    return f"runs/{method}-{time.strftime('%Y%m%d-%H%M%S')}"


def refuse_overwrite_with_resume(overwrite: bool, resume: bool) -> None:
    if overwrite and resume:
        raise UserError("--overwrite and --resume together: one deletes the run folder, the other continues it",
                        "drop --overwrite to continue the run, or --resume to start it again")


def check_run_folder(cfg, overwrite: bool = False, resume: bool = False) -> None:
    """The run folder's checks that need no data: before data loads and before the folder is created or deleted.

    The folder may not be, hold, or sit inside an input (model, data, eval/holdout file, reward model, teacher,
    verifier file: every config value naming an existing path), and its location must be writable; `--resume`
    continues only the same method on the same data, and a completed run only when max_steps or epochs grew;
    `--overwrite --resume` together is refused. What needs the folder's contents (empty? a checkpoint?) is
    `prepare_output_dir`'s, which the run calls once its data has validated."""
    refuse_overwrite_with_resume(overwrite, resume)
    out = Path(cfg.train.output_dir).expanduser()
    check_output(out, input_paths(cfg))
    check_not_live(out, overwrite, resume)
    if resume:
        check_resume(cfg, out)


def check_resume(cfg, out: Path) -> None:
    """Resume only the same run (rlft.run.guard.check_same_run: method, model, LoRA, teacher, reward model,
    verifiers, data and its content); a completed run only when there are steps left to take."""
    saved_path = out / "config.yaml"
    if not out.is_dir() or last_checkpoint(out) is None:
        return  # rlft.run.folder.prepare_output_dir says "no checkpoint" with its fix
    check_own_files(out)
    if not os.path.lexists(saved_path):
        return
    saved = read_run_file(out, "config.yaml", "yaml", {})
    summary = read_run_file(out, "summary.json", "json", {})
    if saved.get("method") != cfg.method:
        raise UserError(f"--resume: '{out}' is a `rlft {saved.get('method')}` run, not `rlft {cfg.method}`",
                        f"resume it with `rlft {saved.get('method')} --resume`, or train into another "
                        "--output-dir (pass the run as --model to start from its weights)")
    check_same_run(cfg, out, saved)
    if summary.get("status") == "completed":
        old_train, new_train = saved.get("train") if isinstance(saved.get("train"), dict) else {}, cfg.values["train"]
        done = summary.get("global_step") or 0
        # a run train.max_minutes ended early may go on to its planned end; a finished one only past it
        end = done if summary.get("time_limit") else max(done, old_train.get("max_steps", -1))
        more_steps = new_train.get("max_steps", -1) > end
        more_epochs = (new_train.get("max_steps", -1) == -1 and
                       new_train.get("num_train_epochs", 0) > old_train.get("num_train_epochs", 0))
        if not (more_steps or more_epochs):
            raise UserError(f"--resume: the run in '{out}' already completed ({done} steps); resuming would "
                            "train past its end and replace its final model",
                            f"raise --max-steps above {end} to train further, or use another --output-dir")


def prepare_output_dir(path: str | Path, overwrite: bool = False, resume: bool = False,
                       check_only: bool = False) -> Path:
    """Make sure `path` can take this run: empty, or --overwrite of an rlft run, or --resume.

    A folder left by a run that ended before its first step (summary.json `failed`/`interrupted` at step 0,
    no checkpoint) counts as empty: it holds nothing to keep. With `check_only`, only refuse (nothing is
    created or deleted)."""
    out = Path(path).expanduser()
    refuse_overwrite_with_resume(overwrite, resume)
    if out.is_dir():
        check_not_live(out, overwrite, resume)
    if resume:
        if not out.is_dir() or last_checkpoint(out) is None:
            why = " (its run ended before the first checkpoint)" if out.is_dir() and stale_run(out) else ""
            raise UserError(f"--resume: no checkpoint in '{out}'{why}", "start without --resume, or point "
                            "--output-dir at the folder of the interrupted run")
        return out
    if out.exists() and not out.is_dir():
        raise UserError(f"output_dir '{out}' is a file", "choose a folder with --output-dir")
    if out.is_dir() and any(p.name != LOCK for p in out.iterdir()):  # a dead run's lock file alone: empty
        stale = stale_run(out)
        if not overwrite and not stale:
            raise UserError(f"output_dir '{out}' is not empty", "pass --overwrite to replace it, --resume to "
                            "continue it, or choose another --output-dir")
        if not any((out / m).exists() for m in RUN_MARKERS):
            raise UserError(f"output_dir '{out}' is not an rlft run folder; refusing to delete it",
                            "choose another --output-dir")
        if check_only:
            return out
        shutil.rmtree(out)
    if not check_only:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"output_dir '{out}' cannot be created ({exc.strerror})",
                            "choose an --output-dir in a writable folder") from exc
    return out


def stale_run(out: Path) -> bool:
    """An rlft run folder whose run ended (failed or interrupted) before step 1 and left no checkpoint."""
    if last_checkpoint(out) is not None or not (out / "summary.json").is_file():
        return False
    try:
        summary = read_json(out / "summary.json")
    except (OSError, ValueError):
        return False
    return (isinstance(summary, dict) and summary.get("status") in ("failed", "interrupted")
            and not summary.get("global_step"))


def last_checkpoint(out: Path) -> Path | None:
    ckpts = [p for p in out.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return max(ckpts, key=lambda p: int(p.name.split("-")[-1])) if ckpts else None


def versions() -> dict[str, Any]:
    """Library versions and the device, for versions.json."""
    from importlib import metadata

    out: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("rlft", "torch", "transformers", "trl", "peft", "datasets", "accelerate", "bitsandbytes"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        import torch

        out["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        out["cpu_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        pass
    return out


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (tmp file + rename), so a killed run never leaves half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def read_jsonl(path: Path) -> list[dict]:
    """The records (JSON objects) of a run's .jsonl file (metrics, alarms, samples); [] when absent. Damaged
    lines (cut short by a killed run, not JSON, not an object, not UTF-8) are skipped; a pipe or device in the
    file's place is refused (reading it could block forever)."""
    path = Path(path)
    if not path.exists():
        return []
    from rlft.data.bounded import kind_of

    if kind_of(path) or path.is_dir():
        raise UserError(f"{path} is {kind_of(path) or 'a folder'}, not a file",
                        f"delete it (rm {path}); the run writes it again")
    out = []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):  # a line cut by a killed run, or damaged
                continue
            if isinstance(record, dict):
                out.append(record)
    return out


class Interrupt:
    """SIGINT/SIGTERM during training: ask the trainer to checkpoint and stop, instead of dying mid-step.

    The first signal sets `signum`; the training callback sees it at the end of the current step, saves a
    checkpoint and stops. A second Ctrl-C raises KeyboardInterrupt at once.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    @contextmanager
    def installed(self) -> Iterator["Interrupt"]:
        import threading

        if threading.current_thread() is not threading.main_thread():
            # Python delivers signals to the main thread only: a run trained on another thread (rlft.dspy's
            # finetune, on the thread DSPy starts) is interrupted by whoever owns it setting `signum`.
            yield self
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, self._handle)
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


class RunRecord:
    """summary.json for one run, updated as the run goes."""

    def __init__(self, out: Path, method: str, resumed_from: str | None = None, write: bool = True) -> None:
        self.out = out
        self.write = write  # False on the secondary processes of a multi-process run
        self.started = time.time()
        prior = read_run_file(out, "summary.json", "json", {}) if write else {}
        self.summary: dict[str, Any] = {
            "method": method,
            "status": "running",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "output_dir": str(out),
            "resumed_from": resumed_from,
            "previous_runs": prior.get("previous_runs", []) + ([prior] if prior else []),
        }
        self.save()

    def update(self, **fields: Any) -> None:
        self.summary.update(fields)
        self.save()

    def finish(self, status: str, **fields: Any) -> None:
        self.summary.update(status=status, ended_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                            wall_seconds=round(time.time() - self.started, 2), **fields)
        self.save()
        if self.write:
            release_lock(self.out)  # the run has ended: its folder is free

    @contextmanager
    def closing_on_error(self) -> Iterator[RunRecord]:
        """Mark the run `interrupted` (Ctrl-C outside the trainer's own handler) or `failed` (any other
        exception, with its message) in summary.json, then let the exception go on."""
        try:
            yield self
        except (KeyboardInterrupt, Terminated) as exc:  # Ctrl-C, or SIGTERM outside the trainer
            self.finish("interrupted", signal=getattr(exc, "signum", 2))
            raise
        except BaseException as exc:
            if self.write and disk_errno(exc) is not None:
                self.discard_partial()
                if not self.out.exists():
                    raise
            try:
                self.finish("failed", error=f"{type(exc).__name__}: {exc}")
            except OSError:  # the disk that failed the run cannot take its summary either
                release_lock(self.out)
            raise

    def discard_partial(self) -> None:
        """After a full disk: remove what was being written when it filled (a checkpoint without its
        trainer_state.json, which TRL and rlft's PPO write last, and the final weights in the run folder), so
        --resume never picks up half a checkpoint; a run that started here and kept no whole checkpoint leaves
        no folder at all."""
        for ckpt in self.out.glob("checkpoint-*"):
            if ckpt.is_dir() and not (ckpt / "trainer_state.json").is_file():
                shutil.rmtree(ckpt, ignore_errors=True)
        for weights in [*self.out.glob("model*.safetensors*"), *self.out.glob("adapter_model.safetensors*"),
                        *self.out.glob("*.tmp")]:
            weights.unlink(missing_ok=True)
        fresh = not self.summary["previous_runs"] and not self.summary["resumed_from"]
        if fresh and last_checkpoint(self.out) is None:
            release_lock(self.out)
            shutil.rmtree(self.out, ignore_errors=True)

    def save(self) -> None:
        if self.write:
            write_json(self.out / "summary.json", self.summary)
