"""`rlft init-model`: build the tiny character-level Llama locally and save it with its tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlft.commands.options import Overwrite, err_console
from rlft.errors import UserError


def init_model(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the tiny model to.")],
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
    overwrite: Overwrite = False,
) -> None:
    """Build the tiny character-level Llama (~0.5M parameters) locally and save it with its tokenizer."""
    from rlft.bounded import kind_of
    from rlft.outputs import check_output, staged

    if out.exists() and not out.is_dir():
        raise UserError(f"--out '{out}' is {kind_of(out) or 'a file'}, not a folder", "choose a folder path for --out")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise UserError(f"'{out}' is not empty", "pass --overwrite or choose another --out")
        if not (out / "config.json").exists():
            raise UserError(f"'{out}' is not a model folder; refusing to delete it", "choose another --out")
    check_output(out, {}, "--out")
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.models import build_tiny_model, count_parameters

    with staged(out, "--out") as tmp:  # a full or read-only disk leaves no half-written model
        build_tiny_model(tmp, seed=seed)
    from transformers import AutoModelForCausalLM

    _, total = count_parameters(AutoModelForCausalLM.from_pretrained(out))
    err_console.print(f"tiny model ({total:,} parameters) written to {out}")
