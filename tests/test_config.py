"""The config schema: layering, validation of every problem at once, did-you-mean, shipped recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlft.config import resolve
from rlft.errors import UserError

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_then_recipe_then_flags_then_set(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: dpo\ntrain:\n  learning_rate: 0.001\n  seed: 7\ndpo:\n  beta: 0.3\n")
    cfg = resolve("dpo", recipe, {"train.seed": (9, "--seed")}, ["dpo.beta=0.5", "train.warmup_steps=3"])
    assert cfg.train.learning_rate == 0.001  # recipe over default
    assert cfg.train.seed == 9  # flag over recipe
    assert cfg.dpo.beta == 0.5  # --set over recipe
    assert cfg.train.warmup_steps == 3  # a TrainingArguments field rlft does not model
    assert cfg.dpo.loss_type == "sigmoid"  # schema default
    assert cfg.origins["dpo.beta"].startswith("--set")
    assert cfg.origins["train.learning_rate"] == f"{recipe}:3"


def test_every_problem_reported_at_once_with_key_value_and_line(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("model:\n  dtype: float64\ntrain:\n  learning_rat: 0.1\n  seed: abc\ndpo:\n  beta: -1\n")
    with pytest.raises(UserError) as info:
        resolve("dpo", recipe)
    msg = info.value.message
    assert msg.startswith("4 config problems")
    assert f"{recipe}:2: model.dtype = 'float64': expected one of auto, float32, bfloat16, float16" in msg
    assert "train.learning_rat = 0.1: unknown key (did you mean 'learning_rate'?)" in msg
    assert f"{recipe}:5: train.seed = 'abc': expected an integer" in msg
    assert "dpo.beta = -1" in msg and "must be >= 0.0" in msg


def test_trl_passthrough_fields_are_type_checked():
    cfg = resolve("sft", None, {}, ["sft.packing=true", "sft.dataset_text_field=body"])
    assert cfg.sft.packing is True and cfg.sft.dataset_text_field == "body"
    with pytest.raises(UserError, match="sft.packing = 'yes please': expected true or false"):
        resolve("sft", None, {}, ["sft.packing=yes please"])


def test_section_of_another_method_is_refused():
    with pytest.raises(UserError, match="section 'dpo' does not apply to `rlft sft`"):
        resolve("sft", None, {}, ["dpo.beta=0.2"])


def test_unknown_section_gets_did_you_mean():
    with pytest.raises(UserError, match="unknown section 'trian' \\(did you mean 'train'\\?\\)"):
        resolve("sft", None, {}, ["trian.seed=1"])


def test_recipe_for_another_method_and_bad_yaml(tmp_path):
    r = tmp_path / "r.yaml"
    r.write_text("method: dpo\n")
    with pytest.raises(UserError, match="recipe is for `rlft dpo`, not `rlft sft`"):
        resolve("sft", r)
    r.write_text("train:\n  seed: [1\n")
    with pytest.raises(UserError, match=r"r.yaml:\d+: invalid YAML"):
        resolve("sft", r)


def test_qlora_needs_lora():
    with pytest.raises(UserError, match="load_in_4bit = true needs model.lora.enabled"):
        resolve("sft", None, {}, ["model.load_in_4bit=true"])


def test_vllm_options_pass_through_to_grpo_config(tmp_path, monkeypatch):
    """GRPO's vLLM generation (colocate and server) reaches TRL's GRPOConfig unchanged."""
    import importlib.util

    from trl import GRPOConfig

    from rlft.methods.common import build_trl_config

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",  # pretend vLLM is installed (it is not on this machine)
                        lambda name, *a: object() if name == "vllm" else real_find_spec(name, *a))
    recipe = ROOT / "recipes/grpo_qwen0.5b_lora.yaml"
    for mode, extra in (("colocate", ["grpo.vllm_gpu_memory_utilization=0.4"]),
                        ("server", ["grpo.vllm_server_host=10.0.0.2", "grpo.vllm_server_port=8001"])):
        cfg = resolve("grpo", recipe, {}, ["grpo.use_vllm=true", f"grpo.vllm_mode={mode}", *extra])
        args = build_trl_config(cfg, GRPOConfig, tmp_path / mode, False)
        assert args.use_vllm is True and args.vllm_mode == mode
    assert args.vllm_server_host == "10.0.0.2" and args.vllm_server_port == 8001


def test_vllm_mode_and_missing_vllm_are_caught_before_loading(monkeypatch):
    with pytest.raises(UserError, match=r"grpo.vllm_mode = colocated: expected one of colocate, server "
                                        r"\(did you mean 'colocate'\?\)"):
        resolve("grpo", None, {}, ["grpo.vllm_mode=colocated"])
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    with pytest.raises(UserError, match="grpo.use_vllm = true but vLLM is not installed: `pip install vllm`"):
        resolve("grpo", None, {}, ["grpo.use_vllm=true"])
    resolve("grpo", None, {}, ["grpo.use_vllm=false"])  # off: no vLLM needed


def test_bad_set_syntax():
    with pytest.raises(UserError, match="is not section.key=value"):
        resolve("sft", None, {}, ["beta"])


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_validates(recipe):
    import yaml

    method = yaml.safe_load(recipe.read_text())["method"]
    cfg = resolve(method, recipe)
    assert cfg.method == method
    first = recipe.read_text().splitlines()[0]
    assert first.startswith("#"), "a recipe opens with what it trains and the exact command"
    assert f"rlft {method}" in recipe.read_text().split("\nmethod:")[0], "the header names the command"


def test_set_one_entry_of_a_mapping_field():
    cfg = resolve("sft", None, {}, ["data.fields.prompt=question", "data.fields.completion=solution"])
    assert cfg.data.fields == {"prompt": "question", "completion": "solution"}


@pytest.mark.parametrize("path", sorted((ROOT / "recipes/accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_parse(path):
    """Each accelerate config loads with accelerate's own loader and names the `-m rlft` launch."""
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(path))
    assert config.distributed_type in ("MULTI_GPU", "DEEPSPEED", "FSDP")
    assert "-m rlft" in path.read_text().splitlines()[1]
