"""Checks of a run's inputs that run after the config resolves and before anything is written.

Value checks of the config itself are in rlft.cross_checks; the run folder's checks are in rlft.run.folder
(`check_run_folder`). `check_inputs(cfg)` runs once the config is resolved (rlft.commands.options), before data
loads or the run folder exists:
  - every model the run names loads its config and tokenizer files (`probe_model`, reading no weights), and a
    reward model is a one-label sequence classifier, not a plain language model;
  - verifier plugins import.
Each failure is a UserError: one line naming the problem and the fix, exit 2, nothing written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rlft.errors import UserError

# Config keys naming a model (besides model.name_or_path) that must be a reward model: a one-output classifier.
REWARD_MODEL_KEYS = ("grpo.reward_model", "rloo.reward_model", "ppo.reward_model")
# Config keys naming a model that must generate text (a language-model head), with the flag that sets it.
LANGUAGE_MODEL_KEYS = {"distill.teacher_model_name_or_path": "--teacher"}


# --------------------------------------------------------------------------- before the run


def expand_user_paths(cfg) -> None:
    """`~` at the start of any string value (recipe paths included) means the home folder; `$VAR` in a path
    is refused (only a shell expands it: rlft would create a folder literally named `$VAR`)."""
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
    for key in PATH_KEYS:
        section, _, field = key.partition(".")
        values = (cfg.values.get(cfg.method if section == "{method}" else section) or {}).get(field)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and (m := _ENV_VAR.search(value)):
                dotted = key.replace("{method}", cfg.method)
                origin = cfg.origins.get(dotted, "")
                where = f"{origin}: " if origin and origin != "default" else ""
                raise UserError(f"{where}{dotted} = '{value}' holds {m.group()}, which rlft does not expand "
                                "(only a shell does)",
                                "write the path out, or pass it as a flag so the shell expands it")


# Config keys naming files or folders, where `$VAR` would become a literal folder name.
PATH_KEYS = ("model.name_or_path", "data.train", "data.eval", "train.output_dir", "watch.holdout",
             "{method}.teacher_model_name_or_path", "{method}.reward_model", "{method}.verifiers")
_ENV_VAR = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def check_inputs(cfg) -> None:
    """Every model the run names loads, and every verifier plugin imports: before data loads or the folder exists."""
    check_models(cfg)
    check_verifier_plugins(cfg)


def probe_model(name_or_path: str, revision: str | None = None, trust_remote_code: bool = False,
                flag: str = "--model"):
    """Check that a model loads, reading no weights; returns its transformers config, or for a peft adapter
    folder its adapter_config.json (a dict; the base model is probed too)."""
    from rlft.loadable import check_folder, load_problem, read_config
    from rlft.models import adapter_base, resolve_model_path

    try:
        path = Path(resolve_model_path(name_or_path))
    except UserError as exc:  # name the flag when it is not --model (resolve_model_path says "model")
        if flag == "--model" or exc.message.startswith(flag):
            raise
        raise UserError(f"{flag}: {exc.message}", exc.fix) from exc
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
    config = probe_model(model["name_or_path"], model.get("revision"), model.get("trust_remote_code", False),
                         "--model")
    if cfg.method != "reward":  # `rlft reward` puts a new score head on a language model
        check_language_model(model["name_or_path"], config, "--model")
    positions = None if isinstance(config, dict) else getattr(config, "max_position_embeddings", None)
    for section_name in (cfg.method, "watch"):  # every generation budget within the model's positions
        for field, value in (cfg.values.get(section_name) or {}).items():
            budget = field.endswith(("max_new_tokens", "max_completion_length"))
            if budget and positions and isinstance(value, int) and value >= positions:
                raise UserError(f"{section_name}.{field} = {value} is beyond what the model can attend to "
                                f"({positions} positions, prompt included)",
                                f"set {section_name}.{field} below {positions}")
    section = cfg.values.get(cfg.method, {})
    for key, flag in LANGUAGE_MODEL_KEYS.items():
        name, _, field = key.partition(".")
        if name == cfg.method and section.get(field):
            check_language_model(section[field], probe_model(section[field], None, False, flag), flag)
    for key in REWARD_MODEL_KEYS:
        name, _, field = key.partition(".")
        if name == cfg.method and section.get(field):
            config = probe_model(section[field], None, False, "--reward-model")
            check_reward_model(section[field], config)


def model_head(config) -> str | None:
    """'lm' (a language-model head), 'score' (a sequence classifier) or None (cannot tell) for a transformers
    config or a peft adapter's adapter_config.json (a dict)."""
    if isinstance(config, dict):
        return {"CAUSAL_LM": "lm", "SEQ_CLS": "score"}.get(config.get("task_type"))
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs):
        return "lm"
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "score"
    return None


def check_language_model(name: str, config, flag: str = "--model") -> None:
    """A model that must generate text is not a reward model (whose output layer is a score head: loaded as a
    text generator it would get a random output layer)."""
    if model_head(config) == "score":
        raise UserError(f"{flag} '{name}' is a reward model (a score head), not a language model: it cannot "
                        "generate text", "pass a language model (a base model or an sft/dpo/grpo/... run); a "
                        "reward model goes to --reward-model")


def check_budget(name: str, max_new_tokens: int, config) -> None:
    """A generation budget within the model's positions (a budget beyond them would run for hours, then fail);
    `config` a transformers config (an adapter's dict: unknown until its base loads, so not checked)."""
    positions = None if isinstance(config, dict) else getattr(config, "max_position_embeddings", None)
    if positions and max_new_tokens >= positions:
        raise UserError(f"--max-new-tokens {max_new_tokens} is beyond what '{name}' can attend to "
                        f"({positions} positions, prompt included)",
                        f"pass --max-new-tokens below {positions}, e.g. {min(256, positions // 2)}")


def check_reward_model(name: str, config) -> None:
    """A reward model is a sequence classifier with one label (what `rlft reward` saves), or a language model
    trained by `rlft reward` with reward.objective implicit (rlft.reward_model.implicit: its marker says so)."""
    from rlft.reward_model.implicit import is_implicit

    if is_implicit(name):
        return
    if isinstance(config, dict):  # a peft adapter: its task says what it is
        if config.get("task_type") != "SEQ_CLS":
            raise UserError(f"--reward-model '{name}' is a {config.get('task_type') or 'peft'} adapter, not a "
                            "reward model (task SEQ_CLS)", "train one with `rlft reward` and pass its run folder")
        return
    archs = getattr(config, "architectures", None) or []
    if getattr(config, "num_labels", None) != 1 or not any(a.endswith("ForSequenceClassification") for a in archs):
        what = ", ".join(archs) or "no architecture"
        if any(a.endswith("ForSequenceClassification") for a in archs):
            what += f", {config.num_labels} labels"
        raise UserError(f"--reward-model '{name}' is not a reward model ({what}): "
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

