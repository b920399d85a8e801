"""ComfyMathExpression (ComfyUI's comfy_extras/nodes_math.py, 2026): a math expression over
growing inputs `a`, `b`, ... `z`, giving FLOAT, INT and BOOL.

ComfyUI evaluates the text with the `simpleeval` package. Here the text is parsed with Python's
`ast` and walked by `evaluate`, which knows only numbers, the named variables, arithmetic,
comparisons, boolean logic, `x if c else y`, indexing into `values`, and calls of the functions
in `FUNCTIONS` (ComfyUI's list): no attribute access, no other names, no Python `eval`.
Exponents are capped (`MAX_EXPONENT`, ComfyUI's cap for `pow`, applied to `**` too) and the text
length is bounded, so a prompt cannot make the server compute for minutes.
"""
from __future__ import annotations

import ast
import math
import operator
import string
from typing import Any, Callable

from graph.v3_schema import Autogrow, Output, Socket, String, v3_node
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_math"
MAX_EXPONENT = 4000
MAX_EXPRESSION_LENGTH = 10_000


class ExpressionError(ValueError):
    """The expression is not allowed here, or failed to evaluate (says which part)."""


def _sum(*args: Any) -> Any:
    """`sum(values)` and `sum(a, b, c)` both work (ComfyUI's variadic sum)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return sum(args[0])
    return sum(args)


def _pow(base: Any, exponent: Any) -> Any:
    _check_exponent(exponent)
    return pow(base, exponent)


def _check_exponent(exponent: Any) -> None:
    if isinstance(exponent, (int, float)) and abs(exponent) > MAX_EXPONENT:
        raise ExpressionError(f"exponent {exponent} exceeds the maximum allowed ({MAX_EXPONENT})")


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sum": _sum, "min": min, "max": max, "abs": abs, "round": round, "pow": _pow,
    "sqrt": math.sqrt, "ceil": math.ceil, "floor": math.floor, "log": math.log, "log2": math.log2,
    "log10": math.log10, "sin": math.sin, "cos": math.cos, "tan": math.tan, "int": int, "float": float,
}

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: _pow,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_CONSTANT_NAMES = {"True": True, "False": False}


def evaluate(expression: str, names: dict[str, Any]) -> Any:
    """The value of `expression` with `names` bound (see the module docstring)."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"invalid expression: {exc.msg}") from None
    return _Evaluator(names).visit(tree.body)


class _Evaluator:
    def __init__(self, names: dict[str, Any]) -> None:
        self.names = names

    def visit(self, node: ast.AST) -> Any:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is None:
            raise ExpressionError(f"{type(node).__name__} is not allowed in a math expression")
        return method(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, (bool, int, float)):
            return node.value
        raise ExpressionError(f"constant {node.value!r} is not allowed (numbers only)")

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id in self.names:
            return self.names[node.id]
        if node.id in _CONSTANT_NAMES:
            return _CONSTANT_NAMES[node.id]
        raise ExpressionError(f"name {node.id!r} is not defined (connect input {node.id!r} or use a known name)")

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        op = _BINARY.get(type(node.op))
        if op is None:
            raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
        left, right = self.visit(node.left), self.visit(node.right)
        try:
            return op(left, right)
        except ExpressionError:
            raise
        except ZeroDivisionError:
            raise ExpressionError("division by zero") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise ExpressionError(str(exc)) from None

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        op = _UNARY.get(type(node.op))
        if op is None:
            raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
        return op(self.visit(node.operand))

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        # Python's short-circuit semantics: the deciding operand is the value.
        value: Any = None
        for operand in node.values:
            value = self.visit(operand)
            if isinstance(node.op, ast.And) and not value or isinstance(node.op, ast.Or) and value:
                return value
        return value

    def visit_Compare(self, node: ast.Compare) -> bool:
        left = self.visit(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            compare = _COMPARE.get(type(op))
            if compare is None:
                raise ExpressionError(f"comparison {type(op).__name__} is not allowed")
            right = self.visit(comparator)
            if not compare(left, right):
                return False
            left = right
        return True

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        container, index = self.visit(node.value), self.visit(node.slice)
        if not isinstance(container, (list, tuple)) or isinstance(index, bool) or not isinstance(index, int):
            raise ExpressionError("only `values[<integer>]` indexing is allowed")
        try:
            return container[index]
        except IndexError:
            raise ExpressionError(f"index {index} is out of range for {len(container)} values") from None

    def visit_Call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise ExpressionError(f"function {name!r} is not allowed; allowed: {', '.join(FUNCTIONS)}")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ExpressionError("functions take plain positional arguments only")
        args = [self.visit(a) for a in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except ExpressionError:
            raise
        except (TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
            raise ExpressionError(f"{node.func.id}(): {exc}") from None


@v3_node("ComfyMathExpression", display_name="Math Expression", category="utilities", python_module=MODULE,
         search_aliases=["math", "expression", "formula", "calculate", "calculator", "eval"],
         inputs=[String("expression", default="a + b", multiline=True),
                 Autogrow("values", Socket("value", "FLOAT,INT,BOOLEAN", optional=True),
                          names=tuple(string.ascii_lowercase), min=1)],
         outputs=[Output("FLOAT", "FLOAT"), Output("INT", "INT"), Output("BOOLEAN", "BOOL")])
def math_expression(expression: str, values: dict[str, Any]) -> tuple[float, int, bool]:
    """The expression's value as FLOAT, INT (truncated, Python's int()) and BOOL (truthiness)."""
    if not isinstance(expression, str) or not expression.strip():
        raise NodeInputError("expression", "a non-empty expression", repr(expression))
    names = {**values, "values": list(values.values())}
    try:
        result = evaluate(expression, names)
    except ExpressionError as exc:
        raise NodeInputError("expression", "a valid math expression", f"{expression!r}: {exc}") from None
    if not isinstance(result, (int, float)):
        raise NodeInputError("expression", "a numeric result", f"{type(result).__name__} {result!r}")
    try:
        as_float = float(result)
    except OverflowError:
        raise NodeInputError("expression", "a result that fits a float", f"{expression!r} is too large") from None
    if not math.isfinite(as_float):
        raise NodeInputError("expression", "a finite result", f"{expression!r} gives {result!r}")
    return (as_float, int(result), bool(result))
