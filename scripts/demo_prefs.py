"""`make demo-prefs`: SFT, then from the same SFT model DPO, reward model + PPO, and best-of-n with the reward
model, each judged by the store's held-out truth (the `support_policy` verifier on DATA/test.jsonl).

    python -m scripts.demo_prefs --data data/support/store --out runs/demo-prefs            # SmolLM2 recipes
    python -m scripts.demo_prefs --data DIR --out OUT --recipes tiny --sft-set train.max_steps=2 ...  # plumbing

The tiny recipes are arithmetic ones: on a store they need the lengths and sizes that tests/test_demo_prefs.py
passes with --sft-set, --dpo-set, --reward-set and --ppo-set.

DATA is a store folder written by data/make_store.py (demos.jsonl, pairs_train.jsonl, pairs_eval.jsonl,
test.jsonl). Every stage is the real `rlft` command in a subprocess, with the shipped recipes
(recipes/{sft,dpo,reward,ppo}_smollm2.yaml; `--set` overrides per stage with --sft-set, --dpo-set, ...). The
truth of greedy replies on every test prompt is measured before (the SFT model) and after each method; the table
(OUT/demo_prefs.md, OUT/demo_prefs.json) has truth before -> after, the gain in points, wall time and what each
run kept (a run whose held-out truth never beat its start keeps the SFT model, and says so). PPO may refuse to
start (exit 3): with the shipped implicit reward model when that model's own policy is no better than the SFT
model under the truth, with a score head when it agrees with the truth near chance on the SFT model's samples;
the table then says so and gives the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = {"smollm2": {m: f"recipes/{m}_smollm2.yaml" for m in ("sft", "dpo", "reward", "ppo")},
           "tiny": {"sft": "recipes/sft_tiny.yaml", "dpo": "recipes/dpo_tiny.yaml",
                    "reward": "recipes/reward_tiny.yaml", "ppo": "recipes/ppo_tiny.yaml"}}


def rlft(*args: str, log: Path) -> tuple[int, float]:
    """Run `rlft ARGS` (this checkout's rlft), output to `log`; (exit code, seconds)."""
    began = time.time()
    with log.open("w") as f:
        code = subprocess.call([sys.executable, "-m", "rlft", *map(str, args)], stdout=f, stderr=subprocess.STDOUT,
                               cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "1000"})
    return code, time.time() - began


def truth(model: Path, data: Path, out: Path, name: str, tokens: int, extra: tuple = ()) -> dict:
    """`rlft eval --json` of `model` on the store's test prompts, scored by the truth."""
    log = out / f"eval-{name}.log"
    code, secs = rlft("eval", "-m", model, "-d", data / "test.jsonl", "-v", "support_policy", "--max-new-tokens",
                      str(tokens), "--json", *extra, log=log)
    if code != 0:
        return {"error": f"rlft eval exit {code} (see {log})", "seconds": round(secs, 1)}
    text = log.read_text()
    return {**json.loads(text[text.index("{"):text.rindex("}") + 1]), "eval_seconds": round(secs, 1)}


def kept(run: Path) -> str:
    try:
        s = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return ""
    k = s.get("kept") or {}
    return f"kept step {k.get('step')}: {k.get('why')}" if k else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT / "data/support/store")
    ap.add_argument("--out", type=Path, default=ROOT / "runs/demo-prefs")
    ap.add_argument("--recipes", choices=sorted(RECIPES), default="smollm2")
    ap.add_argument("--tokens", type=int, default=48, help="generation budget of the truth evals")
    ap.add_argument("--best-of", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--stages", default="sft,dpo,reward,bestofn,ppo")
    for stage in ("sft", "dpo", "reward", "ppo"):
        ap.add_argument(f"--{stage}-set", action="append", default=[], help=f"--set for the {stage} stage")
    args = ap.parse_args(argv)
    data, out, rec = args.data.resolve(), args.out.resolve(), RECIPES[args.recipes]
    out.mkdir(parents=True, exist_ok=True)
    stages = args.stages.split(",")
    sets = {s: [x for v in getattr(args, f"{s}_set") for x in ("--set", v)] for s in ("sft", "dpo", "reward", "ppo")}
    holdout = ("--holdout", data / "test.jsonl", "--holdout-verifier", "support_policy")
    rows: list[dict] = []
    began = time.time()
    sft = out / "sft"
    if "sft" in stages:
        # all demonstrations trained on (the truth on test.jsonl is the held-out judge, not a slice of the demos)
        code, secs = rlft("sft", "--recipe", rec["sft"], "--data", data / "demos.jsonl", "-o", sft, "--overwrite",
                          "--set", "watch.auto_holdout=false", *sets["sft"], log=out / "sft.log")
        if code:
            print(f"sft failed (exit {code}): {out / 'sft.log'}")
            return code
        rows.append({"method": "SFT", "train_seconds": round(secs, 1)})
    start = truth(sft, data, out, "sft", args.tokens)
    base = start.get("pass_at_1")
    if rows:
        rows[0].update(before=None, after=base)
    print(f"SFT truth {base}")

    def stage(method: str, name: str, cmd: list, model: Path) -> None:
        code, secs = rlft(*cmd, log=out / f"{name}.log")
        row = {"method": method, "train_seconds": round(secs, 1), "before": base, "exit": code}
        if code == 0:
            after = truth(model, data, out, name, args.tokens)
            row.update(after=after.get("pass_at_1"), note=kept(model))
        elif code == 3:
            text = (out / f"{name}.log").read_text()  # unwrapped (COLUMNS above): the refusal is one line
            why = [line.strip().removeprefix("error: ") for line in text.splitlines() if line.startswith("error:")]
            row.update(after=base, note="refused: " + (why[-1] if why else f"exit 3, {out / f'{name}.log'}"))
        else:
            row.update(after=None, note=f"failed (exit {code}, {out / f'{name}.log'})")
        rows.append(row)
        print(row)

    if "dpo" in stages:
        stage("DPO", "dpo", ["dpo", "--recipe", rec["dpo"], "--model", sft, "--pairs", data / "pairs_train.jsonl",
                             "--eval-data", data / "pairs_eval.jsonl", *holdout, "-o", out / "dpo", "--overwrite",
                             *sets["dpo"]], out / "dpo")
    rm = out / "rm"
    if "reward" in stages:
        code, secs = rlft("reward", "--recipe", rec["reward"], "--model", sft, "--pairs", data / "pairs_train.jsonl",
                          "--eval-data", data / "pairs_eval.jsonl", "-o", rm, "--overwrite", "--set",
                          f"reward.truth_data={data / 'test.jsonl'}", "--set", "reward.truth_verifier=support_policy",
                          *sets["reward"], log=out / "reward.log")
        s = {}
        try:
            s = json.loads((rm / "summary.json").read_text()).get("final_metrics") or {}
        except (OSError, ValueError):
            pass
        rows.append({"method": "reward model", "train_seconds": round(secs, 1), "exit": code,
                     "note": "pair accuracy {} held out; agreement with the truth on SFT samples {}".format(
                         s.get("heldout_pair_accuracy"), s.get("truth_agreement"))})
        print(rows[-1])
    if "bestofn" in stages and (rm / "summary.json").exists():
        extra = tuple(x for n in args.best_of for x in ("--best-of", str(n))) + ("--reward-model", str(rm))
        b = truth(sft, data, out, "bestofn", args.tokens, extra)
        for n in args.best_of:
            rows.append({"method": f"best-of-{n} (RM)", "before": base, "after": b.get(f"best_of_{n}"),
                         "train_seconds": 0.0, "note": f"any of {n}: {b.get(f'any_of_{n}')}; eval "
                                                       f"{b.get('eval_seconds')} s for all n"})
    if "ppo" in stages and (rm / "summary.json").exists():
        stage("RM + PPO", "ppo", ["ppo", "--recipe", rec["ppo"], "--model", sft, "--reward-model", rm, "--prompts",
                                  data / "pairs_train.jsonl", *holdout, "-o", out / "ppo", "--overwrite",
                                  *sets["ppo"]], out / "ppo")
    total = time.time() - began
    lines = [f"# demo-prefs: {data} ({args.recipes} recipes), {total / 60:.1f} min in all", "",
             "| method | truth before | truth after | gain (points) | train s | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        b, a = r.get("before"), r.get("after")
        gain = f"{100 * (a - b):+.1f}" if isinstance(a, float) and isinstance(b, float) else ""
        lines.append(f"| {r['method']} | {b if b is not None else ''} | {a if a is not None else ''} | {gain} | "
                     f"{r.get('train_seconds', '')} | {r.get('note', '')} |")
    (out / "demo_prefs.md").write_text("\n".join(lines) + "\n")
    (out / "demo_prefs.json").write_text(json.dumps({"data": str(data), "minutes": round(total / 60, 1),
                                                     "rows": rows}, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
