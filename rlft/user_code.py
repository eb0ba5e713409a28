"""Loading a user's Python file (a verifier plugin, a tools file, an environment) as a module, with one-line errors.

The module is registered in sys.modules under a name made from the file's resolved path, so dataclasses and
pickling can look it up, and two files with the same stem do not collide. The user's code is trusted like any
plugin: it runs in this process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from rlft.errors import UserError


def load_python_file(path: Path, what: str, prefix: str | None = None) -> ModuleType:
    """Import the .py file at `path`; `what` names it in errors ("verifier", "tools", "env")."""
    if not path.is_file():
        raise UserError(f"{what} file '{path}' not found", "check the path (relative to the current folder)")
    real = path.resolve()
    name = f"rlft_{prefix or what}_{real.stem}_{hashlib.sha1(str(real).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, real)
    if spec is None or spec.loader is None or real.suffix != ".py":
        raise UserError(f"cannot load {what} file '{path}'", "pass a Python source file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:  # SystemExit and asyncio.CancelledError too: importing the file never ends rlft
        del sys.modules[name]
        raise UserError(f"loading {what} file '{path}' failed: {type(exc).__name__}: {exc}",
                        "fix the error in that file (run `python FILE` to see the traceback)") from exc
    return module
