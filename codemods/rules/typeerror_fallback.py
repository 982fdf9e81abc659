"""``typeerror-fallback``: a call retried without some arguments on ``TypeError`` becomes a dispatch
on the element's class.

What it does
    In compiled code (``forward()``, ``@torch.jit.export`` methods and the methods they call), a
    loop over a module container of the class (``for layer in self.blocks`` or
    ``for i, layer in enumerate(self.blocks)``) that calls each element inside::

        try:
            x = layer(x, lengths=lengths)
        except TypeError:
            x = layer(x)

    becomes a test of the element's class, which TorchScript decides per element when it
    unrolls the loop::

        if isinstance(layer, SERes2NetBlock):
            x = layer(x, lengths=lengths)
        else:
            x = layer(x)

    The classes come from ``__init__``: every element appended to, extended into or listed in
    the container (``nn.ModuleList([...])``, ``.append(Block(...))``, ``.extend([...])``, list
    comprehensions, both sides of ``A() if c else B()``) must be built by a class the rule can
    read: a class of the file, one imported from another file of the project (read, never
    imported), or a ``torch.nn`` layer. For each, the rule binds the first call's arguments to
    that class's ``forward()`` signature (inherited ones followed through the bases) exactly as
    Python does; the classes whose forward accepts them are named in the ``isinstance`` test.
    When every element takes the same call, that call alone replaces the ``try``.

    A layer built from a class passed to the constructor (``activation()`` where ``__init__``
    has ``activation=torch.nn.LeakyReLU``) is judged by the argument's default, must take the
    fallback call (its class cannot be named in ``forward``), and the change carries a note.

Why it breaks export
    TorchScript rejects ``try`` outright ("try blocks aren't supported"). torch.export fails on
    it too, measured on torch 2.13 with speechbrain's ECAPA_TDNN and Xvector: non-strict export
    traces module calls on a stack, the ``TypeError`` leaves the failed call's entry on it, and
    export stops with "Unexpected key _export_root.blocks.0, expected _export_root"; strict
    export fails with "failed to bind arguments when attempting to inline". The
    ``isinstance`` form scripts (each unrolled element sees only its own branch), exports, and
    both match the original with exact parity.

Example
    Before::

        for layer in self.blocks:
            try:
                x = layer(x, lengths=lengths)
            except TypeError:
                x = layer(x)
            xl.append(x)

    After::

        for layer in self.blocks:
            if isinstance(layer, SERes2NetBlock):
                x = layer(x, lengths=lengths)
            else:
                x = layer(x)
            xl.append(x)

Fix safety
    For the elements ``__init__`` builds, each now gets the call that the original's first
    attempt would have bound, so the outputs are the same. What differs is only on paths the
    original treated as errors or never took: a ``TypeError`` raised inside a forward that
    accepts the first call's arguments now propagates (the original silently ran the layer a
    second time without them); forward pre-hooks of a layer that takes the fallback call run
    once instead of twice; an element added to the container after construction, or a
    constructor-argument class other than the default, is dispatched by the classes named in
    the test. TorchScript resolves the class an ``isinstance`` names by its qualified name
    (measured on torch 2.13): in a process that compiled another class of the same module and
    name before (a module loaded twice under one name, a notebook cell run again), the test
    silently takes the fallback branch; script in a fresh process.
    Refused, with the reason: other handler shapes (``except TypeError as e``,
    ``else``/``finally``, several handlers, several statements), statements other than an
    assignment, augmented assignment, expression or return whose value is the call, arguments
    with calls (the original evaluates them again for the fallback), a called name that is no
    loop variable over a container of the class, containers built in a base class or changed
    outside ``__init__``, elements whose class or ``forward()`` cannot be read, ``torch.nn``
    layers where the keyword is one torch.nn forwards take, a fallback element whose class
    subclasses a class of the test, and classes taking the first call that are only known
    through a constructor argument. A ``try`` that does not catch ``TypeError`` alone is left to
    ``tsfix check`` (TSF101).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.project import ast_imports, dotted_name, lookup, parsed_file
from tsfix.codemods.facts.syntax import (
    code_of,
    contains,
    find_all,
    names_bound_in,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

# Every parameter name of a torch.nn layer's forward() (torch 2.13, every nn.Module class in
# torch.nn): a keyword outside this set binds to no torch.nn layer, so the call raises
# TypeError there.
_TORCH_NN_FORWARD_PARAMETERS = frozenset({
    "anchor", "attn_mask", "average_attn_weights", "hx", "indices", "input", "input1",
    "input2", "input_", "input_lengths", "is_causal", "key", "key_padding_mask", "log_input",
    "log_probs", "mask", "memory", "memory_is_causal", "memory_key_padding_mask",
    "memory_mask", "need_weights", "negative", "offsets", "output_size",
    "per_sample_weights", "positive", "query", "src", "src_is_causal",
    "src_key_padding_mask", "src_mask", "target", "target_", "target_lengths", "targets",
    "tgt", "tgt_is_causal", "tgt_key_padding_mask", "tgt_mask", "value", "var", "x", "x1",
    "x2"})
# torch.nn classes whose forward takes ``*args``/``**kwargs`` or is not implemented.
_TORCH_NN_OPEN_FORWARD = frozenset({
    "Module", "Container", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
    "RNNBase", "RNNCellBase", "DataParallel"})
_CONTAINER_KINDS = ("ModuleList", "Sequential")
# How deep bases and re-exports are followed.
_MAX_DEPTH = 8


# ---- the classes the elements are built from --------------------------------------------------

@dataclass(frozen=True)
class _Callee:
    """A class an element is built from: what it is and what its forward() accepts."""

    identity: str                       # "torch.nn.ReLU", or "<file>:<Class>"
    shown: str
    forward: ast.arguments | None = None    # None: a torch.nn layer (decided by the table)
    static: bool = False                # forward is a staticmethod (no self to skip)
    ancestors: frozenset[str] = frozenset()
    problem: str = ""                   # why its forward cannot be read ("" when it can)

    def binds(self, call: cst.Call) -> bool | None:
        """Whether ``call``'s arguments bind to this class's forward (None: cannot tell)."""
        if self.problem:
            return None
        if self.forward is None:
            keywords = [a.keyword.value for a in call.args if a.keyword is not None]
            if any(k not in _TORCH_NN_FORWARD_PARAMETERS for k in keywords):
                return False
            return None
        return _binds(self.forward, call, skip_first=not self.static)


def _binds(signature: ast.arguments, call: cst.Call, *, skip_first: bool) -> bool | None:
    """Python's own argument binding, for a call without ``*``/``**`` arguments."""
    if any(a.star for a in call.args):
        return None
    positional = [a for a in call.args if a.keyword is None]
    keywords = [a.keyword.value for a in call.args if a.keyword is not None]
    ordered = [*signature.posonlyargs, *signature.args]
    posonly = len(signature.posonlyargs)
    defaults = len(signature.defaults)
    required = {p.arg for p in ordered[:len(ordered) - defaults]}
    if skip_first and ordered:
        required.discard(ordered[0].arg)
        ordered = ordered[1:]
        posonly = max(posonly - 1, 0)
    if len(positional) > len(ordered) and signature.vararg is None:
        return False
    filled = {p.arg for p in ordered[:len(positional)]}
    by_keyword = {p.arg for p in ordered[posonly:]} | {p.arg for p in signature.kwonlyargs}
    for keyword in keywords:
        if keyword in filled:
            return False                # "got multiple values for argument"
        if keyword in by_keyword:
            filled.add(keyword)
        elif signature.kwarg is None:
            return False                # "got an unexpected keyword argument"
    required |= {p.arg for p, default in zip(signature.kwonlyargs, signature.kw_defaults,
                                              strict=True) if default is None}
    return required <= filled


class _Classes:
    """Reads the classes a file's names refer to, in this file and the project's other files
    (with CPython's ``ast``; nothing is imported)."""

    def __init__(self, tree: ast.Module, path: Path | None) -> None:
        self.tree = tree
        self.path = path
        self._seen: dict[tuple[str, str], _Callee] = {}

    def resolve(self, dotted: str) -> _Callee:
        return self._resolve(self.tree, self.path, dotted, 0)

    def _resolve(self, tree: ast.Module, path: Path | None, dotted: str, depth: int) -> _Callee:
        if depth > _MAX_DEPTH:
            return _Callee(dotted, dotted, problem="its bases go too deep")
        head, _, rest = dotted.partition(".")
        classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
        if not rest and head in classes:
            return self._read(tree, path, classes[head], depth)
        imports = ast_imports(tree.body)
        if head not in imports:
            return _Callee(dotted, dotted, problem=f"`{dotted}` is neither a class of the file "
                           "nor imported")
        level, target = imports[head]
        full = ".".join(p for p in (target, rest) if p)
        if not level and full.split(".")[0] == "torch":
            return _torch_class(full)
        if path is None:
            return _Callee(dotted, dotted, problem=f"`{dotted}` comes from another file and "
                           "this source has no path")
        found = lookup(path, full, level)
        if found is None:
            return _Callee(dotted, dotted, problem=f"`{dotted}` ({'.' * level}{full}) is not "
                           "in the project tree, so its forward() cannot be read")
        if found.kind == "external":
            if found.external.split(".")[0] == "torch":
                return _torch_class(found.external)
            return _Callee(dotted, dotted, problem=f"`{dotted}` comes from {found.external}, "
                           "outside the project tree")
        other = parsed_file(found.path) if found.kind == "class" else None
        cls = next((s for s in other.body if isinstance(s, ast.ClassDef)
                    and s.lineno == found.line), None) if other is not None else None
        if other is None or cls is None:
            return _Callee(dotted, dotted, problem=f"`{dotted}` is not a class the project "
                           f"defines visibly ({found.display or found.path})")
        return self._read(other, found.path, cls, depth + 1)

    def _read(self, tree: ast.Module, path: Path | None, cls: ast.ClassDef,
              depth: int) -> _Callee:
        identity = f"{path or '<this file>'}:{cls.name}"
        key = (str(path), cls.name)
        if key in self._seen:
            return self._seen[key]
        self._seen[key] = _Callee(identity, cls.name, problem="its bases form a cycle")
        forward: ast.FunctionDef | None = None
        assigned = False
        for statement in cls.body:
            if isinstance(statement, ast.FunctionDef) and statement.name == "forward":
                forward = statement
            elif isinstance(statement, ast.Assign | ast.AnnAssign) and any(
                    isinstance(n, ast.Name) and n.id == "forward"
                    for t in (statement.targets if isinstance(statement, ast.Assign)
                              else [statement.target]) for n in ast.walk(t)):
                assigned = True
        bases: list[_Callee] = []
        for base in cls.bases:
            name = dotted_name(base.value if isinstance(base, ast.Subscript) else base)
            bases.append(self._resolve(tree, path, name, depth + 1) if name else
                         _Callee("?", ast.unparse(base), problem="a base that is no name"))
        ancestors = frozenset(a for b in bases for a in (b.identity, *b.ancestors))
        if assigned:
            found = _Callee(identity, cls.name, ancestors=ancestors,
                            problem=f"{cls.name}.forward is assigned, not defined")
        elif forward is not None:
            static = any(dotted_name(d) == "staticmethod" for d in forward.decorator_list)
            found = _Callee(identity, cls.name, forward.args, static, ancestors)
        else:
            found = self._inherited(identity, cls.name, bases, ancestors)
        self._seen[key] = found
        return found

    @staticmethod
    def _inherited(identity: str, name: str, bases: list[_Callee],
                   ancestors: frozenset[str]) -> _Callee:
        """The forward a class without its own takes from its bases (left to right)."""
        for base in bases:
            if base.identity == "torch.nn.Module":
                continue
            if base.problem:
                return _Callee(identity, name, ancestors=ancestors,
                               problem=f"{name} inherits forward() from {base.shown}, and "
                               f"{base.problem}")
            return _Callee(identity, name, base.forward, base.static, ancestors)
        return _Callee(identity, name, ancestors=ancestors, problem=f"{name} has no forward()")


def _torch_class(dotted: str) -> _Callee:
    name = dotted.rpartition(".")[2]
    if not dotted.startswith("torch.nn.") or not name[:1].isupper():
        return _Callee(dotted, dotted, problem=f"`{dotted}` is not a torch.nn layer")
    identity = f"torch.nn.{name}"
    if name in _TORCH_NN_OPEN_FORWARD:
        return _Callee(identity, identity, problem=f"{identity} has no forward() of its own "
                       "or takes any arguments")
    return _Callee(identity, identity)


# ---- the elements of a container ---------------------------------------------------------------

@dataclass
class _Element:
    """One way ``__init__`` builds an element of the container."""

    built: cst.Call
    callee: _Callee
    # The dotted class name as forward can write it; "" when the class comes from a
    # constructor argument (``activation()``).
    name: str
    argument: str = ""                  # the constructor argument it comes from
    default: str = ""                   # and that argument's default


def _element_calls(expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """The expressions an element may be (both sides of ``a if c else b``)."""
    if isinstance(expr, cst.IfExp):
        yield from _element_calls(expr.body)
        yield from _element_calls(expr.orelse)
    else:
        yield expr


def _listed(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The elements a list, tuple or comprehension holds; None for anything else."""
    if isinstance(expr, cst.List | cst.Tuple):
        if any(isinstance(e, cst.StarredElement) for e in expr.elements):
            return None
        return [e.value for e in expr.elements]
    if isinstance(expr, cst.ListComp | cst.GeneratorExp):
        return [expr.elt]
    return None


def _container_elements(facts: ClassFacts, attr: str) -> tuple[list[cst.BaseExpression], str]:
    """The element expressions ``__init__`` puts into ``self.<attr>``, or why they are not
    known."""
    init = facts.init
    if init is None or attr not in facts.containers:
        return [], f"self.{attr} is not built in this class's __init__"
    for name, func in facts.methods.items():
        self_var = self_name(func)
        if name == "__init__" or self_var is None:
            continue
        for call in find_all(func.body, cst.Call):
            if (isinstance(call.func, cst.Attribute)
                    and self_attr(call.func.value, self_var) == attr
                    and call.func.attr.value in ("append", "extend", "insert", "add_module",
                                                 "register_module", "__setitem__")):
                return [], f"self.{attr} is changed in {name}()"
    if attr in facts.assigned_outside_init:
        return [], f"self.{attr} is assigned outside __init__"
    self_var = self_name(init) or "self"
    found: list[cst.BaseExpression] = []
    for node in find_all(init.body, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Call):
        if isinstance(node, cst.Call):
            called = node.func
            if not (isinstance(called, cst.Attribute)
                    and self_attr(called.value, self_var) == attr):
                continue
            method = called.attr.value
            values = [a.value for a in node.args]
            listed: list[cst.BaseExpression] | None = None
            if method == "append" and len(values) == 1:
                listed = values
            elif method == "insert" and len(values) == 2:
                listed = values[1:]
            elif method == "extend" and len(values) == 1:
                listed = _listed(values[0])
            elif method in ("append", "extend", "insert", "add_module", "register_module"):
                listed = None
            else:
                continue                # a read: len(), iteration, ...
            if listed is None or any(a.star or a.keyword for a in node.args):
                return [], f"`{code_of(node)}` adds elements the rule cannot list"
            found.extend(listed)
            continue
        targets = ([t.target for t in node.targets] if isinstance(node, cst.Assign)
                   else [node.target])
        if not any(self_attr(t, self_var) == attr for t in targets):
            continue
        value = node.value
        if isinstance(node, cst.AugAssign):
            listed = _listed(value) if isinstance(node.operator, cst.AddAssign) else None
        elif isinstance(value, cst.Call) and (qualified_name(value.func, facts.imports) or ""
                                              ).rpartition(".")[2] in _CONTAINER_KINDS:
            listed = _constructed(value)
        else:
            listed = None
        if listed is None:
            shown = code_of(value) if value is not None else ""
            return [], f"self.{attr} = {shown} holds elements the rule cannot list"
        found.extend(listed)
    return [e for expr in found for e in _element_calls(expr)], ""


def _submodule_builds(facts: ClassFacts, attr: str) -> tuple[list[cst.BaseExpression], str]:
    """What ``__init__`` assigns to ``self.<attr>`` (both sides of ``a if c else b``), or why
    that is not known."""
    if attr in facts.assigned_outside_init:
        return [], f"self.{attr} is assigned outside __init__"
    found: list[cst.BaseExpression] = []
    for assigned in facts.assignments:
        if assigned.method != "__init__" or assigned.attr != attr:
            continue
        if assigned.value is None:
            return [], f"self.{attr} is assigned in a form the rule cannot read"
        found.extend(_element_calls(assigned.value))
    if not found:
        return [], f"self.{attr} is not assigned in this class's __init__"
    return found, ""


def _constructed(call: cst.Call) -> list[cst.BaseExpression] | None:
    """The elements of ``nn.ModuleList([...])`` / ``nn.Sequential(a, b)``."""
    if any(a.keyword is not None or a.star for a in call.args):
        return None
    kind = (get_full_name_for_node(call.func) or "").rpartition(".")[2]
    if kind == "ModuleList":
        if not call.args:
            return []
        return _listed(call.args[0].value) if len(call.args) == 1 else None
    return [a.value for a in call.args]


# ---- one try statement --------------------------------------------------------------------------

@dataclass
class _Site:
    """A ``try: <call> except TypeError: <call>`` statement."""

    node: cst.Try
    first: cst.SimpleStatementLine      # the try's statement
    fallback: cst.SimpleStatementLine   # the handler's
    first_call: cst.Call
    fallback_call: cst.Call
    callee: str                         # the name called in both (``layer``, ``self.sub``)


def _catches_type_error(node: cst.Try) -> bool:
    return any(isinstance(h.type, cst.Name) and h.type.value == "TypeError"
               for h in node.handlers)


def _only_statement(block: cst.BaseSuite) -> cst.SimpleStatementLine | None:
    body: Sequence[cst.CSTNode] = block.body if isinstance(block, cst.IndentedBlock) else []
    if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1:
        return body[0]
    return None


def _called(statement: cst.SimpleStatementLine) -> cst.Call | None:
    """The call a statement's value is (``x = f(...)``, ``x += f(...)``, ``f(...)``,
    ``return f(...)``), when it calls a name or an attribute (``self.sub``)."""
    small = statement.body[0]
    value: cst.BaseExpression | None = None
    if isinstance(small, cst.Assign | cst.AugAssign | cst.AnnAssign | cst.Expr | cst.Return):
        value = small.value
    if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name | cst.Attribute)
            and not value.lpar and get_full_name_for_node(value.func) is not None):
        return value
    return None


def _site(node: cst.Try) -> tuple[_Site | None, str]:
    """The fallback statement's parts, or why its shape is not rewritten."""
    if len(node.handlers) != 1:
        return None, "the try has several handlers"
    handler = node.handlers[0]
    if handler.name is not None:
        return None, "the handler binds the exception (`except TypeError as ...`)"
    if node.orelse is not None or node.finalbody is not None:
        return None, "the try has an else or finally block"
    first, fallback = _only_statement(node.body), _only_statement(handler.body)
    if first is None or fallback is None:
        return None, "the try and its handler must each hold one simple statement"
    first_call, fallback_call = _called(first), _called(fallback)
    if first_call is None or fallback_call is None:
        return None, ("each statement must be an assignment, expression or return whose value "
                      "is the call of a name or attribute")
    callee = get_full_name_for_node(first_call.func)
    if callee != get_full_name_for_node(fallback_call.func):
        return None, "the try and its handler call different names"
    if _without_value(first) != _without_value(fallback):
        return None, "the try and its handler do not store the result the same way"
    for call in (first_call, fallback_call):
        for arg in call.args:
            if find_all(arg.value, cst.Call, cst.Yield, cst.Await, cst.NamedExpr):
                return None, (f"the argument `{code_of(arg.value)}` has a call; the original "
                              "evaluates it again for the fallback")
    assert callee is not None
    return _Site(node, first, fallback, first_call, fallback_call, callee), ""


def _without_value(statement: cst.SimpleStatementLine) -> str:
    small = statement.body[0]
    if isinstance(small, cst.Assign | cst.AugAssign | cst.AnnAssign | cst.Expr | cst.Return):
        return code_of(small.with_changes(value=cst.Name("_")))
    return code_of(small)


def _enclosing_loop(func: cst.FunctionDef, site: _Site, self_var: str
                    ) -> tuple[cst.For | None, str]:
    """The innermost ``for`` binding the called name, and the container it iterates."""
    loops = [f for f in find_all(func.body, cst.For) if contains(f.body, site.node)]
    for loop in reversed(loops):
        target, iterable = loop.target, loop.iter
        if (isinstance(target, cst.Tuple) and len(target.elements) == 2
                and isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name)
                and iterable.func.value == "enumerate" and iterable.args):
            target, iterable = target.elements[1].value, iterable.args[0].value
        if isinstance(target, cst.Name) and target.value == site.callee:
            attr = self_attr(iterable, self_var)
            return (loop, attr) if attr is not None else (None, "")
    return None, ""


def _rebinds(block: cst.CSTNode, name: str) -> bool:
    for node in find_all(block, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.AsName, cst.NamedExpr, cst.CompFor):
        target = (node.name if isinstance(node, cst.AsName) else node.target)
        if any(n.value == name for n in find_all(target, cst.Name)):
            return True
    return False


class TypeErrorFallback(Rule):
    __doc__ = __doc__
    name = "typeerror-fallback"
    # --rule all order: after nested-function (5), before modulelist-iter (10): on the loop as
    # written (modulelist-iter and annotate read the dispatch it leaves like any other code).
    order = 7
    CODES = (
        Code("TSF101", "try-except", "try/except in a compiled method",
             "TorchScript has no exception handling (\"try blocks aren't supported\"), even in "
             "code under `if not torch.jit.is_scripting():`. Move the try into a "
             "@torch.jit.ignore method or check the condition explicitly."),
    )
    summary = ("`try: layer(x, k=v) except TypeError: layer(x)` over a module container "
               "becomes `if isinstance(layer, <classes whose forward takes k>)`, decided from "
               "the classes __init__ builds")

    VALID = (
        # Not a TypeError fallback: left to the linter (TSF101).
        """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4)])
    def forward(self, x):
        for layer in self.blocks:
            try:
                x = layer(x)
            except RuntimeError:
                x = x + 1
        return x
""",
    )
    INVALID = (
        Example(
            """
from typing import Optional
import torch
from torch import nn
class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
    def forward(self, x):
        return self.proj(x)
class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        if lengths is not None:
            x = x * lengths
        return self.proj(x)
class M(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = nn.ModuleList([Plain()])
        for _ in range(depth):
            self.blocks.append(Masked())
        self.blocks.append(nn.ReLU())
    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        for layer in self.blocks:
            # Not every block takes lengths.
            try:
                x = layer(x, lengths=lengths)
            except TypeError:
                x = layer(x)
        return x
""",
            """
from typing import Optional
import torch
from torch import nn
class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
    def forward(self, x):
        return self.proj(x)
class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        if lengths is not None:
            x = x * lengths
        return self.proj(x)
class M(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = nn.ModuleList([Plain()])
        for _ in range(depth):
            self.blocks.append(Masked())
        self.blocks.append(nn.ReLU())
    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        for layer in self.blocks:
            # Not every block takes lengths.
            if isinstance(layer, Masked):
                x = layer(x, lengths=lengths)
            else:
                x = layer(x)
        return x
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # A try statement in a compiled method (the only methods the rule reads).
        return "TypeError" in file.text and "try" in file.text and (
            file.tree is None
            or not file.compiled_node_types.isdisjoint((ast.Try, ast.TryStar)))

    def prepare(self, module: cst.Module) -> None:
        self._classes: _Classes | None = None

    def _reader(self) -> _Classes:
        if self._classes is None:
            text = self.source_text or self.source_module.code
            filename = self.context.filename
            self._classes = _Classes(ast.parse(text), Path(filename) if filename else None)
        return self._classes

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        text = self.source_text
        if text is not None and ("TypeError" not in text or "try" not in text):
            return tree
        return super().transform_module_impl(tree)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        replacements: dict[int, cst.BaseStatement] = {}
        parts: list[str] = []
        notes: list[str] = []
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            for node in find_all(func.body, cst.Try):
                if id(node) in skipped or not _catches_type_error(node):
                    continue
                new, why, note = self._rewrite_site(facts, method, func, node)
                message = f"try/except TypeError in {method}()"
                if new is None:
                    self.skip(cls.name.value, node, f"{message}: {why}", code="TSF101",
                              message=message)
                    continue
                self.fixed(node, "TSF101", message)
                replacements[id(node)] = new
                parts.append(f"line {self.line_of(node)}: {why}")
                if note:
                    notes.append(f"line {self.line_of(node)}: {note}")
        if not replacements:
            return cls
        rewritten = cls.visit(_Replace(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return rewritten

    def _rewrite_site(self, facts: ClassFacts, method: str, func: cst.FunctionDef,
                      node: cst.Try) -> tuple[cst.BaseStatement | None, str, str]:
        """The statement replacing one try (None when refused), what was done or why not, and
        a note for the reviewer."""
        site, why = _site(node)
        if site is None:
            return None, why, ""
        self_var = self_name(func) or "self"
        if isinstance(site.first_call.func, cst.Attribute):
            attr = self_attr(site.first_call.func, self_var)
            if attr is None:
                return None, (f"`{site.callee}` is neither a submodule of the class nor the "
                              "loop variable of a loop over one of its module containers"), ""
            exprs, problem = _submodule_builds(facts, attr)
            where = f"assigned to self.{attr}"
        else:
            loop, attr = _enclosing_loop(func, site, self_var)
            if loop is None:
                return None, (f"`{site.callee}` is not the loop variable of a loop over a "
                              "module container of the class (`for layer in self.blocks:`)"), ""
            if _rebinds(loop.body, site.callee):
                return None, f"`{site.callee}` is rebound inside the loop", ""
            exprs, problem = _container_elements(facts, attr)
            where = f"in self.{attr}"
        if problem:
            return None, problem, ""
        elements, problem = self._elements(facts, exprs, where, names_bound_in(func))
        if problem:
            return None, problem, ""
        call = short_source(site.first_call, 70)
        takes: dict[str, _Element] = {}
        others: list[_Element] = []
        for element in elements:
            binds = element.callee.binds(site.first_call)
            if binds is None:
                reason = element.callee.problem or (
                    f"whether {element.callee.shown}'s forward() accepts `{call}` cannot be "
                    "told statically")
                return None, f"`{short_source(element.built, 70)}` {where}: {reason}", ""
            if not binds:
                others.append(element)
            elif element.argument:
                return None, (f"`{short_source(element.built, 70)}` {where} builds the class given "
                              f"as `{element.argument}`, whose forward() takes `{call}`; it "
                              "cannot be named in an isinstance test"), ""
            elif not element.name:
                return None, (f"`{short_source(element.built, 70)}` {where}: its class name is "
                              f"bound to something else in {method}()"), ""
            else:
                takes.setdefault(element.callee.identity, element)
        for element in others:
            inherited = element.callee.ancestors & takes.keys()
            if inherited:
                base = takes[sorted(inherited)[0]].name
                return None, (f"{element.callee.shown} subclasses {base} but its forward() "
                              f"does not take `{call}`: isinstance cannot tell them apart"), ""
        note = ""
        arguments = sorted({f"`{e.argument}` (default {e.default})" for e in others
                            if e.argument})
        if arguments and takes:
            note = (f"elements of self.{attr} built from the constructor argument "
                    f"{', '.join(arguments)} take `{short_source(site.fallback_call, 70)}`, as the "
                    "default's forward() does; another class passed there is dispatched by "
                    "the isinstance test")
        if not others:
            return (site.first.with_changes(leading_lines=node.leading_lines),
                    f"`{call}`: every element of self.{attr} takes it", note)
        if not takes:
            return (site.fallback.with_changes(leading_lines=node.leading_lines),
                    f"`{call}`: no element of self.{attr} takes it, the fallback "
                    f"`{short_source(site.fallback_call, 70)}` stays", note)
        names = [e.name for e in takes.values()]
        test = names[0] if len(names) == 1 else f"({', '.join(names)})"
        dispatch = cst.parse_statement(
            f"if isinstance({site.callee}, {test}):\n    pass\nelse:\n    pass\n")
        assert isinstance(dispatch, cst.If) and isinstance(dispatch.body, cst.IndentedBlock)
        assert isinstance(dispatch.orelse, cst.Else)
        assert isinstance(dispatch.orelse.body, cst.IndentedBlock)
        handler_body = node.handlers[0].body
        new = dispatch.with_changes(
            leading_lines=node.leading_lines,
            body=node.body.with_changes(body=[site.first]) if isinstance(
                node.body, cst.IndentedBlock) else dispatch.body,
            orelse=dispatch.orelse.with_changes(
                body=handler_body.with_changes(body=[site.fallback]) if isinstance(
                    handler_body, cst.IndentedBlock) else dispatch.orelse.body))
        return new, (f"`{call}` -> `isinstance({site.callee}, {test})` dispatch over "
                     f"self.{attr}"), note

    def _elements(self, facts: ClassFacts, exprs: list[cst.BaseExpression], where: str,
                  hidden: set[str]) -> tuple[list[_Element], str]:
        """The class each element expression builds, or why one is not known. ``hidden``:
        the names the method with the try binds (a class name it shadows cannot be written
        in its isinstance test)."""
        init = facts.init
        assert init is not None
        init_params = parameters_of(init)
        init_locals = names_bound_in(init) - set(init_params)
        found: list[_Element] = []
        for expr in exprs:
            shown = short_source(expr, 70)
            if not isinstance(expr, cst.Call):
                return [], (f"`{shown}` {where} is not built by a class call in __init__: its "
                            "class is not known")
            dotted = get_full_name_for_node(expr.func)
            if dotted is None:
                return [], f"`{shown}` {where} is not built by a named class"
            head = dotted.partition(".")[0]
            if head in init_params:
                param = init_params[head]
                default = get_full_name_for_node(param.default) if param.default else None
                if default is None or "." in dotted:
                    return [], (f"`{shown}` {where} is built from the constructor argument "
                                f"`{head}`, which has no class as its default")
                found.append(_Element(expr, self._reader().resolve(default), "", head,
                                      default))
                continue
            if head in init_locals:
                return [], f"`{shown}` {where} is built from `{head}`, a local of __init__"
            callee = self._reader().resolve(dotted)
            found.append(_Element(expr, callee, "" if head in hidden else dotted))
        return found, ""


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.BaseStatement]) -> None:
        self.replacements = replacements

    def leave_Try(self, original_node: cst.Try, updated_node: cst.Try) -> cst.BaseStatement:
        return self.replacements.get(id(original_node), updated_node)
