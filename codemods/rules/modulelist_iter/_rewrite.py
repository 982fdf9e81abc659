"""Applying a method's plan: loop headers and bodies, and ModuleDict lookups hoisted into a
loop over ``.items()``."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, self_attr
from tsfix.codemods.rules.modulelist_iter._common import Hoist, LoopPlan, MethodPlan, single_index


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

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
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
        return cst.FlattenSentinel(new)


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
