"""Module-level functions compiled code calls: ``torch.jit.script`` compiles every function a
compiled method calls by name (``length_to_mask(lengths, max_len)``), with the same typing
rules as a method: an unannotated parameter is a Tensor there too.

The functions of the file that the compiled methods of a module class call by name, and those
these functions call, transitively (not in code TorchScript never compiles, not a name the
caller binds itself, not a ``@torch.jit.ignore``/``@torch.jit.unused`` function), are
annotated once per file like a method (``_method``), callees first. A function's rewrite is
part of the rewrite of every class that reaches it: each such class's change lists it, so the
validation of the class (re-script + eager parity) covers the function. When validation
rejects one of those classes, the function is left as it was (and so is every function that
reaches it), whatever the other classes' verdicts.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts, is_ignored, never_compiled_nodes
from tsfix.codemods.facts.project import (
    Definition,
    is_standard_library,
    lookup,
    relative_imports,
)
from tsfix.codemods.facts.syntax import decorator_names, find_all, names_bound_in
from tsfix.codemods.facts.value_types import TENSOR
from tsfix.codemods.rules.annotate._common import Counts
from tsfix.codemods.rules.annotate._evidence import usage_type
from tsfix.codemods.rules.annotate._method import MethodAnnotator
from tsfix.codemods.rules.annotate._state import FunctionFacts
from tsfix.codemods.rules.annotate._typer import module_functions
from tsfix.codemods.rules.base import ClassChange, Fix, Rule, Skip
from tsfix.codemods.validation.protocol import OBSERVED_FUNCTIONS, function_change_name

# Where the engine's observations of module-level functions are: ``observed[
# FUNCTIONS_KEY][function][parameter]`` (the observing worker records them under this name).
FUNCTIONS_KEY = OBSERVED_FUNCTIONS
# Decorators under which TorchScript compiles the function as it is written.
_TRANSPARENT = ("jit.script", "jit.script_if_tracing", "jit._script_if_tracing")


@dataclass
class FunctionPlan:
    """What annotate does to one module-level function, decided once per file."""

    name: str
    func: cst.FunctionDef                   # the new function (the old one: nothing to do)
    param_types: dict[str, str]             # what its new signature says
    counts: Counts
    fixes: list[Fix] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    typing_names: set[str] = field(default_factory=set)

    @property
    def summary(self) -> str:
        return self.described("a function of this file it calls")

    def described(self, role: str) -> str:
        counts = self.counts
        parts = list(counts.parts)
        if counts.observed or counts.static:
            parts.insert(0, f"typed {counts.observed + counts.static} parameter(s)")
        return f"{self.name}() ({role}): {', '.join(parts)}"


class ModuleFunctions:
    """The module-level functions of one file that compiled code reaches, and their plans."""

    def __init__(self, rule: Rule, module: cst.Module) -> None:
        self.rule = rule
        self.functions = module_functions(module)
        facts = rule.facts
        self.imports = facts.imports
        # function -> the functions it calls by name (compiled code only), in order
        self._calls = {name: self._called(func, never_compiled_nodes(func, self.imports))
                       for name, func in self.functions.items()}
        # function -> the module classes whose compiled methods reach it
        self.users: dict[str, set[str]] = {}
        self._reached: dict[str, list[str]] = {}
        for statement in module.body:
            if isinstance(statement, cst.ClassDef) and facts.is_module_class(statement):
                reached = self._reach(facts.of(statement))
                self._reached[statement.name.value] = reached
                for name in reached:
                    self.users.setdefault(name, set()).add(statement.name.value)
        # Functions another file's compiled code calls (Rule.compiled_functions): each is a
        # root of its own, owned by no class, and reported under function_change_name(f).
        self.entries: dict[str, str] = {}
        for name in sorted(rule.compiled_functions):
            if name in self.functions and not is_ignored(self.functions[name]):
                owner = function_change_name(name)
                self.entries[owner] = name
                self._reached[owner] = [name, *self._closure(name)]
                for function in self._reached[owner]:
                    self.users.setdefault(function, set()).add(owner)
        self._plans: dict[str, FunctionPlan] = {}
        self._relative = relative_imports(module)
        self._elsewhere: dict[str, str | None] = {}
        # functions whose findings a class has reported
        self.reported: set[str] = set()
        # class -> the functions its recorded change rewrites
        self.rewritten_by: dict[str, list[str]] = {}

    def register(self, class_name: str, claims: Mapping[str, FunctionPlan],
                 rewritten: list[str]) -> None:
        """A class's rewrite went through: its findings in ``claims`` are reported, and the
        functions ``rewritten`` are written when its change is."""
        self.reported.update(claims)
        self.rewritten_by[class_name] = rewritten

    def written(self, changed_classes: Collection[str]) -> dict[int, cst.FunctionDef]:
        """id of an original function -> its rewrite, for the functions the recorded changes
        of ``changed_classes`` rewrite (a change undone after the class's rewrite, such as an
        overloaded class's, writes none)."""
        names = {name for cls in changed_classes for name in self.rewritten_by.get(cls, [])}
        return {id(self.functions[name]): self._plans[name].func for name in names}

    def reached(self, class_name: str) -> list[str]:
        """The functions the class's compiled methods reach, callers before callees."""
        return self._reached.get(class_name, [])

    def claimable(self, name: str, rejected: Collection[str]) -> bool:
        """Whether ``name`` may be rewritten: no class that reaches it, or reaches a function
        it reaches, was rejected by validation."""
        return not any(self.users.get(f, set()) & set(rejected)
                       for f in [name, *self._closure(name)])

    def plan(self, name: str) -> FunctionPlan:
        """The plan for ``name`` (its callees planned first: a parameter passed on to one
        takes the type it was given)."""
        plan = self._plans.get(name)
        if plan is not None:
            return plan
        # A placeholder first: a recursive call sees the function unannotated.
        self._plans[name] = FunctionPlan(name, self.functions[name], {}, Counts())
        for callee in self._calls[name]:
            self.plan(callee)
        plan = self._plans[name] = self._annotate(name)
        return plan

    def as_left(self, claimed: Mapping[str, FunctionPlan]) -> dict[str, cst.FunctionDef]:
        """The file's functions as annotate leaves them: claimed ones rewritten."""
        return {name: claimed[name].func if name in claimed else func
                for name, func in self.functions.items()}

    # -- functions compiled from another file ---------------------------------------------------

    def annotate_entries(self) -> bool:
        """Annotate each function another file's compiled code calls, with the functions it
        reaches, as one change under its own name (after the classes: what a class of this
        file claimed is reported there). Whether a change was recorded."""
        rule = self.rule
        changed_any = False
        for owner, entry in self.entries.items():
            if owner in rule.skip_classes:
                continue
            # The model the fix loop runs validates the entry with what it reaches: only a
            # rejected entry leaves a function as it was (the fix loop leaves the classes of
            # the file it did not choose to this rule, which is no rejection of theirs).
            rejected = {s for s in rule.skip_classes if s in self.entries}
            claims = {name: self.plan(name) for name in self.reached(owner)
                      if self.claimable(name, rejected)}
            for name, plan in claims.items():
                if name not in self.reported:
                    rule.fixes.extend(replace(f, class_name=owner) for f in plan.fixes)
                    rule.skips.extend(replace(s, class_name=owner) for s in plan.skips)
            changed = [plan for name, plan in claims.items()
                       if plan.func is not self.functions[name]]
            if not changed:
                self.register(owner, claims, [])
                continue
            parts: list[str] = []
            notes: list[str] = []
            for plan in changed:
                role = ("compiled by another file's code" if plan.name == entry
                        else f"a function of this file {entry}() calls")
                parts.append(plan.described(role))
                notes.extend(plan.counts.notes)
                rule.need_typing(*plan.typing_names)
            rule.changes.append(ClassChange(rule.name, owner,
                                            rule.function_span(self.functions[entry]),
                                            "; ".join(parts), notes=notes))
            self.register(owner, claims, [plan.name for plan in changed])
            changed_any = True
        return changed_any

    # -- functions of other files ---------------------------------------------------------------

    def report_elsewhere(self, class_name: str, facts: ClassFacts) -> None:
        """A refusal for each function of another file of the tree that the class's compiled
        code (its methods and the functions of this file it reaches) calls by an imported
        name, when that function's signature has what TorchScript rejects: annotate rewrites
        the functions of the class's own file only (a change elsewhere would not be
        validated with this class)."""
        seen: set[str] = set()
        sites: list[tuple[cst.FunctionDef, Collection[int], bool]] = [
            (facts.methods[m], facts.never_compiled(m), False) for m in facts.compiled]
        sites += [(self.functions[f], never_compiled_nodes(self.functions[f], self.imports),
                   True) for f in self.reached(class_name)]
        for func, skipped, in_function in sites:
            bound = names_bound_in(func)
            for call in find_all(func.body, cst.Call):
                name = call.func.value if isinstance(call.func, cst.Name) else None
                if (name is None or name in seen or name in bound or name in self.functions
                        or id(call) in skipped):
                    continue
                reason = self._imported_function(name)
                if reason is None:
                    continue
                seen.add(name)
                if in_function:
                    line, column = self.rule.function_position(func, call)
                    self.rule.skips.append(Skip(self.rule.name, class_name, line, reason, None,
                                                column))
                else:
                    self.rule.skip(class_name, call, reason)

    def _imported_function(self, name: str) -> str | None:
        """Why an imported ``name`` is a function of the tree that blocks scripting, or None
        (not imported from the tree, not a function, nothing in its signature)."""
        if name in self._elsewhere:
            return self._elsewhere[name]
        self._elsewhere[name] = None
        found = self._imported_definition(name)
        if found is None:
            return None
        blockers = _signature_blockers(str(found.path), found.path.stat().st_mtime_ns,
                                       found.name.rpartition(".")[2])
        if not blockers:
            return None
        reason = (f"{name}() comes from {found.display} (line {found.line}), another file of "
                  f"the tree, and TorchScript compiles it with this class: its "
                  f"{', '.join(blockers)} would be typed Tensor or rejected; annotate rewrites "
                  "a function of another file only in the fix loop of a configured model that "
                  "stops in it (validated with the model, not with this class): configure a "
                  "model that uses this class, or annotate them there by hand")
        self._elsewhere[name] = reason
        return reason

    def _imported_definition(self, name: str) -> Definition | None:
        """The function of another file of the tree that the imported ``name`` is."""
        filename = self.rule.context.filename
        if name in self._relative:
            level, target = self._relative[name]
        elif name in self.imports:
            level, target = 0, self.imports[name]
        else:
            return None
        if (not filename or (not level and (target.split(".")[0] == "torch"
                                            or is_standard_library(target)))):
            return None
        found = lookup(filename, target, level)
        return found if found is not None and found.kind == "function" else None

    def imported_signatures(self, called: Collection[str]
                            ) -> dict[str, tuple[tuple[str, str], ...]]:
        """Function of another file of the tree, called by an imported name in ``called`` ->
        its positional parameters in order, each with ``Tensor`` when TorchScript types it so
        (no annotation, no default: what an argument passed there must be), else ""."""
        found: dict[str, tuple[tuple[str, str], ...]] = {}
        for name in called:
            if name in self.functions or name in found:
                continue
            definition = self._imported_definition(name)
            if definition is None:
                continue
            signature = _positional_types(str(definition.path),
                                          definition.path.stat().st_mtime_ns,
                                          definition.name.rpartition(".")[2])
            if any(kind for _, kind in signature):
                found[name] = signature
        return found

    # -- what compiled code calls --------------------------------------------------------------

    def _reach(self, facts: ClassFacts) -> list[str]:
        order: list[str] = []
        pending = [self._called(facts.methods[m], facts.never_compiled(m))
                   for m in facts.compiled]
        while pending:
            for name in pending.pop(0):
                if name not in order:
                    order.append(name)
                    pending.append(self._calls[name])
        return order

    def _closure(self, name: str) -> list[str]:
        found: list[str] = []
        pending = list(self._calls.get(name, []))
        while pending:
            callee = pending.pop(0)
            if callee not in found and callee != name:
                found.append(callee)
                pending.extend(self._calls[callee])
        return found

    def _called(self, func: cst.FunctionDef, skipped: Collection[int]) -> list[str]:
        """The module functions ``func`` calls by name in code TorchScript compiles."""
        bound = names_bound_in(func)
        found: list[str] = []
        for call in find_all(func.body, cst.Call):
            callee = call.func.value if isinstance(call.func, cst.Name) else None
            if (callee is not None and callee in self.functions and callee not in bound
                    and id(call) not in skipped and callee not in found
                    and not is_ignored(self.functions[callee])):
                found.append(callee)
        return found

    # -- annotating one ------------------------------------------------------------------------

    def _annotate(self, name: str) -> FunctionPlan:
        func = self.functions[name]
        counts = Counts()
        plan = FunctionPlan(name, func, {}, counts)
        foreign = [d for d in decorator_names(func) if not d.endswith(_TRANSPARENT)]
        if foreign:
            line, column = self.rule.function_position(func, func)
            plan.skips.append(Skip(self.rule.name, "", line, f"{name}(): decorated with "
                                   f"@{foreign[0]}: TorchScript compiles what the decorator "
                                   "returns, not this function; left as it is", None, column))
            return plan
        observed = self.rule.observed.get(FUNCTIONS_KEY, {}).get(name, {})
        done = {n: p for n, p in self._plans.items() if n != name}
        annotator = FunctionAnnotator(self, plan, FunctionFacts(func, self.imports), observed,
                                      done)
        previous = set(self.rule.typing_names)
        self.rule.typing_names = set()
        try:
            plan.func = annotator.rewrite()
            plan.typing_names = set(self.rule.typing_names)
        finally:
            self.rule.typing_names = previous
        # What a caller passing an argument on to it reads: the new signature's types, and
        # Tensor for an unannotated parameter without a default that the body uses as one or
        # passes on to one (TorchScript types it Tensor, and so does the caller's argument).
        uses = annotator.facts.parameter_types(name)
        tensors = {param: TENSOR for param in uses
                   if param not in annotator.param_types and _plain(func, param)
                   and (uses[param] == TENSOR
                        or usage_type(annotator, param, weak=False) == TENSOR)}
        plan.param_types = {**tensors, **annotator.param_types}
        return plan

class FunctionAnnotator(MethodAnnotator):
    """:class:`MethodAnnotator` for a module-level function: what it fixes and refuses goes to
    the function's plan (reported by the first class that reaches the function)."""

    def __init__(self, functions: ModuleFunctions, plan: FunctionPlan, facts: FunctionFacts,
                 observed: Mapping[str, str], done: Mapping[str, FunctionPlan]) -> None:
        self.module_functions = functions
        self.plan = plan
        super().__init__(functions.rule, facts, plan.counts, observed, plan.name, {},
                         functions=functions.as_left(done),
                         function_types={n: p.param_types for n, p in done.items()})

    def skip(self, node: cst.CSTNode, reason: str, *, code: str | None = None,
             message: str = "") -> None:
        line, column = self.module_functions.rule.function_position(self.func, node)
        self.plan.skips.append(Skip(self.rule.name, "", line, f"{self.name}(): {reason}", code,
                                    column, message))

    def fixed(self, node: cst.CSTNode, code: str, message: str) -> None:
        line, column = self.module_functions.rule.function_position(self.func, node)
        self.plan.fixes.append(Fix(self.rule.name, code, "", line, column, message))


@lru_cache(maxsize=256)
def _signature_blockers(path: str, mtime_ns: int, name: str) -> tuple[str, ...]:
    """The parameters of the top-level function ``name`` of the file ``path`` that TorchScript
    would reject or take for Tensors: unannotated ones with a default, ``*args``,
    ``**kwargs``, keyword-only ones with a default, None defaults of a non-Optional
    annotation (read with ``ast``: the file is never imported)."""
    func = _top_level_function(path, name)
    if func is None:
        return ()
    arguments = func.args
    found: list[str] = []
    positional = arguments.posonlyargs + arguments.args
    defaults = dict(zip(reversed(positional), reversed(arguments.defaults), strict=False))
    for argument in positional:
        default = defaults.get(argument)
        if default is None:
            continue
        if argument.annotation is None:
            found.append(f"`{argument.arg}={ast.unparse(default)}`")
        elif (isinstance(default, ast.Constant) and default.value is None
              and not any(word in ast.unparse(argument.annotation)
                          for word in ("Optional", "None", "Any"))):
            found.append(f"`{argument.arg}: {ast.unparse(argument.annotation)} = None`")
    for star, prefix in ((arguments.vararg, "*"), (arguments.kwarg, "**")):
        if star is not None:
            found.append(f"`{prefix}{star.arg}`")
    found.extend(f"keyword-only `{a.arg}`" for a, d in zip(arguments.kwonlyargs,
                                                           arguments.kw_defaults, strict=True)
                 if d is not None)
    return tuple(found)


@lru_cache(maxsize=256)
def _positional_types(path: str, mtime_ns: int, name: str) -> tuple[tuple[str, str], ...]:
    """The positional parameters of the top-level function ``name`` of the file ``path``,
    ``Tensor`` for those without annotation and default (read with ``ast``: the file is never
    imported)."""
    func = _top_level_function(path, name)
    if func is None:
        return ()
    arguments = func.args
    positional = arguments.posonlyargs + arguments.args
    required = len(positional) - len(arguments.defaults)
    return tuple((a.arg, TENSOR if i < required and a.annotation is None else "")
                 for i, a in enumerate(positional))


def _top_level_function(path: str, name: str) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    return next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name),
                None)


def _plain(func: cst.FunctionDef, name: str) -> bool:
    """``name`` is a parameter of ``func`` without annotation and default."""
    return any(p.name.value == name and p.annotation is None and p.default is None
               for p in [*func.params.posonly_params, *func.params.params,
                         *func.params.kwonly_params])
