"""A calculator environment for `rlft grpo --env data/tools/calculator.py:Calculator` (TRL's environment_factory
contract): one tool, `calculate`, that evaluates + - * / and parentheses on integers without `eval` (an ast walk
that accepts nothing else), and `reset(**row)` that starts an episode. The final answer is scored by the run's
verifiers (math, against the row's `answer`); the environment keeps no reward of its own.
"""

from __future__ import annotations

import ast
import operator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("only integers, + - * / and parentheses")


class Calculator:
    """One episode: the model may call `calculate` any number of times, then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def reset(self, **row) -> None:
        self.calls = 0
        return None

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: integers with + - * / and parentheses, e.g. "23*47"
        """
        self.calls += 1
        if len(expression) > 200:
            raise ValueError("expression too long")
        result = _value(ast.parse(expression, mode="eval").body)
        return str(int(result)) if float(result).is_integer() else f"{result:.4g}"
