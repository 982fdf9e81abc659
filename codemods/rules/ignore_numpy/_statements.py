"""Statement helpers of ``ignore-numpy`` alone: numpy imports, empty containers. The scope
questions other rules ask too (nodes outside nested functions, escapes, definite assignment)
are :mod:`tsfix.codemods.facts.statements`."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.numpy_usage import is_numpy_name


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
