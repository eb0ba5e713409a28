"""Benchmark: bootstrap's sampling speed (sampled tokens/s at N = 8 and 16) beside the machine's weight-read bound.

    python bench/sampling_bound.py [--model smollm2] [--prompts 8] [--tokens 40] [--samples 8,16] [--lora/--no-lora]

Sampling is the whole cost of `rlft bootstrap`, and it goes through rlft's path: rlft.methods.bootstrap_sampling.
sample_rows -> rlft.evaluate.generate_detailed (each prompt prefilled once for its N rows) -> the LoRA policy's
plain sampling copy (rlft.speed.sampling) -> rlft.speed.decode's loop, at the precision rlft.speed.precision
picks. Per N it samples
`--prompts` chat prompts of data/word_problems x N at temperature 0.7, twice (the first is warm-up), and prints
the sampled tokens/s of the second.

The bound: a decode step reads every weight once for all the rows in the batch, so with W bytes of weights and a
memory bandwidth of B bytes/s a step takes at least W / B seconds, and the batch of R rows can sample at most
R x B / W tokens/s. B is measured here (a copy of a 256 MB fp32 tensor: read + write bytes over the time, best of
5); W is the sampling copy's parameter bytes (the model's weights in its dtype; the LM head shares the embedding
in SmolLM2). Rows finish at different lengths (a finished row leaves the batch), so the real batch shrinks towards
the end of a decode: the bound uses the starting R and is an upper bound. Compute (attention, the sampling
arithmetic) is not in the bound. The header prints the CPU, threads and load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def bandwidth(mb: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a large tensor copy (read + write), best of `repeats`."""
    import torch

    n = mb * 1024 * 1024 // 4
    src, dst = torch.ones(n), torch.empty(n)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return 2 * n * 4 / best


def weight_bytes(model) -> int:
    """Bytes of the distinct weight tensors a decode step reads (tied embeddings counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * p.element_size()
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per batch (rows = prompts x N)")
    ap.add_argument("--tokens", type=int, default=40, help="max new tokens per sample")
    ap.add_argument("--samples", default="8,16", help="N values, comma-separated")
    ap.add_argument("--lora", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    import torch

    from rlft.chat.templates import stop_token_ids
    from rlft.config import resolve
    from rlft.methods.bootstrap_sampling import sample_rows
    from rlft.methods.common import load_run_tokenizer
    from rlft.models import load_model
    from rlft.quiet import quiet_libraries
    from rlft.speed import attach, precision
    from rlft.verifiers.loading import load_verifiers

    quiet_libraries()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?") if Path("/proc/cpuinfo").exists() else "?"
    print(f"cpu: {cpu}; torch threads {torch.get_num_threads()}; load average before {os.getloadavg()}")
    cfg = resolve("bootstrap", None, {"model.name_or_path": (args.model, "--model"),
                                      "model.lora.enabled": (args.lora, "--lora")})
    precision.apply(cfg, None)
    tok = load_run_tokenizer(cfg)
    model = load_model(cfg.model)
    model.generation_config.eos_token_id = stop_token_ids(tok, model)
    sampler = attach(model)
    net = sampler.copy if sampler is not None else model
    rows = [json.loads(x) for x in (ROOT / "data/word_problems/train.jsonl").read_text().splitlines()[:args.prompts]]
    rows = [{"prompt": [{"role": "user", "content": r["prompt"] + " End with 'The answer is N.'"}],
             "answer": r["answer"]} for r in rows]
    reward, _ = load_verifiers(["math"])
    bw = bandwidth()
    w = weight_bytes(net)
    dtype = str(next(net.parameters()).dtype).replace("torch.", "")
    print(f"weights read per decode step: {w / 1e6:.0f} MB ({dtype}); measured bandwidth {bw / 1e9:.1f} GB/s; "
          f"at most {bw / w:.1f} decode steps/s")
    print("| N | rows | sampled tokens | seconds | sampled tokens/s | weight-read bound (rows x steps/s) | share |")
    print("|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.samples.split(",")]:
        torch.manual_seed(0)
        kwargs = dict(samples=n, temperature=0.7, max_new_tokens=args.tokens, batch=args.prompts * n)
        sample_rows(model, tok, rows, reward, **kwargs)  # warm-up: packs, caches
        _, tokens, secs = sample_rows(model, tok, rows, reward, **kwargs)
        rate, bound = tokens / secs, args.prompts * n * bw / w
        print(f"| {n} | {args.prompts * n} | {tokens} | {secs:.2f} | {rate:.0f} | {bound:.0f} | {rate / bound:.0%} |")
    print(f"load average after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
