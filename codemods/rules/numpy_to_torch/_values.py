"""What the translation knows about a value: its kind (a numpy array, a numpy scalar, a Python
number, a torch Tensor, ...) and dtype, and the code an expression becomes."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.value_types import TENSOR

ARRAY = "array"        # a numpy array; a Tensor of the same dtype once translated
SCALAR0 = "scalar0"    # a numpy scalar from a reduction or an element; a 0-d Tensor once translated
NUM = "number"         # a Python number (dtype "int"/"float"/"bool")
TENS = "tensor"        # a torch Tensor the original already had
OTHER = "other"        # anything else TorchScript can type (typ)
OPAQUE = "opaque"      # computed by numpy code that stays numpy
UNKNOWN = "unknown"
DTYPE = "dtype"        # a numpy dtype spelled in the code (np.float32, float, "int64")
NEWAXIS = "newaxis"
LITERAL = "literal"    # a tuple/list literal (items)


@dataclass(frozen=True)
class Val:
    kind: str
    dtype: str | None = None
    strong: bool = False                 # NUM: it was a numpy scalar (np.float64) originally
    origins: frozenset[int] = frozenset()   # translated statements this value comes from
    alias: bool = False                  # ARRAY: may share memory where numpy copied
    maybe_scalar: bool = False           # ARRAY: an element (a[i]) that may be a numpy scalar
    typ: str | None = None               # OTHER: a TorchScript type string
    items: tuple[Val, ...] = ()         # LITERAL: element values
    line: int = 0                        # OPAQUE: where it was computed


UNKNOWN_VAL = Val(UNKNOWN)


class Refuse(Exception):
    """This statement cannot be translated exactly; the message says why."""


@dataclass
class Expr:
    code: str
    val: Val
    changed: bool = False
    atomic: bool = True


def is_atomic(node: cst.BaseExpression) -> bool:
    if node.lpar:
        return True
    return not isinstance(node, cst.BinaryOperation | cst.UnaryOperation | cst.Comparison |
                          cst.BooleanOperation | cst.IfExp | cst.Lambda | cst.NamedExpr)


def atom(expr: Expr) -> str:
    return expr.code if expr.atomic else f"({expr.code})"


FLAGGED = (ARRAY, SCALAR0, OPAQUE)


def holds_array(val: Val) -> bool:
    if val.kind in (ARRAY, SCALAR0, OPAQUE):
        return True
    return val.kind == LITERAL and any(holds_array(i) for i in val.items)


def type_string(val: Val) -> str | None:
    if val.kind == TENS:
        return TENSOR
    if val.kind == NUM:
        return val.dtype
    if val.kind == OTHER:
        return val.typ
    return None


def val_from_type(kind: str | None) -> Val:
    if kind is None:
        return UNKNOWN_VAL
    if kind == TENSOR:
        return Val(TENS)
    if kind in ("int", "float", "bool"):
        return Val(NUM, kind)
    return Val(OTHER, typ=kind)
