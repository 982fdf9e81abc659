"""Types in ``ignore-numpy``: the numpy-aware Typer and how types meet where paths join."""

from __future__ import annotations

import re
from collections.abc import Mapping, Set

import libcst as cst
from tsfix.codemods.facts.syntax import qualified_name, self_attr
from tsfix.codemods.facts.value_types import Typer, is_complete, parts_of, unify

# Type of a variable that holds a numpy value (assigned by numpy code; no TorchScript type).
NUMPY = "<numpy>"
Env = dict[str, str | None]

# torch functions that return something other than one Tensor (PackedSequence, tuples, ...).
_NOT_TENSOR_PREFIXES = ("torch.nn.utils.", "torch.distributions.", "torch.utils.",
                        "torch.autograd.", "torch.jit.")


class NumpyTyper(Typer):
    """The static Typer, with numpy in mind: a numpy expression or a variable holding a numpy
    value has no type (Typer would call ``x.numpy()`` a Tensor), and ``self.m(...)`` has the
    return annotation of method ``m``."""

    def __init__(self, imports: Mapping[str, str], self_var: str,
                 attributes: Mapping[str, str], layers: Set[str], numpy_nodes: Set[int],
                 returns: Mapping[str, str | None]) -> None:
        super().__init__({}, dict(imports), self_var, dict(attributes), set(layers))
        # ``torch.from_numpy(a)`` is a Tensor; ``.numpy()`` calls and numpy names are not typed.
        self.numpy_nodes = numpy_nodes
        self.returns = returns

    def type_of(self, node: cst.BaseExpression) -> str | None:
        if id(node) in self.numpy_nodes:
            return None
        if isinstance(node, cst.Name) and self.env.get(node.value) == NUMPY:
            return None
        if isinstance(node, cst.Call):
            attr = self_attr(node.func, self.self_var or "self")
            if attr is not None and attr in self.returns:
                return self.returns[attr]
            # Typer takes every torch.* function for a Tensor; these are not.
            qualified = qualified_name(node.func, dict(self.imports)) or ""
            if qualified.startswith(_NOT_TENSOR_PREFIXES):
                return None
        kind = super().type_of(node)
        return None if kind == NUMPY else kind


def merge(a: Env, b: Env) -> Env:
    """Types where two paths meet; a numpy value on either path is a numpy value."""
    merged: Env = {}
    for name in a.keys() | b.keys():
        if name in a and name in b:
            x, y = a[name], b[name]
            if x == NUMPY or y == NUMPY:
                merged[name] = NUMPY
            elif x == y:
                merged[name] = x
            else:
                merged[name] = unify(x, y)
        else:
            merged[name] = a[name] if name in a else b[name]
    return merged


def script_default(kind: str | None) -> str | None:
    """What TorchScript makes of an unannotated empty literal typed ``List[?]``/``Dict[?, ?]``
    (None for any other type)."""
    if kind is None or kind == NUMPY or is_complete(kind):
        return None
    head, _ = parts_of(kind)
    return {"List": "List[Tensor]", "Dict": "Dict[str, Tensor]"}.get(head)


def unify_known(kinds: list[str | None]) -> str | None:
    """One type for all of ``kinds``; None when any is unknown or numpy."""
    if not kinds or any(k is None or k == NUMPY for k in kinds):
        return None
    result: str | None = kinds[0]
    for kind in kinds[1:]:
        result = unify(result, kind)
    return result


def observation(kind: str | None) -> str | None:
    """An observed type as TorchScript spells it (``NoneType`` -> ``None``)."""
    if kind is None:
        return None
    return re.sub(r"\bNoneType\b", "None", kind)
