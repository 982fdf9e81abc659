"""Every rule tsfix knows, found in this package, in the order ``--rule all`` runs them.

A rule is a :class:`~tsfix.codemods.rules.base.Rule` subclass that declares its own ``name`` in
a module of ``codemods/rules/``; adding a rule is adding that module (and its fixture folder).
Forms a rule takes under another target (``LiftBranchOnnx``) inherit the name and are reached
through ``Rule.target_forms``, not listed here.
"""

from __future__ import annotations

import importlib
import pkgutil

from tsfix.codemods.rules import base
from tsfix.codemods.rules.base import Code, Rule
from tsfix.codemods.rules.names import UnknownRuleError, for_target

__all__ = ["ALL_RULES", "UnknownRuleError", "rule_codes", "select_rules"]

_NOT_RULES = frozenset({"base", "registry", "names", "imports"})


def _discover() -> dict[str, type[Rule]]:
    package = base.__name__.rpartition(".")[0]
    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if info.name in _NOT_RULES or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        found.extend(value for value in vars(module).values()
                     if isinstance(value, type) and issubclass(value, Rule)
                     and value.__module__ == module.__name__ and "name" in vars(value))
    found.sort(key=lambda rule: (rule.order, rule.name))
    return {rule.name: rule for rule in found}


ALL_RULES: dict[str, type[Rule]] = _discover()


def rule_codes() -> dict[str, tuple[Code, type[Rule]]]:
    """Every check code a rule declares -> (the code, the rule)."""
    return {code.code: (code, rule) for rule in ALL_RULES.values() for code in rule.CODES}


def select_rules(names: list[str], target: str = "torchscript") -> list[type[Rule]]:
    """Rule classes for ``names`` (``all`` selects every rule serving ``target``), in registry
    order, in their form for ``target`` ("torchscript", "onnx" or "export"). Raises
    UnknownRuleError for an unknown name or a rule named explicitly that does not serve
    ``target``."""
    served = {name: (rule.targets, rule.off_target) for name, rule in ALL_RULES.items()}
    return [ALL_RULES[name].target_forms.get(target, ALL_RULES[name])
            for name in for_target(names, target, served)]
