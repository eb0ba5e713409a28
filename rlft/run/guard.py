"""What keeps a run folder to one run: a lock while a process trains in it, and the run's identity.

Lock: `.rlft.lock` in the run folder, held with `flock` by the training process (its PID written inside)
from the moment the folder is (re)made until the run ends. The kernel drops the lock when the process dies,
so the file of a killed run is stale and ignored. `--overwrite` or `--resume` of a folder whose lock is held
is refused, naming the PID.

Identity: `fingerprint.json` records everything that defines the run (method, model, LoRA, teacher, reward
model, verifiers, the data files and a hash of their content, data.fields/split/max_rows). `--resume` refuses
any difference, naming it, before anything is written. A run folder from before fingerprint.json is compared
on the same keys from its config.yaml, without the content hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from rlft.errors import UserError

LOCK = ".rlft.lock"
FINGERPRINT = "fingerprint.json"
_held: dict[str, int] = {}  # realpath of a run folder -> the fd holding its lock, in this process


# --------------------------------------------------------------------------- the lock


# --------------------------------------------------------------------------- the folder's own files are data

DAMAGED_FIX = ("check the folder: pass --overwrite to replace it, or choose another --output-dir (rlft never "
               "follows or rewrites what a run folder's files point to)")


def damaged(out: Path, name: str, why: str) -> UserError:
    """The one refusal for a run folder whose own file is of the wrong kind or shape."""
    return UserError(f"'{out}' is not an rlft run folder (or a damaged one): {name} {why}", DAMAGED_FIX)


def _kind(path: Path) -> str | None:
    """None for a regular file (or nothing there); else what stands in its place."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return None


def read_run_file(out: Path, name: str, parse: str = "json", default: Any = None) -> Any:
    """A run folder's own JSON or YAML file (summary.json, fingerprint.json, config.yaml) as a mapping, read
    without following a symlink; `default` when absent. Anything else (a symlink, a folder, a list, a damaged
    document) is `damaged`: the folder is data, not trust."""
    path = Path(out) / name
    if not os.path.lexists(path):
        return default
    if why := _kind(path):
        raise damaged(out, name, why)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(64 * 2**20 + 1)
        if len(raw) > 64 * 2**20:
            raise damaged(out, name, "is over 64 MB")
        text = raw.decode("utf-8")
        if parse == "json":
            doc = json.loads(text)
        else:
            import yaml

            doc = yaml.safe_load(text)
    except UserError:
        raise
    except (OSError, ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise damaged(out, name, f"cannot be read ({type(exc).__name__})") from exc
    except Exception as exc:  # yaml.YAMLError
        raise damaged(out, name, f"is not valid {parse.upper()} ({type(exc).__name__})") from exc
    if doc is None and parse == "yaml":
        doc = {}
    if not isinstance(doc, dict):
        raise damaged(out, name, f"holds a {type(doc).__name__}, not a mapping")
    return doc


OWN_FILES = ("summary.json", "config.yaml", FINGERPRINT, "versions.json", LOCK)


def check_own_files(out: Path) -> None:
    """Every file rlft writes into a run folder it continues is a regular file or absent (`damaged` if not)."""
    for name in OWN_FILES:
        if why := _kind(Path(out) / name):
            raise damaged(out, name, why)


def check_lock_file(out: Path) -> None:
    """`.rlft.lock` is a regular file of its own, or absent: a symlink (writing the PID would overwrite the file
    it points to), a folder, or a file with other hard links is refused."""
    path = Path(out) / LOCK
    if why := _kind(path):
        raise damaged(out, LOCK, why)
    try:
        if os.lstat(path).st_nlink > 1:
            raise damaged(out, LOCK, "has other hard links (writing the PID would change another file)")
    except FileNotFoundError:
        pass


def lock_holder(out: Path) -> int | None:
    """The PID training in `out` now (-1 if unknown), or None when no live process holds its lock."""
    import fcntl

    path = Path(out) / LOCK
    if _kind(path) or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None  # nobody holds it: a stale file left by a process that died
    except OSError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)


def check_not_live(out: Path, overwrite: bool = False, resume: bool = False) -> None:
    """Refuse a run folder that a live process is training in, or whose lock is not a regular file (unless
    --overwrite replaces the folder: deleting a symlink never touches what it points to)."""
    if not overwrite and Path(out).expanduser().is_dir():
        check_lock_file(Path(out).expanduser())
    pid = lock_holder(Path(out).expanduser())
    if pid is None:
        return
    who = f"process {pid}" if pid > 0 else "another process"
    what = "--overwrite would delete it under that run" if overwrite else (
        "--resume would train in it at the same time" if resume else "two runs would mix in one folder")
    raise UserError(f"output_dir '{out}' belongs to a run still training ({who}): {what}",
                    f"wait for it to end{f' or stop it (kill -INT {pid})' if pid > 0 else ''}, "
                    "or choose another --output-dir")


def acquire_lock(out: Path) -> None:
    """Hold `out`'s lock for this process until `release_lock` (or the process's end)."""
    import fcntl

    check_lock_file(Path(out))
    try:  # O_NOFOLLOW: a symlink planted since the check is refused, never written through
        fd = os.open(Path(out) / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise damaged(Path(out), LOCK, f"cannot be opened as a regular file ({exc.strerror})") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        check_not_live(out)
        raise UserError(f"output_dir '{out}' is locked by another run", "choose another --output-dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    _held[os.path.realpath(out)] = fd


def release_lock(out: Path) -> None:
    fd = _held.pop(os.path.realpath(out), None)
    if fd is not None:
        try:
            (Path(out) / LOCK).unlink()
        except OSError:
            pass
        os.close(fd)


# --------------------------------------------------------------------------- the run's identity


def fingerprint(method: str, values: dict, hashes: bool = True, content: dict | None = None) -> dict[str, Any]:
    """{name: value} of what defines a run; data content hashes only with `hashes`, taken from `content`
    ({file as given: sha256 of the bytes the run read}, rlft.data.load_split's) where it has the file."""
    section = values.get(method) or {}
    model, data = values.get("model") or {}, values.get("data") or {}
    lora = model.get("lora") or {}
    files = data.get("train") or []
    found = {
        "method": method,
        "model": _ident(model.get("name_or_path")),
        "model.revision": model.get("revision"),
        "LoRA": {k: v for k, v in lora.items() if k != "enabled"} if lora.get("enabled") else "off",
        "teacher": _ident(section.get("teacher_model_name_or_path")),
        "reward model": _ident(section.get("reward_model")),
        "verifiers": section.get("verifiers"),
        "data.train": [_ident(p) for p in files],
        "data.fields": data.get("fields"),
        "data.split": data.get("split"),
        "data.max_rows": data.get("max_rows"),
    }
    if hashes:
        found["data content"] = {str(p): (content or {}).get(str(p)) or content_hash(p) for p in files}
    return found


def write_fingerprint(cfg, out: Path, content: dict | None = None) -> None:
    """fingerprint.json; `content`: the hashes of the bytes the run read (not the files as they are now)."""
    from rlft.run.outputs import write_text

    write_text(Path(out) / FINGERPRINT, json.dumps(fingerprint(cfg.method, cfg.values, content=content),
                                                   indent=2) + "\n")


def check_same_run(cfg, out: Path, saved_config: dict) -> None:
    """`--resume`: the run in `out` was defined exactly as this command defines it; else one line naming the
    first difference."""
    saved = read_run_file(out, FINGERPRINT) or fingerprint(cfg.method, saved_config, False)
    now = fingerprint(cfg.method, cfg.values, hashes="data content" in saved)
    for key, new in now.items():
        old = saved.get(key)
        if key == "data content":
            changed = [p for p, h in new.items() if old.get(p) not in (None, h)] if isinstance(old, dict) else []
            if changed:
                raise UserError(f"--resume with different data: the content of {changed[0]} changed since the "
                                "run started", "resume with the data the run started on, or start a new run "
                                "with another --output-dir")
        elif old != new and not (isinstance(old, list) and list(old) == new):
            what = "data" if key.startswith("data") else key
            raise UserError(f"--resume with different {what}: {key} was {_show(old)}, now {_show(new)}",
                            "resume with the run's own settings (see its config.yaml), or start a new run with "
                            "another --output-dir")


_WEIGHTS = ("*.safetensors", "*.bin")
_CONFIGS = ("adapter_config.json", "config.json", "implicit_reward.json")  # what the weights are


def weights_digest(folder: str | Path) -> str | None:
    """sha256 over a model folder's top-level weight files and the config files that say what they are (name and
    bytes), None when `folder` is not a local folder with weights."""
    path = Path(folder)
    if not path.is_dir():
        return None
    files = sorted({f for pattern in _WEIGHTS for f in path.glob(pattern) if f.is_file()})
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files + sorted(path / name for name in _CONFIGS if (path / name).is_file()):
        digest.update(f.name.encode() + b"\0")
        try:
            _feed(digest, f)
        except OSError:
            return None
    return digest.hexdigest()


def _feed(digest, file: Path) -> None:
    """Add a file's bytes to `digest`, a megabyte at a time."""
    with file.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)


def content_hash(name: str) -> str | None:
    """sha256 of a data file's bytes (of a folder's files, by name), None for a hub id."""
    path = Path(os.path.expanduser(str(name)))
    if not (path.is_file() or path.is_dir()):  # a hub id; a pipe or device is refused when data loads
        return None
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else "").encode())
        try:
            _feed(digest, file)
        except OSError:
            return None
    return digest.hexdigest()


def _ident(value: Any) -> Any:
    """A local path as its real path (so ./x and x match); other values as given."""
    if isinstance(value, str) and value and os.path.exists(os.path.expanduser(value)):
        return os.path.realpath(os.path.expanduser(value))
    return value


def _show(value: Any) -> str:
    return "none" if value in (None, [], "") else repr(value)
