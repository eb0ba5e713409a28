"""Bad input, second round (issue 23): the cases of its "What was found" list that no other test ran as the
issue names them, as one table, plus Ctrl-C outside training.

Each table case builds what it needs in tmp_path, runs the real CLI and asserts exit 2, one `error:` line
naming the problem with its `fix:` line, no traceback, and that nothing under tmp_path was created, changed or
removed (every path listed with a hash of its bytes). The cases already tested elsewhere are listed in
tests/test_run_outputs.py and tests/test_bounded_reading.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DATA, ROOT, write_jsonl
from test_bad_input_nothing_destroyed import SFT_DATA, refused

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
THUMBS = [{"prompt": f"{i}+1=", "completion": str(i + 1), "label": i % 2 == 0} for i in range(8)]


def listing(folder: Path) -> dict[str, str]:
    """Every path under `folder`: a hash of a file's bytes, or what it is (a folder, a pipe, a sparse file)."""
    found = {}
    for p in sorted(folder.rglob("*")):
        if p.is_fifo() or p.is_dir():
            found[str(p)] = "fifo" if p.is_fifo() else "folder"
        elif p.stat().st_blocks == 0 and p.stat().st_size > 2**20:
            found[str(p)] = f"sparse {p.stat().st_size}"
        else:
            found[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def model_copy(tmp_path: Path, tiny_dir: Path, name: str, how: str = "") -> Path:
    """A copy of the tiny model: as it is, a reward model (score head), without a chat template, or with
    its weights cut in half."""
    path = Path(shutil.copytree(tiny_dir, tmp_path / name))
    if how == "reward":
        config = json.loads((path / "config.json").read_text())
        config.update(architectures=["LlamaForSequenceClassification"], num_labels=1)
        (path / "config.json").write_text(json.dumps(config))
    elif how == "no-template":
        (path / "chat_template.jinja").unlink(missing_ok=True)
        config = json.loads((path / "tokenizer_config.json").read_text())
        config.pop("chat_template", None)
        (path / "tokenizer_config.json").write_text(json.dumps(config))
    elif how == "truncated":
        weights = path / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return path


def _files(t: Path, tiny_dir: Path) -> dict[str, Path]:
    """What the cases name, built in `t` on demand by `{name}` in their arguments."""
    def fifo(name):
        os.mkfifo(t / name)
        return t / name

    def sparse(name):
        with (t / name).open("wb") as f:
            f.truncate(2**30)  # 1 GiB of holes, nothing on disk
        return t / name

    return {
        "model": lambda: model_copy(t, tiny_dir, "model"),
        "rm": lambda: model_copy(t, tiny_dir, "rm", "reward"),
        "nochat": lambda: model_copy(t, tiny_dir, "nochat", "no-template"),
        "trunc": lambda: model_copy(t, tiny_dir, "trunc", "truncated"),
        "thumbs": lambda: write_jsonl(t / "thumbs.jsonl", sorted(THUMBS, key=lambda r: not r["label"])),
        "big": lambda: write_jsonl(t / "big.jsonl", ['{"prompt": "1+1=", "answer": 2}',
                                                    '{"prompt": "2+2=", "answer": 99999999999999999999999}']),
        "lone": lambda: write_jsonl(t / "lone.jsonl", ['{"prompt": "1+1=", "completion": "2"}',
                                                      '{"prompt": "x\\ud800y", "completion": "2"}']),
        "fifo_data": lambda: fifo("data.jsonl"),
        "sparse": lambda: sparse("holes.jsonl"),
        "dir_gguf": lambda: (t / "x.gguf").mkdir() or t / "x.gguf",
        "lora": lambda: _adapter(t / "lora", model_copy(t, tiny_dir, "base")),
        "notes": lambda: (t / "notes.txt").write_text("keep me") and t / "notes.txt",
    }


def _adapter(run: Path, base: Path) -> Path:
    """A LoRA run folder as peft saves it, naming `base` (checks that read no weights need no more)."""
    run.mkdir()
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base),
                                                         "task_type": "CAUSAL_LM", "peft_type": "LORA"}))
    (run / "adapter_model.safetensors").write_bytes(b"adapter")
    return run


# id: (arguments, words the error line must hold[, words its fix line must hold]). `{name}` is built by
# _files, {out} is a run folder that must not appear, {none} a path that does not exist.
CASES = {
    # 3. hangs and memory: a sparse file, for the commands the other tests do not run on it
    "sparse-kto": ("kto --feedback {sparse} -o {out}", ["sparse file"]),
    "sparse-grpo": ("grpo --prompts {sparse} -o {out}", ["sparse file"]),
    "sparse-rloo": ("rloo --prompts {sparse} -o {out}", ["sparse file"]),
    # 4. the wrong kind of model, before the run folder exists
    "rloo-missing-reward-model": ("rloo --prompts {prompts} --reward-model {none} -o {out}",
                                  ["--reward-model", "not a folder"]),
    "distill-truncated-teacher": ("distill --prompts {prompts} --teacher {trunc} -o {out}",
                                  ["--teacher", "truncated"]),
    "rloo-language-model-as-reward-model": ("rloo --prompts {prompts} --reward-model {model} -o {out}",
                                            ["not a reward model (LlamaForCausalLM)"]),
    # 5. bad values, before the run folder exists
    "kto-max-rows-keeps-one-label": ("kto --feedback {thumbs} -o {out} --set data.max_rows=4",
                                     ["every label is True"], ["data.max_rows=4", "first rows"]),
    "rloo-int-beyond-int64": ("rloo --prompts {big} -o {out}", ["big.jsonl:2", "beyond 64 bits"]),
    "distill-int-beyond-int64": ("distill --prompts {big} --teacher {model} -o {out}",
                                 ["big.jsonl:2", "beyond 64 bits"]),
    "lint-lone-surrogate": ("data lint {lone}", None),
    "lint-int-beyond-int64": ("data lint {big}", None),
    "grpo-as-chat-without-template": ("grpo --model {nochat} --prompts {prompts} -o {out} --set data.as_chat=true",
                                      ["no chat template"]),
    "report-to-list-with-uninstalled": ("sft --data {sft} -o {out} --set train.report_to=[tensorboard,comet_ml]",
                                        ["comet_ml", "not installed"]),
    # 7. wrong diagnosis
    "fifo-data-file": ("sft --data {fifo_data} -o {out}", ["data.jsonl", "is a named pipe (FIFO)"]),
    "chat-folder-named-gguf": ("chat {dir_gguf} --prompt hi", ["x.gguf", "is a folder"]),
    "merge-onto-a-file-without-overwrite": ("merge {lora} -o {notes}", ["notes.txt", "is a file"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_issue_23_case_is_one_line_and_changes_nothing(cli, tmp_path, tiny_dir, case):
    args, words, *fix = CASES[case]
    make = _files(tmp_path, tiny_dir)
    named = {"out": tmp_path / "out", "none": tmp_path / "none", "prompts": PROMPTS, "sft": SFT_DATA}
    for name in make:
        if "{" + name + "}" in args:
            named[name] = make[name]()
    before = listing(tmp_path)
    r = cli(*[part.format(**named) for part in args.split()])
    if words is None:  # data lint: the finding is a row in its table and the exit code 1 (lint's "errors found")
        assert r.code == 1 and "bad_value" in r.out and "Traceback" not in r.text, r.text
        assert "surrogate" in r.out or "beyond 64" in r.out, r.out
    else:
        refused(r, *words)
        fix_line = r.err.split("  fix:")[-1]
        assert all(word in fix_line for word in (fix[0] if fix else [])), r.err
    assert listing(tmp_path) == before


# =========================================================================== resume of a completed run


@pytest.mark.parametrize("change", ["model", "lora"])
def test_resume_of_a_completed_run_with_another_model_or_lora_keeps_the_run(cli, tmp_path, tiny_dir, change):
    """The issue's case: a completed run resumed with more steps and another --model or an added --lora was
    refused only after its config.yaml, versions.json and summary.json had been rewritten."""
    import yaml

    from rlft.run.guard import FINGERPRINT, fingerprint

    model = model_copy(tmp_path, tiny_dir, "model")
    out = tmp_path / "run"
    r = cli("sft", "--data", SFT_DATA, "--model", model, "-o", out, "--max-steps", "2", "--print-config")
    assert r.code == 0, r.text
    out.mkdir()
    (out / "config.yaml").write_text(r.out)
    values = yaml.safe_load(r.out)
    (out / FINGERPRINT).write_text(json.dumps(fingerprint(values["method"], values)))
    (out / "versions.json").write_text("{}")
    (out / "summary.json").write_text(json.dumps({"method": "sft", "status": "completed", "global_step": 2}))
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-2" / "trainer_state.json").write_text("{}")
    before = listing(tmp_path)
    extra = {"model": ["--model", "tiny"], "lora": ["--model", model, "--lora"]}[change]
    r = cli("sft", "--data", SFT_DATA, *extra, "-o", out, "--max-steps", "4", "--resume")
    refused(r, "--resume with different", {"model": "model was", "lora": "LoRA was"}[change])
    assert listing(tmp_path) == before


# =========================================================================== Ctrl-C outside training


def test_ctrl_c_while_the_cli_imports_is_one_line(tmp_path, rlft_cache):
    """SIGINT before `rlft.cli` has set its handlers (the console script importing): one line, exit 130, no
    KeyboardInterrupt traceback. The signal is sent at a known point: right after `import rlft`."""
    code = ("import os, signal, sys; sys.argv = ['rlft', '--help']; import rlft; "
            "os.kill(os.getpid(), signal.SIGINT); import rlft.cli; rlft.cli.main()")
    env = {**os.environ, "RLFT_CACHE": str(rlft_cache), "PYTHONPATH": str(ROOT)}
    # SIGINT as an interactive shell leaves it: a background job (`make test &`) inherits it ignored, which rlft
    # keeps ignoring on purpose (rlft.errors), and the test would measure the launcher instead
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "interrupted (SIGINT) outside a training step: no checkpoint saved by it"


_WAIT_IN_SAVE = """
import sys, time
from pathlib import Path
import transformers
flag = Path(sys.argv[1])
real = transformers.PreTrainedModel.save_pretrained
def save_then_wait(self, *args, **kwargs):
    real(self, *args, **kwargs)
    flag.write_text("saved")
    time.sleep(120)
transformers.PreTrainedModel.save_pretrained = save_then_wait
from rlft.cli import main
main(sys.argv[2:])
"""


def test_ctrl_c_during_a_merge_is_one_line_and_keeps_the_old_output(tmp_path, rlft_cache, tiny_dir):
    """SIGINT while merge writes its folder (weights saved, tokenizer not yet): exit 130, the SIGTERM line's
    twin, the old merged folder as it was and no temporary sibling left."""
    import peft
    import transformers

    base = model_copy(tmp_path, tiny_dir, "model")
    run = tmp_path / "run"
    lora = peft.LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")
    peft.get_peft_model(transformers.AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(run)
    old = model_copy(tmp_path, tiny_dir, "merged")  # an earlier merge that --overwrite would replace
    before = listing(tmp_path)
    flag = tmp_path.parent / f"{tmp_path.name}-flag"
    env = {**os.environ, "RLFT_CACHE": str(rlft_cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _WAIT_IN_SAVE, str(flag), "merge", str(run), "-o", str(old),
                             "--overwrite"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    end = time.time() + 240
    while not flag.exists() and time.time() < end and proc.poll() is None:
        time.sleep(0.2)
    assert flag.exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted (SIGINT)" in err and "Traceback" not in err, err
    assert listing(tmp_path) == before


# =========================================================================== a GGUF whose ids the model cannot embed


@pytest.mark.parametrize("damage, words", [
    ({"extra_tokens": 5}, ["lists 264 tokens", "embedding has 259 rows"]),
    ({"eos": 400}, ["tokenizer.ggml.eos_token_id = 400", "past its 259 tokens"]),
])
def test_a_gguf_whose_tokenizer_has_ids_past_the_embedding_is_one_line(cli, tmp_path, rlft_cache, damage, words):
    pytest.importorskip("gguf")
    from gguf_tiny import write_tiny_gguf

    src = tmp_path / "damaged.gguf"
    write_tiny_gguf(src, **damage)
    before, cached = listing(tmp_path), sorted(rlft_cache.iterdir())
    refused(cli("sft", "--model", src, "--data", SFT_DATA, "-o", tmp_path / "out", "--max-steps", "1"),
            "damaged.gguf", *words)
    refused(cli("chat", src, "--prompt", "hi"), *words)
    assert listing(tmp_path) == before and sorted(rlft_cache.iterdir()) == cached


def test_the_valid_tiny_gguf_converts_with_every_token_id_embedded(cli, tmp_path, rlft_cache):
    """The valid tiny GGUF passes the check, and the `<|endoftext|>` transformers' converter adds past its
    259 rows is dropped: that text is plain bytes, and chat on it works."""
    pytest.importorskip("gguf")
    from gguf_tiny import write_tiny_gguf
    from transformers import AutoConfig, AutoTokenizer

    from rlft.sources import gguf_folder

    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    folder = gguf_folder(src)
    tok, rows = AutoTokenizer.from_pretrained(folder), AutoConfig.from_pretrained(folder).vocab_size
    assert rows == 259 and max(tok.get_vocab().values()) < rows and len(tok) == rows
    assert max(tok("hi <|endoftext|> <|im_end|>").input_ids) < rows
    r = cli("chat", src, "--prompt", "hi <|endoftext|>", "--max-new-tokens", "4")
    assert r.code == 0 and "Traceback" not in r.text, r.text


# =========================================================================== full and read-only disks


def _mount(point: Path, size: str) -> None:
    point.mkdir()
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no mount command here: the full-disk cases need it")
    if proc.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({proc.stderr.strip() or proc.returncode}): the "
                    "full-disk cases need root")


@pytest.fixture
def disks(tmp_path):
    """`full`: a 64 KiB tmpfs (any model fills it); `ro`: a read-only tmpfs holding an earlier merge output
    (`old`, a model folder) and a finished run folder (`run`). Unmounted afterwards."""
    full, ro = tmp_path / "full", tmp_path / "ro"
    _mount(full, "64k")
    try:
        _mount(ro, "1m")
        (ro / "old").mkdir()
        (ro / "old" / "config.json").write_text("{}")
        (ro / "run").mkdir()
        (ro / "run" / "summary.json").write_text(json.dumps({"method": "sft", "status": "completed"}))
        write_jsonl(ro / "run" / "metrics.jsonl", [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}])
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        yield {"full": full, "ro": ro}
    finally:
        import gc

        gc.collect()  # a writer that failed may still hold its file open, which keeps the mount busy
        for point in (full, ro):
            if point.is_mount() and subprocess.run(["umount", str(point)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(point)], check=False)  # detached once the file is closed


def _lora_run(tmp_path: Path, tiny_dir: Path) -> Path:
    """A real LoRA adapter (untrained) on a copy of the tiny model, as merge reads it."""
    import peft
    import transformers

    base = model_copy(tmp_path, tiny_dir, "base")
    run = tmp_path / "lora"
    lora = peft.LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")
    peft.get_peft_model(transformers.AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(run)
    return run


# id: (arguments, words the error line must hold). {full} / {ro} are the disks, {lora} a LoRA run, {bpe} a
# byte-level BPE Llama export can write, {model} the tiny model.
DISK_CASES = {
    "merge-full": ("merge {lora} -o {full}/merged", ["No space left"]),
    "merge-read-only-overwrite": ("merge {lora} -o {ro}/old --overwrite", ["Read-only file system"]),
    "export-full": ("export {bpe} --gguf {full}/m.gguf", ["No space left"]),
    "export-read-only": ("export {bpe} --gguf {ro}/m.gguf", ["Read-only file system"]),
    "init-model-full": ("init-model -o {full}/tiny", ["No space left"]),
    "sft-full": ("sft --model {model} --data {sft} -o {full}/run --max-steps 1", ["No space left"]),
    "sft-lora-full": ("sft --model {model} --lora --data {sft} -o {full}/run --max-steps 1", ["No space left"]),
    "grpo-full": ("grpo --model {model} --prompts {prompts} -o {full}/run --max-steps 1 --no-preflight",
                  ["No space left"]),
    "sft-read-only": ("sft --model {model} --data {sft} -o {ro}/new --max-steps 1", ["Read-only file system"]),
    "report-read-only": ("report {ro}/run", ["Read-only file system"]),
}


@pytest.mark.parametrize("case", list(DISK_CASES))
def test_a_full_or_read_only_disk_is_one_line_and_leaves_nothing(cli, tmp_path, tiny_dir, disks, case):
    """Each writing command on a disk that fills (64 KiB) or is read-only: exit 2, one line naming the disk's
    problem, no partial output (the full disk is left empty) and the earlier outputs as they were."""
    args, words = DISK_CASES[case]
    named = {**disks, "sft": SFT_DATA, "prompts": PROMPTS}
    if "{lora}" in args:
        named["lora"] = _lora_run(tmp_path, tiny_dir)
    if "{model}" in args:
        named["model"] = model_copy(tmp_path, tiny_dir, "model")
    if "{bpe}" in args:
        pytest.importorskip("gguf")
        from test_export import build_bpe_llama

        named["bpe"] = build_bpe_llama(tmp_path / "bpe")
    before = listing(tmp_path)
    refused(cli(*[part.format(**named) for part in args.split()]), *words)
    assert listing(tmp_path) == before
    assert list(disks["full"].iterdir()) == []


@pytest.mark.parametrize("resumed", [False, True])
def test_a_run_that_fills_the_disk_keeps_only_whole_checkpoints(tmp_path, resumed):
    """The ending of a training run on a full disk (a SafetensorError naming `os error 28`): the checkpoint
    being written (no trainer_state.json yet) and the final weights go; a resumed run keeps its folder and its
    whole checkpoint, so --resume can continue; a fresh run with no whole checkpoint leaves no folder."""
    from rlft.run.folder import RunRecord

    out = tmp_path / "run"
    out.mkdir()
    if resumed:
        (out / "checkpoint-1").mkdir()
        (out / "checkpoint-1" / "trainer_state.json").write_text("{}")
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-2" / "model.safetensors").write_bytes(b"half")
    record = RunRecord(out, "sft", resumed_from=str(out / "checkpoint-1") if resumed else None)
    (out / "model.safetensors").write_bytes(b"half")

    class SafetensorError(Exception):
        pass

    with pytest.raises(SafetensorError):
        with record.closing_on_error():
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    if resumed:
        assert sorted(p.name for p in out.iterdir()) == ["checkpoint-1", "summary.json"]
        assert json.loads((out / "summary.json").read_text())["status"] == "failed"
    else:
        assert not out.exists()


def test_report_on_a_full_disk_is_one_line_and_writes_no_report(cli, tmp_path, disks):
    run = disks["full"] / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"method": "sft", "status": "completed"}))
    write_jsonl(run / "metrics.jsonl", [{"step": i, "loss": 1 / i} for i in range(1, 200)])
    (disks["full"] / "filler").write_bytes(os.urandom(40_000))  # 8 KiB left: the plots do not fit
    before = listing(tmp_path)
    refused(cli("report", run), "report", "No space left")
    assert listing(tmp_path) == before


def test_the_write_errors_of_safetensors_and_torch_on_a_full_disk_are_disk_errors(disks):
    """What a full disk raises in the libraries that write checkpoints, with no OSError among them."""
    import torch
    from safetensors.torch import save_file

    from rlft.errors import disk_errno

    for write in (lambda p: save_file({"x": torch.zeros(100_000)}, p), lambda p: torch.save(torch.zeros(100_000), p)):
        with pytest.raises(Exception) as caught:
            write(str(disks["full"] / "w"))
        assert disk_errno(caught.value) in (28, 5), repr(caught.value)
        (disks["full"] / "w").unlink(missing_ok=True)
    assert disk_errno(RuntimeError("shape mismatch")) is None and disk_errno(ValueError("os error 2")) is None
