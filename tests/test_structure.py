"""The shape of the package: no import cycles, modules that fit in a head, layers that only point down.

Imports are read from the source (ast), lazy ones inside functions included: a cycle that only closes at
run time is still a cycle a reader has to hold in mind.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers import FIXTURES

ROOT = Path(__file__).resolve().parents[1] / "rlft"
MAX_LINES = 500
# one method in several modules
METHOD_PARTS = {"ppo_setup": "ppo", "ppo_rollout": "ppo", "ppo_math": "ppo", "bootstrap_sampling": "bootstrap"}
SHARED_METHOD_MODULES = {"rlft.methods", "rlft.methods.common", "rlft.methods.callback", "rlft.methods.keep",
                         "rlft.methods.group_rl",
                         "rlft.methods.prompt_sampler", "rlft.methods.prompt_band", "rlft.methods.zero_advantage"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        name = ".".join(f.relative_to(root.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """rlft modules that `name` imports anywhere in its source (`from a import b` counts a.b when b is one)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            cands = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found.update(c for c in cands if c in known and c != name and not name.startswith(c + "."))
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_cycle_finder_finds_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.c import g\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from . import a\n")
    assert cycles(graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_every_module_fits_in_a_head():
    big = {str(p.relative_to(ROOT.parent)): n for p in ROOT.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them): {big}"


def _method(name: str) -> str | None:
    if not name.startswith("rlft.methods.") or name in SHARED_METHOD_MODULES:
        return None
    leaf = name.rsplit(".", 1)[-1]
    return METHOD_PARTS.get(leaf, leaf)


def test_layers_point_down():
    """Only commands import methods; no method imports another; nothing but cli.py imports a command
    module other than the shared options, and no command imports cli.py."""
    g = graph()
    wrong = []
    for name, deps in g.items():
        for dep in deps:
            # rlft.dspy drives a method (finetune is an SFT run) the way a command does: the other entry point
            if _method(dep) and not name.startswith(("rlft.commands.", "rlft.dspy.")) and _method(name) != _method(dep):
                wrong.append(f"{name} imports the method {dep}")
            if dep.startswith("rlft.commands.") and dep != "rlft.commands.options" and name != "rlft.cli":
                wrong.append(f"{name} imports the command {dep}")
            if dep == "rlft.cli" and name.startswith("rlft.commands"):
                wrong.append(f"{name} imports rlft.cli")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("command", sorted(p.stem for p in (ROOT / "commands").glob("*.py")
                                           if p.stem not in ("__init__", "options")))
def test_every_command_module_is_registered(command):
    """A command module that cli.py forgets is a command nobody can run."""
    import typer

    from rlft.cli import app

    names = set(typer.main.get_command(app).commands)
    assert command.replace("_", "-") in names or command in names, f"rlft/commands/{command}.py is not registered"


# --------------------------------------------------------------------------- the command table

TRAINING_COMMANDS = ("sft", "dpo", "kto", "reward", "grpo", "rloo", "ppo", "distill", "bootstrap")
MAX_TRAINING_COMMAND_LINES = 50  # a signature of options and one `o.train(ctx, METHOD)` call


def _commands() -> dict:
    """{'dpo': click command, ..., 'data lint': ...}: every command of `rlft`, subcommands by their full name."""
    import typer

    from rlft.cli import app

    out = {}

    def walk(cmd, prefix):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            out[prefix] = cmd
    walk(typer.main.get_command(app), "")
    return out


def _options(cmd) -> dict:
    out = {}
    for p in cmd.params:
        default = p.default if isinstance(p.default, (int, float, str, bool, type(None))) else repr(p.default)
        out[p.name] = {"opts": sorted([*p.opts, *(getattr(p, "secondary_opts", None) or [])]), "default": default,
                       "multiple": bool(getattr(p, "multiple", False)), "kind": type(p).__name__}
    return out


def test_every_command_keeps_the_options_it_had():
    """tests/fixtures/command_options.json was recorded from main before the commands were reshaped (one
    table, one call): every command still takes the same flags, with the same defaults."""
    import json

    recorded = json.loads((FIXTURES / "command_options.json").read_text())
    now = {name: _options(cmd) for name, cmd in _commands().items()}
    # options added since (verify --explain, grpo --tools, ...) are new features; none may go or change
    kept = {name: {k: v for k, v in now.get(name, {}).items() if k in opts} for name, opts in recorded.items()}
    assert kept == recorded


def test_the_config_table_covers_every_training_flag():
    """Every option of a training command is a run control or names a config key the schema knows."""
    from rlft.commands.options import CONFIG_KEYS, CONTROLS
    from rlft.schema import SCHEMA

    commands = _commands()
    missing = []
    for method in TRAINING_COMMANDS:
        for p in commands[method].params:
            if p.name in CONTROLS:
                continue
            key = CONFIG_KEYS.get(p.name, "").format(method=method)
            node = SCHEMA
            for part in key.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if not key or node is None:
                missing.append(f"rlft {method} {p.opts[0]} -> {key or 'no config key'}")
    assert not missing, "\n".join(missing)


def test_training_command_modules_are_one_call():
    for method in TRAINING_COMMANDS:
        source = (ROOT / "commands" / f"{method}.py").read_text()
        assert len(source.splitlines()) <= MAX_TRAINING_COMMAND_LINES, f"rlft/commands/{method}.py"
        assert f'o.train(ctx, "{method}"' in source, f"rlft/commands/{method}.py does not call o.train"


def test_shared_options_sit_in_the_run_panel_after_the_method_flags(cli):
    r = cli("dpo", "--help")
    assert r.code == 0
    text = r.out
    assert "--beta" in text and "Run" in text and text.index("--beta") < text.index("Run ")
    assert text.index("Run ") < text.index("--output-dir")


# --------------------------------------------------------------------------- the package layout

# A concept with several modules is a package; the rest of rlft/ is flat. Demos and other drivers of the CLI
# live outside the library (scripts/), so nothing in rlft/ but `python -m rlft` imports rlft.cli.
PACKAGES = {"commands", "methods", "verifiers", "choose", "speed", "run", "watch", "data", "dspy", "tools",
            "reward_model", "chat"}
MAX_FLAT_MODULES = 19  # modules flat in rlft/ (besides __init__ and __main__); past that, a concept wants a package
# The speed layer's seam (rlft/speed/__init__.py): only these import rlft.speed, through its entry points
# (models: prepare_model; methods.group_rl: trainer_class and attach; methods.common: attach and precision;
# commands.options: precision for --print-config; methods.ppo: attach) and its shared sampling loop (evaluate,
# methods.ppo_rollout: decode).
SPEED_CALLERS = {"rlft.models", "rlft.evaluate", "rlft.methods.common", "rlft.methods.group_rl", "rlft.methods.ppo",
                 "rlft.commands.options", "rlft.methods.bootstrap", "rlft.methods.bootstrap_sampling",
                 "rlft.dspy.engine", "rlft.dspy.reinforce", "rlft.methods.ppo_rollout", "rlft.methods.sft",
                 "rlft.reward_model.implicit",  # implicit: the reply's logits only (decode.last_positions), as PPO
                 "rlft.watch.heldout",  # served_weights: a check on the fp32 base a bf16 LoRA run serves
                 "rlft.methods.reward"}  # served_weights: the end-of-run pair accuracy and truth checks, likewise


def test_package_layout():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages == PACKAGES
    flat = {p.stem for p in ROOT.glob("*.py")} - {"__init__", "__main__"}
    strays = sorted(m for m in flat for pkg in packages if m == pkg or m.startswith(pkg.removesuffix("s") + "_"))
    assert not strays, f"modules named after a package belong in it: {strays}"
    assert len(flat) <= MAX_FLAT_MODULES, f"{len(flat)} flat modules in rlft/: give a concept a package"
    prefixes = sorted(m for m in flat for other in flat if other != m and m.startswith(other.removesuffix("s") + "_"))
    assert not prefixes, f"modules named after another flat module (one concept: a package): {prefixes}"
    shared = {"group_rl", "callback", "common", "keep"}  # methods/ modules that are not a method of their own
    assert shared <= {p.stem for p in (ROOT / "methods").glob("*.py")}
    assert {f"rlft.methods.{m}" for m in shared} <= SHARED_METHOD_MODULES


def test_only_the_entry_point_drives_the_cli():
    g = graph()
    drivers = sorted(name for name, deps in g.items() if "rlft.cli" in deps)
    assert drivers == ["rlft.__main__"], f"drive the CLI from scripts/, not from the library: {drivers}"


def test_only_rlft_dspy_imports_dspy():
    """The dspy library (an optional extra) is imported by rlft.dspy alone, and rlft.dspy imports no command."""
    users = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(m == "dspy" or m.startswith("dspy.") for m in mods):
                users.append(name)
    assert users and all(u == "rlft.dspy" or u.startswith("rlft.dspy.") for u in users), sorted(set(users))
    g = graph()
    assert not [d for n, deps in g.items() if n.startswith("rlft.dspy") for d in deps
                if d.startswith("rlft.commands") or d == "rlft.cli"]


def test_only_the_speed_layers_callers_import_it():
    """rlft.speed is one seam (its entry points, plus the shared decode loop), not calls sewn through the code."""
    g = graph()
    importers = {name for name, deps in g.items() for dep in deps
                 if (dep == "rlft.speed" or dep.startswith("rlft.speed.")) and not name.startswith("rlft.speed")}
    assert importers <= SPEED_CALLERS, f"import rlft.speed only from its callers: {sorted(importers - SPEED_CALLERS)}"
    inside = {name for name in g if name.startswith("rlft.speed")}
    outside = sorted({dep for name in inside for dep in g[name] if not dep.startswith("rlft.speed")})
    assert set(outside) <= {"rlft.sources", "rlft.errors"}, \
        f"the speed layer imports only the model cache and errors: {outside}"


# Where each module is checked, for the modules no test file names (the rest: grep the tests for the module's
# dotted name). Commands are checked through the CLI, verifiers through their spec names.
TESTED_BY = {
    "rlft.__main__": "tests/test_cli_startup.py",  # `python -m rlft --help`: fast, no torch imported
    "rlft.choose.from_data": "tests/test_choose.py",  # `choose --data FILE` scenarios: signal from data files
    "rlft.commands.bootstrap": "tests/test_bootstrap.py",  # cli("bootstrap", ...): refusals, dry run, LoRA run
    "rlft.commands.chat": "tests/test_chat_command.py",  # cli("chat", ...) --prompt and the stdin loop
    "rlft.commands.distill": "tests/test_distill.py",  # cli("distill", ...): tokenizer check, zero loss
    "rlft.commands.dpo": "tests/test_train.py",  # cli("dpo", ...): first loss ln 2, LoRA reference
    "rlft.commands.eval": "tests/test_train.py",  # cli("eval", ...) --json on held-out rows, bad rows
    "rlft.commands.export": "tests/test_export.py",  # cli("export", ...) GGUF round trips and refusals
    "rlft.commands.grpo": "tests/test_grpo.py",  # cli("grpo", ...): trains, dry run, gold refusals
    "rlft.commands.init_model": "tests/test_train.py",  # cli("init-model", "--out", ...) loadable tiny model
    "rlft.commands.kto": "tests/test_kto.py",  # cli("kto", ...): label errors, first loss, balance warn
    "rlft.commands.merge": "tests/test_merge.py",  # cli("merge", ...): merged logits match the adapter
    "rlft.commands.options": "tests/test_structure.py",  # the shared flags and the flag -> config table
    "rlft.commands.ppo": "tests/test_ppo.py",  # cli("ppo", ...) end to end: metrics, resume, refusals
    "rlft.commands.preflight": "tests/test_grpo.py",  # cli("preflight", ...): go on SFT model, refuse random
    "rlft.commands.reward": "tests/test_reward.py",  # cli("reward", ...): pair accuracy, LoRA, bad rows
    "rlft.commands.rloo": "tests/test_rloo.py",  # cli("rloo", ...): refusals, 2-step metrics, gain
    "rlft.commands.sft": "tests/test_train.py",  # cli("sft", ...): run folder, loss falls, refusals
    "rlft.cross_checks": "tests/test_config.py",  # resolve(): qlora needs lora, vllm_mode, did-you-mean
    "rlft.data.bounded": "tests/test_bounded_reading.py",  # YAML bombs, pipes, sparse/binary files, CSV cells
    "rlft.loadable": "tests/test_bad_input_nothing_destroyed.py",  # damaged model folder/offline hub id: 1 line
    "rlft.merge": "tests/test_merge.py",  # merge_run via `rlft merge`: plain folder == adapter logits
    "rlft.methods.callback": "tests/test_time_limit.py",  # RunCallback ends TRL runs within max_minutes
    "rlft.methods.distill": "tests/test_distill.py",  # other tokenizer refused, self-distill zero loss
    "rlft.methods.group_rl": "tests/test_grpo.py",  # GRPO and RLOO's shared build: runs, filters, refusals
    "rlft.methods.kto": "tests/test_kto.py",  # first loss is the weighted half, rare-class note
    "rlft.methods.prompt_sampler": "tests/test_prompt_band.py",  # grpo.prompt_sampler=band keeps the band
    "rlft.quiet": "tests/test_quiet.py",  # quiet by default, --debug keeps the warnings
    "rlft.run.budget": "tests/test_heldout.py",  # "budget: ... passes ... more than 3 for dpo" warning
    "rlft.run.outputs": "tests/test_run_outputs.py",  # output rule per writing command, staged writes
    "rlft.schema": "tests/test_config.py",  # every key, type and bound of the config schema
    "rlft.speed.switch": "tests/speed/test_switch.py",  # speedups off: every speed entry point stands aside
    "rlft.tools.containment": "tests/test_tool_containment.py",  # result caps, signature checks, ToolStats
    "rlft.tools.wire": "tests/test_tool_process.py",  # indirect: frames/hints crossing to the tool worker
    "rlft.tools.worker": "tests/test_tool_process.py",  # tool code in its own process: timeout, raises, env
    "rlft.user_code": "tests/test_verifiers.py",  # plugin file loading: not found, import raises
    "rlft.verifiers.checked": "tests/test_bad_input_nothing_destroyed.py",  # plugin returning bad rewards
    "rlft.verifiers.common": "tests/test_verifiers.py",  # test_completion_text_shapes, chat-shaped rows
    "rlft.verifiers.format": "tests/test_verifiers.py",  # test_format table via REGISTRY["format"]
    "rlft.verifiers.json_schema": "tests/test_verifiers.py",  # test_json JSON_CASES, schema gold checks
    "rlft.verifiers.label": "tests/test_verifiers.py",  # test_label / test_label_partial tables
    "rlft.verifiers.loading": "tests/test_grpo.py",  # grpo gold refusal, unknown verifier, eval --verifier
    "rlft.verifiers.regex": "tests/test_verifiers.py",  # test_regex REGEX_CASES, bad pattern gold
    "rlft.verifiers.sandbox.cases": "tests/test_code_cases.py",  # explain(case) readings of converted tests
    "rlft.verifiers.sandbox.harness": "tests/test_sandbox.py",  # what the sandboxed process sees, limits
    "rlft.verifiers.sandbox.judged": "tests/test_humaneval.py",  # 38 judged / 1 refused, helpers bound
    "rlft.verifiers.sandbox.literals": "tests/test_code_cases.py",  # literal folding, 2**100000, 1/0 refused
}


def _named_by_tests() -> set[str]:
    text = "\n".join(p.read_text() for p in (ROOT.parent / "tests").rglob("*.py") if p.name != "test_structure.py")
    named = set()
    for name in modules():
        parent, _, leaf = name.rpartition(".")
        if re.search(rf"\b{re.escape(name)}\b", text) or \
                re.search(rf"from {re.escape(parent)} import [^\n]*\b{re.escape(leaf)}\b", text):
            named.add(name)
    return named


def test_every_module_is_named_by_a_test_or_mapped_to_one():
    """A newcomer finds a module's tests: a test file names it, or TESTED_BY says which file checks it."""
    known = set(modules())
    assert not set(TESTED_BY) - known, f"TESTED_BY names modules that are gone: {sorted(set(TESTED_BY) - known)}"
    missing = [f for f in TESTED_BY.values() if not (ROOT.parent / f).is_file()]
    assert not missing, f"TESTED_BY names test files that are gone: {missing}"
    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    unfound = sorted(known - packages - _named_by_tests() - set(TESTED_BY))
    assert not unfound, f"modules no test file names: name them in a test or map them in TESTED_BY: {unfound}"
