"""dtype promotion: the dtype numpy gives an elementwise result (numpy 2, NEP 50) and the one
torch would compute in, and the casts that make torch compute what numpy does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tsfix.codemods.rules.numpy_to_torch._state import Translation
from tsfix.codemods.rules.numpy_to_torch._values import (
    ARRAY,
    NUM,
    SCALAR0,
    TENS,
    Expr,
    Refuse,
    atom,
)

# dtype -> (category, bytes); category 0 bool, 1 integer, 2 float.
DTYPES: dict[str, tuple[int, int]] = {
    "bool": (0, 1), "uint8": (1, 1), "int8": (1, 1), "int16": (1, 2), "int32": (1, 4),
    "int64": (1, 8), "float16": (2, 2), "float32": (2, 4), "float64": (2, 8)}
UNSIGNED = {"uint8"}
_WEAK_DTYPES = {"bool": "bool", "int": "int64", "float": "float32"}   # torch's wrapped numbers


# "floating": a float array whose width is unknown (the softmax of a Tensor, a layer's output).
FLOATING = "floating"


def category(dtype: str) -> int:
    return 2 if dtype == FLOATING else DTYPES[dtype][0]


def _same_category(a: str, b: str) -> str:
    """Promotion within one category: numpy and torch agree there."""
    if a == b:
        return a
    if FLOATING in (a, b):
        return "float64" if "float64" in (a, b) else FLOATING
    ca, sa = DTYPES[a]
    _, sb = DTYPES[b]
    if ca == 1 and (a in UNSIGNED) != (b in UNSIGNED):
        signed, unsigned = (b, a) if a in UNSIGNED else (a, b)
        size = max(DTYPES[signed][1], DTYPES[unsigned][1] * 2)
        return {1: "int8", 2: "int16", 4: "int32", 8: "int64"}[size]
    return a if sa >= sb else b


def _numpy_promote(a: str, b: str) -> str:
    ca, cb = category(a), category(b)
    if ca == cb:
        return _same_category(a, b)
    low, high = (a, b) if ca < cb else (b, a)
    if category(low) == 0:
        return high
    if high == FLOATING:
        raise Refuse("an integer array meets a float array of unknown width: numpy's result "
                      "dtype depends on the width")
    # integer with float: the float must hold every integer value
    needed = {1: "float16", 2: "float32", 4: "float64", 8: "float64"}[DTYPES[low][1]]
    return _same_category(high, needed)


def _torch_promote(a: str, b: str) -> str:
    ca, cb = category(a), category(b)
    if ca == cb:
        return _same_category(a, b)
    return a if ca > cb else b


@dataclass(frozen=True)
class Operand:
    """One operand of an elementwise operation, as numpy and as torch see it."""

    dtype: str | None          # numpy dtype of an array / numpy scalar; "int"/"float"/"bool" weak
    weak: bool                 # a Python number
    tier: str                  # torch: "dim" (array), "zero" (0-d tensor), "wrapped" (number)
    strong_scalar: bool = False   # a numpy float64/int64 scalar that became a Python number


def numpy_result(ops: Sequence[Operand]) -> str | None:
    strong = [o for o in ops if not o.weak or o.strong_scalar]
    weak = [o for o in ops if o.weak and not o.strong_scalar]
    if any(o.dtype is None for o in strong):
        return None
    dtypes = [("float64" if o.strong_scalar and o.dtype == "float" else
               "int64" if o.strong_scalar else o.dtype) for o in strong]
    if not dtypes:
        return None
    result = dtypes[0]
    for d in dtypes[1:]:
        result = _numpy_promote(result, d)  # type: ignore[arg-type]
    for o in weak:
        kind = {"bool": 0, "int": 1, "float": 2}[o.dtype or "float"]
        if kind > category(result):  # type: ignore[arg-type]
            result = "int64" if kind == 1 else "float64"
    return result


def torch_result(ops: Sequence[Operand]) -> str | None:
    tiers: dict[str, str | None] = {"dim": None, "zero": None, "wrapped": None}
    for o in ops:
        dtype = _WEAK_DTYPES[o.dtype or "float"] if o.tier == "wrapped" else o.dtype
        if dtype is None:
            return None
        current = tiers[o.tier]
        tiers[o.tier] = dtype if current is None else _torch_promote(current, dtype)

    def combine(higher: str | None, lower: str | None) -> str | None:
        if higher is None:
            return lower
        if lower is None or category(higher) == 2:
            return higher
        if higher == "bool" or category(lower) == 2:
            return _torch_promote(higher, lower)
        return higher

    return combine(tiers["dim"], combine(tiers["zero"], tiers["wrapped"]))


def float_result(dtype: str) -> str:
    """numpy's result dtype of a float ufunc (exp, sqrt, ...) of ``dtype``."""
    if category(dtype) == 2:
        return dtype
    return {1: "float16", 2: "float32", 4: "float64", 8: "float64"}[DTYPES[dtype][1]]


class Promotion(Translation):
    """Elementwise operations on arrays: the operands' dtypes and the casts that make torch
    compute in numpy's result dtype."""

    def _operands(self, values: Sequence[Expr], what: str) -> list[Operand]:
        found = []
        for value in values:
            val = value.val
            if val.kind == ARRAY:
                found.append(Operand(val.dtype, False, "dim"))
            elif val.kind == SCALAR0:
                found.append(Operand(val.dtype, False, "zero"))
            elif val.kind == NUM and val.dtype in ("int", "float", "bool"):
                found.append(Operand(val.dtype, True, "wrapped", strong_scalar=val.strong))
            elif val.kind == TENS:
                raise Refuse(f"{what} mixes a numpy array with a torch Tensor")
            else:
                raise Refuse(f"{what}: cannot tell the type of `{value.code}`")
        return found

    def promote(self, values: Sequence[Expr], what: str, *, op: str = "",
                comparison: bool = False, in_place: bool = False,
                exact_operands: bool = False) -> tuple[list[str], str | None]:
        """The operands' code, cast where torch would compute in another dtype than numpy,
        and numpy's result dtype (None: the same unknown dtype as the one array)."""
        operands = self._operands(values, what)
        codes = [v.code for v in values]
        divide = op == "/"
        unknown = [o for o in operands if not o.weak and o.dtype is None]
        if unknown:
            others = [o for o in operands if o.weak or o.dtype is not None]
            small = all((o.weak and not o.strong_scalar and o.dtype in ("int", "bool"))
                        or (not o.weak and o.dtype is not None and category(o.dtype) <= 1)
                        for o in others)
            if comparison and (small or all(o.weak for o in others)):
                self.outcome.notes.append(
                    f"line {self.current_line()}: {what} compares an array whose dtype is "
                    "unknown; torch compares int64 with float32 in float32, numpy in float64 "
                    "(equal unless integers exceed 2**24)")
                return codes, "bool"
            if (len(unknown) == 1 and not divide and not comparison and op != "@"
                    and all(o.weak and not o.strong_scalar and o.dtype in ("int", "bool")
                            for o in others)):
                return codes, None
            raise Refuse(f"{what}: the dtype of an array here is unknown (it comes from "
                          "Tensor.numpy()), and numpy's result dtype depends on it")
        wanted = numpy_result(operands)
        got = torch_result(operands)
        if wanted is None or got is None:
            raise Refuse(f"{what}: cannot tell the result dtype")
        if divide:
            if category(wanted) < 2:
                wanted = "float64"
            if category(got) < 2:
                got = "float32"
        mismatched = [o for o in operands if not o.weak and o.dtype != wanted]
        if (wanted != got or mismatched) and any(v.val.maybe_scalar for v in values):
            raise Refuse(f"{what}: an element of an array of unknown rank may be a numpy "
                          "scalar or an array, which torch promotes differently")
        if wanted == got and not (exact_operands and mismatched):
            return codes, "bool" if comparison else wanted
        if in_place or wanted == FLOATING:
            raise Refuse(f"{what}: numpy computes it in {wanted}, torch would in {got}")
        cast: list[Operand] = []
        for index, (operand, value) in enumerate(zip(operands, values, strict=True)):
            if not operand.weak and operand.dtype != wanted:
                codes[index] = f"{atom(value)}.to({self.torch_name()}.{wanted})"
                cast.append(replace(operand, dtype=wanted))
            else:
                cast.append(operand)
        check = torch_result(cast)
        if divide and check is not None and category(check) < 2:
            check = "float32"
        if check != wanted:
            raise Refuse(f"{what}: numpy computes it in {wanted}, torch would in {got}")
        self.outcome.notes.append(
            f"line {self.current_line()}: {what} is computed in {wanted} as numpy does "
            f"(torch alone would use {got}): operands cast with .to({self.torch_name()}."
            f"{wanted})")
        return codes, "bool" if comparison else wanted
