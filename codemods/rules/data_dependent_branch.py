"""``data-dependent-branch``: under ``--target export``, an ``if`` on a tensor value in
``forward()`` (or a method it calls) becomes ``torch.cond``; values read out of tensors where
``torch.export`` needs a Python number are reported with the hand fix.

What it does
    In ``forward()`` and the methods it calls through ``self`` (``@torch.jit.ignore`` ones
    too: torch.export runs them; not the body of ``if torch.jit.is_scripting():``, which it
    does not), it finds the ``if`` statements whose test is a tensor::

        if mask.any():                     if y.abs().max() > self.limit:
        if torch.isnan(x).any():           if x.sum() > 0:           if bool(t):
        if not mask.any():                 if mask.any() and x.sum() > 0:

    A value is a tensor when it can be shown to be one: a parameter TorchScript would type
    ``Tensor`` (annotated so, or used as one and without a default), a local assigned from a
    torch function, a tensor method or a ``torch.nn`` layer, a registered buffer or parameter,
    and what tensor methods, indexing and arithmetic make of those. ``if self.flag``, ``if x
    is None``, ``if len(xs) > 2``, ``if x.size(0) > 1`` and ``if self.training`` are Python
    values and stay. Each branch becomes ``torch.cond(pred, true_fn, false_fn, operands)``
    (the same form ``lift-branch`` writes under this target, built by
    :mod:`~tsfix.codemods.rules.torch_cond`): ``not p`` is ``torch.logical_not(p)``, ``a and
    b``/``a or b`` of two tensor tests ``torch.logical_and/or``, ``bool(t)`` is ``t``.

    Reported and left (``TSF227``): a number read out of a tensor where export must know it
    while tracing: ``int(t)``/``float(t)`` of a tensor (any use), and a ``.item()`` or
    ``.tolist()`` value in ``range()`` or in an ``if``/``while``/conditional-expression test.

Why it breaks export
    ``torch.export`` traces forward once with symbolic tensors: Python cannot take both paths
    of an ``if`` on a tensor, so export fails with "Could not guard on data-dependent
    expression" (measured on torch 2.13 for every test above, and for a registered buffer or
    parameter compared in an ``if``). ``int(t)`` fails with "Could not extract specialized
    integer from data-dependent expression", ``float(t)`` with "Could not guard on
    data-dependent expression", ``range(n.item())`` like ``int()``, and an ``.item()`` value
    in a test like a tensor. ``torch.cond`` records both branches: one exported program serves
    inputs that take either side. ``.item()`` as a size, a slice bound or a ``view``/
    ``repeat``/``narrow`` argument, ``.tolist()`` iterated or indexed, and ``assert
    n.item() > 0`` all export (one program serves every value) and are not reported.

Example
    Before::

        def forward(self, x, mask):
            if mask.any():
                x = x.masked_fill(mask, 0.0)
            return self.proj(x)

    After::

        def forward(self, x, mask):
            def mask_any_true(x, mask):
                x = x.masked_fill(mask, 0.0)
                return x

            def mask_any_false(x, mask):
                return x.clone()

            x = torch.cond(mask.any(), mask_any_true, mask_any_false, (x, mask))
            return self.proj(x)

Fix safety
    Eager results are the same: ``torch.cond`` called eagerly runs the branch the predicate
    picks; an unchanged value is returned as a copy. ``logical_and``/``logical_or`` evaluate
    both tests where ``and``/``or`` stopped after the first: only pure tensor tests are
    combined. ``torch.cond`` does not script: this rule serves ``--target export`` only.
    Refused with the reason (``TSF226``, file unchanged there): what ``torch.cond`` cannot
    express (a side that returns, raises, breaks, or assigns only Python values; sides whose
    outputs differ in kind), a test mixing a Python value and a tensor in ``and``/``or``, a
    chained comparison, a ``while`` loop or a conditional expression on a tensor (use
    ``torch.where``). A test whose Python part comes first (``not self.training or keep[i] >
    p``) is reported without the code: export specialises the Python value, and when that
    decides the test (eval mode here) the tensor is never read and the model exports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts, scripting_test
from tsfix.codemods.facts.module import module_facts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    decorator_names,
    find_all,
    qualified_name,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import TENSOR, Typer
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import
from tsfix.codemods.rules.torch_cond import CondSite, lower_to_cond

# Tensor methods that return a tensor (of a tensor receiver). ``max``/``min`` only without
# arguments: with a dim they return a (values, indices) pair.
_TENSOR_METHODS = frozenset({
    "any", "all", "sum", "mean", "prod", "std", "var", "norm", "amax", "amin", "abs", "neg",
    "sign", "sqrt", "rsqrt", "exp", "log", "log2", "log10", "pow", "square", "isnan", "isinf",
    "isfinite", "isneginf", "isposinf", "logical_not", "logical_and", "logical_or",
    "logical_xor", "eq", "ne", "gt", "ge", "lt", "le", "count_nonzero", "float", "double",
    "half", "bfloat16", "bool", "int", "long", "to", "type_as", "clone", "detach", "contiguous",
    "flatten", "view", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "masked_fill",
    "clamp", "clamp_min", "clamp_max", "round", "floor", "ceil", "trunc", "relu", "sigmoid",
    "tanh", "softmax", "log_softmax", "cumsum", "diff", "argmax", "argmin", "nonzero", "matmul",
    "mm", "bmm", "add", "sub", "mul", "div", "remainder", "fmod", "maximum", "minimum"})
_REDUCTION_PAIRS = frozenset({"max", "min"})
# torch.* functions that return a tensor of tensor arguments.
_TORCH_FUNCTIONS = frozenset({
    "any", "all", "sum", "mean", "prod", "std", "var", "norm", "amax", "amin", "abs", "sign",
    "sqrt", "exp", "log", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_not",
    "logical_and", "logical_or", "logical_xor", "eq", "ne", "gt", "ge", "lt", "le",
    "count_nonzero", "clamp", "where", "maximum", "minimum", "matmul", "sigmoid", "tanh",
    "relu", "softmax", "cumsum", "argmax", "argmin", "nonzero", "square", "linalg.norm",
    "linalg.vector_norm", "nn.functional.relu", "nn.functional.softmax"})
_TENSOR_ATTRIBUTES = frozenset({"T", "mT", "data", "real", "imag"})
_COMPARISONS = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual,
                cst.Equal, cst.NotEqual)
_NOT_RUN = ("staticmethod", "classmethod", "property")

GUARD_ERROR = "Could not guard on data-dependent expression"
INT_ERROR = "Could not extract specialized integer from data-dependent expression"


# ---- what torch.export runs -------------------------------------------------------------------

def _skipped_under_export(func: cst.FunctionDef, imports: Mapping[str, str]) -> set[int]:
    """ids of the nodes torch.export never runs: the body of ``if torch.jit.is_scripting():``
    and the ``else`` of ``if not torch.jit.is_scripting():`` (export is not scripting)."""
    skipped: set[int] = set()
    for statement in find_all(func.body, cst.If):
        kind = scripting_test(statement.test, imports)
        block = (statement.body if kind == "scripting"
                 else statement.orelse if kind == "eager" else None)
        if block is not None:
            skipped.update(map(id, find_all(block, cst.CSTNode)))  # type: ignore[type-abstract]
    return skipped


def _nested_scopes(func: cst.FunctionDef) -> set[int]:
    """ids of the nodes inside functions, lambdas and classes defined in ``func``: their names
    are their own (and a ``torch.cond`` branch function written by a previous run is one)."""
    inner: set[int] = set()
    for node in find_all(func.body, cst.FunctionDef, cst.Lambda, cst.ClassDef):
        inner.update(map(id, find_all(node, cst.CSTNode)))  # type: ignore[type-abstract]
    return inner


def export_reached(facts: ClassFacts) -> list[str]:
    """``forward`` and the methods it calls through ``self``, transitively: what
    ``torch.export`` traces. Unlike TorchScript's compiled set, ``@torch.jit.ignore`` and
    ``@torch.jit.unused`` methods are run (export runs Python); the body of ``if
    torch.jit.is_scripting():`` is not."""
    methods = facts.methods
    if "forward" not in methods:
        return []
    order = ["forward"]
    for name in order:
        func = methods[name]
        self_var = self_name(func)
        if self_var is None:
            continue
        skipped = _skipped_under_export(func, facts.imports)
        for call in find_all(func.body, cst.Call):
            callee = self_attr(call.func, self_var)
            if (callee in methods and callee not in order and callee != "__init__"
                    and id(call) not in skipped
                    and not any(d.endswith(_NOT_RUN) for d in decorator_names(methods[callee]))):
                order.append(callee)
    return order


# ---- what is a tensor ---------------------------------------------------------------------------

class TensorProof:
    """Whether an expression is a tensor, shown from the method's types and a few tables; any
    doubt is "no"."""

    def __init__(self, typer: Typer, imports: Mapping[str, str]) -> None:
        self.typer = typer
        self.imports = dict(imports)

    def tensor(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Name):
            return self.typer.env.get(node.value) == TENSOR
        if isinstance(node, cst.Attribute):
            self_var = self.typer.self_var
            if self_var and isinstance(node.value, cst.Name) and node.value.value == self_var:
                return self.typer.attributes.get(node.attr.value) == TENSOR
            return node.attr.value in _TENSOR_ATTRIBUTES and self.tensor(node.value)
        if isinstance(node, cst.Subscript):
            return self.tensor(node.value)
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.BinaryOperation):
            return self.tensor(node.left) or self.tensor(node.right)
        if isinstance(node, cst.UnaryOperation):
            return (isinstance(node.operator, cst.Minus | cst.Plus | cst.BitInvert)
                    and self.tensor(node.expression))
        if isinstance(node, cst.Comparison):
            return (len(node.comparisons) == 1
                    and isinstance(node.comparisons[0].operator, _COMPARISONS)
                    and (self.tensor(node.left) or self.tensor(node.comparisons[0].comparator)))
        return False

    def _call(self, node: cst.Call) -> bool:
        func = node.func
        plain = all(a.star == "" for a in node.args)
        if isinstance(func, cst.Attribute):
            receiver = func.value
            self_var = self.typer.self_var
            if self_var and isinstance(receiver, cst.Name) and receiver.value == self_var:
                return func.attr.value in self.typer.layers and plain
            if self.tensor(receiver) and plain:
                method = func.attr.value
                return method in _TENSOR_METHODS or (method in _REDUCTION_PAIRS
                                                     and not node.args)
        name = qualified_name(func, self.imports) or ""
        if not name.startswith("torch.") or not plain:
            return False
        short = name.removeprefix("torch.")
        if short in _REDUCTION_PAIRS:
            return (len(node.args) == 1 and node.args[0].keyword is None
                    and self.tensor(node.args[0].value))
        return short in _TORCH_FUNCTIONS and any(self.tensor(a.value) for a in node.args)


# ---- tests ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Predicate:
    """A test that is a tensor: ``expression`` is what ``torch.cond`` takes, or ``problem``
    says why the test cannot become one."""

    expression: cst.BaseExpression | None
    problem: str | None = None
    # False when Python may decide the test before it reads the tensor (``not self.training
    # or keep[i] > p``: export specialises the Python value, and in eval mode never reads the
    # tensor): then the test is no certain export blocker.
    certain: bool = True


def tensor_predicate(test: cst.BaseExpression, proof: TensorProof,
                     torch_name: str) -> Predicate | None:
    """The ``torch.cond`` predicate for ``test``; None when the test is not about a tensor."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = tensor_predicate(test.expression, proof, torch_name)
        if inner is None or inner.expression is None:
            return inner
        return Predicate(_call(f"{torch_name}.logical_not", inner.expression))
    if isinstance(test, cst.BooleanOperation):
        left = tensor_predicate(test.left, proof, torch_name)
        right = tensor_predicate(test.right, proof, torch_name)
        if left is None and right is None:
            return None
        operator = "and" if isinstance(test.operator, cst.And) else "or"
        for side in (left, right):
            if side is not None and side.problem is not None:
                return side
        if left is None or right is None:
            problem = (f"`{operator}` joins a Python value and a tensor test: torch.cond needs "
                       "one tensor predicate (make both tensors, or split the if)")
            if left is None:
                problem += (f"; export fails only when `{_short(test.left)}` does not decide "
                            "the test on its own")
            return Predicate(None, problem, certain=left is not None)
        assert left.expression is not None and right.expression is not None
        return Predicate(_call(f"{torch_name}.logical_{operator}", left.expression,
                               right.expression))
    if (isinstance(test, cst.Call) and isinstance(test.func, cst.Name)
            and test.func.value == "bool" and len(test.args) == 1
            and test.args[0].keyword is None and not test.args[0].star
            and proof.tensor(test.args[0].value)):
        return Predicate(_bare(test.args[0].value))
    if isinstance(test, cst.Comparison) and len(test.comparisons) > 1:
        operands = [test.left, *(c.comparator for c in test.comparisons)]
        if any(proof.tensor(o) for o in operands):
            return Predicate(None, "a chained comparison on a tensor: write it as "
                             "`torch.logical_and(a < t, t < b)`")
        return None
    if proof.tensor(test):
        return Predicate(_bare(test))
    return None


def _bare(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` without its own parentheses (it becomes an argument)."""
    return node.with_changes(lpar=[], rpar=[]) if node.lpar else node


def _call(func: str, *args: cst.BaseExpression) -> cst.Call:
    call = cst.parse_expression(f"{func}()")
    assert isinstance(call, cst.Call)
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return call.with_changes(args=[cst.Arg(_bare(a), comma=comma if i < len(args) - 1
                                           else cst.MaybeSentinel.DEFAULT)
                                   for i, a in enumerate(args)])


# ---- numbers read out of tensors -----------------------------------------------------------------

@dataclass(frozen=True)
class ScalarUse:
    """A number read out of a tensor where torch.export needs it while tracing."""

    node: cst.CSTNode
    message: str
    fix: str


def _short(node: cst.CSTNode, limit: int = 40) -> str:
    text = " ".join(code_of(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _Scalars:
    """Values read out of tensors in one method (``n.item()``, ``lengths.tolist()``, locals
    holding them) and where they are used."""

    def __init__(self, func: cst.FunctionDef, proof: TensorProof, excluded: set[int]) -> None:
        self.proof = proof
        self.names: set[str] = set()
        assigned: dict[str, list[bool]] = {}
        for node in find_all(func.body, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For):
            if id(node) in excluded:
                continue
            if isinstance(node, cst.Assign):
                value: cst.BaseExpression | None = node.value
                targets = [t.target for t in node.targets]
            elif isinstance(node, cst.For):
                value, targets = node.iter, [node.target]
            else:
                value, targets = node.value, [node.target]
            read = value is not None and self.read(value)
            for target in targets:
                if isinstance(target, cst.Name):
                    assigned.setdefault(target.value, []).append(read)
        # A name counts only when every value it is given is read out of a tensor.
        self.names = {name for name, reads in assigned.items() if all(reads)}

    def read(self, node: cst.BaseExpression) -> bool:
        """Whether ``node`` is a number (or list of numbers) read out of a tensor."""
        if isinstance(node, cst.Name):
            return node.value in self.names
        if isinstance(node, cst.Call):
            func = node.func
            if (isinstance(func, cst.Attribute) and func.attr.value in ("item", "tolist")
                    and not node.args and self.proof.tensor(func.value)):
                return True
            return self.conversion(node) is not None
        if isinstance(node, cst.Subscript):
            return self.read(node.value)
        if isinstance(node, cst.BinaryOperation):
            return self.read(node.left) or self.read(node.right)
        if isinstance(node, cst.UnaryOperation):
            return self.read(node.expression)
        return False

    def conversion(self, node: cst.Call) -> str | None:
        """"int"/"float" for ``int(t)``/``float(t)`` of a tensor or of a value read from one."""
        func = node.func
        if (isinstance(func, cst.Name) and func.value in ("int", "float") and len(node.args) == 1
                and node.args[0].keyword is None and not node.args[0].star):
            value = node.args[0].value
            if self.proof.tensor(value) or self.read(value):
                return func.value
        return None

    def contains_read(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The first read inside ``node``, if any."""
        for inner in find_all(node, cst.Call, cst.Name):
            if isinstance(inner, cst.Call | cst.Name) and self.read(inner):
                return inner
        return None


def scalar_uses(func: cst.FunctionDef, proof: TensorProof,
                excluded: set[int]) -> Iterator[ScalarUse]:
    """``int(t)``/``float(t)`` of tensors, and values read out of tensors in ``range()`` or in
    a test, in ``func`` (outside ``excluded``)."""
    scalars = _Scalars(func, proof, excluded)
    reported: set[int] = set()
    for call in find_all(func.body, cst.Call):
        if id(call) in excluded:
            continue
        kind = scalars.conversion(call)
        if kind is None:
            continue
        reported.update(map(id, find_all(call, cst.CSTNode)))  # type: ignore[type-abstract]
        shown = _short(call)
        if kind == "int":
            yield ScalarUse(call, f"`{shown}` reads an int out of a tensor: torch.export "
                            f"fails with \"{INT_ERROR}\"",
                            "keep it a tensor (`t.long()`, tensor arithmetic); for a size or "
                            "a slice bound `t.item()` exports (one program serves every "
                            "value; add `torch._check_is_size(n)` if export asks)")
        else:
            yield ScalarUse(call, f"`{shown}` reads a float out of a tensor: torch.export "
                            f"fails with \"{GUARD_ERROR}\"",
                            "keep it a tensor: multiply by the 0-d tensor itself (`x * t`) "
                            "instead of by `float(t)`")
    tests: list[tuple[cst.CSTNode, cst.BaseExpression]] = [
        (node, node.test) for node in find_all(func.body, cst.If, cst.While, cst.IfExp)]
    for owner, test in tests:
        if id(owner) in excluded:
            continue
        read = scalars.contains_read(test)
        if read is None or id(read) in reported:
            continue
        reported.update(map(id, find_all(test, cst.CSTNode)))  # type: ignore[type-abstract]
        yield ScalarUse(test, f"the test `{_short(test)}` uses `{_short(read)}`, a value read "
                        f"out of a tensor: torch.export fails with \"{GUARD_ERROR}\"",
                        "test the tensor itself (drop `.item()`/`.tolist()`: an if on a "
                        "tensor test becomes torch.cond), or pick values with `torch.where`")
    for call in find_all(func.body, cst.Call):
        if id(call) in excluded or id(call) in reported:
            continue
        if not (isinstance(call.func, cst.Name) and call.func.value == "range"):
            continue
        read = next((r for a in call.args if (r := scalars.contains_read(a.value)) is not None),
                    None)
        if read is None:
            continue
        reported.update(map(id, find_all(call, cst.CSTNode)))  # type: ignore[type-abstract]
        yield ScalarUse(call, f"`{_short(call)}` loops a number of times read out of a tensor "
                        f"(`{_short(read)}`): torch.export fails with \"{INT_ERROR}\"",
                        "loop over a size known from shapes (`x.size(0)`), vectorise the "
                        "loop with tensor ops, or compute the count outside forward")


# ---- the rule ------------------------------------------------------------------------------------

@dataclass
class _Branch:
    method: str
    node: cst.If | cst.While | cst.IfExp
    predicate: Predicate


class DataDependentBranch(Rule):
    __doc__ = __doc__
    name = "data-dependent-branch"
    summary = ("An if on a tensor value (mask.any(), x.max() > limit) becomes torch.cond "
               "(--target export); int(t), float(t), .item() in tests and range() are reported")
    # Before lift-branch: a data-dependent if inside a config branch (``if self.use_mask:
    # if mask.any():``) is lowered here first; once lift-branch has moved it into a branch
    # function it is in a nested scope, which this rule does not search.
    order = 65
    targets = ("export",)
    off_target = ("torch.cond is what torch.export needs; TorchScript cannot compile it "
                  "(nested functions), and it scripts an if on a tensor as it is")
    CODES = (
        Code("TSF226", "data-dependent-branch", "if on a tensor value",
             "torch.export traces forward once and cannot take both sides of an `if` on a "
             "tensor (`if mask.any():`, `if x.max() > limit:`): it fails with \"Could not "
             "guard on data-dependent expression\". Write the branch as "
             "`torch.cond(pred, true_fn, false_fn, operands)`; `tsfix apply --target export "
             "--rule data-dependent-branch` does it where it can."),
        Code("TSF227", "data-dependent-value", "number read out of a tensor",
             "`int(t)`, `float(t)`, and `.item()`/`.tolist()` values in `range()` or in a "
             "test make torch.export fail (\"Could not extract specialized integer\" / "
             "\"Could not guard on data-dependent expression\"). Keep the value a tensor, "
             "test the tensor itself, or compute it outside forward; `.item()` as a size or "
             "slice bound exports as it is."),
    )
    VALID = (
        # Python values: a flag, None, a length, a shape, training mode.
        """
import torch
class M(torch.nn.Module):
    def __init__(self, flag: bool = True):
        super().__init__()
        self.flag = flag
    def forward(self, x, xs: list, h=None):
        if self.flag:
            x = x + 1
        if h is None:
            h = x
        if len(xs) > 2:
            x = x * 2
        if x.size(0) > 1 and self.training:
            x = x - h
        return x.relu()
""",
        # A side that returns: torch.cond cannot leave the function; reported, left alone.
        """
import torch
class M(torch.nn.Module):
    def forward(self, x, lengths):
        if (lengths == 0).all():
            return x.new_zeros(x.size(0))
        return x.sum(1) / lengths
""",
    )
    INVALID = (
        Example(
            """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
    def forward(self, x, mask):
        if mask.any():
            x = x.masked_fill(mask, 0.0)
        return self.proj(x)
""",
            """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
    def forward(self, x, mask):
        def mask_any_true(x, mask):
            x = x.masked_fill(mask, 0.0)
            return x
        def mask_any_false(x, mask):
            return x.clone()
        x = torch.cond(mask.any(), mask_any_true, mask_any_false, (x, mask))
        return self.proj(x)
""",
        ),
        # In a helper forward calls; `and` of tensor tests, `bool(t)`.
        Example(
            """
import torch
class M(torch.nn.Module):
    def forward(self, x, m):
        return self.clip(x, m)
    def clip(self, y, m):
        if m.any() and bool(y.max() > 1):
            y = y / y.max()
        else:
            y = y * 1.0
        return y
""",
            """
import torch
class M(torch.nn.Module):
    def forward(self, x, m):
        return self.clip(x, m)
    def clip(self, y, m):
        def m_any_y_true(y):
            y = y / y.max()
            return y
        def m_any_y_false(y):
            y = y * 1.0
            return y
        y = torch.cond(torch.logical_and(m.any(), y.max() > 1), m_any_y_true, m_any_y_false, (y,))
        return y
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        return any(isinstance(node, ast.If | ast.While | ast.IfExp)
                   or (isinstance(node, ast.Call) and (
                       (isinstance(node.func, ast.Name) and node.func.id in ("int", "float"))
                       or (isinstance(node.func, ast.Attribute)
                           and node.func.attr in ("item", "tolist"))))
                   for klass in file.module_classes for node in ast.walk(klass))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # ``torch.cond`` needs the torch module by some name; a file with only ``from torch
        # import nn`` gets ``import torch``.
        import_torch = module_facts(tree).torch_alias is None
        rewritten = super().transform_module_impl(tree)
        if self.changes and import_torch:
            rewritten = add_module_import(rewritten, "torch")
        return rewritten

    def prepare(self, module: cst.Module) -> None:
        self.torch = self.facts.torch_alias or "torch"

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        name = cls.name.value
        facts = self.class_facts(cls)
        replaced: dict[str, cst.FunctionDef] = {}
        summaries: list[str] = []
        for method in export_reached(facts):
            func = facts.methods[method]
            proof = TensorProof(facts.typer(method), facts.imports)
            excluded = _skipped_under_export(func, facts.imports) | _nested_scopes(func)
            for use in scalar_uses(func, proof, excluded):
                self.skip(name, use.node, f"{use.message}; left as it is: {use.fix}",
                          code="TSF227", message=use.message)
            sites: list[CondSite] = []
            for branch in self._branches(method, func, proof, excluded):
                predicate = branch.predicate.expression
                if predicate is None or not isinstance(branch.node, cst.If):
                    self._refuse(cls, branch, branch.predicate.problem or "")
                    continue
                sites.append(CondSite(branch.node, predicate, _stem(branch.node.test,
                                                                   self.torch)))
            if not sites:
                continue
            result = lower_to_cond(func, sites, self.torch)
            for site in sites:
                reason = result.refused.get(site.branch)
                if reason is not None:
                    self._refuse(cls, _Branch(method, site.branch, Predicate(None)), reason)
            if not result.lowered:
                continue
            for branch_node in result.lowered:
                self.fixed(branch_node, "TSF226", _message("if", branch_node.test))
            summaries.extend(f"{method}(): `if {_short(b.test)}`" for b in result.lowered)
            replaced[method] = result.func
        if not replaced:
            return cls
        rewritten = cls.visit(_ReplaceMethods({id(facts.methods[m]): f
                                               for m, f in replaced.items()}))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(
            self.name, name, self.span_of(cls),
            f"torch.cond for {len(summaries)} data-dependent branch"
            f"{'es' if len(summaries) > 1 else ''}: {'; '.join(summaries)}"))
        return rewritten

    def _branches(self, method: str, func: cst.FunctionDef, proof: TensorProof,
                  excluded: set[int]) -> Iterator[_Branch]:
        for node in find_all(func.body, cst.If, cst.While, cst.IfExp):
            if id(node) in excluded:
                continue
            predicate = tensor_predicate(node.test, proof, self.torch)
            if predicate is None:
                continue
            if isinstance(node, cst.While):
                predicate = Predicate(None, "a while loop on a tensor: torch.cond cannot "
                                      "express a loop (loop a fixed count, or use "
                                      "torch.while_loop)", predicate.certain)
            elif isinstance(node, cst.IfExp):
                predicate = Predicate(None, "a conditional expression on a tensor: write it "
                                      "as `torch.where(pred, a, b)` (both computed) or as "
                                      "an if statement", predicate.certain)
            yield _Branch(method, node, predicate)

    def _refuse(self, cls: cst.ClassDef, branch: _Branch, reason: str) -> None:
        keyword = ("while" if isinstance(branch.node, cst.While)
                   else "if" if isinstance(branch.node, cst.If) else "conditional expression")
        message = _message(keyword, branch.node.test)
        if not branch.predicate.certain:
            message = message.replace("torch.export fails", "torch.export may fail")
        self.skip(cls.name.value, branch.node, f"{message}; not turned into torch.cond: "
                  f"{reason}", code="TSF226" if branch.predicate.certain else None,
                  message=message)


def _message(keyword: str, test: cst.BaseExpression) -> str:
    return (f"{keyword} on a tensor value (`{_short(test)}`): torch.export fails with "
            f"\"{GUARD_ERROR}\"")


def _stem(test: cst.BaseExpression, torch_name: str) -> str:
    """A name for the branch functions from the words of the test: ``mask.any()`` ->
    ``mask_any``, ``not torch.isnan(x).any()`` -> ``not_isnan_x``."""
    words: list[str] = ["not"] if (isinstance(test, cst.UnaryOperation)
                                   and isinstance(test.operator, cst.Not)) else []
    for node in find_all(test, cst.Name):
        word = node.value
        if word not in (torch_name, "self", "bool") and word not in words:
            words.append(word)
    return "_".join(words[:3]) or "branch"


class _ReplaceMethods(cst.CSTTransformer):
    """Swaps methods of a class (by the identity of the original ``FunctionDef``)."""

    def __init__(self, new: dict[int, cst.FunctionDef]) -> None:
        self.new = new

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def leave_FunctionDef(self, original_node: cst.FunctionDef,
                          updated_node: cst.FunctionDef) -> cst.FunctionDef:
        return self.new.get(id(original_node), updated_node)
