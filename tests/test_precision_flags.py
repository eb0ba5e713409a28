"""Precision flags the device cannot honour are refused by rlft with the fix, before anything is written.

fp16 mixed precision is a CUDA feature; full fine-tuning with train.bf16=true on a CPU without bf16 units used to
end in transformers' own "You need to assign use_cpu" error. LoRA + train.bf16=true keeps its meaning (bf16 base
weights), and on a CPU with bf16 units full fine-tuning's bf16 is TRL's autocast, with use_cpu set.
"""

from __future__ import annotations

import pytest
from test_bad_input_nothing_destroyed import SFT_DATA, refused

from rlft.errors import UserError
from rlft.speed.precision import decide


def _decide(**kw):
    return decide(**{"cuda": False, "four_bit": False, "dtype": "auto", "lora": False, "flag": None,
                     "bf16": None, **kw})


@pytest.mark.parametrize("kw, words", [
    (dict(fp16=True), "train.fp16=true"),
    (dict(fp16=True, lora=True, flag="amx_bf16"), "train.fp16=true"),
    (dict(bf16=True), "train.bf16=true"),
])
def test_a_flag_the_cpu_cannot_honour_is_a_user_error(kw, words):
    with pytest.raises(UserError) as exc:
        _decide(**kw)
    assert words in exc.value.message and exc.value.fix


def test_what_the_cpu_can_do_still_decides():
    assert _decide(bf16=True, flag="amx_bf16").autocast_bf16 is True  # TRL's autocast, as documented
    assert _decide(bf16=True, lora=True).weights == "bfloat16"  # LoRA: bf16 base weights, as documented
    assert _decide(fp16=False).weights == "float32"  # `auto` decided: fp32 on a CPU without bf16 units
    assert decide(cuda=True, flag=None, lora=False, four_bit=False, dtype="auto", bf16=None, fp16=True).line == ""


def test_fp16_on_the_cpu_is_refused_before_the_run_folder(cli, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    refused(cli("sft", "--data", SFT_DATA, "-o", tmp_path / "out", "--max-steps", "1", "--set", "train.fp16=true"),
            "train.fp16=true", "CUDA")
    assert not (tmp_path / "out").exists()


def test_bf16_full_fine_tuning_on_a_cpu_without_bf16_units_is_refused(cli, tmp_path, monkeypatch):
    import torch

    import rlft.speed.precision as precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_bf16_flag", lambda: None)
    line = refused(cli("sft", "--data", SFT_DATA, "-o", tmp_path / "out", "--max-steps", "1",
                       "--set", "train.bf16=true"), "train.bf16=true", "no bf16 units")
    assert "use_cpu" not in line
    assert not (tmp_path / "out").exists()


def test_trl_config_gets_use_cpu_for_cpu_bf16_autocast(monkeypatch):
    import torch

    from rlft.methods.common import hardware_defaults

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware_defaults({"bf16": True})["use_cpu"] is True
    assert "use_cpu" not in hardware_defaults({"bf16": False})
