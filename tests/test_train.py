"""SFT, DPO and eval driven through the CLI on the tiny model: real trainers, real numbers."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DATA, ROOT, write_jsonl

SFT_DATA = DATA / "arith/sft_train.jsonl"
FAST = ["--set", "sft.max_length=32", "--batch-size", "16"]


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_init_model_builds_a_loadable_tiny_model(cli, tmp_path):
    out = tmp_path / "tiny"
    r = cli("init-model", "--out", out)
    assert r.code == 0, r.text
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    text = "12 + 34 = 46, ok?\nyes"
    assert tok.decode(tok(text)["input_ids"]) == text  # character-level, spaces kept
    assert tok.pad_token_id != tok.eos_token_id and tok.eos_token == "<|im_end|>"
    assert 400_000 < sum(p.numel() for p in model.parameters()) < 600_000
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                   return_dict=True, return_assistant_tokens_mask=True)
    assert sum(chat["assistant_masks"]) == 3  # "yo" + end-of-turn: assistant-only loss works
    assert cli("init-model", "--out", out).code == 2  # refuses a non-empty folder


def test_sft_writes_a_complete_run_folder_and_loss_falls(cli, tmp_path, tiny_dir):
    out = tmp_path / "run"
    r = cli("sft", "--data", SFT_DATA, "-o", out, "--max-steps", "40", "--lr", "3e-3",
            "--set", "train.logging_steps=5", *FAST)
    assert r.code == 0, r.text
    for name in ("config.yaml", "versions.json", "summary.json", "metrics.jsonl", "config.json",
                 "model.safetensors", "tokenizer.json"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 40
    metrics = [m for m in read_metrics(out) if "loss" in m]
    assert [m["step"] for m in metrics] == list(range(5, 45, 5))
    assert metrics[-1]["loss"] < metrics[0]["loss"] * 0.8, metrics
    versions = json.loads((out / "versions.json").read_text())
    assert versions["trl"].startswith("1.") and versions["torch"]
    import yaml

    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["train"]["learning_rate"] == 0.003 and resolved["method"] == "sft"
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)  # plain transformers can load the result


def test_a_users_save_strategy_is_kept(cli, tmp_path, tiny_dir):
    """`train.save_strategy` is a TRL field rlft passes through; rlft once overwrote it with "steps"."""
    args = ["sft", "--data", SFT_DATA, "--max-steps", "4", "--set", "train.save_steps=2", *FAST]
    assert cli(*args, "-o", tmp_path / "default").code == 0
    assert sorted(p.name for p in (tmp_path / "default").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    r = cli(*args, "--set", "train.save_strategy=no", "-o", tmp_path / "none")
    assert r.code == 0, r.text
    assert not list((tmp_path / "none").glob("checkpoint-*"))
    assert (tmp_path / "none/model.safetensors").exists()  # the run's model is still written


def test_sft_on_chat_messages_with_lora_saves_an_adapter(cli, tmp_path):
    out = tmp_path / "lora"
    r = cli("sft", "--data", DATA / "support/demos.jsonl", "-o", out, "--max-steps", "4", "--lora",
            "--set", "model.lora.r=4", "--set", "sft.max_length=1024", "--batch-size", "4")
    assert r.code == 0, r.text
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 4
    # The adapter folder is itself a valid --model for the next stage.
    r = cli("eval", "--model", out, "--data", DATA / "arith/test.jsonl", "--limit", "4", "--json")
    assert r.code == 0, r.text


def test_rows_that_truncation_empties_are_a_clear_error(cli, tmp_path):
    r = cli("sft", "--data", DATA / "support/demos.jsonl", "-o", tmp_path / "o", "--max-steps", "2",
            "--set", "sft.max_length=64")
    assert r.code == 2
    # 200 rows less the automatic held-out slice (40 prompts: 20% of them, rlft.watch.heldout)
    assert "all 200 training rows were dropped" in r.err and "raise sft.max_length" in r.err


def test_refuses_non_empty_output_dir(cli, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = cli("sft", "--data", SFT_DATA, "-o", out, "--max-steps", "1")
    assert r.code == 2
    assert "is not empty" in r.err and "--overwrite" in r.err
    r = cli("sft", "--data", SFT_DATA, "-o", out, "--max-steps", "1", "--overwrite")
    assert r.code == 2 and "not an rlft run folder" in r.err
    assert (out / "notes.txt").read_text() == "mine"


def test_bad_data_is_one_error_with_file_line_field_and_writes_nothing(cli, tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "1+1=", "completion": "2"}, {"prompt": "2+2="}])
    out = tmp_path / "never"
    r = cli("sft", "--data", bad, "-o", out)
    assert r.code == 2
    assert f"{bad}:2: field 'completion': missing" in r.err
    assert "Traceback" not in r.text
    assert not out.exists()


def test_bad_config_exits_2_before_loading_anything(cli, tmp_path):
    out = tmp_path / "never"
    r = cli("dpo", "--pairs", DATA / "arith/pairs_train.jsonl", "-o", out, "--set", "dpo.bta=0.2",
            "--set", "train.learning_rate=fast")
    assert r.code == 2
    assert "dpo.bta = 0.2: unknown key (did you mean 'beta'?)" in r.err
    assert "train.learning_rate = 'fast': expected a number" in r.err
    assert not out.exists()


def test_print_config_prints_and_exits_without_training(cli, tmp_path):
    out = tmp_path / "never"
    r = cli("dpo", "--pairs", "x.jsonl", "-o", out, "--beta", "0.25", "--print-config")
    assert r.code == 0, r.text
    import yaml

    cfg = yaml.safe_load(r.out)
    assert cfg["dpo"]["beta"] == 0.25 and cfg["data"]["train"] == ["x.jsonl"] and cfg["method"] == "dpo"
    assert not out.exists()


def test_dpo_first_loss_is_ln2_and_margin_grows(cli, tmp_path, sft_model):
    out = tmp_path / "dpo"
    # 64 pairs seen 10 times: the implicit reward margin on them must grow and the loss fall below ln 2.
    r = cli("dpo", "--pairs", DATA / "arith/pairs_train.jsonl", "--model", sft_model, "-o", out,
            "--max-steps", "40", "--lr", "3e-3", "--batch-size", "16", "--set", "data.max_rows=64",
            "--set", "train.logging_steps=1", "--set", "dpo.max_length=32")
    assert r.code == 0, r.text
    logs = [m for m in read_metrics(out) if "rewards/margins" in m]
    assert abs(logs[0]["loss"] - math.log(2)) < 1e-3, logs[0]  # policy == reference at step 1
    first, last = logs[:8], logs[-8:]
    mean = lambda rows, key: sum(m[key] for m in rows) / len(rows)  # noqa: E731
    assert mean(last, "rewards/margins") > mean(first, "rewards/margins") + 0.05, last
    assert mean(last, "loss") < math.log(2) - 0.02
    assert mean(last, "rewards/accuracies") > 0.55


def test_dpo_with_lora_uses_the_disabled_adapter_as_reference(cli, tmp_path, sft_model):
    out = tmp_path / "dpo-lora"
    r = cli("dpo", "--pairs", DATA / "arith/pairs_train.jsonl", "--model", sft_model, "-o", out, "--lora",
            "--max-steps", "3", "--batch-size", "8", "--set", "train.logging_steps=1", "--set", "dpo.max_length=32",
            "--set", "model.lora.dropout=0.0")
    assert r.code == 0, r.text
    first = next(m for m in read_metrics(out) if "loss" in m)  # (the held-out check at step 0 comes first)
    assert abs(first["loss"] - math.log(2)) < 1e-3  # fresh adapter (B = 0): policy == reference
    assert (out / "adapter_config.json").exists()


def test_eval_json_on_held_out_rows(cli, sft_short):
    r = cli("eval", "--model", sft_short, "--data", DATA / "arith/test.jsonl", "--limit", "50", "--json")
    assert r.code == 0, r.text
    result = json.loads(r.out)
    assert result["n"] == 50 and set(result) == {"n", "pass_at_1", "mean_reward"}
    assert (result["pass_at_1"] * 50) % 1 == 0  # a share of the 50 rows
    # recipes/sft_tiny_short.yaml leaves the model right about half the time (0.535 on all 200 rows)
    assert 0.3 <= result["pass_at_1"] <= 0.8, result
    assert result["mean_reward"] == result["pass_at_1"]  # the math verifier scores 0 or 1


def test_eval_rejects_rows_without_answer(cli, tmp_path, sft_model):
    path = write_jsonl(tmp_path / "q.jsonl", [{"prompt": "1+1="}])
    r = cli("eval", "--model", sft_model, "--data", path)
    assert r.code == 2 and "q.jsonl:1: field 'answer': missing" in r.err


def test_missing_model_folder_is_a_user_error(cli, tmp_path):
    r = cli("eval", "--model", tmp_path / "nothing", "--data", DATA / "arith/test.jsonl")
    assert r.code == 2 and "is not a folder here and not a hub id" in r.err


def _wait_for(predicate, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_sigterm_saves_checkpoint_and_resume_continues(tmp_path, rlft_cache, tiny_dir):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "rlft", "sft", "--data", str(SFT_DATA), "-o", str(out), "--max-steps", "3000",
           "--set", "train.logging_steps=1", "--set", "train.save_steps=100000", *FAST]
    env = {**os.environ, "RLFT_CACHE": str(rlft_cache)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = out / "metrics.jsonl"
    assert _wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 5, 120)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    stopped = summary["global_step"]
    assert (out / f"checkpoint-{stopped}").is_dir()
    assert not (out / "model.safetensors").exists()  # no final model from an interrupted run

    cmd[cmd.index("3000")] = str(stopped + 4)
    done = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == stopped + 4
    assert summary["resumed_from"].endswith(f"checkpoint-{stopped}")
    steps = [m["step"] for m in read_metrics(out) if "loss" in m]
    assert steps[-4:] == [stopped + 1, stopped + 2, stopped + 3, stopped + 4]


@pytest.mark.slow
def test_sft_from_scratch_reaches_80_percent_on_held_out_addition(cli, tmp_path):
    out = tmp_path / "sft-full"
    start = time.time()
    r = cli("sft", "--recipe", ROOT / "recipes/sft_tiny.yaml", "-o", out)
    assert r.code == 0, r.text
    elapsed = time.time() - start
    r = cli("eval", "--model", out, "--data", DATA / "arith/test.jsonl", "--json")
    acc = json.loads(r.out)["pass_at_1"]
    print(f"sft from scratch: pass@1 {acc:.3f} in {elapsed:.0f}s")
    assert acc >= 0.80, acc
    assert elapsed < 180, elapsed


def test_final_evaluation_is_not_run_twice(cli, tmp_path, tiny_dir):
    out = tmp_path / "evals"
    eval_rows = write_jsonl(tmp_path / "eval.jsonl",
                            [{"prompt": f"{a}+1=", "completion": str(a + 1)} for a in range(10, 26)])
    r = cli("sft", "--data", SFT_DATA, "--eval-data", eval_rows, "-o", out, "--max-steps", "4",
            "--set", "train.eval_steps=2", "--set", "train.logging_steps=1", *FAST)
    assert r.code == 0, r.text
    evals = [m for m in read_metrics(out) if "eval_loss" in m]
    assert [m["step"] for m in evals] == [2, 4]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_metrics"]["eval_loss"] == evals[-1]["eval_loss"]
