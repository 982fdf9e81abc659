"""``variable-arguments``: ``*args``, ``**kwargs`` and keyword-only parameters of compiled methods.

What it does
    In the methods ``torch.jit.script`` compiles (``forward``, ``@torch.jit.export`` methods and
    what they call through ``self``):

    * a ``**kwargs`` the method only passes on, whole, to one submodule built in ``__init__``
      from a class of the same file (``return self.layer(x, **kwargs)``) becomes that class's
      ``forward()`` parameters the call does not bind already, with their defaults, passed by
      name (``mask=None`` in the signature, ``self.layer(x, mask=mask)`` in the call);
    * a ``**kwargs`` passed whole to the module the constructor was given (``PreNorm(dim,
      fn)``: ``self.fn = fn``, ``return self.fn(self.norm(x), **kwargs)``) becomes the
      keywords that the modules the tree builds it around take (every construction of the
      class in its file, followed through locals and ``self.<attr>``; wrappers of wrappers
      too), and the call becomes one call per set of keywords a module may take (each subset
      of the keywords those modules differ in, so that a module built outside the tree's view
      gets exactly the ones it takes), chosen by a constant per keyword that differs:
      ``self.fn_takes_mask = fn_has_kwargs or "mask" in fn_parameters`` in ``__init__``
      (measured with ``inspect.signature(self.fn.forward)``; a module whose forward takes
      ``**kwargs`` takes every keyword), named in ``__constants__``, so TorchScript compiles
      for each instance only the call its module takes. An unannotated ``None`` default
      becomes ``Optional[torch.Tensor]`` (a mask or a context passed through; validation
      checks it). Refused, with the reason, when a construction wraps something that is not a
      module class of the file, another file of the tree names the class, the modules'
      defaults for a keyword differ, they differ in more than two keywords (more than four
      calls), or a keyword has no default;
    * an unused ``*args`` or ``**kwargs`` is removed when the tree shows that no caller passes
      anything it would take: the class is built only as ``self.<attr> = Cls(...)`` or as the
      elements of ``self.<attr> = nn.ModuleList([Cls(...) for ...])`` in ``__init__`` of
      classes of its own file, each such attribute is only ever called (a ModuleList's
      elements: ``for block in self.blocks: x = block(x)``, ``self.blocks[i](x)``, and
      ``len(self.blocks)``), every call has a known number of positional arguments and only
      named keywords that the remaining parameters take, and no other file of the tree names
      the class. Otherwise (the class is built nowhere in the tree, named in another file, held
      in another container, called with ``*xs``, ...) it is removed only with
      ``--unsafe-fixes``, and the reason is reported;
    * keyword-only parameters become ordinary ones with the same defaults (those without a
      default first: they are only ever passed by name, so their order is free);
    * a dict unpacked into a call is spelled out as its keywords when it is a display with
      string keys, ``dict(k=v)``, or a call of a helper of the file that only returns such a
      display (``torch.zeros(n, **to(x))`` with ``def to(x): return {'device': x.device,
      'dtype': x.dtype}`` becomes ``torch.zeros(n, device=x.device, dtype=x.dtype)``): the
      helper's values with each parameter replaced by the argument, which must be a name or
      an attribute. Refused, with the reason, otherwise (a computed argument, keys that are
      not literals or that repeat a keyword of the call, a helper doing more than return the
      display, a name the helper reads that is bound where the call stands). In the
      module-level functions the repair loop names (a model stopped in one) too.

    A ``*args``/``**kwargs`` the body reads otherwise is reported. Module-level functions that
    compiled code calls are ``annotate``'s, which uses the same signature rewrite
    (:func:`ordinary_signature`), with removal under ``--unsafe-fixes`` only.

    This was part of ``annotate``; it is a rule of its own because deciding it needs the
    whole tree (who builds and calls the class) and the callee's signature, not types, and one
    mechanism decides every ``*``/``**``/keyword-only site of a compiled method.

Why it breaks export
    TorchScript rejects compiled functions with ``*args``, ``**kwargs`` or keyword-only
    parameters with defaults ("Compiled functions can't take variable number of arguments or
    use keyword-only arguments with defaults") and calls that unpack a dict ("keyword-arg
    expansion is not supported").

Example
    Before::

        class Block(nn.Module):
            def forward(self, x, *args, **kwargs):
                return self.attn(x, **kwargs)

        class Encoder(nn.Module):
            def forward(self, x):
                return self.block(x)

    After (``Attention.forward(self, x, mask=None)``; ``Block`` built only as ``self.block``)::

        class Block(nn.Module):
            def forward(self, x, mask=None):
                return self.attn(x, mask=mask)

Fix safety
    Making keyword-only parameters ordinary keeps every call that worked working. Expanding a
    pass-through ``**kwargs`` keeps every call that worked: a keyword the callee does not take
    raised there before. For the module the constructor was given, a call passes the module
    exactly the keywords it took before (a left-out one with the default the modules of the
    tree have; a module outside the tree's view with another default, or a ``**kwargs`` of
    its own, now receives the keyword with that default); a keyword the module does not
    take, which raised before, is now dropped. Validation runs the model to prove it.
    Spelling out a dict passes the same keywords with the same values in the same order.
    Removing an unused ``*args``/``**kwargs`` makes a call that passed extra arguments fail;
    it is written without ``--unsafe-fixes`` only when the tree proves no call does (callers
    outside the tree, a public package API, are not known and keep the requirement).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts, never_compiled_nodes
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.project import package_root
from tsfix.codemods.facts.syntax import (
    ReplaceById,
    code_of,
    contains,
    find_all,
    fresh_name,
    literal_type,
    methods_of,
    names_bound_in,
    names_used,
    parent_map,
    qualified_name,
    self_attr,
    self_name,
)
from tsfix.codemods.rules._class_lists import appended, own_list, with_list
from tsfix.codemods.rules._dict_keywords import Refused as DictRefused
from tsfix.codemods.rules._dict_keywords import dict_helpers, spelled_keywords
from tsfix.codemods.rules._pass_through import (
    COMMENT,
    CONSTANTS,
    Keyword,
    PassThroughs,
    Wrapper,
    calls_by_flags,
    flag_lines,
    flag_name,
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
from tsfix.codemods.rules.imports import add_module_import
from tsfix.codemods.validation.protocol import function_change_name

# Files of the tree read to prove that a class is named nowhere else; a larger tree is unknown.
_MAX_TREE_FILES = 2000


@dataclass
class SignatureSite:
    """One ``*``/``**``/keyword-only site: ``reason`` None when it is rewritten."""

    node: cst.CSTNode
    message: str
    reason: str | None = None
    blocker: bool = True            # a refusal of a site TorchScript rejects (TSF210)


@dataclass
class SignaturePlan:
    params: cst.Parameters
    sites: list[SignatureSite] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# (allowed, why): whether an unused ``*args``/``**kwargs`` (its label) may go, and the note
# (allowed) or the refusal (not allowed).
Removal = Callable[[str], tuple[bool, str]]


def ordinary_signature(params: cst.Parameters, method: str, used: set[str],
                       removal: Removal) -> SignaturePlan:
    """``params`` without unused ``*args``/``**kwargs`` (as ``removal`` allows) and with
    keyword-only parameters made ordinary; every site found, fixed or refused."""
    plan = SignaturePlan(params)
    positional = list(params.params)
    kwonly = list(params.kwonly_params)
    star_arg, star_kwarg = params.star_arg, params.star_kwarg
    changed = False
    for star, stars in ((star_arg, "*"), (star_kwarg, "**")):
        if not isinstance(star, cst.Param):
            continue
        label = f"{stars}{star.name.value}"
        message = f"{method}() takes {label}"
        if star.name.value in used:
            plan.sites.append(SignatureSite(star, message, f"reads {label}, which TorchScript "
                                            "cannot compile; make what it carries explicit "
                                            "parameters"))
            continue
        allowed, why = removal(label)
        if not allowed:
            plan.sites.append(SignatureSite(star, message, why))
            continue
        if stars == "*":
            star_arg = cst.ParamStar() if kwonly else cst.MaybeSentinel.DEFAULT
        else:
            star_kwarg = None
        changed = True
        plan.sites.append(SignatureSite(star, message))
        plan.parts.append(f"removed unused {label}")
        if why:
            plan.notes.append(why)
    if kwonly:
        with_defaults = [q for q in kwonly if q.default is not None]
        defaults_before = any(q.default is not None for q in [*params.posonly_params, *positional])
        refusal: str | None = None
        if isinstance(star_arg, cst.Param):
            refusal = (f"keyword-only parameters follow *{star_arg.name.value}, which stays; "
                       "they cannot become ordinary parameters")
        elif len(with_defaults) < len(kwonly) and defaults_before:
            refusal = ("keyword-only parameters without defaults follow parameters with "
                       "defaults; they cannot become ordinary parameters")
        if refusal is None:
            positional = [*positional, *[q for q in kwonly if q.default is None],
                          *with_defaults]
            kwonly = []
            star_arg = cst.MaybeSentinel.DEFAULT
            changed = True
            plan.parts.append(f"made {method}()'s keyword-only parameters ordinary")
            plan.sites.extend(SignatureSite(q, _keyword_only(q, method)) for q in with_defaults)
        elif with_defaults:
            plan.sites.extend(SignatureSite(q, _keyword_only(q, method), refusal)
                              for q in with_defaults)
        else:       # keyword-only without defaults script: no blocker
            plan.sites.append(SignatureSite(kwonly[0], "", refusal, blocker=False))
    if not changed:
        return plan
    if not kwonly and not isinstance(star_arg, cst.Param | cst.ParamStar) and \
            not isinstance(star_kwarg, cst.Param):
        positional = without_trailing_comma(positional)
    plan.params = params.with_changes(params=positional, kwonly_params=kwonly,
                                      star_arg=star_arg, star_kwarg=star_kwarg)
    return plan


def _keyword_only(param: cst.Param, method: str) -> str:
    return f"keyword-only parameter {param.name.value!r} with a default in {method}()"


def without_trailing_comma(params: list[cst.Param]) -> list[cst.Param]:
    """After ``*``, ``*args`` or ``**kwargs`` went away, the last parameter's comma pointed at
    them; a comma that ends a multi-line signature (black's magic comma) stays."""
    if not params or not isinstance(params[-1].comma, cst.Comma):
        return params
    if isinstance(params[-1].comma.whitespace_after, cst.ParenthesizedWhitespace):
        return params
    return [*params[:-1], params[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]


def _is_portable_default(node: cst.BaseExpression) -> bool:
    """A default that means the same in another class's signature: a literal, None, or a
    tuple of those."""
    if isinstance(node, cst.Name) and node.value == "None":
        return True
    if isinstance(node, cst.Tuple):
        return all(_is_portable_default(e.value) for e in node.elements
                   if isinstance(e, cst.Element))
    return literal_type(node) is not None


def _star_free(call: cst.Call) -> bool:
    return all(arg.star == "" for arg in call.args)


class VariableArguments(Rule):
    __doc__ = __doc__
    name = "variable-arguments"
    # --rule all order: just before annotate (100), which types the parameters this rule makes
    # ordinary or adds; after the rules that rewrite bodies (nothing here depends on them).
    order = 95
    targets = ("torchscript", "onnx")      # torch.export takes *args/**kwargs
    CODES = (
        Code("TSF210", "variadic-parameters", "*args, **kwargs or keyword-only default",
             "Compiled methods cannot take *args/**kwargs or keyword-only parameters with "
             "defaults. variable-arguments makes keyword-only parameters ordinary, expands a "
             "**kwargs passed on to a known submodule, and removes unused *args/**kwargs when "
             "the tree shows no caller passes extra arguments (else with --unsafe-fixes)."),
        Code("TSF110", "keyword-unpacking", "**kwargs unpacking in a call",
             "TorchScript cannot unpack a dict into keyword arguments (\"keyword-arg "
             "expansion is not supported\"). variable-arguments passes a method's **kwargs "
             "on by name where it goes whole to a submodule of the file or to the module the "
             "constructor was given, and spells out a dict display, dict(...) or a helper's "
             "returned display; otherwise pass the arguments by name."),
    )
    summary = ("Keyword-only parameters made ordinary, **kwargs passed to a known submodule "
               "(or the module the constructor was given) expanded, unused *args/**kwargs "
               "removed when no caller passes any, dicts unpacked in calls spelled out")

    VALID = (
        """
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x, **kwargs):
        return x * kwargs["scale"]
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
class Attention(nn.Module):
    def forward(self, x, mask=None, scale: float = 1.0):
        return x * scale
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
    def forward(self, x, **kwargs):
        return self.attn(x, **kwargs)
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
    def forward(self, x, *, scale=1.0):
        return self.block(x) * scale
""",
            """
import torch
from torch import nn
class Attention(nn.Module):
    def forward(self, x, mask=None, scale: float = 1.0):
        return x * scale
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
    def forward(self, x, mask=None, scale: float = 1.0):
        return self.attn(x, mask=mask, scale=scale)
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
    def forward(self, x, scale=1.0):
        return self.block(x) * scale
""",
        ),
        Example(
            """
import torch
from torch import nn
def to(x):
    return {"device": x.device, "dtype": x.dtype}
class Pad(nn.Module):
    def forward(self, x):
        return torch.cat((x, torch.zeros(1, **to(x))))
""",
            """
import torch
from torch import nn
def to(x):
    return {"device": x.device, "dtype": x.dtype}
class Pad(nn.Module):
    def forward(self, x):
        return torch.cat((x, torch.zeros(1, device=x.device, dtype=x.dtype)))
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # A compiled method with *args, **kwargs or keyword-only parameters: the only
        # signatures it rewrites (a `**name` call alone is rewritten with its method's
        # **kwargs); or a call unpacking a dict display, dict(...) or a helper's call.
        return "*" in file.text and (file.tree is None or any(
            (isinstance(n, ast.arguments) and (n.vararg or n.kwarg or n.kwonlyargs))
            or (isinstance(n, ast.keyword) and n.arg is None
                and isinstance(n.value, ast.Dict | ast.Call))
            for n in file.compiled_nodes()))

    def prepare(self, module: cst.Module) -> None:
        self._tree_mentions: dict[str, list[tuple[str, str]] | str] = {}
        self._pass_throughs: PassThroughs | None = None
        # class -> the wrapper whose forward was rewritten: __init__ and __constants__ follow.
        self._wrapped: dict[str, tuple[Wrapper, list[str]]] = {}
        self._inspect_import = False

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self._dict_helpers = dict_helpers(tree)
        result = super().transform_module_impl(tree)
        if self.compiled_functions:
            result = self._rewrite_functions(result)
        if self._inspect_import and self.changes:
            result = _imports_before_from_imports(add_module_import(result, "inspect"))
        return result

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        new_methods: dict[str, cst.FunctionDef] = {}
        parts: list[str] = []
        notes: list[str] = []
        reported = ClassSites(self, cls.name.value)
        for method, func in facts.compiled_methods():
            spelled = self._spelled_calls(func, facts.never_compiled(method), reported, parts)
            rewritten = self._rewrite_method(cls, facts, method, func, parts, notes)
            if spelled:
                rewritten = _replaced(rewritten, spelled)
            if rewritten is not func:
                new_methods[method] = rewritten
        if not new_methods:
            return cls
        assert isinstance(cls.body, cst.IndentedBlock)
        wrapped = self._wrapped.get(cls.name.value)
        if wrapped is not None:
            new_methods["__init__"] = self._measured_keywords(*wrapped)
        body = [new_methods.get(s.name.value, s) if isinstance(s, cst.FunctionDef) else s
                for s in cls.body.body]
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        result = cls.with_changes(body=cls.body.with_changes(body=body))
        return self._with_constants(result, *wrapped) if wrapped is not None else result

    def _rewrite_functions(self, tree: cst.Module) -> cst.Module:
        """The dicts unpacked in calls of the module-level functions the repair loop names
        (``Rule.compiled_functions``; halonet's ``rel_to_abs``: ``torch.zeros(..., **to(x))``),
        each reported under ``function_change_name``. Their signatures are ``annotate``'s."""
        body = list(tree.body)
        for index, func in self.named_functions(tree):
            owner = function_change_name(func.name.value)
            parts: list[str] = []
            spelled = self._spelled_calls(func, never_compiled_nodes(func, self.facts.imports),
                                          FunctionSites(self, func, owner), parts)
            if not spelled:
                continue
            self.changes.append(ClassChange(self.name, owner, self.function_span(func),
                                            "; ".join(parts)))
            body[index] = _replaced(func, spelled)
        return tree.with_changes(body=body)

    def _spelled_calls(self, func: cst.FunctionDef, skipped: Collection[int], reported: Sites,
                       parts: list[str]) -> dict[int, cst.Call]:
        """The calls of ``func``'s compiled code that unpack a dict display, ``dict(...)`` or a
        helper's dict (:mod:`~tsfix.codemods.rules._dict_keywords`) with the keywords
        written out, by the call's id; each site reported, fixed or with the reason."""
        spelled: dict[int, cst.Call] = {}
        bound = names_bound_in(func)
        for call in find_all(func.body, cst.Call):
            if id(call) in skipped:
                continue
            args: list[cst.Arg] = []
            changed = False
            for arg in call.args:
                if arg.star != "**" or not isinstance(arg.value, cst.Dict | cst.Call):
                    args.append(arg)
                    continue
                message = f"**{code_of(arg.value)} in a call"
                try:
                    keywords = spelled_keywords(arg, call, self._dict_helpers, bound)
                except DictRefused as refusal:
                    reported.skipped(arg, f"not rewritten: {refusal}", "TSF110", message)
                    args.append(arg)
                    continue
                reported.fixed(arg, "TSF110", message)
                parts.append(f"line {reported.line(arg)}: `**{code_of(arg.value)}` -> "
                             f"`{', '.join(code_of(k) for k in keywords)}`")
                between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                args.extend([*(k.with_changes(comma=between) for k in keywords[:-1]),
                             keywords[-1].with_changes(comma=arg.comma)])
                changed = True
            if changed:
                spelled[id(call)] = call.with_changes(args=args)
        return spelled

    def _rewrite_method(self, cls: cst.ClassDef, facts: ClassFacts, method: str,
                        func: cst.FunctionDef, parts: list[str],
                        notes: list[str]) -> cst.FunctionDef:
        params = func.params
        if not isinstance(params.star_arg, cst.Param) and params.star_kwarg is None \
                and not params.kwonly_params:
            return func
        class_name = cls.name.value
        expanded = self._expand_kwargs(cls, facts, method, func)
        wrapped_refusal: str | None = None
        if expanded is None and method == "forward" and params.star_kwarg is not None:
            wrapped = self._expand_wrapped(cls, func)
            if isinstance(wrapped, str):
                wrapped_refusal = wrapped
            else:
                expanded = wrapped
        if expanded is not None:
            star_kwarg = params.star_kwarg
            assert star_kwarg is not None
            kw = star_kwarg.name.value
            self.fixed(star_kwarg, "TSF210", f"{method}() takes **{kw}")
            for arg in find_all(func.body, cst.Arg):
                if arg.star == "**" and isinstance(arg.value, cst.Name) and arg.value.value == kw:
                    self.fixed(arg, "TSF110", f"**{kw} in a call in {method}()")
            func, added = expanded
            parts.append(f"**{star_kwarg.name.value} of {method}() -> "
                         f"{', '.join(added)}")

        def removal(label: str) -> tuple[bool, str]:
            unproven = self._unproven_callers(cls, method, func)
            if unproven is None:
                return True, ""
            if self.unsafe_fixes:
                return True, (f"unsafe fix: removed unused {label} from {method}(); callers "
                              "that passed extra arguments now get a TypeError")
            return False, (f"{label} is never read, but TorchScript rejects it; removing it "
                           f"changes what callers may pass, and {unproven} (--unsafe-fixes "
                           "removes it)")

        plan = ordinary_signature(func.params, method, names_used(func.body), removal)
        originals = {id(p) for p in [*params.params, *params.kwonly_params,
                                     params.star_arg, params.star_kwarg]}
        for site in plan.sites:
            if id(site.node) not in originals:
                continue        # a parameter the expansion added: the **kwargs site says it
            if site.reason is None:
                self.fixed(site.node, "TSF210", site.message)
            elif site.node is params.star_kwarg and wrapped_refusal is not None:
                self.skip(class_name, site.node, f"{method}(): {wrapped_refusal}",
                          code="TSF210", message=site.message)
            elif site.blocker:
                self.skip(class_name, site.node, f"{method}(): {site.reason}", code="TSF210",
                          message=site.message)
            else:
                self.skip(class_name, site.node, f"{method}(): {site.reason}")
        parts.extend(plan.parts)
        notes.extend(plan.notes)
        if plan.params is func.params:
            return func
        return func.with_changes(params=plan.params)

    # ---- **kwargs passed on --------------------------------------------------------------------

    def _expand_kwargs(self, cls: cst.ClassDef, facts: ClassFacts, method: str,
                       func: cst.FunctionDef) -> tuple[cst.FunctionDef, list[str]] | None:
        """``func`` with its ``**kwargs`` replaced by the named parameters of the one submodule
        call it is passed to, or None (a refusal is reported by the signature step)."""
        star_kwarg = func.params.star_kwarg
        self_var = self_name(func)
        if star_kwarg is None or self_var is None:
            return None
        kw = star_kwarg.name.value
        uses = [n for n in find_all(func.body, cst.Name) if n.value == kw]
        calls = [c for c in find_all(func.body, cst.Call)
                 if any(a.star == "**" and isinstance(a.value, cst.Name) and a.value.value == kw
                        for a in c.args)]
        if len(calls) != 1 or len(uses) != 1:
            return None
        call = calls[0]
        attr = self_attr(call.func, self_var)
        callee = self._submodule_class(facts, attr) if attr is not None else None
        if callee is None:
            return None
        target = methods_of(callee).get("forward")
        if target is None or target.params.star_kwarg is not None:
            return None
        callee_params = [*target.params.posonly_params, *target.params.params][1:]
        bound_positionally = [a for a in call.args if a.keyword is None and a.star == ""]
        if any(a.star == "*" for a in call.args) or (
                len(bound_positionally) > len(callee_params)
                and not isinstance(target.params.star_arg, cst.Param)):
            return None
        named = {a.keyword.value for a in call.args if a.keyword is not None}
        rest = [p for p in [*callee_params[len(bound_positionally):],
                            *target.params.kwonly_params] if p.name.value not in named]
        taken = names_used(func) - {kw}
        if any(p.default is None or not _is_portable_default(p.default)
               or p.name.value in taken for p in rest):
            return None
        added = [cst.Param(cst.Name(p.name.value), annotation=p.annotation, default=p.default,
                           equal=p.equal, star="") for p in rest]
        new_args = [a for a in call.args if a.star != "**"]
        tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                whitespace_after=cst.SimpleWhitespace(""))
        new_args = [*new_args, *[cst.Arg(cst.Name(p.name.value), keyword=cst.Name(p.name.value),
                                         equal=tight) for p in rest]]
        new_args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(new_args) - 1
                    else a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                    for i, a in enumerate(new_args)]
        new_call = call.with_changes(args=new_args)
        body = func.body.deep_replace(call, new_call)
        params = func.params.with_changes(
            star_kwarg=None, kwonly_params=[*func.params.kwonly_params, *added])
        if not isinstance(params.star_arg, cst.Param | cst.ParamStar) and added:
            params = params.with_changes(star_arg=cst.ParamStar())
        if not added:
            params = params.with_changes(params=without_trailing_comma(list(params.params)))
        assert isinstance(body, cst.BaseSuite)
        return func.with_changes(params=params, body=body), [code_of(p) for p in added]

    def _submodule_class(self, facts: ClassFacts, attr: str) -> cst.ClassDef | None:
        """The class of this file that ``self.<attr>`` is always built from in ``__init__``."""
        built = [a for a in facts.assignments if a.attr == attr]
        classes = self.facts.classes
        if len(built) != 1 or built[0].method != "__init__":
            return None
        value = built[0].value
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
            return None
        found = classes.get(value.func.value)
        return found if found is not None and self.facts.is_module_class(found) else None

    # ---- **kwargs passed to a module the constructor was given ----------------------------------

    def _expand_wrapped(self, cls: cst.ClassDef, func: cst.FunctionDef
                        ) -> tuple[cst.FunctionDef, list[str]] | str | None:
        """``forward`` of a wrapper (``self.fn(x, **kwargs)``, ``self.fn = fn`` in
        ``__init__``) with the keywords its modules take and one call per combination of them
        (see ``_pass_through``); a refusal; or None when the class is not such a wrapper."""
        if self._pass_throughs is None:
            filename = self.context.filename or ""
            self._pass_throughs = PassThroughs(self.source_module, self.facts,
                                               Path(filename).stem, self._files_naming)
        wrapper = self._pass_throughs.wrappers.get(cls.name.value)
        if wrapper is None or wrapper.forward is not func:
            return None
        star_kwarg = func.params.star_kwarg
        assert star_kwarg is not None
        kw = star_kwarg.name.value
        if wrapper.reason is not None:
            return (f"passes **{kw} to self.{wrapper.attr}, the module given to the "
                    f"constructor, but {wrapper.reason}")
        taken = names_used(func) - {kw}
        clash = [k.name for k in wrapper.keywords
                 if k.name in taken and not _only_read_from(func, k.name, wrapper)]
        if clash:
            return (f"passes **{kw} to self.{wrapper.attr}: {clash[0]} is already a name in "
                    "forward()")
        rewritten = self._calls_by_flags(wrapper, func)
        if isinstance(rewritten, str):
            return f"passes **{kw} to self.{wrapper.attr}: {rewritten}"
        body, tested = rewritten
        if kw in names_used(body):      # a use left behind would be a NameError at run time
            return f"passes **{kw} to self.{wrapper.attr} in a way not followed"
        flags = [flag_name(wrapper, k) for k in tested]
        class_names = {n.value for n in find_all(cls, cst.Name)}
        existing = own_list(cls, CONSTANTS)
        problem = (f"{flags[0]} is already a name in the class"
                   if any(f in class_names for f in flags)
                   else None if not flags
                   else existing.problem if existing is not None and existing.problem
                   else self._inspect_problem())
        if problem is not None:
            return f"passes **{kw} to self.{wrapper.attr}: {problem}"
        added = [cst.Param(cst.Name(k.name), annotation=self._keyword_annotation(k),
                           default=k.default, star="") for k in wrapper.keywords]
        params = func.params.with_changes(
            star_kwarg=None, kwonly_params=[*func.params.kwonly_params, *added])
        if not isinstance(params.star_arg, cst.Param | cst.ParamStar) and added:
            params = params.with_changes(star_arg=cst.ParamStar())
        if not added:
            params = params.with_changes(params=without_trailing_comma(list(params.params)))
        if flags:
            self._wrapped[cls.name.value] = (wrapper, tested)
        if not added:
            return func.with_changes(params=params, body=body), [
                f"removed (the modules self.{wrapper.attr} is built with take no keywords)"]
        return func.with_changes(params=params, body=body), [
            *[code_of(p) for p in added],
            f"passed to self.{wrapper.attr} as its forward() takes them"
            + (f" ({', '.join(flags)} in {CONSTANTS})" if flags else "")]

    def _keyword_annotation(self, keyword: Keyword) -> cst.Annotation | None:
        """The wrapped modules' annotation; for an unannotated ``None`` default,
        ``Optional[torch.Tensor]``: what a ``mask=None``/``context=None`` passed through a
        wrapper carries (TorchScript takes an unannotated one for a Tensor that cannot be
        None, and annotate has no call of the wrapper's own to type it from); validation
        checks it like the rest of the rewrite."""
        torch_name = self.facts.torch_alias
        if keyword.annotation is not None or torch_name is None or not (
                isinstance(keyword.default, cst.Name) and keyword.default.value == "None"):
            return keyword.annotation
        self.need_typing("Optional")
        return cst.Annotation(cst.parse_expression(f"Optional[{torch_name}.Tensor]"))

    def _inspect_problem(self) -> str | None:
        """Why ``inspect`` cannot be used (the name is bound to something else), or None;
        notes the import to add."""
        bound = self.facts.imports.get("inspect")
        if bound == "inspect":
            return None
        if bound is not None or "inspect" in self.facts.top_level_names:
            return "the name inspect is bound to something other than the module"
        self._inspect_import = True
        return None

    def _calls_by_flags(self, wrapper: Wrapper, func: cst.FunctionDef
                        ) -> tuple[cst.BaseSuite, list[str]] | str:
        """``func``'s body with each statement that calls the module replaced by one call per
        set of keywords its modules take, and the keywords tested; or why it cannot be."""
        tested: list[str] = []
        replace = _Replace()
        for call in wrapper.calls:
            problem = self._call_by_flags(wrapper, func, call, tested, replace)
            if problem is not None:
                return problem
        _named_keywords(wrapper, func, replace)
        body = func.body.visit(replace)
        assert isinstance(body, cst.BaseSuite)
        return body, tested

    def _call_by_flags(self, wrapper: Wrapper, func: cst.FunctionDef, call: cst.Call,
                       tested: list[str], replace: _Replace) -> str | None:
        """Notes in ``replace`` what ``call`` (or its statement) becomes; or why it cannot."""
        indent = self.source_module.default_indent
        if len(wrapper.combinations) == 1:      # one call serves every module it wraps
            text, _ = calls_by_flags(wrapper, call, code_of, indent, returns=True)
            replace.calls[id(call)] = cst.parse_expression(text.strip())
            return None
        lines = [line for line in find_all(func.body, cst.SimpleStatementLine)
                 if contains(line, call)]
        if not lines:
            return "a call of it is not in a statement of its own line"
        line = lines[0]
        small = line.body[0] if len(line.body) == 1 else None
        if isinstance(small, cst.Return) and small.value is call:
            text, flags = calls_by_flags(wrapper, call, lambda c: f"return {code_of(c)}",
                                         indent, returns=True)
            statements = list(cst.parse_module(text).body)
        else:
            in_line = find_all(line, cst.Call)
            if len(line.body) != 1 or any(
                    in_line.index(c) < in_line.index(call) for c in in_line
                    if c is not call and not contains(c, call) and not contains(call, c)):
                return ("other calls come before it in its statement, which a call moved "
                        "ahead of them would reorder")
            out = fresh_name(f"{wrapper.attr}_out", taken=names_used(func))
            text, flags = calls_by_flags(wrapper, call, lambda c: f"{out} = {code_of(c)}",
                                         indent, returns=False)
            rest = line.deep_replace(call, cst.Name(out))
            assert isinstance(rest, cst.SimpleStatementLine)
            statements = [*cst.parse_module(text).body, rest.with_changes(leading_lines=[])]
        tested.extend(f for f in flags if f not in tested)
        statements[0] = statements[0].with_changes(leading_lines=line.leading_lines)
        replace.lines[id(line)] = statements
        return None

    def _measured_keywords(self, wrapper: Wrapper, names: list[str]) -> cst.FunctionDef:
        """``__init__`` with the flags measured right after ``self.<attr> = <param>``."""
        inspect_name = next((local for local, full in self.facts.imports.items()
                             if full == "inspect"), "inspect")
        taken = names_used(wrapper.init)
        local = fresh_name(f"{wrapper.attr}_parameters", taken=taken)
        any_keyword = fresh_name(f"{wrapper.attr}_has_kwargs", taken=taken | {local})
        text = "\n".join(flag_lines(wrapper, names, inspect_name, local, any_keyword)) + "\n"
        added = list(cst.parse_module(text).body)
        replace = _Replace()
        replace.lines[id(wrapper.stored)] = [wrapper.stored, *added]
        body = wrapper.init.body.visit(replace)
        assert isinstance(body, cst.BaseSuite)
        return wrapper.init.with_changes(body=body)

    def _with_constants(self, cls: cst.ClassDef, wrapper: Wrapper,
                        tested: list[str]) -> cst.ClassDef:
        flags = [flag_name(wrapper, k) for k in tested]
        existing = own_list(cls, CONSTANTS)
        if existing is None or existing.value is None:
            return with_list(cls, CONSTANTS, flags, COMMENT.format(attr=wrapper.attr))
        rewritten = cls.deep_replace(existing.value, appended(existing.value, flags))
        assert isinstance(rewritten, cst.ClassDef)
        return rewritten

    # ---- who calls the class ------------------------------------------------------------------

    def _unproven_callers(self, cls: cst.ClassDef, method: str,
                          func: cst.FunctionDef) -> str | None:
        """None when every call of ``method`` the tree can make is known and passes nothing the
        method's ``*args``/``**kwargs`` would take; else why not, as a clause."""
        name = cls.name.value
        if method != "forward":
            return f"only forward()'s callers are traced, not {method}()'s"
        elsewhere = self._named_elsewhere(name)
        if elsewhere is not None:
            return elsewhere
        calls: list[cst.Call] = []
        built = False
        in_lists: set[int] = set()      # constructions that are elements of a ModuleList
        for holder in self.facts.classes.values():
            if holder is cls:
                continue
            holder_facts = self.facts.of(holder)
            attrs = {a.attr for a in holder_facts.assignments
                     if isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Name)
                     and a.value.func.value == name}
            lists: set[str] = set()
            for a in holder_facts.assignments:
                elements = self._module_list_of(a.value, name) if a.method == "__init__" else None
                if elements is not None:
                    lists.add(a.attr)
                    in_lists.update(map(id, elements))
            for holder_method in holder_facts.methods.values():
                self_var = self_name(holder_method)
                targets = {id(t.target) for a in find_all(holder_method.body, cst.Assign)
                           for t in a.targets}
                for node in find_all(holder_method.body, cst.Attribute):
                    attr = self_attr(node, self_var) if self_var is not None else None
                    if attr in lists and id(node) not in targets:
                        why = _element_calls(holder_method, node, calls)
                        if why is not None:
                            return f"self.{attr} of {holder.name.value} {why}"
                    elif attr in attrs:
                        calls_here = [c for c in find_all(holder_method.body, cst.Call)
                                      if c.func is node]
                        if not calls_here and id(node) not in targets:
                            return (f"self.{node.attr.value} of {holder.name.value} is used "
                                    "other than called")
                        calls.extend(calls_here)
            built = built or bool(attrs) or bool(lists)
        references = [n for n in find_all(self.source_module, cst.Name)
                      if n.value == name and n is not cls.name]
        constructions = [c for c in find_all(self.source_module, cst.Call)
                         if isinstance(c.func, cst.Name) and c.func.value == name]
        stored = {id(a.value) for h in self.facts.classes.values()
                  for a in self.facts.of(h).assignments if a.method == "__init__"} | in_lists
        if any(id(c) not in stored for c in constructions) or \
                len(references) != len(constructions):
            return (f"{name} is used other than as `self.<attr> = {name}(...)` or an element of "
                    "`self.<attr> = nn.ModuleList([...])` in __init__")
        if not built:
            return f"{name} is built nowhere in the tree, so its callers are not known"
        params = func.params
        positional = len([*params.posonly_params, *params.params]) - 1
        keywords = {p.name.value for p in [*params.posonly_params, *params.params,
                                           *params.kwonly_params]}
        for call in calls:
            if not _star_free(call):
                return f"a call of {name} unpacks its arguments"
            if len([a for a in call.args if a.keyword is None]) > positional:
                return f"a call of {name} passes more positional arguments than it names"
            if any(a.keyword is not None and a.keyword.value not in keywords for a in call.args):
                return f"a call of {name} passes a keyword it does not name"
        return None

    def _module_list_of(self, value: cst.BaseExpression | None, name: str
                        ) -> list[cst.Call] | None:
        """The constructions of ``name`` in ``nn.ModuleList([name(...), ...])`` or
        ``nn.ModuleList([name(...) for ...])`` (every element one), else None."""
        if not (isinstance(value, cst.Call) and len(value.args) == 1
                and value.args[0].keyword is None and not value.args[0].star
                and qualified_name(value.func, self.facts.imports) in _MODULE_LISTS):
            return None
        listed = value.args[0].value
        elements = ([listed.elt] if isinstance(listed, cst.ListComp)
                    else [e.value for e in listed.elements]
                    if isinstance(listed, cst.List) and not any(
                        isinstance(e, cst.StarredElement) for e in listed.elements) else [])
        if not elements or not all(isinstance(e, cst.Call) and isinstance(e.func, cst.Name)
                                   and e.func.value == name for e in elements):
            return None
        return elements  # type: ignore[return-value]

    def _named_elsewhere(self, name: str) -> str | None:
        """None when no other ``.py`` file of the tree names ``name``; else why it is unknown."""
        files = self._files_naming(name)
        if isinstance(files, str):
            return files
        return f"{files[0][0]} names {name}" if files else None

    def _files_naming(self, name: str) -> list[tuple[str, str]] | str:
        """(path from the tree's root, text) of every other ``.py`` file of the tree that may
        mean this file's ``name``; or why the tree cannot be searched."""
        if name in self._tree_mentions:
            return self._tree_mentions[name]
        found: list[tuple[str, str]] | str
        matches: list[tuple[str, str]] = []
        filename = self.context.filename
        if not filename or not Path(filename).is_file():
            found = "the file's tree is not known"
        else:
            found = matches
            path = Path(filename).absolute()
            root = package_root(path)
            pattern = re.compile(rf"\b{re.escape(name)}\b")
            files = sorted(root.rglob("*.py"))
            if len(files) > _MAX_TREE_FILES:
                found = f"the tree is too large to search ({len(files)} files)"
            for other in files if isinstance(found, list) else []:
                if other == path or any(part.startswith(".") or part == "site-packages"
                                        for part in other.relative_to(root).parts):
                    continue
                try:
                    text = other.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                if pattern.search(text) and _may_mean_ours(text, name, path.stem):
                    matches.append((other.relative_to(root).as_posix(), text))
        self._tree_mentions[name] = found
        return found


class _Replace(cst.CSTTransformer):
    """Calls, subscripts and statement lines of the tree visited (by identity) replaced: a
    call or a subscript by an expression, a line by several statements (none: removed)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[int, cst.BaseExpression] = {}
        self.lines: dict[int, Sequence[cst.BaseStatement]] = {}

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self.calls.get(id(original_node), updated_node)

    def leave_Subscript(self, original_node: cst.Subscript,
                        updated_node: cst.Subscript) -> cst.BaseExpression:
        return self.calls.get(id(original_node), updated_node)

    def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        new = self.lines.get(id(original_node))
        if new is None:
            return updated_node
        return cst.FlattenSentinel(new) if new else cst.RemovalSentinel.REMOVE


def _only_read_from(func: cst.FunctionDef, name: str, wrapper: Wrapper) -> bool:
    """Every binding of the local ``name`` in ``func`` is ``name = kwargs["name"]``: it
    becomes the parameter of that name."""
    reads = {id(sub) for sub, key in wrapper.reads if key == name}
    bindings = [a for a in find_all(func.body, cst.Assign)
                if any(n.value == name for t in a.targets for n in find_all(t.target, cst.Name))]
    bound = {name} & {n.value for node in find_all(func.body, cst.For, cst.With, cst.NamedExpr)
                      for n in find_all(node, cst.Name)}
    return bool(reads) and not bound and all(
        len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name)
        and id(a.value) in reads for a in bindings)


def _named_keywords(wrapper: Wrapper, func: cst.FunctionDef, replace: _Replace) -> None:
    """``kwargs["context"]`` becomes ``context``; ``kwargs.update(context=c)`` becomes
    ``context = c``; a line left as ``context = context`` goes where its block keeps another
    statement."""
    for sub, key in wrapper.reads:
        replace.calls[id(sub)] = cst.Name(key)
    siblings = {id(line): len(block.body) for block in find_all(func.body, cst.IndentedBlock)
                for line in block.body}
    for line, call in wrapper.updates:
        assigned = [cst.parse_statement(f"{a.keyword.value} = {code_of(a.value)}\n")
                    for a in call.args if a.keyword is not None
                    and not (isinstance(a.value, cst.Name) and a.value.value == a.keyword.value)]
        if assigned:
            assigned[0] = assigned[0].with_changes(leading_lines=line.leading_lines)
        replace.lines[id(line)] = assigned if assigned or siblings.get(id(line), 1) > 1 \
            else [cst.parse_statement("pass\n")]
    for line in find_all(func.body, cst.SimpleStatementLine):
        small = line.body[0] if len(line.body) == 1 else None
        if (isinstance(small, cst.Assign) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
                and any(small.value is sub and key == small.targets[0].target.value
                        for sub, key in wrapper.reads)
                and siblings.get(id(line), 1) > 1):
            replace.lines[id(line)] = []


def _imports_before_from_imports(module: cst.Module) -> cst.Module:
    """``import inspect`` placed right after a ``from typing import ...`` this rule's typing
    names added moves above it, as isort orders a section (plain imports first)."""
    body = list(module.body)
    for k in range(1, len(body)):
        line, before = body[k], body[k - 1]
        if (isinstance(line, cst.SimpleStatementLine) and code_of(line).strip() == "import inspect"
                and isinstance(before, cst.SimpleStatementLine)
                and isinstance(before.body[0], cst.ImportFrom)
                and code_of(before).strip().startswith("from typing import")):
            body[k - 1] = line.with_changes(leading_lines=before.leading_lines)
            body[k] = before.with_changes(leading_lines=line.leading_lines)
            return module.with_changes(body=body)
    return module


def _may_mean_ours(text: str, name: str, stem: str) -> bool:
    """Whether a file that names ``name`` may mean the class of this file (module ``stem``):
    an import of the name from a module whose path names ``stem``, an attribute ``.name`` of a
    file that names ``stem``, or a bare mention where the file defines no class of that name
    (two packages of one tree with a ``PreNorm`` each are not confused)."""
    word = re.escape(name)
    imports = re.findall(rf"^[^\n#]*\bimport\b[^\n]*\b{word}\b[^\n]*", text, re.MULTILINE)
    if any(re.search(rf"\b{re.escape(stem)}\b", line) for line in imports):
        return True
    if re.search(rf"\.{word}\b", text) and re.search(rf"\b{re.escape(stem)}\b", text):
        return True
    if imports:
        return False
    return re.search(rf"^\s*class {word}\b", text, re.MULTILINE) is None


_MODULE_LISTS = ("torch.nn.ModuleList", "torch.nn.modules.container.ModuleList")


def _element_calls(method: cst.FunctionDef, node: cst.Attribute,
                   calls: list[cst.Call]) -> str | None:
    """Collect into ``calls`` the calls of the elements of the ModuleList ``node`` reads in
    ``method``: ``for block in self.blocks: x = block(x)`` or ``self.blocks[i](x)``
    (``len(self.blocks)`` calls none); None when that is every use, else why not."""
    parents = parent_map(method)
    parent = parents.get(id(node))
    if isinstance(parent, cst.Arg):
        call = parents.get(id(parent))
        if (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)
                and call.func.value == "len" and len(call.args) == 1):
            return None
    if isinstance(parent, cst.Subscript) and parent.value is node:
        caller = parents.get(id(parent))
        if isinstance(caller, cst.Call) and caller.func is parent:
            calls.append(caller)
            return None
        return "is indexed other than to call an element"
    if isinstance(parent, cst.For) and parent.iter is node and isinstance(parent.target,
                                                                           cst.Name):
        element = parent.target.value
        uses = [n for n in find_all(parent.body, cst.Name) if n.value == element]
        called = [c for c in find_all(parent.body, cst.Call)
                  if isinstance(c.func, cst.Name) and c.func.value == element]
        if len(uses) != len(called) or parent.orelse is not None:
            return f"is iterated, and `{element}` is used other than called"
        calls.extend(called)
        return None
    return "is used other than iterated, indexed to call an element, or measured with len()"


def _replaced(func: cst.FunctionDef, calls: dict[int, cst.Call]) -> cst.FunctionDef:
    result = func.visit(ReplaceById(calls))
    assert isinstance(result, cst.FunctionDef)
    return result

