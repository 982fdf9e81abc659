"""What the parts of ``annotate`` share: the per-class tally and small syntax helpers."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst
from tsfix.codemods.facts.syntax import find_all
from tsfix.codemods.facts.value_types import TENSOR


@dataclass
class Counts:
    """What one class's rewrite did, for its summary line and notes."""

    observed: int = 0
    static: int = 0
    parts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def from_observation(kind: str | None) -> str | None:
    """An observed type in annotate's spelling (``NoneType`` -> ``None``)."""
    if kind is None:
        return None
    return re.sub(r"\bNoneType\b", "None", kind)


def relaxed(kind: str) -> str:
    """``kind`` with Tensor/None differences erased (TorchScript infers those Optional)."""
    return re.sub(r"\bNone\b", TENSOR, re.sub(r"Optional\[Tensor\]", TENSOR, kind))


def is_name(node: cst.CSTNode | None, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def literal_kind(node: cst.BaseExpression) -> str | None:
    """int/float/str for a number or string literal (``-1`` included), else None."""
    if isinstance(node, cst.Integer):
        return "int"
    if isinstance(node, cst.Float):
        return "float"
    if isinstance(node, cst.SimpleString):
        return "str"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return literal_kind(node.expression)
    return None


def own(body: cst.CSTNode, kind: type[cst.CSTNode]) -> list:  # type: ignore[type-arg]
    """Nodes of ``kind`` in ``body`` outside nested functions, lambdas and classes."""
    nested: set[int] = set()
    for inner in find_all(body, cst.FunctionDef, cst.Lambda, cst.ClassDef):
        nested.update(id(n) for n in find_all(inner, kind))
    return [n for n in find_all(body, kind) if id(n) not in nested]


def has_docstring(body: list[cst.BaseStatement]) -> bool:
    if not body or not isinstance(body[0], cst.SimpleStatementLine):
        return False
    first = body[0].body[0] if body[0].body else None
    return isinstance(first, cst.Expr) and isinstance(first.value, cst.SimpleString |
                                                      cst.ConcatenatedString)


def prepend(body: cst.BaseSuite, lines: Iterable[str]) -> cst.BaseSuite:
    """``lines`` added at the top of ``body``, after its docstring."""
    if not isinstance(body, cst.IndentedBlock):
        return body
    statements = list(body.body)
    at = 1 if has_docstring(statements) else 0
    added = [cst.parse_statement(line + "\n") for line in lines]
    return body.with_changes(body=[*statements[:at], *added, *statements[at:]])


def looks_at(func: ast.FunctionDef, *, skip_first: bool) -> bool:
    """``func`` has something annotate looks at (``skip_first``: a method's ``self``)."""
    arguments = func.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs:
        return True
    positional = arguments.posonlyargs + arguments.args
    if any(argument.annotation is None for argument in positional[1 if skip_first else 0:]):
        return True
    pairs = zip(reversed(positional), reversed(arguments.defaults), strict=False)
    for argument, default in pairs:
        none = isinstance(default, ast.Constant) and default.value is None
        annotation = ast.unparse(argument.annotation) if argument.annotation else ""
        if (not isinstance(default, ast.Constant | ast.Tuple | ast.UnaryOp)
                or (none and "Optional" not in annotation and "None" not in annotation)):
            return True
    if func.returns is not None and ast.unparse(func.returns) == "float":
        return True
    returns: list[ast.expr] = []
    for node in ast.walk(func):
        if isinstance(node, ast.List | ast.Dict | ast.ListComp | ast.DictComp):
            return True
        if isinstance(node, ast.Return) and node.value is not None:
            returns.append(node.value)
    return len(returns) > 1 and any(isinstance(value, ast.Constant | ast.List | ast.Dict
                                               | ast.UnaryOp) for value in returns)
