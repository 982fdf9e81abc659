"""One compiled method: its signature (``_signature``), then its body (``_body``), with types
from the shared facts, the example calls and the body's own evidence (``_evidence``)."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.rules.annotate._body import Replace, empty_literals, integer_lists, return_type
from tsfix.codemods.rules.annotate._common import prepend
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
        changed = (params is not self.func.params or returns is not None or self.prologue
                   or self.replacements or self.local_copies)
        if not changed:
            return self.func
        func = self.func
        if self.replacements or self.local_copies:
            func = func.visit(Replace(self.replacements, self.self_var or "self",
                                      self.local_copies))  # type: ignore[assignment]
        for attr, local in self.local_copies.items():
            self.prologue.append(f"{local} = {self.self_var}.{attr}")
        if self.prologue:
            func = func.with_changes(body=prepend(func.body, self.prologue))
        func = func.with_changes(params=params)
        if returns is not None:
            func = func.with_changes(returns=self.annotation(returns))
            self.counts.parts.append(f"{self.name}() returns {returns}")
        return func
