"""``einops-to-torch``: einops ``rearrange``/``repeat``/``reduce`` calls with a literal pattern
become tensor methods, ``einsum`` becomes ``torch.einsum``, ``pack``/``unpack`` become
``torch.cat`` and ``split``.

What it does
    In compiled code (``forward()``, ``@torch.jit.export`` methods and the methods they call,
    and the module-level functions the repair loop names when a model stops in one; not
    ``@torch.jit.ignore`` methods nor ``if not torch.jit.is_scripting():`` branches), each
    call of ``einops.rearrange``, ``einops.repeat`` or ``einops.reduce`` (however imported)
    whose pattern is a string literal becomes a chain of tensor methods on its input, following
    einops' own recipe for torch step by step: ``unflatten`` splits a composite input axis
    (``(h d)``, the one length not given is ``-1``), ``squeeze`` drops a length-1 input axis,
    ``sum``/``mean``/``amax``/``amin`` (``prod``/``any``/``all`` one axis at a time, as einops
    does) reduce, ``permute`` (``transpose`` for a swap, ``movedim`` around an ellipsis)
    reorders, ``unsqueeze`` + ``expand`` add the new axes of ``repeat`` (their lengths from the
    keyword arguments), and ``flatten`` merges composite output axes::

        q = rearrange(q, 'b n (h d) -> b h n d', h=self.heads)
        ->  q = q.unflatten(2, (self.heads, -1)).transpose(1, 2)

    ``einops.einsum(q, k, "b i d, b j d -> b i j")`` becomes ``torch.einsum("abc,adc->abd",
    q, k)``: each axis name a letter, in order of first appearance (what einops does before
    it calls torch's einsum), the pattern first.

    ``x, ps = pack([r, x], 'b * d')`` becomes what einops computes for torch: each tensor
    reshaped to its axes before ``*``, -1 and its axes after, joined by ``torch.cat`` on the
    ``*`` axis, with each one's ``*`` axes as a list of ints (``[list(r.shape[1:r.dim() -
    1]), ...]``; a tensor with no axis there gives ``[]``). ``r, x = unpack(x, ps, 'b * d')``
    becomes a comprehension that splits ``x`` on that axis by the product of each shape and
    reshapes each part back. The tensors packed and unpacked are read twice (the tensor and
    its shape), so each must be a name or an attribute; the shapes must go to a name that the
    method reads only as an ``unpack`` argument (einops gives torch.Size tuples, these are
    lists), and an ``unpack`` is rewritten only with such a name (shapes from elsewhere may
    hold -1, which einops infers).

    The call is replaced where it stands: no statement is added and no name is bound, the input
    is evaluated once (each method reads only the tensor it is applied to, never its shape), and
    the result is still an expression, so a call inside a lambda or a comprehension is rewritten
    the same way. One case reads the input's shape: ``repeat`` with an ellipsis and a new axis,
    where ``expand`` needs every length (``x.unsqueeze(0).expand([b] + list(x.shape[:-1]) +
    [-1])``); it is rewritten only when the input is a name or an attribute. The
    ``einops.layers.torch`` layers script as they are and are left alone, as is the einops
    import.

Why it breaks export
    TorchScript cannot compile einops' functions (they parse the pattern in Python and cache
    recipes): scripting a model that calls them in ``forward`` fails. ``torch.export`` traces
    through einops, so this rule serves the TorchScript target only.

Example
    Before::

        def forward(self, x):
            b = x.shape[0]
            cls_tokens = repeat(self.cls_token, '1 1 d -> b 1 d', b=b)
            x = torch.cat((cls_tokens, x), dim=1)
            q, k, v = self.to_qkv(x).chunk(3, dim=-1)
            q = rearrange(q, 'b n (h d) -> b h n d', h=self.heads)
            out = rearrange(q.softmax(-1), 'b h n d -> b n (h d)')
            return reduce(out, 'b n d -> b d', 'mean')

    After::

        def forward(self, x):
            b = x.shape[0]
            cls_tokens = self.cls_token.expand(b, -1, -1)
            x = torch.cat((cls_tokens, x), dim=1)
            q, k, v = self.to_qkv(x).chunk(3, dim=-1)
            q = q.unflatten(2, (self.heads, -1)).transpose(1, 2)
            out = q.softmax(-1).transpose(1, 2).flatten(2)
            return out.mean(1)

Fix safety
    Exact on every input einops accepts: the same operations in the same order (the rule's
    tests compare it with einops itself, eager and scripted, on a table of patterns and
    shapes, bit for bit). A ``repeat`` gives an ``expand`` view where einops' reshape would
    also give a view, a copy otherwise (``flatten`` is ``reshape``). Inputs einops rejects
    fail differently or not at all: a length given for an axis that is not split (``'b h ->
    h b', h=4``) is not checked (the keyword is dropped, and only when it calls nothing), and
    ``squeeze`` of a length-1 axis does not check that length. Refused, with the reason (``tsfix
    check`` shows it, TSF236): a pattern or reduction that is not a string literal (or a local
    the method binds once, to a string literal: that literal is used), a composite
    with two lengths not given, an ellipsis on one side only (a reduction over it) or inside
    parentheses in the input, patterns einops rejects, a list or tuple input (einops stacks it;
    also a name the method binds to a display, comprehension or ``list(...)``, or a parameter
    annotated as a list or tuple), a callable reduction, ``*args``/``**kwargs`` in the call, and
    ``repeat`` with an ellipsis and a new axis on an input that is not a name or attribute; for
    ``pack``/``unpack``: a pattern that is not axis names and one ``*``, tensors that are not
    names or attributes in a list or tuple display, shapes that leave the method or come from
    elsewhere. Not checked: a tensor with fewer axes than the pattern (einops raises).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection

import libcst as cst
from tsfix.codemods.facts.classes import never_compiled_nodes
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    fresh_name,
    names_used,
    parameters_of,
    qualified_name,
    target_names,
)
from tsfix.codemods.facts.value_types import Typer, function_typer
from tsfix.codemods.rules._einops_pattern import KINDS, Plan, Unsupported, plan
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

_CODE = "TSF236"
# Expressions that need no parentheses as the receiver of ``.method()`` or as an element of a
# call's arguments.
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float,
          cst.SimpleString)
_ARGUMENT_SAFE = (*_ATOMS, cst.BinaryOperation, cst.UnaryOperation)


def _einops_kind(qualified: str | None) -> str | None:
    """``rearrange`` for ``einops.rearrange`` (or ``einops.einops.rearrange``)."""
    if qualified is None:
        return None
    module, _, kind = qualified.rpartition(".")
    return (kind if kind in (*KINDS, "einsum", "pack", "unpack")
            and module in ("einops", "einops.einops", "einops.packing") else None)


def _einsum(call: cst.Call, torch_name: str | None) -> cst.BaseExpression:
    """``torch.einsum`` of an ``einops.einsum(x, y, "b i d, b j d -> b i j")`` call: each axis
    name becomes a letter (what einops does before it calls the backend's einsum)."""
    if torch_name is None:
        raise Unsupported("the file does not import torch")
    if any(a.star or a.keyword is not None for a in call.args) or len(call.args) < 2:
        raise Unsupported("einsum takes its tensors and then the pattern, by position")
    pattern = _string(call.args[-1].value)
    if pattern is None:
        raise Unsupported("the pattern is not a string literal")
    sides = pattern.split("->")
    inputs = sides[0].split(",")
    if len(sides) != 2 or len(inputs) != len(call.args) - 1:
        raise Unsupported("the pattern does not name one input per tensor and an output")
    letters: dict[str, str] = {}
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def spelled(side: str) -> str:
        out = []
        for axis in side.split():
            if axis == "...":
                out.append("...")
                continue
            if not axis.isidentifier():
                raise Unsupported(f"axis {axis!r}: einsum takes names and ... only")
            if axis not in letters:
                if len(letters) == len(alphabet):
                    raise Unsupported("more axes than letters")
                letters[axis] = alphabet[len(letters)]
            out.append(letters[axis])
        return "".join(out)

    spelled_inputs = [spelled(side) for side in inputs]
    equation = ",".join(spelled_inputs) + "->" + spelled(sides[1])
    tensors = ", ".join(code_of(a.value) for a in call.args[:-1])
    return cst.parse_expression(f'{torch_name}.einsum("{equation}", {tensors})')


def _pack_axes(pattern: str) -> tuple[int, int]:
    """(axes before ``*``, axes after it) of a ``pack``/``unpack`` pattern: ``'b * d'`` ->
    (1, 1). As einops checks it: names that are identifiers, each once, and one ``*``."""
    axes = pattern.split()
    names = [axis for axis in axes if axis != "*"]
    if axes.count("*") != 1 or not all(a.isidentifier() for a in names) or (
            len(set(names)) != len(names)):
        raise Unsupported(f"pattern {pattern!r}: pack/unpack take axis names and one *")
    before = axes.index("*")
    return before, len(axes) - before - 1


def _arguments(call: cst.Call, names: tuple[str, ...]) -> dict[str, cst.BaseExpression]:
    """The call's arguments by einops' parameter names (by position or keyword)."""
    if any(a.star for a in call.args):
        raise Unsupported("arguments passed with * or **")
    found: dict[str, cst.BaseExpression] = {}
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) > len(names):
        raise Unsupported("more positional arguments than einops takes")
    found.update({name: a.value for name, a in zip(names, positional, strict=False)})
    for a in call.args:
        if a.keyword is not None:
            if a.keyword.value not in names or a.keyword.value in found:
                raise Unsupported(f"keyword {a.keyword.value} is not einops'")
            found[a.keyword.value] = a.value
    if set(names) - set(found):
        raise Unsupported(f"no {', '.join(sorted(set(names) - set(found)))} argument")
    return found


def _pack(call: cst.Call, torch_name: str | None) -> cst.BaseExpression:
    """``einops.pack([a, b], 'b * d')`` as einops computes it for torch: each tensor reshaped
    to its axes before ``*``, -1, its axes after, joined by ``torch.cat`` on the ``*`` axis;
    with the list of each tensor's ``*`` axes (as lists of ints)."""
    if torch_name is None:
        raise Unsupported("the file does not import torch")
    values = _arguments(call, ("tensors", "pattern"))
    pattern = _string(values["pattern"])
    if pattern is None:
        raise Unsupported("the pattern is not a string literal")
    before, after = _pack_axes(pattern)
    tensors = values["tensors"]
    if not isinstance(tensors, cst.List | cst.Tuple) or not tensors.elements or any(
            isinstance(e, cst.StarredElement) for e in tensors.elements):
        raise Unsupported("the tensors are not a list or tuple display")
    parts, shapes = [], []
    for element in tensors.elements:
        if not _is_plain_reference(element.value):
            raise Unsupported(f"`{_shown(element.value)}` is not a name or attribute: its "
                              "shape is read besides the tensor")
        t = code_of(element.value)
        head = f"list({t}.shape[:{before}]) + " if before else ""
        tail = f" + list({t}.shape[{t}.dim() - {after}:])" if after else ""
        parts.append(f"{t}.reshape({head}[-1]{tail})")
        shapes.append(f"list({t}.shape[{before}:{f'{t}.dim() - {after}' if after else ''}])")
    return cst.parse_expression(f"({torch_name}.cat([{', '.join(parts)}], dim={before}), "
                                f"[{', '.join(shapes)}])")


def _unpack(call: cst.Call, torch_name: str | None, taken: Collection[str]
            ) -> cst.BaseExpression:
    """``einops.unpack(x, ps, 'b * d')`` as einops computes it: ``x`` split on the ``*`` axis
    by the product of each shape of ``ps``, each part reshaped to the axes before ``*``, its
    shape, the axes after."""
    if torch_name is None:
        raise Unsupported("the file does not import torch")
    values = _arguments(call, ("tensor", "packed_shapes", "pattern"))
    pattern = _string(values["pattern"])
    if pattern is None:
        raise Unsupported("the pattern is not a string literal")
    before, after = _pack_axes(pattern)
    tensor, shapes = values["tensor"], values["packed_shapes"]
    if not _is_plain_reference(tensor):
        raise Unsupported(f"`{_shown(tensor)}` is not a name or attribute: its shape is read "
                          "besides the tensor")
    t, ps = code_of(tensor), code_of(shapes)
    part = fresh_name("part", taken=taken)
    shape = fresh_name("shape", taken={*taken, part})
    head = f"list({t}.shape[:{before}]) + " if before else ""
    tail = f" + list({t}.shape[{before + 1}:])" if after else ""
    lengths = (f"[int({torch_name}.tensor({shape}, dtype={torch_name}.int64).prod()) "
               f"for {shape} in {ps}]")
    return cst.parse_expression(
        f"[{part}.reshape({head}{shape}{tail}) for {part}, {shape} in "
        f"zip({t}.split({lengths}, dim={before}), {ps})]")


def _packed_shapes(func: cst.FunctionDef, packs: list[cst.Call], unpacks: list[cst.Call],
                   torch_name: str | None) -> tuple[set[int], set[str]]:
    """Which of ``packs`` can be rewritten (ids), and the names of the shapes they return that
    unpacks can read. The shapes a pack returns become lists of ints (einops': torch.Size): a
    pack is rewritten when its shapes go to a name (or ``_``) that the method reads only as an
    unpack's shapes and binds only from packs that are all rewritten; an unpack, when its
    shapes are such a name."""
    value_of: dict[int, str] = {}       # pack call -> the name its shapes go to
    for assign in find_all(func.body, cst.Assign):
        if len(assign.targets) == 1 and isinstance(assign.value, cst.Call) and any(
                assign.value is p for p in packs):
            target = assign.targets[0].target
            if (isinstance(target, cst.Tuple | cst.List) and len(target.elements) == 2
                    and isinstance(target.elements[1].value, cst.Name)):
                value_of[id(assign.value)] = target.elements[1].value.value
    names = set(value_of.values()) - {"_"}
    allowed = {id(target.elements[1].value) for assign in find_all(func.body, cst.Assign)
               if id(assign.value) in value_of
               for target in [assign.targets[0].target]
               if isinstance(target, cst.Tuple | cst.List)}
    allowed |= {id(_arguments(c, ("tensor", "packed_shapes", "pattern"))["packed_shapes"])
                for c in unpacks if _safe_arguments(c)}
    elsewhere = {n.value for n in find_all(func.body, cst.Name)
                 if n.value in names and id(n) not in allowed}
    elsewhere |= names & set(parameters_of(func))
    # A name one pack left as einops' (refused) holds torch.Size tuples there.
    by_id = {id(p): p for p in packs}
    elsewhere |= {name for call, name in value_of.items()
                  if not _can_pack(by_id[call], torch_name)}
    good = {call for call, name in value_of.items() if name not in elsewhere}
    return good, {value_of[call] for call in good} - {"_"}


def _can_pack(call: cst.Call, torch_name: str | None) -> bool:
    try:
        _pack(call, torch_name)
    except Unsupported:
        return False
    return True


def _safe_arguments(call: cst.Call) -> bool:
    try:
        _arguments(call, ("tensor", "packed_shapes", "pattern"))
    except Unsupported:
        return False
    return True


def _shown(node: cst.CSTNode) -> str:
    """One line of source for a message, at most about 80 characters."""
    text = " ".join(code_of(node).split()).replace("( ", "(").replace(" )", ")")
    return text if len(text) <= 80 else text[:77] + "..."


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _local_string(func: cst.FunctionDef, node: cst.BaseExpression) -> str | None:
    """The string literal a local of ``func`` is bound to, when the function binds it once,
    to that literal (nystrom-attention: ``eq = '... (n l) d -> ... n d'``, then ``reduce(q,
    eq, 'sum', l=l)``): every read of it reads the literal."""
    if not isinstance(node, cst.Name) or node.value in parameters_of(func):
        return None
    found: list[cst.BaseExpression | None] = []
    for binding in find_all(func.body, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                            cst.CompFor, cst.NamedExpr, cst.AsName, cst.Global, cst.Nonlocal):
        if isinstance(binding, cst.Global | cst.Nonlocal):
            if any(n.name.value == node.value for n in binding.names):
                return None
            continue
        target = binding.name if isinstance(binding, cst.AsName) else binding.target
        if any(n.value == node.value for n in target_names(target)):
            found.append(None)
    assigns = [a for a in find_all(func.body, cst.Assign) if len(a.targets) == 1
               and isinstance(a.targets[0].target, cst.Name)
               and a.targets[0].target.value == node.value]
    if len(found) != 1 or len(assigns) != 1:
        return None
    return _string(assigns[0].value)


def _receiver(node: cst.BaseExpression) -> str:
    text = code_of(node)
    return text if isinstance(node, _ATOMS) or node.lpar else f"({text})"


class _Site:
    """One einops call the rule rewrites: the call, what kind, and the planned chain (none for
    ``einsum``, a call of torch.einsum)."""

    def __init__(self, call: cst.Call, kind: str, chain: Plan | None,
                 torch_name: str | None = None, taken: Collection[str] = ()) -> None:
        self.call, self.kind, self.plan, self.torch_name = call, kind, chain, torch_name
        self.taken = taken

    def replacement(self, call: cst.Call) -> cst.BaseExpression:
        """What ``call`` (this site, its arguments maybe already rewritten) becomes."""
        if self.kind == "pack":
            return _pack(call, self.torch_name)
        if self.kind == "unpack":
            return _unpack(call, self.torch_name, self.taken)
        if self.plan is None:
            return _einsum(call, self.torch_name)
        return _build(call, self.plan)


class EinopsToTorch(Rule):
    __doc__ = __doc__
    name = "einops-to-torch"
    # --rule all order: early, on the code as written, before the rules that type or move
    # code: sum-tensors (60) and annotate (100) see `x.unflatten(...)`, a tensor method, where
    # an einops call told them nothing about its argument or result. The rewrite is an
    # expression, so a call inside a lambda is rewritten whichever runs first.
    order = 35
    targets = ("torchscript",)
    off_target = "torch.export traces einops calls as they are"
    CODES = (
        Code(_CODE, "einops-call", "einops rearrange/repeat/reduce call",
             "TorchScript cannot compile einops' functions. Write the pattern as tensor "
             "methods (unflatten, permute, flatten, expand, mean, ...), or use the "
             "einops.layers.torch layers, which script."),
    )
    summary = ("einops rearrange/repeat/reduce calls with a literal pattern become "
               "unflatten/permute/flatten/expand/mean... chains, einsum torch.einsum, "
               "pack/unpack torch.cat/split, exact in eager mode")

    VALID = (
        # A layer of einops.layers.torch scripts; a call in an ignored method is not compiled.
        """
import torch
from torch import nn
from einops import rearrange
from einops.layers.torch import Rearrange
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.to_tokens = Rearrange('b c h w -> b (h w) c')
    def forward(self, x):
        return self.to_tokens(x)
    @torch.jit.ignore
    def show(self, x):
        return rearrange(x, 'b n d -> b d n')
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
from einops import rearrange, repeat, reduce
class M(nn.Module):
    def __init__(self, heads=2):
        super().__init__()
        self.heads = heads
        self.cls_token = nn.Parameter(torch.randn(1, 1, 8))
    def forward(self, x):
        b = x.shape[0]
        x = torch.cat((repeat(self.cls_token, '1 1 d -> b 1 d', b=b), x), dim=1)
        q = rearrange(x, 'b n (h d) -> b h n d', h=self.heads)
        out = rearrange(q.softmax(-1), 'b h n d -> b n (h d)')
        return reduce(out, 'b n d -> b d', 'mean')
""",
            """
import torch
from torch import nn
from einops import rearrange, repeat, reduce
class M(nn.Module):
    def __init__(self, heads=2):
        super().__init__()
        self.heads = heads
        self.cls_token = nn.Parameter(torch.randn(1, 1, 8))
    def forward(self, x):
        b = x.shape[0]
        x = torch.cat((self.cls_token.expand(b, -1, -1), x), dim=1)
        q = x.unflatten(2, (self.heads, -1)).transpose(1, 2)
        out = q.softmax(-1).transpose(1, 2).flatten(2)
        return out.mean(1)
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        return any(full == "einops" or _einops_kind(full) is not None
                   for full in file.imports.values())

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        tree = super().transform_module_impl(tree)
        return self._rewrite_functions(tree) if self.compiled_functions else tree

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        sites: dict[int, _Site] = {}
        parts: list[str] = []
        reported = ClassSites(self, cls.name.value)
        for method, func in facts.compiled_methods():
            self._find_sites(func, facts.never_compiled(method),
                             functools.partial(facts.typer, method), reported, sites, parts)
        if not sites:
            return cls
        rewritten = cls.visit(_Apply(sites))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts)))
        return rewritten

    def _rewrite_functions(self, tree: cst.Module) -> cst.Module:
        """The module-level functions the repair loop names (a model stopped in one:
        ``Rule.compiled_functions``; halonet's ``relative_logits_1d``), their parameters typed
        by their annotations, each reported under ``function_change_name``."""
        body = list(tree.body)
        for index, func in self.named_functions(tree):
            owner = function_change_name(func.name.value)
            sites: dict[int, _Site] = {}
            parts: list[str] = []
            typer = functools.cache(functools.partial(function_typer, func, self.facts.imports))
            self._find_sites(func, never_compiled_nodes(func, self.facts.imports), typer,
                             FunctionSites(self, func, owner), sites, parts)
            if not sites:
                continue
            rewritten = func.visit(_Apply(sites))
            assert isinstance(rewritten, cst.FunctionDef)
            self.changes.append(ClassChange(self.name, owner, self.function_span(func),
                                            "; ".join(parts)))
            body[index] = rewritten
        return tree.with_changes(body=body)

    def _find_sites(self, func: cst.FunctionDef, skipped: Collection[int],
                    typer: Callable[[], Typer], reported: Sites, sites: dict[int, _Site],
                    parts: list[str]) -> None:
        """The einops calls of one compiled body: each rewritable one added to ``sites`` (its
        line to ``parts``) and reported fixed, the others reported with the reason."""
        calls = [(call, kind) for call in find_all(func.body, cst.Call)
                 if (kind := _einops_kind(qualified_name(call.func, self.facts.imports)))
                 and id(call) not in skipped]
        packs, shapes = _packed_shapes(func, [c for c, k in calls if k == "pack"],
                                       [c for c, k in calls if k == "unpack"],
                                       self.facts.torch_alias)
        taken = names_used(func)
        for call, kind in calls:
            message = f"{_shown(call)} is an einops call"
            try:
                if kind == "pack" and id(call) not in packs:
                    _pack(call, self.facts.torch_alias)     # its own reason first
                    raise Unsupported("the shapes it returns are not assigned to a name "
                                      "that only unpack() reads")
                if kind == "unpack" and not (
                        _safe_arguments(call) and code_of(_arguments(
                            call, ("tensor", "packed_shapes", "pattern"))["packed_shapes"])
                        in shapes):
                    raise Unsupported("its shapes are not those a pack() of this method "
                                      "returned (einops' shapes may hold -1)")
                if kind in ("einsum", "pack", "unpack"):
                    site = _Site(call, kind, None, self.facts.torch_alias, taken)
                else:
                    site = _Site(call, kind, self._plan(func, typer(), call, kind))
                after = site.replacement(call)
            except Unsupported as refusal:
                reported.skipped(call, f"not rewritten: {refusal}", _CODE, message)
                continue
            reported.fixed(call, _CODE, message)
            sites[id(call)] = site
            parts.append(f"line {reported.line(call)}: `{_shown(call)}` -> `{_shown(after)}`")

    def _plan(self, func: cst.FunctionDef, typer: Typer, call: cst.Call, kind: str
              ) -> Plan:
        """The chain for one call, or :class:`Unsupported` saying why not."""
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if any(a.star for a in call.args):
            raise Unsupported("arguments passed with * or **")
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        wanted = ["tensor", "pattern", "reduction"] if kind == "reduce" else ["tensor", "pattern"]
        if len(positional) > len(wanted):
            raise Unsupported("more positional arguments than einops takes")
        values = {name: arg.value for name, arg in zip(wanted, positional, strict=False)}
        for name in wanted:
            if name in keywords:
                values[name] = keywords.pop(name)
        if set(wanted) - set(values):
            raise Unsupported(f"no {', '.join(sorted(set(wanted) - set(values)))} argument")
        pattern = _string(values["pattern"]) or _local_string(func, values["pattern"])
        if pattern is None:
            raise Unsupported("the pattern is not a string literal (nor a local bound once "
                              "to one)")
        reduction = (_string(values["reduction"]) or _local_string(func, values["reduction"])
                     if kind == "reduce" else None)
        if kind == "reduce" and reduction is None:
            raise Unsupported("the reduction is not a string literal (a callable, or computed)")
        tensor = values["tensor"]
        if isinstance(tensor, cst.List | cst.Tuple):
            raise Unsupported("the input is a list or tuple: einops stacks it first")
        known = typer.type_of(tensor)
        if known is not None and known != "Tensor":
            raise Unsupported(f"the input is a {known}, not a tensor: einops stacks a list")
        if isinstance(tensor, cst.Name) and _may_hold_a_sequence(func, tensor.value):
            raise Unsupported(f"{tensor.value} may hold a list or tuple of tensors (einops "
                              "stacks it first)")
        sizes = {name: _argument(value) for name, value in keywords.items()}
        chain = plan(kind, pattern, sizes, reduction)
        dropped = [name for name in keywords if name not in chain.used
                   and find_all(keywords[name], cst.Call)]
        if dropped:
            raise Unsupported(f"the length of {', '.join(dropped)} is only checked by einops, "
                              "and dropping it would skip the call computing it")
        if chain.reads_input_again and not _is_plain_reference(tensor):
            raise Unsupported("expand() after an ellipsis needs the input's shape, and the "
                              "input is not a name or attribute to read twice")
        return chain


# Calls whose result is a list, tuple or iterator of what they are given, never a tensor.
_SEQUENCE_CALLS = frozenset({"list", "tuple", "sorted", "reversed", "map", "zip", "filter"})
_SEQUENCE_WORDS = ("list", "tuple", "sequence", "iterable")


def _may_hold_a_sequence(func: cst.FunctionDef, name: str) -> bool:
    """Whether ``func`` binds ``name`` to what may be a list or tuple: a parameter annotated
    with one (``list[Tensor] | Tensor`` too), or an assignment of a display, comprehension or
    ``list(...)``-like call. The typer answers only for element types it knows (``[x, x]``
    of an untyped ``x`` is unknown to it), and einops stacks a list where ``permute`` fails."""
    for param in (*func.params.params, *func.params.kwonly_params, *func.params.posonly_params):
        if param.name.value == name and param.annotation is not None and any(
                word in code_of(param.annotation.annotation).lower()
                for word in _SEQUENCE_WORDS):
            return True
    for assign in find_all(func.body, cst.Assign, cst.AnnAssign):
        targets = ([t.target for t in assign.targets] if isinstance(assign, cst.Assign)
                   else [assign.target])
        if not any(isinstance(t, cst.Name) and t.value == name for t in targets):
            continue
        value = assign.value
        if isinstance(value, cst.List | cst.Tuple | cst.ListComp | cst.GeneratorExp):
            return True
        if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
                and value.func.value in _SEQUENCE_CALLS):
            return True
        if isinstance(assign, cst.AnnAssign) and any(
                word in code_of(assign.annotation.annotation).lower()
                for word in _SEQUENCE_WORDS):
            return True
    return False


def _argument(value: cst.BaseExpression) -> str:
    text = code_of(value)
    return text if isinstance(value, _ARGUMENT_SAFE) or value.lpar else f"({text})"


def _is_plain_reference(node: cst.BaseExpression) -> bool:
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _build(call: cst.Call, chain: Plan) -> cst.BaseExpression:
    """The replacement of ``call`` (whose input may already hold rewritten calls)."""
    tensor = next((a.value for a in call.args if a.keyword is None)
                  if any(a.keyword is None for a in call.args)
                  else (a.value for a in call.args
                        if a.keyword is not None and a.keyword.value == "tensor"))
    receiver = _receiver(tensor)
    if not chain.calls:
        return cst.parse_expression(receiver)
    return cst.parse_expression(receiver + chain.chain(receiver))


class _Apply(cst.CSTTransformer):
    def __init__(self, sites: dict[int, _Site]) -> None:
        self.sites = sites

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        site = self.sites.get(id(original_node))
        if site is None:
            return updated_node
        rebuilt = site.replacement(updated_node)
        if original_node.lpar:
            rebuilt = rebuilt.with_changes(lpar=original_node.lpar, rpar=original_node.rpar)
        return rebuilt
