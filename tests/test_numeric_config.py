"""Every numeric config value is a finite number in its range, checked by the schema with the key's name.

YAML reads `.nan` / `.inf` as floats and `float("nan")` accepts the string "nan": without a finite check they
passed the range checks (every comparison with NaN is false) or ended in generic ValueError / OverflowError
lines. Each case runs the real CLI with --print-config (validation only) and asserts exit 2 naming the key.
"""

from __future__ import annotations

import pytest
from helpers import DATA
from test_bad_input_nothing_destroyed import SFT_DATA, refused

PROMPTS = DATA / "arith/grpo_prompts.jsonl"


@pytest.mark.parametrize("key", ["train.max_minutes", "train.max_steps", "train.learning_rate",
                                 "watch.holdout_every", "train.num_train_epochs", "train.seed",
                                 "watch.kl_max", "model.lora.r", "train.logging_steps"])
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "nan", "inf", "'nan'"])
def test_a_schema_number_that_is_not_finite_is_refused_naming_the_key(cli, tmp_path, key, value):
    line = refused(cli("sft", "--data", SFT_DATA, "-o", tmp_path / "out", "--set", f"{key}={value}",
                       "--print-config"), key, "finite")
    assert "Traceback" not in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["0", "-1", ".nan", ".inf", "nan"])
def test_tool_timeout_must_be_a_positive_finite_number(cli, tmp_path, value):
    refused(cli("grpo", "--prompts", PROMPTS, "-o", tmp_path / "out", "--set", f"grpo.tool_timeout={value}",
                "--print-config"), "grpo.tool_timeout")
    assert not (tmp_path / "out").exists()


def test_max_minutes_zero_and_max_steps_below_minus_one_are_refused(cli, tmp_path):
    refused(cli("sft", "--data", SFT_DATA, "--set", "train.max_minutes=0", "--print-config"),
            "train.max_minutes", "> 0")
    refused(cli("sft", "--data", SFT_DATA, "--set", "train.max_steps=-5", "--print-config"),
            "train.max_steps", ">= -1")


def test_a_trl_passthrough_number_that_is_not_finite_is_refused(cli):
    # train.weight_decay and train.warmup_ratio are TrainingArguments fields rlft does not model
    refused(cli("sft", "--data", SFT_DATA, "--set", "train.weight_decay=.nan", "--print-config"),
            "train.weight_decay", "finite")
    refused(cli("sft", "--data", SFT_DATA, "--set", "train.max_grad_norm=.inf", "--print-config"),
            "train.max_grad_norm", "finite")


def test_the_lr_flag_nan_is_refused_naming_the_key(cli):
    refused(cli("sft", "--data", SFT_DATA, "--lr", "nan", "--print-config"), "train.learning_rate", "finite")


def test_a_recipe_nan_names_the_key_and_the_line(cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train:\n  seed: 3\n  max_minutes: .nan\n")
    line = refused(cli("sft", "--recipe", recipe, "--data", SFT_DATA, "--print-config"), "train.max_minutes",
                   "r.yaml:3")
    assert "finite" in line


def test_finite_values_still_work(cli):
    r = cli("sft", "--data", SFT_DATA, "--set", "train.max_minutes=0.5", "--set", "train.max_steps=3",
            "--set", "train.learning_rate=1e-4", "--print-config")
    assert r.code == 0, r.text
    assert "max_minutes: 0.5" in r.out
