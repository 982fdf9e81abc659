"""Statement helpers of ``ignore-numpy``: children, escapes, definite assignment, numpy imports."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.numpy_usage import is_numpy_name
from tsfix.codemods.facts.syntax import child_fields, find_all

# In-place methods of lists, dicts and sets: TorchScript passes these to an ignored method as
# copies, so a block that mutates one must hand it back.
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
            "popitem", "sort", "reverse", "add", "discard"}


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Direct children of ``node`` (in source order), read from its dataclass fields."""
    found: list[cst.CSTNode] = []
    for name in child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, tuple | list):
            found.extend(v for v in value if isinstance(v, cst.CSTNode))
    return found


def own(body: cst.CSTNode, *kinds: type[cst.CSTNode]) -> list[cst.CSTNode]:
    """Nodes of ``kinds`` in ``body`` outside nested functions, lambdas and classes."""
    nested: set[int] = set()
    for inner in find_all(body, cst.FunctionDef, cst.Lambda, cst.ClassDef):
        if inner is not body:
            nested.update(id(n) for n in find_all(inner, *kinds))
    return [n for n in find_all(body, *kinds) if id(n) not in nested]


def escape(stmt: cst.CSTNode) -> str | None:
    """Why control would leave ``stmt`` other than by falling through, if it would."""
    if own(stmt, cst.Return):
        return "it contains `return`"

    def leaves(node: cst.CSTNode, in_loop: bool) -> bool:
        if isinstance(node, cst.Break | cst.Continue):
            return not in_loop
        if isinstance(node, cst.FunctionDef | cst.Lambda | cst.ClassDef):
            return False
        if isinstance(node, cst.For | cst.While):
            return (leaves(node.body, True)
                    or (node.orelse is not None and leaves(node.orelse, in_loop)))
        return any(leaves(child, in_loop) for child in children(node))

    if leaves(stmt, False):
        return "it contains `break`/`continue` that leave it"
    return None


def definitely_assigned(stmt: cst.BaseStatement) -> set[str]:
    """Names a statement always binds when it completes normally: assignment targets, the
    body of a ``with``, both branches of an ``if``/``else``, a ``try`` body and every
    handler. Loops may not run, so they bind nothing for sure."""
    names: set[str] = set()
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    _target_names(target.target, names)
            elif (isinstance(small, cst.AnnAssign) and small.value is not None) or isinstance(
                    small, cst.AugAssign):
                _target_names(small.target, names)
        return names
    if isinstance(stmt, cst.With):
        return _suite_assigned(stmt.body)
    if isinstance(stmt, cst.If):
        if stmt.orelse is None:
            return names
        other = (definitely_assigned(stmt.orelse) if isinstance(stmt.orelse, cst.If)
                 else _suite_assigned(stmt.orelse.body))
        return _suite_assigned(stmt.body) & other
    if isinstance(stmt, cst.Try):
        found = _suite_assigned(stmt.body)
        if stmt.orelse is not None:
            found |= _suite_assigned(stmt.orelse.body)
        for handler in stmt.handlers:
            found &= _suite_assigned(handler.body)
        if stmt.finalbody is not None:
            found |= _suite_assigned(stmt.finalbody.body)
        return found
    return names


def _suite_assigned(body: cst.BaseSuite) -> set[str]:
    names: set[str] = set()
    if isinstance(body, cst.IndentedBlock):
        for stmt in body.body:
            names |= definitely_assigned(stmt)
    return names


def _target_names(target: cst.BaseExpression, names: set[str]) -> None:
    if isinstance(target, cst.Name):
        names.add(target.value)
    elif isinstance(target, cst.Tuple | cst.List):
        for element in target.elements:
            _target_names(element.value, names)
    elif isinstance(target, cst.StarredElement):
        _target_names(target.value, names)


def imports_numpy(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Import):
        return all(is_numpy_name(get_full_name_for_node(a.name)) for a in node.names)
    if isinstance(node, cst.ImportFrom):
        return (node.module is not None and not node.relative
                and is_numpy_name(get_full_name_for_node(node.module)))
    return False


def is_import_line(line: cst.SimpleStatementLine) -> bool:
    """A line of numpy imports only."""
    return bool(line.body) and all(imports_numpy(s) for s in line.body)


def bound_by_import(line: cst.SimpleStatementLine) -> set[str]:
    names: set[str] = set()
    for small in line.body:
        if isinstance(small, cst.Import | cst.ImportFrom) and not isinstance(
                small.names, cst.ImportStar):
            for alias in small.names:
                if alias.asname is not None:
                    names.add(get_full_name_for_node(alias.asname.name) or "")
                else:
                    names.add((get_full_name_for_node(alias.name) or "").split(".")[0])
    return names


def unique(lines: Iterable[cst.SimpleStatementLine]) -> list[cst.SimpleStatementLine]:
    seen: set[int] = set()
    found = []
    for line in lines:
        if id(line) not in seen:
            seen.add(id(line))
            found.append(line)
    return found


def empty_container_name(stmt: cst.BaseStatement) -> str | None:
    """``name`` for a line ``name = []`` / ``{}`` / ``list()`` / ``dict()``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
        return None
    assign = stmt.body[0]
    target, value = assign.targets[0].target, assign.value
    empty = ((isinstance(value, cst.List | cst.Dict) and not value.elements)
             or (isinstance(value, cst.Call) and not value.args
                 and get_full_name_for_node(value.func) in ("list", "dict")))
    return target.value if empty and isinstance(target, cst.Name) else None


def is_name(node: cst.CSTNode | None, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name
