"""Every rule tsfix knows, by name, in the order ``--rule all`` runs them."""

from __future__ import annotations

from tsfix.codemods.annotate import Annotate
from tsfix.codemods.lift_branch import LiftBranch
from tsfix.codemods.modulelist_iter import ModuleListIter
from tsfix.codemods.rule import Rule

# modulelist-iter first: it restructures loops, which the others then read as written.
# annotate last: it types what is still untyped, including signatures lift-branch extended.
ALL_RULES: dict[str, type[Rule]] = {
    rule.name: rule for rule in (ModuleListIter, LiftBranch, Annotate)
}


class UnknownRuleError(ValueError):
    pass


def select_rules(names: list[str]) -> list[type[Rule]]:
    """Rule classes for ``names`` (``all`` selects every rule), in registry order."""
    wanted: set[str] = set()
    for name in names:
        if name == "all":
            wanted.update(ALL_RULES)
        elif name in ALL_RULES:
            wanted.add(name)
        else:
            known = ", ".join(["all", *ALL_RULES])
            raise UnknownRuleError(f"unknown rule {name!r} (known: {known})")
    return [rule for rule_name, rule in ALL_RULES.items() if rule_name in wanted]
