"""The real app (rlft.cli.app, nothing registered by the test) has every command the docs promise, and each
answers --help through the real entry point. Add a command here when you add one to rlft/cli.py."""

from __future__ import annotations

import pytest

# Every command of `rlft`, in the order rlft/cli.py registers them (the data group last).
EXPECTED = ("sft", "dpo", "kto", "reward", "grpo", "rloo", "ppo", "distill", "eval", "preflight", "choose", "verify",
            "report", "init-model", "merge", "export", "chat", "data")
SUBCOMMANDS = {"data": ("lint",)}


def registered() -> dict:
    import typer

    from rlft.cli import app

    return typer.main.get_command(app).commands


def test_every_expected_command_is_registered_on_the_real_app():
    names = registered()
    missing = [c for c in EXPECTED if c not in names]
    assert not missing, f"not registered on rlft.cli.app: {missing}"
    for group, subs in SUBCOMMANDS.items():
        assert set(subs) <= set(names[group].commands), (group, subs)


@pytest.mark.parametrize("command", EXPECTED)
def test_each_command_answers_help(cli, command):
    r = cli(command, "--help")
    assert r.code == 0, r.text
    assert "Usage: rlft " + command in " ".join(r.out.split()), r.out[:300]
