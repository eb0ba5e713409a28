"""rlft: LLM fine-tuning recipes (SFT, DPO, KTO, GRPO, RLOO, reward model + PPO, distillation) on Hugging Face TRL.

Importing this package must stay cheap: no torch, transformers, trl or datasets here.
"""

__version__ = "0.1.0"
