"""``starred-args``: ``x.view(*shape)`` and friends pass the sequence itself.

What it does
    In compiled methods (``forward()``, ``@torch.jit.export`` methods and the methods they call;
    not ``@torch.jit.ignore`` methods nor ``if not torch.jit.is_scripting():`` branches), and in
    a module-level function another file's compiled code calls (the repair loop names it when
    a model stops there: demucs' ``spectro()``), a call that unpacks a list of ints with ``*``
    into an API that also takes the sequence itself passes the sequence instead::

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
    (``x.shape``, ``x.size()``, a slice of either, ``list(...)`` of one, the starred target of
    a shape unpacking: ``*other, n = x.shape``), a ``List[int]`` parameter, local or
    ``__init__`` attribute, or a list literal.

    ``torch.meshgrid`` takes its tensors as one list: ``torch.meshgrid(*(torch.arange(s) for
    s in sizes), indexing="ij")`` -> ``torch.meshgrid([torch.arange(s) for s in sizes],
    indexing="ij")``.

    A starred sequence of ints unpacked with other values into names is spelled out: one
    statement per group of names when the names give the length, else the elements indexed
    (a whole ``x.shape``/``x.size()`` of a plain receiver; a starred target that is never
    read is dropped, one that is read takes ``list(...)`` of its slice of the shape). A
    tensor split in pieces (``chunk``, ``split``, ``unbind``, ``tensor_split``) is unpacked
    as it is, into its own group of names::

        b, n, _, h = *x.shape, self.heads       ->  b, n, _ = x.shape
                                                    h = self.heads
        *_, h, w, d = *x.shape, x.dtype         ->  h, w, d = x.shape[-2], x.shape[-1], x.dtype
        *_, h, w = x.shape                      ->  h, w = x.shape[-2], x.shape[-1]
        q, k, v = (self.to_q(x), *kv.chunk(2))  ->  q = self.to_q(x)
                                                    k, v = kv.chunk(2)

    A display holding a ``.chunk(n)`` with a literal ``n``, bound to a name that is then only
    unpacked into as many names (directly or through a list comprehension over it), binds
    the pieces first and indexes them; the elements before the star that are not plain reads
    are bound first, so everything runs in the original order::

        qkv = (self.to_q(x), *self.to_kv(x).chunk(2, dim=-1))
            ->  qkv_0 = self.to_q(x)
                qkv_chunks = self.to_kv(x).chunk(2, dim=-1)
                qkv = (qkv_0, qkv_chunks[0], qkv_chunks[1])

    A starred list in the display ``torch.cat``/``stack`` (and ``concat``, ``hstack``...)
    join becomes a sum of lists: ``torch.cat((x, *shifted), dim=1)`` -> ``torch.cat([x] +
    shifted, dim=1)`` (``list(xs)`` for a value that may be a tuple in eager mode).

Why it breaks export
    TorchScript unpacks ``*`` only when the length is static: a tuple scripts, a list fails with
    "cannot statically infer the expected size of a list in this context" -- and ``x.shape`` and
    ``x.size()`` are ``List[int]`` in TorchScript, so ``x.view(*x.shape[:2], -1)`` fails as well
    as ``x.view(*shape)`` with a list. Every API above takes an ``int[]`` argument, which a list
    and a tuple both satisfy (measured on torch 2.13). A chunk is a ``List[Tensor]`` to
    TorchScript, so ``(q, *kv.chunk(2))`` fails even where it is unpacked at once; the pieces
    indexed, ``[x] + xs`` in ``torch.cat`` and a starred target's elements indexed all
    script, and so does a comprehension over the spelled display (measured).

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
    such rewrite says so in its notes. An unpacking spelled out in groups keeps the length
    check (TorchScript checks a list's length when it unpacks it); groups are written only
    when no value reads a name an earlier group binds. A whole shape indexed element by
    element (a starred target) raises IndexError instead of ValueError for a tensor of
    too low a rank (noted). The only other difference: an empty sequence, which made
    the original call fail (``x.view()``), is accepted. A chunk's pieces indexed in a display:
    ``x.chunk(n)`` gives fewer than ``n`` pieces when its dimension is too small to split so,
    and then indexing raises IndexError where unpacking the display raised ValueError
    (noted; the display is rewritten only when it is only ever unpacked, so the original
    raised too). ``[x] + xs`` and ``torch.meshgrid(list)`` join and grid the same tensors,
    and a list of the pieces unpacked in its own statement checks its length as before.
    Left alone, with the reason reported:
    starred values whose type cannot be shown to be a list or tuple of ints (unannotated
    parameters, which TorchScript types as Tensor; attributes set from constructor arguments;
    tensors, ``range``, ``*args``), unpackings into attributes, a starred target that would
    take values other than a shape's, a slice of another length than its names, a display
    of pieces used other than unpacked or of unknown length (``*x.unbind(0)``), a joined
    display mixing starred tuples and lists, a value with a comment inside (the spelled-out
    form is written from the values' code, which would lose it), other callees
    (``self.layer(*inputs)``, ``x.transpose(*dims)``: no sequence form), and ``**kwargs``.
    Tuples are not touched: they already script.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Collection, Mapping, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts, never_compiled_nodes
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
    short_source,
)
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    collect_locals,
    function_typer,
    is_complete,
    parts_of,
    type_from_annotation,
    unify_all,
)
from tsfix.codemods.rules.base import (
    ClassChange,
    ClassSites,
    Code,
    Example,
    FunctionSites,
    Rule,
    Sites,
)
from tsfix.codemods.validation.protocol import function_change_name

_SEQUENCE_METHODS = ("view", "reshape", "permute", "repeat", "expand", "flip", "tile",
                     "new_zeros", "new_ones", "new_empty")
_SEQUENCE_FUNCTIONS = ("zeros", "ones", "empty", "rand", "randn")
# Functions of a list of tensors that eager mode also takes unpacked (``torch.meshgrid(a, b)``).
_TENSOR_LIST_FUNCTIONS = frozenset({"torch.meshgrid"})
# A tensor split into pieces: a List[Tensor] in TorchScript, a tuple in eager mode.
_SPLIT_METHODS = ("chunk", "split", "unbind", "tensor_split")
_SPLIT_FUNCTIONS = frozenset(f"torch.{name}" for name in _SPLIT_METHODS)
# A `*` argument's, starred value's or starred target's opening: after `(`, `[`, `,` or `=`
# (a new line between included) or at the start of a line, not `**`.
_STARRED_ARGUMENT = re.compile(r"(?:[(\[,=]|^)\s*\*(?!\*)", re.MULTILINE)
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


def _is_plain_receiver(expr: cst.BaseExpression) -> bool:
    """``x`` or ``self.x.y``: read again per element at no cost (not a call nor a subscript,
    which ``get_full_name_for_node`` names too)."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name)


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
    if not _is_plain_receiver(receiver):
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
    """The rewrites of one compiled function: a method of a module class, or a module-level
    function compiled from another file (:meth:`for_function`)."""

    def __init__(self, rule: StarredArgs, func: cst.FunctionDef, typer: Typer) -> None:
        self.rule = rule
        self.func = func
        self.self_var = typer.self_var
        params = func.params
        self.unannotated = {param.name.value for param in (*params.posonly_params,
                                                           *params.params, *params.kwonly_params)
                            if param.annotation is None and param.default is None}
        self.typer = typer
        collect_locals(func.body, self.typer)
        self.shape_locals = self._locals_assigned(_is_shape_like) | self._starred_shape_targets()
        self.tuple_locals = self._locals_assigned(_is_literal_tuple)
        self.list_locals = self._locals_assigned(_is_new_list)
        self.star_parameters = {p.star_arg.name.value for p in find_all(func, cst.Parameters)
                                if isinstance(p.star_arg, cst.Param)}

    @classmethod
    def for_method(cls, rule: StarredArgs, facts: ClassFacts, method: str,
                   attributes: dict[str, str]) -> _MethodRewriter:
        func = facts.methods[method]
        return cls(rule, func, Typer(facts.parameter_types(method), rule.imports,
                                     self_name(func), attributes, facts.layers))

    @classmethod
    def for_function(cls, rule: StarredArgs, func: cst.FunctionDef) -> _MethodRewriter:
        """A module-level function: its parameters typed by their annotations (an
        unannotated one is a Tensor to TorchScript, or unknown with a default)."""
        return cls(rule, func, function_typer(func, rule.imports))

    def _starred_shape_targets(self) -> set[str]:
        """Locals bound only as the starred target of a shape (``*other, n = x.shape``):
        a list of ints (a torch.Size's slice in eager mode, rewritten to ``list(...)``)."""
        starred: set[str] = set()
        bound: dict[str, int] = {}
        for node in find_all(self.func.body, cst.Assign, cst.AugAssign, cst.AnnAssign,
                             cst.For, cst.WithItem, cst.CompFor):
            targets = ([t.target for t in node.targets] if isinstance(node, cst.Assign)
                       else [node.asname.name] if isinstance(node, cst.WithItem)
                       and node.asname is not None
                       else [] if isinstance(node, cst.WithItem) else [node.target])
            for target in targets:
                for name in find_all(target, cst.Name):
                    bound[name.value] = bound.get(name.value, 0) + 1
            if (isinstance(node, cst.Assign) and len(node.targets) == 1
                    and _shape_of(node.value) is not None
                    and isinstance(node.targets[0].target, cst.Tuple | cst.List)):
                starred.update(e.value.value for e in node.targets[0].target.elements
                               if isinstance(e, cst.StarredElement)
                               and isinstance(e.value, cst.Name))
        return {name for name in starred if bound.get(name) == 1}

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
        if qualified_name(call.func, self.rule.imports) in _TENSOR_LIST_FUNCTIONS:
            return self._tensor_list_call(call)
        kinds = [self.starred_kind(a.value) for a in starred]
        if all(k == "tuple" for k in kinds):
            return None
        _keeps_comments(call)
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

    def _tensor_list_call(self, call: cst.Call) -> tuple[cst.Call, bool] | None:
        """``torch.meshgrid(*tensors, indexing="ij")`` -> ``torch.meshgrid(tensors, ...)``."""
        positional = [a for a in call.args if a.keyword is None]
        if len(positional) != 1:
            raise _Refused(f"`{short_source(call.func)}` is passed its tensors as one starred "
                           "value only when it has no other positional argument")
        text = self.as_list(positional[0].value)
        if text is None:
            return None
        _keeps_comments(call)
        return self._with_arguments(call, [text], list(call.args[1:])), False

    def as_list(self, value: cst.BaseExpression) -> str | None:
        """``value``, a starred sequence, as a list expression: itself when it is a list in
        eager mode too (a list display or comprehension, a local only ever bound to one),
        ``[...]`` for a generator (consumed at once by ``*`` too), else ``list(value)`` for a
        ``List`` value; None for a tuple (it scripts). Raises _Refused."""
        if isinstance(value, cst.ListComp | cst.List) or (
                isinstance(value, cst.Name) and value.value in self.list_locals):
            return code_of(value)
        if isinstance(value, cst.GeneratorExp):
            return f"[{code_of(value.elt)} {code_of(value.for_in).strip()}]"
        kind = self.typer.type_of(value)
        if (kind is not None and parts_of(kind)[0] == "Tuple") or (
                isinstance(value, cst.Name) and value.value in self.tuple_locals):
            return None
        if self._is_list(value):
            return f"list({code_of(value)})"
        raise _Refused(f"cannot tell that `{short_source(value)}` is a list")

    def joined(self, display: cst.Tuple | cst.List) -> str | None:
        """``(x, *xs)`` joined by ``torch.cat``/``stack`` as ``[x] + xs``; None when every
        starred value is a tuple (it scripts). Raises _Refused."""
        lists = {id(e): self.as_list(e.value) for e in display.elements
                 if isinstance(e, cst.StarredElement)}
        if all(text is None for text in lists.values()):
            return None
        terms: list[str] = []
        plain: list[str] = []
        for element in display.elements:
            text = lists.get(id(element))
            if text is None and isinstance(element, cst.StarredElement):
                raise _Refused("a tuple and a list are both starred in it")
            if text is None:
                plain.append(code_of(element.value))
                continue
            if plain:
                terms.append(f"[{', '.join(plain)}]")
                plain = []
            terms.append(text)
        if plain:
            terms.append(f"[{', '.join(plain)}]")
        return " + ".join(terms)

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


    # -- a starred chunk in a display: qkv = (self.to_q(x), *kv.chunk(2, dim=-1)) -----------------

    def display(self, assign: cst.Assign, line: cst.CSTNode | None) -> _Display | None:
        """How ``qkv = (q, *kv.chunk(2))`` is spelled with the pieces indexed; None when the
        starred value is a tuple (it scripts). Raises _Refused."""
        target = assign.targets[0].target
        assert isinstance(target, cst.Name) and isinstance(assign.value, cst.Tuple | cst.List)
        elements = assign.value.elements
        stars = [i for i, e in enumerate(elements) if isinstance(e, cst.StarredElement)]
        if len(stars) != 1:
            raise _Refused("several starred values: their lengths are not known")
        star_at = stars[0]
        starred = elements[star_at].value
        try:
            if self.starred_kind(starred) == "tuple":
                return None
        except _Refused:
            pass
        pieces = _chunk_count(starred, self.rule.imports)
        if pieces is None or not self._is_list(starred):
            raise _Refused(f"the length of `*{short_source(starred)}` is not known: a display "
                           "bound to a name is spelled out only for a `.chunk(n)` with a "
                           "literal n")
        if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
            raise _Refused("the display shares its line with other statements")
        length = len(elements) - 1 + pieces
        self._only_unpacked(target.value, length)
        taken = set(names_used(self.func)) | names_bound_in(self.func)
        hoisted: dict[int, str] = {}
        for index in range(star_at):
            if not _is_plain_value(elements[index].value):
                # Evaluated before the chunk, as in the display.
                hoisted[index] = fresh_name(f"{target.value}_{index}", taken=taken)
                taken.add(hoisted[index])
        chunks = fresh_name(f"{target.value}_chunks", taken=taken)
        return _Display(target.value, star_at, pieces, hoisted, chunks,
                        isinstance(assign.value, cst.List))

    def _only_unpacked(self, name: str, length: int) -> None:
        """Refused unless ``name`` is bound once and only ever unpacked into ``length`` names,
        directly (``q, k, v = qkv``) or through a list comprehension over it (``q, k, v = [f(t)
        for t in qkv]``): then a chunk that gives fewer pieces made the original raise too."""
        parents = parent_map(self.func)

        def unpacked(node: cst.CSTNode) -> bool:
            assign = parents.get(id(node))
            return (isinstance(assign, cst.Assign) and assign.value is node
                    and len(assign.targets) == 1
                    and isinstance(assign.targets[0].target, cst.Tuple | cst.List)
                    and len(assign.targets[0].target.elements) == length
                    and not any(isinstance(e, cst.StarredElement)
                                for e in assign.targets[0].target.elements))

        bindings = 0
        for use in find_all(self.func.body, cst.Name):
            holder = parents.get(id(use))
            if use.value != name or (isinstance(holder, cst.Attribute) and holder.attr is use) or (
                    isinstance(holder, cst.Arg) and holder.keyword is use):
                continue
            if isinstance(holder, cst.AssignTarget) and holder.target is use:
                bindings += 1
                continue
            comprehension = parents.get(id(holder))
            if unpacked(use) or (isinstance(holder, cst.CompFor) and holder.iter is use
                                 and holder.inner_for_in is None
                                 and isinstance(comprehension, cst.ListComp)
                                 and unpacked(comprehension)):
                continue
            raise _Refused(f"`{name}` is used other than unpacked into {length} names (a chunk "
                           "can give fewer pieces than asked, which only unpacking would "
                           "have reported)")
        if bindings != 1:
            raise _Refused(f"`{name}` is bound more than once in {self.func.name.value}()")

    # -- starred unpacking: b, n, _, h = *x.shape, self.heads -------------------------------------

    def unpacking(self, assign: cst.Assign, line: cst.CSTNode | None) -> _Unpacking | None:
        """How ``b, n, _, h = *x.shape, self.heads`` is spelled without the star; None when
        the starred value is a tuple (it scripts). Raises _Refused."""
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target,
                                                      cst.Tuple | cst.List):
            raise _Refused("only an unpacking into several names is rewritten")
        targets = assign.targets[0].target.elements
        values = _displayed(assign.value)
        stars = [i for i, e in enumerate(values) if isinstance(e, cst.StarredElement)]
        if len(stars) != 1:
            raise _Refused("several starred values: their lengths are not known")
        if not all(isinstance(t.value, cst.Name) or (isinstance(t, cst.StarredElement)
                                                     and isinstance(t.value, cst.Name))
                   for t in targets):
            raise _Refused("a target is not a plain name")
        star_at = stars[0]
        starred = values[star_at].value  # type: ignore[union-attr]
        try:
            if self.starred_kind(starred) == "tuple":
                return None
            any_list = False
        except _Refused:
            if not self._is_list(starred):
                raise
            any_list = True     # unpacked as it is into a group of names, never indexed
        names = [t.value.value for t in targets]  # type: ignore[attr-defined]
        before = star_at
        after = len(values) - star_at - 1
        star_targets = [i for i, t in enumerate(targets) if isinstance(t, cst.StarredElement)]
        spelled = _shape_elements(starred)
        if star_targets:
            return self._around_starred_target(names, star_targets, before, after, spelled)
        count = len(names) - before - after
        if count < 0:
            raise _Refused(f"{len(names)} names for at least {before + after} values")
        groups = [(names[:before], list(range(before))),
                  (names[before:before + count], None),
                  (names[before + count:], list(range(star_at + 1, len(values))))]
        if spelled is not None and not spelled.whole:
            spelled.elements(count)     # a slice of another length: refused, it cannot unpack
        bound: set[str] = set()
        in_order = True
        for group_names, sources in groups:
            read = (names_used(starred) if sources is None else
                    set().union(*(names_used(values[i]) for i in sources)))
            in_order = in_order and not read & bound
            bound.update(group_names)
        if (count >= 2 and in_order and isinstance(line, cst.SimpleStatementLine)
                and len(line.body) == 1):
            return _Unpacking([(g, s) for g, s in groups if g], star_at, None, False)
        if any_list:
            raise _Refused(f"`{short_source(starred)}` is a list of unknown length, unpacked "
                           "as it is only into a group of two or more names in a statement "
                           "of its own, whose values read no name an earlier group binds")
        if spelled is None:
            raise _Refused(f"`{short_source(starred)}` cannot be spelled element by element "
                           "here (one statement per group of names would change what the "
                           "values read)")
        elements = spelled.elements(count)
        picks: list[tuple[str, int | str]] = []
        for position, name in enumerate(names):
            if position < before:
                picks.append((name, position))
            elif position < before + count:
                picks.append((name, elements[position - before]))
            else:
                picks.append((name, star_at + 1 + position - before - count))
        return _Unpacking([], star_at, picks, spelled.whole)

    def _is_list(self, value: cst.BaseExpression) -> bool:
        """A list in TorchScript (elements of any type), which a group of names unpacks as
        it is: a ``List[...]`` value, or a tensor split into pieces (``x.chunk(2)``,
        ``torch.split(x, 4)``: a tuple in eager mode)."""
        kind = self.typer.type_of(value)
        if kind is not None and parts_of(kind)[0] == "List":
            return True
        if not isinstance(value, cst.Call):
            return False
        qualified = qualified_name(value.func, self.rule.imports) or ""
        if qualified in _SPLIT_FUNCTIONS:
            return True
        return (isinstance(value.func, cst.Attribute) and value.func.attr.value in _SPLIT_METHODS
                and self.typer.type_of(value.func.value) in (None, TENSOR)
                and self_attr(value.func, self.self_var or "") is None)

    def _around_starred_target(self, names: list[str], star_targets: list[int], before: int,
                               after: int, spelled: _Spelled | None) -> _Unpacking:
        """``*_, h, w = *x.shape, x.dtype``: the names around the starred target, each given its
        element (counted from the end after the starred target); the starred target dropped,
        or, when it is read, given the list of the middle elements (``list(x.shape[:-2])``: a
        list, as the starred target was)."""
        star_name = names[star_targets[0]]
        uses = [n for n in find_all(self.func.body, cst.Name) if n.value == star_name]
        bindings = {id(n) for t in find_all(self.func.body, cst.AssignTarget, cst.For)
                    for n in find_all(t.target, cst.Name)}
        read = any(id(n) not in bindings for n in uses)
        if spelled is None or not spelled.whole:
            raise _Refused("a starred target takes the middle of a whole `x.shape` or "
                           "`x.size()` of a name only")
        head = star_targets[0]
        tail = len(names) - head - 1
        if head < before or tail < after:
            raise _Refused("a value other than the shape's elements would go to the starred "
                           "target")
        from_start = spelled.elements(head - before)
        from_end = spelled.elements(-(tail - after))
        picks: list[tuple[str, int | str]] = []
        for position, name in enumerate(names[:head]):
            picks.append((name, position if position < before else from_start[position - before]))
        for back, name in enumerate(reversed(names[head + 1:]), start=1):
            picks.insert(head, (name, -back if back <= after else from_end[after - back]))
        if read:
            picks.insert(head, (star_name, spelled.middle(head - before, tail - after)))
        return _Unpacking([], before, picks, True)


class _Spelled:
    """The elements of a starred shape: for ``x.shape``/``x.size()`` of a plain receiver
    (``whole``), ``elements(n)`` is the first ``n`` (``x.shape[0]``...) or, for ``-n``, the
    last ``n`` (``x.shape[-n]``...); for a shape slice with literal bounds, its elements when
    it has exactly ``n``."""

    def __init__(self, expr: cst.BaseExpression) -> None:
        self.expr = expr
        receiver = _shape_of(expr)
        self.whole = receiver is not None
        self.base = code_of(receiver) if receiver is not None else ""
        self.listed = _spelled_shape(expr)

    def middle(self, skipped_first: int, skipped_last: int) -> str:
        """The whole shape's elements but the first and last ones skipped, as a list."""
        bounds = (f"{skipped_first or ''}:{-skipped_last if skipped_last else ''}")
        shape = (f"{self.base}.shape" if isinstance(self.expr, cst.Attribute)
                 else f"{self.base}.size()")
        return f"list({shape}[{bounds}])"

    def elements(self, count: int) -> list[str]:
        if self.whole:
            indexes = range(count) if count >= 0 else range(count, 0)
            return [f"{self.base}.shape[{i}]" if isinstance(self.expr, cst.Attribute)
                    else f"{self.base}.size({i})" for i in indexes]
        assert self.listed is not None
        if count != len(self.listed):
            raise _Refused(f"{count} names for the {len(self.listed)} elements of "
                           f"`{short_source(self.expr)}`")
        return self.listed


def _shape_elements(expr: cst.BaseExpression) -> _Spelled | None:
    """How a starred shape is spelled element by element; None when it cannot be (a call
    or subscript receiver would be evaluated once per element)."""
    receiver = _shape_of(expr)
    if receiver is not None:
        return _Spelled(expr) if _is_plain_receiver(receiver) else None
    return _Spelled(expr) if _spelled_shape(expr) is not None else None


class _Unpacking:
    """A starred unpacking spelled out: either one statement per group of names (``groups``:
    the names and the indexes of the values they take; None for the starred value itself,
    unpacked as it is), or one assignment of picked elements (``picks``: each name with the
    index of its value, negative from the end, or the text of a shape element)."""

    def __init__(self, groups: list[tuple[list[str], list[int] | None]], star_at: int,
                 picks: list[tuple[str, int | str]] | None, indexed_whole: bool) -> None:
        self.groups, self.star_at, self.picks = groups, star_at, picks
        # A whole shape indexed element by element no longer checks the rank.
        self.indexed_whole = indexed_whole and picks is not None
        self.line_index = 0         # which statement of its line the assignment is

    def statements(self, updated: cst.Assign) -> list[str]:
        values = [e.value if isinstance(e, cst.StarredElement) else e
                  for e in _displayed(updated.value)]
        if self.picks is not None:
            texts = [p if isinstance(p, str) else code_of(values[p]) for _, p in self.picks]
            return [f"{', '.join(n for n, _ in self.picks)} = {', '.join(texts)}"]
        lines = []
        for names, sources in self.groups:
            text = (code_of(values[self.star_at]) if sources is None
                    else ", ".join(code_of(values[i]) for i in sources))
            lines.append(f"{', '.join(names)} = {text}")
        return lines


class _Display:
    """A display with a starred chunk spelled out: the elements before the star that are
    not plain reads bound first (``hoisted``: index -> name), then the chunk (``chunks``),
    then the display with the pieces indexed."""

    picks = None
    indexed_whole = False

    def __init__(self, target: str, star_at: int, pieces: int, hoisted: dict[int, str],
                 chunks: str, is_list: bool) -> None:
        self.target, self.star_at, self.pieces = target, star_at, pieces
        self.hoisted, self.chunks, self.is_list = hoisted, chunks, is_list
        self.line_index = 0

    def statements(self, updated: cst.Assign) -> list[str]:
        assert isinstance(updated.value, cst.Tuple | cst.List)
        values = [code_of(e.value) for e in updated.value.elements]
        lines = [f"{name} = {values[index]}" for index, name in sorted(self.hoisted.items())]
        lines.append(f"{self.chunks} = {values[self.star_at]}")
        items = ([self.hoisted.get(i, values[i]) for i in range(self.star_at)]
                 + [f"{self.chunks}[{i}]" for i in range(self.pieces)]
                 + values[self.star_at + 1:])
        shown = ", ".join(items)
        lines.append(f"{self.target} = [{shown}]" if self.is_list else
                     f"{self.target} = ({shown}{',' if len(items) == 1 else ''})")
        return lines


def _is_new_list(expr: cst.BaseExpression) -> bool:
    """A list in eager mode too: a list display or comprehension, or ``list(...)``."""
    return isinstance(expr, cst.ListComp | cst.List) or (
        isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "list")


def _chunk_count(value: cst.BaseExpression, imports: Mapping[str, str]) -> int | None:
    """``n`` of ``t.chunk(n, ...)`` / ``torch.chunk(t, n, ...)`` with a literal ``n``."""
    if not isinstance(value, cst.Call):
        return None
    method = isinstance(value.func, cst.Attribute) and value.func.attr.value == "chunk"
    if not method and qualified_name(value.func, dict(imports)) != "torch.chunk":
        return None
    position = 0 if method else 1
    positional = [a.value for a in value.args if a.keyword is None and not a.star]
    keyword = [a.value for a in value.args if a.keyword is not None
               and a.keyword.value == "chunks"]
    count = (keyword[0] if keyword else
             positional[position] if len(positional) > position else None)
    number = _literal_int(count)
    return number if number is not None and number >= 1 else None


def _is_plain_value(expr: cst.BaseExpression) -> bool:
    """A name, an attribute of one or a literal: reading it later reads the same value."""
    return _is_plain_receiver(expr) or isinstance(expr, cst.Integer | cst.Float
                                                  | cst.SimpleString)


class _Replace(cst.CSTTransformer):
    """Rewrites the chosen calls bottom-up, so nested ones (``x.view(*s).permute(*d)``) keep
    each other's rewrite; and the chosen starred unpackings (``unpackings``: the statement
    line -> how its assignment is spelled)."""

    def __init__(self, chosen: dict[int, _MethodRewriter],
                 unpackings: dict[int, _Unpacking | _Display] | None = None,
                 joins: dict[int, _MethodRewriter] | None = None) -> None:
        self.chosen = chosen
        self.unpackings = unpackings or {}
        self.joins = joins or {}

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        unpacking = self.unpackings.get(id(original))
        if unpacking is not None and isinstance(updated, cst.SimpleStatementLine):
            return _spelled_line(updated, unpacking)  # type: ignore[return-value]
        joiner = self.joins.get(id(original))
        if joiner is not None and isinstance(updated, cst.Tuple | cst.List):
            text = joiner.joined(updated)
            return updated if text is None else cst.parse_expression(text)
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
        # The linter's code for starred displays: this rule's finding replaces the linter's on
        # the lines of the unpackings it handles.
        Code("TSF115", "starred-unpacking", "starred unpacking in an assignment or a display",
             "TorchScript cannot infer the size of `a, *rest = ...`, `[*xs, y]` or `tuple(xs)` "
             "(\"cannot statically infer the expected size of a list\"). `tsfix apply --rule "
             "starred-args` spells out `b, n, _, h = *x.shape, self.heads` as `b, n, _ = "
             "x.shape` then `h = self.heads`; otherwise index explicitly."),
    )
    summary = ("Starred list arguments (x.view(*shape), x.view(*x.shape[:2], -1), "
               "torch.zeros(*size)) pass the sequence itself or its spelled-out elements; "
               "starred shapes, chunks and lists in unpackings and displays are spelled out")

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
        # vit-pytorch's cross attention (after lambda-inline and einops-to-torch).
        Example(
            """
import torch
import torch.nn as nn
class CrossAttention(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.to_q = nn.Linear(dim, dim)
        self.to_kv = nn.Linear(dim, dim * 2)
    def forward(self, x, context):
        *_, n, d = x.shape
        qkv = (self.to_q(x), *self.to_kv(context).chunk(2, dim=-1))
        q, k, v = [t.unflatten(-1, (2, -1)).transpose(1, 2) for t in qkv]
        out = (q @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return torch.cat((x, *[out.transpose(1, 2).reshape(-1, n, d)]), dim=1)
""",
            """
import torch
import torch.nn as nn
class CrossAttention(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.to_q = nn.Linear(dim, dim)
        self.to_kv = nn.Linear(dim, dim * 2)
    def forward(self, x, context):
        n, d = x.shape[-2], x.shape[-1]
        qkv_0 = self.to_q(x)
        qkv_chunks = self.to_kv(context).chunk(2, dim=-1)
        qkv = (qkv_0, qkv_chunks[0], qkv_chunks[1])
        q, k, v = [t.unflatten(-1, (2, -1)).transpose(1, 2) for t in qkv]
        out = (q @ k.transpose(-1, -2)).softmax(dim=-1) @ v
        return torch.cat([x] + [out.transpose(1, 2).reshape(-1, n, d)], dim=1)
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        self.imports = self.facts.imports

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """A starred argument in a call of a compiled method, a starred value in a display
        assigned or passed first to a call, or a starred target."""
        if _STARRED_ARGUMENT.search(file.text) is None:
            return False

        def starred(node: ast.expr) -> bool:
            return isinstance(node, ast.Tuple | ast.List) and any(
                isinstance(e, ast.Starred) for e in node.elts)

        return any((isinstance(node, ast.Call)
                    and (any(isinstance(arg, ast.Starred) for arg in node.args)
                         or (bool(node.args) and starred(node.args[0]))))
                   or (isinstance(node, ast.Assign)
                       and (starred(node.value) or any(starred(t) for t in node.targets)))
                   for node in file.compiled_nodes())

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        if self.source_text is not None and not _STARRED_ARGUMENT.search(self.source_text):
            return tree
        tree = super().transform_module_impl(tree)
        if not self.compiled_functions:
            return tree
        return self._rewrite_functions(tree)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        name = cls.name.value
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        bodies = [(method, func, facts.never_compiled(method) | _nested(func))
                  for method, func in facts.compiled_methods()]
        attributes: dict[str, str] | None = None

        def rewriter(method: str) -> _MethodRewriter:
            nonlocal attributes
            if attributes is None:
                attributes = _attribute_types(facts, self.imports)
            return _MethodRewriter.for_method(self, facts, method, attributes)

        done = self._rewrite_bodies(bodies, rewriter, ClassSites(self, name))
        if done is None:
            return cls
        replacer, summary, notes = done
        rewritten = cls.visit(replacer)
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, name, self.span_of(cls), summary,
                                        notes=notes))
        return rewritten

    def _rewrite_functions(self, tree: cst.Module) -> cst.Module:
        """The module-level functions another file's compiled code calls (the repair loop
        names them: ``Rule.compiled_functions``), each reported under
        ``function_change_name``."""
        body = list(tree.body)
        for index, func in self.named_functions(tree):
            owner = function_change_name(func.name.value)
            skipped = never_compiled_nodes(func, self.imports) | _nested(func)
            done = self._rewrite_bodies(
                [(func.name.value, func, skipped)],
                functools.partial(_function_rewriter, self, func),
                FunctionSites(self, func, owner))
            if done is None:
                continue
            replacer, summary, notes = done
            rewritten = func.visit(replacer)
            assert isinstance(rewritten, cst.FunctionDef)
            self.changes.append(ClassChange(self.name, owner, self.function_span(func),
                                            summary, notes=notes))
            body[index] = rewritten
        return tree.with_changes(body=body)

    def _rewrite_bodies(self, bodies: Sequence[tuple[str, cst.FunctionDef, Collection[int]]],
                        rewriter_of: Callable[[str], _MethodRewriter], sites_of: Sites
                        ) -> tuple[_Replace, str, list[str]] | None:
        """The starred calls, unpackings and joined displays of the compiled ``bodies``
        (name, function, ids of the nodes never compiled) rewritten: the replacer, the
        change's summary and notes; None when nothing is rewritten. Every site is reported
        through ``sites_of`` as fixed or left with the reason."""
        sites = [(method, call) for method, func, skipped in bodies
                 for call in find_all(func.body, cst.Call)
                 if id(call) not in skipped and any(a.star == "*" for a in call.args)]
        unpacks = [(method, line, index, small) for method, func, skipped in bodies
                   for line in find_all(func.body, cst.SimpleStatementLine)
                   for index, small in enumerate(line.body)
                   if id(small) not in skipped and _is_starred_unpacking(small)]
        joins = [(method, call.args[0].value) for method, func, skipped in bodies
                 for call in find_all(func.body, cst.Call)
                 if id(call) not in skipped and _is_join_of_display(call, self.imports)]
        if not sites and not unpacks and not joins:
            return None
        rewriters: dict[str, _MethodRewriter] = {}

        def rewriter(method: str) -> _MethodRewriter:
            if method not in rewriters:
                rewriters[method] = rewriter_of(method)
            return rewriters[method]

        chosen: dict[int, _MethodRewriter] = {}
        parts: list[tuple[int, str]] = []
        notes: list[str] = []
        spelled_lines: list[int] = []
        for method, call in sites:
            starred = [a for a in call.args if a.star == "*"]
            try:
                outcome = rewriter(method).rewrite(call)
            except _Refused as refused:
                for arg in starred:
                    sites_of.skipped(arg, f"{method}(): `{short_source(call)}`: {refused}",
                                     "TSF214", _message(arg, method))
                continue
            if outcome is None:
                continue
            for arg in starred:
                sites_of.fixed(arg, "TSF214", _message(arg, method))
            new_call, spelled_shape = outcome
            chosen[id(call)] = rewriter(method)
            line = sites_of.line(call)
            parts.append((line, f"line {line}: `{short_source(call)}` -> "
                                f"`{short_source(new_call)}`"))
            if spelled_shape:
                spelled_lines.append(line)
        unpackings: dict[int, _Unpacking | _Display] = {}
        for method, line_node, index, small in unpacks:
            assert isinstance(small, cst.Assign)
            star = _starred_of(small)
            message = f"*{short_source(star.value)} unpacked in {method}()"
            try:
                _keeps_comments(small.value)
                unpacking: _Unpacking | _Display | None = (
                    rewriter(method).display(small, line_node)
                    if isinstance(small.targets[0].target, cst.Name)
                    else rewriter(method).unpacking(small, line_node))
            except _Refused as refused:
                sites_of.skipped(star, f"{message}: `{short_source(small)}`: {refused}",
                                 "TSF115", message)
                continue
            if unpacking is None:
                continue
            unpacking.line_index = index
            sites_of.fixed(star, "TSF115", message)
            unpackings[id(line_node)] = unpacking
            spelled = "; ".join(unpacking.statements(small))
            at = sites_of.line(small)
            parts.append((at, f"line {at}: `{short_source(small)}` -> `{spelled}`"))
            if unpacking.indexed_whole:
                notes.append(f"line {at}: the shape is indexed element by element; a tensor "
                             "of another rank than the names give now raises IndexError or "
                             "is accepted, where unpacking raised ValueError")
            if isinstance(unpacking, _Display):
                notes.append(f"line {at}: `{unpacking.target}` indexes the "
                             f"{unpacking.pieces} pieces of the chunk: where the chunk gives "
                             "fewer (its dimension too small to split so), indexing raises "
                             f"IndexError where unpacking `{unpacking.target}` raised "
                             "ValueError")
        joined: dict[int, _MethodRewriter] = {}
        for method, display in joins:
            star = next(e for e in display.elements if isinstance(e, cst.StarredElement))
            message = f"*{short_source(star.value)} in a display in {method}()"
            try:
                _keeps_comments(display)
                text = rewriter(method).joined(display)
            except _Refused as refused:
                sites_of.skipped(star, f"{message}: `{short_source(display)}`: {refused}",
                                 "TSF115", message)
                continue
            if text is None:
                continue
            sites_of.fixed(star, "TSF115", message)
            joined[id(display)] = rewriter(method)
            at = sites_of.line(display)
            parts.append((at, f"line {at}: `{short_source(display)}` -> `{text}`"))
        if not chosen and not unpackings and not joined:
            return None
        if spelled_lines:
            notes.append(f"line {', '.join(map(str, sorted(set(spelled_lines))))}: shape "
                         "slices are spelled out element by element; a tensor with fewer "
                         "dimensions than the slice bound now raises IndexError")
        return (_Replace(chosen, unpackings, joined),
                "; ".join(part for _, part in sorted(parts)), notes)


def _function_rewriter(rule: StarredArgs, func: cst.FunctionDef, _: str) -> _MethodRewriter:
    return _MethodRewriter.for_function(rule, func)


def _keeps_comments(value: cst.BaseExpression) -> None:
    """Refused when a comment inside ``value`` would be lost by spelling it out (the
    rewrite is written from the values' code)."""
    if m.findall(value, m.Comment()):
        raise _Refused("a comment inside it would be lost when it is spelled out")


def _is_join_of_display(call: cst.Call, imports: Mapping[str, str]) -> bool:
    """``torch.cat((x, *xs), dim=1)``: a join function given a display with a starred value."""
    if not call.args or call.args[0].keyword is not None or call.args[0].star:
        return False
    display = call.args[0].value
    return (isinstance(display, cst.Tuple | cst.List)
            and any(isinstance(e, cst.StarredElement) for e in display.elements)
            and qualified_name(call.func, dict(imports)) in JOIN_FUNCTIONS)


def _spelled_line(line: cst.SimpleStatementLine, unpacking: _Unpacking | _Display
                  ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.BaseStatement]:
    """The line of a starred unpacking with the unpacking spelled out: one line per group of
    names (the first keeps the comments above, the last the one after), or the assignment of
    picked elements in place."""
    assign = line.body[unpacking.line_index]
    assert isinstance(assign, cst.Assign)
    texts = unpacking.statements(assign)
    if unpacking.picks is not None:
        spelled = cst.parse_statement(texts[0])
        assert isinstance(spelled, cst.SimpleStatementLine)
        body = list(line.body)
        body[unpacking.line_index] = spelled.body[0].with_changes(
            semicolon=assign.semicolon)
        return line.with_changes(body=body)
    lines = []
    for position, text in enumerate(texts):
        new = cst.parse_statement(text)
        assert isinstance(new, cst.SimpleStatementLine)
        if position == 0:
            new = new.with_changes(leading_lines=line.leading_lines)
        if position == len(texts) - 1:
            new = new.with_changes(trailing_whitespace=line.trailing_whitespace)
        lines.append(new)
    return lines[0] if len(lines) == 1 else cst.FlattenSentinel(lines)


def _nested(func: cst.FunctionDef) -> set[int]:
    """ids of the nodes inside functions and classes defined in ``func``: TorchScript rejects
    the definition itself (check's TSF106), and a nested ``def f(*args)`` has its own
    ``*args``."""
    return {id(node) for nested in find_all(func.body, cst.FunctionDef, cst.ClassDef)
            for node in find_all(nested, cst.CSTNode)}  # type: ignore[type-abstract]


def _is_starred_unpacking(small: cst.BaseSmallStatement) -> bool:
    """``b, n, _, h = *x.shape, self.heads``: a display with a starred value, assigned; or
    ``*_, h, w = x.shape``: a starred target taking part of a shape."""
    if not isinstance(small, cst.Assign):
        return False
    if isinstance(small.value, cst.Tuple | cst.List):
        return any(isinstance(e, cst.StarredElement) for e in small.value.elements)
    return (_shape_of(small.value) is not None and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Tuple | cst.List)
            and any(isinstance(e, cst.StarredElement)
                    for e in small.targets[0].target.elements))


def _starred_of(small: cst.Assign) -> cst.StarredElement:
    """The starred value of a starred unpacking, else (``*_, h, w = x.shape``) its starred
    target."""
    display = small.value if isinstance(small.value, cst.Tuple | cst.List) else None
    elements = (display.elements if display is not None
                else small.targets[0].target.elements)  # type: ignore[attr-defined]
    return next(e for e in elements if isinstance(e, cst.StarredElement))


def _displayed(value: cst.BaseExpression) -> list[cst.BaseExpression | cst.StarredElement]:
    """The values a starred unpacking assigns: a display's elements (starred ones as
    ``StarredElement``), or the whole shape as the one starred value."""
    if isinstance(value, cst.Tuple | cst.List):
        return [e if isinstance(e, cst.StarredElement) else e.value for e in value.elements]
    return [cst.StarredElement(value)]


def _message(arg: cst.Arg, method: str) -> str:
    """What ``tsfix check`` says about a starred argument."""
    return f"*{short_source(arg.value)} in a call in {method}()"
