"""PPO, part 1 of 3: what happens before training: reward, config checks, the reward model's pre-flight, memory
estimate, the networks.

The method is described in rlft/methods/ppo.py (the loop); the rollout and losses are in ppo_rollout.py, the
arithmetic in ppo_math.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console

from rlft.config import RunConfig
from rlft.errors import UserError


def reward_function(cfg: RunConfig) -> Callable:
    """The run's reward: the verifiers, the reward model, or their sum."""
    from rlft.verifiers.loading import build_reward

    return build_reward(list(cfg.ppo.verifiers), cfg.ppo.reward_model)


def check_config(cfg: RunConfig) -> None:
    """What the schema cannot check alone; all before any data or model is read."""
    p, t = cfg.ppo, cfg.train
    if not p.verifiers and not p.reward_model:
        raise UserError("PPO needs a reward: no verifier and no reward model given",
                        "pass --verifier NAME (e.g. math) or --reward-model DIR (trained with rlft reward)")
    if p.temperature <= 0:
        raise UserError(f"ppo.temperature = {p.temperature}: PPO samples from the policy, it must be > 0",
                        "use 1.0 (the policy as it is) or a value such as 0.7")
    split = p.num_mini_batches * t.gradient_accumulation_steps
    if t.per_device_train_batch_size % split:
        raise UserError(f"train.per_device_train_batch_size = {t.per_device_train_batch_size} prompts is not a "
                        f"multiple of ppo.num_mini_batches x train.gradient_accumulation_steps = {split}",
                        "make the batch a multiple of the two (e.g. --batch-size 64 with 4 minibatches)")
    if p.get("token_rewards"):
        from rlft.models import resolve_model_path
        from rlft.reward_model.implicit import is_implicit

        if not p.reward_model or p.verifiers or not is_implicit(resolve_model_path(p.reward_model)):
            raise UserError("ppo.token_rewards scores each token with an implicit reward model's log-ratios; this "
                            "run's reward is " + ("verifiers" if p.verifiers else "a score-head reward model"
                                                  if p.reward_model else "missing"),
                            "train the reward model with --set reward.objective=implicit and pass it alone as "
                            "--reward-model, or drop ppo.token_rewards")
        if not tokens_match(cfg):
            raise UserError(f"ppo.token_rewards: the reward model {p.reward_model} reads other token ids than the "
                            "policy (another vocabulary or chat template)",
                            "drop ppo.token_rewards (the reply is then scored as text, once)")


def tokens_match(cfg: RunConfig) -> bool:
    """Whether the reward model's tokenizer and the policy's give the same ids (tokenizers only: no weights)."""
    from rlft.models import load_tokenizer, resolve_model_path
    from rlft.reward_model.implicit import same_tokens

    return same_tokens(load_tokenizer(resolve_model_path(cfg.ppo.reward_model)),
                       load_tokenizer(resolve_model_path(cfg.model.name_or_path)))


def uses_token_rewards(cfg: RunConfig, scorer, tok=None) -> bool:
    """Whether the run's reward is `scorer`'s per-token log-ratios (ppo.token_rewards; unset: on for an implicit
    reward model alone that reads the policy's tokens, `tok` or the policy's tokenizer loaded here). One answer
    for the pre-flight and the loop."""
    from rlft.models import load_tokenizer, resolve_model_path
    from rlft.reward_model.implicit import ImplicitReward

    wanted = cfg.ppo.get("token_rewards")
    if wanted is False or cfg.ppo.verifiers or not isinstance(scorer, ImplicitReward):
        return False
    return bool(wanted) or scorer.same_tokens_as(tok or load_tokenizer(resolve_model_path(cfg.model.name_or_path)))


def token_reward(cfg: RunConfig, reward_fn: Callable, tok, console: Console):
    """The implicit reward model whose per-token log-ratios are the run's reward (ppo.token_rewards), or None.

    Why per token: PPO with kl_coef = beta against r = beta * log(pi_rm / pi_ref) summed over a reply has pi_rm
    as its optimum (the DPO paper's equivalence; exactly so only with the k1 KL estimate at temperature 1, with
    the reward model's reference as PPO's start, and kl_coef equal to its beta: a line says when one differs);
    put on each sampled token, the advantage of a token carries that token's own log-ratio and not the noise of
    every token before it, so the decision tokens where the reward model's policy differs from the start stand
    out. Unset, it is on for an implicit reward model alone that reads the policy's token ids (same vocabulary
    and chat template); with verifiers beside it the reply is scored once (check_config refuses `true` there)."""
    scorer = reward_fn.load() if hasattr(reward_fn, "load") else None
    if not uses_token_rewards(cfg, scorer, tok):
        from rlft.reward_model.implicit import ImplicitReward

        if isinstance(scorer, ImplicitReward) and cfg.ppo.get("token_rewards") is None and not cfg.ppo.verifiers:
            console.print("reward: the implicit reward model tokenises differently from the policy, so each reply "
                          "is scored once, on its last token", highlight=False)
        return None
    p = cfg.ppo
    console.print("reward: the implicit reward model's log-ratio on each sampled token (ppo.token_rewards)",
                  highlight=False)
    off = [f"kl_coef {p.kl_coef:g} is not its beta {scorer.beta:g}"] if abs(p.kl_coef - scorer.beta) > 1e-9 else []
    off += [f"the KL is estimated at temperature {p.temperature:g}"] if p.temperature != 1.0 else []
    off += ["the KL estimator is k3"] if p.kl_estimator == "k3" else []
    reference = scorer.reference if scorer.reference is not None else scorer.policy
    if str(cfg.model.get("dtype")) == "bfloat16" and str(next(reference.parameters()).dtype) != "torch.bfloat16":
        # the bf16 base's and the fp32 reference's log-probs differ by rounding, so beta * their difference is
        # left in each token's reward (its size not measured alone; the bf16 runs in BENCHMARKS.md "PPO on a bf16
        # base" gained as the fp32 ones did)
        off += ["PPO's reference is the policy's bf16 base, the reward model's is fp32"]
    if off:
        console.print("  note: PPO's optimum is the reward model's own policy only roughly here (" + "; ".join(off)
                      + ")", highlight=False)
    return scorer


def param_counts(cfg: RunConfig) -> dict[str, Any]:
    """Parameter counts of the networks from their configs alone (a `meta` model: no weights are read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlft.models import adapter_base, resolve_model_path, torch_dtype

    m = cfg.model
    path = resolve_model_path(m.name_or_path)
    base = adapter_base(path) or path
    config = AutoConfig.from_pretrained(base, revision=m.revision, trust_remote_code=m.trust_remote_code)
    with torch.device("meta"):
        policy = AutoModelForCausalLM.from_config(config, trust_remote_code=m.trust_remote_code)
    n = sum(p.numel() for p in policy.parameters())
    hidden = policy.get_output_embeddings().weight.shape[1] if policy.get_output_embeddings() is not None else 0
    vocab_head = sum(p.numel() for p in policy.get_output_embeddings().parameters()) \
        if policy.get_output_embeddings() is not None and not config.get_text_config().tie_word_embeddings else 0
    out = {"n_params": n, "value_params": n - vocab_head + hidden,
           "dtype_bytes": 0.5 if m.load_in_4bit else torch.empty(0, dtype=torch_dtype(m.dtype)).element_size(),
           "lora_params": lora_param_count(policy, m.lora) if m.lora.enabled else 0}
    if cfg.ppo.reward_model:
        rpath = resolve_model_path(cfg.ppo.reward_model)
        rconfig = AutoConfig.from_pretrained(adapter_base(rpath) or rpath)
        rconfig.num_labels = 1
        with torch.device("meta"):
            reward = AutoModelForSequenceClassification.from_config(rconfig)
        out["reward_params"] = sum(p.numel() for p in reward.parameters())
        from rlft.reward_model.implicit import is_implicit

        if is_implicit(rpath):  # a DPO-trained reward model scores with two language models: policy and reference
            with torch.device("meta"):
                lm = AutoModelForCausalLM.from_config(rconfig)
            out["reward_params"] = 2 * sum(p.numel() for p in lm.parameters())
        dtype = getattr(rconfig, "dtype", None) or getattr(rconfig, "torch_dtype", None) or torch.float32
        out["reward_dtype_bytes"] = torch.empty(0, dtype=getattr(torch, dtype) if isinstance(dtype, str)
                                                else dtype).element_size()
    return out


def lora_param_count(model, lora_cfg) -> int:
    """Adapter parameters LoRA adds: r * (in + out) per targeted Linear ("all-linear": all but the output
    layer, as peft does)."""
    import torch

    targets = lora_cfg.target_modules
    out_layer = model.get_output_embeddings()
    total = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is out_layer:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if targets == "all-linear" or (isinstance(targets, str) and leaf == targets) or \
                (isinstance(targets, list) and leaf in targets):
            total += lora_cfg.r * (module.in_features + module.out_features)
    return total


def memory_check(cfg: RunConfig, console: Console) -> dict | None:
    """Print the estimated memory of the four networks; refuse (exit 2) above ppo.max_memory_gb."""
    from rlft.methods.ppo_math import estimate_memory, format_memory

    try:
        counts = param_counts(cfg)
    except UserError:
        raise
    except Exception as exc:
        if cfg.ppo.max_memory_gb:
            raise UserError(f"cannot estimate PPO memory ({type(exc).__name__}: {str(exc).splitlines()[0]}), so "
                            f"--max-memory cannot be checked", "drop --max-memory, or make the model's "
                            "config.json readable here") from exc
        console.print(f"[yellow]memory estimate unavailable[/]: {type(exc).__name__}", highlight=False)
        return None
    est = estimate_memory(counts["n_params"], counts["dtype_bytes"], counts["lora_params"],
                          has_reward_model=bool(cfg.ppo.reward_model), reward_params=counts.get("reward_params"),
                          value_params=counts["value_params"], reward_dtype_bytes=counts.get("reward_dtype_bytes"),
                          adam_bytes=4.0 if counts["lora_params"] else max(counts["dtype_bytes"], 1.0))
    console.print(format_memory(est), highlight=False)
    limit = cfg.ppo.max_memory_gb
    if limit and est["total_gb"] > limit:
        raise UserError(f"estimated PPO memory {est['total_gb']:.3g} GB exceeds --max-memory {limit:g} GB "
                        f"(before activations)", "train a LoRA adapter (--lora: no reference copy, no full "
                        "gradients or Adam states), use bf16 weights (--set model.dtype=bfloat16), 4-bit "
                        "(--set model.load_in_4bit=true with --lora), or a smaller model")
    return est


# --------------------------------------------------------------------------- networks


def unwrap_peft(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _no_dropout(model) -> None:
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def build_networks(cfg: RunConfig):
    """(tokenizer, policy, reference or None under LoRA, value model)."""
    import torch

    from rlft.methods.common import load_run_tokenizer
    from rlft.models import load_model

    tok = load_run_tokenizer(cfg)
    policy = load_model(cfg.model)
    lora = cfg.model.lora.enabled
    ref = None if lora else load_model(cfg.model, trainable=False, with_lora=False)
    value = load_model(cfg.model, head="score")
    head = unwrap_peft(value).score
    if hasattr(head, "modules_to_save"):  # LoRA: peft trains a copy of the head
        head = head.modules_to_save["default"]
    with torch.no_grad():  # values start at 0: the first advantages are the (whitened) rewards
        head.weight.zero_()
        if getattr(head, "bias", None) is not None:
            head.bias.zero_()
    for m in (policy, ref, value):
        if m is not None:
            _no_dropout(m)
    checkpointing = cfg.train.gradient_checkpointing
    if checkpointing is None:  # rlft's hardware default (common.hardware_defaults): on GPUs, off on the CPU
        checkpointing = torch.cuda.is_available()
    if checkpointing:
        for m in (policy, value):
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return tok, policy, ref, value


RECALLED = (" (as rlft reward measured it at its end: the same reward model, start model, prompts and settings; "
            "rlft.reward_model.measured)")


def check_reward_model(cfg: RunConfig, console: Console | None) -> None:
    """The reward model against the held-out truth (watch.holdout scored by watch.holdout_verifier) on replies
    sampled from the start policy, the distribution PPO optimises (rlft.reward_model.truth); exit 3 when it is
    near chance (ppo.min_reward_agreement).

    An implicit reward model scored per token (ppo.token_rewards) is judged instead by where PPO goes with it:
    at kl_coef = its beta the optimum is the reward model's own policy, so that policy's greedy truth must beat
    the start's (rlft.reward_model.truth.policy_gain). The agreement is printed either way: it says how well
    the summed reward ranks sampled replies, which per-token credit does not need."""
    from rlft.reward_model import measured
    from rlft.reward_model import truth as t
    from rlft.reward_model.scoring import RewardModelReward
    from rlft.run.folder import process_console

    console = process_console(console)
    spec = cfg.watch.get("holdout_verifier") or "math"
    p, as_chat, holdout = cfg.ppo, bool(cfg.data.get("as_chat")), cfg.watch.holdout
    rows = t.truth_rows(holdout, spec, int(p.get("agreement_prompts") or 32), as_chat)
    samples, temperature, seed = int(p.get("agreement_samples") or 4), float(p.temperature or 1.0), \
        int(cfg.train.seed or 0)
    start = cfg.model.name_or_path
    saved, base = measured.load(p.reward_model), measured.key(start, holdout, spec, as_chat)
    a = measured.rebuilt(t.Agreement, measured.recall(saved, "agreement", measured.narrowed(
        base, prompts=len(rows), samples=samples, tokens=int(p.response_length), temperature=temperature, seed=seed)))
    reward = RewardModelReward(p.reward_model)
    if a is None:
        a = t.policy_agreement(start, reward, rows, spec, samples, int(p.response_length), temperature, seed=seed)
        console.print(a.line(), highlight=False)
    else:
        console.print(a.line() + RECALLED, highlight=False)
    scorer = reward.load()
    if uses_token_rewards(cfg, scorer):
        # on the held-out check's rows (a store's 150 test prompts): 32 prompts read a 10-point gain as a loss
        checked = t.truth_rows(holdout, spec, int(cfg.watch.get("holdout_max_rows") or 100), as_chat)
        tokens = int(cfg.watch.get("holdout_max_new_tokens") or p.response_length)
        g = measured.rebuilt(t.PolicyGain, measured.recall(saved, "gain", measured.narrowed(
            base, prompts=len(checked), tokens=tokens)))
        if g is None:
            g = t.policy_gain(start, scorer.policy, checked, spec, tokens)
            console.print(g.line(), highlight=False)
        else:
            console.print(g.line() + RECALLED, highlight=False)
        t.check_policy_gain(g, p.reward_model)
        return
    t.check_agreement(a, float(p.min_reward_agreement), p.reward_model)
