"""Checks of a run's inputs that run after the config resolves and before anything is written.

Value checks of the config itself are in rlft.config_checks; the run folder's checks are in rlft.run
(`check_run_folder`). `check_inputs(cfg)` runs once the config is resolved (rlft.commands.options), before data
loads or the run folder exists:
  - every model the run names loads its config and tokenizer files (`probe_model`, reading no weights), and a
    reward model is a one-label sequence classifier, not a plain language model;
  - verifier plugins import.
Each failure is a UserError: one line naming the problem and the fix, exit 2, nothing written.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlft.errors import UserError

# Config keys naming a model (besides model.name_or_path) that must be a reward model: a one-output classifier.
REWARD_MODEL_KEYS = ("grpo.reward_model", "ppo.reward_model")


# --------------------------------------------------------------------------- before the run


def expand_user_paths(cfg) -> None:
    """`~` at the start of any string value (recipe paths included) means the home folder."""
    def walk(node):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif isinstance(value, str) and value.startswith("~"):
                node[key] = os.path.expanduser(value)
            elif isinstance(value, list):
                node[key] = [os.path.expanduser(v) if isinstance(v, str) and v.startswith("~") else v
                             for v in value]
    walk(cfg.values)


def check_inputs(cfg) -> None:
    """Every model the run names loads, and every verifier plugin imports: before data loads or the folder exists."""
    check_models(cfg)
    check_verifier_plugins(cfg)


def probe_model(name_or_path: str, revision: str | None = None, trust_remote_code: bool = False,
                flag: str = "--model"):
    """Check that a model loads, reading no weights; returns its transformers config, or for a peft adapter
    folder its adapter_config.json (a dict; the base model is probed too)."""
    from rlft.model_probe import check_folder, load_problem, read_config
    from rlft.models import adapter_base, resolve_model_path

    path = Path(resolve_model_path(name_or_path))
    if path.is_dir():
        if (path / "adapter_config.json").exists():
            adapter = read_config(path / "adapter_config.json", name_or_path, flag, need_type=False)
            probe_model(adapter_base(str(path)), None, trust_remote_code, f"{flag} (adapter base)")
            return adapter
        check_folder(path, name_or_path, flag)
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path), revision=revision, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError, ...
        raise load_problem(name_or_path, exc, flag) from exc


def check_models(cfg) -> None:
    """The policy model and any reward model load their config; a reward model has a one-output score head."""
    model = cfg.values["model"]
    probe_model(model["name_or_path"], model.get("revision"), model.get("trust_remote_code", False), "--model")
    section = cfg.values.get(cfg.method, {})
    for key in REWARD_MODEL_KEYS:
        name, _, field = key.partition(".")
        if name == cfg.method and section.get(field):
            config = probe_model(section[field], None, False, "--reward-model")
            check_reward_model(section[field], config)


def check_reward_model(name: str, config) -> None:
    """A reward model is a sequence classifier with one label (what `rlft reward` saves)."""
    if isinstance(config, dict):  # a peft adapter: its task says what it is
        if config.get("task_type") != "SEQ_CLS":
            raise UserError(f"--reward-model '{name}' is a {config.get('task_type') or 'peft'} adapter, not a "
                            "reward model (task SEQ_CLS)", "train one with `rlft reward` and pass its run folder")
        return
    archs = getattr(config, "architectures", None) or []
    if getattr(config, "num_labels", None) != 1 or not any(a.endswith("ForSequenceClassification") for a in archs):
        what = ", ".join(archs) or "no architecture"
        raise UserError(f"--reward-model '{name}' is not a reward model ({what}, {config.num_labels} labels): "
                        "a reward model is a sequence classifier with one output",
                        "train one with `rlft reward` and pass its run folder, or use --verifier")


def check_verifier_plugins(cfg) -> None:
    """Every verifier spec resolves: built-ins exist, plugin files import and have the function."""
    specs = list((cfg.values.get(cfg.method) or {}).get("verifiers") or [])
    if specs:
        from rlft.verifiers import resolve

        for spec in specs:
            resolve(spec)


# --------------------------------------------------------------------------- generation flags (eval, preflight)


def check_generation(max_new_tokens: int, temperature: float, samples: int = 0, sampling: bool = False,
                     limit: int | None = None) -> None:
    """Generation flags of eval and preflight: a token budget, a usable temperature, a positive row limit."""
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens {max_new_tokens}: the model would generate nothing",
                        "pass --max-new-tokens 1 or more")
    if temperature < 0:
        raise UserError(f"--temperature {temperature}: a temperature cannot be negative",
                        "pass --temperature > 0 (1.0 samples the model as it is)")
    if temperature == 0 and (samples or sampling):
        raise UserError("--temperature 0 with sampling: temperature 0 is greedy decoding, every sample would be "
                        "the same", "pass --temperature > 0 (e.g. 1.0)" + (", or drop --samples" if samples else ""))
    if limit is not None and limit < 1:
        raise UserError(f"--limit {limit}: no rows would be evaluated", "pass --limit 1 or more, or drop it")

