"""Reward model: trained through TRL's RewardTrainer and scored through the one path PPO/GRPO use."""

from __future__ import annotations

import json

import pytest
from helpers import DATA, write_jsonl

from rlft.config import resolve
from rlft.data import read_rows


@pytest.mark.parametrize("pairs", ["arith/pairs_train.jsonl", "support/pairs_chat.jsonl"])
def test_scoring_path_tokenizes_exactly_like_reward_trainer(tmp_path, tiny_dir, pairs):
    """What the reward model is trained on (RewardTrainer's own tokenisation, eos appended for plain
    text) must equal what `rlft.reward_model.scoring` feeds it when PPO or GRPO score a completion."""
    from rich.console import Console

    from rlft.methods.reward import build, prepare
    from rlft.reward_model.scoring import reward_input_ids

    rows = read_rows(str(DATA / pairs))[:20]
    cfg = resolve("reward", None, {}, ["train.output_dir=" + str(tmp_path), "reward.max_length=1024"])
    trainer = build(cfg, tmp_path, prepare(cfg, rows, [], Console(quiet=True)))
    tok = trainer.processing_class
    for i, row in enumerate(rows):
        d = row.data
        example = trainer.train_dataset[i]
        assert reward_input_ids(tok, d["prompt"], d["chosen"]) == example["chosen_ids"]
        assert reward_input_ids(tok, d["prompt"], d["rejected"]) == example["rejected_ids"]
    if pairs.startswith("arith"):
        assert trainer.train_dataset[0]["chosen_ids"][-1] == tok.eos_token_id  # the eos the trainer appends


def test_reward_trains_and_reports_pair_accuracy(cli, tmp_path, sft_short):
    out = tmp_path / "rm"
    # 64 pairs seen 20 times: the Bradley-Terry loss must separate them (held-out accuracy is reported;
    # judging sums from 2,000 pairs is beyond this 0.5M-parameter model, see the issue note).
    r = cli("reward", "--pairs", DATA / "arith/pairs_train.jsonl", "--eval-data", DATA / "arith/pairs_eval.jsonl",
            "--model", sft_short, "-o", out, "--max-steps", "40", "--lr", "1e-3", "--batch-size", "32",
            "--set", "data.max_rows=64", "--set", "reward.max_length=32", "--set", "train.logging_steps=10")
    assert r.code == 0, r.text
    final = json.loads((out / "summary.json").read_text())["final_metrics"]
    assert "train pair accuracy" in r.err and "heldout pair accuracy" in r.err
    assert final["train_pair_accuracy"] > 0.9, final
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    accuracies = [m["accuracy"] for m in logged if "accuracy" in m]
    assert accuracies[-1] > accuracies[0] + 0.1, accuracies
    from transformers import AutoModelForSequenceClassification

    assert AutoModelForSequenceClassification.from_pretrained(out).config.num_labels == 1

    # Scored as a GRPO/PPO reward (the same path): chosen beats rejected on the pairs it learned.
    from rlft.reward_model.scoring import RewardModelReward

    rm = RewardModelReward(str(out))
    rows = [json.loads(line) for line in (DATA / "arith/pairs_train.jsonl").read_text().splitlines()][:64]
    good = rm([r["chosen"] for r in rows], prompts=[r["prompt"] for r in rows])
    bad = rm([r["rejected"] for r in rows], prompts=[r["prompt"] for r in rows])
    assert sum(g > b for g, b in zip(good, bad)) / 64 == final["train_pair_accuracy"]
    # the reported held-out accuracy is the one the scoring path gives on all 200 held-out pairs
    rows = [json.loads(line) for line in (DATA / "arith/pairs_eval.jsonl").read_text().splitlines()]
    good = rm([r["chosen"] for r in rows], prompts=[r["prompt"] for r in rows])
    bad = rm([r["rejected"] for r in rows], prompts=[r["prompt"] for r in rows])
    assert len(rows) == 200 and sum(g > b for g, b in zip(good, bad)) / 200 == final["heldout_pair_accuracy"]


def test_a_seeded_reward_run_repeats(cli, tmp_path, tiny_dir):
    """The score head is new weights, drawn while the model loads: from train.seed, so two runs with one seed
    score every pair alike (before, the head came from whatever state the process's RNG was in), and another
    seed gives another model."""
    from rlft.reward_model.scoring import RewardModelReward

    rows = [json.loads(line) for line in (DATA / "arith/pairs_eval.jsonl").read_text().splitlines()][:16]

    def scores(name: str, seed: int) -> list[float]:
        out = tmp_path / name
        r = cli("reward", "--pairs", DATA / "arith/pairs_train.jsonl", "--model", tiny_dir, "-o", out,
                "--max-steps", "3", "--batch-size", "8", "--seed", str(seed), "--set", "data.max_rows=48",
                "--set", "reward.max_length=32", "--set", "watch.auto_holdout=false")
        assert r.code == 0, r.text
        return RewardModelReward(str(out))([r["chosen"] for r in rows], prompts=[r["prompt"] for r in rows])

    first, again, other = scores("a", 1), scores("b", 1), scores("c", 2)
    assert first == again
    assert max(abs(x - y) for x, y in zip(first, other)) > 1e-4


def test_reward_rejects_rows_without_rejected(cli, tmp_path):
    bad = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1=", "chosen": "2"}])
    r = cli("reward", "--pairs", bad, "-o", tmp_path / "o")
    assert r.code == 2 and "p.jsonl:1: field 'rejected': missing" in r.err


def test_lora_reward_run_scores_as_a_reward(cli, tmp_path):
    """A LoRA reward run is an adapter folder: scoring it must give the base a one-output head (a plain
    from_pretrained builds two and refuses the adapter's head) and read the same score batched or alone."""
    from rlft.reward_model.scoring import RewardModelReward, score

    out = tmp_path / "rm-lora"
    r = cli("reward", "--pairs", DATA / "arith/pairs_train.jsonl", "-o", out, "--max-steps", "2", "--lora",
            "--batch-size", "8", "--set", "reward.max_length=32")
    assert r.code == 0, r.text
    assert (out / "adapter_config.json").exists()
    scorer = RewardModelReward(str(out)).load()
    model, tok = scorer.model, scorer.tok
    assert model.config.num_labels == 1
    prompts, answers = ["12+30=", "7+8="], ["42", "15 because seven and eight make fifteen"]
    batched = score(model, tok, prompts, answers)
    alone = [score(model, tok, [p], [a])[0] for p, a in zip(prompts, answers)]
    assert max(abs(b - a) for b, a in zip(batched, alone)) < 1e-5 and batched[0] != batched[1]


def test_an_implicit_reward_model_scores_pairs_as_its_dpo_run_does_and_feeds_ppo(cli, tmp_path, tiny_dir):
    """reward.objective implicit: a DPO run whose folder is a reward model. Its pair accuracy is DPOTrainer's
    own rewards/accuracies on the same pairs, the folder loads as a reward model that scores
    beta * (log pi - log pi_ref), and PPO takes it as --reward-model."""
    from rlft.reward_model.implicit import IMPLICIT_MARKER, ImplicitReward
    from rlft.reward_model.scoring import RewardModelReward

    out = tmp_path / "irm"
    r = cli("reward", "--pairs", DATA / "arith/pairs_train.jsonl", "--eval-data", DATA / "arith/pairs_eval.jsonl",
            "--model", tiny_dir, "-o", out, "--max-steps", "12", "--lr", "1e-3", "--batch-size", "8",
            "--set", "reward.objective=implicit", "--set", "reward.max_length=32", "--set", "data.max_rows=96")
    assert r.code == 0, r.text
    final = json.loads((out / "summary.json").read_text())["final_metrics"]
    marker = json.loads((out / IMPLICIT_MARKER).read_text())
    assert marker["beta"] == 0.1 and marker["reference"] == str(tiny_dir)
    assert final["train_pair_accuracy"] > 0.55, final  # it learned the pairs it saw (0.5: nothing)
    assert abs(final["heldout_pair_accuracy"] - final["eval_rewards/accuracies"]) <= 0.01, final
    rm = RewardModelReward(str(out))
    assert isinstance(rm.load(), ImplicitReward)
    rows = [json.loads(line) for line in (DATA / "arith/pairs_eval.jsonl").read_text().splitlines()]
    good = rm([x["chosen"] for x in rows], prompts=[x["prompt"] for x in rows])
    bad = rm([x["rejected"] for x in rows], prompts=[x["prompt"] for x in rows])
    assert sum(g > b for g, b in zip(good, bad)) / len(rows) == final["heldout_pair_accuracy"]
    # the reference's score is 0: the same reply scored by a reward "model" whose policy is its reference
    ref = ImplicitReward(rm.load().reference, rm.load().tok, 0.1, reference=rm.load().reference)
    assert ref(["42"], prompts=["12+30="]) == [0.0]
    # token by token (what PPO's ppo.token_rewards reads) it sums to the reply's score
    import torch

    from rlft.reward_model.implicit import prompt_and_reply_ids

    scorer = rm.load()
    for prompt, reply in (("12+30=", "42"), ("7+8=", "15 because seven and eight")):
        head, tail = prompt_and_reply_ids(scorer.tok, prompt, reply)
        ids = torch.tensor([head + tail])
        per_token = scorer.token_rewards(ids, torch.ones_like(ids), torch.arange(ids.shape[1])[None], len(tail))
        assert per_token.shape == (1, len(tail)) and float(per_token.abs().sum()) > 0
        assert abs(float(per_token.sum()) - scorer([reply], prompts=[prompt])[0]) < 1e-4
    ppo = cli("ppo", "--model", tiny_dir, "--reward-model", out, "--prompts", DATA / "arith/grpo_prompts.jsonl",
              "-o", tmp_path / "ppo", "--max-steps", "2", "--batch-size", "4", "--set", "ppo.response_length=8",
              "--set", "ppo.num_mini_batches=1", "--set", "watch.auto_holdout=false")
    assert ppo.code == 0, ppo.text
    assert "log-ratio on each sampled token" in ppo.text  # on by default: the tiny model reads its own tokens
    assert json.loads((tmp_path / "ppo" / "summary.json").read_text())["status"] == "completed"
    metrics = [json.loads(line) for line in (tmp_path / "ppo" / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("reward", 0.0) != 0.0 for m in metrics), metrics  # the summed log-ratios, not zeros
    # rlft verify reports, beside the agreement, the reward model's own policy against the start (PPO's pre-flight)
    r = cli("verify", "support_policy", "-d", DATA / "support/store/test.jsonl", "--reward-model", out, "--model",
            tiny_dir, "--limit", "3", "--samples", "2", "--max-new-tokens", "4", "--json")
    assert r.code == 0, r.text
    checked = json.loads(r.out.strip().splitlines()[-1])
    assert checked["gain_prompts"] == 3 and 0.0 <= checked["reward_policy_truth"] <= 1.0, checked
    from rlft.watch.overfit import START_Z, mcnemar_z  # PPO's gate, as rlft ppo's pre-flight applies it

    z = mcnemar_z(checked["gain_prompts_gained"], checked["gain_prompts_lost"])
    assert checked["ppo_gate"] == ("refuses" if z <= START_Z else "passes"), checked
    # asked for with a reward it cannot apply to: one line, exit 2, nothing written
    r = cli("ppo", "--model", tiny_dir, "--verifier", "math", "--reward-model", out, "--prompts",
            DATA / "arith/grpo_prompts.jsonl", "-o", tmp_path / "ppo-refused", "--max-steps", "1", "--set",
            "ppo.token_rewards=true")
    assert r.code == 2 and "ppo.token_rewards" in r.text and not (tmp_path / "ppo-refused").exists(), r.text
    # unset, with a verifier beside it: the reply is scored once (the sum of verifier and reward model)
    r = cli("ppo", "--model", tiny_dir, "--verifier", "math", "--reward-model", out, "--prompts",
            DATA / "arith/grpo_prompts.jsonl", "-o", tmp_path / "ppo-sum", "--max-steps", "1", "--batch-size", "4",
            "--set", "ppo.response_length=6", "--set", "watch.auto_holdout=false")
    assert r.code == 0 and "each sampled token" not in r.text, r.text


def test_an_implicit_lora_reward_model_takes_its_adapters_base_as_reference(cli, tmp_path, tiny_dir):
    from rlft.reward_model.implicit import IMPLICIT_MARKER
    from rlft.reward_model.scoring import RewardModelReward

    out = tmp_path / "irm-lora"
    r = cli("reward", "--pairs", DATA / "arith/pairs_train.jsonl", "--model", tiny_dir, "-o", out, "--lora",
            "--max-steps", "3", "--lr", "5e-3", "--batch-size", "8", "--set", "reward.objective=implicit",
            "--set", "reward.max_length=32", "--set", "data.max_rows=48", "--set", "watch.auto_holdout=false")
    assert r.code == 0, r.text
    assert json.loads((out / IMPLICIT_MARKER).read_text())["reference"] is None
    scorer = RewardModelReward(str(out)).load()
    assert scorer.reference is not None and scorer.reference is not scorer.policy
    scores = scorer(["42", "41 or so"], prompts=["12+30=", "12+30="])
    assert scores[0] != scores[1]


def test_ppo_on_a_bf16_base_says_its_reference_is_not_the_reward_models(cli, tmp_path, tiny_dir):
    """PPO's optimum is the implicit reward model's own policy when the two references are one; on a CPU bf16 base
    PPO's reference (the base, adapter off) is bf16 and the reward model's fp32, and the run says so."""
    import io

    from rich.console import Console

    from rlft.methods.ppo_setup import token_reward
    from rlft.models import load_tokenizer
    from rlft.reward_model.scoring import RewardModelReward

    out = tmp_path / "irm"
    r = cli("reward", "--pairs", DATA / "arith/pairs_train.jsonl", "--model", tiny_dir, "-o", out, "--lora",
            "--max-steps", "2", "--batch-size", "8", "--set", "reward.objective=implicit", "--set",
            "reward.max_length=32", "--set", "data.max_rows=16", "--set", "watch.auto_holdout=false")
    assert r.code == 0, r.text
    said = {}
    for dtype in ("bfloat16", "float32"):
        cfg = resolve("ppo", None, {}, ["model.name_or_path=" + str(tiny_dir), "model.dtype=" + dtype,
                                        "ppo.kl_coef=0.1", "ppo.temperature=1.0"])
        console = Console(file=io.StringIO(), width=200)
        assert token_reward(cfg, RewardModelReward(str(out)), load_tokenizer(str(tiny_dir)), console) is not None
        said[dtype] = console.file.getvalue()
    assert "the reward model's is fp32" in said["bfloat16"], said
    assert "only roughly" not in said["float32"], said


def test_an_implicit_reward_model_takes_the_dpo_recipes_loss(tmp_path, tiny_dir):
    """reward.loss_type / loss_weights reach the implicit objective's DPOTrainer (DPO plus the chosen replies'
    NLL, as recipes/dpo_smollm2.yaml trains its policy), and the loss it computes has that NLL term in it."""
    from rich.console import Console

    from rlft.methods.reward import build, prepare

    rows = read_rows(str(DATA / "arith/pairs_train.jsonl"))[:8]
    sets = ["train.output_dir=" + str(tmp_path), "reward.max_length=32", "model.name_or_path=" + str(tiny_dir),
            "reward.objective=implicit", "train.per_device_train_batch_size=8"]
    losses = {}
    for name, extra in (("dpo", []), ("dpo+nll", ["reward.loss_type=[sigmoid, sft]", "reward.loss_weights=[1, 3]"])):
        cfg = resolve("reward", None, {}, sets + extra)
        trainer = build(cfg, tmp_path / name, prepare(cfg, rows, [], Console(quiet=True)))
        batch = next(iter(trainer.get_train_dataloader()))
        losses[name] = float(trainer.compute_loss(trainer.model, batch))
        if name == "dpo+nll":
            assert list(trainer.args.loss_type) == ["sigmoid", "sft"] and list(trainer.args.loss_weights) == [1, 3]
    # a fresh LoRA-less start is its own reference: DPO's term is ln 2, the NLL term (several nats) adds to it
    assert abs(losses["dpo"] - 0.6931) < 1e-3, losses
    assert losses["dpo+nll"] > losses["dpo"] + 1.0, losses


@pytest.mark.parametrize("sets, says", [
    (["reward.loss_type=[sigmoid, sft]"], "reward.objective=implicit"),
    (["reward.objective=implicit", "reward.loss_type=[sigmoid, sft]", "reward.loss_weights=[1]"],
     "one weight per reward.loss_type entry"),
    (["reward.objective=implicit", "reward.loss_weights=[x]"], "expected a list of numbers"),
])
def test_reward_loss_settings_that_cannot_apply_are_refused_before_anything_is_written(cli, tmp_path, sets, says):
    out = tmp_path / "rm"
    args = ["reward", "--pairs", DATA / "arith/pairs_train.jsonl", "-o", out, "--max-steps", "1"]
    for s in sets:
        args += ["--set", s]
    r = cli(*args)
    assert r.code == 2, r.text
    assert says in " ".join(r.text.split()), r.text
    assert not out.exists()


def test_a_bf16_base_reward_run_measures_its_end_checks_on_the_fp32_weights_ppo_loads(cli, tmp_path, tiny_dir,
                                                                                     monkeypatch):
    """rlft reward's end-of-run pair accuracy and truth checks (what PPO's pre-flight recalls from
    truth_measured.json) read the weights a later stage loads: under a LoRA run on a bf16 base (here asked for with
    train.bf16=true, on any CPU), the fp32 base (rlft.speed.served), not the bf16 one it trained on."""
    import torch

    import rlft.reward_model.scoring as scoring

    seen = []
    original = scoring.pair_accuracy

    def spy(reward, rows):
        seen.append({p.dtype for n, p in reward.policy.named_parameters() if "lora_" not in n})
        return original(reward, rows)

    monkeypatch.setattr(scoring, "pair_accuracy", spy)
    out = tmp_path / "irm"
    r = cli("reward", "--pairs", DATA / "arith/pairs_train.jsonl", "--eval-data", DATA / "arith/pairs_eval.jsonl",
            "--model", tiny_dir, "--lora", "-o", out, "--max-steps", "2", "--batch-size", "8",
            "--set", "reward.objective=implicit", "--set", "reward.max_length=32", "--set", "data.max_rows=32",
            "--set", "train.bf16=true")
    assert r.code == 0, r.text
    assert "bf16 base weights" in r.text, r.text
    assert seen and all(s == {torch.float32} for s in seen), seen
