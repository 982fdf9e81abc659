"""Every rule tsfix knows, by name, in the order ``--rule all`` runs them."""

from __future__ import annotations

from tsfix.codemods.rules.annotate import Annotate
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.drop_variable import DropVariable
from tsfix.codemods.rules.flatten_parameters import FlattenParameters
from tsfix.codemods.rules.ignore_numpy import IgnoreNumpy
from tsfix.codemods.rules.lift_branch import LiftBranch, LiftBranchOnnx
from tsfix.codemods.rules.modulelist_iter import ModuleListIter
from tsfix.codemods.rules.names import UnknownRuleError, check_rule_names
from tsfix.codemods.rules.numpy_to_torch import NumpyToTorch
from tsfix.codemods.rules.starred_args import StarredArgs
from tsfix.codemods.rules.sum_tensors import SumTensors
from tsfix.codemods.rules.super_forward import SuperForward

__all__ = ["ALL_RULES", "UnknownRuleError", "select_rules"]

# modulelist-iter first: it restructures loops, which the others then read as written.
# numpy-to-torch before ignore-numpy: what has an exact torch form is translated (the
# artifact then saves), and only the rest is moved into an ignored method.
# sum-tensors before lift-branch and annotate: its loops read the code as written, and the
# accumulators it adds are typed from torch.tensor(...) already.
# annotate last: it types what is still untyped, including signatures lift-branch extended.
ALL_RULES: dict[str, type[Rule]] = {
    rule.name: rule for rule in (ModuleListIter, SuperForward, FlattenParameters, DropVariable,
                                 StarredArgs, SumTensors, LiftBranch, NumpyToTorch, IgnoreNumpy,
                                 Annotate)
}


# Rules that emit another form under `--target onnx` (what the ONNX exporter keeps).
ONNX_FORMS: dict[type[Rule], type[Rule]] = {LiftBranch: LiftBranchOnnx}


def select_rules(names: list[str], target: str = "torchscript") -> list[type[Rule]]:
    """Rule classes for ``names`` (``all`` selects every rule), in registry order, in their
    form for ``target`` ("torchscript" or "onnx")."""
    check_rule_names(names, list(ALL_RULES))
    wanted = set(ALL_RULES) if "all" in names else set(names)
    selected = [rule for rule_name, rule in ALL_RULES.items() if rule_name in wanted]
    if target == "onnx":
        selected = [ONNX_FORMS.get(rule, rule) for rule in selected]
    return selected
