"""Model loading: local folders, adapters, LoRA, and 4-bit (QLoRA) with correct LoRA gradients on CPU."""

from __future__ import annotations

import pytest
from helpers import DATA

from rlft.config import resolve
from rlft.errors import UserError
from rlft.models import resolve_model_path

# `make install` installs the quant extra (bitsandbytes, CPU build included: 4-bit runs on the CPU here), so
# these tests run in CI and on this machine; they skip only in an environment installed without it.
NO_BNB = ("bitsandbytes is not installed: pip install -e '.[quant]' (make install does); wheels exist for "
          "Linux x86_64/aarch64 and macOS, so elsewhere the 4-bit path cannot be checked")


def test_resolve_model_path(tmp_path, tiny_dir):
    assert resolve_model_path("tiny") == str(tiny_dir)
    assert resolve_model_path(str(tiny_dir)) == str(tiny_dir)
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # hub id passes
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="has no config.json"):
        resolve_model_path(str(tmp_path / "empty"))
    with pytest.raises(UserError, match="not a folder here and not a hub id"):
        resolve_model_path("./missing/model")


def _lora_grads(model, ids):
    model.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_4bit_lora_gradients_survive_an_eval_forward(tiny_dir):
    """bitsandbytes on CPU repacks 4-bit weights after a no-grad forward; rlft's loader must prevent the
    silently wrong LoRA gradients that follow."""
    pytest.importorskip("bitsandbytes", reason=NO_BNB)
    import torch

    from rlft.models import load_model

    cfg = resolve("sft", None, {}, ["model.load_in_4bit=true", "model.lora.enabled=true",
                                    "model.lora.dropout=0.0"], check_trl=False)
    try:
        model = load_model(cfg.model)
    except UserError as exc:  # a platform without 4-bit support must say so clearly
        pytest.skip(f"4-bit unsupported here: {exc}")
    import bitsandbytes as bnb

    quantized = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(quantized) == 14  # 7 linear layers x 2 blocks
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)  # non-zero B, so every LoRA matrix gets a gradient
    ids = torch.randint(4, 99, (4, 16))
    before = _lora_grads(model, ids)
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)  # the pass that triggers the repack
    model.train()
    after = _lora_grads(model, ids)
    worst = max((before[k] - after[k]).abs().max().item() for k in before)
    scale = max(before[k].abs().max().item() for k in before)
    assert scale > 0 and worst < 1e-5 * max(1.0, scale), (worst, scale)


def test_qlora_sft_runs_through_the_cli(cli, tmp_path):
    pytest.importorskip("bitsandbytes", reason=NO_BNB)
    out = tmp_path / "qlora"
    r = cli("sft", "--data", DATA / "arith/sft_train.jsonl", "-o", out, "--max-steps", "3", "--lora",
            "--set", "model.load_in_4bit=true", "--set", "sft.max_length=32", "--batch-size", "8")
    assert r.code == 0, r.text
    assert (out / "adapter_config.json").exists()


def test_local_dataset_folder_goes_through_datasets(tmp_path):
    """The hub-name path (`datasets.load_dataset(name)`) exercised on a local folder of data files."""
    from rlft.data import read_rows

    folder = tmp_path / "my_dataset"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"prompt": "1+1=", "completion": "2"}\n'
                                        '{"prompt": "2+2=", "completion": "4"}\n')
    rows = read_rows(str(folder))
    assert [r.data["completion"] for r in rows] == ["2", "4"] and rows[1].line == 2
