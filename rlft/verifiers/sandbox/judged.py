"""Which HumanEval `check` tests the judge sandbox may run as written (`cases.JudgeCase`), and with which
names bound to the code's functions.

The judge runs the test (setup, loops, random inputs, helper calls) with no model code in its process;
each call of a name the test does not define (the `candidate`, the prompt's helpers, the entry point by
name) crosses to a fresh code sandbox as plain data. So the verdict means what Python's means wherever
the test looks only at the values returned, and is refused where it would look at more: a statement other
than plain ones (try, with, raise, class: what an exception or a context would mean), `type`/`isinstance`/
`id`/`getattr`/... (the value's type or identity, which plain data does not carry), `is` other than with
None/True/False, an attribute of the code's functions, a private attribute, a module outside the
standard library (not in the sandbox).
"""

from __future__ import annotations

import ast
import builtins
import sys
from typing import Any

from rlft.verifiers.sandbox.cases import FIX_CALL, JudgeCase
from rlft.verifiers.sandbox.literals import No as _No

JUDGE_STATEMENTS = (ast.Assert, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If, ast.Expr,
                    ast.Import, ast.ImportFrom, ast.Pass, ast.Break, ast.Continue, ast.Return, ast.FunctionDef)
# names whose answer depends on more than the value (its type, identity, the namespace) or that reach outside
JUDGE_NAMES = {"type", "isinstance", "issubclass", "id", "vars", "dir", "getattr", "setattr", "delattr", "hasattr",
               "globals", "locals", "eval", "exec", "compile", "open", "__import__", "breakpoint", "input",
               "memoryview", "super", "object", "help", "exit", "quit"}
MAX_JUDGE_NAMES = 16


def judge_case(tree: ast.Module, text: str, check: str) -> Any:
    """The JudgeCase for a test whose `check` needs running as written, or _No where its meaning would depend on
    more than the values the code returns (types, identity, exceptions caught, non-stdlib modules)."""
    bound: set[str] = set()
    loaded: dict[str, ast.Name] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, JUDGE_STATEMENTS):
            raise _No(f"line {node.lineno}: `{type(node).__name__}` in the test: try, with, raise, classes and "
                      "the like depend on more than the values the code returns",
                      f"{FIX_CALL}, or plain statements and asserts inside {check}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                if node.__dict__.get("level") or m.split(".")[0] not in sys.stdlib_module_names:
                    raise _No(f"imports `{m}`, which is not in the standard library the sandbox holds",
                              "only standard-library imports in the test")
            bound.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
            if isinstance(node, ast.FunctionDef):
                bound.add(node.name)
                if node.decorator_list:
                    raise _No("a decorated function in the test")
            args = node.args
            bound.update(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))
            bound.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            else:
                loaded.setdefault(node.id, node)
                if node.id in JUDGE_NAMES:
                    raise _No(f"the test uses `{node.id}`, whose answer depends on more than the value returned")
        elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops):
            sides = [node.left, *node.comparators]
            if not any(isinstance(x, ast.Constant) and (x.value is None or x.value is True or x.value is False)
                       for x in sides):
                raise _No("`is` compares identity, which only None, True and False have across processes")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise _No(f"the test reads `.{node.attr}`, a private attribute")
    names = sorted(n for n in loaded if n not in bound and not hasattr(builtins, n))
    if len(names) > MAX_JUDGE_NAMES:
        raise _No(f"the test uses {len(names)} names it does not define")
    for node in ast.walk(tree):  # the code's functions are called or passed, never looked into
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            raise _No(f"the test reads `{node.value.id}.{node.attr}`: only calls of the code's functions cross "
                      "the wall")
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == check):
        param = fn.args.args[0].arg
        code_fns = {param, *names}
        results: set[str] = set()  # names bound to a value a call of the code returned (`s = candidate()`)
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == param:
                raise _No(f"the test reads `{param}.{node.attr}`: only calls of the function cross the wall")
            if isinstance(node, ast.Assign) and _calls(node.value, code_fns):
                results.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(fn):  # a method or attribute of a returned value: an object, not plain data
            if isinstance(node, ast.Attribute) and (_calls(node.value, code_fns) or (
                    isinstance(node.value, ast.Name) and node.value.id in results)):
                raise _No(f"the test uses `.{node.attr}` of what the code returns: only plain values cross the "
                          "wall (an object's methods would have to run beside the code)",
                          f"{FIX_CALL}, with a plain value returned")
    return JudgeCase(text, tuple(names))


def _calls(node: ast.expr, fns: set[str]) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in fns


