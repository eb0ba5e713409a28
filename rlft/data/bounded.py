"""Inputs read with bounds: no file, value or recipe can make rlft hang or fill the memory.

- `check_text_file`: a data file is a regular file (a pipe or device is named as such: reading it could block
  forever), not sparse (a file of holes reads as gigabytes of NUL bytes) and not binary (a NUL byte in its first
  64 KiB); both found from its metadata and first block, before it is read whole.
- `load_yaml`: YAML whose aliases would expand past MAX_YAML_NODES nodes (a "billion laughs" bomb) or nest
  deeper than MAX_DEPTH is refused after composing, before anything is built; merge keys (`<<:`) work.
- `json_depth_problem`: JSON nested deeper than MAX_DEPTH (Python's reader would raise RecursionError).
- CSV cells up to CSV_FIELD_LIMIT characters (Python's default, 128 KiB, is below a long document).
- `cell_problems`: row values no training table can hold (integers beyond int64, lone surrogates), by line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

from rlft.errors import UserError, row_problem

MAX_YAML_NODES = 100_000  # a recipe has ~100 values; an expanded alias bomb has billions
MAX_DEPTH = 64  # levels of nesting: a chat row is ~4 deep
CSV_FIELD_LIMIT = 64 * 2**20  # characters in one CSV cell
HEAD = 64 * 2**10  # bytes read to tell text from binary


def kind_of(path: Path) -> str | None:
    """'a named pipe', 'a device', 'a socket' for what is not a file, folder or link to one; else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def check_text_file(p: Path, name: str, what: str = "data file", binary_ok: bool = False) -> None:
    """A regular file, not mostly holes, and (unless `binary_ok`) without NUL bytes in its first block."""
    if kind_of(p):
        raise UserError(f"{what} '{name}' is {kind_of(p)}, not a regular file",
                        "pass a .jsonl, .json, .csv or .parquet file")
    st = p.stat()
    if st.st_size > 2**20 and st.st_blocks * 512 < st.st_size // 8 and _data_bytes(p) < st.st_size // 8:
        raise UserError(f"{what} '{name}' is a sparse file ({st.st_size:,} bytes, {st.st_blocks * 512:,} on "
                        "disk): mostly holes that read as NUL bytes", "pass the real data file")
    if binary_ok:
        return
    try:
        with p.open("rb") as f:
            head = f.read(HEAD)
    except OSError as exc:
        raise UserError(f"{what} '{name}' cannot be read ({exc.strerror or exc})",
                        "check its permissions (chmod +r) and that it is a plain file") from exc
    if b"\0" in head:
        line = head[: head.index(b"\0")].count(b"\n") + 1
        utf16 = head[:2] in (b"\xff\xfe", b"\xfe\xff")
        raise UserError(f"{what} '{name}' is {'UTF-16' if utf16 else 'binary'}, not UTF-8 text (a NUL byte on "
                        f"line {line})", "re-encode it as UTF-8 (iconv -t UTF-8)" if utf16 else
                        "pass a UTF-8 .jsonl, .json or .csv file (or a .parquet file)")


def _data_bytes(p: Path) -> int:
    """Bytes of `p` that are data, not holes (SEEK_DATA/SEEK_HOLE): a compressed file system also reports few
    blocks on disk, but has no holes. Where the file system cannot tell, the whole size."""
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return p.stat().st_size
    try:
        total, offset, size = 0, 0, os.fstat(fd).st_size
        while offset < size:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            offset = os.lseek(fd, start, os.SEEK_HOLE)
            total += offset - start
        return total
    except OSError as exc:  # ENXIO: no data after offset; others: cannot tell
        return total if exc.errno == errno.ENXIO else size
    finally:
        os.close(fd)


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists/dicts in `value`, counted without recursion, up to `limit` + 1."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def json_depth_problem(text: str) -> str | None:
    """'nested deeper than N levels' for JSON text too deep to read safely, else None (cheap for flat text)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None
    level = 0
    for ch in _BRACKETS.findall(_STRINGS.sub("", text)):  # brackets outside strings, at C speed
        level += 1 if ch in "[{" else -1
        if level > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels"
    return None


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def load_yaml(text: str, loader_cls, where: str) -> Any:
    """`yaml.load(text, loader_cls)` with alias expansion and depth capped (refused with one line)."""
    loader = loader_cls(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # PyYAML composes recursively: deeper than Python's stack
            raise UserError(f"{where}: YAML nested deeper than {MAX_DEPTH} levels",
                            "flatten the value (a recipe needs a few levels: section, key, list)") from None
        if node is not None:
            _check_nodes(node, where)
            return loader.construct_document(node)
        return None
    finally:
        loader.dispose()


def _check_nodes(root, where: str) -> None:
    """Count the nodes the document would have with every alias expanded and its depth, each shared (aliased)
    node once (so this is linear in the text), without recursion; a node that holds itself is refused too."""
    size: dict[int, int] = {}
    deep: dict[int, int] = {}
    stack: list = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            deep[key] = 1 + max((deep[id(k)] for k in kids), default=0)
            open_nodes.discard(key)
            if size[key] > MAX_YAML_NODES:
                raise UserError(f"{where}: YAML aliases expand to more than {MAX_YAML_NODES:,} values (an alias "
                                "bomb?)", "write the values out, or use fewer nested aliases (*name)")
            if deep[key] > MAX_DEPTH:
                raise UserError(f"{where}: YAML nested deeper than {MAX_DEPTH} levels",
                                "flatten the value (a recipe needs a few levels: section, key, list)")
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise UserError(f"{where}: a YAML alias refers to the value that holds it (a loop)",
                            "write the value out instead of the alias")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def _children(node) -> list:
    value = getattr(node, "value", None)
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        out.extend(item if isinstance(item, tuple) else (item,))
    return out


INT64 = 2**63
_SURROGATE = re.compile("[\ud800-\udfff]")


def cell_problems(rows: list) -> list[str]:
    """Values no training table can hold, by file:line:field: integers beyond 64 bits (pyarrow overflows) and
    strings with a lone UTF-16 surrogate (`"\\ud800"` in JSON: no tokenizer can encode it)."""
    problems = []
    for r in rows:
        for key, value in r.data.items():
            stack = [value]
            while stack and len(problems) < 50:
                v = stack.pop()
                if isinstance(v, int) and not isinstance(v, bool) and not -INT64 <= v < INT64:
                    problems.append(row_problem(r.source, r.line, key, f"the integer {str(v)[:30]}... is beyond 64 "
                                                "bits; write it as a string (\"...\")" if len(str(v)) > 30 else
                                                f"the integer {v} is beyond 64 bits; write it as a string"))
                elif isinstance(v, str) and (m := _SURROGATE.search(v)):
                    problems.append(row_problem(r.source, r.line, key, f"a lone UTF-16 surrogate "
                                                f"(\\u{ord(m.group()):04x}) at character {m.start()}: not text; "
                                                "remove it or write the whole character (a \\ud83d\\ude00 pair)"))
                elif isinstance(v, (list, dict)):
                    stack.extend(v.values() if isinstance(v, dict) else v)
    return problems


def raise_csv_limit() -> None:
    import csv

    csv.field_size_limit(CSV_FIELD_LIMIT)

