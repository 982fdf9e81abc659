"""``rebound-local``: a local re-bound to another type under a test, and consumed under a later
test of the same condition, is split into one ``if``/``else`` where the new value has its own
name.

What it does
    In a compiled method, for a name ``x`` bound in an enclosing block and re-bound to a value
    of another type at the top level of an ``if c:`` (TSF119: ``x = pack_padded_sequence(x,
    lengths)`` under ``if lengths is not None:``), where a later statement of the same block is
    ``if c:`` again (the same test, written the same), the two tests become one::

        if c:
            <first body, x's new value named x_packed and read as such>
            <the statements between the two tests, reading x_packed>
            <the second body, reading x_packed>
        else:
            <the statements between the two tests, as written>

    The rule rewrites a site when the
    walk of the method's types (``tsfix check``'s TSF119) proves the re-binding changes the
    type, or when the repair loop's compiler message says so (``Variable 'x' previously had
    type Tensor (inferred) but is now being assigned to a value of type ...PackedSequence``:
    the loop passes it as ``"rebound x"`` among the method's observed types).

    A site is left, with the reason, when: the ``if`` has an ``else``/``elif``; no later ``if``
    of the same block has the same test, or that one has an ``else``; the test reads anything
    but plain names compared with ``is None`` / ``is not None`` (joined by ``not``, ``and``,
    ``or``), or a name it reads is bound between the two tests; ``x`` is bound again between
    the two tests; the region holds a ``def``, ``class``, ``lambda``, ``global``,
    ``nonlocal``, ``del`` or walrus; ``x`` is read after the second ``if``, or the site is
    inside a loop (a later read, or the next iteration, would see the old value).

    A name holding a float re-bound to an int literal anywhere in the method (egnn-pytorch's
    ``valid_radius = 0`` under ``if only_sparse_neighbors:``, the name a float from
    ``self.valid_radius``) gets the float literal instead (``0.0``): no split, the name keeps
    its type.

    The same merge serves a name bound only at the top level of ``if c:`` (bound nowhere else
    in the method, not a parameter) and read under a later ``if c:`` of the same block
    (TSF246; nystrom-attention's ``mask_landmarks`` under ``if exists(mask):``, once
    none-helpers has written ``if mask is not None:``): nothing is renamed, the name is bound
    on the one path that reads it. The same refusals apply.

Why it breaks export
    A name keeps the type it has in the block that first binds it: TorchScript rejects ``x =
    pack_padded_sequence(x, lengths)`` inside the ``if`` ("Variable 'x' previously had type
    Tensor (inferred) but is now being assigned to a value of type
    __torch__.torch.nn.utils.rnn.PackedSequence"). Renaming it in place is not enough when the
    code between the two tests reads ``x`` whichever branch ran (``self.rnn(x)``): the read
    needs the packed value on one path and the tensor on the other, so it is copied into both
    branches of one test. Measured on torch 2.13 with speechbrain's ``LSTM`` wrapper: the split
    method scripts (``self.rnn`` takes either type; ``output`` is bound in each branch at its own
    depth, where a re-binding to another type is allowed), with eager and scripted parity with
    and without ``lengths``, and survives ``torch.jit.save``/``load``. A name bound under one
    test and read under a later one is unbound on the other path, as the compiler sees it ("x
    is not defined in the false branch"), although the tests give the same answer at run
    time. ``torch.export`` runs the Python as written.

Example
    Before::

        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            if lengths is not None:
                x = pack_padded_sequence(x, lengths, batch_first=True)
            output, hn = self.rnn(x)
            if lengths is not None:
                output, _ = pad_packed_sequence(output, batch_first=True)
            return output, hn

    After::

        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            if lengths is not None:
                x_packed = pack_padded_sequence(x, lengths, batch_first=True)
                output, hn = self.rnn(x_packed)
                output, _ = pad_packed_sequence(output, batch_first=True)
            else:
                output, hn = self.rnn(x)
            return output, hn

Fix safety
    ``0`` written ``0.0`` changes the value's type only: the same in comparisons and in
    arithmetic with floats and tensors, not where an int is required (``range(x)``, an index),
    which the name's float on its other path would not pass either; validation compares eager
    outputs. The same statements run in the same order on each path: the test is evaluated once
    instead of twice, which changes nothing since it only compares names that nothing between
    the two tests binds with None (no call, no side effect); the new name holds the value
    ``x`` held, and ``x`` itself is not read afterwards with its old value standing in for the
    new one (checked as above). The statements between the two tests are written twice, once
    per branch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import cast

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    fresh_name,
    names_bound_in,
    names_used,
    parameters_of,
    parent_map,
    short_source,
    target_names,
)
from tsfix.codemods.facts.type_flow import Rebinding, type_flow, with_article
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

__all__ = ["ReboundLocal"]

CODE = "TSF119"
UNBOUND_CODE = "TSF246"
# The key under which the repair loop passes a re-binding the compiler's message names
# (``"rebound x"`` -> the type assigned), among a method's observed types.
REBOUND_KEY = "rebound "
_NOT_IN_REGION = (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Global, cst.Nonlocal, cst.Del,
                  cst.NamedExpr)


class _Refused(Exception):
    pass


@dataclass(frozen=True)
class _Site:
    """One re-binding to split: ``statement`` (``name = ...``) at the top level of ``first``'s
    body, ``first`` and ``second`` statements of ``block``."""

    name: str
    statement: cst.SimpleStatementLine
    target: cst.Name
    block: cst.IndentedBlock
    first: cst.If
    assigned: str
    message: str                # what tsfix check says about the site
    # True: the name is bound only here (TSF246), read under a later `if` of the same test;
    # the two tests are merged and nothing is renamed.
    unbound: bool = False

    @property
    def at(self) -> cst.CSTNode:
        """Where the site is reported: the re-binding, or for an unbound name the first test,
        where TorchScript says "x is not defined in the false branch"."""
        return self.first if self.unbound else self.target


class ReboundLocal(Rule):
    __doc__ = __doc__
    name = "rebound-local"
    # --rule all order: after constant-flag (12), whose constant tests are decided per
    # instance and need no split; before loop-carried-local (15) and annotate (100), which
    # read the split branches as written.
    order = 14
    targets = ("torchscript",)
    off_target = ("torch.export and the ONNX exporters run the Python as written: a name may "
                  "hold values of different types there")
    CODES = (
        Code(CODE, "rebound-to-another-type", "local re-bound to another type inside a block",
             "A name keeps the type it has in the block that first binds it: assigning it a "
             "value of another type inside an if, for or while fails (\"Variable 'x' "
             "previously had type Tensor but is now being assigned to a value of type "
             "PackedSequence\"); in the same block it is allowed. `tsfix apply --rule "
             "rebound-local` gives the new value its own name where a later `if` of the same "
             "test consumes it (the two tests become one if/else). Otherwise give it its own "
             "name by hand and read that name until the block binds the old name again, or "
             "declare the wider type first (`y: Optional[Tensor] = x`). torch.export is not "
             "affected: it runs the Python as written."),
        Code(UNBOUND_CODE, "bound-under-a-none-test",
             "local bound only under a None test and read under a later one",
             "A name bound only inside `if mask is not None:` and read inside a later `if mask "
             "is not None:` is unbound on the other path as TorchScript sees it (\"x is not "
             "defined in the false branch\"). `tsfix apply --rule rebound-local` merges the "
             "two tests into one if/else (the statements between them written in both "
             "branches); otherwise bind the name on both paths by hand."),
    )
    summary = ("A local re-bound to another type under `if c:` and consumed under a later "
               "`if c:` (`x = pack_padded_sequence(x, lengths)`) gets its own name, the two "
               "tests merged into one if/else")

    VALID = (
        # Re-bound to a value of the same type: nothing to do.
        """
import torch
from typing import Optional
class M(torch.nn.Module):
    def forward(self, x, scale: Optional[torch.Tensor] = None):
        if scale is not None:
            x = x * scale
        y = x + 1
        if scale is not None:
            y = y / scale
        return y
""",
    )
    INVALID = (
        Example(
            """
import torch
from typing import Optional
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(4, 5, batch_first=True)

    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        if lengths is not None:
            x = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        output, hn = self.rnn(x)
        if lengths is not None:
            output, _ = pad_packed_sequence(output, batch_first=True)
        return output, hn
""",
            """
import torch
from typing import Optional
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(4, 5, batch_first=True)

    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        if lengths is not None:
            x_packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            output, hn = self.rnn(x_packed)
            output, _ = pad_packed_sequence(output, batch_first=True)
        else:
            output, hn = self.rnn(x)
        return output, hn
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """A compiled method with a name bound inside an ``if``, ``for`` or ``while`` that is
        also a parameter or bound outside that statement (a re-binding in a nested block,
        which the rule rewrites or refuses)."""
        for _, func in file.compiled:
            bound = [(name, node) for node in file.nodes_of(func)
                     if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
                     for target in (node.targets if isinstance(node, ast.Assign)
                                    else [node.target])
                     for name in _ast_names(target)]
            params = {a.arg for a in [*func.args.posonlyargs, *func.args.args,
                                      *func.args.kwonlyargs]}
            for block in file.nodes_of(func):
                if not isinstance(block, ast.If | ast.For | ast.While):
                    continue
                inside = {id(n) for n in ast.walk(block)}
                inner = {name for name, node in bound if id(node) in inside}
                outer = params | {name for name, node in bound if id(node) not in inside}
                if inner & outer:
                    return True
        return False

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        observed = self.observed.get(cls.name.value, {})
        new_bodies: dict[int, cst.FunctionDef] = {}
        parts: list[str] = []
        for method, func in facts.compiled_methods():
            new = func
            done_blocks: set[int] = set()
            for rebound, literal in _widened(facts, method):
                # egnn-pytorch's `valid_radius = 0` where the name holds a float: written 0.0.
                new = cast(cst.FunctionDef, new.deep_replace(
                    literal, _float_literal(literal)))
                self.fixed(rebound.target, CODE, f"'{rebound.name}' is a float from an "
                           "enclosing block and is assigned an int here")
                parts.append(f"{rebound.name} = {code_of(literal)} in {method}() at line "
                             f"{self.line_of(rebound.target)} is written "
                             f"{code_of(_float_literal(literal))}: the name holds a float")
            for site in self._sites(facts, method, func, observed.get(method, {})):
                where = site.message
                if id(site.block) in done_blocks:
                    self.skip(cls.name.value, site.at, f"{where}: another re-binding of the "
                              "same block is split first; run the rule again",
                              code=UNBOUND_CODE if site.unbound else CODE, message=where)
                    continue
                try:
                    replacement, new_name = _split(site, func)
                except _Refused as why:
                    self.skip(cls.name.value, site.at, f"{where}: {why}; left as it is",
                              code=UNBOUND_CODE if site.unbound else CODE, message=where)
                    continue
                done_blocks.add(id(site.block))
                new = cast(cst.FunctionDef, new.deep_replace(site.block, replacement))
                self.fixed(site.at, UNBOUND_CODE if site.unbound else CODE, where)
                if site.unbound:
                    parts.append(f"{site.name} bound only under `if "
                                 f"{short_source(site.first.test)}:` in {method}() at line "
                                 f"{self.line_of(site.at)}: the two tests of that condition "
                                 "merged into one if/else")
                    continue
                parts.append(f"{site.name} re-bound to {with_article(site.assigned)} under `if "
                             f"{short_source(site.first.test)}:` in {method}() at line "
                             f"{self.line_of(site.target)} is named {new_name}, the two tests "
                             "of that condition merged into one if/else")
            if new is not func:
                new_bodies[id(func)] = new
        if not parts:
            return cls
        assert isinstance(cls.body, cst.IndentedBlock)
        body = [new_bodies.get(id(s), s) for s in cls.body.body]
        self.changes.append(ClassChange(
            self.name, cls.name.value, self.span_of(cls),
            "; ".join(parts) + " (TorchScript keeps a name's type from the block that binds "
            "it first)"))
        return cls.with_changes(body=cls.body.with_changes(body=body))

    def _sites(self, facts: ClassFacts, method: str, func: cst.FunctionDef,
               observed: Mapping[str, str]) -> Iterator[_Site]:
        """The re-bindings of ``method`` to another type at the top level of an ``if`` body:
        those the type walk proves, then those the compiler's message names (``observed``)."""
        ifs = {id(s.body): s for s in find_all(func.body, cst.If)}
        blocks = {id(s): b for b in find_all(func.body, cst.IndentedBlock) for s in b.body}
        seen: set[int] = set()
        widened = {id(rebound.target) for rebound, _ in _widened(facts, method)}
        for rebound in type_flow(facts, method).rebindings:
            if id(rebound.target) in widened:
                continue
            first = ifs.get(id(rebound.block))
            statement = rebound.statement
            message = (f"'{rebound.name}' is {with_article(rebound.previous)} from an enclosing "
                       f"block and is assigned {with_article(rebound.assigned)} here")
            if first is None or not isinstance(statement, cst.SimpleStatementLine) \
                    or id(first) not in blocks:
                self.skip(facts.name, rebound.target, f"{message}: not at the top level of an "
                          "`if` body; left as it is", code=CODE, message=message)
                continue
            seen.add(id(rebound.target))
            yield _Site(rebound.name, statement, rebound.target, blocks[id(first)], first,
                        rebound.assigned, message)
        for key, assigned in observed.items():
            if not key.startswith(REBOUND_KEY):
                continue
            name = key.removeprefix(REBOUND_KEY)
            for first in ifs.values():
                if id(first) not in blocks or not isinstance(first.body, cst.IndentedBlock):
                    continue
                for statement in first.body.body:
                    target = _assigned_name(statement, name)
                    if target is not None and id(target) not in seen:
                        seen.add(id(target))
                        assert isinstance(statement, cst.SimpleStatementLine)
                        kind = _shown_type(assigned)
                        yield _Site(name, statement, target, blocks[id(first)], first, kind,
                                    f"'{name}' is assigned {with_article(kind)} here, another "
                                    "type than it has from an enclosing block (the compiler's "
                                    "message)")
                        break
        yield from _unbound_sites(func, ifs, blocks)


def _unbound_sites(func: cst.FunctionDef, ifs: Mapping[int, cst.If],
                   blocks: Mapping[int, cst.IndentedBlock]) -> Iterator[_Site]:
    """Names bound only at the top level of an ``if`` body whose test compares names with
    None, and read under a later ``if`` of the same block with the same test (TSF246)."""
    bindings: dict[str, int] = {}
    for node in find_all(func.body, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.CompFor, cst.NamedExpr, cst.AsName):
        target = node.name if isinstance(node, cst.AsName) else node.target
        for bound in target_names(target):
            bindings[bound.value] = bindings.get(bound.value, 0) + 1
    params = set(parameters_of(func))
    for first in ifs.values():
        block = blocks.get(id(first))
        if block is None or not isinstance(first.body, cst.IndentedBlock):
            continue
        try:
            _stable_test(first.test)
        except _Refused:
            continue
        test = code_of(first.test)
        at = next(i for i, s in enumerate(block.body) if s is first)
        later = [s for s in block.body[at + 1:]
                 if isinstance(s, cst.If) and code_of(s.test) == test]
        if not later:
            continue
        read_later = names_used(later[0].body)
        for statement in first.body.body:
            for target in _assigned_names(statement):
                name = target.value
                if name in params or bindings.get(name) != 1 or name not in read_later:
                    continue
                # One site per test: the merge binds every such name on the path that reads it.
                yield _Site(name, cast(cst.SimpleStatementLine, statement), target, block,
                            first, "", f"'{name}' is bound only under `if "
                            f"{short_source(first.test)}:` and read under a later one",
                            unbound=True)
                break
            else:
                continue
            break


def _widened(facts: ClassFacts, method: str) -> list[tuple[Rebinding, cst.BaseExpression]]:
    """The re-bindings of a float name to an int literal (``x = 0``, ``x = -1``), and that
    literal: written as a float literal, the name keeps its type."""
    found: list[tuple[Rebinding, cst.BaseExpression]] = []
    for rebound in type_flow(facts, method).rebindings:
        statement = rebound.statement
        if (rebound.previous != "float" or rebound.assigned != "int"
                or not isinstance(statement, cst.SimpleStatementLine)
                or len(statement.body) != 1 or not isinstance(statement.body[0], cst.Assign)
                or len(statement.body[0].targets) != 1
                or statement.body[0].targets[0].target is not rebound.target):
            continue
        value = statement.body[0].value
        number = value.expression if isinstance(value, cst.UnaryOperation) else value
        if isinstance(number, cst.Integer) and (number is value or isinstance(
                value.operator, cst.Minus | cst.Plus)):  # type: ignore[attr-defined]
            found.append((rebound, number))
    return found


def _float_literal(literal: cst.BaseExpression) -> cst.Float:
    assert isinstance(literal, cst.Integer)
    return cst.Float(f"{int(literal.value.replace('_', ''), 0)}.0")


def _ast_names(target: ast.expr) -> list[str]:
    """The plain names an ``ast`` assignment target binds."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for element in target.elts for n in _ast_names(element)]
    if isinstance(target, ast.Starred):
        return _ast_names(target.value)
    return []


def _shown_type(kind: str) -> str:
    """A TorchScript type name as a reader knows it (``__torch__.torch.nn.utils.rnn.
    PackedSequence`` -> ``PackedSequence``)."""
    return re.sub(r"__torch__\.(?:[\w]+\.)*(\w+)", r"\1", kind)


def _assigned_names(statement: cst.BaseStatement) -> list[cst.Name]:
    """The target of ``name = ...`` when ``statement`` is exactly one such assignment."""
    if (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign)
            and len(statement.body[0].targets) == 1
            and isinstance(statement.body[0].targets[0].target, cst.Name)):
        return [statement.body[0].targets[0].target]
    return []


def _assigned_name(statement: cst.BaseStatement, name: str) -> cst.Name | None:
    """The target of ``name = ...`` when ``statement`` is exactly that."""
    if (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign)
            and len(statement.body[0].targets) == 1
            and isinstance(statement.body[0].targets[0].target, cst.Name)
            and statement.body[0].targets[0].target.value == name):
        return statement.body[0].targets[0].target
    return None


def _stable_test(test: cst.BaseExpression) -> set[str]:
    """The names a test reads when it is only plain names compared with None (``is None``,
    ``is not None``) under ``not``/``and``/``or``; raises _Refused otherwise."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _stable_test(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _stable_test(test.left) | _stable_test(test.right)
    if (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Is | cst.IsNot)
            and isinstance(test.comparisons[0].comparator, cst.Name)
            and test.comparisons[0].comparator.value == "None"):
        return {test.left.value}
    raise _Refused(f"its test `{short_source(test)}` is not only names compared with None "
                   "(evaluated once instead of twice, it must give the same answer)")


def _split(site: _Site, func: cst.FunctionDef) -> tuple[cst.IndentedBlock, str]:
    """``site.block`` with the two tests merged (the module doc), and the new name."""
    first, name = site.first, site.name
    if first.orelse is not None:
        raise _Refused("the `if` has an else or elif")
    if len(site.statement.body) != 1:
        raise _Refused("the re-binding shares its line with other statements")
    assert isinstance(first.body, cst.IndentedBlock)
    statements = list(site.block.body)
    start = next(i for i, s in enumerate(statements) if s is first)
    test_code = code_of(first.test)
    end = next((i for i in range(start + 1, len(statements))
                if isinstance(statements[i], cst.If)
                and code_of(statements[i].test) == test_code), None)  # type: ignore[attr-defined]
    if end is None:
        raise _Refused(f"no later `if {short_source(first.test)}:` in the same block consumes "
                       "it (the new value would need a name past the branch)")
    second = statements[end]
    assert isinstance(second, cst.If) and isinstance(second.body, cst.IndentedBlock)
    if second.orelse is not None:
        raise _Refused(f"the later `if {short_source(first.test)}:` has an else or elif")
    tested = _stable_test(first.test)
    middle = statements[start + 1:end]
    inside = list(first.body.body)
    at = next(i for i, s in enumerate(inside) if s is site.statement)
    # The later test's own comments go with its body, which now follows the middle.
    second_body: list[cst.BaseStatement] = list(second.body.body)
    if second_body and isinstance(second_body[0], cst.SimpleStatementLine
                                  | cst.BaseCompoundStatement):
        second_body[0] = second_body[0].with_changes(
            leading_lines=[*second.leading_lines, *second_body[0].leading_lines])
    after = [*inside[at + 1:], *middle, *second_body]
    bound_between = {n for s in [*inside, *middle, *second.body.body] for n in _bound_by(s)}
    if tested & bound_between:
        raise _Refused(f"{', '.join(sorted(tested & bound_between))} (read by the test) is "
                       "bound between the two tests")
    for statement in [*inside, *middle, *second.body.body]:
        found = find_all(statement, *_NOT_IN_REGION)
        if found:
            raise _Refused(f"`{short_source(found[0])}` between the two tests")
    if any(name in _bound_by(s) for s in after):
        raise _Refused(f"'{name}' is bound again between the two tests")
    if _read_after(func, site.block, end, name):
        raise _Refused(f"'{name}' is read after the later `if`, where it would hold the old "
                       "value")
    if any(_contains(loop, first) for loop in find_all(func.body, cst.For, cst.While)):
        raise _Refused("it is inside a loop, whose next iteration would read the old value")
    body: list[cst.BaseStatement]
    if site.unbound:
        new_name = name
        body = [*inside, *middle, *second_body]
    else:
        taken = names_bound_in(func) | names_used(func) | set(parameters_of(func))
        suffix = "packed" if "PackedSequence" in site.assigned else re.sub(
            r"\W", "", site.assigned.rpartition(".")[2].split("[")[0].lower()) or "new"
        new_name = fresh_name(f"{name}_{suffix}", taken=taken)
        rebinding = site.statement.with_deep_changes(site.target, value=new_name)
        renamer = _Rename(name, new_name)
        body = [*inside[:at], rebinding,
                *(cast(cst.BaseStatement, s.visit(renamer)) for s in after)]
    merged = first.with_changes(
        body=first.body.with_changes(body=body),
        orelse=cst.Else(body=cst.IndentedBlock(body=_no_blank_start(middle))) if middle
        else None)
    new_block = site.block.with_changes(body=[*statements[:start], merged,
                                              *statements[end + 1:]])
    return new_block, new_name


def _no_blank_start(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``statements`` as a block's body: no blank line before the first (its comments stay)."""
    first = statements[0]
    if not isinstance(first, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return statements
    kept = [line for line in first.leading_lines if line.comment is not None]
    return [first.with_changes(leading_lines=kept), *statements[1:]]


def _bound_by(statement: cst.CSTNode) -> set[str]:
    """Every name ``statement`` binds, at any depth (assignments, loop and comprehension
    targets, ``as`` names, imports)."""
    found: set[str] = set()
    for node in find_all(statement, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.CompFor, cst.NamedExpr, cst.AsName, cst.ImportAlias):
        if isinstance(node, cst.AsName):
            found.update(n.value for n in target_names(node.name))
        elif isinstance(node, cst.ImportAlias):
            found.add(code_of(node.name).split(".")[0])
        else:
            found.update(n.value for n in target_names(node.target))
    return found


def _read_after(func: cst.FunctionDef, block: cst.IndentedBlock, end: int, name: str) -> bool:
    """Whether ``name`` is read after statement ``end`` of ``block``: later in that block, or
    after the statement holding it in each enclosing block."""
    if any(name in names_used(s) for s in block.body[end + 1:]):
        return True
    parents = parent_map(func)
    child: cst.CSTNode = block
    while True:
        holder = parents.get(id(child))
        while holder is not None and not isinstance(holder, cst.IndentedBlock):
            child, holder = holder, parents.get(id(holder))
        if holder is None:
            return False
        index = next(i for i, s in enumerate(holder.body) if s is child)
        if any(name in names_used(s) for s in holder.body[index + 1:]):
            return True
        child = holder


def _contains(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in find_all(root, type(node)))


class _Rename(cst.CSTTransformer):
    """Every read of ``old`` becomes ``new`` (not an attribute's or a keyword's name)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute
                        ) -> cst.BaseExpression:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if original.value == self.old else updated
