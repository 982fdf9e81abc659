"""A rule that fails on one class costs only that rule's rewrite of that class."""

from __future__ import annotations

import textwrap

import libcst as cst
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.base import ClassChange, Rule

SOURCE = textwrap.dedent("""\
    import torch.nn as nn


    class Good(nn.Module):
        def forward(self, x):
            return x


    class Bad(nn.Module):
        def forward(self, x):
            return x


    class AlsoGood(nn.Module):
        def forward(self, x):
            return x
""")


class RenameForward(Rule):
    """Renames ``x`` to ``inputs``; a bug on any class named Bad (after recording its change)."""

    name = "rename-forward"
    summary = "test rule"
    order = 1

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls), "renamed"))
        self.need_typing("Optional")
        if cls.name.value == "Bad":
            # What a rule bug looks like: a node LibCST refuses to build.
            cst.Parameters(params=[cst.Param(cst.Name("a"), default=cst.Integer("1")),
                                   cst.Param(cst.Name("b"))])
        return cls.deep_replace(cls.body, cls.body.visit(_Renamer()))  # type: ignore[return-value]


class _Renamer(cst.CSTTransformer):
    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value="inputs") if updated.value == "x" else updated


def test_the_failing_class_is_left_and_reported_with_rule_class_and_line() -> None:
    result = rewrite_source(SOURCE, RewriteSettings([RenameForward]), "model.py")
    assert [c.class_name for c in result.changes] == ["Good", "AlsoGood"]
    good, bad, also = result.text.split("class ")[1:]
    assert "return inputs" in good and "return inputs" in also
    assert "return x" in bad and "inputs" not in bad
    (skip,) = result.skips
    assert (skip.rule, skip.class_name, skip.line) == ("rename-forward", "Bad", 9)
    assert skip.reason.startswith("internal error in rule rename-forward on class Bad (line 9): "
                                  "CSTValidationError: Cannot have param without defaults")
