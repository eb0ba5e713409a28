"""Bad input, second round (issue 23): nothing destroyed, never the wrong run.

The output rule (rlft/run/outputs.py) for every writing command, staged writes, the run-folder lock and the
run's fingerprint for --resume (rlft/run/guard.py). Each case runs the real CLI and asserts the exit code,
the one `error:` line with its `fix:` line, and that nothing was created or destroyed (files hashed).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DATA, ROOT, write_jsonl
from test_bad_input_nothing_destroyed import _SLOW_STEP, SFT_DATA, refused

PROMPTS = DATA / "arith/grpo_prompts.jsonl"


@pytest.fixture
def model(tmp_path, tiny_dir) -> Path:
    """A private copy of the tiny model: a folder a bad command could destroy."""
    import shutil

    return Path(shutil.copytree(tiny_dir, tmp_path / "model"))


def hashes(folder: Path) -> dict[str, str]:
    """Every file under `folder` with a hash of its bytes (a change to any shows)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def lora_run(tmp_path: Path, base: Path, name: str = "lora-run", task: str = "CAUSAL_LM") -> Path:
    """A LoRA run folder as peft saves it, naming `base` (checks that read no weights need no more)."""
    run = tmp_path / name
    run.mkdir()
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base),
                                                         "task_type": task, "peft_type": "LORA"}))
    (run / "adapter_model.safetensors").write_bytes(b"adapter")
    return run


def reward_model(tmp_path: Path, model: Path) -> Path:
    """A copy of the tiny model whose config says it is a one-output sequence classifier."""
    import shutil

    rm = Path(shutil.copytree(model, tmp_path / "rm"))
    config = json.loads((rm / "config.json").read_text())
    config.update(architectures=["LlamaForSequenceClassification"], num_labels=1,
                  id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    (rm / "config.json").write_text(json.dumps(config))
    return rm


# =========================================================================== the output rule


@pytest.mark.parametrize("where", ["base", "inside-run", "file"])
def test_merge_never_writes_onto_its_inputs(cli, tmp_path, model, where):
    run = lora_run(tmp_path, model)
    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    out = {"base": model, "inside-run": run / "merged", "file": file}[where]
    before, run_before = hashes(model), hashes(run)
    r = cli("merge", run, "-o", out, "--overwrite")
    refused(r, *{"base": ("is the input", "refers to"), "inside-run": ("is inside", "model"),
                 "file": ("is a file",)}[where])
    assert hashes(model) == before and hashes(run) == run_before and file.read_text() == "keep me"


def test_merge_counts_a_merged_parent_and_its_base_as_inputs(cli, tmp_path, model):
    """A LoRA run on a LoRA run names a merged folder (merged_from.json) as its base: the first stage's base
    model is an input of the merge too."""
    first = lora_run(tmp_path, model, "first")
    parent = tmp_path / "cache" / "merged-0123"
    parent.mkdir(parents=True)
    (parent / "config.json").write_text("{}")
    (parent / "merged_from.json").write_text(json.dumps({"adapter": str(first), "base": str(model)}))
    second = lora_run(tmp_path, parent, "second")
    before = hashes(model)
    for out in (model, parent, first / "sub"):
        refused(cli("merge", second, "-o", out, "--overwrite"), "refers to")
    assert hashes(model) == before


def test_export_never_replaces_its_source(cli, tmp_path, model):
    before = hashes(model)
    r = cli("export", model, "--gguf", model / "model.safetensors", "--overwrite")
    refused(r, "--gguf", "is inside", "source")
    run = lora_run(tmp_path, model)
    refused(cli("export", run, "--gguf", model / "x.gguf"), "is inside", "refers to")
    (tmp_path / "dir.gguf").mkdir()
    refused(cli("export", model, "--gguf", tmp_path / "dir.gguf", "--overwrite"), "is a folder")
    assert hashes(model) == before and not (model / "x.gguf").exists()


def test_training_output_inside_a_model_the_run_refers_to_is_refused(cli, tmp_path, model):
    run = lora_run(tmp_path, model)
    before = hashes(model)
    r = cli("sft", "--model", run, "--data", SFT_DATA, "-o", model / "again", "--max-steps", "1")
    refused(r, "output_dir", "refers to")
    assert hashes(model) == before and not (model / "again").exists()


def test_init_model_onto_a_file_or_another_folder_is_refused(cli, tmp_path):
    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    refused(cli("init-model", "-o", file), "is a file")
    other = tmp_path / "photos"
    other.mkdir()
    (other / "a.jpg").write_bytes(b"jpg")
    refused(cli("init-model", "-o", other, "--overwrite"), "not a model folder")
    refused(cli("init-model", "-o", "/proc/rlft-model"), "cannot be created")
    assert file.read_text() == "keep me" and (other / "a.jpg").read_bytes() == b"jpg"


def test_a_full_disk_leaves_no_half_written_model_or_report(cli, tmp_path, monkeypatch, model):
    """A write that fails midway (ENOSPC) is one line; the old output stays, no temporary sibling is left."""
    import rlft.models
    import rlft.report

    def full(out, seed=0):
        Path(out).mkdir(parents=True)
        (Path(out) / "config.json").write_text("{")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rlft.models, "build_tiny_model", full)
    out = tmp_path / "tiny"
    refused(cli("init-model", "-o", out), "No space left")
    assert not out.exists() and list(tmp_path.iterdir()) == [model]

    run = tmp_path / "run"
    write_jsonl(run / "metrics.jsonl" if run.mkdir() is None else None, [{"step": 1, "loss": 1.0}])
    (run / "summary.json").write_text(json.dumps({"status": "completed"}))
    assert cli("report", run).code == 0
    before = hashes(run)

    def fail(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(rlft.report, "plot_panels", fail)
    refused(cli("report", run), "Read-only file system")
    assert hashes(run) == before and sorted(p.name for p in run.iterdir()) == ["metrics.jsonl", "report",
                                                                              "summary.json"]


def test_report_reads_damaged_lines_and_refuses_a_pipe(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"status": "completed"}))
    damaged = b'{"step": 1, "loss": 1.0}\n[1, 2]\n7\n\xff\xfe\n{"step": 2, "loss": 0.5}\n'
    (run / "metrics.jsonl").write_bytes(damaged)
    write_jsonl(run / "alarms.jsonl", [{"name": 3}, {"step": "x"}, {"name": "kl_blowup", "step": 1},
                                       {"name": "kl_blowup", "step": 1, "message": "m", "fix": "f"}])
    r = cli("report", run)
    assert r.code == 0, r.text
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    start = time.time()
    refused(cli("report", run), "metrics.jsonl", "named pipe")
    assert time.time() - start < 5


# =========================================================================== the lock


def test_a_live_run_is_never_overwritten_or_resumed_and_ctrl_c_prints_a_line(cli, tmp_path, rlft_cache, tiny_dir):
    """A run waits inside the trainer's build (its folder exists, its lock held): --overwrite and --resume of
    its folder are refused naming its PID; Ctrl-C then ends it with one line and exit 130, and its lock goes."""
    from rlft.run.guard import LOCK, lock_holder

    out, flag = tmp_path / "out", tmp_path / "flag"
    env = {**os.environ, "RLFT_CACHE": str(rlft_cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_STEP, str(flag), "build", "sft", "--data", str(SFT_DATA),
                             "-o", str(out), "--max-steps", "1"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        end = time.time() + 240
        while not flag.exists() and time.time() < end and proc.poll() is None:
            time.sleep(0.2)
        assert flag.exists(), proc.communicate(timeout=60)
        assert lock_holder(out) == proc.pid
        before = hashes(out)
        refused(cli("sft", "--data", SFT_DATA, "-o", out, "--overwrite", "--max-steps", "1"),
                "still training", f"process {proc.pid}")
        refused(cli("sft", "--data", SFT_DATA, "-o", out, "--resume", "--max-steps", "1"), "still training")
        assert hashes(out) == before
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted (SIGINT)" in err and "Traceback" not in err
    assert lock_holder(out) is None and not (out / LOCK).exists()


def test_a_stale_lock_of_a_dead_process_is_ignored(tmp_path):
    from rlft.run.folder import prepare_output_dir
    from rlft.run.guard import LOCK, acquire_lock, lock_holder, release_lock

    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"status": "completed", "global_step": 3}))
    (out / LOCK).write_text("999999")  # a PID that does not run: nobody holds the lock
    assert lock_holder(out) is None
    prepare_output_dir(out, overwrite=True, check_only=True)
    acquire_lock(out)
    assert lock_holder(out) == os.getpid()
    release_lock(out)
    assert lock_holder(out) is None and not (out / LOCK).exists()


# =========================================================================== the run's identity


def run_folder(cli, tmp_path: Path, *args, fingerprinted: bool = True) -> Path:
    """An interrupted run folder as a training command leaves it (its config.yaml from --print-config and,
    unless `fingerprinted` is off, its fingerprint.json), without training."""
    import yaml

    from rlft.run.guard import FINGERPRINT, fingerprint

    out = tmp_path / "run"
    r = cli(*args, "-o", out, "--max-steps", "2", "--print-config")
    assert r.code == 0, r.text
    out.mkdir()
    (out / "config.yaml").write_text(r.out)
    if fingerprinted:
        values = yaml.safe_load(r.out)
        (out / FINGERPRINT).write_text(json.dumps(fingerprint(values["method"], values)))
    (out / "summary.json").write_text(json.dumps({"method": args[0], "status": "interrupted", "global_step": 1}))
    (out / "checkpoint-1").mkdir()
    (out / "checkpoint-1" / "trainer_state.json").write_text("{}")
    return out


@pytest.mark.parametrize("change", ["model", "lora", "content"])
def test_resume_of_a_changed_sft_run_is_refused_before_writing(cli, tmp_path, model, change):
    data = write_jsonl(tmp_path / "data.jsonl", [{"prompt": "1+1=", "completion": "2"}] * 4)
    run = run_folder(cli, tmp_path, "sft", "--data", data, "--model", model, fingerprinted=change == "content")
    before = hashes(run)
    extra = {"model": ["--model", "tiny"], "lora": ["--model", model, "--lora"], "content": ["--model", model]}
    if change == "content":
        write_jsonl(data, [{"prompt": "2+2=", "completion": "4"}] * 4)
    r = cli("sft", "--data", data, *extra[change], "-o", run, "--max-steps", "4", "--resume")
    refused(r, "--resume with different", {"model": "model was", "lora": "LoRA was",
                                           "content": f"content of {data} changed"}[change])
    assert hashes(run) == before


def test_resume_with_another_teacher_or_verifier_is_refused(cli, tmp_path, model):
    run = run_folder(cli, tmp_path, "distill", "--prompts", PROMPTS, "--model", model, "--teacher", model)
    before = hashes(run)
    r = cli("distill", "--prompts", PROMPTS, "--model", model, "--teacher", "tiny", "-o", run, "--max-steps", "4",
            "--resume")
    refused(r, "different teacher")
    assert hashes(run) == before
    (tmp_path / "run").rename(tmp_path / "distill-run")
    run = run_folder(cli, tmp_path, "rloo", "--prompts", PROMPTS, "--model", model, "--verifier", "math")
    before = hashes(run)
    r = cli("rloo", "--prompts", PROMPTS, "--model", model, "--verifier", "format", "-o", run, "--max-steps", "4",
            "--resume")
    refused(r, "different verifiers")
    assert hashes(run) == before


def test_a_run_never_writes_into_or_over_the_rlft_cache(cli, tmp_path, rlft_cache):
    before = hashes(rlft_cache)
    for out in (rlft_cache / "run", rlft_cache):
        refused(cli("sft", "--data", SFT_DATA, "-o", out, "--overwrite", "--max-steps", "1"), "rlft cache")
    assert hashes(rlft_cache) == before
