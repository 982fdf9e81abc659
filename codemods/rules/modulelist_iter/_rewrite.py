"""Applying a method's plan: loop headers and bodies, and ModuleDict lookups hoisted into a
loop over ``.items()``."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, self_attr
from tsfix.codemods.rules.modulelist_iter._common import (
    Hoist,
    LoopPlan,
    MethodPlan,
    RegionPlan,
    Selection,
    SelectPlan,
    UnpackPlan,
    single_index,
    source_key,
)


class BodyRewriter(cst.CSTTransformer):
    """Replaces ``self.attr[index]`` with element names, and calls elements of reversed slices
    through ``.forward``."""

    def __init__(self, self_var: str, plan: LoopPlan) -> None:
        self.self_var = self_var
        self.plan = plan

    def _element(self, node: cst.CSTNode) -> str | None:
        if not isinstance(node, cst.Subscript) or self.plan.index is None:
            return None
        attr = self_attr(node.value, self.self_var)
        value = single_index(node)
        if (attr in self.plan.subs and isinstance(value, cst.Name)
                and value.value == self.plan.index):
            return self.plan.subs[attr]
        return None

    def leave_Subscript(self, original_node: cst.Subscript,
                        updated_node: cst.Subscript) -> cst.BaseExpression:
        element = self._element(original_node)
        return cst.Name(element) if element is not None else updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        func = updated_node.func
        if isinstance(func, cst.Name) and func.value in self.plan.forward_calls:
            return updated_node.with_changes(func=cst.Attribute(func, cst.Name("forward")))
        return updated_node


class MethodRewriter(cst.CSTTransformer):
    def __init__(self, self_var: str, plan: MethodPlan) -> None:
        self.self_var = self_var
        self.plan = plan
        # id of an original statement -> how many statements replace it (when not one).
        self.widths: dict[int, int] = {}

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        if not any(id(s) in self.plan.regions for s in original_node.body):
            return updated_node
        updated = list(updated_node.body)
        body: list[cst.BaseStatement] = []
        originals = list(original_node.body)
        at = place = 0
        while at < len(originals):
            region = self.plan.regions.get(id(originals[at]))
            if region is None:
                width = self.widths.get(id(originals[at]), 1)
                body.extend(updated[place:place + width])
                at, place = at + 1, place + width
                continue
            moved = originals[at + 1:at + 1 + region.moved]
            width = sum(self.widths.get(id(s), 1) for s in moved)
            binding = updated[place]
            assert isinstance(binding, cst.SimpleStatementLine)
            body.extend(_region(self.self_var, region, binding,
                                updated[place + 1:place + 1 + width]))
            at, place = at + 1 + region.moved, place + 1 + width
        return updated_node.with_changes(body=body)

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        unpack = self.plan.unpacks.get(id(original_node))
        if unpack is not None:
            updated_node = _unpacked(original_node, updated_node, unpack)
        plan = self.plan.loops.get(id(original_node))
        if plan is None:
            return updated_node
        header = cst.parse_statement(f"for {plan.header_target} in {plan.header_iter}:\n"
                                     "    pass\n")
        assert isinstance(header, cst.For)
        body = updated_node.body.visit(BodyRewriter(self.self_var, plan))
        assert isinstance(body, cst.BaseSuite)
        if plan.prelude is not None:
            if isinstance(body, cst.SimpleStatementSuite):
                body = cst.IndentedBlock([cst.SimpleStatementLine(body.body)])
            assert isinstance(body, cst.IndentedBlock)
            body = body.with_changes(body=[cst.parse_statement(plan.prelude + "\n"),
                                           *body.body])
        return updated_node.with_changes(target=header.target, iter=header.iter, body=body)

    def leave_SimpleStatementLine(
            self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine,
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        select = self.plan.selects.get(id(original_node))
        if select is not None:
            statements = _selected(self.self_var, select, updated_node)
            self.widths[id(original_node)] = len(statements)
            return cst.FlattenSentinel(statements)
        hoist = self.plan.hoists.get(id(original_node))
        if hoist is None:
            return updated_node
        call_holder: list[cst.Call] = []
        statement = updated_node.visit(CallExtractor(self.self_var, hoist, call_holder))
        assert isinstance(statement, cst.SimpleStatementLine) and len(call_holder) == 1
        call = call_holder[0].with_changes(func=cst.Name(hoist.element))
        s = self.self_var
        lines = [
            f"{hoist.result}: Optional[{hoist.tensor}] = None",
            f"for {hoist.name}, {hoist.element} in {s}.{hoist.attr}.items():",
            f"    if {hoist.name} == {hoist.key}:",
            f"        {hoist.result} = {code_of(call)}",
            f"if {hoist.result} is None:",
            f"    raise KeyError({hoist.key})",
        ]
        module = cst.parse_module("\n".join(lines) + "\n")
        new: list[cst.BaseStatement] = list(module.body)
        new[0] = new[0].with_changes(leading_lines=updated_node.leading_lines)
        new.append(statement.with_changes(leading_lines=[]))
        self.widths[id(original_node)] = len(new)
        return cst.FlattenSentinel(new)


def _unpacked(original: cst.For, updated: cst.For, plan: UnpackPlan) -> cst.For:
    """The loop with each planned target tuple replaced by its loop variable, and the names it
    bound picked from that variable at the top of the body."""
    target = original.target.visit(TargetReplacer(plan.targets))
    assert isinstance(target, cst.BaseAssignTargetExpression)
    body = updated.body
    if isinstance(body, cst.SimpleStatementSuite):
        body = cst.IndentedBlock([cst.SimpleStatementLine(body.body)])
    assert isinstance(body, cst.IndentedBlock)
    picks = [cst.parse_statement(line + "\n") for line in plan.prelude]
    return updated.with_changes(target=target, body=body.with_changes(body=[*picks, *body.body]))


class TargetReplacer(cst.CSTTransformer):
    """Replaces the target tuples named by id with a loop variable (parentheses dropped)."""

    def __init__(self, targets: dict[int, str]) -> None:
        self.targets = targets

    def leave_Tuple(self, original_node: cst.Tuple,
                    updated_node: cst.Tuple) -> cst.BaseExpression:
        name = self.targets.get(id(original_node))
        return updated_node if name is None else cst.Name(name)

    def leave_List(self, original_node: cst.List, updated_node: cst.List) -> cst.BaseExpression:
        name = self.targets.get(id(original_node))
        return updated_node if name is None else cst.Name(name)


class CallExtractor(cst.CSTTransformer):
    """Replaces the one ``self.attr[key](...)`` call with the result variable, keeping the call."""

    def __init__(self, self_var: str, hoist: Hoist, found: list[cst.Call]) -> None:
        self.self_var = self_var
        self.hoist = hoist
        self.found = found

    def leave_Call(self, original_node: cst.Call,
                   updated_node: cst.Call) -> cst.BaseExpression:
        func = original_node.func
        if (isinstance(func, cst.Subscript) and self_attr(func.value, self.self_var)
                == self.hoist.attr and single_index(func) is not None
                and code_of(single_index(func) or func) == self.hoist.key and not self.found):
            self.found.append(updated_node)
            return cst.Name(self.hoist.result).with_changes(lpar=updated_node.lpar,
                                                             rpar=updated_node.rpar)
        return updated_node


# ---- the enumerate+if form ----------------------------------------------------------------------

def _selected(self_var: str, plan: SelectPlan,
              line: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """The statements replacing ``line`` (the module doc shows the three forms)."""
    statement = line.with_changes(leading_lines=[])
    picks = ElementCalls(self_var, plan.selections)
    lines: list[str] = []
    for selection in plan.selections:
        lines.extend(_range_check(self_var, selection))
    new: list[cst.BaseStatement] = [_parsed(text) for text in _joined(lines)]
    if plan.form == "result":
        assert plan.result is not None and len(plan.selections) == 1
        selection = plan.selections[0]
        found: list[cst.Call] = []
        rest = statement.visit(ResultCall(self_var, selection, plan.result, found))
        assert isinstance(rest, cst.SimpleStatementLine) and len(found) == 1
        assign: cst.BaseStatement
        if plan.keep_statement:
            call = found[0].with_changes(func=cst.Name(selection.element))
            assign = cst.SimpleStatementLine([cst.Assign(
                [cst.AssignTarget(cst.Name(plan.result))], call)])
        else:
            # The statement is `result = call`: it moves into the loop as written (its
            # trailing comment too).
            moved = statement.visit(picks)
            assert isinstance(moved, cst.SimpleStatementLine)
            assign = moved
        new.append(_parsed(f"{plan.result}: Optional[{plan.tensor}] = None"))
        new.append(_loop(self_var, selection, [assign]))
        new.append(_parsed(f"assert {plan.result} is not None"))
        if plan.keep_statement:
            new.append(rest)
    else:
        inner = statement.visit(picks)
        assert isinstance(inner, cst.SimpleStatementLine)
        body: cst.BaseStatement = inner
        for selection in reversed(plan.selections):
            body = _loop(self_var, selection, [body])
        new.append(body)
        if plan.form == "return":
            new.append(_parsed(_out_of_range(plan.selections[0])))
    new[0] = new[0].with_changes(leading_lines=line.leading_lines)
    return new


def _region(self_var: str, plan: RegionPlan, binding: cst.SimpleStatementLine,
            moved: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The statements replacing ``binding`` (``name = self.attr[index]``) and the ``moved``
    ones after it: the index check when one is needed, then the loop holding them."""
    new: list[cst.BaseStatement] = [_parsed(text)
                                    for text in _joined(_range_check(self_var, plan.selection))]
    new.append(_loop(self_var, plan.selection, moved))
    first = new[0]
    assert isinstance(first, cst.SimpleStatementLine | cst.BaseCompoundStatement)
    return [first.with_changes(leading_lines=binding.leading_lines), *new[1:]]


def _range_check(self_var: str, selection: Selection) -> list[str]:
    """What the container's own ``__getitem__`` raises for an index out of range, raised before
    the statement runs (the original raises before calling the element, too)."""
    if not selection.checked:
        return []
    length = f"len({self_var}.{selection.attr})"
    index = selection.index
    test = (f"{index} >= {length}" if selection.nonnegative
            else f"not -{length} <= {index} < {length}")
    return [f"if {test}:", f"    {_out_of_range(selection)}"]


def _out_of_range(selection: Selection) -> str:
    return f'raise IndexError(f"index {{{selection.index}}} is out of range")'


def _joined(lines: list[str]) -> list[str]:
    """Source lines grouped into statements (an ``if`` and its indented body)."""
    grouped: list[str] = []
    for text in lines:
        if text.startswith(" ") and grouped:
            grouped[-1] += "\n" + text
        else:
            grouped.append(text)
    return grouped


def _parsed(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text + "\n")


def _loop(self_var: str, selection: Selection, body: list[cst.BaseStatement]) -> cst.For:
    """``for counter, element in enumerate(self.attr): if counter == index: <body>``."""
    counter, index = selection.counter, selection.index
    test = f"{counter} == {index}"
    if not selection.nonnegative:
        # A negative index counts from the end, as the container's own indexing does.
        test += f" or {counter} == {index} + len({self_var}.{selection.attr})"
    loop = _parsed(f"for {counter}, {selection.element} in enumerate("
                   f"{self_var}.{selection.attr}):\n    if {test}:\n        pass")
    assert isinstance(loop, cst.For) and isinstance(loop.body, cst.IndentedBlock)
    branch = loop.body.body[0]
    assert isinstance(branch, cst.If) and isinstance(branch.body, cst.IndentedBlock)
    branch = branch.with_changes(body=branch.body.with_changes(body=body))
    return loop.with_changes(body=loop.body.with_changes(body=[branch]))


def _picked(self_var: str, selections: list[Selection],
            node: cst.CSTNode) -> Selection | None:
    """The selection whose element ``node`` (a subscript) is, if any."""
    if not isinstance(node, cst.Subscript):
        return None
    attr = self_attr(node.value, self_var)
    index = single_index(node)
    if attr is None or index is None:
        return None
    key = source_key(index)
    for selection in selections:
        if selection.attr == attr and source_key(cst.parse_expression(selection.index)) == key:
            return selection
    return None


class ElementCalls(cst.CSTTransformer):
    """``self.attr[index](...)`` -> ``element(...)`` for each selection."""

    def __init__(self, self_var: str, selections: list[Selection]) -> None:
        self.self_var = self_var
        self.selections = selections

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        selection = _picked(self.self_var, self.selections, original_node.func)
        if selection is None:
            return updated_node
        return updated_node.with_changes(func=cst.Name(selection.element))


class ResultCall(cst.CSTTransformer):
    """Replaces the selected call with the result variable, keeping the call."""

    def __init__(self, self_var: str, selection: Selection, result: str,
                 found: list[cst.Call]) -> None:
        self.self_var = self_var
        self.selection = selection
        self.result = result
        self.found = found

    def leave_Call(self, original_node: cst.Call,
                   updated_node: cst.Call) -> cst.BaseExpression:
        if self.found or _picked(self.self_var, [self.selection], original_node.func) is None:
            return updated_node
        self.found.append(updated_node)
        return cst.Name(self.result).with_changes(lpar=updated_node.lpar,
                                                  rpar=updated_node.rpar)
