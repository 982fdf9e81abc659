"""``nested-function``: a function defined inside a compiled method becomes a method of the class
(or a module-level function when it does not use ``self``), the values it reads from the
enclosing method passed to it as parameters.

What it does
    For each ``def`` at the top level of a compiled method's body (``forward``, the
    ``@torch.jit.export`` methods and what they call), the function moves out:

    * to a method of the class, after the method that defined it, when it reads ``self``;
      else to a function of the module, just before the class;
    * named ``_<method>_<function>`` (``_forward_compute_statistics`` for
      ``_compute_statistics`` defined in ``forward``), with ``_2``, ``_3``, ... appended when
      that name is used anywhere in the file or is one of ``nn.Module``'s own attributes;
    * the names it reads from the enclosing method (its locals and parameters) become its first
      parameters, and every call passes them: ``stats(x, m)`` -> ``self._forward_stats(L, x,
      m)``. They are annotated with the type the enclosing method gives them when that is
      known and not a Tensor (``L: int``: TorchScript takes an unannotated parameter for a
      Tensor); a name whose type is not known stays unannotated and the class's report says so;
    * its own parameters keep their annotations; a literal default gives its type (``dim: int =
      2``), and a parameter every call passes the same non-Tensor type of value gets that type;
    * a default computed from the enclosing method (``eps=self.eps``) is evaluated when the
      ``def`` runs, so it is passed by every call that does not pass it (``eps=self.eps``): the
      parameter loses its default, and so do the literal defaults before it (each call passes
      those too).

    Functions that do not define anything at the top level of a compiled method are not
    touched; classes defined inside a method stay (``tsfix check`` reports them, TSF106).

Why it breaks export
    TorchScript compiles no function defined inside a method ("function definitions aren't
    supported", measured on torch 2.13); a method, or a function of the module (compiled
    recursively), with the values it read passed as arguments, scripts, with the same results,
    however many times it is called. ``torch.export`` traces nested functions as they are (a
    closure reading a local and a default reading ``self`` export with exact parity): the rule
    serves the TorchScript-based targets only.

Example
    Before::

        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            L = x.shape[-1]

            def _compute_statistics(x, m, dim=2, eps=self.eps):
                mean = (m * x).sum(dim)
                return mean, torch.sqrt((m * (x - mean.unsqueeze(dim)).pow(2)).sum(dim).clamp(eps))
            ...
            mean, std = _compute_statistics(x, attn)

    After::

        # From AttentiveStatisticsPooling.forward(): TorchScript compiles no nested function.
        def _forward_compute_statistics(x, m, dim: int, eps: float):
            mean = (m * x).sum(dim)
            ...

        class AttentiveStatisticsPooling(nn.Module):
            def forward(self, x, lengths: Optional[torch.Tensor] = None):
                L = x.shape[-1]
                ...
                mean, std = _forward_compute_statistics(x, attn, dim=2, eps=self.eps)

Fix safety
    A nested function reads the names it shares with the enclosing method when it runs, not
    when it is defined; the call passes their values at that moment, so results are the same
    even when the method re-binds them between the ``def`` and the call. A default is the
    exception (Python evaluates it when the ``def`` runs): one that is not a literal is passed
    by the calls only when its value cannot change after the ``def``: ``self.<attr>`` that no
    method but ``__init__`` assigns, a parameter of the method that is never re-bound, or a
    local bound once, at the top level, before the ``def``, and no call or container in it.
    Left alone, with the reason reported (TSF106): a function used other than by calling it
    (returned, stored, passed to ``map`` or another function), one defined twice or inside an
    ``if``/``for``/``with``, called before its ``def``, called from inside another nested
    function or lambda, called with ``*``/``**`` arguments or an assignment expression,
    recursive (TorchScript has no recursion), a generator, ``async``, decorated, with
    ``*args``/``**kwargs``/keyword-only/positional-only parameters, holding ``nonlocal`` or
    ``global``, ``super()``/``__class__``, or a definition of its own, reading another function
    defined in the method, a call whose comprehension re-binds a name the function reads, and
    a default computed from values that may change.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import (
    Access,
    FunctionScope,
    MetadataWrapper,
    ParentNodeProvider,
    Scope,
    ScopeProvider,
)
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    contains,
    find_all,
    literal_type,
    parameters_of,
    self_name,
)
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    annotation_text,
    is_complete,
    typing_names,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

# nn.Module's own attributes and methods whose names start with "_" (torch 2.13): a moved
# function named like one of them would replace it on the instance (``_forward_hooks`` for a
# function ``hooks`` defined in forward).
_MODULE_PRIVATE = frozenset({
    "_apply", "_backward_hooks", "_backward_pre_hooks", "_buffers", "_call_impl",
    "_compiled_call_impl", "_forward_hooks", "_forward_hooks_always_called",
    "_forward_hooks_with_kwargs", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_get_backward_hooks", "_get_backward_pre_hooks", "_get_name", "_is_full_backward_hook",
    "_load_from_state_dict", "_load_state_dict_post_hooks", "_load_state_dict_pre_hooks",
    "_maybe_warn_non_full_backward_hook", "_modules", "_named_members",
    "_non_persistent_buffers_set", "_parameters", "_register_load_state_dict_pre_hook",
    "_register_state_dict_hook", "_replicate_for_data_parallel", "_save_to_state_dict",
    "_slow_forward", "_state_dict_hooks", "_state_dict_pre_hooks", "_version",
    "_wrapped_call_impl"})

# What a default computed from the enclosing method may hold to be passed by the calls: names,
# attributes, literals and arithmetic (no call: it could return a new object each time).
_STABLE_DEFAULT_NODES = (cst.Name, cst.Attribute, cst.Integer, cst.Float, cst.SimpleString,
                         cst.ConcatenatedString, cst.UnaryOperation, cst.BinaryOperation,
                         cst.Tuple, cst.Element)


@dataclass
class _Param:
    """One parameter of the moved function."""

    name: str
    node: cst.Param
    annotation: str | None = None       # a type written by this rule
    passed: cst.BaseExpression | None = None    # the calls pass this when they omit it
    captured: bool = False


@dataclass
class _Move:
    """One nested function that moves out of ``method``."""

    method: str
    func: cst.FunctionDef
    new_name: str
    is_method: bool
    self_var: str
    params: list[_Param]
    calls: list[cst.Call]
    unknown: list[str] = field(default_factory=list)    # captured names of unknown type


class _Refused(Exception):
    """Why a nested function stays where it is."""


class _Scopes:
    """LibCST scope analysis of one compiled method."""

    def __init__(self, func: cst.FunctionDef) -> None:
        wrapper = MetadataWrapper(cst.Module(body=[func]), unsafe_skip_copy=True)
        self.scopes: Mapping[cst.CSTNode, Scope | None] = wrapper.resolve(ScopeProvider)
        self.parents: Mapping[cst.CSTNode, cst.CSTNode] = wrapper.resolve(ParentNodeProvider)
        assert isinstance(func.body, cst.IndentedBlock)
        outer = self.scopes[func.body.body[0]]
        assert outer is not None
        self.outer: Scope = outer
        unique = {id(s): s for s in self.scopes.values() if s is not None}
        self.accesses: list[Access] = [a for s in unique.values() for a in s.accesses]

    def scope_of(self, func: cst.FunctionDef) -> Scope:
        node: cst.CSTNode = (func.body.body[0] if isinstance(func.body, cst.IndentedBlock)
                             else func.body)
        scope = self.scopes[node]
        assert scope is not None
        return scope

    def within(self, scope: Scope, ancestor: Scope) -> bool:
        while True:
            if scope is ancestor:
                return True
            if scope.parent is scope:
                return False
            scope = scope.parent

    def resolves_to_outer(self, access: Access) -> bool:
        """Whether the name read is the method's own. (By name, not ``access.referents``: those
        leave out bindings of the same scope that come later in the text, such as a ``def``
        after a loop that calls it.)"""
        name = _name_of(access)
        if name is None:
            return False
        scope = access.scope
        while scope is not self.outer:
            if scope.assignments[name] or scope.parent is scope:
                return False
            scope = scope.parent
        return bool(self.outer.assignments[name])


def _name_of(access: Access) -> str | None:
    return access.node.value if isinstance(access.node, cst.Name) else None


def _nested_defs(func: cst.FunctionDef) -> Iterator[tuple[cst.FunctionDef, bool]]:
    """Functions defined inside ``func`` (not inside another nested one), each with whether it
    is a statement of ``func``'s own body."""
    top = set(map(id, func.body.body)) if isinstance(func.body, cst.IndentedBlock) else set()
    inner = [f for f in find_all(func.body, cst.FunctionDef)]
    nested_in_nested = {id(n) for f in inner for n in find_all(f.body, cst.FunctionDef)}
    for candidate in inner:
        if id(candidate) not in nested_in_nested:
            yield candidate, id(candidate) in top


class NestedFunction(Rule):
    __doc__ = __doc__
    name = "nested-function"
    # First: the other rules then see the moved function as a method (or function) forward
    # calls, with its parameters, and rewrite it like any other: lift-branch passes a lifted
    # setting into it, annotate (100) types what is left (measured in --rule all: annotate
    # types the moved method's None defaults; the captured values it cannot type from the
    # call, so this rule annotates them itself, from the enclosing method).
    order = 5
    targets = ("torchscript", "onnx")
    off_target = ("torch.export traces functions defined inside forward as they are (measured "
                  "on torch 2.13)")
    CODES = (
        Code("TSF106", "nested-function", "function or class defined inside a compiled method",
             "TorchScript rejects nested definitions (\"function definitions aren't "
             "supported\"). `tsfix apply --rule nested-function` moves a function defined at "
             "the top level of the method to a method of the class (or a module function when "
             "it does not use self), the values it reads from the method passed as "
             "parameters. It leaves (and says why) a function used other than by calling it, "
             "defined inside an if/for/with, recursive, a generator, decorated, with *args, "
             "**kwargs or nonlocal, or with a default computed from values that may change "
             "after the def. Move those, and nested classes, to module level by hand."),
    )
    summary = ("Functions defined inside forward (and other compiled methods) become methods "
               "(or module functions when they do not use self), the values they read from "
               "the method passed as parameters")

    VALID = (
        # Nothing nested.
        """
import torch
class M(torch.nn.Module):
    def forward(self, x):
        return x * 2
""",
    )
    INVALID = (
        Example(
            """
import torch
class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = 2.0
    def forward(self, x):
        n = x.shape[-1]
        def scaled(y):
            return y * self.gain / n
        return scaled(x) + scaled(x * 2)
""",
            """
import torch
class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = 2.0
    def forward(self, x):
        n = x.shape[-1]
        return self._forward_scaled(n, x) + self._forward_scaled(n, x * 2)

    # From forward(): TorchScript compiles no nested function.
    def _forward_scaled(self, n: int, y):
        return y * self.gain / n
""",
        ),
        # Used as a value (passed to map): left alone, reported.
        Example(
            """
import torch
class Each(torch.nn.Module):
    def forward(self, xs):
        def double(y):
            return y * 2
        return list(map(double, xs))
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        # A def inside a compiled method: the only methods the rule reads.
        return any(isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef) and inner is not func
                   for _, func in file.compiled for inner in file.nodes_of(func))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        rewritten = super().transform_module_impl(tree)
        if not self._functions:
            return rewritten
        body: list[cst.BaseStatement] = []
        for statement in rewritten.body:
            if isinstance(statement, cst.ClassDef):
                body.extend(self._functions.get(statement.name.value, []))
            body.append(statement)
        return rewritten.with_changes(body=body)

    def prepare(self, module: cst.Module) -> None:
        # class name -> module functions moved out of it, placed before the class
        self._functions: dict[str, list[cst.FunctionDef]] = {}
        self._taken = {n.value for n in find_all(module, cst.Name)} | _MODULE_PRIVATE

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        class_name = cls.name.value
        new_methods: dict[str, list[cst.FunctionDef]] = {}
        new_bodies: dict[int, cst.FunctionDef] = {}
        functions: list[cst.FunctionDef] = []
        parts: list[str] = []
        notes: list[str] = []
        for method, func in facts.compiled_methods():
            if not isinstance(func.body, cst.IndentedBlock) or not func.body.body:
                continue
            never = facts.never_compiled(method)
            nested = [(f, top) for f, top in _nested_defs(func) if id(f) not in never]
            if not nested:
                continue
            scopes = _Scopes(func)
            moves: list[_Move] = []
            for inner, top in nested:
                message = f"function {inner.name.value!r} defined inside {method}()"
                try:
                    move = self._plan(facts, method, func, inner, top, scopes)
                except _Refused as why:
                    self.skip(class_name, inner, f"{message}; left where it is: {why}",
                              code="TSF106", message=message)
                    continue
                self.fixed(inner, "TSF106", message)
                moves.append(move)
            if not moves:
                continue
            new_bodies[id(func)] = _rewrite_method(func, moves)
            for move in moves:
                moved = self._moved(move, class_name)
                (new_methods.setdefault(method, []) if move.is_method else functions).append(
                    moved)
                where = "method" if move.is_method else "module function"
                captured = [p.name for p in move.params if p.captured]
                parts.append(f"{move.func.name.value}() moved out of {method}() to {where} "
                             f"{move.new_name}()" + (f", given {', '.join(captured)}"
                                                     if captured else ""))
                notes.extend(f"{move.new_name}(): the type of {name} is not known here; "
                             "TorchScript takes it for a Tensor" for name in move.unknown)
        if not parts:
            return cls
        rewritten = cls.with_changes(body=_class_body(cls.body, facts, new_bodies, new_methods))
        if functions:
            self._functions[class_name] = functions
        self.changes.append(ClassChange(self.name, class_name, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return rewritten

    # -- the analysis ----------------------------------------------------------------------

    def _plan(self, facts: ClassFacts, method: str, outer: cst.FunctionDef,
              inner: cst.FunctionDef, top: bool, scopes: _Scopes) -> _Move:
        name = inner.name.value
        self_var = self_name(outer)
        if self_var is None:
            raise _Refused(f"{method}() has no self parameter")
        _check_definition(inner, top)
        bindings = scopes.outer.assignments[name]
        if len(bindings) != 1:
            raise _Refused(f"the name {name} is bound more than once in {method}()")
        inner_scope = scopes.scope_of(inner)
        calls = self._calls(name, outer, inner, inner_scope, scopes)
        captured = self._captured(inner, inner_scope, scopes, outer, method, self_var)
        for call in calls:
            _check_call_scope(call, captured, scopes)
        is_method = self_var in captured
        if is_method and len(scopes.outer.assignments[self_var]) != 1:
            raise _Refused(f"{method}() re-binds {self_var}")
        typer = facts.typer(method)
        params: list[_Param] = []
        unknown: list[str] = []
        outer_params = parameters_of(outer)
        for value in captured:
            if value == self_var:
                continue
            kind = typer.type_of(cst.Name(value))
            plain = outer_params.get(value)
            if (kind is None and plain is not None and plain.annotation is None
                    and plain.default is None and plain.star == ""):
                kind = TENSOR   # what TorchScript makes of it in the method already
            if kind is None or not is_complete(kind):
                unknown.append(value)
            params.append(_Param(value, cst.Param(cst.Name(value)), _written_type(kind),
                                 captured=True))
        params.extend(self._own_params(facts, method, outer, inner, calls, typer, scopes))
        new_name = self._new_name(method, name)
        return _Move(method, inner, new_name, is_method, self_var, params, calls, unknown)

    def _calls(self, name: str, outer: cst.FunctionDef, inner: cst.FunctionDef,
               inner_scope: Scope, scopes: _Scopes) -> list[cst.Call]:
        """Every use of the function's name in the method, each a call after the ``def``."""
        assert isinstance(outer.body, cst.IndentedBlock)
        statements = list(outer.body.body)
        defined_at = next(i for i, s in enumerate(statements) if s is inner)
        calls: list[cst.Call] = []
        for access in scopes.accesses:
            if _name_of(access) != name or not scopes.resolves_to_outer(access):
                continue
            if scopes.within(access.scope, inner_scope):
                raise _Refused("it calls itself (TorchScript has no recursion)")
            owner = access.scope
            while owner is not scopes.outer:
                if isinstance(owner, FunctionScope):
                    raise _Refused("it is used inside another function or lambda")
                owner = owner.parent
            parent = scopes.parents.get(access.node)
            if not isinstance(parent, cst.Call) or parent.func is not access.node:
                raise _Refused("it is used as a value, not only called (TorchScript has no "
                               "function values)")
            if any(arg.star for arg in parent.args):
                raise _Refused(f"a call passes *args or **kwargs: `{code_of(parent)}`")
            if find_all(parent, cst.NamedExpr):
                raise _Refused(f"a call holds an assignment expression: `{code_of(parent)}`")
            after = any(contains(s, parent) for s in statements[defined_at + 1:])
            if not after:
                raise _Refused("it is called before its def")
            calls.append(parent)
        if not calls:
            raise _Refused("it is never called")
        return calls

    def _captured(self, inner: cst.FunctionDef, inner_scope: Scope, scopes: _Scopes,
                  outer: cst.FunctionDef, method: str, self_var: str) -> list[str]:
        """The names the function reads from the method, in the order it first reads them."""
        found: dict[str, None] = {}
        for access in sorted(scopes.accesses, key=lambda a: _offset(inner, a.node)):
            name = _name_of(access)
            if (name is None or not scopes.within(access.scope, inner_scope)
                    or not scopes.resolves_to_outer(access)):
                continue
            if name == inner.name.value:
                continue            # the function itself: refused by _calls
            for binding in scopes.outer.assignments[name]:
                node = getattr(binding, "node", None)
                if isinstance(node, cst.FunctionDef | cst.Lambda | cst.ClassDef):
                    raise _Refused(f"it uses {name}, defined in {method}() as a function or "
                                   "class, which cannot be passed to it")
            found[name] = None
        return list(found)

    def _own_params(self, facts: ClassFacts, method: str, outer: cst.FunctionDef,
                    inner: cst.FunctionDef, calls: Sequence[cst.Call], typer: Typer,
                    scopes: _Scopes) -> list[_Param]:
        params = list(inner.params.params)
        # A default that is not a literal is passed by the calls, so it and every default
        # before it leave the signature (a parameter without default cannot follow one with).
        computed = [i for i, p in enumerate(params)
                    if p.default is not None and _default_kind(p.default) is None]
        last_passed = computed[-1] if computed else -1
        found: list[_Param] = []
        for index, param in enumerate(params):
            pname = param.name.value
            default = param.default
            written: str | None = None
            passed: cst.BaseExpression | None = None
            if default is not None and index <= last_passed:
                kind = _default_kind(default)
                if kind is None:
                    self._check_stable_default(facts, method, outer, inner, default, scopes)
                    kind = typer.type_of(default)
                elif kind == "None":
                    raise _Refused(f"the default None of {pname} comes before a default "
                                   "computed in the method")
                passed = default
                written = _written_type(kind) if param.annotation is None else None
                param = param.with_changes(default=None, equal=cst.MaybeSentinel.DEFAULT)
            elif param.annotation is None and default is not None:
                written = _written_type(literal_type(default))
            elif param.annotation is None:
                written = _written_type(_argument_type(calls, index, pname, typer))
            found.append(_Param(pname, param, written, passed))
        return found

    def _check_stable_default(self, facts: ClassFacts, method: str, outer: cst.FunctionDef,
                              inner: cst.FunctionDef, default: cst.BaseExpression,
                              scopes: _Scopes) -> None:
        """A default the calls can pass instead: its value cannot change after the def."""
        shown = code_of(default)
        for node in find_all(default, cst.CSTNode):  # type: ignore[type-abstract]
            if isinstance(node, cst.BaseExpression) and not isinstance(node,
                                                                      _STABLE_DEFAULT_NODES):
                raise _Refused(f"its default `{shown}` is computed when the def runs (and may "
                               "be a new object); the calls cannot pass it instead")
        self_var = self_name(outer)
        assert isinstance(outer.body, cst.IndentedBlock)
        statements = list(outer.body.body)
        defined_at = next(i for i, s in enumerate(statements) if s is inner)
        for attribute in find_all(default, cst.Attribute):
            if (isinstance(attribute.value, cst.Name) and attribute.value.value == self_var
                    and attribute.attr.value in facts.assigned_outside_init):
                raise _Refused(f"its default `{shown}` reads self.{attribute.attr.value}, "
                               "which a method other than __init__ assigns")
        attribute_names = {id(a.attr) for a in find_all(default, cst.Attribute)}
        for name in find_all(default, cst.Name):
            if id(name) in attribute_names or name.value in ("True", "False", "None"):
                continue
            bindings = scopes.outer.assignments[name.value]
            if not bindings:
                raise _Refused(f"its default `{shown}` reads {name.value}, which is not a "
                               f"name of {method}()")
            if len(bindings) > 1:
                raise _Refused(f"its default `{shown}` reads {name.value}, which {method}() "
                               "re-binds")
            node = getattr(next(iter(bindings)), "node", None)
            if isinstance(node, cst.Param):
                continue
            if not any(node is not None and contains(s, node) and not isinstance(
                    s, cst.For | cst.While | cst.If | cst.With | cst.Try)
                    for s in statements[:defined_at]):
                raise _Refused(f"its default `{shown}` reads {name.value}, which is not bound "
                               "once at the top level before the def")

    def _new_name(self, method: str, inner: str) -> str:
        base = f"_{method.strip('_')}_{inner.lstrip('_')}"
        chosen, suffix = base, 1
        while chosen in self._taken:
            suffix += 1
            chosen = f"{base}_{suffix}"
        self._taken.add(chosen)
        return chosen

    # -- the rewrite -----------------------------------------------------------------------

    def _moved(self, move: _Move, class_name: str) -> cst.FunctionDef:
        params: list[cst.Param] = []
        if move.is_method:
            params.append(cst.Param(cst.Name(move.self_var)))
        for param in move.params:
            node = param.node
            if param.annotation is not None:
                node = node.with_changes(annotation=cst.Annotation(cst.parse_expression(
                    annotation_text(param.annotation, self.facts.tensor_name))))
                self.need_typing(*typing_names(param.annotation))
            params.append(node.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        where = (f"{move.method}()" if move.is_method else f"{class_name}.{move.method}()")
        comment = cst.EmptyLine(comment=cst.Comment(
            f"# From {where}: TorchScript compiles no nested function."))
        kept = [line for line in _attached_comments(move.func) if line.comment is not None]
        blank = [cst.EmptyLine(indent=False)] * (1 if move.is_method else 2)
        return move.func.with_changes(
            name=cst.Name(move.new_name),
            params=move.func.params.with_changes(params=params),
            leading_lines=[*blank, comment, *kept])


def _check_definition(inner: cst.FunctionDef, top: bool) -> None:
    """What about the function itself keeps it where it is."""
    if not top:
        raise _Refused("it is defined inside a block (if/for/with/...): moved out, it would "
                       "exist on paths where the original defines nothing")
    if inner.asynchronous is not None:
        raise _Refused("it is async")
    if inner.decorators:
        raise _Refused("it is decorated")
    params = inner.params
    if isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None:
        raise _Refused("it takes *args or **kwargs")
    if params.kwonly_params or params.posonly_params:
        raise _Refused("it has keyword-only or positional-only parameters")
    body = inner.body
    inside = [n for n in find_all(body, cst.FunctionDef, cst.ClassDef, cst.Lambda)]
    if inside:
        raise _Refused("it holds a definition of its own (def, class or lambda)")
    if find_all(body, cst.Yield, cst.Await):
        raise _Refused("it is a generator")
    if find_all(body, cst.Nonlocal, cst.Global):
        raise _Refused("it declares nonlocal or global names")
    if any(n.value in ("super", "__class__") for n in find_all(body, cst.Name)):
        raise _Refused("it uses super() or __class__, which mean something else in a method")


def _check_call_scope(call: cst.Call, captured: Sequence[str], scopes: _Scopes) -> None:
    """A call inside a comprehension passes the names the function reads as the comprehension
    sees them: none of them may be a name the comprehension binds."""
    scope = scopes.scopes.get(call)
    while scope is not None and scope is not scopes.outer:
        shadowed = [n for n in captured if scope.assignments[n]]
        if shadowed:
            raise _Refused(f"a call `{code_of(call)}` sits in a comprehension that binds "
                           f"{', '.join(shadowed)}, a name the function reads from the method")
        scope = scope.parent


def _offset(root: cst.CSTNode, node: cst.CSTNode) -> int:
    """Order of ``node`` inside ``root`` (pre-order), for a stable parameter order."""
    nodes = find_all(root, cst.Name)
    for index, candidate in enumerate(nodes):
        if candidate is node:
            return index
    return len(nodes)


def _default_kind(default: cst.BaseExpression) -> str | None:
    """The type of a literal default ("None" for None), None for a computed one."""
    if isinstance(default, cst.Name) and default.value == "None":
        return "None"
    return literal_type(default)


def _written_type(kind: str | None) -> str | None:
    """The annotation this rule writes for a type: a known type that is not a Tensor (an
    unannotated parameter is a Tensor to TorchScript already)."""
    if kind is None or not is_complete(kind) or kind in (TENSOR, "None"):
        return None
    return kind


def _argument_type(calls: Sequence[cst.Call], index: int, name: str, typer: Typer
                   ) -> str | None:
    """The one type every call passes for a parameter, or None."""
    kinds: set[str | None] = set()
    for call in calls:
        value: cst.BaseExpression | None = None
        for position, arg in enumerate(call.args):
            by_position = arg.keyword is None and position == index
            if by_position or (arg.keyword is not None and arg.keyword.value == name):
                value = arg.value
        if value is None:
            return None
        kinds.add(typer.type_of(value))
    return kinds.pop() if len(kinds) == 1 else None


def _rewrite_method(func: cst.FunctionDef, moves: Sequence[_Move]) -> cst.FunctionDef:
    """The method without the moved definitions, its calls of them calling the moved ones."""
    calls = {id(call): move for move in moves for call in move.calls}
    removed = {id(move.func) for move in moves}
    assert isinstance(func.body, cst.IndentedBlock)
    statements: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []
    for statement in func.body.body:
        if id(statement) in removed:
            assert isinstance(statement, cst.FunctionDef)
            # Comments above the def that a blank line separates from it are about the
            # method: they stay, on the next statement (a call of the function follows).
            carried.extend(_method_comments(statement))
            continue
        if carried and isinstance(statement, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            statement = statement.with_changes(
                leading_lines=[*carried, *statement.leading_lines])
            carried = []
        statements.append(statement)
    body = func.body.with_changes(body=statements)
    return func.with_changes(body=body.visit(_ReplaceCalls(calls)))


def _split_comments(func: cst.FunctionDef) -> int:
    """Where the comment block directly above the def (no blank line in between) starts."""
    lines = func.leading_lines
    start = len(lines)
    while start > 0 and lines[start - 1].comment is not None:
        start -= 1
    return start


def _attached_comments(func: cst.FunctionDef) -> Sequence[cst.EmptyLine]:
    return func.leading_lines[_split_comments(func):]


def _method_comments(func: cst.FunctionDef) -> list[cst.EmptyLine]:
    """The comments above the def, up to the blank line before its own block, without the
    blank lines that end them (the next statement keeps its own)."""
    lines = list(func.leading_lines[:_split_comments(func)])
    if not any(line.comment is not None for line in lines):
        return []
    while lines and lines[-1].comment is None:
        lines.pop()
    return lines


def _new_call(call: cst.Call, move: _Move) -> cst.Call:
    """``f(a, b)`` -> ``self._forward_f(<captured>, a, b, <computed defaults it omits>)``."""
    callee: cst.BaseExpression = (cst.Attribute(cst.Name(move.self_var), cst.Name(move.new_name))
                                  if move.is_method else cst.Name(move.new_name))
    captured = [cst.Arg(cst.Name(p.name)) for p in move.params if p.captured]
    own = [p for p in move.params if not p.captured]
    positional = sum(1 for a in call.args if a.keyword is None)
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    filled = [cst.Arg(p.passed, keyword=cst.Name(p.name),
                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
              for index, p in enumerate(own)
              if p.passed is not None and index >= positional and p.name not in keywords]
    args = list(call.args)
    if filled and args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(func=callee, args=[*captured, *args, *filled])


class _ReplaceCalls(cst.CSTTransformer):
    """Calls of moved functions (their arguments already rewritten: a call can hold one)."""

    def __init__(self, calls: Mapping[int, _Move]) -> None:
        self.calls = calls

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        move = self.calls.get(id(original))
        return updated if move is None else _new_call(updated, move)


def _class_body(body: cst.BaseSuite, facts: ClassFacts, new_bodies: Mapping[int, cst.FunctionDef],
                new_methods: Mapping[str, list[cst.FunctionDef]]) -> cst.BaseSuite:
    assert isinstance(body, cst.IndentedBlock)
    statements: list[cst.BaseStatement] = []
    for statement in body.body:
        if isinstance(statement, cst.FunctionDef):
            statements.append(new_bodies.get(id(statement), statement))
            name = statement.name.value
            if facts.methods.get(name) is statement:
                statements.extend(new_methods.get(name, []))
        else:
            statements.append(statement)
    return body.with_changes(body=statements)
