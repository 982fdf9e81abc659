"""Container lengths: which attributes are module containers, and what their length provably
equals, in ``__init__`` terms (a constructor argument, ``len()`` of a list, a literal count)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.syntax import (
    find_all,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
)
from tsfix.codemods.rules.modulelist_iter._common import (
    CONTAINER_KINDS,
    Container,
    binding_counts,
    call_name,
    int_value,
    positional,
    source_key,
)


class ClassAnalysis:
    """What modulelist-iter knows about one class: its containers and their lengths."""

    def __init__(self, facts: ClassFacts, imports: Mapping[str, str],
                 tensor_name: str | None,
                 inherited: Mapping[str, tuple[str, str]] | None = None,
                 unresolved_bases: Sequence[str] = ()) -> None:
        self.facts = facts
        self.unresolved_bases = list(unresolved_bases)
        self.name = facts.name
        self.imports = dict(imports)
        self.tensor_name = tensor_name
        self.methods = facts.methods
        self.init = facts.init
        self.assignments = facts.assignments
        self.init_self = (self_name(self.init) if self.init else None) or "self"
        self.init_counts = binding_counts(self.init) if self.init else {}
        self.containers: dict[str, Container] = {}
        self.containers = self._containers()
        # Containers a base class builds (attr -> kind name, base), for attributes this class
        # never assigns. Their lengths are in the base's terms: only ``len(self.x)`` covers them.
        assigned = {a.attr for a in self.assignments}
        self.inherited = {attr: kind for attr, kind in (inherited or {}).items()
                          if attr not in assigned}
        for attr, (kind, _) in self.inherited.items():
            self.containers[attr] = Container(attr, CONTAINER_KINDS[kind])

    # ---- which attributes are containers ----------------------------------------------------

    def _containers(self) -> dict[str, Container]:
        # Kinds first: a length may be written as len(self.<another container>).
        found: dict[str, Container] = {}
        self.containers = found
        by_attr = self._values_by_attr()
        for attr, values in by_attr.items():
            kinds = {self._container_kind(v) for v in values}
            if len(kinds) != 1 or None in kinds:
                continue
            kind = kinds.pop()
            assert kind is not None
            found[attr] = Container(attr, kind)
        for attr, container in found.items():
            value = by_attr[attr][0]
            if container.kind == "list" and len(by_attr[attr]) == 1:
                assert isinstance(value, cst.Call)
                container.keys = self._list_length_keys(attr, value)
        return found

    def _values_by_attr(self) -> dict[str, list[cst.BaseExpression | None]]:
        """attr -> the value of each assignment (None: outside ``__init__`` or not plain)."""
        by_attr: dict[str, list[cst.BaseExpression | None]] = {}
        for a in self.assignments:
            by_attr.setdefault(a.attr, []).append(a.value if a.method == "__init__" else None)
        return by_attr

    def _container_kind(self, value: cst.BaseExpression | None) -> str | None:
        if not isinstance(value, cst.Call):
            return None
        qual = qualified_name(value.func, self.imports) or ""
        head, _, last = qual.rpartition(".")
        if last in CONTAINER_KINDS and (head == "torch.nn" or head.startswith("torch.nn.")):
            return CONTAINER_KINDS[last]
        return None

    def kind_name(self, attr: str) -> str:
        """``ModuleList``, ``Sequential`` or ``ModuleDict``, as ``tsfix check`` names it."""
        named = self.facts.containers.get(attr)
        if named is not None:
            return named
        if attr in self.inherited:
            return self.inherited[attr][0]
        container = self.containers.get(attr)
        return "ModuleDict" if container is not None and container.kind == "dict" else "ModuleList"

    def not_a_container(self, attr: str) -> str:
        """Why an attribute the facts call a container is not one this rule can rewrite."""
        for a in self.assignments:
            if a.attr == attr and a.method != "__init__":
                return f"self.{attr} is also assigned in {a.method}()"
        values = self._values_by_attr().get(attr, [])
        if any(self._container_kind(v) is None for v in values):
            return (f"self.{attr} is not always a torch.nn ModuleList, Sequential or ModuleDict "
                    "in __init__")
        return f"self.{attr} is given containers of different kinds in __init__"

    # ---- how long a list is -------------------------------------------------------------------

    def _list_length_keys(self, attr: str, call: cst.Call) -> set[str]:
        args = call.args
        constructor = (qualified_name(call.func, self.imports) or "").rpartition(".")[2]
        if not args:
            return self._appended_length_keys(attr)
        if len(args) == 1 and args[0].keyword is None:
            value = args[0].value
            if args[0].star == "*" or constructor == "ModuleList":
                if isinstance(value, cst.ListComp | cst.GeneratorExp):
                    comp = value.for_in
                    if comp.ifs or comp.inner_for_in is not None:
                        return set()
                    return self._iter_length_keys(comp.iter)
                if isinstance(value, cst.List | cst.Tuple):
                    if any(isinstance(e, cst.StarredElement) for e in value.elements):
                        return set()
                    return {str(len(value.elements))}
                return set()
        if constructor == "Sequential" and all(a.keyword is None and not a.star
                                                    for a in args):
            if len(args) == 1 and isinstance(args[0].value, cst.Call) and (
                    (call_name(args[0].value) or "").endswith("OrderedDict")):
                return set()
            return {str(len(args))}
        return set()

    def _appended_length_keys(self, attr: str) -> set[str]:
        """``self.x = nn.ModuleList()`` then ``self.x.append(...)`` once per iteration of one
        top-level ``for`` loop of ``__init__``."""
        if self.init is None or not isinstance(self.init.body, cst.IndentedBlock):
            return set()
        self_var = self.init_self
        uses = [c for c in find_all(self.init.body, cst.Call)
                if isinstance(c.func, cst.Attribute)
                and self_attr(c.func.value, self_var) == attr]
        if not uses or any(c.func.attr.value != "append" for c in uses):
            return set()
        for statement in self.init.body.body:
            if not isinstance(statement, cst.For) or statement.orelse is not None:
                continue
            if not isinstance(statement.body, cst.IndentedBlock):
                continue
            direct = [c for line in statement.body.body
                      if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
                      and isinstance(line.body[0], cst.Expr)
                      for c in [line.body[0].value] if any(c is u for u in uses)]
            if len(direct) == len(uses):
                if find_all(statement.body, cst.Break, cst.Continue):
                    return set()
                return self._iter_length_keys(statement.iter)
        return set()

    def _iter_length_keys(self, expr: cst.BaseExpression) -> set[str]:
        """What the number of items ``expr`` yields in ``__init__`` provably equals."""
        if isinstance(expr, cst.Call):
            args = positional(expr)
            name = get_full_name_for_node(expr.func)
            if name == "range" and args is not None and (
                    len(args) == 1 or (len(args) == 2 and int_value(args[0]) == 0)):
                return self._init_value_keys(args[-1])
            if name == "enumerate" and args is not None and len(args) == 1:
                return self._iter_length_keys(args[0])
            return set()
        if isinstance(expr, cst.List | cst.Tuple):
            if any(isinstance(e, cst.StarredElement) for e in expr.elements):
                return set()
            return {str(len(expr.elements))}
        if isinstance(expr, cst.Name | cst.Attribute) and self._stable_in_init(expr):
            return {f"len({source_key(expr)})"}
        return set()

    def _init_value_keys(self, expr: cst.BaseExpression) -> set[str]:
        """Keys for an int computed in ``__init__``: its own text, and what it was assigned."""
        value = int_value(expr)
        if value is not None:
            return {str(value)}
        if isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "len":
            args = positional(expr)
            if args and len(args) == 1:
                attr = self_attr(args[0], self.init_self)
                if attr is not None and attr in self.containers:
                    return {f"exact:{attr}"}
                if attr is not None:
                    return set()
        if not self._stable_in_init(expr):
            return set()
        keys = {source_key(expr)}
        attr = self_attr(expr, self.init_self)
        if attr is not None:
            keys |= self._attribute_keys(attr)
        return keys

    def _attribute_keys(self, attr: str) -> set[str]:
        """``self.attr`` assigned once, in ``__init__``: the keys of the value it was given."""
        assigned = [a for a in self.assignments if a.attr == attr]
        if (len(assigned) != 1 or assigned[0].method != "__init__"
                or assigned[0].value is None):
            return set()
        return {f"self.{attr}"} | self._init_value_keys(assigned[0].value)

    def _stable_in_init(self, expr: cst.BaseExpression) -> bool:
        """Every name in ``expr`` is bound once in ``__init__`` (so two reads agree)."""
        for name in find_all(expr, cst.Name):
            if name.value == self.init_self or name.value in ("len", "range"):
                continue
            if self.init_counts.get(name.value, 0) > 1:
                return False
        for node in find_all(expr, cst.Attribute):
            attr = self_attr(node, self.init_self)
            if attr is not None and len([a for a in self.assignments if a.attr == attr]) > 1:
                return False
        return not find_all(expr, cst.Call) or (
            isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "len")

    # ---- what a range in a compiled method covers ------------------------------------------

    def range_keys(self, expr: cst.BaseExpression, func: cst.FunctionDef, self_var: str,
                   counts: dict[str, int], depth: int = 0) -> set[str]:
        """What the int ``expr`` in a compiled method provably equals, in ``__init__`` terms."""
        value = int_value(expr)
        if value is not None:
            return {str(value)}
        if isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "len":
            args = positional(expr)
            if args and len(args) == 1:
                attr = self_attr(args[0], self_var)
                if attr is not None and attr in self.containers:
                    return {f"exact:{attr}"}
            return set()
        attr = self_attr(expr, self_var)
        if attr is not None:
            return self._attribute_keys(attr)
        if isinstance(expr, cst.Name) and depth < 4 and counts.get(expr.value) == 1 and (
                expr.value not in parameters_of(func)):
            for node in find_all(func.body, cst.Assign):
                if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                        and node.targets[0].target.value == expr.value):
                    return self.range_keys(node.value, func, self_var, counts, depth + 1)
        return set()

    def covers(self, keys: set[str], attr: str) -> bool:
        if f"exact:{attr}" in keys:
            return True
        wanted = self.containers[attr].keys
        if keys & wanted:
            return True
        return any(k.startswith("exact:") and self.containers[k[6:]].keys & wanted
                   for k in keys)
