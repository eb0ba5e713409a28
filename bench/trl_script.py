"""The plain TRL scripts rlft's GRPO, RLOO, SFT and DPO are measured against (bench/bench_real.py).

    python bench/trl_script.py --method grpo|rloo|sft|dpo --model-path DIR --steps 4 --out DIR

What a practitioner would write from TRL's docs, nothing of rlft's in the loop: GRPOTrainer, LoRA r 16 on
all linear layers, G 4, 8 completions a step (2 prompts), 48 new tokens, chat prompts (the word problems as
user messages), lr 2e-5, beta 0, `use_cpu=True`, fp32 (bf16=False: TRL's default bf16=True autocasts on the
CPU; RLOO: the same, with beta 0 like rlft's RLOO). The reward is rlft's math verifier as a plain function
(the same scoring as the rlft run).

SFT and DPO: SFTTrainer / DPOTrainer, LoRA r 16 (alpha 32, dropout 0.05: rlft's defaults) on all linear layers,
batch 8, max_length 128, the rows as chat messages (prompt as a user message, completion / chosen / rejected as
assistant messages, as rlft's `data.as_chat` does), `use_cpu=True`, fp32. SFT on the word problems, DPO on the
arithmetic pairs (the reference is the base under the disabled adapter, TRL's default with peft).

Everything else is TRL's default, gradient checkpointing included (on; rlft turns it off on a CPU, where
memory is rarely the limit and the recomputed forward costs about a third more work): `--gradient-checkpointing
off` gives the script rlft's setting, to see how much of a ratio that one setting is.

Prints one JSON line: seconds per step (the Trainer's train_runtime / steps, loading excluded) and the tokens it
trained on.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

INSTRUCTION = " End with 'The answer is N.'"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=("grpo", "rloo", "sft", "dpo"), default="grpo")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--data", default=None, help="default: data/arith/pairs_train.jsonl for dpo, else "
                    "data/word_problems/train.jsonl")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gradient-checkpointing", choices=("on", "off"), default="on",
                    help="TRL's default is on (recompute each layer's activations in the backward); rlft turns it "
                    "off on a CPU. off: the same setting as rlft, to see how much of a ratio is that setting")
    a = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    data_path = a.data or ("data/arith/pairs_train.jsonl" if a.method == "dpo" else "data/word_problems/train.jsonl")
    rows = [json.loads(line) for line in Path(data_path).read_text().splitlines() if line.strip()]
    tok = AutoTokenizer.from_pretrained(a.model_path)
    model = AutoModelForCausalLM.from_pretrained(a.model_path, dtype="float32")
    common = dict(output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=8, use_cpu=True, bf16=False,
                  logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True, seed=42,
                  gradient_checkpointing=a.gradient_checkpointing == "on")
    if a.method in ("grpo", "rloo"):
        trainer = rl_trainer(a.method, rows, model, tok, common)
    else:
        trainer = offline_trainer(a.method, rows, model, tok, common)
    start = time.time()
    out = trainer.train()
    wall = time.time() - start
    print(json.dumps({"s_per_step": out.metrics["train_runtime"] / a.steps, "wall": wall,
                      "num_tokens": max([h["num_tokens"] for h in trainer.state.log_history if "num_tokens" in h],
                                        default=trainer.state.num_input_tokens_seen),
                      "reward": [h.get("reward") for h in trainer.state.log_history if "reward" in h]}))


def rl_trainer(method, rows, model, tok, common):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    from rlft.verifiers.math import math_reward

    data = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"] + INSTRUCTION}],
                               "answer": str(r["answer"])} for r in rows])

    def reward(completions, answer, **_):
        return [float(s or 0.0) for s in math_reward(completions, answer)]

    config, trainer_cls = (GRPOConfig, GRPOTrainer) if method == "grpo" else (RLOOConfig, RLOOTrainer)
    args = config(**common, num_generations=4, max_completion_length=48, learning_rate=2e-5, beta=0.0)
    return trainer_cls(model=model, reward_funcs=[reward], args=args, train_dataset=data, processing_class=tok,
                       peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                              task_type="CAUSAL_LM"))


def offline_trainer(method, rows, model, tok, common):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    def chat(r):  # rlft's data.as_chat: the prompt a user message, the answers assistant messages
        out = {"prompt": [{"role": "user", "content": r["prompt"]}]}
        for key in ("completion", "chosen", "rejected"):
            if key in r:
                out[key] = [{"role": "assistant", "content": r[key]}]
        return out

    data = Dataset.from_list([chat(r) for r in rows])
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    if method == "sft":
        return SFTTrainer(model=model, args=SFTConfig(**common, max_length=128), train_dataset=data,
                          processing_class=tok, peft_config=lora)
    return DPOTrainer(model=model, args=DPOConfig(**common, max_length=128), train_dataset=data,
                      processing_class=tok, peft_config=lora)


if __name__ == "__main__":
    main()
