"""Optional values TorchScript must see refined before use.

``x = x + skip`` with ``skip: Optional[Tensor]`` does not compile: TorchScript needs
``skip is not None`` proven first. Where the method never tests the parameter and its first use
fails on None in eager code too (arithmetic, a tensor method or attribute, an index, the input of
a layer or torch function) and runs whenever its statement runs, ``assert skip is not None`` just
before that statement changes nothing eager code does (it only turns the TypeError into an
AssertionError) and refines the value for the rest of the method.

A local set to None and then, inside a loop or branch, to a value of one type ``T``
(``prev = None`` + ``for ...: prev = x``) fails to compile ("previously had type NoneType");
``prev: Optional[T] = None`` declares what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.classes import TENSOR_CONSTRUCTORS
from tsfix.codemods.facts.syntax import find_all, parameters_of, parent_map, qualified_name
from tsfix.codemods.facts.value_types import TENSOR, is_complete, unify_all, without_none
from tsfix.codemods.rules.annotate._callees import callee_type
from tsfix.codemods.rules.annotate._common import is_name, own
from tsfix.codemods.rules.annotate._evidence import (
    TENSOR_ARGUMENTS,
    TYPED_KEYWORDS,
    scripted_as_tensor,
)
from tsfix.codemods.rules.annotate._state import MethodState


@dataclass
class Refinement:
    """How an Optional parameter's uses compile: ``needed`` False when the method tests or
    rebinds it, or only passes it on (to a callee that takes it, or out as a result);
    else ``before`` is the top-level statement an assert can precede, or None when none can."""

    needed: bool
    before: cst.SimpleStatementLine | None = None


def refinement(method: MethodState, name: str) -> Refinement:
    body = method.func.body
    if _tested_or_rebound(body, name):
        return Refinement(needed=False)
    parents = parent_map(body)
    uses = [n for n in find_all(body, cst.Name) if n.value == name and _is_read(n, parents)]
    if not uses:
        return Refinement(needed=False)
    if all(_passed_on(method, use, parents) for use in uses):
        return Refinement(needed=False)
    first = uses[0]
    if not _fails_on_none(method, first, parents):
        return Refinement(needed=True)
    node: cst.CSTNode = first
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, cst.IfExp | cst.BooleanOperation | cst.Lambda | cst.ListComp
                      | cst.SetComp | cst.DictComp | cst.GeneratorExp | cst.FunctionDef):
            return Refinement(needed=True)     # evaluated only sometimes
        if isinstance(parent, cst.SimpleStatementLine):
            in_body = isinstance(body, cst.IndentedBlock) and any(s is parent for s in body.body)
            return Refinement(needed=True, before=parent if in_body else None)
        node = parent
    return Refinement(needed=True)


def optional_locals(method: MethodState) -> list[tuple[cst.Assign, str]]:
    """``name = None`` assignments to declare ``name: Optional[T] = None``: the first in the
    method, when every other assignment to the name is a ``T`` made inside a loop or branch
    that does not hold the None assignment."""
    body = method.func.body
    parameters = set(parameters_of(method.func))
    assigns: dict[str, list[cst.Assign]] = {}
    for assign in own(body, cst.Assign):
        for target in assign.targets:
            if isinstance(target.target, cst.Name):
                assigns.setdefault(target.target.value, []).append(assign)
    found: list[tuple[cst.Assign, str]] = []
    parents = parent_map(body)
    for name, named in assigns.items():
        if name in parameters or not is_name(named[0].value, "None") or \
                len(named[0].targets) != 1 or _bound_otherwise(body, name):
            continue
        values = [a for a in named if not is_name(a.value, "None")]
        if not values or any(len(a.targets) != 1 for a in values):
            continue
        kinds = [method.typer.type_of(a.value)
                 or (TENSOR if scripted_as_tensor(method, a.value) else None) for a in values]
        kind = unify_all(kinds)
        if kind is None or not is_complete(kind) or kind.startswith("Optional[") or \
                without_none(kind) != kind:
            continue
        blocks = _blocks_holding(named[0], parents)
        if all(_blocks_holding(a, parents) == blocks for a in values):
            continue        # straight-line rebinding compiles as it is
        found.append((named[0], f"Optional[{kind}]"))
    return found


# -- helpers --------------------------------------------------------------------------------------

def _tested_or_rebound(body: cst.CSTNode, name: str) -> bool:
    for comparison in find_all(body, cst.Comparison):
        operands = [comparison.left, *(c.comparator for c in comparison.comparisons)]
        if any(is_name(o, name) for o in operands) and any(
                isinstance(c.operator, cst.Is | cst.IsNot) for c in comparison.comparisons):
            return True
    for test in find_all(body, cst.If, cst.While, cst.IfExp):
        condition = test.test
        if isinstance(condition, cst.UnaryOperation):
            condition = condition.expression
        if is_name(condition, name):
            return True     # ``if name:`` refines too
    for boolean in find_all(body, cst.BooleanOperation):
        if is_name(boolean.left, name) or is_name(boolean.right, name):
            return True
    return _bound_otherwise(body, name) or any(
        any(is_name(t.target, name) for t in a.targets) for a in find_all(body, cst.Assign))


def _bound_otherwise(body: cst.CSTNode, name: str) -> bool:
    """Bound by something other than a plain ``name = value``: augmented or annotated
    assignment, unpacking, a for or with target, a nested function's parameter."""
    for node in find_all(body, cst.AugAssign, cst.AnnAssign):
        if is_name(node.target, name):
            return True
    for target in find_all(body, cst.AssignTarget):
        if not isinstance(target.target, cst.Name) and any(
                is_name(n, name) for n in find_all(target.target, cst.Name)):
            return True
    for node in find_all(body, cst.For, cst.WithItem, cst.CompFor):
        bound = node.target if isinstance(node, cst.For | cst.CompFor) else node.asname
        if bound is not None and any(is_name(n, name) for n in find_all(bound, cst.Name)):
            return True
    return any(p.name.value == name for f in find_all(body, cst.FunctionDef, cst.Lambda)
               for p in find_all(f.params, cst.Param))


def _is_read(node: cst.Name, parents: dict[int, cst.CSTNode]) -> bool:
    parent = parents.get(id(node))
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return False
    return not (isinstance(parent, cst.AssignTarget) and parent.target is node)


def _passed_on(method: MethodState, use: cst.Name, parents: dict[int, cst.CSTNode]) -> bool:
    """Returned (alone or in a tuple), or an argument to a callee that declares its type."""
    parent = parents.get(id(use))
    if isinstance(parent, cst.Return):
        return True
    if isinstance(parent, cst.Element) and isinstance(parents.get(id(parent)), cst.Tuple) and \
            isinstance(parents.get(id(parents[id(parent)])), cst.Return):
        return True
    if isinstance(parent, cst.Arg) and isinstance(call := parents.get(id(parent)), cst.Call):
        if (parent.keyword is not None and parent.keyword.value in TYPED_KEYWORDS
                and (qualified_name(call.func, method.imports) or "").startswith("torch.")):
            return True     # torch functions take ``Device? device``, ``ScalarType? dtype``
        return callee_type(method, call, parent) is not None
    return False


def _fails_on_none(method: MethodState, use: cst.Name, parents: dict[int, cst.CSTNode]) -> bool:
    """Eager code raises on None here: arithmetic, an attribute or index, a tensor argument of
    a tensor method, the input of a layer or torch function."""
    parent = parents.get(id(use))
    if isinstance(parent, cst.BinaryOperation | cst.UnaryOperation | cst.Subscript):
        return not (isinstance(parent, cst.Subscript) and parent.value is not use)
    if isinstance(parent, cst.AugAssign):
        return True
    if isinstance(parent, cst.Attribute):
        return parent.value is use
    if not (isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star):
        return False
    call = parents.get(id(parent))
    if not isinstance(call, cst.Call):
        return False
    positional = [a for a in call.args if a.keyword is None and not a.star]
    index = next((i for i, a in enumerate(positional) if a is parent), -1)
    func = call.func
    if isinstance(func, cst.Attribute):
        if method.self_var and is_name(func.value, method.self_var):
            return func.attr.value in method.facts.layers and index == 0
        if method.typer.type_of(func.value) == TENSOR:
            return index in TENSOR_ARGUMENTS.get(func.attr.value, ())
    qualified = qualified_name(func, method.imports) or ""
    short = qualified.rpartition(".")[2]
    return (qualified.startswith("torch.") and index == 0 and short not in TENSOR_CONSTRUCTORS
            and short[:1].islower())


def _blocks_holding(node: cst.CSTNode, parents: dict[int, cst.CSTNode]) -> list[int]:
    """The loops and branches around ``node`` (ids, innermost first)."""
    blocks: list[int] = []
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, cst.If | cst.Else | cst.For | cst.While | cst.Try
                      | cst.ExceptHandler | cst.Finally):
            blocks.append(id(node))
    return blocks
