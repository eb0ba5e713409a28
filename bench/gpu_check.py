"""The prepared device check (bench/gpu_check.sh runs it; docs/gpu.md): every method on a GPU in one call.

Steps, in order, each in its own process with its own timeout, under one budget for the whole:
  env          torch, CUDA, the GPU's name and bf16 support; whether `rlft bootstrap` exists
  tiny-*       the learning checks that matter on a new device, on rlft's tiny model: SFT learns (loss falls
               20%), the first DPO loss is ln 2 (policy == reference), GRPO's reward rises (math verifier)
  build-qwen   a randomly initialised model with Qwen2.5-0.5B's shape (bench/qwen2.5-0.5b.json, no download)
               and the tiny model's tokenizer (ids 0-99 of its 151936 rows): speed and memory only
  sft, dpo, reward, ppo, grpo, bootstrap
               a few steps of the recipes/*_qwen0.5b_lora.yaml recipes on it through the real rlft commands,
               with rlft's GPU defaults (bf16, gradient checkpointing on CUDA: rlft.methods.common)

Each training step runs `rlft.cli.main(args)` in a child (forked after the imports, so each child skips them;
spawned afresh with --isolation spawn, or when the parent's imports touched CUDA). The child counts tokens at
every nn.Embedding's input (padding included; grad-enabled forwards are training tokens, the rest are
generation and reference forwards) and marks each optimizer step (torch's global step hook, after a CUDA
synchronize). From those: s/step over rlft's steps 2..n (the first step's warm-up left out), training tokens/s
over the same window, peak GPU memory (torch.cuda.max_memory_allocated/reserved), and the share of the GPU's
bf16 peak with FLOPs = 6 x params x training tokens (params: the base model's, tied embeddings once; LoRA's
backward computes no base weight gradients, so 6N overstates its work by about a third, and checkpointing's
recomputed forward is not counted: a lower bound on the hardware's load, an upper one on the useful work).

--dry-run (or DEVICE=cpu) runs every step on the CPU with tiny sizes: a Qwen2-architecture model shrunk to
hidden 64 / 2 layers / vocab 1024, 2-3 steps each, the learning checks shortened (the GRPO rise is not judged at
that size). tests/test_gpu_check.py runs it in the fast suite.

Writes OUT/gpu_check.json (every step: status, seconds, numbers, the failure as one line) and OUT/gpu_check.log
(each step's output tail); prints one line per step and a table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "bench" / "qwen2.5-0.5b.json"
REWARD = ROOT / "bench" / "gpu_check_reward.py"
# Dense bf16 peaks (TFLOP/s) by GPU name: the vendor's datasheet figure for the SXM part, as
# /work/.library/device/H200.md quotes it (H100 and H200 share the Hopper chip's rate); the measured
# 8192^3 bf16 matmul on one H200 here was about 790 (KINDS.md), reported beside it as "measured_matmul".
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0}
MEASURED_MATMUL_TFLOPS = {"H200": 790.0}
# The dry run's shrink of the Qwen2 shape (same architecture and code path, CPU-sized).
DRY_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 1024, "max_window_layers": 2}
TAIL_LINES = 25


@dataclass
class Step:
    name: str
    kind: str                     # "env", "build", "rlft"
    args: list[str] = field(default_factory=list)
    timeout: float = 120.0        # seconds this step may run
    need: float = 30.0            # seconds it needs at least: skipped when less of the budget is left
    judge: Optional[str] = None   # learning check to apply: "sft_learns", "dpo_ln2", "grpo_rises"
    after: tuple[str, ...] = ()   # steps whose output it needs
    speed: bool = False           # a speed/memory row (the Qwen-shaped model)
    optional: Optional[str] = None  # a CLI command that must exist (bootstrap)


def plan(work: Path, dry: bool) -> list[Step]:
    """The steps and their arguments: GPU sizes, or tiny ones under the dry run."""
    q = str(work / "qwen-shaped")
    w = lambda name: str(work / name)  # noqa: E731
    n = 2 if dry else 6                       # speed steps: rlft steps each (the first is warm-up)
    # Every speed step: one log per step, no checkpoint and no held-out evaluation (speed, not learning), and
    # under the dry run only the first 64 rows (their tokenization is most of a CPU step's time).
    fast = ["--set", "train.logging_steps=1", "--set", "train.save_steps=100000", "--set", "data.eval=null",
            "--overwrite", "--seed", "1", *(["--set", "data.max_rows=64"] if dry else [])]
    grpo_len = "8" if dry else "256"
    tiny_sft_steps, short_steps, grpo_steps = ("30", "40", "3") if dry else ("40", "1000", "150")
    steps = [
        Step("env", "env", timeout=60, need=5),
        Step("tiny-sft-learns", "rlft", ["sft", "--data", "data/arith/sft_train.jsonl", "--model", "tiny",
                                         "-o", w("tiny-sft"), "--max-steps", tiny_sft_steps, "--lr", "3e-3",
                                         "--batch-size", "32", "--set", "sft.max_length=32",
                                         "--set", "data.max_rows=1000",
                                         "--set", "train.logging_steps=5", "--overwrite"],
             timeout=120, need=20, judge="sft_learns"),
        Step("tiny-dpo-ln2", "rlft", ["dpo", "--pairs", "data/arith/pairs_train.jsonl", "--model", w("tiny-sft"),
                                      "-o", w("tiny-dpo"), "--max-steps", "3" if dry else "10", "--lr", "3e-3",
                                      "--batch-size", "16", "--set", "data.max_rows=64", "--set",
                                      "train.logging_steps=1", "--set", "dpo.max_length=32", "--overwrite"],
             timeout=90, need=15, judge="dpo_ln2", after=("tiny-sft-learns",)),
        Step("build-qwen", "build", timeout=180, need=20),
        Step("sft", "rlft", ["sft", "--recipe", "recipes/sft_qwen0.5b_lora.yaml", "--model", q, "-o", w("sft"),
                             "--max-steps", str(n), "--set", "data.eval_fraction=0", *fast],
             timeout=150, need=30, after=("build-qwen",), speed=True),
        Step("dpo", "rlft", ["dpo", "--recipe", "recipes/dpo_qwen0.5b_lora.yaml", "--model", q, "-o", w("dpo"),
                             "--max-steps", str(n), *fast], timeout=150, need=30, after=("build-qwen",), speed=True),
        Step("reward", "rlft", ["reward", "--recipe", "recipes/reward_qwen0.5b_lora.yaml", "--model", q,
                                "-o", w("reward"), "--max-steps", str(n), *fast],
             timeout=150, need=30, after=("build-qwen",), speed=True),
        Step("ppo", "rlft", ["ppo", "--recipe", "recipes/ppo_qwen0.5b_lora.yaml", "--model", q, "--reward-model",
                             w("reward"), "-o", w("ppo"), "--max-steps", str(n if dry else 4),
                             *(["--set", "ppo.response_length=8", "--set", "ppo.max_memory_gb=0"] if dry else []),
                             *fast], timeout=180, need=40, after=("build-qwen", "reward"), speed=True),
        Step("grpo", "rlft", ["grpo", "--recipe", "recipes/grpo_qwen0.5b_lora.yaml", "--model", q, "-o", w("grpo"),
                              "--verifier", f"{REWARD}:coin", "--max-steps", str(n if dry else 4),
                              "--set", f"grpo.max_completion_length={grpo_len}", "--set", "grpo.preflight=false",
                              *fast], timeout=240, need=60, after=("build-qwen",), speed=True),
        Step("bootstrap", "rlft", ["bootstrap", "--prompts", "data/arith/grpo_prompts.jsonl", "--model", q, "--lora",
                                   "-o", w("bootstrap"), "--rounds", "1", "--samples", "4", "--threshold", "0",
                                   "--max-new-tokens", "8" if dry else "64", "--max-steps", str(n),
                                   "--set", "bootstrap.preflight=false", "--set", "bootstrap.prompts_per_round=16",
                                   *fast], timeout=180, need=40, after=("build-qwen",), speed=True,
             optional="bootstrap"),
        Step("tiny-sft-short", "rlft", ["sft", "--recipe", "recipes/sft_tiny_short.yaml", "-o", w("tiny-sft-short"),
                                        "--max-steps", short_steps, "--overwrite"], timeout=150, need=30),
        Step("tiny-grpo-rises", "rlft", ["grpo", "--recipe", "recipes/grpo_math_tiny.yaml",
                                         "--model", w("tiny-sft-short"), "-o", w("tiny-grpo"),
                                         "--max-steps", grpo_steps, "--set", "train.logging_steps=1" if dry else
                                         "train.logging_steps=10", "--set", "train.save_steps=100000",
                                         *(["--set", "grpo.preflight=false", "--set", "grpo.num_generations=4",
                                            "--batch-size", "8"] if dry else []), "--overwrite", "--seed", "1"],
             timeout=180, need=45, judge=None if dry else "grpo_rises", after=("tiny-sft-short",)),
    ]
    scale = float(os.environ.get("GPU_CHECK_TIMEOUT_SCALE", 1))  # a slower machine: longer limits, same budget
    for step in steps:
        step.timeout *= scale
        step.need *= scale
    return steps


# ----------------------------------------------------------------------------------------------- the child side


def _child_main(step: dict, result_path: str, log_path: str) -> None:
    """Run one step in this (child) process; write its result as JSON. Never returns normally."""
    os.setsid()  # its own process group: a timeout kills it and whatever it started
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    result: dict[str, Any] = {}
    code = 1
    try:
        result = _run_step(step)
        result.setdefault("exit_code", 0)
        code = 0 if result.get("exit_code", 0) == 0 else 1
    except BaseException as exc:  # noqa: B036 - a child reports everything, SystemExit included
        traceback.print_exc()
        result = {"exit_code": 1, "error": f"{type(exc).__name__}: {exc}"}
    Path(result_path).write_text(json.dumps(result, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_step(step: dict) -> dict:
    if step["kind"] == "env":
        return _env()
    if step["kind"] == "build":
        return _build_qwen(Path(step["work"]) / "qwen-shaped", step["dry"])
    return _run_rlft(step["args"])


def _env() -> dict:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    for name in ("transformers", "trl", "peft", "accelerate", "datasets", "rlft"):
        try:
            from importlib.metadata import version

            info[name] = version(name)
        except Exception:  # noqa: BLE001 - a missing package is a reported fact here
            info[name] = None
    import rlft

    info["rlft_from"] = str(Path(rlft.__file__).parent)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}",
                    multiprocessors=p.multi_processor_count, bf16=torch.cuda.is_bf16_supported(),
                    device_count=torch.cuda.device_count())
    return info


def _build_qwen(out: Path, dry: bool) -> dict:
    """A randomly initialised Qwen2 model of Qwen2.5-0.5B's shape (CPU-sized under the dry run), saved with the
    tiny model's tokenizer (vocabulary 100 < the model's rows: every id is valid) and a longer model_max_length."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from rlft.models import tiny_path

    raw = {k: v for k, v in json.loads(CONFIG.read_text()).items() if not k.startswith("_")}
    if dry:
        raw.update(DRY_SHAPE)
    tok = AutoTokenizer.from_pretrained(tiny_path())
    tok.model_max_length = raw["max_position_embeddings"]
    raw.update(bos_token_id=tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id,
               eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    config = Qwen2Config(**raw)
    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda" if cuda else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    embedding = model.get_input_embeddings().weight.numel()
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    shape = {k: raw[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                 "num_key_value_heads", "vocab_size", "tie_word_embeddings")}
    return {"params": params, "non_embedding_params": params - embedding, "dtype": str(dtype).replace("torch.", ""),
            "shape": shape, "build_seconds": round(time.perf_counter() - t0, 2), "path": str(out)}


def _run_rlft(args: list[str]) -> dict:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from rlft.cli import main

    cuda = torch.cuda.is_available()
    counts = {"train": 0, "other": 0}
    marks: list[tuple[float, int, int]] = []

    def count_tokens(module, inputs):
        if isinstance(module, torch.nn.Embedding) and inputs and torch.is_tensor(inputs[0]):
            counts["train" if torch.is_grad_enabled() else "other"] += inputs[0].numel()

    def mark(*_):
        if cuda:
            torch.cuda.synchronize()
        marks.append((time.perf_counter(), counts["train"], counts["other"]))

    torch.nn.modules.module.register_module_forward_pre_hook(count_tokens)
    register_optimizer_step_post_hook(mark)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    result: dict[str, Any] = {"exit_code": code, "marks": [(t - t0, a, b) for t, a, b in marks],
                              "seconds_in_rlft": round(time.perf_counter() - t0, 2)}
    if cuda:
        result["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        result["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 3)
    return result


# ---------------------------------------------------------------------------------------------- the parent side


def _tail(path: Path, n: int = TAIL_LINES) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def failure_line(tail: list[str], fallback: str) -> str:
    """The one line that says why a step failed: rlft's own `error: ...` line, else the last exception line."""
    for line in reversed(tail):
        s = line.strip()
        if s.startswith("error:") or s.startswith("refused:"):
            return s[:300]
    for line in reversed(tail):
        s = line.strip()
        if s and (s.split(":")[0].endswith(("Error", "Exception", "Exit", "Interrupt")) or "Error:" in s):
            return s[:300]
    return fallback[:300]


def run_isolated(step: Step, work: Path, logs: Path, dry: bool, timeout: float, isolation: str) -> dict:
    """Run `step` in a child with a timeout; kill its whole process group when the timeout passes."""
    spec = {"name": step.name, "kind": step.kind, "args": step.args, "work": str(work), "dry": dry}
    result_path = logs / f"{step.name}.result.json"
    log_path = logs / f"{step.name}.log"
    result_path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    if isolation == "fork":
        pid = os.fork()
        if pid == 0:  # the child
            try:
                _child_main(spec, str(result_path), str(log_path))
            finally:
                os._exit(1)
        proc = None
    else:
        spec_path = logs / f"{step.name}.spec.json"
        spec_path.write_text(json.dumps(spec))
        proc = subprocess.Popen([sys.executable, __file__, "--child", str(spec_path), str(result_path),
                                 str(log_path)], cwd=os.getcwd())
        pid = proc.pid
    timed_out = False
    status = None
    while True:
        if proc is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            finished = done != 0
        else:
            finished = proc.poll() is not None
        if finished:
            break
        if time.perf_counter() - t0 > timeout:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if proc is None:
                os.waitpid(pid, 0)
            else:
                proc.wait()
            break
        time.sleep(0.2)
    seconds = round(time.perf_counter() - t0, 2)
    tail = _tail(log_path)
    try:
        result = json.loads(result_path.read_text())
    except (OSError, ValueError):
        result = {"exit_code": None}
    result.update(seconds=seconds, log_tail=tail)
    if timed_out:
        result.update(status="timeout", error=f"timed out after {timeout:.0f} s (its own limit)")
    elif result.get("exit_code") == 0:
        result["status"] = "ok"
    else:
        code = result.get("exit_code")
        if code is None and proc is None and status is not None and os.WIFSIGNALED(status):
            code = f"signal {os.WTERMSIG(status)}"
        result.update(status="failed",
                      error=failure_line(tail, result.get("error") or f"exit code {code}, no error line"))
    return result


def speed_numbers(result: dict, params: Optional[int], global_steps: Optional[int], peak_tflops: Optional[float],
                  measured_tflops: Optional[float]) -> dict:
    """s/step, tokens/s and the share of the bf16 peak from a step's marks (rlft's steps 2..n)."""
    marks = result.get("marks") or []
    out: dict[str, Any] = {"optimizer_steps": len(marks), "rlft_steps": global_steps}
    if not marks or not global_steps:
        return out
    per = max(1, len(marks) // global_steps)  # optimizer steps per rlft step (1 for every method here)
    if global_steps < 2 or len(marks) < 2 * per:
        t, a, b = marks[-1]
        window, steps, train, other = t, global_steps, a, b  # one step only: warm-up included
        out["warmup_included"] = True
    else:
        t1, a1, b1 = marks[per - 1]
        t, a, b = marks[-1]
        window, steps, train, other = t - t1, (len(marks) - per) / per, a - a1, b - b1
    if window <= 0 or steps <= 0:
        return out
    out.update(s_per_step=round(window / steps, 4), train_tokens_per_s=round(train / window, 1),
               other_tokens_per_s=round(other / window, 1), train_tokens_per_step=round(train / steps, 1))
    if params:
        flops = 6 * params * train / window
        out["train_tflops"] = round(flops / 1e12, 3)
        if peak_tflops:
            out["share_of_bf16_peak"] = round(flops / (peak_tflops * 1e12), 4)
        if measured_tflops:
            out["share_of_measured_matmul"] = round(flops / (measured_tflops * 1e12), 4)
    return out


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def judge(kind: str, rows: list[dict]) -> tuple[bool, str, dict]:
    """A learning check on a run's metrics.jsonl: (passed, one line, numbers)."""
    if kind == "sft_learns":
        losses = [m["loss"] for m in rows if "loss" in m and "train_loss" not in m]
        if len(losses) < 2:
            return False, "SFT logged fewer than two losses", {}
        ok = losses[-1] < 0.8 * losses[0]
        return ok, f"SFT loss {losses[0]:.3f} -> {losses[-1]:.3f} (must fall 20%)", {"first": losses[0],
                                                                                     "last": losses[-1]}
    if kind == "dpo_ln2":
        logs = [m for m in rows if "rewards/margins" in m and "loss" in m]
        if not logs:
            return False, "DPO logged no loss", {}
        first = logs[0]["loss"]
        ok = abs(first - math.log(2)) < 1e-3
        return ok, f"first DPO loss {first:.6f}, ln 2 = {math.log(2):.6f} (within 1e-3)", {"first_loss": first}
    if kind == "grpo_rises":
        rewards = [m["reward"] for m in rows if "reward" in m]
        if len(rewards) < 4:
            return False, f"GRPO logged {len(rewards)} rewards (needs 4)", {}
        k = max(2, len(rewards) // 4)
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        ok = last > first + 0.05
        return ok, f"GRPO reward {first:.3f} -> {last:.3f} (mean of first/last {k} logs; must rise 0.05)", {
            "first_mean": first, "last_mean": last, "rewards": rewards}
    raise ValueError(kind)


def peaks(gpu: Optional[str]) -> tuple[Optional[float], Optional[float]]:
    env = os.environ.get("PEAK_TFLOPS")
    if env:
        return float(env), None
    if not gpu:
        return None, None
    for key, value in BF16_PEAK_TFLOPS.items():
        if key in gpu:
            return value, MEASURED_MATMUL_TFLOPS.get(key)
    return None, None


def has_command(name: str) -> bool:
    """Whether `rlft --help` lists `name` (rlft's CLI imports no torch: this costs a fraction of a second)."""
    # The rlft this driver imports (the installed wheel on the device; this checkout under the dry run's
    # PYTHONPATH), not the one `python -m` would find in the current folder.
    code = "import sys; del sys.path[0]; from rlft.cli import main; main(['--help'])"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return any(line.strip().startswith(name + " ") or line.strip() == name for line in r.stdout.splitlines())


def _warm_imports() -> None:
    """Import what the steps import, once, in the parent: the forked children inherit it (rlft imports these
    lazily, inside each command: about 20 s of every step on a loaded 2-core machine). No CUDA call."""
    import importlib

    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch  # noqa: F401
    import transformers
    import trl

    for cls in ("AutoModelForCausalLM", "AutoModelForSequenceClassification", "AutoTokenizer", "Trainer"):
        getattr(transformers, cls)
    for cls in ("SFTTrainer", "DPOTrainer", "GRPOTrainer", "RewardTrainer", "SFTConfig", "DPOConfig", "GRPOConfig",
                "RewardConfig"):
        getattr(trl, cls)
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in ("datasets", "peft", "accelerate", "matplotlib.pyplot", "rlft.report", "rlft.cli", "rlft.methods.sft",
                 "rlft.methods.dpo",
                 "rlft.methods.grpo", "rlft.methods.reward", "rlft.methods.ppo", "rlft.verifiers"):
        try:
            importlib.import_module(name)
        except ImportError:  # the step that needs it reports it
            pass


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU at tiny sizes (also DEVICE=cpu)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "out", help="where gpu_check.json goes ($OUT)")
    ap.add_argument("--work", default=None, help="scratch folder for the runs (default: a temp folder)")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("GPU_CHECK_BUDGET", 450)),
                    help="seconds for all steps together; a step that would not fit is skipped")
    ap.add_argument("--only", default=None, help="comma-separated step names (the steps they need run too)")
    ap.add_argument("--isolation", choices=("auto", "fork", "spawn"), default="auto")
    ap.add_argument("--install", default=None, help="install.json from gpu_check.sh, merged into the report")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        spec = json.loads(Path(a.child[0]).read_text())
        _child_main(spec, a.child[1], a.child[2])
    dry = a.dry_run or os.environ.get("DEVICE", "").lower() == "cpu"
    try:
        select(plan(Path("."), dry), a.only)
    except ValueError as exc:  # before anything is written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if dry:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, even on a machine with a GPU
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RLFT_CACHE", str(Path(a.work or "/tmp") / "rlft-gpu-check-cache"))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    started = time.perf_counter()
    out = Path(a.out).resolve()
    os.chdir(ROOT)  # the recipes name their data relative to the repository
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"rlft-gpu-check-{os.getpid()}"
    work = Path(a.work).resolve() if a.work else scratch
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    isolation = a.isolation
    if isolation != "spawn":
        _warm_imports()
        import torch

        if torch.cuda.is_initialized():  # a CUDA context before fork: children could not use the GPU
            isolation = "spawn"
        elif isolation == "auto":
            isolation = "fork"
    steps = select(plan(work, dry), a.only)
    report: dict[str, Any] = {"dry_run": dry, "isolation": isolation, "budget_s": a.budget,
                              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "host": platform.node(), "cpus": os.cpu_count(), "steps": {}, "failures": []}
    if a.install and Path(a.install).exists():
        report["install"] = json.loads(Path(a.install).read_text())
        if report["install"].get("status") not in (None, "ok", "skipped"):
            report["failures"].append(f"install: {report['install'].get('error', 'failed')}")
    params = None
    peak = measured = None
    log = (out / "gpu_check.log").open("w")
    for step in steps:
        left = a.budget - (time.perf_counter() - started)
        missing = [d for d in step.after if report["steps"].get(d, {}).get("status") != "ok"]
        if step.optional and not has_command(step.optional):
            res = {"status": "skipped", "why": f"`rlft {step.optional}` is not on this branch (rlft --help)"}
        elif missing:
            res = {"status": "skipped", "why": f"needs {', '.join(missing)}, which did not complete"}
        elif left < step.need:
            res = {"status": "skipped", "why": f"needs about {step.need:.0f} s, {max(left, 0):.0f} s of the budget "
                                               "left"}
        else:
            res = run_isolated(step, work, logs, dry, min(step.timeout, left), isolation)
            if (res["status"] == "failed" and isolation == "fork" and "initialize" in res.get("error", "")
                    and "CUDA" in res.get("error", "")):  # CUDA refused a forked child: spawn from here on
                isolation = report["isolation"] = "spawn"
                res = run_isolated(step, work, logs, dry, min(step.timeout, left), isolation)
        if step.kind == "env" and res.get("status") == "ok":
            peak, measured = peaks(res.get("gpu"))
            report["env"] = {k: v for k, v in res.items() if k not in ("log_tail", "exit_code", "marks")}
            report["bf16_peak_tflops"], report["measured_matmul_tflops"] = peak, measured
        if step.kind == "build" and res.get("status") == "ok":
            params = res.get("params")
        summary = {}
        if step.kind == "rlft" and res.get("status") == "ok":
            run_dir = Path(step.args[step.args.index("-o") + 1])
            try:
                summary = json.loads((run_dir / "summary.json").read_text())
            except (OSError, ValueError):
                summary = {}
            res["rlft_status"] = summary.get("status")
            if summary.get("status") not in (None, "completed"):
                res.update(status="failed", error=f"run ended {summary.get('status')}: "
                           f"{summary.get('error') or summary.get('stopped_by') or 'see its summary.json'}")
            if step.speed:
                res.update(speed_numbers(res, params, summary.get("global_step"), peak, measured))
            if step.judge and res["status"] == "ok":
                ok, line, numbers = judge(step.judge, read_metrics(run_dir))
                res.update(check=line, check_passed=ok, check_numbers=numbers)
                if not ok:
                    res.update(status="failed", error=f"learning check failed: {line}")
        res.pop("marks", None)
        report["steps"][step.name] = res
        if res["status"] in ("failed", "timeout"):
            report["failures"].append(f"{step.name}: {res.get('error')}")
        log.write(f"==== {step.name}: {res['status']} ({res.get('seconds', 0)} s)\n")
        log.write("\n".join(res.get("log_tail", [])) + "\n")
        log.flush()
        print(one_line(step.name, res), flush=True)
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))  # partial results survive
    report["seconds"] = round(time.perf_counter() - started, 1)
    for res in report["steps"].values():
        res.pop("log_tail", None)  # in gpu_check.log; the JSON stays small
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    log.close()
    print(table(report))
    for f in report["failures"]:
        print(f"FAILED {f}")
    print(f"gpu_check: {len(report['failures'])} failure(s), {report['seconds']} s; {out / 'gpu_check.json'}")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if report["failures"] else 0


def select(steps: list[Step], only: Optional[str]) -> list[Step]:
    """The steps `--only` names, the steps they need, and env; ValueError naming an unknown one."""
    if not only:
        return steps
    wanted = set(only.split(","))
    unknown = wanted - {s.name for s in steps}
    if unknown:
        raise ValueError(f"unknown step(s) {', '.join(sorted(unknown))} in --only: pick from "
                         f"{', '.join(s.name for s in steps)}")
    by_name = {s.name: s for s in steps}
    todo = list(wanted)
    while todo:
        for dep in by_name[todo.pop()].after:
            if dep not in wanted:
                wanted.add(dep)
                todo.append(dep)
    return [s for s in steps if s.name in wanted or s.name == "env"]


def one_line(name: str, res: dict) -> str:
    s = f"[{res['status']:>7}] {name}"
    if res.get("seconds") is not None:
        s += f" ({res['seconds']} s)"
    if res.get("check"):
        s += f": {res['check']}"
    elif res.get("s_per_step") is not None:
        s += f": {res['s_per_step']} s/step"
    if res.get("why"):
        s += f": {res['why']}"
    if res.get("error"):
        s += f": {res['error']}"
    return s


def table(report: dict) -> str:
    env = report.get("env", {})
    head = (f"device: {env.get('gpu') or 'CPU'}; torch {env.get('torch')}, transformers {env.get('transformers')}, "
            f"trl {env.get('trl')}; bf16 peak {report.get('bf16_peak_tflops')} TFLOP/s")
    rows = ["| method | status | s/step | train tokens/s | peak GPU GiB | share of bf16 peak |",
            "| --- | --- | --- | --- | --- | --- |"]
    for name, r in report["steps"].items():
        if name in ("sft", "dpo", "reward", "ppo", "grpo", "bootstrap"):
            share = r.get("share_of_bf16_peak")
            rows.append(f"| {name} | {r['status']} | {r.get('s_per_step', '-')} | {r.get('train_tokens_per_s', '-')} | "
                        f"{r.get('peak_allocated_gib', '-')} | {'-' if share is None else f'{share:.1%}'} |")
    return head + "\n" + "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
