"""One class: class-level declarations (Optional attributes refined through locals, empty
container attributes), then each compiled method (``_method``)."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
from tsfix.codemods.facts.syntax import find_all, names_used, self_attr, self_name
from tsfix.codemods.facts.value_types import (
    annotation_text,
    is_complete,
    typing_names,
    unify,
    unify_all,
    without_none,
)
from tsfix.codemods.rules.annotate._common import Counts, has_docstring, is_name
from tsfix.codemods.rules.annotate._functions import FunctionPlan, ModuleFunctions
from tsfix.codemods.rules.annotate._method import MethodAnnotator
from tsfix.codemods.rules.base import ClassChange, Rule


class ClassAnnotator:
    def __init__(self, rule: Rule, cls: cst.ClassDef, functions: ModuleFunctions,
                 forward_types: dict[str, dict[str, str]]) -> None:
        self.rule = rule
        self.functions = functions
        self.forward_types = forward_types
        self.cls = cls
        self.name = cls.name.value
        self.facts = rule.class_facts(cls)
        self.methods = self.facts.methods
        self.compiled = self.facts.compiled
        self.observed = rule.observed.get(self.name, {})
        self.counts = Counts()

    def rewrite(self) -> cst.ClassDef:
        if not self.compiled:
            return self.cls
        class_lines: list[str] = []
        local_copies = self._optional_attribute_plan(class_lines)
        self._empty_attribute_plan(class_lines)
        new_methods: dict[str, cst.FunctionDef] = {}
        # Callees first (``compiled`` lists callers first), so that a parameter passed on to
        # one takes the type annotate has just given the callee's parameter; each method's
        # counts are merged back in the callers-first order of the summary.
        decided: dict[str, dict[str, str]] = {}
        method_counts: dict[str, Counts] = {}
        # The module functions compiled with this class go first of all (their callers'
        # parameters take their types); one that a rejected class reaches stays as it is.
        claims = {name: self.functions.plan(name)
                  for name in self.functions.reached(self.name)
                  if self.functions.claimable(name, self.rule.skip_classes)}
        functions = self.functions.as_left(claims)
        function_types = {name: plan.param_types for name, plan in claims.items()}
        called = {call.func.value for name in self.compiled
                  for call in find_all(self.methods[name].body, cst.Call)
                  if isinstance(call.func, cst.Name)}
        imported = self.functions.imported_signatures(called)
        for name in reversed(self.compiled):
            func = self.methods[name]
            method_counts[name] = Counts()
            annotator = MethodAnnotator(self.rule, self.facts, method_counts[name],
                                        self.observed.get(name, {}), name,
                                        local_copies.get(name, {}), decided, functions,
                                        function_types, self.forward_types, imported)
            rewritten = annotator.rewrite()
            decided[name] = annotator.param_types
            if rewritten is not func:
                new_methods[name] = rewritten
        self.forward_types[self.name] = decided.get("forward", {})
        for name in self.compiled:
            counts = method_counts[name]
            self.counts.observed += counts.observed
            self.counts.static += counts.static
            self.counts.parts.extend(counts.parts)
            self.counts.notes.extend(counts.notes)
        changed_functions = [plan for name, plan in claims.items()
                             if plan.func is not self.functions.functions[name]]
        self._report(claims)
        self.functions.report_elsewhere(self.name, self.facts)
        if not isinstance(self.cls.body, cst.IndentedBlock) or (
                not new_methods and not class_lines and not changed_functions):
            self.functions.register(self.name, claims, [])
            return self.cls
        body: list[cst.BaseStatement] = [
            new_methods.get(s.name.value, s) if isinstance(s, cst.FunctionDef) else s
            for s in self.cls.body.body]
        if class_lines:
            at = 1 if has_docstring(body) else 0
            rest = body[at:]
            if rest:
                # A blank line still separates the declarations from what follows them.
                rest[0] = rest[0].with_changes(leading_lines=rest[0].leading_lines  # type: ignore[attr-defined]
                                               or (cst.EmptyLine(),))
            body = [*body[:at], *(cst.parse_statement(line) for line in class_lines), *rest]
        new_cls = (self.cls.with_changes(body=self.cls.body.with_changes(body=body))
                   if new_methods or class_lines else self.cls)
        counts = self.counts
        parts = list(counts.parts)
        if counts.observed or counts.static:
            parts.insert(0, f"typed {counts.observed + counts.static} parameter(s) "
                         f"({counts.observed} from observed calls, {counts.static} from "
                         "the code)")
        notes = list(counts.notes)
        for plan in changed_functions:
            parts.append(plan.summary)
            notes.extend(plan.counts.notes)
            self.rule.need_typing(*plan.typing_names)
        summary = "; ".join(parts)
        self.rule.changes.append(ClassChange(self.rule.name, self.name,
                                             self.rule.span_of(self.cls), summary,
                                             notes=notes))
        # Last, so a failure above (the class is then left as it was) claims nothing.
        self.functions.register(self.name, claims, [plan.name for plan in changed_functions])
        return new_cls

    def _report(self, claims: dict[str, FunctionPlan]) -> None:
        """The findings in the module functions this class reaches, under this class's name,
        where no class reported them before."""
        for name, plan in claims.items():
            if name in self.functions.reported:
                continue
            self.rule.fixes.extend(replace(f, class_name=self.name) for f in plan.fixes)
            self.rule.skips.extend(replace(s, class_name=self.name) for s in plan.skips)

    # -- attributes ------------------------------------------------------------------------------

    def _optional_attribute_plan(self, class_lines: list[str]) -> dict[str, dict[str, str]]:
        """method -> {attr: local name} for Optional attributes refined in that method."""
        plan: dict[str, dict[str, str]] = {}
        facts = self.facts
        declared_optional = {a for a, k in facts.declared.items()
                             if k and k.startswith("Optional[")}
        for attr in sorted(set(facts.maybe_none) | declared_optional):
            if attr in facts.layers:
                continue
            declared = facts.declared.get(attr)
            tested, needed, plain_reads = [], False, False
            for name in self.compiled:
                func = self.methods[name]
                self_var = self_name(func) or "self"
                reads = [a for a in find_all(func.body, cst.Attribute)
                         if self_attr(a, self_var) == attr]
                if not reads:
                    continue
                tests = _none_tests(func.body, self_var, attr)
                if not tests:
                    plain_reads = True
                    continue
                tested.append(name)
                if declared is not None or any(in_chain for in_chain in tests.values()):
                    needed = True
                if _assigns_attr(func, self_var, attr):
                    plain_reads = True
            if not needed:
                continue
            where = self.methods[tested[0]]
            if plain_reads:
                self.rule.skip(self.name, where, f"self.{attr} may be None and is read without "
                               "an `is not None` test in a compiled method (or assigned "
                               "there); not refined")
                continue
            kind = facts.maybe_none.get(attr)
            if declared is None:
                if kind is None or not is_complete(kind):
                    self.rule.skip(self.name, where, f"self.{attr} may be None, but the type "
                                   "of its other values is unknown; not declared Optional")
                    continue
                optional = f"Optional[{without_none(kind)}]"
                self.rule.need_typing(*typing_names(optional))
                class_lines.append(
                    f"{attr}: {annotation_text(optional, self.rule.facts.tensor_name)}")
                self.counts.parts.append(f"declared self.{attr} {optional}")
            for name in tested:
                used = names_used(self.methods[name])
                local = attr if attr not in used else f"{attr}_value"
                plan.setdefault(name, {})[attr] = local
            self.counts.parts.append(f"refined self.{attr} through a local")
        return plan

    def _empty_attribute_plan(self, class_lines: list[str]) -> None:
        facts = self.facts
        for attr, kind in sorted(facts.empty_containers.items()):
            if attr in facts.declared or not self._read_in_compiled(attr):
                continue
            element_types = []
            for name, func in self.methods.items():
                self_var = self_name(func) or "self"
                typer = facts.typer(name)
                for call in find_all(func.body, cst.Call):
                    if (isinstance(call.func, cst.Attribute)
                            and self_attr(call.func.value, self_var) == attr
                            and call.func.attr.value in ("append", "insert") and call.args):
                        element_types.append(typer.type_of(call.args[-1].value))
            element = unify_all(element_types) if element_types else None
            full = unify(kind, f"List[{element}]") if element else kind
            if full is None or not is_complete(full):
                self.rule.skip(self.name, self.cls, f"self.{attr} starts empty and its element "
                               "type is unknown; TorchScript cannot type it (annotate it at "
                               "class level)")
                continue
            if full in ("List[Tensor]", "Dict[str, Tensor]"):
                continue
            self.rule.need_typing(*typing_names(full))
            class_lines.append(f"{attr}: {annotation_text(full, self.rule.facts.tensor_name)}")
            self.counts.parts.append(f"declared self.{attr} {full}")

    def _read_in_compiled(self, attr: str) -> bool:
        for name in self.compiled:
            func = self.methods[name]
            self_var = self_name(func) or "self"
            if any(self_attr(a, self_var) == attr for a in find_all(func.body, cst.Attribute)):
                return True
        return False


def _none_tests(body: cst.CSTNode, self_var: str, attr: str) -> dict[int, bool]:
    """``self.<attr> is (not) None`` tests in ``body`` -> whether the test sits in an and/or
    chain that reads the attribute again (the case TorchScript cannot refine)."""
    tests: dict[int, bool] = {}
    chains = find_all(body, cst.BooleanOperation)
    for comparison in find_all(body, cst.Comparison):
        if not (self_attr(comparison.left, self_var) == attr and len(comparison.comparisons) == 1
                and isinstance(comparison.comparisons[0].operator, cst.Is | cst.IsNot)
                and is_name(comparison.comparisons[0].comparator, "None")):
            continue
        in_chain = False
        for chain in chains:
            members = find_all(chain, cst.Comparison)
            if any(m is comparison for m in members):
                reads = [a for a in find_all(chain, cst.Attribute)
                         if self_attr(a, self_var) == attr]
                in_chain = in_chain or len(reads) > 1
        tests[id(comparison)] = in_chain
    return tests


def _assigns_attr(func: cst.FunctionDef, self_var: str, attr: str) -> bool:
    for target in find_all(func.body, cst.AssignTarget, cst.AugAssign, cst.AnnAssign):
        if self_attr(target.target, self_var) == attr:
            return True
    return False
