"""Precision from the hardware: rlft.speed.precision, the one module that decides it on every device."""

from __future__ import annotations

import pytest

from rlft.speed.precision import cpu_bf16_flag, decide

AMX = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ZEN4 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
OLD = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n"


def test_bf16_units_are_read_from_the_cpu_flags():
    assert cpu_bf16_flag(AMX) == "amx_bf16"
    assert cpu_bf16_flag(ZEN4) == "avx512_bf16"
    assert cpu_bf16_flag(OLD) is None
    assert cpu_bf16_flag("") is None


@pytest.mark.parametrize("kw, weights, autocast, says", [
    # LoRA on a bf16 CPU: bf16 base, fp32 adapter, no autocast
    (dict(flag="avx512_bf16", lora=True, bf16=None), "bfloat16", False, "bf16 base weights and matmuls"),
    (dict(flag="amx_bf16", lora=True, bf16=False), "float32", False, "train.bf16=false"),
    (dict(flag=None, lora=True, bf16=None), "float32", False, "no bf16 units"),
    (dict(flag=None, lora=True, bf16=True), "bfloat16", False, "train.bf16=true"),
    # the flag, and bf16 matmuls measured slower (an Intel Xeon with AVX512-BF16, no AMX: 0.53x): fp32
    (dict(flag="avx512_bf16", lora=True, bf16=None, speedup=0.53), "float32", False, "ran 0.53x fp32's here"),
    (dict(flag="avx512_bf16", lora=True, bf16=None, speedup=2.2), "bfloat16", False, "2.2x fp32's here"),
    (dict(flag="avx512_bf16", lora=True, bf16=True, speedup=0.53), "bfloat16", False, "train.bf16=true"),
    # full fine-tuning stays fp32 unless asked; asked = TRL's autocast
    (dict(flag="amx_bf16", lora=False, bf16=None), "float32", False, "fp32"),
    (dict(flag="amx_bf16", lora=False, bf16=True), "float32", True, "autocast"),
    # an explicit model.dtype wins
    (dict(flag="amx_bf16", lora=True, bf16=None, dtype="float32"), "float32", False, "float32 base weights"),
])
def test_precision_rules(kw, weights, autocast, says):
    args = {"cuda": False, "four_bit": False, "dtype": "auto", **kw}
    p = decide(**args)
    assert (p.weights, p.autocast_bf16) == (weights, autocast)
    assert says in p.line


def _cfg(lora=True, dtype="auto", bf16=None, method="sft"):
    from types import SimpleNamespace

    return SimpleNamespace(method=method, values={"model": {"lora": {"enabled": lora}, "dtype": dtype},
                                                  "train": {"bf16": bf16}})


@pytest.mark.parametrize("kw, measured, weights", [
    (dict(), True, "bfloat16"),                       # the flag alone would choose bf16: measured (2.2x here)
    (dict(lora=False), False, "float32"),             # full fine-tuning: fp32, nothing to measure
    (dict(dtype="bfloat16"), False, "bfloat16"),      # the user's own dtype
    (dict(bf16=True), False, "bfloat16"),             # asked for
    (dict(bf16=False), False, "float32"),
    (dict(method="ppo"), True, "bfloat16"),           # as every LoRA method
])
def test_apply_measures_only_when_the_flag_decides(monkeypatch, kw, measured, weights):
    import rlft.speed.precision as precision

    calls = []
    monkeypatch.setattr(precision, "cpu_bf16_flag", lambda: "avx512_bf16")
    monkeypatch.setattr(precision, "measured_speedup", lambda: calls.append(1) or 2.2)
    cfg = _cfg(**kw)
    p = precision.apply(cfg)
    assert bool(calls) == measured and p.weights == weights == cfg.values["model"]["dtype"]
    monkeypatch.setattr(precision, "measured_speedup", lambda: 0.54)  # bf16 slower here: fp32, and said so
    slow = precision.apply(_cfg())
    assert slow.weights == "float32" and "ran 0.54x fp32's here, below 1.3x" in slow.line


def test_the_speedup_is_measured_once_per_machine(monkeypatch, tmp_path):
    import rlft.speed.precision as precision

    monkeypatch.setenv("RLFT_CACHE", str(tmp_path))
    timings = iter([0.6, 1.9])
    monkeypatch.setattr(precision, "bf16_speedup", lambda: next(timings))
    assert precision.measured_speedup() == 0.6
    assert precision.measured_speedup() == 0.6  # read back: runs on one machine decide alike
    (tmp_path / "bf16_speedup.json").write_text("not json")
    assert precision.measured_speedup() == 1.9  # a broken cache is measured again, not an error


def test_gpus_keep_trls_defaults():
    """bf16 weights and TRL's bf16 autocast where the GPU supports bf16 (what models.torch_dtype and
    hardware_defaults did on their own before), fp32 on older GPUs; the user's flags win."""
    gpu = dict(cuda=True, flag=None, lora=True, four_bit=False, dtype="auto", bf16=None)
    p = decide(**gpu, cuda_bf16=True)
    assert (p.weights, p.autocast_bf16, p.fp16, p.line) == ("bfloat16", True, False, "")
    p = decide(**gpu)
    assert (p.weights, p.autocast_bf16, p.fp16) == ("float32", False, False)
    p = decide(**{**gpu, "bf16": None}, fp16=True, cuda_bf16=True)
    assert (p.autocast_bf16, p.fp16) == (False, True)
    assert decide(**{**gpu, "dtype": "float16"}, cuda_bf16=True).weights == "float16"


def test_rlft_ppo_trains_on_a_bf16_base_like_the_other_lora_methods():
    """PPO's value head is trained fp32 over the bf16 base (models._fp32_trainable), its rollouts' log-probs are
    recomputed by the same forward it trains with, and its checks read the fp32 base (rlft.speed.served)."""
    p = decide(cuda=False, flag="amx_bf16", lora=True, four_bit=False, dtype="auto", bf16=None, method="ppo")
    assert (p.weights, p.autocast_bf16) == ("bfloat16", False)
    assert decide(cuda=False, flag=None, lora=True, four_bit=False, dtype="auto", bf16=None,
                  method="ppo").weights == "float32"


@pytest.mark.parametrize("lora", [False, True])
def test_print_config_shows_the_precision_config_yaml_records(cli, tmp_path, lora):
    """--print-config prints the decided precision (not `auto`), the same values the run's config.yaml records."""
    import yaml
    from helpers import DATA

    from rlft.speed.precision import Device, weights_dtype

    args = ["sft", "--data", DATA / "arith/sft_train.jsonl", "-o", tmp_path / "out", "--max-steps", "1",
            "--batch-size", "4", "--set", "sft.max_length=32", *(["--lora"] if lora else [])]
    r = cli(*args, "--print-config")
    assert r.code == 0, r.text
    shown = yaml.safe_load(r.out)
    assert shown["model"]["dtype"] != "auto" and isinstance(shown["train"]["bf16"], bool)
    here = Device.here()
    if not here.cuda and not here.flag:  # this CPU: fp32, no autocast
        assert (shown["model"]["dtype"], shown["train"]["bf16"], shown["train"]["fp16"]) == ("float32", False, False)
    r = cli(*args)
    assert r.code == 0, r.text
    recorded = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert {k: recorded["train"][k] for k in ("bf16", "fp16")} == {k: shown["train"][k] for k in ("bf16", "fp16")}
    assert recorded["model"]["dtype"] == shown["model"]["dtype"]
    assert weights_dtype("auto", here) in ("float32", "bfloat16")


def test_the_other_readers_take_their_rule_from_precision(monkeypatch):
    """models.torch_dtype (`auto` outside a run) and methods.common.hardware_defaults (TRL's flags) follow
    precision.weights_dtype / trl_flags on a GPU with bf16, one without, and the CPU."""
    import torch

    from rlft.methods.common import hardware_defaults
    from rlft.models import torch_dtype

    for cuda, bf16_ok, dtype, autocast in [(False, False, torch.float32, False), (True, False, torch.float32, False),
                                           (True, True, torch.bfloat16, True)]:
        monkeypatch.setattr(torch.cuda, "is_available", lambda c=cuda: c)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda b=bf16_ok: b)
        assert torch_dtype("auto") == dtype and torch_dtype("float16") == torch.float16
        kw = hardware_defaults({"bf16": None, "fp16": None})
        assert (kw["bf16"], kw["fp16"]) == (autocast, False)
        assert hardware_defaults({"bf16": None, "fp16": True})["bf16"] is False
        p = decide(cuda=cuda, cuda_bf16=bf16_ok, flag=None, lora=False, four_bit=False, dtype="auto", bf16=None)
        assert (p.weights, p.autocast_bf16) == (str(dtype).removeprefix("torch."), autocast)
