"""Reward model training with TRL's RewardTrainer (Bradley-Terry loss on preference pairs), or, with
`reward.objective: implicit`, with TRL's DPOTrainer: the trained language model is then the reward model,
scored by DPO's implicit reward beta * (log pi - log pi_ref) (rlft.reward_model.implicit, which says why).

The pairwise model is the start checkpoint with a one-output score head (AutoModelForSequenceClassification,
num_labels=1). After training, held-out pair accuracy (chosen scored above rejected) is measured through
`rlft.reward_model.scoring.score` (an implicit one through ImplicitReward), the same functions PPO and GRPO
use to score completions, so the number reported is the accuracy those consumers get; and again with each
pair's prompt swapped for another's, which shows whether the reward model reads the prompt at all
(rlft.reward_model.scoring.prompt_swapped_accuracy).
With `reward.truth_data` (prompts + a truth's fields) and `reward.truth_verifier`, the end also reports the
reward model's agreement with that truth on replies sampled from the start model (rlft.reward_model.truth):
what PPO will optimise, not what the pairs hold.
"""

from __future__ import annotations

from pathlib import Path

from rlft.config import RunConfig
from rlft.methods.common import Prepared, build_trl_config, clamp_max_length, dpo_trainer, load_run_tokenizer

KIND = "pairs"
COLUMNS = ("prompt", "chosen", "rejected")
START_IS_A_MODEL = False  # the starting score head is untrained: a run never keeps its start (rlft.watch.overfit)


PAIR_ACCURACY_ROWS = 200  # training pairs scored after training (train_pair_accuracy)


def implicit_loss(cfg: RunConfig) -> tuple[list[str], list[float] | None]:
    """(reward.loss_type as a list, reward.loss_weights): the implicit objective's DPOTrainer loss."""
    loss_type = cfg.reward.get("loss_type") or "sigmoid"
    return [loss_type] if isinstance(loss_type, str) else list(loss_type), cfg.reward.get("loss_weights")


def check_loss(cfg: RunConfig) -> None:
    """reward.loss_type / loss_weights belong to the implicit objective, one weight per loss."""
    from rlft.errors import UserError

    losses, weights = implicit_loss(cfg)
    if not implicit(cfg) and (losses != ["sigmoid"] or weights is not None):
        raise UserError("reward.loss_type and reward.loss_weights shape the implicit objective's DPO loss; a "
                        "pairwise reward model (a score head) has one loss",
                        "add --set reward.objective=implicit, or drop reward.loss_type/loss_weights")
    if weights is not None and len(weights) != len(losses):
        raise UserError(f"reward.loss_weights has {len(weights)} weights for {len(losses)} losses ({losses})",
                        "give one weight per reward.loss_type entry")


def prepare(cfg: RunConfig, train_rows, eval_rows, console) -> Prepared:
    check_loss(cfg)
    if cfg.reward.get("truth_data"):  # read and check the truth rows now, not after training
        from rlft.reward_model.truth import truth_rows
        from rlft.verifiers.loading import load_verifiers

        spec = cfg.reward.get("truth_verifier") or "support_policy"
        load_verifiers([spec])
        truth_rows(cfg.reward["truth_data"], spec, int(cfg.reward.get("truth_prompts") or 48), False)
    return Prepared(train_rows, eval_rows, tok=load_run_tokenizer(cfg))


def implicit(cfg: RunConfig) -> bool:
    """reward.objective implicit: DPO's loss, DPO's implicit reward (rlft.reward_model.implicit)."""
    return cfg.reward.get("objective") == "implicit"


def build(cfg: RunConfig, out: Path, prepared: Prepared):
    from rlft.data.table import to_dataset
    from rlft.models import load_model

    if implicit(cfg):
        return build_implicit(cfg, out, prepared)
    from trl import RewardConfig, RewardTrainer

    model = load_model(cfg.model, head="score")
    args = build_trl_config(cfg, RewardConfig, out, bool(prepared.eval_rows),
                            max_length=clamp_max_length(cfg.reward.max_length, model))
    return RewardTrainer(model=model, args=args, processing_class=prepared.tok,
                         train_dataset=to_dataset(prepared.train_rows, COLUMNS),
                         eval_dataset=to_dataset(prepared.eval_rows, COLUMNS) if prepared.eval_rows else None)


def build_implicit(cfg: RunConfig, out: Path, prepared: Prepared):
    """rlft dpo's trainer (reward.loss_type, default DPO's sigmoid, at reward.beta; the start model as reference:
    under LoRA the policy with its adapter disabled). An NLL term (`[sigmoid, sft]`) trains the model the reward
    is read from as recipes/dpo_smollm2.yaml trains its policy; the reward stays beta * log(pi / pi_ref)."""
    losses, weights = implicit_loss(cfg)  # weights: already floats (the schema's `floats` kind)
    overrides: dict = {"loss_type": losses, **({"loss_weights": weights} if weights is not None else {})}
    return dpo_trainer(cfg, out, prepared, cfg.reward.max_length, COLUMNS, beta=float(cfg.reward.beta),
                       **overrides)


def reused(cfg: RunConfig, trainer, console) -> dict | None:
    """Objective implicit: the model of a completed rlft dpo run that trained exactly this (rlft.run.reuse), put
    into `trainer`'s model instead of training; None (train) otherwise or with reward.reuse_dpo=false."""
    if not implicit(cfg) or not cfg.reward.get("reuse_dpo", True):
        return None
    from rlft.run.reuse import load_adapter, lookup, training_key

    found = lookup(training_key(cfg, trainer))
    if found is None:
        return None
    load_adapter(trainer.model, found["folder"])
    console.print(f"reward: rlft dpo already trained this model (same start, pairs and settings: {found['run']}); "
                  f"its last model is this reward model, not trained again (--set reward.reuse_dpo=false trains)",
                  highlight=False)
    return {"run": found["run"], "folder": str(found["folder"]), "steps": found["steps"]}


def scorer_of(cfg: RunConfig, trainer):
    """The trained reward model in memory as a reward function (completions, prompts=...) -> scores."""
    if implicit(cfg):
        from rlft.reward_model.implicit import ImplicitReward

        return ImplicitReward(trainer.model, trainer.processing_class, float(cfg.reward.beta),
                              reference=None if cfg.model.lora.enabled else trainer.ref_model)
    from rlft.reward_model.scoring import ScoredBy

    return ScoredBy(trainer.model, trainer.processing_class)


def after(cfg: RunConfig, trainer, prepared: Prepared, console) -> dict:
    """Pair accuracy (chosen scored above rejected) on the first training pairs and on the held-out pairs, and the
    truth checks (`truth_agreement`), all on the weights a later stage loads; an implicit reward model also gets its
    marker (rlft.reward_model.implicit), which makes the folder load as one."""
    out: dict = {}
    if implicit(cfg):
        from rlft.models import resolve_model_path
        from rlft.reward_model.implicit import write_marker

        # under LoRA the reference is the adapter's base (what the run folder's adapter names); else the start
        write_marker(Path(trainer.args.output_dir), float(cfg.reward.beta),
                     None if cfg.model.lora.enabled else resolve_model_path(cfg.model.name_or_path))
    from rlft import speed

    # measured on the weights PPO, eval and verify load (rlft.speed.served: the fp32 base of a bf16-base run)
    with speed.served_weights(trainer.model):
        return _measured(cfg, trainer, prepared, console, out)


def _measured(cfg: RunConfig, trainer, prepared: Prepared, console, out: dict) -> dict:
    from rlft.reward_model.scoring import pair_accuracy

    reward = scorer_of(cfg, trainer)
    for key, rows in (("train_pair_accuracy", prepared.train_rows[:PAIR_ACCURACY_ROWS]),
                      ("heldout_pair_accuracy", prepared.eval_rows)):
        if rows:
            out[key] = pair_accuracy(reward, [r.data for r in rows])
            console.print(f"{key.replace('_', ' ')}: [bold]{out[key]:.3f}[/] on {len(rows)} pairs")
    if prepared.eval_rows and "heldout_pair_accuracy" in out:
        from rlft.reward_model.scoring import prompt_swapped_accuracy, reads_the_prompt_line

        held = [r.data for r in prepared.eval_rows]
        swapped = prompt_swapped_accuracy(reward, held)
        if swapped is not None:
            out["heldout_pair_accuracy_prompt_swapped"] = swapped
            console.print(reads_the_prompt_line(out["heldout_pair_accuracy"], swapped, len(held)),
                          highlight=False)
    if cfg.reward.get("truth_data"):
        folder = Path(trainer.args.output_dir)
        out.update(truth_agreement(cfg, reward, console, folder if trainer.is_world_process_zero() else None))
    return out


def truth_agreement(cfg: RunConfig, reward, console, folder: Path | None = None) -> dict:
    """reward.truth_data: the reward model against the truth on the start model's own sampled replies
    (rlft.reward_model.truth), the distribution PPO will see: pair accuracy alone does not show it. Recorded in
    `folder` with what each number depends on, for rlft ppo's pre-flight (rlft.reward_model.measured)."""
    from rlft.reward_model import measured
    from rlft.reward_model.truth import policy_agreement, truth_rows

    sec = cfg.reward
    spec, as_chat = sec.get("truth_verifier") or "support_policy", bool(cfg.data.get("as_chat"))
    rows = truth_rows(sec["truth_data"], spec, int(sec.get("truth_prompts") or 48), as_chat)
    temperature = float(sec.get("truth_temperature") or 1.0)
    tokens, samples, seed = int(sec.get("truth_max_new_tokens") or 48), int(sec.get("truth_samples") or 4), \
        int(cfg.train.seed or 0)
    a = policy_agreement(cfg.model.name_or_path, reward, rows, spec, samples, tokens, temperature=temperature,
                         seed=seed)
    console.print(a.line(), highlight=False)
    out = {**{f"truth_{k}": v for k, v in a.as_dict().items()}, "truth_temperature": temperature}
    base = measured.key(cfg.model.name_or_path, sec["truth_data"], spec, as_chat)
    entries = {"agreement": (measured.narrowed(base, prompts=len(rows), samples=samples, tokens=tokens,
                                               temperature=temperature, seed=seed), measured.value_of(a))}
    if implicit(cfg):  # where PPO with per-token rewards goes: this model's own policy (rlft ppo's pre-flight)
        from rlft.reward_model.truth import policy_gain, ppo_refusal, refusal_note

        rows = truth_rows(sec["truth_data"], spec, int(sec.get("truth_policy_prompts") or 150), as_chat)
        g = policy_gain(cfg.model.name_or_path, reward.policy, rows, spec, tokens)
        console.print(g.line(), highlight=False)
        why = ppo_refusal(g, str(folder or "this reward model"))
        if why:  # said now, not after PPO's model loads
            console.print(refusal_note(why), highlight=False)
        out.update({f"truth_{k}": v for k, v in g.as_dict().items()})
        entries["gain"] = (measured.narrowed(base, prompts=len(rows), tokens=tokens), measured.value_of(g))
    if folder is not None:  # the model measured: the folder's, or last/ where the folder kept an earlier check's
        measured.record(folder, folder / "last" if (folder / "last").is_dir() else folder, entries)
    return out
