"""The enumerate+if form: a list element picked by an index no iteration replaces (an offset
``self.blocks[i - 1]``, a partial range, a list of another length, a list a base class builds,
an index outside any loop). The statement holding the call is rewritten in one of three forms
(the rule's docstring shows them), or the site is refused with the reason."""

from __future__ import annotations

import itertools

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import (
    bound_names,
    code_of,
    find_all,
    fresh_name,
    parameters_of,
    self_attr,
    target_names,
)
from tsfix.codemods.rules.modulelist_iter._base import MethodState
from tsfix.codemods.rules.modulelist_iter._common import (
    Selection,
    SelectPlan,
    element_name,
    int_value,
    is_literal_key,
    positional,
    single_index,
    singular,
    source_key,
)

# Operators that keep an int an int (``/`` makes a float, which no list takes).
_INT_OPERATORS = (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)
# How many assignments deep an index's int-ness is followed.
_MAX_DEPTH = 4


class Selections(MethodState):
    """Plans the enumerate+if form for the sites ``deferred`` holds (site, why no iteration)."""

    def select_sites(self, deferred: list[tuple[cst.Subscript, str]]) -> None:
        self.parents = _parents(self.func)
        self.int_names_pending: set[str] = set()
        deferred_ids = {id(node) for node, _ in deferred}
        by_line: dict[int, tuple[cst.BaseStatement | None, list[tuple[cst.Subscript, str]]]] = {}
        for node, why in deferred:
            if id(node) in self.handled:
                continue
            line = self._statement_of(node)
            key = id(line) if line is not None else id(node)
            by_line.setdefault(key, (line, []))[1].append((node, why))
        self.select_names: dict[int, set[str]] = {}     # block id -> element names bound there
        self.results: set[str] = set()
        self.region_statements: set[int] = set()     # ids of the statements a region holds
        chosen: dict[int, set[str]] = {}                # statement id -> names it introduces
        for line, sites in by_line.values():
            if line is None or not isinstance(line, cst.SimpleStatementLine):
                reason = "the indexed call is in the header of a compound statement"
                if line is None:
                    reason = "the indexed call shares its line with the statement it is under"
                for node, why in sites:
                    self.refuse_sites([node], f"{why}; {reason}; not rewritten")
                continue
            statement_sites = [s for s in find_all(line, cst.Subscript)
                               if id(s) in deferred_ids and id(s) not in self.handled]
            whys = {id(node): why for node, why in sites}
            refusal = self.plan_statement(line, statement_sites, chosen)
            if refusal is not None:
                for node in statement_sites:
                    why = whys.get(id(node), sites[0][1])
                    self.refuse_sites([node], f"{why}; the enumerate+if form does not apply: "
                                      f"{refusal}; not rewritten")
            else:
                self.fix_sites(statement_sites)
        # Later analyses (ModuleDict lookups) avoid these names.
        self.chosen.update(chosen)

    # ---- where a site is ------------------------------------------------------------------

    def _statement_of(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement holding ``node``; None when it is a one-line suite's statement."""
        current: cst.CSTNode | None = node
        while current is not None:
            if isinstance(current, cst.SimpleStatementSuite):
                return None
            if isinstance(current, cst.BaseStatement):
                return current
            current = self.parents.get(id(current))
        return None

    def _ancestors(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        found: list[cst.CSTNode] = []
        current = self.parents.get(id(node))
        while current is not None:
            found.append(current)
            current = self.parents.get(id(current))
        return found

    # ---- the plan ---------------------------------------------------------------------------

    def plan_statement(self, line: cst.SimpleStatementLine, sites: list[cst.Subscript],
                       chosen: dict[int, set[str]]) -> str | None:
        """Records the statement's plan, or says why the form does not apply."""
        if id(line) not in self.block_of or len(line.body) != 1:
            return "the statement shares its line with others"
        small = line.body[0]
        if any(self.container_subscript(s, "dict") is not None
               and not is_literal_key(single_index(s) or cst.Name("x"))
               for s in find_all(line, cst.Subscript)):
            return "the statement also looks up a ModuleDict by a variable key"
        keys: dict[tuple[str, str], cst.Subscript] = {}
        calls: list[cst.Call] = []
        for site in sites:
            reason = self._site_refusal(site, line)
            if reason is not None:
                return reason
            attr = self_attr(site.value, self.self_var)
            index = single_index(site)
            assert attr is not None and index is not None
            keys.setdefault((attr, source_key(index)), site)
            parent = self.parents[id(site)]
            assert isinstance(parent, cst.Call)
            calls.append(parent)
        if isinstance(small, cst.Return):
            form = "return"
        elif isinstance(small, cst.Expr | cst.Assign | cst.AugAssign | cst.AnnAssign):
            new = [n for n in bound_names(small) if not self._bound_before(n, line, small)]
            if not new:
                form = "inside"
            else:
                reason = self._result_refusal(small, calls, new)
                if reason is not None:
                    return reason
                form = "result"
        else:
            return f"a `{code_of(small).split()[0]}` statement"
        tensor = self.cls.tensor_name
        if form == "result" and tensor is None:
            return "its result needs a type, and the file imports neither torch nor Tensor"
        plan = self._selections(line, form, list(keys.values()))
        chosen[id(line)] = {s.element for s in plan.selections} | {
            s.counter for s in plan.selections}
        if form == "result":
            assert tensor is not None
            self._result(plan, small, calls[0], tensor)
            if plan.result is not None and plan.keep_statement:
                chosen[id(line)].add(plan.result)
        self.plan.selects[id(line)] = plan
        return None

    def _site_refusal(self, site: cst.Subscript, line: cst.SimpleStatementLine) -> str | None:
        code = code_of(site)
        parent = self.parents.get(id(site))
        if not isinstance(parent, cst.Call) or parent.func is not site:
            return f"{code} is used other than by calling it"
        chain = [site, *self._ancestors(site)]
        for child, ancestor in itertools.pairwise(chain):
            if ancestor is line:
                break
            if isinstance(ancestor, cst.Lambda | cst.ListComp | cst.SetComp | cst.DictComp
                          | cst.GeneratorExp):
                return f"{code} is inside a lambda or comprehension"
            if isinstance(ancestor, cst.IfExp) and child is not ancestor.test:
                return f"{code} is inside a conditional expression"
            if isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
                return f"{code} is evaluated only conditionally (and/or)"
        index = single_index(site)
        assert index is not None
        if not self._is_int(index, 0):
            return (f"the index `{code_of(index)}` of {code} is not known to be an int (a loop "
                    "counter, a parameter annotated `int`, an attribute set to an int in "
                    "`__init__`, or arithmetic on those)")
        return None

    def _result_refusal(self, small: cst.BaseSmallStatement, calls: list[cst.Call],
                        new: list[str]) -> str | None:
        """Why the call cannot be moved ahead of its statement into a result variable."""
        shown = ", ".join(f"`{n}`" for n in new)
        if len(calls) > 1:
            return (f"the statement binds {shown} for the first time and calls several "
                    "indexed elements")
        value = getattr(small, "value", None)
        assert value is not None
        call = calls[0]
        if isinstance(small, cst.Assign) and value is call and not all(
                isinstance(t.target, cst.Name) for t in small.targets):
            return "the call's result is unpacked, so it is no single Tensor"
        if isinstance(small, cst.Assign) and value is call:
            names = {t.target.value for t in small.targets if isinstance(t.target, cst.Name)}
            for other in find_all(self.func.body, cst.Assign):
                if (isinstance(other.value, cst.Name) and other.value.value in names
                        and any(isinstance(t.target, cst.Tuple | cst.List)
                                for t in other.targets)):
                    return (f"`{other.value.value}` is unpacked later "
                            f"(`{code_of(other).strip()}`), so the call's result is no single "
                            "Tensor")
        above = {id(a) for a in self._ancestors(call)}
        for other in find_all(value, cst.Call):
            if other is call:
                break
            if id(other) not in above:
                return (f"`{code_of(other.func)}(...)` runs before the indexed call in the "
                        f"statement, which binds {shown} for the first time: moving the call "
                        "ahead would change the order of the calls")
        return None

    def _selections(self, line: cst.SimpleStatementLine, form: str,
                    sites: list[cst.Subscript]) -> SelectPlan:
        block = self.block_of[id(line)]
        nested = {id(a) for a in self._ancestors(line) if isinstance(a, cst.IndentedBlock)}
        # Module-typed loop variables: TorchScript rejects one bound again in a nested block,
        # so names bound in an enclosing block are avoided (same block or disjoint ones: reused).
        outer = {n for b, names in self.select_names.items() if b in nested and b != block
                 for n in names}
        inner = {n for b, names in self.select_names.items()
                 if b != block and b not in nested and self._inside(b, block) for n in names}
        taken = (set(self.names) | {n for names in self.chosen.values() for n in names}
                 | outer | inner | self.results)
        selections: list[Selection] = []
        counters: set[str] = set()
        for site in sites:
            attr = self_attr(site.value, self.self_var)
            index = single_index(site)
            assert attr is not None and index is not None
            element = element_name(attr, "list", taken | {s.element for s in selections}
                                   | counters)
            counter = fresh_name("j", taken=taken | counters | {element})
            counters.add(counter)
            nonnegative, below = self.index_bounds(index, attr, line)
            checked = not (nonnegative and below)
            if form == "return":
                # One selection: the list's IndexError is raised after the loop, where the
                # function would otherwise fall off its end. Several: each index is checked
                # first, since an inner mismatch falls through to the outer loop.
                checked = len(sites) > 1
            selections.append(Selection(attr, code_of(index), element, counter, nonnegative,
                                        checked))
        self.select_names.setdefault(block, set()).update(s.element for s in selections)
        return SelectPlan(self.rule.line_of(line), form, selections)

    def _inside(self, block: int, outer: int) -> bool:
        """Whether the block with id ``block`` lies inside the block with id ``outer``."""
        for node in find_all(self.func, cst.IndentedBlock):
            if id(node) == block:
                return any(id(a) == outer for a in self._ancestors(node))
        return False

    def _result(self, plan: SelectPlan, small: cst.BaseSmallStatement, call: cst.Call,
                tensor: str) -> None:
        """The result variable: the statement's own target when the statement is
        ``name = call`` and nothing else binds ``name``, else a fresh name."""
        plan.tensor = tensor
        selection = plan.selections[0]
        if (isinstance(small, cst.Assign) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name) and small.value is call):
            name = small.targets[0].target.value
            if self.counts.get(name) == 1 and name not in parameters_of(self.func):
                plan.result, plan.keep_statement = name, False
                self.results.add(name)
                return
        base = singular(selection.attr) or selection.attr.lstrip("_") or selection.attr
        taken = (set(self.names) | {n for names in self.chosen.values() for n in names}
                 | {n for names in self.select_names.values() for n in names}
                 | {s.counter for s in plan.selections} | self.results)
        plan.result = fresh_name(f"{base}_out", taken=taken)
        self.results.add(plan.result)

    # ---- what a name holds ------------------------------------------------------------------

    def _bound_before(self, name: str, line: cst.SimpleStatementLine,
                      small: cst.BaseSmallStatement) -> bool:
        """Whether ``name`` is bound on every path to ``line``: read by the statement itself
        (an augmented target, or a name of the value), a parameter, a target of an enclosing
        ``for``, or assigned by a plain statement earlier in this block or an enclosing one."""
        if isinstance(small, cst.AugAssign) or name in parameters_of(self.func):
            return True
        value = getattr(small, "value", None)
        if value is not None:
            attribute_names = {id(a.attr) for a in find_all(value, cst.Attribute)}
            if any(n.value == name and id(n) not in attribute_names
                   for n in find_all(value, cst.Name)):
                return True
        child: cst.CSTNode = line
        for ancestor in self._ancestors(line):
            if isinstance(ancestor, cst.FunctionDef):
                return False
            if isinstance(ancestor, cst.IndentedBlock):
                for statement in ancestor.body:
                    if statement is child:
                        break
                    if isinstance(statement, cst.SimpleStatementLine) and any(
                            name in bound_names(s) and not (
                                isinstance(s, cst.AnnAssign) and s.value is None)
                            for s in statement.body):
                        return True
            if isinstance(ancestor, cst.For) and child is ancestor.body and name in {
                    n.value for n in find_all(ancestor.target, cst.Name)}:
                return True
            child = ancestor
        return False

    def _bindings(self, name: str) -> list[cst.CSTNode] | None:
        """The statements of the method that bind ``name``; None when one cannot be read
        (``with ... as``, ``except ... as``, an import, a walrus, a comprehension)."""
        found: list[cst.CSTNode] = []
        for node in find_all(self.func.body, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For,
                             cst.NamedExpr, cst.AsName, cst.CompFor):
            if isinstance(node, cst.AsName | cst.CompFor | cst.NamedExpr):
                target = node.name if isinstance(node, cst.AsName) else node.target
                if name in {n.value for n in find_all(target, cst.Name)}:
                    return None
                continue
            if isinstance(node, cst.For):
                if name in {n.value for n in find_all(node.target, cst.Name)}:
                    found.append(node)
            elif name in bound_names(node):
                found.append(node)
        return found

    def _is_int(self, expr: cst.BaseExpression, depth: int) -> bool:
        """Whether ``expr`` is provably an int (and reading it twice gives the same value:
        no calls but ``len``)."""
        if int_value(expr) is not None:
            return True
        if isinstance(expr, cst.UnaryOperation):
            return isinstance(expr.operator, cst.Minus | cst.Plus) and self._is_int(
                expr.expression, depth)
        if isinstance(expr, cst.BinaryOperation):
            return (isinstance(expr.operator, _INT_OPERATORS) and self._is_int(expr.left, depth)
                    and self._is_int(expr.right, depth))
        if isinstance(expr, cst.Call):
            args = positional(expr)
            return (get_full_name_for_node(expr.func) == "len" and args is not None
                    and len(args) == 1 and not find_all(args[0], cst.Call))
        attr = self_attr(expr, self.self_var)
        if attr is not None:
            return self._int_attribute(attr, depth)
        if isinstance(expr, cst.Name):
            return self._int_name(expr.value, depth)
        return False

    def _int_attribute(self, attr: str, depth: int) -> bool:
        """``self.attr`` is assigned only in ``__init__``, each time an int for certain: a
        literal, ``len()``, ``int()``, a parameter annotated ``int``, another such attribute, or
        arithmetic on those (see :func:`_declared_int` for parameters)."""
        assigned = [a for a in self.cls.assignments if a.attr == attr]
        init = self.cls.init
        if (not assigned or init is None or depth > _MAX_DEPTH
                or any(a.method != "__init__" or a.value is None for a in assigned)):
            return False
        return all(self._init_int(a.value, init, depth + 1) for a in assigned
                   if a.value is not None)

    def _init_int(self, expr: cst.BaseExpression, init: cst.FunctionDef, depth: int) -> bool:
        if int_value(expr) is not None:
            return True
        if isinstance(expr, cst.UnaryOperation):
            return isinstance(expr.operator, cst.Minus | cst.Plus) and self._init_int(
                expr.expression, init, depth)
        if isinstance(expr, cst.BinaryOperation):
            return (isinstance(expr.operator, _INT_OPERATORS)
                    and self._init_int(expr.left, init, depth)
                    and self._init_int(expr.right, init, depth))
        if isinstance(expr, cst.Call):
            return get_full_name_for_node(expr.func) in ("len", "int") and len(expr.args) == 1
        attr = self_attr(expr, self.cls.init_self)
        if attr is not None:
            return self._int_attribute(attr, depth + 1)
        if isinstance(expr, cst.Name) and self.cls.init_counts.get(expr.value) == 1:
            param = parameters_of(init).get(expr.value)
            if param is not None:
                return _declared_int(param)
            for node in find_all(init.body, cst.Assign):
                if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                        and node.targets[0].target.value == expr.value and depth < _MAX_DEPTH):
                    return self._init_int(node.value, init, depth + 1)
        return False

    def _int_name(self, name: str, depth: int) -> bool:
        """Every binding of ``name`` gives an int. A binding that reads ``name`` itself
        (``i = i + 1``) is judged taking ``name`` to be an int: the others decide."""
        if name in self.int_names_pending:
            return True
        param = parameters_of(self.func).get(name)
        bindings = self._bindings(name)
        if bindings is None or depth > _MAX_DEPTH:
            return False
        self.int_names_pending.add(name)
        try:
            return self._int_bindings(name, param, bindings, depth)
        finally:
            self.int_names_pending.discard(name)

    def _int_bindings(self, name: str, param: cst.Param | None, bindings: list[cst.CSTNode],
                      depth: int) -> bool:
        if param is not None:
            if not _declared_int(param):
                return False
        elif not bindings:
            return False
        for node in bindings:
            if isinstance(node, cst.For):
                if _counter_start(node, name) is None:
                    return False
            elif isinstance(node, cst.Assign):
                if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name) \
                        or not self._is_int(node.value, depth + 1):
                    return False
            elif isinstance(node, cst.AnnAssign):
                if code_of(node.annotation.annotation) != "int" or (
                        node.value is not None and not self._is_int(node.value, depth + 1)):
                    return False
            elif isinstance(node, cst.AugAssign):
                if not isinstance(node.operator, cst.AddAssign | cst.SubtractAssign
                                  | cst.MultiplyAssign | cst.FloorDivideAssign
                                  | cst.ModuloAssign) or not self._is_int(node.value, depth + 1):
                    return False
            else:
                return False
        return True

    # ---- bounds ---------------------------------------------------------------------------

    def _counter(self, name: str, line: cst.BaseStatement | None = None) -> cst.For | None:
        """The ``for`` loop binding ``name``, when it is the method's only binding of it; or,
        read at ``line``, the innermost loop around ``line`` binding it when nothing in that
        loop's body binds it again (hybrid demucs counts two loops with ``idx``)."""
        bindings = self._bindings(name)
        if bindings is None:
            return None
        if (len(bindings) == 1 and isinstance(bindings[0], cst.For)
                and name not in parameters_of(self.func)):
            return bindings[0]
        if line is None:
            return None
        for ancestor in self._ancestors(line):
            if isinstance(ancestor, cst.For) and name in {
                    n.value for n in target_names(ancestor.target)}:
                return ancestor if name not in bound_in(ancestor.body) else None
        return None

    def _lower_bound(self, expr: cst.BaseExpression, depth: int,
                     line: cst.BaseStatement | None = None) -> int | None:
        """A lower bound of the int ``expr`` (read at ``line``, when given), when one is
        known."""
        value = int_value(expr)
        if value is not None:
            return value
        if isinstance(expr, cst.Call) and get_full_name_for_node(expr.func) == "len":
            return 0
        if isinstance(expr, cst.Name):
            loop = self._counter(expr.value, line)
            return _counter_start(loop, expr.value) if loop is not None else None
        if isinstance(expr, cst.BinaryOperation) and depth < _MAX_DEPTH:
            left = self._lower_bound(expr.left, depth + 1, line)
            if left is None:
                return None
            if isinstance(expr.operator, cst.Add):
                right = self._lower_bound(expr.right, depth + 1, line)
                return left + right if right is not None else None
            if isinstance(expr.operator, cst.Subtract):
                right_value = int_value(expr.right)
                return left - right_value if right_value is not None else None
        return None

    def index_bounds(self, index: cst.BaseExpression, attr: str,
                     line: cst.BaseStatement) -> tuple[bool, bool]:
        """Whether ``index`` is provably >= 0, and provably below ``len(self.attr)``, where
        ``line`` reads it: from the loop that counts it, or from the tests of the ``if``
        statements ``line`` is in the body of (``if idx < len(self.attr):``,
        ``if idx >= offset:`` for ``idx - offset``)."""
        lower = self._lower_bound(index, 0, line)
        facts = self._guards(line)
        key = source_key(index)
        length = source_key(cst.parse_expression(f"len({self.self_var}.{attr})"))
        nonnegative = (lower is not None and lower >= 0) or any(
            (large == key and small == "0")
            or (isinstance(index, cst.BinaryOperation)
                and isinstance(index.operator, cst.Subtract)
                and small == source_key(index.right) and large == source_key(index.left))
            for large, small, _ in facts)
        below = self._below_length(index, attr, line) or any(
            small == key and large == length and strict for large, small, strict in facts)
        return nonnegative, below

    def _guards(self, line: cst.BaseStatement) -> list[tuple[str, str, bool]]:
        """What the ``if`` tests around ``line`` (in their bodies, not ``else``) say as
        (larger, smaller, strict) source keys: ``a < b`` and ``b > a`` give (b, a, True),
        ``a <= b`` and ``b >= a`` (b, a, False); ``and`` joins them. A test counts only when
        no name it reads is bound in the body it guards (the values it compared are those at
        ``line``)."""
        facts: list[tuple[str, str, bool]] = []
        child: cst.CSTNode = line
        for ancestor in self._ancestors(line):
            if isinstance(ancestor, cst.FunctionDef):
                break
            if isinstance(ancestor, cst.If) and child is ancestor.body:
                attributes = {id(a.attr) for a in find_all(ancestor.test, cst.Attribute)}
                read = {n.value for n in find_all(ancestor.test, cst.Name)
                        if id(n) not in attributes}
                if not read & bound_in(ancestor.body):
                    facts.extend(_comparisons(ancestor.test))
            child = ancestor
        return facts

    def _below_length(self, index: cst.BaseExpression, attr: str,
                      line: cst.BaseStatement) -> bool:
        """Whether ``index`` (``i``, ``i + c``, ``i - c``) is provably below ``len(self.attr)``:
        ``i`` counts through ``range(..., stop)`` in a loop around ``line`` and ``stop + c``
        is at most the list's length (in ``__init__`` terms)."""
        offset = 0
        if isinstance(index, cst.BinaryOperation) and int_value(index.right) is not None:
            value = int_value(index.right)
            assert value is not None
            if isinstance(index.operator, cst.Add):
                offset = value
            elif isinstance(index.operator, cst.Subtract):
                offset = -value
            else:
                return False
            index = index.left
        if not isinstance(index, cst.Name):
            return False
        loop = self._counter(index.value, line)
        if loop is None or all(a is not loop for a in self._ancestors(line)):
            return False
        stop, added = _range_stop(loop)
        if stop is None:
            return False
        if isinstance(stop, int):
            return any(k.isdigit() and stop + added + offset <= int(k)
                       for k in self.cls.containers[attr].keys)
        keys = self.cls.range_keys(stop, self.func, self.self_var, self.counts)
        return self.cls.covers(keys, attr) and added + offset <= 0


def _comparisons(test: cst.BaseExpression) -> list[tuple[str, str, bool]]:
    """(larger, smaller, strict) source keys of the comparisons ``test`` asserts when true:
    its ``<``, ``<=``, ``>``, ``>=`` links (chains too), the parts of an ``and``."""
    if isinstance(test, cst.BooleanOperation):
        if not isinstance(test.operator, cst.And):
            return []
        return _comparisons(test.left) + _comparisons(test.right)
    if not isinstance(test, cst.Comparison):
        return []
    found: list[tuple[str, str, bool]] = []
    left = test.left
    for link in test.comparisons:
        right = link.comparator
        operator = link.operator
        if isinstance(operator, cst.LessThan | cst.LessThanEqual):
            found.append((source_key(right), source_key(left),
                          isinstance(operator, cst.LessThan)))
        elif isinstance(operator, cst.GreaterThan | cst.GreaterThanEqual):
            found.append((source_key(left), source_key(right),
                          isinstance(operator, cst.GreaterThan)))
        left = right
    return found


def bound_in(node: cst.CSTNode) -> set[str]:
    """The names any statement or expression inside ``node`` binds (assignments, loop,
    ``with``/``except``, walrus and comprehension targets, imports, nested ``def``/``class``)."""
    names: set[str] = set()
    for inner in find_all(node, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                          cst.CompFor, cst.NamedExpr, cst.AsName, cst.ImportAlias,
                          cst.FunctionDef, cst.ClassDef):
        if isinstance(inner, cst.FunctionDef | cst.ClassDef):
            names.add(inner.name.value)
        elif isinstance(inner, cst.ImportAlias):
            names.add((get_full_name_for_node(inner.name) or "").split(".")[0])
        elif isinstance(inner, cst.AsName):
            names.update(n.value for n in target_names(inner.name))
        else:
            names.update(n.value for n in target_names(inner.target))
    return names


def _counter_start(loop: cst.For, name: str) -> int | None:
    """The first value of ``name``, a counter ``loop`` binds (``for name in range(a, ...)``,
    ``reversed(range(...))``, ``for name, x in enumerate(..., a)``); None for another loop."""
    target, it = loop.target, loop.iter
    if not isinstance(it, cst.Call):
        return None
    args = positional(it)
    called = get_full_name_for_node(it.func)
    if args is None:
        return None
    if isinstance(target, cst.Name) and target.value == name:
        if called == "reversed" and len(args) == 1 and isinstance(args[0], cst.Call):
            return _range_start(args[0])
        return _range_start(it)
    if (called == "enumerate" and isinstance(target, cst.Tuple) and len(target.elements) == 2
            and isinstance(target.elements[0].value, cst.Name)
            and target.elements[0].value.value == name and len(args) in (1, 2)):
        return int_value(args[1]) if len(args) == 2 else 0
    return None


def _range_start(call: cst.Call) -> int | None:
    """``range(stop)`` -> 0, ``range(a, stop)`` -> a (a literal); None for other calls and for
    a step, whose sign would decide the bounds."""
    args = positional(call)
    if get_full_name_for_node(call.func) != "range" or args is None:
        return None
    if len(args) == 1:
        return 0
    if len(args) == 2:
        return int_value(args[0])
    return None


def _range_stop(loop: cst.For) -> tuple[cst.BaseExpression | int | None, int]:
    """The stop of a ``for ... in range(...)`` loop as (expression or literal, literal added:
    ``range(1, len(self.x) + 1)`` -> (``len(self.x)``, 1)); (None, 0) for anything else,
    ``reversed`` and ``enumerate(self.x)`` included (``len(self.x)`` for the latter)."""
    it = loop.iter
    if not isinstance(it, cst.Call):
        return None, 0
    args = positional(it)
    called = get_full_name_for_node(it.func)
    if called == "enumerate" and args is not None and len(args) == 1:
        return cst.Call(cst.Name("len"), [cst.Arg(args[0])]), 0
    if called == "reversed" and args is not None and len(args) == 1 and isinstance(
            args[0], cst.Call):
        it = args[0]
        args = positional(it)
    if get_full_name_for_node(it.func) != "range" or args is None or _range_start(it) is None:
        return None, 0
    stop = args[-1]
    added = 0
    if isinstance(stop, cst.BinaryOperation) and int_value(stop.right) is not None:
        value = int_value(stop.right)
        assert value is not None
        if isinstance(stop.operator, cst.Add | cst.Subtract):
            added = value if isinstance(stop.operator, cst.Add) else -value
            stop = stop.left
    literal = int_value(stop)
    return (literal if literal is not None else stop), added


def _parents(func: cst.FunctionDef) -> dict[int, cst.CSTNode]:
    """id(node) -> its parent, for every node of ``func``."""
    found: dict[int, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [func]
    while stack:
        node = stack.pop()
        for child in node.children:
            found[id(child)] = node
            stack.append(child)
    return found


def _declared_int(param: cst.Param) -> bool:
    """A parameter annotated ``int``, or unannotated with an int literal default. The default
    counts like the annotation (TorchScript types the parameter ``int`` from it, and annotate
    writes that annotation in the same run: trusting one and not the other made a second run
    rewrite what the first left). Neither is enforced in eager mode: a caller passing 2.5
    gets a TypeError from the original list and a skipped selection from the rewrite."""
    if param.annotation is not None:
        return code_of(param.annotation.annotation) == "int"
    return param.default is not None and int_value(param.default) is not None
