"""``modulelist-iter``: ModuleList / Sequential / ModuleDict indexing becomes iteration.

What it does
    Finds loops in ``forward()`` (and the methods it calls) that index a ``nn.ModuleList`` or
    ``nn.Sequential`` attribute with the loop variable, and iterates the container instead::

        for i in range(len(self.layers)):        ->  for layer in self.layers:
            x = self.layers[i](x)                        x = layer(x)

    The range may be ``range(len(self.layers))``, ``range(self.num_layers)`` or ``range(n)`` when
    ``n`` provably equals the list's length (both come from the same constructor argument,
    ``len(...)`` of the same list, or the same literal count). Several containers indexed by the
    same variable are zipped (``zip(self.convs, self.norms)``); when the index is also used for
    something else (``hidden[i]``), it is kept with ``enumerate``. Reverse traversal
    (``reversed(range(len(self.ups)))``, ``range(len(self.ups) - 1, -1, -1)``,
    ``reversed(self.ups)``) iterates the reversed slice ``self.ups[::-1]`` and calls its elements
    through ``.forward(...)``; a kept index is recomputed as ``len(self.ups) - 1 - i_rev``.
    ``for i, layer in enumerate(self.layers)`` loops that index another list with ``i`` zip it
    in, and ``for name in self.heads`` loops over a ``nn.ModuleDict`` that index it with ``name``
    iterate ``.items()`` (or ``.values()``).
    A ``nn.ModuleDict`` called with a variable key (``self.heads[task](x)``) becomes a loop over
    ``.items()`` that compares the name, with the result initialised before the loop and
    ``KeyError(task)`` (what the dict itself raises) when no name matched::

        head_out: Optional[torch.Tensor] = None
        for name, head in self.heads.items():
            if name == task:
                head_out = head(x)
        if head_out is None:
            raise KeyError(task)
        return head_out

    Containers are recognised from their assignment in ``__init__`` (``nn.ModuleList(...)``,
    ``torch.nn.Sequential(*[...])``, ``ModuleDict`` imported from ``torch.nn``, or an empty
    ``nn.ModuleList()`` filled by ``append`` in one ``for`` loop). Loop variables are named after
    the attribute (``self.layers`` -> ``layer``, ``self.downs`` -> ``down``, ``self.body`` ->
    ``body_layer``) and never shadow a name the method already uses.

Why it breaks export
    TorchScript compiles a loop over a module container by unrolling it, one copy of the body per
    submodule, so it only indexes a ModuleList or Sequential with an integer literal:
    ``self.layers[i]`` fails ("Expected integer literal for index") even inside
    ``for i in range(3)``, and a ModuleDict only takes a string literal key. Iterating the
    container (``for``, ``zip``, ``enumerate``, ``.items()``) is supported. Neither
    ``reversed(self.layers)`` nor ``zip`` with a ``range()`` scripts; a slice does, but its
    elements must be called through ``.forward``.

Example
    Before::

        for i in range(len(self.layers)):
            x = self.norms[i](x + self.layers[i](x))
            hidden.append(x * self.scales[i])

    After::

        for i, (layer, norm) in enumerate(zip(self.layers, self.norms)):
            x = norm(x + layer(x))
            hidden.append(x * self.scales[i])

Fix safety
    Parameter names are unchanged (the modules are not moved), so existing checkpoints load
    strictly. The loop visits exactly the entries the index visited: the range must provably cover
    every entry of each indexed container (same length source in ``__init__``), otherwise the loop
    is left alone. Not rewritten, with the reason reported: ``break``/``continue`` in the loop
    (TorchScript cannot unroll them), ``for ... else``, a reassigned loop variable, offsets
    (``self.layers[i - 1]``), a range that cannot be shown to cover the whole list, nested
    containers indexed by two variables, and indexing outside such loops with computed values.
    Reversed slices call elements through ``.forward(...)``, which skips forward hooks registered
    on those submodules in eager mode (TorchScript never runs hooks on them); each such rewrite
    says so in its notes. The ModuleDict rewrite assumes the selected module returns a Tensor
    (``Optional[torch.Tensor]``); if it returns something else, re-script fails and validation
    rejects the rewrite rather than writing it. A missing key still raises ``KeyError(key)``,
    after evaluating nothing.
"""

from __future__ import annotations

import itertools
import keyword
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import (
    attribute_assignments,
    code_of,
    find_all,
    import_map,
    methods_of,
    names_used,
    parameters_of,
    qualified_name,
    reachable_methods,
    self_attr,
    self_name,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_CONTAINERS = {"ModuleList": "list", "Sequential": "list", "ModuleDict": "dict"}


def _key(node: cst.CSTNode) -> str:
    """Source text without whitespace: two expressions written alike have the same key."""
    return "".join(code_of(node).split())


def _singular(attr: str) -> str:
    base = attr.lstrip("_") or attr
    for suffix in ("_list", "_dict", "List", "Dict"):
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    if base.endswith("ies") and len(base) > 3:
        return base[:-3] + "y"
    if base.endswith(("sses", "xes", "ches", "shes")):
        return base[:-2]
    if base.endswith("s") and not base.endswith(("ss", "us", "is")) and len(base) > 1:
        return base[:-1]
    return ""


def _element_name(attr: str, kind: str, taken: set[str]) -> str:
    """``layers`` -> ``layer``, else ``layer_module``, ``layer2``...; ``body`` -> ``body_layer``
    (``body_module`` for a ModuleDict)."""
    plain = attr.lstrip("_") or attr
    suffix = "_layer" if kind == "list" else "_module"
    singular = _singular(attr)
    if singular:
        return _fresh(singular, taken, singular + ("_module" if kind == "list" else "_item"))
    return _fresh(plain + suffix, taken, plain + suffix)


def _fresh(preferred: str, taken: set[str], fallback: str) -> str:
    for candidate in (preferred, fallback):
        if candidate and candidate not in taken and not keyword.iskeyword(candidate):
            return candidate
    n = 2
    while f"{fallback}{n}" in taken:
        n += 1
    return f"{fallback}{n}"


def _call_name(expr: cst.BaseExpression) -> str | None:
    return get_full_name_for_node(expr.func) if isinstance(expr, cst.Call) else None


def _int_value(expr: cst.BaseExpression) -> int | None:
    if isinstance(expr, cst.Integer):
        return int(expr.value)
    if (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
            and isinstance(expr.expression, cst.Integer)):
        return -int(expr.expression.value)
    return None


def _positional(call: cst.Call) -> list[cst.BaseExpression] | None:
    """The arguments of ``call`` when they are all plain positional ones."""
    if any(a.keyword is not None or a.star for a in call.args):
        return None
    return [a.value for a in call.args]


def _single_index(node: cst.Subscript) -> cst.BaseExpression | None:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None


def _is_literal_key(expr: cst.BaseExpression) -> bool:
    return _int_value(expr) is not None or isinstance(expr, cst.SimpleString |
                                                       cst.ConcatenatedString)


@dataclass
class _Container:
    attr: str
    kind: str                       # "list" (ModuleList / Sequential) or "dict"
    keys: set[str] = field(default_factory=set)   # what its length provably equals


@dataclass
class _LoopPlan:
    line: int
    old_header: str
    header_target: str
    header_iter: str
    subs: dict[str, str]            # container attr -> element name replacing self.attr[index]
    index: str | None               # the loop variable whose subscripts are replaced
    forward_calls: set[str]         # element names called through .forward(...)
    prelude: str | None             # statement inserted at the top of the body
    reverse_attrs: list[str] = field(default_factory=list)


@dataclass
class _Hoist:
    line: int
    attr: str
    key: str
    result: str
    name: str
    element: str
    tensor: str


@dataclass
class _MethodPlan:
    loops: dict[int, _LoopPlan] = field(default_factory=dict)
    hoists: dict[int, _Hoist] = field(default_factory=dict)


def _binding_counts(func: cst.FunctionDef) -> dict[str, int]:
    """How often each plain name is bound in ``func`` (parameters, assignments, for targets)."""
    counts: dict[str, int] = {}

    def bump(target: cst.BaseExpression) -> None:
        for name in find_all(target, cst.Name):
            counts[name.value] = counts.get(name.value, 0) + 1

    for name in parameters_of(func):
        counts[name] = counts.get(name, 0) + 1
    for node in find_all(func.body, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.NamedExpr, cst.AsName):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name | cst.Tuple | cst.List):
                    bump(target.target)
        elif isinstance(node, cst.AnnAssign | cst.AugAssign | cst.For | cst.NamedExpr):
            if isinstance(node.target, cst.Name | cst.Tuple | cst.List):
                bump(node.target)
        elif isinstance(node.name, cst.Name):
            bump(node.name)
    return counts


class _ClassAnalysis:
    def __init__(self, rule: ModuleListIter, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.name = cls.name.value
        self.methods = methods_of(cls)
        self.init = self.methods.get("__init__")
        self.assignments = attribute_assignments(cls)
        self.init_self = (self_name(self.init) if self.init else None) or "self"
        self.init_counts = _binding_counts(self.init) if self.init else {}
        self.containers: dict[str, _Container] = self._containers()

    # ---- __init__: which attributes are containers, and how long --------------------------------

    def _containers(self) -> dict[str, _Container]:
        # Kinds first: a length may be written as len(self.<another container>).
        found: dict[str, _Container] = {}
        self.containers = found
        by_attr: dict[str, list[cst.BaseExpression | None]] = {}
        for a in self.assignments:
            by_attr.setdefault(a.attr, []).append(a.value if a.method == "__init__" else None)
        for attr, values in by_attr.items():
            kinds = {self._container_kind(v) for v in values}
            if len(kinds) != 1 or None in kinds:
                continue
            kind = kinds.pop()
            assert kind is not None
            found[attr] = _Container(attr, kind)
        for attr, container in found.items():
            value = by_attr[attr][0]
            if container.kind == "list" and len(by_attr[attr]) == 1:
                assert isinstance(value, cst.Call)
                container.keys = self._list_length_keys(attr, value)
        return found

    def _container_kind(self, value: cst.BaseExpression | None) -> str | None:
        if not isinstance(value, cst.Call):
            return None
        qual = qualified_name(value.func, self.rule.imports) or ""
        head, _, last = qual.rpartition(".")
        if last in _CONTAINERS and (head == "torch.nn" or head.startswith("torch.nn.")):
            return _CONTAINERS[last]
        return None

    def _list_length_keys(self, attr: str, call: cst.Call) -> set[str]:
        args = call.args
        constructor = (qualified_name(call.func, self.rule.imports) or "").rpartition(".")[2]
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
                    (_call_name(args[0].value) or "").endswith("OrderedDict")):
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
            args = _positional(expr)
            name = get_full_name_for_node(expr.func)
            if name == "range" and args is not None and (
                    len(args) == 1 or (len(args) == 2 and _int_value(args[0]) == 0)):
                return self._init_value_keys(args[-1])
            if name == "enumerate" and args is not None and len(args) == 1:
                return self._iter_length_keys(args[0])
            return set()
        if isinstance(expr, cst.List | cst.Tuple):
            if any(isinstance(e, cst.StarredElement) for e in expr.elements):
                return set()
            return {str(len(expr.elements))}
        if isinstance(expr, cst.Name | cst.Attribute) and self._stable_in_init(expr):
            return {f"len({_key(expr)})"}
        return set()

    def _init_value_keys(self, expr: cst.BaseExpression) -> set[str]:
        """Keys for an int computed in ``__init__``: its own text, and what it was assigned."""
        value = _int_value(expr)
        if value is not None:
            return {str(value)}
        if isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "len":
            args = _positional(expr)
            if args and len(args) == 1:
                attr = self_attr(args[0], self.init_self)
                if attr is not None and attr in self.containers:
                    return {f"exact:{attr}"}
                if attr is not None:
                    return set()
        if not self._stable_in_init(expr):
            return set()
        keys = {_key(expr)}
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

    # ---- compiled methods ----------------------------------------------------------------------

    def compiled_methods(self) -> list[str]:
        names = reachable_methods(self.methods)
        for name, func in self.methods.items():
            exported = any((get_full_name_for_node(d.decorator) or "").endswith("jit.export")
                           for d in func.decorators)
            if exported:
                for callee in reachable_methods(self.methods, name):
                    if callee not in names:
                        names.append(callee)
        return [n for n in names if self_name(self.methods[n]) is not None]

    def range_keys(self, expr: cst.BaseExpression, func: cst.FunctionDef, self_var: str,
                   counts: dict[str, int], depth: int = 0) -> set[str]:
        """What the int ``expr`` in a compiled method provably equals, in ``__init__`` terms."""
        value = _int_value(expr)
        if value is not None:
            return {str(value)}
        if isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "len":
            args = _positional(expr)
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


class _MethodAnalysis:
    """Plans the rewrites of one compiled method and records why the rest is left alone."""

    def __init__(self, cls: _ClassAnalysis, func: cst.FunctionDef) -> None:
        self.cls = cls
        self.rule = cls.rule
        self.func = func
        self.self_var = self_name(func) or "self"
        self.counts = _binding_counts(func)
        self.names = names_used(func)
        self.plan = _MethodPlan()
        self.handled: set[int] = set()      # ids of subscripts a plan or a skip accounts for
        self.chosen: dict[int, set[str]] = {}   # loop id -> names it introduced

    def container_subscript(self, node: cst.CSTNode, kind: str) -> str | None:
        if not isinstance(node, cst.Subscript):
            return None
        attr = self_attr(node.value, self.self_var)
        if attr is None or attr not in self.cls.containers:
            return None
        return attr if self.cls.containers[attr].kind == kind else None

    def skip(self, node: cst.CSTNode, reason: str) -> None:
        if not any(s.reason == reason and s.class_name == self.cls.name for s in self.rule.skips):
            self.rule.skip(self.cls.name, node, reason)

    def analyse(self) -> _MethodPlan:
        loops = find_all(self.func.body, cst.For)
        self.block_of = {id(statement): id(block)
                         for block in find_all(self.func.body, cst.IndentedBlock)
                         for statement in block.body}
        for loop in loops:
            self.loop(loop, self.taken_names(loop, loops))
        self.hoist_dict_calls()
        self.report_leftovers()
        return self.plan

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
                   if other is not loop and name in _bound_names(other)
                   for n in find_all(other, cst.Name)}
        attribute_names = {id(a.attr) for a in find_all(self.func.body, cst.Attribute)}
        return any(n.value == name and id(n) not in own and id(n) not in rebound
                   and id(n) not in attribute_names for n in find_all(self.func.body, cst.Name))

    # ---- loops --------------------------------------------------------------------------------

    def loop(self, loop: cst.For, taken: set[str]) -> None:
        target, it = loop.target, loop.iter
        if isinstance(target, cst.Name) and isinstance(it, cst.Call):
            name = get_full_name_for_node(it.func)
            args = _positional(it) or []
            if name == "reversed" and len(args) == 1:
                attr = self_attr(args[0], self.self_var)
                if attr in self.cls.containers and self.cls.containers[attr].kind == "list":
                    self.reversed_elements(loop, target.value, attr, taken)
                    return
                inner = args[0]
                if isinstance(inner, cst.Call) and get_full_name_for_node(inner.func) == "range":
                    inner_args = _positional(inner)
                    if inner_args is not None and (len(inner_args) == 1 or (
                            len(inner_args) == 2 and _int_value(inner_args[0]) == 0)):
                        self.indexed(loop, target.value, inner_args[-1], True, None, taken)
                        return
                self.indexed(loop, target.value, None, True, None, taken)
                return
            if name == "range":
                if len(args) == 1 or (len(args) == 2 and _int_value(args[0]) == 0):
                    self.indexed(loop, target.value, args[-1], False, None, taken)
                    return
                if (len(args) == 3 and _int_value(args[1]) == -1 and _int_value(args[2]) == -1
                        and isinstance(args[0], cst.BinaryOperation)
                        and isinstance(args[0].operator, cst.Subtract)
                        and _int_value(args[0].right) == 1):
                    self.indexed(loop, target.value, args[0].left, True, None, taken)
                    return
                self.indexed(loop, target.value, None, False, None, taken)
                return
        if (isinstance(target, cst.Tuple) and len(target.elements) == 2
                and all(isinstance(e.value, cst.Name) for e in target.elements)
                and isinstance(it, cst.Call) and get_full_name_for_node(it.func) == "enumerate"):
            enumerated = _positional(it)
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
            value = _single_index(node)
            if isinstance(value, cst.Name) and value.value == index:
                exact.append(node)
            elif value is None or any(n.value == index for n in find_all(value, cst.Name)):
                offset.append(node)
        return exact, offset

    def _common_refusal(self, loop: cst.For, index: str, what: str) -> str | None:
        own = _own_jumps(loop.body)
        if own:
            word = "break" if isinstance(own[0], cst.Break) else "continue"
            return (f"{what} has `{word}` in its body: TorchScript unrolls a loop over a "
                    "module container and cannot unroll break/continue; not rewritten")
        if loop.orelse is not None:
            return f"{what} has an `else` clause; not rewritten"
        rebinds = [n for n in find_all(loop.body, cst.Assign, cst.AugAssign, cst.AnnAssign,
                                       cst.For, cst.NamedExpr) if index in _bound_names(n)]
        if rebinds:
            return f"{what} reassigns `{index}` in its body; not rewritten"
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
        for node in exact + offset:
            self.handled.add(id(node))
        if offset:
            return self.skip(loop, f"{code_of(offset[0])} in {what}: an index computed from the "
                             "loop variable has no iteration equivalent; not rewritten")
        refusal = self._common_refusal(loop, index, what)
        if refusal is not None:
            return self.skip(loop, refusal)
        nested = [s for s in find_all(loop.body, cst.Subscript)
                  if any(s.value is u for u in exact) and not _is_literal_key(
                      _single_index(s) or cst.Name("x"))]
        if nested:
            return self.skip(loop, f"{code_of(nested[0])} in {what}: a nested container indexed "
                             "by another variable; not rewritten")
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
        for attr in attrs:
            if not self.cls.covers(keys, attr):
                return self.skip(loop, f"`{code_of(loop.iter)}` in {what} cannot be shown to "
                                 f"cover every entry of self.{attr}; not rewritten")
        # Is the index needed besides the replaced subscripts (in the body, or after the loop)?
        replaced = {id(n) for node in exact for n in find_all(node, cst.Name)}
        need_index = self.read_outside(loop, index) or any(
            n.value == index and id(n) not in replaced for n in find_all(loop.body, cst.Name))
        elements: dict[str, str] = {}
        for attr in attrs:
            if element_of is not None and attr == element_of[0]:
                elements[attr] = element_of[1]
                continue
            name = _element_name(attr, "list", taken)
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
            counter = _fresh(f"{index}_rev", taken, f"{index}_rev")
            self.chosen[id(loop)].add(counter)
            target = f"{counter}, {_parenthesized(element_target, len(names))}"
            iterable = f"enumerate({iterable})"
            prelude = f"{index} = len({self.self_var}.{attrs[0]}) - 1 - {counter}"
        elif need_index:
            target = f"{index}, {_parenthesized(element_target, len(names))}"
            iterable = f"enumerate({iterable})"
        else:
            target = element_target
        self.plan.loops[id(loop)] = _LoopPlan(
            self.rule.line_of(loop), header, target, iterable, elements, index,
            set(names) if reverse else set(), prelude, attrs if reverse else [])

    def reversed_elements(self, loop: cst.For, element: str, attr: str,
                          taken: set[str]) -> None:
        """``for up in reversed(self.ups)``: iterate the reversed slice."""
        header = f"for {element} in {code_of(loop.iter)}"
        what = f"`{header}` (line {self.rule.line_of(loop)})"
        refusal = self._common_refusal(loop, element, what)
        if refusal is not None:
            return self.skip(loop, refusal)
        self.chosen[id(loop)] = set()
        self.plan.loops[id(loop)] = _LoopPlan(
            self.rule.line_of(loop), header, element, f"{self.self_var}.{attr}[::-1]", {}, None,
            {element}, None, [attr])

    def dict_keys(self, loop: cst.For, key: str, attr: str, taken: set[str]) -> None:
        """``for name in self.heads:`` whose body indexes ``self.heads[name]``."""
        exact = [s for s in find_all(loop.body, cst.Subscript)
                 if self.container_subscript(s, "dict") == attr
                 and isinstance(_single_index(s), cst.Name)
                 and getattr(_single_index(s), "value", None) == key]
        if not exact:
            return
        for node in exact:
            self.handled.add(id(node))
        header = f"for {key} in {code_of(loop.iter)}"
        what = f"`{header}` (line {self.rule.line_of(loop)})"
        refusal = self._common_refusal(loop, key, what)
        if refusal is not None:
            return self.skip(loop, refusal)
        replaced = {id(n) for node in exact for n in find_all(node, cst.Name)}
        need_key = self.read_outside(loop, key) or any(
            n.value == key and id(n) not in replaced for n in find_all(loop.body, cst.Name))
        element = _element_name(attr, "dict", taken)
        self.chosen[id(loop)] = {element}
        if need_key:
            target, iterable = f"{key}, {element}", f"{self.self_var}.{attr}.items()"
        else:
            target, iterable = element, f"{self.self_var}.{attr}.values()"
        self.plan.loops[id(loop)] = _LoopPlan(self.rule.line_of(loop), header, target, iterable,
                                              {attr: element}, key, set(), None)

    # ---- ModuleDict with a variable key -------------------------------------------------------

    def hoist_dict_calls(self) -> None:
        taken = set(self.names) | {n for names in self.chosen.values() for n in names}
        results: set[str] = set()
        loop_names: dict[int | None, set[str]] = {}   # block -> names its lookup loops bind
        for line in find_all(self.func.body, cst.SimpleStatementLine, cst.If, cst.While,
                             cst.For):
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
                     and not _is_literal_key(_single_index(s) or cst.Name("x"))]
            if not found:
                continue
            for node in found:
                self.handled.add(id(node))
            first = found[0]
            attr = self_attr(first.value, self.self_var)
            assert attr is not None
            where = f"{code_of(first)} (line {self.rule.line_of(first)})"
            reason = self._hoist_refusal(line, region, found, id(line) in self.block_of)
            if reason is not None:
                self.skip(first, f"{where}: {reason}; not rewritten")
                continue
            tensor = self.rule.tensor_name
            if tensor is None:
                self.skip(first, f"{where}: the file imports neither torch nor Tensor, so the "
                          "result cannot be typed; not rewritten")
                continue
            # Loop names may repeat across lookups; each result is declared once.
            base = _singular(attr) or f"{attr.lstrip('_') or attr}"
            block = self.block_of.get(id(line))
            avoid = taken | results | {n for b, names in loop_names.items() if b != block
                                       for n in names}
            element = _element_name(attr, "dict", avoid)
            name = _fresh("name", avoid | {element}, f"{base}_name")
            every_loop_name = {n for names in loop_names.values() for n in names}
            result = _fresh(f"{base}_out", avoid | every_loop_name | {element, name},
                            f"{base}_out")
            results.add(result)
            loop_names.setdefault(block, set()).update((element, name))
            index = _single_index(first)
            assert index is not None
            self.plan.hoists[id(line)] = _Hoist(self.rule.line_of(first), attr, code_of(index),
                                                result, name, element, tensor)

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
        index = _single_index(subscript)
        if index is None or find_all(index, cst.Call):
            return "the key is computed by a call"
        path = _path_to(region, calls[0])
        for parent, child in itertools.pairwise(path):
            if isinstance(parent, cst.Lambda | cst.ListComp | cst.SetComp | cst.DictComp |
                          cst.GeneratorExp):
                return "the lookup is inside a lambda or comprehension"
            if isinstance(parent, cst.IfExp) and child is not parent.test:
                return "the lookup is inside a conditional expression"
            if isinstance(parent, cst.BooleanOperation) and child is parent.right:
                return "the lookup is evaluated only conditionally (and/or)"
        return None

    def report_leftovers(self) -> None:
        for node in find_all(self.func.body, cst.Subscript):
            if id(node) in self.handled or self.container_subscript(node, "list") is None:
                continue
            index = _single_index(node)
            if index is not None and _is_literal_key(index):
                continue
            self.handled.add(id(node))
            self.skip(node, f"{code_of(node)} (line {self.rule.line_of(node)}) is indexed with a "
                      "computed value outside a loop over the whole list; TorchScript needs an "
                      "integer literal and no iteration is equivalent; not rewritten")


def _parenthesized(target: str, count: int) -> str:
    return f"({target})" if count > 1 else target


def _bound_names(node: cst.CSTNode) -> set[str]:
    """Plain names an assignment-like statement binds (not ``x[i] = ...`` or ``x.a = ...``)."""
    targets: list[cst.BaseExpression] = []
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, cst.AugAssign | cst.AnnAssign | cst.For | cst.NamedExpr):
        targets = [node.target]
    found: set[str] = set()
    while targets:
        target = targets.pop()
        if isinstance(target, cst.Name):
            found.add(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            targets.extend(e.value for e in target.elements)
        elif isinstance(target, cst.StarredElement):
            targets.append(target.value)
    return found


def _own_jumps(body: cst.CSTNode) -> list[cst.CSTNode]:
    """``break``/``continue`` statements of this loop (not of loops nested in it)."""
    nested = {id(n) for loop in find_all(body, cst.For, cst.While)
              for n in find_all(loop.body, cst.Break, cst.Continue)}
    return [n for n in find_all(body, cst.Break, cst.Continue) if id(n) not in nested]


def _path_to(root: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode]:
    """Nodes from ``root`` down to ``target`` (both included); empty if not found."""
    stack: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = [(root, [root])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        stack.extend((child, [*path, child]) for child in node.children)
    return []


class _BodyRewriter(cst.CSTTransformer):
    """Replaces ``self.attr[index]`` with element names, and calls elements of reversed slices
    through ``.forward``."""

    def __init__(self, self_var: str, plan: _LoopPlan) -> None:
        self.self_var = self_var
        self.plan = plan

    def _element(self, node: cst.CSTNode) -> str | None:
        if not isinstance(node, cst.Subscript) or self.plan.index is None:
            return None
        attr = self_attr(node.value, self.self_var)
        value = _single_index(node)
        if (attr in self.plan.subs and isinstance(value, cst.Name)
                and value.value == self.plan.index):
            return self.plan.subs[attr]
        return None

    def leave_Subscript(self, original_node: cst.Subscript,
                        updated_node: cst.Subscript) -> cst.BaseExpression:
        element = self._element(original_node)
        return cst.Name(element) if element is not None else updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        func = updated_node.func
        if isinstance(func, cst.Name) and func.value in self.plan.forward_calls:
            return updated_node.with_changes(func=cst.Attribute(func, cst.Name("forward")))
        return updated_node


class _MethodRewriter(cst.CSTTransformer):
    def __init__(self, self_var: str, plan: _MethodPlan) -> None:
        self.self_var = self_var
        self.plan = plan

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        plan = self.plan.loops.get(id(original_node))
        if plan is None:
            return updated_node
        header = cst.parse_statement(f"for {plan.header_target} in {plan.header_iter}:\n"
                                     "    pass\n")
        assert isinstance(header, cst.For)
        body = updated_node.body.visit(_BodyRewriter(self.self_var, plan))
        assert isinstance(body, cst.BaseSuite)
        if plan.prelude is not None:
            if isinstance(body, cst.SimpleStatementSuite):
                body = cst.IndentedBlock([cst.SimpleStatementLine(body.body)])
            assert isinstance(body, cst.IndentedBlock)
            body = body.with_changes(body=[cst.parse_statement(plan.prelude + "\n"),
                                           *body.body])
        return updated_node.with_changes(target=header.target, iter=header.iter, body=body)

    def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine,
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        hoist = self.plan.hoists.get(id(original_node))
        if hoist is None:
            return updated_node
        call_holder: list[cst.Call] = []
        statement = updated_node.visit(_CallExtractor(self.self_var, hoist, call_holder))
        assert isinstance(statement, cst.SimpleStatementLine) and len(call_holder) == 1
        call = call_holder[0].with_changes(func=cst.Name(hoist.element))
        s = self.self_var
        lines = [
            f"{hoist.result}: Optional[{hoist.tensor}] = None",
            f"for {hoist.name}, {hoist.element} in {s}.{hoist.attr}.items():",
            f"    if {hoist.name} == {hoist.key}:",
            f"        {hoist.result} = {code_of(call)}",
            f"if {hoist.result} is None:",
            f"    raise KeyError({hoist.key})",
        ]
        module = cst.parse_module("\n".join(lines) + "\n")
        new: list[cst.BaseStatement] = list(module.body)
        new[0] = new[0].with_changes(leading_lines=updated_node.leading_lines)
        new.append(statement.with_changes(leading_lines=[]))
        return cst.FlattenSentinel(new)


class _CallExtractor(cst.CSTTransformer):
    """Replaces the one ``self.attr[key](...)`` call with the result variable, keeping the call."""

    def __init__(self, self_var: str, hoist: _Hoist, found: list[cst.Call]) -> None:
        self.self_var = self_var
        self.hoist = hoist
        self.found = found

    def leave_Call(self, original_node: cst.Call,
                   updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if (isinstance(func, cst.Subscript) and self_attr(func.value, self.self_var)
                == self.hoist.attr and _single_index(func) is not None
                and code_of(_single_index(func) or func) == self.hoist.key and not self.found):
            self.found.append(updated_node)
            return cst.Name(self.hoist.result).with_changes(lpar=updated_node.lpar,
                                                             rpar=updated_node.rpar)
        return updated_node


class ModuleListIter(Rule):
    __doc__ = __doc__
    name = "modulelist-iter"
    # --rule all order: first: it restructures loops, which the others then read as written.
    order = 10
    CODES = (
        Code("TSF201", "modulelist-index", "ModuleList/Sequential/ModuleDict indexed by a variable",
             "TorchScript indexes a module container with a literal only (\"Expected integer "
             "literal for index\"), even inside `for i in range(n)`; iterate it instead."),
        Code("TSF202", "modulelist-reversed", "reversed() of a module container",
             "reversed(self.layers) does not script; iterate the reversed slice and call "
             "`.forward`."),
    )
    summary = ("Indexing a ModuleList/Sequential/ModuleDict with a variable becomes iteration "
               "over the container; parameter names are unchanged.")

    VALID = (
        # break in the loop body: TorchScript cannot unroll it.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.layers[i](x)
            if x.sum() > 0:
                break
        return x
""",
        # An offset from the loop variable.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    def forward(self, x):
        for i in range(1, len(self.layers)):
            x = x + self.layers[i - 1](x)
        return x
""",
        # A range that does not cover the whole list.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3, depth=2):
        super().__init__()
        self.depth = depth
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    def forward(self, x):
        for i in range(self.depth):
            x = self.layers[i](x)
        return x
""",
        # A computed index outside any loop.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    def forward(self, x, k: int):
        return self.experts[k](x)
""",
    )
    INVALID = (
        # The plain loop; the range is the constructor argument the list was built from.
        Example(
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, num_layers=3):
        super().__init__()
        self.num_layers = num_layers
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(num_layers)])
    def forward(self, x):
        for i in range(self.num_layers):
            x = self.layers[i](x)
        return x
""",
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, num_layers=3):
        super().__init__()
        self.num_layers = num_layers
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(num_layers)])
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
""",
        ),
        # Two lists indexed by the same variable, which also indexes a list of tensors.
        Example(
            """
from typing import List
from torch import Tensor, nn
class M(nn.Module):
    def __init__(self, dims=(4, 4, 4)):
        super().__init__()
        self.convs = nn.ModuleList([nn.Linear(d, d) for d in dims])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for d in dims])
    def forward(self, x, hidden: List[Tensor]):
        for i in range(len(self.convs)):
            x = self.norms[i](self.convs[i](x)) + hidden[i]
        return x
""",
            """
from typing import List
from torch import Tensor, nn
class M(nn.Module):
    def __init__(self, dims=(4, 4, 4)):
        super().__init__()
        self.convs = nn.ModuleList([nn.Linear(d, d) for d in dims])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for d in dims])
    def forward(self, x, hidden: List[Tensor]):
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = norm(conv(x)) + hidden[i]
        return x
""",
        ),
        # Reverse traversal: a reversed slice, elements called through .forward.
        Example(
            """
from typing import List
import torch
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.ups = nn.ModuleList()
        for _ in range(3):
            self.ups.append(nn.Linear(4, 4))
    def forward(self, x, skips: List[torch.Tensor]):
        for i in reversed(range(len(self.ups))):
            x = self.ups[i](x) + skips[i]
        return x
""",
            """
from typing import List
import torch
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.ups = nn.ModuleList()
        for _ in range(3):
            self.ups.append(nn.Linear(4, 4))
    def forward(self, x, skips: List[torch.Tensor]):
        for i_rev, up in enumerate(self.ups[::-1]):
            i = len(self.ups) - 1 - i_rev
            x = up.forward(x) + skips[i]
        return x
""",
        ),
        # reversed() of the list itself, and a Sequential indexed in a loop.
        Example(
            """
import torch
class M(torch.nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(depth)])
    def forward(self, x):
        for i in range(len(self.blocks)):
            x = self.blocks[i](x)
        for block in reversed(self.blocks):
            x = block(x)
        return x
""",
            """
import torch
class M(torch.nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(depth)])
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        for block in self.blocks[::-1]:
            x = block.forward(x)
        return x
""",
        ),
        # A ModuleDict chosen by a string argument.
        Example(
            """
import torch
from torch.nn import Linear, ModuleDict, Module
class M(Module):
    def __init__(self):
        super().__init__()
        self.heads = ModuleDict({"cls": Linear(4, 2), "reg": Linear(4, 1)})
    def forward(self, x, task: str):
        return self.heads[task](x)
""",
            """
from typing import Optional

import torch
from torch.nn import Linear, ModuleDict, Module
class M(Module):
    def __init__(self):
        super().__init__()
        self.heads = ModuleDict({"cls": Linear(4, 2), "reg": Linear(4, 1)})
    def forward(self, x, task: str):
        head_out: Optional[torch.Tensor] = None
        for name, head in self.heads.items():
            if name == task:
                head_out = head(x)
        if head_out is None:
            raise KeyError(task)
        return head_out
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        self.imports = import_map(module)
        self.tensor_name: str | None = None
        for local, full in self.imports.items():
            if full == "torch.Tensor":
                self.tensor_name = local
                break
        else:
            for local, full in self.imports.items():
                if full == "torch":
                    self.tensor_name = f"{local}.Tensor"
                    break

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        analysis = _ClassAnalysis(self, cls)
        if not analysis.containers or not isinstance(cls.body, cst.IndentedBlock):
            return cls
        plans: dict[str, _MethodPlan] = {}
        for name in analysis.compiled_methods():
            plan = _MethodAnalysis(analysis, analysis.methods[name]).analyse()
            if plan.loops or plan.hoists:
                plans[name] = plan
        if not plans:
            return cls
        parts: list[str] = []
        notes: list[str] = []
        body: list[cst.BaseStatement] = []
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value in plans:
                plan = plans[statement.name.value]
                self_var = self_name(statement) or "self"
                for loop in sorted(plan.loops.values(), key=lambda p: p.line):
                    parts.append(f"line {loop.line}: `{loop.old_header}` -> "
                                 f"`for {loop.header_target} in {loop.header_iter}`")
                    if loop.reverse_attrs:
                        views = ", ".join(f"{self_var}.{a}[::-1]" for a in loop.reverse_attrs)
                        notes.append(f"line {loop.line}: elements of {views} are called through "
                                     ".forward(...), which skips their forward hooks and "
                                     "pre-hooks in eager mode")
                for hoist in sorted(plan.hoists.values(), key=lambda p: p.line):
                    parts.append(f"line {hoist.line}: `{self_var}.{hoist.attr}[{hoist.key}]` -> "
                                 f"a loop over {self_var}.{hoist.attr}.items() matching the name")
                    self.need_typing("Optional")
                rewritten = statement.visit(_MethodRewriter(self_var, plan))
                assert isinstance(rewritten, cst.FunctionDef)
                statement = rewritten
            body.append(statement)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return cls.with_changes(body=cls.body.with_changes(body=body))
