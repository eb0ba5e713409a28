"""One config schema for every method: `model`, `data`, `train` and one section per method.

Values come from four layers, lowest to highest: schema defaults, a YAML recipe (`--recipe`), CLI flags,
and `--set section.key=value`. `resolve()` merges them, remembers where each value came from, and
validates the result before any model loads, reporting every problem at once with its key, value and
origin (recipe file and line, flag, or --set).

Field names follow transformers/TRL: the `train` section takes any `TrainingArguments` field and a method
section any field of that method's TRL config (`sft` -> SFTConfig, `dpo` -> DPOConfig, ...), so whatever
TRL documents can be set here. The rlft schema (rlft/schema.py) lists the fields rlft itself reads or defaults
differently; the rest is checked against TRL's dataclass fields (imported lazily: `rlft --help` never pays
for it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlft.cross_checks import cross_checks, did_you_mean
from rlft.errors import UserError
from rlft.schema import COMMON_SECTIONS, LORA, METHODS, SCHEMA, TRL_CONFIGS, Field  # noqa: F401  (re-exported)


class Section(dict):
    """A dict with attribute access, so `cfg.model.lora.r` reads naturally."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc


@dataclass
class RunConfig:
    """The resolved, validated config of one run."""

    method: str
    values: Section
    origins: dict[str, str] = field(default_factory=dict)

    def __getattr__(self, key: str) -> Any:
        if key in ("method", "values", "origins"):
            raise AttributeError(key)
        try:
            return self.values[key]
        except KeyError as exc:
            raise AttributeError(key) from exc

    def to_dict(self) -> dict:
        return {"method": self.method, **json.loads(json.dumps(self.values))}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------- layers


@dataclass
class Layer:
    """A flat {dotted.key: value} layer and where each value came from."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)

    def put(self, key: str, value: Any, origin: str) -> None:
        self.values[key] = value
        self.origins[key] = origin


def defaults_layer(method: str) -> Layer:
    layer = Layer()
    for section in (*COMMON_SECTIONS, method):
        _flatten_defaults(SCHEMA[section], section, layer)
    return layer


def _flatten_defaults(schema: dict, prefix: str, layer: Layer) -> None:
    for key, spec in schema.items():
        if isinstance(spec, dict):
            _flatten_defaults(spec, f"{prefix}.{key}", layer)
        else:
            layer.put(f"{prefix}.{key}", _copy(spec.default), "default")


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value)) if isinstance(value, (list, dict)) else value


class _LineLoader(yaml.SafeLoader):
    """A YAML loader that records the line of every mapping key (as `__lines__`)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    mapping = {}
    lines = {}
    loader.flatten_mapping(node)  # merge keys (`<<: *defaults`) become the keys they name
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in lines:  # PyYAML keeps the last of two equal keys silently
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key '{key}' (also on line {lines[key]})",
                                                    key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=True)
        lines[key] = key_node.start_mark.line + 1
    mapping["__lines__"] = lines
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def recipe_layer(path: str | Path) -> tuple[Layer, str | None]:
    """Read a YAML recipe into a layer; returns (layer, the recipe's `method:` if it names one)."""
    p = Path(path).expanduser()
    if not p.is_file():
        from rlft.data.bounded import kind_of

        what = ("is a folder, not a YAML file" if p.is_dir() else f"is {kind_of(p)}, not a YAML file"
                if kind_of(p) else "does not exist")
        raise UserError(f"recipe '{path}' {what}", "check the path; shipped recipes are in recipes/")
    try:
        from rlft.data.bounded import check_text_file, load_yaml

        check_text_file(p, str(path), "recipe")
        doc = load_yaml(p.read_text(encoding="utf-8"), _LineLoader, str(path))
    except OSError as exc:
        raise UserError(f"recipe '{path}' cannot be read ({exc.strerror or exc})",
                        "check its permissions (chmod +r)") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})", "save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise UserError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}",
                        "fix the YAML syntax (indentation, colons, quotes)") from exc
    if doc is None:
        doc = {"__lines__": {}}
    if not isinstance(doc, dict):
        raise UserError(f"{path}: a recipe must be a mapping of sections (model:, data:, train:, ...)",
                        "see recipes/ for examples")
    layer = Layer()
    method = doc.get("method")
    _flatten_doc(doc, "", layer, str(path))
    layer.values.pop("method", None)
    layer.origins.pop("method", None)
    return layer, method


def _flatten_doc(doc: dict, prefix: str, layer: Layer, path: str) -> None:
    lines = doc.get("__lines__", {})
    for key, value in doc.items():
        if key == "__lines__":
            continue
        dotted = f"{prefix}{key}"
        origin = f"{path}:{lines.get(key, '?')}"
        # Descend into sections and into schema sub-sections (model.lora); other dicts are values.
        if isinstance(value, dict) and (prefix == "" or _is_subsection(dotted)):
            _flatten_doc(value, dotted + ".", layer, path)
        else:
            layer.put(dotted, _strip_lines(value), origin)


def _strip_lines(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_lines(v) for k, v in value.items() if k != "__lines__"}
    if isinstance(value, list):
        return [_strip_lines(v) for v in value]
    return value


def _is_subsection(dotted: str) -> bool:
    node: Any = SCHEMA
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return isinstance(node, dict)


def set_layer(assignments: list[str]) -> Layer:
    """Parse `--set section.key=value` items; values are read as YAML (`0.1`, `true`, `[a, b]`)."""
    layer = Layer()
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            raise UserError(f"--set '{item}' is not section.key=value", "write it like --set dpo.beta=0.2")
        from rlft.data.bounded import load_yaml

        try:
            value = load_yaml(raw, yaml.SafeLoader, f"--set {key.strip()}") if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        layer.put(key.strip(), value, f"--set {item}")
    return layer


# --------------------------------------------------------------------------- resolve + validate


def resolve(method: str, recipe: str | Path | None = None, flags: dict[str, Any] | None = None,
            sets: list[str] | None = None, check_trl: bool = True) -> RunConfig:
    """Merge defaults < recipe < flags < --set for `method` and validate; raise one UserError listing all."""
    if method not in METHODS:
        raise UserError(f"unknown method '{method}'", f"use one of {', '.join(METHODS)}")
    layers = [defaults_layer(method)]
    problems: list[str] = []
    if recipe:
        layer, recipe_method = recipe_layer(recipe)
        if recipe_method and recipe_method != method:
            problems.append(f"{recipe}: recipe is for `rlft {recipe_method}`, not `rlft {method}`")
        layers.append(layer)
    flag_layer = Layer()
    for key, (value, origin) in (flags or {}).items():
        if value is not None:
            flag_layer.put(key, value, origin)
    layers.append(flag_layer)
    layers.append(set_layer(sets or []))

    merged = Layer()
    for layer in layers:
        for key, value in layer.values.items():
            parent, _, leaf = key.rpartition(".")
            spec = _schema_field(parent) if parent else None
            if spec is not None and spec.kind == "dict" and isinstance(merged.values.get(parent), dict):
                # data.fields.prompt=question: one entry of a mapping-valued field
                merged.put(parent, {**merged.values[parent], leaf: value}, layer.origins[key])
            else:
                merged.put(key, value, layer.origins[key])
    problems += validate(method, merged, check_trl=check_trl)
    if problems:
        head = problems[0] if len(problems) == 1 else f"{len(problems)} config problems:\n  " + "\n  ".join(problems)
        raise UserError(head, "fix the values above (rlft <method> --print-config shows the resolved config)")
    if not merged.values.get("train.output_dir"):  # the schema's documented default: runs/<method>-<time>
        from rlft.run.folder import default_output_dir

        merged.put("train.output_dir", default_output_dir(method), "default")
    return RunConfig(method, _nest(merged.values), merged.origins)


def validate(method: str, merged: Layer, check_trl: bool = True) -> list[str]:
    """Check every key and value; return a list of problems (empty when all is well)."""
    problems = []
    sections = (*COMMON_SECTIONS, method)
    trl_fields = _trl_fields(method) if check_trl else {}
    for key in list(merged.values):
        value, origin = merged.values[key], merged.origins[key]
        section, _, rest = key.partition(".")
        where = f"{origin}: {key}" if origin != "default" else key
        if section not in sections:
            if section in SCHEMA:
                problems.append(f"{where}: section '{section}' does not apply to `rlft {method}`")
            else:
                problems.append(f"{where}: unknown section '{section}'{did_you_mean(section, sections)}")
            continue
        if not rest:
            problems.append(f"{where}: expected a mapping of {section} settings, got {value!r}")
            continue
        spec = _schema_field(key)
        if spec is None:
            if "." not in rest and rest in trl_fields.get(section, {}):
                value, problem = _check_passthrough(value, trl_fields[section][rest])
                merged.values[key] = value
            elif check_trl or "." in rest:
                known = sorted(set(_schema_keys(section)) | set(trl_fields.get(section, {})))
                problem = f"unknown key{did_you_mean(rest, known)}"
            else:
                problem = None
        else:
            value, problem = _check(value, spec)
            merged.values[key] = value
        if problem:
            problems.append(f"{where} = {value!r}: {problem}")
    if not problems:
        for key, message in cross_checks(method, merged.values):
            origin = merged.origins.get(key)
            problems.append(f"{origin}: {message}" if origin and origin != "default" else message)
    return problems


def _schema_field(dotted: str) -> Field | None:
    node: Any = SCHEMA
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, Field) else None


def _schema_keys(section: str) -> list[str]:
    out = []
    for key, spec in SCHEMA[section].items():
        out += [f"{key}.{sub}" for sub in spec] if isinstance(spec, dict) else [key]
    return out


def _check(value: Any, spec: Field) -> tuple[Any, str | None]:
    """Coerce and check one value against its field; returns (value, problem or None)."""
    if value is None:
        return value, None if spec.nullable else "must be set"
    kind = spec.kind
    if kind == "bool":
        if not isinstance(value, bool):
            return value, "expected true or false"
    elif kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    return value, f"expected {'an integer' if kind == 'int' else 'a number'}"
            else:
                return value, f"expected {'an integer' if kind == 'int' else 'a number'}"
        if not math.isfinite(value):  # .nan, .inf, "nan": YAML and float() read them as numbers
            return value, f"expected a finite {'integer' if kind == 'int' else 'number'}"
        if kind == "int":
            if float(value) != int(value):
                return value, "expected an integer"
            value = int(value)
        if spec.minimum is not None and value < spec.minimum:
            return value, f"must be >= {spec.minimum}"
        if spec.above is not None and value <= spec.above:
            return value, f"must be > {spec.above}"
        if spec.maximum is not None and value > spec.maximum:
            return value, f"must be <= {spec.maximum}"
    elif kind == "str":
        if not isinstance(value, str):
            return value, "expected a string"
        if spec.choices and value not in spec.choices:
            return value, f"expected one of {', '.join(spec.choices)}{did_you_mean(value, spec.choices)}"
    elif kind == "list":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return value, "expected a list of strings"
    elif kind == "floats":
        if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  and math.isfinite(v) for v in value):
            return value, "expected a list of numbers, e.g. [1, 3]"
        value = [float(v) for v in value]
    elif kind == "str_or_list":
        if not isinstance(value, (str, list)):
            return value, "expected a string or a list of strings"
    elif kind == "dict":
        if not isinstance(value, dict):
            return value, "expected a mapping"
    return value, None


def _check_passthrough(value: Any, default: Any) -> tuple[Any, str | None]:
    """A TRL field rlft does not model: type-check it against the TRL default's type; (value, problem)."""
    if value is None or default is None:
        return value, None
    if isinstance(default, bool):
        return value, None if isinstance(value, bool) else "expected true or false"
    if isinstance(default, (int, float)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            return value, "expected a finite number"
        return value, None if ok else "expected a number"
    if isinstance(default, str) and isinstance(value, bool):
        # YAML reads an unquoted `no` (or `off`) as false; TRL's string settings spell it "no" (save_strategy,
        # eval_strategy, logging_strategy, hub_strategy)
        return ("no", None) if value is False else (value, "expected a string: quote it ('yes')")
    return value, None


_TRL_FIELD_CACHE: dict[str, dict[str, dict[str, Any]]] = {}


def _trl_fields(method: str) -> dict[str, dict[str, Any]]:
    """{section: {field: default}} for the TRL/transformers dataclasses behind the sections."""
    if method in _TRL_FIELD_CACHE:
        return _TRL_FIELD_CACHE[method]
    import dataclasses
    import importlib

    from rlft.quiet import quiet_libraries

    quiet_libraries()
    out: dict[str, dict[str, Any]] = {}
    module, name = TRL_CONFIGS["train"]
    train_fields = {f.name: _default(f) for f in dataclasses.fields(getattr(importlib.import_module(module), name))}
    out["train"] = train_fields
    if method in TRL_CONFIGS:
        module, name = TRL_CONFIGS[method]
        cls = getattr(importlib.import_module(module), name)
        out[method] = {f.name: _default(f) for f in dataclasses.fields(cls) if f.name not in train_fields}
    _TRL_FIELD_CACHE[method] = out
    return out


def _default(f) -> Any:
    import dataclasses

    if f.default is not dataclasses.MISSING:
        return f.default
    return None


def _nest(flat: dict[str, Any]) -> Section:
    root = Section()
    for key, value in flat.items():
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, Section())
        node[parts[-1]] = value
    return root


def trl_kwargs(cfg: RunConfig, section: str) -> dict[str, Any]:
    """The `train` section plus the method section, flattened into TRL config kwargs (None = TRL default)."""
    out = {}
    for name in ("train", section):
        own = SCHEMA.get(name, {})
        out.update({k: v for k, v in cfg.values.get(name, {}).items()
                    if v is not None and not (isinstance(own.get(k), Field) and own[k].rlft_only)})
    return out
