"""Tools and environments for `rlft grpo --tools FILE.py` / `--env FILE.py:Class`: load, check, guard.

The package: this module (loading, checks, chat templates, one run's setup), `process` (rlft's side of the tool
worker: the child process the user's file is imported and run in, killed and replaced on a timeout; the stand-ins
TRL gets), `worker` (the child's side), `wire` (what crosses between them: JSON frames, type hints as data), and
`containment` (the argument checks, caps and counts, and the in-process guard the worker replaced, kept for
bench/bench_tool_boundary.py).

rlft plugs into TRL 1.16's own extension points (GRPOTrainer's `tools=` and `environment_factory=`, GRPOConfig's
`max_tool_calling_iterations`); it does not fork the tool loop (`GRPOTrainer._tool_call_loop`). What TRL does there:
it parses each completion with the tokenizer's response template, calls `tool(**arguments)`, catches an exception into
a `{"error": ...}` result, appends `{"role": "tool", "content": str(result)}` and masks the result's tokens out of
the loss (`tool_mask`), and logs `tools/call_frequency` (calls per episode) and `tools/failure_frequency`.
Where rlft departs, all inside the callables it hands to TRL:
  - the tools TRL calls are stand-ins (same name, docstring, signature and hints, so the same schema) that run the
    user's function in its worker process (rlft/tools/process.py), with a per-call timeout (grpo.tool_timeout) past
    which the worker's process group is killed; an environment's instances live in its worker too;
  - an output cap (grpo.tool_output_chars): TRL would tokenize a 10 MB result whole before dropping it as overlong;
  - results must be a string (numbers are turned into one): TRL passes a list through as multimodal content, which
    a text template cannot render (a crash of the run, not of the episode);
  - the model's arguments are bound to the signature and checked against the type hints first.
Each of these raises `ToolError` inside the call, so TRL's own handler turns it into the episode's tool result
(`{'error': 'timed out after 2s (its process was killed)'}`) and counts it in tools/failure_frequency; `ToolStats`
counts rlft's kinds for tools.json and the report. A failing reset / get_reward costs its episode (counted); a
batch whose every episode failed ends the run in one line (`process.watch_batches`).
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlft.errors import UserError
from rlft.tools.containment import (  # noqa: F401  (re-exported: rlft.tools is where callers look)
    RLFT_KEYS,
    EnvFailures,
    Limits,
    ToolError,
    ToolStats,
    _type_hints,
    contained,
    tool_methods,
)
from rlft.tools.containment import (
    guard as _guard_in_process,
)
from rlft.tools.containment import (
    guarded_env_class as _guarded_env_in_process,
)

# --------------------------------------------------------------------------- loading and checks


def load_tools(path: str, limits: Limits = Limits()) -> list:
    """The tools of a file (its `TOOLS` list when it has one, else every public function defined in it), as
    stand-ins calling the file's worker process (rlft/tools/process.py: the file is imported there, never in
    rlft's process), checked."""
    from rlft.tools.process import remote_tools

    fns = remote_tools(path, limits.timeout, limits.output_chars)
    if not fns:
        raise UserError(f"{path} defines no tool function", "define typed functions with docstrings (or TOOLS = [...])")
    for fn in fns:
        _check_remote(fn, f"{path}:{fn.__name__}")
    check_unique_names(fns, path)
    return fns


def _check_remote(fn, where: str, method: bool = False) -> None:
    from rlft.tools.process import hint_problem

    if fn._rlft_desc["async"]:
        raise UserError(f"tool {where} is async; rlft calls tools synchronously (in its tool process)",
                        "make it a plain def")
    problem = hint_problem(fn._rlft_desc, where)
    if problem is not None:
        raise problem
    check_tool(fn, where, method=method)


def load_env(spec: str, limits: Limits = Limits()) -> type:
    """`FILE.py:Class` -> a stand-in class whose instances live in the file's worker process, checked: a
    callable reset, no static/class-method tools (checked in the worker), documented tools."""
    from rlft.tools.process import remote_env

    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise UserError(f"--env '{spec}' is not FILE.py:Class", "name the class, e.g. --env envs/calc.py:Calculator")
    if not Path(path).is_file():
        raise UserError(f"env file '{path}' not found", "check the path (relative to the current folder)")
    cls = remote_env(spec, path, name, limits.timeout, limits.output_chars)
    if cls._rlft_desc["reward_async"]:
        raise UserError(f"{spec}.get_reward is async; rlft calls it synchronously", "make it a plain def")
    if not tool_methods(cls):
        raise UserError(f"{spec} has no tool methods", "add public methods with type hints and a docstring")
    for n, m in tool_methods(cls).items():
        _check_remote(m, f"{spec}.{n}", method=True)
    return cls


def guard(fn, limits: Limits, stats: ToolStats):
    """A tool as TRL calls it: a worker's stand-in through `process.guard_remote`, an in-process function
    through `containment.guard` (kept for the boundary benchmark)."""
    if getattr(fn, "_rlft_worker", None) is not None:
        from rlft.tools.process import guard_remote

        return guard_remote(fn, limits, stats)
    return _guard_in_process(fn, limits, stats)


def guarded_env_class(cls: type, limits: Limits, stats: ToolStats) -> type:
    """The environment class TRL builds instances from: the worker's stand-in (`process.guarded_remote_env`), or
    an in-process class (`containment.guarded_env_class`)."""
    if getattr(cls, "_rlft_worker", None) is not None:
        from rlft.tools.process import guarded_remote_env

        return guarded_remote_env(cls, limits, stats)
    return _guarded_env_in_process(cls, limits, stats)


def check_unique_names(fns: list, where: str) -> None:
    """Two tools of one name: the model could call only one of them (TRL maps names to functions)."""
    seen: dict[str, Any] = {}
    for fn in fns:
        name = getattr(fn, "__name__", str(fn))
        if name in seen:
            raise UserError(f"{where}: two tools are named '{name}', so the model could call only one of them",
                            "give each tool its own function name")
        seen[name] = fn


def check_tool(fn, where: str, method: bool = False) -> None:
    """What TRL needs to show a tool to the model: a docstring with every argument, JSON-typed hints
    (transformers.utils.get_json_schema builds the schema from them); refused with one line otherwise."""
    if not callable(fn):
        raise UserError(f"{where} is not a function", "list functions in TOOLS")
    if inspect.iscoroutinefunction(fn):
        raise UserError(f"tool {where} is async; rlft's guard (timeout, output cap) calls tools synchronously",
                        "make it a plain def")
    if not (fn.__doc__ or "").strip():
        raise UserError(f"tool {where} has no docstring", "describe the tool and each argument (Args: name: ...)")
    params = list(inspect.signature(fn).parameters.values())[1 if method else 0:]
    try:
        hints = _type_hints(fn)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"tool {where}: its type hints do not resolve ({exc})", "use int, float, str, bool") from None
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise UserError(f"tool {where} takes *{p.name}", "name every argument the model may pass")
        if p.kind == p.POSITIONAL_ONLY:  # TRL calls tool(**arguments): a positional-only one can never be passed
            raise UserError(f"tool {where}: argument '{p.name}' is positional-only, and tools are called with "
                            "keyword arguments", "drop the `/` from its signature")
        if p.name not in hints:
            raise UserError(f"tool {where}: argument '{p.name}' has no type hint",
                            f"annotate it, e.g. {p.name}: str")
    from transformers.utils import get_json_schema

    try:
        get_json_schema(fn)
    except Exception as exc:  # noqa: BLE001 - transformers' own message names the missing part
        raise UserError(f"tool {where}: {str(exc).splitlines()[0]}",
                        "document every argument in the docstring (Args:\\n    name: what it is)") from None


def dry_episode(cls: type, row: dict, where: str, timeout: float = 5.0) -> None:
    """Build the environment, reset it on a training row, read its reward, in its worker process: the user's
    code, run once before training so a broken environment is one line, not a traceback at step 1."""
    from rlft.tools.process import OBSERVATION_CHARS, _signature, value

    worker, desc = cls._rlft_worker, cls._rlft_desc
    row = {k: v for k, v in row.items() if not k.startswith(RLFT_KEYS)}
    try:
        _signature(desc["reset"], method=True).bind(None, **row)
    except TypeError as exc:
        raise UserError(f"{where}.reset cannot take the training rows' fields as keywords ({exc})",
                        "reset receives every field of a row as keywords: def reset(self, **kwargs)") from None
    env_id = worker.new_id()
    try:
        try:
            obs = value(worker.request({"op": "reset", "id": env_id, "kwargs": row}, timeout, OBSERVATION_CHARS),
                        OBSERVATION_CHARS, "reset")
        except ToolError as exc:
            hint = ("the constructor must take no arguments" if "constructor" in str(exc) else
                    "reset receives every field of a row as keywords; accept **kwargs for the rest")
            raise UserError(f"{where}.reset(**row) on the first training row: {exc}", hint) from None
        if obs is not None and not isinstance(obs, str):
            raise UserError(f"{where}.reset returned {type(obs).__name__}", "return None or a string (appended to "
                                                                            "the prompt)")
        if desc["has_reward"]:
            try:
                r = value(worker.request({"op": "reward", "id": env_id}, timeout), 2000, "get_reward")
            except ToolError as exc:
                raise UserError(f"{where}.get_reward() after reset: {exc}",
                                "get_reward must work on an episode without tool calls") from None
            if isinstance(r, bool) or not isinstance(r, (int, float)):
                raise UserError(f"{where}.get_reward returned {type(r).__name__}", "return a float")
            if not math.isfinite(r):
                raise UserError(f"{where}.get_reward returned {r} after reset", "return a finite float")
    finally:
        worker.drops.append(env_id)


# --------------------------------------------------------------------------- chat templates

# The tiny model's ChatML (rlft.models.CHATML_TEMPLATE) with tool calls: an assistant's tool calls rendered after its
# content as <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (Hermes / Qwen style, so TRL's Qwen3 response
# template parses them), tool results as a `tool` turn. The tool list itself is not rendered: a character-level model
# cannot read a schema, and SFT demonstrations (TRL's SFTTrainer does not pass a `tools` column to the template) and
# GRPO prompts (rendered with tools=) must render the same prompt. Without tool calls it renders exactly as before.
TOOL_CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}<tool_call>\n"
    "{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}\n</tool_call>"
    "{% endfor %}<|im_end|>{% endgeneration %}"
    "{% else %}{{ m['content'] }}<|im_end|>{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# transformers' response template for it (TRL's Qwen3 one without the <think> field), content kept unstripped: a turn
# the model ends with whitespace ("1450\n<|im_end|>") must render back to the ids it was trained on (measured on
# SmolLM2: stripped, 1 of 4 episodes differed from the rendering at the lost newline).
TOOL_CHATML_RESPONSE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True,
                       "content": "json", "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text", "content_args": {"strip": False}},
    },
}


# `model.chat_template: chatml-tools` (`rlft eval --chat-template chatml-tools`): the template above for a ChatML model
# whose own template cannot render tool calls (SmolLM2-135M-Instruct's renders only `content`). Opt-in: it replaces
# the model's template in the run and in what the run saves. The mark (a Jinja comment, rendering nothing) lets a
# saved variant with a default system turn be recognised by `tool_tokenizer` when it is loaded again.
CHATML_TOOLS = "chatml-tools"
_CHATML_TOOLS_MARK = "{#- rlft chatml-tools: rlft/tools.py -#}"
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
_PROBE = "rlft-probe-5e1c"
USE_CHATML_TOOLS = f"--set model.chat_template={CHATML_TOOLS}"


def chatml_tools_template(tok, model_name: str) -> str:
    """TOOL_CHATML_TEMPLATE for a ChatML tokenizer, behind the system turn the model's own template adds to a chat
    that has none (SmolLM2's "You are a helpful AI assistant named SmolLM, ..."), so chats without tool calls render
    as the model's template renders them. Refused with one line when the tokenizer has no <|im_start|> / <|im_end|>
    tokens, or when its eos is not <|im_end|> (TRL's tool loop ends a turn at the eos: the newline after it would
    be lost from every episode's ids)."""
    vocab = tok.get_vocab()
    missing = [t for t in CHATML_TOKENS if t not in vocab]
    if missing:
        raise UserError(f"model.chat_template={CHATML_TOOLS} needs a ChatML tokenizer, and {model_name}'s has no "
                        f"{' or '.join(missing)} token", "drop the setting and use a model whose template supports "
                                                         "tools (Qwen2.5, Qwen3, Llama 3.1)")
    if tok.eos_token != "<|im_end|>":
        raise UserError(f"model.chat_template={CHATML_TOOLS} needs <|im_end|> as the tokenizer's eos (TRL's tool "
                        f"loop ends a turn at the eos); {model_name}'s eos is {tok.eos_token}",
                        'set "eos_token": "<|im_end|>" in the model folder\'s tokenizer_config.json')
    system = _default_system(tok)
    if system is None:
        return TOOL_CHATML_TEMPLATE
    return (_CHATML_TOOLS_MARK + "{% if messages and messages[0]['role'] != 'system' %}<|im_start|>system\n"
            "{{ " + json.dumps(system) + " }}<|im_end|>\n{% endif %}" + TOOL_CHATML_TEMPLATE)


def _default_system(tok) -> str | None:
    """The system message the tokenizer's own ChatML template adds to a chat without one, else None."""
    head, tail = "<|im_start|>system\n", f"<|im_end|>\n<|im_start|>user\n{_PROBE}<|im_end|>"
    if not tok.chat_template:
        return None
    try:
        text = tok.apply_chat_template([{"role": "user", "content": _PROBE}], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render a plain chat adds no system turn we can keep
        return None
    if not text.startswith(head) or tail not in text:
        return None
    return text[len(head):text.index(tail)]


def use_chat_template(tok, name: str | None, model_name: str):
    """model.chat_template: None keeps the tokenizer's own template; `chatml-tools` gives it rlft's tool-capable
    ChatML (`chatml_tools_template`, refused with one line for a tokenizer that is not ChatML) and the response
    template TRL parses tool calls with. Both are saved with the run's tokenizer."""
    if name is None:
        return tok
    if name != CHATML_TOOLS:  # config validation and the eval option allow only this name
        raise UserError(f"unknown chat template '{name}'", f"use {CHATML_TOOLS}")
    tok.chat_template = chatml_tools_template(tok, model_name)
    tok.response_template = TOOL_CHATML_RESPONSE
    return tok


def tool_tokenizer(tok, model_name: str, switch: str = USE_CHATML_TOOLS):
    """The tokenizer ready for TRL's tool loop: the tiny model gets TOOL_CHATML_TEMPLATE and its response
    template (as does a tokenizer already given rlft's tool ChatML, `use_chat_template`); any other template must
    render a tool conversation (TRL's supports_tool_calling) and be one TRL knows how to parse, else the run is
    refused with one line (TRL would raise at trainer construction). For a ChatML template the fix names `switch`,
    the option that gives it rlft's tool ChatML."""
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    from rlft.models import CHATML_TEMPLATE

    if tok.chat_template in (CHATML_TEMPLATE, TOOL_CHATML_TEMPLATE):
        tok.chat_template = TOOL_CHATML_TEMPLATE
    if tok.chat_template == TOOL_CHATML_TEMPLATE or str(tok.chat_template).startswith(_CHATML_TOOLS_MARK):
        tok.response_template = TOOL_CHATML_RESPONSE
    if not supports_tool_calling(tok):
        chatml = all(t in tok.get_vocab() for t in CHATML_TOKENS)
        raise UserError(f"the chat template of {model_name} cannot render tool calls (assistant tool_calls -> "
                        "tool turn)", f"it is ChatML: add {switch} to use rlft's tool-capable ChatML (opt-in: "
                                      "it replaces the model's template), or use a model whose template supports "
                                      "tools (Qwen2.5, Qwen3, Llama 3.1)" if chatml else
                        "use a model whose template supports tools (Qwen2.5, Qwen3, Llama 3.1, the tiny model)")
    if getattr(tok, "response_template", None) is None and getattr(tok, "response_schema", None) is None:
        try:
            add_response_schema(tok)
        except ValueError:
            raise UserError(f"TRL cannot parse tool calls from {model_name}'s chat template (no response "
                            "template)", "set tokenizer.response_template in the model folder, or use a model "
                                         "family TRL knows (Qwen, Llama 3.1, Gemma 4, GPT-OSS)") from None
    return tok


# --------------------------------------------------------------------------- one run's tools


@dataclass
class ToolSetup:
    """What a GRPO run with --tools / --env hands to the trainer, and the counts it keeps."""

    tools: list = field(default_factory=list)
    env_class: type | None = None
    stats: ToolStats = field(default_factory=ToolStats)
    max_tool_calls: int = 4

    def episode_tools(self, row: dict) -> tuple[list, str | None, Any]:
        """The tools of one held-out episode, reset()'s observation and the environment (None without one): the
        standalone tools, plus the methods of a fresh environment reset on the row."""
        if self.env_class is None:
            return list(self.tools), None, None
        env = self.env_class()
        observation = env.reset(**row)
        return list(self.tools) + [getattr(env, n) for n in tool_methods(self.env_class)], observation, env

    @property
    def env_reward(self) -> bool:
        """The environment owns a reward (get_reward), which TRL adds to the verifiers' with weight 1."""
        return self.env_class is not None and callable(getattr(self.env_class, "get_reward", None))

    def trainer_kwargs(self) -> dict[str, Any]:
        """GRPOTrainer's `tools=` / `environment_factory=`, both guarded."""
        out: dict[str, Any] = {}
        if self.tools:
            out["tools"] = self.tools
        if self.env_class is not None:
            out["environment_factory"] = self.env_class
        return out


def setup_tools(cfg, section: str, rows: list[dict], model_name: str) -> ToolSetup | None:
    """--tools / --env checked before the model loads (None without them): RLOO refused, prompts that are
    messages (TRL renders the tools only into a conversation), tools and environment checked, a dry episode."""
    sec = cfg.values[section]
    tools_file, env_spec = sec.get("tools"), sec.get("env")
    if not tools_file and not env_spec:
        return None
    if section != "grpo":
        raise UserError(f"rlft {section} cannot use --tools/--env: TRL 1.16's {section.upper()}Trainer has no "
                        "tool-calling loop", "use rlft grpo --tools FILE.py or --env FILE.py:Class")
    plain = next((i for i, r in enumerate(rows) if not isinstance(r.get("prompt"), list)), None)
    if plain is not None:
        raise UserError(f"training row {plain + 1}: the prompt is a plain string; tools are rendered only into a "
                        "conversation", "give prompts as messages, or add --set data.as_chat=true")
    limits = Limits(timeout=float(sec["tool_timeout"]), output_chars=int(sec["tool_output_chars"]))
    return make_setup(tools_file, env_spec, rows, limits, int(sec["max_tool_calls"]))


def make_setup(tools_file: str | None, env_spec: str | None, rows: list[dict], limits: Limits = Limits(),
               max_tool_calls: int = 4) -> ToolSetup:
    """The guarded tools of --tools FILE.py and/or --env FILE.py:Class, checked, the environment run once on
    the first row (`dry_episode`): what `rlft grpo` trains with and `rlft eval` scores with."""
    setup = ToolSetup(max_tool_calls=max_tool_calls)
    if tools_file:
        setup.tools = [guard(fn, limits, setup.stats) for fn in load_tools(tools_file, limits)]
    if env_spec:
        cls = load_env(env_spec, limits)
        if rows:
            dry_episode(cls, rows[0], env_spec, limits.timeout)
        check_unique_names([*load_tools_names(setup.tools), *tool_methods(cls).values()], f"{tools_file} and "
                           f"{env_spec}" if tools_file else env_spec)
        setup.env_class = guarded_env_class(cls, limits, setup.stats)
    return setup


def load_tools_names(tools: list) -> list:
    """The guarded tools as their functions (for name checks)."""
    return [getattr(t, "__wrapped__", t) for t in tools]


def counts_callback(stats: ToolStats):
    """A TrainerCallback that adds rlft's counts since the last log (tools/calls, tools/errors) to each log,
    beside TRL's tools/call_frequency and tools/failure_frequency; added before rlft's RunCallback, which
    writes the log to metrics.jsonl."""
    from transformers import TrainerCallback

    class ToolCounts(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None and "loss" in logs:
                logs.update(stats.since_last())

    return ToolCounts()
