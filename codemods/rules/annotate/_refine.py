"""Optional values TorchScript must see refined before use.

``x = x + skip`` with ``skip: Optional[Tensor]`` does not compile: TorchScript needs
``skip is not None`` proven first. Where the method never tests the parameter and its first use
fails on None in eager code too (arithmetic, a tensor method or attribute, an index, the input of
a layer or torch function) and runs whenever its statement runs, ``assert skip is not None`` just
before that statement changes nothing eager code does (it only turns the TypeError into an
AssertionError) and refines the value for the rest of the method.

A local set to None and then, inside a loop or branch, to a value of one type ``T``
(``prev = None`` + ``for ...: prev = x``) fails to compile ("previously had type NoneType");
``prev: Optional[T] = None`` declares what it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.classes import TENSOR_CONSTRUCTORS
from tsfix.codemods.facts.syntax import (
    find_all,
    parameters_of,
    parent_map,
    qualified_name,
    self_attr,
)
from tsfix.codemods.facts.value_types import (
    TENSOR,
    is_complete,
    type_from_annotation,
    unify_all,
    without_none,
)
from tsfix.codemods.rules.annotate._callees import callee_type
from tsfix.codemods.rules.annotate._common import is_name, own
from tsfix.codemods.rules.annotate._evidence import (
    TENSOR_ARGUMENTS,
    TYPED_KEYWORDS,
    scripted_as_tensor,
    tensor_receiver,
)
from tsfix.codemods.rules.annotate._state import MethodState

# Tensor methods whose ``other`` takes a Tensor or a number, and raises TypeError on None
# (measured on torch 2.13): they do not tell a type, but an assert before them keeps eager
# behaviour.
_ARITHMETIC_METHODS = frozenset({"add", "sub", "mul", "div"})


@dataclass
class Refinement:
    """How an Optional value's uses compile: ``needed`` False when the method tests it (or,
    a parameter, rebinds it), or only passes it on; else ``before`` holds the statements an
    ``assert name is not None`` goes before: each precedes a use that fails on None in eager
    code too and runs whenever the statement does, and refines the uses after it in its block
    (loops and branches included). ``left`` are such uses no assert can refine (evaluated
    only on some paths of their statement: a conditional expression, an ``and``/``or``, a
    comprehension, a nested function); ``unknown`` is True when a use that does not fail on
    None in eager code is not refined (its compiling is not known)."""

    needed: bool
    before: tuple[cst.BaseStatement, ...] = ()
    left: tuple[cst.Name, ...] = ()
    unknown: bool = False

    @property
    def complete(self) -> bool:
        """Every use that needs it is refined by the asserts."""
        return not self.left and not self.unknown


def refinement(method: MethodState, name: str, *, local: bool = False) -> Refinement:
    """The asserts that refine the Optional parameter ``name`` (``local``: a local the method
    binds by plain or annotated assignments) for its uses that need it."""
    body = method.func.body
    if _tested(body, name) or (_bound_otherwise(body, name, annotated=not local) if local
                               else _rebound(body, name)):
        return Refinement(needed=False)
    parents = parent_map(body)
    uses = [n for n in find_all(body, cst.Name) if n.value == name and _is_read(n, parents)]
    pending = [use for use in uses if not _passed_on(method, use, parents)]
    if not pending:
        return Refinement(needed=False)
    order = {id(node): i for i, node in enumerate(find_all(
        body, cst.Name, cst.AssignTarget, cst.AnnAssign, cst.SimpleStatementLine, cst.If,
        cst.While, cst.For))}
    bindings = [t for t in find_all(body, cst.AssignTarget, cst.AnnAssign)
                if is_name(t.target, name)] if local else []
    before: list[cst.BaseStatement] = []
    left: list[cst.Name] = []
    unknown = False
    for use in pending:
        if any(_refined_by(site, use, parents, order, bindings) for site in before):
            continue
        if not _fails_on_none(method, use, parents):
            unknown = True
            continue
        statement = _assertable_statement(use, parents)
        if statement is None:
            left.append(use)
        else:
            before.append(statement)
    return Refinement(True, tuple(before), tuple(left), unknown)


def optional_locals(method: MethodState) -> list[tuple[cst.Assign, str]]:
    """``name = None`` assignments to declare ``name: Optional[T] = None``: the first in the
    method, when every other assignment to the name is a ``T`` made inside a loop or branch
    that does not hold the None assignment."""
    body = method.func.body
    parameters = set(parameters_of(method.func))
    assigns: dict[str, list[cst.Assign]] = {}
    for assign in own(body, cst.Assign):
        for target in assign.targets:
            if isinstance(target.target, cst.Name):
                assigns.setdefault(target.target.value, []).append(assign)
    found: list[tuple[cst.Assign, str]] = []
    parents = parent_map(body)
    for name, named in assigns.items():
        if name in parameters or not is_name(named[0].value, "None") or \
                len(named[0].targets) != 1 or _bound_otherwise(body, name):
            continue
        values = [a for a in named if not is_name(a.value, "None")]
        if not values or any(len(a.targets) != 1 for a in values):
            continue
        kinds = [method.typer.type_of(a.value)
                 or (TENSOR if scripted_as_tensor(method, a.value) else None)
                 or _local_type(method, a.value) for a in values]
        kind = unify_all(kinds)
        if kind is None or not is_complete(kind) or kind.startswith("Optional[") or \
                without_none(kind) != kind:
            continue
        blocks = _blocks_holding(named[0], parents)
        if all(_blocks_holding(a, parents) == blocks for a in values):
            continue        # straight-line rebinding compiles as it is
        found.append((named[0], f"Optional[{kind}]"))
    return found


def _local_type(method: MethodState, value: cst.BaseExpression,
                seen: frozenset[str] = frozenset()) -> str | None:
    """The one type the known bindings of ``value``, a local, agree on, when the typer leaves
    it unknown because others tell nothing (``xt = tenc(xt)``, a list element's call;
    ``xt, _ = tdec(...)``): TorchScript keeps one type per local (a parameter keeps its
    declared one), so the code compiles only if the unknown ones have that type too, and a
    wrong guess fails validation. A binding to another such local counts with its type."""
    if not isinstance(value, cst.Name) or value.value in seen:
        return None
    name = value.value
    known: set[str] = set()
    param = parameters_of(method.func).get(name)
    if param is not None:
        declared = method.param_types.get(name) or (
            type_from_annotation(param.annotation.annotation)
            if param.annotation is not None else None)
        if declared is not None:
            known.add(declared)
        elif scripted_as_tensor(method, value):
            known.add(TENSOR)
    for node in own(method.func.body, cst.Assign):
        if any(is_name(t.target, name) for t in node.targets):
            kind = method.typer.type_of(node.value) or _local_type(method, node.value,
                                                                   seen | {name})
            if kind is not None:
                known.add(kind)
    for node in own(method.func.body, cst.AnnAssign):
        if is_name(node.target, name):
            known.add(type_from_annotation(node.annotation.annotation) or "?")
    kind = known.pop() if len(known) == 1 else None
    return kind if kind is not None and is_complete(kind) and kind != "None" else None


def optional_local_names(method: MethodState, declared: Iterable[str]) -> list[str]:
    """The locals that may hold None where they are read: annotated ``Optional``, copied from
    an attribute that may be None (declared ``Optional`` at class level, or set to None by
    ``__init__``; not a submodule), or ``declared`` (TSF229's)."""
    facts = method.facts
    found = list(declared)
    for node in own(method.func.body, cst.AnnAssign):
        kind = type_from_annotation(node.annotation.annotation)
        if isinstance(node.target, cst.Name) and kind is not None and \
                kind.startswith("Optional["):
            found.append(node.target.value)
    for assign in own(method.func.body, cst.Assign):
        attr = self_attr(assign.value, method.self_var) if method.self_var else None
        if attr is None or attr in facts.layers or not (
                attr in facts.maybe_none
                or (facts.declared.get(attr) or "").startswith("Optional[")):
            continue
        found.extend(t.target.value for t in assign.targets if isinstance(t.target, cst.Name))
    parameters = set(parameters_of(method.func))
    return [name for name in dict.fromkeys(found) if name not in parameters]


# -- helpers --------------------------------------------------------------------------------------

def _tested(body: cst.CSTNode, name: str) -> bool:
    """``name is (not) None``, ``if name:`` or ``name`` in an ``and``/``or`` somewhere; not an
    ``assert name is None`` or an ``if name is not None: raise ...`` (no ``else``), which refine
    nothing to the inner type past them (demucs' HDecLayer asserts it, torchaudio's raises, in
    the branch that does not use the value)."""
    none_asserts = {id(a.test) for a in find_all(body, cst.Assert)
                    if isinstance(a.test, cst.Comparison) and len(a.test.comparisons) == 1
                    and isinstance(a.test.comparisons[0].operator, cst.Is)}
    none_asserts |= {id(s.test) for s in find_all(body, cst.If)
                     if isinstance(s.test, cst.Comparison) and len(s.test.comparisons) == 1
                     and isinstance(s.test.comparisons[0].operator, cst.IsNot)
                     and s.orelse is None and isinstance(s.body, cst.IndentedBlock)
                     and _raises(s.body.body)}
    for comparison in find_all(body, cst.Comparison):
        if id(comparison) in none_asserts:
            continue
        operands = [comparison.left, *(c.comparator for c in comparison.comparisons)]
        if any(is_name(o, name) for o in operands) and any(
                isinstance(c.operator, cst.Is | cst.IsNot) for c in comparison.comparisons):
            return True
    for test in find_all(body, cst.If, cst.While, cst.IfExp):
        condition = test.test
        if isinstance(condition, cst.UnaryOperation):
            condition = condition.expression
        if is_name(condition, name):
            return True     # ``if name:`` refines too
    return any(is_name(boolean.left, name) or is_name(boolean.right, name)
               for boolean in find_all(body, cst.BooleanOperation))


def _raises(statements: Sequence[cst.BaseStatement]) -> bool:
    """The block ends in a ``raise``, so nothing after it runs."""
    last = statements[-1] if statements else None
    return isinstance(last, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Raise) for small in last.body)


def _rebound(body: cst.CSTNode, name: str) -> bool:
    return _bound_otherwise(body, name) or any(
        any(is_name(t.target, name) for t in a.targets) for a in find_all(body, cst.Assign))


def _bound_otherwise(body: cst.CSTNode, name: str, *, annotated: bool = True) -> bool:
    """Bound by something other than a plain ``name = value`` (or, ``annotated`` False, an
    annotated one): augmented assignment, unpacking, a for or with target, a nested
    function's parameter."""
    for node in find_all(body, cst.AugAssign, cst.AnnAssign):
        if is_name(node.target, name) and (annotated or isinstance(node, cst.AugAssign)):
            return True
    for target in find_all(body, cst.AssignTarget):
        if not isinstance(target.target, cst.Name) and any(
                is_name(n, name) for n in find_all(target.target, cst.Name)):
            return True
    for node in find_all(body, cst.For, cst.WithItem, cst.CompFor):
        bound = node.target if isinstance(node, cst.For | cst.CompFor) else node.asname
        if bound is not None and any(is_name(n, name) for n in find_all(bound, cst.Name)):
            return True
    return any(p.name.value == name for f in find_all(body, cst.FunctionDef, cst.Lambda)
               for p in find_all(f.params, cst.Param))


def _is_read(node: cst.Name, parents: Mapping[int, cst.CSTNode]) -> bool:
    parent = parents.get(id(node))
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return False
    return not (isinstance(parent, cst.AssignTarget | cst.AnnAssign)
                and parent.target is node)


def _passed_on(method: MethodState, use: cst.Name, parents: Mapping[int, cst.CSTNode]) -> bool:
    """Returned (alone or in a tuple), or an argument to a callee that declares its type."""
    parent = parents.get(id(use))
    if isinstance(parent, cst.Return):
        return True
    if isinstance(parent, cst.Element) and isinstance(parents.get(id(parent)), cst.Tuple) and \
            isinstance(parents.get(id(parents[id(parent)])), cst.Return):
        return True
    if isinstance(parent, cst.Arg) and isinstance(call := parents.get(id(parent)), cst.Call):
        if (parent.keyword is not None and parent.keyword.value in TYPED_KEYWORDS
                and (qualified_name(call.func, method.imports) or "").startswith("torch.")):
            return True     # torch functions take ``Device? device``, ``ScalarType? dtype``
        return callee_type(method, call, parent) is not None
    return False


def _fails_on_none(method: MethodState, use: cst.Name, parents: Mapping[int, cst.CSTNode]) -> bool:
    """Eager code raises on None here: arithmetic, an attribute or index, a tensor argument of
    a tensor method, the input of a layer or torch function."""
    parent = parents.get(id(use))
    if isinstance(parent, cst.BinaryOperation | cst.UnaryOperation | cst.Subscript):
        return not (isinstance(parent, cst.Subscript) and parent.value is not use)
    if isinstance(parent, cst.AugAssign):
        return True
    if isinstance(parent, cst.Attribute):
        return parent.value is use
    if not (isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star):
        return False
    call = parents.get(id(parent))
    if not isinstance(call, cst.Call):
        return False
    positional = [a for a in call.args if a.keyword is None and not a.star]
    index = next((i for i, a in enumerate(positional) if a is parent), -1)
    func = call.func
    if isinstance(func, cst.Attribute):
        if method.self_var and is_name(func.value, method.self_var):
            return func.attr.value in method.facts.layers and index == 0
        if func.attr.value in _ARITHMETIC_METHODS and index == 0:
            return method.typer.type_of(func.value) == TENSOR
        if index in TENSOR_ARGUMENTS.get(func.attr.value, ()):
            return tensor_receiver(method, func.value)
    qualified = qualified_name(func, method.imports) or ""
    short = qualified.rpartition(".")[2]
    return (qualified.startswith("torch.") and index == 0 and short not in TENSOR_CONSTRUCTORS
            and short[:1].islower())


def _assertable_statement(use: cst.Name, parents: Mapping[int, cst.CSTNode]
                          ) -> cst.BaseStatement | None:
    """The statement of a block that evaluates ``use`` whenever it runs (a simple statement,
    or the test of an ``if`` (not an ``elif``) or ``while``, a ``for``'s iterable), so an
    assert can go just before it; None when ``use`` is evaluated only on some paths."""
    node: cst.CSTNode = use
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, cst.IfExp | cst.BooleanOperation | cst.Lambda | cst.ListComp
                      | cst.SetComp | cst.DictComp | cst.GeneratorExp | cst.FunctionDef
                      | cst.SimpleStatementSuite):
            return None
        evaluates_use = (isinstance(parent, cst.SimpleStatementLine)
                         or (isinstance(parent, cst.If | cst.While) and node is parent.test)
                         or (isinstance(parent, cst.For) and node is parent.iter))
        if evaluates_use:
            # An ``elif``'s parent is its ``if``, not a block: its test runs only sometimes.
            in_block = isinstance(parents.get(id(parent)), cst.IndentedBlock)
            return parent if in_block else None  # type: ignore[return-value]
        if isinstance(parent, cst.BaseCompoundStatement):
            return None
        node = parent
    return None


def _refined_by(site: cst.BaseStatement, use: cst.Name, parents: Mapping[int, cst.CSTNode],
                order: dict[int, int], bindings: list[cst.CSTNode]) -> bool:
    """An assert just before ``site`` refines ``use``: the use is in ``site`` or in a later
    statement of its block, and no binding of the name (``bindings``, a local's) comes between
    them in source order (``order``), nor in a loop around the use inside that block."""
    block = parents[id(site)]
    assert isinstance(block, cst.IndentedBlock)
    node: cst.CSTNode = use
    loops: list[cst.CSTNode] = []
    while id(node) in parents and parents[id(node)] is not block:
        node = parents[id(node)]
        if isinstance(node, cst.For | cst.While):
            loops.append(node)
    if parents.get(id(node)) is not block:
        return False
    places = {id(statement): i for i, statement in enumerate(block.body)}
    if places[id(node)] < places[id(site)]:
        return False
    start, end = order[id(site)], order[id(use)]
    return not any(start < order[id(binding)] < end or _inside(binding, loops, parents)
                   for binding in bindings)


def _inside(node: cst.CSTNode, outer: list[cst.CSTNode], parents: Mapping[int, cst.CSTNode]
            ) -> bool:
    held = {id(o) for o in outer}
    while id(node) in parents:
        node = parents[id(node)]
        if id(node) in held:
            return True
    return False


def _blocks_holding(node: cst.CSTNode, parents: Mapping[int, cst.CSTNode]) -> list[int]:
    """The loops and branches around ``node`` (ids, innermost first)."""
    blocks: list[int] = []
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, cst.If | cst.Else | cst.For | cst.While | cst.Try
                      | cst.ExceptHandler | cst.Finally):
            blocks.append(id(node))
    return blocks
