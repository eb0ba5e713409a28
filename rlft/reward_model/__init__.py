"""A reward model after `rlft reward` has trained it: how it scores text, and how far its scores can be trusted.

  scoring  one scoring path (`score`, `RewardModelReward`, `pair_accuracy`): the tokenisation the reward model
           trained on, used by PPO, GRPO, best-of-n, `rlft verify` and the held-out check
  truth    the reward model judged by a truth verifier on the policy's own sampled replies: `agreement` (what
           PPO refuses to start without), `best_of_n` (the cheapest use of a reward model, PPO's baseline)

Light at import: neither module imports torch or transformers at module level.
"""
