"""A run folder's own files are data, not trust: each is a regular file of the right shape, or the folder is
"not an rlft run folder (or a damaged one)", exit 2, with nothing written or followed.

The lock is opened with O_NOFOLLOW (a symlinked `.rlft.lock` used to get the PID written into the file it
pointed to); fingerprint.json, config.yaml and summary.json that are a list, a folder or a symlink are refused
by name; the data hash in fingerprint.json is of the bytes the run read, not of the file after its pre-flight.
"""

from __future__ import annotations

import json
import os

import pytest
from test_bad_input_nothing_destroyed import SFT_DATA, refused, sft_run_folder, snapshot

DAMAGED = "not an rlft run folder (or a damaged one)"


def _resume(cli, run):
    return cli("sft", "--data", SFT_DATA, "-o", run, "--max-steps", "5", "--resume")


def test_a_symlinked_lock_is_refused_and_its_target_untouched(cli, tmp_path):
    run = sft_run_folder(cli, tmp_path, status="interrupted")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, run / ".rlft.lock")
    before = snapshot(run)
    refused(_resume(cli, run), DAMAGED, ".rlft.lock", "symlink")
    assert victim.read_text() == "precious"
    assert snapshot(run) == before


def test_a_lock_folder_or_a_hard_linked_lock_is_refused(cli, tmp_path):
    run = sft_run_folder(cli, tmp_path, status="interrupted")
    (run / ".rlft.lock").mkdir()
    refused(_resume(cli, run), DAMAGED, ".rlft.lock", "folder")
    (run / ".rlft.lock").rmdir()
    other = tmp_path / "other.txt"
    other.write_text("keep")
    os.link(other, run / ".rlft.lock")
    refused(_resume(cli, run), DAMAGED, ".rlft.lock", "hard links")
    assert other.read_text() == "keep"


def test_acquire_lock_never_writes_through_a_symlink(tmp_path):
    from rlft.errors import UserError
    from rlft.run.guard import acquire_lock

    victim = tmp_path / "victim"
    victim.write_text("x")
    out = tmp_path / "run"
    out.mkdir()
    os.symlink(victim, out / ".rlft.lock")
    with pytest.raises(UserError, match="symlink"):
        acquire_lock(out)
    assert victim.read_text() == "x"


@pytest.mark.parametrize("name, content", [
    ("fingerprint.json", "[1, 2]"), ("fingerprint.json", "folder"), ("fingerprint.json", "{not json"),
    ("config.yaml", "- a\n- b\n"), ("config.yaml", "folder"), ("config.yaml", "a: [\n"),
    ("summary.json", "[]"), ("summary.json", "folder"), ("summary.json", "\"text\""),
    ("config.yaml", "symlink"), ("summary.json", "symlink"), ("fingerprint.json", "symlink"),
])
def test_own_files_of_the_wrong_shape_are_a_damaged_run_folder(cli, tmp_path, name, content):
    run = sft_run_folder(cli, tmp_path, status="interrupted")
    (run / "fingerprint.json").write_text(json.dumps({"method": "sft"}))
    path = run / name
    if path.exists():
        path.unlink()
    if content == "folder":
        path.mkdir()
    elif content == "symlink":
        target = tmp_path / "elsewhere"
        target.write_text("{}")
        os.symlink(target, path)
    else:
        path.write_text(content)
    before = snapshot(run)
    line = refused(_resume(cli, run), DAMAGED, name)
    assert "Traceback" not in line
    assert snapshot(run) == before


def test_the_fingerprint_hashes_the_bytes_that_were_read(tmp_path):
    """The data file is rewritten after it was read (as a slow pre-flight would let happen): fingerprint.json
    holds the hash of what was read, so --resume with the rewritten file says the data changed."""
    import hashlib
    from types import SimpleNamespace

    from rlft.data import load_split
    from rlft.run.guard import fingerprint

    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "completion": "2"}\n' * 3)
    original = hashlib.sha256(data.read_bytes()).hexdigest()
    cfg = SimpleNamespace(train=[str(data)], eval=None, fields={}, split="train", max_rows=None, eval_fraction=0.0,
                          get=lambda k, d=None: None)
    hashes: dict = {}
    load_split(cfg, "demonstrations", hashes=hashes)
    data.write_text('{"prompt": "1+1=", "completion": "3"}\n' * 3)  # changed during the pre-flight
    values = {"model": {"name_or_path": "tiny", "lora": {}}, "data": {"train": [str(data)]}, "sft": {}}
    assert fingerprint("sft", values, content=hashes)["data content"][str(data)] == original
    assert fingerprint("sft", values)["data content"][str(data)] != original  # what re-reading would record


def test_a_real_run_records_the_hash_of_what_it_read(cli, tmp_path):
    import hashlib

    data = tmp_path / "d.jsonl"
    data.write_bytes(SFT_DATA.read_bytes())
    out = tmp_path / "run"
    r = cli("sft", "--data", data, "-o", out, "--max-steps", "1", "--set", "watch.auto_holdout=false")
    assert r.code == 0, r.text
    saved = json.loads((out / "fingerprint.json").read_text())
    assert saved["data content"][str(data)] == hashlib.sha256(data.read_bytes()).hexdigest()
