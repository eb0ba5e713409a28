"""One rule for what a command writes, and one way to write it.

The rule (`check_output`), applied by every writing command (the training commands, merge, export,
init-model, report): an output is never an input, never inside an input folder and never holds an input,
where the inputs are the command's files and folders plus every model they refer to (`model_refs`: an
adapter's base, the run and base a merged folder was made from, the merged parent of a LoRA-on-LoRA stage).

The way (`staged`): a file or folder is written under a temporary sibling name and renamed into place when
complete, so a full or read-only disk, or a kill, leaves the old output (or nothing) rather than half a file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlft.errors import UserError, disk_errno


def model_refs(name_or_path: str | Path, depth: int = 0) -> list[Path]:
    """The local folders a model is and refers to: itself, an adapter's base, what a merged folder holds."""
    path = Path(os.path.expanduser(str(name_or_path)))
    if not path.exists() or depth > 8:  # a hub id, a built-in name, or a chain too long to be real
        return []
    found = [path]
    if not path.is_dir():
        return found
    for file, keys in (("adapter_config.json", ("base_model_name_or_path",)),
                       ("merged_from.json", ("run", "adapter", "base"))):
        try:
            doc = json.loads((path / file).read_text(encoding="utf-8")) if (path / file).is_file() else {}
        except (OSError, ValueError):
            continue
        for key in keys:
            ref = doc.get(key) if isinstance(doc, dict) else None
            if isinstance(ref, str) and ref:
                found += [p for p in model_refs(ref, depth + 1) if p not in found]
    return found


def refs_as_inputs(name_or_path: str | Path, label: str) -> dict[str, Path]:
    """{label: the model, "label (refers to)": each model it refers to} for `check_output`."""
    found: dict[str, Path] = {}
    for i, path in enumerate(model_refs(name_or_path)):
        key = label if i == 0 else f"{label} (refers to)"
        found[key if key not in found else f"{key}[{path}]"] = path
    return found


def input_paths(cfg) -> dict[str, Path]:
    """{config key: path} for every config value that names an existing file or folder (the run's inputs),
    and every model folder those refer to (`model_refs`)."""
    found: dict[str, Path] = {}

    def add(key: str, path: Path) -> None:
        found.setdefault(key if key not in found else f"{key}[{path}]", path)

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
                        add(dotted, path)
                        for ref in model_refs(path)[1:]:
                            add(f"{dotted} (refers to)", ref)
    walk(cfg.values, "")
    from rlft.sources import cache_dir

    if cache_dir().is_dir():  # built, converted and merged models (a LoRA stage's merged parent) live there
        add("the rlft cache (RLFT_CACHE)", cache_dir())
    return found


def check_output(out: Path, inputs: dict[str, Path], flag: str = "output_dir",
                 fix: str = "choose an --output-dir outside the run's inputs") -> None:
    """`out` is not an input, does not hold one and is not inside an input folder; it can be made."""
    real = Path(os.path.realpath(out))
    for key, path in inputs.items():
        target = Path(os.path.realpath(path))
        if real == target or real in target.parents or (target.is_dir() and target in real.parents):
            how, harm = (("is", "--overwrite would replace it") if real == target
                         else ("holds", "--overwrite would delete it") if real in target.parents
                         else ("is inside", "the output would be written into it"))
            raise UserError(f"{flag} '{out}' {how} the input {key} = '{path}': {harm}", fix)
    check_writable(out, flag)


def check_model_folder(out: Path, flag: str, overwrite: bool, kind: str = "a file") -> None:
    """A model folder output (merge, init-model): a folder path, empty, or replaced only with --overwrite and
    only when it already holds a model (config.json): anything else is never deleted."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} '{out}' is {kind}, not a folder", f"choose a folder path for {flag}")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise UserError(f"'{out}' is not empty", f"pass --overwrite to replace it, or choose another {flag}")
        if not (out / "config.json").exists():
            raise UserError(f"'{out}' is not a model folder; refusing to delete it", f"choose another {flag}")


def check_writable(out: Path, flag: str = "output_dir") -> None:
    """`out`'s nearest existing ancestor is a writable folder (a probe folder is made there and removed)."""
    real = Path(os.path.realpath(out))
    ancestor = real
    while not os.path.lexists(ancestor):  # False for a name too long, too: its parent is tried
        ancestor = ancestor.parent
    if len(os.fsencode(real)) >= 4096 or any(len(os.fsencode(part)) > 255 for part in real.parts):
        raise UserError(f"{flag} '{str(out)[:80]}...' is longer than the file system allows (255 bytes a name, "
                        "4095 a path)", f"choose a shorter {flag}")
    if ancestor != real and not ancestor.is_dir():
        raise UserError(f"{flag} '{out}' is under '{ancestor}', which is a file",
                        f"choose another {flag} whose parent is a folder")
    where = ancestor if ancestor.is_dir() else ancestor.parent
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rlft-probe-", dir=where))
    except OSError as exc:
        how = "is not writable" if where == real else f"cannot be created in '{where}'"
        raise UserError(f"{flag} '{out}' {how} ({exc.strerror or exc})",
                        f"choose another {flag} in a writable folder with free space") from exc


def write_problem(out: Path, exc: OSError, flag: str = "output") -> UserError:
    """One line for an OSError while writing (full disk, read-only file system, name too long, ...)."""
    what = exc.strerror or str(exc)
    if exc.errno is None and "requested and" in what:  # numpy's short write on a disk that filled up
        try:
            disk = os.statvfs(Path(out).parent)
            if disk.f_bavail * disk.f_frsize < 2**20:
                what = f"No space left on device ({what})"
        except OSError:
            pass
    return UserError(f"cannot write {flag} '{out}': {what}; nothing was written there",
                     "free some space or choose a writable location (a shorter path), then run it again")


@contextmanager
def staged(out: Path, flag: str = "output") -> Iterator[Path]:
    """Yield a temporary sibling of `out` to write into; on success it replaces `out` (a file or a folder),
    on any failure it is removed and `out` is left as it was. An OSError becomes one line."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
        if out.is_dir() and not out.is_symlink():
            old = out.with_name(f".{out.name}.old{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            _remove(old)
        else:
            os.replace(tmp, out)
    except OSError as exc:
        raise write_problem(out, exc, flag) from exc
    except Exception as exc:  # safetensors and torch report a full disk as their own error type
        if disk_errno(exc) is None:
            raise
        raise write_problem(out, OSError(disk_errno(exc), os.strerror(disk_errno(exc))), flag) from exc
    finally:
        _remove(tmp)


def write_text(path: Path, text: str, flag: str = "output") -> None:
    """Write a text file through `staged`."""
    with staged(Path(path), flag) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass
