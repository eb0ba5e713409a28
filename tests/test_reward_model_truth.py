"""Preferences judged by a truth (rlft/reward_model/truth.py, rlft/run/prompt_format.py): eval reads the run's
prompt format, best-of-n picks the reward model's top reply, PPO refuses a reward model near chance against the
truth (exit 3, nothing written), `rlft choose --data PAIRS` recommends DPO first. Tiny model, a few steps each."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from helpers import DATA, signalled_at_once, write_jsonl

from rlft.reward_model.truth import Sampled, agreement, best_of_n, check_agreement

STORE = DATA / "support" / "store"


@pytest.fixture(scope="module")
def store_runs(tmp_path_factory, tiny_dir):
    """A tiny SFT run on the store's demos with data.as_chat=true, a plain-text one, and a reward model."""
    from rlft.cli import main

    root = tmp_path_factory.mktemp("prefs")

    def run(*args):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            assert exc.code == 0, args

    chat, plain, rm = root / "sft-chat", root / "sft-plain", root / "rm"
    common = ("--max-steps", "2", "--batch-size", "4", "--set", "sft.max_length=320",
              "--set", "watch.auto_holdout=false")
    run("sft", "--data", STORE / "demos.jsonl", "-o", chat, "--set", "data.as_chat=true", *common)
    run("sft", "--data", STORE / "demos.jsonl", "-o", plain, *common)
    run("reward", "--pairs", STORE / "pairs_train.jsonl", "-o", rm, "--max-steps", "2", "--batch-size", "4",
        "--set", "reward.max_length=400", "--set", "data.as_chat=true", "--set", "data.max_rows=16",
        "--set", "watch.auto_holdout=false")
    return {"chat": chat, "plain": plain, "rm": rm, "root": root}


def test_eval_reads_the_runs_as_chat(cli, store_runs):
    args = ("-d", STORE / "test.jsonl", "-v", "support_policy", "--limit", "3", "--max-new-tokens", "4")
    r = cli("eval", "-m", store_runs["chat"], *args)
    assert r.code == 0, r.text
    assert "wrapped as chat, as the run trained (data.as_chat=true" in r.err
    assert "prompts are plain strings" not in r.err  # the plain-prompt note would say they were not wrapped
    r = cli("eval", "-m", store_runs["plain"], *args)
    assert r.code == 0 and "as plain text, as the run trained (data.as_chat=false" in r.err, r.text
    r = cli("eval", "-m", store_runs["chat"], *args, "--no-as-chat")  # the flag wins, and then the note is gone
    assert r.code == 0 and "as the run trained" not in r.err and "prompts are plain strings" in r.err, r.text


def test_resolve_as_chat_reads_config_yaml(store_runs, tmp_path):
    from rlft.run.prompt_format import resolve_as_chat

    assert resolve_as_chat(str(store_runs["chat"]), None)[0] is True
    assert resolve_as_chat(str(store_runs["plain"]), None)[0] is False
    assert resolve_as_chat(str(store_runs["plain"]), True) == (True, None)
    assert resolve_as_chat(str(tmp_path), None) == (False, None)  # not a run folder: off, no note


def test_best_of_n_picks_the_reward_models_top_reply():
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    replies = [["a0", "a1", "a2", "a3"], ["b0", "b1", "b2", "b3"]]
    rm = [[0.1, 0.9, 0.5, 2.0], [3.0, -1.0, 0.0, 0.2]]
    truth = [[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]]
    s = Sampled(rows, replies, rm, truth)
    b = best_of_n(s, [2, 4])
    assert [p["reply"] for p in b.picks] == ["a3", "b0"]  # the top reward among all 4
    assert b.truth == {2: 0.5, 4: 0.0}  # n=2: a1 (right) and b0 (wrong); n=4: a3 and b0, both wrong
    assert b.oracle == {2: 1.0, 4: 1.0} and b.first == 0.0
    a = agreement(s)
    # prompt a: right a1 vs wrong a0, a2, a3 -> rm agrees on a0, a2 (2 of 3); prompt b: b0 wrong vs b1-b3 right -> 0
    assert a.pairs == 6 and a.agree == pytest.approx(2 / 6)
    with pytest.raises(Exception) as exc:
        check_agreement(a, 0.6, "runs/rm")
    assert exc.value.exit_code == 3 and "0.333 of 6 pairs" in str(exc.value) and "rlft dpo" in exc.value.fix


def test_eval_best_of_with_a_reward_model(cli, store_runs):
    r = cli("eval", "-m", store_runs["chat"], "-d", STORE / "test.jsonl", "-v", "support_policy", "--limit", "3",
            "--max-new-tokens", "4", "--best-of", "2", "--best-of", "4", "--reward-model", store_runs["rm"], "--json")
    assert r.code == 0, r.text
    out = json.loads(r.out)
    assert {"greedy", "sampled_1", "best_of_2", "best_of_4", "any_of_4", "agreement"} <= set(out)
    assert out["any_of_4"] >= out["best_of_4"] and out["any_of_4"] >= out["any_of_2"]
    r = cli("eval", "-m", store_runs["chat"], "-d", STORE / "test.jsonl", "-v", "support_policy", "--best-of", "4")
    assert r.code == 2 and "--reward-model" in r.err


def test_ppo_refuses_a_reward_model_near_chance(cli, store_runs, tmp_path):
    # a truth that a tiny model's samples split about evenly (odd vs even length): the untrained reward model
    # orders its pairs about as often right as wrong
    truth = tmp_path / "truth.py"
    truth.write_text("def truth(completions, decision, **kw):\n"
                     "    return [float(len(str(c)) % 2) for c in completions]\n")
    out = tmp_path / "ppo"
    r = cli("ppo", "--model", store_runs["chat"], "--reward-model", store_runs["rm"], "--prompts",
            STORE / "test.jsonl", "--holdout", STORE / "test.jsonl", "--holdout-verifier", f"{truth}:truth",
            "--max-steps", "1", "--batch-size", "4", "-o", out, "--set", "data.as_chat=true",
            "--set", "ppo.response_length=6", "--set", "ppo.agreement_prompts=12", "--set",
            "ppo.min_reward_agreement=0.9", "--set", "ppo.verifiers=[]")
    assert r.code == 3, r.text
    assert "agrees with the truth on" in r.err and "chance 0.5" in r.err and "fix:" in r.err
    assert "rlft dpo" in r.err and "min_reward_agreement=0" in r.err
    assert not out.exists()


def test_choose_recommends_dpo_first_on_store_pairs(cli):
    r = cli("choose", "--data", STORE / "pairs_train.jsonl", "--json")
    assert r.code == 0, r.text
    assert json.loads(r.out)["method"] == "dpo"


def test_verify_checks_a_reward_model_against_the_truth(cli, store_runs):
    r = cli("verify", "support_policy", "-d", STORE / "test.jsonl", "--reward-model", store_runs["rm"], "--model",
            store_runs["chat"], "--pairs", STORE / "pairs_eval.jsonl", "--limit", "4", "--samples", "2",
            "--max-new-tokens", "4", "--json")
    assert r.code == 0, r.text
    out = json.loads(r.out.strip().splitlines()[-1])
    assert out["pairs"] == 100 and 0.0 <= out["pair_accuracy"] <= 1.0
    assert out["agreement_prompts"] == 4 and out["agreement_samples"] == 2
    assert 0.0 <= out["pair_accuracy_prompt_swapped"] <= 1.0
    r = cli("verify", "support_policy", "-d", STORE / "test.jsonl", "--reward-model", store_runs["rm"], "--model",
            store_runs["chat"], "--pairs", STORE / "pairs_eval.jsonl", "--limit", "4", "--samples", "2",
            "--max-new-tokens", "4", "--temperature", "0.7")
    assert r.code == 0 and "pair accuracy with each pair's prompt swapped for another's" in r.out, r.text
    r = cli("verify", "support_policy", "-d", STORE / "test.jsonl", "--reward-model", store_runs["rm"], "--model",
            store_runs["chat"], "--temperature", "0")
    assert r.code == 2, r.text
    r = cli("verify", "support_policy", "-d", STORE / "test.jsonl", "--reward-model", store_runs["rm"])
    assert r.code == 2 and "--model POLICY" in r.err


def test_choose_signal_pairs_gives_the_measured_numbers(cli):
    r = cli("choose", "--signal", "pairs", "--rows", "2000")
    assert r.code == 0 and "DPO" in r.out, r.text
    assert "0.340 -> 0.600" in r.out and "+12.7" in r.out and "+21.3" in r.out  # DPO on three stores
    assert "0.340 -> 0.533" in r.out  # reward model + PPO with per-token implicit rewards
    assert "best-of-16" in r.out and "demo-prefs" in r.out and "try DPO first" in r.out


def test_reward_refuses_a_bad_truth_file_before_training(cli, tmp_path):
    bad = write_jsonl(tmp_path / "t.jsonl", [{"prompt": "hi", "decision": "maybe", "policy": {"refund_days": 30}}])
    out = tmp_path / "rm"
    r = cli("reward", "--pairs", STORE / "pairs_train.jsonl", "-o", out, "--max-steps", "1", "--set",
            f"reward.truth_data={bad}", "--set", "reward.truth_verifier=support_policy")
    assert r.code == 2 and "decision" in r.err, r.text
    assert not (out / "metrics.jsonl").exists()


class _RuleScorer:
    """A stand-in reward model: scores each row by `rule(decoded text)` (score() reads `.parameters()` and
    `(input_ids, attention_mask) -> .logits`)."""

    def __init__(self, tok, rule):
        import torch

        self.tok, self.rule, self.w = tok, rule, torch.nn.Parameter(torch.zeros(1))
        self.training = False

    def parameters(self):
        return iter([self.w])

    def eval(self):
        return self

    def __call__(self, input_ids, attention_mask):
        import torch

        texts = [self.tok.decode([t for t, m in zip(row.tolist(), mask.tolist()) if m])
                 for row, mask in zip(input_ids, attention_mask)]
        return SimpleNamespace(logits=torch.tensor([[float(self.rule(t))] for t in texts]))


def test_prompt_swapped_accuracy_tells_a_reader_of_the_prompt_from_a_reader_of_the_wording(tiny_dir):
    from rlft.models import load_tokenizer
    from rlft.reward_model.scoring import ScoredBy, prompt_swapped_accuracy, reads_the_prompt_line

    tok = load_tokenizer(tiny_dir)
    rows = [{"prompt": f"number {i} is", "chosen": " odd" if i % 2 else " even",
             "rejected": " even, sorry" if i % 2 else " odd, sorry"} for i in range(1, 7)]

    def parity(text):  # right when the reply names the parity of the prompt's number
        n = int(text.split()[1])
        return ("odd" if n % 2 else "even") in text.split("is", 1)[1].split(",")[0]

    wording = _RuleScorer(tok, lambda text: "sorry" not in text)
    reader = _RuleScorer(tok, parity)
    assert prompt_swapped_accuracy(ScoredBy(wording, tok), rows) == 1.0  # the wrong prompt changes nothing it reads
    assert prompt_swapped_accuracy(ScoredBy(reader, tok), rows) == 0.0  # each swapped prompt has the other parity
    assert "reads the replies' wording" in reads_the_prompt_line(1.0, 1.0, 6)
    assert "wording" not in reads_the_prompt_line(1.0, 0.0, 6)
    assert prompt_swapped_accuracy(ScoredBy(reader, tok), rows[:1]) is None
    assert prompt_swapped_accuracy(ScoredBy(reader, tok), [dict(rows[0]), dict(rows[0])]) is None


@pytest.mark.parametrize("sets, temperature", [([], 1.0), (["reward.truth_temperature=0.7"], 0.7)])
def test_reward_samples_its_truth_check_at_the_configured_temperature(monkeypatch, sets, temperature):
    """rlft reward's end-of-run agreement samples at reward.truth_temperature (recipes/reward_smollm2.yaml: PPO's
    0.7), so it measures the replies PPO's pre-flight will: at 1.0 the same reward models read 0.65 where PPO's
    0.7 samples read 0.48 (docs/preferences.md)."""
    from rich.console import Console

    from rlft.config import resolve
    from rlft.methods import reward
    from rlft.reward_model import truth

    seen = {}

    def fake(policy, reward_fn, rows, spec, samples, max_new_tokens, temperature=1.0, seed=0):
        seen["temperature"] = temperature
        return truth.agreement(Sampled(rows, [["a", "b"]] * len(rows), [[1.0, 0.0]] * len(rows),
                                       [[1.0, 0.0]] * len(rows)))

    monkeypatch.setattr(truth, "policy_agreement", fake)
    cfg = resolve("reward", None, {}, [f"reward.truth_data={STORE / 'test.jsonl'}", "reward.truth_prompts=4",
                                       *sets])
    out = reward.truth_agreement(cfg, None, Console(quiet=True))
    assert seen["temperature"] == temperature and out["truth_temperature"] == temperature
    assert out["truth_agreement"] == 1.0


def test_an_implicit_reward_model_whose_policy_is_no_better_than_the_start_is_refused(tiny_dir):
    """PPO with per-token implicit rewards goes toward the reward model's own policy, so its pre-flight compares
    that policy's greedy truth with the start's: the start scored as its own reward policy gains nothing (exit 3);
    a reward policy that passes more prompts goes ahead."""
    from rlft.models import load_for_inference
    from rlft.reward_model.truth import PolicyGain, RewardModelRefused, check_policy_gain, policy_gain, truth_rows

    rows = truth_rows(str(STORE / "test.jsonl"), "support_policy", 4, as_chat=False)
    g = policy_gain(str(tiny_dir), load_for_inference(str(tiny_dir)), rows, "support_policy", 8)
    assert g.prompts == 4 and g.reward_policy == g.start
    with pytest.raises(RewardModelRefused) as refused:
        check_policy_gain(g, "RM")
    assert refused.value.exit_code == 3 and "nothing to gain" in str(refused.value)
    check_policy_gain(PolicyGain(150, 0.273, 0.373), "RM")  # +10 points: PPO may start
    # a gain within its noise is refused too (the seed-37 store: 29 prompts gained, 28 lost; PPO then fell to 0.15)
    with pytest.raises(RewardModelRefused) as refused:
        check_policy_gain(PolicyGain(150, 0.353, 0.360, 29, 28), "RM")
    assert refused.value.exit_code == 3 and "29 gained, 28 lost: McNemar z 0.00" in str(refused.value)
    check_policy_gain(PolicyGain(150, 0.320, 0.453, 40, 20), "RM")  # the seed-23 store: z 2.45, PPO gained +16
    assert "0.373 of 150" in PolicyGain(150, 0.273, 0.373).line()


def test_ppo_reuses_what_rlft_reward_measured_only_for_the_same_models_prompts_and_settings(cli, store_runs,
                                                                                             tmp_path, monkeypatch):
    """rlft reward records its end-of-run truth checks beside the weights (rlft.reward_model.measured); PPO's
    pre-flight takes them instead of measuring again only when the reward model, start, truth file and settings
    are the same. The recorded numbers are what the gate reads (a record edited to a loss refuses), and a truth
    file with other bytes, another seed or other weights is measured afresh."""
    from rlft.reward_model.measured import MEASURED, weights_digest

    rm = tmp_path / "irm"
    checks = ("--set", "reward.truth_prompts=3", "--set", "reward.truth_samples=2", "--set",
              "reward.truth_max_new_tokens=4", "--set", "reward.truth_policy_prompts=3", "--set",
              "reward.truth_temperature=0.7")
    r = cli("reward", "--pairs", STORE / "pairs_train.jsonl", "--model", store_runs["chat"], "-o", rm,
            "--max-steps", "2", "--batch-size", "4", "--set", "reward.objective=implicit", "--set",
            "reward.max_length=400", "--set", "data.as_chat=true", "--set", "data.max_rows=8", "--set",
            "watch.auto_holdout=false", "--set", f"reward.truth_data={STORE / 'test.jsonl'}", *checks)
    assert r.code == 0, r.text
    record = json.loads((rm / MEASURED).read_text())
    assert record["reward_model"] == weights_digest(rm) and set(record) >= {"agreement", "gain"}, record
    # rlft reward says at its end whether PPO's gate (rlft.reward_model.truth.check_policy_gain) will refuse it
    from rlft.watch.overfit import START_Z, mcnemar_z

    gain = record["gain"]["value"]
    assert ("rlft ppo with per-token rewards will refuse it" in r.text) == \
        (mcnemar_z(gain["gained"], gain["lost"]) <= START_Z), (gain, r.text)

    def ppo(name, truth=STORE / "test.jsonl", *extra):
        return cli("ppo", "--model", store_runs["chat"], "--reward-model", rm, "--prompts", STORE / "test.jsonl",
                   "--holdout", truth, "--holdout-verifier", "support_policy", "--max-steps", "2", "--batch-size",
                   "4", "-o", tmp_path / name, "--set", "data.as_chat=true", "--set", "ppo.response_length=4",
                   "--set", "ppo.temperature=0.7", "--set", "ppo.agreement_prompts=3", "--set",
                   "ppo.agreement_samples=2", "--set", "watch.holdout_max_rows=3", "--set",
                   "watch.holdout_max_new_tokens=4", "--set", "ppo.verifiers=[]", *extra)

    record["gain"]["value"].update(start=1.0, reward_policy=0.0, gained=0, lost=3)  # edited: a loss on every prompt
    (rm / MEASURED).write_text(json.dumps(record))
    r = ppo("recalled")
    assert r.code == 3 and "as rlft reward measured it" in r.text, r.text
    assert "passes 0.000 of 3 held-out prompts, the start 1.000" in r.err and not (tmp_path / "recalled").exists()
    # the same truth with one more byte: measured afresh (the recorded loss is not read)
    other = tmp_path / "test.jsonl"
    other.write_text((STORE / "test.jsonl").read_text() + "\n")
    r = ppo("fresh", other)
    assert "as rlft reward measured it" not in r.text and "the start 1.000" not in r.text, r.text
    # another seed: the sampled agreement is measured again, the greedy comparison (no seed) is recalled
    r = ppo("seeded", STORE / "test.jsonl", "--set", "train.seed=5")
    assert r.code == 3 and r.text.count("as rlft reward measured it") == 1, r.text
    # --resume needs a checkpoint, so the run passed the pre-flight (or was let past it) when it began: not again
    import signal

    import rlft.run.folder

    with monkeypatch.context() as m:
        m.setattr(rlft.run.folder, "Interrupt", signalled_at_once())
        r = ppo("resumed", STORE / "test.jsonl", "--set", "ppo.min_reward_agreement=0")
    assert r.code == 128 + signal.SIGTERM, r.text
    r = ppo("resumed", STORE / "test.jsonl", "--resume")
    assert r.code == 0 and "as rlft reward measured it" not in r.text, r.text
    # other weights in the folder: nothing recalled
    from safetensors.torch import load_file, save_file

    weights = next(rm.glob("*.safetensors"))
    tensors = load_file(weights)
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] + 1e-3
    save_file(tensors, weights, metadata={"format": "pt"})
    r = ppo("retrained")
    assert r.code in (0, 3) and "as rlft reward measured it" not in r.text and "the start 1.000" not in r.text, r.text
