"""rlft.dspy on the tiny model: the engine answers DSPy, finetune is an rlft run, the ReinforceJob's GRPO step."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

dspy = pytest.importorskip("dspy")

GROUP_PROMPT = [{"role": "user", "content": "Say yes or no."}]


def _group(rewards, completions=("yes", "no")):
    return [{"messages": GROUP_PROMPT, "completion": {"role": "assistant", "content": c}, "reward": r}
            for c, r in zip(completions, rewards)]


def _logps(job, completion: str) -> float:
    import torch

    from rlft.dspy.scoring import completion_logps

    p, c = job.render({"messages": GROUP_PROMPT, "completion": {"content": completion}})
    with torch.no_grad():
        logps, mask = completion_logps(job.model, [p], [c], job.tok.pad_token_id)
    return float((logps * mask).sum())


def _lora(job):
    return {k: v.detach().clone() for k, v in job.model.state_dict().items() if "lora_" in k}


@pytest.fixture
def job(tmp_path, tiny_dir):
    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", lora=True, learning_rate=5e-3, output_dir=str(tmp_path / "grpo"),
                            groups_per_step=1)
    j = lm.reinforce(train_kwargs={"num_generations": 2})
    yield j
    j._restore()


def test_completion_logps_over_shared_prompts_equal_one_whole_forward(job):
    """Each distinct prompt run once (its cache repeated for its rows) gives the log-probs and the LoRA gradients
    of one forward over every row's left-padded prompt + right-padded completion (the layout TRL scores)."""
    import torch

    from rlft.dspy.scoring import completion_logps

    tok, model = job.tok, job.model
    with torch.no_grad():  # a non-zero adapter, so the gradients reach every LoRA matrix
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    long_prompt = GROUP_PROMPT + [{"role": "assistant", "content": "maybe"}, {"role": "user", "content": "again?"}]
    pairs = [job.render({"messages": m, "completion": {"content": c}})
             for m, c in [(GROUP_PROMPT, "yes"), (long_prompt, "no no no"), (GROUP_PROMPT, "a longer answer"),
                          (long_prompt, "y")]]
    prompts, completions = [p for p, _ in pairs], [c for _, c in pairs]
    assert len({tuple(p) for p in prompts}) == 2 and len({len(p) for p in prompts}) == 2
    pad = tok.pad_token_id
    plen, clen = max(map(len, prompts)), max(map(len, completions))
    ids = torch.tensor([[pad] * (plen - len(p)) + p + c + [pad] * (clen - len(c)) for p, c in pairs])
    att = torch.tensor([[0] * (plen - len(p)) + [1] * (len(p) + len(c)) + [0] * (clen - len(c)) for p, c in pairs])
    model.eval()  # LoRA dropout off: both passes see the same weights
    params = [p for p in model.parameters() if p.requires_grad]
    logits = model(input_ids=ids, attention_mask=att).logits[:, plen - 1:-1].float()
    whole = torch.log_softmax(logits, -1).gather(-1, ids[:, plen:].unsqueeze(-1)).squeeze(-1)
    mask = att[:, plen:].float()
    whole_grads = torch.autograd.grad((whole * mask).sum(), params)
    shared, shared_mask = completion_logps(model, prompts, completions, pad)
    shared_grads = torch.autograd.grad((shared * shared_mask).sum(), params)
    assert torch.equal(shared_mask, mask)
    assert torch.allclose(shared * mask, whole * mask, atol=1e-4), float(((shared - whole) * mask).abs().max().detach())
    a = torch.cat([g.flatten() for g in shared_grads])
    b = torch.cat([g.flatten() for g in whole_grads])
    # the base is bf16 where the CPU has bf16 units (rlft.speed.precision): the two layouts round differently
    assert float(b.norm()) > 0 and float((a - b).norm() / b.norm()) < 5e-3, float((a - b).norm() / b.norm())
    assert float(torch.nn.functional.cosine_similarity(a, b, dim=0)) > 0.9999


def test_completion_logps_under_gradient_checkpointing_is_the_whole_forward(job):
    """Checkpointing turns the KV cache off in training: the step falls back to one whole forward (it crashed on
    the missing cache) and its gradients still reach the adapter."""
    import torch

    from rlft.dspy.scoring import completion_logps

    model = job.model
    pairs = [job.render({"messages": GROUP_PROMPT, "completion": {"content": c}}) for c in ("yes", "no no")]
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        model.train()
        logps, mask = completion_logps(model, [p for p, _ in pairs], [c for _, c in pairs], job.tok.pad_token_id)
        (logps * mask).sum().backward()
    finally:
        model.gradient_checkpointing_disable()
        model.eval()
    assert logps.shape == mask.shape == (2, max(len(c) for _, c in pairs))
    assert bool(torch.isfinite(logps).all())
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n and p.grad is not None]
    assert grads and sum(float(g.abs().sum()) for g in grads) > 0
    model.zero_grad(set_to_none=True)


def test_choice_scores_over_a_shared_prompt_equal_each_pair_scored_whole(job):
    """Guided choice runs each prompt once and its values over the prompt's KV cache (choice_logps): the same
    summed log-probs as every (prompt, value) pair scored whole, on the LoRA policy, with prompts of unequal
    length and values of unequal length."""
    import torch

    from rlft.dspy.scoring import choice_logps, completion_logps

    tok = job.tok
    prompts = [tok("ticket: charged twice " * k)["input_ids"] for k in (1, 4, 2)]
    values = [[tok(v)["input_ids"] for v in ("billing", "a shipping issue", "bug")]] * 2 + [[tok("yes")["input_ids"]]]
    with torch.no_grad():
        shared = choice_logps(job.model, prompts, values, tok.pad_token_id)
        pairs = [(p, v) for p, vs in zip(prompts, values) for v in vs]
        logps, mask = completion_logps(job.model, [p for p, _ in pairs], [v for _, v in pairs], tok.pad_token_id)
    whole = (logps * mask).sum(-1).tolist()
    assert [len(r) for r in shared] == [3, 3, 1]
    # equal up to matmul rounding: with bf16 matmuls (a CPU with avx512_bf16) other shapes round apart by ~1e-4 of
    # the sum; a wrong cache position or gap moves a score by whole nats
    assert [x for r in shared for x in r] == pytest.approx(whole, rel=1e-3, abs=1e-4)
    assert len(set(round(x, 3) for x in whole)) > 3  # the values do score differently


def test_choice_scores_over_a_common_head_equal_each_pair_scored_whole(job):
    """Prompts that share a long head (DSPy's system message) run it once and only their tails on its cache: the
    same summed log-probs as every (prompt, value) pair scored whole, with tails of unequal length and one prompt
    that is the head plus a single token."""
    import torch

    from rlft.dspy import scoring
    from rlft.dspy.scoring import choice_logps, completion_logps

    tok = job.tok
    head = tok("Your input fields are: ticket. Your output fields are: label, one of billing, bug, account, "
               "shipping. Answer with the label only, exactly as written, and nothing else at all. " * 2)["input_ids"]
    assert len(head) >= scoring.MIN_COMMON
    tails = [tok(t)["input_ids"] for t in ("ticket: charged twice for my order", "ticket: app crashes", "?")]
    prompts = [head + t for t in tails] + [head + tails[1][:1]]
    assert len(head) <= scoring._common_prefix(prompts) < min(map(len, prompts))
    values = [[tok(v)["input_ids"] for v in ("billing", "a shipping issue", "bug")]] * 4
    calls = []
    with torch.no_grad():
        hook = job.model.register_forward_pre_hook(lambda m, a, kw: calls.append(kw["input_ids"].shape),
                                                    with_kwargs=True)
        try:
            shared = choice_logps(job.model, prompts, values, tok.pad_token_id)
        finally:
            hook.remove()
        pairs = [(p, v) for p, vs in zip(prompts, values) for v in vs]
        logps, mask = completion_logps(job.model, [p for p, _ in pairs], [v for _, v in pairs], tok.pad_token_id)
    whole = (logps * mask).sum(-1).tolist()
    assert calls[0][0] == 1 and calls[0][1] >= scoring.MIN_COMMON  # the head ran once, on one row
    # equal up to matmul rounding: with bf16 matmuls (a CPU with avx512_bf16) other shapes round apart by ~1e-4 of
    # the sum; a wrong cache position or gap moves a score by whole nats
    assert [x for r in shared for x in r] == pytest.approx(whole, rel=1e-3, abs=1e-4)
    assert len(set(round(x, 3) for x in whole)) > 3


def test_engine_answers_a_predict_and_batches_threads(tiny_dir):
    import rlft.dspy
    from rlft.dspy.config import shared_engine

    lm = rlft.dspy.local_lm("tiny", max_tokens=8)
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        first = predict(question="What is 2 + 2?")
        again = predict(question="What is 2 + 2?")
    assert isinstance(first.answer, str) and first.answer == again.answer  # greedy: the same answer twice
    out = lm.history[-1]["outputs"][0]
    assert out.startswith("[[ ## answer ## ]]\n")  # the ChatAdapter's first field, started by the engine
    engine = shared_engine()
    before = len(engine.batches)
    results = [None] * 6

    def ask(i):
        with dspy.context(lm=lm):
            results[i] = predict(question=f"What is {i} + 1?").answer

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, str) for r in results)
    assert max(engine.batches[before:]) >= 2, engine.batches[before:]  # arrivals together: one generate


def test_engine_takes_temperature_and_max_tokens_from_the_request(tiny_dir):
    from dspy.lm15 import Config, Message, Request

    from rlft.dspy.config import shared_engine

    engine = shared_engine()
    short = engine.complete(Request(model="tiny", messages=(Message.user("hello"),), config=Config(max_tokens=3)))
    assert short.usage.output_tokens <= 3
    hot = [engine.complete(Request(model="tiny", messages=(Message.user("hello"),),
                                   config=Config(max_tokens=12, temperature=2.0))).text for _ in range(4)]
    assert len(set(hot)) > 1  # sampled, not greedy


def test_bad_model_and_bad_key_fail_in_one_line(tmp_path):
    import rlft.dspy
    from rlft.errors import UserError

    with pytest.raises(UserError, match="not a folder here"):
        rlft.dspy.local_lm(str(tmp_path / "nope"))
    with pytest.raises(UserError, match="unknown rlft.dspy train_kwargs key 'lr'"):
        rlft.dspy.local_lm("tiny", lr=1e-4)


def test_finetune_is_an_rlft_run_whose_id_loads(tmp_path, tiny_dir, cli):
    import rlft.dspy
    from rlft.dspy.provider import RlftProvider
    from rlft.models import load_for_inference

    rows = [{"messages": [{"role": "user", "content": f"{i} + 1?"}, {"role": "assistant", "content": str(i + 1)}]}
            for i in range(12)]
    out = tmp_path / "ft"
    model_id = RlftProvider.finetune(None, "tiny", rows, "chat", {"output_dir": str(out), "max_steps": 2})
    assert model_id == str(out.resolve())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert (out / "config.yaml").is_file() and (out / "metrics.jsonl").is_file()
    assert (tmp_path / "ft.train.jsonl").read_text().count("\n") == 12
    load_for_inference(model_id)  # what rlft eval / chat load
    merged = cli("merge", model_id, "-o", tmp_path / "merged")
    assert merged.code == 0 and (tmp_path / "merged" / "config.json").is_file(), merged.text
    lm = rlft.dspy.local_lm(model_id, max_tokens=4)
    with dspy.context(lm=lm):
        assert isinstance(dspy.Predict("question -> answer")(question="1 + 1?").answer, str)


def test_finetune_warns_when_every_kept_trace_gives_one_answer(tmp_path, tiny_dir):
    import io

    from rich.console import Console

    from rlft.dspy.provider import finetune

    def rows(answers):
        return [{"messages": [{"role": "user", "content": f"review {i}"}, {"role": "assistant", "content": a}]}
                for i, a in enumerate(answers)]

    said = io.StringIO()
    finetune(None, "tiny", rows(["positive"] * 6), "chat", {"output_dir": str(tmp_path / "one"), "max_steps": 1},
             console=Console(file=said, width=300))
    assert "all 6 accepted traces give the same answer ('positive')" in said.getvalue()
    said = io.StringIO()
    finetune(None, "tiny", rows(["positive", "negative"] * 3), "chat",
             {"output_dir": str(tmp_path / "two"), "max_steps": 1}, console=Console(file=said, width=300))
    assert "same answer" not in said.getvalue()


def test_a_finetune_on_few_traces_runs_enough_epochs_for_its_steps(tmp_path, tiny_dir):
    """12 traces at 8 a step are 2 steps an epoch: the fine-tune runs FINETUNE_MAX_EPOCHS (6), not 3, and says
    so; epochs or max_steps given in train_kwargs are kept as given."""
    import io

    from rich.console import Console

    from rlft.dspy.config import FINETUNE_MAX_EPOCHS, FINETUNE_MIN_STEPS, finetune_epochs
    from rlft.dspy.provider import finetune

    assert finetune_epochs(12, 8) == FINETUNE_MAX_EPOCHS and finetune_epochs(94, 8) == 6.0
    assert finetune_epochs(170, 8) == 4.0 and finetune_epochs(200, 8) == 3.0 and finetune_epochs(5000, 8) == 3.0
    assert all(finetune_epochs(n, 8) * -(-n // 8) >= FINETUNE_MIN_STEPS for n in (94, 101, 170, 200))
    rows = [{"messages": [{"role": "user", "content": f"{i} + 1?"}, {"role": "assistant", "content": str(i + 1)}]}
            for i in range(12)]
    said = io.StringIO()
    finetune(None, "tiny", rows, "chat", {"output_dir": str(tmp_path / "few")}, console=Console(file=said, width=300))
    assert json.loads((tmp_path / "few" / "summary.json").read_text())["global_step"] == 12
    assert "12 traces at 8 a step: 6 epochs" in said.getvalue()
    said = io.StringIO()
    finetune(None, "tiny", rows, "chat", {"output_dir": str(tmp_path / "given"), "num_train_epochs": 1},
             console=Console(file=said, width=300))
    assert json.loads((tmp_path / "given" / "summary.json").read_text())["global_step"] == 2
    assert "epochs, for at least" not in said.getvalue()


def test_finetune_through_dspy_lm_returns_an_lm_on_the_new_model(tmp_path, tiny_dir):
    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", output_dir=str(tmp_path / "ft2"), max_steps=1)
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}] * 4
    tuned = lm.finetune(rows, "chat").result()
    assert tuned.model == str((tmp_path / "ft2").resolve()) and tuned.provider.finetunable


def test_step_moves_the_high_reward_completion_up_and_the_low_one_down(job):
    yes, no = _logps(job, "yes"), _logps(job, "no")
    record = job.step([{"batch_id": 0, "group": _group([1.0, 0.0])}], "grpo_chat")
    assert record["frac_reward_zero_std"] == 0.0 and record["rollouts"] == 2
    assert _logps(job, "yes") > yes and _logps(job, "no") < no


def test_more_iterations_on_a_batch_move_further_and_log_the_on_policy_loss(tmp_path, tiny_dir):
    """grpo.num_iterations = 3 takes three clipped optimizer steps on one batch (TRL's num_iterations): the
    high-reward completion ends more likely than after one step from the same start, and the logged loss is
    the first (on-policy) iteration's, as with one."""
    import rlft.dspy

    moved, losses = {}, {}
    for n in (1, 3):
        lm = rlft.dspy.local_lm("tiny", lora=True, learning_rate=5e-3, output_dir=str(tmp_path / f"g{n}"),
                                groups_per_step=1, seed=3, **{"grpo.num_iterations": n})
        j = lm.reinforce(train_kwargs={"num_generations": 2})
        try:
            start = _logps(j, "yes")
            losses[n] = j.step([{"batch_id": 0, "group": _group([1.0, 0.0])}], "grpo_chat")["loss"]
            moved[n] = _logps(j, "yes") - start
        finally:
            j._restore()
    assert moved[1] > 0 and moved[3] > 1.5 * moved[1], moved
    assert losses[3] == pytest.approx(losses[1], rel=1e-4)


def test_equal_rewards_change_nothing_and_are_counted(job):
    before = _lora(job)
    record = job.step([{"batch_id": 0, "group": _group([0.5, 0.5])}], "grpo_chat")
    after = _lora(job)
    assert record["frac_reward_zero_std"] == 1.0
    assert all(bool((before[k] == after[k]).all()) for k in before)
    history = [json.loads(line) for line in (job.out / "metrics.jsonl").read_text().splitlines()]
    assert history[-1]["frac_reward_zero_std"] == 1.0


def test_groups_without_a_signal_make_the_next_step_sample_hotter_and_signal_cools_it(job):
    base = job.cfg.grpo.temperature
    record = job.step([{"batch_id": 0, "group": _group([0.5, 0.5])}], "grpo_chat")
    assert record["temperature"] == base and job.lm.kwargs["temperature"] == pytest.approx(base * 1.25)
    job.step([{"batch_id": 1, "group": _group([0.5, 0.5])}], "grpo_chat")
    assert job.lm.kwargs["temperature"] == pytest.approx(base * 1.25 ** 2)
    record = job.step([{"batch_id": 2, "group": _group([1.0, 0.0])}], "grpo_chat")
    assert record["temperature"] == pytest.approx(base * 1.25 ** 2)
    assert job.lm.kwargs["temperature"] == pytest.approx(base * 1.25)
    history = [json.loads(line) for line in (job.out / "metrics.jsonl").read_text().splitlines()]
    assert [round(r["temperature"], 4) for r in history if "temperature" in r][-3:] == \
        [round(base, 4), round(base * 1.25, 4), round(base * 1.25 ** 2, 4)]


def test_next_temperature_stays_between_the_base_and_the_cap():
    from rlft.dspy.reinforce import next_temperature

    assert next_temperature(1.0, 1.0, 2.0, 1.0) == 1.25
    assert next_temperature(1.9, 1.0, 2.0, 0.75) == 2.0  # capped
    assert next_temperature(1.1, 1.0, 2.0, 0.0) == 1.0  # never below the base
    assert next_temperature(1.5, 1.0, 2.0, 0.4) == 1.5  # between the bands: unchanged
    assert next_temperature(1.0, 1.0, 1.0, 1.0) == 1.0  # max_temperature at the base: off


def test_get_status_lists_the_next_batch_id(job):
    assert job.get_status()["pending_batch_ids"] == [0]
    job.step([{"batch_id": 0, "group": _group([1.0, 0.0])}], "grpo_chat")
    assert job.get_status()["pending_batch_ids"] == [1]


def test_the_policy_is_what_the_engine_serves_next(job):
    assert job.engine.served(job.lm.model).model is job.model
    assert job.lm.kwargs["temperature"] == job.cfg.grpo.temperature  # sampled while the job is open


def test_closed_and_interrupted_jobs_fail_in_one_line(job, tmp_path):
    job.terminate()
    assert json.loads((job.out / "summary.json").read_text())["status"] == "completed"
    assert job.lm.model == str(job.out) and (job.out / "adapter_config.json").is_file()
    for call in (lambda: job.step([_group([1.0, 0.0])], "grpo_chat"), job.get_status):
        with pytest.raises(RuntimeError) as err:
            call()
        assert "\n" not in str(err.value) and "terminated" in str(err.value)


def test_ctrl_c_closes_the_job_with_a_checkpoint(tiny_dir, tmp_path):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", lora=True, output_dir=str(tmp_path / "g"), groups_per_step=1)
    job = lm.reinforce(train_kwargs={})
    job.step([_group([1.0, 0.0])], "grpo_chat")
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        signal.sigtimedwait([], 0) if hasattr(signal, "sigtimedwait") else None
    summary = json.loads((job.out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and (job.out / "checkpoint-1" / "adapter_config.json").is_file()
    with pytest.raises(RuntimeError, match="interrupted") as err:
        job.step([_group([1.0, 0.0])], "grpo_chat")
    assert "\n" not in str(err.value)
    with pytest.raises(RuntimeError, match="interrupted"):
        job.get_status()  # DSPy's wait loop ends here instead of polling forever
    assert signal.getsignal(signal.SIGINT) is not job._on_sigint


def _trl_inputs(prompts, completions, advantages, pad: int, **extra):
    """GRPOTrainer._compute_loss's inputs for these rows: left-padded prompts, right-padded completions."""
    import torch

    plen, clen = max(map(len, prompts)), max(map(len, completions))
    return {
        "prompt_ids": torch.tensor([[pad] * (plen - len(p)) + p for p in prompts]),
        "prompt_mask": torch.tensor([[0] * (plen - len(p)) + [1] * len(p) for p in prompts]),
        "completion_ids": torch.tensor([c + [pad] * (clen - len(c)) for c in completions]),
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (clen - len(c)) for c in completions]),
        "advantages": torch.as_tensor(advantages, dtype=torch.float32),
        "num_items_in_batch": torch.tensor(float(sum(len(c) for c in completions))), **extra}


def test_grpo_loss_gives_trls_gradient(tiny_dir, tmp_path):
    """rlft's loss against TRL's GRPOTrainer._compute_loss on the same groups (dapo, beta 0, one iteration):
    the same value and the same LoRA gradients."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlft.dspy.reinforce import group_advantages, grpo_loss
    from rlft.dspy.scoring import completion_logps
    from rlft.models import load_tokenizer

    tok = load_tokenizer("tiny")
    tok.padding_side = "left"
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, report_to="none", use_cpu=True, beta=0.0)
    trainer = GRPOTrainer(model=str(tiny_dir), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=args, train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}), processing_class=tok,
                          peft_config=__import__("peft").LoraConfig(r=4, target_modules="all-linear"))
    model = trainer.model
    with torch.no_grad():  # a non-zero adapter, so the gradients reach every LoRA matrix
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    model.eval()
    groups = [_group([1.0, 0.0, 0.5, 0.0], ["yes", "no", "maybe so", "no no no"])]
    prompts, completions, advantages = [], [], []
    for g in groups:
        advantages += group_advantages([m["reward"] for m in g])
        for m in g:
            text = tok.apply_chat_template(m["messages"], tokenize=False, add_generation_prompt=True)
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
            ids = tok(m["completion"]["content"], add_special_tokens=False)["input_ids"]
            completions.append(ids + [tok.eos_token_id])
    total = sum(len(c) for c in completions)
    pad = tok.pad_token_id
    inputs = _trl_inputs(prompts, completions, advantages, pad)
    params = [p for p in model.parameters() if p.requires_grad]
    trl_loss = trainer._compute_loss(model, inputs)
    trl_grads = torch.autograd.grad(trl_loss, params)
    logps, mask = completion_logps(model, prompts, completions, pad)
    ours = grpo_loss(logps, mask, torch.tensor(advantages, dtype=logps.dtype), total)
    our_grads = torch.autograd.grad(ours, params)
    assert torch.allclose(ours, trl_loss, atol=1e-6)
    assert sum(float(g.abs().sum()) for g in our_grads) > 0
    a = torch.cat([g.flatten() for g in our_grads])
    b = torch.cat([g.flatten() for g in trl_grads])
    # TRL scores through the model's fused LM head (chunked log-softmax): the same math in another order
    assert float((a - b).norm() / b.norm()) < 1e-2, float((a - b).norm() / b.norm())
    assert float(torch.nn.functional.cosine_similarity(a, b, dim=0)) > 0.9999


def test_grpo_loss_with_old_logps_is_trls_clipped_loss(tiny_dir, tmp_path):
    """A later iteration on the same batch: rlft's loss with old log-probs against TRL's _compute_loss given the
    same old_per_token_logps (epsilon 0.2): the same value and gradient, with some ratios outside the clip."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlft.dspy.reinforce import grpo_loss
    from rlft.dspy.scoring import completion_logps
    from rlft.models import load_tokenizer

    tok = load_tokenizer("tiny")
    tok.padding_side = "left"
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, report_to="none", use_cpu=True, beta=0.0, num_iterations=2)
    trainer = GRPOTrainer(model=str(tiny_dir), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=args, train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}), processing_class=tok,
                          peft_config=__import__("peft").LoraConfig(r=4, target_modules="all-linear"))
    model = trainer.model
    model.eval()
    prompts = [tok("hello there", add_special_tokens=False)["input_ids"]] * 4
    completions = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                   for t in ("yes", "no", "maybe so", "no no no")]
    advantages = torch.tensor([1.2, -0.8, 0.4, -0.8])
    with torch.no_grad():
        logps, mask = completion_logps(model, prompts, completions, tok.pad_token_id)
    old = logps + torch.linspace(-0.5, 0.5, logps.numel()).reshape(logps.shape) * mask  # ratios 0.6 .. 1.6
    total = sum(len(c) for c in completions)
    pad, clen = tok.pad_token_id, max(map(len, completions))
    inputs = _trl_inputs(prompts, completions, advantages, pad, old_per_token_logps=old)
    params = [p for p in model.parameters() if p.requires_grad]
    trl_loss = trainer._compute_loss(model, inputs)
    trl_grads = torch.cat([g.flatten() for g in torch.autograd.grad(trl_loss, params)])
    logps, mask = completion_logps(model, prompts, completions, pad)
    ours = grpo_loss(logps, mask, advantages.to(logps.dtype), total, old_logps=old, epsilon=0.2)
    our_grads = torch.cat([g.flatten() for g in torch.autograd.grad(ours, params)])
    # the formula on TRL's own per-token log-probs is TRL's loss to rounding; rlft's log-probs differ from
    # TRL's fused LM head by < 3e-3 a token, which moves a loss summed over signed advantages by ~1e-4
    trl_logps = trainer._get_per_token_logps_and_entropies(
        model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), clen)[0]
    on_trls = grpo_loss(trl_logps, mask, advantages.to(logps.dtype), total, old_logps=old, epsilon=0.2)
    assert torch.allclose(on_trls, trl_loss, atol=1e-6), (float(on_trls), float(trl_loss))
    assert torch.allclose(ours, trl_loss, atol=5e-4), (float(ours), float(trl_loss))
    assert float(torch.nn.functional.cosine_similarity(our_grads, trl_grads, dim=0)) > 0.999
    unclipped = grpo_loss(logps, mask, advantages.to(logps.dtype), total, old_logps=old, epsilon=10.0)
    assert not torch.allclose(unclipped, ours)  # the clip was reached, and both sides agree on it


def test_a_literal_field_is_answered_by_guided_choice(tiny_dir):
    from typing import Literal

    import rlft.dspy
    from rlft.dspy.engine import dspy_choices

    Mood = dspy.Signature({"review": (str, dspy.InputField()),
                           "mood": (Literal["positive", "negative"], dspy.OutputField())},
                          "Is the review positive or negative?")

    msgs = dspy.ChatAdapter().format(Mood, demos=[], inputs={"review": "ok"})
    assert dspy_choices(msgs) == ["positive", "negative"]
    plain = dspy.ChatAdapter().format(dspy.Predict("q -> a").signature, demos=[], inputs={"q": "x"})
    assert dspy_choices(plain) is None
    lm = rlft.dspy.local_lm("tiny")
    with dspy.context(lm=lm):
        answers = {dspy.Predict(Mood)(review=f"review {i}").mood for i in range(3)}
    assert answers <= {"positive", "negative"}  # the tiny model never writes either unaided
    hot = lm.copy(temperature=2.0)
    with dspy.context(lm=hot):
        sampled = [dspy.Predict(Mood)(review="same").mood for _ in range(12)]
    assert set(sampled) == {"positive", "negative"}


def _mood():
    from typing import Literal

    return dspy.Signature({"review": (str, dspy.InputField()),
                           "mood": (Literal["positive", "negative"], dspy.OutputField())},
                          "Is the review positive or negative?")


def _reviews(n):
    return [dspy.Example(review=f"review number {i}", mood="positive" if i % 2 else "negative").with_inputs("review")
            for i in range(n)]


def _exact(example, prediction, trace=None):
    return float(prediction.mood == example.mood)


def test_bootstrap_finetune_compiles_through_rlft(tiny_dir, tmp_path):
    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", lora=True, output_dir=str(tmp_path / "bf"), max_steps=2)
    program = dspy.Predict(_mood())
    program.set_lm(lm)
    tuned = dspy.BootstrapFinetune(metric=lambda e, p, t=None: 1.0, num_threads=4).compile(
        program, trainset=_reviews(6), teacher=program.deepcopy())
    assert tuned.predictors()[0].lm.model == str((tmp_path / "bf").resolve())
    assert json.loads((tmp_path / "bf" / "summary.json").read_text())["train_rows"] == 6
    assert tuned(review="review number 1").mood in ("positive", "negative")


def _grpo_run(tmp_path, steps: int, **compile_kwargs):
    """dspy GRPO through rlft on the tiny model: (tuned program, run folder, summary, metrics history)."""
    from dspy.teleprompt.grpo import GRPO

    import rlft.dspy

    lm = rlft.dspy.local_lm("tiny", lora=True, output_dir=str(tmp_path / "g"))
    program = dspy.Predict(_mood())
    program.set_lm(lm)
    opt = GRPO(metric=_exact, num_train_steps=steps, num_dspy_examples_per_grpo_step=2,
               num_rollouts_per_grpo_step=4, exclude_demos=True, num_threads=8, num_steps_for_val=10 ** 6)
    tuned = opt.compile(program, **compile_kwargs)
    out = tmp_path / "g"
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return tuned, out, json.loads((out / "summary.json").read_text()), history


def test_dspy_grpo_compiles_through_rlft(tiny_dir, tmp_path):
    tuned, out, summary, history = _grpo_run(tmp_path, 2, trainset=_reviews(8), valset=_reviews(4))
    assert tuned.predictors()[0].lm.model == str(out.resolve())
    assert summary["status"] == "completed" and summary["global_step"] == 2
    assert summary["groups_per_step"] == 2  # read from the calling GRPO
    checks = [r for r in history if "heldout/pass_at_1" in r]
    assert [r["step"] for r in checks] == [0, 2]  # the start (then every 5 steps) and the final weights
    assert {r["heldout/source"] for r in checks} == {"valset"} and {r["heldout/n"] for r in checks} == {4}
    assert sum(r.get("groups", 0) for r in history) == 4 and (out / "adapter_config.json").is_file()


def test_dspy_grpo_without_a_valset_checks_training_examples_and_says_so(tiny_dir, tmp_path):
    _, _, summary, history = _grpo_run(tmp_path, 1, trainset=_reviews(6))
    assert summary["check_source"] == "trainset" and summary["valset_rows"] == 6
    checks = [r for r in history if "heldout/pass_at_1" in r]
    assert [(r["step"], r["heldout/source"], r["heldout/n"]) for r in checks] == [(0, "trainset", 6),
                                                                                 (1, "trainset", 6)]


def test_train_check_rows_spread_over_the_trainset():
    from rlft.dspy.reinforce import train_check_rows

    assert train_check_rows(list(range(5)), limit=8) == [0, 1, 2, 3, 4]
    assert train_check_rows(list(range(100)), limit=4) == [0, 25, 50, 75]
    assert train_check_rows(None) == []


def test_a_group_of_one_rollout_is_refused_before_anything_loads(tiny_dir, tmp_path):
    from dspy.teleprompt.grpo import GRPO

    import rlft.dspy
    from rlft.errors import UserError

    lm = rlft.dspy.local_lm("tiny", lora=True, output_dir=str(tmp_path / "g"))
    program = dspy.Predict(_mood())
    program.set_lm(lm)
    opt = GRPO(metric=_exact, num_train_steps=2, exclude_demos=True, num_threads=2)  # DSPy's 1 rollout a group
    with pytest.raises(UserError) as err:
        opt.compile(program, trainset=_reviews(4))
    assert "\n" not in str(err.value) and "num_rollouts_per_grpo_step=1" in str(err.value)
    assert "num_rollouts_per_grpo_step=8" in err.value.fix and not (tmp_path / "g").exists()
