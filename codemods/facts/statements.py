"""Statement-level scope facts several rules ask (ignore-numpy, torch-cond, lift-branch): the
nodes of a body outside nested functions, control that leaves a statement, the names a statement
always binds, and the in-place container methods.

Pure functions of the LibCST tree; nothing imports torch.
"""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import children, find_all, target_names

# In-place methods of lists, dicts and sets: TorchScript passes these to an ignored method as
# copies, so a block that mutates one must hand it back.
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
            "popitem", "sort", "reverse", "add", "discard"}


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
                    names.update(n.value for n in target_names(target.target))
            elif (isinstance(small, cst.AnnAssign) and small.value is not None) or isinstance(
                    small, cst.AugAssign):
                names.update(n.value for n in target_names(small.target))
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
