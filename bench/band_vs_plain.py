"""The band prompt sampler against TRL's plain one, GRPO and RLOO on the tiny model, same rollouts (issue 24.6).

    python bench/band_vs_plain.py --start runs/sft-short --out runs/band-bench [--seeds 1 2 3] [--methods grpo rloo]
        [--set data.max_rows=300]

For each method (the shipped recipes/grpo_math_tiny.yaml, 600 steps x 8 prompts x 8, and recipes/rloo_math_tiny.yaml,
300 steps x 16 prompts x 4: 38,400 and 19,200 rollouts), each seed (train.seed) and each sampler
(grpo.prompt_sampler / rloo.prompt_sampler), one run from the same SFT start with the periodic held-out checks
off and the last model kept (watch.auto_holdout=false: no model picked on the test rows), then `rlft eval` on
data/arith/test.jsonl (greedy pass@1 over 200 rows, and the pass rate of 8 samples per row). Prints one JSON
line per run and a table: start, each run's scores, the mean band - plain difference per method, and the mean
share of all-equal groups (frac_reward_zero_std) and of groups whose prompt was in the band (band/scored_in_band)
over each run's logs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RECIPES = {"grpo": "recipes/grpo_math_tiny.yaml", "rloo": "recipes/rloo_math_tiny.yaml"}
TEST = "data/arith/test.jsonl"


def rlft(*args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run([sys.executable, "-m", "rlft", *args], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"rlft {' '.join(args)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def evaluate(model: str) -> dict:
    out = rlft("eval", "--model", model, "--data", TEST, "--verifier", "math", "--samples", "8", "--json")
    return json.loads(out[out.index("{"):])  # the JSON object is the last thing printed


def mean_logged(run: Path, key: str) -> float:
    """The mean of `key` over a run's logs (metrics.jsonl)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return sum(vals) / len(vals)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", required=True, help="the SFT start (rlft sft --recipe recipes/sft_tiny_short.yaml)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--methods", nargs="+", default=["grpo", "rloo"], choices=sorted(RECIPES))
    ap.add_argument("--set", dest="extra", action="append", default=[], help="more --set for every run, e.g. "
                    "data.max_rows=300 (fewer prompts: more draws of each, where the band has room to act)")
    a = ap.parse_args()
    out = Path(a.out)
    start = evaluate(a.start)
    print(json.dumps({"start": start}), flush=True)
    results = []
    for method in a.methods:
        for seed in a.seeds:
            for sampler in ("plain", "band"):
                run = out / f"{method}-{sampler}-s{seed}"
                rlft(method, "--recipe", RECIPES[method], "--model", a.start, "-o", str(run), "--overwrite",
                     "--seed", str(seed), "--set", f"{method}.prompt_sampler={sampler}",
                     "--set", "watch.auto_holdout=false", "--set", "watch.keep_best=false",
                     *[x for kv in a.extra for x in ("--set", kv)])
                score = evaluate(str(run))
                row = {"method": method, "sampler": sampler, "seed": seed, "pass_at_1": score["pass_at_1"],
                       "sampled": score["pass_rate_at_k_samples"],
                       "frac_reward_zero_std": round(mean_logged(run, "frac_reward_zero_std"), 4),
                       "scored_in_band": round(mean_logged(run, "band/scored_in_band"), 4), "eval": score}
                results.append(row)
                print(json.dumps(row), flush=True)
    print(f"\nstart: pass@1 {start['pass_at_1']:.3f}")
    for method in a.methods:
        rows = [r for r in results if r["method"] == method]
        for sampler in ("plain", "band"):
            mine = [r for r in rows if r["sampler"] == sampler]
            print(f"{method} {sampler:5s}: pass@1 " + " ".join(f"{r['pass_at_1']:.3f}" for r in mine)
                  + f"  mean {sum(r['pass_at_1'] for r in mine) / len(mine):.3f}"
                  + f"  sampled {sum(r['sampled'] for r in mine) / len(mine):.3f}"
                  + f"  zero-std groups {sum(r['frac_reward_zero_std'] for r in mine) / len(mine):.3f}")
        diffs = [b["pass_at_1"] - p["pass_at_1"] for p in rows if p["sampler"] == "plain"
                 for b in rows if b["sampler"] == "band" and b["seed"] == p["seed"]]
        print(f"{method} band - plain (paired by seed): " + " ".join(f"{d:+.3f}" for d in diffs)
              + f"  mean {sum(diffs) / len(diffs):+.3f}")


if __name__ == "__main__":
    main()
