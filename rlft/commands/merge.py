"""`rlft merge`: fold a LoRA run into its base model and save a plain model folder (tokenizer included)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlft.commands.options import Overwrite, err_console


def merge(
    run: Annotated[Path, typer.Argument(help="A run trained with --lora (its folder holds adapter_config.json).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder for the merged model.")],
    dtype: Annotated[str, typer.Option(help="Saved weights: float32 (exact), bfloat16 or float16.")] = "float32",
    overwrite: Overwrite = False,
) -> None:
    """Merge a LoRA run into its base and save a plain transformers folder with tokenizer and chat template."""
    from rlft.merge import check_merge

    check_merge(run, output, dtype, overwrite)  # refuse before loading anything
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.merge import merge_run

    out = merge_run(run, output, dtype=dtype, overwrite=overwrite)
    err_console.print(f"merged {run} into its base: {out} ({dtype})")
