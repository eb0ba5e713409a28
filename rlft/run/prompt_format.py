"""The prompt format a run trained with, read back from its run folder (config.yaml's `data.as_chat`).

`rlft eval` and best-of-n read it so that a run is scored on prompts rendered as its next stage renders them:
a stage started from `runs/sft` with a recipe that sets `data.as_chat: true` wraps plain prompts as user
messages, and a model trained that way answers plain text prompts differently (often worse) than chat ones.
"""

from __future__ import annotations

from pathlib import Path


def recorded_config(model: str) -> tuple[Path, dict] | None:
    """(config.yaml path, its contents) of the run folder `model` is (or the checkpoint of), else None."""
    import yaml

    p = Path(model)
    for folder in (p, p.parent):
        cfg = folder / "config.yaml"
        if folder.is_dir() and cfg.is_file() and (folder / "summary.json").is_file():
            try:
                doc = yaml.safe_load(cfg.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError):
                return None
            return (cfg, doc) if isinstance(doc, dict) else None
    return None


def recorded_as_chat(model: str) -> tuple[bool, str] | None:
    """(data.as_chat, where it was read) of the run that made `model`, or None when `model` is no run folder."""
    found = recorded_config(model)
    if found is None:
        return None
    path, doc = found
    data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    return bool(data.get("as_chat")), str(path)


def resolve_as_chat(model: str, flag: bool | None) -> tuple[bool, str | None]:
    """The format to use: the flag when given, else the run's own; with a note saying which was read."""
    if flag is not None:
        return flag, None
    found = recorded_as_chat(model)
    if found is None:
        return False, None
    as_chat, path = found
    return as_chat, f"prompts {'wrapped as chat' if as_chat else 'as plain text'}, as the run trained (data.as_chat=" \
                    f"{str(as_chat).lower()} in {path}); --as-chat / --no-as-chat overrides"
