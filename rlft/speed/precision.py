"""Which precision a run trains and samples in, from the hardware it runs on.

GPUs: unchanged (TRL's bf16 autocast where the GPU supports it, `train.bf16` / `train.fp16` override).

CPUs: bf16 matmuls can run on AMX or AVX512-BF16 units, but the flag alone does not say they are faster: a
512-row bf16 matmul ran 2.2x the fp32 one on an AMD EPYC with AVX512-BF16, and 0.53x on an Intel Xeon with
AVX512-BF16 and no AMX (85 against 160 GFLOP/s, one thread, torch 2.13; BENCHMARKS.md); without either flag bf16
is emulated and slower. So where the flag is present a LoRA run first measures (`bf16_speedup`: a training-shaped
matmul in both dtypes, interleaved, ~0.3 s, once per machine: `measured_speedup`) and takes bf16 only when it is
at least MIN_SPEEDUP times faster.
On such a CPU a LoRA run keeps its frozen base weights in bf16 and its adapter (the only trainable weights) in
fp32: each base matmul runs in bf16, everything between the matmuls (residual stream, norms, attention, the
adapter's path) in fp32 (rlft.speed.activations.fp32_activations: with bf16 activations too, LoRA SFT on SmolLM2
learned measurably less and its adapter gradients were 12.6% off fp32's, against 4.1% now), the adapter's
update is exact fp32, and no weight is cast per step. This is
not TRL's `bf16=True`, which on a CPU is autocast over fp32 weights: every weight is re-cast at every op,
sampling included, and a GRPO step took 100-190 s against ~15 s in fp32 on an AMX machine. Full fine-tuning
stays fp32 by default (bf16 weights without an fp32 master copy drop updates smaller than their rounding);
`--set train.bf16=true` then asks for TRL's autocast as given. `--set train.bf16=false` keeps fp32 weights.
rlft's own PPO takes the same route: its value head is trained in fp32 over the bf16 base like a reward model's
score head (rlft.models._fp32_trainable), and its rollouts' log-probs come from the training forward.

This module is the one place precision is decided, on every device: `decide` is pure (the config's flags and a
`Device`'s facts in, a `Precision` out) so it is testable on any machine; `apply` reads this machine and writes
the decision into the run's config (model.dtype, train.bf16, train.fp16), which `--print-config` shows and
config.yaml records. The two other readers take their rule from here: rlft.methods.common.hardware_defaults
(TRL's bf16/fp16 for a config `apply` has not seen: `trl_flags`) and rlft.models.torch_dtype (`auto` for a
model loaded outside a run, e.g. by eval or chat: `weights_dtype`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# bf16 over fp32 matmul throughput a CPU must show before a LoRA run trains in bf16: the bf16 path also pays
# casts between its matmuls (fp32 activations), so a small matmul gain is no step gain (measured SFT steps at a
# 2.2x matmul ratio were 1.3x faster).
MIN_SPEEDUP = 1.3


def cpu_bf16_flag(cpuinfo: str | None = None) -> str | None:
    """The first CPU flag that gives native bf16 matmuls (`amx_bf16`, `avx512_bf16`), or None.

    Linux only (/proc/cpuinfo); elsewhere None, i.e. fp32. Apple silicon's bf16 is not detected: fp32 there.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")[:200_000]
        except OSError:
            return None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
            break
    return next((f for f in BF16_FLAGS if f in flags), None)


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name (for benchmark records), or the platform's processor string."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")[:200_000]
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[-1].strip()
    import platform

    return platform.processor() or platform.machine()


def bf16_speedup(rows: int = 512, inner: int = 576, outer: int = 1536, reps: int = 5) -> float:
    """bf16 over fp32 throughput of one nn.Linear-shaped matmul (rows x inner times inner x outer: a LoRA step's
    shape on a 135M model) in this process's thread setting; best of `reps` each, the dtypes interleaved so a
    busy machine slows both alike."""
    import time

    import torch
    import torch.nn.functional as F

    best = {}
    pairs = {dt: (torch.randn(rows, inner, dtype=dt), torch.randn(outer, inner, dtype=dt))
             for dt in (torch.float32, torch.bfloat16)}
    for _ in range(reps + 1):  # the first round warms the kernels up
        for dt, (x, w) in pairs.items():
            t = time.perf_counter()
            F.linear(x, w)
            best[dt] = min(best.get(dt, float("inf")), time.perf_counter() - t)
    return best[torch.float32] / best[torch.bfloat16]


def measured_speedup() -> float:
    """`bf16_speedup` measured once per CPU model, torch version and thread count, then read back from
    RLFT_CACHE/bf16_speedup.json: every run, sweep trial, resumed run and process of a multi-process run on
    one machine decides alike (a fresh measurement near MIN_SPEEDUP could flip)."""
    import json
    import os

    import torch

    from rlft.sources import cache_dir

    key = f"{cpu_model()} | torch {torch.__version__} | {torch.get_num_threads()} threads"
    path = cache_dir() / "bf16_speedup.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), (int, float)):
        return float(known[key])
    ratio = round(bf16_speedup(), 3)
    known = {**(known if isinstance(known, dict) else {}), key: ratio}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, path)  # atomic: a reader sees the old file or the new one
    except OSError:
        pass  # an unwritable cache measures again next time
    return ratio


@dataclass(frozen=True)
class Device:
    """The facts about this machine that precision depends on."""

    cuda: bool
    cuda_bf16: bool = False  # the CUDA GPU supports bf16 (torch.cuda.is_bf16_supported)
    flag: str | None = None  # the CPU's bf16 flag (`cpu_bf16_flag`)

    @classmethod
    def here(cls) -> "Device":
        import torch

        cuda = torch.cuda.is_available()
        return cls(cuda=cuda, cuda_bf16=bool(cuda and torch.cuda.is_bf16_supported()), flag=cpu_bf16_flag())


def weights_dtype(dtype: str, device: Device) -> str:
    """model.dtype `auto` as a dtype name: bf16 on a GPU that supports it, fp32 elsewhere (a run's CPU LoRA
    bf16 is `decide`'s, which writes its choice into model.dtype before any model loads)."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.cuda and device.cuda_bf16 else "float32"


def trl_flags(bf16: bool | None, fp16: bool | None, device: Device) -> tuple[bool, bool]:
    """TRL's (bf16, fp16) mixed-precision flags: the user's where set, else bf16 on a GPU that supports it
    (and fp16 not asked for), fp16 off. TRL's own default bf16=True raises on a CPU-only machine."""
    if bf16 is None:
        bf16 = bool(device.cuda and device.cuda_bf16) and not fp16
    return bool(bf16), bool(fp16)


@dataclass
class Precision:
    weights: str  # model.dtype to load with: "bfloat16", "float32" or the user's own choice
    autocast_bf16: bool | None  # what TRL's train.bf16 gets (None: TRL's hardware default decides)
    line: str  # the one line a run prints
    by_flag: bool = False  # bf16 chosen by the CPU flag alone: `apply` measures before it keeps the choice
    fp16: bool = False  # what TRL's train.fp16 gets (CUDA only: refused on the CPU)


def decide(*, cuda: bool, flag: str | None, lora: bool, four_bit: bool, dtype: str,
           bf16: bool | None, method: str = "", speedup: float | None = None, fp16: bool | None = None,
           cuda_bf16: bool = False) -> Precision:
    """The precision of one run. `dtype` is model.dtype as configured, `bf16` train.bf16 (None: auto),
    `speedup` the measured bf16 / fp32 matmul ratio (`bf16_speedup`; None: not measured, the flag decides);
    `cuda`, `cuda_bf16`, `flag`: the `Device`'s facts.
    A flag this machine cannot honour is a UserError (`refusal`), raised before anything is written."""
    if cuda:  # TRL's bf16 autocast where the GPU supports it; weights bf16 there unless model.dtype says
        device = Device(cuda=True, cuda_bf16=cuda_bf16)
        autocast, half = trl_flags(bf16, fp16, device)
        return Precision(weights_dtype(dtype, device), autocast, "", fp16=half)
    if problem := refusal(flag=flag, lora=lora, bf16=bf16, fp16=fp16):
        from rlft.errors import UserError

        raise UserError(*problem)
    cpu_dtype = weights_dtype(dtype, Device(cuda=False))  # `auto` is fp32 on the CPU, unless LoRA's bf16 below
    if four_bit:
        return Precision(cpu_dtype, bf16, "precision: 4-bit base, fp32 compute on this CPU")
    if not lora:
        if bf16:
            return Precision(cpu_dtype, True, "precision: bf16 autocast over fp32 weights (train.bf16=true, TRL's "
                                              "autocast: slower than fp32 on most CPUs)")
        return Precision(cpu_dtype, False, "precision: fp32 (full fine-tuning on the CPU; --lora trains in bf16 "
                                           "where the CPU has bf16 units)" if flag else
                         "precision: fp32 (this CPU has no bf16 units)")
    if dtype != "auto":
        return Precision(dtype, False, f"precision: {dtype} base weights (model.dtype), fp32 adapter")
    if bf16 is False:
        return Precision("float32", False, "precision: fp32 (train.bf16=false)")
    if flag and bf16 is None and speedup is not None and speedup < MIN_SPEEDUP:
        return Precision("float32", False, f"precision: fp32 (the CPU has {flag}, but its bf16 matmuls ran "
                                           f"{speedup:.2f}x fp32's here, below {MIN_SPEEDUP}x; --set "
                                           "train.bf16=true for bf16)")
    if bf16 or flag:
        by_flag = bool(flag) and bf16 is None
        why = f"the CPU has {flag}" if by_flag else "train.bf16=true"
        if by_flag and speedup is not None:
            why += f", its bf16 matmuls {speedup:.1f}x fp32's here"
        return Precision("bfloat16", False, f"precision: bf16 base weights and matmuls, fp32 activations and LoRA "
                                            f"adapter ({why}; --set train.bf16=false for fp32)",
                         by_flag and speedup is None)
    return Precision("float32", False, "precision: fp32 (this CPU has no bf16 units: AMX or AVX512-BF16)")


def refusal(*, flag: str | None, lora: bool, bf16: bool | None, fp16: bool | None) -> tuple[str, str] | None:
    """(problem, fix) for a precision flag a CPU run cannot honour, else None. fp16 mixed precision is a CUDA
    feature (TRL would autocast to fp16 on the CPU, slowly and without a loss scale); full fine-tuning with
    train.bf16=true is TRL's bf16 autocast, emulated (and refused by transformers for want of use_cpu) on a CPU
    without bf16 units. LoRA with train.bf16=true keeps its documented meaning (bf16 base weights)."""
    if fp16:
        return ("train.fp16=true: fp16 mixed precision needs a CUDA GPU, and this run is on the CPU",
                "drop --set train.fp16=true (fp32 here; --lora trains in bf16 where the CPU has bf16 units)")
    if bf16 and not lora and not flag:
        return ("train.bf16=true: this CPU has no bf16 units (AMX or AVX512-BF16), so full fine-tuning cannot "
                "train in bf16 here", "drop --set train.bf16=true (full fine-tuning trains in fp32 on this CPU)")
    return None


def apply(cfg, console=None, device: Device | None = None) -> Precision:
    """Decide for this machine (or `device`) and write the decision into `cfg` (model.dtype, train.bf16,
    train.fp16); print the line. The run calls it before any model loads, `--print-config` before it prints."""
    device = device or Device.here()
    m = cfg.values["model"]
    t = cfg.values["train"]
    args = dict(cuda=device.cuda, cuda_bf16=device.cuda_bf16, flag=device.flag, lora=bool(m["lora"]["enabled"]),
                four_bit=bool(m.get("load_in_4bit")), dtype=str(m.get("dtype") or "auto"), bf16=t.get("bf16"),
                method=cfg.method, fp16=t.get("fp16"))
    p = decide(**args)
    if p.by_flag:  # the flag alone chose bf16: measure it
        p = decide(**args, speedup=measured_speedup())
    m["dtype"] = p.weights
    if p.autocast_bf16 is not None or t.get("bf16") is not None:
        t["bf16"] = p.autocast_bf16
    t["fp16"] = p.fp16
    if console is not None and p.line:
        console.print(p.line, highlight=False)
    return p
