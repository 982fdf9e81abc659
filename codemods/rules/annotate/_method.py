"""One compiled method: its signature (``_signature``), then its body (``_body``), with types
from the shared facts, the example calls and the body's own evidence (``_evidence``)."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import code_of
from tsfix.codemods.facts.value_types import type_from_annotation
from tsfix.codemods.rules.annotate._body import Replace, empty_literals, integer_lists, return_type
from tsfix.codemods.rules.annotate._common import prepend
from tsfix.codemods.rules.annotate._refine import (
    Refinement,
    optional_local_names,
    optional_locals,
    refinement,
)
from tsfix.codemods.rules.annotate._signature import Signature
from tsfix.codemods.rules.annotate._state import MethodState


class MethodAnnotator(MethodState):
    def rewrite(self) -> cst.FunctionDef:
        # Empty literals first: a parameter's default may be filled from one (max(lengths)).
        empty_literals(self)
        params = Signature(self).rewrite()
        # Then the locals again, now that the parameters have their types.
        self.typer = self.body_typer()
        empty_literals(self)
        integer_lists(self)
        returns = return_type(self)
        self._refine_optionals(params)
        changed = (params is not self.func.params or returns is not None or self.prologue
                   or self.replacements or self.local_copies or self.asserts)
        if not changed:
            return self.func
        func = self.func
        if self.replacements or self.local_copies or self.asserts:
            func = func.visit(Replace(self.replacements, self.self_var or "self",
                                      self.local_copies, self.asserts))  # type: ignore[assignment]
        for attr, local in self.local_copies.items():
            self.prologue.append(f"{local} = {self.self_var}.{attr}")
        if self.prologue:
            func = func.with_changes(body=prepend(func.body, self.prologue))
        func = func.with_changes(params=params)
        if returns is not None:
            func = func.with_changes(returns=self.annotation(returns))
            self.counts.parts.append(f"{self.name}() returns {returns}")
        return func

    def _refine_optionals(self, params: cst.Parameters) -> None:
        """``assert name is not None`` before the uses of an Optional parameter or local the
        method never tests, where they need it (TSF228); ``name: Optional[T] = None`` for a
        local set to None and then to a ``T`` in a loop or branch (TSF229)."""
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            name = param.name.value
            kind = self.param_types.get(name) or (
                type_from_annotation(param.annotation.annotation)
                if param.annotation is not None else None)
            if kind is not None and kind.startswith("Optional["):
                self._assert_not_none(name, "parameter", refinement(self, name))
        declared = optional_locals(self)
        for name in optional_local_names(self, [code_of(a.targets[0].target) for a, _ in declared]):
            self._assert_not_none(name, "local", refinement(self, name, local=True))
        for assign, kind in declared:
            if id(assign) in self.replacements:
                continue
            target = assign.targets[0].target
            self.replacements[id(assign)] = cst.AnnAssign(
                target=target, annotation=self.annotation(kind), value=assign.value)
            self.fixed(assign, "TSF229", f"local {code_of(target)!r} of {self.name}() starts "
                       "as None and is assigned another type in a loop or branch")
            self.counts.parts.append(f"{code_of(target)}: {kind}")

    def _assert_not_none(self, name: str, role: str, plan: Refinement) -> None:
        for statement in plan.before:
            self.asserts.setdefault(id(statement), []).append(f"assert {name} is not None")
            self.fixed(statement, "TSF228", f"Optional {role} {name!r} of {self.name}() is "
                       "used without an `is not None` test")
        if plan.before:
            self.counts.parts.append(f"assert {name} is not None")
        if plan.left:
            self.skip(plan.left[0], f"Optional {role} {name} is used without an `is not None` "
                      "test where only some paths of its statement evaluate it (a conditional "
                      "expression, `and`/`or`, a comprehension): no assert can go before it; "
                      "left as it is", code="TSF228", message=f"Optional {role} {name!r} of "
                      f"{self.name}() is used without an `is not None` test")
