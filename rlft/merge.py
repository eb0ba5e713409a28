"""`rlft merge`: fold a LoRA run's adapter into its base model and save a plain transformers folder.

The base is loaded in float32 whatever `dtype` asks for, the adapter merged with peft's `merge_and_unload`,
and only then is the model cast to `dtype`, so a bf16/fp16 output is rounded once, after the merge. The run's
tokenizer (chat template included) and the generation config are saved beside the weights. A reward-model run
(a score head, peft task SEQ_CLS) merges into a sequence classifier. The folder is written under a temporary
name and renamed when complete: a failed merge leaves nothing behind.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlft.errors import UserError

DTYPES = ("float32", "bfloat16", "float16")


def check_merge(run: str | Path, out: str | Path, dtype: str, overwrite: bool = False) -> Path:
    """Refuse a run without an adapter, an unknown dtype or a busy output folder; returns the adapter config path."""
    run, out = Path(run), Path(out)
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype} is not one of {', '.join(DTYPES)}", "use --dtype float32 (exact) or bfloat16")
    cfg = run / "adapter_config.json"
    if not cfg.exists():
        what = "a full fine-tune (already a plain model folder)" if (run / "config.json").exists() else "not a run"
        raise UserError(f"'{run}' has no LoRA adapter to merge: it is {what}",
                        "merge a run trained with --lora (its folder holds adapter_config.json)")
    from rlft.run.outputs import check_model_folder, check_output, refs_as_inputs

    check_output(out, refs_as_inputs(run, "model"), "-o",
                 "choose an -o DIR outside the run and the models it refers to")
    check_model_folder(out, "-o", overwrite)
    return cfg


def merge_run(run: str | Path, out: str | Path, dtype: str = "float32", overwrite: bool = False) -> Path:
    """Merge the LoRA adapter in `run` into its base and save a plain model folder at `out`."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from rlft.models import adapter_base, load_tokenizer, torch_dtype

    adapter_cfg = check_merge(run, out, dtype, overwrite)
    run, out = Path(run), Path(out)
    base = adapter_base(str(run))
    score = json.loads(adapter_cfg.read_text()).get("task_type") == "SEQ_CLS"
    auto = AutoModelForSequenceClassification if score else AutoModelForCausalLM
    kwargs = {"num_labels": 1} if score else {}
    model = auto.from_pretrained(base, dtype=torch.float32, **kwargs)
    if score and model.config.pad_token_id is None:  # as rlft.models.load_model: the classifier finds the last token
        model.config.pad_token_id = model.config.eos_token_id
    merged = PeftModel.from_pretrained(model, str(run)).merge_and_unload()
    merged = merged.to(torch_dtype(dtype))
    tok = load_tokenizer(str(run))
    from rlft.run.outputs import staged

    with staged(out, "-o") as tmp:  # a full or read-only disk leaves the old folder (or nothing)
        merged.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "merged_from.json").write_text(json.dumps({"run": str(run.resolve()), "base": base,
                                                          "dtype": dtype}, indent=2) + "\n")
    return out
