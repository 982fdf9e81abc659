"""Adding ``from typing import X`` the way the file (and isort) would have it.

An existing ``from typing import ...`` gets the names merged in. Otherwise the new line joins
the standard-library import group, or, when the file has none, becomes its own group before the
first third-party import, so a diff never puts ``typing`` after ``torch`` or after relative
imports.
"""

from __future__ import annotations

import sys
from collections.abc import Collection

import libcst as cst
from libcst.helpers import get_full_name_for_node


def _imported_root(statement: cst.BaseStatement) -> str | None:
    """The top-level module a top-level import line imports ('.' for relative imports)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Import):
        return (get_full_name_for_node(small.names[0].name) or "").split(".")[0]
    if isinstance(small, cst.ImportFrom):
        if small.relative:
            return "."
        return (get_full_name_for_node(small.module) or "").split(".")[0] if small.module else None
    return None


def add_typing_names(module: cst.Module, names: Collection[str]) -> cst.Module:
    if not names:
        return module
    body: list[cst.BaseStatement] = list(module.body)
    for index, statement in enumerate(body):
        if _imported_root(statement) != "typing":
            continue
        assert isinstance(statement, cst.SimpleStatementLine)
        small = statement.body[0]
        if (isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar)
                and small.module is not None
                and get_full_name_for_node(small.module) == "typing"):
            present = {get_full_name_for_node(a.name) for a in small.names}
            if all(a.asname is None for a in small.names):
                missing = sorted(set(names) - present)
                if not missing:
                    return module
                aliases = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in small.names]
                aliases += [cst.ImportAlias(cst.Name(n)) for n in missing]
                aliases.sort(key=lambda a: get_full_name_for_node(a.name) or "")
                new_small = small.with_changes(names=aliases)
                body[index] = statement.with_changes(body=[new_small])
                return module.with_changes(body=body)
    line = cst.parse_statement(f"from typing import {', '.join(sorted(names))}\n")
    assert isinstance(line, cst.SimpleStatementLine)
    return _insert_standard_library_line(module, line)


def add_module_import(module: cst.Module, name: str) -> cst.Module:
    """``import math`` with the standard-library imports (or as its own group before the
    third-party ones); ``import torch`` before the first ``from torch ...`` import, else after
    the last third-party import. The caller checks that the name is not bound yet."""
    line = cst.parse_statement(f"import {name}\n")
    assert isinstance(line, cst.SimpleStatementLine)
    if name in sys.stdlib_module_names:
        return _insert_standard_library_line(module, line)
    body: list[cst.BaseStatement] = list(module.body)
    imports = _imports(body)
    third = [i for i, r in imports if r not in sys.stdlib_module_names and r != "."
             and r != "__future__"]
    if third:
        torch_lines = [i for i, r in imports if r == "torch"]
        at = torch_lines[0] if torch_lines else third[-1] + 1
        if torch_lines:
            first = body[at]
            assert isinstance(first, cst.SimpleStatementLine)
            line = line.with_changes(leading_lines=first.leading_lines)
            body[at] = first.with_changes(leading_lines=[])
        body.insert(at, line)
    elif imports:
        body.insert(imports[-1][0] + 1, line)
    else:
        body.insert(_after_future_or_docstring(body, imports), line)
    return module.with_changes(body=body)


def _imports(body: list[cst.BaseStatement]) -> list[tuple[int, str]]:
    """(index, top-level module) of every top-level import line."""
    return [(i, r) for i, r in ((i, _imported_root(s)) for i, s in enumerate(body))
            if r is not None]


def _insert_standard_library_line(module: cst.Module,
                                  line: cst.SimpleStatementLine) -> cst.Module:
    """After the last standard-library import; else as its own group before the first other
    import (which keeps its comments); else after ``__future__`` imports or the docstring."""
    body: list[cst.BaseStatement] = list(module.body)
    imports = _imports(body)
    stdlib = [i for i, r in imports if r in sys.stdlib_module_names and r != "__future__"]
    if stdlib:
        body.insert(stdlib[-1] + 1, line)
        return module.with_changes(body=body)
    others = [i for i, r in imports if r != "__future__"]
    if others:
        first = body[others[0]]
        assert isinstance(first, cst.SimpleStatementLine)
        body[others[0]] = first.with_changes(leading_lines=[cst.EmptyLine()])
        body.insert(others[0], line.with_changes(leading_lines=first.leading_lines))
        return module.with_changes(body=body)
    body.insert(_after_future_or_docstring(body, imports), line)
    return module.with_changes(body=body)


def _after_future_or_docstring(body: list[cst.BaseStatement],
                               imports: list[tuple[int, str]]) -> int:
    future = [i for i, r in imports if r == "__future__"]
    if future:
        return future[-1] + 1
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(
            body[0].body[0], cst.Expr) and isinstance(body[0].body[0].value, cst.SimpleString):
        return 1
    return 0
