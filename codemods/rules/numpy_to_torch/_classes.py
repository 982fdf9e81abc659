"""One class: which of its methods TorchScript compiles and use numpy, their translation, what
is reported (each numpy use fixed or refused, TSF205), and the rewritten class."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.numpy_usage import NumpyUse, function_numpy_bindings, numpy_uses
from tsfix.codemods.facts.syntax import code_of, find_all
from tsfix.codemods.rules.base import ClassChange, Rule
from tsfix.codemods.rules.numpy_to_torch._state import ClassContext, Outcome, Spelling, Unit
from tsfix.codemods.rules.numpy_to_torch._walk import MethodTranslator


class ClassTranslator:
    def __init__(self, rule: Rule, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.cls = cls
        self.name = cls.name.value
        self.facts = rule.class_facts(cls)
        self.module = rule.facts
        self.imports = self.module.imports
        # Modules the translation spells and the file must import (``math``, ``torch``).
        self.module_imports: set[str] = set()

    def rewrite(self) -> cst.ClassDef:
        if not isinstance(self.cls.body, cst.IndentedBlock):
            return self.cls
        replacements: dict[int, cst.CSTNode] = {}
        names: list[str] = []
        notes: list[str] = []
        candidates = []
        for method in self.facts.compiled:
            func = self.facts.methods[method]
            bindings = function_numpy_bindings(func, self.module.numpy_bindings)
            if numpy_uses(func.body, bindings, self.imports):
                candidates.append((method, func, bindings))
        if not candidates:
            return self.cls
        attributes, layers = init_attributes(self.facts)
        spelling = Spelling.of(self.module)
        context = ClassContext(self.rule, self.name, self.facts, self.imports, spelling,
                               attributes, layers)
        for method, func, bindings in candidates:
            translator = MethodTranslator(context, func, bindings)
            translator.run()
            for key, outcome in translator.outcomes.items():
                unit = translator.units[key]
                if outcome.reason is None and outcome.node is not None:
                    replacements[id(unit.node)] = outcome.node
                    names.extend(outcome.names)
                    notes.extend(outcome.notes)
                if unit.compiled:
                    self._report(method, unit, outcome, translator.uses[key])
        if not replacements:
            return self.cls
        if spelling.needs_math_import and "+math" in names:
            self.module_imports.add("math")
        if spelling.needs_torch_import and "+torch" in names:
            self.module_imports.add("torch")
        shown = sorted({n for n in names if not n.startswith("+")},
                       key=lambda n: (not n.startswith("np."), n))
        summary = (f"translated {', '.join(shown)} ({len(replacements)} "
                   f"{'site' if len(replacements) == 1 else 'sites'})")
        rewritten = self.cls.visit(_Replace(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.rule.changes.append(ClassChange(self.rule.name, self.name,
                                             self.rule.span_of(self.cls), summary,
                                             notes=list(dict.fromkeys(notes))))
        return rewritten


    def _report(self, method: str, unit: Unit, outcome: Outcome,
                uses: Sequence[NumpyUse]) -> None:
        """Each numpy use of a compiled unit is either fixed (translated) or refused with the
        reason; a refused unit without numpy uses of its own (it reads an array) is a skip
        without a code."""
        annotated = {id(n) for a in find_all(unit.node, cst.Annotation)
                     for n in find_all(a, cst.CSTNode)}  # type: ignore[type-abstract]
        translated = outcome.reason is None and outcome.node is not None
        for use in uses:
            if translated and id(use.node) not in annotated:
                self.rule.fixed(use.node, "TSF205", _message(use, method))
                continue
            if id(use.node) in annotated:
                reason = "numpy in a type annotation is not translated"
            elif outcome.reason is not None:
                reason = outcome.reason
            else:
                reason = f"`{code_of(use.node)}` is kept as a value (no torch form here)"
            self.rule.skip(self.name, use.node, f"{method}(): {reason}", code="TSF205",
                           message=_message(use, method))
        if not uses and outcome.numpyish and outcome.reason is not None:
            self.rule.skip(self.name, unit.owner, f"{method}(): {outcome.reason}")


def _message(use: NumpyUse, method: str) -> str:
    """The text ``tsfix check`` shows for a numpy use (the linter's TSF205 message)."""
    name = use.name
    if isinstance(use.node, cst.Call):
        name = code_of(use.node.func)
    return f"numpy ({name}) in {method}()"


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.replacements.get(id(original), updated)


def init_attributes(facts: ClassFacts) -> tuple[dict[str, str], set[str]]:
    """The types of what ``__init__`` stores on self (the shared facts), minus the attributes
    another method assigns too (their type may change on the way), and the layers whose call
    returns a Tensor."""
    return ({attr: kind for attr, kind in facts.attributes.items()
             if attr not in facts.assigned_outside_init}, facts.layers)
