"""Bad input never destroys a run and never crashes generically (issue 12, sections 2-5).

Every case runs the real CLI (`rlft.cli.main` in-process, or a subprocess where a signal is involved) and
asserts exit code 2, one `error:` line naming the problem followed by one `fix:` line, and that nothing was
written or destroyed: the model folder keeps its files, a run folder is unchanged, no run folder is created.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DATA, ROOT, write_jsonl

SFT_DATA = DATA / "arith/sft_train.jsonl"
PAIRS = DATA / "arith/pairs_train.jsonl"
PROMPTS = DATA / "arith/grpo_prompts.jsonl"
TEST = DATA / "arith/test.jsonl"


def refused(r, *words: str) -> str:
    """Exit 2 with `error: ...` on one line naming `words`, then `  fix: ...`; returns the error line."""
    assert r.code == 2, r.text
    assert "Traceback" not in r.text and "rerun with --debug" not in r.text, r.text
    lines = r.err.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    assert len(errors) == 1, r.err
    line = lines[errors[0]]
    assert errors[0] + 1 < len(lines) and lines[errors[0] + 1].startswith("  fix:"), r.err
    for word in words:
        assert word in line, f"{word!r} not in {line!r}"
    return line


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and modification time (a change to any shows)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def model(tmp_path, tiny_dir) -> Path:
    """A private copy of the tiny model: a folder a bad command could destroy."""
    return Path(shutil.copytree(tiny_dir, tmp_path / "model"))


def sft_run_folder(cli, tmp_path, status: str = "completed", step: int = 2, data=SFT_DATA,
                   checkpoint: bool = True) -> Path:
    """A run folder as `rlft sft` leaves it (its real config.yaml from --print-config), without training."""
    out = tmp_path / "run"
    r = cli("sft", "--data", data, "-o", out, "--max-steps", str(step), "--print-config")
    assert r.code == 0, r.text
    out.mkdir()
    (out / "config.yaml").write_text(r.out)
    (out / "summary.json").write_text(json.dumps({"method": "sft", "status": status, "global_step": step}))
    (out / "model.safetensors").write_bytes(b"final weights")
    if checkpoint:
        (out / f"checkpoint-{step}").mkdir()
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    return out


# =========================================================================== section 2: runs destroyed


@pytest.mark.parametrize("where", ["model", "parent", "inside"])
def test_output_dir_on_the_model_is_refused_and_the_model_kept(cli, tmp_path, model, where):
    out = {"model": model, "parent": tmp_path, "inside": model / "sub"}[where]
    (tmp_path / "summary.json").write_text("{}")  # tmp_path looks like a run folder: --overwrite would take it
    before = snapshot(model)
    r = cli("sft", "--model", model, "--data", SFT_DATA, "-o", out, "--overwrite", "--max-steps", "1")
    refused(r, "output_dir", "model.name_or_path", str(model))
    assert snapshot(model) == before and not (model / "sub").exists()


def test_output_dir_on_the_data_eval_or_holdout_folder_is_refused(cli, tmp_path, model):
    for key, flag in (("data.train", "--data"), ("data.eval", "--eval-data"), ("watch.holdout", "--holdout")):
        folder = tmp_path / key
        folder.mkdir()
        data = Path(shutil.copy(TEST if key == "watch.holdout" else SFT_DATA, folder / "rows.jsonl"))
        (folder / "config.yaml").write_text("method: sft\n")  # an old run folder the user keeps data in
        args = ["--data", SFT_DATA] if key != "data.train" else []
        r = cli("sft", "--model", model, *args, flag, data, "-o", folder, "--overwrite", "--max-steps", "1")
        refused(r, "output_dir", key)
        assert data.read_bytes() == (TEST if key == "watch.holdout" else SFT_DATA).read_bytes()


def test_output_dir_on_the_reward_model_or_a_verifier_file_is_refused(cli, tmp_path, model):
    rm = Path(shutil.copytree(model, tmp_path / "rm"))
    (rm / "summary.json").write_text("{}")
    before = snapshot(rm)
    for command in ("grpo", "ppo"):
        r = cli(command, "--model", model, "--prompts", PROMPTS, "--reward-model", rm, "-o", rm, "--overwrite",
                "--max-steps", "1")
        refused(r, "output_dir", f"{command}.reward_model")
    assert snapshot(rm) == before
    plugin = tmp_path / "plugins" / "check.py"
    plugin.parent.mkdir()
    plugin.write_text("def score(completions, **kw):\n    return [0.0] * len(completions)\n")
    r = cli("grpo", "--model", model, "--prompts", PROMPTS, "--verifier", f"{plugin}:score", "-o", plugin.parent,
            "--max-steps", "1")
    refused(r, "output_dir", "grpo.verifiers")
    assert plugin.exists()


def test_resume_of_another_method_or_other_data_is_refused(cli, tmp_path):
    run = sft_run_folder(cli, tmp_path, status="interrupted")
    before = snapshot(run)
    r = cli("dpo", "--pairs", PAIRS, "-o", run, "--max-steps", "5", "--resume")
    refused(r, "`rlft sft` run, not `rlft dpo`")
    other = write_jsonl(tmp_path / "other.jsonl", [{"prompt": "1+1=", "completion": "2"}])
    r = cli("sft", "--data", other, "-o", run, "--max-steps", "5", "--resume")
    refused(r, "different data", "data.train")
    assert snapshot(run) == before


def test_resume_of_a_completed_run_needs_more_steps(cli, tmp_path):
    run = sft_run_folder(cli, tmp_path, status="completed", step=2)
    before = snapshot(run)
    r = cli("sft", "--data", SFT_DATA, "-o", run, "--max-steps", "2", "--resume")
    refused(r, "already completed (2 steps)")
    assert snapshot(run) == before
    from rlft.config import resolve
    from rlft.run.folder import check_resume

    grown = resolve("sft", flags={"data.train": ([str(SFT_DATA)], "--data"), "train.max_steps": (5, "--max-steps"),
                                  "train.output_dir": (str(run), "-o")})
    check_resume(grown, run)  # max_steps grew past the finished step: allowed (no exception)


def test_overwrite_with_resume_is_refused_and_the_run_kept(cli, tmp_path):
    run = sft_run_folder(cli, tmp_path, status="interrupted")
    before = snapshot(run)
    r = cli("sft", "--data", SFT_DATA, "-o", run, "--max-steps", "5", "--resume", "--overwrite")
    refused(r, "--overwrite and --resume")
    assert snapshot(run) == before
    from rlft.errors import UserError
    from rlft.run.folder import prepare_output_dir

    with pytest.raises(UserError, match="--overwrite and --resume"):  # the same guard for every method (PPO)
        prepare_output_dir(run, overwrite=True, resume=True)
    assert snapshot(run) == before


@pytest.mark.parametrize("method,extra", [("kto", ()), ("rloo", ()), ("distill", ("--teacher", "tiny"))])
def test_new_methods_refuse_overwrite_with_resume_before_anything(cli, tmp_path, method, extra):
    """The early check (rlft.checks) runs for every training command, not only the first five."""
    run = sft_run_folder(cli, tmp_path, status="interrupted")
    before = snapshot(run)
    r = cli(method, "--model", "tiny", *extra, "-o", run, "--resume", "--overwrite")
    refused(r, "--overwrite and --resume")
    assert snapshot(run) == before


def _plain_lm(tmp_path, model) -> Path:
    return Path(shutil.copytree(model, tmp_path / "plain-lm", dirs_exist_ok=True))


@pytest.mark.parametrize("case", ["missing_model", "plain_lm_reward_grpo", "plain_lm_reward_ppo", "plugin_import",
                                  "grpo_divisibility", "seed"])
def test_checks_run_before_the_run_folder_is_created(cli, tmp_path, model, case):
    out = tmp_path / "out"
    plugin = tmp_path / "broken.py"
    plugin.write_text("import not_a_module_anywhere\n")
    args, words = {
        "missing_model": (["sft", "--data", SFT_DATA, "--model", tmp_path / "nope"], ["not a folder here"]),
        "plain_lm_reward_grpo": (["grpo", "--prompts", PROMPTS, "--model", model, "--reward-model",
                                  _plain_lm(tmp_path, model)], ["is not a reward model", "LlamaForCausalLM"]),
        "plain_lm_reward_ppo": (["ppo", "--prompts", PROMPTS, "--model", model, "--reward-model",
                                 _plain_lm(tmp_path, model)], ["is not a reward model"]),
        "plugin_import": (["grpo", "--prompts", PROMPTS, "--model", model, "--verifier", f"{plugin}:f"],
                          ["loading verifier file", "ModuleNotFoundError"]),
        "grpo_divisibility": (["grpo", "--prompts", PROMPTS, "--model", model, "--batch-size", "6",
                               "--num-generations", "4"], ["--num-generations", "does not divide the 6"]),
        "seed": (["sft", "--data", SFT_DATA, "--model", model, "--seed", "-1"], ["--seed", "train.seed = -1"]),
    }[case]
    refused(cli(*args, "-o", out, "--max-steps", "1"), *words)
    assert not out.exists()


def _failed_before_step_1(cli, tmp_path) -> Path:
    """A real run that fails after its folder exists, before step 1 (every row truncated away)."""
    out = tmp_path / "o"
    r = cli("sft", "--data", DATA / "support/demos.jsonl", "-o", out, "--max-steps", "1",
            "--set", "sft.max_length=64")
    refused(r, "all 200 training rows were dropped")  # 200 less the automatic held-out slice (rlft.watch.heldout)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and not summary.get("global_step")
    return out


def test_a_folder_left_by_a_run_that_failed_before_step_1_does_not_block_the_rerun(cli, tmp_path):
    out = _failed_before_step_1(cli, tmp_path)
    r = cli("sft", "--data", DATA / "support/demos.jsonl", "-o", out, "--max-steps", "1", "--resume")
    refused(r, "no checkpoint", "ended before the first checkpoint")
    r = cli("sft", "--data", DATA / "support/demos.jsonl", "-o", out, "--max-steps", "1", "--batch-size", "2",
            "--set", "sft.max_length=512")
    assert r.code == 0, r.text  # no --overwrite needed
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


_SLOW_STEP = """
import sys, time
from pathlib import Path
import rlft.data, rlft.methods.sft
flag, where = Path(sys.argv[1]), sys.argv[2]
def waiting(real):
    def wait(*args, **kwargs):
        flag.write_text("waiting")
        time.sleep(120)
        return real(*args, **kwargs)
    return wait
if where == "data":
    rlft.data.load_split = waiting(rlft.data.load_split)
else:
    rlft.methods.sft.build = waiting(rlft.methods.sft.build)
from rlft.cli import main
main(sys.argv[3:])
"""


@pytest.mark.parametrize("where", [pytest.param("data", marks=pytest.mark.slow), "build"])
def test_sigterm_before_training_prints_a_line_and_leaves_no_running_summary(tmp_path, rlft_cache, tiny_dir,
                                                                            where):
    """SIGTERM while the data loads (before the run folder) or the trainer is built (after it): one line,
    exit 143, and summary.json is never left at `running`."""
    out, flag = tmp_path / "out", tmp_path / "flag"
    env = {**os.environ, "RLFT_CACHE": str(rlft_cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_STEP, str(flag), where, "sft", "--data", str(SFT_DATA),
                             "-o", str(out), "--max-steps", "1"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    end = time.time() + 240
    while not flag.exists() and time.time() < end and proc.poll() is None:
        time.sleep(0.2)
    assert flag.exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    if where == "data":
        assert not out.exists()
    else:
        summary = json.loads((out / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["signal"] == signal.SIGTERM


def test_a_large_data_file_shows_progress(cli, tmp_path, monkeypatch):
    import rlft.data

    monkeypatch.setattr(rlft.data, "PROGRESS_BYTES", 1000)  # the real threshold is 50 MB
    bad = write_jsonl(tmp_path / "big.jsonl", [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(99)]
                      + [{"prompt": "x"}])
    r = cli("sft", "--data", bad, "-o", tmp_path / "out", "--max-steps", "1")
    refused(r, f"{bad}:100: field 'completion': missing")
    assert f"reading {bad}" in r.err and "rows" in r.err


# =========================================================================== section 3: bad values accepted


@pytest.mark.parametrize("args, words", [
    (["--set", "train.max_steps=-5"], ["train.max_steps = -5", "--set"]),
    (["--max-steps", "0"], ["train.max_steps = 0", "--max-steps"]),
    (["--epochs", "0"], ["train.num_train_epochs = 0", "--epochs"]),
    (["--epochs", "-1"], ["train.num_train_epochs"]),
])
def test_steps_and_epochs_that_train_nothing_are_refused(cli, tmp_path, args, words):
    out = tmp_path / "out"
    refused(cli("sft", "--data", SFT_DATA, "-o", out, *args), *words)
    assert not out.exists()


@pytest.mark.parametrize("args, words", [
    (["--limit", "0"], ["--limit 0"]), (["--limit", "-1"], ["--limit -1"]),
    (["--max-new-tokens", "0"], ["--max-new-tokens 0"]), (["--temperature", "-1"], ["--temperature -1"]),
    (["--temperature", "0", "--samples", "4"], ["--temperature 0", "sampling"]),
])
def test_eval_generation_flags_are_checked(cli, model, args, words):
    refused(cli("eval", "--model", model, "--data", TEST, *args), *words)


def test_preflight_generation_flags_are_checked(cli, model):
    refused(cli("preflight", "--model", model, "--prompts", PROMPTS, "--verifier", "math", "--temperature", "0"),
            "--temperature 0")
    refused(cli("preflight", "--model", model, "--prompts", PROMPTS, "--verifier", "math", "--max-new-tokens", "0"),
            "--max-new-tokens 0")


def test_choose_refuses_impossible_numbers(cli):
    line = refused(cli("choose", "--signal", "verifier", "--rows", "500", "--pass-rate", "0",
                       "--mixed-fraction", "0.9"), "--mixed-fraction 0.9 is impossible", "--pass-rate 0")
    assert "at most 0 " in line
    refused(cli("choose", "--signal", "verifier", "--rows", "500", "--pass-rate", "0.01", "--mixed-fraction", "0.5",
                "--num-generations", "8"), "at most 0.08")
    r = cli("choose", "--signal", "pairs", "--rows", "0")
    assert r.code == 2 and "--rows" in r.err and "Traceback" not in r.text
    ok = cli("choose", "--signal", "verifier", "--rows", "500", "--pass-rate", "0.4", "--mixed-fraction", "0.6",
             "--json")
    assert ok.code == 0, ok.text


@pytest.mark.parametrize("command", ["dpo", "reward"])
def test_some_pairs_with_chosen_equal_rejected_are_refused_with_file_line(cli, tmp_path, command):
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines()[:20]]
    rows[6]["rejected"] = rows[6]["chosen"]
    pairs = write_jsonl(tmp_path / "pairs.jsonl", rows)
    out = tmp_path / "out"
    refused(cli(command, "--pairs", pairs, "-o", out, "--max-steps", "1"),
            f"{pairs}:7: field 'chosen': equals rejected")
    assert not out.exists()


def test_data_folder_without_data_files_is_refused(cli, tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "notes.txt").write_text("some prose, not rows\n")
    out = tmp_path / "out"
    refused(cli("sft", "--data", folder, "-o", out, "--max-steps", "1"), "holds no data files")
    assert not out.exists()


def test_rename_to_a_missing_column_is_refused(cli, tmp_path):
    out = tmp_path / "out"
    line = refused(cli("sft", "--data", SFT_DATA, "-o", out, "--set", "data.fields.prompt=question"),
                   "data.fields", "prompt: question")
    assert "completion" in line  # lists the columns the file has
    assert not out.exists()


def test_duplicate_key_in_a_recipe_is_refused_with_its_line(cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train:\n  max_steps: 5\n  learning_rate: 0.001\n  max_steps: 50\n")
    refused(cli("sft", "--recipe", recipe, "--data", SFT_DATA, "-o", tmp_path / "out"),
            f"{recipe}:4", "duplicate key 'max_steps' (also on line 2)")


PLUGINS = {
    "short": ("return [1.0]", "returned 1 rewards for"),
    "strings": ("return ['1.0'] * len(completions)", "returned str '1.0' as reward 0"),
    "none": ("return None", "returned NoneType None instead of a list"),
    "raises": ("raise KeyError('answer')", "raised KeyError"),
    "nan": ("return [float('nan')] * len(completions)", "returned nan as reward 0"),
}


def _plugin(tmp_path, case) -> str:
    body, _ = PLUGINS[case]
    path = tmp_path / f"plugin_{case}.py"
    path.write_text(f"def score(completions, **kwargs):\n    {body}\n")
    return f"{path}:score"


@pytest.mark.parametrize("case", list(PLUGINS))
def test_verify_names_a_plugin_that_returns_wrong_rewards(cli, tmp_path, case):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"completion": "4", "answer": "4"},
                                                 {"completion": "5", "answer": "6"}])
    refused(cli("verify", _plugin(tmp_path, case), "--data", rows), f"verifier plugin {tmp_path}", PLUGINS[case][1])


def test_eval_preflight_and_grpo_name_a_plugin_that_returns_wrong_rewards(cli, tmp_path, model):
    spec = _plugin(tmp_path, "short")
    refused(cli("eval", "--model", model, "--data", TEST, "--limit", "3", "--verifier", spec), "returned 1 rewards")
    line = refused(cli("preflight", "--model", model, "--prompts", PROMPTS, "--verifier", spec, "--max-prompts", "2",
                       "--num-generations", "2", "--max-new-tokens", "4"), "verifier plugin", "returned 1 rewards")
    assert "partial credit" not in line
    out = tmp_path / "out"
    refused(cli("grpo", "--model", model, "--prompts", PROMPTS, "--verifier", spec, "-o", out, "--max-steps", "1",
                "--set", "grpo.preflight_prompts=2", "--num-generations", "2", "--batch-size", "2",
                "--set", "grpo.max_completion_length=4"), "returned 1 rewards")
    assert not out.exists()


# =========================================================================== section 4: generic crashes


def test_pairs_mixing_text_and_message_lists_name_the_rows(cli, tmp_path):
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines()[:10]]
    rows[3]["chosen"] = [{"role": "assistant", "content": rows[3]["chosen"]}]
    pairs = write_jsonl(tmp_path / "pairs.jsonl", rows)
    out = tmp_path / "out"
    refused(cli("dpo", "--pairs", pairs, "-o", out, "--max-steps", "1"),
            f"{pairs}:4: field 'chosen': is a list while the other rows hold a string")
    assert not out.exists()


def test_gold_values_of_mixed_types_are_refused_before_the_run_folder(cli, tmp_path, model):
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines()[:10]]
    rows[2]["answer"] = 7  # a number among strings: pyarrow cannot build the column
    prompts = write_jsonl(tmp_path / "p.jsonl", rows)
    out = tmp_path / "out"
    refused(cli("grpo", "--model", model, "--prompts", prompts, "-o", out, "--no-preflight", "--max-steps", "1"),
            f"{prompts}:3: field 'answer': is a number")
    assert not out.exists()


def _damage(model: Path, how: str) -> None:
    if how == "corrupt_config":
        (model / "config.json").write_text('{"model_type": "llama", ')
    elif how == "no_model_type":
        config = json.loads((model / "config.json").read_text())
        del config["model_type"]
        (model / "config.json").write_text(json.dumps(config))
    elif how == "no_tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (model / name).unlink()
    elif how == "truncated_weights":
        weights = model / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "file":
        shutil.rmtree(model)
        model.write_text("not a folder")


DAMAGE = {"corrupt_config": "config.json is not valid JSON", "no_model_type": "config.json has no model_type",
          "no_tokenizer": "has no tokenizer files", "truncated_weights": "model.safetensors is truncated",
          "file": "is a file, not a model folder"}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_model_folder_is_one_line_before_anything_is_written(cli, tmp_path, model, how):
    _damage(model, how)
    out = tmp_path / "out"
    refused(cli("sft", "--model", model, "--data", SFT_DATA, "-o", out, "--max-steps", "1"), DAMAGE[how])
    assert not out.exists()
    refused(cli("eval", "--model", model, "--data", TEST, "--limit", "2"), DAMAGE[how])


def test_a_damaged_reward_model_is_one_line(cli, tmp_path, model):
    rm = Path(shutil.copytree(model, tmp_path / "rm"))
    _damage(rm, "truncated_weights")
    out = tmp_path / "out"
    refused(cli("grpo", "--model", model, "--prompts", PROMPTS, "--reward-model", rm, "-o", out), "--reward-model",
            "truncated")
    assert not out.exists()


def test_an_uncached_hub_id_while_offline_is_one_line(cli, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    out = tmp_path / "out"
    refused(cli("sft", "--model", "rlft-tests/not-cached-model", "--data", SFT_DATA, "-o", out),
            "not in the local Hugging Face cache", "HF_HUB_OFFLINE=1")
    assert not out.exists()


def test_output_dir_under_a_file_or_in_proc_is_one_line(cli, tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    refused(cli("sft", "--data", SFT_DATA, "-o", a_file / "run", "--max-steps", "1"), "which is a file")
    assert a_file.read_text() == "x"
    refused(cli("sft", "--data", SFT_DATA, "-o", "/proc/rlft-run", "--max-steps", "1"), "cannot be created")


def test_unreadable_data_files_are_one_line(cli, tmp_path):
    out = tmp_path / "out"
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # reading it would block forever
    refused(cli("sft", "--data", fifo, "-o", out), "not a regular file")
    # root reads a chmod 000 file anyway, so a read that fails with an OS error: a link to /proc/self/mem
    # (a regular file whose read at offset 0 fails with EIO)
    broken = tmp_path / "broken.jsonl"
    broken.symlink_to("/proc/self/mem")
    refused(cli("sft", "--data", broken, "-o", out), "cannot be read", "Input/output error")
    assert not out.exists()


def test_report_of_a_corrupt_summary_is_one_line(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text('{"status": "compl')
    refused(cli("report", run), "summary.json is damaged")
    (run / "summary.json").write_text("[1, 2]")
    refused(cli("report", run), "summary.json is damaged", "not a mapping")


# =========================================================================== section 5: wrong diagnosis


def test_a_folder_where_a_file_is_expected_is_called_a_folder(cli, tmp_path, model):
    folder = tmp_path / "rows.jsonl"
    folder.mkdir()
    refused(cli("sft", "--data", folder, "-o", tmp_path / "o"), "is a folder")
    refused(cli("eval", "--model", model, "--data", folder), "is a folder")
    refused(cli("verify", "math", "--data", folder), "is a folder")
    recipe = tmp_path / "recipe.yaml"
    recipe.mkdir()
    refused(cli("sft", "--recipe", recipe, "--data", SFT_DATA), "is a folder")


def test_tilde_in_recipe_paths_is_the_home_folder(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    bad = write_jsonl(tmp_path / "rows.jsonl", [{"prompt": "1+1=", "completion": "2"}, {"prompt": "2+2="}])
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data:\n  train: ~/rows.jsonl\ntrain:\n  output_dir: ~/run\n")
    r = cli("sft", "--recipe", recipe, "--print-config")
    assert r.code == 0 and f"- {bad}" in r.out and f"output_dir: {tmp_path / 'run'}" in r.out
    refused(cli("sft", "--recipe", recipe), f"{bad}:2: field 'completion': missing")
    assert not (tmp_path / "run").exists() and not Path("~/run").exists()


def test_a_row_with_prompt_and_messages_gets_file_line(cli, tmp_path):
    rows = write_jsonl(tmp_path / "rows.jsonl", [
        {"prompt": "1+1=", "completion": "2"},
        {"prompt": "2+2=", "messages": [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]}])
    refused(cli("sft", "--data", rows, "-o", tmp_path / "o"), f"{rows}:2: field 'messages': row has both")


def test_a_json_object_that_is_not_rows_gets_no_invented_line(cli, tmp_path):
    doc = tmp_path / "rows.json"
    doc.write_text(json.dumps({"version": 2, "items": 3}, indent=2))
    line = refused(cli("sft", "--data", doc, "-o", tmp_path / "o"), "top-level JSON object", "version, items")
    assert not re.search(rf"{re.escape(str(doc))}:\d", line)  # no line number
    doc.write_text('{"meta": {"n": [1, 2]},\n "data": [\n  {"prompt": "1+1=", "completion": "2"},\n  "oops"\n]}\n')
    refused(cli("sft", "--data", doc, "-o", tmp_path / "o"), f"{doc}:4: expected a JSON object, got str")
