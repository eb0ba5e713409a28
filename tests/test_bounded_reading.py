"""Bad input, second round (issue 23): bounded in time and memory, the right model for its role, every check
before the run folder exists, and no generic crash.

Inputs read with bounds (rlft/data/bounded.py), model kind by role (rlft.checks), late checks moved early, and
one-line errors for what used to crash. Each case runs the real CLI and asserts exit 2, one `error:` line
naming the problem with its `fix:` line, and that no run folder was created; the slow cases are timed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import DATA, ROOT, write_jsonl
from test_bad_input_nothing_destroyed import SFT_DATA, refused

PROMPTS = DATA / "arith/grpo_prompts.jsonl"
THUMBS = [{"prompt": f"{i}+1=", "completion": str(i + 1), "label": i % 2 == 0} for i in range(8)]


@pytest.fixture
def model(tmp_path, tiny_dir) -> Path:
    return Path(shutil.copytree(tiny_dir, tmp_path / "model"))


def timed(cli, *args, limit: float = 3.0):
    start = time.time()
    r = cli(*args)
    assert time.time() - start < limit, f"took {time.time() - start:.1f}s"
    return r


BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


# =========================================================================== YAML, JSON, CSV


def test_a_yaml_alias_bomb_is_refused_at_once(cli, tmp_path):
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text("train:\n  output_dir: x\n" + "extra:\n" + "".join("  " + line + "\n"
                                                                         for line in BOMB.splitlines()))
    refused(timed(cli, "sft", "--recipe", recipe, "--data", SFT_DATA, "--print-config"), "alias bomb")
    nested = "{a: &a [x,x,x,x,x,x,x,x,x,x], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], " + ", ".join(
        f"{c}: &{c} [{','.join([f'*{p}'] * 10)}]" for p, c in zip("bcdef", "cdefg")) + "}"
    refused(timed(cli, "sft", "--data", SFT_DATA, "--set", f"sft.x={nested}", "--print-config"), "alias bomb")


def test_yaml_merge_keys_work_and_deep_nesting_is_one_line(cli, tmp_path):
    recipe = tmp_path / "merge.yaml"
    recipe.write_text("base: &base\n  max_steps: 7\n  learning_rate: 0.01\ntrain:\n  <<: *base\n  seed: 3\n"
                      .replace("base: &base", "x-base: &base"))
    r = cli("sft", "--recipe", recipe, "--data", SFT_DATA, "--print-config")
    assert r.code in (0, 2), r.text  # the x-base section itself may be unknown; the merge key is valid YAML
    assert "invalid YAML" not in r.text
    recipe.write_text("train:\n  <<: {max_steps: 7, learning_rate: 0.01}\n  seed: 3\n")
    r = cli("sft", "--recipe", recipe, "--data", SFT_DATA, "--print-config")
    assert r.code == 0 and "max_steps: 7" in r.out, r.text
    deep = tmp_path / "deep.yaml"
    deep.write_text("train:\n  x: " + "[" * 500 + "]" * 500 + "\n")
    refused(timed(cli, "sft", "--recipe", deep, "--data", SFT_DATA, "--print-config"), "nested deeper")


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_deeply_nested_json_is_one_line(cli, tmp_path, suffix):
    row = '{"prompt": ' + "[" * 5000 + "]" * 5000 + ', "completion": "2"}'
    data = tmp_path / f"deep{suffix}"
    data.write_text(row + "\n" if suffix == ".jsonl" else f"[{row}]")
    out = tmp_path / "out"
    refused(timed(cli, "sft", "--data", data, "-o", out, "--max-steps", "1", limit=30), "nested deeper than 64")
    assert not out.exists()


def test_long_csv_cells_are_read_and_bad_quoting_is_one_line(cli, tmp_path):
    data = tmp_path / "long.csv"
    data.write_text('prompt,completion\n"' + "1+1=" * 50_000 + '",2\n')  # a 200,000-character cell
    r = cli("data", "lint", data)
    assert "field larger than field limit" not in r.text and "rerun with --debug" not in r.text, r.text
    bad = tmp_path / "nul.csv"
    bad.write_bytes(b"prompt,completion\n1+1=,2\n" + b"x" * 100 + b"\n")
    assert "rerun with --debug" not in cli("data", "lint", bad).text


# =========================================================================== files that are not files


def test_a_sparse_or_binary_file_is_refused_before_it_is_read(cli, tmp_path):
    sparse = tmp_path / "holes.jsonl"
    with sparse.open("wb") as f:
        f.truncate(2**30)  # 1 GiB of holes, nothing on disk
    out = tmp_path / "out"
    for args in (("sft", "--data", sparse, "-o", out), ("data", "lint", sparse),
                 ("verify", "math", "--data", sparse), ("choose", "--data", sparse)):
        refused(timed(cli, *args), "sparse file")
    binary = tmp_path / "model.jsonl"
    binary.write_bytes(b'{"prompt": "1+1=", "completion": "2"}\n\x00\x01\x02')
    refused(cli("sft", "--data", binary, "-o", out), "binary", "line 2")
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_text('{"prompt": "1+1=", "completion": "2"}\n', encoding="utf-16")
    refused(cli("sft", "--data", utf16, "-o", out), "UTF-16", "not UTF-8")
    assert not out.exists()


def test_pipes_and_folders_are_named_for_what_they_are(cli, tmp_path):
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    refused(timed(cli, "sft", "--recipe", fifo, "--data", SFT_DATA), "named pipe")
    gguf_fifo = tmp_path / "m.gguf"
    os.mkfifo(gguf_fifo)
    refused(timed(cli, "sft", "--model", gguf_fifo, "--data", SFT_DATA, "-o", tmp_path / "o"), "named pipe")
    (tmp_path / "x.gguf").mkdir()
    refused(cli("sft", "--model", tmp_path / "x.gguf", "--data", SFT_DATA, "-o", tmp_path / "o"), "is a folder")
    refused(cli("verify", "math", "--data", gguf_fifo.with_name("p.jsonl") if os.mkfifo(
        gguf_fifo.with_name("p.jsonl")) is None else None), "named pipe")
    assert not (tmp_path / "o").exists()


def test_a_gguf_header_claiming_2_40_tensors_is_refused(cli, tmp_path):
    bad = tmp_path / "huge.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**40, 1) + b"\0" * 64)
    refused(timed(cli, "sft", "--model", bad, "--data", SFT_DATA, "-o", tmp_path / "o"), "claims", "tensors")
    assert not (tmp_path / "o").exists()


def test_an_unusable_rlft_cache_and_an_overlong_path_are_one_line(cli, tmp_path, monkeypatch):
    out = tmp_path / ("x" * 300) / "run"
    refused(cli("sft", "--data", SFT_DATA, "-o", out), "longer than the file system allows")
    cache = tmp_path / "cache-file"
    cache.write_text("not a folder")
    monkeypatch.setenv("RLFT_CACHE", str(cache))
    refused(cli("sft", "--model", "tiny", "--data", SFT_DATA, "-o", tmp_path / "o"), "RLFT_CACHE")
    monkeypatch.setenv("RLFT_CACHE", "/proc/rlft-cache")
    refused(cli("sft", "--model", "tiny", "--data", SFT_DATA, "-o", tmp_path / "o"), "RLFT_CACHE", "cannot be created")
    assert not (tmp_path / "o").exists()


# =========================================================================== the model for its role


def reward_model(tmp_path: Path, model: Path) -> Path:
    rm = Path(shutil.copytree(model, tmp_path / "rm"))
    config = json.loads((rm / "config.json").read_text())
    config.update(architectures=["LlamaForSequenceClassification"], num_labels=1)
    (rm / "config.json").write_text(json.dumps(config))
    return rm


def test_each_model_is_checked_for_its_role_before_the_run_folder(cli, tmp_path, model):
    rm, out = reward_model(tmp_path, model), tmp_path / "out"
    refused(cli("rloo", "--prompts", PROMPTS, "--model", model, "--reward-model", model, "-o", out),
            "not a reward model")
    refused(cli("distill", "--prompts", PROMPTS, "--model", model, "--teacher", rm, "-o", out),
            "--teacher", "reward model")
    refused(cli("distill", "--prompts", PROMPTS, "--model", model, "--teacher", tmp_path / "none", "-o", out),
            "--teacher")
    refused(cli("sft", "--model", rm, "--data", SFT_DATA, "-o", out), "--model", "reward model")
    refused(cli("chat", rm, "--prompt", "hi"), "reward model")
    refused(cli("export", rm, "--gguf", tmp_path / "rm.gguf"), "reward model")
    weights = rm / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a download cut in half
    refused(cli("rloo", "--prompts", PROMPTS, "--model", model, "--reward-model", rm, "-o", out),
            "--reward-model", "truncated")
    assert not out.exists() and not (tmp_path / "rm.gguf").exists()


def test_chat_is_bounded_by_the_model_and_needs_a_message(cli, tmp_path, tiny_dir, rlft_cache):
    refused(timed(cli, "chat", "tiny", "--prompt", "1+1=", "--max-new-tokens", "1000000", limit=30), "positions")
    refused(cli("chat", "tiny", "--prompt", "  "), "--prompt is empty")
    env = {**os.environ, "RLFT_CACHE": str(rlft_cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(f"{sys.executable} -m rlft.cli chat tiny <&-", shell=True, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "stdin is closed" in proc.stderr and "Traceback" not in proc.stderr


# =========================================================================== checks before the run folder


def test_kto_checks_the_rows_it_trains_on_and_its_weights(cli, tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", sorted(THUMBS, key=lambda r: not r["label"]))  # true rows first
    out = tmp_path / "out"
    refused(cli("kto", "--feedback", data, "-o", out, "--set", "data.max_rows=4"), "every label is True")
    refused(cli("kto", "--feedback", data, "-o", out, "--desirable-weight", "0", "--undesirable-weight", "0"),
            "weighted 0")
    mixed = write_jsonl(tmp_path / "m.jsonl", THUMBS + [{**THUMBS[0], "prompt": [{"role": "user",
                                                                                "content": "1+1="}]}])
    refused(cli("kto", "--feedback", mixed, "-o", out), "m.jsonl:9", "a list while the other rows hold a string")
    assert not out.exists()


def test_sampling_methods_refuse_greedy_rollouts_and_uneven_groups(cli, tmp_path, model):
    out = tmp_path / "out"
    refused(cli("rloo", "--prompts", PROMPTS, "-o", out, "--set", "rloo.temperature=0"), "temperature = 0")
    refused(cli("distill", "--prompts", PROMPTS, "--teacher", model, "-o", out, "--set", "distill.temperature=0"),
            "temperature = 0")
    refused(cli("rloo", "--prompts", PROMPTS, "-o", out, "--num-generations", "3", "--batch-size", "4"),
            "does not divide")
    mixed = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1=", "answer": "2"}] * 3
                        + [{"prompt": [{"role": "user", "content": "2+2="}], "answer": "4"}])
    refused(cli("distill", "--prompts", mixed, "--teacher", model, "-o", out), "p.jsonl:4")
    assert not out.exists()


def test_values_no_table_can_hold_are_named_by_line(cli, tmp_path):
    out = tmp_path / "out"
    big = write_jsonl(tmp_path / "big.jsonl", ['{"prompt": "1+1=", "answer": 2}',
                                               '{"prompt": "2+2=", "answer": 99999999999999999999999}'])
    refused(cli("grpo", "--prompts", big, "-o", out), "big.jsonl:2", "beyond 64 bits")
    lone = write_jsonl(tmp_path / "lone.jsonl", ['{"prompt": "1+1=", "completion": "2"}',
                                                 '{"prompt": "x\\ud800y", "completion": "2"}'])
    refused(cli("sft", "--data", lone, "-o", out), "lone.jsonl:2", "surrogate")
    assert not out.exists()


def test_as_chat_without_a_chat_template_and_unknown_trackers_are_refused_early(cli, tmp_path, model):
    (model / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    refused(cli("sft", "--model", model, "--data", SFT_DATA, "-o", out, "--set", "data.as_chat=true"),
            "no chat template")
    refused(cli("sft", "--data", SFT_DATA, "-o", out, "--set", "train.report_to=wandbb"), "wandbb", "did you mean")
    refused(cli("sft", "--data", SFT_DATA, "-o", out, "--set", "train.report_to=mlflow"), "mlflow")
    assert not out.exists()


def test_an_unexpanded_variable_in_a_recipe_path_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train:\n  output_dir: $RUNS/sft\n")
    refused(cli("sft", "--recipe", recipe, "--data", SFT_DATA), "r.yaml:2", "$RUNS", "does not expand")
    assert not (tmp_path / "$RUNS").exists()


def test_every_generation_budget_is_bounded_by_the_model(cli, tmp_path, model):
    out = tmp_path / "out"
    refused(timed(cli, "grpo", "--prompts", PROMPTS, "-o", out, "--set", "grpo.max_completion_length=1000000",
                  limit=30), "grpo.max_completion_length", "positions")
    refused(timed(cli, "eval", "-m", "tiny", "--data", DATA / "arith/test.jsonl", "--max-new-tokens", "1000000",
                  limit=30), "positions")
    rm = reward_model(tmp_path, model)
    refused(cli("eval", "-m", rm, "--data", DATA / "arith/test.jsonl"), "reward model")
    long_data = tmp_path / ("d" * 300 + ".jsonl")
    refused(cli("sft", "--data", long_data, "-o", out), "too long")
    assert not out.exists()
