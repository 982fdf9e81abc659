"""Unpacked elements: ``for attn, ff in self.layers:`` over a ModuleList of ModuleLists (also
``enumerate`` and ``zip`` of such lists) binds one loop variable per element and picks its
modules by literal index at the top of the body, once the length of every element is proven
from ``__init__``."""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.rules.modulelist_iter._base import MethodState
from tsfix.codemods.rules.modulelist_iter._common import (
    CONTAINER_KINDS,
    TSF216,
    UnpackPlan,
    element_name,
    positional,
)
from tsfix.codemods.rules.modulelist_iter._lengths import ClassAnalysis

# Methods that add entries to a ModuleList (after which an element's length is unknown).
_GROWING = ("append", "extend", "insert")


class UnpackAnalysis(MethodState):
    def unpack(self, loop: cst.For, taken: set[str]) -> None:
        """Plan the rewrite of every tuple target in ``loop``'s header that unpacks an element
        of a module list, or refuse it with the reason."""
        unpacked = [(target, attr) for target, attr in self._element_targets(loop.target,
                                                                             loop.iter)
                    if isinstance(target, cst.Tuple | cst.List)]
        if not unpacked:
            return
        header = f"for {code_of(loop.target)} in {code_of(loop.iter)}"
        what = f"`for {short_source(loop.target)} in {short_source(loop.iter)}` " \
               f"(line {self.rule.line_of(loop)})"
        plan = UnpackPlan(self.rule.line_of(loop), header, {}, [])
        chosen = self.chosen.setdefault(id(loop), set())
        for target, attr in unpacked:
            message = (f"elements of {self.cls.kind_name(attr)} 'self.{attr}' unpacked into "
                       f"{short_source(target)!r}")
            reason = self._refusal(target, attr)
            if reason is not None:
                self.refuse(target, TSF216, message, f"{what}: {reason}; not rewritten")
                continue
            name = element_name(attr, "list", taken)
            taken.add(name)
            chosen.add(name)
            plan.targets[id(target)] = name
            names = [e.value for e in target.elements]
            plan.prelude.extend(f"{code_of(n)} = {name}[{k}]" for k, n in enumerate(names))
            self.plan.fixed.append((target, TSF216, message))
        if plan.targets:
            self.plan.unpacks[id(loop)] = plan

    def _element_targets(self, target: cst.BaseExpression,
                         it: cst.BaseExpression) -> list[tuple[cst.BaseExpression, str]]:
        """(target, attr) for each part of a loop target bound to an element of the module list
        ``self.attr``: the whole target over ``self.layers``, the second of two over
        ``enumerate(...)``, one per list over ``zip(...)``."""
        attr = self_attr(it, self.self_var)
        if attr is not None:
            return [(target, attr)] if self.container_kind(attr) == "list" else []
        if not isinstance(it, cst.Call) or not isinstance(target, cst.Tuple | cst.List):
            return []
        args = positional(it)
        parts = [e.value for e in target.elements]
        if args is None or any(isinstance(e, cst.StarredElement) for e in target.elements):
            return []
        name = get_full_name_for_node(it.func)
        if name == "enumerate" and len(args) == 1 and len(parts) == 2:
            return self._element_targets(parts[1], args[0])
        if name == "zip" and len(args) == len(parts):
            return [pair for part, arg in zip(parts, args, strict=True)
                    for pair in self._element_targets(part, arg)]
        return []

    def _refusal(self, target: cst.Tuple | cst.List, attr: str) -> str | None:
        """Why ``target`` cannot take the elements of ``self.attr`` by index, if it cannot."""
        if not all(isinstance(e.value, cst.Name) and not isinstance(e, cst.StarredElement)
                   for e in target.elements):
            return (f"{short_source(target)!r} is not a tuple of plain names (a starred or "
                    "nested part has no literal-index equivalent)")
        lengths, why = element_lengths(self.cls, attr)
        if why is not None:
            return f"the length of each element of self.{attr} is not proven: {why}"
        wanted = len(target.elements)
        if lengths != {wanted}:
            have = " or ".join(str(n) for n in sorted(lengths)) or "no"
            return (f"the elements of self.{attr} have {have} modules, the target unpacks "
                    f"{wanted}")
        return None


def element_lengths(cls: ClassAnalysis, attr: str) -> tuple[set[int], str | None]:
    """How many modules each element of the module list ``self.attr`` holds, from ``__init__``:
    every element must be a ``ModuleList([...])`` or ``Sequential(...)`` literal, given in the
    constructor or appended in ``__init__``, and nothing else may add to the list. Else the
    reason."""
    if attr in cls.inherited:
        return set(), f"self.{attr} is built by a base class"
    assigned = [a for a in cls.assignments if a.attr == attr]
    if len(assigned) != 1 or assigned[0].method != "__init__" or not isinstance(
            assigned[0].value, cst.Call):
        return set(), cls.not_a_container(attr)
    elements, why = _constructor_elements(assigned[0].value, cls)
    if why is not None:
        return set(), why
    init_self = cls.init_self
    for name, func in cls.methods.items():
        self_var = (init_self if name == "__init__" else self_name(func)) or "self"
        for node in find_all(func.body, cst.AssignTarget, cst.AugAssign):
            target = node.target
            if isinstance(target, cst.Subscript) and self_attr(target.value, self_var) == attr:
                return set(), f"an entry of self.{attr} is assigned in {name}()"
        for call in find_all(func.body, cst.Call):
            growing = call.func
            if not (isinstance(growing, cst.Attribute) and growing.attr.value in _GROWING):
                continue
            receiver = growing.value
            if isinstance(receiver, cst.Subscript):
                receiver = receiver.value
                if self_attr(receiver, self_var) == attr:
                    return set(), f"an element of self.{attr} is changed in {name}()"
            if self_attr(receiver, self_var) != attr:
                continue
            added = positional(call)
            if name != "__init__" or growing.attr.value != "append" or added is None or len(
                    added) != 1:
                return set(), f"`{short_source(call)}` in {name}()"
            elements.append(added[0])
    lengths: set[int] = set()
    for element in elements:
        entry = _entry_that_may_be_none(element, cls)
        if entry is not None:
            # Scripting drops the None entries of a ModuleList: the literal indexes would
            # shift, and pick another module or run past the end (vit-pytorch's simple_uvit).
            return set(), (f"an element holds `{short_source(entry)}`, which may be None, and "
                           "a scripted ModuleList drops its None entries")
        found = _literal_lengths(element, cls)
        if found is None:
            return set(), (f"an element is `{short_source(element)}`, not a ModuleList or "
                           "Sequential literal")
        lengths |= found
    return lengths, None


def _constructor_elements(call: cst.Call, cls: ClassAnalysis,
                          ) -> tuple[list[cst.BaseExpression], str | None]:
    """The elements a list constructor is given (a comprehension's element stands for all)."""
    kind = _container_name(call, cls)
    args = call.args
    if kind is None or CONTAINER_KINDS[kind] != "list":
        return [], f"`{short_source(call)}` is not a ModuleList or Sequential"
    if not args:
        return [], None
    if kind == "Sequential" and all(a.keyword is None and not a.star for a in args):
        return [a.value for a in args], None
    if len(args) == 1 and args[0].keyword is None and (
            (kind == "Sequential" and args[0].star == "*")
            or (kind == "ModuleList" and not args[0].star)):
        value = args[0].value
        if isinstance(value, cst.List | cst.Tuple) and not any(
                isinstance(e, cst.StarredElement) for e in value.elements):
            return [e.value for e in value.elements], None
        if isinstance(value, cst.ListComp | cst.GeneratorExp):
            return [value.elt], None
    return [], f"its elements come from `{short_source(call)}`"


def _literal_lengths(expr: cst.BaseExpression, cls: ClassAnalysis) -> set[int] | None:
    """The module count of a ``ModuleList([...])`` / ``Sequential(...)`` literal (both
    branches of a conditional expression), or None."""
    if isinstance(expr, cst.IfExp):
        body, orelse = _literal_lengths(expr.body, cls), _literal_lengths(expr.orelse, cls)
        return None if body is None or orelse is None else body | orelse
    if not isinstance(expr, cst.Call) or _container_name(expr, cls) is None:
        return None
    elements, why = _constructor_elements(expr, cls)
    if why is not None or any(isinstance(e, cst.Call) and (
            get_full_name_for_node(e.func) or "").endswith("OrderedDict") for e in elements):
        return None
    comprehension = any(isinstance(a.value, cst.ListComp | cst.GeneratorExp) for a in expr.args)
    return None if comprehension else {len(elements)}


def _entry_that_may_be_none(expr: cst.BaseExpression,
                            cls: ClassAnalysis) -> cst.BaseExpression | None:
    """An entry of the container literal ``expr`` (either branch of a conditional expression)
    that is None or may be None, if there is one."""
    if isinstance(expr, cst.IfExp):
        return (_entry_that_may_be_none(expr.body, cls)
                or _entry_that_may_be_none(expr.orelse, cls))
    if not isinstance(expr, cst.Call) or _container_name(expr, cls) is None:
        return None
    entries, _ = _constructor_elements(expr, cls)
    return next((entry for entry in entries if _may_be_none(entry)), None)


def _may_be_none(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.IfExp):
        return _may_be_none(expr.body) or _may_be_none(expr.orelse)
    return isinstance(expr, cst.Name) and expr.value == "None"


def _container_name(call: cst.Call, cls: ClassAnalysis) -> str | None:
    """``ModuleList``, ``Sequential`` or ``ModuleDict`` when ``call`` builds one from torch.nn."""
    qual = qualified_name(call.func, cls.imports) or ""
    head, _, last = qual.rpartition(".")
    if last in CONTAINER_KINDS and (head == "torch.nn" or head.startswith("torch.nn.")):
        return last
    return None
