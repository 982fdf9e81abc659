"""A ``**kwargs`` a wrapper passes whole to the module its constructor was given (``PreNorm(dim,
fn)``, ``Residual(fn)``, ``Scale(scale, fn)`` of einops-style transformer code): which keywords,
and the rewrite. Part of ``variable-arguments``.

The wrapped module differs per instance (attention takes ``mask``, the feed-forward does not),
so no one call compiles for every instance. The wrapper takes every keyword a module it wraps
in this file takes, and keeps one bool per keyword the modules differ in, saying whether its
own module's ``forward`` takes it (by name or through a ``**kwargs`` of its own), measured with
``inspect.signature`` in ``__init__`` and named in ``__constants__``; there is one call for each
subset of those keywords, not only for the subsets the tree's modules take, so a module built
outside the tree's view gets the keywords it takes too. TorchScript compiles only the call the
instance's constants choose, and eagerly the call passes exactly the keywords the module takes,
as before (a keyword the caller left out is passed with the default the module itself has for
it: the defaults of every wrapped module must agree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst
from tsfix.codemods.facts.module import ModuleFacts
from tsfix.codemods.facts.syntax import (
    code_of,
    contains,
    find_all,
    methods_of,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)

# One call per set of keywords a wrapped module may take (two keywords the modules differ in):
# past four the branches stop being readable.
MAX_CALLS = 4
CONSTANTS = "__constants__"
COMMENT = "# TorchScript compiles only the call of self.{attr} its forward's parameters choose."


class NotKnown(Exception):
    """What the wrapper passes on cannot be known (the message says why)."""


@dataclass(frozen=True)
class Keyword:
    """A keyword the wrapper passes on: as the wrapped modules' ``forward`` declares it."""

    name: str
    default: cst.BaseExpression
    annotation: cst.Annotation | None


@dataclass
class Wrapper:
    """A class whose ``forward(self, x, **kwargs)`` passes ``kwargs`` whole, and only, to
    ``self.<attr>``, which ``__init__`` sets from its parameter ``param``."""

    cls: cst.ClassDef
    forward: cst.FunctionDef
    init: cst.FunctionDef
    calls: list[cst.Call]           # self.fn(x, **kwargs), once or on several paths
    attr: str
    param: str
    stored: cst.SimpleStatementLine     # self.fn = fn
    keywords: list[Keyword] = field(default_factory=list)
    # The keywords each module it wraps takes, one set per class (the combinations its
    # constructions in the tree give).
    combinations: list[frozenset[str]] = field(default_factory=list)
    reason: str | None = None           # why it is not rewritten
    # ``kwargs["context"]`` reads and ``kwargs.update(context=c)`` lines (perceiver's PreNorm
    # normalises the context it passes on): they become the keyword's own name.
    reads: list[tuple[cst.Subscript, str]] = field(default_factory=list)
    updates: list[tuple[cst.SimpleStatementLine, cst.Call]] = field(default_factory=list)


def find_wrapper(cls: cst.ClassDef) -> Wrapper | None:
    """``cls`` as a wrapper of a module its constructor is given, or None when it is not one."""
    methods = methods_of(cls)
    forward, init = methods.get("forward"), methods.get("__init__")
    if forward is None or init is None or forward.params.star_kwarg is None:
        return None
    self_var, init_self = self_name(forward), self_name(init)
    if self_var is None or init_self is None:
        return None
    kw = forward.params.star_kwarg.name.value
    uses = [n for n in find_all(forward.body, cst.Name) if n.value == kw]
    calls = [c for c in find_all(forward.body, cst.Call)
             if any(a.star == "**" and isinstance(a.value, cst.Name) and a.value.value == kw
                    for a in c.args)]
    reads = [(sub, key) for sub in find_all(forward.body, cst.Subscript)
             if isinstance(sub.value, cst.Name) and sub.value.value == kw
             and (key := _literal_key(sub)) is not None]
    updates = [(line, small.value) for line in find_all(forward.body, cst.SimpleStatementLine)
               for small in line.body if len(line.body) == 1 and isinstance(small, cst.Expr)
               and isinstance(small.value, cst.Call) and _is_update(small.value, kw)]
    if not calls or len(uses) != len(calls) + len(reads) + len(updates):
        return None
    written = {id(t.target) for t in find_all(forward.body, cst.AssignTarget)}
    if any(id(sub) in written for sub, _ in reads):
        return None
    attr = self_attr(calls[0].func, self_var)
    if attr is None or any(self_attr(c.func, self_var) != attr for c in calls):
        return None
    stores: list[tuple[cst.SimpleStatementLine, cst.BaseExpression]] = [
        (line, small.value) for line in find_all(init.body, cst.SimpleStatementLine)
        for small in line.body if isinstance(small, cst.Assign)
        for target in small.targets if self_attr(target.target, init_self) == attr]
    params = {p.name.value for p in [*init.params.params, *init.params.kwonly_params]}
    if len(stores) != 1 or not isinstance(stores[0][1], cst.Name) \
            or stores[0][1].value not in params:
        return None
    line, value = stores[0]
    assert isinstance(value, cst.Name)
    wrapper = Wrapper(cls, forward, init, calls, attr, value.value, line, reads=reads,
                      updates=updates)
    if line not in _top_level(init):
        wrapper.reason = f"self.{attr} is set inside a block of __init__"
    elif any(isinstance(a.target, cst.Name) and a.target.value == value.value
             for a in find_all(init.body, cst.AssignTarget)):
        wrapper.reason = f"__init__ re-binds {value.value}"
    elif any(a.star == "*" for c in calls for a in c.args):
        wrapper.reason = f"the call of self.{attr} unpacks a sequence"
    elif len({_shape(c) for c in calls}) > 1:
        wrapper.reason = (f"its calls of self.{attr} pass different positional arguments or "
                          "keywords")
    return wrapper


def _literal_key(sub: cst.Subscript) -> str | None:
    """``"context"`` of ``kwargs["context"]``."""
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
        return None
    key = sub.slice[0].slice.value
    found = key.evaluated_value if isinstance(key, cst.SimpleString) else None
    return found if isinstance(found, str) and found.isidentifier() else None


def _is_update(call: cst.Call, kw: str) -> bool:
    """``kwargs.update(context=c)``: keywords only."""
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == "update"
            and isinstance(func.value, cst.Name) and func.value.value == kw and bool(call.args)
            and all(a.keyword is not None and not a.star for a in call.args))


def updated_keys(wrapper: Wrapper) -> set[str]:
    return {a.keyword.value for _, call in wrapper.updates for a in call.args
            if a.keyword is not None}


def _shape(call: cst.Call) -> tuple[int, frozenset[str]]:
    """How many positional arguments a call passes, and which keywords by name."""
    return (len([a for a in call.args if a.keyword is None and a.star == ""]),
            frozenset(a.keyword.value for a in call.args if a.keyword is not None))


def _top_level(func: cst.FunctionDef) -> list[cst.BaseStatement]:
    return list(func.body.body) if isinstance(func.body, cst.IndentedBlock) else []


@dataclass
class _Scope:
    """A file whose constructions of a wrapper are read: this file, or another of the tree
    that imports the wrapper (and the names it imports from this file)."""

    module: cst.Module
    facts: ModuleFacts
    ours: bool
    imported: frozenset[str] = frozenset()      # names it imports from this file

    @cached_property
    def functions(self) -> list[cst.FunctionDef]:
        return find_all(self.module, cst.FunctionDef)


# (display path, text) of the other files of the tree that may mean this file's class, or why
# the tree cannot be read.
OtherFiles = Callable[[str], "list[tuple[str, str]] | str"]


class PassThroughs:
    """The wrappers of one file and the keywords each passes on (computed once per file)."""

    def __init__(self, module: cst.Module, facts: ModuleFacts, stem: str,
                 other_files: OtherFiles) -> None:
        self.scope = _Scope(module, facts, ours=True)
        self.facts = facts
        self.stem = stem
        self.other_files = other_files
        self.wrappers: dict[str, Wrapper] = {}
        for name, cls in facts.classes.items():
            if facts.is_module_class(cls):
                found = find_wrapper(cls)
                if found is not None:
                    self.wrappers[name] = found
        self._done: set[str] = set()
        self._active: set[str] = set()
        for name in list(self.wrappers):
            self._settle(name)

    # ---- which keywords -------------------------------------------------------------------

    def _settle(self, name: str) -> None:
        wrapper = self.wrappers[name]
        if name in self._done or wrapper.reason is not None:
            self._done.add(name)
            return
        self._active.add(name)
        try:
            found = self._keywords(wrapper)
        finally:
            self._active.discard(name)
        if isinstance(found, str):
            wrapper.reason = found
        else:
            wrapper.keywords, known = found
            wrapper.combinations = every_combination(wrapper.keywords, known)
            if len(wrapper.combinations) > MAX_CALLS:
                varying = len(wrapper.combinations).bit_length() - 1
                wrapper.reason = (f"the modules it wraps differ in {varying} keywords: one call "
                                  f"for each set a module may take is "
                                  f"{len(wrapper.combinations)}, more than {MAX_CALLS}")
        self._done.add(name)

    def _sites(self, name: str) -> list[tuple[_Scope, cst.Call]] | str:
        """Every construction of the wrapper ``name`` in the tree, with the file it is in."""
        sites = [(self.scope, c) for c in find_all(self.scope.module, cst.Call)
                 if isinstance(c.func, cst.Name) and c.func.value == name]
        others = self.other_files(name)
        if isinstance(others, str):
            return f"the modules it wraps are not all known ({others})"
        for display, text in others:
            try:
                module = cst.parse_module(text)
            except cst.ParserSyntaxError:
                return f"the modules it wraps are not all known ({display} does not parse)"
            facts = ModuleFacts(module)
            imported = frozenset(local for local, full in facts.imports.items()
                                 if full.rpartition(".")[0].rpartition(".")[2] == self.stem)
            scope = _Scope(module, facts, ours=False, imported=imported)
            found = [c for c in find_all(module, cst.Call)
                     if (isinstance(c.func, cst.Name) and c.func.value == name
                         and name in imported)
                     or (isinstance(c.func, cst.Attribute) and c.func.attr.value == name)]
            if not found:
                return (f"the modules it wraps are not all known ({display} names {name} "
                        "other than by building it)")
            sites.extend((scope, c) for c in found)
        if not sites:
            return f"{name} is built nowhere in the tree, so the modules it wraps are not known"
        return sites

    def _keywords(self, wrapper: Wrapper) -> tuple[list[Keyword], list[frozenset[str]]] | str:
        base = self._base_problem(wrapper.cls)
        if base is not None:
            return base
        sites = self._sites(wrapper.cls.name.value)
        if isinstance(sites, str):
            return sites
        positional, explicit = _shape(wrapper.calls[0])
        merged: dict[str, Keyword] = {}
        combinations: list[frozenset[str]] = []
        for scope, site in sites:
            try:
                taken = self._takes(*self._wrapped_class(wrapper, scope, site), positional)
            except NotKnown as exc:
                return str(exc)
            combination = frozenset(k.name for k in taken if k.name not in explicit)
            if combination not in combinations:
                combinations.append(combination)
            for keyword in taken:
                if keyword.name in explicit:
                    continue
                known = merged.get(keyword.name)
                if known is None:
                    merged[keyword.name] = keyword
                elif code_of(known.default) != code_of(keyword.default):
                    return (f"the modules it wraps default {keyword.name} differently "
                            f"({code_of(known.default)}, {code_of(keyword.default)})")
                elif known.annotation is None and keyword.annotation is not None:
                    merged[keyword.name] = keyword
                elif (known.annotation is not None and keyword.annotation is not None
                      and code_of(known.annotation.annotation)
                      != code_of(keyword.annotation.annotation)):
                    # The modules type it differently: the wrapper leaves it to annotate.
                    merged[keyword.name] = Keyword(keyword.name, known.default, None)
        missing = sorted(({key for _, key in wrapper.reads} | updated_keys(wrapper))
                         - set(merged) - explicit)
        if missing:
            return (f"it reads or sets {missing[0]!r} of what it passes on, which no module it "
                    "wraps takes")
        return list(merged.values()), combinations

    def _base_problem(self, cls: cst.ClassDef) -> str | None:
        """Why ``__constants__`` could not be added to ``cls``: a base other than nn.Module
        (whose own list it would hide)."""
        for base in cls.bases:
            if qualified_name(base.value, self.facts.imports) != "torch.nn.Module":
                return (f"its base {short_source(base.value)} is not nn.Module (a "
                        f"{CONSTANTS} of its own would hide the base's)")
        return None

    def _takes(self, scope: _Scope, cls_name: str, positional: int) -> list[Keyword]:
        """The keywords a module of ``cls_name`` (a class of ``scope``) takes after
        ``positional`` arguments."""
        if cls_name.startswith("torch.nn."):
            return []       # its forward takes the input alone
        forward = methods_of(scope.facts.classes[cls_name]).get("forward")
        inner = self.wrappers.get(cls_name) if scope.ours else None
        if inner is not None:
            if cls_name in self._active:
                raise NotKnown(f"{cls_name} wraps itself")
            self._settle(cls_name)
            if inner.reason is not None:
                raise NotKnown(f"it wraps {cls_name}, which is not rewritten ({inner.reason})")
            forward = inner.forward.with_changes(
                params=inner.forward.params.with_changes(star_kwarg=None))
        if forward is None:
            raise NotKnown(f"{cls_name} has no forward() of its own")
        if forward.params.star_kwarg is not None:
            raise NotKnown(f"{cls_name}.forward() takes **{forward.params.star_kwarg.name.value}")
        params = [*forward.params.posonly_params, *forward.params.params][1:]
        extra = [*params[positional:], *forward.params.kwonly_params]
        for param in extra:
            if param.default is None:
                raise NotKnown(f"{cls_name}.forward()'s {param.name.value} has no default, so a "
                               "call that leaves it out fails")
            if not _portable(param.default):
                raise NotKnown(f"{cls_name}.forward()'s default {short_source(param.default)} "
                               f"of {param.name.value} means something else in another class")
        own = [Keyword(p.name.value, p.default, p.annotation) for p in extra
               if p.default is not None]
        return [*own, *inner.keywords] if inner is not None else own

    def _wrapped_class(self, wrapper: Wrapper, scope: _Scope, site: cst.Call
                       ) -> tuple[_Scope, str]:
        """The class (and the file that defines it) whose module ``site`` (a construction of
        the wrapper) gives it."""
        init_params = [p.name.value for p in
                       [*wrapper.init.params.posonly_params, *wrapper.init.params.params]][1:]
        value: cst.BaseExpression | None = None
        for k, arg in enumerate(a for a in site.args if a.keyword is None):
            if arg.star:
                break
            if k < len(init_params) and init_params[k] == wrapper.param:
                value = arg.value
        for arg in site.args:
            if arg.keyword is not None and arg.keyword.value == wrapper.param:
                value = arg.value
        if value is None or any(a.star for a in site.args):
            raise NotKnown(f"`{short_source(site)}` passes {wrapper.param} in a way not "
                           "followed")
        return self._class_of(scope, value, site)

    def _class_of(self, scope: _Scope, value: cst.BaseExpression, site: cst.CSTNode,
                  depth: int = 0) -> tuple[_Scope, str]:
        layer = _plain_layer(scope, value)
        if layer is not None:
            return scope, layer
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
            name = value.func.value
            found = scope.facts.classes.get(name)
            if found is not None and scope.facts.is_module_class(found):
                return scope, name
            ours = self.facts.classes.get(name)
            if (found is None and name in scope.imported and ours is not None
                    and self.facts.is_module_class(ours)):
                return self.scope, name
        enclosing = _enclosing(scope, site)
        if depth < 4 and enclosing is not None and isinstance(value, cst.Name | cst.Attribute):
            bound = _last_binding(enclosing, value, site)
            if bound is not None:
                return self._class_of(scope, bound, site, depth + 1)
        raise NotKnown(f"it wraps `{short_source(value)}`, not a module class of the tree "
                       "built there")


# torch.nn layers whose forward takes more than the input (by keyword too): not "plain".
_KEYWORD_LAYERS = frozenset({
    "MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "LSTM", "GRU", "RNN", "LSTMCell",
    "GRUCell", "RNNCell", "Bilinear", "EmbeddingBag", "CrossEntropyLoss", "MaxUnpool1d",
    "MaxUnpool2d", "MaxUnpool3d", "Upsample", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "AdaptiveLogSoftmaxWithLoss",
})


def _plain_layer(scope: _Scope, value: cst.BaseExpression) -> str | None:
    """``torch.nn.<Layer>`` when ``value`` builds a torch.nn layer whose forward takes only its
    input (``nn.Linear(...)``, ``nn.Sequential(...)``), directly or through a module-level
    function of the file every return of which builds one (perceiver's ``Mixer()``)."""
    if not isinstance(value, cst.Call):
        return None
    name = qualified_name(value.func, scope.facts.imports) or ""
    short = name.rpartition(".")[2]
    if name.startswith("torch.nn.") and short[:1].isupper() and short not in _KEYWORD_LAYERS \
            and "functional" not in name:
        return name
    if isinstance(value.func, cst.Name):
        function = next((s for s in scope.module.body if isinstance(s, cst.FunctionDef)
                         and s.name.value == value.func.value), None)
        if function is None or find_all(function.body, cst.FunctionDef, cst.Lambda):
            return None
        layers = [_plain_layer(scope, r.value) if r.value is not None else None
                  for r in find_all(function.body, cst.Return)]
        if layers and all(layers):
            return layers[0]
    return None


def _enclosing(scope: _Scope, node: cst.CSTNode) -> cst.FunctionDef | None:
    inner: cst.FunctionDef | None = None
    for func in scope.functions:
        if contains(func, node) and (inner is None or contains(inner, func)):
            inner = func
    return inner


def _last_binding(func: cst.FunctionDef, name: cst.BaseExpression,
                  before: cst.CSTNode) -> cst.BaseExpression | None:
    """The value of the last plain assignment to ``name`` (a local or ``self.<attr>``) that
    comes before ``before`` in ``func`` and does not hold it."""
    self_var = self_name(func)
    wanted = (name.value if isinstance(name, cst.Name)
              else self_attr(name, self_var) if self_var is not None else None)
    if wanted is None:
        return None
    found: cst.BaseExpression | None = None
    for node in find_all(func.body, cst.Assign, cst.Call):
        if node is before:
            break
        if not isinstance(node, cst.Assign) or contains(node, before):
            continue
        for target in node.targets:
            here = (target.target.value if isinstance(name, cst.Name)
                    and isinstance(target.target, cst.Name)
                    else self_attr(target.target, self_var) if isinstance(name, cst.Attribute)
                    and self_var is not None else None)
            if here == wanted:
                found = node.value
    return found


def _portable(node: cst.BaseExpression) -> bool:
    """A default that means the same in another class's signature: a literal, None, or a
    tuple of those."""
    if isinstance(node, cst.Name):
        return node.value in ("None", "True", "False")
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _portable(node.expression)
    if isinstance(node, cst.Tuple):
        return all(_portable(e.value) for e in node.elements)
    return isinstance(node, cst.Integer | cst.Float | cst.SimpleString)


# ---- the rewrite ---------------------------------------------------------------------------


def every_combination(keywords: list[Keyword], known: list[frozenset[str]]
                      ) -> list[frozenset[str]]:
    """The sets of keywords a call of the wrapped module may pass: those every known module
    takes, with each subset of the ones they differ in. Not only the known modules' sets: a
    module built outside the tree's view (a user's own, taking ``mask`` but not ``context``)
    must get exactly the keywords it takes, not those of another set (silently dropping one
    it takes, or passing one it does not)."""
    always = frozenset.intersection(*known) if known else frozenset()
    varying = [k.name for k in keywords if k.name not in always
               and any(k.name in c for c in known)]
    subsets: list[frozenset[str]] = [always]
    for name in varying:
        subsets = [*[s | {name} for s in subsets], *subsets]
    return subsets


def flag_name(wrapper: Wrapper, keyword: str) -> str:
    return f"{wrapper.attr}_takes_{keyword}"


def calls_by_flags(wrapper: Wrapper, original: cst.Call, leaf: Callable[[cst.Call], str],
                   indent: str, *, returns: bool) -> tuple[str, list[str]]:
    """The source of the calls of the wrapped module, one per set of keywords the modules it
    wraps take, chosen by nested ``if self.<attr>_takes_<k>:`` tests where the sets differ
    (``leaf`` writes each call's statement); and the keywords tested."""
    self_var = self_name(wrapper.forward) or "self"
    kept = [a for a in original.args if a.star != "**"]
    order = [k.name for k in wrapper.keywords]
    tested: list[str] = []

    def call(names: list[str]) -> cst.Call:
        args = [*kept, *[cst.Arg(cst.Name(n), keyword=cst.Name(n)) for n in names]]
        spaced = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                whitespace_after=cst.SimpleWhitespace(""))
        args = [a.with_changes(comma=spaced if i < len(args) - 1 else cst.MaybeSentinel.DEFAULT,
                               equal=tight if a.keyword is not None else a.equal)
                for i, a in enumerate(args)]
        return original.with_changes(args=args)

    def block(i: int, combinations: list[frozenset[str]], names: list[str],
              depth: int) -> list[str]:
        pad = indent * depth
        if i == len(order):
            return [pad + leaf(call(names))]
        keyword = order[i]
        taking = [c for c in combinations if keyword in c]
        other = [c for c in combinations if keyword not in c]
        if not other or not taking:     # every module left takes it, or none does: no test
            return block(i + 1, combinations, [*names, keyword] if taking else names, depth)
        if keyword not in tested:
            tested.append(keyword)
        test = f"{pad}if {self_var}.{flag_name(wrapper, keyword)}:"
        taken = block(i + 1, taking, [*names, keyword], depth + 1)
        if returns:         # the branch returns: what follows it is the else
            return [test, *taken, *block(i + 1, other, names, depth)]
        return [test, *taken, f"{pad}else:", *block(i + 1, other, names, depth + 1)]

    text = "\n".join(block(0, wrapper.combinations, [], 0)) + "\n"
    return text, tested


def flag_lines(wrapper: Wrapper, names: list[str], inspect_name: str, local: str,
               any_keyword: str) -> list[str]:
    """``__init__``'s statements that measure which keywords the module takes: by name, or
    any through a ``**kwargs`` of its own (which ``self.fn(x, **kwargs)`` gave every
    keyword)."""
    init_self = self_name(wrapper.init) or "self"
    parameters = f"{inspect_name}.signature({init_self}.{wrapper.attr}.forward).parameters"
    return [f"{local} = {parameters}",
            f"{any_keyword} = any(p.kind == p.VAR_KEYWORD for p in {local}.values())",
            *[f'{init_self}.{flag_name(wrapper, n)} = {any_keyword} or "{n}" in {local}'
              for n in names]]
