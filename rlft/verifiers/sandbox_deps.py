"""Which parts of a test need the solution, found statically, and how an observed side splits into leaves.

A name *depends on the code* when the test never binds it and it is neither a builtin nor a stdlib
module (it must come from the solution: `f`), or when a setup statement that reads such a name binds it
(`r = f(2)`) or may change it in place (`f(xs)` taints `xs`). Everything else is *code-free*: the setup
statements that are code-free run without the code (reference and judge processes), so an expected value
set up next to a call of the code (`want = 55; r = f(10)`) still stays in the parent.

An observed side that mixes the code's values with test data (`abs(f(1) - 3.5) < 1e-6`,
`math.isclose(f(1), 3.5)`, `f(1) == 3 or f(1) == 4`) would let the code pass by reporting a value that
fits the comparison (0.0, True) without knowing the data: such a side is split into *leaves* (the
maximal parts that need the code: `f(1)`), which the solution's process reports as plain data, and a
*skeleton* (`abs(_rlft_leaves[0] - 3.5)`) that a separate process evaluates without the code. A leaf must
then be plain data (a Fraction or generator fed to a skeleton fails the test), and leaves are evaluated
eagerly, so `x is None or f(x) == 1` calls `f(x)` even when `x` is None (a leaf that raises only fails the
test where the skeleton uses it).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
from functools import cache

LEAVES = "_rlft_leaves"
INPUT = "_rlft_in_"  # + k: an argument computed from test data without the code
_BUILTINS = frozenset(dir(builtins))
_MODULES = frozenset(getattr(sys, "stdlib_module_names", ()))
_STAR_SAFE = frozenset({"math", "cmath", "itertools", "collections", "functools", "string", "re", "operator",
                        "heapq", "bisect", "typing", "fractions", "decimal", "statistics", "random"})
# methods of plain values that test against data; any other method (`Solution().twoSum(xs, 9)`) is the code's
_DATA_METHODS = frozenset({"startswith", "endswith", "count", "index", "find", "rfind", "issubset", "issuperset",
                           "isdisjoint", "__contains__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__"})
# code-free callables whose other arguments name an attribute or ask about identity, not an expected value
_NOT_TRANSPARENT = frozenset({"getattr", "hasattr", "vars", "dir", "id", "iter", "next", "callable"})


def stores(tree: ast.AST) -> set[str]:
    """Names a statement binds (assignment targets, del, def/class names, imports)."""
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.ImportFrom) and n.names[0].name == "*":
            out |= _star_names(n.module or "") if not n.level else {"*"}
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return out


@cache
def _star_names(module: str) -> frozenset[str]:
    """What `from MODULE import *` binds, for stdlib modules safe to import here; else {'*'} (unknown)."""
    if module not in _STAR_SAFE:
        return frozenset({"*"})
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    return frozenset(names)


def loads(tree: ast.AST) -> set[str]:
    """Names read, less those bound inside the node itself (lambda and comprehension variables)."""
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    local: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            local |= {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x}
        elif isinstance(n, ast.comprehension):
            local |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
    return read - local


class Deps:
    """Static dependence of a test's setup statements and sides on the solution."""

    def __init__(self, setup: list[str]):
        self.trees = [ast.parse(s) for s in setup]
        self.setup = setup
        self._puts = [stores(t) for t in self.trees]  # computed once: a plan asks many times
        self._gets = [loads(t) for t in self.trees]
        self.stored = set().union(*self._puts)
        self.dep: set[str] = set()
        self._index = 0  # the side `split` is working on
        while True:  # to a fixpoint: order-insensitive, so conservative
            before = len(self.dep)
            for put, get in zip(self._puts, self._gets):
                if self._reads_code(get):
                    self.dep |= put | (get & self.stored)
            if len(self.dep) == before:
                break

    def _reads_code(self, names: set[str]) -> bool:
        return any(n in self.dep or (n not in self.stored and n not in _BUILTINS and n not in _MODULES)
                   for n in names)

    def needs_code(self, tree: ast.AST) -> bool:
        for t, get in zip(self.trees, self._gets):
            if t is tree:
                return self._reads_code(get)
        return self._reads_code(loads(tree))

    def code_free_setup(self, extra: list[ast.AST] = ()) -> list[str]:
        """The setup statements that run without the code and that `extra` (sides, skeletons) need, after
        imports of the stdlib modules they read without importing them (`math.isclose` in a bare test)."""
        needed = set().union(*(loads(t) for t in extra))
        keep: list[str] = []
        for src, put, get in reversed(list(zip(self.setup, self._puts, self._gets))):  # a backward slice
            if not self._reads_code(get) and (put & needed or (not put and get & needed) or "*" in put):
                keep.append(src)
                needed |= get
        free = needed - self.stored - _BUILTINS
        return [f"import {m}" for m in sorted(free & _MODULES)] + keep[::-1]

    def feeding(self, names: set[str]) -> set[str]:
        """`names` and every setup name their defining statements read, transitively."""
        out, todo = set(), set(names)
        while todo:
            n = todo.pop()
            out.add(n)
            for put, get in zip(self._puts, self._gets):
                if n in put:
                    todo |= (get & self.stored) - out
        return out

    def split(self, side: str, index: int = 0) -> tuple[str, list[str]] | None:
        """(skeleton, leaves) for a side that mixes the code's values with test data, else None; the
        skeleton reads leaf k of side `index` as `_rlft_leaves[index, k]`."""
        tree = ast.parse(side, mode="eval")
        leaves: list[str] = []
        self._index = index
        body, mixed = self._split(tree.body, leaves)
        if not mixed or not leaves:
            return None
        return ast.unparse(body), leaves

    def _split(self, node: ast.expr, leaves: list[str]) -> tuple[ast.expr, bool]:
        """(node with leaves replaced, whether it mixes code-free data into a value that needs the code)."""
        if not self.needs_code(node):
            return node, not isinstance(node, ast.Lambda)
        operands, start = self._operands(node), len(leaves)
        if operands is not None:
            parts = [self._split(child, leaves) if child is not None else (None, False) for child in operands[1]]
            if any(mixed for _, mixed in parts) or operands[2]:
                return operands[0]([new for new, _ in parts]), True
            del leaves[start:]  # nothing mixed in: the whole node is one leaf
        key = ast.Tuple([ast.Constant(self._index), ast.Constant(len(leaves))], ast.Load())
        leaf = ast.Subscript(ast.Name(LEAVES, ast.Load()), key, ast.Load())
        leaves.append(ast.unparse(node))
        return leaf, False

    def _operands(self, node: ast.expr):
        """(rebuild(children), children, mixes by itself) for a node the skeleton may evaluate, else None."""
        if isinstance(node, ast.BinOp):
            return lambda c: ast.BinOp(c[0], node.op, c[1]), [node.left, node.right], False
        if isinstance(node, ast.UnaryOp):
            return lambda c: ast.UnaryOp(node.op, c[0]), [node.operand], False
        if isinstance(node, ast.BoolOp):
            return lambda c: ast.BoolOp(node.op, c), list(node.values), False
        if isinstance(node, ast.Compare):
            return lambda c: ast.Compare(c[0], node.ops, c[1:]), [node.left, *node.comparators], False
        if isinstance(node, ast.IfExp):
            return lambda c: ast.IfExp(c[0], c[1], c[2]), [node.test, node.body, node.orelse], False
        if isinstance(node, ast.Subscript) and not self.needs_code(node.value):  # a table indexed by the code
            return lambda c: ast.Subscript(node.value, c[0], ast.Load()), [node.slice], True
        if isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args) \
                and all(k.arg for k in node.keywords):
            f, n = node.func, len(node.args)

            def call(c, func=None):
                return ast.Call(func or f, c[:n], [ast.keyword(k.arg, v) for k, v in zip(node.keywords, c[n:])])
            kids = [*node.args, *(k.value for k in node.keywords)]
            if not self.needs_code(f):
                if isinstance(f, ast.Name) and f.id in _NOT_TRANSPARENT:
                    return None
                return call, kids, isinstance(f, ast.Name) and f.id == "type"  # a type is no plain value
            if isinstance(f, ast.Attribute) and f.attr in _DATA_METHODS:  # `f(1).startswith('ab')`
                return (lambda c: call(c[1:], ast.Attribute(c[0], f.attr, ast.Load())), [f.value, *kids],
                        False)
        return None

    def inputs(self, expr: str, table: dict[str, str]) -> str:
        """`expr` with each code-free part that reads test data (`case['input']`, `xs[:2]`) replaced by a
        name `_rlft_in_K` (added to `table` with its source), so the code's process gets that value, not
        the data it came from (`case` may also hold the expected value)."""
        tree = ast.parse(expr, mode="eval")

        class Cut(ast.NodeTransformer):
            def visit(inner, node):  # noqa: N805 - the transformer's self; `self` is the Deps
                if isinstance(node, ast.expr) and self._input(node):
                    name = f"{INPUT}{len(table)}"
                    table[name] = ast.unparse(node)
                    return ast.Name(name, ast.Load())
                return inner.generic_visit(node)
        return ast.unparse(Cut().visit(tree))

    def _input(self, node: ast.expr) -> bool:
        if isinstance(node, (ast.Name, ast.Constant, ast.Lambda, ast.Starred)) or self.needs_code(node):
            return False
        if any(isinstance(n, ast.Lambda) for n in ast.walk(node)) or not loads(node) & self.stored:
            return False
        try:
            ast.literal_eval(node)
            return False  # a literal: nothing to hide
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return True
