"""Shared fixtures: the tiny model is built once per test session into a private cache.

Shared helpers (paths, write_jsonl, CliResult) are in tests/helpers.py; import them from there."""

from __future__ import annotations

import os

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


@pytest.fixture(scope="session")
def sft_model(tmp_path_factory, tiny_dir):
    """A tiny model after a short SFT on arithmetic (shared by the DPO and eval tests)."""
    from rlft.cli import main

    out = tmp_path_factory.mktemp("runs") / "sft"
    try:
        main(["sft", "--data", str(DATA / "arith/sft_train.jsonl"), "-o", str(out), "--max-steps", "60",
              "--lr", "3e-3", "--batch-size", "32", "--set", "train.logging_steps=20",
              "--set", "sft.max_length=32"])
    except SystemExit as exc:
        assert exc.code == 0, f"short SFT failed with exit code {exc.code}"
    return out


@pytest.fixture(scope="session")
def sft_short(tmp_path_factory, tiny_dir):
    """The tiny model after recipes/sft_tiny_short.yaml: right about half the time (GRPO's starting point)."""
    from rlft.cli import main

    out = tmp_path_factory.mktemp("runs") / "sft-short"
    try:
        main(["sft", "--recipe", str(ROOT / "recipes/sft_tiny_short.yaml"), "-o", str(out),
              "--data", str(DATA / "arith/sft_train.jsonl")])
    except SystemExit as exc:
        assert exc.code == 0, f"short SFT failed with exit code {exc.code}"
    return out


@pytest.fixture
def one_thread():
    """One compute thread: MKL packing applies (rlft.packed_linear.MAX_THREADS) with one layout."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
