"""Fix safety: which rewrites cannot change what the code computes in eager mode.

ruff and cargo class each fix by whether it may change behaviour; only the ones that cannot
are applied without asking. tsfix decides it by *comparison*, not by a rule's say-so, in the
spirit of black's ``--safe``: a rule's rewrite of a class is **safe** when the class's source
before and after the rule are the same Python program once what eager execution ignores is
taken out of both:

* annotations (parameters, returns, ``x: T = v`` is ``x = v``, a bare ``x: T`` is nothing;
  ``Final[...]`` is an annotation);
* the class attributes TorchScript alone reads: ``__constants__``,
  ``__jit_unused_properties__``;
* ``if not torch.jit.is_scripting():`` with no ``else`` (eager code always runs its body);
* ``from typing import ...`` statements of the module.

Everything else (a ``torch.cond``, a lifted argument, a numpy translation, an added assert,
a tuple for a list default, a removed parameter) is **unsafe**: the pipeline writes it only
when validation proved it (docs/validation.md, "Fix safety"). The comparison is made per rule,
on the module as that rule received and left it, so a class that several rules changed can
keep the safe rules' part when an unsafe rule's part is held back.
"""

from __future__ import annotations

import ast
import io
from collections.abc import Iterable
from dataclasses import dataclass

from tsfix.codemods.facts.prefilter import parse_once

__all__ = ["eager_equivalent", "safe_classes"]

# Class attributes that only the TorchScript compiler reads.
_COMPILER_ONLY_ATTRIBUTES = frozenset({"__constants__", "__jit_unused_properties__"})


class _EagerView(ast.NodeTransformer):
    """What eager execution of the code depends on: the tree without annotations and
    compiler-only statements."""

    def _arguments(self, args: ast.arguments) -> None:
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            arg.annotation = None
        for star in (args.vararg, args.kwarg):
            if star is not None:
                star.annotation = None

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self._arguments(node.args)
        node.returns = None
        return self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        self._arguments(node.args)
        node.returns = None
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return self.visit_Assign(ast.copy_location(ast.Assign(targets=[node.target],
                                                              value=node.value), node))

    def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
        if any(isinstance(t, ast.Name) and t.id in _COMPILER_ONLY_ATTRIBUTES
               for t in node.targets):
            return None
        return self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if node.module == "typing" else node

    def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt]:
        if not node.orelse and _is_not_scripting(node.test):
            body: list[ast.stmt] = []
            for statement in node.body:
                visited = self.visit(statement)
                if isinstance(visited, list):
                    body.extend(visited)
                elif isinstance(visited, ast.stmt):
                    body.append(visited)
            return body
        return self.generic_visit(node)


def _is_not_scripting(test: ast.expr) -> bool:
    """``not torch.jit.is_scripting()`` (any alias of torch: the name is not resolved)."""
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
        return False
    call = test.operand
    return (isinstance(call, ast.Call) and not call.args and not call.keywords
            and isinstance(call.func, ast.Attribute) and call.func.attr == "is_scripting"
            and isinstance(call.func.value, ast.Attribute) and call.func.value.attr == "jit")


def _eager_tree(source: str) -> ast.Module | None:
    """The eager view of ``source`` (whole statements), or None when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return _EagerView().visit(tree)  # type: ignore[no-any-return]


def eager_equivalent(before: str, after: str) -> bool:
    """Whether two pieces of source run alike in eager mode (see the module docstring)."""
    if before == after:
        return True
    old, new = _eager_tree(before), _eager_tree(after)
    if old is None or new is None:
        return False
    return _same_statements(old.body, _Source(before), new.body, _Source(after))


class _Source:
    """A text and its lines, to read a node's exact source (``ast`` columns are UTF-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.lines = [line.encode() for line in io.StringIO(text, newline="").readlines()]

    def of(self, node: ast.stmt) -> bytes | None:
        if not hasattr(node, "lineno"):
            return None         # a node the eager view made: compared by its dump
        # A def's or class's own position leaves its decorators out: start at the first one,
        # so a decorator a rule added or changed is not taken for an unchanged statement.
        decorators: list[ast.expr] = getattr(node, "decorator_list", [])
        first, start = min([(node.lineno, node.col_offset),
                            *((d.lineno, d.col_offset) for d in decorators)])
        first, last = first - 1, (node.end_lineno or node.lineno) - 1
        end = node.end_col_offset
        if first == last:
            return self.lines[first][start:end]
        return b"".join([self.lines[first][start:], *self.lines[first + 1:last],
                         self.lines[last][:end]])


def _same_statements(old: list[ast.stmt], old_source: _Source, new: list[ast.stmt],
                     new_source: _Source) -> bool:
    """The two eager views hold the same statements. A statement whose source text is the same
    on both sides is the same (its eager view too): only the others are dumped and compared,
    and a class is compared statement by statement (a rule changes a method or two of a class
    of thousands of lines: dumping the whole class costs more than the rewrite)."""
    if len(old) != len(new):
        return False
    for a, b in zip(old, new, strict=True):
        if type(a) is not type(b):
            return False
        text = old_source.of(a)
        if text is not None and text == new_source.of(b):
            continue
        if isinstance(a, ast.ClassDef) and isinstance(b, ast.ClassDef):
            if _dump(_class_header(a)) != _dump(_class_header(b)):
                return False
            if not _same_statements(a.body, old_source, b.body, new_source):
                return False
        elif _dump(a) != _dump(b):
            return False
    return True


def _class_header(cls: ast.ClassDef) -> ast.ClassDef:
    return ast.ClassDef(name=cls.name, bases=cls.bases, keywords=cls.keywords, body=[],
                        decorator_list=cls.decorator_list)


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


@dataclass
class _TopLevel:
    classes: dict[str, str]         # name -> source (decorators included)
    functions: dict[str, str]
    rest: str                       # the other top-level statements, joined


def _top_level(text: str) -> _TopLevel | None:
    """The sources of the top-level statements of ``text``; None when CPython cannot parse
    it. Read from the lines ``ast`` places the statements on: no LibCST codegen."""
    tree = parse_once(text)
    if tree is None:
        return None
    # Only the line breaks CPython knows (str.splitlines also breaks at \f and others).
    lines = io.StringIO(text, newline="").readlines()
    found = _TopLevel({}, {}, "")
    rest: list[str] = []
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", ())
        first = min([statement.lineno, *(d.lineno for d in decorators)])
        source = "".join(lines[first - 1:statement.end_lineno or statement.lineno])
        if isinstance(statement, ast.ClassDef):
            found.classes[statement.name] = source
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            found.functions[statement.name] = source
        else:
            rest.append(source)
    found.rest = "".join(rest)
    return found


def safe_classes(before: str, after: str, names: Iterable[str]) -> set[str]:
    """Of the classes ``names`` one rule changed between the module texts ``before`` and
    ``after``, those whose change is safe. A module-level function the rule changed counts
    against every class (the rule changed it for one of them, and which one is not recorded);
    so does a change to the module's other top-level statements (imports other than typing's,
    constants). Nothing is safe in a file CPython cannot parse (validation decides)."""
    old, new = _top_level(before), _top_level(after)
    if (old is None or new is None or set(old.classes) != set(new.classes)
            or set(old.functions) != set(new.functions)):
        return set()
    if not all(eager_equivalent(old.functions[name], new.functions[name])
               for name in new.functions):
        return set()
    if not eager_equivalent(old.rest, new.rest):
        return set()
    return {name for name in names if (bare := name.removesuffix("()")) in new.classes
            and eager_equivalent(old.classes[bare], new.classes[bare])}
