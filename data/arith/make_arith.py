"""Generate the arithmetic sample sets (2-digit addition) with a fixed seed.

    python data/arith/make_arith.py [--out data/arith] [--seed 1234]

(another --seed: another draw of the same sets, e.g. to rehearse a check on data the recipes were not tuned on).

Problems a+b with two-digit a, b (10..99: 8,100 in all) are shuffled once; the first 200 are held out and
never trained on by any stage, the other 7,900 feed the training sets:
  test.jsonl          200  held-out {prompt, answer}: every `rlft eval` and the demo's before/after
  pairs_eval.jsonl    200  the same held-out problems as preference pairs
  sft_train.jsonl    6000  demonstrations {prompt, completion}
  grpo_prompts.jsonl 1900  verifiable prompts {prompt, answer} for GRPO / PPO (the 1,900 SFT never saw)
  pairs_train.jsonl  2000  preference pairs {prompt, chosen, rejected}, sampled from the 7,900: chosen =
                           the right sum, rejected = a typical slip (carry dropped, off by one or ten)
  thumbs_train.jsonl 4000  thumbs up/down {prompt, completion, label} for KTO, derived from pairs_train:
                           each pair gives its chosen answer labelled true and its rejected one labelled false
  pairs_rm.jsonl    15800  the reward model's pairs (recipes/reward_tiny.yaml): two per problem of the 7,900,
                           one rejected a typical slip, the other a malformed answer (a digit added, dropped
                           or repeated, or another number of any length): what a policy drifts to under PPO
                           when the reward model never saw such answers rejected (drawn after the files above,
                           from its own seeded generator, so they are unchanged)
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 1234


def wrong_sum(a: int, b: int, rng: random.Random) -> int:
    right = a + b
    slips = [right + 1, right - 1, right + 10, right - 10, (a % 10 + b % 10) % 10 + 10 * (a // 10 + b // 10)]
    slips = [s for s in slips if s != right and s >= 0]
    return rng.choice(slips)


def malformed_sum(a: int, b: int, rng: random.Random) -> str:
    """A wrong answer of another shape than a slip: the sum with a digit added, dropped or repeated, or a
    random number of 1-5 digits."""
    right = str(a + b)
    kinds = [right + str(rng.randrange(10)), str(rng.randrange(1, 10)) + right, right[:-1], right[1:],
             right + right[-1], str(rng.randrange(10 ** rng.randrange(1, 6)))]
    return next(w for w in (rng.choice(kinds) for _ in range(100)) if w and w != right)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent))
    parser.add_argument("--seed", type=int, default=SEED, help="another draw (default: the shipped files' seed)")
    args = parser.parse_args()
    out, seed = Path(args.out), args.seed
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    problems = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    rng.shuffle(problems)
    held, rest = problems[:200], problems[200:]
    pools = {"test": held, "pairs_eval": held, "sft_train": rest[:6000], "grpo_prompts": rest[6000:],
             "pairs_train": rng.sample(rest, 2000)}
    for name, pool in pools.items():
        rows = []
        for a, b in pool:
            prompt = f"{a}+{b}="
            if name == "sft_train":
                rows.append({"prompt": prompt, "completion": str(a + b)})
            elif name.startswith("pairs"):
                rows.append({"prompt": prompt, "chosen": str(a + b), "rejected": str(wrong_sum(a, b, rng))})
            else:
                rows.append({"prompt": prompt, "answer": str(a + b)})
        with open(out / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        if name == "pairs_train":
            with open(out / "thumbs_train.jsonl", "w") as f:
                f.writelines(json.dumps(t) + "\n" for t in thumbs_from_pairs(rows))
    rm_rng = random.Random(seed + 1)
    rm_rows = [{"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(wrong)}
               for a, b in rest for wrong in (wrong_sum(a, b, rm_rng), malformed_sum(a, b, rm_rng))]
    rm_rng.shuffle(rm_rows)
    with open(out / "pairs_rm.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rm_rows)


def thumbs_from_pairs(pairs: list[dict]) -> list[dict]:
    """Unpaired thumbs rows from preference pairs: chosen -> label true, rejected -> label false."""
    return [{"prompt": p["prompt"], "completion": p[key], "label": key == "chosen"}
            for p in pairs for key in ("chosen", "rejected")]


if __name__ == "__main__":
    main()
