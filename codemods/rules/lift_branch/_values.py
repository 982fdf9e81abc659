"""The type of a value ``__init__`` gives an attribute: a scalar type, an unknown scalar, or
what else it is (a tensor, a submodule, None, a computed value) and how a reason says so."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import (
    SCALAR_TYPES,
    annotation_type,
    literal_type,
    qualified_name,
    self_name,
)
from tsfix.codemods.rules.lift_branch._reads import dotted_read, sources
from tsfix.codemods.rules.lift_branch._setup import ClassSetup


def value_kind(setup: ClassSetup, value: cst.BaseExpression | None) -> tuple[str, str]:
    """A scalar type name, "scalar" (unknown scalar), or a non-config kind and its wording."""
    if value is None:
        return "computed", "is assigned by unpacking or in place"
    kind = literal_type(value)
    if kind is not None:
        return kind, ""
    if m.matches(value, m.Name("None")):
        return "none", "may be None"
    if isinstance(value, cst.Name) and value.value in setup.rebound_params:
        return "computed", (f"comes from {value.value}, which __init__ binds again: its type "
                            "is unknown")
    if isinstance(value, cst.Name) and value.value in setup.init_params:
        param = setup.init_params[value.value]
        declared = annotation_type(param.annotation)
        if declared == "optional" or (param.default is not None
                                      and m.matches(param.default, m.Name("None"))):
            return "none", f"comes from {value.value}, which may be None"
        if declared is not None:
            return declared, ""
        if param.annotation is not None:
            text = cst.Module([]).code_for_node(param.annotation.annotation)
            return "other", f"comes from {value.value}: {text}, not a bool/int/float/str"
        default_kind = literal_type(param.default)
        if default_kind:
            return default_kind, ""
        # No annotation or literal default: the type every example build passed, when
        # the example runs were observed (ParityBench passes ints to flags tested for truth).
        observed = setup.rule.observed.get(setup.name, {}).get("__init__", {}).get(
            value.value)
        return (observed, "") if observed in SCALAR_TYPES else ("scalar", "")
    if isinstance(value, cst.Call):
        called = get_full_name_for_node(value.func) or ""
        if called in SCALAR_TYPES:
            return called, ""
        if called == "len":
            # The length of a submodule list is the structure, not a setting to vary.
            self_var = self_name(setup.init) if setup.init else "self"
            modules = setup.registered | setup.facts.submodules | set(setup.facts.containers)
            sized = [a for arg in value.args for a in sources(arg.value)
                     if a.startswith(f"{self_var}.")
                     and a.partition(".")[2].partition(".")[0] in modules]
            if sized:
                return "module", f"is the length of submodule {sized[0]}, not a setting"
            return "int", ""
        qual = qualified_name(value.func, setup.imports) or ""
        if qual in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") or (
                qual.startswith("torch.") and not qual.startswith("torch.nn.")):
            return "tensor", "is a tensor"
        if setup.is_module_constructor(value):
            return "module", "is a submodule"
        if (isinstance(value.func, cst.Attribute) and value.func.attr.value == "get"
                and isinstance(value.func.value, cst.Name)
                and value.func.value.value in setup.init_params):
            default = value.args[1].value if len(value.args) > 1 else None
            kind = literal_type(default)
            return (kind, "") if kind else ("scalar", "")
        return "computed", "is computed in __init__ and its type is unknown"
    if isinstance(value, cst.Attribute | cst.Subscript):
        dotted = dotted_read(value)
        if dotted and dotted.split(".")[0] in setup.init_params:
            return "scalar", ""
        return "computed", "is computed in __init__ and its type is unknown"
    if isinstance(value, cst.IfExp):
        kinds = {value_kind(setup, value.body)[0], value_kind(setup, value.orelse)[0]}
        if "module" in kinds:
            return "module", "is a submodule (or None)"
        if "none" in kinds:
            return "none", "may be None"
        if len(kinds) == 1 and kinds <= set(SCALAR_TYPES):
            return kinds.pop(), ""
    if isinstance(value, cst.Comparison) or m.matches(value,
                                                      m.UnaryOperation(operator=m.Not())):
        return "bool", ""
    if isinstance(value, cst.BinaryOperation):
        return _arithmetic_kind(setup, value)
    return "computed", "is computed in __init__ and its type is unknown"


def _arithmetic_kind(setup: ClassSetup, value: cst.BinaryOperation) -> tuple[str, str]:
    """``num_layers - 1``: int from ints (``/`` gives a float), float with a float, str
    from ``+`` of strs; a tensor operand makes a tensor; unknown operands an unknown
    scalar (the uses then decide)."""
    kinds = {value_kind(setup, value.left)[0], value_kind(setup, value.right)[0]}
    if "tensor" in kinds:
        return "tensor", "is a tensor"
    if kinds == {"str"} and isinstance(value.operator, cst.Add):
        return "str", ""
    if kinds <= {"int", "bool"}:
        return ("float" if isinstance(value.operator, cst.Divide) else "int"), ""
    if kinds <= {"int", "bool", "float"}:
        return "float", ""
    if kinds <= {"int", "bool", "float", "scalar"}:
        return "scalar", ""
    return "computed", "is computed in __init__ and its type is unknown"
