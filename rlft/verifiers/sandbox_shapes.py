"""Test shapes rewritten into parts that each end in one plain `assert`, so their expected values stay in
the parent (`rlft.verifiers.sandbox_harness.plan`) instead of the test running whole in the code's process,
where its pass would be the process's own (forgeable) report:

- setup lines carry into every later assert (each part runs in a process of its own);
- a `for` over a literal list/tuple/set (or a name set to one earlier in the test), a literal dict's
  `.items()`/`.keys()`/`.values()` or `range` of int literals (at most `MAX_UNROLL` items, no
  break/continue/else) is unrolled, one part per assert;
- an expected exception (`try: CALL; assert False / raise AssertionError except E: pass`, the same with
  `else: assert False`, or `with pytest.raises(E): CALL`) becomes `assert 'E' in _rlft_raised`, where
  `_rlft_raised` is the class names of what CALL raised: the process reports that list, the parent holds
  the expected name;
- `assert all(E for v in ITEMS)` over such items is that loop;
- statements after the last assert are dropped when they do not use the code (`print('ok')`).
Any other block holding an assert leaves the test as it was (opaque).
"""

from __future__ import annotations

import ast

from rlft.verifiers.sandbox_deps import Deps, stores

MAX_UNROLL = 64  # loop items unrolled; each assert in each item is one more process
MAX_PARTS = 256  # parts of one test (nested loops multiply): ~50 ms of process each; beyond, the test stays whole
RAISED = "_rlft_raised"


def expand(stmts: list[ast.stmt], prefix: list[ast.stmt] = ()) -> list[list[ast.stmt]] | None:
    """The parts of `stmts` (each: setup statements, then one assert), or None when a shape is not known."""
    out = _expand(list(stmts), list(prefix))
    if out is None:
        return None
    parts, rest = out
    trailing = [s for s in rest if not any(s is t for t in parts[-1])] if parts else rest
    if not parts or len(parts) > MAX_PARTS or (trailing and _uses_code(parts[-1][:-1], trailing)):
        return None
    return parts


def _expand(stmts: list[ast.stmt], prefix: list[ast.stmt]) -> tuple[list[list[ast.stmt]], list[ast.stmt]] | None:
    parts: list[list[ast.stmt]] = []
    for node in stmts:
        node = _all_as_loop(node, prefix)
        if isinstance(node, ast.Assert):
            parts.append([*prefix, node])
        elif isinstance(node, ast.For) and _has_assert(node):
            items = _items(node, prefix)
            if items is None:
                return None
            for item in items:
                sub = _expand(node.body, [*prefix, ast.Assign([node.target], item, lineno=0)])
                if sub is None:
                    return None
                parts += sub[0]
                prefix = sub[1]
                if len(parts) > MAX_PARTS or len(prefix) > 4 * MAX_PARTS:
                    return None  # checked as it grows: 60 x 60 x 60 nested items would take the parent minutes
        elif (raised := _raises(node)) is not None:
            parts.append([*prefix, *raised])
        elif _has_assert(node):
            return None
        else:
            prefix.append(node)
    return parts, prefix


def _all_as_loop(node: ast.stmt, prefix: list[ast.stmt]) -> ast.stmt:
    """`assert all(E for v in ITEMS [if C])` as `for v in ITEMS: assert E` (`assert not C or E`)."""
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Call) and isinstance(node.test.func, ast.Name)
            and node.test.func.id == "all" and len(node.test.args) == 1 and not node.test.keywords):
        return node
    gen = node.test.args[0]
    if not isinstance(gen, (ast.GeneratorExp, ast.ListComp)) or len(gen.generators) != 1 or gen.generators[0].is_async:
        return node
    comp = gen.generators[0]
    test = gen.elt
    for cond in reversed(comp.ifs):
        test = ast.BoolOp(ast.Or(), [ast.UnaryOp(ast.Not(), cond), test])
    loop = ast.For(comp.target, comp.iter, [ast.Assert(test, node.msg)], [], lineno=0)
    return loop if _items(loop, prefix) is not None else node


def _uses_code(setup: list[ast.stmt], trailing: list[ast.stmt]) -> bool:
    deps = Deps([ast.unparse(s) for s in [*setup, *trailing]])
    return any(deps.needs_code(s) for s in trailing)


def _has_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def _literal(name: str, prefix: list[ast.stmt]) -> ast.expr | None:
    """The literal last assigned to `name` by a plain `name = LITERAL` in `prefix`, if nothing else binds it."""
    for s in reversed(prefix):
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                and s.targets[0].id == name:
            return s.value
        if name in stores(s) or any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(s)):
            return None  # rebound, or possibly changed in place (`cases.append(...)`)
    return None


def _items(node: ast.For, prefix: list[ast.stmt] = ()) -> list[ast.expr] | None:
    """The loop's items as expressions, when the loop unrolls (over a literal, or a name set to one)."""
    if node.orelse or any(isinstance(n, (ast.Break, ast.Continue)) for n in ast.walk(node)):
        return None
    it = node.iter
    if isinstance(it, ast.Name):
        it = _literal(it.id, prefix)
    elif isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and isinstance(it.func.value, ast.Name):
        value = _literal(it.func.value.id, prefix)
        it = ast.Call(ast.Attribute(value, it.func.attr, ast.Load()), it.args, it.keywords) if value else None
    if it is None:
        return None
    try:
        if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
            ast.literal_eval(it)
            items = list(it.elts)
        elif isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" \
                and not it.keywords and 1 <= len(it.args) <= 3:
            bounds = [ast.literal_eval(a) for a in it.args]
            if not all(type(b) is int for b in bounds) or len(range(*bounds)) > MAX_UNROLL:
                return None
            items = [ast.Constant(i) for i in range(*bounds)]
        elif isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and isinstance(it.func.value, ast.Dict) \
                and it.func.attr in ("items", "keys", "values") and not it.args and not it.keywords:
            ast.literal_eval(it.func.value)
            d = it.func.value
            items = {"keys": d.keys, "values": d.values,
                     "items": [ast.Tuple([k, v], ast.Load()) for k, v in zip(d.keys, d.values)]}[it.func.attr]
        else:
            return None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return items if len(items) <= MAX_UNROLL and all(i is not None for i in items) else None


def _fails(stmts: list[ast.stmt]) -> bool:
    """`assert False` / `raise AssertionError(...)` as the only statement."""
    if len(stmts) != 1:
        return False
    s = stmts[0]
    if isinstance(s, ast.Assert):
        return isinstance(s.test, ast.Constant) and not s.test.value
    if isinstance(s, ast.Raise) and s.exc is not None:
        exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
        return isinstance(exc, ast.Name) and exc.id == "AssertionError"
    return False


def _names(types: ast.expr | None) -> list[str] | None:
    """Class names an `except` (or `raises(...)`) catches, or None."""
    if types is None:
        return ["BaseException"]
    nodes = types.elts if isinstance(types, ast.Tuple) else [types]
    out = []
    for n in nodes:
        if isinstance(n, ast.Name):
            out.append(n.id)
        elif isinstance(n, ast.Attribute):
            out.append(n.attr)
        else:
            return None
    return None if "AssertionError" in out else out


def _raises(node: ast.stmt) -> list[ast.stmt] | None:
    """The expected-exception statement rewritten (see the module docstring), or None."""
    body, names = None, None
    if isinstance(node, ast.Try) and node.handlers and not node.finalbody:
        trivial = all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                      for h in node.handlers for s in h.body)
        caught = [_names(h.type) for h in node.handlers]
        if not trivial or any(c is None for c in caught):
            return None
        names = [n for c in caught for n in c]
        if _fails(node.orelse) and not _has_assert(ast.Module(node.body, [])):
            body = node.body
        elif not node.orelse and node.body and _fails(node.body[-1:]) \
                and not _has_assert(ast.Module(node.body[:-1], [])):
            body = node.body[:-1]
    elif isinstance(node, ast.With) and len(node.items) == 1 and not _has_assert(ast.Module(node.body, [])):
        ctx = node.items[0].context_expr
        if isinstance(ctx, ast.Call) and ast.unparse(ctx.func) in ("pytest.raises", "raises") \
                and len(ctx.args) == 1 and not ctx.keywords and node.items[0].optional_vars is None:
            names, body = _names(ctx.args[0]), node.body
    if not body or not names:
        return None
    src = "\n".join("    " + line for s in body for line in ast.unparse(s).splitlines())
    check = (f"assert {names[0]!r} in {RAISED}" if len(names) == 1
             else f"assert {set(names)!r} & set({RAISED})")
    return ast.parse(f"try:\n{src}\nexcept BaseException as _rlft_error:\n"
                     f"    {RAISED} = [c.__name__ for c in type(_rlft_error).__mro__]\n"
                     f"else:\n    {RAISED} = []\n{check}").body
