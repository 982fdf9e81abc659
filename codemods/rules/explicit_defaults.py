"""``explicit-defaults``: calls of exported methods pass the defaults TorchScript drops.

What it does
    In the methods TorchScript compiles (``forward()``, ``@torch.jit.export`` methods and the
    methods they call; not code under ``if not torch.jit.is_scripting():``), a call
    ``self.<method>(...)`` of a method of the same class that is decorated
    ``@torch.jit.export``, ``@torch.jit.ignore`` or ``@torch.jit.unused`` and that leaves out
    parameters with a default gets those defaults written into the call: by keyword for an
    exported method (``self.project(x)`` -> ``self.project(x, alpha=0.5)``), positionally for
    an ignored or unused one (``self.project(x, 0.5)``). Only literal defaults are written: a
    number, string, bool, None, or a tuple of those.

Why it breaks export
    Measured on torch 2.13: when compiled code calls an exported, ignored or unused method of
    its own class, TorchScript binds the call against a signature without the defaults, and a
    left-out argument fails: "project(__torch__.Net self, Tensor x, float alpha) -> Tensor:
    Argument alpha not provided.", annotated or not, whichever method is defined first. Plain
    methods, static methods, module-level functions and the exported methods of a submodule
    keep their defaults (they script once their parameters are annotated). An ignored method
    also fails when the scripted module runs if a call passes it a keyword argument, so those
    calls get the defaults positionally. ``torch.export`` runs the Python call as written.

Example
    Before::

        @torch.jit.export
        def project(self, x, alpha: float = 0.5):
            return x * alpha

        def forward(self, x):
            return self.project(x)

    After::

        @torch.jit.export
        def project(self, x, alpha: float = 0.5):
            return x * alpha

        def forward(self, x):
            return self.project(x, alpha=0.5)

Fix safety
    A literal number, string, bool, None or tuple of those is the same immutable value whether
    Python evaluates it once when the method is defined or at every call, so the call computes
    the same. Refused, with the reason (``tsfix check`` shows it, TSF241): a default that is not
    such a literal (a list, an expression, a name: it may be mutable or evaluate to another
    value at the call), a call with ``*args``/``**kwargs``, a left-out positional-only
    parameter, and a call of an ignored method that passes a keyword argument already. If the
    method's default is changed later, the rewritten call keeps passing the old value. A
    class that calls an ``@torch.jit.ignore`` method scripts and runs from Python but cannot
    be saved (``torch.jit.save`` fails on the Python call), so validation expects that.
"""

from __future__ import annotations

import ast

import libcst as cst
from tsfix.codemods.facts.classes import is_exported, is_ignored
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    decorator_names,
    find_all,
    literal_type,
    self_attr,
    self_name,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_CODE = "TSF241"
_DECORATORS = ("export", "ignore", "unused")


def _is_literal(expr: cst.BaseExpression) -> bool:
    """A number, string, bool or None literal, or a tuple of those: immutable, and the same
    value wherever it is evaluated."""
    if literal_type(expr) is not None:
        return True
    if isinstance(expr, cst.Name):
        return expr.value == "None"
    if isinstance(expr, cst.Tuple):
        return all(isinstance(e, cst.Element) and _is_literal(e.value) for e in expr.elements)
    return False


def _kind(func: cst.FunctionDef) -> str | None:
    """How TorchScript binds a compiled call of this method without its defaults: "export",
    "ignore" (ignored or unused), or None when it keeps them."""
    if is_exported(func):
        return "export"
    if is_ignored(func):
        return "ignore"
    return None


class ExplicitDefaults(Rule):
    __doc__ = __doc__
    name = "explicit-defaults"
    # --rule all order: after lift-branch (70) and variable-arguments (95), which add
    # parameters with defaults to exported methods and rewrite signatures, so their calls are
    # completed too; before annotate (100), which then types the parameter from the same
    # literal default the call now passes.
    order = 96
    targets = ("torchscript", "onnx")
    off_target = ("torch.export runs the Python call as written, defaults included: the "
                  "original exports as it is")
    CODES = (
        Code(_CODE, "default-not-passed", "call of an exported method relying on its default",
             "Compiled code that calls an @torch.jit.export (or @torch.jit.ignore / unused) "
             "method of its own class gets no default arguments: a left-out argument fails "
             "(\"project(...) -> Tensor: Argument alpha not provided.\"), even when the "
             "parameter is annotated. Pass the default at the call (`self.project(x, "
             "alpha=0.5)`; positionally for an ignored method, which fails at run time on a "
             "keyword argument). `explicit-defaults` does this for literal defaults. "
             "torch.export is not affected: it runs the Python call."),
    )
    summary = ("A compiled call of an @torch.jit.export (or ignored) method of the class that "
               "leaves out defaulted arguments passes the literal defaults explicitly")

    VALID = (
        # A plain method keeps its defaults in TorchScript.
        """
import torch
from torch import nn
class M(nn.Module):
    def project(self, x, alpha: float = 0.5):
        return x * alpha
    def forward(self, x):
        return self.project(x)
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
class M(nn.Module):
    @torch.jit.export
    def project(self, x, alpha: float = 0.5, dims=(0, 1), mode="a"):
        return x * alpha
    def forward(self, x):
        return self.project(x, mode="b")
""",
            """
import torch
from torch import nn
class M(nn.Module):
    @torch.jit.export
    def project(self, x, alpha: float = 0.5, dims=(0, 1), mode="a"):
        return x * alpha
    def forward(self, x):
        return self.project(x, mode="b", alpha=0.5, dims=(0, 1))
""",
        ),
        Example(
            """
import torch
from torch import nn
class M(nn.Module):
    @torch.jit.ignore
    def log(self, x, scale: float = 2.0, tag: str = "x"):
        return x * scale
    def forward(self, x):
        return self.log(x)
""",
            """
import torch
from torch import nn
class M(nn.Module):
    @torch.jit.ignore
    def log(self, x, scale: float = 2.0, tag: str = "x"):
        return x * scale
    def forward(self, x):
        return self.log(x, 2.0, "x")
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        # A method of a class with a default and an export/ignore/unused decorator.
        for node in file.tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if (isinstance(item, ast.FunctionDef)
                        and (item.args.defaults or any(item.args.kw_defaults))
                        and any(ast.unparse(d).rpartition(".")[2].split("(")[0] in _DECORATORS
                                for d in item.decorator_list)):
                    return True
        return False

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        callees = {name: func for name, func in facts.methods.items()
                   if _kind(func) is not None and name not in facts.redefined}
        if not callees:
            return cls
        added: dict[int, list[cst.Arg]] = {}
        parts: list[str] = []
        ignored_called = False
        for method, func in facts.compiled_methods():
            self_var = self_name(func)
            if self_var is None:
                continue
            for call in find_all(func.body, cst.Call):
                callee = self_attr(call.func, self_var)
                if callee not in callees or not facts.is_compiled(method, call):
                    continue
                extra = self._left_out(cls.name.value, method, call, callees[callee])
                if extra:
                    added[id(call)] = extra
                    ignored_called |= any(name.endswith("jit.ignore")
                                          for name in decorator_names(callees[callee]))
                    passed = ", ".join(code_of(arg).rstrip(", ") for arg in extra)
                    parts.append(f"line {self.line_of(call)}: self.{callee}() is passed "
                                 f"{passed}")
        if not added:
            return cls
        rewritten = cls.visit(_AddArguments(added))
        assert isinstance(rewritten, cst.ClassDef)
        # A call of an ignored method runs from Python only: the artifact cannot be saved.
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), python_only=ignored_called))
        return rewritten

    def _left_out(self, where: str, method: str, call: cst.Call,
                  callee: cst.FunctionDef) -> list[cst.Arg]:
        """The arguments to add to ``call`` for the defaults it leaves out (none when it
        leaves out nothing or the rule refuses, saying why)."""
        params = callee.params
        if not isinstance(params.star_arg, cst.MaybeSentinel) or params.star_kwarg is not None:
            return []          # variable arguments: not a signature TorchScript binds
        positional = [*params.posonly_params, *params.params]
        if self_name(callee) is not None:
            positional = positional[1:]
        passed = [a for a in call.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value for a in call.args if a.keyword is not None}
        missing = [p for p in [*positional[len(passed):], *params.kwonly_params]
                   if p.default is not None and p.name.value not in keywords]
        if not missing:
            return []
        name = callee.name.value
        kind = _kind(callee)
        names = ", ".join(f"`{p.name.value}`" for p in missing)
        message = (f"{method}() calls {name}(), an @torch.jit.{kind} method, without {names}: "
                   "TorchScript keeps no defaults for it (\"Argument "
                   f"{missing[0].name.value} not provided\")")
        refusal = self._refusal(call, callee, missing, bool(keywords))
        if refusal is not None:
            self.skip(where, call, refusal, code=_CODE, message=message)
            return []
        self.fixed(call, _CODE, message)
        defaults = [cst.parse_expression(code_of(p.default)) for p in missing
                    if p.default is not None]
        if kind == "export":
            no_space = cst.SimpleWhitespace("")
            return [cst.Arg(value, keyword=cst.Name(p.name.value),
                            equal=cst.AssignEqual(no_space, no_space))
                    for p, value in zip(missing, defaults, strict=True)]
        return [cst.Arg(value) for value in defaults]

    @staticmethod
    def _refusal(call: cst.Call, callee: cst.FunctionDef, missing: list[cst.Param],
                 keywords: bool) -> str | None:
        if any(a.star for a in call.args):
            return ("the call passes *args or **kwargs: which parameters it leaves out is not "
                    "known")
        odd = next((p for p in missing if p.default is not None
                    and not _is_literal(p.default)), None)
        if odd is not None and odd.default is not None:
            return (f"the default of `{odd.name.value}` (`{code_of(odd.default)}`) is not a "
                    "number, string, bool, None or tuple of those: written at the call it may "
                    "be another object or value than the one Python evaluated once with the "
                    "method")
        posonly = {id(p) for p in callee.params.posonly_params}
        kwonly = {id(p) for p in callee.params.kwonly_params}
        if _kind(callee) == "export":
            if any(id(p) in posonly for p in missing):
                return "a left-out parameter is positional-only: it cannot be passed by keyword"
        elif keywords or any(id(p) in kwonly for p in missing):
            return (f"{callee.name.value}() is ignored or unused, and the scripted module fails "
                    "when a call passes it a keyword argument (measured on torch 2.13): pass "
                    "its arguments positionally")
        return None


def _with_args(call: cst.Call, extra: list[cst.Arg]) -> cst.Call:
    """``call`` with ``extra`` appended, laid out like its arguments: after a trailing comma
    (often one argument per line) each new argument gets one too."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=extra)
    last = args[-1]
    if isinstance(last.comma, cst.MaybeSentinel):
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return call.with_changes(args=[*args, *extra])
    opening = call.whitespace_before_args
    between = cst.Comma(whitespace_after=opening if isinstance(
        opening, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" "))
    args[-1] = last.with_changes(comma=between)
    added = [arg.with_changes(comma=between) for arg in extra[:-1]]
    return call.with_changes(args=[*args, *added, extra[-1].with_changes(comma=last.comma)])


class _AddArguments(cst.CSTTransformer):
    def __init__(self, added: dict[int, list[cst.Arg]]) -> None:
        self.added = added

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        extra = self.added.get(id(original_node))
        return updated_node if extra is None else _with_args(updated_node, extra)
