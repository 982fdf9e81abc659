"""The contract every tsfix rule follows.

A rule is a LibCST codemod (``VisitorBasedCodemodCommand``) with three extras:

* ``name`` and ``summary`` for ``tsfix rules``, and a docstring in ruff's sections
  (What it does / Why it breaks export / Example / Fix safety) for the docs;
* ``VALID`` / ``INVALID`` examples in Fixit's style, run by the test suite for every rule;
* per-class bookkeeping: each rewritten class is recorded as a :class:`ClassChange` (what
  validation re-scripts and compares) and each candidate it declines as a :class:`Skip` with a
  reason, so the engine can report both and re-run the rule without a rejected class.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst
from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand
from libcst.metadata import PositionProvider
from tsfix.codemods.imports import add_typing_names


@dataclass(frozen=True)
class Example:
    """An embedded example: ``before`` is rewritten to ``after`` (``after=None``: unchanged)."""

    before: str
    after: str | None = None


@dataclass
class ClassChange:
    """One class a rule rewrote."""

    rule: str
    class_name: str
    lines: tuple[int, int]
    summary: str
    # forward() parameter -> plain attribute it defaults to. Validation calls one scripted
    # artifact with every configuration's attribute values through these parameters.
    lifted: dict[str, str] = field(default_factory=dict)


@dataclass
class Skip:
    """A candidate a rule declined, and why (shown with ``-v`` and in the report)."""

    rule: str
    class_name: str
    line: int
    reason: str


class Rule(VisitorBasedCodemodCommand):
    name: ClassVar[str]
    summary: ClassVar[str]
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Example]] = ()

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, context: CodemodContext, skip_classes: Collection[str] = ()) -> None:
        super().__init__(context)
        # Classes whose rewrite validation rejected: the engine re-runs the rule without them.
        self.skip_classes = frozenset(skip_classes)
        self.changes: list[ClassChange] = []
        self.skips: list[Skip] = []
        self.typing_names: set[str] = set()

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        # Rules ask for typing names while rewriting (need_typing); they are added once here.
        return add_typing_names(updated_node, self.typing_names)

    def need_typing(self, *names: str) -> None:
        self.typing_names.update(names)

    def line_of(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def span_of(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return (pos.start.line, pos.end.line)

    def skip(self, class_name: str, node: cst.CSTNode, reason: str) -> None:
        self.skips.append(Skip(self.name, class_name, self.line_of(node), reason))
