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
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"'{out}' is not empty", "pass --overwrite or choose another --out")
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.models import build_tiny_model, count_parameters

    build_tiny_model(out, seed=seed)
    from transformers import AutoModelForCausalLM

    _, total = count_parameters(AutoModelForCausalLM.from_pretrained(out))
    err_console.print(f"tiny model ({total:,} parameters) written to {out}")
