"""The run folder: what ran, on what, with which versions, and how it ended.

Layout of `output_dir`:
  config.yaml      the resolved config (every default filled in)
  versions.json    library versions and the device
  metrics.jsonl    one JSON object per logging step (`step` plus the trainer's keys, e.g. `loss`)
  summary.json     status (running / completed / interrupted / failed), steps, final metrics, timings
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

from rlft.errors import Terminated, UserError

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
    accelerate's PartialState, which sets up the process group the trainers then reuse."""
    if int(os.environ.get("WORLD_SIZE") or 1) <= 1:
        return
    import torch
    from accelerate import PartialState

    PartialState(cpu=not torch.cuda.is_available()).wait_for_everyone()


def default_output_dir(method: str) -> str:
    return f"runs/{method}-{time.strftime('%Y%m%d-%H%M%S')}"


def prepare_output_dir(path: str | Path, overwrite: bool = False, resume: bool = False,
                       check_only: bool = False) -> Path:
    """Make sure `path` can take this run: empty, or --overwrite of an rlft run, or --resume.

    A folder left by a run that ended before its first step (summary.json `failed`/`interrupted` at step 0,
    no checkpoint) counts as empty: it holds nothing to keep. With `check_only`, only refuse (nothing is
    created or deleted)."""
    out = Path(path).expanduser()
    if overwrite and resume:
        raise UserError("--overwrite and --resume together: one deletes the run folder, the other continues it",
                        "drop --overwrite to continue the run, or --resume to start it again")
    if resume:
        if not out.is_dir() or last_checkpoint(out) is None:
            why = " (its run ended before the first checkpoint)" if out.is_dir() and stale_run(out) else ""
            raise UserError(f"--resume: no checkpoint in '{out}'{why}", "start without --resume, or point "
                            "--output-dir at the folder of the interrupted run")
        return out
    if out.exists() and not out.is_dir():
        raise UserError(f"output_dir '{out}' is a file", "choose a folder with --output-dir")
    if out.is_dir() and any(out.iterdir()):
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


def read_metrics(out: Path) -> list[dict]:
    path = Path(out) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
        prior = read_json(out / "summary.json") if write and (out / "summary.json").exists() else {}
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
            self.finish("failed", error=f"{type(exc).__name__}: {exc}")
            raise

    def save(self) -> None:
        if self.write:
            write_json(self.out / "summary.json", self.summary)
