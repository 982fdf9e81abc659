"""``range-variable``: a ``range`` kept in a name that several paths bind becomes its bounds,
and the loops over it call ``range`` themselves.

What it does
    In compiled methods (``forward()``, ``@torch.jit.export`` methods and the methods they
    call), a local bound more than once, every time to ``range(...)``, and read only as the
    iterable of ``for`` loops::

        if self.skip_first:
            layers_left = range(1, self.n)
        else:
            layers_left = range(self.n)
        for i in layers_left:

    keeps its bounds instead: each binding becomes ``layers_left_start, layers_left_stop =
    1, self.n`` (``range(n)`` starts at ``0``), and each loop ``for i in
    range(layers_left_start, layers_left_stop)``. When a binding has a step, every binding
    gets a ``_step`` too (``1`` where it had none).

Why it breaks export
    TorchScript has no value of type ``range`` outside a ``for`` statement: a name bound to
    ``range(...)`` on two paths is dropped where the paths meet ("undefined value
    layers_left", torch 2.13), though one binding on a single path scripts. Ints bound on
    each path and ``range(start, stop)`` in the loop script, and the loop gets the bounds the
    path chose.

Example
    Before::

        if self.skip_first:
            layers_left = range(1, self.n)
        else:
            layers_left = range(self.n)
        for i in layers_left:
            x = self.layers[i](x)

    After::

        if self.skip_first:
            layers_left_start, layers_left_stop = 1, self.n
        else:
            layers_left_start, layers_left_stop = 0, self.n
        for i in range(layers_left_start, layers_left_stop):
            x = self.layers[i](x)

Fix safety
    The loops visit the same integers: ``range(n)`` is ``range(0, n)``, ``range(a, b)`` is
    ``range(a, b, 1)``, and the bounds are evaluated where the ``range`` was. A ``range`` can
    be iterated any number of times, so several loops over one name are rewritten alike.
    One difference: bounds that are not integers raise ``TypeError`` at the loop instead of at
    the binding. Left alone, with the reason: a name also bound to something else or read
    other than as a loop's iterable (``len(r)``, ``r[0]``, ``list(r)``, passed on),
    ``range`` called with keywords or ``*args``, and ``range`` re-bound in the file or method.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

import libcst as cst
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    ReplaceById,
    code_of,
    find_all,
    fresh_name,
    names_bound_in,
    names_used,
    parent_map,
    top_level_names,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule


class _Refused(Exception):
    """Why a name stays a range."""


def _range_call(value: cst.BaseExpression) -> cst.Call | None:
    if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
            and value.func.value == "range"):
        return value
    return None


class RangeVariable(Rule):
    __doc__ = __doc__
    name = "range-variable"
    # Before modulelist-iter (10): a loop indexing a ModuleList must read `range(start, stop)`
    # in its own header for that rule to see the index's bounds; after nested-function (5),
    # whose moved functions are compiled methods like any other.
    order = 8
    targets = ("torchscript", "onnx")
    off_target = "torch.export runs the Python as written: a range in a name exports"
    CODES = (
        Code("TSF240", "range-variable", "range kept in a name bound on several paths",
             "TorchScript has no range value outside a for statement: `r = range(1, n)` on one "
             "path and `r = range(n)` on another, then `for i in r:`, fails (\"undefined value "
             "r\"). Keep the bounds instead (`start, stop = 1, n` on each path) and loop over "
             "`range(start, stop)`; `tsfix apply --rule range-variable` does it."),
    )
    summary = ("A range kept in a name bound on several paths becomes its bounds; the loops "
               "over it call range(start, stop) themselves")

    VALID = (
        # Bound once: TorchScript compiles it.
        """
import torch
class M(torch.nn.Module):
    def forward(self, x, n: int):
        steps = range(1, n)
        for i in steps:
            x = x + i
        return x
""",
    )
    INVALID = (
        Example(
            """
import torch
class Stack(torch.nn.Module):
    def __init__(self, n=3, skip_first=True):
        super().__init__()
        self.n = n
        self.skip_first = skip_first
    def forward(self, x):
        if self.skip_first:
            steps = range(1, self.n)
        else:
            steps = range(self.n)
        for i in steps:
            x = x + i
        return x
""",
            """
import torch
class Stack(torch.nn.Module):
    def __init__(self, n=3, skip_first=True):
        super().__init__()
        self.n = n
        self.skip_first = skip_first
    def forward(self, x):
        if self.skip_first:
            steps_start, steps_stop = 1, self.n
        else:
            steps_start, steps_stop = 0, self.n
        for i in range(steps_start, steps_stop):
            x = x + i
        return x
""",
        ),
        # Read other than by a loop: left, reported.
        Example(
            """
import torch
class Count(torch.nn.Module):
    def forward(self, x, n: int):
        if n > 2:
            steps = range(2, n)
        else:
            steps = range(n)
        return x * len(steps)
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        return any(isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                   and isinstance(node.value.func, ast.Name) and node.value.func.id == "range"
                   for node in file.compiled_nodes())

    def prepare(self, module: cst.Module) -> None:
        self._module_names = top_level_names(module)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        replacements: dict[int, cst.CSTNode] = {}
        parts: list[str] = []
        for method, func in facts.compiled_methods():
            candidates, bound_otherwise = _range_names(func)
            if not candidates:
                continue
            parents = parent_map(func)
            taken = names_used(func) | self._module_names
            for name, bindings in candidates.items():
                message = f"range kept in {name}, bound on several paths in {method}()"
                reads = _reads(func, name, bindings)
                loops = [parents[id(n)] for n in reads]
                try:
                    if name in bound_otherwise:
                        raise _Refused(f"{name} is also bound other than by `{name} = ...`")
                    self._check(func, name, bindings, reads, parents)
                except _Refused as why:
                    self.skip(facts.name, bindings[0], f"{message}; left as it is: {why}",
                              code="TSF240", message=message)
                    continue
                for loop in loops:
                    assert isinstance(loop, cst.For)
                    self.fixed(loop.iter, "TSF240", message)
                replacements.update(_rewrite(name, bindings, loops, parents, taken))
                parts.append(f"{method}(): range in {name} becomes its bounds "
                             f"({len(bindings)} bindings, {len(loops)} loop(s))")
        if not replacements:
            return cls
        rewritten = cls.visit(ReplaceById(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts)))
        return rewritten

    def _check(self, func: cst.FunctionDef, name: str, bindings: list[cst.Assign],
               reads: list[cst.Name], parents: Mapping[int, cst.CSTNode]) -> None:
        if "range" in self._module_names or "range" in names_bound_in(func):
            raise _Refused("range is re-bound in this file or method")
        for binding in bindings:
            call = _range_call(binding.value)
            if call is None:
                raise _Refused(f"{name} is also bound to `{code_of(binding.value)}`")
            if not 1 <= len(call.args) <= 3 or any(a.keyword or a.star for a in call.args):
                raise _Refused(f"`{code_of(call)}` passes keywords, *args or no bound")
            line = parents.get(id(binding))
            if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
                raise _Refused(f"`{name} = {code_of(call)}` shares its line with another "
                               "statement")
        if not reads:
            raise _Refused(f"{name} is never the iterable of a for loop")
        for read in reads:
            loop = parents.get(id(read))
            if (not isinstance(loop, cst.For) or loop.iter is not read
                    or loop.asynchronous is not None):
                raise _Refused(f"{name} is read other than as the iterable of a for loop "
                               "(len(), indexing, passed on): only loops can take its bounds")


def _range_names(func: cst.FunctionDef) -> tuple[dict[str, list[cst.Assign]], set[str]]:
    """Locals bound at least twice, at least once by ``name = range(...)``: name -> its
    ``name = ...`` assignments; and the names bound some other way too (a ``for`` target,
    ``+=``, ``:=``, a parameter, ...)."""
    found: dict[str, list[cst.Assign]] = {}
    other: set[str] = set(names_used(func.params))
    for node in find_all(func.body, cst.Assign, cst.For, cst.AugAssign, cst.AnnAssign,
                         cst.NamedExpr, cst.WithItem):
        if (isinstance(node, cst.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Name)):
            found.setdefault(node.targets[0].target.value, []).append(node)
            continue
        targets: list[cst.CSTNode] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, cst.For | cst.AugAssign | cst.AnnAssign | cst.NamedExpr):
            targets = [node.target]
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            targets = [node.asname.name]
        for target in targets:
            other |= names_used(target)
    return {name: bindings for name, bindings in found.items()
            if len(bindings) + (name in other) > 1
            and any(_range_call(b.value) is not None for b in bindings)}, other


def _reads(func: cst.FunctionDef, name: str, bindings: list[cst.Assign]) -> list[cst.Name]:
    targets = {id(b.targets[0].target) for b in bindings}
    attributes = {id(a.attr) for a in find_all(func, cst.Attribute)}
    keywords = {id(a.keyword) for a in find_all(func, cst.Arg) if a.keyword is not None}
    return [n for n in find_all(func.body, cst.Name)
            if n.value == name and id(n) not in targets and id(n) not in attributes
            and id(n) not in keywords]


def _rewrite(name: str, bindings: list[cst.Assign], loops: list[cst.CSTNode],
             parents: Mapping[int, cst.CSTNode], taken: set[str]) -> dict[int, cst.CSTNode]:
    calls = [_range_call(b.value) for b in bindings]
    stepped = any(c is not None and len(c.args) == 3 for c in calls)
    names: list[str] = []
    for part in ("start", "stop", "step") if stepped else ("start", "stop"):
        names.append(fresh_name(f"{name}_{part}", taken=taken, numbered=f"{name}_{part}_"))
        taken.add(names[-1])
    replacements: dict[int, cst.CSTNode] = {}
    for binding, call in zip(bindings, calls, strict=True):
        assert call is not None
        bounds = [code_of(a.value) for a in call.args]
        if len(bounds) == 1:
            bounds.insert(0, "0")
        if stepped and len(bounds) == 2:
            bounds.append("1")
        line = parents[id(binding)]
        assert isinstance(line, cst.SimpleStatementLine)
        statement = cst.parse_statement(f"{', '.join(names)} = {', '.join(bounds)}\n")
        assert isinstance(statement, cst.SimpleStatementLine)
        replacements[id(line)] = statement.with_changes(
            leading_lines=line.leading_lines, trailing_whitespace=line.trailing_whitespace)
    for loop in loops:
        assert isinstance(loop, cst.For)
        replacements[id(loop.iter)] = cst.parse_expression(f"range({', '.join(names)})")
    return replacements

