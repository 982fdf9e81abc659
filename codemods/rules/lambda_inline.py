"""``lambda-inline``: lambdas in compiled methods become the code TorchScript compiles: a
``map(lambda ...)`` (or a ``map`` of a named function, method or submodule) consumed at once
becomes a list comprehension, a lambda bound to a name becomes a nested ``def`` (which
``nested-function`` then moves out of the method).

What it does
    In compiled methods (``forward()``, ``@torch.jit.export`` methods and the methods they
    call), each lambda is rewritten or left with the reason:

    * ``map(lambda t: body, xs)`` whose result is consumed at once (unpacked into names,
      ``a, b, c = map(...)``, or wrapped in ``list(...)``, or in ``tuple(...)`` that is
      unpacked or only joined by ``torch.cat``/``torch.stack``, directly or through a name,
      or summed, ``sum(map(lambda fn: fn(x), self.fns))``, which sum-tensors then writes as
      a loop) becomes ``[body for t in xs]``; with several iterables,
      ``map(lambda a, b: body, xs, ys)`` becomes ``[body for a, b in zip(xs, ys)]``. The
      einops call a lambda often holds (``rearrange(t, 'b n (h d) -> b h n d', h=h)``) stays
      as it is, for einops-to-torch. When the lambda's parameter is also a name of the method,
      the comprehension's variable gets a fresh name (TorchScript gives a comprehension
      variable the type of the method's local of the same name: measured, ``t = 3`` then
      ``[t * 2 for t in qkv]`` scripts and fails when it runs);
    * ``map(f, xs)`` with a named callable, ``f`` or ``self.f`` (a function, a nested ``def``,
      a method, a submodule: ``q, k, v = map(self.split_heads, (q, k, v))``), consumed at once
      the same way, becomes ``[f(t) for t in xs]``; the variable takes the name of the
      ``def``'s parameter when the ``def`` is a method or in the method, else ``t`` (fresh when
      the method has it). A ``map`` consumed lazily is reported and left;
    * ``name = lambda x: body``, a statement of the method's own body, only called afterwards
      (or mapped at once: ``q, k, v = map(name, (q, k, v))`` becomes ``[name(x) for x in (q,
      k, v)]``), becomes ``def name(x): return body``: ``nested-function`` (next in ``--rule
      all``) moves it to a method or module function, the values it reads passed as
      arguments.

    Other lambdas are reported and left: ``sorted``/``min``/``max`` with ``key=lambda``
    (TorchScript's take no key function), ``filter(lambda ...)`` (TorchScript comprehensions
    have no ``if`` clause), a ``map`` consumed lazily (``for y in map(...)``), lambdas stored,
    returned or passed elsewhere.

Why it breaks export
    TorchScript compiles no lambda ("Lambda aren't supported", torch 2.13) and no function
    value: ``map(self.split_heads, qkv)`` fails ("map(Tensor 0, Tensor 1) -> ..."). It compiles
    calls of functions, methods and submodules inside list
    comprehensions over lists and tuples (of tensors, ints, tuples), and unpacking of the list
    they build (``q, k, v = [f(t) for t in qkv]``, also nested: ``(a, b), (c, d) = [(t[:1],
    t[1:]) for t in xs]``) and comprehensions over ``zip``. Over a display holding a starred
    chunk (``qkv = (q, *kv.chunk(2))``) the display itself fails; once ``starred-args``
    indexes the pieces, the comprehension over it and its unpacking script (measured), so
    no statement per element is needed. ``torch.export`` traces lambdas as
    they are: the rule serves the TorchScript-based targets only.

Example
    Before::

        qkv = self.to_qkv(x).chunk(3, dim = -1)
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h = self.heads), qkv)

    After::

        qkv = self.to_qkv(x).chunk(3, dim = -1)
        q, k, v = [rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in qkv]

    (black formats the changed line.)

Fix safety
    Exact in eager mode. A ``map`` that is unpacked or turned into a list calls its lambda on
    every element before the statement goes on, as the comprehension does, reading the names
    the lambda reads at that moment; ``map`` stops at its shortest iterable, as ``zip``
    does. ``torch.cat``/``torch.stack`` join a list as they join a tuple. A lambda bound to
    a name and a ``def`` of the same body are the same function (defaults evaluated where
    the lambda was). A named callable is looked up once per element instead of once
    (``self.f`` is an attribute read, which changes nothing between elements), and not at
    all when ``xs`` is empty. Left alone: a lambda with defaults, ``*args``,
    ``**kwargs`` or keyword-only parameters in a ``map``, a body with ``:=`` (in a
    comprehension it would bind the method's name) or ``yield``, a lambda holding another
    lambda, ``map``/``list``/``tuple``/``zip`` re-bound in the file or the method, and a bound
    lambda re-bound, used other than by calling or mapping it, or called inside another
    lambda.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    JOIN_FUNCTIONS,
    code_of,
    find_all,
    fresh_name,
    names_bound_in,
    names_used,
    parent_map,
    qualified_name,
    self_attr,
    self_name,
    top_level_names,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_BUILTINS = ("map", "list", "tuple", "zip")
# Nodes an iterable is written bare in ``for t in <iterable>``; others get parentheses.
_BARE_ITERABLE = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Tuple, cst.List)
_KEY_FUNCTIONS = ("sorted", "min", "max")


class _Refused(Exception):
    """Why a lambda stays."""


def _outermost_lambdas(node: cst.CSTNode) -> Iterator[cst.Lambda]:
    """Lambdas of ``node`` not inside another lambda, in source order."""
    if isinstance(node, cst.Lambda):
        yield node
        return
    for child in node.children:
        yield from _outermost_lambdas(child)


def _plain_params(params: cst.Parameters) -> list[str] | None:
    """The names of a lambda's parameters when all are plain (no default, no ``*``)."""
    if (params.posonly_params or params.kwonly_params or params.star_kwarg is not None
            or isinstance(params.star_arg, cst.Param)
            or any(p.default is not None for p in params.params)):
        return None
    return [p.name.value for p in params.params]


class _Rename(cst.CSTTransformer):
    """Reads of one name renamed (not ``.attr`` names nor keyword names)."""

    def __init__(self, old: str, new: str, keep: set[int]) -> None:
        self.old, self.new, self.keep = old, new, keep

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        if original.value == self.old and id(original) not in self.keep:
            return updated.with_changes(value=self.new)
        return updated


def _renamed(body: cst.BaseExpression, old: str, new: str) -> cst.BaseExpression:
    keep = {id(a.attr) for a in find_all(body, cst.Attribute)}
    keep |= {id(a.keyword) for a in find_all(body, cst.Arg) if a.keyword is not None}
    result = body.visit(_Rename(old, new, keep))
    assert isinstance(result, cst.BaseExpression)
    return result


class _Replace(cst.CSTTransformer):
    """Nodes replaced by id, each built from its updated form (replacements may nest)."""

    def __init__(self, builders: Mapping[int, Callable[[cst.CSTNode], cst.CSTNode]]) -> None:
        self.builders = builders

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode  # type: ignore[override]
                 ) -> cst.CSTNode:
        build = self.builders.get(id(original))
        return updated if build is None else build(updated)


class LambdaInline(Rule):
    __doc__ = __doc__
    name = "lambda-inline"
    # Before nested-function (5): a lambda bound to a name becomes a nested def, which
    # nested-function then moves out like any other. Before einops-to-torch (35) and the
    # rules that read calls in forward: they see the lambda's body inline, in the method.
    order = 3
    targets = ("torchscript", "onnx")
    off_target = "torch.export traces lambdas as they are (measured on torch 2.13)"
    CODES = (
        Code("TSF102", "lambda", "lambda in a compiled method",
             "TorchScript rejects lambdas (\"Lambda aren't supported\"). `tsfix apply --rule "
             "lambda-inline` turns `map(lambda t: f(t), xs)` that is unpacked or made a list "
             "into `[f(t) for t in xs]`, and a lambda bound to a name and only called (or "
             "mapped the same way) into a nested def (nested-function then moves it out). "
             "Others (sorted/min/max with key=lambda, filter, a lambda stored or passed on): "
             "use a method or a module-level function, or write the loop."),
    )
    summary = ("map(lambda ...) or map(function, ...) unpacked or made a list becomes a list "
               "comprehension; a lambda bound to a name becomes a nested def (moved out by "
               "nested-function)")

    VALID = (
        # No lambda in compiled code (one in __init__ is not compiled).
        """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.make = lambda n: n * 2
    def forward(self, x):
        return x * 2
""",
    )
    INVALID = (
        Example(
            """
import torch
class Attention(torch.nn.Module):
    def __init__(self, heads=2):
        super().__init__()
        self.heads = heads
    def forward(self, x):
        qkv = x.chunk(3, dim=-1)
        q, k, v = map(lambda t: t.reshape(t.shape[0], self.heads, -1), qkv)
        return q + k + v
""",
            """
import torch
class Attention(torch.nn.Module):
    def __init__(self, heads=2):
        super().__init__()
        self.heads = heads
    def forward(self, x):
        qkv = x.chunk(3, dim=-1)
        q, k, v = [t.reshape(t.shape[0], self.heads, -1) for t in qkv]
        return q + k + v
""",
        ),
        Example(
            """
import torch
class Scale(torch.nn.Module):
    def forward(self, x):
        double = lambda t: t * 2
        return double(x)
""",
            """
import torch
class Scale(torch.nn.Module):
    def forward(self, x):
        def double(t):
            return t * 2
        return double(x)
""",
        ),
        # A submodule mapped over a tuple (vit-pytorch's Attention).
        Example(
            """
import torch
class Split(torch.nn.Module):
    def forward(self, t):
        return t.unflatten(-1, (2, -1)).transpose(1, 2)
class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.split_heads = Split()
    def forward(self, x):
        q, k, v = x.chunk(3, dim=-1)
        q, k, v = map(self.split_heads, (q, k, v))
        return q + k + v
""",
            """
import torch
class Split(torch.nn.Module):
    def forward(self, t):
        return t.unflatten(-1, (2, -1)).transpose(1, 2)
class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.split_heads = Split()
    def forward(self, x):
        q, k, v = x.chunk(3, dim=-1)
        q, k, v = [self.split_heads(t) for t in (q, k, v)]
        return q + k + v
""",
        ),
        # Sorted by a key function: TorchScript's sorted() takes none; reported, left.
        Example(
            """
import torch
class Order(torch.nn.Module):
    def forward(self, xs: list[torch.Tensor]):
        return sorted(xs, key=lambda t: t.numel())[0]
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        if ast.Lambda in file.compiled_node_types:
            return True
        return "map(" in file.text and any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "map" for _, func in file.compiled for node in file.nodes_of(func))

    def prepare(self, module: cst.Module) -> None:
        self._module_names = top_level_names(module)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        builders: dict[int, Callable[[cst.CSTNode], cst.CSTNode]] = {}
        parts: list[str] = []
        notes: list[str] = []
        for method, func in facts.compiled_methods():
            self._rewrite_method(facts, method, func, builders, parts, notes)
            self._plan_named_maps(facts, method, func, builders, parts)
        if not builders:
            return cls
        rewritten = cls.visit(_Replace(builders))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return rewritten

    def _rewrite_method(self, facts: ClassFacts, method: str, func: cst.FunctionDef,
                        builders: dict[int, Callable[[cst.CSTNode], cst.CSTNode]],
                        parts: list[str], notes: list[str]) -> None:
        lambdas = list(_outermost_lambdas(func.body))
        if not lambdas:
            return      # most methods: no parent map to build
        parents = parent_map(func)
        taken = names_bound_in(func)
        shadowed = {n for n in _BUILTINS if n in self._module_names or n in taken}
        message = f"lambda in {method}()"
        for lam in lambdas:
            try:
                for inner in find_all(lam.body, cst.Lambda):
                    self.skip(facts.name, inner, f"{message}; left as it is: it is inside "
                              "another lambda", code="TSF102", message=message)
                if find_all(lam.body, cst.Lambda):
                    raise _Refused("it holds another lambda")
                if find_all(lam.body, cst.NamedExpr, cst.Yield, cst.Await):
                    raise _Refused("its body holds := or yield, which a comprehension or def "
                                   "would bind or run elsewhere")
                done = (self._plan_map(lam, func, parents, shadowed, taken, builders)
                        or self._plan_bound(lam, func, parents, shadowed, taken, builders))
            except _Refused as why:
                self.skip(facts.name, lam, f"{message}; left as it is: {why}", code="TSF102",
                          message=message)
                continue
            self.fixed(lam, "TSF102", message)
            parts.append(f"{method}(): {done}")
            if done.startswith("lambda bound to"):
                notes.append(f"{method}(): {done.split(' becomes ')[0]} is now a nested def: "
                             "nested-function (next in --rule all) moves it out; without it "
                             "the class still does not script")

    # -- map(lambda ...) ------------------------------------------------------------------

    def _plan_map(self, lam: cst.Lambda, func: cst.FunctionDef,
                  parents: Mapping[int, cst.CSTNode], shadowed: set[str], taken: set[str],
                  builders: dict[int, Callable[[cst.CSTNode], cst.CSTNode]]) -> str | None:
        """``map(lambda ...)`` consumed at once: its replacement, registered in ``builders``;
        None when the lambda is not passed to ``map`` (the caller tries the other forms)."""
        arg = parents.get(id(lam))
        call = parents.get(id(arg)) if arg is not None else None
        if not (isinstance(arg, cst.Arg) and isinstance(call, cst.Call)):
            return None
        callee = call.func.value if isinstance(call.func, cst.Name) else None
        if callee in _KEY_FUNCTIONS and arg.keyword is not None and arg.keyword.value == "key":
            raise _Refused(f"TorchScript's {callee}() takes no key function; sort or compare "
                           "by the key in a loop")
        if callee == "filter":
            raise _Refused("TorchScript has no filter() and its comprehensions no if clause "
                           "(\"Comprehension ifs are not supported\"); write the loop")
        if callee != "map" or call.args[0] is not arg or arg.keyword is not None:
            return None
        if "map" in shadowed:
            raise _Refused("map is re-bound in this file or method")
        iterables = call.args[1:]
        if not iterables or any(a.keyword is not None or a.star for a in iterables):
            raise _Refused("map() is passed no iterable, a keyword or a *argument")
        params = _plain_params(lam.params)
        if params is None:
            raise _Refused("its parameters have defaults or are variadic")
        if len(params) != len(iterables):
            raise _Refused(f"map() passes {len(iterables)} iterable(s) to a lambda of "
                           f"{len(params)} parameter(s)")
        if len(params) > 1 and "zip" in shadowed:
            raise _Refused("zip is re-bound in this file or method")
        replaced = self._consumer(call, parents, shadowed, func)
        body_names = names_used(lam.body)
        rebound = [p for p in params
                   if any(p in names_used(c.target) for c in find_all(lam.body, cst.CompFor))]
        if rebound and any(p in taken for p in rebound):
            raise _Refused(f"a comprehension in its body re-binds {', '.join(rebound)}")
        names: dict[str, str] = {}
        for param in params:
            names[param] = (param if param not in taken else fresh_name(
                f"{param}_item", taken=taken | body_names | set(names.values()),
                numbered=f"{param}_item_"))

        def element(inner: cst.Call) -> str:
            lam_now = inner.args[0].value
            assert isinstance(lam_now, cst.Lambda)
            body: cst.BaseExpression = lam_now.body
            for old, new in names.items():
                if old != new:
                    body = _renamed(body, old, new)
            return code_of(body)

        target = [names[p] for p in params]

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            return _comprehension(updated, replaced is not call, element, target)

        builders[id(replaced)] = build
        renamed = [f"{old} as {new}" for old, new in names.items() if old != new]
        return ("map(lambda ...) becomes a list comprehension"
                + (f" (variable {', '.join(renamed)}: a local of the method has that name)"
                   if renamed else ""))

    def _consumer(self, call: cst.Call, parents: Mapping[int, cst.CSTNode],
                  shadowed: set[str], func: cst.FunctionDef) -> cst.Call:
        """The call the comprehension replaces (``map(...)`` itself, or ``list(map(...))``/
        ``tuple(map(...))``), when the map is consumed at once; else refused."""
        holder = parents.get(id(call))
        wrapper: cst.Call | None = None
        if isinstance(holder, cst.Arg):
            outer = parents.get(id(holder))
            if (isinstance(outer, cst.Call) and isinstance(outer.func, cst.Name)
                    and outer.func.value in ("list", "tuple") and len(outer.args) == 1
                    and outer.args[0] is holder and holder.keyword is None
                    and not holder.star):
                if outer.func.value in shadowed:
                    raise _Refused(f"{outer.func.value} is re-bound in this file or method")
                wrapper = outer
            if (isinstance(outer, cst.Call) and isinstance(outer.func, cst.Name)
                    and outer.func.value == "sum" and outer.func.value not in shadowed
                    and len(outer.args) == 1 and holder.keyword is None and not holder.star):
                # sum(map(lambda m: m(x), self.blocks)): sum takes every result before it
                # returns, and a result it has added is not read again (0 + r1 is new).
                return call
        value = wrapper or call
        assign = parents.get(id(value))
        unpacked = (isinstance(assign, cst.Assign) and assign.value is value
                    and len(assign.targets) == 1
                    and isinstance(assign.targets[0].target, cst.Tuple | cst.List))
        if wrapper is not None and (wrapper.func.value == "list"  # type: ignore[attr-defined]
                                    or unpacked or self._joined(wrapper, parents, func)):
            return wrapper
        if wrapper is None and unpacked:
            return call
        raise _Refused("its map() is not unpacked nor made a list at once: the function runs "
                       "while the result is consumed (a list would run it before)")

    def _joined(self, value: cst.Call, parents: Mapping[int, cst.CSTNode],
                func: cst.FunctionDef) -> bool:
        """Whether the tuple ``value`` is only ever the sequence of a ``torch.cat``/``stack``
        (passed directly, or through a name bound once and read only there): a list gives
        those the same result."""
        holder = parents.get(id(value))
        if isinstance(holder, cst.Arg):
            return self._joins(holder, parents)
        assign = parents.get(id(value))
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Name)):
            return False
        name = assign.targets[0].target
        reads = [n for n in find_all(func.body, cst.Name)
                 if n.value == name.value and n is not name]
        if sum(1 for t in find_all(func.body, cst.AssignTarget)
               if name.value in names_used(t.target)) != 1:
            return False
        return bool(reads) and all(
            isinstance(parents.get(id(n)), cst.Arg)
            and self._joins(parents[id(n)], parents)  # type: ignore[arg-type]
            for n in reads)

    def _joins(self, arg: cst.Arg, parents: Mapping[int, cst.CSTNode]) -> bool:
        call = parents.get(id(arg))
        return (isinstance(call, cst.Call) and call.args[0] is arg and arg.keyword is None
                and not arg.star
                and qualified_name(call.func, self.facts.imports) in JOIN_FUNCTIONS)

    # -- name = lambda ... ------------------------------------------------------------------

    def _plan_bound(self, lam: cst.Lambda, func: cst.FunctionDef,
                    parents: Mapping[int, cst.CSTNode], shadowed: set[str], taken: set[str],
                    builders: dict[int, Callable[[cst.CSTNode], cst.CSTNode]]) -> str:
        """``name = lambda ...`` at the top of the method, only called (or mapped, ``map(name,
        xs)`` consumed at once: it becomes ``[name(x) for x in xs]``): a nested def."""
        assign = parents.get(id(lam))
        line = parents.get(id(assign)) if assign is not None else None
        assert isinstance(func.body, cst.IndentedBlock)
        if not (isinstance(assign, cst.Assign) and assign.value is lam
                and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
                and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
                and any(s is line for s in func.body.body)):
            raise _Refused("it is not a map() made a list nor a lambda bound to a name at "
                           "the top of the method: TorchScript has no function values; use "
                           "a method or a module-level function")
        name = assign.targets[0].target.value
        uses = [n for n in find_all(func, cst.Name) if n.value == name]
        binding = assign.targets[0].target
        for use in uses:
            if use is binding:
                continue
            holder = parents.get(id(use))
            if isinstance(holder, cst.Attribute) and holder.attr is use:
                continue
            if isinstance(holder, cst.Arg) and holder.keyword is use:
                continue
            if isinstance(holder, cst.Arg) and self._mapped(use, holder, lam, taken, shadowed,
                                                            func, parents, builders):
                continue
            if not (isinstance(holder, cst.Call) and holder.func is use):
                raise _Refused(f"{name} is re-bound or used other than by calling it")
            if any(a is not lam and _contains_node(a, use) for a in find_all(func, cst.Lambda)):
                raise _Refused(f"{name} is called inside another lambda")

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(updated, cst.SimpleStatementLine)
            small = updated.body[0]
            assert isinstance(small, cst.Assign) and isinstance(small.value, cst.Lambda)
            now = small.value
            params = code_of(now.params) if now.params.children else ""
            text = f"def {name}({params}):\n    return {code_of(now.body)}\n"
            definition = cst.parse_statement(text)
            assert isinstance(definition, cst.FunctionDef)
            assert isinstance(definition.body, cst.IndentedBlock)
            returned = definition.body.body[0].with_changes(
                trailing_whitespace=updated.trailing_whitespace)
            return definition.with_changes(
                leading_lines=updated.leading_lines,
                body=definition.body.with_changes(body=[returned]))

        builders[id(line)] = build
        return f"lambda bound to {name} becomes def {name}()"

    def _mapped(self, use: cst.Name, arg: cst.Arg, lam: cst.Lambda, taken: set[str],
                shadowed: set[str], func: cst.FunctionDef, parents: Mapping[int, cst.CSTNode],
                builders: dict[int, Callable[[cst.CSTNode], cst.CSTNode]]) -> bool:
        """``map(name, xs)`` consumed at once: registers ``[name(x) for x in xs]`` (the
        lambda's parameter names for the variables, fresh when the method has them)."""
        call = parents.get(id(arg))
        if not (isinstance(call, cst.Call) and _maps_with(call, arg)):
            return False
        self._plan_mapped_call(call, use.value, _plain_params(lam.params) or [], taken,
                               shadowed, func, parents, builders)
        return True

    def _plan_mapped_call(self, call: cst.Call, callee: str, preferred: list[str],
                          taken: set[str], shadowed: set[str], func: cst.FunctionDef,
                          parents: Mapping[int, cst.CSTNode],
                          builders: dict[int, Callable[[cst.CSTNode], cst.CSTNode]]) -> None:
        """``map(<callee>, xs)`` consumed at once: registers ``[<callee>(x) for x in xs]``, its
        variables named ``preferred`` (fresh when the method or the callee has the name)."""
        if "map" in shadowed:
            raise _Refused("map is re-bound in this file or method")
        iterables = call.args[1:]
        if not iterables or any(a.keyword is not None or a.star for a in iterables):
            raise _Refused("map() is passed no iterable, a keyword or a *argument")
        if len(iterables) > 1 and "zip" in shadowed:
            raise _Refused("zip is re-bound in this file or method")
        replaced = self._consumer(call, parents, shadowed, func)
        preferred = (preferred[:len(iterables)] if len(preferred) >= len(iterables)
                     else ["item"] * len(iterables))
        avoid = taken | names_used(cst.parse_expression(callee))
        chosen: list[str] = []
        for wanted in preferred:
            chosen.append(fresh_name(wanted, f"{wanted}_item", taken=avoid | set(chosen),
                                     numbered=f"{wanted}_item_"))

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            return _comprehension(updated, replaced is not call,
                                  lambda _: f"{callee}({', '.join(chosen)})", chosen)

        builders[id(replaced)] = build

    # -- map(function, ...) -------------------------------------------------------------------

    def _plan_named_maps(self, facts: ClassFacts, method: str, func: cst.FunctionDef,
                         builders: dict[int, Callable[[cst.CSTNode], cst.CSTNode]],
                         parts: list[str]) -> None:
        """``map(f, xs)`` / ``map(self.f, xs)`` (a function, a method or a submodule, named)
        consumed at once becomes ``[f(t) for t in xs]``, as a mapped lambda does."""
        maps = [call for call in find_all(func.body, cst.Call)
                if call.args and _maps_with(call, call.args[0])]
        if not maps:
            return      # most methods: no parent map to build
        parents = parent_map(func)
        taken = names_bound_in(func)
        shadowed = {n for n in _BUILTINS if n in self._module_names or n in taken}
        self_var = self_name(func)
        in_lambdas = {id(n) for lam in find_all(func.body, cst.Lambda)
                      for n in find_all(lam, cst.Call)}
        for call in maps:
            if id(call) in in_lambdas:
                continue
            mapped = call.args[0].value
            if not (isinstance(mapped, cst.Name) or (
                    self_var is not None and self_attr(mapped, self_var) is not None)):
                continue
            if isinstance(mapped, cst.Name) and mapped.value in self._lambda_names(func):
                continue      # planned (or refused) with its lambda
            callee = code_of(mapped)
            message = f"map({callee}, ...) in {method}()"
            try:
                self._plan_mapped_call(call, callee, _parameter_names(mapped, facts, func),
                                       taken, shadowed, func, parents, builders)
            except _Refused as why:
                self.skip(facts.name, call, f"{message}; left as it is: {why}")
                continue
            parts.append(f"{method}(): map({callee}, ...) becomes a list comprehension")

    @staticmethod
    def _lambda_names(func: cst.FunctionDef) -> set[str]:
        """Names the method binds to a lambda (their maps are planned with the lambda)."""
        return {t.target.value for a in find_all(func.body, cst.Assign)
                if isinstance(a.value, cst.Lambda) for t in a.targets
                if isinstance(t.target, cst.Name)}


def _maps_with(call: cst.Call, arg: cst.Arg) -> bool:
    """``call`` is ``map(<arg>, ...)`` with ``arg`` the plain first argument."""
    return (isinstance(call.func, cst.Name) and call.func.value == "map" and bool(call.args)
            and call.args[0] is arg and arg.keyword is None and not arg.star)


def _parameter_names(mapped: cst.BaseExpression, facts: ClassFacts,
                     func: cst.FunctionDef) -> list[str]:
    """The parameter names of the mapped function when its ``def`` is at hand (a method of the
    class, a ``def`` in the method), to name the comprehension's variables; else ``t``."""
    definition: cst.FunctionDef | None = None
    self_var = self_name(func)
    attr = self_attr(mapped, self_var) if self_var is not None else None
    if attr is not None:
        definition = facts.methods.get(attr)
    elif isinstance(mapped, cst.Name):
        definition = next((d for d in find_all(func.body, cst.FunctionDef)
                           if d.name.value == mapped.value), None)
    if definition is None:
        return ["t"]
    names = [p.name.value for p in definition.params.params]
    return names[1:] if attr is not None else names


def _comprehension(updated: cst.CSTNode, wrapped: bool, element: Callable[[cst.Call], str],
                   target: list[str]) -> cst.CSTNode:
    """``[<element> for <target> in <the map's iterables>]`` in place of ``updated`` (the
    ``map(...)`` call, or the ``list(...)``/``tuple(...)`` call around it when ``wrapped``)."""
    inner = _first_arg(updated) if wrapped else updated
    assert isinstance(inner, cst.Call)
    sources = [a.value for a in inner.args[1:]]
    if len(sources) == 1:
        source = sources[0]
        text = (code_of(source) if isinstance(source, _BARE_ITERABLE)
                else f"({code_of(source)})")
    else:
        text = f"zip({', '.join(code_of(s) for s in sources)})"
    expression = cst.parse_expression(f"[{element(inner)} for {', '.join(target)} in {text}]")
    assert isinstance(expression, cst.ListComp) and isinstance(updated, cst.Call)
    return expression.with_changes(lpar=updated.lpar, rpar=updated.rpar)


def _first_arg(call: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(call, cst.Call)
    return call.args[0].value


def _contains_node(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in find_all(root, cst.Name))
