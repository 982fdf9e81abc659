"""``none-helpers``: calls of one-line None helpers (``exists(v)``, ``default(v, d)``) in compiled
methods become the test they stand for.

What it does
    Model code in the einops style defines two helpers at module level and calls them
    everywhere::

        def exists(val):
            return val is not None

        def default(val, d):
            return val if exists(val) else d

    In compiled methods (``forward()``, ``@torch.jit.export`` methods and the methods they
    call), each call of such a helper of the same file is replaced by the helper's body with
    the call's arguments: ``exists(mask)`` becomes ``mask is not None`` and ``default(context,
    x)`` becomes ``context if context is not None else x``. A helper is recognized by its body
    alone, whatever its name: one ``return`` of ``p is not None`` (or ``p is None``), or of ``p
    if <p is not None> else d`` / ``d if <p is None> else p`` where the test is written out or
    is a call of an ``exists``-shaped helper. The helper itself stays (``__init__`` and other
    uncompiled code keep calling it).

Why it breaks export
    TorchScript compiles a called function once, with its unannotated parameters typed
    ``Tensor``: ``exists(None)``, ``exists(self.norm)`` or ``default(context, x)`` with an
    ``Optional[Tensor]`` fails ("exists(Tensor val) -> bool: Expected a value of type 'Tensor'
    for argument 'val' but instead found type 'Optional[Tensor]'"), and no one annotation of
    the helper fits all its callers. Written out at the call, the test is on the caller's own
    value, and TorchScript refines an ``Optional`` by it (``context = context if context is
    not None else x`` scripts, measured on torch 2.13).

Example
    Before::

        def forward(self, x, context=None):
            context = default(context, x)
            if exists(self.norm):
                x = self.norm(x)

    After::

        def forward(self, x, context=None):
            context = context if context is not None else x
            if self.norm is not None:
                x = self.norm(x)

Fix safety
    The expressions compute what the helper returned. ``default``'s value is evaluated twice
    (tested, then returned), so it must be a name or an attribute (``ctx``, ``self.depth``);
    its fallback is evaluated only when needed instead of before the call, so it must have no
    effect of its own (a name, an attribute, a literal, a list or tuple of those, arithmetic of
    those: glom-pytorch's ``default(iters, self.levels * 2)``): a call such as
    ``default(noise, torch.randn_like(x))`` is left alone with the reason (skipping the random
    draw would change every later one). Arithmetic that would raise (``None * 2``, tensors of
    shapes that do not broadcast) raised before whatever the value; now only when the value is
    None: a call that failed may work, none that worked fails or computes otherwise. Left
    alone too: a helper re-bound in the method or file, a call with keywords or ``*args``, and
    a helper defined in another file.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    names_bound_in,
    parent_map,
    short_source,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

TSF244 = "TSF244"
EXISTS, MISSING, DEFAULT = "exists", "missing", "default"


@dataclass(frozen=True)
class Helper:
    """A module-level one-line None helper: what its body computes from its parameters."""

    kind: str           # EXISTS (p is not None), MISSING (p is None) or DEFAULT
    name: str


def _single_return(func: cst.FunctionDef) -> cst.BaseExpression | None:
    body = func.body
    statements = body.body if isinstance(body, cst.IndentedBlock) else [body]
    lines = [s for s in statements
             if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                     and isinstance(s.body[0], cst.Expr)
                     and isinstance(s.body[0].value, cst.SimpleString))]   # a docstring
    if len(lines) != 1:
        return None
    line = lines[0]
    small = line.body if isinstance(line, cst.SimpleStatementLine | cst.SimpleStatementSuite) \
        else ()
    if len(small) != 1 or not isinstance(small[0], cst.Return) or small[0].value is None:
        return None
    return small[0].value


def _none_test(expr: cst.BaseExpression, exists_helpers: set[str]) -> tuple[str, str] | None:
    """(parameter, ``is not None`` / ``is None``) when ``expr`` tests a name against None,
    directly or by calling an exists-shaped helper."""
    if (isinstance(expr, cst.Comparison) and isinstance(expr.left, cst.Name)
            and len(expr.comparisons) == 1):
        target = expr.comparisons[0]
        if isinstance(target.comparator, cst.Name) and target.comparator.value == "None":
            if isinstance(target.operator, cst.IsNot):
                return expr.left.value, EXISTS
            if isinstance(target.operator, cst.Is):
                return expr.left.value, MISSING
    if (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name)
            and expr.func.value in exists_helpers and len(expr.args) == 1
            and not expr.args[0].keyword and not expr.args[0].star
            and isinstance(expr.args[0].value, cst.Name)):
        return expr.args[0].value.value, EXISTS
    if (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not)):
        inner = _none_test(expr.expression, exists_helpers)
        if inner is not None:
            return inner[0], MISSING if inner[1] == EXISTS else EXISTS
    return None


def _helper_kind(func: cst.FunctionDef, exists_helpers: set[str]) -> str | None:
    params = func.params
    if (func.decorators or func.asynchronous or params.star_arg is not cst.MaybeSentinel.DEFAULT
            or params.star_kwarg or params.kwonly_params or params.posonly_params
            or any(p.default is not None for p in params.params)):
        return None
    names = [p.name.value for p in params.params]
    value = _single_return(func)
    if value is None:
        return None
    if len(names) == 1:
        test = _none_test(value, set())
        return test[1] if test is not None and test[0] == names[0] else None
    if len(names) == 2 and isinstance(value, cst.IfExp):
        test = _none_test(value.test, exists_helpers)
        if test is None or test[0] != names[0]:
            return None
        kept, fallback = ((value.body, value.orelse) if test[1] == EXISTS
                          else (value.orelse, value.body))
        if (isinstance(kept, cst.Name) and kept.value == names[0]
                and isinstance(fallback, cst.Name) and fallback.value == names[1]):
            return DEFAULT
    return None


def none_helpers(module: cst.Module) -> dict[str, Helper]:
    """The module's one-line None helpers by name (a name bound twice at top level is none)."""
    functions: dict[str, cst.FunctionDef] = {}
    seen: set[str] = set()
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            name = statement.name.value
            if name in seen:
                functions.pop(name, None)
            else:
                functions[name] = statement
            seen.add(name)
    exists_helpers = {name for name, func in functions.items()
                      if _helper_kind(func, set()) == EXISTS}
    found = {}
    for name, func in functions.items():
        kind = _helper_kind(func, exists_helpers)
        if kind is not None:
            found[name] = Helper(kind, name)
    return found


def _pure_reference(expr: cst.BaseExpression) -> bool:
    """A name or an attribute of one: reading it twice gives the same value, with no effect."""
    if isinstance(expr, cst.Name):
        return True
    return isinstance(expr, cst.Attribute) and _pure_reference(expr.value)


def _without_effects(expr: cst.BaseExpression, helpers: Mapping[str, Helper]) -> bool:
    """Evaluating ``expr`` has no effect: skipping it changes nothing but its value (a call of
    a None helper on such values is written out too: ``default(a, default(b, x))``)."""
    if _pure_reference(expr) or isinstance(expr, cst.BaseNumber | cst.SimpleString):
        return True
    if isinstance(expr, cst.List | cst.Tuple):
        return all(not isinstance(e, cst.StarredElement) and _without_effects(e.value, helpers)
                   for e in expr.elements)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        return expr.func.value in helpers and all(
            not a.keyword and not a.star and _without_effects(a.value, helpers)
            for a in expr.args)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return isinstance(expr.expression, cst.BaseNumber)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _ARITHMETIC):
        return (_without_effects(expr.left, helpers)
                and _without_effects(expr.right, helpers))
    return False


# Operators whose result depends only on their operands (numbers and tensors have no effect
# in them; what raises raised before too, see the docstring's Fix safety).
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo,
               cst.Power)


# Where a comparison or a conditional expression can stand without parentheses.
_LOOSE_PARENTS = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return, cst.Arg, cst.Element,
                  cst.Expr)
_TEST_PARENTS = (cst.If, cst.While, cst.Assert, cst.BooleanOperation)


def _parenthesized(expr: cst.BaseExpression, parent: cst.CSTNode | None,
                   call: cst.Call) -> cst.BaseExpression:
    if call.lpar:       # the call was in parentheses already: they stay
        return expr.with_changes(lpar=call.lpar, rpar=call.rpar)
    loose = isinstance(parent, _LOOSE_PARENTS)
    if isinstance(expr, cst.Comparison):
        loose = loose or isinstance(parent, _TEST_PARENTS) or (
            isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)
        ) or (isinstance(parent, cst.IfExp) and parent.test is call)
    if loose:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class _Inline(cst.CSTTransformer):
    """Replaces the planned calls, inner ones first (``default(x, default(y, z))``)."""

    def __init__(self, plans: Mapping[int, tuple[Helper, cst.CSTNode | None]]) -> None:
        self.plans = plans
        self.negated: set[int] = set()     # ids of `not <call>` whose test is turned around

    def leave_UnaryOperation(self, original: cst.UnaryOperation, updated: cst.UnaryOperation
                             ) -> cst.BaseExpression:
        # `not exists(v)` reads `v is None`, not `not v is not None`.
        if id(original) not in self.negated or not isinstance(updated.expression,
                                                              cst.Comparison):
            return updated
        test = updated.expression
        target = test.comparisons[0]
        flipped = cst.Is() if isinstance(target.operator, cst.IsNot) else cst.IsNot()
        return test.with_changes(comparisons=[target.with_changes(operator=flipped)],
                                 lpar=updated.lpar, rpar=updated.rpar)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        plan = self.plans.get(id(original))
        if plan is None:
            return updated
        helper, parent = plan
        args = [a.value for a in updated.args]
        expr: cst.BaseExpression
        if helper.kind in (EXISTS, MISSING):
            if (isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)
                    and not original.lpar):
                self.negated.add(id(parent))
            operator: cst.BaseCompOp = cst.IsNot() if helper.kind == EXISTS else cst.Is()
            expr = cst.Comparison(args[0], [cst.ComparisonTarget(operator, cst.Name("None"))])
        else:
            test = cst.Comparison(args[0], [cst.ComparisonTarget(cst.IsNot(),
                                                                 cst.Name("None"))])
            expr = cst.IfExp(test=test, body=args[0], orelse=args[1])
        return _parenthesized(expr, parent, original)


class NoneHelpers(Rule):
    __doc__ = __doc__
    name = "none-helpers"
    # --rule all order: early, before the rules that type parameters (annotate reads the
    # written-out `x is not None` tests) and before lift-branch reads the tests.
    order = 4
    targets = ("torchscript",)
    off_target = ("torch.export and the ONNX exporters run the Python as written: the "
                  "helpers are called as they are")
    CODES = (
        Code(TSF244, "none-helper-call", "call of a one-line None helper in compiled code",
             "TorchScript compiles `exists(val): return val is not None` (and `default(val, "
             "d)`) once, with `val` typed Tensor: a call with None, an Optional or a module "
             "fails (\"exists(Tensor val) -> bool: Expected a value of type 'Tensor' for "
             "argument 'val'\"). Write the test at the call: `val is not None`, `val if val is "
             "not None else d`."),
    )
    summary = ("Calls of one-line None helpers (exists(v), default(v, d)) in compiled methods "
               "become the test they stand for")

    VALID = (
        # A helper that does more than a None test is a function of its own.
        """
import torch
from torch import nn
def exists(val):
    return val is not None and val.numel() > 0
class M(nn.Module):
    def forward(self, x, mask=None):
        if exists(mask):
            x = x * mask
        return x
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
def exists(val):
    return val is not None
def default(val, d):
    return val if exists(val) else d
class M(nn.Module):
    def __init__(self, norm=True):
        super().__init__()
        self.norm = nn.LayerNorm(4) if norm else None
    def forward(self, x, context=None):
        context = default(context, x)
        if exists(self.norm):
            x = self.norm(x)
        return x + context, not exists(self.norm)
""",
            """
import torch
from torch import nn
def exists(val):
    return val is not None
def default(val, d):
    return val if exists(val) else d
class M(nn.Module):
    def __init__(self, norm=True):
        super().__init__()
        self.norm = nn.LayerNorm(4) if norm else None
    def forward(self, x, context=None):
        context = context if context is not None else x
        if self.norm is not None:
            x = self.norm(x)
        return x + context, self.norm is None
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        helpers = {node.name for node in file.tree.body
                   if isinstance(node, ast.FunctionDef) and _returns_none_test(node)}
        # Only their calls by name in compiled methods are written out.
        return bool(helpers) and any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in helpers for node in file.compiled_nodes())

    def prepare(self, module: cst.Module) -> None:
        self.helpers = none_helpers(module)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.helpers or not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        plans: dict[int, tuple[Helper, cst.CSTNode | None]] = {}
        parts: list[str] = []
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            calls = [c for c in find_all(func.body, cst.Call)
                     if isinstance(c.func, cst.Name) and c.func.value in self.helpers
                     and id(c) not in skipped]
            if not calls:
                continue
            rebound = names_bound_in(func)
            parents = parent_map(func)
            count = 0
            for call in calls:
                helper = self.helpers[call.func.value]
                message = f"`{short_source(call)}` calls the None helper {helper.name}()"
                reason = self._refusal(call, helper, rebound)
                if reason is not None:
                    self.skip(facts.name, call, f"{method}(): {message}; left alone: {reason}",
                              code=TSF244, message=message)
                    continue
                self.fixed(call, TSF244, message)
                plans[id(call)] = (helper, parents.get(id(call)))
                count += 1
            if count:
                parts.append(f"{method}(): {count} call(s) of None helpers written out")
        if not plans:
            return cls
        rewritten = cls.visit(_Inline(plans))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts)))
        return rewritten

    def _refusal(self, call: cst.Call, helper: Helper, rebound: set[str]) -> str | None:
        if helper.name in rebound:
            return f"{helper.name} is re-bound in the method"
        wanted = 1 if helper.kind in (EXISTS, MISSING) else 2
        if len(call.args) != wanted or any(a.keyword or a.star for a in call.args):
            return f"it is not called with {wanted} positional argument(s)"
        value = call.args[0].value
        if helper.kind in (EXISTS, MISSING):
            if not isinstance(value, cst.Name | cst.Attribute | cst.Subscript | cst.Call):
                return f"`{code_of(value)}` would need parentheses to be tested"
            return None
        if not _pure_reference(value):
            return (f"`{code_of(value)}` is not a name or an attribute: written out, it would "
                    "be evaluated twice")
        fallback = call.args[1].value
        if not _without_effects(fallback, self.helpers):
            return (f"the fallback `{code_of(fallback)}` would be evaluated only when "
                    f"{code_of(value)} is None, and computing it may have an effect or "
                    "raise (it is not a name, an attribute, a literal or such a call)")
        return None


_NONE_TEST = re.compile(r"\bis\s+(not\s+)?None\b|\bexists\(")


def _returns_none_test(node: ast.FunctionDef) -> bool:
    """The cheap look: a module-level function whose body is one return of a None test."""
    body = [s for s in node.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return (len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None
            and _NONE_TEST.search(ast.unparse(body[0].value)) is not None)
