"""The numbers in recipes/dpo_tiny.yaml's header: held-out pass@1 after DPO at several learning rates and seeds,
and with an SFT term (RPO) or SFT alone on the chosen answers, each from recipes/sft_tiny_short.yaml's model.

    python bench/sweep_dpo_tiny.py [--base DIR] [--only lr|loss] [--json]

Every run is `rlft dpo --recipe recipes/dpo_tiny.yaml --model BASE --set train.learning_rate=LR
--set train.seed=SEED [--set dpo.loss_type=...]` (200 steps), then greedy pass@1 on data/arith/test.jsonl
(200 rows, 8 new tokens) through rlft.evaluate.heldout_pass_at_1, the scorer the demo table uses. Not part of
`make bench` (no goal, ~10 runs of ~30 s each on one thread): it prints one row per run and exits 1 when a run
fails. BASE defaults to the short SFT of the tiny model, built once into a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "data/arith/test.jsonl"
LR_RUNS = [("1e-4", 42), ("1e-4", 43), ("1e-4", 44), ("5e-5", 42), ("2e-4", 42), ("5e-4", 42)]
LOSS_RUNS = [("[sigmoid,sft]", 42), ("[sft]", 42)]


def rlft(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "rlft", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"rlft {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="the short-SFT'd model (default: built from recipes/sft_tiny_short.yaml)")
    ap.add_argument("--only", choices=("lr", "loss"), help="only the learning-rate or only the loss-type runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from rlft.evaluate import heldout_pass_at_1

    rows = []
    with tempfile.TemporaryDirectory(prefix="sweep-dpo-") as tmp:
        base = args.base
        if base is None:
            base = str(Path(tmp) / "sft-short")
            rlft("sft", "--recipe", "recipes/sft_tiny_short.yaml", "-o", base)
        before = heldout_pass_at_1(base, str(HELDOUT))
        runs = [(lr, seed, None) for lr, seed in LR_RUNS] if args.only != "loss" else []
        runs += [("1e-4", seed, loss) for loss, seed in LOSS_RUNS] if args.only != "lr" else []
        for i, (lr, seed, loss) in enumerate(runs):
            out = str(Path(tmp) / f"dpo-{i}")
            extra = ["--set", f"dpo.loss_type={loss}"] if loss else []
            rlft("dpo", "--recipe", "recipes/dpo_tiny.yaml", "--model", base, "-o", out,
                 "--set", f"train.learning_rate={lr}", "--set", f"train.seed={seed}", *extra)
            after = heldout_pass_at_1(out, str(HELDOUT))
            rows.append({"lr": lr, "seed": seed, "loss_type": loss or "sigmoid", "before": before, "after": after})
            print(f"lr {lr:>5}  seed {seed}  loss {loss or 'sigmoid':14}  held-out pass@1 {before:.3f} -> "
                  f"{after:.3f}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
