"""Lowering an ``if`` statement to ``torch.cond`` (``--target export``).

``torch.export`` keeps one path of a Python ``if``: a branch on a module attribute is
specialised, a branch on a tensor value fails ("Could not guard on data-dependent expression").
``torch.cond(pred, true_fn, false_fn, operands)`` keeps both. This module turns::

    if pred:
        x = self.act(x)
        y = x.sum()

into::

    def stem_true(x):
        x = self.act(x)
        y = x.sum()
        return x, y
    def stem_false(x):
        return x.clone(), ...

    x, y = torch.cond(pred, stem_true, stem_false, (x,))

The branch functions take the locals the bodies read that were bound before the ``if`` (and the
outputs a side may leave unchanged), and return the locals either side assigns that code after
the ``if`` reads (or code anywhere in an enclosing loop). ``self`` and submodules are read
through the closure. Measured on torch 2.13 (see the design facts): torch.cond rejects an output
that aliases an input, in eager mode too (``return x``, ``x.view(...)``, ``x[0:1]``,
``x.contiguous()``, ``nn.Identity()(x)``), so an unchanged value and a value that may be a view
are returned as ``name.clone()``; one output is returned bare (``x = torch.cond(...)``); an empty
operand tuple is accepted.

The scope questions (definite assignment, nodes outside nested functions, control that leaves
a statement) are :mod:`tsfix.codemods.facts.statements`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.locals import function_locals
from tsfix.codemods.facts.statements import MUTATORS, definitely_assigned, escape, own
from tsfix.codemods.facts.syntax import children, code_of, find_all, names_used, self_name

# Methods whose result may share storage with the tensor they are called on (or return it).
_MAY_ALIAS = {
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "contiguous", "to",
    "float", "double", "half", "bfloat16", "int", "long", "bool", "type", "type_as", "squeeze",
    "unsqueeze", "flatten", "unflatten", "expand", "expand_as", "narrow", "select", "t",
    "detach", "chunk", "split", "unbind", "movedim", "moveaxis", "swapaxes", "swapdims",
    "as_strided", "diagonal", "real", "imag", "unfold", "cpu", "cuda", "requires_grad_",
    "tensor_split", "hsplit", "vsplit", "view_as_real", "view_as_complex", "mT", "T", "H",
}

# Methods and torch functions whose result may have another shape, dtype or stride order than
# their input. torch.cond needs both sides to return tensors of one shape, dtype and stride
# order (measured: "The sorted order of strides of the two branches' output doesn't match",
# "expected same dim"), and a config flag that reshapes or transposes (speechbrain's
# ``skip_transpose``, ``combine_batch_time``) is exactly the case where they differ.
_RESHAPES = {
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "contiguous", "to",
    "float", "double", "half", "bfloat16", "int", "long", "bool", "type", "type_as", "squeeze",
    "unsqueeze", "flatten", "unflatten", "expand", "expand_as", "narrow", "select", "t",
    "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided", "diagonal", "unfold",
    "repeat", "repeat_interleave", "tile", "view_as_real", "view_as_complex",
}

_PYTHON_CALLS = {"len", "int", "float", "str", "bool", "range", "isinstance", "hasattr",
                 "getattr", "round", "min", "max", "abs", "sum", "tuple", "list", "dict",
                 "set", "format", "repr", "id", "type", "math.sqrt", "math.log", "math.ceil",
                 "math.floor"}


@dataclass(frozen=True)
class CondSite:
    """One ``if`` of a function to lower (matched by identity, at any depth)."""

    branch: cst.If
    predicate: cst.BaseExpression   # the tensor expression torch.cond receives
    stem: str                       # names the branch functions (made unique)


@dataclass(frozen=True)
class CondResult:
    func: cst.FunctionDef           # the function with every accepted site lowered
    lowered: list[cst.If]           # the sites rewritten
    refused: dict[cst.If, str]      # site -> why it was left as it is


@dataclass
class _Plan:
    site: CondSite
    inputs: list[str]
    outputs: list[str]
    # side ("true"/"false") -> output -> whether the side returns it as ``name.clone()``
    cloned: dict[str, dict[str, bool]]
    true_name: str = ""
    false_name: str = ""


class _FunctionIndex:
    """Pre-order positions of every node of one function, its parents, and where each
    function-scope name is bound and read (LibCST scope analysis of the function alone)."""

    def __init__(self, func: cst.FunctionDef) -> None:
        self.func = func
        self.start: dict[int, int] = {}
        self.end: dict[int, int] = {}
        self.parent: dict[int, cst.CSTNode] = {}
        self.nodes: list[cst.CSTNode] = []
        stack: list[tuple[cst.CSTNode, bool]] = [(func, False)]
        while stack:
            node, done = stack.pop()
            if done:
                self.end[id(node)] = len(self.nodes) - 1
                continue
            self.start[id(node)] = len(self.nodes)
            self.nodes.append(node)
            stack.append((node, True))
            for child in reversed(children(node)):
                self.parent[id(child)] = node
                stack.append((child, False))
        self.locals = function_locals(func, self.start)

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        return self.start[id(node)], self.end[id(node)]

    def ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        found = []
        while id(node) in self.parent:
            node = self.parent[id(node)]
            found.append(node)
        return found


def _side_statements(suite: cst.BaseSuite | cst.If | cst.Else | None) -> list[cst.BaseStatement]:
    """The statements of one side of an ``if``: its block, or an ``elif`` as an ``if``."""
    if suite is None:
        return []
    if isinstance(suite, cst.If):
        return [suite]
    if isinstance(suite, cst.Else):
        suite = suite.body
    if isinstance(suite, cst.IndentedBlock):
        return list(suite.body)
    assert isinstance(suite, cst.SimpleStatementSuite)
    return [cst.SimpleStatementLine(suite.body)]


def is_python_value(expr: cst.BaseExpression) -> bool:
    """A value that is obviously not a tensor: literals, None/True/False, tuples and lists
    of those, ``len(...)``/``int(...)``..., arithmetic and comparisons of such values."""
    if isinstance(expr, cst.Integer | cst.Float | cst.Imaginary | cst.SimpleString
                  | cst.ConcatenatedString | cst.FormattedString):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("None", "True", "False")
    if isinstance(expr, cst.Tuple | cst.List | cst.Set):
        return all(is_python_value(e.value) for e in expr.elements)
    if isinstance(expr, cst.Call):
        return get_full_name_for_node(expr.func) in _PYTHON_CALLS
    if isinstance(expr, cst.UnaryOperation):
        return is_python_value(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return is_python_value(expr.left) and is_python_value(expr.right)
    if isinstance(expr, cst.Comparison):
        return is_python_value(expr.left) and all(
            is_python_value(c.comparator) for c in expr.comparisons)
    if isinstance(expr, cst.BooleanOperation):
        return is_python_value(expr.left) and is_python_value(expr.right)
    return False


def _may_alias(expr: cst.BaseExpression | None) -> bool:
    """Whether a value may be (a view of) another tensor rather than a new one."""
    if expr is None or isinstance(expr, cst.Name | cst.Attribute | cst.Subscript | cst.IfExp):
        return True
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        return expr.func.attr.value in _MAY_ALIAS
    return False


def _target_leaves(target: cst.BaseExpression) -> Iterable[cst.BaseExpression]:
    """The parts of an assignment target (names, attributes, items), tuples unpacked."""
    if isinstance(target, cst.Tuple | cst.List):
        for element in target.elements:
            yield from _target_leaves(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_leaves(target.value)
    else:
        yield target


class _Planner:
    def __init__(self, func: cst.FunctionDef) -> None:
        self.func = func
        self.index = _FunctionIndex(func)
        self.self_var = self_name(func)
        self.params = {p.name.value: p for p in (*func.params.posonly_params,
                                                  *func.params.params,
                                                  *func.params.kwonly_params)}

    def plan(self, site: CondSite) -> _Plan | str:
        index = self.index
        branch = site.branch
        if id(branch) not in index.start:
            return "the `if` is not in this function"
        ancestors = index.ancestors(branch)
        if any(isinstance(a, cst.FunctionDef | cst.Lambda | cst.ClassDef)
               for a in ancestors[:-1] if a is not self.func):
            return "the `if` is inside a nested function or class"
        top = branch
        for ancestor in ancestors:
            if isinstance(ancestor, cst.If) and ancestor.orelse is top:
                top = ancestor
            elif not isinstance(ancestor, cst.Else) or not isinstance(
                    index.parent.get(id(ancestor)), cst.If):
                break
        chain_lo, chain_hi = index.span(top)
        lo, hi = index.span(branch)
        loops = [index.span(a) for a in ancestors if isinstance(a, cst.For | cst.While)]

        def in_loop(position: int) -> bool:
            return any(first <= position <= last for first, last in loops)

        sides = {"true": _side_statements(branch.body), "false": _side_statements(branch.orelse)}
        spans = {"true": index.span(branch.body),
                 "false": index.span(branch.orelse) if branch.orelse is not None else (-1, -2)}
        for side, stmts in sides.items():
            reason = self._leaves_or_mutates(side, stmts, chain_lo)
            if reason is not None:
                return reason
        definite = {side: set().union(*(definitely_assigned(s) for s in stmts))
                    for side, stmts in sides.items()}
        inputs: list[tuple[int, str]] = []
        outputs: list[tuple[int, str]] = []
        for name, local in index.locals.items():
            if name == self.self_var:
                continue
            before = [p for p in local.assigns if p < chain_lo]
            assigned = [p for p in local.assigns if any(a <= p <= b for a, b in spans.values())]
            needed = [r for side, stmts in sides.items()
                      if (r := self._read_before_assigned(name, stmts)) is not None]
            after = [r for r in local.reads
                     if not lo <= r <= hi and (r > chain_hi or in_loop(r))]
            is_output = bool(assigned and after)
            if is_output:
                for side in sides:
                    if name not in definite[side] and not before:
                        other = "false" if side == "true" else "true"
                        return (f"`{name}` is assigned in the {other} side only and not bound "
                                f"before the `if`: the {side} side has no value to return")
                outputs.append((assigned[0], name))
            if needed and not before:
                later = [p for p in local.assigns if p > hi and in_loop(p)]
                if later:
                    return (f"`{name}` is read before it is assigned, from a later iteration of "
                            "the loop; it may be unbound")
                continue
            unchanged = is_output and any(name not in d for d in definite.values())
            if (needed or unchanged) and assigned:
                # A name a side assigns is local to the branch function, so its value comes
                # in as an operand. A name the sides only read is read through the closure:
                # torch.cond takes only tensors as operands, and a read-only name may hold
                # anything (a torch.Size, a list, a config value).
                inputs.append((min(needed) if needed else assigned[0], name))
        if not outputs:
            return ("no tensor output: the branch assigns nothing that code after it reads "
                    "(only Python side effects such as print or logging)")
        output_names = [name for _, name in sorted(outputs)]
        for name in output_names:
            reason = (self._python_output(name, sides, chain_lo)
                      or self._reshaped_output(name, sides))
            if reason is not None:
                return reason
        cloned = {side: {name: self._returns_clone(name, stmts, definite[side])
                         for name in output_names} for side, stmts in sides.items()}
        return _Plan(site, [name for _, name in sorted(inputs)], output_names, cloned)

    def _read_before_assigned(self, name: str, stmts: Sequence[cst.BaseStatement]) -> int | None:
        """The position of the first read of ``name`` in ``stmts`` that may see the value it
        had before them (no earlier statement of the side always assigns it)."""
        local = self.index.locals[name]
        assigned: set[str] = set()
        for stmt in stmts:
            lo, hi = self.index.span(stmt)
            reads = [r for r in local.reads if lo <= r <= hi]
            if reads and name not in assigned:
                return reads[0]
            assigned |= definitely_assigned(stmt)
        return None

    def _python_before(self, name: str, chain_lo: int) -> str | None:
        """Why ``name`` holds a Python value before the ``if``, if it plainly does."""
        body = self.func.body
        prior = [s for s in (body.body if isinstance(body, cst.IndentedBlock) else [])
                 if self.index.start[id(s)] < chain_lo]
        for value in self._assignments(name, prior):
            if value is not None and is_python_value(value):
                return f"`{name}` holds a Python value before the `if` (`{code_of(value).strip()}`)"
        param = self.params.get(name)
        if param is not None and param.annotation is not None:
            text = code_of(param.annotation.annotation)
            if text in ("int", "float", "bool", "str"):
                return f"`{name}` is a {text} argument"
        if param is not None and param.default is not None and is_python_value(param.default) \
                and not (isinstance(param.default, cst.Name) and param.default.value == "None"):
            return f"`{name}` defaults to a Python value (`{code_of(param.default)}`)"
        return None

    def _leaves_or_mutates(self, side: str, stmts: Sequence[cst.BaseStatement],
                           chain_lo: int) -> str | None:
        for stmt in stmts:
            if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
                # A definition runs nothing: its own returns (a branch function an inner
                # torch.cond already took) do not leave this branch.
                continue
            why = escape(stmt)
            if why is not None:
                return f"the {side} side leaves the branch ({why.replace('it ', '', 1)})"
            if own(stmt, cst.Raise):
                return f"the {side} side raises an exception"
            if find_all(stmt, cst.Yield, cst.Await):
                return f"the {side} side yields or awaits"
            for node in own(stmt, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.Del,
                            cst.Global, cst.Nonlocal, cst.Call):
                reason = self._mutation(node, stmts, chain_lo)
                if reason is not None:
                    return f"the {side} side mutates state: {reason}"
        return None

    def _mutation(self, node: cst.CSTNode, stmts: Sequence[cst.BaseStatement],
                  chain_lo: int) -> str | None:
        if isinstance(node, cst.Del):
            return f"`{code_of(node)}`"
        if isinstance(node, cst.Global | cst.Nonlocal):
            return f"`{code_of(node)}` rebinds a name outside the function"
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute):
                method = node.func.attr.value
                receiver = code_of(node.func.value)
                if method in MUTATORS:
                    return f"`{receiver}.{method}(...)` changes a container in place"
                if method.endswith("_") and not method.startswith("_"):
                    return f"`{receiver}.{method}(...)` changes a tensor in place"
            return None
        if isinstance(node, cst.AugAssign):
            updated = node.target
            if isinstance(updated, cst.Name):
                local = self.index.locals.get(updated.value)
                position = self.index.start[id(node)]
                side_lo = self.index.start[id(stmts[0])]
                assigned_in_side = local is not None and any(
                    side_lo <= p < position for p in local.assigns)
                bound_before = local is not None and any(p < chain_lo for p in local.assigns)
                if bound_before and not assigned_in_side:
                    return (f"`{code_of(node).strip()}` updates `{updated.value}` in place, "
                            "a value torch.cond passes in")
                return None
            return f"`{code_of(node).strip()}` assigns to an attribute or item"
        assert isinstance(node, cst.AssignTarget | cst.AnnAssign)
        for part in _target_leaves(node.target):
            if isinstance(part, cst.Attribute | cst.Subscript):
                return f"`{code_of(part)} = ...` assigns to an attribute or item"
        return None

    def _assignments(self, name: str, stmts: Sequence[cst.BaseStatement]
                     ) -> list[cst.BaseExpression | None]:
        """The values ``name`` is given in ``stmts`` (None: a binding with no plain value,
        such as a loop target or ``with ... as``)."""
        values: list[cst.BaseExpression | None] = []
        local = self.index.locals.get(name)
        positions = set(local.assigns) if local else set()
        found: set[int] = set()
        for stmt in stmts:
            for node in own(stmt, cst.Assign, cst.AnnAssign, cst.AugAssign):
                assert isinstance(node, cst.Assign | cst.AnnAssign | cst.AugAssign)
                targets = ([t.target for t in node.targets] if isinstance(node, cst.Assign)
                           else [node.target])
                for target in targets:
                    for part in _target_leaves(target):
                        if isinstance(part, cst.Name) and part.value == name:
                            single = isinstance(target, cst.Name)
                            value = node.value if single else None
                            if isinstance(node, cst.AugAssign):
                                value = cst.BinaryOperation(part, cst.Add(), node.value)
                            values.append(value)
                            found.add(self.index.start[id(part)])
            for p in positions:
                lo, hi = self.index.span(stmt)
                if lo <= p <= hi and p not in found:
                    values.append(None)
                    found.add(p)
        return values

    def _python_output(self, name: str, sides: dict[str, list[cst.BaseStatement]],
                       chain_lo: int) -> str | None:
        for side, stmts in sides.items():
            for value in self._assignments(name, stmts):
                if value is not None and is_python_value(value):
                    return (f"no tensor output: `{name}` is given a Python value in the {side} "
                            f"side (`{code_of(value).strip()}`); torch.cond returns tensors")
        why = self._python_before(name, chain_lo)
        return f"no tensor output: {why}; torch.cond returns tensors" if why else None

    def _reshaped_output(self, name: str, sides: dict[str, list[cst.BaseStatement]]
                         ) -> str | None:
        """Why an output may leave a side with another shape, dtype or stride order: the
        value's own method chain (not its arguments: ``x.masked_fill(m.unsqueeze(-1), 0)``
        keeps ``x``'s shape) reshapes, transposes, casts or slices."""
        for side, stmts in sides.items():
            for value in self._assignments(name, stmts):
                node: cst.BaseExpression | None = value
                while node is not None:
                    what = None
                    receiver: cst.BaseExpression | None = None
                    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                        if node.func.attr.value in _RESHAPES:
                            what = code_of(node.func)
                        receiver = node.func.value
                    elif isinstance(node, cst.Attribute):
                        if node.attr.value in ("T", "mT", "H", "mH"):
                            what = code_of(node)
                    elif isinstance(node, cst.Subscript):
                        what = f"{code_of(node.value)}[...]"
                    if what is not None:
                        return (f"`{name}` may change shape, dtype or memory layout in the "
                                f"{side} side (`{what.strip()}`): torch.cond needs both sides "
                                "to return tensors of one shape, dtype and stride order")
                    node = receiver
        return None

    def _returns_clone(self, name: str, stmts: Sequence[cst.BaseStatement],
                       definite: set[str]) -> bool:
        if name not in definite:
            return True
        return any(_may_alias(value) for value in self._assignments(name, stmts))


def _unique_stem(stem: str, taken: set[str]) -> tuple[str, str]:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in stem) or "branch"
    if base[0].isdigit():
        base = f"branch_{base}"
    suffix = ""
    n = 1
    while f"{base}{suffix}_true" in taken or f"{base}{suffix}_false" in taken:
        n += 1
        suffix = str(n)
    return f"{base}{suffix}_true", f"{base}{suffix}_false"


def _returned(plan: _Plan, side: str) -> str:
    values = [f"{name}.clone()" if plan.cloned[side][name] else name for name in plan.outputs]
    return ", ".join(values)


def _branch_function(name: str, inputs: list[str], stmts: list[cst.BaseStatement],
                     returned: str, like: cst.BaseSuite | None) -> cst.FunctionDef:
    template = cst.parse_statement(f"def {name}({', '.join(inputs)}):\n    return {returned}\n")
    assert isinstance(template, cst.FunctionDef)
    assert isinstance(template.body, cst.IndentedBlock)
    block = template.body.with_changes(body=[*stmts, *template.body.body])
    if isinstance(like, cst.IndentedBlock):
        block = block.with_changes(header=like.header, indent=like.indent, footer=like.footer)
    return template.with_changes(body=block)


def _lower(plan: _Plan, updated: cst.If, torch_name: str,
           first_in_block: bool = True) -> list[cst.BaseStatement]:
    """The statements that replace the ``if``: the two branch functions and the call."""
    true_stmts = _side_statements(updated.body)
    false_stmts = _side_statements(updated.orelse)
    true_fn = _branch_function(plan.true_name, plan.inputs, true_stmts,
                               _returned(plan, "true"), updated.body)
    false_like = updated.orelse.body if isinstance(updated.orelse, cst.Else) else None
    false_fn = _branch_function(plan.false_name, plan.inputs, false_stmts,
                                _returned(plan, "false"), false_like)
    # A blank line sets the functions apart from the code before them, as black does around
    # nested functions (it formats only touched lines, and the line before is not one).
    apart = [] if first_in_block else [cst.EmptyLine(indent=False)]
    true_fn = true_fn.with_changes(leading_lines=updated.leading_lines or apart)
    operands = ", ".join(plan.inputs) + ("," if len(plan.inputs) == 1 else "")
    call = cst.parse_statement(
        f"{', '.join(plan.outputs)} = {torch_name}.cond(PREDICATE, {plan.true_name}, "
        f"{plan.false_name}, ({operands}))\n")
    assert isinstance(call, cst.SimpleStatementLine)
    assign = call.body[0]
    assert isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call)
    args = list(assign.value.args)
    args[0] = args[0].with_changes(value=plan.site.predicate)
    call = call.with_changes(body=[assign.with_changes(value=assign.value.with_changes(
        args=args))])
    return [true_fn, false_fn, call]


class _Lowerer(cst.CSTTransformer):
    def __init__(self, plans: dict[int, _Plan], torch_name: str) -> None:
        self.plans = plans
        self.torch_name = torch_name
        self.elif_children: set[int] = set()
        self.first_statements: set[int] = set()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        if node.body:
            self.first_statements.add(id(node.body[0]))
        return True

    def visit_If(self, node: cst.If) -> bool:
        if isinstance(node.orelse, cst.If):
            self.elif_children.add(id(node.orelse))
        return True

    def _chain(self, original: cst.If, updated: cst.If) -> cst.If:
        """``updated`` with each lowered ``elif`` of its chain turned into an ``else`` block."""
        if not isinstance(original.orelse, cst.If) or not isinstance(updated.orelse, cst.If):
            return updated
        inner = self._chain(original.orelse, updated.orelse)
        plan = self.plans.get(id(original.orelse))
        if plan is None:
            return updated.with_changes(orelse=inner)
        return updated.with_changes(orelse=cst.Else(cst.IndentedBlock(
            _lower(plan, inner, self.torch_name))))

    def leave_If(self, original_node: cst.If, updated_node: cst.If
                 ) -> cst.If | cst.FlattenSentinel[cst.BaseStatement]:
        if id(original_node) in self.elif_children:
            return updated_node      # the chain's head rewrites it
        chained = self._chain(original_node, updated_node)
        plan = self.plans.get(id(original_node))
        if plan is None:
            return chained
        return cst.FlattenSentinel(_lower(plan, chained, self.torch_name,
                                          id(original_node) in self.first_statements))


def lower_to_cond(func: cst.FunctionDef, sites: Sequence[CondSite],
                  torch_name: str = "torch") -> CondResult:
    """``func`` with each site's ``if`` rewritten as ``torch.cond`` where that keeps its
    meaning; the rest left as they are, each with the reason."""
    planner = _Planner(func)
    plans: dict[int, _Plan] = {}
    refused: dict[cst.If, str] = {}
    taken = names_used(func)
    lowered: list[cst.If] = []
    for site in sites:
        plan = planner.plan(site)
        if isinstance(plan, str):
            refused[site.branch] = plan
            continue
        plan.true_name, plan.false_name = _unique_stem(site.stem, taken)
        taken |= {plan.true_name, plan.false_name}
        plans[id(site.branch)] = plan
        lowered.append(site.branch)
    if not plans:
        return CondResult(func, [], refused)
    rewritten = func.visit(_Lowerer(plans, torch_name))
    assert isinstance(rewritten, cst.FunctionDef)
    return CondResult(rewritten, lowered, refused)
