"""``sum-tensors``: builtin ``sum(...)`` over tensors in compiled methods is made explicit.

What it does
    In compiled code (``forward()``, ``@torch.jit.export`` methods and the methods they call;
    not ``@torch.jit.ignore`` methods nor ``if not torch.jit.is_scripting():`` branches), each
    call of the builtin ``sum`` whose elements are known to be tensors is rewritten into what
    Python computes, ``start + e0 + e1 + ...`` with ``start=0``:

    * a list or tuple of tensors (a local built by ``[]`` and ``.append(tensor)``, a parameter
      annotated or observed as ``List[Tensor]``) or a list comprehension / generator of tensors
      becomes an accumulation loop placed before the statement::

          output = sum(skips)            ->  output = torch.tensor(0)
                                             for skip in skips:
                                                 output = output + skip

      A generator's ``for``/``if`` clauses become nested ``for``/``if`` statements. When the
      statement is ``name = sum(...)``, the loop accumulates into ``name``; otherwise into a
      fresh ``<list>_sum`` that replaces the call.
    * a literal list of tensors, ``sum([a, b, c])``, becomes ``0 + a + b + c``;
    * a single tensor, ``sum(t)`` (a sum over dim 0 in Python), becomes ``t.sum(0)``.

    Types come from annotations, the code (``torch.*`` results, tensor methods, layers built in
    ``__init__``, a call of each layer of a ModuleList or Sequential the class holds:
    ``sum(fn(x) for fn in self.fns)``, whose elements eager ``sum`` adds, tensors) and, when
    example runs exist, observed types. Sums of ints or floats (which
    TorchScript compiles) and sums whose elements cannot be shown to be tensors are left alone;
    the latter are reported.

Why it breaks export
    TorchScript's ``sum`` has no overload for a list of tensors (``sum(List[Tensor])`` fails to
    compile), and on a single tensor it sums every element instead of iterating over dim 0, so
    ``sum(t)`` scripts but returns another value.

Example
    Before::

        skips = []
        for layer in self.layers:
            x, skip = layer(x)
            skips.append(skip)
        return self.post(sum(skips))

    After::

        skips = []
        for layer in self.layers:
            x, skip = layer(x)
            skips.append(skip)
        skips_sum = torch.tensor(0)
        for skips_item in skips:
            skips_sum = skips_sum + skips_item
        return self.post(skips_sum)

Fix safety
    Python's ``sum`` adds from the int ``0``; the loop adds from ``torch.tensor(0)``, a 0-dim
    int64 tensor, which measured on torch 2.13 gives the same values and dtypes (bool elements
    become int64, narrower ints and floats keep their dtype, broadcasting is unchanged) and a
    new tensor. An empty sequence gives ``tensor(0)`` instead of the int ``0``. The loop runs
    before the rest of its statement; statements where that could change what runs (the call
    inside a lambda, comprehension, conditional expression or ``and``/``or``, or a statement
    with ``:=``) are left alone, as are generators whose loop variable is used elsewhere in the
    method. ``t.sum(0)`` matches ``sum(t)`` for float and bool tensors; for int8/uint8/int16/
    int32 tensors it returns int64 where ``sum(t)`` kept the dtype, and floating-point results
    may differ in the last bits (another summation order); such rewrites carry a note.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    fresh_name,
    names_bound_in,
    names_used,
    qualified_name,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import TENSOR, Typer, collect_locals, is_complete, parts_of
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import

_SINGLE_TENSOR_NOTE = ("sum(t) -> t.sum(0): int8/uint8/int16/int32 tensors now sum to int64, "
                       "floating-point sums may differ in the last bits")
_EMPTY_NOTE = ("an empty sequence now sums to tensor(0) instead of the int 0")
_SUM_CALL = re.compile(r"\bsum\s*\(")
# torch functions whose first argument is a sequence of tensors.
_SEQUENCE_FUNCTIONS = frozenset(f"torch.{name}" for name in (
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack",
    "row_stack", "block_diag", "broadcast_tensors", "meshgrid", "cartesian_prod"))
# Nodes a hoisted loop must not be taken out of: it would run when the original did not.
_CONDITIONAL = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
                cst.IfExp, cst.BooleanOperation)


def _compact_source(node: cst.CSTNode) -> str:
    """The node's source on one line for a summary, without the spaces and trailing commas a
    call split over lines leaves inside its brackets, at most 80 characters."""
    text = " ".join(code_of(node).split()).replace("( ", "(").replace("[ ", "[")
    text = text.replace(" )", ")").replace(", ]", "]").replace(" ]", "]").replace(",)", ")")
    return text if len(text) <= 80 else text[:77] + "..."


def _singular(name: str) -> str:
    base = name.lstrip("_")
    if base.endswith("ies") and len(base) > 3:
        return base[:-3] + "y"
    if base.endswith("s") and not base.endswith(("ss", "us", "is")) and len(base) > 1:
        return base[:-1]
    return ""


def _path_to(root: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode]:
    stack: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = [(root, [root])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        stack.extend((child, [*path, child]) for child in node.children)
    return []


def _element_type(kind: str | None) -> str | None:
    """The element type of a list or tuple type when every element has the same one."""
    if kind is None:
        return None
    head, args = parts_of(kind)
    if head == "List" and args and args[0] != "?":
        return args[0]
    if head == "Tuple" and args and len(set(args)) == 1:
        return args[0]
    return None


class _Plan:
    """How one ``sum(...)`` call is rewritten."""

    def __init__(self, call: cst.Call, statement: cst.CSTNode, method: str) -> None:
        # The statement a loop goes before (for a plain replacement, any node: the call)
        self.call = call
        self.statement = statement
        self.method = method
        self.replacement: cst.BaseExpression | None = None   # the call's new expression
        self.loop: list[str] = []          # statements inserted before ``statement``
        self.drop_statement = False        # ``name = sum(...)``: the loop assigns ``name``
        self.note: str | None = None
        self.accumulator = ""


class SumTensors(Rule):
    __doc__ = __doc__
    name = "sum-tensors"
    # --rule all order: before lift-branch and annotate: its loops read the code as written, and
    # the accumulators it adds are typed from torch.tensor(...) already.
    order = 60
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF215", "sum-tensors", "builtin sum() over tensors",
             "The builtin sum() accepts numbers only in TorchScript (\"Arguments for call are not "
             "valid\"). Add the tensors in a loop, or torch.stack(xs).sum(0)."),
    )
    summary = ("Builtin sum() over tensors in compiled methods becomes an explicit "
               "accumulation (or t.sum(0) for one tensor), exact in eager mode")
    needs_observations = True

    VALID = (
        # Sum of ints: TorchScript compiles it.
        """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self, sizes=(1, 2)):
        super().__init__()
        self.total = sum(sizes)
    def forward(self, x, kernel_sizes: list[int]):
        pad = sum([k // 2 for k in kernel_sizes])
        return x + pad
""",
    )
    INVALID = (
        Example(
            """
from typing import List
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    def forward(self, x):
        skips = []
        for layer in self.layers:
            x = torch.relu(layer(x))
            skips.append(x)
        output = sum(skips)
        return output
""",
            """
from typing import List
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    def forward(self, x):
        skips = []
        for layer in self.layers:
            x = torch.relu(layer(x))
            skips.append(x)
        output = torch.tensor(0)
        for skip in skips:
            output = output + skip
        return output
""",
        ),
        # A generator inside an expression, a literal list and one tensor.
        Example(
            """
from typing import List
import torch
from torch import nn
class M(nn.Module):
    def forward(self, xs: List[torch.Tensor], a: torch.Tensor, b: torch.Tensor):
        scores = a > 0
        return self.scale(sum(x * 2 for x in xs if x.numel() > 0)) + sum([a, b]), sum(scores)
    def scale(self, t):
        return t * 0.5
""",
            """
from typing import List
import torch
from torch import nn
class M(nn.Module):
    def forward(self, xs: List[torch.Tensor], a: torch.Tensor, b: torch.Tensor):
        scores = a > 0
        xs_sum = torch.tensor(0)
        for x in xs:
            if x.numel() > 0:
                xs_sum = xs_sum + x * 2
        return self.scale(xs_sum) + (0 + a + b), scores.sum(0)
    def scale(self, t):
        return t * 0.5
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        self.imports = self.facts.imports
        alias = self.facts.torch_alias
        names = self.facts.top_level_names
        self.needs_torch_import = alias is None
        self.torch = alias or "torch"
        self.torch_clash = alias is None and "torch" in names
        self.sum_shadowed = "sum" in names
        self.uses_torch_import = False

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # ... in a module class's compiled method: the only code the rule reads.
        return _SUM_CALL.search(file.text) is not None and (
            file.tree is None or bool(file.compiled))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        text = self.source_text
        if text is not None and not _SUM_CALL.search(text):
            return tree
        result = super().transform_module_impl(tree)
        if self.changes and self.needs_torch_import and self.uses_torch_import:
            result = add_module_import(result, "torch")
        return result

    # ---- one class ------------------------------------------------------------------------------

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls) or self.sum_shadowed:
            return cls
        facts = self.class_facts(cls)
        plans: dict[int, list[_Plan]] = {}
        parts: list[str] = []
        notes: list[str] = []
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            calls = [c for c in find_all(func.body, cst.Call)
                     if isinstance(c.func, cst.Name) and c.func.value == "sum"
                     and id(c) not in skipped]
            if not calls or "sum" in names_bound_in(func):
                continue
            typer = self._typer(cls.name.value, facts, method)
            taken = names_used(func)
            for call in calls:
                plan = self._plan(cls.name.value, facts, func, call, typer, taken)
                if plan is None:
                    continue
                self.fixed(call, "TSF215", _message(call, typer))
                plans.setdefault(id(plan.statement), []).append(plan)
                new = plan.replacement or call
                loop = f"a loop adding into `{plan.accumulator}`"
                parts.append(f"line {self.line_of(call)}: `{_compact_source(call)}` -> "
                             f"{loop if plan.loop else f'`{_compact_source(new)}`'}")
                if plan.note:
                    notes.append(f"line {self.line_of(call)}: {plan.note}")
        if not plans:
            return cls
        rewritten = cls.visit(_Apply(plans))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=list(dict.fromkeys(notes))))
        return rewritten

    def _typer(self, class_name: str, facts: ClassFacts, method: str) -> Typer:
        """The method's types: its parameters by the one policy (observed types included), the
        tensors and layers ``__init__`` stores, its locals, lists it appends tensors to, and
        observed locals."""
        func = facts.methods[method]
        observed = self.observed.get(class_name, {}).get(method, {})
        # Not facts.typer(): the env is extended below, and that typer is shared.
        env = facts.parameter_types(method, observed)
        for name in _sequences_passed(func, self.imports, observed):
            env[name] = None
        typer = Typer(env, self.imports, self_name(func), _attributes(facts), facts.layers)
        collect_locals(func.body, typer)
        self._appended_lists(func, typer)
        bindings = _binding_counts(func)
        for key, kind in observed.items():
            name = key.removeprefix("local ")
            if (key.startswith("local ") and typer.env.get(name) is None
                    and is_complete(kind) and bindings.get(name) == 1):
                typer.env[name] = kind
        return typer

    def _script_typer(self, facts: ClassFacts, func: cst.FunctionDef) -> Typer:
        """Types as TorchScript sees them: every parameter without annotation or default is a
        Tensor (what decides whether a refused sum is an export blocker)."""
        params = func.params
        env = facts.parameter_types(func.name.value)
        env.update({p.name.value: TENSOR for p in (*params.posonly_params, *params.params,
                                                     *params.kwonly_params)
                    if p.annotation is None and p.default is None and p.name.value in env})
        typer = Typer(env, self.imports, self_name(func), _attributes(facts), facts.layers)
        collect_locals(func.body, typer)
        self._appended_lists(func, typer)
        return typer

    @staticmethod
    def _appended_lists(func: cst.FunctionDef, typer: Typer) -> None:
        """``xs = []`` then only ``xs.append(<Tensor>)``/``xs.insert(i, <Tensor>)``:
        ``List[Tensor]``."""
        for name, kind in list(typer.env.items()):
            if kind != "List[?]":
                continue
            calls = [c for c in find_all(func.body, cst.Call)
                     if isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name)
                     and c.func.value.value == name]
            values = []
            for call in calls:
                method = call.func.attr.value
                if method == "append" and len(call.args) == 1:
                    values.append(call.args[0].value)
                elif method == "insert" and len(call.args) == 2:
                    values.append(call.args[1].value)
                elif method not in ("pop", "index", "count"):
                    values = []
                    break
            if values and all(typer.type_of(v) == TENSOR for v in values):
                typer.env[name] = f"List[{TENSOR}]"

    # ---- one call -------------------------------------------------------------------------------

    def _plan(self, class_name: str, facts: ClassFacts, func: cst.FunctionDef, call: cst.Call,
              typer: Typer, taken: set[str]) -> _Plan | None:
        method = func.name.value
        shown = code_of(call)
        args = call.args

        def refuse(reason: str) -> None:
            """Leave the call; a blocker (with its code) when what it sums is tensors, to this
            rule or to TorchScript (which types unannotated parameters as Tensor)."""
            evidence = None
            if args:
                evidence = _tensor_evidence(args[0].value, typer, facts, func)
                if evidence is None:
                    evidence = _tensor_evidence(args[0].value, self._script_typer(facts, func),
                                                facts, func, single=False)
            if evidence is None:
                self.skip(class_name, call, f"{method}(): `{shown}` left alone: {reason}")
            else:
                self.skip(class_name, call, f"{method}(): `{shown}` left alone: {reason}"
                          f"{evidence}", code="TSF215", message=_message(call, typer))

        if not args or len(args) > 2 or any(a.star for a in args) or (
                args[0].keyword is not None) or (len(args) == 2 and args[1].keyword is not None
                                                 and args[1].keyword.value != "start"):
            if args and not args[0].star:
                refuse("only sum(iterable) and sum(iterable, start) are rewritten")
            return None
        iterable = args[0].value
        start = args[1].value if len(args) == 2 else None
        start_kind = typer.type_of(start) if start is not None else "int"
        path = _path_to(func, call)
        statement = next((n for n in reversed(path) if isinstance(n, cst.SimpleStatementLine)),
                         None)

        if start_kind not in (TENSOR, "int", "float", "bool"):
            refuse("cannot tell the type of the start value")
            return None
        kind = typer.type_of(iterable)
        # One tensor: Python iterates over dim 0.
        if kind == TENSOR and not isinstance(iterable, cst.List | cst.Tuple):
            if start is not None:
                refuse("a start value with a single tensor")
                return None
            plan = _Plan(call, statement or call, method)
            receiver = iterable if isinstance(iterable, cst.Name | cst.Attribute | cst.Call |
                                              cst.Subscript) else iterable.with_changes(
                lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            plan.replacement = cst.Call(cst.Attribute(receiver, cst.Name("sum")),
                                        [cst.Arg(cst.Integer("0"))])
            plan.note = _SINGLE_TENSOR_NOTE
            return plan
        # A literal list: the additions themselves.
        if isinstance(iterable, cst.List | cst.Tuple) and iterable.elements:
            elements = [e for e in iterable.elements if not isinstance(e, cst.StarredElement)]
            kinds = [typer.type_of(e.value) for e in elements]
            if len(elements) != len(iterable.elements):
                refuse("a starred element")
                return None
            if TENSOR not in kinds or any(k not in (TENSOR, "int", "float", "bool")
                                          for k in kinds):
                if TENSOR in kinds or None in kinds:
                    refuse("cannot tell that every element is a tensor")
                return None
            plan = _Plan(call, statement or call, method)
            text = " + ".join([code_of(start) if start is not None else "0",
                               *(_operand(e.value) for e in elements)])
            expression = cst.parse_expression(text)
            plan.replacement = expression.with_changes(lpar=[cst.LeftParen()],
                                                       rpar=[cst.RightParen()]) \
                if _needs_parens(path) else expression
            return plan
        # A list, tuple or generator of tensors: a loop.
        element: cst.BaseExpression
        clauses: list[str] = []
        if isinstance(iterable, cst.GeneratorExp | cst.ListComp):
            element, reason = self._comprehension(iterable, typer, func, clauses)
            if reason is not None:
                if reason:
                    refuse(reason)
                return None
            base = _base_name(_innermost_iter(iterable))
        else:
            element_kind = _element_type(kind)
            if element_kind != TENSOR:
                if element_kind is None and kind not in ("List[int]", "List[float]",
                                                         "List[bool]"):
                    refuse("cannot tell that the elements are tensors (annotate the list, "
                           "or run with examples)")
                return None
            base = _base_name(iterable)
            loop_name = fresh_name(_singular(base), f"{base}_item", "item", taken=taken)
            taken.add(loop_name)
            clauses = [f"for {loop_name} in {code_of(iterable)}:"]
            element = cst.Name(loop_name)
        if statement is None or self._hoist_blocker(path, statement):
            refuse(self._hoist_blocker(path, statement) if statement is not None
                   else "not in a plain statement")
            return None
        if start_kind != TENSOR and self.torch_clash:
            refuse("`torch` is bound to something else in this file")
            return None
        plan = _Plan(call, statement, method)
        target = _assigned_name(statement, call)
        if target is not None and target not in names_used(iterable) and (
                start is None or target not in names_used(start)):
            accumulator = target
            plan.drop_statement = True
        else:
            accumulator = fresh_name(f"{base}_sum", "total", taken=taken)
            taken.add(accumulator)
            plan.replacement = cst.Name(accumulator)
        if start_kind == TENSOR:
            initial = code_of(start) if start is not None else ""
        else:
            initial = f"{self.torch}.tensor({code_of(start) if start is not None else 0})"
            self.uses_torch_import = True
            plan.note = _EMPTY_NOTE if start is None else None
        plan.accumulator = accumulator
        lines = [f"{accumulator} = {initial}"]
        for depth, clause in enumerate(clauses):
            lines.append("    " * depth + clause)
        lines.append("    " * len(clauses) + f"{accumulator} = {accumulator} + "
                     f"{_operand(element)}")
        plan.loop = lines
        return plan

    def _comprehension(self, comp: cst.GeneratorExp | cst.ListComp, typer: Typer,
                       func: cst.FunctionDef, clauses: list[str]
                       ) -> tuple[cst.BaseExpression, str | None]:
        inner = Typer(typer.env, typer.imports, typer.self_var, typer.attributes, typer.layers)
        outside = _names_outside(func, comp)
        modules: set[str] = set()      # loop variables over a ModuleList or Sequential
        node: cst.CompFor | None = comp.for_in
        while node is not None:
            if node.asynchronous is not None:
                return comp.elt, "an async comprehension"
            targets = [n.value for n in find_all(node.target, cst.Name)]
            clash = [t for t in targets if t in outside]
            if clash:
                return comp.elt, (f"the loop variable `{clash[0]}` is also used outside the "
                                  "generator, which a loop would overwrite")
            container = (self_attr(node.iter, typer.self_var) if typer.self_var else None)
            if isinstance(node.target, cst.Name) and container in self._layer_lists():
                modules.add(node.target.value)
            if isinstance(node.target, cst.Name):
                iter_kind = inner.type_of(node.iter)
                inner.env[node.target.value] = (
                    TENSOR if iter_kind == TENSOR else "int" if isinstance(node.iter, cst.Call)
                    and get_full_name_for_node(node.iter.func) == "range"
                    else _element_type(iter_kind))
            clauses.append(f"for {code_of(node.target)} in {code_of(node.iter)}:")
            clauses.extend(f"if {code_of(condition.test)}:" for condition in node.ifs)
            node = node.inner_for_in
        element_kind = inner.type_of(comp.elt)
        if (isinstance(comp.elt, cst.Call) and isinstance(comp.elt.func, cst.Name)
                and comp.elt.func.value in modules):
            # A layer of a ModuleList called (``sum(fn(x) for fn in self.fns)``): eager sum
            # adds what it returns, a tensor in any module that works; validation checks it.
            element_kind = TENSOR
        if element_kind != TENSOR:
            return comp.elt, ("cannot tell that the elements are tensors"
                              if element_kind not in ("int", "float", "bool") else "")
        return comp.elt, None

    def _layer_lists(self) -> set[str]:
        """The class's ModuleList and Sequential attributes (iterating them gives layers)."""
        assert self._current_class is not None
        return {attr for attr, kind in self.class_facts(self._current_class).containers.items()
                if kind in ("ModuleList", "Sequential")}

    def _hoist_blocker(self, path: list[cst.CSTNode],
                       statement: cst.SimpleStatementLine) -> str:
        if len(statement.body) != 1:
            return "its line holds several statements"
        inside = path[path.index(statement):-1]
        if any(isinstance(n, _CONDITIONAL) for n in inside):
            return ("it is evaluated conditionally (inside a lambda, comprehension, `x if c "
                    "else y` or `and`/`or`), so a loop before the statement would change what "
                    "runs")
        if find_all(statement, cst.NamedExpr, cst.Yield, cst.Await):
            return "its statement has `:=`, `yield` or `await`"
        parent = path[path.index(statement) - 1]
        if not isinstance(parent, cst.IndentedBlock):
            return "its statement is a one-line body"
        return ""


def _attributes(facts: ClassFacts) -> dict[str, str]:
    """What ``__init__`` stores, for attributes no other method reassigns (those may hold
    anything). TODO(facts): ``ClassFacts.attributes`` keeps attributes other methods reassign."""
    return {attr: kind for attr, kind in facts.attributes.items()
            if attr not in facts.assigned_outside_init}


def _message(call: cst.Call, typer: Typer) -> str:
    """What ``tsfix check`` says about a ``sum(...)`` of tensors."""
    argument = call.args[0].value
    if typer.type_of(argument) == TENSOR and not isinstance(argument, cst.List | cst.Tuple):
        return (f"sum({_compact_source(argument)}) of one tensor adds its rows in Python, every "
                "element in TorchScript")
    return f"sum({_compact_source(argument)}) adds tensors"


def _tensor_evidence(iterable: cst.BaseExpression, typer: Typer, facts: ClassFacts,
                     func: cst.FunctionDef, single: bool = True) -> str | None:
    """Whether ``sum(iterable)`` adds tensors, by what the code shows: ``None`` when nothing
    shows it (a sum of numbers compiles), else a hint for the reason ("" when the types say
    so). ``single``: one tensor counts (``sum(t)`` compiles, to another value)."""
    if isinstance(iterable, cst.ListComp | cst.GeneratorExp):
        self_var = self_name(func) or "self"
        inner = Typer(typer.env, typer.imports, typer.self_var, typer.attributes, typer.layers)
        containers: dict[str, str] = {}
        for loop in find_all(iterable.for_in, cst.CompFor):
            if not isinstance(loop.target, cst.Name):
                continue
            attr = self_attr(loop.iter, self_var)
            if attr is not None and attr in facts.containers:
                containers[loop.target.value] = attr
            kind = inner.type_of(loop.iter)
            inner.env[loop.target.value] = TENSOR if kind == TENSOR else _element_type(kind)
        element = iterable.elt
        if (isinstance(element, cst.Call) and isinstance(element.func, cst.Name)
                and element.func.value in containers):
            # What the old linter called a sum of tensors: calls of a module container's
            # elements. Whether each module returns one Tensor is not known.
            return (f" (the modules of `self.{containers[element.func.value]}` are not known "
                    "to return tensors)")
        return "" if inner.type_of(element) == TENSOR else None
    if isinstance(iterable, cst.List | cst.Tuple):
        kinds = [typer.type_of(e.value) for e in iterable.elements]
        return "" if TENSOR in kinds else None
    kind = typer.type_of(iterable)
    if kind == TENSOR:
        return "" if single else None
    if kind is not None:
        head, args = parts_of(kind)
        if head in ("List", "Tuple") and TENSOR in args:
            return ""
    return None


def _sequences_passed(func: cst.FunctionDef, imports: Mapping[str, str],
                      observed: Mapping[str, str]) -> set[str]:
    """Unannotated parameters without a default or an observed type that are passed to a torch
    function taking a sequence of tensors (``torch.stack(feats)``): a list, whatever the one
    parameter policy infers from that use.
    TODO(facts): ``ClassFacts.used_as_tensor`` counts them as used as a Tensor."""
    params = func.params
    untyped = {p.name.value for p in (*params.posonly_params, *params.params,
                                      *params.kwonly_params)
               if p.annotation is None and p.default is None and p.name.value not in observed}
    found: set[str] = set()
    for call in find_all(func.body, cst.Call):
        if (call.args and isinstance(call.args[0].value, cst.Name)
                and call.args[0].value.value in untyped
                and qualified_name(call.func, dict(imports)) in _SEQUENCE_FUNCTIONS):
            found.add(call.args[0].value.value)
    return found


def _binding_counts(func: cst.FunctionDef) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in find_all(func.body, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For):
        for name in find_all(node.target, cst.Name):
            counts[name.value] = counts.get(name.value, 0) + 1
    return counts


def _names_outside(func: cst.FunctionDef, comp: cst.CSTNode) -> set[str]:
    inside = {id(n) for n in find_all(comp, cst.Name)}
    attribute_names = {id(a.attr) for a in find_all(func, cst.Attribute)}
    return {n.value for n in find_all(func, cst.Name)
            if id(n) not in inside and id(n) not in attribute_names}


def _innermost_iter(comp: cst.GeneratorExp | cst.ListComp) -> cst.BaseExpression:
    return comp.for_in.iter


def _base_name(expr: cst.BaseExpression) -> str:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value.lstrip("_") or "total"
    return "total"


def _operand(expr: cst.BaseExpression) -> str:
    """``expr`` as the right operand of ``+``: parenthesised unless it binds tighter."""
    text = code_of(expr)
    tight = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float)
    if isinstance(expr, tight) or expr.lpar:
        return text
    if isinstance(expr, cst.BinaryOperation) and isinstance(
            expr.operator, cst.Multiply | cst.Divide | cst.FloorDivide | cst.Modulo |
            cst.Power | cst.MatrixMultiply):
        return text
    return f"({text})"


def _needs_parens(path: list[cst.CSTNode]) -> bool:
    parent = path[-2] if len(path) > 1 else None
    return not isinstance(parent, cst.Assign | cst.AnnAssign | cst.Return | cst.Arg |
                          cst.Expr | cst.AugAssign | cst.Element)


def _assigned_name(statement: cst.SimpleStatementLine, call: cst.Call) -> str | None:
    """``name`` when the statement is ``name = sum(...)``."""
    small = statement.body[0]
    if (isinstance(small, cst.Assign) and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name) and small.value is call
            and not call.lpar):
        return small.targets[0].target.value
    return None


class _Apply(cst.CSTTransformer):
    def __init__(self, plans: dict[int, list[_Plan]]) -> None:
        self.plans = plans
        self.calls = {id(p.call): p for ps in plans.values() for p in ps}

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        plan = self.calls.get(id(original_node))
        if plan is None or plan.replacement is None:
            return updated_node
        return plan.replacement

    def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine,
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        plans = self.plans.get(id(original_node))
        if not plans or not any(p.loop for p in plans):
            return updated_node
        new: list[cst.BaseStatement] = []
        for plan in plans:
            if plan.loop:
                new.extend(cst.parse_module("\n".join(plan.loop) + "\n").body)
        if not any(p.drop_statement for p in plans):
            new.append(updated_node.with_changes(leading_lines=[]))
        elif updated_node.trailing_whitespace.comment is not None:
            first = new[0]
            if isinstance(first, cst.SimpleStatementLine):
                new[0] = first.with_changes(trailing_whitespace=updated_node.trailing_whitespace)
        new[0] = new[0].with_changes(leading_lines=updated_node.leading_lines)
        return cst.FlattenSentinel(new)
