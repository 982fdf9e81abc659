"""Project facts: what a name imported from another file of the user's tree is.

A rule rewrites one file, but some of its answers depend on another file of the same tree:
``from pkg.inner import Inner`` or ``from .inner import Inner`` and then ``Inner(causal=causal)``
in ``__init__`` builds a submodule whose class is defined elsewhere. :func:`lookup` finds that
file and reads the definition with CPython's ``ast`` (the other file is never imported, and its
text is never rewritten).

Where a file's imports are looked for, as Python would find them when the file's package (or
the file alone, as a script) is imported:

- an absolute name (``pkg.inner.Inner``) under the folder above the file's topmost package
  (the chain of folders holding an ``__init__.py``, as the validation worker puts on
  ``sys.path``), then under the file's own folder;
- a relative name (``from ..inner import Inner``: level 2) under the file's folder, one folder
  up per level beyond the first;
- ``pkg/inner.py`` or ``pkg/inner/__init__.py``; a name that module re-exports (``from .inner
  import Inner`` in ``pkg/__init__.py``, or a ``*`` import) is followed to its definition.

Nothing outside those folders is read: a name from an installed package (or the standard
library) is not in the user's tree, and :func:`lookup` answers None for it. Parsed files are
kept per process, keyed by path, modification time and size, so an edited file is read again.
"""

from __future__ import annotations

import ast
import builtins
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Literal

import libcst as cst
from libcst.helpers import get_full_name_for_node

# How deep re-exports and base classes are followed (a cycle stops earlier).
_MAX_DEPTH = 8

Kind = Literal["class", "function", "other", "unknown", "external"]


@dataclass(frozen=True)
class Definition:
    """What an imported name is, found in the user's tree.

    ``kind``: ``class``, ``function``, ``other`` (a value assigned at top level), ``unknown``
    (the module file was found but does not parse, or does not define the name visibly:
    ``problem`` says which), or
    ``external`` (the module re-exports a name from outside the tree: ``external`` holds its
    dotted name). ``module`` says, for a class, whether it is an ``nn.Module``: True, False
    (every base is shown not to be one), None (a base cannot be followed).
    """

    name: str
    path: Path
    kind: Kind
    line: int = 0
    display: str = ""        # the file, for messages: relative to the importing file's root
    module: bool | None = None
    external: str = ""
    problem: str = ""        # unknown: why ("cannot be parsed", "does not define it visibly")


def lookup(origin: str | Path, dotted: str, level: int = 0) -> Definition | None:
    """The definition ``dotted`` names when the file ``origin`` imports it (``level`` leading
    dots for a relative import: ``from .inner import Inner`` is ``("inner.Inner", 1)``), or
    None when no module of the user's tree holds it."""
    origin = Path(origin).absolute()
    found = _find(origin, dotted, level, 0, frozenset())
    if found is None:
        return None
    return replace(found, name=dotted, display=_display(origin, found.path))


def relative_imports(module: cst.Module) -> dict[str, tuple[int, str]]:
    """Local name -> (level, dotted name) for each relative import at the top of ``module``
    (``from .inner import Inner as I``: ``I`` -> ``(1, "inner.Inner")``); the absolute ones
    are :func:`tsfix.codemods.facts.syntax.import_map`'s."""
    found: dict[str, tuple[int, str]] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (not isinstance(small, cst.ImportFrom) or not small.relative
                    or isinstance(small.names, cst.ImportStar)):
                continue
            origin = get_full_name_for_node(small.module) if small.module is not None else ""
            for alias in small.names:
                imported = get_full_name_for_node(alias.name) or ""
                local = (get_full_name_for_node(alias.asname.name)
                         if alias.asname is not None else None) or imported
                found[local] = (len(small.relative), ".".join(p for p in (origin, imported) if p))
    return found


def star_imports(module: cst.Module) -> list[tuple[int, str]]:
    """(level, dotted module) of each ``from ... import *`` at the top of ``module``."""
    return [(len(small.relative), get_full_name_for_node(small.module) or ""
             if small.module is not None else "")
            for statement in module.body if isinstance(statement, cst.SimpleStatementLine)
            for small in statement.body
            if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar)]


def is_standard_library(dotted: str) -> bool:
    """Whether ``dotted`` names something of the standard library or a builtin."""
    head = dotted.split(".")[0]
    return head in sys.stdlib_module_names or (head == dotted and hasattr(builtins, head))


def parsed_file(path: Path) -> ast.Module | None:
    """Another file of the tree as CPython's ``ast`` reads it (never imported), kept per
    process by path, modification time and size; None when it cannot be read or parsed."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _parsed_at(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _parsed_at(path: str, mtime_ns: int, size: int) -> ast.Module | None:
    try:
        return ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


# ---- finding files -------------------------------------------------------------------------------

def package_root(path: Path) -> Path:
    """The folder above ``path``'s topmost package (the folder itself when it is no package),
    found as the validation worker finds it: the chain of folders with an ``__init__.py``."""
    folder = path.parent
    while _is_file(folder / "__init__.py") and folder.name.isidentifier():
        folder = folder.parent
    return folder


def _is_file(path: Path) -> bool:
    """``Path.is_file``, False also where it raises (a folder that cannot be searched, a name
    too long for the file system)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _display(origin: Path, path: Path) -> str:
    for root in (package_root(origin), origin.parent, package_root(path)):
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            continue
    return str(path)


def _roots(origin: Path, level: int) -> list[Path]:
    if level:
        folder = origin.parent
        for _ in range(level - 1):
            folder = folder.parent
        return [folder]
    roots = [package_root(origin), origin.parent]
    return roots[:1] if roots[0] == roots[1] else roots


def _module_file(root: Path, parts: list[str]) -> Path | None:
    folder = root.joinpath(*parts)
    for candidate in ((folder / "__init__.py",) if not parts else
                      (folder.with_name(folder.name + ".py"), folder / "__init__.py")):
        if _is_file(candidate):
            return candidate
    return None


@dataclass(frozen=True)
class _Binding:
    """A top-level name of a module file: what it is, and for a class its bases (dotted, None
    for an expression that is no name)."""

    kind: Kind
    line: int
    bases: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class _Summary:
    """What lookups need of one module file (kept instead of its syntax tree, which would hold
    far more objects in memory for the process's lifetime)."""

    bindings: dict[str, _Binding]
    imports: dict[str, tuple[int, str]]
    stars: tuple[tuple[int, str], ...]


@lru_cache(maxsize=1024)
def _summarised(path: str, mtime_ns: int, size: int) -> _Summary | None:
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    statements = _top_level(tree)
    return _Summary(_bindings(statements), ast_imports(statements), tuple(
        (s.level, s.module or "") for s in statements
        if isinstance(s, ast.ImportFrom) and any(a.name == "*" for a in s.names)))


def _summary(path: Path) -> _Summary | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return _summarised(str(path), stat.st_mtime_ns, stat.st_size)


def _find(origin: Path, dotted: str, level: int, depth: int,
          seen: frozenset[tuple[Path, str]]) -> Definition | None:
    parts = dotted.split(".")
    # The longest module path first: ``pkg.inner.Inner`` is ``Inner`` of pkg/inner.py.
    for root in _roots(origin, level):
        for split in range(len(parts) - 1, -1 if level else 0, -1):
            module_file = _module_file(root, parts[:split])
            if module_file is None:
                continue
            rest = parts[split:]
            if len(rest) != 1:
                # An attribute of a class, or a module path that goes on past a file.
                return None
            return _defined(module_file, rest[0], depth, seen)
    return None


def _defined(path: Path, name: str, depth: int,
             seen: frozenset[tuple[Path, str]]) -> Definition:
    """What the module file ``path`` binds ``name`` to."""
    if depth > _MAX_DEPTH or (path, name) in seen:
        return Definition(name, path, "unknown", problem="re-exports it in a cycle")
    summary = _summary(path)
    if summary is None:
        return Definition(name, path, "unknown", problem="cannot be parsed")
    seen = seen | {(path, name)}
    bound = summary.bindings.get(name)
    if bound is not None:
        module = (_class_is_module(path, summary, bound, depth, seen) if bound.kind == "class"
                  else None)
        return Definition(name, path, bound.kind, bound.line, module=module)
    if name in summary.imports:
        import_level, target = summary.imports[name]
        return _followed(path, target, import_level, depth, seen)
    for import_level, module_name in summary.stars:
        found = _find(path, f"{module_name}.{name}" if module_name else name, import_level,
                      depth + 1, seen)
        if found is not None and found.kind != "unknown":
            return found
    return Definition(name, path, "unknown", problem="does not define it visibly")


def _followed(path: Path, target: str, level: int, depth: int,
              seen: frozenset[tuple[Path, str]]) -> Definition:
    """The definition an import in ``path`` names: found in the tree, else ``external``
    (an absolute name from outside it) or ``unknown`` (a relative one that is missing)."""
    found = _find(path, target, level, depth + 1, seen)
    if found is not None:
        return found
    if level:
        return Definition(target, path, "unknown", problem=f"imports it from a module not found "
                          f"({'.' * level}{target})")
    return Definition(target, path, "external", external=target)


def _bindings(statements: list[ast.stmt]) -> dict[str, _Binding]:
    """Top-level classes, functions and assigned names (the last binding wins)."""
    found: dict[str, _Binding] = {}
    for statement in statements:
        if isinstance(statement, ast.ClassDef):
            found[statement.name] = _Binding("class", statement.lineno, tuple(
                dotted_name(base) for base in statement.bases))
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            found[statement.name] = _Binding("function", statement.lineno)
        elif isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [
                statement.target]
            for target in targets:
                for item in ast.walk(target):
                    if isinstance(item, ast.Name):
                        found[item.id] = _Binding("other", statement.lineno)
    return found


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements, and those in top-level ``if``/``try`` blocks (optional imports)."""
    found: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        statement = pending.pop(0)
        if isinstance(statement, ast.If):
            pending[:0] = [*statement.body, *statement.orelse]
        elif isinstance(statement, ast.Try):
            pending[:0] = [*statement.body, *(s for h in statement.handlers for s in h.body),
                           *statement.orelse, *statement.finalbody]
        else:
            found.append(statement)
    return found


def ast_imports(statements: list[ast.stmt]) -> dict[str, tuple[int, str]]:
    """Local name -> (level, dotted name) of the module's imports."""
    found: dict[str, tuple[int, str]] = {}
    for statement in statements:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    found[alias.asname] = (0, alias.name)
                else:
                    head = alias.name.split(".")[0]
                    found[head] = (0, head)
        elif isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                if alias.name != "*":
                    module = statement.module or ""
                    found[alias.asname or alias.name] = (
                        statement.level, ".".join(p for p in (module, alias.name) if p))
    return found


def dotted_name(expr: ast.expr) -> str | None:
    """``nn.Module`` for that expression (``Generic[T]`` -> ``Generic``), else None."""
    if isinstance(expr, ast.Subscript):     # Generic[T], nn.ModuleList[...]
        return dotted_name(expr.value)
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = dotted_name(expr.value)
        return f"{base}.{expr.attr}" if base else None
    return None


def _class_is_module(path: Path, summary: _Summary, cls: _Binding, depth: int,
                     seen: frozenset[tuple[Path, str]]) -> bool | None:
    """Whether a class is an ``nn.Module``: True when a base is one, False when every base is
    shown not to be (none, ``object``, the standard library, a class of the tree that is not),
    None when a base cannot be followed (an installed package other than torch)."""
    verdicts: list[bool | None] = []
    for dotted in cls.bases:
        if dotted is None:
            verdicts.append(None)
            continue
        head, _, rest = dotted.partition(".")
        local = summary.bindings.get(head)
        if not rest and local is not None and local.kind == "class":
            verdicts.append(_class_is_module(path, summary, local, depth + 1,
                                             seen | {(path, head)})
                            if (path, head) not in seen and depth <= _MAX_DEPTH else None)
        elif head in summary.imports:
            level, target = summary.imports[head]
            full = ".".join(p for p in (target, rest) if p)
            verdicts.append(_imported_is_module(path, full, level, depth, seen))
        else:
            verdicts.append(False if is_standard_library(dotted) else None)
        if verdicts[-1]:
            return True
    return False if all(v is False for v in verdicts) else None


def _imported_is_module(path: Path, full: str, level: int, depth: int,
                        seen: frozenset[tuple[Path, str]]) -> bool | None:
    if not level and full.split(".")[0] == "torch":
        return full.startswith("torch.nn.")
    found = _followed(path, full, level, depth, seen)
    if found.kind == "class":
        return found.module
    if found.kind == "external":
        if found.external.split(".")[0] == "torch":
            return found.external.startswith("torch.nn.")
        return False if is_standard_library(found.external) else None
    return None
