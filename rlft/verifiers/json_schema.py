"""`json`: 1.0 when the completion is a JSON object that satisfies the gold `schema`, else 0.0.

The completion must be the JSON object and nothing else, optionally inside one ```json fence: prose
around it scores 0 (the caller asked for JSON). Duplicate keys, NaN and Infinity are rejected.

The schema is a dict or a JSON string. This is a small own checker, not the `jsonschema` package (no
extra dependency, and a few microseconds per row); it understands the keywords that matter for
structured output: `type` (string, number, integer, boolean, array, object, null, or a list of them),
`required`, `properties`, `additionalProperties: false`, `items`, `enum`, `const`, `minLength`,
`maxLength`, `pattern`, `minimum`, `maximum`, `minItems`, `maxItems`. Other keywords are ignored.
Give string fields a `minLength` or `pattern`: `{"city": ""}` has the right type, and a policy will
find that out.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from rlft.verifiers.common import column, completion_text

MAX_CHARS = 100_000  # a structured answer longer than this is not one; also bounds parsing time
_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
_PY_TYPES = {"string": str, "boolean": bool, "array": list, "object": dict, "null": type(None)}
_TYPES = {"number", "integer", *_PY_TYPES}


def json_reward(completions: list, schema: list, **kwargs: Any) -> list[float | None]:
    """1.0 when the completion parses as a JSON object valid under the row's schema.

    >>> s = {"type": "object", "required": ["city", "pincode"],
    ...      "properties": {"city": {"type": "string"}, "pincode": {"type": "integer"}}}
    >>> json_reward(['{"city": "Pune", "pincode": 411001}', '{"city": "Pune"}', 'city: Pune'], schema=[s] * 3)
    [1.0, 0.0, 0.0]
    """
    schemas = column(schema, len(completions), "schema")
    out: list[float | None] = []
    for c, s in zip(completions, schemas):
        parsed = _schema(s)
        if parsed is None:
            out.append(None)
            continue
        value = parse_object(completion_text(c))
        out.append(float(value is not None and validate(value, parsed) is None))
    return out


def parse_object(text: str) -> dict | None:
    """The JSON object a completion consists of (bare or in one ```json fence), else None."""
    t = text.strip()
    if not t or len(t) > MAX_CHARS:
        return None
    if t.startswith("```"):
        m = _FENCE_RE.fullmatch(t)
        if m is None:
            return None
        t = m.group(1).strip()
    try:
        value = json.loads(t, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def validate(value: Any, schema: dict, path: str = "$") -> str | None:
    """None when `value` satisfies `schema`, else the first problem ("$.city: expected string")."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is_type(value, k) for k in kinds):
            return f"{path}: expected {' or '.join(kinds)}"
    if "const" in schema and not _same_json(value, schema["const"]):
        return f"{path}: expected {schema['const']!r}"
    if "enum" in schema and not any(_same_json(value, e) for e in schema["enum"]):
        return f"{path}: not one of {schema['enum']!r}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
            return f"{path}: length {len(value)} out of range"
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            return f"{path}: does not match {schema['pattern']!r}"
    low, high = schema.get("minimum", value), schema.get("maximum", value)
    if _is_type(value, "number") and not low <= value <= high:
        return f"{path}: {value} out of range"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            return f"{path}: {len(value)} items out of range"
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                if why := validate(item, schema["items"], f"{path}[{i}]"):
                    return why
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key in schema.get("required", []):
            if key not in value:
                return f"{path}: missing required field '{key}'"
        if schema.get("additionalProperties") is False and (extra := set(value) - set(props)):
            return f"{path}: unexpected field '{min(extra)}'"
        for key, sub in props.items():
            if key in value and isinstance(sub, dict) and (why := validate(value[key], sub, f"{path}.{key}")):
                return why
    return None


def check_gold(field: str, value: Any) -> str | None:
    """None when `value` is a usable schema, else why not."""
    schema = _schema(value)
    if schema is None:
        return "expected a JSON schema object (a dict or a JSON string)"
    if not schema.get("required") and not schema.get("properties"):
        return "schema checks nothing: give 'required' and 'properties' with types"
    if schema.get("type", "object") != "object":
        return "the top-level schema type must be 'object'"
    return _schema_problem(schema)


def _schema_problem(schema: dict, path: str = "$") -> str | None:
    kinds = schema.get("type")
    for k in [kinds] if isinstance(kinds, str) else (kinds or []):
        if k not in _TYPES:
            return f"schema {path}: unknown type {k!r} (use one of {', '.join(sorted(_TYPES))})"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return f"schema {path}: 'required' must be a list of field names"
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except (re.error, TypeError) as exc:
            return f"schema {path}: bad pattern: {exc}"
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return f"schema {path}: 'properties' must be an object"
    for key, sub in props.items():
        if not isinstance(sub, dict):
            return f"schema {path}.{key}: must be an object"
        if why := _schema_problem(sub, f"{path}.{key}"):
            return why
    if isinstance(schema.get("items"), dict):
        return _schema_problem(schema["items"], f"{path}[]")
    return None


def _schema(value: Any) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        return _schema_from_text(value)
    return None


@lru_cache(maxsize=1024)
def _schema_from_text(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":  # JSON Schema: 1.0 is an integer
        return (isinstance(value, int) and not isinstance(value, bool)) or \
            (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    py_type = _PY_TYPES.get(kind)
    return py_type is not None and isinstance(value, py_type)


def _same_json(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (_is_type(a, "number") and _is_type(b, "number") and a == b)


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
