"""`rlft export`: write a Llama-family model, full fine-tune or LoRA run (merged first) as a GGUF file."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from rlft.commands.options import Overwrite, err_console, out_console


class OutType(str, Enum):
    f32 = "f32"
    f16 = "f16"
    q8_0 = "q8_0"


def export(
    source: Annotated[str, typer.Argument(help="Run folder (full model or LoRA adapter), model folder, or "
                                          "a built-in name such as smollm2.")],
    gguf: Annotated[Path, typer.Option("--gguf", help="GGUF file to write (llama.cpp, Ollama).")],
    outtype: Annotated[OutType, typer.Option("--outtype", help="Weight type of 2-D tensors: f32 (exact), "
                                             "f16, or q8_0 (8-bit blocks).")] = OutType.f32,
    overwrite: Overwrite = False,
) -> None:
    """Export to GGUF for llama.cpp / Ollama (a LoRA run is merged into its base first).

    Llama-family models with a byte-level BPE tokenizer; the tokenizer and chat template go into the file.
    """
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    from rlft.export import export_gguf

    stats = export_gguf(source, gguf, outtype.value, overwrite=overwrite)
    out_console.print(stats["path"], markup=False, highlight=False, soft_wrap=True)  # a path for scripts
    err_console.print(f"wrote {stats['path']}: {stats['outtype']}, {stats['tensors']} tensors, "
                      f"vocab {stats['vocab']} ({stats['pre_tokenizer']} pre-tokenizer), "
                      f"{stats['bytes'] / 2**20:.1f} MiB in {stats['seconds']:.1f} s", highlight=False)
