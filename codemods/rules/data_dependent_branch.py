"""``data-dependent-branch``: under ``--target export``, an ``if`` on a tensor value in
``forward()`` (or a method it calls) becomes ``torch.cond``; ``torch.arange(...).tolist()`` of
Python ints becomes ``list(range(...))``; other values read out of tensors where
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

    ``torch.arange(a[, b[, step]]).tolist()`` (also through ``.numpy()``, ``.cpu()``,
    ``.detach()``, with ``start=``/``end=``/``step=``, an int ``dtype=`` or a ``device=``)
    becomes ``list(range(a[, b[, step]]))`` when every bound is shown to be a Python int: an
    int literal, ``len(...)``, a tensor's ``dim()``/``ndim``/``numel()``/``size(i)``/
    ``shape[i]``, a parameter annotated ``int``, an attribute ``__init__`` sets to an int,
    ``int(...)``, and ``+ - * // %`` of those (``TSF227``, fixed). This is asteroid's
    ``dims = torch.arange(1, len(x.shape)).tolist()`` in ``masknn/norms.py``, in
    module-level functions: the functions of the same file that forward and its methods call
    by name (transitively, decorated ones too: torch.export runs them) are searched for it
    and for the reports below. ``list(torch.arange(n))`` holds 0-d tensors, not ints, and is
    left.

    Reported and left (``TSF227``): a number read out of a tensor where export must know it
    while tracing: ``int(t)``/``float(t)`` of a tensor (any use), and a ``.item()`` or
    ``.tolist()`` value in ``range()``, in an ``if``/``while``/conditional-expression test,
    or naming a dimension (``dim=``/``dims=``/``axis=``, the dim of a reduction,
    ``softmax``, ``cat``/``stack``, ``unsqueeze``/``squeeze``, ``size(i)``, ``permute``/
    ``transpose``/``flip``/``movedim`` arguments) in the same function.

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
    n.item() > 0`` all export (one program serves every value) and are not reported. Each
    number of ``t.tolist()`` is an unbacked symbol (``u0``): as a dimension (``x.mean(dim=
    dims)``, ``permute``, ``transpose``, ``unsqueeze``, ``cat``, ``softmax``, ``size(i)``,
    ``split``'s size) export fails with "Could not extract specialized integer from
    data-dependent expression u0" (measured; asteroid's ConvTasNet and DPRNNTasNet fail so in
    ``z_norm``), while as a ``reshape``/``expand``/``repeat``/``narrow`` extent, in
    ``torch.zeros`` or as an index it exports. ``list(range(...))`` of ints is a Python list
    export reads as constants.

Example
    Before::

        def forward(self, x, mask):
            if mask.any():
                x = x.masked_fill(mask, 0.0)
            return self.proj(x)

    After::

        def forward(self, x, mask):
            def mask_any_true(x):
                x = x.masked_fill(mask, 0.0)
                return x

            def mask_any_false(x):
                return x.clone()

            x = torch.cond(mask.any(), mask_any_true, mask_any_false, (x,))
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
    ``list(range(a, b, step))`` is the same list of Python ints as ``torch.arange(a, b,
    step).tolist()`` for int bounds, negative steps included (measured); where ``arange``
    raises (bounds inconsistent with the step's sign, ``arange(3, 1)``) ``range`` gives
    ``[]``. Floats, tensors and bounds it cannot show to be ints are left, with the reason (no
    code: as a size the list exports). ``list(range(...))`` scripts, so a function that
    ``torch.jit.script`` or asteroid's ``@script_if_tracing`` compiles still compiles. A
    module-level function is shared by every class that runs it: each such class is a change
    validation checks, and the function is left when validation rejected one of them.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace

import libcst as cst
from tsfix.codemods.facts.classes import (
    CONTAINER_METHODS,
    TENSOR_CONSTRUCTORS,
    ClassFacts,
    scripting_test,
)
from tsfix.codemods.facts.module import module_facts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    decorator_names,
    find_all,
    names_bound_in,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.facts.value_types import TENSOR, Typer, collect_locals, type_from_annotation
from tsfix.codemods.rules.base import ClassChange, Code, Example, Fix, Rule, Skip
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
                problem += (f"; export fails only when `{short_source(test.left, 40)}` does not "
                            "decide the test on its own")
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


class _Scalars:
    """Values read out of tensors in one method (``n.item()``, ``lengths.tolist()``, locals
    holding them) and where they are used."""

    def __init__(self, func: cst.FunctionDef, proof: TensorProof, excluded: set[int],
                 rewritten: Collection[int] = ()) -> None:
        self.proof = proof
        # ``torch.arange(...).tolist()`` calls this rule turns into ``list(range(...))``
        self.rewritten = rewritten
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
                    and not node.args and id(node) not in self.rewritten
                    and (self.proof.tensor(func.value)
                         or self.proof.typer.type_of(func.value) == TENSOR)):
                return True
            return self.conversion(node) is not None
        if isinstance(node, cst.Subscript):
            return self.read(node.value)
        if isinstance(node, cst.List | cst.Tuple):
            return any(self.read(e.value) for e in node.elements)
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


def scalar_uses(func: cst.FunctionDef, proof: TensorProof, excluded: set[int],
                rewritten: Collection[int] = ()) -> Iterator[ScalarUse]:
    """``int(t)``/``float(t)`` of tensors, and values read out of tensors in ``range()``, in a
    test or as a dimension, in ``func`` (outside ``excluded``; ``rewritten``: the
    ``torch.arange(...).tolist()`` calls this rule replaces, whose values are no reads)."""
    scalars = _Scalars(func, proof, excluded, rewritten)
    reported: set[int] = set()
    for call in find_all(func.body, cst.Call):
        if id(call) in excluded:
            continue
        kind = scalars.conversion(call)
        if kind is None:
            continue
        reported.update(map(id, find_all(call, cst.CSTNode)))  # type: ignore[type-abstract]
        shown = short_source(call, 40)
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
        yield ScalarUse(test, f"the test `{short_source(test, 40)}` uses "
                        f"`{short_source(read, 40)}`, a value read out of a tensor: "
                        f"torch.export fails with \"{GUARD_ERROR}\"",
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
        yield ScalarUse(call, f"`{short_source(call, 40)}` loops a number of times read out "
                        f"of a tensor (`{short_source(read, 40)}`): torch.export fails with "
                        f"\"{INT_ERROR}\"",
                        "loop over a size known from shapes (`x.size(0)`), vectorise the "
                        "loop with tensor ops, or compute the count outside forward")
    for call in find_all(func.body, cst.Call):
        if id(call) in excluded or id(call) in reported:
            continue
        read = next((r for a in dimension_arguments(call, proof)
                     if (r := scalars.contains_read(a)) is not None), None)
        if read is None:
            continue
        reported.update(map(id, find_all(call, cst.CSTNode)))  # type: ignore[type-abstract]
        yield ScalarUse(call, f"`{short_source(read, 40)}`, read out of a tensor, is used as a "
                        f"dimension in `{short_source(call, 40)}`: torch.export fails with "
                        f"\"{INT_ERROR}\"",
                        "dimensions must be Python ints while tracing: keep them in a "
                        "Python list (an attribute set in __init__) or compute them from "
                        "shapes (`list(range(1, x.dim()))`, not `torch.arange(1, x.dim())"
                        ".tolist()`)")


# ---- numbers used as dimensions ------------------------------------------------------------------

# Where a number must be known while tracing because it names a dimension (measured on torch
# 2.13: a ``.tolist()``/``.item()`` value there fails with INT_ERROR; as a size, a slice bound,
# a ``reshape``/``expand``/``repeat``/``narrow`` extent or an index it exports).
_DIM_KEYWORDS = frozenset({"dim", "dims", "axis", "dim0", "dim1", "source", "destination"})
# tensor.method(dim, ...)
_DIM_FIRST_METHODS = frozenset({
    "sum", "mean", "var", "std", "prod", "amax", "amin", "nansum", "nanmean", "logsumexp",
    "argmax", "argmin", "softmax", "log_softmax", "cumsum", "cumprod", "unsqueeze", "squeeze",
    "size", "flip", "all", "any", "count_nonzero", "unbind", "select"})
# tensor.method(dim, dim, ...) / torch.function(tensor, dim, dim, ...)
_DIM_ALL_METHODS = frozenset({"permute", "transpose", "flip", "movedim", "moveaxis", "swapaxes",
                              "swapdims"})
# torch.function(tensor or tensors, dim, ...)
_DIM_SECOND_FUNCTIONS = frozenset({
    "sum", "mean", "var", "std", "prod", "amax", "amin", "nansum", "nanmean", "logsumexp",
    "argmax", "argmin", "softmax", "log_softmax", "cumsum", "cumprod", "unsqueeze", "squeeze",
    "flip", "all", "any", "count_nonzero", "cat", "concat", "stack", "unbind", "var_mean",
    "std_mean", "nn.functional.softmax", "nn.functional.log_softmax"})


def dimension_arguments(call: cst.Call, proof: TensorProof) -> list[cst.BaseExpression]:
    """The arguments of ``call`` that name dimensions."""
    found = [a.value for a in call.args if a.keyword is not None
             and a.keyword.value in _DIM_KEYWORDS]
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    func = call.func
    if isinstance(func, cst.Attribute) and proof.typer.type_of(func.value) == TENSOR:
        method = func.attr.value
        if method in _DIM_ALL_METHODS:
            return found + positional
        if method in _DIM_FIRST_METHODS:
            return found + positional[:1]
        return found
    name = (qualified_name(func, proof.imports) or "").removeprefix("torch.")
    if name in _DIM_ALL_METHODS:
        return found + positional[1:]
    if name in _DIM_SECOND_FUNCTIONS:
        return found + positional[1:2]
    return found


# ---- torch.arange(...).tolist() of Python ints ---------------------------------------------------

INT_KIND, FLOAT_KIND = "int", "float"
# dtypes whose arange(...).tolist() are the same Python ints as range()'s
_INT_DTYPES = frozenset({"torch.long", "torch.int64", "torch.int", "torch.int32"})
_ARANGE_KEYWORDS = frozenset({"start", "end", "step", "dtype", "device"})
# Calls between ``torch.arange(...)`` and ``.tolist()`` that do not change the values.
_SAME_VALUES = frozenset({"numpy", "cpu", "detach"})


class IntProof:
    """Whether an expression is a Python int: an int literal, ``len(...)``, a tensor's
    ``dim()``/``ndim``/``numel()``/``size(i)``/``shape[i]``, a parameter annotated ``int``, an
    ``__init__`` attribute typed int, ``int(...)``, and ``+ - * // %`` of those; a local when
    every value it is given is one. Anything else is a float, a tensor, or unknown (None)."""

    def __init__(self, func: cst.FunctionDef, typer: Typer, excluded: set[int]) -> None:
        self.typer = typer
        params = func.params
        self.params: dict[str, str | None] = {}
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            name = param.name.value
            if name == typer.self_var:
                continue
            annotated = (type_from_annotation(param.annotation.annotation)
                         if param.annotation is not None else None)
            self.params[name] = annotated or (TENSOR if typer.env.get(name) == TENSOR
                                              else None)
        self.values: dict[str, list[cst.BaseExpression | None]] = {}
        for node in find_all(func.body, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For,
                             cst.With, cst.NamedExpr):
            if id(node) in excluded:
                continue
            for name, value in _bindings(node):
                self.values.setdefault(name, []).append(value)
        self._visiting: set[str] = set()

    def kind(self, node: cst.BaseExpression) -> str | None:
        """"int", "float", "Tensor" or None (cannot tell)."""
        if isinstance(node, cst.Integer):
            return INT_KIND
        if isinstance(node, cst.Float):
            return FLOAT_KIND
        if isinstance(node, cst.UnaryOperation):
            return (self.kind(node.expression)
                    if isinstance(node.operator, cst.Minus | cst.Plus) else None)
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node)
        if isinstance(node, cst.Name):
            return self._name(node.value)
        if isinstance(node, cst.Call):
            kind = self._call(node)
            if kind is not None:
                return kind
        if isinstance(node, cst.Attribute):
            if node.attr.value == "ndim" and self._tensor(node.value):
                return INT_KIND
            if (isinstance(node.value, cst.Name) and node.value.value == self.typer.self_var
                    and self.typer.attributes.get(node.attr.value) == INT_KIND):
                return INT_KIND
        if (isinstance(node, cst.Subscript) and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index) and _is_shape(node.value, self)):
            return INT_KIND
        kind = self.typer.type_of(node)
        # The typer's "int" includes elements of lists read out of tensors; only these forms
        # are trusted for ints.
        return kind if kind in (FLOAT_KIND, TENSOR) else None

    def _tensor(self, node: cst.BaseExpression) -> bool:
        return self.typer.type_of(node) == TENSOR

    def _binary(self, node: cst.BinaryOperation) -> str | None:
        left, right = self.kind(node.left), self.kind(node.right)
        if TENSOR in (left, right):
            return TENSOR
        if left is None or right is None:
            return None
        if isinstance(node.operator, cst.Divide) or FLOAT_KIND in (left, right):
            return FLOAT_KIND
        if isinstance(node.operator, cst.Add | cst.Subtract | cst.Multiply | cst.FloorDivide
                      | cst.Modulo):
            return INT_KIND
        return None

    def _call(self, node: cst.Call) -> str | None:
        func = node.func
        if isinstance(func, cst.Name) and func.value in ("len", "int") and len(node.args) == 1:
            return INT_KIND
        if isinstance(func, cst.Attribute) and self._tensor(func.value):
            method = func.attr.value
            if method in ("dim", "ndimension", "numel", "nelement") and not node.args:
                return INT_KIND
            if method == "size" and len(node.args) == 1 and node.args[0].keyword is None:
                return INT_KIND
        return None

    def _name(self, name: str) -> str | None:
        if name in self._visiting:
            # A value built from itself (``n += 1``): it is an int when everything else it is
            # given is, as ``+ - * // %`` of ints are ints.
            return INT_KIND
        kinds: list[str | None] = []
        if name in self.params:
            kinds.append(self.params[name])
        self._visiting.add(name)
        try:
            kinds.extend(None if value is None else self.kind(value)
                         for value in self.values.get(name, []))
        finally:
            self._visiting.discard(name)
        if not kinds or None in kinds:
            return None
        if TENSOR in kinds:
            return TENSOR
        if FLOAT_KIND in kinds:
            return FLOAT_KIND
        # ``Optional[int]``, ``List[int]``...: no int
        return INT_KIND if all(k == INT_KIND for k in kinds) else None


def _is_shape(node: cst.BaseExpression, proof: IntProof) -> bool:
    """``t.shape`` or ``t.size()`` of a tensor."""
    if isinstance(node, cst.Attribute) and node.attr.value == "shape":
        return proof._tensor(node.value)
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "size" and not node.args
            and proof._tensor(node.func.value))


def _bindings(node: cst.CSTNode) -> Iterator[tuple[str, cst.BaseExpression | None]]:
    """(name, value) for each name ``node`` binds; value None when it cannot be told (an
    unpacked tuple, a loop over anything but ``range``, a ``with`` target)."""
    if isinstance(node, cst.Assign):
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                yield target.target.value, node.value
            else:
                for name in find_all(target.target, cst.Name):
                    yield name.value, None
    elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name):
        yield node.target.value, node.value
    elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
        operator = getattr(cst, type(node.operator).__name__.removesuffix("Assign"))()
        yield node.target.value, cst.BinaryOperation(node.target, operator, node.value)
    elif isinstance(node, cst.For):
        ranged = (isinstance(node.iter, cst.Call) and isinstance(node.iter.func, cst.Name)
                  and node.iter.func.value == "range")
        for name in find_all(node.target, cst.Name):
            yield name.value, (cst.Integer("0") if ranged and isinstance(node.target, cst.Name)
                               else None)
    elif isinstance(node, cst.With):
        for item in node.items:
            if item.asname is not None:
                for name in find_all(item.asname.name, cst.Name):
                    yield name.value, None
    elif isinstance(node, cst.NamedExpr) and isinstance(node.target, cst.Name):
        yield node.target.value, node.value


@dataclass(frozen=True)
class ArangeList:
    """``torch.arange(...).tolist()`` (``.numpy().tolist()``...): ``replacement`` is the
    ``list(range(...))`` that gives the same list, or ``problem`` says why none does."""

    node: cst.Call
    replacement: cst.BaseExpression | None
    problem: str | None = None


def arange_lists(func: cst.FunctionDef, proof: IntProof, imports: Mapping[str, str],
                 excluded: set[int], shadowed: set[str]) -> Iterator[ArangeList]:
    """The ``torch.arange(...).tolist()`` calls in ``func`` (outside ``excluded``)."""
    for call in find_all(func.body, cst.Call):
        if id(call) in excluded:
            continue
        arange = _arange_of_tolist(call, imports)
        if arange is None:
            continue
        bounds = _arange_bounds(arange, imports)
        if isinstance(bounds, str):
            yield ArangeList(call, None, bounds)
            continue
        problem = next((p for b in bounds if (p := _not_an_int(b, proof)) is not None), None)
        if problem is None and {"list", "range"} & shadowed:
            problem = "`list` or `range` is rebound in this file"
        if problem is not None:
            yield ArangeList(call, None, problem)
            continue
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        ranged = cst.Call(cst.Name("range"), [
            cst.Arg(_bare(b), comma=comma if i < len(bounds) - 1 else cst.MaybeSentinel.DEFAULT)
            for i, b in enumerate(bounds)])
        yield ArangeList(call, cst.Call(cst.Name("list"), [cst.Arg(ranged)],
                                        lpar=call.lpar, rpar=call.rpar))


def _arange_of_tolist(call: cst.Call, imports: Mapping[str, str]) -> cst.Call | None:
    """The ``torch.arange(...)`` call whose ``.tolist()`` ``call`` is."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "tolist" and not call.args):
        return None
    receiver = func.value
    while (isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute)
           and receiver.func.attr.value in _SAME_VALUES and not receiver.args):
        receiver = receiver.func.value
    if (isinstance(receiver, cst.Call)
            and qualified_name(receiver.func, dict(imports)) == "torch.arange"):
        return receiver
    return None


def _arange_bounds(arange: cst.Call, imports: Mapping[str, str]
                   ) -> tuple[cst.BaseExpression, ...] | str:
    """``(end,)``, ``(start, end)`` or ``(start, end, step)`` for ``range()``, or why not."""
    if any(a.star for a in arange.args):
        return "unpacked arguments: the bounds cannot be read"
    positional = [a.value for a in arange.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in arange.args if a.keyword is not None}
    unknown = sorted(set(keywords) - _ARANGE_KEYWORDS)
    if unknown:
        return f"`{unknown[0]}=`: range() has no such argument"
    dtype = keywords.pop("dtype", None)
    keywords.pop("device", None)
    if dtype is not None and qualified_name(dtype, dict(imports)) not in _INT_DTYPES:
        return (f"`dtype={short_source(dtype, 40)}`: the list holds that dtype's numbers, range() "
                "gives ints")
    if len(positional) == 1 and not keywords:
        return (positional[0],)
    named = dict(zip(("start", "end", "step"), positional, strict=False))
    if set(named) & set(keywords) or len(positional) > 3:
        return "arguments given twice"
    named.update(keywords)
    if "end" not in named:
        return "no end bound"
    if "start" not in named:
        return "a step without a start: write the call with positional bounds"
    return tuple(named[k] for k in ("start", "end", "step") if k in named)


def _not_an_int(bound: cst.BaseExpression, proof: IntProof) -> str | None:
    """Why ``bound`` may not be a Python int (None: it is one)."""
    kind = proof.kind(bound)
    shown = short_source(bound, 40)
    if kind == INT_KIND:
        return None
    if kind == FLOAT_KIND:
        return (f"`{shown}` is a float: torch.arange of floats gives floats, and range() "
                "takes only ints")
    if kind == TENSOR:
        return (f"`{shown}` is a tensor: the list's numbers are read out of it (keep the "
                "bounds Python ints, e.g. from shapes)")
    return (f"`{shown}` cannot be shown to be a Python int (an int literal, len(), a "
            "shape, a parameter annotated `int`): torch.arange of floats gives floats")


class _ReplaceCalls(cst.CSTTransformer):
    """Replaces calls by their source text (the method may have been rebuilt by the
    torch.cond lowering, so the original nodes are not its nodes any more)."""

    def __init__(self, by_code: Mapping[str, cst.BaseExpression]) -> None:
        self.by_code = by_code
        self.replaced = 0

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call
                   ) -> cst.BaseExpression:
        new = self.by_code.get(code_of(original_node))
        if new is None:
            return updated_node
        self.replaced += 1
        return new


# ---- module-level functions forward reaches ------------------------------------------------------

def reached_functions(callers: list[cst.FunctionDef], functions: Mapping[str, cst.FunctionDef],
                      imports: Mapping[str, str]) -> list[str]:
    """The module-level functions of the file ``callers`` call by name, transitively: what
    torch.export runs of them (decorators such as asteroid's ``@script_if_tracing`` run the
    function itself outside ``torch.jit.trace``)."""
    order: list[str] = []
    pending = list(callers)
    while pending:
        func = pending.pop(0)
        skipped = _skipped_under_export(func, imports)
        local = names_bound_in(func)
        for call in find_all(func.body, cst.Call):
            callee = call.func.value if isinstance(call.func, cst.Name) else None
            if (callee in functions and callee not in order and callee not in local
                    and id(call) not in skipped):
                assert callee is not None
                order.append(callee)
                pending.append(functions[callee])
    return order


def function_typer(func: cst.FunctionDef, imports: Mapping[str, str]) -> Typer:
    """A :class:`Typer` for a module-level function: parameters by their annotation, else a
    tensor when the body uses one as a tensor (as TorchScript would type it)."""
    env: dict[str, str | None] = {}
    params = func.params
    for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
        name = param.name.value
        if param.annotation is not None:
            env[name] = type_from_annotation(param.annotation.annotation)
        elif param.default is None and _used_as_tensor(name, func, imports):
            env[name] = TENSOR
        else:
            env[name] = None
    typer = Typer(env, imports, None)
    collect_locals(func.body, typer)
    return typer


def _used_as_tensor(name: str, func: cst.FunctionDef, imports: Mapping[str, str]) -> bool:
    for attribute in find_all(func.body, cst.Attribute):
        if (isinstance(attribute.value, cst.Name) and attribute.value.value == name
                and attribute.attr.value not in CONTAINER_METHODS):
            return True
    for call in find_all(func.body, cst.Call):
        if any(isinstance(a.value, cst.Name) and a.value.value == name for a in call.args):
            qualified = qualified_name(call.func, dict(imports)) or ""
            if (qualified.startswith("torch.")
                    and qualified.rpartition(".")[2] not in TENSOR_CONSTRUCTORS):
                return True
    return False


# ---- the rule ------------------------------------------------------------------------------------

@dataclass
class _Branch:
    method: str
    node: cst.If | cst.While | cst.IfExp
    predicate: Predicate


class DataDependentBranch(Rule):
    __doc__ = __doc__
    name = "data-dependent-branch"
    summary = ("An if on a tensor value (mask.any(), x.max() > limit) becomes torch.cond and "
               "torch.arange(...).tolist() of ints list(range(...)) (--target export); int(t), "
               "float(t), .item() in tests, range() and dims are reported")
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
             "`int(t)`, `float(t)`, and `.item()`/`.tolist()` values in `range()`, in a test "
             "or as a dimension (`x.mean(dim=t.tolist())`) make torch.export fail (\"Could "
             "not extract specialized integer\" / \"Could not guard on data-dependent "
             "expression\"). Keep the value a tensor, test the tensor itself, take "
             "dimensions from shapes, or compute it outside forward; `.item()` as a size or "
             "slice bound exports as it is. `torch.arange(a, b).tolist()` of Python ints is "
             "`list(range(a, b))`: `tsfix apply --target export --rule data-dependent-branch` "
             "writes it."),
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
        def mask_any_true(x):
            x = x.masked_fill(mask, 0.0)
            return x
        def mask_any_false(x):
            return x.clone()
        x = torch.cond(mask.any(), mask_any_true, mask_any_false, (x,))
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
        if not file.module_classes:
            return False
        # The module-level functions forward calls are searched too: the whole file.
        return any(isinstance(node, ast.If | ast.While | ast.IfExp)
                   or (isinstance(node, ast.Call) and (
                       (isinstance(node.func, ast.Name) and node.func.id in ("int", "float"))
                       or (isinstance(node.func, ast.Attribute)
                           and node.func.attr in ("item", "tolist"))))
                   for node in file.nodes)

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # ``torch.cond`` needs the torch module by some name; a file with only ``from torch
        # import nn`` gets ``import torch``.
        import_torch = module_facts(tree).torch_alias is None
        rewritten = super().transform_module_impl(tree)
        new_functions = {id(self._functions[name]): plan.func
                         for name, plan in self._claimed.items()
                         if plan.func is not self._functions[name]}
        if new_functions and rewritten is not tree:
            body = [new_functions.pop(id(s), s) for s in rewritten.body]
            assert not new_functions, "a rewritten module function was not found in the module"
            rewritten = rewritten.with_changes(body=body)
        if self._cond_lowered and import_torch:
            rewritten = add_module_import(rewritten, "torch")
        return rewritten

    def prepare(self, module: cst.Module) -> None:
        self.torch = self.facts.torch_alias or "torch"
        self._cond_lowered = False
        self._functions = {s.name.value: s for s in module.body
                           if isinstance(s, cst.FunctionDef)}
        # module function -> the module classes whose forward reaches it, in file order
        self._function_users: dict[str, list[str]] = {}
        for statement in module.body:
            if isinstance(statement, cst.ClassDef) and self.facts.is_module_class(statement):
                facts = self.facts.of(statement)
                callers = [facts.methods[m] for m in export_reached(facts)]
                for function in reached_functions(callers, self._functions, facts.imports):
                    self._function_users.setdefault(function, []).append(
                        statement.name.value)
        self._plans: dict[str, _FunctionPlan] = {}
        # module functions whose findings a class has reported (and whose rewrite it claims)
        self._claimed: dict[str, _FunctionPlan] = {}

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        name = cls.name.value
        facts = self.class_facts(cls)
        replaced: dict[str, cst.FunctionDef] = {}
        summaries: list[str] = []
        listed: list[str] = []
        for method in export_reached(facts):
            func = facts.methods[method]
            typer = facts.typer(method)
            proof = TensorProof(typer, facts.imports)
            nested = _nested_scopes(func)
            excluded = _skipped_under_export(func, facts.imports) | nested
            lists = self._arange_lists(func, typer, excluded, nested)
            for item in lists:
                message = _arange_message(item.node)
                if item.replacement is None:
                    self.skip(name, item.node, f"{message}; not turned into list(range(...)): "
                              f"{item.problem}", message=message)
                else:
                    self.fixed(item.node, "TSF227", message)
            for use in scalar_uses(func, proof, excluded, _rewritten_ids(lists)):
                self.skip(name, use.node, f"{use.message}; left as it is: {use.fix}",
                          code="TSF227", message=use.message)
            new_func = self._lower_branches(cls, method, func, proof, excluded, summaries)
            if _rewritten_ids(lists):
                new_func = _replace_lists(new_func, lists)
                listed.append(f"{method}()")
            if new_func is not func:
                replaced[method] = new_func
        claims: dict[str, _FunctionPlan] = {}
        for function, users in self._function_users.items():
            if name not in users or self.skip_classes & set(users):
                continue    # a class that runs it was rejected by validation: left as it is
            plan = self._function_plan(function)
            claims[function] = plan
            if plan.func is not self._functions[function]:
                listed.append(f"{function}() (a function of this file forward calls)")
            if function not in self._claimed:
                self.fixes.extend(replace(f, class_name=name) for f in plan.fixes)
                self.skips.extend(replace(s, class_name=name) for s in plan.skips)
        if listed:
            summaries.append(f"list(range(...)) for torch.arange(...).tolist() in "
                             f"{', '.join(listed)}")
        rewritten = cls
        if replaced:
            visited = cls.visit(_ReplaceMethods({id(facts.methods[m]): f
                                                 for m, f in replaced.items()}))
            assert isinstance(visited, cst.ClassDef)
            rewritten = visited
        if summaries:
            self.changes.append(ClassChange(self.name, name, self.span_of(cls),
                                            "; ".join(summaries)))
        # Last, so a failure above (the class is then left as it was) claims nothing.
        for function, plan in claims.items():
            self._claimed.setdefault(function, plan)
        return rewritten

    def _lower_branches(self, cls: cst.ClassDef, method: str, func: cst.FunctionDef,
                        proof: TensorProof, excluded: set[int],
                        summaries: list[str]) -> cst.FunctionDef:
        """``func`` with its ifs on tensors lowered to torch.cond where they can be."""
        sites: list[CondSite] = []
        for branch in self._branches(method, func, proof, excluded):
            predicate = branch.predicate.expression
            if predicate is None or not isinstance(branch.node, cst.If):
                self._refuse(cls, branch, branch.predicate.problem or "")
                continue
            sites.append(CondSite(branch.node, predicate, _stem(branch.node.test, self.torch)))
        if not sites:
            return func
        result = lower_to_cond(func, sites, self.torch)
        for site in sites:
            reason = result.refused.get(site.branch)
            if reason is not None:
                self._refuse(cls, _Branch(method, site.branch, Predicate(None)), reason)
        if not result.lowered:
            return func
        for branch_node in result.lowered:
            self.fixed(branch_node, "TSF226", _message("if", branch_node.test))
        count = len(result.lowered)
        lowered = "; ".join(f"{method}(): `if {short_source(b.test, 40)}`" for b in result.lowered)
        # One summary per class: the methods' lists are joined.
        if summaries and summaries[-1].startswith("torch.cond for "):
            previous = summaries.pop()
            head, _, rest = previous.partition(": ")
            count += int(head.split()[2])
            lowered = f"{rest}; {lowered}"
        summaries.append(f"torch.cond for {count} data-dependent branch"
                         f"{'es' if count > 1 else ''}: {lowered}")
        self._cond_lowered = True
        return result.func

    def _arange_lists(self, func: cst.FunctionDef, typer: Typer, excluded: set[int],
                      nested: set[int]) -> list[ArangeList]:
        shadowed = (self.facts.top_level_names | names_bound_in(func)) & {"list", "range"}
        lists = list(arange_lists(func, IntProof(func, typer, excluded), self.facts.imports,
                                  excluded, shadowed))
        # The rewrite finds its calls again by their text: one that a nested function also
        # holds (where the names may mean something else) is left.
        inner = {code_of(c) for c in find_all(func.body, cst.Call) if id(c) in nested}
        return [ArangeList(i.node, None, "the same call is in a nested function of this "
                           "method, where its names may be others")
                if i.replacement is not None and code_of(i.node) in inner else i
                for i in lists]

    def _function_plan(self, function: str) -> _FunctionPlan:
        """What this rule does in a module-level function forward reaches: its
        ``torch.arange(...).tolist()`` rewritten, its numbers read out of tensors reported
        (not its ifs: lowering them there is left for later)."""
        plan = self._plans.get(function)
        if plan is not None:
            return plan
        func = self._functions[function]
        imports = self.facts.imports
        typer = function_typer(func, imports)
        nested = _nested_scopes(func)
        excluded = _skipped_under_export(func, imports) | nested
        lists = self._arange_lists(func, typer, excluded, nested)
        fixes: list[Fix] = []
        skips: list[Skip] = []
        for item in lists:
            line, column = self.function_position(func, item.node)
            message = _arange_message(item.node)
            if item.replacement is None:
                skips.append(Skip(self.name, "", line, f"{message}; not turned into "
                                  f"list(range(...)): {item.problem}", None, column, message))
            else:
                fixes.append(Fix(self.name, "TSF227", "", line, column, message))
        for use in scalar_uses(func, TensorProof(typer, imports), excluded,
                               _rewritten_ids(lists)):
            line, column = self.function_position(func, use.node)
            skips.append(Skip(self.name, "", line, f"{use.message}; left as it is: {use.fix}",
                              "TSF227", column, use.message))
        new = _replace_lists(func, lists) if _rewritten_ids(lists) else func
        plan = self._plans[function] = _FunctionPlan(new, fixes, skips)
        return plan

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
    return (f"{keyword} on a tensor value (`{short_source(test, 40)}`): torch.export fails with "
            f"\"{GUARD_ERROR}\"")


@dataclass(frozen=True)
class _FunctionPlan:
    """A module-level function as this rule leaves it, and what it reports there (the class
    name is filled in by the class that reports it)."""

    func: cst.FunctionDef
    fixes: list[Fix]
    skips: list[Skip]


def _arange_message(node: cst.CSTNode) -> str:
    return (f"`{short_source(node)}` reads its numbers out of a tensor: torch.export makes each "
            f"one data-dependent and fails with \"{INT_ERROR}\" where one names a dimension")


def _rewritten_ids(lists: list[ArangeList]) -> set[int]:
    return {id(i.node) for i in lists if i.replacement is not None}


def _replace_lists(func: cst.FunctionDef, lists: list[ArangeList]) -> cst.FunctionDef:
    by_code = {code_of(i.node): i.replacement for i in lists if i.replacement is not None}
    replacer = _ReplaceCalls(by_code)
    new = func.visit(replacer)
    assert isinstance(new, cst.FunctionDef) and replacer.replaced >= len(by_code)
    return new


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
