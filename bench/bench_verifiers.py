"""Benchmark: rlft's `math` verifier next to TRL's `trl.rewards.accuracy_reward`, on the same completions.

    python bench/bench_verifiers.py [--n 2000]

1. Agreement: a shared table of (completion, gold) where both must give the same verdict; any
   disagreement is printed and the script exits 1.
2. Intended differences: cases where rlft departs from TRL on purpose (printed, never a failure):
   a bare or marker-stated answer scores in rlft (TRL needs LaTeX anchors such as \\boxed{} or $...$),
   and a LaTeX gold without $...$ is parsed by rlft (TRL reads part of it or gives None).
3. Throughput on plain-number answers (the arithmetic and GSM8K case): completions per second of
   each, both called in the main thread the way GRPOTrainer calls them, and the ratio (goal >= 10x;
   exit 1 below it). rlft compares plain numbers with Decimal and never enters sympy; TRL parses both
   sides with math-verify.

TRL's convention: `accuracy_reward(completions, solution, **kwargs)` with completions as message lists
([{"role": "assistant", "content": ...}]) and the gold in `solution`; rlft's is
`math_reward(completions, answer, **kwargs)` and takes strings or message lists.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

SHARED = [  # (completion, gold): both verifiers must agree
    ("\\boxed{46}", "46"),
    ("The answer is \\boxed{46}.", "46"),
    ("\\boxed{45}", "46"),
    ("The answer is $46$.", "46"),
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("\\boxed{\\frac{92}{2}}", "46"),
    ("\\boxed{1,000}", "1000"),
    ("\\boxed{1000}", "1,000"),
    ("\\boxed{}", "46"),
    ("", "46"),
    ("\\boxed{46} \\boxed{47}", "46"),
    ("\\boxed{47} \\boxed{46}", "46"),
    ("\\boxed{46} \\boxed{46}", "46"),
    ("$46$ or $47$", "46"),
    ("\\boxed{46 or 47}", "46"),
    ("\\boxed{46, 47}", "46"),
    ("\\boxed{\\pi}", "3.14"),
    ("\\boxed{-3}", "-3"),
    ("\\boxed{3}", "-3"),
    ("\\boxed{\\frac{1}{3}}", "\\frac{2}{6}"),
    ("\\boxed{0.333}", "\\frac{1}{3}"),
    ("\\boxed{46\\%}", "46"),
    ("\\boxed{\\$46}", "46"),
    ("\\boxed{46.0}", "46"),
    ("\\boxed{10^{3}}", "1000"),
    ("Thus \\boxed{12}. Check: 12 = 12.", "12"),
    ("12 + 34 = 46, so the answer is \\boxed{46}.", "46"),
    ("12 + 34 = 46, so the answer is \\boxed{47}.", "46"),
]

INTENDED = [  # (completion, gold, why rlft differs)
    ("46", "46", "bare answer (the tiny model's output): rlft scores it, TRL needs LaTeX anchors"),
    ("The answer is 46", "46", "answer marker without LaTeX"),
    ("#### 46", "46", "GSM8K marker"),
    ("<answer>46</answer>", "46", "R1 answer tag"),
    ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", "LaTeX gold without $...$: TRL parses only its leading 2"),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac12", "LaTeX gold without $...$: TRL cannot parse it (None)"),
]


def trl_scores(completions: list[str], golds: list[str]) -> list:
    from trl.rewards import accuracy_reward

    return accuracy_reward([[{"role": "assistant", "content": c}] for c in completions], golds)


def rlft_scores(completions: list[str], golds: list[str]) -> list:
    from rlft.verifiers import math_reward

    return math_reward(completions, answer=golds)


def agreement() -> bool:
    completions, golds = [c for c, _ in SHARED], [g for _, g in SHARED]
    ours, theirs = rlft_scores(completions, golds), trl_scores(completions, golds)
    bad = [(c, g, o, t) for c, g, o, t in zip(completions, golds, ours, theirs) if o != t]
    print(f"agreement: {len(SHARED) - len(bad)}/{len(SHARED)} shared cases give the same verdict")
    for c, g, o, t in bad:
        print(f"  DISAGREE rlft={o} trl={t} completion={c!r} gold={g!r}")
    completions, golds = [c for c, _, _ in INTENDED], [g for _, g, _ in INTENDED]
    ours, theirs = rlft_scores(completions, golds), trl_scores(completions, golds)
    print("intended differences (not failures):")
    for (c, g, why), o, t in zip(INTENDED, ours, theirs):
        print(f"  rlft={o} trl={t} completion={c!r} gold={g!r}: {why}")
    return not bad


def workload(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Plain-number golds; a third of the answers wrong, in the phrasings arithmetic and GSM8K use."""
    rng = random.Random(seed)
    completions, golds = [], []
    for _ in range(n):
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        answer = a + b + (rng.choice([1, -1, 10]) if rng.random() < 1 / 3 else 0)
        template = rng.choice(["We add {a} and {b} to get \\boxed{{{x}}}.",
                               "First {a} + {b}. The answer is \\boxed{{{x}}}.",
                               "Adding them, {a} + {b} = {x}. Therefore the answer is $\\boxed{{{x}}}$."])
        completions.append(template.format(a=a, b=b, x=answer))
        golds.append(str(a + b))
    return completions, golds


def throughput(n: int) -> float:
    completions, golds = workload(n)
    rlft_scores(completions[:10], golds[:10])  # warm up both (imports, caches)
    trl_scores(completions[:10], golds[:10])
    n_trl = min(n, 1000)  # TRL is slow: time it on fewer completions
    start = time.perf_counter()
    ours = rlft_scores(completions, golds)
    ours_rate = n / (time.perf_counter() - start)
    start = time.perf_counter()
    theirs = trl_scores(completions[:n_trl], golds[:n_trl])
    trl_rate = n_trl / (time.perf_counter() - start)
    same = sum(o == t for o, t in zip(ours, theirs))
    ratio = ours_rate / trl_rate
    print(f"throughput on plain-number answers ({n} completions for rlft, {n_trl} for TRL):")
    print(f"  rlft math verifier:   {ours_rate:12,.0f} completions/s")
    print(f"  trl accuracy_reward:  {trl_rate:12,.0f} completions/s")
    print(f"  ratio:                {ratio:12,.0f}x  (goal >= 10x: {'met' if ratio >= 10 else 'NOT met'})")
    print(f"  same verdict on {same}/{n_trl} of the timed completions; mean reward rlft "
          f"{sum(ours) / n:.3f}, trl {sum(theirs) / n_trl:.3f}")
    return ratio if same == n_trl else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="completions for the throughput run")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    ok = agreement()
    ratio = throughput(args.n)
    return 0 if ok and ratio >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
