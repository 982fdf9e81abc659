"""The ``--target export`` form (see ``LiftBranchExport``): each lifted setting is a 0-d
tensor argument and each branch on it a ``torch.cond``; a setting some read of which a tensor
cannot serve is refused."""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import find_all, self_attr, self_name, short_source
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.lift_branch._plan import TSF204, ClassAnalysis, Lift, Plan
from tsfix.codemods.rules.lift_branch._reads import ReadKey, parents_of, quoted
from tsfix.codemods.rules.lift_branch._rewrite import reads_replaced, with_parameters
from tsfix.codemods.rules.torch_cond import CondSite, is_python_value, lower_to_cond


def settle(rule: Rule, analysis: ClassAnalysis, plan: Plan, torch: str) -> Plan | None:
    """Drop the lifts some read of which a tensor cannot serve, until none is left that
    cannot; each dropped setting's test reads are refused with the first reason."""
    refused: dict[ReadKey, str] = {}
    while True:
        found: dict[ReadKey, str] = {}
        for name in plan.reachable:
            func = analysis.methods[name]
            _, problems = export_method(analysis, plan, func, self_name(func) or "self", torch)
            for key, reason in problems.items():
                found.setdefault(key, reason)
        if not found:
            break
        refused.update(found)
        plan.lifts = [lift for lift in plan.lifts if lift.key not in found]
    if refused:
        keys = {id(node): key for name in analysis.compiled
                for key, node in analysis.reads.test_reads(name)}
        kept = []
        for node, code, message in analysis.fixes:
            if code == TSF204 and keys.get(id(node)) in refused:
                key = keys[id(node)]
                rule.skip(analysis.name, node, refused[key], code=code, message=message)
            else:
                kept.append((node, code, message))
        analysis.fixes = kept
    if not plan.lifts and not plan.copies:
        return None
    return plan


def export_method(analysis: ClassAnalysis, plan: Plan, func: cst.FunctionDef, self_var: str,
                  torch: str) -> tuple[cst.FunctionDef, dict[ReadKey, str]]:
    """``func`` in the export form, and why a tensor cannot serve some lifted settings."""
    func, mine = reads_replaced(analysis.reads, plan, func, self_var)
    if not mine:
        return func, {}
    by_param = {lift.param: lift for lift in mine}
    problems: dict[ReadKey, str] = {}
    sites: list[CondSite] = []
    for branch in find_all(func.body, cst.If):
        read = [p for p in _params_read(branch.test, by_param)]
        if not read:
            continue
        predicate, why = _predicate(branch.test, set(by_param), torch)
        if predicate is None:
            for param in read:
                problems.setdefault(by_param[param].key, why)
            continue
        sites.append(CondSite(branch, predicate, read[0]))
    result = lower_to_cond(func, sites, torch)
    for branch, reason in result.refused.items():
        for param in _params_read(branch.test, by_param):
            problems.setdefault(by_param[param].key,
                                f"its branch cannot be a torch.cond: {reason}")
    served = {id(n) for branch in result.lowered for n in find_all(branch.test, cst.Name)}
    for param, why in _other_reads(func, by_param, served, plan.reachable, self_var):
        problems.setdefault(by_param[param].key, why)
    if problems:
        return func, problems
    preamble = [line for lift in mine for line in _preamble(lift, self_var, torch)]
    return with_parameters(result.func, mine, self_var, f"{torch}.Tensor", preamble), {}


def _preamble(lift: Lift, self_var: str, torch: str) -> list[cst.BaseStatement]:
    value = f"{self_var}.{lift.attr}"
    lines = []
    if lift.codes is not None:
        table = ", ".join(f"{quoted(text)}: {code}" for text, code in lift.codes.items())
        legend = ", ".join(f"{code} = {quoted(text)}" for text, code in lift.codes.items())
        value = f"{{{table}}}.get({value}, -1)"
        lines.append(f"# {lift.param} codes: {legend}, -1 = any other value\n")
    return [cst.parse_statement("".join(lines) + f"if {lift.param} is None:\n"
                                f"    {lift.param} = {torch}.tensor({value})\n")]


def _params_read(expr: cst.CSTNode, params: Iterable[str]) -> list[str]:
    """The lifted parameters ``expr`` reads, in order of first read."""
    wanted = set(params)
    found: list[str] = []
    for name in find_all(expr, cst.Name):
        if name.value in wanted and name.value not in found:
            found.append(name.value)
    return found


_LOGICAL = {cst.And: "logical_and", cst.Or: "logical_or"}


def _predicate(test: cst.BaseExpression, params: set[str],
               torch: str) -> tuple[cst.BaseExpression | None, str]:
    """The tensor expression torch.cond receives for ``test`` (``not p`` ->
    ``torch.logical_not(p)``, ``p and q`` -> ``torch.logical_and(p, q)``), or None and why."""
    bare = test.with_changes(lpar=[], rpar=[])
    if isinstance(bare, cst.Name) and bare.value in params:
        return bare, ""
    if isinstance(bare, cst.UnaryOperation) and isinstance(bare.operator, cst.Not):
        inner, why = _predicate(bare.expression, params, torch)
        if inner is None:
            return None, why
        return cst.parse_expression(f"{torch}.logical_not(X)").with_changes(
            args=[cst.Arg(inner)]), ""
    if isinstance(bare, cst.BooleanOperation):
        left, why = _predicate(bare.left, params, torch)
        right, why_right = _predicate(bare.right, params, torch)
        if left is None or right is None:
            return None, why or why_right
        call = cst.parse_expression(f"{torch}.{_LOGICAL[type(bare.operator)]}(X, Y)")
        assert isinstance(call, cst.Call)
        return call.with_changes(args=[cst.Arg(left, comma=call.args[0].comma),
                                       cst.Arg(right)]), ""
    if isinstance(bare, cst.Comparison) and len(bare.comparisons) == 1:
        operator = bare.comparisons[0].operator
        operands = [bare.left, bare.comparisons[0].comparator]
        if (isinstance(operator, cst.Equal | cst.NotEqual | cst.LessThan | cst.GreaterThan
                       | cst.LessThanEqual | cst.GreaterThanEqual)
                and any(_params_read(o, params) for o in operands)
                and all(is_python_value(o) or _tensor_operand(o, params) for o in operands)):
            return bare, ""
    return None, (f"the test `{short_source(test)}` mixes the setting with values that are not "
                  "tensors (or uses `is`, `in` or a chained comparison), so it cannot be a "
                  "torch.cond predicate")


def _tensor_operand(expr: cst.BaseExpression, params: set[str]) -> bool:
    """A lifted parameter, or arithmetic of one with Python numbers."""
    bare = expr.with_changes(lpar=[], rpar=[])
    if isinstance(bare, cst.Name):
        return bare.value in params
    if isinstance(bare, cst.BinaryOperation):
        sides = (bare.left, bare.right)
        return any(_tensor_operand(s, params) for s in sides) and all(
            _tensor_operand(s, params) or is_python_value(s) for s in sides)
    return False


def _other_reads(func: cst.FunctionDef, by_param: dict[str, Lift], served: set[int],
                 reachable: list[str], self_var: str) -> list[tuple[str, str]]:
    """(param, why) for each read of a lifted parameter a tensor cannot serve: anything but a
    lowered test, tensor arithmetic, and passing it on to a compiled helper."""
    parents = parents_of(func.body)
    not_reads = {id(a.attr) for a in find_all(func.body, cst.Attribute)} | {
        id(a.keyword) for a in find_all(func.body, cst.Arg) if a.keyword is not None}
    found: list[tuple[str, str]] = []
    for name in find_all(func.body, cst.Name):
        if name.value not in by_param or id(name) in served or id(name) in not_reads:
            continue
        why = _python_context(name, parents, reachable, self_var)
        if why is not None:
            found.append((name.value, f"{why}; a tensor cannot serve it"))
    return found


def _python_context(name: cst.Name, parents: dict[int, cst.CSTNode], reachable: list[str],
                    self_var: str) -> str | None:
    parent = parents.get(id(name))
    if (isinstance(parent, cst.Arg) and parent.keyword is not None
            and parent.keyword.value == name.value):
        call = parents.get(id(parent))
        if isinstance(call, cst.Call) and self_attr(call.func, self_var) in reachable:
            return None      # passed on to a helper that takes the same parameter
    node: cst.CSTNode = name
    arithmetic = False
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, cst.While) and node is parent.test:
            return "it is read in a `while` test"
        if isinstance(parent, cst.IfExp) and node is parent.test:
            return f"it is the test of a ternary (`{short_source(parent)}`)"
        if isinstance(parent, cst.If) and node is parent.test:
            return f"it is read in the test `if {short_source(parent.test)}:`"
        if isinstance(parent, cst.For) and node is parent.iter:
            return f"it decides a loop (`for ... in {short_source(parent.iter)}`)"
        if isinstance(parent, cst.SubscriptElement):
            index = parents.get(id(parent), parent)
            return f"it is used as an index or size (`{short_source(index)}`)"
        if isinstance(parent, cst.Call) and node is not parent.func:
            called = get_full_name_for_node(parent.func) or ""
            if called in _PYTHON_VALUE_CALLS or not arithmetic:
                return f"it is passed to `{short_source(parent)}`"
        if isinstance(parent, cst.BinaryOperation) and not is_python_value(
                parent.right if node is parent.left else parent.left):
            arithmetic = True     # with something that is not a Python number: a tensor
        if isinstance(parent, cst.BaseStatement | cst.BaseSmallStatement):
            break
        node = parent
    if not arithmetic:
        return f"it is read as a Python value (`{short_source(node)}`)"
    return None


_PYTHON_VALUE_CALLS = {"range", "int", "float", "bool", "str", "len", "print", "isinstance"}
