"""Checks that run after the config resolves and before anything is written: one place per kind of check.

Value checks of the config itself are in rlft.config_checks. `check_before_run(cfg, overwrite, resume)` runs
once the config is resolved (rlft.commands.options.resolve_config), before data loads or the run folder exists:
  - the run folder may not be, hold, or sit inside an input (model, data, eval/holdout file, reward model,
    teacher, verifier file: every config value naming an existing path), and its location must be writable;
  - `--resume` continues only the same method on the same data, and a completed run only when max_steps or
    epochs grew; `--overwrite --resume` together is refused;
  - every model the run names loads its config and tokenizer files (rlft.models.probe_model), and a reward
    model is a one-label sequence classifier, not a plain language model;
  - verifier plugins import.
Each failure is a UserError: one line naming the problem and the fix, exit 2, nothing written.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

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


def check_before_run(cfg, overwrite: bool = False, resume: bool = False) -> None:
    """Everything that can be checked before data loads and before the run folder is created or deleted."""
    if overwrite and resume:
        raise UserError("--overwrite and --resume together: one deletes the run folder, the other continues it",
                        "drop --overwrite to continue the run, or --resume to start it again")
    out = Path(cfg.train.output_dir).expanduser()
    check_output_location(out, input_paths(cfg))
    if resume:
        check_resume(cfg, out)
    check_models(cfg)
    check_verifier_plugins(cfg)


def input_paths(cfg) -> dict[str, Path]:
    """{config key: path} for every config value that names an existing file or folder (the run's inputs)."""
    found: dict[str, Path] = {}

    def walk(node, prefix):
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if dotted == "train.output_dir":
                continue
            if isinstance(value, dict):
                walk(value, dotted + ".")
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and item and item != "tiny":
                    path = Path(item.rpartition(".py:")[0] + ".py" if ".py:" in item else item).expanduser()
                    if path.exists():
                        found.setdefault(dotted if dotted not in found else f"{dotted}[{item}]", path)
    walk(cfg.values, "")
    return found


def check_output_location(out: Path, inputs: dict[str, Path]) -> None:
    """The run folder is not an input, does not hold one and is not inside an input folder; it can be made."""
    real = Path(os.path.realpath(out))
    for key, path in inputs.items():
        target = Path(os.path.realpath(path))
        if real == target or real in target.parents or (target.is_dir() and target in real.parents):
            how, harm = (("is", "--overwrite would delete it and the run would write into it") if real == target
                         else ("holds", "--overwrite would delete it") if real in target.parents
                         else ("is inside", "the run would write its files into it"))
            raise UserError(f"output_dir '{out}' {how} the input {key} = '{path}': {harm}",
                            "choose an --output-dir outside the run's inputs")
    ancestor = real
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(f"output_dir '{out}' is under '{ancestor}', which is a file",
                        "choose an --output-dir whose parent is a folder")
    if ancestor == real:
        if not os.access(real, os.W_OK | os.X_OK):
            raise UserError(f"output_dir '{out}' is not writable", "choose another --output-dir")
        return
    try:  # the folder does not exist yet: can it be created there? (a probe folder, removed at once)
        os.rmdir(tempfile.mkdtemp(prefix=".rlft-probe-", dir=ancestor))
    except OSError as exc:
        raise UserError(f"output_dir '{out}' cannot be created in '{ancestor}' ({exc.strerror})",
                        "choose an --output-dir in a writable folder") from exc


def check_resume(cfg, out: Path) -> None:
    """Resume only the same method on the same data; a completed run only when there are steps left to take."""
    from rlft.run import last_checkpoint, read_json

    saved_path = out / "config.yaml"
    if not saved_path.is_file() or last_checkpoint(out) is None:
        return  # rlft.run.prepare_output_dir says "no checkpoint" with its fix
    import yaml

    try:
        saved = yaml.safe_load(saved_path.read_text()) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--resume: {saved_path} cannot be read ({type(exc).__name__})",
                        "start a new run with another --output-dir") from exc
    if saved.get("method") != cfg.method:
        raise UserError(f"--resume: '{out}' is a `rlft {saved.get('method')}` run, not `rlft {cfg.method}`",
                        f"resume it with `rlft {saved.get('method')} --resume`, or train into another "
                        "--output-dir (pass the run as --model to start from its weights)")
    old_data, new_data = (saved.get("data") or {}), cfg.values["data"]
    for key in ("train", "fields", "split", "max_rows"):
        old, new = old_data.get(key), new_data.get(key)
        if key == "train":
            old, new = [_same_path(p) for p in old or []], [_same_path(p) for p in new or []]
        if old != new:
            raise UserError(f"--resume with different data: data.{key} was {old_data.get(key)!r}, now "
                            f"{new_data.get(key)!r}", "resume with the run's data (see its config.yaml), or "
                            "start a new run with another --output-dir")
    summary = read_json(out / "summary.json") if (out / "summary.json").is_file() else {}
    if isinstance(summary, dict) and summary.get("status") == "completed":
        old_train, new_train = saved.get("train") or {}, cfg.values["train"]
        done = summary.get("global_step") or 0
        more_steps = new_train.get("max_steps", -1) > max(done, old_train.get("max_steps", -1))
        more_epochs = (new_train.get("max_steps", -1) == -1 and
                       new_train.get("num_train_epochs", 0) > old_train.get("num_train_epochs", 0))
        if not (more_steps or more_epochs):
            raise UserError(f"--resume: the run in '{out}' already completed ({done} steps); resuming would "
                            "train past its end and replace its final model",
                            f"raise --max-steps above {done} to train further, or use another --output-dir")


def _same_path(p: Any) -> Any:
    return os.path.realpath(os.path.expanduser(p)) if isinstance(p, str) and os.path.exists(os.path.expanduser(p)) \
        else p


def probe_model(name_or_path: str, revision: str | None = None, trust_remote_code: bool = False,
                flag: str = "--model"):
    """Check that a model loads, reading no weights; returns its transformers config, or for a peft adapter
    folder its adapter_config.json (a dict; the base model is probed too)."""
    from rlft.model_probe import check_folder, load_problem, read_config
    from rlft.models import _adapter_base, resolve_model_path

    path = Path(resolve_model_path(name_or_path))
    if path.is_dir():
        if (path / "adapter_config.json").exists():
            adapter = read_config(path / "adapter_config.json", name_or_path, flag, need_type=False)
            probe_model(_adapter_base(str(path)), None, trust_remote_code, f"{flag} (adapter base)")
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

