"""Analysis of one compiled method: its numpy uses, node index, locals and parameter types.

:class:`MethodAnalysis` holds what the flow walk (``_flow``), the block boundaries
(``_boundary``) and the emission (``_emission``) share about one method, and the refusals
they record. Which code is compiled comes from the class facts (``never_compiled``); the
numpy uses from :func:`~tsfix.codemods.facts.numpy_usage.numpy_uses`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.locals import function_locals
from tsfix.codemods.facts.numpy_usage import NumpyUse, function_numpy_bindings, numpy_uses
from tsfix.codemods.facts.statements import MUTATORS
from tsfix.codemods.facts.syntax import children, find_all, literal_type, self_name
from tsfix.codemods.facts.value_types import TENSOR, is_complete, unify, without_none
from tsfix.codemods.rules.ignore_numpy._class_info import ClassInfo
from tsfix.codemods.rules.ignore_numpy._statements import imports_numpy, is_name
from tsfix.codemods.rules.ignore_numpy._types import Env, NumpyTyper, observation


@dataclass
class Block:
    """A run of statements to move (or that was refused)."""

    method: str
    stmts: list[cst.BaseStatement]
    loops: tuple[cst.CSTNode, ...]
    env_in: Env
    env_out: Env
    returns: bool
    inputs: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    return_type: str | None = None
    attributes_set: list[str] = field(default_factory=list)
    imports: list[cst.SimpleStatementLine] = field(default_factory=list)
    observed_types: int = 0
    name: str = ""
    # ``name = []`` lines before the block that get the type the block stores in them.
    declare: list[tuple[cst.SimpleStatementLine, str, str]] = field(default_factory=list)


@dataclass
class Local:
    """Where a function-scope name is assigned and read (pre-order node indexes)."""

    assigns: list[int] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    mutations: list[int] = field(default_factory=list)
    import_only: bool = True


@dataclass(frozen=True)
class Refusal:
    """Code left compiled: ``node`` is where it is reported, ``first..last`` the pre-order
    indexes it covers (the numpy uses in it are left in place for this reason)."""

    node: cst.CSTNode
    first: int
    last: int
    reason: str


class MethodAnalysis:
    """One compiled method of a class being rewritten."""

    def __init__(self, owner: ClassInfo, func: cst.FunctionDef) -> None:
        self.owner = owner
        self.func = func
        self.method = func.name.value
        self.self_var = self_name(func) or "self"
        self.imports = owner.module.imports
        self.bindings = function_numpy_bindings(func, owner.module.numpy_bindings)
        self.observed = owner.observed.get(self.method, {})
        never = owner.facts.never_compiled(self.method)
        # The numpy uses TorchScript would compile (in source order).
        self.uses: list[NumpyUse] = [u for u in numpy_uses(func.body, self.bindings,
                                                           self.imports)
                                     if id(u.node) not in never]
        self.from_observation: set[str] = set()
        self.refusals: list[Refusal] = []
        self._refused: set[int] = set()
        self.start: dict[int, int] = {}
        self.end: dict[int, int] = {}
        self.nodes: list[cst.CSTNode] = []
        self.locals: dict[str, Local] = {}
        if not self.uses:
            return
        self._index()
        self.excluded_positions = sorted(self.start[i] for i in never if i in self.start)
        self.use_positions = sorted(self.start[id(u.node)] for u in self.uses)
        self.from_numpy = {id(u.node) for u in self.uses if u.name == "torch.from_numpy"}

    def refuse(self, node: cst.CSTNode, reason: str,
               span: tuple[int, int] | None = None) -> None:
        """Leave ``node`` (or the statements ``span`` covers) compiled, for ``reason``."""
        if id(node) in self._refused:
            return
        self._refused.add(id(node))
        first, last = span or (self.start[id(node)], self.end[id(node)])
        self.refusals.append(Refusal(node, first, last, reason))

    # -- the node index ------------------------------------------------------------------------

    def _index(self) -> None:
        """Pre-order index and subtree end of every node of the method."""
        stack: list[tuple[cst.CSTNode, bool]] = [(self.func, False)]
        while stack:
            node, done = stack.pop()
            if done:
                self.end[id(node)] = len(self.nodes) - 1
                continue
            self.start[id(node)] = len(self.nodes)
            self.nodes.append(node)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(children(node)))

    def excluded(self, position: int) -> bool:
        """Whether the node at ``position`` is never compiled (class facts)."""
        at = bisect.bisect_left(self.excluded_positions, position)
        return at < len(self.excluded_positions) and self.excluded_positions[at] == position

    def holds_excluded(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` contains code that is never compiled."""
        first, last = self.start[id(node)], self.end[id(node)]
        at = bisect.bisect_left(self.excluded_positions, first)
        return at < len(self.excluded_positions) and self.excluded_positions[at] <= last

    def span(self, first: cst.CSTNode, last: cst.CSTNode | None = None) -> tuple[int, int]:
        return self.start[id(first)], self.end[id(last if last is not None else first)]

    # -- locals (LibCST scope analysis) --------------------------------------------------------

    def read_locals(self) -> None:
        """Assignments, reads and in-place mutations of each function-scope name, and whether
        only numpy imports bind it."""
        for name, found in function_locals(self.func, self.start).items():
            self.locals[name] = Local(found.assigns, found.reads, import_only=all(
                imports_numpy(node) for node in found.bindings))
        for node in find_all(self.func.body, cst.Call, cst.AssignTarget, cst.AugAssign,
                             cst.Del):
            root: cst.BaseExpression | None = None
            if isinstance(node, cst.Call):
                if isinstance(node.func, cst.Attribute) and node.func.attr.value in MUTATORS:
                    root = node.func.value
            else:
                target = node.target
                if isinstance(target, cst.Subscript):
                    root = target.value
            if isinstance(root, cst.Name) and root.value in self.locals:
                self.locals[root.value].mutations.append(self.start[id(node)])

    # -- types ---------------------------------------------------------------------------------

    def typer(self) -> NumpyTyper:
        numpy_nodes = {id(self.nodes[p]) for p in self.use_positions
                       if id(self.nodes[p]) not in self.from_numpy}
        return NumpyTyper(self.imports, self.self_var, self.owner.facts.attributes,
                          self.owner.facts.layers, numpy_nodes, self.owner.returns)

    def parameter_env(self) -> Env:
        """Parameter -> type. Annotations (and a default that is no literal) follow the
        shared policy (``ClassFacts.parameter_types``); the rest TorchScript's own defaults,
        which decide what the caller hands the ignored method."""
        seen = {name: kind for name, kind in
                ((name, observation(raw)) for name, raw in self.observed.items())
                if kind is not None and kind != "None"}
        typed = self.owner.facts.parameter_types(self.method, seen)
        params = self.func.params
        listed = [*params.posonly_params, *params.params, *params.kwonly_params]
        env: Env = {}
        for index, param in enumerate(listed):
            name = param.name.value
            if index == 0 and self_name(self.func) is not None:
                continue
            kind = typed.get(name)
            if param.annotation is None:
                kind = self._unannotated(param, kind, seen.get(name))
            env[name] = kind
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                env[star.name.value] = None
        return env

    def _unannotated(self, param: cst.Param, typed: str | None, seen: str | None) -> str | None:
        # TODO(facts): ClassFacts.parameter_types types an unannotated parameter without
        # default as Tensor only when the body uses it as one, gives a ``None`` default no
        # Optional type from the examples, prefers an observed type to a literal default's
        # (no widening), and does not say which types came from the example runs. What an
        # ignored method receives is what TorchScript's own defaults make of the parameter.
        name = param.name.value
        default = param.default
        if default is None:
            if seen == TENSOR:
                return TENSOR
            if seen is not None:
                self.from_observation.add(name)
                return seen
            # An unannotated parameter is a Tensor -- unless the body clearly uses it as a
            # number (then annotate, or nothing, decides).
            return None if self._used_as_number(name) else TENSOR
        if is_name(default, "None"):
            inner = without_none(seen) if seen else None
            if inner is not None and is_complete(inner):
                self.from_observation.add(name)
                return f"Optional[{inner}]"
            return None
        literal = literal_type(default)
        if literal is None:
            # No literal: the shared policy (an observed type, else unknown).
            if typed is not None:
                self.from_observation.add(name)
            return typed
        if seen is not None and without_none(seen):
            widened = unify(literal, without_none(seen))
            if widened is not None:
                return widened
        return literal

    def _used_as_number(self, name: str) -> bool:
        """``range(n)``, ``x[:n]``: a parameter used so is not a Tensor."""
        for node in find_all(self.func.body, cst.Call, cst.Slice):
            if isinstance(node, cst.Call):
                if get_full_name_for_node(node.func) == "range" and any(
                        is_name(a.value, name) for a in node.args):
                    return True
            elif any(is_name(bound, name) for bound in (node.lower, node.upper, node.step)):
                return True
        return False
