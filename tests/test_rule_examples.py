"""Every rule's embedded VALID / INVALID examples, Fixit style."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.codemod import CodemodContext
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.registry import ALL_RULES

CASES = [(rule, i, example.before, example.after)
         for rule in ALL_RULES.values() for i, example in enumerate(rule.INVALID)]
CASES += [(rule, i, code, None) for rule in ALL_RULES.values() for i, code in enumerate(rule.VALID)]


def _run(rule: type[Rule], code: str) -> tuple[str, Rule]:
    instance = rule(CodemodContext())
    return instance.transform_module(cst.parse_module(code)).code, instance


@pytest.mark.parametrize(("rule", "index", "before", "after"), CASES,
                         ids=[f"{c[0].name}-{'invalid' if c[3] else 'valid'}-{c[1]}"
                              for c in CASES])
def test_example(rule: type[Rule], index: int, before: str, after: str | None) -> None:
    out, instance = _run(rule, before)
    if after is None:
        assert out == before
        assert not instance.changes
    else:
        assert out == after
        assert instance.changes
        # The rewrite is a fixed point.
        again, second = _run(rule, out)
        assert again == out and not second.changes


@pytest.mark.parametrize("rule", list(ALL_RULES.values()), ids=list(ALL_RULES))
def test_rule_documentation(rule: type[Rule]) -> None:
    doc = rule.__doc__ or ""
    for section in ("What it does", "Why it breaks export", "Example", "Fix safety"):
        assert section in doc, f"{rule.name} docstring lacks '{section}'"
    assert rule.summary and "\n" not in rule.summary
    assert rule.INVALID and rule.VALID
