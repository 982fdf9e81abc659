"""``tsfix apply --interactive``: review each hunk the way ``git add -p`` does.

The run itself is a dry run (every rewrite validated as usual). Then, file by file, each hunk of
the diff is shown under a header naming the class it falls in, the rules that changed that
class and their verdict, and the user answers:

    y  apply this hunk             n  skip this hunk
    a  apply this and every later hunk of the file
    d  skip this and every later hunk of the file
    q  quit: skip this hunk and everything after it
    ?  help

Nothing is written for a file until all its hunks are decided; the file is then written once,
atomically, with the accepted hunks (:func:`~tsfix.codemods.pipeline.sources.write_source`).
Accepting only some hunks of a class gives code no validation has seen: the file is still
checked to parse (otherwise it is left unwritten, with a message), and the summary says which
files were partly accepted.

Hunks depend on each other through names: a lifted signature uses the ``Optional`` that the
import hunk brings. A change to import statements is therefore always a hunk of its own, and
a declined import hunk comes along (the line says so) when an accepted hunk reads a name that
only it binds; a name only a declined hunk of other code binds makes the file's accept
refused, since writing it would give a module that fails on import.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import re
import symtable
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
from tsfix.codemods.pipeline.report import (
    ClassResult,
    FileResult,
    Interrupted,
    RunResult,
    printable,
)
from tsfix.codemods.pipeline.sources import (
    SourceError,
    SourceText,
    WriteError,
    interrupts_deferred,
    read_source,
    write_source,
)

CONTEXT_LINES = 3
HELP = """\
y - apply this hunk
n - do not apply this hunk
a - apply this hunk and all later hunks in the file
d - do not apply this hunk or any of the later hunks in the file
q - quit; do not apply this hunk or any of the remaining ones
? - print help"""


@dataclass
class Hunk:
    """Lines ``old_start:old_end`` of the original (0-based, end exclusive) become
    ``new_start:new_end`` of the rewrite; ``text`` shows them with context lines around."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int
    text: str                    # the hunk as a unified diff fragment, header included
    imports_only: bool = False   # it only adds or changes import statements


def hunks_of(original: str, new: str) -> list[Hunk]:
    """The changes from ``original`` to ``new`` as ``git add -p`` would show them, except
    that a change to import statements is a hunk of its own even where it lies within a few
    lines of another change: it comes along by itself when an accepted hunk needs it."""
    old_lines = original.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    old_imports, new_imports = _import_lines(original), _import_lines(new)
    groups: list[tuple[str, list[tuple[int, int, int, int]]]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        kind = _kind(old_lines, i1, i2, old_imports, new_lines, j1, j2, new_imports)
        if groups:
            last_kind, last = groups[-1]
            near = i1 - last[-1][1] <= 2 * CONTEXT_LINES
            if near and (kind == last_kind or "blank" in (kind, last_kind)):
                last.append((i1, i2, j1, j2))
                if last_kind == "blank":
                    groups[-1] = (kind, last)
                continue
        groups.append((kind, [(i1, i2, j1, j2)]))
    return [_hunk(ops, kind == "imports", old_lines, new_lines) for kind, ops in groups]


def _import_lines(text: str) -> set[int] | None:
    """0-based lines of the module-level import statements (None: ``text`` does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return {line for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)
            for line in range(node.lineno - 1, node.end_lineno or node.lineno)}


def _kind(old_lines: list[str], i1: int, i2: int, old_imports: set[int] | None,
          new_lines: list[str], j1: int, j2: int, new_imports: set[int] | None) -> str:
    """"imports", "blank" (blank lines only) or "code": what one change touches."""
    touched = [(i, old_lines[i], old_imports) for i in range(i1, i2)] + \
        [(j, new_lines[j], new_imports) for j in range(j1, j2)]
    written = [(i, imports) for i, line, imports in touched if line.strip()]
    if not written:
        return "blank"
    if all(imports is not None and i in imports for i, imports in written):
        return "imports"
    return "code"


def _hunk(ops: list[tuple[int, int, int, int]], imports_only: bool, old_lines: list[str],
          new_lines: list[str]) -> Hunk:
    old_start, new_start = ops[0][0], ops[0][2]
    old_end, new_end = ops[-1][1], ops[-1][3]
    before = min(CONTEXT_LINES, old_start)
    after = min(CONTEXT_LINES, len(old_lines) - old_end)
    lines = [" " + line for line in old_lines[old_start - before:old_start]]
    position = old_start
    for i1, i2, j1, j2 in ops:
        lines += [" " + line for line in old_lines[position:i1]]
        lines += ["-" + line for line in old_lines[i1:i2]]
        lines += ["+" + line for line in new_lines[j1:j2]]
        position = i2
    lines += [" " + line for line in old_lines[old_end:old_end + after]]
    old_count = old_end - old_start + before + after
    new_count = new_end - new_start + before + after
    header = (f"@@ -{old_start - before + 1},{old_count} "
              f"+{new_start - before + 1},{new_count} @@\n")
    text = header + "".join(line if line.endswith("\n")
                            else line + "\n\\ No newline at end of file\n" for line in lines)
    return Hunk(old_start, old_end, new_start, new_end, text, imports_only)


def apply_hunks(original: str, new: str, hunks: list[Hunk], accepted: list[bool]) -> str:
    """The original with the accepted hunks' changes applied."""
    old_lines = original.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    out: list[str] = []
    position = 0
    for hunk, take in zip(hunks, accepted, strict=True):
        out += old_lines[position:hunk.old_start]
        out += new_lines[hunk.new_start:hunk.new_end] if take else \
            old_lines[hunk.old_start:hunk.old_end]
        position = hunk.old_end
    out += old_lines[position:]
    return "".join(out)


def classes_of(hunk: Hunk, file: FileResult) -> list[ClassResult]:
    """The class rewrites whose original lines overlap the hunk's."""
    first, last = hunk.old_start + 1, max(hunk.old_end, hunk.old_start + 1)
    return [c for c in file.classes if c.lines[0] <= last and first <= c.lines[1]]


def header_of(hunk: Hunk, file: FileResult) -> str:
    classes = classes_of(hunk, file)
    if not classes:
        return "(imports the rewrites below need)"
    parts = []
    for name in dict.fromkeys(c.class_name for c in classes):
        group = [c for c in classes if c.class_name == name]
        rules = ", ".join(c.rule for c in group)
        verdicts = ", ".join(dict.fromkeys(c.verdict for c in group))
        parts.append(f"{name} [{rules}] {verdicts}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Review:
    """What a review did: one line per file saying what happened, and the files written."""

    lines: list[str] = field(default_factory=list)
    written: frozenset[Path] = frozenset()


def review(result: RunResult, ask: Callable[[str], str]) -> Review:
    """Ask about every hunk of every changed file and write what was accepted. ``ask`` shows a
    prompt and returns the answer. Ctrl-C raises :class:`Interrupted` naming the files
    written before it."""
    outcome: list[str] = []
    written: dict[Path, str] = {}
    try:
        _review_files(result, ask, outcome, written)
    except KeyboardInterrupt:
        raise Interrupted(list(written.values())) from None
    return Review(outcome, frozenset(written))


def _review_files(result: RunResult, ask: Callable[[str], str], outcome: list[str],
                  written: dict[Path, str]) -> None:
    """:func:`review`'s work: each line of what happened to ``outcome``, each file written to
    ``written`` (its path and display), as it happens."""
    quit_all = False
    for file in result.files:
        if file.status != "changed" or file.new_text is None:
            continue
        try:
            source = read_source(file.path)
        except SourceError as exc:
            outcome.append(f"error: {exc}")
            continue
        hunks = hunks_of(source.text, file.new_text)
        accepted: list[bool] = []
        rest: bool | None = False if quit_all else None
        for index, hunk in enumerate(hunks):
            if rest is not None:
                accepted.append(rest)
                continue
            click.echo(click.style(f"--- {printable(file.display)}  ({index + 1}/{len(hunks)}) "
                                   f"{header_of(hunk, file)}", bold=True))
            click.echo(_coloured(hunk.text), nl=False)
            while True:
                answer = ask("Apply this hunk [y,n,a,d,q,?]? ").strip().lower()[:1]
                if answer in ("y", "n", "a", "d", "q"):
                    break
                click.echo(HELP)
            accepted.append(answer in ("y", "a"))
            if answer in ("a", "d"):
                rest = answer == "a"
            elif answer == "q":
                rest, quit_all = False, True
        with interrupts_deferred():
            line, wrote = _write(file, hunks, accepted, source)
            outcome.append(line)
            if wrote:
                written[file.path] = file.display


def _write(file: FileResult, hunks: list[Hunk], accepted: list[bool],
           source: SourceText) -> tuple[str, bool]:
    """Write the accepted hunks, with the import hunks they need; returns what happened and
    whether the file was written."""
    if not any(accepted):
        return f"kept {file.display} unchanged", False
    new = file.new_text or ""
    completed = _with_dependencies(source.text, new, hunks, accepted)
    if isinstance(completed, str):
        return f"error: {file.display}: {completed}; nothing written (accept both, or neither)", \
            False
    accepted, came_along = completed
    text = apply_hunks(source.text, new, hunks, accepted)
    partly = not all(accepted)
    if partly:
        try:
            ast.parse(text)
        except SyntaxError as exc:
            return (f"error: {file.display}: the accepted hunks alone do not parse (line "
                    f"{exc.lineno}: {exc.msg}); nothing written"), False
    try:
        write_source(file.path, text, source)
    except WriteError as exc:
        return f"error: {file.display}: cannot write: {exc}", False
    line = f"rewrote {file.display}"
    if partly or came_along:
        line += f" with {sum(accepted)} of {len(hunks)} hunks"
    if partly:
        line += " (a partial rewrite is not validated)"
    for index, names in came_along.items():
        line += (f"; hunk {index + 1}/{len(hunks)} came along: it imports "
                 f"{', '.join(names)}, which the accepted hunks use")
    return line, True


def _with_dependencies(original: str, new: str, hunks: list[Hunk], accepted: list[bool]
                       ) -> tuple[list[bool], dict[int, list[str]]] | str:
    """``accepted`` with every declined import hunk that the accepted hunks need (a name they
    use that only it binds, such as ``Optional`` in a lifted signature): the accepted hunks
    and, by hunk index, the names each added hunk brought. A name only a declined hunk of
    other code binds cannot come along alone: then why the accept is refused."""
    names_before, names_after = _unresolved(original), _unresolved(new)
    if names_before is None or names_after is None:
        return accepted, {}
    bindings = _module_bindings(new)
    accepted = list(accepted)
    came_along: dict[int, list[str]] = {}
    for _ in range(len(hunks)):
        text = apply_hunks(original, new, hunks, accepted)
        unresolved = _unresolved(text)
        if unresolved is None:
            break               # does not parse: the caller says so
        missing = sorted(unresolved - names_before - names_after)
        if not missing:
            break
        for name in missing:
            providers = [k for k, hunk in enumerate(hunks) if not accepted[k] and any(
                first < hunk.new_end and hunk.new_start <= last
                for first, last in bindings.get(name, ()))]
            imports = [k for k in providers if hunks[k].imports_only]
            if imports:
                accepted[imports[0]] = True
                came_along.setdefault(imports[0], []).append(name)
            elif providers:
                return (f"the accepted hunks use {name}, which declined hunk "
                        f"{providers[0] + 1}/{len(hunks)} defines")
            else:
                return f"the accepted hunks use {name}, which only the declined hunks define"
    return accepted, came_along


# Names every module has without binding them.
_MODULE_NAMES = frozenset({"__name__", "__file__", "__doc__", "__spec__", "__loader__",
                           "__package__", "__path__", "__builtins__", "__annotations__",
                           "__cached__", "__dict__"})


def _unresolved(text: str) -> set[str] | None:
    """Names ``text`` reads as globals (in any scope) that it does not bind at module level
    and that are not builtins; None when it does not parse or star-imports (unknowable)."""
    try:
        table = symtable.symtable(text, "<review>", "exec")
    except (SyntaxError, ValueError, RecursionError):
        return None
    if re.search(r"^\s*from\s+\S+\s+import\s+\*", text, re.MULTILINE):
        return None
    bound: set[str] = set()
    used: set[str] = set()
    for symbol in table.get_symbols():
        if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
            bound.add(symbol.get_name())
        elif symbol.is_referenced():
            used.add(symbol.get_name())
    scopes = list(table.get_children())
    while scopes:
        scope = scopes.pop()
        scopes.extend(scope.get_children())
        for symbol in scope.get_symbols():
            if not symbol.is_global():
                continue
            if symbol.is_declared_global() and symbol.is_assigned():
                bound.add(symbol.get_name())
            elif symbol.is_referenced():
                used.add(symbol.get_name())
    return used - bound - set(dir(builtins)) - _MODULE_NAMES


def _module_bindings(text: str) -> dict[str, list[tuple[int, int]]]:
    """Name -> 0-based first and last lines of each module-level statement binding it
    (imports, defs, classes, assignments; also under a top-level if/try/with)."""
    found: dict[str, list[tuple[int, int]]] = {}
    try:
        statements: list[ast.stmt] = list(ast.parse(text).body)
    except (SyntaxError, ValueError, RecursionError):
        return found
    while statements:
        node = statements.pop()
        names: list[str] = []
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for field_name in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field_name, []):
                    statements.extend(child.body if isinstance(child, ast.ExceptHandler)
                                      else [child])
        for name in names:
            found.setdefault(name, []).append((node.lineno - 1,
                                               (node.end_lineno or node.lineno) - 1))
    return found


def _coloured(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        colour = ("green" if line.startswith("+") else "red" if line.startswith("-")
                  else "cyan" if line.startswith("@@") else None)
        lines.append(click.style(line, fg=colour) if colour else line)
    return "".join(lines)
