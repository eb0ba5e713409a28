"""The rlft config schema: sections, fields, defaults, constraints, and the TRL config behind each section.

Data only: rlft/config.py reads it to build the defaults layer and to validate recipes, flags and `--set`.
The alarm thresholds' defaults are read from rlft.alarms.Thresholds, so each number has one source.
A new method adds its name to METHODS, its TRL config class to TRL_CONFIGS, and one section to SCHEMA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlft.alarms import Thresholds

TH = Thresholds()  # the alarm thresholds' defaults: one source, rlft/alarms.py

METHODS = ("sft", "dpo", "grpo", "reward", "ppo", "kto", "rloo", "distill", "bootstrap")
COMMON_SECTIONS = ("model", "data", "train", "watch")
# The TRL config class behind each section; fields not in the rlft schema are checked against these.
TRL_CONFIGS = {
    "train": ("transformers", "TrainingArguments"),
    "sft": ("trl", "SFTConfig"),
    "dpo": ("trl", "DPOConfig"),
    "grpo": ("trl", "GRPOConfig"),
    "reward": ("trl", "RewardConfig"),
    "kto": ("trl", "KTOConfig"),
    "rloo": ("trl", "RLOOConfig"),
    "distill": ("trl", "DistillationConfig"),
    "bootstrap": ("trl", "SFTConfig"),  # each round fine-tunes with SFTTrainer
}


@dataclass(frozen=True)
class Field:
    """One schema field: its kind (for type checks), default, help and constraints."""

    kind: str  # str | int | float | bool | list (of strings) | floats (a list of numbers) | dict | str_or_list | any
    default: Any = None
    help: str = ""
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None  # an exclusive minimum: the value must be > above (a timeout: > 0)
    nullable: bool = True
    rlft_only: bool = False  # read by rlft itself, never passed to the TRL config


# On-policy methods score the tokens they sampled with the policy itself: dropout (LoRA's included) makes those
# log-probs noisy, and on SmolLM2 + LoRA it cost 1.3 s of a 17 s GRPO step (cProfile). TRL's default is False.
DROPOUT_HELP = "dropout off (LoRA's too), so the log-probs of sampled tokens are exact (rlft: true; TRL: false)"

LORA = {
    "enabled": Field("bool", False, "train a LoRA adapter instead of all weights"),
    "r": Field("int", 16, "LoRA rank", minimum=1),
    "alpha": Field("int", 32, "LoRA alpha (scale = alpha / r)", minimum=1),
    "dropout": Field("float", 0.05, "LoRA dropout", minimum=0.0, maximum=1.0),
    "target_modules": Field("str_or_list", "all-linear", "module names, or all-linear"),
}

def _alarm(kind: str, name: str, help: str, **limits: Any) -> Field:
    """An alarm threshold of `watch`: its default is rlft.alarms.Thresholds' (one source for each number)."""
    return Field(kind, getattr(TH, name), help, rlft_only=True, **limits)


def group_rl(num_generations: Field, beta: Field) -> dict[str, Field]:
    """The section of a group-sampling, verifier-rewarded method (GRPO, RLOO: rlft/methods/group_rl.py): the
    same fields, in the same order; only the group size's default and the KL coefficient's note differ."""
    return {
        "verifiers": Field("list", ["math"], "verifier specs: NAME, NAME:WEIGHT, file.py:function",
                           rlft_only=True),
        "reward_model": Field("str", None, "a reward model folder (rlft reward) scored as one more reward",
                              rlft_only=True),
        "num_generations": num_generations,
        "max_completion_length": Field("int", 256, "generation budget per completion", minimum=1),
        "temperature": Field("float", 1.0, "sampling temperature for rollouts", minimum=0.0),
        "beta": beta,
        "disable_dropout": Field("bool", True, DROPOUT_HELP),
        "preflight": Field("bool", True, "probe the model before training; refuse when it cannot learn",
                           rlft_only=True),
        "preflight_prompts": Field("int", 32, "prompts sampled by the pre-flight", minimum=1, rlft_only=True),
        "preflight_max_prompts": Field("int", 128, "pre-flight: prompts it may sample, doubling from "
                                       "preflight_prompts, while the mixed share is within noise of the threshold",
                                       minimum=1, rlft_only=True),
        "min_mixed_fraction": Field("float", 0.1, "pre-flight refuses when the mixed share is clearly below this "
                                    "(its 90% interval's upper bound under it)",
                                    minimum=0.0, maximum=1.0, rlft_only=True),
        "filter_prompts": Field("bool", False, "train only on prompts whose pre-flight group was mixed",
                                rlft_only=True),
        "prompt_sampler": Field("str", "plain", "band: draw the next prompts mostly from those neither always nor "
                                "never solved so far (rlft/methods/prompt_band.py); plain: TRL's shuffled passes (the "
                                "default: band did not beat it on the tiny math runs, bench/band_vs_plain.py)",
                                choices=("band", "plain"), rlft_only=True),
        "skip_zero_advantage": Field("bool", True, "skip the forward and backward of rows whose advantage is 0: "
                                     "the same update, and TRL's entropy and clip metrics cover the rows trained "
                                     "on (rlft/methods/zero_advantage.py)", rlft_only=True),
        "heldout_max_new_tokens": Field("int", None, "generation budget for held-out evaluation "
                                        "(default: max_completion_length)", minimum=1, rlft_only=True),
        # Tools and environments (rlft/tools.py): GRPO only; RLOOTrainer has no tool loop in TRL 1.16
        "tools": Field("str", None, "FILE.py of typed, documented tool functions (TRL's tools=)", rlft_only=True),
        "env": Field("str", None, "FILE.py:Class, TRL's environment_factory contract", rlft_only=True),
        "max_tool_calls": Field("int", 4, "tool-calling rounds per episode (TRL's max_tool_calling_iterations)",
                                minimum=0, rlft_only=True),
        "tool_timeout": Field("float", 5.0, "seconds one tool call may take; past it, the call is killed and "
                              "its result is an error", above=0.0, rlft_only=True),
        "tool_output_chars": Field("int", 2000, "longest tool result (characters); longer is an error result",
                                   minimum=1, rlft_only=True),
    }


SCHEMA: dict[str, dict[str, Any]] = {
    "model": {
        "name_or_path": Field("str", "tiny", "folder, hub id, .gguf file, `tiny` or `smollm2`", nullable=False),
        "dtype": Field("str", "auto", "weights dtype; auto = bf16 on GPUs that have it and for LoRA on CPUs with "
                       "bf16 units (rlft.speed.precision), else fp32",
                       choices=("auto", "float32", "bfloat16", "float16")),
        "revision": Field("str", None, "hub revision (branch, tag or commit)"),
        "trust_remote_code": Field("bool", False, "allow model code from the hub"),
        "load_in_4bit": Field("bool", False, "quantise weights to 4-bit NF4 with bitsandbytes (QLoRA)"),
        "chat_template": Field("str", None, "chatml-tools: rlft's tool-capable ChatML for a ChatML model whose own "
                               "template cannot render tool calls (SmolLM2's); saved with the run (rlft/tools.py)",
                               choices=("chatml-tools",)),
        "lora": LORA,
    },
    "data": {
        "train": Field("list", [], "training file(s) (.jsonl .json .csv .parquet) or hub dataset name(s)"),
        "eval": Field("str", None, "held-out file; else eval_fraction of train is held out"),
        "eval_fraction": Field("float", 0.0, "fraction of train held out when no eval file", minimum=0.0,
                               maximum=0.5),
        "fields": Field("dict", {}, "rename columns: {canonical: column}, e.g. {prompt: question}"),
        "split": Field("str", "train", "split to read from a hub dataset"),
        "max_rows": Field("int", None, "use at most this many training rows", minimum=1),
        "as_chat": Field("bool", False, "wrap plain-string prompts as a user message (chat template applied)"),
    },
    "train": {
        "output_dir": Field("str", None, "run folder; default runs/<method>-<time>"),
        "learning_rate": Field("float", None, "peak learning rate; default: the method's TRL default",
                               minimum=0.0),
        "num_train_epochs": Field("float", 1.0, "epochs over the training data", minimum=0.0),
        "max_steps": Field("int", -1, "stop after this many optimizer steps (-1: use epochs)", minimum=-1),
        "max_minutes": Field("float", None, "end the training loop within this many minutes of its start (held-out "
                             "checks included): completed as at max_steps (rlft/run/time_limit.py)", above=0.0,
                             rlft_only=True),
        "speedups": Field("bool", True, "rlft's CPU speed layer (rlft.speed: sampling copy, prompt sharing, TRL "
                          "patches, model hooks); false runs plain transformers/TRL, for A/B checks (docs/speed.md)",
                          rlft_only=True),
        "per_device_train_batch_size": Field("int", 8, "rows per device per step", minimum=1),
        "gradient_accumulation_steps": Field("int", 1, "micro-batches per optimizer step", minimum=1),
        "seed": Field("int", 42, "random seed"),
        "logging_steps": Field("float", 10, "log every N steps", minimum=0),
        "save_steps": Field("float", 500, "checkpoint every N steps", minimum=0),
        "eval_steps": Field("float", None, "evaluate every N steps (when eval data exists)", minimum=0),
        "report_to": Field("str_or_list", "none", "trackers: none, wandb, tensorboard, ..."),
        "bf16": Field("bool", None, "bf16 mixed precision; default: on where the GPU supports it"),
        "fp16": Field("bool", None, "fp16 mixed precision; default off"),
        "gradient_checkpointing": Field("bool", None, "default: on for GPUs, off on CPU (recomputes each "
                                        "layer's forward in the backward pass)"),
        "save_total_limit": Field("int", 2, "keep at most N checkpoints", minimum=1),
    },
    # How a run is watched (rlft.watch.monitor / rlft.alarms): every method has this section.
    "watch": {
        "on_alarm": Field("str", "warn", "what an alarm does: warn, or stop (after saving a checkpoint)",
                          choices=("warn", "stop"), rlft_only=True),
        "holdout": Field("str", None, "held-out prompts + gold, scored with greedy decoding every "
                         "holdout_every steps (the reward-hacking check)", rlft_only=True),
        "holdout_verifier": Field("str", "math", "verifier for the held-out check", rlft_only=True),
        "holdout_every": Field("int", None, "steps between held-out checks (default: a tenth of the run)",
                               minimum=1, rlft_only=True),
        "auto_holdout_min_steps": Field("int", 20, "runs of fewer max_steps get no automatic held-out check (each "
                                        "check costs about a step; a few steps cannot over-train)", minimum=0,
                                        rlft_only=True),
        "auto_holdout": Field("bool", True, "without watch.holdout: check the method's held-out metric on the eval "
                              "rows, else on a seeded slice of the training rows (false: train on all, unwatched)",
                              rlft_only=True),
        "auto_holdout_fraction": Field("float", 0.05, "share of the training rows the slice takes (at least 50, "
                                       "at most 20% and holdout_max_rows)", minimum=0.0, maximum=0.5,
                                       rlft_only=True),
        "overfit_checks": Field("int", 3, "overfitting alarm: held-out checks in a row below the best by more "
                                "than their noise", minimum=1, rlft_only=True),
        "keep_best": Field("bool", True, "the run folder's model is the best held-out check's (the last in last/)",
                           rlft_only=True),
        "max_passes": Field("float", None, "warn above this many passes over the data (default per method: "
                            "DPO/KTO/reward 3, SFT 10)", minimum=0.0, rlft_only=True),
        "holdout_max_rows": Field("int", 100, "held-out rows scored per check", minimum=1, rlft_only=True),
        "holdout_max_new_tokens": Field("int", 32, "generation budget of the held-out check", minimum=1,
                                        rlft_only=True),
        # Alarm thresholds (rlft/alarms.py explains each): the defaults are read from its Thresholds.
        "zero_signal_frac": _alarm("float", "zero_signal_frac", "zero-signal alarm: share of GRPO groups with "
                                                                "all-equal rewards", minimum=0.0, maximum=1.0),
        "zero_signal_logs": _alarm("int", "zero_signal_logs", "zero-signal alarm: logs in a row at or above "
                                                              "zero_signal_frac", minimum=1),
        "kl_max": _alarm("float", "kl_max", "KL alarm: per-token KL (nats) to the reference", minimum=0.0),
        "kl_jump": _alarm("float", "kl_jump", "KL alarm: jump over the median of the previous logs", minimum=1.0),
        "entropy_min_ratio": _alarm("float", "entropy_min_ratio", "entropy alarm: sampling entropy below this share of "
                                                                  "its start", minimum=0.0, maximum=1.0),
        "entropy_logs": _alarm("int", "entropy_logs", "entropy alarm: logs in a row below "
                                                      "entropy_min_ratio", minimum=1),
        "drift_logs": _alarm("int", "drift_logs", "DPO/KTO drift alarm: logs in the window", minimum=2),
        "drift_min_drop": _alarm("float", "drift_min_drop", "DPO/KTO drift alarm: fall of the chosen log-prob "
                                                            "(nats)", minimum=0.0),
        "hacking_min_rise": _alarm("float", "hacking_min_rise", "reward-hacking alarm: reward rise, in starting "
                                                                "reward_std", minimum=0.0),
        "hacking_max_heldout_gain": _alarm("float", "hacking_max_heldout_gain", "hacking alarms: held-out gain that "
                                                                                "still counts as flat"),
        "hacking_heldout_drop": _alarm("float", "hacking_heldout_drop", "reward-hacking alarm: held-out fall that "
                                                                        "lowers the needed reward rise to a quarter",
                                       minimum=0.0),
        "length_max_ratio": _alarm("float", "length_max_ratio", "length alarm: growth of the mean completion "
                                                                "length", minimum=1.0),
        "repetition_min_rise": _alarm("float", "repetition_min_rise", "length alarm: rise of the completions' "
                                                                      "repetition", minimum=0.0, maximum=1.0),
        "diverge_ratio": _alarm("float", "diverge_ratio", "distill diverging alarm: loss above this multiple of its "
                                                          "best", minimum=1.0),
        "diverge_logs": _alarm("int", "diverge_logs", "distill diverging alarm: logs in a row above "
                                                      "diverge_ratio", minimum=1),
        "ignore": Field("list", [], "alarm names to switch off (nan_loss, zero_signal, kl_blowup, "
                        "entropy_collapse, dpo_drift, kto_drift, distill_diverging, reward_hacking, "
                        "length_hacking)", rlft_only=True),
        "samples": Field("int", 3, "prompts shown (best and worst completion) at each save/eval", minimum=0,
                         rlft_only=True),
    },
    "sft": {
        "max_length": Field("int", 1024, "truncate sequences to this many tokens", minimum=1),
    },
    "dpo": {
        "beta": Field("float", 0.1, "KL strength; the DPO paper's 0.1", minimum=0.0),
        "loss_type": Field("str_or_list", "sigmoid", "sigmoid (DPO), ipo, hinge, ..."),
        "max_length": Field("int", 1024, "truncate prompt+answer to this many tokens", minimum=1),
    },
    "grpo": group_rl(
        Field("int", 8, "completions per prompt (the group size G)", minimum=2),
        Field("float", 0.0, "KL coefficient against the reference (TRL's default 0: no reference)", minimum=0.0)),
    "reward": {
        "max_length": Field("int", 1024, "drop pairs longer than this many tokens", minimum=1),
        # rlft/reward_model/implicit.py: a DPO-trained model as the reward model
        "objective": Field("str", "pairwise", "pairwise: a score head, Bradley-Terry loss (TRL's RewardTrainer); "
                           "implicit: the model trained with DPO's loss, scored by beta * (log pi - log pi_ref)",
                           choices=("pairwise", "implicit"), rlft_only=True),
        "beta": Field("float", 0.1, "objective implicit: DPO's beta (the paper's 0.1)", minimum=0.0, rlft_only=True),
        "loss_type": Field("str_or_list", "sigmoid", "objective implicit: DPOTrainer's loss_type (e.g. [sigmoid, sft]: "
                           "DPO plus the chosen replies' NLL, as recipes/dpo_smollm2.yaml)", rlft_only=True),
        "loss_weights": Field("floats", None, "objective implicit: one weight per loss_type entry", rlft_only=True),
        "reuse_dpo": Field("bool", True, "objective implicit: take the last model of a completed rlft dpo run that "
                           "trained exactly this (same start weights, tokenized pairs, settings, library versions: "
                           "rlft/run/reuse.py) instead of training it again", rlft_only=True),
        # the reward model against a truth on the start model's own sampled replies (rlft/reward_model/truth.py)
        "truth_data": Field("str", None, "held-out prompts + the truth's fields (e.g. a store's test.jsonl): at the "
                            "end, the reward model's agreement with truth_verifier on the start model's samples",
                            rlft_only=True),
        "truth_verifier": Field("str", None, "the truth that scores those samples (e.g. support_policy)",
                                rlft_only=True),
        "truth_prompts": Field("int", 48, "prompts of truth_data sampled", minimum=1, rlft_only=True),
        "truth_samples": Field("int", 4, "replies sampled per prompt", minimum=2, rlft_only=True),
        "truth_max_new_tokens": Field("int", 48, "generation budget per sampled reply", minimum=1, rlft_only=True),
        "truth_policy_prompts": Field("int", 150, "objective implicit: prompts of truth_data on which its own "
                                      "policy's greedy truth is compared with the start's (where PPO with per-token "
                                      "rewards goes)", minimum=1, rlft_only=True),
        "truth_temperature": Field("float", 1.0, "sampling temperature of those replies: the PPO run's "
                                   "ppo.temperature, so this is the number PPO's pre-flight will measure",
                                   above=0.0, rlft_only=True),
    },
    # KTO (rlft/methods/kto.py): TRL's defaults; train.per_device_train_batch_size must be > 1 (the KL estimate)
    "kto": {
        "beta": Field("float", 0.1, "KL strength (TRL's and the KTO paper's 0.1)", minimum=0.0),
        "desirable_weight": Field("float", 1.0, "weight of label-true losses (raise when true rows are rare)",
                                  minimum=0.0),
        "undesirable_weight": Field("float", 1.0, "weight of label-false losses", minimum=0.0),
        "loss_type": Field("str", "kto", "kto, or apo_zero_unpaired", choices=("kto", "apo_zero_unpaired")),
        "max_length": Field("int", 1024, "truncate prompt+completion to this many tokens", minimum=1),
    },
    # RLOO (rlft/methods/rloo.py): GRPO's verifier, gold and pre-flight options; beta 0 (TRL's is 0.05: no reference)
    "rloo": group_rl(
        Field("int", 4, "completions per prompt (k); the baseline is the other k-1", minimum=2),
        Field("float", 0.0, "KL coefficient against the reference (rlft 0: no reference copy)", minimum=0.0)),
    # On-policy distillation (rlft/methods/distill.py): the student samples, the teacher scores every token
    "distill": {
        "teacher_model_name_or_path": Field("str", None, "teacher: folder, hub id or `tiny` (the student's "
                                            "tokenizer; --teacher)"),
        "beta": Field("float", 1.0, "divergence: 0 forward KL, 0.5 JSD, 1 reverse KL (TRL's default)",
                      minimum=0.0, maximum=1.0),
        "temperature": Field("float", 1.0, "sampling and loss temperature", minimum=0.0),
        "disable_dropout": Field("bool", True, DROPOUT_HELP),
        "max_completion_length": Field("int", 512, "generation budget per completion", minimum=1),
        "heldout_verifier": Field("str", "math", "verifier scoring data.eval after training", rlft_only=True),
        "heldout_max_new_tokens": Field("int", None, "held-out generation budget (default: max_completion_length)",
                                        minimum=1, rlft_only=True),
    },
    # Rejection-sampling fine-tuning (rlft/methods/bootstrap.py): sample, keep what the verifiers accept, SFT on it,
    # repeat. Its TRL config is SFTConfig (each round is an SFTTrainer run); the rest is rlft's own.
    "bootstrap": {
        "verifiers": Field("list", ["math"], "verifier specs: NAME, NAME:WEIGHT, file.py:function", rlft_only=True),
        "teacher": Field("str", None, "the model that samples (folder, hub id; its tokenizer must be the "
                         "student's); default: the model being trained, re-sampled each round (expert iteration)",
                         rlft_only=True),
        "samples": Field("int", 8, "completions sampled per prompt per round (N)", minimum=1, rlft_only=True),
        "rounds": Field("int", 2, "rounds of sample -> keep -> fine-tune", minimum=1, rlft_only=True),
        "keep_per_prompt": Field("int", 2, "at most this many distinct accepted completions kept per prompt (M)",
                                 minimum=1, rlft_only=True),
        "threshold": Field("float", 1.0, "a completion is accepted when its reward is >= this (partial credit: the "
                           "best above it are kept first)", rlft_only=True),
        "temperature": Field("float", 0.7, "sampling temperature", minimum=0.0, rlft_only=True),
        "max_new_tokens": Field("int", 256, "generation budget per sampled completion", minimum=1, rlft_only=True),
        "prompts_per_round": Field("int", None, "prompts sampled per round (default: all; each round takes the "
                                   "next ones, wrapping around)", minimum=1, rlft_only=True),
        "sample_batch": Field("int", 64, "completions decoded together (a multiple of samples is best: each "
                              "prompt is prefilled once for its N rows)", minimum=1, rlft_only=True),
        "max_length": Field("int", 1024, "truncate training sequences to this many tokens", minimum=1),
        "preflight": Field("bool", True, "probe the pass rate at the run's temperature first; refuse (exit 3) "
                           "when no sample is accepted", rlft_only=True),
        "preflight_prompts": Field("int", 16, "prompts sampled by the pre-flight", minimum=1, rlft_only=True),
        "heldout_max_new_tokens": Field("int", None, "generation budget for held-out checks (default: "
                                        "max_new_tokens)", minimum=1, rlft_only=True),
        "tools": Field("str", None, "not supported by bootstrap (refused with one line): use rlft grpo --tools",
                       rlft_only=True),
        "env": Field("str", None, "not supported by bootstrap (refused with one line): use rlft grpo --env",
                     rlft_only=True),
    },
    # rlft's own PPO (rlft/methods/ppo.py): no TRL config behind it, so every field is listed here. Names and
    # defaults follow the old TRL PPOConfig where it had the knob; the batch is train.per_device_train_batch_size
    # prompts per process, one response each.
    "ppo": {
        "verifiers": Field("list", [], "reward: verifier specs (NAME, NAME:WEIGHT, file.py:function)"),
        "reward_model": Field("str", None, "reward: a reward model folder (rlft reward); summed with verifiers"),
        "kl_coef": Field("float", 0.05, "beta of the per-token KL penalty: R' = R - beta * log(pi/pi_ref)",
                         minimum=0.0),
        "kl_estimator": Field("str", "k1", "per-token KL estimate: k1 = log(pi/pi_ref), k3 = r - 1 - log r",
                              choices=("k1", "k3")),
        "cliprange": Field("float", 0.2, "policy ratio clip: ratio kept in [1 - c, 1 + c] (the PPO paper's 0.2)",
                           minimum=0.0),
        "cliprange_value": Field("float", 0.2, "value clip: new values kept within +- c of the rollout's",
                                 minimum=0.0),
        "vf_coef": Field("float", 0.1, "weight of the value loss in the total loss", minimum=0.0),
        "gamma": Field("float", 1.0, "discount per token (1.0: no discount within a response)", minimum=0.0,
                       maximum=1.0),
        "lam": Field("float", 0.95, "GAE lambda (bias/variance trade-off of the advantages)", minimum=0.0,
                     maximum=1.0),
        "num_ppo_epochs": Field("int", 4, "passes over each rollout batch", minimum=1),
        "num_mini_batches": Field("int", 1, "minibatches (optimizer steps) per pass", minimum=1),
        "response_length": Field("int", 64, "generation budget per response (tokens)", minimum=1),
        "temperature": Field("float", 1.0, "sampling temperature of the rollouts (> 0)", minimum=0.0),
        "missing_eos_penalty": Field("float", 1.0, "subtracted from the score of a response that never emits "
                                     "eos (0: no penalty)"),
        "whiten_rewards": Field("bool", False, "rescale per-token rewards to unit variance before GAE"),
        "token_rewards": Field("bool", None, "an implicit reward model (rlft reward, reward.objective implicit) "
                               "scores each sampled token, beta * log(pi_rm / pi_ref), instead of the whole reply "
                               "on its last token; default: on for such a model with the policy's tokenizer"),
        "forward_batch_size": Field("int", 64, "rows per generation / reference / value pass in the rollout",
                                    minimum=1),
        "max_memory_gb": Field("float", None, "refuse the run when the 4 networks' estimated memory exceeds "
                               "this (GB)", minimum=0.0),
        "heldout_max_new_tokens": Field("int", None, "generation budget of the held-out check (default: "
                                        "response_length)", minimum=1),
        # with a reward model and a held-out truth (watch.holdout + watch.holdout_verifier): rlft/reward_model/truth.py
        "min_reward_agreement": Field("float", 0.6, "refuse to start (exit 3) when the reward model orders fewer "
                                      "of the truth's pairs of the start policy's sampled replies right (0.5 is "
                                      "chance); an implicit reward model scored per token is gated instead by "
                                      "its own policy's greedy truth against the start's; 0 turns both checks "
                                      "off", minimum=0.0, maximum=1.0),
        "agreement_prompts": Field("int", 32, "held-out prompts sampled for that check", minimum=1),
        "agreement_samples": Field("int", 4, "replies sampled per prompt for that check", minimum=2),
    },
}
