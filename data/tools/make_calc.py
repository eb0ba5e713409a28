"""Generate the calculator task (data/tools/): products of two 2-digit numbers, which the tiny model cannot work out
but can copy from the `calculate` tool (data/tools/calculator.py).

  sft_train.jsonl   demonstrations of mixed provenance, as real logs are: a third call the tool (user -> assistant
                    calls calculate -> tool result -> assistant answer), the rest answer directly with the correct
                    product (someone who worked it out by hand). The tiny model cannot learn 2-digit products, so its
                    direct answers are mostly wrong, while it can copy the tool's result: after SFT it opens a tool
                    call on a minority of prompts (one early token), so its greedy success starts low and groups of
                    sampled episodes are mixed, which gives GRPO a signal to learn when to call the tool. (With every
                    demonstration calling the tool, SFT jumps from ~0 to ~80% held-out success in a few steps and
                    leaves GRPO nothing to learn.)
  grpo_prompts.jsonl, test.jsonl   prompts (messages) + `answer` for GRPO and the held-out check; disjoint pairs
Run: python data/tools/make_calc.py (seeded: the files are reproducible).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = [{"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {
        "type": "string", "description": 'integers with + - * / and parentheses, e.g. "23*47"'}},
        "required": ["expression"]}}}]


def demo(a: int, b: int) -> dict:
    expr = f"{a}*{b}"
    call = {"type": "function", "function": {"name": "calculate", "arguments": {"expression": expr}}}
    return {"messages": [{"role": "user", "content": f"{expr}="},
                         {"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "name": "calculate", "content": str(a * b)},
                         {"role": "assistant", "content": str(a * b)}], "tools": TOOLS}


def direct(a: int, b: int) -> dict:
    return {"messages": [{"role": "user", "content": f"{a}*{b}="}, {"role": "assistant", "content": str(a * b)}],
            "tools": TOOLS}


TOOL_SHARE = 1 / 3  # the share of demonstrations that call the tool


def main() -> None:
    rng = random.Random(0)
    pairs = sorted({(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(900)})
    rng.shuffle(pairs)
    test, grpo, sft = pairs[:100], pairs[100:400], pairs[400:]
    write = lambda name, rows: (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in rows))  # noqa: E731
    write("sft_train.jsonl", [demo(a, b) if rng.random() < TOOL_SHARE else direct(a, b) for a, b in sft])
    prompt = lambda a, b: {"prompt": [{"role": "user", "content": f"{a}*{b}="}], "answer": str(a * b)}  # noqa: E731
    write("grpo_prompts.jsonl", [prompt(a, b) for a, b in grpo])
    write("test.jsonl", [prompt(a, b) for a, b in test])


if __name__ == "__main__":
    main()
