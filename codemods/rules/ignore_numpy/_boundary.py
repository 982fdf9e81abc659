"""One block's boundary: its inputs, outputs and their types, or why it cannot move.

Inputs are the locals the block reads that may hold a value from before it; outputs the locals
it assigns that are read after it (or anywhere in an enclosing loop), and lists/dicts it
mutates in place. Every boundary value needs a TorchScript type: from the flow walk's types,
empty literals completed from what the block stores, then the example runs.
"""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.statements import definitely_assigned, own
from tsfix.codemods.facts.syntax import find_all, self_attr
from tsfix.codemods.facts.value_types import (
    TENSOR,
    is_complete,
    parts_of,
    type_from_annotation,
    unify,
)
from tsfix.codemods.rules.ignore_numpy._analysis import Block, MethodAnalysis
from tsfix.codemods.rules.ignore_numpy._flow import FlowWalk
from tsfix.codemods.rules.ignore_numpy._statements import (
    bound_by_import,
    empty_container_name,
    is_import_line,
    is_name,
)
from tsfix.codemods.rules.ignore_numpy._types import (
    NUMPY,
    observation,
    script_default,
    unify_known,
)


class Boundary:
    """Fills in the boundary of the blocks of one walked method."""

    def __init__(self, analysis: MethodAnalysis, walk: FlowWalk) -> None:
        self.a = analysis
        self.walk = walk
        self.typer = walk.typer

    def analyse(self, block: Block) -> str | None:
        """Fill in the block's inputs, outputs and types; the reason it cannot move, if any."""
        a = self.a
        lo, hi = a.span(block.stmts[0], block.stmts[-1])
        tops = [a.span(s) for s in block.stmts]
        loop_ranges = [a.span(loop) for loop in block.loops]

        def top_of(position: int) -> int:
            return next(k for k, (first, last) in enumerate(tops) if first <= position <= last)

        def in_loop(position: int) -> bool:
            return any(first <= position <= last for first, last in loop_ranges)

        definite = [definitely_assigned(s) for s in block.stmts]
        inputs: list[tuple[int, str]] = []
        outputs: list[tuple[int, str]] = []
        for name, local in a.locals.items():
            reads_in = [r for r in local.reads if lo <= r <= hi]
            assigns_in = [p for p in local.assigns if lo <= p <= hi]
            if name == a.self_var:
                if assigns_in:
                    return f"the block rebinds `{name}`"
                continue
            if local.import_only:
                if reads_in:
                    block.imports.extend(self._import_lines(name))
                continue
            before = [p for p in local.assigns if p < lo]
            later_in_loop = [p for p in local.assigns if p > hi and in_loop(p)]
            is_input = False
            if reads_in:
                first_top = top_of(reads_in[0])
                if not any(name in definite[k] for k in range(first_top)):
                    if before:
                        is_input = True
                    elif later_in_loop:
                        return (f"`{name}` is read before it is assigned, from a later "
                                "iteration of the loop; it may be unbound")
            if is_input:
                inputs.append((reads_in[0], name))
            reads_after = [r for r in local.reads
                           if not lo <= r <= hi and (r > hi or in_loop(r))]
            if block.returns:
                reads_after = []     # nothing runs after a return
            if assigns_in and reads_after:
                if not any(name in names for names in definite):
                    if not before:
                        return (f"`{name}` is assigned on some paths of the block only and "
                                "read after it")
                    if not is_input:
                        inputs.append((assigns_in[0], name))
                        is_input = True
                outputs.append((assigns_in[0], name))
            elif is_input and reads_after and any(lo <= m <= hi for m in local.mutations):
                outputs.append((reads_in[0], name))
        reason = self._inputs(block, [name for _, name in sorted(inputs)], lo)
        if reason is None:
            reason = self._outputs(block, [name for _, name in sorted(outputs)], lo, hi)
        if reason is not None:
            return reason
        if block.returns:
            kind = self._return_type(block)
            if kind is None:
                return "cannot tell the type the block returns"
            block.return_type = kind
        for stmt in block.stmts:
            for target in find_all(stmt, cst.AssignTarget, cst.AugAssign, cst.AnnAssign):
                attr = self_attr(target.target, a.self_var)
                if attr is not None and attr not in block.attributes_set:
                    block.attributes_set.append(attr)
        return None

    def _inputs(self, block: Block, names: list[str], lo: int) -> str | None:
        for name in names:
            raw = block.env_in.get(name)
            kind = self._filled(name, block, raw)
            default = script_default(raw)
            if default is not None:
                # An unannotated `[]`/`{}` is List[Tensor]/Dict[str, Tensor] to TorchScript.
                if kind is not None and is_complete(kind) and kind != default:
                    init = self._sole_empty_init(name, local_before=lo)
                    if init is None:
                        return (f"`{name}` is an unannotated empty literal, which TorchScript "
                                f"types {default}, but the block stores {kind} in it "
                                f"(annotate it: `{name}: {kind} = ...`)")
                    # Declare what the block stores, where the literal is made.
                    block.declare.append((init, name, kind))
                else:
                    kind = default
            if kind == NUMPY:
                return (f"`{name}` is read by the block but holds a numpy value from code "
                        "before it that stays compiled (no TorchScript type)")
            if kind is None or not is_complete(kind):
                return (f"cannot tell the type of `{name}`, which the block reads (no "
                        "annotation, example run or static type)")
            block.inputs.append((name, kind))
            if name in self.a.from_observation:
                block.observed_types += 1
        return None

    def _outputs(self, block: Block, names: list[str], lo: int, hi: int) -> str | None:
        for name in names:
            kind = block.env_out.get(name)
            mutated = any(name == n for n, _ in block.inputs) and not any(
                lo <= p <= hi for p in self.a.locals[name].assigns)
            if mutated:
                kind = dict(block.inputs).get(name)
                if kind == TENSOR:
                    continue     # tensors are shared with the ignored method
            kind = self._filled(name, block, kind)
            if kind == NUMPY:
                seen = ("no example run observed one" if not self.a.observed
                        else "the example runs do not tell it for this assignment")
                return (f"`{name}` is read after the block, but its value comes from numpy "
                        f"and has no known TorchScript type ({seen})")
            if kind is None or not is_complete(kind):
                return (f"cannot tell the type of `{name}`, which the block assigns and code "
                        "after it reads (no annotation, example run or static type)")
            prior = script_default(block.env_in.get(name)) or block.env_in.get(name)
            prior = next((k for _, n, k in block.declare if n == name), prior)
            if (prior is not None and prior != NUMPY and is_complete(prior) and prior != kind
                    and prior != f"Optional[{kind}]"):
                return (f"`{name}` changes type in the block ({prior} -> {kind}); TorchScript "
                        "gives a variable one type")
            block.outputs.append((name, kind))
            if name in self.a.from_observation:
                block.observed_types += 1
        return None

    def _sole_empty_init(self, name: str, local_before: int) -> cst.SimpleStatementLine | None:
        """The line ``name = []`` (or ``{}``) when it is the only assignment of ``name`` in
        the method and comes before ``local_before``."""
        local = self.a.locals.get(name)
        if local is None or len(local.assigns) != 1 or local.assigns[0] >= local_before:
            return None
        lines: list[cst.SimpleStatementLine] = find_all(self.a.func.body,
                                                        cst.SimpleStatementLine)
        for line in lines:
            first, last = self.a.span(line)
            if empty_container_name(line) == name and first <= local.assigns[0] <= last:
                return line
        return None

    def _filled(self, name: str, block: Block, kind: str | None) -> str | None:
        """``List[?]``/``Dict[?, ?]`` (an empty literal) completed from what the block stores
        in it: ``rows.append(torch.from_numpy(r))`` makes ``List[Tensor]``."""
        if kind is None or kind == NUMPY or is_complete(kind):
            return kind
        head, _ = parts_of(kind)
        lo, hi = self.a.span(block.stmts[0], block.stmts[-1])
        lines = [line for stmt in block.stmts
                 for line in find_all(stmt, cst.SimpleStatementLine)]
        elements: list[str | None] = []
        keys: list[str | None] = []
        for line in lines:
            self.typer.env = dict(self.walk.env_before.get(id(line), block.env_in))
            for node in find_all(line, cst.Call, cst.AssignTarget):
                if not lo <= self.a.start[id(node)] <= hi:
                    continue
                if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                        and is_name(node.func.value, name) and node.args
                        and node.func.attr.value in ("append", "insert")):
                    elements.append(self.typer.type_of(node.args[-1].value))
                elif (isinstance(node, cst.AssignTarget) and isinstance(node.target,
                                                                        cst.Subscript)
                      and is_name(node.target.value, name)
                      and len(node.target.slice) == 1
                      and isinstance(node.target.slice[0].slice, cst.Index)):
                    keys.append(self.typer.type_of(node.target.slice[0].slice.value))
                    assign = next(a for a in find_all(line, cst.Assign) if node in a.targets)
                    elements.append(self.typer.type_of(assign.value))
        element = unify_known(elements)
        if head == "List" and element is not None and not keys:
            kind = unify(kind, f"List[{element}]")
        elif head == "Dict" and element is not None:
            key = unify_known(keys)
            kind = unify(kind, f"Dict[{key}, {element}]") if key else None
        return kind

    def _return_type(self, block: Block) -> str | None:
        func = self.a.func
        if func.returns is not None:
            kind = type_from_annotation(func.returns.annotation)
            return kind if kind is not None and is_complete(kind) else None
        last = block.stmts[-1]
        assert isinstance(last, cst.SimpleStatementLine)
        value = next(s.value for s in last.body if isinstance(s, cst.Return))
        if value is None:
            return "None"
        self.typer.env = dict(self.walk.env_before[id(last)])
        kind = self.typer.type_of(value)
        if kind is not None and kind != NUMPY and is_complete(kind):
            return kind
        if len(own(func.body, cst.Return)) == 1:
            seen = observation(self.a.observed.get("return"))
            if seen is not None and seen != "None" and is_complete(seen):
                block.observed_types += 1
                return seen
        return None

    def _import_lines(self, name: str) -> list[cst.SimpleStatementLine]:
        lines = []
        for line in find_all(self.a.func.body, cst.SimpleStatementLine):
            if is_import_line(line) and name in bound_by_import(line):
                lines.append(line)
        return lines
