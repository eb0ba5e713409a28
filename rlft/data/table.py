"""Rows as a `datasets.Dataset` (`to_dataset`), with every row's tool-call arguments kept as written."""

from __future__ import annotations

from rlft.data import Row, mixed_types
from rlft.errors import DataError, row_problem


def has_tool_arguments(records: list[dict]) -> bool:
    return any(isinstance(c, dict) and isinstance(c.get("function"), dict) and "arguments" in c["function"]
               for rec in records for value in rec.values() if isinstance(value, list)
               for m in value if isinstance(m, dict) for c in (m.get("tool_calls") or []))


def per_row_arguments(ds, records: list[dict]):
    """The dataset again with every tool call's `arguments` typed datasets.Json: Arrow would otherwise unify the
    argument mappings of all rows into one struct, and a call written {"x": "1"} would come back (and be rendered
    by the chat template, and trained on) as {"x": "1", "y": None} because another row's call has a `y`."""
    from datasets import Dataset, Features, Json, List

    def retype(feature):
        if isinstance(feature, dict):
            return {k: Json() if k == "arguments" else retype(v) for k, v in feature.items()}
        if isinstance(feature, List):
            return List(retype(feature.feature))
        return feature

    return Dataset.from_list(records, features=Features(retype(dict(ds.features))))


def keep_arguments_per_row(ds, records: list[dict]):
    """`ds` as it is, or rebuilt with per-row tool-call arguments when its rows have tool calls."""
    return per_row_arguments(ds, records) if has_tool_arguments(records) else ds


def to_dataset(rows: list[Row], columns: tuple[str, ...] | None = None):
    """Turn rows into a `datasets.Dataset`, keeping only `columns` when given."""
    from datasets import Dataset

    records = [{k: v for k, v in r.data.items() if columns is None or k in columns} for r in rows]
    try:
        ds = Dataset.from_list(records)
        return keep_arguments_per_row(ds, records)
    except (TypeError, ValueError) as exc:  # pyarrow's ArrowTypeError / ArrowInvalid: values that mix types
        keys = tuple(dict.fromkeys(k for rec in records for k in rec))
        problems = mixed_types(rows, keys) or [row_problem(rows[0].source, None, None, str(exc).splitlines()[0])]
        raise DataError(problems, "use one type per column in every row (e.g. all answers as strings)") from exc
