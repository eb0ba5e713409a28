"""A reward model after `rlft reward` has trained it: how it scores text, and how far its scores can be trusted.

  scoring  one scoring path (`score`, `RewardModelReward`, `pair_accuracy`): the tokenisation the reward model
           trained on, used by PPO, GRPO, best-of-n, `rlft verify` and the held-out check
  truth    the reward model judged by a truth verifier on the policy's own sampled replies: `agreement` (what
           PPO refuses to start without, for a score head), `best_of_n` (the cheapest use of a reward model,
           PPO's baseline), `policy_gain` (an implicit reward model's own policy against the start: PPO's gate
           when it scores per token)
  implicit a DPO-trained model as the reward model: beta * log(pi / pi_ref), per reply or per token
  measured what `rlft reward` measured against the truth at its end, recorded beside the weights with a digest
           of everything it depends on, so PPO's pre-flight takes it instead of measuring it again

Light at import: no module imports torch or transformers at module level.
"""
