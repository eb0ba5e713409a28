"""What tests share besides fixtures: the repository's paths, a JSONL writer, the CLI result type.

Fixtures are in conftest.py (pytest finds them); plain helpers are imported from here (`from helpers import
DATA, write_jsonl`), never from conftest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass
class CliResult:
    """What `rlft ARGS...` did, in-process (the `cli` fixture): exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def precision_gap(model_path: str, ids, lora_b: float = 1e-3) -> dict:
    """A LoRA model over `model_path` in fp32, in bf16 with bf16 activations, and in bf16 with
    rlft.speed.activations.fp32_activations (the same adapter, B drawn at `lora_b`): each bf16 variant's LM loss on
    `ids` (absolute difference from fp32's), its adapter gradients (norm of the difference over fp32's norm),
    the dtype of the first layer's output and of a base weight (Llama layout)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlft.models import _fp32_trainable
    from rlft.speed.activations import fp32_activations

    out: dict = {"loss": {}, "grad": {}, "hidden": {}, "weights": {}}
    ref_loss = ref_grad = None
    for mode in ("fp32", "bf16 activations", "fp32 activations"):
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_pretrained(model_path, attn_implementation="eager",
                                                 dtype=torch.float32 if mode == "fp32" else torch.bfloat16)
        pm = get_peft_model(m, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0))
        _fp32_trainable(pm)
        if mode == "fp32 activations":
            assert fp32_activations(pm)
        with torch.no_grad():
            for name, p in pm.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * lora_b)
        res = pm(input_ids=ids, labels=ids, output_hidden_states=True)
        res.loss.backward()
        grad = torch.cat([p.grad.flatten() for p in pm.parameters() if p.requires_grad])
        out["hidden"][mode] = res.hidden_states[1].dtype
        out["weights"][mode] = pm.get_base_model().model.layers[0].mlp.down_proj.base_layer.weight.dtype
        if mode == "fp32":
            ref_loss, ref_grad = float(res.loss), grad
        else:
            out["loss"][mode] = abs(float(res.loss) - ref_loss)
            out["grad"][mode] = float((grad - ref_grad).norm() / ref_grad.norm())
    return out


def signalled_at_once():
    """An rlft.run.folder.Interrupt whose signal (SIGTERM) has already arrived: the run finishes its first step,
    saves a checkpoint and stops, as if the signal came during that step. Patch it in with
    `monkeypatch.setattr(rlft.run.folder, "Interrupt", signalled_at_once())`."""
    import signal
    from contextlib import contextmanager

    import rlft.run.folder

    class SignalledAtOnce(rlft.run.folder.Interrupt):
        @contextmanager
        def installed(self):
            self.signum = signal.SIGTERM
            yield self

    return SignalledAtOnce
