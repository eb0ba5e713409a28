"""`rlft init-model`: build the tiny character-level Llama locally and save it with its tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlft.commands.options import Overwrite, err_console


def init_model(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the tiny model to.")],
    seed: Annotated[int, typer.Option(help="Initialisation seed.")] = 0,
    overwrite: Overwrite = False,
) -> None:
    """Build the tiny character-level Llama (~0.5M parameters) locally and save it with its tokenizer."""
    from rlft.data.bounded import kind_of
    from rlft.run.outputs import check_model_folder, check_output, staged

    check_model_folder(out, "--out", overwrite, kind_of(out) or "a file")
    check_output(out, {}, "--out")
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.models import build_tiny_model, count_parameters

    with staged(out, "--out") as tmp:  # a full or read-only disk leaves no half-written model
        build_tiny_model(tmp, seed=seed)
    from transformers import AutoModelForCausalLM

    _, total = count_parameters(AutoModelForCausalLM.from_pretrained(out))
    err_console.print(f"tiny model ({total:,} parameters) written to {out}")
