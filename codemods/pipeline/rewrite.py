"""The pure rewrite step: source text in, rewritten text and per-class records out.

Parse once with LibCST, run the selected rules in order, format only the touched line ranges
with black, and check that the result still parses. No I/O and no torch, so it can run in any
worker process.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import difflib
import gc
import json
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import black
import libcst as cst
from libcst.codemod import CodemodContext
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.scope import file_scope
from tsfix.codemods.pipeline.safety import safe_classes
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.base import ClassChange, Fix, Rule, Skip


class RewriteError(Exception):
    """The source cannot be rewritten (it does not parse); the message has path and line."""


@dataclass
class Rewrite:
    text: str
    changes: list[ClassChange] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    # Every site the rules rewrote (what `tsfix check` reports as fixable).
    fixes: list[Fix] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


# The last texts parsed, with their modules (LibCST's trees are immutable: a rewrite builds
# a new one). A run rewrites the same text again and again after the first time: once per
# rule-drop trial, final text and repair round (the repair loop parsed ParityBench's
# 6,000-line mega_pytorch file once per model stopping in it: 0.8 s and 117 MB each time).
# Two are kept: memory, not speed, bounds it. benchmarks/rewrite_speed.py forgets them between
# its rounds (a run parses a file once in its rewrite phase).
PARSED: collections.OrderedDict[str, cst.Module] = collections.OrderedDict()
PARSED_KEPT = 2


def parse(text: str, path: str) -> cst.Module:
    module = PARSED.get(text)
    if module is not None:
        PARSED.move_to_end(text)
        return module
    module = _parse(text, path)
    PARSED[text] = module
    while len(PARSED) > PARSED_KEPT:
        PARSED.popitem(last=False)
    return module


def _parse(text: str, path: str) -> cst.Module:
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        # CPython's parser says where a human would look (the line of a missing colon, the
        # bracket never closed) and how; LibCST points at the token where it gave up, often
        # a line later. LibCST's own words only for what CPython accepts (newer syntax).
        problem = python_syntax_error(text, path)
        if problem is not None:
            raise RewriteError(problem) from exc
        where = re.search(r"error at (\d+):(\d+)", exc.message)
        line, column = (where.group(1), where.group(2)) if where else (exc.editor_line,
                                                                      exc.editor_column)
        message = re.sub(r"^parser error: error at \d+:\d+: ", "", exc.message)
        raise RewriteError(f"{path}:{line}:{column}: cannot parse: {message}") from exc


def python_syntax_error(text: str, path: str) -> str | None:
    """``path:line:column: cannot parse: message`` as CPython's parser reports it, or None
    when ``text`` parses. Costs a tenth of a LibCST parse: cheap enough for files that no rule
    looks at, which must still be valid Python."""
    nul = text.find("\0")
    if nul >= 0:        # CPython says only "source code string cannot contain null bytes"
        line = text.count("\n", 0, nul) + 1
        column = nul - text.rfind("\n", 0, nul)
        return f"{path}:{line}:{column}: cannot parse: a null byte (\\0) in the source"
    try:
        _python_parse(text, path)
    except SyntaxError as exc:
        return f"{path}:{exc.lineno or 1}:{exc.offset or 1}: cannot parse: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:   # deep nesting
        return f"{path}:1:1: cannot parse: {exc}"
    return None


def rewrite_source(text: str, settings: RewriteSettings, file: FileContext | str = "<string>"
                   ) -> Rewrite:
    """Run ``settings.rules`` over ``text`` (``file``: what is known about it, or just its
    path)."""
    if isinstance(file, str):
        file = FileContext(file)
    with file_scope(), _collector_paused():
        return _rewrite(text, settings, file)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """CPython's cycle collector paused for one file's rewrite. ``ast`` and LibCST build
    trees of many thousand objects, and every few hundred allocations the collector walks
    the young ones, and now and then the whole growing heap: measured on torch.nn, it makes
    ``ast.parse`` twice as slow and the rewrite phase 10-15%. Nothing a rewrite builds is
    cyclic garbage that must go before the file is done; what it leaves is collected after,
    as usual."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass(frozen=True)
class _Step:
    """The rewrite after one rule: that rule's skipped classes, the module, the text the
    prefilter read (None: no prefilter), whether that text is the module's, and the changes,
    skips and fixes of the rules so far."""

    skip: frozenset[str]
    module: cst.Module
    text: str | None
    text_is_module: bool
    changes: tuple[ClassChange, ...]
    skips: tuple[Skip, ...]
    fixes: tuple[Fix, ...]


# The steps of the last rewrites of a run (RewriteSettings.run), by what decides them (the
# text, path, settings, observed types and compiled functions): a rewrite of the same file
# whose rules skip the same classes up to some rule starts after it. A rule-drop trial or a
# final text leaves one rule out for one class, and every rule before it did the same work
# as in the first rewrite (ParityBench: trials of mega_pytorch dropping annotate, 26th of 27
# rules, each took the whole 4.5 s).
# Each with the module parsed from the text (rules place classes by its very nodes) and the
# steps of up to RUNS_KEPT rewrites, the first (the file's own rewrite, which later trials
# share the most with) always among them; runs share the steps of their common prefix.
STEPS: collections.OrderedDict[tuple[object, ...], tuple[cst.Module, list[list[_Step]]]] = (
    collections.OrderedDict())
STEPS_KEPT = 2
RUNS_KEPT = 8


def _steps_key(text: str, settings: RewriteSettings, context: FileContext
               ) -> tuple[object, ...]:
    return (text, context.path, settings, json.dumps(context.observed, sort_keys=True),
            frozenset(context.compiled_functions))


def _step(skip: frozenset[str], module: cst.Module, file: AstFile | None,
          generated: cst.Module | None, result: Rewrite) -> _Step:
    return _Step(skip, module, file.text if file is not None else None, generated is module,
                 tuple(result.changes), tuple(result.skips), tuple(result.fixes))


def _rewrite(text: str, settings: RewriteSettings, context: FileContext) -> Rewrite:
    rules, path = settings.rules, context.path
    compiled_functions = context.compiled_functions
    # The prefilter reads what this file's own classes compile: a function compiled from
    # another file is not among it, so then every rule runs.
    file = AstFile(text) if not compiled_functions else None
    # Each rule's answer for the text as it is so far (asked again after a rule changes it).
    answers: dict[type[Rule], bool] = {}
    key = _steps_key(text, settings, context) if settings.run else None
    parsed, runs = STEPS.pop(key, (None, [])) if key is not None else (None, [])
    skips = [context.skip_classes.get(rule.name, frozenset()) for rule in rules]
    start, steps = 0, []
    for known in runs:
        shared = 0
        while shared < len(known) and known[shared].skip == skips[shared]:
            shared += 1
        if shared > start:
            start, steps = shared, known[:shared]

    def may_apply(rule: type[Rule]) -> bool:
        assert file is not None
        if rule not in answers:
            answers[rule] = rule.may_apply(file)
        return answers[rule]

    module = parsed if steps else context.module
    if module is None:
        if (file is not None and file.tree is not None
                and not any(may_apply(rule) for rule in rules)):
            return Rewrite(text)        # nothing any rule looks at: no LibCST parse
        module = parse(text, path)
    if key is not None:
        runs = runs if module is parsed else []
        runs = [*runs[:1], *runs[1:][-(RUNS_KEPT - 2):], steps] if runs else [steps]
        STEPS[key] = (module, runs)
        while len(STEPS) > STEPS_KEPT:
            STEPS.popitem(last=False)
    original_classes = [s for s in module.body if isinstance(s, cst.ClassDef)]
    generated: cst.Module | None = None
    result = Rewrite(text)
    codegen = _StatementCode()
    if steps:
        last = steps[-1]
        module = last.module
        if last.text is not None and last.text != text:
            file = AstFile(last.text)
        generated = module if last.text_is_module else None
        result.changes, result.skips, result.fixes = (
            list(last.changes), list(last.skips), list(last.fixes))
    for rule_class, skip in list(zip(rules, skips, strict=True))[start:]:
        # Only the rules that may apply traverse the module (a rule costs a full LibCST
        # traversal, most rules apply to few files). An earlier rule's rewrite may bring in
        # what a later rule looks at (lambda-inline writes a nested def), so the prefilter
        # looks again at the text as rewritten so far.
        if file is not None and not may_apply(rule_class):
            steps.append(_step(skip, module, file, generated, result))
            continue
        rule = rule_class(CodemodContext(filename=path), skip,
                          unsafe_fixes=settings.unsafe_fixes, observed=context.observed,
                          compiled_functions=compiled_functions)
        # Rules never add or remove top-level classes, so every rule can place its classes by
        # the original text: reported lines then refer to the file as the user has it.
        rule.source_text = text
        rule.original_classes = original_classes
        rule.ast_file = file
        before, before_text = module, file.text if file is not None else None
        module = rule.transform_module(module)
        # The prefilter reads the text again for the rules after this one; after the last
        # one, only the new text needs the code (`tsfix check` runs one rule at a time, and
        # wants no text: on a 6,000-line file a codegen is 0.4 s).
        if file is not None and rule.changes and rule_class is not rules[-1]:
            file, generated = AstFile(codegen.of(module)), module
            answers.clear()
        if rule.changes and settings.output:
            after = (file.text if file is not None and generated is module
                     else codegen.of(module))
            safe = safe_classes(codegen.of(before) if before_text is None else before_text, after,
                                {c.class_name for c in rule.changes})
            for change in rule.changes:
                change.safe = change.class_name in safe
        result.changes.extend(rule.changes)
        result.skips.extend(rule.skips)
        result.fixes.extend(rule.fixes)
        steps.append(_step(skip, module, file, generated, result))
    if not result.changes or not settings.output:
        return result
    # The text of the last rewrite the prefilter read is the module's when no rule changed it
    # since: one codegen of the whole module fewer.
    code = file.text if file is not None and generated is module else codegen.of(module)
    new_text = format_touched_lines(text, code, settings.line_length,
                                    four_space_indent=module.default_indent == "    "
                                    and "\r" not in text)
    _check_parses(new_text, text, path)
    result.text = new_text
    return result


class _StatementCode:
    """A module's code from its top-level statements' code, each generated once per node: a
    rule rebuilds the classes it changes and leaves every other statement the very node it
    was, and generating a large module after each rule that changed it was a third of its
    rewrite (ParityBench's 6,000-line mega_pytorch: 0.7 s a time, eight times). The same
    text as ``Module.code``: a module's codegen is its header's, body's and footer's in turn,
    each from the module's indent and newline alone."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, str, str], tuple[cst.CSTNode, str]] = {}

    def of(self, module: cst.Module) -> str:
        if not module.has_trailing_newline:
            return module.code      # the last newline is dropped from the tokens: LibCST's
        parts = []
        for node in (*module.header, *module.body, *module.footer):
            key = (id(node), module.default_indent, module.default_newline)
            known = self._known.get(key)
            if known is None or known[0] is not node:
                known = self._known[key] = (node, module.code_for_node(node))
            parts.append(known[1])
        return "".join(parts) or module.default_newline


def _check_parses(new_text: str, old_text: str, path: str) -> None:
    """Safety net in black's spirit: never hand back text that does not parse.

    CPython's own parser is the judge that matters, at a tenth of LibCST's parse time; for a
    file that this Python cannot parse even before the rewrite (newer syntax that LibCST
    knows), LibCST judges."""
    try:
        _python_parse(new_text, path)
        return
    except (SyntaxError, ValueError) as exc:
        problem = f"{exc}"
    try:
        _python_parse(old_text, path)
    except (SyntaxError, ValueError):
        try:
            cst.parse_module(new_text)
            return
        except cst.ParserSyntaxError as exc:
            problem = f"{exc.message} at line {exc.raw_line}"
    raise RewriteError(f"{path}: internal error: the rewritten source does not parse "
                       f"({problem}); nothing was changed. Please report this with the file.")


def _python_parse(text: str, path: str) -> None:
    with warnings.catch_warnings():     # the file's own invalid escapes are not ours to report
        warnings.simplefilter("ignore")
        ast.parse(text, filename=path)


def _opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes for two line lists, with their common head and tail matched first:
    a rewrite changes a few lines of a long file, and SequenceMatcher's cost grows with the
    length of what it is given, not with the size of the change."""
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    middle = difflib.SequenceMatcher(None, a[head:len(a) - tail], b[head:len(b) - tail],
                                     autojunk=False).get_opcodes()
    ops: list[tuple[str, int, int, int, int]] = []
    if head:
        ops.append(("equal", 0, head, 0, head))
    ops.extend((tag, i1 + head, i2 + head, j1 + head, j2 + head)
               for tag, i1, i2, j1, j2 in middle
               if not (tag == "equal" and i1 == i2))
    if tail:
        ops.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return ops


def touched_line_ranges(old: str, new: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of ``new`` that differ from ``old``."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    ranges = []
    for tag, _, _, j1, j2 in _opcodes(old_lines, new_lines):
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
    formatted = _black_on_touched_statements(new, ranges, black.Mode(line_length=line_length))
    if formatted is None:
        return new
    # black may still change lines outside the ranges (it adds a blank line between a class
    # line and a def whose signature it reformats, and drops blank lines at the top of a
    # file): keep only its edits that touch a range.
    formatted = _edits_within(new, formatted, ranges)
    if not _kept_lines(old, new) <= _kept_lines(old, formatted):
        return new
    return formatted


def _black_on_touched_statements(text: str, ranges: list[tuple[int, int]],
                                 mode: black.Mode) -> str | None:
    """black (with ``lines=``) on each statement that holds a touched range, alone.

    black parses the whole input even when asked for a few lines, with a pure-Python parser:
    on a large file that is most of a rewrite's cost. A top-level statement is valid source on
    its own, and so is a statement of a class body under a stand-in ``class _:`` line, so each
    touched one is formatted by itself and put back in place. Returns None when black fails on
    the whole file."""
    if "fmt:" in text:
        # A `# fmt: off` above a statement would not be seen by black from inside it.
        return _black_whole(text, ranges, mode)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return _black_whole(text, ranges, mode)
    lines = text.splitlines(keepends=True)
    units = [unit for node in tree.body for unit in _formatting_units(node, ranges)]
    # Bottom up, so that earlier statements keep their line numbers while later ones change.
    for start, end, header in reversed(units):
        above = header.count("\n")
        inside = [(max(a, start) - start + 1 + above, min(b, end) - start + 1 + above)
                  for a, b in ranges if a <= end and start <= b]
        if not inside:
            continue
        chunk = header + "".join(lines[start - 1:end])
        if not chunk.endswith("\n"):
            chunk += "\n"
        formatted = _black_whole(chunk, inside, mode)
        if formatted is None or not formatted.startswith(header):
            continue
        formatted = formatted[len(header):]
        if header:
            # black puts a blank line between a class line and a first method whose def line
            # it formats; the stand-in lines are not in the file, nor is that blank line.
            formatted = formatted.lstrip("\n")
        if not lines[end - 1].endswith(("\n", "\r")):
            formatted = formatted.rstrip("\n")
        lines[start - 1:end] = formatted.splitlines(keepends=True)
    return "".join(lines)


_CLASS_BODY_HEADER = "class _:\n"
_METHOD_BODY_HEADER = "class _:\n    def _():\n"


def _formatting_units(node: ast.stmt,
                      ranges: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """(first line, last line, stand-in header) of the pieces of ``node`` to format alone:
    the statements of a class body when every touched line of the class lies in one of them,
    and of those, a method's body statements when every touched line of the method lies in
    one of them; else ``node`` whole."""
    whole = [(_first_line(node), node.end_lineno or node.lineno, "")]
    if not isinstance(node, ast.ClassDef) or any(item.col_offset != len("    ")
                                                 for item in node.body):
        return whole
    items = [(_first_line(item), item.end_lineno or item.lineno, _CLASS_BODY_HEADER)
             for item in node.body]
    if not _each_within(ranges, whole, items):
        return whole
    units = []
    for item, unit in zip(node.body, items, strict=True):
        pieces = (_method_body_pieces(item, ranges)
                  if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) else None)
        units.extend(pieces if pieces is not None else [unit])
    return units


def _method_body_pieces(method: ast.FunctionDef | ast.AsyncFunctionDef,
                        ranges: list[tuple[int, int]]) -> list[tuple[int, int, str]] | None:
    """Pieces of a method's body to format alone under a stand-in class and def line, or None
    when the method is formatted whole. Each piece is a run of touched statements with the
    statement before it: black sets the blank lines above a statement by the one before it,
    so that one comes along, untouched. The first statement and string statements (alone
    under the stand-in def, one would become its docstring) keep the method whole."""
    body = method.body
    if any(s.col_offset != len("        ") for s in body):
        return None
    spans = [(_first_line(s), s.end_lineno or s.lineno) for s in body]
    start, end = _first_line(method), method.end_lineno or method.lineno
    touched: list[int] = []
    for a, b in ranges:
        if not (a <= end and start <= b):
            continue
        index = next((i for i, (first, last) in enumerate(spans) if first <= a and b <= last),
                     None)
        if index is None or index == 0:
            return None
        touched.append(index)
    pieces: list[tuple[int, int, str]] = []
    for index in sorted(set(touched)):
        if pieces and pieces[-1][1] == spans[index - 1][1]:
            pieces[-1] = (pieces[-1][0], spans[index][1], _METHOD_BODY_HEADER)
        else:
            pieces.append((spans[index - 1][0], spans[index][1], _METHOD_BODY_HEADER))
    strings = {i for i, s in enumerate(body) if i and isinstance(s, ast.Expr)
               and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)}
    if any(first <= spans[i][0] <= last for i in strings for first, last, _ in pieces):
        return None
    return pieces


def _each_within(ranges: list[tuple[int, int]], outer: list[tuple[int, int, str]],
                 pieces: list[tuple[int, int, str]]) -> bool:
    """Whether every range that meets ``outer`` lies within one of ``pieces``."""
    start, end = outer[0][:2]
    return all(any(first <= a and b <= last for first, last, _ in pieces)
               for a, b in ranges if a <= end and start <= b)


def _first_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])


def _black_whole(text: str, ranges: list[tuple[int, int]], mode: black.Mode) -> str | None:
    try:
        return black.format_str(text, mode=mode, lines=ranges)
    except Exception:
        return None


def _edits_within(new: str, formatted: str, ranges: list[tuple[int, int]]) -> str:
    """``new`` with those of black's edits (``new`` -> ``formatted``) that overlap ``ranges``."""
    new_lines = new.splitlines(keepends=True)
    formatted_lines = formatted.splitlines(keepends=True)
    out: list[str] = []
    for tag, i1, i2, j1, j2 in _opcodes(new_lines, formatted_lines):
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
    return {i for tag, i1, i2, _, _ in _opcodes(old.splitlines(), new.splitlines())
            if tag == "equal" for i in range(i1, i2)}


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        fromfile=quoted_path(f"a/{path}"),
                                        tofile=quoted_path(f"b/{path}")))


def quoted_path(path: str) -> str:
    """``path`` as git writes it in a diff header: as it is, or in double quotes with C escapes
    when it holds a control character (a newline would end the header line, an escape
    sequence would reach the terminal), a quote or a backslash."""
    if not any(ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        return path
    escapes = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
    return '"' + "".join(escapes.get(ch) or (f"\\{ord(ch):03o}" if ord(ch) < 0x20
                                             or ord(ch) == 0x7F else ch)
                         for ch in path) + '"'
