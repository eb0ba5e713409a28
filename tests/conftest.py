"""Shared fixtures: the tiny model is built once per test session into a private cache.

Shared helpers (paths, write_jsonl, CliResult) are in tests/helpers.py; import them from there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import DATA, ROOT, CliResult


@pytest.fixture(scope="session", autouse=True)
def rlft_cache(tmp_path_factory):
    """A session-private RLFT_CACHE, so `tiny` is built fresh once and tests never touch ~/.cache."""
    path = tmp_path_factory.mktemp("rlft-cache")
    old = os.environ.get("RLFT_CACHE")
    os.environ["RLFT_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("RLFT_CACHE", None)
    else:
        os.environ["RLFT_CACHE"] = old


@pytest.fixture
def cli(capsys):
    """Run `rlft ARGS...` in-process through the real entry point; returns exit code and output."""
    from rlft.cli import main

    def run(*args) -> CliResult:
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture(scope="session")
def tiny_dir(rlft_cache):
    from rlft.models import tiny_path

    return tiny_path()


def _built_once(tmp_path_factory, name: str, args: list[str]) -> Path:
    """`rlft ARGS -o <folder>` run once per test session: with pytest-xdist, the first worker to need it runs it
    under a file lock in the workers' common temp folder and the others read the same folder (what uses it only
    reads it)."""
    from filelock import FileLock

    from rlft.cli import main

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    out = root / "shared-runs" / name
    out.parent.mkdir(exist_ok=True)
    with FileLock(f"{out}.lock"):
        summary = out / "summary.json"
        if summary.exists() and json.loads(summary.read_text()).get("status") == "completed":
            return out
        try:
            main([*args, "-o", str(out), "--overwrite"])
        except SystemExit as exc:
            assert exc.code == 0, f"{name} failed with exit code {exc.code}"
    return out


@pytest.fixture(scope="session")
def sft_model(tmp_path_factory, tiny_dir):
    """A tiny model after a short SFT on arithmetic (shared by the DPO and eval tests)."""
    return _built_once(tmp_path_factory, "sft", [
        "sft", "--data", str(DATA / "arith/sft_train.jsonl"), "--max-steps", "60", "--lr", "3e-3",
        "--batch-size", "32", "--set", "train.logging_steps=20", "--set", "sft.max_length=32"])


@pytest.fixture(scope="session")
def sft_short(tmp_path_factory, tiny_dir):
    """The tiny model after recipes/sft_tiny_short.yaml: right about half the time (GRPO's starting point)."""
    return _built_once(tmp_path_factory, "sft-short", [
        "sft", "--recipe", str(ROOT / "recipes/sft_tiny_short.yaml"), "--data", str(DATA / "arith/sft_train.jsonl")])


@pytest.fixture
def one_thread():
    """One compute thread: MKL packing applies (rlft.speed.packed_linear.MAX_THREADS) with one layout."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
