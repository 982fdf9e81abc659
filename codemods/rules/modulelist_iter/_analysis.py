"""One compiled method, analysed: its loops, then its ModuleDict lookups, then every site left
(an index or a ``reversed()`` no rewrite covers) is reported as a refusal with its reason."""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import code_of, find_all, self_attr
from tsfix.codemods.rules.modulelist_iter._common import (
    TSF202,
    MethodPlan,
    is_literal_key,
    short,
    single_index,
)
from tsfix.codemods.rules.modulelist_iter._loops import LoopAnalysis
from tsfix.codemods.rules.modulelist_iter._moduledict import DictLookups


class MethodAnalysis(LoopAnalysis, DictLookups):
    """Plans the rewrites of one compiled method and reports every site: fixed or refused."""

    def analyse(self) -> MethodPlan:
        loops = [loop for loop in find_all(self.func.body, cst.For) if id(loop) not in self.never]
        self.block_of = {id(statement): id(block)
                         for block in find_all(self.func.body, cst.IndentedBlock)
                         for statement in block.body}
        for loop in loops:
            self.loop(loop, self.taken_names(loop, loops))
        self.hoist_dict_calls()
        self.report_leftovers()
        self.report_reversed()
        return self.plan

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
            self.refuse(call, TSF202, f"reversed({short(argument)})", f"{reason}; not rewritten")
