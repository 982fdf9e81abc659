"""The state of one compiled method's analysis, and how it reports each site: fixed (recorded in
the plan, reported when the class is rewritten) or refused (reported at once, with the code)."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import (
    bound_names,
    find_all,
    names_used,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.modulelist_iter._common import (
    CONTAINER_KINDS,
    TSF201,
    MethodPlan,
    binding_counts,
    literal_for,
    single_index,
)
from tsfix.codemods.rules.modulelist_iter._lengths import ClassAnalysis


class MethodState:
    """One compiled method: its names, its plan, and the sites already accounted for."""

    def __init__(self, rule: Rule, cls: ClassAnalysis, method: str) -> None:
        self.rule = rule
        self.cls = cls
        self.method = method
        self.func = cls.methods[method]
        self.self_var = self_name(self.func) or "self"
        # ids of the nodes TorchScript never compiles (``if not torch.jit.is_scripting():``).
        self.never = cls.facts.never_compiled(method)
        self.counts = binding_counts(self.func)
        self.names = names_used(self.func)
        self.plan = MethodPlan()
        self.handled: set[int] = set()      # ids of the sites a fix or a refusal accounts for
        self.chosen: dict[int, set[str]] = {}   # loop id -> names it introduced
        self.block_of: dict[int, int] = {}
        # Sites no iteration replaces, and why: the enumerate+if form is tried on them next.
        self.deferred: list[tuple[cst.Subscript, str]] = []
        self.deferred_ids: set[int] = set()

    # ---- sites --------------------------------------------------------------------------------

    def container_subscript(self, node: cst.CSTNode, kind: str) -> str | None:
        """The attribute of a container of ``kind`` this rule can rewrite, indexed by ``node``."""
        if not isinstance(node, cst.Subscript):
            return None
        attr = self_attr(node.value, self.self_var)
        if attr is None or attr not in self.cls.containers:
            return None
        return attr if self.cls.containers[attr].kind == kind else None

    def container_kind(self, attr: str | None) -> str | None:
        """"list" or "dict" for any attribute the facts or this rule take for a container."""
        if attr is None:
            return None
        if attr in self.cls.containers:
            return self.cls.containers[attr].kind
        named = self.cls.facts.containers.get(attr)
        return CONTAINER_KINDS.get(named) if named is not None else None

    def is_site(self, node: cst.CSTNode) -> bool:
        """A TSF201 site: a module container indexed by something TorchScript cannot take
        (not a literal of its kind; slices compile)."""
        if not isinstance(node, cst.Subscript) or id(node) in self.never:
            return False
        kind = self.container_kind(self_attr(node.value, self.self_var))
        index = single_index(node)
        return kind is not None and index is not None and not literal_for(index, kind)

    def site_message(self, node: cst.Subscript) -> str:
        attr = self_attr(node.value, self.self_var)
        index = single_index(node)
        assert attr is not None and index is not None
        return f"{self.cls.kind_name(attr)} 'self.{attr}' indexed by {short_source(index)!r}"

    def fix_sites(self, nodes: list[cst.Subscript]) -> None:
        for node in nodes:
            self.handled.add(id(node))
            if self.is_site(node):
                self.plan.fixed.append((node, TSF201, self.site_message(node)))

    def defer_sites(self, nodes: list[cst.Subscript], reason: str) -> None:
        """Sites the loop rewrite cannot replace, for the enumerate+if form (``reason``: why
        not iteration, without the closing "not rewritten")."""
        for node in nodes:
            if id(node) not in self.handled and id(node) not in self.deferred_ids:
                self.deferred.append((node, reason))
                self.deferred_ids.add(id(node))

    def refuse_sites(self, nodes: list[cst.Subscript], reason: str) -> None:
        for node in nodes:
            self.handled.add(id(node))
            if self.is_site(node):
                self.refuse(node, TSF201, self.site_message(node), reason)

    def refuse(self, node: cst.CSTNode, code: str, message: str, reason: str) -> None:
        self.handled.add(id(node))
        self.rule.skip(self.cls.name, node, reason, code=code, message=message)

    # ---- names --------------------------------------------------------------------------------

    def taken_names(self, loop: cst.For, loops: list[cst.For]) -> set[str]:
        """Names a new element variable of ``loop`` must avoid.

        Every name the method uses and every name given to another rewritten loop, except that
        loops in the same block may share one: TorchScript accepts a module-typed loop variable
        bound again by a later loop of the same block, not by a loop in a nested block."""
        block = self.block_of.get(id(loop))
        same_block = [o for o in loops if o is not loop and self.block_of.get(id(o)) == block]
        others = [o for o in loops if o is not loop and all(o is not s for s in same_block)]
        taken = {n for o in others for n in self.chosen.get(id(o), set())}
        reusable = {n.value for o in same_block for n in find_all(o.target, cst.Name)}
        if not reusable:
            return taken | self.names
        in_siblings = {id(n) for o in same_block for n in find_all(o, cst.Name)}
        attribute_names = {id(a.attr) for a in find_all(self.func, cst.Attribute)}
        elsewhere = {n.value for n in find_all(self.func, cst.Name)
                     if id(n) not in in_siblings and id(n) not in attribute_names}
        return taken | {n for n in self.names if n not in reusable or n in elsewhere}

    def read_outside(self, loop: cst.For, name: str) -> bool:
        """Is ``name`` used outside ``loop``, other than inside loops that rebind it first?"""
        own = {id(n) for n in find_all(loop, cst.Name)}
        rebound = {id(n) for other in find_all(self.func.body, cst.For)
                   if other is not loop and name in bound_names(other)
                   for n in find_all(other, cst.Name)}
        attribute_names = {id(a.attr) for a in find_all(self.func.body, cst.Attribute)}
        return any(n.value == name and id(n) not in own and id(n) not in rebound
                   and id(n) not in attribute_names for n in find_all(self.func.body, cst.Name))
