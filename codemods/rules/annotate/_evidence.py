"""Evidence voting: what a method body's uses of a name say its type is.

Each use casts a vote (``x.topk(k)``: k is an int; ``mask.any()``: a Tensor; ``xs.append``: not
a Tensor); :func:`decide` unifies the votes, and a Tensor vote against any other is no answer.
"""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import CONTAINER_METHODS, TENSOR_CONSTRUCTORS
from tsfix.codemods.facts.syntax import find_all, qualified_name
from tsfix.codemods.facts.value_types import DEVICE, DTYPE, TENSOR, unify_all
from tsfix.codemods.rules.annotate._callees import callee_type
from tsfix.codemods.rules.annotate._common import is_name, literal_kind
from tsfix.codemods.rules.annotate._state import MethodState

NOT_TENSOR = "<not a Tensor>"
# Tensor methods whose positional arguments are ints (all of them, or the listed positions).
INT_ARGUMENTS: dict[str, tuple[int, ...] | None] = {
    "view": None, "reshape": None, "expand": None, "repeat": None, "permute": None,
    "new_zeros": None, "new_ones": None, "new_empty": None, "flip": None, "roll": None,
    "topk": (0,), "size": (0,), "unsqueeze": (0,), "squeeze": (0,), "transpose": (0, 1),
    "flatten": (0, 1), "narrow": (0, 1, 2), "chunk": (0,), "softmax": (0,),
    "log_softmax": (0,), "cumsum": (0,), "select": (0, 1), "movedim": (0, 1),
    "unfold": (0, 1, 2), "kthvalue": (0,), "argmax": (0,), "argmin": (0,), "mean": (0,),
    "sum": (0,), "amax": (0,), "amin": (0,), "logsumexp": (0,), "unflatten": (0,),
}
# Tensor methods whose argument at these positions is a Tensor (``x.masked_fill(mask, v)``).
TENSOR_ARGUMENTS: dict[str, tuple[int, ...]] = {
    "masked_fill": (0,), "masked_fill_": (0,), "where": (0,), "masked_select": (0,),
    "masked_scatter": (0, 1), "masked_scatter_": (0, 1), "matmul": (0,), "bmm": (0,),
    "mm": (0,), "expand_as": (0,), "view_as": (0,), "reshape_as": (0,), "type_as": (0,),
    "gather": (1,), "index_select": (1,), "scatter": (1,), "scatter_add": (1, 2),
}
INT_KEYWORDS = {"dim", "k", "dims", "chunks", "start_dim", "end_dim", "num_classes",
                "diagonal", "dim0", "dim1", "kernel_size", "stride", "padding", "dilation",
                "output_size", "groups", "upscale_factor", "downscale_factor"}
# ``torch.zeros(n, device=device)``, ``x.to(dtype=dtype)``: what every torch function and
# Tensor method takes under these keywords.
TYPED_KEYWORDS = {"device": DEVICE, "dtype": DTYPE}
# (clamp's min/max and fill values take ints as well: they say nothing.)
FLOAT_KEYWORDS = {"p", "eps", "alpha", "beta", "negative_slope", "momentum", "scale_factor",
                  "lambd", "label_smoothing", "margin"}
# Methods Python's int and float have: called on ``name * n`` they say nothing.
_NUMBER_METHODS = frozenset({"conjugate", "is_integer", "bit_length", "bit_count", "hex",
                             "as_integer_ratio", "to_bytes", "fromhex", "real", "imag"})
_TENSOR_ATTRIBUTES = ("shape", "dtype", "device", "ndim", "T", "is_cuda", "data")
_TENSOR_LISTS = ("torch.cat", "torch.stack", "torch.concat", "torch.hstack", "torch.vstack")
# torch functions whose first two positional arguments (and these keywords) are tensors: the
# losses' input and target (gated-state-spaces' ``F.cross_entropy(logits, labels)``), products.
_TENSOR_PAIRS = frozenset({
    *(f"torch.nn.functional.{loss}" for loss in (
        "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
        "soft_margin_loss", "multilabel_soft_margin_loss", "poisson_nll_loss")),
    "torch.matmul", "torch.bmm", "torch.mm", "torch.maximum", "torch.minimum",
})
_PAIR_KEYWORDS = frozenset({"input", "target"})


def usage_type(method: MethodState, name: str, *, weak: bool = True) -> str | None:
    """What the body's uses of ``name`` say its type is (None: nothing, or conflicting).

    Weak evidence -- comparison with a number, arithmetic with a float, assignment -- also
    fits a Tensor (``x * 0.5``), so it only counts with ``weak=True``, for parameters whose
    None default already says they are optional options rather than inputs. Weakest of all,
    arithmetic with a Tensor (``x = x * mask``) fits a float as well; it decides only when
    nothing else says anything (unannotated, the parameter is a Tensor to TorchScript anyway,
    and ``Optional[Tensor]`` is what lets it be None)."""
    votes: list[str | None] = []
    body = method.func.body
    for call in find_all(body, cst.Call):
        votes.extend(_call_votes(method, call, name))
    for operation in find_all(body, cst.BinaryOperation):
        if isinstance(operation.operator, cst.MatrixMultiply) and any(
                is_name(side, name) for side in (operation.left, operation.right)):
            votes.append(TENSOR)    # only tensors multiply as matrices
    for attribute in find_all(body, cst.Attribute):
        if is_name(attribute.value, name) and attribute.attr.value in _TENSOR_ATTRIBUTES:
            votes.append(TENSOR)
    for subscript in find_all(body, cst.Subscript):
        if is_name(subscript.value, name) and any(
                isinstance(e.slice, cst.Index) and is_name(e.slice.value, "None")
                for e in subscript.slice):
            votes.append(TENSOR)    # ``mask[:, None]``: only arrays take a new axis
        for element in subscript.slice:
            if isinstance(element.slice, cst.Slice) and any(
                    _bound_reads(bound, name) for bound in (element.slice.lower,
                                                            element.slice.upper)):
                votes.append("int")
    for choice in find_all(body, cst.IfExp):
        votes.append(_fallback_type(method, choice, name))
    if not weak:
        return decide(votes)
    for comparison in find_all(body, cst.Comparison):
        operands = [comparison.left, *(c.comparator for c in comparison.comparisons)]
        if not any(is_name(o, name) for o in operands):
            continue
        if any(isinstance(c.operator, cst.Is | cst.IsNot | cst.In | cst.NotIn)
               for c in comparison.comparisons):
            continue
        for other in operands:
            kind = None if is_name(other, name) else literal_kind(other)
            if kind is not None:
                votes.append(kind)
    for operation in find_all(body, cst.BinaryOperation):
        sides = (operation.left, operation.right)
        if any(is_name(s, name) for s in sides) and not isinstance(operation.operator,
                                                                   cst.Power):
            others = [literal_kind(s) for s in sides if not is_name(s, name)]
            votes.extend(k for k in others if k == "float")
    for assign in find_all(body, cst.Assign):
        if any(is_name(t.target, name) for t in assign.targets) and not any(
                is_name(n, name) for n in find_all(assign.value, cst.Name)):
            # A value made from the parameter itself (``kv = x if kv is None else kv``) tells
            # what it becomes, not what it was given.
            kind = method.typer.type_of(assign.value)
            votes.append(kind if kind != "None" else None)
    if not any(v is not None for v in votes) and _arithmetic_with_tensor(method, name):
        return TENSOR
    return decide(votes)


def _fallback_type(method: MethodState, choice: cst.IfExp, name: str) -> str | None:
    """``name if name is not None else x`` (``default(name, x)`` written out, hourglass'
    ``default(context, x)``): name is of x's type, which both sides of the choice share."""
    test = choice.test
    if not (isinstance(test, cst.Comparison) and is_name(test.left, name)
            and len(test.comparisons) == 1
            and is_name(test.comparisons[0].comparator, "None")):
        return None
    operator = test.comparisons[0].operator
    if isinstance(operator, cst.IsNot) and is_name(choice.body, name):
        other = choice.orelse
    elif isinstance(operator, cst.Is) and is_name(choice.orelse, name):
        other = choice.body
    else:
        return None
    kind = method.typer.type_of(other)
    if kind is None and scripted_as_tensor(method, other):
        return TENSOR
    return kind if kind not in (None, "None") else None


def _arithmetic_with_tensor(method: MethodState, name: str) -> bool:
    """``x * name``, ``name + x``, ``x += name`` with a Tensor ``x`` (powers excepted: an
    exponent is usually a number)."""
    body = method.func.body
    for operation in find_all(body, cst.BinaryOperation):
        if isinstance(operation.operator, cst.Power):
            continue
        for side, other in ((operation.left, operation.right),
                            (operation.right, operation.left)):
            if is_name(side, name) and scripted_as_tensor(method, other):
                return True
    for aug in find_all(body, cst.AugAssign):
        if (is_name(aug.value, name) and not isinstance(aug.operator, cst.PowerAssign)
                and scripted_as_tensor(method, aug.target)):
            return True
    return False


def scripted_as_tensor(method: MethodState, node: cst.BaseExpression) -> bool:
    """A Tensor by the typer, or a parameter TorchScript takes for one: no annotation, no
    default, and annotate gave it no other type (``forward(self, x)``'s ``x``)."""
    if method.typer.type_of(node) == TENSOR:
        return True
    if not isinstance(node, cst.Name) or node.value in method.param_types:
        return False
    params = method.func.params
    first = method.self_var is not None
    positional = [*params.posonly_params, *params.params][1 if first else 0:]
    return any(p.name.value == node.value and p.annotation is None and p.default is None
               for p in [*positional, *params.kwonly_params])


def tensor_receiver(method: MethodState, node: cst.BaseExpression) -> bool:
    """``node``, calling a method of :data:`TENSOR_ARGUMENTS`, is a Tensor: the typer says so,
    or it cannot tell and ``node`` is no instance, submodule or imported name (``att`` of
    ``att = torch.einsum(...)``, ``(q @ k)``): in compiled code only tensors have methods of
    these names."""
    kind = method.typer.type_of(node)
    if kind is not None:
        return kind == TENSOR
    root: cst.BaseExpression = node
    while isinstance(root, cst.Attribute | cst.Subscript | cst.Call):
        root = root.func if isinstance(root, cst.Call) else root.value
    return not (isinstance(root, cst.Name) and (root.value == method.self_var
                                                or root.value in method.imports
                                                or root.value in method.functions))


def decide(votes: list[str | None]) -> str | None:
    """The type the votes agree on; None when there is none or a Tensor vote is contested."""
    known = [v for v in votes if v is not None]
    if TENSOR in known and (len(set(known)) > 1 or NOT_TENSOR in votes):
        return None
    return unify_all(k for k in known if k != NOT_TENSOR) if known else None


def _call_votes(method: MethodState, call: cst.Call, name: str) -> list[str | None]:
    votes: list[str | None] = []
    func = call.func
    imports = method.imports
    positional = [a for a in call.args if a.keyword is None and not a.star]
    # name.method(...)
    if isinstance(func, cst.Attribute) and is_name(func.value, name):
        votes.append(NOT_TENSOR if func.attr.value in CONTAINER_METHODS else TENSOR)
    # (name * n).round(): a Python number has no such method (speechbrain's relative lengths)
    elif (isinstance(func, cst.Attribute) and _scaled(method, func.value, name)
          and func.attr.value not in CONTAINER_METHODS | _NUMBER_METHODS):
        votes.append(TENSOR)
    for arg in call.args:
        if _scaled(method, arg.value, name) and callee_type(method, call, arg) == TENSOR:
            votes.append(TENSOR)    # ``name * n`` is a Tensor only when name is one
        if not is_name(arg.value, name) or arg.star:
            continue
        declared = callee_type(method, call, arg)
        if declared is not None:
            votes.append(declared)
            continue
        qualified = qualified_name(func, imports) or ""
        if arg.keyword is not None:
            keyword = arg.keyword.value
            if qualified in _TENSOR_PAIRS and keyword in _PAIR_KEYWORDS:
                votes.append(TENSOR)
            elif keyword in INT_KEYWORDS:
                votes.append("int")
            elif keyword in FLOAT_KEYWORDS:
                votes.append("float")
            elif keyword in TYPED_KEYWORDS:
                votes.append(TYPED_KEYWORDS[keyword])
            continue
        index = positional.index(arg)
        callee = get_full_name_for_node(func)
        if callee == "range":
            votes.append("int")
            continue
        if isinstance(func, cst.Attribute):
            receiver = method.typer.type_of(func.value)
            called = func.attr.value
            if (method.self_var and is_name(func.value, method.self_var)
                    and called in method.facts.layers and index == 0):
                votes.append(TENSOR)
            elif receiver == TENSOR and called in INT_ARGUMENTS:
                positions = INT_ARGUMENTS[called]
                if positions is None or index in positions:
                    votes.append("int")
            elif index in TENSOR_ARGUMENTS.get(called, ()) and tensor_receiver(method,
                                                                               func.value):
                votes.append(TENSOR)
            elif receiver == TENSOR and called in ("masked_fill", "masked_fill_") and \
                    index == 1:
                votes.append("float")
        last = qualified.rpartition(".")[2]
        if (qualified in _TENSOR_PAIRS and index in (0, 1)) or (
                qualified.startswith("torch.") and index == 0
                and last not in TENSOR_CONSTRUCTORS and not last[:1].isupper()):
            votes.append(TENSOR)
    # torch.cat([a, name]) and friends: list elements are tensors.
    qualified = qualified_name(func, imports) or ""
    if (qualified in _TENSOR_LISTS and positional
            and isinstance(positional[0].value, cst.List | cst.Tuple)
            and any(is_name(e.value, name) for e in positional[0].value.elements)):
        votes.append(TENSOR)
    return votes


def _scaled(method: MethodState, value: cst.BaseExpression, name: str) -> bool:
    """``name * n``, ``n + name``... with a number ``n``."""
    if not isinstance(value, cst.BinaryOperation):
        return False
    for side, other in ((value.left, value.right), (value.right, value.left)):
        if is_name(side, name) and method.typer.type_of(other) in ("int", "float"):
            return True
    return False


def _bound_reads(bound: cst.BaseExpression | None, name: str) -> bool:
    """``x[:name]``, ``x[start:start + name]``: a slice bound is an int, and so are the names
    added to or subtracted from one."""
    if is_name(bound, name):
        return True
    return (isinstance(bound, cst.BinaryOperation)
            and isinstance(bound.operator, cst.Add | cst.Subtract)
            and (_bound_reads(bound.left, name) or _bound_reads(bound.right, name)))
