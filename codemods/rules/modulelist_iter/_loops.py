"""Loops: ``for i in range(...)`` that index containers with ``i``, ``enumerate`` loops that
index another list, ``reversed()`` traversals, and ``for name in self.heads`` over a ModuleDict.
Each becomes iteration over the container, or is refused with the reason."""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import (
    bound_names,
    code_of,
    find_all,
    fresh_name,
    self_attr,
    short_source,
)
from tsfix.codemods.rules.modulelist_iter._base import MethodState
from tsfix.codemods.rules.modulelist_iter._common import (
    TSF202,
    LoopPlan,
    element_name,
    int_value,
    is_literal_key,
    own_jumps,
    parenthesized,
    positional,
    single_index,
)


class LoopAnalysis(MethodState):
    def loop(self, loop: cst.For, taken: set[str]) -> None:
        target, it = loop.target, loop.iter
        if isinstance(target, cst.Name) and isinstance(it, cst.Call):
            name = get_full_name_for_node(it.func)
            args = positional(it) or []
            if name == "reversed" and len(args) == 1:
                attr = self_attr(args[0], self.self_var)
                if attr in self.cls.containers and self.cls.containers[attr].kind == "list":
                    self.reversed_elements(loop, target.value, attr, taken)
                    return
                inner = args[0]
                if isinstance(inner, cst.Call) and get_full_name_for_node(inner.func) == "range":
                    inner_args = positional(inner)
                    if inner_args is not None and (len(inner_args) == 1 or (
                            len(inner_args) == 2 and int_value(inner_args[0]) == 0)):
                        self.indexed(loop, target.value, inner_args[-1], True, None, taken)
                        return
                self.indexed(loop, target.value, None, True, None, taken)
                return
            if name == "range":
                if len(args) == 1 or (len(args) == 2 and int_value(args[0]) == 0):
                    self.indexed(loop, target.value, args[-1], False, None, taken)
                    return
                if (len(args) == 3 and int_value(args[1]) == -1 and int_value(args[2]) == -1
                        and isinstance(args[0], cst.BinaryOperation)
                        and isinstance(args[0].operator, cst.Subtract)
                        and int_value(args[0].right) == 1):
                    self.indexed(loop, target.value, args[0].left, True, None, taken)
                    return
                self.indexed(loop, target.value, None, False, None, taken)
                return
        if (isinstance(target, cst.Tuple) and len(target.elements) == 2
                and all(isinstance(e.value, cst.Name) for e in target.elements)
                and isinstance(it, cst.Call) and get_full_name_for_node(it.func) == "enumerate"):
            enumerated = positional(it)
            attr = (self_attr(enumerated[0], self.self_var)
                    if enumerated and len(enumerated) == 1 else None)
            if attr in self.cls.containers and self.cls.containers[attr].kind == "list":
                assert attr is not None
                index, element = (e.value for e in target.elements)
                assert isinstance(index, cst.Name) and isinstance(element, cst.Name)
                self.indexed(loop, index.value, None, False, (attr, element.value), taken)
                return
        if isinstance(target, cst.Name):
            attr = self_attr(it, self.self_var)
            if (attr is None and isinstance(it, cst.Call) and not it.args
                    and isinstance(it.func, cst.Attribute) and it.func.attr.value == "keys"):
                attr = self_attr(it.func.value, self.self_var)
            if attr in self.cls.containers and self.cls.containers[attr].kind == "dict":
                assert attr is not None
                self.dict_keys(loop, target.value, attr, taken)

    def _uses(self, loop: cst.For, index: str,
              kind: str) -> tuple[list[cst.Subscript], list[cst.Subscript]]:
        """Subscripts of containers in the loop body indexed exactly by ``index``, and those
        whose index is computed from it."""
        exact, offset = [], []
        for node in find_all(loop.body, cst.Subscript):
            if self.container_subscript(node, kind) is None:
                continue
            value = single_index(node)
            if isinstance(value, cst.Name) and value.value == index:
                exact.append(node)
            elif value is None or any(n.value == index for n in find_all(value, cst.Name)):
                offset.append(node)
        return exact, offset

    def _common_refusal(self, loop: cst.For, index: str, what: str) -> str | None:
        own = own_jumps(loop.body)
        if own:
            word = "break" if isinstance(own[0], cst.Break) else "continue"
            return (f"{what} has `{word}` in its body: TorchScript unrolls a loop over a "
                    "module container and cannot unroll break/continue")
        if loop.orelse is not None:
            return f"{what} has an `else` clause"
        rebinds = [n for n in find_all(loop.body, cst.Assign, cst.AugAssign, cst.AnnAssign,
                                       cst.For, cst.NamedExpr) if index in bound_names(n)]
        if rebinds:
            return f"{what} reassigns `{index}` in its body"
        return None

    def indexed(self, loop: cst.For, index: str, length: cst.BaseExpression | None,
                reverse: bool, element_of: tuple[str, str] | None, taken: set[str]) -> None:
        """``for index in range(...)`` (or ``enumerate(self.x)``) whose body indexes containers
        with ``index``."""
        exact, offset = self._uses(loop, index, "list")
        if not exact and not offset:
            return
        header = f"for {code_of(loop.target)} in {code_of(loop.iter)}"
        what = f"`{header}` (line {self.rule.line_of(loop)})"
        if offset:
            first = code_of(offset[0])
            sites = sorted([*exact, *offset], key=lambda n: self.rule.line_of(n))
            for node in sites:
                if any(node is o for o in offset):
                    self.defer_sites([node], f"{code_of(node)} in {what}: an index computed "
                                     "from the loop variable has no iteration equivalent")
                else:
                    self.defer_sites([node], f"{what} also indexes {first}, computed from the "
                                     "loop variable, which has no iteration equivalent")
            return None
        if loop.orelse is not None:
            # The enumerate+if form would keep the loop, whose `else` TorchScript rejects too.
            return self.refuse_sites(exact, f"{what} has an `else` clause, which TorchScript "
                                     "does not support either; not rewritten")
        refusal = self._common_refusal(loop, index, what)
        if refusal is not None:
            return self.defer_sites(exact, refusal)
        nested = [s for s in find_all(loop.body, cst.Subscript)
                  if any(s.value is u for u in exact) and not is_literal_key(
                      single_index(s) or cst.Name("x"))]
        if nested:
            return self.refuse_sites(exact, f"{code_of(nested[0])} in {what}: a nested "
                                     "container indexed by another variable; not rewritten")
        used = {self_attr(node.value, self.self_var) for node in exact}
        # The list the loop is about comes first, the others in their __init__ order.
        attrs = [a for a in self.cls.containers if a in used]
        if element_of is not None:
            keys = {f"exact:{element_of[0]}"}
        else:
            keys = (self.cls.range_keys(length, self.func, self.self_var, self.counts)
                    if length is not None else set())
        lead = [k[6:] for k in sorted(keys) if k.startswith("exact:")]
        if lead:
            attrs = [lead[0]] + [a for a in attrs if a != lead[0]]
        uncovered = [a for a in attrs if not self.cls.covers(keys, a)]
        for attr in uncovered:
            self.defer_sites([n for n in exact if self_attr(n.value, self.self_var) == attr],
                             f"`{code_of(loop.iter)}` in {what} cannot be shown to cover every "
                             f"entry of self.{attr}")
        if len(uncovered) == len(attrs):
            return None
        # The lists the range covers are iterated; the others keep their index (selected).
        attrs = [a for a in attrs if a not in uncovered]
        exact = [n for n in exact if self_attr(n.value, self.self_var) in attrs]
        # Is the index needed besides the replaced subscripts (in the body, or after the loop)?
        replaced = {id(n) for node in exact for n in find_all(node, cst.Name)}
        need_index = self.read_outside(loop, index) or any(
            n.value == index and id(n) not in replaced for n in find_all(loop.body, cst.Name))
        elements: dict[str, str] = {}
        for attr in attrs:
            if element_of is not None and attr == element_of[0]:
                elements[attr] = element_of[1]
                continue
            name = element_name(attr, "list", taken)
            elements[attr] = name
            taken.add(name)
        self.chosen[id(loop)] = set(elements.values())
        views = [f"{self.self_var}.{a}[::-1]" if reverse else f"{self.self_var}.{a}"
                 for a in attrs]
        names = [elements[a] for a in attrs]
        iterable = views[0] if len(views) == 1 else f"zip({', '.join(views)})"
        element_target = names[0] if len(names) == 1 else ", ".join(names)
        prelude = None
        if need_index and reverse:
            counter = fresh_name(f"{index}_rev", taken=taken)
            self.chosen[id(loop)].add(counter)
            target = f"{counter}, {parenthesized(element_target, len(names))}"
            iterable = f"enumerate({iterable})"
            prelude = f"{index} = len({self.self_var}.{attrs[0]}) - 1 - {counter}"
        elif need_index:
            target = f"{index}, {parenthesized(element_target, len(names))}"
            iterable = f"enumerate({iterable})"
        else:
            target = element_target
        self.plan.loops[id(loop)] = LoopPlan(
            self.rule.line_of(loop), header, target, iterable, elements, index,
            set(names) if reverse else set(), prelude, attrs if reverse else [])
        self.fix_sites(exact)

    def reversed_elements(self, loop: cst.For, element: str, attr: str,
                          taken: set[str]) -> None:
        """``for up in reversed(self.ups)``: iterate the reversed slice."""
        header = f"for {element} in {code_of(loop.iter)}"
        what = f"`{header}` (line {self.rule.line_of(loop)})"
        call = loop.iter
        assert isinstance(call, cst.Call)
        message = f"reversed({short_source(call.args[0].value)})"
        refusal = self._common_refusal(loop, element, what)
        if refusal is not None:
            return self.refuse(call, TSF202, message, f"{refusal}; not rewritten")
        self.chosen[id(loop)] = set()
        self.plan.loops[id(loop)] = LoopPlan(
            self.rule.line_of(loop), header, element, f"{self.self_var}.{attr}[::-1]", {}, None,
            {element}, None, [attr])
        self.handled.add(id(call))
        self.plan.fixed.append((call, TSF202, message))

    def dict_keys(self, loop: cst.For, key: str, attr: str, taken: set[str]) -> None:
        """``for name in self.heads:`` whose body indexes ``self.heads[name]``."""
        exact = [s for s in find_all(loop.body, cst.Subscript)
                 if self.container_subscript(s, "dict") == attr
                 and isinstance(single_index(s), cst.Name)
                 and getattr(single_index(s), "value", None) == key]
        if not exact:
            return
        header = f"for {key} in {code_of(loop.iter)}"
        what = f"`{header}` (line {self.rule.line_of(loop)})"
        refusal = self._common_refusal(loop, key, what)
        if refusal is not None:
            return self.refuse_sites(exact, f"{refusal}; not rewritten")
        replaced = {id(n) for node in exact for n in find_all(node, cst.Name)}
        need_key = self.read_outside(loop, key) or any(
            n.value == key and id(n) not in replaced for n in find_all(loop.body, cst.Name))
        element = element_name(attr, "dict", taken)
        self.chosen[id(loop)] = {element}
        if need_key:
            target, iterable = f"{key}, {element}", f"{self.self_var}.{attr}.items()"
        else:
            target, iterable = element, f"{self.self_var}.{attr}.values()"
        self.plan.loops[id(loop)] = LoopPlan(self.rule.line_of(loop), header, target, iterable,
                                             {attr: element}, key, set(), None)
        self.fix_sites(exact)
