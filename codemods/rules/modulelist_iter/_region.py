"""The enumerate+if form for an element bound to a name: ``tenc = self.time_encoder[idx]``
followed by statements that call it and read its attributes (hybrid demucs). The statements
from the one after the binding to the last that uses the name move into a loop over the list
whose variable takes the name, under ``if j == idx:``; the binding goes (the index check, when
one is needed, takes its place)::

    tenc = self.time_encoder[idx]        ->  for j, tenc in enumerate(self.time_encoder):
    xt = tenc(xt)                                if j == idx:
    if not tenc.empty:                               xt = tenc(xt)
        saved_t.append(xt)                           if not tenc.empty:
                                                         saved_t.append(xt)

Exactly one element matches (the index is in range: proven, or checked first with the list's
own ``IndexError``), so the moved statements run once, in the same order, on the same module.
Refused, with the reason, when that would not hold or not compile: the name bound again or used
other than by calling it or reading its attributes, a ``return``/``yield`` or a
``break``/``continue`` of an enclosing loop among the moved statements, a moved statement that
rebinds a name of the index (later elements would be compared against another value), or a name
the moved statements bind and code after them reads without a binding before (TorchScript needs
a name bound on every path of the new ``if``)."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, find_all, fresh_name, parameters_of, self_attr
from tsfix.codemods.rules.modulelist_iter._common import (
    RegionPlan,
    Selection,
    own_jumps,
    single_index,
)
from tsfix.codemods.rules.modulelist_iter._select import Selections, bound_in


class Regions(Selections):
    """Plans the region form for ``name = self.attr[index]`` sites; every other statement goes
    to the statement forms of :class:`Selections`."""

    def plan_statement(self, line: cst.SimpleStatementLine, sites: list[cst.Subscript],
                       chosen: dict[int, set[str]]) -> str | None:
        alias = _alias(line, sites)
        if alias is None:
            return super().plan_statement(line, sites, chosen)
        return self._plan_region(line, alias, sites[0], chosen)

    def _plan_region(self, line: cst.SimpleStatementLine, name: str, site: cst.Subscript,
                     chosen: dict[int, set[str]]) -> str | None:
        attr = self_attr(site.value, self.self_var)
        index = single_index(site)
        assert attr is not None and index is not None
        code = code_of(site)
        if not self._is_int(index, 0):
            return (f"the index `{code_of(index)}` of {code} is not known to be an int (a loop "
                    "counter, a parameter annotated `int`, an attribute set to an int in "
                    "`__init__`, or arithmetic on those)")
        block = self.parents.get(id(line))
        if not isinstance(block, cst.IndentedBlock):
            return "the statement shares its line with others"
        if self.counts.get(name) != 1 or name in parameters_of(self.func):
            return f"`{name}`, bound to {code}, is bound elsewhere in the method too"
        statements = list(block.body)
        start = next(i for i, s in enumerate(statements) if s is line)
        attribute_names = {id(a.attr) for a in find_all(self.func, cst.Attribute)}
        small = line.body[0]
        assert isinstance(small, cst.Assign)
        uses = [n for n in find_all(self.func.body, cst.Name) if n.value == name
                and id(n) not in attribute_names and n is not small.targets[0].target]
        if not uses:
            return f"`{name}`, bound to {code}, is never used"
        used = {id(n) for n in uses}
        users = [i for i in range(start + 1, len(statements))
                 if any(id(n) in used for n in find_all(statements[i], cst.Name))]
        if sum(1 for i in users for n in find_all(statements[i], cst.Name)
               if id(n) in used) != len(uses):
            return f"`{name}`, bound to {code}, is read outside the block that binds it"
        end = users[-1] + 1
        moved = statements[start + 1:end]
        reason = (self._use_refusal(name, uses) or _jump_refusal(name, moved)
                  or self._binding_refusal(name, line, moved, index))
        if reason is not None:
            return reason
        if any(id(s) in self.region_statements for s in statements[start:end]):
            return "its statements overlap those moved for another element"
        taken = (set(self.names) | {n for names in self.chosen.values() for n in names}
                 | {n for names in chosen.values() for n in names}
                 | {n for names in self.select_names.values() for n in names} | self.results)
        counter = fresh_name("j", taken=taken)
        nonnegative, below = self.index_bounds(index, attr, line)
        selection = Selection(attr, code_of(index), name, counter, nonnegative,
                              checked=not (nonnegative and below))
        chosen[id(line)] = {counter}
        self.region_statements.update(id(s) for s in statements[start:end])
        self.plan.regions[id(line)] = RegionPlan(self.rule.line_of(line), selection,
                                                 len(moved))
        return None

    def _use_refusal(self, name: str, uses: list[cst.Name]) -> str | None:
        """TorchScript takes a module loop variable called or with an attribute read."""
        for use in uses:
            parent = self.parents.get(id(use))
            called = isinstance(parent, cst.Call) and parent.func is use
            read = (isinstance(parent, cst.Attribute) and parent.value is use
                    and not isinstance(self.parents.get(id(parent)), cst.AssignTarget
                                       | cst.AugAssign | cst.AnnAssign | cst.Del))
            if not (called or read):
                holder = parent if parent is not None else use
                if isinstance(holder, cst.Arg):
                    holder = self.parents.get(id(holder), holder)
                return (f"`{name}` is used other than by calling it or reading an attribute "
                        f"(`{code_of(holder).strip()}`)")
        return None

    def _binding_refusal(self, name: str, line: cst.SimpleStatementLine,
                         moved: list[cst.BaseStatement], index: cst.BaseExpression) -> str | None:
        """A name the moved statements bind that the index reads, or that code outside them
        reads without a binding on every path before them."""
        bound: set[str] = set()
        for statement in moved:
            bound |= bound_in(statement)
        attributes = {id(a.attr) for a in find_all(index, cst.Attribute)}
        read = {n.value for n in find_all(index, cst.Name) if id(n) not in attributes}
        if bound & read:
            shown = ", ".join(f"`{n}`" for n in sorted(bound & read))
            return (f"the statements using `{name}` bind {shown}, which the index reads: later "
                    "elements would be compared with another value")
        inside = {id(n) for s in moved for n in find_all(s, cst.Name)}
        attribute_names = {id(a.attr) for a in find_all(self.func, cst.Attribute)}
        small = line.body[0]
        for other in sorted(bound):
            outside = any(n.value == other and id(n) not in inside
                          and id(n) not in attribute_names
                          for n in find_all(self.func.body, cst.Name))
            if outside and not self._bound_before(other, line, small):
                return (f"`{other}` is bound by the statements using `{name}` and read "
                        "outside them with no binding on every path before them (TorchScript "
                        "would find it undefined where no element matched)")
        return None


def _alias(line: cst.SimpleStatementLine, sites: list[cst.Subscript]) -> str | None:
    """``name = self.attr[index]``, the statement's only site: the name."""
    if len(line.body) != 1 or len(sites) != 1:
        return None
    small = line.body[0]
    if (isinstance(small, cst.Assign) and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name) and small.value is sites[0]):
        return small.targets[0].target.value
    return None


def _jump_refusal(name: str, moved: list[cst.BaseStatement]) -> str | None:
    """What would change meaning inside the new loop: ``break``/``continue`` of an enclosing
    loop would leave the new one; a ``return`` makes TorchScript's return type Optional (the
    loop may end without it: measured on 2.13); ``yield`` does not compile."""
    nested = {id(n) for s in moved for f in find_all(s, cst.FunctionDef, cst.Lambda)
              for n in find_all(f, cst.Return, cst.Yield)}
    for statement in moved:
        if own_jumps(statement):
            return (f"a `break`/`continue` among the statements using `{name}` would leave "
                    "the new loop over the list instead of its own")
        for node in find_all(statement, cst.Return, cst.Yield):
            if id(node) in nested:
                continue
            if isinstance(node, cst.Yield):
                return f"a `yield` among the statements using `{name}`"
            return (f"a `return` among the statements using `{name}` (TorchScript would give "
                    "the method an Optional result)")
    return None
