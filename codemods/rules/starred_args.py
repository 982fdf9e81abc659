"""``starred-args``: ``x.view(*shape)`` and friends pass the sequence itself.

What it does
    In compiled methods (``forward()``, ``@torch.jit.export`` methods and the methods they call;
    not ``@torch.jit.ignore`` methods nor ``if not torch.jit.is_scripting():`` branches), a call
    that unpacks a list of ints with ``*`` into an API that also takes the sequence itself passes
    the sequence instead::

        x.view(*shape)                 ->  x.view(shape)
        x.view(*x.shape[:2], -1)       ->  x.view(x.shape[0], x.shape[1], -1)
        x.view(*x.size()[:-1], h, d)   ->  x.view(list(x.size()[:-1]) + [h, d])
        torch.zeros(*size, dtype=t)    ->  torch.zeros(size, dtype=t)

    The APIs are the Tensor methods ``view``, ``reshape``, ``permute``, ``repeat``, ``expand``,
    ``flip``, ``tile``, ``new_zeros``, ``new_ones``, ``new_empty`` and ``torch.zeros``, ``ones``,
    ``empty``, ``rand``, ``randn``. A starred slice of a shape with literal bounds
    (``x.shape[:2]``, ``x.size()[1:3]``) and a starred list literal are spelled out element by
    element, which works for any callee; other mixes of starred and plain arguments become one
    list (``list(a) + [b, c]``). The starred value must be provably a sequence of ints: a shape
    (``x.shape``, ``x.size()``, a slice of either, ``list(...)`` of one), a ``List[int]``
    parameter, local or ``__init__`` attribute, or a list literal.

Why it breaks export
    TorchScript unpacks ``*`` only when the length is static: a tuple scripts, a list fails with
    "cannot statically infer the expected size of a list in this context" -- and ``x.shape`` and
    ``x.size()`` are ``List[int]`` in TorchScript, so ``x.view(*x.shape[:2], -1)`` fails as well
    as ``x.view(*shape)`` with a list. Every API above takes an ``int[]`` argument, which a list
    and a tuple both satisfy (measured on torch 2.13).

Example
    Before::

        def forward(self, x):
            b, t = x.shape[:2]
            y = self.proj(x).view(*x.shape[:2], self.heads, -1)
            return y.permute(*self.order)

    After (``self.order = [0, 2, 1, 3]`` in ``__init__``)::

        def forward(self, x):
            b, t = x.shape[:2]
            y = self.proj(x).view(x.shape[0], x.shape[1], self.heads, -1)
            return y.permute(self.order)

Fix safety
    For a sequence of ints, ``f(*s)`` and ``f(s)`` are the same call in eager mode, and
    ``list(s) + [a]`` holds the same ints as ``(*s, a)``. Spelling a shape slice out
    (``x.shape[:2]`` -> ``x.shape[0], x.shape[1]``) differs only for a tensor with fewer
    dimensions than the bound, where the rewrite raises IndexError instead of reshaping; each
    such rewrite says so in its notes. The only other difference: an empty sequence, which made
    the original call fail (``x.view()``), is accepted. Left alone, with the reason reported:
    starred values whose type cannot be shown to be a list or tuple of ints (unannotated
    parameters, which TorchScript types as Tensor; attributes set from constructor arguments;
    tensors, ``range``, ``*args``), other callees (``self.layer(*inputs)``,
    ``x.transpose(*dims)``: no sequence form), and ``**kwargs``. Tuples are not touched: they
    already script.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    collect_locals,
    is_complete,
    parts_of,
    type_from_annotation,
    unify_all,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_SEQUENCE_METHODS = ("view", "reshape", "permute", "repeat", "expand", "flip", "tile",
                     "new_zeros", "new_ones", "new_empty")
_SEQUENCE_FUNCTIONS = ("zeros", "ones", "empty", "rand", "randn")
# A `*` argument's opening: after `(` or `,` (a new line between included), not `**`.
_STARRED_ARGUMENT = re.compile(r"[(,]\s*\*(?!\*)")
# Longest shape slice spelled out element by element; longer ones become list(...) + [...].
_MAX_SPELLED = 6


def _shape_of(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """``E`` for ``E.shape`` / ``E.size()``."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "shape":
        return expr.value
    if (isinstance(expr, cst.Call) and not expr.args and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "size"):
        return expr.func.value
    return None


def _is_shape_like(expr: cst.BaseExpression) -> bool:
    """A shape, a slice of one, or ``list(...)`` of those: ints in both eager and script."""
    if (isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "list"
            and len(expr.args) == 1 and not expr.args[0].star and expr.args[0].keyword is None):
        return _is_shape_like(expr.args[0].value)
    if isinstance(expr, cst.Subscript):
        return (len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Slice)
                and _shape_of(expr.value) is not None)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        # x.size()[:-1] + (heads, dim): a torch.Size (eager), a List[int] (script).
        sides = (expr.left, expr.right)
        return any(_is_shape_like(side) for side in sides) and all(
            _is_shape_like(side) or _is_literal_sequence(side) for side in sides)
    return _shape_of(expr) is not None


def _is_literal_sequence(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Tuple | cst.List) and not any(
        isinstance(e, cst.StarredElement) for e in expr.elements)


def _is_literal_tuple(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Tuple) and _is_literal_sequence(expr)


def _literal_int(expr: cst.BaseExpression | None) -> int | None:
    if isinstance(expr, cst.Integer):
        return int(expr.value, 0)
    return None


def _spelled_shape(expr: cst.BaseExpression) -> list[str] | None:
    """``x.shape[:2]`` -> ``["x.shape[0]", "x.shape[1]"]``; ``x.size()[1:3]`` -> ``x.size(1)``,
    ``x.size(2)``. Only literal, non-negative bounds and a plain name or attribute receiver."""
    if not (isinstance(expr, cst.Subscript) and len(expr.slice) == 1
            and isinstance(expr.slice[0].slice, cst.Slice)):
        return None
    bounds = expr.slice[0].slice
    receiver = _shape_of(expr.value)
    if receiver is None or bounds.step is not None or bounds.upper is None:
        return None
    if get_full_name_for_node(receiver) is None:
        return None     # a call or subscript would be evaluated once per element
    lower = 0 if bounds.lower is None else _literal_int(bounds.lower)
    upper = _literal_int(bounds.upper)
    if lower is None or upper is None or not 0 <= lower < upper <= lower + _MAX_SPELLED:
        return None
    base = code_of(receiver)
    if isinstance(expr.value, cst.Attribute):
        return [f"{base}.shape[{i}]" for i in range(lower, upper)]
    return [f"{base}.size({i})" for i in range(lower, upper)]


def _attribute_types(facts: ClassFacts, imports: Mapping[str, str]) -> dict[str, str]:
    """Types of the values ``__init__`` stores on self, for attributes no other method sets:
    ``ClassFacts.attributes``, and what it leaves untyped that the annotation of the
    assignment (``self.dims: List[int] = []``) or a local of ``__init__`` (``order = [0, 2, 1]``
    then ``self.order = order``) tells.
    TODO(facts): ``ClassFacts.attributes`` should read ``__init__``'s annotations and locals,
    and leave out attributes other methods reassign."""
    found = {attr: kind for attr, kind in facts.attributes.items()
             if attr not in facts.assigned_outside_init}
    init = facts.init
    if init is None:
        return found
    self_var = self_name(init) or "self"
    typer = Typer(facts.parameter_types("__init__"), imports, None)
    collect_locals(init.body, typer)
    values: dict[str, list[str | None]] = {}
    for assign in find_all(init.body, cst.Assign, cst.AnnAssign):
        targets = ([t.target for t in assign.targets] if isinstance(assign, cst.Assign)
                   else [assign.target])
        for target in targets:
            attr = self_attr(target, self_var)
            if attr is None or assign.value is None or attr in found:
                continue
            values.setdefault(attr, []).append(
                type_from_annotation(assign.annotation.annotation)
                if isinstance(assign, cst.AnnAssign) else typer.type_of(assign.value))
    for attr, kinds in values.items():
        kind = unify_all(kinds)
        if attr not in facts.assigned_outside_init and kind is not None and is_complete(kind):
            found[attr] = kind
    return found


class _Refused(Exception):
    """A starred call that is not rewritten; the message is the reason."""


class _MethodRewriter:
    def __init__(self, rule: StarredArgs, facts: ClassFacts, method: str,
                 attributes: dict[str, str]) -> None:
        self.rule = rule
        self.func = func = facts.methods[method]
        self.self_var = self_name(func)
        params = func.params
        self.unannotated = {param.name.value for param in (*params.posonly_params,
                                                           *params.params, *params.kwonly_params)
                            if param.annotation is None and param.default is None}
        self.typer = Typer(facts.parameter_types(method), rule.imports, self.self_var,
                           attributes, facts.layers)
        collect_locals(func.body, self.typer)
        self.shape_locals = self._locals_assigned(_is_shape_like)
        self.tuple_locals = self._locals_assigned(_is_literal_tuple)
        self.star_parameters = {p.star_arg.name.value for p in find_all(func, cst.Parameters)
                                if isinstance(p.star_arg, cst.Param)}

    def _locals_assigned(self, test: Callable[[cst.BaseExpression], bool]) -> set[str]:
        """Locals every assignment of which passes ``test`` (``s = list(x.shape)``)."""
        verdicts: dict[str, bool] = {}
        for node in find_all(self.func.body, cst.Assign, cst.AugAssign, cst.AnnAssign,
                             cst.For):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    for name in find_all(target.target, cst.Name):
                        plain = isinstance(target.target, cst.Name)
                        verdicts[name.value] = (verdicts.get(name.value, True) and plain
                                                and test(node.value))
            elif isinstance(node.target, cst.BaseExpression):
                for name in find_all(node.target, cst.Name):
                    verdicts[name.value] = False
        return {name for name, ok in verdicts.items() if ok}

    # -- what a starred value is ------------------------------------------------------------------

    def starred_kind(self, value: cst.BaseExpression) -> str:
        """"tuple" (scripts already), "ints" (a sequence of ints), or raises the reason."""
        if isinstance(value, cst.Tuple):
            return "tuple"
        if isinstance(value, cst.List):
            if any(isinstance(e, cst.StarredElement) for e in value.elements):
                raise _Refused(f"`*{short_source(value)}` nests another starred value")
            return "ints"
        kind = self.typer.type_of(value)
        if (kind is not None and parts_of(kind)[0] == "Tuple") or (
                isinstance(value, cst.Name) and value.value in self.tuple_locals):
            return "tuple"
        if isinstance(value, cst.Name) and value.value in self.star_parameters:
            raise _Refused(f"`{value.value}` is a *args tuple of unknown length, which "
                           "TorchScript rejects in compiled code")
        if (_is_shape_like(value) and self_attr(value, self.self_var or "") is None) or (
                isinstance(value, cst.Name) and value.value in self.shape_locals):
            return "ints"
        if isinstance(value, cst.Name) and value.value in self.unannotated:
            raise _Refused(f"`{value.value}` is an unannotated parameter, which TorchScript "
                           "types as Tensor; annotate it (e.g. `List[int]`)")
        if kind is None:
            raise _Refused(f"cannot tell that `{short_source(value)}` is a list or tuple of ints")
        head, args = parts_of(kind)
        if head == "Tuple":
            return "tuple"
        if head == "List" and args == ["int"]:
            return "ints"
        raise _Refused(f"`{short_source(value)}` is {kind}, not a sequence of ints")

    def takes_sequence(self, call: cst.Call) -> bool:
        func = call.func
        qualified = qualified_name(func, self.rule.imports) or ""
        if qualified.startswith("torch.") and qualified.count(".") == 1:
            return qualified.removeprefix("torch.") in _SEQUENCE_FUNCTIONS
        if isinstance(func, cst.Attribute) and func.attr.value in _SEQUENCE_METHODS:
            receiver = self.typer.type_of(func.value)
            return receiver in (None, TENSOR) and self_attr(func, self.self_var or "") is None
        return False

    # -- the rewrite ------------------------------------------------------------------------------

    def rewrite(self, call: cst.Call) -> tuple[cst.Call, bool] | None:
        """The rewritten call and whether a shape slice was spelled out; None when the call
        scripts as it is. Raises _Refused."""
        if any(a.star == "**" for a in call.args):
            raise _Refused("`**` arguments are not rewritten")
        starred = [a for a in call.args if a.star == "*"]
        kinds = [self.starred_kind(a.value) for a in starred]
        if all(k == "tuple" for k in kinds):
            return None
        first_keyword = next((i for i, a in enumerate(call.args) if a.keyword is not None),
                             len(call.args))
        if any(a.star == "*" for a in call.args[first_keyword:]):
            raise _Refused("a starred argument after a keyword argument")
        positional = list(call.args[:first_keyword])
        rest = list(call.args[first_keyword:])
        spelled: list[str] = []
        spelled_shape = False
        for arg in positional:
            if arg.star != "*":
                spelled.append(code_of(arg.value))
                continue
            if isinstance(arg.value, cst.List):
                spelled.extend(code_of(e.value) for e in arg.value.elements)
                continue
            elements = _spelled_shape(arg.value)
            if elements is None:
                break
            spelled.extend(elements)
            spelled_shape = True
        else:
            return self._with_arguments(call, spelled, rest), spelled_shape
        if not self.takes_sequence(call):
            names = ", ".join(_SEQUENCE_METHODS) + ", torch." + ", torch.".join(
                _SEQUENCE_FUNCTIONS)
            raise _Refused(f"`{short_source(call.func)}` does not take the sequence itself (only "
                           f"{names} do); TorchScript needs a static length")
        if len(positional) == 1:
            return self._with_arguments(call, [code_of(positional[0].value)], rest), False
        terms: list[str] = []
        plain: list[str] = []
        for arg in positional:
            if arg.star != "*":
                plain.append(code_of(arg.value))
                continue
            if plain:
                terms.append(f"[{', '.join(plain)}]")
                plain = []
            value = arg.value
            already_list = isinstance(value, cst.List) or (
                isinstance(value, cst.Call) and get_full_name_for_node(value.func) == "list")
            if already_list:
                terms.append(code_of(value))
            else:
                terms.append(f"list({code_of(value)})")
        if plain:
            terms.append(f"[{', '.join(plain)}]")
        return self._with_arguments(call, [" + ".join(terms)], rest), False

    def _with_arguments(self, call: cst.Call, positional: list[str],
                        keywords: list[cst.Arg]) -> cst.Call:
        template = cst.parse_expression(f"f({', '.join(positional)})")
        assert isinstance(template, cst.Call)
        args = list(template.args)
        if keywords:
            args[-1] = args[-1].with_changes(comma=cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" ")))
            args.extend(keywords)
        return call.with_changes(args=args)


class _Replace(cst.CSTTransformer):
    """Rewrites the chosen calls bottom-up, so nested ones (``x.view(*s).permute(*d)``) keep
    each other's rewrite."""

    def __init__(self, chosen: dict[int, _MethodRewriter]) -> None:
        self.chosen = chosen

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        rewriter = self.chosen.get(id(original))
        if rewriter is None or not isinstance(updated, cst.Call):
            return updated
        try:
            outcome = rewriter.rewrite(updated)
        except _Refused:
            return updated
        return updated if outcome is None else outcome[0]


class StarredArgs(Rule):
    __doc__ = __doc__
    name = "starred-args"
    order = 50
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF214", "starred-call", "starred argument in a call",
             "`x.view(*shape)` fails (\"cannot statically infer the expected size of a list\"); "
             "pass the list itself (x.view(shape))."),
    )
    summary = ("Starred list arguments (x.view(*shape), x.view(*x.shape[:2], -1), "
               "torch.zeros(*size)) pass the sequence itself or its spelled-out elements")

    VALID = (
        # A tuple: TorchScript knows its length, nothing to do.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.shape = (4, -1)
    def forward(self, x):
        return x.view(*self.shape)
""",
        # An unannotated parameter is a Tensor to TorchScript: reported, not rewritten.
        """
import torch.nn as nn
class M(nn.Module):
    def forward(self, x, shape):
        return x.view(*shape)
""",
        # A submodule called with *inputs: no sequence form.
        """
from typing import List
import torch
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = nn.Bilinear(4, 4, 4)
    def forward(self, inputs: List[torch.Tensor]):
        return self.mix(*inputs)
""",
    )
    INVALID = (
        Example(
            """
import torch.nn as nn
class Heads(nn.Module):
    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.order = [0, 2, 1, 3]
        self.proj = nn.Linear(dim, dim)
    def forward(self, x):
        y = self.proj(x).view(*x.shape[:2], self.heads, -1)
        return y.permute(*self.order)
""",
            """
import torch.nn as nn
class Heads(nn.Module):
    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.order = [0, 2, 1, 3]
        self.proj = nn.Linear(dim, dim)
    def forward(self, x):
        y = self.proj(x).view(x.shape[0], x.shape[1], self.heads, -1)
        return y.permute(self.order)
""",
        ),
        Example(
            """
from typing import List
import torch
import torch.nn as nn
class Merge(nn.Module):
    def forward(self, x, size: List[int]):
        y = x.reshape(*x.size()[:-2], -1)
        return y + torch.zeros(*size, dtype=x.dtype)
""",
            """
from typing import List
import torch
import torch.nn as nn
class Merge(nn.Module):
    def forward(self, x, size: List[int]):
        y = x.reshape(list(x.size()[:-2]) + [-1])
        return y + torch.zeros(size, dtype=x.dtype)
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        self.imports = self.facts.imports

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """A starred argument in a call of a compiled method."""
        if _STARRED_ARGUMENT.search(file.text) is None:
            return False
        return any(isinstance(node, ast.Call)
                   and any(isinstance(arg, ast.Starred) for arg in node.args)
                   for node in file.compiled_nodes())

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        if self.source_text is not None and not _STARRED_ARGUMENT.search(self.source_text):
            return tree
        return super().transform_module_impl(tree)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        name = cls.name.value
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        sites = [(method, call) for method, func in facts.compiled_methods()
                 for skipped in [facts.never_compiled(method) | _nested(func)]
                 for call in find_all(func.body, cst.Call)
                 if id(call) not in skipped and any(a.star == "*" for a in call.args)]
        if not sites:
            return cls
        attributes = _attribute_types(facts, self.imports)
        rewriters: dict[str, _MethodRewriter] = {}
        chosen: dict[int, _MethodRewriter] = {}
        parts: list[tuple[int, str]] = []
        notes: list[str] = []
        spelled_lines: list[int] = []
        for method, call in sites:
            if method not in rewriters:
                rewriters[method] = _MethodRewriter(self, facts, method, attributes)
            starred = [a for a in call.args if a.star == "*"]
            try:
                outcome = rewriters[method].rewrite(call)
            except _Refused as refused:
                for arg in starred:
                    self.skip(name, arg, f"{method}(): `{short_source(call)}`: {refused}",
                              code="TSF214", message=_message(arg, method))
                continue
            if outcome is None:
                continue
            for arg in starred:
                self.fixed(arg, "TSF214", _message(arg, method))
            new_call, spelled_shape = outcome
            chosen[id(call)] = rewriters[method]
            line = self.line_of(call)
            parts.append((line, f"line {line}: `{short_source(call)}` -> "
                                f"`{short_source(new_call)}`"))
            if spelled_shape:
                spelled_lines.append(line)
        if not chosen:
            return cls
        if spelled_lines:
            notes.append(f"line {', '.join(map(str, sorted(set(spelled_lines))))}: shape "
                         "slices are spelled out element by element; a tensor with fewer "
                         "dimensions than the slice bound now raises IndexError")
        rewritten = cls.visit(_Replace(chosen))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, name, self.span_of(cls),
                                        "; ".join(part for _, part in sorted(parts)),
                                        notes=notes))
        return rewritten


def _nested(func: cst.FunctionDef) -> set[int]:
    """ids of the nodes inside functions and classes defined in ``func``: TorchScript rejects
    the definition itself (check's TSF106), and a nested ``def f(*args)`` has its own
    ``*args``."""
    return {id(node) for nested in find_all(func.body, cst.FunctionDef, cst.ClassDef)
            for node in find_all(nested, cst.CSTNode)}  # type: ignore[type-abstract]


def _message(arg: cst.Arg, method: str) -> str:
    """What ``tsfix check`` says about a starred argument."""
    return f"*{short_source(arg.value)} in a call in {method}()"
