"""Method bodies: empty literals, integer lists, return annotations, and the node rewriter.

Each function reads and fills one :class:`~tsfix.codemods.rules.annotate._state.MethodState`:
what it decides goes into ``replacements`` (node id -> new node), the types it
decides into ``decided`` and the typer's environment.
"""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, parameters_of, qualified_name, self_attr
from tsfix.codemods.facts.value_types import (
    TENSOR,
    is_complete,
    parts_of,
    unify_all,
    without_none,
)
from tsfix.codemods.rules.annotate._common import from_observation, is_name, own, relaxed
from tsfix.codemods.rules.annotate._state import MethodState

# Callables whose first argument is a shape: a list of ints.
_SHAPE_FUNCTIONS = {"torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand",
                    "torch.randn"}
_SHAPE_METHODS = {"view", "reshape", "expand", "repeat", "permute", "new_zeros", "new_ones",
                  "new_empty", "new_full"}


def empty_literals(method: MethodState) -> None:
    """``lens = []`` + ``lens.append(n)`` with int ``n`` -> ``lens: List[int] = []`` (``{}``
    likewise); lists of tensors are what TorchScript assumes and stay as they are."""
    empties: dict[str, list[cst.Assign]] = {}
    parameters = set(parameters_of(method.func))
    for assign in own(method.func.body, cst.Assign):
        if (len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
                and assign.targets[0].target.value not in parameters
                and isinstance(assign.value, cst.List | cst.Dict)
                and not assign.value.elements):
            empties.setdefault(assign.targets[0].target.value, []).append(assign)
    for name, assigns in empties.items():
        if name in method.decided:
            continue
        is_list = isinstance(assigns[0].value, cst.List)
        if any(isinstance(a.value, cst.List) != is_list for a in assigns):
            continue
        elements, keys = stored_in(method, name)
        if not elements:
            continue
        element = unify_all(elements)
        if element is None or not is_complete(element):
            if TENSOR not in elements:
                method.skip(assigns[0], f"{name} starts empty and what goes into it cannot "
                            "be typed; left as it is")
            continue
        if is_list:
            if element == TENSOR:
                continue
            kind = f"List[{element}]"
        else:
            key = unify_all(keys) if keys else None
            if key not in ("str", "int") or (key == "str" and element == TENSOR):
                continue
            kind = f"Dict[{key}, {element}]"
        annotation = method.annotation(kind)
        for assign in assigns:
            method.replacements[id(assign)] = cst.AnnAssign(
                target=assign.targets[0].target, annotation=annotation, value=assign.value)
        method.typer.env[name] = method.decided[name] = kind
        method.counts.parts.append(f"{name}: {kind}")


def stored_in(method: MethodState, name: str) -> tuple[list[str | None], list[str | None]]:
    """Types of the elements (and dict keys) the method puts into container ``name``."""
    elements: list[str | None] = []
    keys: list[str | None] = []
    body, typer = method.func.body, method.typer
    for call in own(body, cst.Call):
        if (isinstance(call.func, cst.Attribute) and is_name(call.func.value, name)
                and call.args):
            called = call.func.attr.value
            if called in ("append", "insert"):
                elements.append(typer.type_of(call.args[-1].value))
            elif called == "extend":
                extended = typer.type_of(call.args[0].value)
                elements.append(parts_of(extended)[1][0] if extended and
                                extended.startswith("List[") else None)
    for assign in own(body, cst.Assign):
        for target in assign.targets:
            if isinstance(target.target, cst.Subscript) and is_name(
                    target.target.value, name) and len(target.target.slice) == 1:
                index = target.target.slice[0].slice
                if isinstance(index, cst.Index):
                    keys.append(typer.type_of(index.value))
                    elements.append(typer.type_of(assign.value))
    for aug in own(body, cst.AugAssign):
        if is_name(aug.target, name):
            added = typer.type_of(aug.value)
            elements.append(parts_of(added)[1][0] if added and
                            added.startswith("List[") else None)
    return elements, keys


def integer_lists(method: MethodState) -> None:
    """Tensor elements of a list that must hold ints (``F.pad(x, [0, maxlen - n])``) are
    wrapped in ``int(...)``."""
    for call in own(method.func.body, cst.Call):
        for literal in _shape_arguments(method, call):
            for element in literal.elements:
                if isinstance(element, cst.Element) and \
                        method.typer.type_of(element.value) == TENSOR:
                    method.replacements[id(element)] = element.with_changes(
                        value=cst.Call(cst.Name("int"), [cst.Arg(element.value)]))
                    method.counts.parts.append(f"int({code_of(element.value)}) in an int list")


def _shape_arguments(method: MethodState, call: cst.Call) -> list[cst.List | cst.Tuple]:
    qualified = qualified_name(call.func, method.imports) or ""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    wanted: list[cst.BaseExpression] = []
    if qualified.endswith("functional.pad"):
        wanted += [a.value for a in call.args if a.keyword and a.keyword.value == "pad"]
        wanted += [positional[1].value] if len(positional) > 1 else []
    elif qualified.endswith("functional.interpolate"):
        wanted += [a.value for a in call.args if a.keyword and a.keyword.value == "size"]
    elif positional and (qualified in _SHAPE_FUNCTIONS or (
            isinstance(call.func, cst.Attribute) and call.func.attr.value in _SHAPE_METHODS
            and method.typer.type_of(call.func.value) == TENSOR)):
        wanted.append(positional[0].value)
    return [w for w in wanted if isinstance(w, cst.List | cst.Tuple)]


def return_type(method: MethodState) -> str | None:
    """The return annotation the method needs (its returns disagree), else None. Int returns
    of a float method are widened (``1`` -> ``1.0``, ``n`` -> ``float(n)``)."""
    func = method.func
    if func.returns is not None:
        return None
    returns = own(func.body, cst.Return)
    if len(returns) < 2:
        return None
    kinds = [method.typer.type_of(r.value) if r.value is not None else "None"
             for r in returns]
    if all(k is not None for k in kinds) and len(set(kinds)) == 1:
        return None
    unified = unify_all(kinds)
    observed = from_observation(method.observed.get("return"))
    if (unified is None or not is_complete(unified)) and observed and is_complete(observed):
        # What the examples returned decides only where every return the code types fits it:
        # a Tensor on one path and a tuple on another (a setting choosing, asteroid's
        # Conv1DBlock) has no common type, whatever one configuration returned.
        # A return the code cannot type must not contradict it either: egnn's
        # `return feats, coors, coor_changes` under a flag no example set, against the
        # observed Tuple[Tensor, Tensor] of `return feats, coors`.
        fits = unify_all([*(k for k in kinds if k is not None), observed])
        if fits is not None and is_complete(fits) and all(
                _may_be(r.value, observed, method) for r, k in zip(returns, kinds, strict=True)
                if k is None and r.value is not None):
            unified = observed
    if unified is None or not is_complete(unified):
        if len({k for k in kinds if k is not None}) > 1:
            method.skip(func, "its returns disagree and their common type is unknown; "
                        "no return annotation")
        return None
    if len({relaxed(k) for k in kinds if k is not None}) <= 1 and None not in kinds:
        return None  # only Tensor/None differences: TorchScript infers Optional itself
    if without_none(unified) == "float":
        # TorchScript does not widen a returned int to float.
        for node, kind in zip(returns, kinds, strict=True):
            if kind == "int" and node.value is not None:
                value = node.value
                widened: cst.BaseExpression = (
                    cst.Float(f"{value.value}.0") if isinstance(value, cst.Integer)
                    else cst.Call(cst.Name("float"), [cst.Arg(value)]))
                method.replacements[id(node)] = node.with_changes(value=widened)
        method.counts.notes.append(f"{method.name}() now returns float on every path, "
                                   "in eager mode too (it returned an int on some)")
    return unified


def _may_be(value: cst.BaseExpression, kind: str, method: MethodState) -> bool:
    """Whether ``value``, whose type the code does not tell, may be of ``kind``: a tuple
    display has as many elements as ``kind``'s tuple, each typed one fitting its place."""
    if not isinstance(value, cst.Tuple):
        return True
    head, args = parts_of(kind)
    if head != "Tuple" or len(args) != len(value.elements) or any(
            isinstance(e, cst.StarredElement) for e in value.elements):
        return False
    for element, arg in zip(value.elements, args, strict=True):
        known = method.typer.type_of(element.value)
        if known is None:
            if not _may_be(element.value, arg, method):
                return False
        elif unify_all([known, arg]) is None:
            return False
    return True


class Replace(cst.CSTTransformer):
    """Applies a method's ``replacements`` and reads refined attributes from their locals."""

    def __init__(self, replacements: dict[int, cst.CSTNode], self_var: str,
                 local_copies: dict[str, str],
                 asserts: dict[int, list[str]] | None = None) -> None:
        self.replacements = replacements
        self.self_var = self_var
        self.local_copies = local_copies
        self.asserts = asserts or {}

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode  # type: ignore[override]
                 ) -> cst.CSTNode | cst.FlattenSentinel[cst.CSTNode]:
        asserts = self.asserts.get(id(original))
        if asserts and isinstance(updated, cst.SimpleStatementLine):
            # The statement's blank lines and comments stay above the asserts.
            added = [cst.parse_statement(line + "\n") for line in asserts]
            added[0] = added[0].with_changes(leading_lines=updated.leading_lines)
            return cst.FlattenSentinel([*added, updated.with_changes(leading_lines=())])
        replacement = self.replacements.get(id(original))
        if replacement is not None:
            if isinstance(original, cst.Element) and isinstance(updated, cst.Element):
                return updated.with_changes(value=replacement.value)  # type: ignore[attr-defined]
            if isinstance(replacement, cst.AnnAssign) and isinstance(updated, cst.Assign):
                return replacement.with_changes(value=updated.value)
            if isinstance(replacement, cst.Return) and isinstance(updated, cst.Return):
                return updated.with_changes(value=replacement.value)
            return replacement
        attr = self_attr(original, self.self_var)
        if attr is not None and attr in self.local_copies:
            return cst.Name(self.local_copies[attr])
        return updated
