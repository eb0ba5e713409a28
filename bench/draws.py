"""Issue 24's check on other draws: a shipped preference recipe on a fresh draw of arithmetic rows, judged on
data/arith/test.jsonl against the short-SFT start.

    python bench/draws.py --method kto --seeds 7,11,23 [--rows 600] [--start DIR] [--set KEY=VALUE ...] [--json]

For each seed: draw the rows (`draw`: the problems data/arith/make_arith.py never holds out, sampled with the
seed; chosen = the right sum, rejected = one of make_arith's typical slips; KTO gets the thumbs of rows/2 pairs,
DPO rows pairs), run `rlft <method> --recipe recipes/<method>_tiny.yaml` on them from the start model, and
score greedily (8 new tokens, math verifier, all 200 rows) the start, the model the run folder keeps and the
last one (last/, when it differs). One row per seed: start, kept, last, the kept step, the alarms; the check
passes when kept >= start + 0.05, or the overfitting alarm fired and kept >= start. Not part of `make bench`
(no timing; a few runs of ~1 min each on one thread). The start defaults to recipes/sft_tiny_short.yaml's model
of a fresh tiny model (what `make demo` builds), built once into --work.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data/arith/test.jsonl"
GAIN = 0.05
sys.path.insert(0, str(ROOT / "data/arith"))


def draw(seed: int, n_pairs: int) -> list[dict]:
    """`n_pairs` preference pairs of make_arith's kind on problems it never holds out, drawn with `seed`."""
    from make_arith import SEED, wrong_sum

    problems = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(SEED).shuffle(problems)
    rng = random.Random(seed)
    return [{"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(wrong_sum(a, b, rng))}
            for a, b in rng.sample(problems[200:], n_pairs)]


def rlft(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "rlft", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"rlft {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")


def candidate_z(out: Path) -> tuple[int | None, float]:
    """The trained check a run would keep if it beat the start (rlft.watch.overfit.kept_check tries the last one within
    noise of the best, then the best), and the McNemar z of its gain over the start on the held-out slice
    (continuity-corrected, as beats_start; the larger of the two): how close the run came to keeping it."""
    from rlft.watch.overfit import Check, best_check, gain_z, kept_check

    rows = [json.loads(line) for line in (out / "heldout_rows.jsonl").read_text().splitlines() if line.strip()]
    checks = [Check(r["step"], sum(r["per_row"]) / len(r["per_row"]), r["per_row"]) for r in rows]
    logged = [json.loads(line) for line in (out / "alarms.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "alarms.jsonl").exists() else []
    # the in-run alarm (a sustained fall), not the end-of-run one that reports the start kept
    alarm = any(a.get("name") == "overfitting" and "start_score" not in a.get("evidence", {}) for a in logged)
    # kept_check tries the last check (when within noise of the best) and the best one: the larger z of the two
    cand, _ = kept_check(checks, alarm, keep_start=False)
    best = best_check(checks[1:]) or checks[0]
    return max(((c.step, gain_z(c, checks[0])) for c in (cand, best)), key=lambda t: t[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", choices=("kto", "dpo"), required=True)
    ap.add_argument("--seeds", default="7,11,23")
    ap.add_argument("--rows", type=int, help="training rows (default: 600 thumbs for KTO, 300 pairs for DPO)")
    ap.add_argument("--start", help="the short-SFT model (default: built into --work)")
    ap.add_argument("--work", default="runs/draws")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE passed to the run (repeatable)")
    ap.add_argument("--tag", default="", help="suffix of the run folders")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "data/arith")]
    from make_arith import thumbs_from_pairs

    from rlft.evaluate import heldout_pass_at_1

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    start = args.start
    if start is None:
        start = str(work / "sft-short")
        if not (work / "sft-short" / "config.json").exists():
            rlft("init-model", "--out", str(work / "tiny"), "--overwrite")
            rlft("sft", "--recipe", "recipes/sft_tiny_short.yaml", "--model", str(work / "tiny"), "-o", start,
                 "--overwrite")
    before = heldout_pass_at_1(start, str(TEST))
    rows, flag = [], {"kto": "--feedback", "dpo": "--pairs"}[args.method]
    for seed in [int(s) for s in args.seeds.split(",")]:
        n = args.rows or (600 if args.method == "kto" else 300)
        pairs = draw(seed, n // 2 if args.method == "kto" else n)
        data = thumbs_from_pairs(pairs) if args.method == "kto" else pairs
        path = work / f"{args.method}_{len(data)}_s{seed}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
        out = work / f"{args.method}_s{seed}{args.tag}"
        sets = [x for kv in args.set for x in ("--set", kv)]
        rlft(args.method, "--recipe", f"recipes/{args.method}_tiny.yaml", flag, str(path), "--model", start,
             "-o", str(out), "--overwrite", *sets)
        summary = json.loads((out / "summary.json").read_text())
        kept = heldout_pass_at_1(str(out), str(TEST))
        last = heldout_pass_at_1(str(out / "last"), str(TEST)) if (out / "last").is_dir() else kept
        alarms = sorted({a if isinstance(a, str) else a.get("name") for a in summary.get("alarms", [])})
        cand, z = candidate_z(out)
        ok = kept >= before + GAIN - 1e-9 or ("overfitting" in alarms and kept >= before - 1e-9)
        row = {"seed": seed, "method": args.method, "rows": len(data), "start": before, "kept": kept, "last": last,
               "kept_step": (summary.get("kept") or {}).get("step"), "steps": summary.get("global_step"),
               "alarms": alarms, "ok": ok, "sets": args.set, "candidate_step": cand, "candidate_z": z,
               "curve": [(c["step"], c["score"]) for c in (summary.get("heldout") or {}).get("curve", [])]}
        rows.append(row)
        print(f"seed {seed:>3}  {args.method}  start {before:.3f}  kept {kept:.3f} (step {row['kept_step']})  last "
              f"{last:.3f}  alarms {','.join(alarms) or '-'}  candidate step {cand} z {z:.2f}  "
              f"{'ok' if ok else 'MISS'}", flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
