"""Multi-stage pipelines over the CLI, with held-out evaluation before and after every stage.

    python -m rlft.pipeline dpo --model tiny --out runs/demo      # SFT, then DPO

Each stage runs the real `rlft` command in-process (same code path as typing it), and every number in
the closing table is measured in this run: held-out pass@1 before -> after the stage, and wall time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()


def _rlft(*args: str) -> None:
    from rlft.cli import main

    console.print(f"[dim]$ rlft {' '.join(args)}[/]", highlight=False)
    try:
        main(list(args))
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise typer.Exit(exc.code if isinstance(exc.code, int) else 1) from exc


def _heldout(model: str, heldout: str) -> float:
    from rlft.config import Section
    from rlft.data import read_rows
    from rlft.evaluate import evaluate_rows
    from rlft.models import load_model, load_tokenizer
    from rlft.quiet import quiet_libraries

    quiet_libraries()
    tok = load_tokenizer(model)
    net = load_model(Section(name_or_path=model, dtype="auto", revision=None, trust_remote_code=False,
                             load_in_4bit=False, lora=Section(enabled=False)), trainable=False)
    return evaluate_rows(net, tok, [r.data for r in read_rows(heldout)]).pass_at_1


@app.command()
def dpo(
    model: Annotated[str, typer.Option(help="Starting model (local folder, hub id or tiny).")] = "tiny",
    sft_data: Annotated[str, typer.Option(help="SFT demonstrations.")] = "data/arith/sft_train.jsonl",
    pairs: Annotated[str, typer.Option(help="DPO preference pairs.")] = "data/arith/pairs_train.jsonl",
    heldout: Annotated[str, typer.Option(help="Held-out verifiable rows (prompt + answer).")] = "data/arith/test.jsonl",
    out: Annotated[str, typer.Option(help="Folder for the stage runs.")] = "runs/demo",
    sft_recipe: Annotated[str, typer.Option(help="SFT recipe.")] = "recipes/sft_tiny.yaml",
    dpo_recipe: Annotated[str, typer.Option(help="DPO recipe.")] = "recipes/dpo_tiny.yaml",
) -> None:
    """SFT, then DPO from the SFT'd model; prints held-out pass@1 before -> after each stage."""
    root = Path(out)
    rows = []
    before = _heldout(model, heldout)
    start = time.time()
    _rlft("sft", "--recipe", sft_recipe, "--model", model, "--data", sft_data, "-o", str(root / "sft"),
          "--overwrite")
    after_sft = _heldout(str(root / "sft"), heldout)
    rows.append(("1", "sft", before, after_sft, time.time() - start))
    start = time.time()
    _rlft("dpo", "--recipe", dpo_recipe, "--model", str(root / "sft"), "--pairs", pairs,
          "-o", str(root / "dpo"), "--overwrite")
    after_dpo = _heldout(str(root / "dpo"), heldout)
    rows.append(("2", "dpo", after_sft, after_dpo, time.time() - start))
    _print_table(rows, heldout, root)


def _print_table(rows, heldout: str, root: Path) -> None:
    table = Table(title=f"held-out pass@1 on {heldout}")
    for col in ("stage", "method", "before", "after", "wall time"):
        table.add_column(col, justify="right" if col in ("before", "after", "wall time") else "left")
    for stage, method, before, after, wall in rows:
        table.add_row(stage, method, f"{before:.3f}", f"{after:.3f}", f"{wall:.0f} s")
    console.print(table)
    root.mkdir(parents=True, exist_ok=True)
    (root / "pipeline.json").write_text(json.dumps(
        [dict(stage=s, method=m, before=b, after=a, wall_seconds=round(w, 1)) for s, m, b, a, w in rows], indent=2))


if __name__ == "__main__":
    from rlft.errors import UserError

    try:
        app()
    except UserError as exc:
        console.print(f"[bold red]error:[/] {exc.message}")
        raise SystemExit(2) from exc
