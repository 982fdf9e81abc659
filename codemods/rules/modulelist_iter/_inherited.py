"""Containers a class inherits: ``self.spp_dw`` built in a base class's ``__init__``.

A base defined in the same file is read as it stands; a base imported from another file of the
user's tree is found with :func:`tsfix.codemods.facts.project.lookup` and parsed there (never
imported, never rewritten). A base that is neither (an installed package's class, a name that
cannot be followed) is unresolved: what it builds is unknown, and a site that calls an element of
an attribute it may have built is reported rather than rewritten."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.project import is_standard_library, lookup, relative_imports
from tsfix.codemods.facts.syntax import import_map, qualified_name
from tsfix.codemods.rules.modulelist_iter._common import CONTAINER_KINDS
from tsfix.codemods.rules.modulelist_iter._lengths import ClassAnalysis

# How many bases deep the search goes (a cycle stops earlier).
_MAX_DEPTH = 8


@dataclass
class BaseContainers:
    # attr -> (its kind as torch names it: ModuleList, Sequential, ModuleDict; the base's name)
    kinds: dict[str, tuple[str, str]] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)   # bases whose source is not read


@dataclass(frozen=True)
class _Source:
    """One file's tree, its imports, its classes by name, and its path (None: the file being
    rewritten, whose path may be unknown)."""
    tree: cst.Module
    path: str | None

    @property
    def classes(self) -> dict[str, cst.ClassDef]:
        return {s.name.value: s for s in self.tree.body if isinstance(s, cst.ClassDef)}


def base_containers(tree: cst.Module, cls: cst.ClassDef, filename: str | None) -> BaseContainers:
    """The module containers ``cls``'s bases build in their ``__init__``, nearest base first (the
    first base that assigns an attribute decides it)."""
    found = BaseContainers()
    pending: list[tuple[_Source, cst.ClassDef, int]] = [(_Source(tree, filename), cls, 0)]
    seen: set[tuple[str | None, str]] = {(filename, cls.name.value)}
    while pending:
        source, current, depth = pending.pop(0)
        for base, base_source in _bases(source, current, found):
            key = (base_source.path, base.name.value)
            if key in seen or depth >= _MAX_DEPTH:
                continue
            seen.add(key)
            imports = import_map(base_source.tree)
            analysis = ClassAnalysis(ClassFacts(base, imports), imports, None)
            named = analysis.facts.containers
            for attr, container in analysis.containers.items():
                kind = named.get(attr) or next(k for k, v in CONTAINER_KINDS.items()
                                               if v == container.kind)
                found.kinds.setdefault(attr, (kind, base.name.value))
            pending.append((base_source, base, depth + 1))
    return found


def _bases(source: _Source, cls: cst.ClassDef,
           found: BaseContainers) -> list[tuple[cst.ClassDef, _Source]]:
    """The bases of ``cls`` whose source can be read; the others go to ``found.unresolved``
    (torch's own classes and the standard library's build nothing this rule looks at)."""
    imports = import_map(source.tree)
    local = source.classes
    followed: list[tuple[cst.ClassDef, _Source]] = []
    for arg in cls.bases:
        if arg.keyword is not None:
            continue
        name = get_full_name_for_node(arg.value) or ""
        if name in local and local[name] is not cls:
            followed.append((local[name], source))
            continue
        dotted = qualified_name(arg.value, imports) or name
        if not dotted or dotted == "object" or dotted.split(".")[0] == "torch" \
                or is_standard_library(dotted):
            continue
        elsewhere = _imported_class(source, name)
        if elsewhere is None:
            found.unresolved.append(dotted)
        else:
            followed.append(elsewhere)
    return followed


def _imported_class(source: _Source, name: str) -> tuple[cst.ClassDef, _Source] | None:
    """The class an imported base name refers to, read from the user's tree."""
    if source.path is None or not name:
        return None
    head, _, rest = name.partition(".")
    relative = relative_imports(source.tree)
    if head in relative:
        level, target = relative[head]
    else:
        imported = import_map(source.tree).get(head)
        if imported is None:
            return None
        level, target = 0, imported
    dotted = ".".join(p for p in (target, rest) if p)
    definition = lookup(source.path, dotted, level)
    if definition is None or definition.kind != "class":
        return None
    parsed = _parsed(str(definition.path))
    if parsed is None:
        return None
    tree, lines = parsed
    class_name = lines.get(definition.line)
    cls = _Source(tree, str(definition.path)).classes.get(class_name or "")
    return (cls, _Source(tree, str(definition.path))) if cls is not None else None


def _parsed(path: str) -> tuple[cst.Module, dict[int, str]] | None:
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return _parsed_at(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=16)
def _parsed_at(path: str, mtime_ns: int, size: int) -> tuple[cst.Module, dict[int, str]] | None:
    """A file of the tree, parsed, and its top-level classes by the line ``lookup`` names."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        lines = {node.lineno: node.name for node in ast.parse(text).body
                 if isinstance(node, ast.ClassDef)}
        return cst.parse_module(text), lines
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError,
            cst.ParserSyntaxError):
        return None
