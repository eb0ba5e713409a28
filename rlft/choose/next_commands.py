"""The exact next commands `rlft choose` prints for a recommendation: recipes, flags, derived files.

Strings only: nothing here reads data or runs anything. `s` is a rlft.choose.rules.Signal and `r` a
rlft.choose.rules.Recommendation, typed Any: rules.py imports this module, and a type-only import back would
still be a cycle for a reader (tests/test_structure.py counts it as one).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

RECIPES_TINY = {"sft": "sft_tiny.yaml", "dpo": "dpo_tiny.yaml", "grpo": "grpo_math_tiny.yaml",
                "reward": "reward_tiny.yaml", "ppo": "ppo_tiny.yaml", "kto": "kto_tiny.yaml",
                "rloo": "rloo_math_tiny.yaml", "distill": "distill_tiny.yaml", "bootstrap": "bootstrap_tiny.yaml"}
RECIPES_REAL = {"sft": "sft_qwen0.5b_lora.yaml", "dpo": "dpo_qwen0.5b_lora.yaml",
                "grpo": "grpo_qwen0.5b_lora.yaml", "reward": "reward_qwen0.5b_lora.yaml",
                "ppo": "ppo_qwen0.5b_lora.yaml"}
# SmolLM2-135M-Instruct (`--model smollm2`): one LoRA recipe per method, chat prompts through data.as_chat.
RECIPES_SMOLLM2 = {m: f"{m}_smollm2.yaml" for m in ("sft", "dpo", "reward", "grpo", "ppo", "kto", "rloo", "distill",
                                                    "bootstrap")}
SFT_OUT, REWARD_OUT = "runs/sft", "runs/reward"


# --------------------------------------------------------------------------- next commands

def _q(x: str) -> str:
    return shlex.quote(str(x))


def recipe_for(method: str, model: str | None) -> str | None:
    """The shipped recipe for `method` at this model's size (None: no recipe for a real model yet)."""
    table = RECIPES_TINY if model in (None, "tiny") else RECIPES_SMOLLM2 if model == "smollm2" else RECIPES_REAL
    return f"recipes/{table[method]}" if method in table else None


def _recipe_flag(method: str, model: str | None) -> str:
    recipe = recipe_for(method, model)
    return f" --recipe {recipe}" if recipe else ""


def _model_flag(model: str | None) -> str:
    return f" --model {_q(model)}" if model else ""


def _files(flag: str, paths: list[str], placeholder: str) -> str:
    return " ".join(f"{flag} {_q(p)}" for p in (paths or [placeholder]))


def _derived(path: str, tag: str) -> str:
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{tag}.jsonl"))


def _ratings_filter(s: Any) -> tuple[str, str]:
    src = s.paths[0]
    out = _derived(src, "top")
    code = (f"import json,sys; [sys.stdout.write(l) for l in open(sys.argv[1]) if l.strip() and "
            f"float(json.loads(l)[{json.dumps(s.rating_field)}]) >= {s.ratings['top_threshold']:g}]")
    return f"python -c {_q(code)} {_q(src)} > {_q(out)}", out


def _can_pair(s: Any) -> bool:
    """Ratings in one .jsonl file with prompt + a completion column: a one-liner can pair them."""
    return (s.kind == "ratings" and len(s.paths) == 1 and s.suffix == ".jsonl" and bool(s.rating_field)
            and bool(s.sft_field) and all("prompt" in r.data for r in s.data_rows[:50]))


def _ratings_pairs(s: Any) -> tuple[str, str]:
    src = s.paths[0]
    out = _derived(src, "pairs")
    f, c = json.dumps(s.rating_field), json.dumps(s.sft_field)
    code = ("import json,sys,collections; g=collections.defaultdict(list); "
            "[g[json.dumps(r[\"prompt\"])].append(r) for r in map(json.loads, filter(str.strip, open(sys.argv[1])))]; "
            f"key=lambda r: float(r[{f}]); "
            f"[print(json.dumps({{\"prompt\": json.loads(p), \"chosen\": max(v, key=key)[{c}], "
            f"\"rejected\": min(v, key=key)[{c}]}})) for p, v in g.items() if len(set(map(key, v))) > 1]")
    return f"python -c {_q(code)} {_q(src)} > {_q(out)}", out


def _rename_completion(column: str) -> str:
    """`--set` that makes SFT read `column` as the completion (data.fields maps canonical -> column)."""
    return " --set " + _q(f"data.fields={{completion: {column}}}")


def _sft_command(s: Any, r: Any, model: str | None) -> list[str]:
    pre: list[str] = []
    extra = ""
    if "demonstrations" in s.other:
        paths = s.other["demonstrations"]
    elif s.kind == "demonstrations":
        paths = s.paths
    elif s.kind == "ratings" and s.paths and s.ratings.get("top_threshold") is not None and s.rating_field \
            and s.suffix == ".jsonl":
        cmd, out = _ratings_filter(s)
        pre, paths = [cmd], [out]
        if s.sft_field and s.sft_field != "completion":
            extra = _rename_completion(s.sft_field)
    elif s.kind in ("pairs", "taste") and s.paths:
        paths, extra = s.paths, _rename_completion("chosen")
    elif s.kind == "verifier" and s.paths and s.sft_field:
        paths, extra = s.paths, _rename_completion(s.sft_field)
    else:
        paths = []
    out = f" -o {SFT_OUT}" if r.then else ""
    cmd = (f"rlft sft {_files('--data', paths, 'DEMOS.jsonl')}{extra} --recipe {recipe_for('sft', model)}"
           f"{_model_flag(model)}{out}")
    return [*pre, cmd]


def _method_commands(method: str, s: Any, model: str | None) -> list[str]:
    """Commands for `method`; `model` is its start model (runs/sft after an SFT step), recipes follow s.model."""
    recipe = recipe_for(method, s.model)
    m = _model_flag(model)
    if method == "dpo":
        pre = []
        paths = s.paths if s.kind in ("pairs", "taste") else []
        if _can_pair(s):
            cmd, out = _ratings_pairs(s)
            pre, paths = [cmd], [out]
        return pre + [f"rlft dpo {_files('--pairs', paths, 'PAIRS.jsonl')} --recipe {recipe}{m}"]
    if method == "grpo" and s.kind == "environment":  # rlft/tools.py: TRL's environment_factory
        return [(f"rlft grpo --prompts PROMPTS.jsonl --env ENV.py:Class --verifier {_q(s.verifier or 'VERIFIER')} "
                 f"--eval-data HELDOUT.jsonl{m}")]
    if method == "grpo":
        paths = s.paths if s.kind == "verifier" else []
        return [(f"rlft grpo {_files('--prompts', paths, 'PROMPTS.jsonl')} "
                 f"--verifier {_q(s.verifier or 'VERIFIER')} --recipe {recipe}{m}")]
    if method == "ppo":
        pre = []
        paths = s.paths if s.kind in ("pairs", "taste") else []
        if _can_pair(s):
            cmd, out = _ratings_pairs(s)
            pre, paths = [cmd], [out]
        prompts = paths or ["PROMPTS.jsonl"]
        reward = (f"rlft reward {_files('--pairs', paths, 'PAIRS.jsonl')} "
                  f"--recipe {recipe_for('reward', s.model)}{m} -o {REWARD_OUT}")
        ppo = (f"rlft ppo {_files('--prompts', prompts, 'PROMPTS.jsonl')} --reward-model {REWARD_OUT} "
               f"--recipe {recipe}{m}")
        return [*pre, reward, ppo]
    flag = _recipe_flag(method, s.model)
    if method == "bootstrap":
        paths = s.paths if s.kind == "verifier" else []
        return [(f"rlft bootstrap {_files('--prompts', paths, 'PROMPTS.jsonl')} "
                 f"--verifier {_q(s.verifier or 'VERIFIER')}{flag}{m}")]
    if method == "kto":
        paths = s.paths if s.kind == "thumbs" else []
        return [f"rlft kto {_files('--feedback', paths, 'FEEDBACK.jsonl')}{flag}{m}"]
    if method == "rloo":
        paths = s.paths if s.kind == "verifier" else []
        return [(f"rlft rloo {_files('--prompts', paths, 'PROMPTS.jsonl')} "
                 f"--verifier {_q(s.verifier or 'VERIFIER')}{flag}{m}")]
    if method == "distill":
        paths = s.paths if s.kind == "teacher" else []
        return [f"rlft distill --teacher TEACHER {_files('--prompts', paths, 'PROMPTS.jsonl')}{flag}{m}"]
    raise ValueError(method)


def build_commands(s: Any, r: Any) -> tuple[list[str], str]:
    """The exact commands to run, in order, and the recipe of the first training command."""
    if r.method == "sft":
        cmds = _sft_command(s, r, s.model)
        if r.then:
            cmds += _method_commands(r.then, s, SFT_OUT)
        return cmds, recipe_for("sft", s.model)
    cmds = _method_commands(r.method, s, s.model)
    return cmds, recipe_for("reward" if r.method == "ppo" else r.method, s.model)
