"""`rlft --help` stays fast: the CLI module must not import the heavy libraries."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def test_cli_import_does_not_import_heavy_libraries():
    code = ("import sys, rlft.cli; heavy = [m for m in ('torch', 'transformers', 'trl', 'datasets', 'peft', 'dspy', "
            "'litellm') if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported at CLI load: {out.stdout.strip()}"


def test_help_lists_commands_and_is_quick():
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rlft", "--help"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    assert out.returncode == 0
    for command in ("sft", "dpo", "eval", "init-model", "kto", "rloo", "distill"):
        assert command in out.stdout
    # The 0.3 s goal is measured by bench/; here only a generous bound that still catches a torch import.
    assert elapsed < 2.5, elapsed


def test_unknown_command_is_a_usage_error(cli):
    r = cli("sfft")
    assert r.code == 2
    assert "No such command" in r.text


def test_root_help_skips_the_rich_help_renderer_and_commands_keep_it():
    """`rlft --help` is click's plain listing: Typer's rich help (typer.rich_utils) imports rich.markdown and
    markdown_it, most of the root help's time. A command's own help stays rich, with its "Run" panel."""
    code = ("import sys\nfrom rlft.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('|' + ','.join(m for m in ('typer.rich_utils', 'markdown_it', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "sft" in out.stdout and out.stdout.rsplit("|", 1)[1].strip() == ""
    rich = subprocess.run([sys.executable, "-m", "rlft", "dpo", "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "120"})
    assert rich.returncode == 0 and "─ Run ─" in rich.stdout


def test_help_does_not_import_dspy():
    """`rlft --help` (the whole root help, not only the import of rlft.cli) loads neither dspy nor rlft.dspy."""
    code = ("import sys\nfrom rlft.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('|' + ','.join(m for m in ('dspy', 'rlft.dspy', 'litellm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.rsplit("|", 1)[1].strip() == ""


def test_importing_rlft_dspy_loads_nothing_heavy():
    """`import rlft.dspy` is free: dspy, torch and transformers load when local_lm is called."""
    code = ("import sys, rlft.dspy; print(','.join(m for m in ('dspy', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
