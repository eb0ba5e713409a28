"""One forward + backward of the tiny model on a 32 x 32 batch with 1 and with 2 torch threads, in one process,
interleaved (so load on the machine hits both alike): the reason `make test`/`make bench` set OMP_NUM_THREADS=1.

    python bench/threads_probe.py [--n 20]

Prints the median and min seconds per step for each thread count and the load average. Not part of
`make bench` (no goal: the ratio depends on the machine and its load).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20, help="timed steps per thread count")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch
    from transformers import AutoModelForCausalLM

    from rlft.models import tiny_path

    model = AutoModelForCausalLM.from_pretrained(tiny_path())
    ids = torch.randint(4, 99, (32, 32), generator=torch.Generator().manual_seed(0))
    times: dict[int, list[float]] = {1: [], 2: []}
    load = os.getloadavg()[0]
    for i in range(args.n + 1):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            start = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            model.zero_grad()
            if i:  # the first round warms up
                times[threads].append(time.perf_counter() - start)
    for threads, t in times.items():
        print(f"{threads} thread(s): median {statistics.median(t):.3f} s, min {min(t):.3f} s per step ({args.n} steps)")
    print(f"2 threads / 1 thread (median): {statistics.median(times[2]) / statistics.median(times[1]):.2f}x; "
          f"load average (1 min) {load:.2f} at start, {os.getloadavg()[0]:.2f} at end, on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
