"""`make demo-dspy`: a DSPy program trained by rlft, in one process (docs/dspy.md).

The seeds' support-ticket triage (data/triage) as `dspy.Predict(Triage)` (ticket -> label) with the seeds'
partial-credit metric (1 the exact label, 0.5 the right label wrapped in other words, 0 otherwise) on
SmolLM2-135M-Instruct + LoRA: the held-out score (dspy.Evaluate, greedy) before training, after
dspy.BootstrapFinetune with rlft as its backend (one teacher rollout per training example, the program as its
own teacher) and after dspy.GRPO with rlft as its backend (S x B x G rollouts), in one table with wall time
and rollouts. `--task` picks another program (`sentiment`: a typed Literal output and an exact-match metric,
the second check that the defaults are not tuned to triage; `arith`: data/arith's two-digit sums as a typed
`int` field, exact match).

    python -m scripts.dspy_demo [--model smollm2] [--train 120] [--eval 100] [--grpo-steps 100] [--out runs/dspy]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path
from typing import Literal

LABELS = ("billing", "bug", "account", "shipping")


def triage_metric(example, prediction, trace=None) -> float:
    """1 for the exact label, 0.5 for the right label wrapped in other words (and no other label), else 0."""
    gold = example.label
    said = str(getattr(prediction, "label", "") or "").strip().lower().strip(" .'\"")
    if said == gold:
        return 1.0
    words = set(re.findall(r"[a-z]+", said))
    if gold in words and not (words & (set(LABELS) - {gold})):
        return 0.5
    return 0.0


def triage_data(path: str, n: int, seed: int = 0):
    import dspy

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(rows)
    out = []
    for r in rows[:n]:
        ticket = r["prompt"].split("Ticket:", 1)[1].rsplit("Label:", 1)[0].strip()
        out.append(dspy.Example(ticket=ticket, label=r["label"]).with_inputs("ticket"))
    return out


def triage_program():
    import dspy

    class Triage(dspy.Signature):
        """Classify the support ticket into one of: billing, bug, account, shipping."""

        ticket: str = dspy.InputField()
        # Typed, so rlft's engine answers by guided choice: given DSPy's prompt with a plain `str` field,
        # SmolLM2-135M writes the template's placeholder ("{ticket}") or "[#]" lines (docs/dspy.md)
        label: Literal["billing", "bug", "account", "shipping"] = dspy.OutputField()

    return dspy.Predict(Triage)


# --- a second program on other data: sentiment of short reviews, a typed Literal field, exact match ---------
_GOOD = ["great", "excellent", "loved it", "works perfectly", "fantastic", "very happy with", "five stars for",
         "highly recommend", "superb", "really enjoyed"]
_BAD = ["terrible", "awful", "broke after a day", "waste of money", "very disappointed with", "one star for",
        "would not recommend", "poor quality", "hated", "returned"]
_THINGS = ["the headphones", "this blender", "the hotel room", "the delivery", "this novel", "the app",
           "the service", "this jacket", "the coffee maker", "the tour guide", "the keyboard", "the lamp"]


def sentiment_data(n: int, seed: int):
    import dspy

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = rng.choice(["positive", "negative"])
        phrase, thing = rng.choice(_GOOD if label == "positive" else _BAD), rng.choice(_THINGS)
        text = rng.choice([f"{phrase.capitalize()} {thing}.", f"{thing.capitalize()}: {phrase}.",
                           f"I bought {thing} last week. {phrase.capitalize()}."])
        out.append(dspy.Example(review=text, sentiment=label).with_inputs("review"))
    return out


def sentiment_program():
    import dspy

    class Sentiment(dspy.Signature):
        """Is the review positive or negative?"""

        review: str = dspy.InputField()
        sentiment: Literal["positive", "negative"] = dspy.OutputField()

    return dspy.Predict(Sentiment)


def sentiment_metric(example, prediction, trace=None) -> float:
    return float(str(getattr(prediction, "sentiment", "")) == example.sentiment)


# --- a third: two-digit addition (data/arith), a typed int field, exact match -------------------------------
def arith_data(path: str, n: int, seed: int = 0):
    import dspy

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    random.Random(seed).shuffle(rows)
    return [dspy.Example(problem=r["prompt"].rstrip("="), answer=int(r["answer"])).with_inputs("problem")
            for r in rows[:n]]


def arith_program():
    import dspy

    class Add(dspy.Signature):
        """Add the two numbers."""

        problem: str = dspy.InputField()
        answer: int = dspy.OutputField()

    return dspy.Predict(Add)


def arith_metric(example, prediction, trace=None) -> float:
    return float(getattr(prediction, "answer", None) == example.answer)


def task(name: str, n_train: int, n_eval: int):
    if name == "arith":
        return (arith_program, arith_metric, arith_data("data/arith/grpo_prompts.jsonl", n_train),
                arith_data("data/arith/test.jsonl", n_eval))
    if name == "triage":
        return (triage_program, triage_metric, triage_data("data/triage/tickets_train.jsonl", n_train),
                triage_data("data/triage/tickets_eval.jsonl", n_eval))
    return sentiment_program, sentiment_metric, sentiment_data(n_train, 1), sentiment_data(n_eval, 2)


def evaluate(program, devset, metric) -> float:
    import dspy

    result = dspy.Evaluate(devset=devset, metric=metric, num_threads=16, display_progress=False,
                           display_table=False, max_errors=10 ** 6)(program)
    return float(getattr(result, "score", result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="triage", choices=("triage", "sentiment", "arith"))
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--train", type=int, default=120, help="training examples")
    parser.add_argument("--eval", type=int, default=100, help="held-out examples")
    parser.add_argument("--grpo-steps", type=int, default=100, help="GRPO steps (S; DSPy's default 100)")
    parser.add_argument("--grpo-examples", type=int, default=1, help="examples per GRPO step (B; DSPy's default 1)")
    parser.add_argument("--grpo-rollouts", type=int, default=8, help="rollouts per example (G)")
    parser.add_argument("--stages", default="base,bootstrap,grpo")
    parser.add_argument("--out", default="runs/dspy")
    parser.add_argument("--train-kwargs", default="{}", help="JSON object of extra local_lm train_kwargs for both "
                        "compiles, e.g. '{\"grpo.num_iterations\": 1}'")
    args = parser.parse_args(argv)

    import dspy
    from dspy.teleprompt.grpo import GRPO

    import rlft.dspy

    make, metric, trainset, devset = task(args.task, args.train, args.eval)
    extra = json.loads(args.train_kwargs)
    out = Path(args.out)
    stages = args.stages.split(",")
    rows = []
    lm = rlft.dspy.local_lm(args.model, lora=True)
    dspy.configure(lm=lm)
    program = make()
    program.set_lm(lm)

    t = time.time()
    base = evaluate(program, devset, metric)
    rows.append(("before", base, time.time() - t, 0, args.model))
    print(f"before: {base:.1f}", flush=True)

    from rlft.dspy.config import shared_engine

    def served() -> int:
        """Requests the engine has answered so far: the rollouts a compile used are the difference."""
        return sum(shared_engine().batches)

    if "bootstrap" in stages:
        t, before = time.time(), served()
        lm_b = rlft.dspy.local_lm(args.model, lora=True, output_dir=str(out / f"{args.task}-bootstrap"),
                                  **extra)
        student = make()
        student.set_lm(lm_b)
        tuned = dspy.BootstrapFinetune(metric=metric, num_threads=16).compile(student, trainset=trainset,
                                                                              teacher=student)
        wall, rollouts = time.time() - t, served() - before
        score = evaluate(tuned, devset, metric)
        rows.append(("BootstrapFinetune", score, wall, rollouts, tuned.predictors()[0].lm.model))
        print(f"after BootstrapFinetune: {score:.1f} ({wall:.0f} s)", flush=True)

    if "grpo" in stages:
        t, before = time.time(), served()
        lm_g = rlft.dspy.local_lm(args.model, lora=True, output_dir=str(out / f"{args.task}-grpo"), **extra)
        student = make()
        student.set_lm(lm_g)
        opt = GRPO(metric=metric, num_train_steps=args.grpo_steps, num_dspy_examples_per_grpo_step=args.grpo_examples,
                   num_rollouts_per_grpo_step=args.grpo_rollouts, exclude_demos=True, num_threads=16,
                   num_steps_for_val=10 ** 6)
        tuned = opt.compile(student, trainset=trainset)
        wall, rollouts = time.time() - t, served() - before
        score = evaluate(tuned, devset, metric)
        rows.append(("GRPO", score, wall, rollouts, tuned.predictors()[0].lm.model))
        print(f"after GRPO: {score:.1f} ({wall:.0f} s)", flush=True)

    print(f"\n{args.task}: held-out score (dspy.Evaluate, {len(devset)} rows, greedy), {args.model} + LoRA")
    print("| stage | held-out | vs before | wall time | rollouts | model |\n|---|---|---|---|---|---|")
    for name, score, wall, rollouts, model in rows:
        print(f"| {name} | {score:.1f} | {score - base:+.1f} | {wall / 60:.1f} min | {rollouts} | {model} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
