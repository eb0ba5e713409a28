"""The LM head on a strided slice of the hidden states against the same rows contiguous, side by side.

    OMP_NUM_THREADS=1 python bench/lm_head_slice.py [--rows 64] [--width 65] [--reps 3]

transformers turns an int `logits_to_keep` into `hidden_states[:, -keep:]`, a strided view; rlft passes an index
tensor instead (rlft.speed.decode.last_positions), which gives a contiguous copy. This times `F.linear` of both against
SmolLM2-135M's head shape (49,152 x 576) under no_grad, in fp32 and bf16, best of --reps each, interleaved, and
prints the peak RSS each call reached above the process's resident set before it (VmHWM after a reset).
Linux only (the peak comes from /proc/self/status).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--width", type=int, default=65)
    ap.add_argument("--keep", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    from rlft.speed.precision import cpu_bf16_flag, cpu_model

    print(f"cpu: {cpu_model()} | bf16 flag: {cpu_bf16_flag()} | torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads | load {os.getloadavg()[0]:.2f}")
    print(f"head 49152 x 576, {args.rows} rows, last {args.keep} of {args.width} positions, no_grad")
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            hidden = torch.randn(args.rows, args.width, 576, dtype=dtype)
            weight = torch.randn(49152, 576, dtype=dtype)
            index = torch.arange(args.width - args.keep, args.width)
            best: dict[str, tuple[float, int]] = {}
            for _ in range(args.reps):
                for name in ("strided view (int)", "index tensor"):
                    x = hidden[:, -args.keep:] if name.startswith("strided") else hidden[:, index]
                    before = _status("VmRSS")
                    _reset_peak()
                    t = time.perf_counter()
                    F.linear(x, weight)
                    dt = time.perf_counter() - t
                    extra = _status("VmHWM") - before
                    old = best.get(name, (float("inf"), 0))
                    best[name] = (min(old[0], dt), max(old[1], extra))
            (slow, slow_mb), (fast, fast_mb) = best["strided view (int)"], best["index tensor"]
            print(f"{str(dtype).replace('torch.', ''):9s} strided {slow:7.3f} s  +{slow_mb / 1e6:6.0f} MB | "
                  f"index {fast:7.3f} s  +{fast_mb / 1e6:6.0f} MB | {slow / fast:6.1f}x")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
