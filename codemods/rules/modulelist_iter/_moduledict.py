"""ModuleDict with a variable key: ``self.heads[task](x)`` becomes a loop over ``.items()`` that
compares the name, or is refused with the reason."""

from __future__ import annotations

import itertools

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, find_all, fresh_name, self_attr
from tsfix.codemods.rules.modulelist_iter._base import MethodState
from tsfix.codemods.rules.modulelist_iter._common import (
    Hoist,
    element_name,
    is_literal_key,
    path_to,
    single_index,
    singular,
)


class DictLookups(MethodState):
    def hoist_dict_calls(self) -> None:
        taken = set(self.names) | {n for names in self.chosen.values() for n in names}
        results: set[str] = set()
        loop_names: dict[int | None, set[str]] = {}   # block -> names its lookup loops bind
        for line in find_all(self.func.body, cst.SimpleStatementLine, cst.If, cst.While,
                             cst.For):
            if id(line) in self.never:
                continue
            if isinstance(line, cst.SimpleStatementLine):
                region: cst.CSTNode = line
            elif isinstance(line, cst.If | cst.While):
                region = line.test
            elif isinstance(line, cst.For):
                region = line.iter
            else:
                continue
            found = [s for s in find_all(region, cst.Subscript)
                     if self.container_subscript(s, "dict") is not None
                     and id(s) not in self.handled
                     and not is_literal_key(single_index(s) or cst.Name("x"))]
            if not found:
                continue
            first = found[0]
            attr = self_attr(first.value, self.self_var)
            assert attr is not None
            where = f"{code_of(first)} (line {self.rule.line_of(first)})"
            reason = self._hoist_refusal(line, region, found, id(line) in self.block_of)
            if reason is not None:
                self.refuse_sites(found, f"{where}: {reason}; not rewritten")
                continue
            tensor = self.cls.tensor_name
            if tensor is None:
                self.refuse_sites(found, f"{where}: the file imports neither torch nor Tensor, "
                                  "so the result cannot be typed; not rewritten")
                continue
            # Loop names may repeat across lookups; each result is declared once.
            base = singular(attr) or f"{attr.lstrip('_') or attr}"
            block = self.block_of.get(id(line))
            avoid = taken | results | {n for b, names in loop_names.items() if b != block
                                       for n in names}
            element = element_name(attr, "dict", avoid)
            name = fresh_name("name", f"{base}_name", taken=avoid | {element})
            every_loop_name = {n for names in loop_names.values() for n in names}
            result = fresh_name(f"{base}_out", taken=avoid | every_loop_name | {element, name})
            results.add(result)
            loop_names.setdefault(block, set()).update((element, name))
            index = single_index(first)
            assert index is not None
            self.plan.hoists[id(line)] = Hoist(self.rule.line_of(first), attr, code_of(index),
                                               result, name, element, tensor)
            self.fix_sites(found)

    def _hoist_refusal(self, line: cst.CSTNode, region: cst.CSTNode,
                       found: list[cst.Subscript], in_block: bool) -> str | None:
        if len(found) > 1:
            return "several variable-key ModuleDict lookups in one statement"
        subscript = found[0]
        if not isinstance(line, cst.SimpleStatementLine):
            return "the lookup is in a compound statement's header"
        if not in_block or len(line.body) != 1:
            return "the statement shares its line with others"
        calls = [c for c in find_all(region, cst.Call) if c.func is subscript]
        if not calls:
            return "the looked-up module is used other than by calling it"
        index = single_index(subscript)
        if index is None or find_all(index, cst.Call):
            return "the key is computed by a call"
        path = path_to(region, calls[0])
        for parent, child in itertools.pairwise(path):
            if isinstance(parent, cst.Lambda | cst.ListComp | cst.SetComp | cst.DictComp |
                          cst.GeneratorExp):
                return "the lookup is inside a lambda or comprehension"
            if isinstance(parent, cst.IfExp) and child is not parent.test:
                return "the lookup is inside a conditional expression"
            if isinstance(parent, cst.BooleanOperation) and child is parent.right:
                return "the lookup is evaluated only conditionally (and/or)"
        return None
