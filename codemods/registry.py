"""Every rule tsfix knows, by name, in the order ``--rule all`` runs them."""

from __future__ import annotations

from tsfix.codemods.annotate import Annotate
from tsfix.codemods.ignore_numpy import IgnoreNumpy
from tsfix.codemods.lift_branch import LiftBranch
from tsfix.codemods.modulelist_iter import ModuleListIter
from tsfix.codemods.numpy_to_torch import NumpyToTorch
from tsfix.codemods.rule import Rule
from tsfix.codemods.rule_names import UnknownRuleError, check_rule_names

__all__ = ["ALL_RULES", "UnknownRuleError", "select_rules"]

# modulelist-iter first: it restructures loops, which the others then read as written.
# numpy-to-torch before ignore-numpy: what has an exact torch form is translated (the
# artifact then saves), and only the rest is moved into an ignored method.
# annotate last: it types what is still untyped, including signatures lift-branch extended.
ALL_RULES: dict[str, type[Rule]] = {
    rule.name: rule for rule in (ModuleListIter, LiftBranch, NumpyToTorch, IgnoreNumpy, Annotate)
}


def select_rules(names: list[str]) -> list[type[Rule]]:
    """Rule classes for ``names`` (``all`` selects every rule), in registry order."""
    check_rule_names(names, list(ALL_RULES))
    wanted = set(ALL_RULES) if "all" in names else set(names)
    return [rule for rule_name, rule in ALL_RULES.items() if rule_name in wanted]
