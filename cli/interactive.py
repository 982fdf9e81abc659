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
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
from tsfix.codemods.pipeline.report import ClassResult, FileResult, RunResult
from tsfix.codemods.pipeline.sources import (
    SourceError,
    SourceText,
    WriteError,
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
    ``new_start:new_end`` of the rewrite."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int
    text: str                    # the hunk as a unified diff fragment, header included


def hunks_of(original: str, new: str) -> list[Hunk]:
    old_lines = original.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    found = []
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        first, last = group[0], group[-1]
        i1, i2, j1, j2 = first[1], last[2], first[3], last[4]
        lines = [f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@\n"]
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [" " + line for line in old_lines[a1:a2]]
                continue
            lines += ["-" + line for line in old_lines[a1:a2]]
            lines += ["+" + line for line in new_lines[b1:b2]]
        text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                       for line in lines)
        found.append(Hunk(i1, i2, j1, j2, text))
    return found


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
    prompt and returns the answer."""
    outcome: list[str] = []
    written: set[Path] = set()
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
            click.echo(click.style(f"--- {file.display}  ({index + 1}/{len(hunks)}) "
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
        line, wrote = _write(file, hunks, accepted, source)
        outcome.append(line)
        if wrote:
            written.add(file.path)
    return Review(outcome, frozenset(written))


def _write(file: FileResult, hunks: list[Hunk], accepted: list[bool],
           source: SourceText) -> tuple[str, bool]:
    """Write the accepted hunks; returns what happened and whether the file was written."""
    if not any(accepted):
        return f"kept {file.display} unchanged", False
    text = apply_hunks(source.text, file.new_text or "", hunks, accepted)
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
    if partly:
        return (f"rewrote {file.display} with {sum(accepted)} of {len(hunks)} hunks "
                "(a partial rewrite is not validated)"), True
    return f"rewrote {file.display}", True


def _coloured(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        colour = ("green" if line.startswith("+") else "red" if line.startswith("-")
                  else "cyan" if line.startswith("@@") else None)
        lines.append(click.style(line, fg=colour) if colour else line)
    return "".join(lines)
