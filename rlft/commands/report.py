"""`rlft report RUN_DIR`: plots (PNG) and a markdown summary of a run folder, alarms marked.

Training commands write the report themselves when they end; this command (re)writes it for any run
folder, e.g. one still running, or one copied from another machine. Prints the path of report.md (or,
with --json, {report, plots, alarms, status}). A folder that is not an rlft run is a one-line error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def report(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (the --output-dir of a training command).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print {report, plots, alarms, status} as JSON.")] = False,
) -> None:
    """Plot loss, reward, KL, entropy and held-out score with alarms marked; write report/report.md."""
    from rlft.report import load_run, write_report

    path = write_report(run_dir)
    if json_out:
        run = load_run(run_dir)
        typer.echo(json.dumps({"report": str(path), "plots": sorted(str(p) for p in path.parent.glob("*.png")),
                               "alarms": [a["name"] for a in run["alarms"]],
                               "status": run["summary"].get("status")}))
    else:
        typer.echo(str(path))
