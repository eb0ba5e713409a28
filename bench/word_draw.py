"""Issue 20's hidden check, rehearsed: another folder of one-step word problems, in other words, for
`make demo-real DATA=DIR`.

    python bench/word_draw.py --out runs/word-draw [--seed 1] [--train 600] [--test 150]
    make demo-real DATA=runs/word-draw REAL_OUT=runs/demo-real-draw

The same four kinds as data/word_problems (adding, taking away, groups times items, sharing equally), written
with none of its sentences, names or items, several phrasings per kind, and worked answers in other words
("Together: 45 + 23 = 68. The answer is 68."). Held out by (operation, numbers) as data/make_samples.py does:
no test question is a training question with another name or item. Standard library only; the seed fixes
every file.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ["Aiko", "Bruno", "Carmen", "Dmitri", "Esme", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luis",
         "Mira", "Nils", "Olga", "Paolo", "Quinn", "Rosa", "Sami", "Tess"]
ITEMS = ["buttons", "seashells", "crayons", "tickets", "beads", "bottle caps", "postcards", "acorns", "ribbons",
         "muffins", "tomatoes", "paper cranes"]
GROUPS = [("bag", "bags"), ("jar", "jars"), ("basket", "baskets"), ("tray", "trays"), ("crate", "crates")]


def problem(rng: random.Random) -> tuple[str, str, str, int]:
    """(question, worked answer, the operation and numbers that decide the split, answer)."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    one, many = rng.choice(GROUPS)
    op = rng.choice(["add", "sub", "mul", "div"])
    if op == "add":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        q = rng.choice([f"{name} collected {a} {item} on Monday and {b} on Tuesday. How many {item} in all?",
                        f"There are {a} {item} in one {one} and {b} in another. How many {item} are there "
                        f"altogether?",
                        f"{name} starts with {a} {item}. A friend gives {name} {b} more. What is the total?"])
        eq = f"{a} + {b} = {a + b}"
        return q, f"Together: {eq}. The answer is {a + b}.", f"add {sorted((a, b))}", a + b
    if op == "sub":
        a = rng.randint(20, 99)
        b = rng.randint(10, a - 1)
        q = rng.choice([f"{name} made {a} {item} and sold {b} of them. How many {item} remain?",
                        f"A {one} held {a} {item}. {b} were taken out. How many {item} are still in the {one}?",
                        f"{name} needs {a} {item} and already has {b}. How many more does {name} need?"])
        eq = f"{a} - {b} = {a - b}"
        return q, f"Take away: {eq}. The answer is {a - b}.", f"sub {a} {b}", a - b
    k, a = rng.randint(2, 9), rng.randint(3, 12)
    if op == "mul":
        q = rng.choice([f"{name} fills {k} {many} with {a} {item} each. How many {item} is that?",
                        f"Each {one} has {a} {item}. How many {item} do {k} {many} have?",
                        f"There are {k} {many} and every one holds {a} {item}. How many {item} in total?"])
        eq = f"{k} x {a} = {k * a}"
        return q, f"Groups times items: {eq}. The answer is {k * a}.", f"mul {sorted((k, a))}", k * a
    q = rng.choice([f"{name} packs {k * a} {item} into {k} {many}, the same number in each. How many {item} go "
                    f"in each {one}?",
                    f"{k * a} {item} are split evenly between {k} children. How many does each child get?",
                    f"{name} lays {k * a} {item} out in {k} equal rows. How many {item} are in each row?"])
    eq = f"{k * a} / {k} = {a}"
    return q, f"Share equally: {eq}. The answer is {a}.", f"div {k * a} {k}", a


def make(seed: int, n_train: int, n_test: int) -> dict[str, list[dict]]:
    rng = random.Random(f"rlft-word-draw:{seed}")
    seen: set[str] = set()
    split: dict[str, str] = {}
    rows: dict[str, list[dict]] = {"train": [], "test": []}
    size = {"train": n_train, "test": n_test}
    while len(rows["train"]) < n_train or len(rows["test"]) < n_test:
        q, worked, key, answer = problem(rng)
        part = split.setdefault(key, "test" if rng.random() < 0.2 else "train")
        if q in seen or len(rows[part]) >= size[part]:
            continue
        seen.add(q)
        row = {"prompt": q, "answer": str(answer)}
        rows[part].append({"prompt": q, "completion": worked, "answer": str(answer)} if part == "train" else row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=600)
    ap.add_argument("--test", type=int, default=150)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for part, rows in make(args.seed, args.train, args.test).items():
        (out / f"{part}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{out / part}.jsonl: {len(rows)} rows")


if __name__ == "__main__":
    main()
