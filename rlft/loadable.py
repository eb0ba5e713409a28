"""Will this model folder load? Checks that read no weights, run before the run folder is made.

`check_folder` reads what `from_pretrained` would need and says in one line what is wrong: a file where a
folder is expected, config.json that is not JSON or has no model_type, no tokenizer files, no weights or a
truncated .safetensors file (its header names more bytes than the file holds), an adapter without its base,
a hub id that is not cached while offline. `load_problem` turns a library exception raised while loading
into the same kind of one-line message (rlft.models uses it around from_pretrained).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from rlft.errors import UserError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")


def check_folder(path: Path, name: str, flag: str) -> None:
    """config.json, tokenizer files and intact weights in a local model folder."""
    read_config(path / "config.json", name, flag, need_type=True)
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise UserError(f"{flag} '{name}' has no tokenizer files ({', '.join(TOKENIZER_FILES)})",
                        "save the tokenizer into the folder (tokenizer.save_pretrained(folder)), or copy its "
                        "tokenizer files there")
    weights = [p for pattern in WEIGHT_GLOBS for p in path.glob(pattern)]
    if not weights:
        raise UserError(f"{flag} '{name}' has no weights (model.safetensors or pytorch_model.bin)",
                        "point at a folder written by save_pretrained (a finished run's output_dir)")
    for file in weights:
        if file.suffix == ".safetensors":
            _check_safetensors(file, name, flag)


def read_config(file: Path, name: str, flag: str, need_type: bool) -> dict:
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{flag} '{name}': {file.name} is not valid JSON ({exc})",
                        f"restore {file.name} from the original model (it is damaged)") from exc
    except OSError as exc:
        raise UserError(f"{flag} '{name}': cannot read {file.name} ({exc.strerror})", "check the folder") from exc
    if not isinstance(config, dict):
        raise UserError(f"{flag} '{name}': {file.name} is not a JSON object", f"restore {file.name}")
    if need_type and "model_type" not in config:
        raise UserError(f"{flag} '{name}': config.json has no model_type, so transformers cannot tell which "
                        "architecture to build", "add \"model_type\" (e.g. \"llama\") or restore config.json")
    return config


def _check_safetensors(file: Path, name: str, flag: str) -> None:
    """A .safetensors file is an 8-byte header length, a JSON header and the tensor bytes it indexes."""
    size = file.stat().st_size
    bad = None
    try:
        with file.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8)) if size >= 8 else (None,)
            if n is None or 8 + n > size:
                bad = f"its header needs {n if n is not None else 8} bytes, the file has {size}"
            else:
                header = json.loads(f.read(n))
                end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
                if 8 + n + end > size:
                    bad = f"it holds {size:,} bytes of the {8 + n + end:,} its header lists"
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, IndexError) as exc:
        bad = f"its header is unreadable ({type(exc).__name__})"
    if bad:
        raise UserError(f"{flag} '{name}': {file.name} is truncated or corrupt: {bad}",
                        "copy or download the weights again")


def load_problem(name: str, exc: BaseException, flag: str = "--model") -> UserError:
    """One line for an exception raised while loading a model or tokenizer."""
    text = " ".join(str(exc).split())
    local = Path(os.path.expanduser(name)).exists()
    if not local and os.environ.get("HF_HUB_OFFLINE") == "1":
        return UserError(f"{flag} '{name}' is not in the local Hugging Face cache and HF_HUB_OFFLINE=1",
                         f"download it first (huggingface-cli download {name}) or pass a local folder")
    if not local and isinstance(exc, OSError):
        return UserError(f"{flag} '{name}' is not a local folder and could not be fetched from the hub: {text[:300]}",
                         "check the id and the network (gated models need `huggingface-cli login`), or pass a "
                         "local folder")
    return UserError(f"{flag} '{name}' does not load: {type(exc).__name__}: {text[:300]}",
                     "point at a folder written by save_pretrained, or restore the damaged files")
