"""A class-level list of attribute names TorchScript reads (``__constants__``,
``__jit_unused_properties__``): read the class's own, extend it, or add one. Shared by the rules
that write them (constant-flag, jit-unused-properties)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, docstring_count

NameList = cst.List | cst.Tuple | cst.Set


@dataclass(frozen=True)
class OwnList:
    """A class's own list: ``value`` when it is one plain assignment of a literal of strings
    (``names``), else ``problem`` says what it is."""

    value: NameList | None = None
    names: tuple[str, ...] = ()
    problem: str = ""


def own_list(cls: cst.ClassDef, name: str, *, sets: bool = False) -> OwnList | None:
    """The class's own ``name = [...]`` (a list or tuple literal; a set too with ``sets``), or
    None when it sets none."""
    if not isinstance(cls.body, cst.IndentedBlock):
        return None
    found: list[cst.BaseSmallStatement] = []
    for statement in cls.body.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets: list[cst.BaseExpression] = (
                    [t.target for t in small.targets] if isinstance(small, cst.Assign)
                    else [small.target] if isinstance(small, cst.AnnAssign | cst.AugAssign)
                    else [])
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    found.append(small)
    if not found:
        return None
    only = found[0]
    if len(found) > 1 or not isinstance(only, cst.Assign) or len(only.targets) > 1:
        return OwnList(problem=f"{name} is set more than once or not by a plain assignment")
    value = only.value
    if not isinstance(value, cst.List | cst.Tuple | cst.Set) or (
            isinstance(value, cst.Set) and not sets):
        kinds = "a list, tuple or set literal" if sets else "a list or tuple literal"
        return OwnList(problem=f"{name} is not {kinds}")
    names = []
    for element in value.elements:
        text = (element.value.evaluated_value
                if isinstance(element, cst.Element)
                and isinstance(element.value, cst.SimpleString) else None)
        if not isinstance(text, str):
            return OwnList(problem=f"{name} holds something other than string literals")
        names.append(text)
    return OwnList(value, tuple(names))


def appended(value: NameList, names: list[str]) -> NameList:
    """``["a"]`` + ``b`` -> ``["a", "b"]``. A trailing comma stays only in a literal written
    over several lines (on one line it would make black explode the list; ``("a",)`` had it to
    be a tuple)."""
    elements = list(value.elements)
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if elements:
        elements[-1] = elements[-1].with_changes(comma=space)
    elements.extend(cst.Element(cst.SimpleString(f'"{n}"'), comma=space) for n in names)
    trailing = value.elements[-1].comma if value.elements else cst.MaybeSentinel.DEFAULT
    keep = isinstance(trailing, cst.Comma) and "\n" in code_of(value)
    elements[-1] = elements[-1].with_changes(
        comma=trailing if keep else cst.MaybeSentinel.DEFAULT)
    return value.with_changes(elements=elements)


def with_list(cls: cst.ClassDef, name: str, names: list[str], comment: str) -> cst.ClassDef:
    """``cls`` with ``name = [...]`` after its docstring, under ``comment`` (one or more
    ``# ...`` lines) saying why."""
    assert isinstance(cls.body, cst.IndentedBlock)
    body = list(cls.body.body)
    index = docstring_count(cls.body)
    listed = ", ".join(f'"{n}"' for n in names)
    statement = cst.parse_statement(f"{name} = [{listed}]\n")
    comments = [cst.EmptyLine(comment=cst.Comment(line)) for line in comment.splitlines()]
    blank = [cst.EmptyLine(indent=False)] if index else []
    statement = statement.with_changes(leading_lines=[*blank, *comments])
    if index < len(body):
        following = body[index]
        assert isinstance(following, cst.SimpleStatementLine | cst.BaseCompoundStatement)
        if index == 0:
            # The statement that opened the body moves below the new one, its comments stay
            # at the top.
            statement = statement.with_changes(
                leading_lines=[*following.leading_lines, *statement.leading_lines])
            following = following.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        elif not following.leading_lines:
            following = following.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        body[index] = following
    body.insert(index, statement)
    return cls.with_changes(body=cls.body.with_changes(body=body))
