"""One class: plan each compiled method, name and emit the blocks, report every numpy use."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.numpy_usage import NumpyUse
from tsfix.codemods.facts.statements import own
from tsfix.codemods.facts.syntax import code_of, fresh_name
from tsfix.codemods.rules.base import ClassChange, Rule
from tsfix.codemods.rules.ignore_numpy._analysis import Block, MethodAnalysis, Refusal
from tsfix.codemods.rules.ignore_numpy._boundary import Boundary
from tsfix.codemods.rules.ignore_numpy._class_info import ClassInfo
from tsfix.codemods.rules.ignore_numpy._emission import Emission, method_name
from tsfix.codemods.rules.ignore_numpy._flow import FlowWalk

CODE = "TSF205"
PYTHON_ONLY_NOTE = (
    "python only: {methods} {verb} @torch.jit.ignore; the scripted artifact runs from Python "
    "but cannot be saved with torch.jit.save nor exported to ONNX (translate the numpy code "
    "to torch for an artifact that saves)")
# A numpy use in no block and no refused statement: a part of a statement that stays
# compiled and is not walked as a suite (an ``except np.SomeError:`` clause).
_UNCUT = "numpy in a part of a statement that cannot move; left alone"


class ClassRewriter:
    def __init__(self, rule: Rule, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.cls = cls
        self.name = cls.name.value
        self.info = ClassInfo(rule, cls)

    # -- the rewrite ---------------------------------------------------------------------------

    def rewrite(self) -> cst.ClassDef:
        compiled = set(self.info.facts.compiled)
        if not compiled or not isinstance(self.cls.body, cst.IndentedBlock):
            return self.cls
        rewritten: dict[str, tuple[cst.FunctionDef, list[cst.FunctionDef]]] = {}
        moved: list[Block] = []
        problem = self._file_problem()
        for stmt in self.cls.body.body:
            if not isinstance(stmt, cst.FunctionDef) or stmt.name.value not in compiled:
                continue
            analysis = MethodAnalysis(self.info, stmt)
            if not analysis.uses:
                continue
            blocks = self._plan(analysis)
            self._report(analysis, blocks, problem)
            if not blocks or problem is not None:
                continue
            for block in blocks:
                wanted = method_name(block)
                block.name = fresh_name(wanted, taken=self.info.taken, numbered=f"{wanted}_")
                self.info.taken.add(block.name)
            rewritten[stmt.name.value] = Emission(self.info, analysis).apply(blocks)
            moved.extend(blocks)
        if not moved:
            return self.cls
        body: list[cst.BaseStatement] = []
        for stmt in self.cls.body.body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value in rewritten:
                new_func, new_methods = rewritten[stmt.name.value]
                body.append(new_func)
                body.extend(new_methods)
            else:
                body.append(stmt)
        self._record(moved)
        return self.cls.with_changes(body=self.cls.body.with_changes(body=body))

    def _plan(self, analysis: MethodAnalysis) -> list[Block]:
        """The blocks this method gives up to ignored methods (refused ones are recorded on
        the analysis)."""
        func = analysis.func
        body = func.body
        if not isinstance(body, cst.IndentedBlock):
            analysis.refuse(func, "a one-line method body using numpy; left alone")
            return []
        if own(body, cst.Yield, cst.Await):
            analysis.refuse(func, "a generator (or coroutine) using numpy; left alone")
            return []
        analysis.read_locals()
        walk = FlowWalk(analysis)
        boundary = Boundary(analysis, walk)
        accepted = []
        for block in walk.walk():
            reason = boundary.analyse(block)
            if reason is None:
                accepted.append(block)
            else:
                analysis.refuse(block.stmts[0], reason + "; left alone",
                                analysis.span(block.stmts[0], block.stmts[-1]))
        return accepted

    def _report(self, analysis: MethodAnalysis, blocks: list[Block],
                problem: str | None) -> None:
        """Each numpy use of the method: moved (fixed) or left with the reason (refused, with
        the check code); refusals around no numpy use (a statement that only reads a numpy
        value) are reported without one."""
        method = analysis.method
        moved = [analysis.span(b.stmts[0], b.stmts[-1]) for b in blocks]
        skips: list[tuple[int, cst.CSTNode, str, NumpyUse | None]] = []
        explained: set[int] = set()
        for use in analysis.uses:
            position = analysis.start[id(use.node)]
            if any(lo <= position <= hi for lo, hi in moved):
                if problem is None:
                    self.rule.fixed(use.node, CODE, numpy_message(use, method))
                    continue
                reason = problem
            else:
                refusal = _innermost(analysis.refusals, position)
                if refusal is not None:
                    explained.add(id(refusal))
                reason = refusal.reason if refusal is not None else _UNCUT
            skips.append((position, use.node, reason, use))
        for refusal in analysis.refusals:
            if id(refusal) not in explained:
                skips.append((refusal.first, refusal.node, refusal.reason, None))
        for _, node, reason, found in sorted(skips, key=lambda s: s[0]):
            if found is None:
                self.rule.skip(self.name, node, f"{method}(): {reason}")
            else:
                self.rule.skip(self.name, node, f"{method}(): {reason}", code=CODE,
                               message=numpy_message(found, method))

    def _record(self, moved: list[Block]) -> None:
        where = []
        for block in moved:
            first = self.rule.span_of(block.stmts[0])[0]
            last = self.rule.span_of(block.stmts[-1])[1]
            lines = f"line {first}" if first == last else f"lines {first}-{last}"
            where.append(f"{block.name} ({lines})")
        summary = (f"moved {len(moved)} numpy block(s) into @torch.jit.ignore methods: "
                   + ", ".join(where))
        declared = [f"{name}: {kind}" for b in moved for _, name, kind in b.declare]
        if declared:
            summary += f"; declared {', '.join(declared)}"
        observed = sum(b.observed_types for b in moved)
        if observed:
            summary += f"; {observed} type(s) from the example runs"
        names = [b.name for b in moved]
        note = PYTHON_ONLY_NOTE.format(methods=", ".join(f"{n}()" for n in names),
                                       verb="is" if len(names) == 1 else "are")
        self.rule.changes.append(ClassChange(self.rule.name, self.name,
                                             self.rule.span_of(self.cls), summary,
                                             notes=[note], python_only=True))

    def _file_problem(self) -> str | None:
        if self.info.decorator is None or self.info.tensor_name is None:
            return ("the file does not import torch (`import torch`), which the "
                    "@torch.jit.ignore decorator needs; left alone")
        return None


def _innermost(refusals: list[Refusal], position: int) -> Refusal | None:
    covering = [r for r in refusals if r.first <= position <= r.last]
    return min(covering, key=lambda r: r.last - r.first) if covering else None


def numpy_message(use: NumpyUse, method: str) -> str:
    """The text ``tsfix check`` shows for a numpy use (the linter's TSF205 message)."""
    name = code_of(use.node.func) if isinstance(use.node, cst.Call) else use.name
    return f"numpy ({name}) in {method}()"
