"""The pure rewrite step: source text in, rewritten text and per-class records out.

Parse once with LibCST, run the selected rules in order, format only the touched line ranges
with black, and check that the result still parses. No I/O and no torch, so it can run in any
worker process.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import black
import libcst as cst
from libcst.codemod import CodemodContext
from tsfix.codemods.rule import ClassChange, Observations, Rule, Skip


class RewriteError(Exception):
    """The source cannot be rewritten (it does not parse); the message has path and line."""


@dataclass
class Rewrite:
    text: str
    changes: list[ClassChange] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def parse(text: str, path: str) -> cst.Module:
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        # The native parser's own "error at L:C" is exact; its raw/editor positions can point
        # one token further.
        where = re.search(r"error at (\d+):(\d+)", exc.message)
        line, column = (where.group(1), where.group(2)) if where else (exc.editor_line,
                                                                      exc.editor_column)
        message = re.sub(r"^parser error: error at \d+:\d+: ", "", exc.message)
        raise RewriteError(f"{path}:{line}:{column}: cannot parse: {message}") from exc


def rewrite_source(text: str, path: str, rules: Sequence[type[Rule]], *, line_length: int = 88,
                   skip_classes: Mapping[str, frozenset[str]] | None = None,
                   unsafe_fixes: bool = False, observed: Observations | None = None) -> Rewrite:
    """Run ``rules`` over ``text``. ``skip_classes`` maps a rule name to classes it must leave
    alone (their earlier rewrite was rejected by validation); ``observed`` holds the argument
    types seen in the eager example runs of the original file."""
    module = parse(text, path)
    result = Rewrite(text)
    for rule_class in rules:
        rule = rule_class(CodemodContext(filename=path),
                          (skip_classes or {}).get(rule_class.name, frozenset()),
                          unsafe_fixes=unsafe_fixes, observed=observed)
        # Rules never add or remove top-level classes, so every rule can place its classes by
        # the original text: reported lines then refer to the file as the user has it.
        rule.source_text = text
        module = rule.transform_module(module)
        result.changes.extend(rule.changes)
        result.skips.extend(rule.skips)
    if not result.changes:
        return result
    new_text = format_touched_lines(text, module.code, line_length,
                                    four_space_indent=module.default_indent == "    "
                                    and "\r" not in text)
    # Safety net in black's spirit: never hand back text that does not parse.
    try:
        cst.parse_module(new_text)
    except cst.ParserSyntaxError as exc:
        raise RewriteError(f"{path}: internal error: the rewritten source does not parse "
                           f"({exc.message} at line {exc.raw_line}); nothing was changed. "
                           "Please report this with the file.") from exc
    result.text = new_text
    return result


def touched_line_ranges(old: str, new: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of ``new`` that differ from ``old``."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    ranges = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        start, end = j1 + 1, max(j2, j1 + 1)
        ranges.append((start, min(end, max(len(new_lines), 1))))
    return ranges


def format_touched_lines(old: str, new: str, line_length: int, *,
                         four_space_indent: bool = True) -> str:
    """black on the lines the rules changed; everything else stays byte-identical.

    Files indented other than with four spaces are left as LibCST wrote them (LibCST follows
    the file's own indentation; black would mix styles)."""
    ranges = touched_line_ranges(old, new)
    if not ranges or not four_space_indent:
        return new
    try:
        formatted = black.format_str(new, mode=black.Mode(line_length=line_length), lines=ranges)
    except Exception:
        return new
    # black may still change lines outside the ranges (it adds a blank line between a class
    # line and a def whose signature it reformats, and drops blank lines at the top of a
    # file): keep only its edits that touch a range.
    formatted = _edits_within(new, formatted, ranges)
    if not _kept_lines(old, new) <= _kept_lines(old, formatted):
        return new
    return formatted


def _edits_within(new: str, formatted: str, ranges: list[tuple[int, int]]) -> str:
    """``new`` with those of black's edits (``new`` -> ``formatted``) that overlap ``ranges``."""
    new_lines = new.splitlines(keepends=True)
    formatted_lines = formatted.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, new_lines, formatted_lines, autojunk=False)
    out: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        # 1-based lines of new that this edit replaces; an insertion touches the lines on
        # both sides of it.
        first, last = (i1 + 1, i2) if i2 > i1 else (i1, i1 + 1)
        inside = any(first <= end and start <= last for start, end in ranges)
        if tag == "equal" or not inside:
            out.extend(new_lines[i1:i2])
        else:
            out.extend(formatted_lines[j1:j2])
    return "".join(out)


def _kept_lines(old: str, new: str) -> set[int]:
    """Indices of ``old``'s lines that survive unchanged in ``new``."""
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    return {block.a + i for block in matcher.get_matching_blocks() for i in range(block.size)}


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))
