"""``loop-carried-local``: a local that a loop carries from one iteration to the next is bound
before the loop, where the first iteration provably binds it before any read.

What it does
    In a compiled method (``forward``, the ``@torch.jit.export`` methods and what they call),
    a local that a loop body reads before that iteration has bound it (its value comes from an
    earlier iteration: Res2Net's ``sp = sp + spx[i]``, ECAPA's ``self.blocks[i - 1](x_i +
    y_i)``) and that nothing binds before the loop gets a binding just before the loop, of the
    type the loop gives it: ``torch.empty(0)`` for a Tensor, ``0``, ``0.0``, ``False``,
    ``""`` for an int, float, bool or str, an annotated empty list or dict (``acc:
    List[int] = []``), ``None`` for an ``Optional[...]`` (annotated), a tuple of those for a
    tuple. The type is read from the values the loop assigns (and the method's annotations);
    split/chunk/unbind give a list of Tensors, enumerate and range an int.

Why it breaks export
    TorchScript gives a name a value only where every path has bound it before: a name first
    bound inside a loop body is not defined at the top of the next iteration ("undefined value
    y_i", measured on torch 2.13), even when Python always runs the binding first. Bound before
    the loop (of the loop's type), the name is carried by the loop; the scripted result equals
    the eager one (exact parity measured on ECAPA-TDNN's Res2NetBlock, Res2Net's bottleneck and
    int, float, bool, str, list, tuple and Optional locals). ``torch.export`` runs the Python
    loop as it is (the original exports), and the legacy ONNX export of the scripted loop keeps
    the placeholder's shape ([0]) for the carried Tensor, which onnxruntime rejects: the rule
    serves the torchscript target only.

Example
    Before::

        for i, x_i in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                y_i = x_i
            else:
                y_i = self.block(x_i + y_i)
            y.append(y_i)

    After::

        # Carried across iterations: TorchScript needs it bound before the loop.
        y_i = torch.empty(0)
        for i, x_i in enumerate(torch.chunk(x, self.scale, dim=1)):
            ...

Fix safety
    The binding is added only when eager code can never read it: following every path through
    the method, each read of the name comes after an assignment in the same run. Tests on the
    loop counter are decided where they can be: ``for i in range(n)``, ``range(s, n[, step])``
    and ``enumerate(xs[, s])`` with a literal start, the counter never re-bound in the loop,
    ``if i == 0:`` (also ``not i``, ``i < 1``, ``i != 0``, ``i > 0``, ``and``/``or`` with other
    tests, conditional expressions) runs only on the first iteration or only on the later ones.
    Left alone, with the reason (TSF230): a read the first iteration may reach before the name
    is bound (the counter test is not literal, the branch is not decided, the binding sits in a
    nested loop or one branch only), a read after the loop (when the loop runs no iteration
    Python raises there and would read the placeholder instead), a name deleted, declared
    ``global``/``nonlocal``, bound by an import, a ``def``, an assignment expression or inside
    ``try``/``match``, or read inside a nested function, and a type the values do not tell (or
    that disagree).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.locals import LocalName, function_locals
from tsfix.codemods.facts.prefilter import AstFile, parse_once
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    parameters_of,
    qualified_name,
    target_names,
)
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    annotation_text,
    collect_locals,
    is_complete,
    parts_of,
    type_from_annotation,
    typing_names,
    unify_all,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

CODE = "TSF230"
# torch functions and Tensor methods TorchScript types List[Tensor] (value_types leaves them
# unknown: their tuple results are unpacked elsewhere).
_TENSOR_LISTS = frozenset({"split", "chunk", "unbind", "tensor_split", "split_with_sizes"})
_LOOPS = (cst.For, cst.While)
_UNSUPPORTED = (cst.Try, cst.TryStar, cst.Match, cst.FunctionDef, cst.ClassDef, cst.Lambda)
_COMMENT = "# Carried across iterations: TorchScript needs {} bound before the loop."


class _Refused(Exception):
    """Why a carried name is left alone."""


# ---- the loop counter and what a test on it decides -------------------------------------------

@dataclass(frozen=True)
class _Counter:
    """What is known of a loop counter in one pass over the body: its value on the first
    iteration, or (later iterations) that it differs from it and, when the loop counts up,
    exceeds it."""

    start: int
    first: bool
    ascending: bool


def _int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
            and isinstance(node.expression, cst.Integer)):
        return -int(node.expression.value, 0)
    return None


def _counter_of(loop: cst.For, builtins: set[str]) -> tuple[str, int, bool] | None:
    """(counter name, start, counts up) of ``for i in range(...)`` / ``for i, v in
    enumerate(...)`` with a literal start; None for any other loop."""
    call = loop.iter
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name) \
            or call.func.value not in builtins or any(a.star for a in call.args):
        return None
    positional = [a.value for a in call.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    if call.func.value == "range" and isinstance(loop.target, cst.Name) and not keywords:
        if len(positional) == 1:
            return loop.target.value, 0, True
        if len(positional) in (2, 3):
            start = _int_literal(positional[0])
            step = _int_literal(positional[2]) if len(positional) == 3 else 1
            if start is not None:
                return loop.target.value, start, step is not None and step > 0
        return None
    if call.func.value == "enumerate" and isinstance(loop.target, cst.Tuple | cst.List):
        elements = loop.target.elements
        if len(elements) != 2 or not isinstance(elements[0].value, cst.Name):
            return None
        given = positional[1] if len(positional) > 1 else keywords.get("start")
        start = 0 if given is None else _int_literal(given)
        if start is None or len(positional) < 1 or set(keywords) - {"start"}:
            return None
        return elements[0].value.value, start, True
    return None


_FLIPPED = {cst.LessThan: cst.GreaterThan, cst.GreaterThan: cst.LessThan,
            cst.LessThanEqual: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.LessThanEqual,
            cst.Equal: cst.Equal, cst.NotEqual: cst.NotEqual}


def _compare(counter: _Counter, operator: cst.BaseCompOp, value: int) -> bool | None:
    """``counter <operator> value`` on this pass: True, False or None (either)."""
    if counter.first:
        i = counter.start
        results: dict[type, bool] = {
            cst.Equal: i == value, cst.NotEqual: i != value, cst.LessThan: i < value,
            cst.LessThanEqual: i <= value, cst.GreaterThan: i > value,
            cst.GreaterThanEqual: i >= value}
        return results.get(type(operator))
    if not counter.ascending:
        if value == counter.start and isinstance(operator, cst.Equal | cst.NotEqual):
            return isinstance(operator, cst.NotEqual)
        return None
    low = counter.start + 1     # later iterations: low, low + 1, ... (unbounded above)
    can_be: dict[type, tuple[bool, bool]] = {   # (may be True, may be False)
        cst.Equal: (value >= low, True), cst.NotEqual: (True, value >= low),
        cst.LessThan: (low < value, True), cst.LessThanEqual: (low <= value, True),
        cst.GreaterThan: (True, low <= value), cst.GreaterThanEqual: (True, low < value)}
    possible = can_be.get(type(operator))
    if possible is None or possible == (True, True):
        return None
    return possible[0]


def decide(test: cst.BaseExpression, counters: Mapping[str, _Counter]) -> bool | None:
    """The truth of ``test`` on this pass, from the loop counters alone (None: not decided)."""
    if isinstance(test, cst.Name) and test.value in counters:
        counter = counters[test.value]
        return _compare(counter, cst.NotEqual(), 0)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = decide(test.expression, counters)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = decide(test.left, counters), decide(test.right, counters)
        if isinstance(test.operator, cst.And):
            return False if False in (left, right) else (True if left and right else None)
        return True if True in (left, right) else (False if left is right is False else None)
    if isinstance(test, cst.Comparison):
        results: list[bool | None] = []
        operand = test.left
        for comparison in test.comparisons:
            results.append(_pair(operand, comparison.operator, comparison.comparator,
                                 counters))
            operand = comparison.comparator
        if False in results:
            return False
        return True if all(r is True for r in results) else None
    return None


def _pair(left: cst.BaseExpression, operator: cst.BaseCompOp, right: cst.BaseExpression,
          counters: Mapping[str, _Counter]) -> bool | None:
    kind = type(operator)
    if kind not in _FLIPPED:
        return None
    if isinstance(left, cst.Name) and left.value in counters:
        value = _int_literal(right)
        return None if value is None else _compare(counters[left.value], operator, value)
    if isinstance(right, cst.Name) and right.value in counters:
        value = _int_literal(left)
        return None if value is None else _compare(counters[right.value],
                                                   _FLIPPED[kind](), value)
    return None


# ---- the walk: is every read of the name after a binding in the same run? --------------------

class _ReadFirst(Exception):
    """A read of the name a run may reach before any binding of it."""

    def __init__(self, node: cst.CSTNode, in_loop: bool) -> None:
        super().__init__()
        self.node = node
        self.in_loop = in_loop


class _Walk:
    """Follows one method's statements in order for one name, tracking whether it is surely
    bound. ``counters``: loops with a literal start are walked twice, their first iteration
    and the later ones, with the tests on their counter decided; without it (what TorchScript
    sees) every test is open and every loop is walked once. ``skipped``: statements left out
    (code TorchScript never compiles, for the TorchScript view)."""

    def __init__(self, name: str, reads: set[int], builtins: set[str], *, counters: bool,
                 skipped: frozenset[int] = frozenset()) -> None:
        self.name = name
        self.reads = reads
        self.builtins = builtins
        self.use_counters = counters
        self.skipped = skipped
        self.continues: list[list[bool]] = []
        self.depth = 0      # loops the walk is inside

    # A state is True (surely bound), False (maybe not) or None (this path has ended).

    def block(self, block: cst.BaseSuite, bound: bool | None,
              counters: Mapping[str, _Counter]) -> bool | None:
        if isinstance(block, cst.SimpleStatementSuite):
            for small in block.body:
                if bound is None:
                    return None
                bound = self.small(small, bound, counters)
            return bound
        assert isinstance(block, cst.IndentedBlock)
        for statement in block.body:
            if bound is None:
                return None
            if id(statement) in self.skipped:
                continue
            bound = self.statement(statement, bound, counters)
        return bound

    def statement(self, statement: cst.BaseStatement, bound: bool,
                  counters: Mapping[str, _Counter]) -> bool | None:
        if isinstance(statement, cst.SimpleStatementLine):
            state: bool | None = bound
            for small in statement.body:
                if state is None:
                    return None
                state = self.small(small, state, counters)
            return state
        if isinstance(statement, cst.If):
            return self.branch(statement, bound, counters)
        if isinstance(statement, cst.For):
            return self.for_loop(statement, bound, counters)
        if isinstance(statement, cst.While):
            self.read(statement.test, bound, counters)
            self.loop_body(statement.body, bound, counters)
            if statement.orelse is not None:
                self.block(statement.orelse.body, bound, counters)
            return bound
        if isinstance(statement, cst.With):
            for item in statement.items:
                self.read(item.item, bound, counters)
                if item.asname is not None and self.binds(item.asname.name):
                    bound = True
            return self.block(statement.body, bound, counters)
        return bound    # unsupported statements holding the name were refused before

    def small(self, small: cst.BaseSmallStatement, bound: bool,
              counters: Mapping[str, _Counter]) -> bool | None:
        if isinstance(small, cst.Assign):
            self.read(small.value, bound, counters)
            for target in small.targets:
                bound = self.target(target.target, bound, counters)
            return bound
        if isinstance(small, cst.AnnAssign):
            if small.value is None:
                return bound
            self.read(small.value, bound, counters)
            return self.target(small.target, bound, counters)
        if isinstance(small, cst.AugAssign):
            self.read(small.value, bound, counters)
            self.read(small.target, bound, counters)
            return self.target(small.target, bound, counters)
        if isinstance(small, cst.Return | cst.Raise):
            self.read(small, bound, counters)
            return None
        if isinstance(small, cst.Continue):
            if self.continues:
                self.continues[-1].append(bound)
            return None
        if isinstance(small, cst.Break):
            return None     # after the loop the name counts as unbound anyway
        self.read(small, bound, counters)
        return bound

    def target(self, target: cst.BaseExpression, bound: bool,
               counters: Mapping[str, _Counter]) -> bool:
        if isinstance(target, cst.Name):
            return True if target.value == self.name else bound
        if isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                bound = self.target(element.value, bound, counters)
            return bound
        if isinstance(target, cst.StarredElement):
            return self.target(target.value, bound, counters)
        self.read(target, bound, counters)     # x[i] = ..., x.a = ...: reads x
        return bound

    def binds(self, target: cst.BaseExpression) -> bool:
        return any(isinstance(n, cst.Name) and n.value == self.name
                   for n in target_names(target))

    def branch(self, statement: cst.If, bound: bool,
               counters: Mapping[str, _Counter]) -> bool | None:
        self.read(statement.test, bound, counters)
        decided = decide(statement.test, counters) if self.use_counters else None
        sides: list[bool | None] = []
        if decided is not False:
            sides.append(self.block(statement.body, bound, counters))
        if decided is not True:
            orelse = statement.orelse
            if isinstance(orelse, cst.If):
                sides.append(self.branch(orelse, bound, counters))
            elif isinstance(orelse, cst.Else):
                sides.append(self.block(orelse.body, bound, counters))
            else:
                sides.append(bound)
        going = [side for side in sides if side is not None]
        return all(going) if going else None

    def for_loop(self, loop: cst.For, bound: bool,
                 counters: Mapping[str, _Counter]) -> bool:
        self.read(loop.iter, bound, counters)
        inside = self.target(loop.target, bound, counters)
        counter = _counter_of(loop, self.builtins) if self.use_counters else None
        if counter is None or _rebinds(loop.body, counter[0]):
            self.loop_body(loop.body, inside, counters)
        else:
            name, start, ascending = counter
            first = {**counters, name: _Counter(start, True, ascending)}
            later_start = self.loop_body(loop.body, inside, first)
            if later_start is not None:
                later = {**counters, name: _Counter(start, False, ascending)}
                self.loop_body(loop.body, later_start or inside, later)
        if loop.orelse is not None:
            self.block(loop.orelse.body, bound, counters)
        return bound    # the loop may run no iteration

    def loop_body(self, body: cst.BaseSuite, bound: bool,
                  counters: Mapping[str, _Counter]) -> bool | None:
        """The state the next iteration starts in (None: no path goes on to one)."""
        self.continues.append([])
        self.depth += 1
        try:
            end = self.block(body, bound, counters)
        finally:
            self.depth -= 1
        going = [s for s in (end, *self.continues.pop()) if s is not None]
        return all(going) if going else None

    def read(self, node: cst.CSTNode, bound: bool,
             counters: Mapping[str, _Counter]) -> None:
        if bound:
            return
        found = self._first_read(node, counters)
        if found is not None:
            raise _ReadFirst(found, self.depth > 0)

    def _first_read(self, node: cst.CSTNode,
                    counters: Mapping[str, _Counter]) -> cst.CSTNode | None:
        if id(node) in self.reads:
            return node
        if self.use_counters and isinstance(node, cst.IfExp):
            decided = decide(node.test, counters)
            parts: list[cst.CSTNode] = [node.test]
            if decided is not False:
                parts.append(node.body)
            if decided is not True:
                parts.append(node.orelse)
            return next((r for r in (self._first_read(p, counters) for p in parts) if r), None)
        if self.use_counters and isinstance(node, cst.BooleanOperation):
            left = decide(node.left, counters)
            stops = left is False if isinstance(node.operator, cst.And) else left is True
            parts = [node.left] if stops else [node.left, node.right]
            return next((r for r in (self._first_read(p, counters) for p in parts) if r), None)
        for child in node.children:
            found = self._first_read(child, counters)
            if found is not None:
                return found
        return None


def _rebinds(body: cst.BaseSuite, name: str) -> bool:
    """Whether ``body`` may re-bind ``name`` (any assignment, loop target, with-as or
    assignment expression naming it)."""
    for node in find_all(body, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.With,
                         cst.NamedExpr):
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, cst.With):
            targets = [i.asname.name for i in node.items if i.asname is not None]
        else:
            targets = [node.target]
        if any(n.value == name for t in targets for n in target_names(t)):
            return True
    return False


# ---- the type of the value the loop binds -----------------------------------------------------

class _LoopTyper(Typer):
    """value_types' Typer, plus the List[Tensor] that split/chunk/unbind give TorchScript."""

    def _call(self, node: cst.Call) -> str | None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _TENSOR_LISTS:
            name = qualified_name(func, dict(self.imports)) or ""
            if name.startswith("torch.") and name.count(".") == 1:
                return f"List[{TENSOR}]"
            if self.type_of(func.value) == TENSOR:
                return f"List[{TENSOR}]"
        return super()._call(node)


def _element_type(kind: str | None) -> str | None:
    if kind == TENSOR:
        return TENSOR
    if kind is None:
        return None
    head, args = parts_of(kind)
    return args[0] if head == "List" and args and args[0] != "?" else None


def _iterated(node: cst.BaseExpression, typer: Typer, builtins: set[str]) -> str | None:
    """The type of one item ``for`` takes from ``node``: range -> int, enumerate -> (int,
    item), zip -> a tuple of items, a list or a Tensor -> its element."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) \
            and node.func.value in builtins and not any(a.star for a in node.args):
        values = [a.value for a in node.args if a.keyword is None]
        if node.func.value == "range":
            return "int"
        if node.func.value == "enumerate" and values:
            item = _iterated(values[0], typer, builtins)
            return f"Tuple[int, {item}]" if item else None
        if node.func.value == "zip" and values:
            items = [_iterated(v, typer, builtins) for v in values]
            if any(i is None for i in items):
                return None
            return f"Tuple[{', '.join(i for i in items if i)}]"
    return _element_type(typer.type_of(node))


def _bind_types(target: cst.BaseExpression, kind: str | None, env: dict[str, str | None]) -> None:
    if isinstance(target, cst.Name):
        if kind is not None:
            env.setdefault(target.value, kind)
    elif isinstance(target, cst.Tuple | cst.List):
        parts: list[str | None] = [None] * len(target.elements)
        if kind is not None:
            head, args = parts_of(kind)
            if head == "Tuple" and len(args) == len(parts):
                parts = list(args)
        for element, part in zip(target.elements, parts, strict=True):
            _bind_types(element.value, part, env)


def method_typer(facts: ClassFacts, method: str, builtins: set[str]) -> Typer:
    """A typer for ``method``'s body: its parameters, the attributes ``__init__`` stores, its
    locals (twice: a loop target typed in the first pass types the locals read from it)."""
    base = facts.typer(method)
    func = facts.methods[method]
    env: dict[str, str | None] = {name: kind for name, kind in
                                  facts.parameter_types(method).items()}
    for name, param in parameters_of(func).items():
        if (name in env and env[name] is None and param.annotation is None
                and param.default is None and param.star == ""):
            env[name] = TENSOR      # what TorchScript makes of an unannotated parameter
    typer = _LoopTyper(env, base.imports, base.self_var, base.attributes, base.layers)
    for _ in range(2):
        collect_locals(func.body, typer)
        loop_types: dict[str, str | None] = {}
        for loop in find_all(func.body, cst.For):
            _bind_types(loop.target, _iterated(loop.iter, typer, builtins), loop_types)
        for name, kind in loop_types.items():
            if typer.env.get(name) is None:
                typer.env[name] = kind
    return typer


def _refined(value: cst.BaseExpression, statement: cst.CSTNode,
             blocks: Mapping[int, cst.IndentedBlock]) -> bool:
    """Whether ``value`` is a name an ``assert <name> is not None`` before ``statement`` in
    the same block refines (modulelist-iter's ``assert block_out is not None``)."""
    block = blocks.get(id(statement))
    if not isinstance(value, cst.Name) or block is None:
        return False
    for line in block.body:
        if line is statement:
            return False
        if isinstance(line, cst.SimpleStatementLine):
            for small in line.body:
                if (isinstance(small, cst.Assert) and isinstance(small.test, cst.Comparison)
                        and isinstance(small.test.left, cst.Name)
                        and small.test.left.value == value.value
                        and len(small.test.comparisons) == 1
                        and isinstance(small.test.comparisons[0].operator, cst.IsNot)
                        and isinstance(small.test.comparisons[0].comparator, cst.Name)
                        and small.test.comparisons[0].comparator.value == "None"):
                    return True
    return False


def carried_type(name: str, loop: cst.For | cst.While, typer: Typer,
                 builtins: set[str]) -> str:
    """The one type of the values ``loop`` binds to ``name``; raises _Refused when they do not
    tell it or disagree. A value read from the name itself (``sp + spx[i]``) is typed in a
    second pass, with the name of the type the other values give it, so that it must agree."""
    declared = _declared_type(name, loop)
    if declared is not None:
        return declared
    kinds = [k for k in _bound_types(name, loop, typer, builtins) if k is not None]
    complete = {kind for kind in kinds if is_complete(kind)}
    if len(complete) == 1 and complete != {"None"}:
        seeded = type(typer)({**typer.env, name: next(iter(complete))}, typer.imports,
                             typer.self_var, typer.attributes, typer.layers)
        kinds = [k for k in _bound_types(name, loop, seeded, builtins) if k is not None]
        complete = {kind for kind in kinds if is_complete(kind)}
    if not complete:
        raise _Refused("the values the loop assigns to it are of a type this rule cannot "
                       "tell; bind it before the loop by hand (e.g. `"
                       f"{name} = torch.empty(0)` for a Tensor)")
    # One type, which an empty literal (`[]`, `{}`) among the values takes too. An int and a
    # float do not make a float: TorchScript keeps the type bound before the loop.
    if len(complete) > 1 or complete == {"None"} or unify_all(kinds) not in complete:
        raise _Refused("the loop assigns it values of different types ("
                       f"{', '.join(sorted(set(kinds)))})")
    return complete.pop()


def _declared_type(name: str, loop: cst.For | cst.While) -> str | None:
    """The annotation an assignment in the loop gives the name (``lengths: List[int] =
    ...``), if any; raises _Refused for one TorchScript cannot use."""
    for node in find_all(loop, cst.AnnAssign):
        if isinstance(node.target, cst.Name) and node.target.value == name:
            declared = type_from_annotation(node.annotation.annotation)
            if declared is None or not is_complete(declared):
                written = cst.Module([]).code_for_node(node.annotation.annotation)
                raise _Refused(f"its annotation `{written}` is no TorchScript type")
            return declared
    return None


def _bound_types(name: str, loop: cst.For | cst.While, typer: Typer,
                 builtins: set[str]) -> list[str | None]:
    """The type of each value ``loop`` binds to ``name`` (None: unknown)."""
    blocks = {id(s): b for b in find_all(loop, cst.IndentedBlock) for s in b.body}
    kinds: list[str | None] = []
    for node in find_all(loop, cst.Assign, cst.AugAssign, cst.For):
        if isinstance(node, cst.AugAssign):
            if isinstance(node.target, cst.Name) and node.target.value == name:
                operator = getattr(cst, type(node.operator).__name__.removesuffix("Assign"))()
                kinds.append(typer.type_of(cst.BinaryOperation(node.target, operator,
                                                               node.value)))
            continue
        if isinstance(node, cst.For):
            pairs = _typed_targets(node.target, _iterated(node.iter, typer, builtins))
        else:
            pairs = []
            # A conditional expression binds one of its two values: each has its own type.
            values = ([node.value.body, node.value.orelse] if isinstance(node.value, cst.IfExp)
                      else [node.value])
            for target in node.targets:
                for value in values:
                    value_kind = typer.type_of(value)
                    if (value_kind is not None and value_kind.startswith("Optional[")
                            and _refined(value, _line_of(node, blocks), blocks)):
                        value_kind = parts_of(value_kind)[1][0]
                    pairs.extend(_typed_targets(target.target, value_kind))
        kinds.extend(kind for bound, kind in pairs if bound == name)
    return kinds


def _line_of(node: cst.CSTNode, blocks: Mapping[int, cst.IndentedBlock]) -> cst.CSTNode:
    """The statement line holding the small statement ``node`` (itself if not found)."""
    for block in {id(b): b for b in blocks.values()}.values():
        for line in block.body:
            if isinstance(line, cst.SimpleStatementLine) and any(s is node for s in line.body):
                return line
    return node


def _typed_targets(target: cst.BaseExpression, kind: str | None
                   ) -> list[tuple[str, str | None]]:
    if isinstance(target, cst.Name):
        return [(target.value, kind)]
    if isinstance(target, cst.Tuple | cst.List):
        parts: list[str | None] = [None] * len(target.elements)
        if kind is not None:
            head, args = parts_of(kind)
            if head == "Tuple" and len(args) == len(parts):
                parts = list(args)
        return [pair for element, part in zip(target.elements, parts, strict=True)
                for pair in _typed_targets(element.value, part)]
    return []


def placeholder(name: str, kind: str, torch_name: str | None, tensor_name: str
                ) -> tuple[cst.SimpleStatementLine, set[str]]:
    """The binding of ``name`` before the loop, and the typing names it needs."""
    value = _placeholder_value(kind, torch_name)
    if value is None:
        raise _Refused(f"no placeholder is known for its type {kind}"
                       + (" (the file does not import torch)" if torch_name is None else ""))
    head, _ = parts_of(kind)
    if head in ("List", "Dict", "Optional", "Tuple"):
        text = f"{name}: {annotation_text(kind, tensor_name)} = {value}"
        needed = typing_names(kind)
    else:
        text = f"{name} = {value}"
        needed = set()
    line = cst.parse_statement(f"{text}\n")
    assert isinstance(line, cst.SimpleStatementLine)
    return line, needed


def _placeholder_value(kind: str, torch_name: str | None) -> str | None:
    scalars = {"int": "0", "float": "0.0", "bool": "False", "str": '""'}
    if kind in scalars:
        return scalars[kind]
    if kind == TENSOR:
        return f"{torch_name}.empty(0)" if torch_name else None
    head, args = parts_of(kind)
    if head == "List":
        return "[]"
    if head == "Dict":
        return "{}"
    if head == "Optional":
        return "None"
    if head == "Tuple" and args:
        parts = [_placeholder_value(a, torch_name) for a in args]
        if any(p is None for p in parts):
            return None
        return f"({', '.join(p for p in parts if p)}{',' if len(parts) == 1 else ''})"
    return None


# ---- the rule ---------------------------------------------------------------------------------

@dataclass
class _Carried:
    """One name a loop carries, bound before ``loop`` by ``line``."""

    name: str
    loop: cst.For | cst.While
    line: cst.SimpleStatementLine
    kind: str
    typing: set[str]


class LoopCarriedLocal(Rule):
    __doc__ = __doc__
    name = "loop-carried-local"
    # After modulelist-iter (10): the reads and bindings must be proven on the control flow
    # that is compiled, and modulelist-iter moves `y_i = self.blocks[i - 1](x_i + y_i)` into a
    # loop over the blocks under `if j == i - 1:`, where the binding is no longer sure; and
    # before annotate (100), which then sees the name bound with its type.
    order = 15
    targets = ("torchscript",)
    off_target = ("torch.export runs the Python loop as it is: the original exports (measured "
                  "on torch 2.13); the legacy ONNX export of the scripted loop keeps the "
                  "placeholder's shape [0] for the carried value and onnxruntime rejects the "
                  "model (measured on ECAPA's Res2NetBlock, onnxruntime 1.32)")
    CODES = (
        Code(CODE, "loop-carried-local", "local carried from one loop iteration to the next",
             "A name first bound inside a loop body and read by a later iteration is "
             "\"undefined\" to TorchScript. `tsfix apply --rule loop-carried-local` binds it "
             "before the loop (torch.empty(0), 0, 0.0, False, a typed empty list, ...) where "
             "the first iteration provably binds it before any read (e.g. `if i == 0:` under "
             "`for i in range(n)` or enumerate). Otherwise bind it before the loop by hand, "
             "with a value of the loop's type, and check that no run reads that value."),
    )
    summary = ("A local a loop carries from one iteration to the next (Res2Net's `sp = sp + "
               "spx[i]`) is bound before the loop with a placeholder of its type, where the "
               "first iteration provably binds it before any read")

    VALID = (
        # Bound before the loop already.
        """
import torch
class M(torch.nn.Module):
    def forward(self, x):
        h = x
        for i in range(3):
            h = h + x
        return h
""",
        # Bound and read within each iteration: nothing is carried.
        """
import torch
class M(torch.nn.Module):
    def forward(self, xs):
        out = []
        for x in xs:
            h = x * 2
            out.append(h)
        return out
""",
    )
    INVALID = (
        Example(
            """
import torch
class Res2(torch.nn.Module):
    def forward(self, x):
        spx = torch.split(x, 2, 1)
        out = []
        for i in range(len(spx)):
            if i == 0:
                sp = spx[i]
            else:
                sp = sp + spx[i]
            out.append(torch.relu(sp))
        return torch.cat(out, 1)
""",
            """
import torch
class Res2(torch.nn.Module):
    def forward(self, x):
        spx = torch.split(x, 2, 1)
        out = []
        # Carried across iterations: TorchScript needs it bound before the loop.
        sp = torch.empty(0)
        for i in range(len(spx)):
            if i == 0:
                sp = spx[i]
            else:
                sp = sp + spx[i]
            out.append(torch.relu(sp))
        return torch.cat(out, 1)
""",
        ),
        # The first iteration reads it before any binding: left alone, reported.
        Example(
            """
import torch
class Acc(torch.nn.Module):
    def forward(self, x, n: int):
        for i in range(n):
            if i > n // 2:
                h = x
            x = x + h
        return x
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        return any(_may_carry(func, file.nodes_of(func)) for _, func in file.compiled)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        builtins = {"range", "enumerate", "zip"} - self.facts.top_level_names
        new_bodies: dict[int, cst.FunctionDef] = {}
        parts: list[str] = []
        for method, func in facts.compiled_methods():
            if not isinstance(func.body, cst.IndentedBlock) or not func.body.body:
                continue
            found = self._carried(facts, method, func, builtins - set(parameters_of(func)))
            if found:
                new_bodies[id(func)] = _insert(func, found)
                for carried in found:
                    parts.append(f"{carried.name} ({carried.kind}) bound before the loop in "
                                 f"{method}() at line {self.line_of(carried.loop)}")
                    self.need_typing(*carried.typing)
        if not parts:
            return cls
        assert isinstance(cls.body, cst.IndentedBlock)
        body = [new_bodies.get(id(s), s) for s in cls.body.body]
        self.changes.append(ClassChange(
            self.name, cls.name.value, self.span_of(cls),
            "; ".join(parts) + ": carried from one iteration to the next, TorchScript needs "
            "them bound before the loop (the first iteration binds them before any read)"))
        return cls.with_changes(body=cls.body.with_changes(body=body))

    def _carried(self, facts: ClassFacts, method: str, func: cst.FunctionDef,
                 builtins: set[str]) -> list[_Carried]:
        never = facts.never_compiled(method)
        loops = [n for n in find_all(func.body, *_LOOPS) if id(n) not in never]
        if not loops:
            return []   # spares the scope analysis of every method without a loop
        tree = parse_once(code_of(func))
        parsed = tree.body[0] if tree is not None and tree.body else None
        if (isinstance(parsed, ast.FunctionDef | ast.AsyncFunctionDef)
                and not _may_carry(parsed, list(ast.walk(parsed)))):
            return []   # and of a method whose loops carry nothing
        nodes: list[cst.CSTNode] = find_all(func, cst.CSTNode)  # type: ignore[type-abstract]
        position = {id(node): i for i, node in enumerate(nodes)}
        names = function_locals(func, position)
        params = set(parameters_of(func))
        typer: Typer | None = None
        found: list[_Carried] = []
        for name, local in names.items():
            if name in params or not local.reads:
                continue
            loop = self._carrying_loop(name, local, loops, func, position, builtins, never,
                                       nodes)
            if loop is None:
                continue
            message = (f"'{name}' is carried from one iteration of this loop to the next "
                       "and not bound before it")
            try:
                self._prove(name, local, func, nodes, builtins)
                typer = typer or method_typer(facts, method, builtins)
                kind = carried_type(name, loop, typer, builtins)
                line, typing = placeholder(name, kind, self.facts.torch_alias,
                                           self.facts.tensor_name)
            except _Refused as why:
                self.skip(facts.name, loop, f"{message}; '{name}' is left alone: {why}",
                          code=CODE,
                          message=message)
                continue
            self.fixed(loop, CODE, message)
            found.append(_Carried(name, loop, line, kind, typing))
        return found

    def _carrying_loop(self, name: str, local: LocalName, loops: Sequence[cst.For | cst.While],
                       func: cst.FunctionDef, position: Mapping[int, int], builtins: set[str],
                       never: frozenset[int], nodes: Sequence[cst.CSTNode]
                       ) -> cst.For | cst.While | None:
        """The outermost loop that binds ``name``, has nothing bind it before, and reads it
        where TorchScript sees no binding of the same iteration; None if there is none."""
        reads = {id(nodes[p]) for p in local.reads}
        for loop in loops:
            walk = _Walk(name, reads, builtins, counters=False, skipped=never)
            if isinstance(loop, cst.For) and walk.binds(loop.target):
                continue    # the loop's own target: bound at the top of each iteration
            start = position[id(loop)]
            end = start + len(find_all(loop, cst.CSTNode)) - 1  # type: ignore[type-abstract]
            if any(p < start for p in local.assigns) or not any(
                    start < p <= end for p in local.assigns):
                continue
            try:
                walk.loop_body(loop.body, False, {})
            except _ReadFirst:
                return loop
            if isinstance(loop, cst.While):
                try:
                    walk.read(loop.test, False, {})
                except _ReadFirst:
                    return loop
        return None

    def _prove(self, name: str, local: LocalName, func: cst.FunctionDef,
               nodes: Sequence[cst.CSTNode], builtins: set[str]) -> None:
        """Raise _Refused unless every run of the method binds ``name`` before each read."""
        for node in find_all(func.body, *_UNSUPPORTED, cst.Del, cst.Global, cst.Nonlocal,
                             cst.Import, cst.ImportFrom, cst.NamedExpr):
            if isinstance(node, cst.NamedExpr):
                if self_binds(node.target, name):
                    raise _Refused("an assignment expression (:=) binds it")
                continue
            if any(isinstance(n, cst.Name) and n.value == name for n in find_all(node, cst.Name)):
                reasons: dict[type, str] = {
                    cst.Del: "it is deleted (del)", cst.Global: "it is declared global",
                    cst.Nonlocal: "it is declared nonlocal", cst.Import: "an import binds it",
                    cst.ImportFrom: "an import binds it"}
                what = reasons.get(type(node), f"it is used inside a {_statement_name(node)}")
                raise _Refused(what)
        reads = {id(nodes[p]) for p in local.reads}
        walk = _Walk(name, reads, builtins, counters=True)
        try:
            walk.block(func.body, False, {})
        except _ReadFirst as first:
            line = self.line_of(first.node)
            if not first.in_loop:
                raise _Refused(f"it is also read outside the loop (line {line}): when the loop "
                               "runs no iteration Python raises there, and a placeholder would "
                               "be read instead") from None
            raise _Refused(f"the read at line {line} may come before any assignment: the first "
                           "iteration is not proven to bind it first (a test of the loop "
                           "counter against a literal, such as `if i == 0:`, decides which "
                           "branch runs)") from None


def self_binds(target: cst.BaseExpression, name: str) -> bool:
    return isinstance(target, cst.Name) and target.value == name


def _statement_name(node: cst.CSTNode) -> str:
    return {cst.Try: "try statement", cst.TryStar: "try statement", cst.Match: "match statement",
            cst.FunctionDef: "nested function", cst.ClassDef: "nested class",
            cst.Lambda: "lambda"}.get(type(node), type(node).__name__)


def _insert(func: cst.FunctionDef, found: Iterable[_Carried]) -> cst.FunctionDef:
    """``func`` with each placeholder line just before its loop (in the order found), the
    loop's leading comments moved above the placeholders."""
    before: dict[int, list[cst.SimpleStatementLine]] = {}
    declared: set[int] = set()
    for carried in found:
        before.setdefault(id(carried.loop), []).append(carried.line)
        declared.update(id(node) for node in find_all(carried.loop, cst.AnnAssign)
                        if isinstance(node.target, cst.Name)
                        and node.target.value == carried.name)

    class _Inserter(cst.CSTTransformer):
        def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign
                            ) -> cst.BaseSmallStatement:
            # The annotation moves to the binding before the loop: TorchScript rejects a
            # second one ("already defined in an outer block").
            if id(original) not in declared or updated.value is None:
                return updated
            return cst.Assign([cst.AssignTarget(updated.target)], updated.value,
                              semicolon=updated.semicolon)

        def leave_IndentedBlock(self, original: cst.IndentedBlock,
                                updated: cst.IndentedBlock) -> cst.IndentedBlock:
            if not any(id(s) in before for s in original.body):
                return updated
            body: list[cst.BaseStatement] = []
            for old, new in zip(original.body, updated.body, strict=True):
                lines = before.get(id(old))
                if lines and isinstance(new, cst.For | cst.While):
                    comment = cst.EmptyLine(comment=cst.Comment(
                        _COMMENT.format("it" if len(lines) == 1 else "them")))
                    body.append(lines[0].with_changes(
                        leading_lines=(*new.leading_lines, comment)))
                    body.extend(lines[1:])
                    new = new.with_changes(leading_lines=())
                body.append(new)
            return updated.with_changes(body=body)

    rewritten = func.visit(_Inserter())
    assert isinstance(rewritten, cst.FunctionDef)
    return rewritten


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _may_carry(func: ast.FunctionDef | ast.AsyncFunctionDef, walked: list[ast.AST]) -> bool:
    """A loop of ``func`` (``walked``: its nodes) that binds and reads a name that is no
    parameter and that no plain assignment binds earlier in the method: what
    ``_carrying_loop`` needs, found without LibCST's scope analysis (the prefilter of the
    file, and of each method before that analysis, tens of milliseconds a method)."""
    loops = [n for n in walked if isinstance(n, ast.For | ast.AsyncFor | ast.While)]
    if not loops:
        return False
    # The nodes of func outside the scopes nested in it.
    nodes: list[ast.AST] = []
    pending: list[ast.AST] = [func]
    while pending:
        current = pending.pop()
        nodes.append(current)
        pending.extend(child for child in ast.iter_child_nodes(current)
                       if not isinstance(child, _SCOPES))
    args = func.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                              *filter(None, (args.vararg, args.kwarg))]}
    assigned = [(target.lineno, target.col_offset, target.id) for n in nodes
                if isinstance(n, ast.Assign) for t in n.targets
                for target in ast.walk(t)
                if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store)]
    for loop in loops:
        inside = [n for n in ast.walk(loop) if isinstance(n, ast.Name)]
        bound = {n.id for n in inside if not isinstance(n.ctx, ast.Load)}
        # ``a += 1`` reads ``a`` too (as function_locals counts it).
        read = {n.id for n in inside if isinstance(n.ctx, ast.Load)} | {
            n.target.id for n in ast.walk(loop)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
        earlier = {name for line, column, name in assigned
                   if (line, column) < (loop.lineno, loop.col_offset)}
        # The loop's own target: bound at the top of each iteration.
        target = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)
                  } if isinstance(loop, ast.For | ast.AsyncFor) else set()
        if (bound & read) - params - earlier - target:
            return True
    return False
