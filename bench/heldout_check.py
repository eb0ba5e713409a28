"""A held-out check of a bf16-base LoRA model on its fp32 weights (rlft.speed.served) against the bf16 base.

    OMP_NUM_THREADS=2 python bench/heldout_check.py --model runs/sft-store --rows data/support/store/test.jsonl \
        [--verifier support_policy] [--limit 150] [--max-new-tokens 48] [--reps 2]

Loads the model as a LoRA run over a CPU bf16 base loads it (rlft.models.load_model, model.dtype bfloat16, a fresh
adapter, the run's chat wrapping when the rows are plain prompts and --as-chat), then times rlft.watch.heldout.measure
both ways, interleaved, best of --reps: "fp32 base" (what a run's checks now run on; the first call's reload of the
fp32 copy is timed apart) and "bf16 base" (the copy refused, as before). `--sampler`: with rlft.speed.sampling's
merged bf16 copy attached first (GRPO's case: the bf16 check runs on it, the fp32 one through the policy's own
`generate`). Prints each one's pass@1 and seconds, the
ratio, how many replies differ, and the CPU model, bf16 flag, threads and load before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rows", required=True)
    ap.add_argument("--verifier", default="support_policy")
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--as-chat", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--sampler", action="store_true", help="attach rlft.speed.sampling's copy first, as GRPO, RLOO, "
                    "distillation and bootstrap do: the bf16 check then runs on that merged bf16 copy")
    args = ap.parse_args()

    import torch

    from rlft.chat.templates import wrap_as_chat
    from rlft.config import resolve
    from rlft.data import read_rows
    from rlft.methods.common import load_run_tokenizer
    from rlft.models import load_model
    from rlft.speed import served
    from rlft.speed.precision import cpu_bf16_flag, cpu_model
    from rlft.verifiers.loading import load_verifiers
    from rlft.watch.heldout import measure

    print(f"cpu: {cpu_model()} | bf16 flag: {cpu_bf16_flag()} | torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads | load {os.getloadavg()[0]:.2f}", flush=True)
    cfg = resolve("dpo", None, {}, [f"model.name_or_path={args.model}", "model.dtype=bfloat16",
                                    "model.lora.enabled=true"], check_trl=False)
    tok = load_run_tokenizer(cfg)
    model = load_model(cfg.model)
    if args.sampler:
        from rlft import speed

        print(f"sampler: {speed.attach(model) is not None}", flush=True)
    rows = read_rows(args.rows, max_rows=args.limit)
    rows = [r.data for r in (wrap_as_chat(rows) if args.as_chat else rows)]
    scorer, _ = load_verifiers([args.verifier])

    t = time.perf_counter()
    with served.swapped(model) as why:
        assert why is None, why
    print(f"fp32 copy loaded once: {time.perf_counter() - t:.1f} s", flush=True)
    best: dict[str, float] = {}
    results = {}
    base = served._base(model)
    copy = served._copies[base]
    for _ in range(args.reps):
        for name in ("fp32 base", "bf16 base"):
            # a reason in place of the copy: served.swapped stands aside, and the check runs as training does
            served._copies[base] = copy if name == "fp32 base" else "bench: the bf16 base"
            t = time.perf_counter()
            results[name] = measure("verifiable", model, tok, rows, scorer=scorer, max_new_tokens=args.max_new_tokens)
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t)
    a, b = results["fp32 base"], results["bf16 base"]
    differ = sum(x["completion"] != y["completion"] for x, y in zip(a.samples, b.samples))
    for name in best:
        print(f"{name:10s} pass@1 {results[name].value:.3f} on {results[name].n} rows   {best[name]:.1f} s")
    print(f"fp32 / bf16 time: {best['fp32 base'] / best['bf16 base']:.2f}x | replies that differ: {differ} of "
          f"{len(a.samples)} | load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
