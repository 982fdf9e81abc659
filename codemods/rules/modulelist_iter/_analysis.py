"""One compiled method, analysed: its loops, then its ModuleDict lookups, then every site left
(an index or a ``reversed()`` no rewrite covers) is reported as a refusal with its reason."""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import code_of, find_all, self_attr, short_source
from tsfix.codemods.rules.modulelist_iter._common import (
    TSF201,
    TSF202,
    MethodPlan,
    is_literal_key,
    single_index,
)
from tsfix.codemods.rules.modulelist_iter._loops import LoopAnalysis
from tsfix.codemods.rules.modulelist_iter._moduledict import DictLookups
from tsfix.codemods.rules.modulelist_iter._region import Regions
from tsfix.codemods.rules.modulelist_iter._unpack import UnpackAnalysis


class MethodAnalysis(LoopAnalysis, UnpackAnalysis, Regions, DictLookups):
    """Plans the rewrites of one compiled method and reports every site: fixed or refused."""

    def analyse(self) -> MethodPlan:
        loops = [loop for loop in find_all(self.func.body, cst.For) if id(loop) not in self.never]
        self.block_of = {id(statement): id(block)
                         for block in find_all(self.func.body, cst.IndentedBlock)
                         for statement in block.body}
        for loop in loops:
            taken = self.taken_names(loop, loops)
            self.loop(loop, taken)
            self.unpack(loop, taken)
        self.defer_leftovers()
        self.select_sites(self.deferred)
        self.hoist_dict_calls()
        self.report_leftovers()
        self.report_reversed()
        self.report_unresolved()
        return self.plan

    def defer_leftovers(self) -> None:
        """List sites no loop accounted for (an index that is no counter over the whole list)
        go to the enumerate+if form too."""
        for node in find_all(self.func.body, cst.Subscript):
            if (id(node) in self.handled or not self.is_site(node)
                    or self.container_subscript(node, "list") is None):
                continue
            where = f"{code_of(node)} (line {self.rule.line_of(node)})"
            self.defer_sites([node], f"{where} is indexed with a computed value, not the "
                             "counter of a loop over the whole list")

    def report_unresolved(self) -> None:
        """``self.x[k](...)`` where ``x`` is no attribute of this class or of a base whose
        source is read, and a base's source is not: likely a container that base builds."""
        bases = self.cls.unresolved_bases
        if not bases:
            return
        assigned = {a.attr for a in self.cls.assignments}
        for node in find_all(self.func.body, cst.Subscript):
            attr = self_attr(node.value, self.self_var)
            index = single_index(node)
            if (attr is None or attr in assigned or self.container_kind(attr) is not None
                    or id(node) in self.handled or id(node) in self.never or index is None
                    or is_literal_key(index)):
                continue
            parent = [c for c in find_all(self.func.body, cst.Call) if c.func is node]
            if not parent:
                continue
            named = ", ".join(bases)
            self.refuse(node, TSF201, f"'self.{attr}' indexed by {short_source(index)!r}",
                        f"{code_of(node)} (line {self.rule.line_of(node)}): self.{attr} is not "
                        f"assigned in {self.cls.name}; it may be a module container built by "
                        f"its base {named}, whose source is not read; not rewritten")

    def report_leftovers(self) -> None:
        for node in find_all(self.func.body, cst.Subscript):
            if id(node) in self.handled or not self.is_site(node):
                continue
            attr = self_attr(node.value, self.self_var)
            assert attr is not None
            where = f"{code_of(node)} (line {self.rule.line_of(node)})"
            container = self.cls.containers.get(attr)
            if container is None:
                reason = f"{where}: {self.cls.not_a_container(attr)}; not rewritten"
            elif container.kind == "list":
                reason = (f"{where} is indexed with a computed value outside a loop over the "
                          "whole list; TorchScript needs an integer literal and no iteration is "
                          "equivalent; not rewritten")
            elif is_literal_key(single_index(node) or node):
                reason = (f"{where}: a ModuleDict takes a string literal key only; "
                          "not rewritten")
            else:
                reason = (f"{where}: a variable-key ModuleDict lookup outside a statement the "
                          "rule can restructure; not rewritten")
            self.refuse_sites([node], reason)

    def report_reversed(self) -> None:
        """``reversed()`` of a module container (TSF202) that no loop rewrite covered."""
        for call in find_all(self.func.body, cst.Call):
            if (id(call) in self.handled or id(call) in self.never or len(call.args) != 1
                    or get_full_name_for_node(call.func) != "reversed"):
                continue
            argument = call.args[0].value
            sliced = isinstance(argument, cst.Subscript)
            attr = self_attr(argument.value if isinstance(argument, cst.Subscript)
                             else argument, self.self_var)
            kind = self.container_kind(attr)
            if kind is None:
                continue
            what = f"{code_of(call)} (line {self.rule.line_of(call)})"
            if attr not in self.cls.containers:
                assert attr is not None
                reason = f"{what}: {self.cls.not_a_container(attr)}"
            elif kind == "dict":
                reason = f"{what}: self.{attr} is a ModuleDict"
            elif sliced:
                reason = f"{what}: reversed() of a slice; iterate the slice [::-1] itself"
            else:
                reason = (f"{what} is not the iterable of a `for` loop with one target variable, "
                          "the only form the rule rewrites")
            self.refuse(call, TSF202, f"reversed({short_source(argument)})",
                        f"{reason}; not rewritten")
