"""The types TorchScript gives each binding of a compiled method, in the order it compiles them.

``tsfix check`` reads this walk (:func:`type_flow`) for TSF118 (returns of different types) and
TSF119 (a name re-bound in a nested block to a value of another type); the ``rebound-local``
rule reads it too, to rename the re-bound value (``x_packed = pack_padded_sequence(x, ...)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.syntax import find_all, qualified_name, self_attr, self_name
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    is_complete,
    parts_of,
    type_from_annotation,
)

# ---- the types TorchScript gives each binding, in the order it compiles them -------------------

PACKED = "PackedSequence"
_PACKING = {"torch.nn.utils.rnn.pack_padded_sequence", "torch.nn.utils.rnn.pack_sequence"}
_UNPACKING = {"torch.nn.utils.rnn.pad_packed_sequence": f"Tuple[{TENSOR}, {TENSOR}]"}
# The hidden state an RNN layer returns next to its output.
_RNN_HIDDEN = {"LSTM": f"Tuple[{TENSOR}, {TENSOR}]", "GRU": TENSOR, "RNN": TENSOR}


@dataclass(frozen=True)
class Rebinding:
    """A name bound in an enclosing block, assigned a value of a type TorchScript cannot give
    it in a nested block (``Variable 'x' previously had type Tensor but is now being assigned
    to a value of type int``)."""

    name: str
    target: cst.Name            # the bound name in the assignment
    statement: cst.BaseStatement  # the line holding the assignment
    block: cst.IndentedBlock | None  # the block whose statement it is (None: a one-line body)
    previous: str               # the type the name has from the enclosing block
    assigned: str               # the type of the value assigned here
    defined: cst.CSTNode        # where the name got ``previous`` (a parameter or a binding)


@dataclass(frozen=True)
class ReturnConflict:
    """A return whose value's type does not merge with the earlier returns' type, or does not
    match the method's return annotation."""

    node: cst.Return
    returned: str
    expected: str
    earlier: cst.CSTNode        # the earlier return, or the annotation
    annotated: bool


@dataclass
class TypeFlow:
    rebindings: list[Rebinding] = field(default_factory=list)
    returns: list[ReturnConflict] = field(default_factory=list)


def assignable(value: str, declared: str) -> bool:
    """Whether TorchScript lets a variable of type ``declared`` take a ``value`` in a nested
    block (measured: the same type, None or the inner type into an Optional, element-wise
    into a tuple; an int is no float there)."""
    if value == declared:
        return True
    head, args = parts_of(declared)
    if head == "Optional":
        return value == "None" or assignable(value, args[0])
    value_head, value_args = parts_of(value)
    if head == value_head == "Tuple" and len(args) == len(value_args):
        return all(assignable(v, d) for v, d in zip(value_args, args, strict=True))
    return False


def merge_returns(first: str, later: str) -> str | None:
    """The type two return statements give a method (measured on torch 2.13: None and T give
    Optional[T], tuples merge element-wise, int and float do not merge); None if they do not
    merge ("Previous return statement returned a value of type ...")."""
    if first == later:
        return first
    if "None" in (first, later):
        other = later if first == "None" else first
        return other if other.startswith("Optional[") else f"Optional[{other}]"
    head_a, args_a = parts_of(first)
    head_b, args_b = parts_of(later)
    if head_a == "Optional" or head_b == "Optional":
        inner_a = args_a[0] if head_a == "Optional" else first
        inner_b = args_b[0] if head_b == "Optional" else later
        inner = merge_returns(inner_a, inner_b)
        if inner is None:
            return None
        return inner if inner.startswith("Optional[") else f"Optional[{inner}]"
    if head_a == head_b == "Tuple" and len(args_a) == len(args_b):
        merged = [merge_returns(a, b) for a, b in zip(args_a, args_b, strict=True)]
        if any(m is None for m in merged):
            return None
        return f"Tuple[{', '.join(m for m in merged if m is not None)}]"
    return None


def type_flow(facts: ClassFacts, method: str) -> TypeFlow:
    """The re-bindings and return types of one compiled method that TorchScript rejects, as
    far as the value types can be read (a value of unknown type is never reported). Once
    per class facts: a class no rule changed keeps its facts, and its flows, for the next."""
    flow = facts.type_flows.get(method)
    if isinstance(flow, TypeFlow):
        return flow
    walker = _Flow(facts, method, facts.methods[method])
    walker.run()
    facts.type_flows[method] = walker.flow
    return walker.flow


@dataclass
class _Name:
    """A name's type to TorchScript (``kind``, from the block at ``depth`` that first binds
    it) and the type of the value it holds in Python at this point (``value``: another type
    after a re-binding TorchScript rejects, so that the reads after it are typed as they run)."""

    kind: str | None
    depth: int
    defined: cst.CSTNode
    value: str | None = None
    rebound: bool = False       # holds a value of another type than ``kind``

    def holds(self) -> str | None:
        return self.value if self.rebound else self.kind


class _Flow:
    """Walks one method's blocks in source order, as TorchScript compiles them: a name first
    bound in a block keeps that block's type in every block nested in it, and a name bound in
    a branch or a loop only is unknown after it."""

    def __init__(self, facts: ClassFacts, method: str, func: cst.FunctionDef) -> None:
        self.facts = facts
        self.func = func
        self.never = facts.never_compiled(method)
        self.flow = TypeFlow()
        self.self_var = self_name(func)
        base = facts.typer(method)
        self.names: dict[str, _Name] = {}
        params = {p.name.value: p for p in (*func.params.posonly_params, *func.params.params,
                                             *func.params.kwonly_params)}
        for name, kind in facts.parameter_types(method).items():
            param = params.get(name)
            if param is None:
                continue
            if param.annotation is None and param.default is None and param.star == "":
                kind = TENSOR   # what TorchScript makes of an unannotated parameter
            self.names[name] = _Name(kind, 0, param)
        self.typer = Typer({}, base.imports, base.self_var, base.attributes, base.layers)
        self.rnns = _rnn_layers(facts)
        self.constants = constant_attributes(facts.cls)
        self.static = 0         # > 0: inside a branch on a constant
        self.first_return: tuple[str, cst.CSTNode] | None = None
        self.returns_unknown = False
        annotation = func.returns
        self.declared = (type_from_annotation(annotation.annotation)
                         if annotation is not None else None)

    def run(self) -> None:
        self._block(self.func.body, 0)

    # -- types --

    def type_of(self, node: cst.BaseExpression) -> str | None:
        # A local first set to None is TSF229's (and refined by tests this walk does not
        # follow): its type is unknown here.
        self.typer.env = {name: entry.holds() for name, entry in self.names.items()
                          if entry.holds() != "None"}
        if isinstance(node, cst.Call):
            called = qualified_name(node.func, self.facts.imports) or ""
            if called in _PACKING:
                return PACKED
            if called in _UNPACKING:
                return _UNPACKING[called]
            attr = (self_attr(node.func, self.self_var) if self.self_var is not None
                    else None)
            if attr is not None and attr in self.rnns and node.args and not node.args[0].keyword:
                given = self.type_of(node.args[0].value)
                if given in (PACKED, TENSOR):
                    return f"Tuple[{given}, {_RNN_HIDDEN[self.rnns[attr]]}]"
                return None
        if isinstance(node, cst.Tuple) and node.elements:
            kinds = [self.type_of(e.value) if not isinstance(e, cst.StarredElement) else None
                     for e in node.elements]
            if any(k is None for k in kinds):
                return None
            return f"Tuple[{', '.join(k for k in kinds if k is not None)}]"
        return self.typer.type_of(node)

    # -- blocks --

    def _block(self, block: cst.BaseSuite, depth: int) -> None:
        if isinstance(block, cst.IndentedBlock):
            for statement in block.body:
                if id(statement) not in self.never:
                    self._statement(statement, block, depth)
        elif isinstance(block, cst.SimpleStatementSuite):
            for small in block.body:
                self._small(small, block, None, depth)

    def _statement(self, statement: cst.BaseStatement, block: cst.IndentedBlock,
                   depth: int) -> None:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self._small(small, statement, block, depth)
        elif isinstance(statement, cst.If):
            self._if(statement, depth)
        elif isinstance(statement, cst.For | cst.While):
            before = dict(self.names)
            if isinstance(statement, cst.For):
                self._bind_target(statement.target, self._iterated(statement.iter),
                                  statement, None, depth + 1)
            self._block(statement.body, depth + 1)
            after = self.names
            if statement.orelse is not None:
                self._block(statement.orelse.body, depth + 1)
            self.names = _after_branches(before, [after, self.names])
        elif isinstance(statement, cst.With):
            # Measured: a with-block is no block of its own to TorchScript.
            self._block(statement.body, depth)

    def _if(self, statement: cst.If, depth: int) -> None:
        if self.self_var is not None and any(
                self_attr(node, self.self_var) in self.constants
                for node in find_all(statement.test, cst.Attribute)):
            # A test of a constant (Final, __constants__): TorchScript compiles only the
            # branch the value chooses, which this walk cannot tell.
            self.returns_unknown = True
            self.static += 1
        before = dict(self.names)
        self._block(statement.body, depth + 1)
        body_env, body_exits = self.names, _ends_flow(statement.body)
        self.names = dict(before)
        orelse = statement.orelse
        if isinstance(orelse, cst.If):
            self._if(orelse, depth + 1)
            else_exits = False
        elif isinstance(orelse, cst.Else):
            self._block(orelse.body, depth + 1)
            else_exits = _ends_flow(orelse.body)
        else:
            else_exits = False
        else_env = self.names
        if body_exits and not else_exits:
            sides = [else_env]
        elif else_exits and not body_exits:
            sides = [body_env]
        else:
            sides = [body_env, else_env]
        merged = _after_branches(before, sides)
        for name in set.intersection(*(set(side) for side in sides)) - set(before):
            kinds = {side[name].holds() for side in sides}
            kind = kinds.pop() if len(kinds) == 1 else None
            merged[name] = _Name(kind, depth, sides[0][name].defined)
        self.names = merged
        if self.self_var is not None and any(
                self_attr(node, self.self_var) in self.constants
                for node in find_all(statement.test, cst.Attribute)):
            self.static -= 1

    def _small(self, small: cst.BaseSmallStatement, statement: cst.CSTNode,
               block: cst.IndentedBlock | None, depth: int) -> None:
        line = statement if isinstance(statement, cst.BaseStatement) else None
        if isinstance(small, cst.Assign):
            kind = self.type_of(small.value)
            for target in small.targets:
                self._bind_target(target.target, kind, line, block, depth)
        elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
            declared = type_from_annotation(small.annotation.annotation)
            self.names[small.target.value] = _Name(declared, depth, small)
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
            operator = getattr(cst, type(small.operator).__name__.removesuffix("Assign"))()
            kind = self.type_of(cst.BinaryOperation(small.target, operator, small.value))
            self._bind(small.target, kind, line, block, depth)
        elif isinstance(small, cst.Return):
            self._return(small)

    def _bind_target(self, target: cst.BaseExpression, kind: str | None,
                     line: cst.BaseStatement | None, block: cst.IndentedBlock | None,
                     depth: int) -> None:
        if isinstance(target, cst.Name):
            self._bind(target, kind, line, block, depth)
        elif isinstance(target, cst.Tuple | cst.List):
            parts: list[str | None] = [None] * len(target.elements)
            if kind is not None:
                head, args = parts_of(kind)
                if head == "Tuple" and len(args) == len(parts):
                    parts = list(args)
            for element, part in zip(target.elements, parts, strict=True):
                if not isinstance(element, cst.StarredElement):
                    self._bind_target(element.value, part, line, block, depth)

    def _bind(self, target: cst.Name, kind: str | None, line: cst.BaseStatement | None,
              block: cst.IndentedBlock | None, depth: int) -> None:
        name = target.value
        known = self.names.get(name)
        if known is None or known.depth >= depth:
            self.names[name] = _Name(kind, depth, target)
            return
        # Bound in an enclosing block: TorchScript keeps that type here.
        self.names[name] = _Name(known.kind, known.depth, known.defined, kind,
                                 rebound=kind != known.kind)
        previous = known.kind
        if (line is None or self.static or previous is None or kind is None
                or not _judged(previous) or not _judged(kind)):
            return
        # A None first is TSF229's; an Optional value may be refined by a test TorchScript
        # sees and this walk does not follow.
        if previous != "None" and not kind.startswith("Optional[") and not assignable(
                kind, previous):
            self.flow.rebindings.append(Rebinding(name, target, line, block, previous, kind,
                                                  known.defined))

    def _return(self, node: cst.Return) -> None:
        kind = "None" if node.value is None else self.type_of(node.value)
        if self.static:
            return
        if self.declared is not None and is_complete(self.declared):
            if (kind is not None and _judged(kind) and not kind.startswith("Optional[")
                    and not assignable(kind, self.declared)):
                self.flow.returns.append(ReturnConflict(node, kind, self.declared,
                                                        self.func, True))
            return
        if self.returns_unknown:
            return
        if not _judged(kind):
            self.returns_unknown = True
            return
        assert kind is not None
        if self.first_return is None:
            self.first_return = (kind, node)
            return
        merged = merge_returns(self.first_return[0], kind)
        if merged is None:
            self.flow.returns.append(ReturnConflict(node, kind, self.first_return[0],
                                                    self.first_return[1], False))
        else:
            self.first_return = (merged, self.first_return[1])

    def _iterated(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and \
                node.func.value == "range":
            return "int"
        kind = self.type_of(node)
        if kind == TENSOR:
            return TENSOR
        head, args = parts_of(kind) if kind else ("", [])
        return args[0] if head == "List" and args and args[0] != "?" else None


def _after_branches(before: dict[str, _Name], sides: list[dict[str, _Name]]
                    ) -> dict[str, _Name]:
    """The names bound before a branch or loop, after it: their TorchScript type is kept; the
    value they hold is known when every way through agrees on it."""
    merged = dict(before)
    for name, entry in before.items():
        held = {side[name].holds() if name in side else entry.holds() for side in sides}
        if held != {entry.holds()}:
            value = held.pop() if len(held) == 1 else None
            merged[name] = _Name(entry.kind, entry.depth, entry.defined, value,
                                 rebound=value != entry.kind)
    return merged


def with_article(kind: str) -> str:
    """``an int``, ``a Tensor``: a type in a sentence."""
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def _judged(kind: str | None) -> bool:
    """A type this walk is sure of: complete, and not a list or dict whose element type
    came from a guess."""
    return kind is not None and is_complete(kind)


def _ends_flow(block: cst.BaseSuite) -> bool:
    body: Sequence[cst.CSTNode] = block.body if isinstance(block, cst.IndentedBlock) else [block]
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine | cst.SimpleStatementSuite):
        return isinstance(last.body[-1], cst.Return | cst.Raise)
    return False


def constant_attributes(cls: cst.ClassDef) -> set[str]:
    """Attributes TorchScript treats as constants: ``name: Final[...]`` in the class body and
    the names listed in ``__constants__``."""
    found: set[str] = set()
    if not isinstance(cls.body, cst.IndentedBlock):
        return found
    for line in cls.body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                annotation = small.annotation.annotation
                head = annotation.value if isinstance(annotation, cst.Subscript) else annotation
                if (get_full_name_for_node(head) or "").rpartition(".")[2] == "Final":
                    found.add(small.target.value)
            elif isinstance(small, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == "__constants__"
                    for t in small.targets):
                found.update(str(s.evaluated_value) for s in find_all(small.value,
                                                                      cst.SimpleString))
    return found


def _rnn_layers(facts: ClassFacts) -> Mapping[str, str]:
    """``self.<attr>`` -> LSTM/GRU/RNN for the recurrent layers ``__init__`` builds."""
    found: dict[str, str] = {}
    for assigned in facts.assignments:
        value = assigned.value
        if assigned.method != "__init__" or not isinstance(value, cst.Call):
            continue
        called = qualified_name(value.func, facts.imports) or ""
        short = called.rpartition(".")[2]
        if called.startswith("torch.nn.") and short in _RNN_HIDDEN:
            found[assigned.attr] = short
    return found

