"""What tests share besides fixtures: the repository's paths, a JSONL writer, the CLI result type.

Fixtures are in conftest.py (pytest finds them); plain helpers are imported from here (`from helpers import
DATA, write_jsonl`), never from conftest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass
class CliResult:
    """What `rlft ARGS...` did, in-process (the `cli` fixture): exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path
