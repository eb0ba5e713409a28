"""Model and tokenizer loading: local folders, hub ids and the built-in `tiny` model, with LoRA and 4-bit.

Every command loads through `load_tokenizer` / `load_model`, which call `from_pretrained` whatever the source:
the tiny model is built once, saved with `save_pretrained` and read back like any hub checkpoint, so the
code path the tests exercise is the one a 7B model takes.

Heavy libraries (torch, transformers, peft) are imported inside the functions.
"""

from __future__ import annotations

import functools
import os
import re
import string
from pathlib import Path
from typing import Any

from rlft.errors import UserError
from rlft.sources import SMOLLM2, build_once, cache_dir, gguf_folder, intact, is_gguf, record_files, smollm2_gguf

TINY = "tiny"
# Character vocabulary: printable ASCII (94) + space + newline = 96 characters, plus 4 special tokens.
TINY_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"
TINY_SPECIALS = ("<|pad|>", "<|unk|>", "<|im_start|>", "<|im_end|>")
TINY_SHAPE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=512, max_position_embeddings=1024)
# ChatML with {% generation %} markers, so TRL's assistant_only_loss can mask everything but the answers.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}"
    "{% else %}{{ m['content'] }}<|im_end|>{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def build_tiny_model(out_dir: str | Path, seed: int = 0) -> Path:
    """Build the tiny character-level Llama (~0.5M parameters) and save it, tokenizer included.

    Llama rather than Qwen2: with a Qwen2 config AutoTokenizer hands back a ByteLevel tokenizer that drops
    spaces from a character vocabulary. Pad is distinct from eos; eos is the end-of-turn token.
    """
    import torch
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out_dir)
    vocab = {tok: i for i, tok in enumerate(TINY_SPECIALS + tuple(TINY_CHARS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|unk|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one token per char
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in TINY_SPECIALS])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|pad|>",
                                  unk_token="<|unk|>", chat_template=CHATML_TEMPLATE, model_max_length=1024)
    config = LlamaConfig(vocab_size=len(vocab), tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, bos_token_id=None, attention_dropout=0.0, **TINY_SHAPE)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_path() -> Path:
    """The cached build of `tiny`, built on first use (a second or two)."""
    path = cache_dir() / "tiny-llama-char-v3"
    if not (path / "config.json").exists():
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        build_tiny_model(tmp)
        try:
            tmp.rename(path)
        except OSError:  # another process built it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return path


def resolve_model_path(name_or_path: str) -> str:
    """Map `tiny` to its cached build, `smollm2` and `*.gguf` files to their converted folders (see
    rlft.sources), check local folders, and pass hub ids through.

    A string that is neither an existing folder nor shaped like a hub id is a user error, not a 404 later.
    """
    if name_or_path == TINY:
        return str(tiny_path())
    if name_or_path == SMOLLM2:
        return str(gguf_folder(smollm2_gguf()))
    if is_gguf(name_or_path):
        return str(gguf_folder(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UserError(f"model '{name_or_path}' is a file, not a model folder",
                            "point --model at the folder holding config.json (a run's output_dir)")
        if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
            raise UserError(f"model folder '{name_or_path}' has no config.json or adapter_config.json",
                            "point --model at a folder written by save_pretrained (a run's output_dir)")
        return str(path)
    if name_or_path.startswith((".", "/", "~")) or not _HUB_ID.match(name_or_path):
        raise UserError(f"model '{name_or_path}' is not a folder here and not a hub id",
                        "check the path, or use `tiny`, `smollm2`, a .gguf file or a hub id such as "
                            "Qwen/Qwen2.5-0.5B-Instruct")
    return name_or_path


def load_tokenizer(name_or_path: str, revision: str | None = None, trust_remote_code: bool = False):
    """Load the tokenizer; give it a pad token (eos) when it has none, and left padding for generation."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    base = adapter_base(path) or path
    try:
        tok = AutoTokenizer.from_pretrained(path if _has_tokenizer(path) else base, revision=revision,
                                            trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - missing/corrupt files, offline hub: one line (rlft.loadable)
        from rlft.loadable import load_problem

        raise load_problem(name_or_path, exc) from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def torch_dtype(name: str):
    """A model.dtype name as a torch dtype; `auto` as rlft.speed.precision decides it for this machine (bf16 on
    GPUs that support it, fp32 elsewhere: a run has already written its decision into model.dtype)."""
    import torch

    if name == "auto":
        from rlft.speed.precision import Device, weights_dtype

        name = weights_dtype(name, Device(cuda=torch.cuda.is_available(),
                                          cuda_bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported()))
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_model(model_cfg: Any, *, trainable: bool = True, with_lora: bool = True, head: str = "causal"):
    """Load a causal LM (or, with head="score", a one-output sequence classifier: a reward or value model)
    from `model_cfg` (the config's `model` section); wrap it in LoRA if configured.

    A folder holding a peft adapter loads its base model and the adapter on top. With `load_in_4bit`,
    weights are quantised with bitsandbytes (NF4) and the model is prepared for k-bit training.
    """
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    path = resolve_model_path(model_cfg.name_or_path)
    dtype = torch_dtype(model_cfg.dtype)
    kwargs: dict[str, Any] = dict(dtype=dtype, revision=model_cfg.revision,
                                  trust_remote_code=model_cfg.trust_remote_code)
    if model_cfg.load_in_4bit:
        kwargs["quantization_config"] = _bnb_config(dtype)
    from rlft import speed

    kwargs.update(speed.load_options(dtype))  # the speed layer's half that acts before the weights load
    base = adapter_base(path)
    auto = AutoModelForCausalLM
    if head == "score":
        auto = AutoModelForSequenceClassification
        kwargs["num_labels"] = 1
    stacked = bool(base) and with_lora and model_cfg.lora.enabled
    if stacked:
        # A LoRA stage on a LoRA stage: the new adapter must name a base that already holds the earlier stage,
        # or every later load (eval, merge, export, the next stage) silently drops it. Start from that base.
        path, base = str(merged_parent(path, base, head)), None
    try:
        # An earlier stage's adapter is merged in fp32 whatever the run's dtype (one rounding, after the merge).
        model = auto.from_pretrained(base or path, **({**kwargs, "dtype": _merge_dtype(dtype)} if base and not
                                                      model_cfg.load_in_4bit else kwargs))
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:  # bad files, offline hub: one line
        from rlft.loadable import load_problem

        raise load_problem(model_cfg.name_or_path, exc) from exc
    if base:
        from peft import PeftModel

        # Merge an earlier stage's adapter into its base: this stage then starts from (and, for DPO/PPO,
        # takes its reference from) the fine-tuned weights. No new adapter follows here (see `stacked`).
        model = PeftModel.from_pretrained(model, path).merge_and_unload()
        if not model_cfg.load_in_4bit:
            model = model.to(dtype)
    if head == "score" and model.config.pad_token_id is None:  # the classifier finds the last token by pad id
        model.config.pad_token_id = model.config.eos_token_id
    if with_lora and model_cfg.lora.enabled:
        model = apply_lora(model, model_cfg.lora, quantized=model_cfg.load_in_4bit,
                           task="SEQ_CLS" if head == "score" else "CAUSAL_LM")
        if trainable and not model_cfg.load_in_4bit:
            _fp32_trainable(model)
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    four_bit = model_cfg.load_in_4bit
    lora_trainable = with_lora and model_cfg.lora.enabled and trainable and not four_bit
    speed.prepare_model(model, dtype, four_bit=four_bit, lora_trainable=lora_trainable,
                        fp32_source=functools.partial(_fp32_base, model_cfg) if lora_trainable and head == "causal"
                        else None)
    return model


def _fp32_base(model_cfg: Any):
    """The start model `model_cfg` names, loaded again in fp32 without the run's adapter (an earlier stage's adapter
    merged in fp32, as `load_model` merges it): the weights `rlft eval` serves, for the held-out checks of a run
    that trains on a bf16 base (rlft.speed.served)."""
    from rlft.config import Section

    cfg = Section({**model_cfg, "dtype": "float32", "load_in_4bit": False})
    return load_model(cfg, trainable=False, with_lora=False)


def load_for_inference(name_or_path: str, head: str = "causal"):
    """A frozen model for generation and scoring (eval, pre-flight, pipelines, reward models with
    head="score"): no LoRA, no 4-bit; an adapter folder is merged into its base."""
    from rlft.config import Section

    cfg = Section(name_or_path=name_or_path, dtype="auto", revision=None, trust_remote_code=False,
                  load_in_4bit=False, lora=Section(enabled=False))
    return load_model(cfg, trainable=False, head=head)


def apply_lora(model, lora_cfg: Any, quantized: bool = False, task: str = "CAUSAL_LM"):
    """Wrap `model` in a peft LoRA adapter built from the config's `model.lora` section."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    targets = lora_cfg.target_modules
    config = LoraConfig(r=lora_cfg.r, lora_alpha=lora_cfg.alpha, lora_dropout=lora_cfg.dropout,
                        target_modules=targets, task_type=task)
    model = get_peft_model(model, config)
    model._rlft_fresh_adapter = True  # made here, untrained (rlft.models.drop_fresh_ref_adapter reads it)
    return model


def _bnb_config(dtype):
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as exc:
        raise UserError("load_in_4bit needs bitsandbytes, which is not installed",
                        "pip install 'rlft[quant]' (or drop model.load_in_4bit)") from exc
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=dtype)


def _fp32_trainable(model) -> None:
    """Keep every trainable weight in fp32 over a bf16/fp16 base, and compute in the base's dtype.

    LoRA adapters: the fp32 A and B matrices are cast to the activations' dtype inside each matmul (a no-op
    where rlft.speed.activations.fp32_activations makes the activations fp32, as it does for every CPU bf16 run it
    can; bf16 otherwise) instead of peft's default of casting every activation up to fp32 and the sum back.
    The update itself stays exact fp32 (Adam on fp32 weights). A module trained whole beside it
    (`modules_to_save`: a reward model's score head) gets its weights in fp32 and its inputs cast to fp32 on
    the way in, so its matmul and its Adam update are exact fp32."""
    import torch

    def to_fp32(module, args):
        return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)

    low = {torch.bfloat16, torch.float16}
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if hasattr(module, "cast_input_dtype_enabled") and hasattr(module, "lora_A"):
            base = getattr(module, "base_layer", None)
            adapters = [*module.lora_A.values(), *module.lora_B.values()]
            plain = adapters and all(type(m) is torch.nn.Linear for m in adapters) and not getattr(
                module, "lora_variant", None)
            if getattr(getattr(base, "weight", None), "dtype", None) in low and plain:
                module.cast_input_dtype_enabled = False
                # on every call, so adapters added later (TRL's DPO copies the adapter as "ref") compute alike
                module.register_forward_pre_hook(_adapters_in_input_dtype)
        if not own or "lora_" in name:
            if own:
                for p in own:
                    p.data = p.data.float()
            continue
        if any(p.dtype in low for p in own):
            for p in own:
                p.data = p.data.float()
            module.register_forward_pre_hook(to_fp32)


def _adapters_in_input_dtype(module, args) -> None:
    import torch

    for m in (*module.lora_A.values(), *module.lora_B.values()):
        if type(m) is torch.nn.Linear:
            m.__class__ = _linear_class()


def _linear_in_input_dtype(self, x):
    import torch.nn.functional as F

    bias = None if self.bias is None else self.bias.to(x.dtype)
    return F.linear(x, self.weight.to(x.dtype), bias)


@functools.cache
def _linear_class():
    import torch

    class LinearInInputDtype(torch.nn.Linear):
        """An nn.Linear whose (fp32) weights are cast to its input's dtype for the matmul: a LoRA A or B
        matrix over a bf16 base (see `_fp32_trainable`). Same parameters and state dict as nn.Linear."""

        forward = _linear_in_input_dtype

    LinearInInputDtype.__module__, LinearInInputDtype.__qualname__ = __name__, "LinearInInputDtype"
    return LinearInInputDtype


def __getattr__(name: str):
    if name == "LinearInInputDtype":  # built on first use: this module must not import torch at import time
        return _linear_class()
    raise AttributeError(name)


def _merge_dtype(dtype):
    import torch

    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def drop_fresh_ref_adapter(model) -> bool:
    """Let TRL take its reference from the base when the adapter being trained is fresh.

    Handed a model that already holds a LoRA adapter (rlft's `load_model` applies LoRA itself, before the trainer),
    TRL's DPO, KTO, GRPO and RLOO trainers (beta > 0) add a frozen "ref" adapter copied from it and compute every
    reference pass through it: the adapter's two extra products in each adapted layer (SmolLM2 DPO, 4 steps: 5040
    linear calls against TRL's own 3360 with a `peft_config`, ~15% of a step). A fresh adapter (lora_B zero:
    peft's initialisation) adds nothing to its base, so that reference is the base with the adapters disabled,
    which is what TRL computes when there is no "ref" adapter; the copy is deleted then.

    Decided by where the adapter came from, the same on every process: `apply_lora` marks the adapters it makes
    (rlft always trains a new one: an earlier stage's adapter is merged into its base first). The weights are
    checked too, where they are on a real device (not meta, as under FSDP's low-memory loading): every adapter
    weight must be a lora_A or an all-zero lora_B; anything else (a DoRA magnitude, embedding or token adapters,
    modules_to_save) keeps the copy. Returns whether it was deleted.

    rlft calls it for DPO, KTO, GRPO and RLOO, whose runs log the same losses, rewards, KL and log-probs either way
    (tests/test_reference_adapter.py; GRPO/RLOO's KL differed until their LoRA A matrices were drawn from the
    run's seed: two runs then started from different adapters, with or without the copy)."""
    configs = getattr(model, "peft_config", None)
    if (not getattr(model, "_rlft_fresh_adapter", False) or not isinstance(configs, dict) or "ref" not in configs
            or "default" not in configs):
        return False
    for name, param in model.named_parameters():
        parts = name.split(".")
        if "default" not in parts:
            continue
        kind = parts[parts.index("default") - 1]
        if kind == "lora_A":
            continue
        if kind != "lora_B" or (param.device.type != "meta" and bool(param.detach().any())):
            return False
    model.delete_adapter("ref")
    return True


def merged_parent(adapter: str, base: str, head: str = "causal") -> Path:
    """A plain model folder holding `base` with the adapter at `adapter` merged in, built once in the cache.

    This is what a LoRA stage started from a LoRA stage trains on and what its adapter names as its base, so
    the chain loads whole everywhere (rlft and plain peft). The merge is done in fp32 and saved in fp32; the
    folder's name is a digest of the adapter's files and the base folder's weights (content, not paths), so a
    retrained parent gives a new folder. A `merged_from.json` beside the weights says what it holds.
    """
    import hashlib
    import json

    a, b = Path(adapter), Path(base)
    digest = hashlib.sha256(f"{head}|{b.resolve() if b.exists() else base}".encode())
    for folder in (a, b):
        for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.json")):
            if f.name in ("adapter_config.json", "config.json") or f.suffix == ".safetensors":
                st = f.stat()
                digest.update(f"{f.name}|{st.st_size}|{st.st_mtime_ns}".encode())
                if f.parent == a:  # the adapter is small: hash its bytes (a rerun into the same folder changes them)
                    digest.update(hashlib.sha256(f.read_bytes()).digest())
    out = cache_dir() / f"merged-{digest.hexdigest()[:20]}"
    if (out / "config.json").exists():
        if intact(out):
            return out
        print(f"note: the merged-parent cache {out} is damaged (a weights file is missing, or not the size "
              "and SHA-256 merged_from.json recorded): rebuilding it", file=__import__("sys").stderr)
        try:
            __import__("shutil").rmtree(out)
        except OSError as exc:
            raise UserError(f"the merged-parent cache {out} is damaged and could not be removed ({exc})",
                            f"remove it (rm -rf {out}) and run the command again") from None
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    auto = AutoModelForSequenceClassification if head == "score" else AutoModelForCausalLM
    model = auto.from_pretrained(base, dtype=torch.float32, **({"num_labels": 1} if head == "score" else {}))
    if head == "score" and model.config.pad_token_id is None:
        model.config.pad_token_id = model.config.eos_token_id
    config = None
    if head == "score":
        # a causal-LM adapter (task_type CAUSAL_LM) merged into a score-head body: loaded as a plain PeftModel,
        # since PeftModelForCausalLM reaches for generate's hooks, which transformers 5's
        # LlamaForSequenceClassification no longer has
        from peft import PeftConfig

        config = PeftConfig.from_pretrained(adapter)
        config.task_type = None
    model = PeftModel.from_pretrained(model, adapter, config=config).merge_and_unload()

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        load_tokenizer(adapter).save_pretrained(tmp)
        (tmp / "merged_from.json").write_text(json.dumps({"adapter": str(a.resolve()), "base": str(base),
                                                          "dtype": "float32", "files": record_files(tmp)},
                                                         indent=2) + "\n")

    return build_once(out, save)


def _has_tokenizer(path: str) -> bool:
    p = Path(path)
    return not p.exists() or any((p / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))


def adapter_base(path: str) -> str | None:
    """For a peft adapter folder, the base model it was trained on; None otherwise."""
    cfg = Path(path) / "adapter_config.json"
    if not cfg.exists():
        return None
    import json

    base = json.loads(cfg.read_text()).get("base_model_name_or_path")
    if not base:
        raise UserError(f"adapter in '{path}' does not name its base model",
                        "set base_model_name_or_path in adapter_config.json")
    return resolve_model_path(base) if base != TINY else str(tiny_path())


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, total
