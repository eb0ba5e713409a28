"""The plain TRL GRPO / RLOO script rlft's GRPO and RLOO are measured against (bench/bench_real.py).

    python bench/trl_script.py --method grpo --model-path DIR --steps 4 --out DIR

What a practitioner would write from TRL's docs, nothing of rlft's in the loop: GRPOTrainer, LoRA r 16 on
all linear layers, G 4, 8 completions a step (2 prompts), 48 new tokens, chat prompts (the word problems as
user messages), lr 2e-5, beta 0, `use_cpu=True`, fp32 (bf16=False: TRL's default bf16=True autocasts on the
CPU; RLOO: the same, with beta 0 like rlft's RLOO). The reward is rlft's math verifier as a plain function
(the same scoring as the rlft run). Prints one JSON line: seconds per step (the Trainer's train_runtime /
steps, loading excluded) and the tokens it trained on.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

INSTRUCTION = " End with 'The answer is N.'"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=("grpo", "rloo"), default="grpo")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--data", default="data/word_problems/train.jsonl")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    from rlft.verifiers.math import math_reward

    rows = [json.loads(line) for line in Path(a.data).read_text().splitlines() if line.strip()]
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"] + INSTRUCTION}],
                               "answer": str(r["answer"])} for r in rows])
    tok = AutoTokenizer.from_pretrained(a.model_path)
    model = AutoModelForCausalLM.from_pretrained(a.model_path, dtype="float32")

    def reward(completions, answer, **_):
        return [float(s or 0.0) for s in math_reward(completions, answer)]

    config, trainer_cls = (GRPOConfig, GRPOTrainer) if a.method == "grpo" else (RLOOConfig, RLOOTrainer)
    args = config(output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=48, learning_rate=2e-5, beta=0.0, use_cpu=True, bf16=False,
                      logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True, seed=42)
    trainer = trainer_cls(model=model, reward_funcs=[reward], args=args, train_dataset=data, processing_class=tok,
                          peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"))
    start = time.time()
    out = trainer.train()
    wall = time.time() - start
    print(json.dumps({"s_per_step": out.metrics["train_runtime"] / a.steps, "wall": wall,
                      "num_tokens": trainer.state.num_input_tokens_seen,
                      "reward": [h.get("reward") for h in trainer.state.log_history if "reward" in h]}))


if __name__ == "__main__":
    main()
