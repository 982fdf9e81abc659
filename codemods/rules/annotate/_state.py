"""What the parts of one method's rewrite share (signature, body, evidence)."""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.syntax import self_name
from tsfix.codemods.facts.value_types import Typer, annotation_text, collect_locals, typing_names
from tsfix.codemods.rules.annotate._common import Counts, from_observation
from tsfix.codemods.rules.annotate._typer import CalleeTyper, module_functions
from tsfix.codemods.rules.base import Rule


def annotation(rule: Rule, kind: str) -> cst.Annotation:
    """The annotation for ``kind`` as this file spells Tensor; its typing names imported."""
    rule.need_typing(*typing_names(kind))
    return cst.Annotation(cst.parse_expression(annotation_text(kind, rule.facts.tensor_name)))


class MethodState:
    """One compiled method being annotated: what the rewrite has decided so far."""

    def __init__(self, rule: Rule, facts: ClassFacts, counts: Counts,
                 observed: Mapping[str, str], name: str, local_copies: dict[str, str],
                 callee_types: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.rule = rule
        self.facts = facts
        self.imports = facts.imports
        self.counts = counts
        self.class_name = facts.name
        self.name = name
        self.func = facts.methods[name]
        self.self_var = self_name(self.func)
        self.observed = observed        # this method's observed types
        self.local_copies = local_copies
        self.prologue: list[str] = []
        self.replacements: dict[int, cst.CSTNode] = {}
        self.asserts: dict[int, list[str]] = {}    # statement id -> asserts to put before it
        self.param_types: dict[str, str] = {}   # what the new signature says
        self.decided: dict[str, str] = {}       # empty literals typed so far
        # method -> the parameter types annotate gave it in this pass (callees go first)
        self.callee_types = callee_types or {}
        self.typer = self.body_typer()

    def skip(self, node: cst.CSTNode, reason: str, *, code: str | None = None,
             message: str = "") -> None:
        self.rule.skip(self.class_name, node, f"{self.name}(): {reason}", code=code,
                       message=message)

    def fixed(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.rule.fixed(node, code, message)

    def annotation(self, kind: str) -> cst.Annotation:
        return annotation(self.rule, kind)

    def body_typer(self) -> Typer:
        """A typer of the body: the parameters as the facts type them (annotation, example
        calls, literal default, use as a Tensor), overridden by the new signature's types and
        the empty literals typed so far. Its own copy: annotate adds to its environment."""
        observed = {key: kind for key, value in self.observed.items()
                    if (kind := from_observation(value)) is not None}
        env: dict[str, str | None] = {**self.facts.parameter_types(self.name, observed),
                                      **self.param_types}
        typer = CalleeTyper(env, self.facts, self.self_var,
                            module_functions(self.rule.facts.tree))
        collect_locals(self.func.body, typer)
        typer.env.update(self.decided)
        return typer
