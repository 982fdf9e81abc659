"""The flow walk of ``ignore-numpy``: types through a method, numpy statements, runs.

Statements are walked in order, with the type of every local (flow-sensitive: branches merge,
loops run twice). Each statement is numpy (uses numpy or reads a numpy value), plain, a
numpy ``return``, or a barrier (cannot move); maximal runs of numpy statements in one suite
become candidate :class:`~tsfix.codemods.rules.ignore_numpy._analysis.Block` s.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.statements import MUTATORS, escape
from tsfix.codemods.facts.syntax import find_all, self_attr
from tsfix.codemods.facts.value_types import (
    TENSOR,
    is_complete,
    parts_of,
    type_from_annotation,
)
from tsfix.codemods.rules.ignore_numpy._analysis import Block, MethodAnalysis
from tsfix.codemods.rules.ignore_numpy._statements import empty_container_name, is_import_line
from tsfix.codemods.rules.ignore_numpy._types import NUMPY, Env, merge, observation


@dataclass
class _Item:
    stmt: cst.BaseStatement
    kind: str            # numpy | return | plain | barrier


class FlowWalk:
    """Walks one method's body; ``blocks`` are the runs found, ``env_before``/``env_after``
    the types before and after each statement."""

    def __init__(self, analysis: MethodAnalysis) -> None:
        self.a = analysis
        self.typer = analysis.typer()
        self.blocks: list[Block] = []
        self.env_before: dict[int, Env] = {}
        self.env_after: dict[int, Env] = {}

    def walk(self) -> list[Block]:
        body = self.a.func.body
        assert isinstance(body, cst.IndentedBlock)
        self.suite(body.body, self.a.parameter_env(), (), collect=True)
        return self.blocks

    def suite(self, stmts: Sequence[cst.BaseStatement], env: Env,
              loops: tuple[cst.CSTNode, ...], collect: bool) -> Env:
        items: list[_Item] = []
        for stmt in stmts:
            self.env_before[id(stmt)] = dict(env)
            kind, env = self.statement(stmt, env, loops, collect)
            self.env_after[id(stmt)] = dict(env)
            items.append(_Item(stmt, kind))
        if collect:
            self._runs(items, loops)
        return env

    def statement(self, stmt: cst.BaseStatement, env: Env, loops: tuple[cst.CSTNode, ...],
                  collect: bool) -> tuple[str, Env]:
        if isinstance(stmt, cst.SimpleStatementLine):
            numpy = self.has_numpy(stmt, env)
            if numpy and is_import_line(stmt):
                numpy = False
            kind = "numpy" if numpy else "plain"
            smalls = stmt.body
            if any(isinstance(s, cst.Return) for s in smalls):
                kind = "return" if numpy else "barrier"
            elif any(isinstance(s, cst.Break | cst.Continue | cst.Global | cst.Nonlocal
                                | cst.Import | cst.ImportFrom) for s in smalls):
                if numpy and collect:
                    self.a.refuse(stmt, "numpy on a line with `break`/`continue`/`global`/an "
                                  "import, which cannot move; left alone")
                kind = "barrier"
            if kind != "barrier":
                reason = self.forbidden(stmt)
                if reason is not None:
                    if numpy and collect:
                        self.a.refuse(stmt, f"{reason}; left alone")
                    kind = "barrier"
            return kind, self._simple_effects(stmt.body, env, numpy, stmt)
        if not self.has_numpy(stmt, env):
            after = self._compound(stmt, env, loops, False)
            movable = (escape(stmt) is None and self.forbidden(stmt) is None
                       and not self.a.holds_excluded(stmt))
            return ("plain" if movable else "barrier"), after
        reason = escape(stmt) or self.forbidden(stmt)
        if reason is None:
            after = self._compound(stmt, env, loops, False)
            return "numpy", self._taint(stmt, after)
        if collect:
            self._header(stmt, env, reason)
        return "barrier", self._compound(stmt, env, loops, collect)

    def _header(self, stmt: cst.CSTNode, env: Env, reason: str) -> None:
        """Numpy in the header of a statement that cannot move cannot be moved either."""
        headers: list[cst.CSTNode] = []
        if isinstance(stmt, cst.If | cst.While):
            headers.append(stmt.test)
        elif isinstance(stmt, cst.For):
            headers.extend([stmt.target, stmt.iter])
        elif isinstance(stmt, cst.With):
            headers.extend(stmt.items)
        keyword = {cst.If: "if", cst.While: "while", cst.For: "for", cst.With: "with",
                   cst.Try: "try"}.get(type(stmt), "compound")
        for header in headers:
            if self.has_numpy(header, env):
                # Covers the header only: the bodies are walked on their own.
                self.a.refuse(stmt, f"the `{keyword}` header uses numpy, and the statement "
                              f"cannot move as a whole: {reason}; left alone",
                              self.a.span(header))
                return
        if not isinstance(stmt, cst.If | cst.While | cst.For | cst.With | cst.Try):
            self.a.refuse(stmt, f"numpy inside a `{type(stmt).__name__}` statement; left "
                          "alone")

    def has_numpy(self, node: cst.CSTNode, env: Env) -> bool:
        """Whether ``node`` uses numpy or reads a local holding a numpy value."""
        a = self.a
        first, last = a.start[id(node)], a.end[id(node)]
        at = bisect.bisect_left(a.use_positions, first)
        if at < len(a.use_positions) and a.use_positions[at] <= last:
            return True
        for name, kind in env.items():
            if kind == NUMPY:
                local = a.locals.get(name)
                if local and any(first <= r <= last and not a.excluded(r)
                                 for r in local.reads):
                    return True
        return False

    def forbidden(self, stmt: cst.CSTNode) -> str | None:
        """Why ``stmt`` cannot run inside an ignored method of a scripted module."""
        self_var = self.a.self_var
        owner = self.a.owner
        for node in find_all(stmt, cst.Call, cst.Attribute, cst.Global, cst.Nonlocal,
                             cst.AssignTarget, cst.AugAssign, cst.Yield, cst.Await):
            if isinstance(node, cst.Global | cst.Nonlocal):
                return "`global`/`nonlocal` in the block"
            if isinstance(node, cst.Yield | cst.Await):
                return "`yield`/`await` in the block"
            if isinstance(node, cst.AssignTarget | cst.AugAssign):
                if isinstance(node.target, cst.Name) and node.target.value == self_var:
                    return f"the block rebinds `{self_var}`"
                target = node.target
                if isinstance(target, cst.Subscript):
                    attr = self_attr(target.value, self_var)
                    if attr is not None and attr in owner.containers:
                        return (f"the block changes self.{attr} in place, and under script "
                                "an ignored method sees a copy of a list/dict attribute")
                continue
            if isinstance(node, cst.Attribute):
                attr = self_attr(node, self_var)
                if attr is not None and attr in owner.numpy_attributes:
                    return (f"the block reads self.{attr}, a numpy value TorchScript drops "
                            "from the scripted module (an ignored method cannot see it; "
                            "register it as a buffer)")
                continue
            func = node.func
            if isinstance(func, cst.Call) and get_full_name_for_node(func.func) == "super":
                return "the block calls super()"
            if isinstance(func, cst.Name) and func.value == "super":
                return "the block calls super()"
            attr = self_attr(func, self_var)
            if attr is not None:
                what = ("submodule" if attr in owner.facts.layers or attr not in
                        owner.facts.methods else "method")
                return (f"the block calls {self_var}.{attr}(...), a {what} that cannot be "
                        "called from a @torch.jit.ignore method of a scripted module "
                        "('ScriptModule' object is not callable"
                        + ("; call .forward(...)" if what == "submodule" else "") + ")")
            if isinstance(func, cst.Attribute) and func.attr.value in MUTATORS:
                attr = self_attr(func.value, self_var)
                if attr is not None and owner.facts.attributes.get(attr) != TENSOR:
                    return (f"the block changes self.{attr} in place ({func.attr.value}), and "
                            "under script an ignored method sees a copy of a list/dict "
                            "attribute")
        return None

    def _simple_effects(self, smalls: Sequence[cst.BaseSmallStatement], env: Env, numpy: bool,
                        stmt: cst.CSTNode) -> Env:
        """The types after a line of small statements (``stmt`` is the line)."""
        env = dict(env)
        bound: list[str] = []
        for small in smalls:
            self.typer.env = env
            if isinstance(small, cst.Assign):
                kind = self.typer.type_of(small.value)
                for target in small.targets:
                    self._bind(target.target, kind, env, bound)
            elif isinstance(small, cst.AnnAssign):
                self._bind(small.target, type_from_annotation(small.annotation.annotation),
                           env, bound)
            elif isinstance(small, cst.AugAssign):
                operator = getattr(cst, type(small.operator).__name__.removesuffix("Assign"),
                                   None)
                kind = None
                if operator is not None:
                    kind = self.typer.type_of(cst.BinaryOperation(small.target, operator(),
                                                                  small.value))
                self._bind(small.target, kind, env, bound)
            elif isinstance(small, cst.Import | cst.ImportFrom):
                for alias in (small.names if not isinstance(small.names, cst.ImportStar)
                              else ()):
                    local = alias.asname.name if alias.asname else alias.name
                    for name in find_all(local, cst.Name)[:1]:
                        env[name.value] = None
        for name in bound:
            self._settle(name, env, numpy, stmt)
        return env

    def _settle(self, name: str, env: Env, numpy: bool, stmt: cst.CSTNode) -> None:
        """A name just assigned: unknown types come from the example runs when this is the
        last assignment of the name, and a numpy statement's untyped results hold numpy."""
        kind = env.get(name)
        if kind is not None and kind != NUMPY and is_complete(kind):
            return
        seen = self._observed_local(name, stmt)
        if seen is not None:
            env[name] = seen
            self.a.from_observation.add(name)
        elif numpy:
            env[name] = NUMPY

    def _observed_local(self, name: str, stmt: cst.CSTNode) -> str | None:
        seen = observation(self.a.observed.get(f"local {name}"))
        local = self.a.locals.get(name)
        if seen is None or seen == "None" or not is_complete(seen) or local is None:
            return None
        # The observed value is the last one: trust it at the last assignment only.
        last = max(local.assigns) if local.assigns else -1
        return seen if self.a.start[id(stmt)] <= last <= self.a.end[id(stmt)] else None

    def _bind(self, target: cst.BaseExpression, kind: str | None, env: Env,
              bound: list[str]) -> None:
        if isinstance(target, cst.Name):
            env[target.value] = kind
            bound.append(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            parts: list[str | None] = [None] * len(target.elements)
            if kind == NUMPY:
                parts = [NUMPY] * len(target.elements)
            elif kind is not None:
                head, args = parts_of(kind)
                if head == "Tuple" and len(args) == len(target.elements):
                    parts = list(args)
                elif head == "List" and args and args[0] != "?":
                    parts = [args[0]] * len(target.elements)     # b, t = x.shape
            for element, part in zip(target.elements, parts, strict=True):
                value = element.value
                self._bind(value.value if isinstance(value, cst.StarredElement) else value,
                           None if isinstance(element, cst.StarredElement) else part, env,
                           bound)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, None, env, bound)

    def _taint(self, stmt: cst.CSTNode, after: Env) -> Env:
        """Names a moved-whole compound statement assigns: untyped ones hold numpy."""
        after = dict(after)
        first, last = self.a.span(stmt)
        for name, local in self.a.locals.items():
            if any(first <= a <= last for a in local.assigns):
                kind = after.get(name)
                if kind is None or kind == NUMPY or not is_complete(kind):
                    seen = self._observed_local(name, stmt)
                    if seen is not None:
                        after[name] = seen
                        self.a.from_observation.add(name)
                    else:
                        after[name] = NUMPY
        return after

    def _compound(self, stmt: cst.BaseStatement, env: Env, loops: tuple[cst.CSTNode, ...],
                  collect: bool) -> Env:
        """The types after a compound statement (walking its bodies; runs inside are
        collected when ``collect``)."""
        if isinstance(stmt, cst.If):
            taken = self._body(stmt.body, env, loops, collect)
            if stmt.orelse is None:
                return merge(env, taken)
            if isinstance(stmt.orelse, cst.If):
                if collect and self.has_numpy(stmt.orelse.test, env):
                    self._header(stmt.orelse, env, escape(stmt.orelse) or "it cannot move")
                other = self._compound(stmt.orelse, env, loops, collect)
            else:
                other = self._body(stmt.orelse.body, env, loops, collect)
            return merge(taken, other)
        if isinstance(stmt, cst.For | cst.While):
            inner = (*loops, stmt)
            start = dict(env)
            if isinstance(stmt, cst.For):
                self.typer.env = env
                bound: list[str] = []
                self._bind(stmt.target, self._iterated(stmt.iter), start, bound)
            first = self._body(stmt.body, start, inner, False)
            again = merge(start, first)
            result = merge(env, self._body(stmt.body, again, inner, collect))
            if stmt.orelse is not None:
                result = self._body(stmt.orelse.body, result, loops, collect)
            return result
        if isinstance(stmt, cst.With):
            start = dict(env)
            for item in stmt.items:
                if item.asname is not None:
                    self._bind(item.asname.name, None, start, [])
            return self._body(stmt.body, start, loops, collect)
        if isinstance(stmt, cst.Try):
            tried = self._body(stmt.body, env, loops, collect)
            merged = merge(env, tried)
            result = tried
            for handler in stmt.handlers:
                start = dict(merged)
                if handler.name is not None:
                    self._bind(handler.name.name, None, start, [])
                result = merge(result, self._body(handler.body, start, loops, collect))
            if stmt.orelse is not None:
                result = merge(result, self._body(stmt.orelse.body, tried, loops, collect))
            if stmt.finalbody is not None:
                result = self._body(stmt.finalbody.body, result, loops, collect)
            return result
        # Nested definitions and anything else: what they bind is unknown.
        after = dict(env)
        lo, hi = self.a.span(stmt)
        for name, local in self.a.locals.items():
            if any(lo <= a <= hi for a in local.assigns):
                after[name] = None
        return after

    def _body(self, body: cst.BaseSuite, env: Env, loops: tuple[cst.CSTNode, ...],
              collect: bool) -> Env:
        if isinstance(body, cst.IndentedBlock):
            return self.suite(body.body, env, loops, collect)
        # ``if x: a = 1`` on one line: its small statements cannot be split into a block.
        if collect and self.has_numpy(body, env):
            self.a.refuse(body, "numpy in a one-line body of a statement that cannot move; "
                          "left alone")
        assert isinstance(body, cst.SimpleStatementSuite)
        return self._simple_effects(body.body, env, self.has_numpy(body, env), body)

    def _iterated(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Call) and get_full_name_for_node(node.func) == "range":
            return "int"
        kind = self.typer.type_of(node)
        if kind == NUMPY or (isinstance(node, cst.Name) and self.typer.env.get(node.value)
                             == NUMPY):
            return NUMPY
        if kind is None:
            return None
        head, args = parts_of(kind)
        if head == "List" and args and args[0] != "?":
            return args[0]
        return TENSOR if kind == TENSOR else None

    def _runs(self, items: list[_Item], loops: tuple[cst.CSTNode, ...]) -> None:
        runs: list[list[int]] = []
        current: list[int] | None = None
        for index, item in enumerate(items):
            if item.kind in ("numpy", "return"):
                if current is None:
                    current = [index, index]
                    runs.append(current)
                current[1] = index
                if item.kind == "return":
                    current = None
            else:
                current = None
        # Join two runs across numpy-free statements when the later one needs a numpy value
        # the earlier one made.
        merged = True
        while merged:
            merged = False
            for k in range(len(runs) - 1):
                earlier, later = runs[k], runs[k + 1]
                if items[earlier[1]].kind == "return":
                    continue
                gap = items[earlier[1] + 1:later[0]]
                if any(item.kind != "plain" for item in gap):
                    continue
                env = self.env_after[id(items[earlier[1]].stmt)]
                lo, hi = self.a.span(items[later[0]].stmt, items[later[1]].stmt)
                if any(kind == NUMPY and name in self.a.locals and any(
                        lo <= r <= hi for r in self.a.locals[name].reads)
                        for name, kind in env.items()):
                    runs[k] = [earlier[0], later[1]]
                    del runs[k + 1]
                    merged = True
                    break
        for first, last in runs:
            # An empty list/dict made right before the block for it to fill goes with it.
            while first > 0 and items[first - 1].kind == "plain" and self._fills(
                    items[first - 1].stmt, items[first].stmt, items[last].stmt):
                first -= 1
            stmts = [item.stmt for item in items[first:last + 1]]
            self.blocks.append(Block(self.a.method, stmts, loops,
                                     self.env_before[id(stmts[0])],
                                     self.env_after[id(stmts[-1])],
                                     items[last].kind == "return"))

    def _fills(self, init: cst.BaseStatement, first: cst.BaseStatement,
               last: cst.BaseStatement) -> bool:
        """``init`` is ``name = []`` (or ``{}``) and the statements first..last read name."""
        name = empty_container_name(init)
        local = self.a.locals.get(name or "")
        if local is None:
            return False
        lo, hi = self.a.span(first, last)
        return any(lo <= r <= hi for r in local.reads)
