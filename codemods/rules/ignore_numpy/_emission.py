"""The rewrite of one method: each block becomes a call, and a new ignored method."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import libcst as cst
from tsfix.codemods.facts.syntax import find_all
from tsfix.codemods.rules.ignore_numpy._analysis import Block, Local, MethodAnalysis
from tsfix.codemods.rules.ignore_numpy._class_info import ClassInfo
from tsfix.codemods.rules.ignore_numpy._statements import bound_by_import, is_import_line, unique

DOCSTRING = '"""Runs in Python only (torch.jit.ignore): TorchScript cannot compile numpy."""'


def method_name(block: Block) -> str:
    """``_numpy_<what it assigns>``: outputs, returned names, attributes set."""
    names = [name for name, _ in block.outputs]
    if block.returns:
        last = block.stmts[-1]
        assert isinstance(last, cst.SimpleStatementLine)
        value = next((s.value for s in last.body if isinstance(s, cst.Return)), None)
        elements = (value.elements if isinstance(value, cst.Tuple) else [cst.Element(value)]
                    if value is not None else [])
        returned = [e.value.value for e in elements if isinstance(e.value, cst.Name)]
        names = returned if returned and len(returned) == len(elements) else [
            f"{block.method.strip('_')}_result"]
    elif not names:
        names = block.attributes_set or ["block"]
    names = [n.strip("_") or n for n in names]
    if len(names) == 1:
        joined = names[0]
    elif len(names) == 2:
        joined = f"{names[0]}_and_{names[1]}"
    elif len(names) == 3:
        joined = f"{names[0]}_{names[1]}_and_{names[2]}"
    else:
        joined = f"{names[0]}_{names[1]}_{names[2]}_and_more"
    return f"_numpy_{joined}"


class Emission:
    """Rewrites one analysed method for its (named) blocks."""

    def __init__(self, info: ClassInfo, analysis: MethodAnalysis) -> None:
        self.info = info
        self.a = analysis

    def apply(self, blocks: list[Block]) -> tuple[cst.FunctionDef, list[cst.FunctionDef]]:
        """The method with each block replaced by its call, and the new methods."""
        a = self.a
        by_first = {id(b.stmts[0]): b for b in blocks}
        moved = {id(s) for b in blocks for s in b.stmts}
        # A numpy import inside the method goes with the blocks that read it, and leaves the
        # method when nothing else reads it.
        dropped: set[int] = set()
        ranges = [a.span(b.stmts[0], b.stmts[-1]) for b in blocks]
        for line in find_all(a.func.body, cst.SimpleStatementLine):
            if not is_import_line(line) or id(line) in moved:
                continue
            names = bound_by_import(line)
            reads = [r for n in names for r in a.locals.get(n, Local()).reads]
            if all(any(lo <= r <= hi for lo, hi in ranges) for r in reads):
                dropped.add(id(line))
        declared: dict[int, cst.SimpleStatementLine] = {}
        for block in blocks:
            for line, name, kind in block.declare:
                assign = line.body[0]
                assert isinstance(assign, cst.Assign)
                declared[id(line)] = line.with_changes(body=[cst.AnnAssign(
                    target=cst.Name(name), annotation=self.info.annotation(kind),
                    value=assign.value)])
        func = a.func.visit(_ReplaceRuns(by_first, moved, dropped, declared, self._call))
        assert isinstance(func, cst.FunctionDef)
        return func, [self._new_method(b) for b in blocks]

    def _call(self, block: Block, first: cst.BaseStatement) -> cst.SimpleStatementLine:
        assert isinstance(first, cst.SimpleStatementLine | cst.BaseCompoundStatement)
        args = ", ".join(name for name, _ in block.inputs)
        call = f"{self.a.self_var}.{block.name}({args})"
        if block.returns:
            code = f"return {call}"
        elif not block.outputs:
            code = call
        else:
            code = f"{', '.join(name for name, _ in block.outputs)} = {call}"
        line = cst.parse_statement(code + "\n")
        assert isinstance(line, cst.SimpleStatementLine)
        return line.with_changes(leading_lines=first.leading_lines)

    def _new_method(self, block: Block) -> cst.FunctionDef:
        params = [cst.Param(cst.Name(self.a.self_var))]
        params += [cst.Param(cst.Name(name), self.info.annotation(kind))
                   for name, kind in block.inputs]
        if block.returns:
            returns = block.return_type or "None"
        elif len(block.outputs) == 1:
            returns = block.outputs[0][1]
        elif block.outputs:
            returns = f"Tuple[{', '.join(kind for _, kind in block.outputs)}]"
        else:
            returns = "None"
        stmts: list[cst.BaseStatement] = [cst.parse_statement(DOCSTRING + "\n")]
        stmts += [line.with_changes(leading_lines=()) for line in unique(block.imports)]
        stmts.append(block.stmts[0].with_changes(leading_lines=()))
        stmts.extend(block.stmts[1:])
        if block.outputs and not block.returns:
            names = ", ".join(name for name, _ in block.outputs)
            stmts.append(cst.parse_statement(f"return {names}\n"))
        decorator = self.info.decorator
        assert decorator is not None
        return cst.FunctionDef(
            name=cst.Name(block.name),
            params=cst.Parameters(params=params),
            body=cst.IndentedBlock(body=stmts),
            decorators=[cst.Decorator(cst.parse_expression(decorator))],
            returns=self.info.annotation(returns),
            leading_lines=[cst.EmptyLine(indent=False)],
        )


class _ReplaceRuns(cst.CSTTransformer):
    """Each block's statements become one call; dropped import lines go."""

    def __init__(self, by_first: Mapping[int, Block], moved: set[int], dropped: set[int],
                 declared: Mapping[int, cst.SimpleStatementLine],
                 call: Callable[[Block, cst.BaseStatement], cst.SimpleStatementLine]) -> None:
        self.by_first = by_first
        self.moved = moved
        self.dropped = dropped
        self.declared = declared
        self.call = call

    def leave_IndentedBlock(self, original: cst.IndentedBlock,
                            updated: cst.IndentedBlock) -> cst.IndentedBlock:
        if not any(id(s) in self.moved or id(s) in self.dropped or id(s) in self.declared
                   for s in original.body):
            return updated
        body: list[cst.BaseStatement] = []
        for old, new in zip(original.body, updated.body, strict=True):
            block = self.by_first.get(id(old))
            if block is not None:
                body.append(self.call(block, old))
            elif id(old) in self.moved or id(old) in self.dropped:
                continue
            elif id(old) in self.declared:
                body.append(self.declared[id(old)])
            else:
                body.append(new)
        if not body:
            body.append(cst.SimpleStatementLine([cst.Pass()]))
        return updated.with_changes(body=body)
