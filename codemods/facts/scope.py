"""The lifetime of every memo tsfix keeps about a file: one :func:`file_scope` per file.

Rules and the linter ask the same questions about the same nodes many times (the node index of
a method body, a statement's positions, a class's compiled methods). The answers are kept in
the scope that the entry point (``rewrite_source``, ``check_source``) opens for the file and
dropped when it closes, so nothing keyed by node identity outlives the trees it describes and
no entry point has to remember to clear anything. Outside a scope nothing is memoised: every
helper still works, it only recomputes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FileScope:
    """Memos for one file, keyed by ``id(node)``; every entry also holds its node, so an id
    cannot be reused by another node while the entry lives."""

    indexes: dict[int, Any] = field(default_factory=dict)       # syntax.find_all
    positions: dict[int, Any] = field(default_factory=dict)     # rules.base positions
    modules: dict[int, Any] = field(default_factory=dict)       # facts.module.ModuleFacts
    classes: dict[int, Any] = field(default_factory=dict)       # facts.classes.ClassFacts
    layouts: dict[str, Any] = field(default_factory=dict)       # rules.base class layouts
    parents: dict[int, Any] = field(default_factory=dict)       # syntax.parent_map
    ast_trees: dict[str, Any] = field(default_factory=dict)     # prefilter.AstFile, by text


_CURRENT: ContextVar[FileScope | None] = ContextVar("tsfix_file_scope", default=None)


def current_scope() -> FileScope | None:
    return _CURRENT.get()


@contextmanager
def file_scope() -> Iterator[FileScope]:
    """Open a scope for one file (nested calls share the outer one)."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    scope = FileScope()
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)
