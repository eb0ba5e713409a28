"""Loading and per-method validation of training rows.

Local .jsonl/.json/.csv files are read with the standard library, line by line (a bad row is reported by file,
line and field; `rlft choose`/`data lint` read 10k rows without `datasets`). Parquet files and hub dataset names
go through `datasets.load_dataset` (rows are then numbered from 1). Validation reports every bad row at once,
before any model loads and before anything is written.

Row kinds, named by the signal they carry as in `rlft data lint` and `rlft choose` (canonical column names;
`data.fields` renames a file's columns to these):
  demonstrations  prompt + completion (strings or message lists), or messages (a chat with an assistant turn)
  pairs           prompt + chosen + rejected (strings or message lists)
  verifiable      prompt + gold fields (answer, label, ...), used by eval, GRPO, PPO, RLOO
  thumbs          prompt + completion (strings or message lists) + label true/false (KTO)
  prompts         prompt only (distillation: the student writes the completions)

The package around this module (each standard library only):
  rows     row shapes: which signal a row carries, and which verifier can read its gold values
  lint     `rlft data lint`: the problems that make a run learn nothing, or the wrong thing
  thumbs   thumbs up/down rows: the label rules and KTO's class-balance advice
  bounded  inputs read with bounds: no file, value or recipe can hang rlft or fill the memory
  table    rows as a `datasets.Dataset` (to_dataset), each row's tool-call arguments as written
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from rlft.data.bounded import cell_problems, check_text_file, json_depth_problem, kind_of, raise_csv_limit
from rlft.errors import DataError, UserError, row_problem

LOCAL_SUFFIXES = {".jsonl", ".json", ".csv", ".parquet"}
ROLES = {"system", "user", "assistant", "tool"}


@dataclass
class Row:
    """One data row and where it came from (line is 1-based; row number for parquet/hub data)."""

    source: str
    line: int
    data: dict[str, Any]


# --------------------------------------------------------------------------- reading


def read_rows(path: str, fields: dict[str, str] | None = None, split: str = "train",
              max_rows: int | None = None, hashes: dict[str, str] | None = None) -> list[Row]:
    """Read one file or hub dataset into Rows, renaming columns per `fields` ({canonical: column}); the sha256
    of a local file's bytes as read goes into `hashes` under its name as given."""
    given = str(path)
    path = os.path.expanduser(path)
    p = Path(path)
    suffix = p.suffix.lower()
    if p.is_dir():  # a dataset folder (data files, or a hub snapshot): the hub code path
        _check_data_folder(p, path)
        rows = _read_with_datasets(str(p), None, split=split)
    elif p.exists():
        if not p.is_file():
            raise UserError(f"data file '{path}' is {kind_of(p) or 'something'}, not a regular file",
                            "pass a .jsonl, .json, .csv or .parquet file")
        if suffix not in LOCAL_SUFFIXES:
            raise UserError(f"{path}: unsupported file type '{suffix or '(none)'}'",
                            "use .jsonl, .json, .csv or .parquet")
        check_text_file(p, path, binary_ok=suffix == ".parquet")  # before reading it whole
        started, big = time.time(), p.stat().st_size > PROGRESS_BYTES
        if big:
            print(f"reading {path} ({p.stat().st_size / 2**20:.0f} MB)...", file=sys.stderr, flush=True)
        raw = _read_bytes(p, path)
        if hashes is not None:  # rlft.run.guard.content_hash of these bytes
            hashes[given] = hashlib.sha256(raw).hexdigest()
        if not raw.strip():
            raise DataError([row_problem(path, None, None, "file is empty")], "add rows, one JSON object per line")
        if suffix == ".parquet":
            rows = _read_with_datasets("parquet", path, split="train")
        else:
            text = _decode(raw, path)
            rows = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv}[suffix](text, path)
        if big:
            print(f"read {len(rows):,} rows from {path} in {time.time() - started:.1f}s", file=sys.stderr,
                  flush=True)
    elif suffix in LOCAL_SUFFIXES or path.startswith((".", "/", "~")):
        raise UserError(f"data file '{path}' does not exist", "check the path (shipped samples are in data/)")
    else:
        rows = _read_with_datasets(path, None, split=split)
    if not rows:
        raise DataError([row_problem(path, None, None, "no rows")], "add rows, one JSON object per line")
    if fields:
        _check_renames(rows, fields, path)
        rows = [_rename(r, fields) for r in rows]
    return rows[:max_rows] if max_rows else rows


DATA_FOLDER_SUFFIXES = LOCAL_SUFFIXES | {".arrow"}
# Files above this size get a line on stderr before and after reading: a 35 MB, 400k-row jsonl took 22 s to
# read, 6 s to validate and 22 s to become a Dataset on this 2-core machine under load.
PROGRESS_BYTES = 10 * 2**20
# Training sets from this many rows get a line before the trainer tokenises them (TRL's own bar is off).
PROGRESS_ROWS = 50_000


def _check_data_folder(p: Path, path: str) -> None:
    """A folder given as data must hold data files; else `datasets` would read any text file as rows."""
    if p.suffix.lower() in LOCAL_SUFFIXES:
        raise UserError(f"data file '{path}' is a folder, not a {p.suffix} file", "pass the file inside it")
    if not any(f.suffix.lower() in DATA_FOLDER_SUFFIXES for f in p.rglob("*") if f.is_file()):
        raise UserError(f"data folder '{path}' holds no data files (.jsonl, .json, .csv, .parquet)",
                        "pass a data file, or a folder of them")


def _read_bytes(p: Path, path: str) -> bytes:
    try:
        return p.read_bytes()
    except OSError as exc:
        raise UserError(f"data file '{path}' cannot be read ({exc.strerror or exc})",
                        "check its permissions (chmod +r) and that it is a plain file") from exc


def _check_renames(rows: list[Row], fields: dict[str, str], path: str) -> None:
    """data.fields renames columns that must exist (in some row): a rename to a missing column would leave the
    canonical column unset, or silently use a same-named column the user meant to replace."""
    present = {k for r in rows for k in r.data}
    missing = [f"{canonical}: {column}" for canonical, column in fields.items() if column not in present]
    if missing:
        raise UserError(f"data.fields renames a column that {path} does not have ({', '.join(missing)}); its "
                        f"columns: {', '.join(sorted(present))}", "fix data.fields to name one of those columns")


def _decode(raw: bytes, path: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError([row_problem(path, line, None, f"not UTF-8 (byte 0x{raw[exc.start]:02x})")],
                        "re-encode the file as UTF-8 (iconv -t UTF-8)") from exc


def _read_jsonl(text: str, path: str) -> list[Row]:
    rows, problems = [], []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if deep := json_depth_problem(line):
            problems.append(row_problem(path, n, None, deep))
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(row_problem(path, n, None, f"malformed JSON ({exc.msg}, column {exc.colno})"))
            continue
        if not isinstance(obj, dict):
            problems.append(row_problem(path, n, None, f"expected a JSON object, got {type(obj).__name__}"))
            continue
        rows.append(Row(path, n, obj))
    if problems:
        raise DataError(problems, "each line must be one JSON object")
    return rows


def _read_json(text: str, path: str) -> list[Row]:
    if deep := json_depth_problem(text):
        raise DataError([row_problem(path, None, None, deep)], "flatten the rows (a chat row is 4 levels deep)")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError([row_problem(path, exc.lineno, None, f"malformed JSON ({exc.msg})")],
                        "fix the JSON, or use one object per line (.jsonl)") from exc
    depth = 1
    if isinstance(doc, dict):  # {"data": [...]} or {"train": [...]} style
        lists = [v for v in doc.values() if isinstance(v, list)]
        if len(lists) != 1:
            keys = ", ".join(list(doc)[:8]) or "none"
            raise UserError(f"{path}: the top-level JSON object (keys: {keys}) is not a list of rows",
                            'write a list of row objects [{...}, {...}], one list under a key {"data": [...]}, '
                            "or use .jsonl")
        doc, depth = lists[0], 2
    if not isinstance(doc, list):
        raise UserError(f"{path}: the top-level JSON value is a {type(doc).__name__}, not a list of rows",
                        "write [{...}, {...}], or use one object per line (.jsonl)")
    starts = _object_lines(text, depth)
    rows, problems = [], []
    for i, obj in enumerate(doc):
        line = starts[i] if i < len(starts) else None
        if not isinstance(obj, dict):
            problems.append(row_problem(path, line, None, f"expected a JSON object, got {type(obj).__name__}"))
        else:
            rows.append(Row(path, line, obj))
    if problems:
        raise DataError(problems, "make every element of the list a row object {...}")
    return rows


def _object_lines(text: str, depth_of_rows: int = 1) -> list[int]:
    """Line numbers where the elements of the row list start (the list at nesting depth `depth_of_rows`: 1 for
    a top-level array, 2 for an array under a key), objects or not, so element i is on line lines[i]."""
    lines: list[int] = []
    stack: list[str] = []
    line, in_str, esc, expect = 1, False, False, False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_str:
            if ch == '"' and not esc:
                in_str = False
            esc = not esc and ch == "\\"
            continue
        if expect and not ch.isspace() and ch not in ",]":
            lines.append(line)
            expect = False
        if ch == '"':
            in_str = True
        elif ch in "[{":
            stack.append(ch)
            expect = ch == "[" and len(stack) == depth_of_rows
        elif ch in "]}":
            if stack:
                stack.pop()
            expect = False
        elif ch == "," and len(stack) == depth_of_rows and stack[-1] == "[":
            expect = True
    return lines


def _read_csv(text: str, path: str) -> list[Row]:
    raise_csv_limit()
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    try:
        for obj in reader:
            rows.append(Row(path, reader.line_num, {k: _maybe_json(v) for k, v in obj.items() if k is not None}))
    except csv.Error as exc:
        raise DataError([row_problem(path, reader.line_num + 1, None, f"unreadable CSV ({exc})")],
                        "fix the quoting of that line, or use .jsonl") from exc
    return rows


def _maybe_json(value: str | None) -> Any:
    """CSV cells holding JSON lists/objects (chat messages, label lists) are decoded; others stay text."""
    if value and value[:1] in "[{" and not json_depth_problem(value):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _read_with_datasets(name: str, path: str | None, split: str) -> list[Row]:
    """Parquet files and hub datasets go through `datasets` (the hub needs network unless cached)."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a dependency
        raise UserError("reading parquet or hub data needs `datasets`", "pip install datasets") from exc
    try:
        if path:
            ds = datasets.load_dataset(name, data_files=path, split=split)
        else:
            ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # datasets raises many types for a bad name / offline hub
        raise UserError(f"could not load dataset '{path or name}': {str(exc).splitlines()[0]}",
                        "check the name and split, or pass a local .jsonl file") from exc
    return [Row(path or name, i + 1, dict(obj)) for i, obj in enumerate(ds)]


def _rename(row: Row, fields: dict[str, str]) -> Row:
    data = dict(row.data)
    for canonical, column in fields.items():
        if column in data and canonical != column:
            data[canonical] = data.pop(column)
    return Row(row.source, row.line, data)


def read_many(paths: Iterable[str], **kwargs) -> list[Row]:
    rows: list[Row] = []
    for path in paths:
        rows += read_rows(path, **kwargs)
    return rows


# --------------------------------------------------------------------------- validation

def _text_problem(value: Any, allow_messages: bool = True) -> str | None:
    """Why `value` is not usable text (a non-empty string or a message list), or None."""
    if value is None:
        return "missing"
    if isinstance(value, str):
        return "empty string" if not value.strip() else None
    if allow_messages and isinstance(value, list):
        return _messages_problem(value)
    kinds = "a string or a list of messages" if allow_messages else "a string"
    return f"expected {kinds}, got {type(value).__name__}"


def _messages_problem(messages: Any, need_assistant: bool = False) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "expected a non-empty list of {role, content} messages"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            return f"message {i} is not an object with role and content"
        if m["role"] not in ROLES:
            return f"message {i} has role '{m['role']}' (expected one of {', '.join(sorted(ROLES))})"
        if not isinstance(m["content"], str):
            return f"message {i} content is {type(m['content']).__name__}, expected a string"
    if need_assistant and not any(m["role"] == "assistant" and m["content"].strip() for m in messages):
        return "no non-empty assistant message to learn from"
    return None


def validate_sft(rows: list[Row]) -> None:
    problems = []
    for r in rows:
        d = r.data
        if "messages" in d and ("prompt" in d or "completion" in d):
            both = "prompt" if "prompt" in d else "completion"
            problems.append(row_problem(r.source, r.line, "messages", f"row has both messages and {both}: "
                                        "use one shape (messages, or prompt + completion)"))
            continue
        if "messages" in d:
            why = _messages_problem(d["messages"], need_assistant=True)
            if why:
                problems.append(row_problem(r.source, r.line, "messages", why))
            continue
        if "prompt" not in d and "completion" not in d and "text" in d:
            if why := _text_problem(d["text"], allow_messages=False):
                problems.append(row_problem(r.source, r.line, "text", why))
            continue
        for key in ("prompt", "completion"):
            if why := _text_problem(d.get(key)):
                problems.append(row_problem(r.source, r.line, key, why))
    problems += mixed_types(rows, ("prompt", "completion"), text_only=True)
    if problems:
        raise DataError(problems, "SFT rows need prompt + completion, or messages with an assistant turn "
                                  "(rename columns with --set data.fields.prompt=COLUMN)")


def validate_preference(rows: list[Row]) -> None:
    problems = []
    identical = []
    for r in rows:
        d = r.data
        for key in ("prompt", "chosen", "rejected"):
            if why := _text_problem(d.get(key)):
                problems.append(row_problem(r.source, r.line, key, why))
        if d.get("chosen") is not None and d.get("chosen") == d.get("rejected"):
            identical.append(r)
    if identical and len(identical) == len(rows):
        problems.append(row_problem(rows[0].source, None, "chosen", f"chosen equals rejected in all {len(rows)} "
                                    "rows: there is no preference to learn"))
    else:  # a pair with no preference gets a zero-margin loss that still moves the model (rlft data lint: error)
        problems += [row_problem(r.source, r.line, "chosen", "equals rejected: no preference to learn")
                     for r in identical]
    problems += mixed_types(rows, ("prompt", "chosen", "rejected"), text_only=True)
    if problems:
        raise DataError(problems, "preference rows need prompt, chosen and rejected, with chosen != rejected "
                                  "(drop or fix the rows named; rlft data lint FILE lists them all)")


def mixed_types(rows: list[Row], keys: tuple[str, ...], text_only: bool = False) -> list[str]:
    """Rows whose `key` holds another type than most rows (text among message lists, a number among strings):
    one training table cannot hold both (pyarrow stops with ArrowTypeError). `text_only`: compare only
    strings and lists (the text fields' other types are reported by their validator)."""
    problems = []
    for key in keys:
        kinds: dict[str, list[Row]] = {}
        for r in rows:
            value = r.data.get(key)
            if value is not None and (not text_only or isinstance(value, (str, list))):
                kinds.setdefault(_kind(value), []).append(r)
        if len(kinds) > 1:
            common = max(kinds, key=lambda k: len(kinds[k]))
            for kind, odd in kinds.items():
                if kind != common:
                    problems += [row_problem(r.source, r.line, key, f"is {kind} while the other rows hold {common}; "
                                             "use one form in every row") for r in odd[:20]]
    return problems


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"  # ints and floats share a column
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def validate_verifiable(rows: list[Row], gold_fields: tuple[str, ...] = ("answer",)) -> None:
    problems = []
    for r in rows:
        if why := _text_problem(r.data.get("prompt")):
            problems.append(row_problem(r.source, r.line, "prompt", why))
        for key in gold_fields:
            value = r.data.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                problems.append(row_problem(r.source, r.line, key, "missing" if value is None else "empty string"))
    if problems:
        raise DataError(problems, f"rows need prompt and {', '.join(gold_fields)}")


def validate_thumbs(rows: list[Row]) -> None:
    """prompt + completion + a boolean label per row (file:line errors); both labels must occur."""
    from rlft.data.thumbs import label_problem, label_value

    problems = []
    for r in rows:
        for key in ("prompt", "completion"):
            if why := _text_problem(r.data.get(key)):
                problems.append(row_problem(r.source, r.line, key, why))
        if why := label_problem(r.data.get("label")):
            problems.append(row_problem(r.source, r.line, "label", why))
    problems += mixed_types(rows, ("prompt", "completion"), text_only=True)
    labels = {label_value(r.data.get("label")) for r in rows}
    if not problems and len(labels) == 1:
        problems.append(row_problem(rows[0].source, None, "label", f"every label is {labels.pop()}: KTO needs "
                                    "both desirable (true) and undesirable (false) completions"))
    if problems:
        raise DataError(problems, _FIXES["thumbs"])


def validate_prompts(rows: list[Row]) -> None:
    problems = [row_problem(r.source, r.line, "prompt", why) for r in rows
                if (why := _text_problem(r.data.get("prompt")))]
    problems += mixed_types(rows, ("prompt",), text_only=True)
    if problems:
        raise DataError(problems, _FIXES["prompts"])


VALIDATORS = {"demonstrations": validate_sft, "pairs": validate_preference, "thumbs": validate_thumbs,
              "prompts": validate_prompts,
              # gold fields depend on the verifier: the method checks them (rlft.verifiers.loading.validate_gold)
              "verifiable": lambda rows: _validate_columns(rows)}


def _validate_columns(rows: list[Row]) -> None:
    """Verifiable rows: a prompt, and one type per column (the trainer's table cannot mix them)."""
    validate_verifiable(rows, gold_fields=())
    if problems := mixed_types(rows, tuple(dict.fromkeys(k for r in rows for k in r.data))):
        raise DataError(problems)


def load_split(data_cfg: Any, kind: str, seed: int = 42, hashes: dict | None = None) -> tuple[list[Row], list[Row]]:
    """Read and validate train (and eval) rows of `kind` (a method's KIND); returns (train_rows, eval_rows).
    `hashes` gets the sha256 of each local training file's bytes as read (rlft.run.guard's fingerprint)."""
    if not data_cfg.train:
        raise UserError("no training data given", "pass --data FILE (or set data.train in the recipe)")
    kwargs = dict(fields=data_cfg.fields, split=data_cfg.split)
    train = read_many(data_cfg.train, hashes=hashes, **kwargs)
    evals = read_rows(data_cfg.eval, **kwargs) if data_cfg.eval else []
    cut = bool(data_cfg.max_rows) and len(train) > data_cfg.max_rows
    if cut:  # before validation: the rows checked are the rows trained on (KTO's two labels)
        train = train[: data_cfg.max_rows]
    problems: list[str] = []
    for rows in (train, evals):
        if rows:
            problems += cell_problems(rows)
            try:
                VALIDATORS[kind](rows)
            except DataError as exc:
                problems += exc.problems
    if problems:
        raise DataError(problems, _FIXES[kind] + (f"; data.max_rows={data_cfg.max_rows} keeps only the file's "
                                                  "first rows: raise it, or shuffle the file" if cut else ""))
    if data_cfg.get("as_chat"):
        from rlft.chat.templates import wrap_as_chat

        train, evals = wrap_as_chat(train), wrap_as_chat(evals)
    if not evals and data_cfg.eval_fraction:
        import random

        order = list(range(len(train)))
        random.Random(seed).shuffle(order)
        n_eval = max(1, int(len(train) * data_cfg.eval_fraction))
        held = set(order[:n_eval])
        evals = [r for i, r in enumerate(train) if i in held]
        train = [r for i, r in enumerate(train) if i not in held]
    return train, evals


_FIXES = {
    "demonstrations": "SFT rows need prompt + completion, or messages with an assistant turn",
    "pairs": "preference rows need prompt, chosen and rejected, with chosen != rejected",
    "verifiable": "rows need prompt and the gold fields",
    "thumbs": "thumbs rows need prompt, completion and label (JSON true or false)",
    "prompts": "rows need a prompt (a string or a list of messages)",
}
