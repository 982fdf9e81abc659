"""Where each function-scope name of one function is bound and read, as pre-order positions.

ignore-numpy (which code after a block reads what the block assigns) and torch_cond (which
locals a branch takes and returns) ask the same question of one function; the answer comes
from LibCST scope analysis of that function alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, ScopeProvider
from tsfix.codemods.facts.syntax import find_all


@dataclass
class LocalName:
    """One function-scope name: the nodes that bind it and the positions of its bindings
    (sorted) and of its reads (sorted, each once)."""

    bindings: list[cst.CSTNode] = field(default_factory=list)
    assigns: list[int] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)


def function_locals(func: cst.FunctionDef, position: Mapping[int, int]) -> dict[str, LocalName]:
    """The names ``func`` binds in its own scope. ``position`` maps ``id(node)`` to the node's
    pre-order position; a binding or read whose node it does not hold gets no position."""
    body = func.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return {}
    wrapper = MetadataWrapper(cst.Module(body=[func]), unsafe_skip_copy=True)
    scopes = wrapper.resolve(ScopeProvider)
    scope = scopes[body.body[0]]
    assert scope is not None
    found: dict[str, LocalName] = {}
    for assignment in scope.assignments:
        node = getattr(assignment, "node", None)
        if node is None:
            continue
        local = found.setdefault(assignment.name, LocalName())
        local.bindings.append(node)
        if id(node) in position:
            local.assigns.append(position[id(node)])
    # Reads: every access that resolves to this function's scope. (An Assignment's
    # ``references`` leave out accesses written before it, such as loop-carried reads.)
    for inner in {id(s): s for s in scopes.values() if s is not None}.values():
        for access in inner.accesses:
            name = access.node.value if isinstance(access.node, cst.Name) else None
            if name is None or name not in found or id(access.node) not in position:
                continue
            owner = inner
            while owner is not scope and name not in owner.assignments:
                if owner.parent is owner or isinstance(owner, GlobalScope):
                    break
                owner = owner.parent
            if owner is scope:
                found[name].reads.append(position[id(access.node)])
    for aug in find_all(body, cst.AugAssign):
        # ``a += 1`` reads ``a`` too; LibCST records it as an assignment only.
        if isinstance(aug.target, cst.Name) and aug.target.value in found:
            found[aug.target.value].reads.append(position[id(aug.target)])
    for local in found.values():
        local.reads = sorted(set(local.reads))
        local.assigns.sort()
    return found
