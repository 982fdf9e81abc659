"""``tsfix explain``: a rule's documentation, or why one class does not script.

``tsfix explain RULE`` formats the rule class's docstring (What it does / Why it breaks export /
Example / Fix safety). ``tsfix explain path.py:Class`` builds the class (with its
``[tool.tsfix.examples]`` table when there is one, else with its defaults), scripts it and calls
the scripted module with the example inputs, in a child process
(``python -m tsfix.codemods.lint.explain``; the caller never imports torch). The TorchScript
error is then matched against the messages measured on torch 2.13 (:data:`KNOWN_ERRORS`) and
tied to a line of the user's file and to a ``tsfix check`` code, whose help says why and which
rule fixes it. The
linter's findings in the class fill in what the error does not say: the line, when the error
points into torch itself (``flatten_parameters``) or nowhere (numpy's "cannot create weak
reference"), and the other blockers of the class, which scripting reports one at a time.

``--target export``: the child runs ``torch.export.export`` instead (each configuration, with its
first example call), then the exported program on the example calls of the same input shapes
against eager. torch.export's error is matched against :data:`EXPORT_ERRORS` (measured on
torch 2.13) and placed at the innermost frame of the traceback outside torch: a line of the
user's file, or of the file the class calls into (checked too, for the rule that fixes it). A
class that exports but branches on a setting (``tsfix check --target export`` finds TSF204 in
it) is reported as exporting only the construction-time path. ``--target onnx`` scripts, as
its exporter is TorchScript-based; the findings are the onnx forms'.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsfix.codemods.lint.check import (
    CODES,
    CheckSyntaxError,
    Finding,
    check_source,
    fix_command,
)
from tsfix.codemods.pipeline.config import ExampleError, ExampleSpec, find_pyproject, load_config
from tsfix.codemods.pipeline.sources import SourceError, read_source
from tsfix.codemods.rules.names import TARGETS
from tsfix.codemods.validation.protocol import COMPILED_FROM

SECTIONS = ("What it does", "Why it breaks export", "Example", "Fix safety")

# Outcomes of the child process.
SCRIPTS = "scripts"                  # scripted, and every example call ran
SCRIPT_FAILED = "script_failed"      # torch.jit.script raised
CALL_FAILED = "call_failed"          # scripted, but a call of the scripted module raised
NOT_BUILT = "not_built"              # the file does not import, or the class cannot be built
# ... and under --target export.
EXPORTS = "exports"                  # exported, and the exported program matched every call
EXPORT_FAILED = "export_failed"      # torch.export.export raised
# CALL_FAILED under export: the exported program raised or differed from eager on a call.

# The check code of a branch torch.export specialises to the construction-time path.
BAKED_CODE = "TSF204"


class ExplainError(Exception):
    """A usage error: bad target, unknown rule, missing class (exit code 2)."""


class UnreadableSource(ExplainError):
    """The file cannot be read or does not parse (exit code 3, as `tsfix apply`)."""


# ---- rule documentation ------------------------------------------------------------------------

def rule_sections(name: str) -> tuple[str, list[tuple[str, str]]]:
    """The rule's title line and its docstring sections, in order, bodies dedented."""
    from tsfix.codemods.rules.registry import ALL_RULES

    rule = ALL_RULES.get(name)
    if rule is None:
        raise ExplainError(f"unknown rule {name!r} (known: {', '.join(ALL_RULES)}); "
                           "or give a class as path.py:ClassName")
    module = sys.modules[rule.__module__]
    doc = inspect.cleandoc(module.__doc__ or rule.__doc__ or "")
    lines = doc.splitlines()
    title = re.sub(rf"^``{re.escape(name)}``:\s*", "", lines[0]) if lines else name
    sections: list[tuple[str, str]] = []
    header, body = "", list[str]()
    for line in lines[1:]:
        if line.strip() in SECTIONS and not line.startswith(" "):
            if header:
                sections.append((header, _dedent(body)))
            header, body = line.strip(), []
        elif header:
            body.append(line)
    if header:
        sections.append((header, _dedent(body)))
    return _plain(title), sections


def _dedent(lines: list[str]) -> str:
    return _plain(inspect.cleandoc("\n".join(lines)))


def _plain(text: str) -> str:
    """reStructuredText markup as terminal text: ``x`` -> `x`, a trailing ``::`` -> ``:``."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return re.sub(r"::$", ":", text, flags=re.MULTILINE)


# The rules reference page in the repository, and the command that writes it.
RULES_PAGE = "docs/rules.md"
RULES_PAGE_COMMAND = f"tsfix rules --format markdown > {RULES_PAGE}"


def rules_markdown() -> str:
    """The rules reference page (:data:`RULES_PAGE`): every rule in ``--rule all`` order with
    its summary, targets, check codes and the documentation ``tsfix explain RULE`` prints,
    then every ``tsfix check`` code with the rule that handles it. Generated, never edited, so
    the page cannot drift from the rules' own docstrings."""
    from tsfix.codemods.lint.codes import rule_of_code
    from tsfix.codemods.rules.registry import ALL_RULES

    out = ["# Rules", "",
           f"<!-- Generated from each rule's module (name, summary, targets, CODES, docstring) "
           f"by `{RULES_PAGE_COMMAND}`. Do not edit this file: edit the rule's module and "
           "regenerate; tests/test_docs.py fails while it is out of date. -->", "",
           "Every rule, in the order `tsfix apply --rule all` runs them. In a terminal, "
           "`tsfix rules` lists the names and summaries and `tsfix explain RULE` prints a "
           "rule's documentation as below. What applies across rules (typing imports, black, "
           "how lift-branch and annotate choose types, ...) is in "
           "[rule-notes.md](rule-notes.md); the codes `tsfix check` reports are at the "
           "[end of this page](#check-codes).", "",
           "| rule | targets | check codes | summary |", "| --- | --- | --- | --- |"]
    for name, rule in ALL_RULES.items():
        codes = ", ".join(f"`{code.code}`" for code in rule.CODES) or "-"
        out.append(f"| [`{name}`](#{name}) | {', '.join(rule.targets)} | {codes} | "
                   f"{_markdown_prose(rule.summary).replace('|', '&#124;')} |")
    for name, rule in ALL_RULES.items():
        title, sections = rule_sections(name)
        out += ["", f"## {name}", "", _markdown_prose(title), "",
                f"Targets: {', '.join(rule.targets)}."
                + (f" Not run under the others: {_markdown_prose(_plain(rule.off_target))}"
                   if rule.off_target else "")]
        if rule.CODES:
            out += ["", "Check codes:", ""]
            out += [f"- `{code.code}` {code.name}: {_markdown_prose(code.summary)}"
                    + (" (warning)" if code.level == "warning" else "") for code in rule.CODES]
        for header, body in sections:
            out += ["", f"### {header}", "", _markdown_body(body)]
    out += ["", "## Check codes", "",
            "What `tsfix check` reports (`tsfix check --list-codes PATHS` prints the same "
            "list). `TSF1xx` codes are the linter's own; `TSF2xx` codes are declared by the "
            "rule that finds them. A rule named for a `TSF1xx` code fixes some of its sites "
            "and reports those itself; the linter reports the others.", "",
            "| code | name | level | what | rule |", "| --- | --- | --- | --- | --- |"]
    for code in CODES.values():
        handler = rule_of_code(code.code)
        out.append(f"| `{code.code}` | {code.name} | {code.level} | "
                   f"{_markdown_prose(code.summary).replace('|', '&#124;')} | "
                   f"{f'[`{handler}`](#{handler})' if handler else '-'} |")
    return "\n".join(out) + "\n"


def _markdown_body(text: str) -> str:
    """A docstring section as Markdown: indented blocks (the docstrings' ``::`` examples and
    tables) are fenced, so their ``*``, ``_`` and ``<...>`` stay literal; prose is escaped."""
    lines = text.splitlines()
    out: list[str] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith("    ") and (i == 0 or not lines[i - 1].strip())):
            prose.append(line)
            i += 1
            continue
        block: list[str] = []
        while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            block.pop()
            i -= 1
        out += [_markdown_prose("\n".join(prose)), "```",
                textwrap.dedent("\n".join(block)), "```"]
        prose = []
    out.append(_markdown_prose("\n".join(prose)))
    return "\n".join(part for part in out if part)


def _markdown_prose(text: str) -> str:
    """Escapes what Markdown would read as emphasis or HTML outside code spans (``__init__``,
    ``*args``, ``<Class>``); a list item's leading ``* `` stays a list item."""
    parts = re.split(r"(`[^`]*`)", text)
    escaped = [part if part.startswith("`") else re.sub(r"([_*<\\])", r"\\\1", part)
               for part in parts]
    return re.sub(r"^(\s*)\\\* ", r"\1* ", "".join(escaped), flags=re.MULTILINE)


# ---- the class explainer -----------------------------------------------------------------------

@dataclass(frozen=True)
class KnownError:
    pattern: str
    code: str | None             # a tsfix check code; None: `explanation` says it all
    explanation: str = ""


# Codes whose TorchScript error points at another line than the one to fix (TSF231: the read
# of the attribute, fixed at the test that guards it).
_PLACED_BY_FINDING = frozenset({"TSF229", "TSF230", "TSF231"})
# Codes whose TorchScript message other constructs share: named only when check found one.
_NEEDS_FINDING = frozenset({"TSF230", "TSF231", "TSF244"})

# Measured on torch 2.13 (fixtures/check/blockers.py has one class for each). Order matters:
# the first pattern found in the message wins.
KNOWN_ERRORS = (
    KnownError(r"try blocks aren't supported", "TSF101"),
    KnownError(r"Lambda aren't supported", "TSF102"),
    KnownError(r"global variables aren't supported", "TSF103"),
    KnownError(r"Don't support (formatting|conversion) in JoinedStr", "TSF104"),
    KnownError(r"python value of type '\w+' cannot be used as a value", "TSF105"),
    KnownError(r"function definitions aren't supported", "TSF106"),
    KnownError(r"Yield aren't supported", "TSF107"),
    KnownError(r"nn/modules/rnn\.py", "TSF212"),
    # einops' functions take **axes_lengths: TorchScript stops inside einops, naming no line
    # of the user's file; the class's TSF236 finding places it.
    KnownError(r"einops[/\\]einops\.py", "TSF236"),
    KnownError(r"Set(Comp)? aren't supported", "TSF108"),
    KnownError(r"NamedExpr aren't supported", "TSF109"),
    KnownError(r"keyword-arg expansion is not supported", "TSF110"),
    KnownError(r"getattr's second argument must be a string literal", "TSF111"),
    KnownError(r"do not support break or continue", "TSF112"),
    KnownError(r"does not have a statically determinable length", "TSF113"),
    KnownError(r"Sliced expression not yet supported for subscripted assignment", "TSF114"),
    KnownError(r"cannot statically infer the expected size of a list", "TSF214"),
    KnownError(r"found type 'NoneType'|Could not cast value of type NoneType to bool", "TSF116"),
    KnownError(r"builtin cannot be used as a value", "TSF117"),
    KnownError(r"Expected integer literal for index", "TSF201"),
    KnownError(r"reversed\(Tensor 0\)", "TSF202"),
    KnownError(r"failed to convert Python type: '(?!torch)[\w.]+' to a TorchScript type|"
               r"is defined as a class attribute which currently is not supported", "TSF203"),
    KnownError(r"cannot create weak reference to 'numpy|object has no attribute or method "
               r"'numpy'|Python builtin <built-in function \w+> is currently not supported|"
               r"numpy", "TSF205"),
    KnownError(r"Expected a default value of type Tensor", "TSF206"),
    # The scripted root module's unannotated `p=None` (speechbrain's ECAPA_TDNN `lengths`):
    # the message names no line; check's TSF207 finding places it.
    KnownError(r"Unsupported value kind: Tensor", "TSF207"),
    # A compiled call of an exported/ignored/unused method of the same class gets no defaults
    # ("project(...) -> Tensor: Argument alpha not provided."; explicit-defaults).
    # A method of the class (`project(__torch__.M self, ...)`), not an aten overload listing
    # ("Arguments for call are not valid ... aten::add.Tensor(...): Argument other not
    # provided"), which says the same of every overload.
    KnownError(r"\(__torch__\.[\w.]+ self[^\n]*:\nArgument \w+ not provided", "TSF241"),
    KnownError(r"Expected a value of type 'float' for argument '\w+' but instead found type "
               r"'int'", "TSF224"),
    KnownError(r"Expected a value of type 'Optional\[Tensor\]' for argument|Expected a proper "
               r"Tensor but got None", "TSF207"),
    # sum(list_of_tensors) reaches aten::sum with the list as `self`: sum-tensors, not a
    # parameter annotation (measured on fixtures/sum-tensors/wavenet.in.py).
    KnownError(r"(?s)(?=.*\bsum\b).*for argument 'self' but instead found type "
               r"'(List|Tuple)\[Tensor", "TSF215"),
    # A one-line None helper (`exists(val)`) compiled with `val` a Tensor, called with an
    # Optional: written out at the call by none-helpers (TSF244) when check finds the call.
    KnownError(r"\w+\([^)]*\) -> [^\n]*:\nExpected a value of type 'Tensor \(inferred\)' for "
               r"argument '\w+' but instead found type 'Optional\[", "TSF244"),
    # An Optional passed on to a callee whose parameter is unannotated with a None default
    # (speechbrain's ECAPA_TDNN passes `lengths` down a chain of blocks): the fix is the
    # callee's annotation (TSF207), not a None test at the call.
    KnownError(r"=\[ Tensor \(undefined\) \][^\n]*\nExpected a value of type 'Tensor "
               r"\(inferred\)' for argument '\w+' but instead found type 'Optional\[", "TSF207"),
    # An Optional value used where its type is needed (annotate's refinement, TSF228).
    KnownError(r"for argument '\w+' but instead found type 'Optional\[", "TSF228"),
    # The error points at the later assignment; the fix is at the ``= None`` (TSF229).
    KnownError(r"previously had type NoneType but is now being assigned", "TSF229"),
    # A local bound under one test of a setting and read under a later test of it: the error
    # points at the first test, where constant-flag makes the setting a constant (TSF242).
    KnownError(r"\w+ is not defined in the (true|false) branch", "TSF242"),
    # A local a loop carries between iterations: the error points at its read, the fix is a
    # binding before the loop (TSF230, placed at the loop). A name bound nowhere says the
    # same: without a TSF230 finding in the class, explain gives torch's message alone.
    KnownError(r"undefined value \w+", "TSF230"),
    # A name re-bound in a nested block to a value of another type (the error points at it).
    KnownError(r"Variable '\w+' previously had type .+ but is now being assigned to a value "
               r"of type", "TSF119"),
    KnownError(r"Previous return statement returned a value of type .+ but this return "
               r"statement returns a value of type|Return value was annotated as having type",
               "TSF118"),
    KnownError(r"Expected a value of type 'Tensor[^']*' for argument '\w+' but instead found",
               "TSF206", "An unannotated parameter is a Tensor to TorchScript; this call "
               "passes something else. Annotate the parameter with the type it takes."),
    KnownError(r"Expected a default value of type \w+ on parameter", "TSF208"),
    KnownError(r"Mutable default parameters are not supported", "TSF209"),
    KnownError(r"can't take variable number of arguments or use keyword-only", "TSF210"),
    KnownError(r"'Tensor' object has no attribute or method 'forward'", "TSF211"),
    # dtype-methods: conversions TorchScript's Tensor lacks, and torch.finfo (torch 2.13).
    KnownError(r"'Tensor' object has no attribute or method '(bool|bfloat16)'|Unknown builtin "
               r"op: aten::finfo", "TSF245"),
    KnownError(r"Class Variable does not have an __init__", "TSF213"),
    # A module constructed in compiled code (julius.ResampleFrac(old_sr, new_sr)(x) in
    # forward): foreign-class. A class imported by name can also fail as having no __init__.
    KnownError(r"Cannot instantiate class '\w+' in a script function|Class \w+ does not have "
               r"an __init__ function defined", "TSF248"),
    KnownError(r"aten::sum|sum\.\w+\(", "TSF215"),
    KnownError(r"previously matched to type Tensor is matched to type \w+", None,
               "An empty list `[]` is a List[Tensor] to TorchScript, and something else is "
               "appended to it. Annotate it (`lens: List[int] = []`); `tsfix apply --rule "
               "annotate` does."),
    KnownError(r"Tried to set nonexistent attribute", None,
               "forward() assigns an attribute that __init__ never set; TorchScript only "
               "knows the attributes the instance has when it is scripted. Set it in "
               "__init__."),
    # A property reading a name-mangled attribute (asteroid's BaseModel.sample_rate): compiled
    # even when nothing reads it; jit-unused-properties lists it.
    KnownError(r"has no attribute '__\w+'", "TSF225"),
    # An attribute __init__ builds only for some configurations (constant-flag, when check
    # finds the test that guards it; else the generic answer below).
    KnownError(r"Module '\w+' has no attribute '(?!__)\w+'", "TSF231"),
    KnownError(r"Module '\w+' has no attribute '\w+'", None,
               "TorchScript cannot hold this attribute's value (a class-level list, a Python "
               "object, a value of unsupported type). Store a tensor, number, string, list or "
               "dict of those in __init__, or copy the fields forward() reads into plain "
               "attributes."),
)


# torch.export failures, measured on torch 2.13 with small classes (tests/test_export_lint.py
# holds them) and on the pinned zoo (asteroid's DPRNNTasNet: `.tolist()` dims in norms.py).
# Searched in the message and the traceback's frames (``File "...", line N``); the first
# pattern found wins.
EXPORT_ERRORS = (
    # int(t) / t.item() / t.tolist() where a Python int is needed: range(), dims, sizes.
    KnownError(r"Could not extract specialized integer from data-dependent expression",
               "TSF227"),
    # float(t) used as a Python number or tested: the symbol of a float read from a tensor.
    KnownError(r"Could not guard on data-dependent expression zuf\d+", "TSF227"),
    # if / while / assert / bool() on a tensor's value.
    KnownError(r"Could not guard on data-dependent expression", "TSF226"),
    KnownError(r"\.numpy\(\) is not supported for tensor subclasses", "TSF205",
               "torch.export traces with tensors that have a shape but no values, so numpy "
               "cannot take them (\".numpy() is not supported for tensor subclasses\"); numpy "
               "on Python numbers (constants) exports. Translate it to torch; a "
               "@torch.jit.ignore method does not hide it from torch.export."),
    KnownError(r"unsupported format string passed to \w+\.__format__", None,
               "An f-string formats a tensor (or a number read from one) with a format spec; "
               "torch.export traces with tensors that have a shape but no values, so there is "
               "nothing to format. Drop the spec (`{x}`) or print outside forward."),
    KnownError(r"Found <class '[\w.]+'> in output", None,
               "forward returns a value torch.export cannot take apart (a generator, or an "
               "object of a class it has no pytree node for). Return tensors, or tuples, lists "
               "and dicts of them (or register a pytree node for your output class)."),
    KnownError(r"Encountered aliasing during higher order op tracing", None,
               "A torch.cond branch function returns one of its inputs (or a view of it) "
               "unchanged. Return `x.clone()` instead of `x`."),
    KnownError(r"When merging two branches' output in torch\.cond", None,
               "The two branch functions of a torch.cond return tensors of different dtypes "
               "(or a different number of them). Make both return the same."),
    # A packed sequence: packing (utils/rnn.py) or the RNN on it (modules/rnn.py) needs sizes.
    KnownError(r"(?s)FakeTensor.*nn/(utils|modules)/rnn\.py", None,
               "pack_padded_sequence needs the lengths' values, and torch.export traces with "
               "tensors that have none. Run the RNN on the padded batch and mask the padding, "
               "or pack outside the exported forward."),
    KnownError(r"FakeTensor", None,
               "A function that needs Python values was given a tensor while torch.export "
               "traced it (a FakeTensor: a shape but no values). Keep that call on values "
               "known before tracing (shapes, settings), or move it out of forward."),
)


@dataclass
class Explanation:
    """What went wrong, where, and how to fix it."""

    class_name: str
    display: str                    # the user's file, as shown
    outcome: str                    # SCRIPTS | SCRIPT_FAILED | CALL_FAILED | NOT_BUILT
    error: str = ""                 # torch's message, first lines
    line: int | None = None
    source_line: str = ""
    code: str | None = None
    explanation: str = ""
    fix: str | None = None          # the rule that fixes this site
    refused: str = ""               # why the rule that handles the construct leaves this site
    hints: list[Finding] = field(default_factory=list)   # tsfix check findings in the class
    notes: list[str] = field(default_factory=list)
    calls: int = 0                  # example calls the scripted module ran
    target: str = "torchscript"
    # Where the construct is when it is not in the user's file (``path:line``), and its line.
    site: str = ""
    site_line: str = ""

    @property
    def baked(self) -> list[Finding]:
        """Settings torch.export keeps only the construction-time path of (export target)."""
        if self.target != "export" or self.outcome != EXPORTS:
            return []
        return [h for h in self.hints if h.code == BAKED_CODE]

    @property
    def exit_code(self) -> int:
        if self.baked:
            return 1
        return {SCRIPTS: 0, EXPORTS: 0, NOT_BUILT: 3}.get(self.outcome, 1)

    def lines(self) -> list[str]:
        if self.target == "export":
            return self._export_lines()
        where = f"{self.display}:{self.line}" if self.line else self.display
        out: list[str] = []
        if self.outcome == SCRIPTS:
            ran = (f" and runs on {self.calls} example call{'s' if self.calls != 1 else ''}"
                   if self.calls else "")
            out.append(f"{where}: {self.class_name} scripts{ran}")
        elif self.outcome == NOT_BUILT:
            out.append(f"{where}: cannot script {self.class_name}: {self.error}")
        else:
            verb = ("does not script" if self.outcome == SCRIPT_FAILED
                    else "scripts, but calling the scripted module fails")
            out.append(self._failure_title(where, verb, "TorchScript error"))
            if self.source_line:
                out.append(f"    {self.line} | {self.source_line.strip()}")
            out += self._remedy(self.display,
                                no_rule_words(self.code, self.class_name, self.error))
        return out + self._tail()

    def _failure_title(self, where: str, verb: str, untitled: str) -> str:
        title = CODES[self.code].summary if self.code else untitled
        return f"{where}: {self.class_name} {verb}: {title}" + (
            f" [{self.code}]" if self.code else "")

    def _remedy(self, fix_file: str, no_rule: str) -> list[str]:
        """After a failure's title and lines: why, the fix (or why there is none), and
        torch's own message."""
        out = [f"why: {self.explanation}"] if self.explanation else []
        if self.fix:
            out.append(f"fix: {fix_command(self.fix, self.target)} {fix_file}")
        elif self.refused:
            out.append(f"not fixed by tsfix here ({self.refused}); change the code by hand.")
        elif self.code:
            out.append(f"fix: {no_rule}; change the code by hand.")
        out.append(f"torch said: {self.error}")
        return out

    def _tail(self) -> list[str]:
        out = [f"note: {note}" for note in self.notes]
        shown = {(h.line, h.code) for h in self.baked}
        others = [h for h in self.hints if h.code != self.code and (h.line, h.code) not in shown]
        if others:
            check = "tsfix check" + ("" if self.target == "torchscript"
                                     else f" --target {self.target}")
            out.append(f"other findings in {self.class_name} ({check}):")
            out.extend(f"  {h.text()}" for h in others)
        return out

    def _export_lines(self) -> list[str]:
        where = f"{self.display}:{self.line}" if self.line else self.display
        out: list[str] = []
        if self.outcome == EXPORTS:
            ran = (f" and its exported program matches eager on {self.calls} example "
                   f"call{'s' if self.calls != 1 else ''}" if self.calls else "")
            out.append(f"{where}: {self.class_name} exports with torch.export{ran}")
            for finding in self.baked:
                attr = re.search(r"'self\.(\w+)'", finding.message)
                setting = f"self.{attr.group(1)}" if attr else "a setting"
                line = (f"{self.display}:{finding.line}: exports, but torch.export keeps only "
                        f"the path of {setting} chosen at construction")
                if finding.fix:
                    line += f"; fix: {finding.apply_command} {self.display}"
                elif finding.refused:
                    line += f"; not fixed by tsfix here ({finding.refused})"
                out.append(line)
        elif self.outcome == NOT_BUILT:
            out.append(f"{where}: cannot export {self.class_name}: {self.error}")
        else:
            verb = ("does not export (torch.export.export)" if self.outcome == EXPORT_FAILED
                    else "exports, but its exported program fails the examples")
            out.append(self._failure_title(where, verb, "torch.export error"))
            if self.site:
                out.append(f"    at {self.site}" + (f" | {self.site_line.strip()}"
                                                    if self.site_line else ""))
            if self.source_line:
                out.append(f"    {self.line} | {self.source_line.strip()}")
            shown = self.site.rpartition(":")[0] if self.site else self.display
            out += self._remedy(shown, "no tsfix rule rewrites this site")
        return out + self._tail()


def parse_target(target: str) -> tuple[Path, str] | None:
    """``models/x.py:Class`` -> (path, class); None when ``target`` is not of that form."""
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name.isidentifier():
        return None
    return Path(path), name


def explain_class(path: Path, class_name: str, *, config_path: Path | None = None,
                  timeout: float | None = None, display: str | None = None,
                  target: str | None = None) -> Explanation:
    """Script ``class_name`` from ``path`` in a child process (``target`` "export": export it
    with torch.export; None: ``[tool.tsfix] target``, else torchscript) and explain the
    outcome. Raises ExplainError (usage), ConfigError (bad configuration)."""
    shown = display or path.as_posix()
    try:
        text = read_source(path).text
    except SourceError as exc:
        raise UnreadableSource(str(exc)) from exc
    config = None if target else load_config(config_path or find_pyproject([path]))
    chosen = target or (config.target if config else "torchscript")
    if chosen not in TARGETS:
        raise ExplainError(f"unknown target {chosen!r} (expected one of {', '.join(TARGETS)})")
    try:
        findings = check_source(text, shown, target=chosen)
    except CheckSyntaxError as exc:
        raise UnreadableSource(str(exc)) from exc
    if not re.search(rf"^class\s+{re.escape(class_name)}\b", text, re.MULTILINE):
        raise ExplainError(f"{shown}: no top-level class {class_name!r}")
    config = config or load_config(config_path or find_pyproject([path]))
    spec = config.example_for(path, class_name)
    notes: list[str] = []
    if isinstance(spec, ExampleError):
        notes.append(f"example table ignored: {spec}")
        spec = None
    if spec is None:
        key = _example_key(path, config.root)
        spec = ExampleSpec.automatic(f"{key}:{class_name}")
        notes.append("no [tool.tsfix.examples] table: built with its defaults "
                     f"(add [tool.tsfix.examples.\"{key}:{class_name}\"] to choose)")
    job = {"path": str(path.resolve()), "class": class_name, "example": spec.to_json(),
           "sys_path": [str(config.root)] if config.root else [], "target": chosen}
    outcome = _run_child(job, timeout or config.timeout)
    hints = [f for f in findings if f.class_name == class_name]
    return _explain(outcome, class_name, shown, path, text, hints, notes, chosen)


def explain_error(message: str, path: Path, display: str, text: str, class_name: str,
                  target: str = "torchscript", rejected: Mapping[str, str] | None = None
                  ) -> str:
    """One line on a TorchScript error (``target`` "export": a torch.export error) met
    elsewhere (a model's blocker): the construct (its ``tsfix check`` code and title), then
    the rule that fixes that site, why the rule leaves it, or the hand fix; the same matching
    as ``tsfix explain path:Class``. ``message`` may end with the traceback's frames
    (``File "...", line N``): under export, they place the error. ``rejected``: rule -> why
    validation rejected its rewrite of ``class_name`` in the run asking (never recommended:
    running it again would be rejected again)."""
    findings = _findings(text, display, target)
    hints = [f for f in findings if f.class_name == class_name] if class_name else []
    failed = EXPORT_FAILED if target == "export" else SCRIPT_FAILED
    frames = [[file, int(line), ""] for file, line in _FRAME.findall(message)]
    found = _explain({"outcome": failed, "error": message, "frames": frames},
                     class_name or "?", display, path, text, hints, [], target)
    title = (f"{CODES[found.code].summary} [{found.code}]" if found.code
             else "not an error tsfix knows" if "not an error tsfix knows" in found.explanation
             else found.explanation.split(". ")[0])
    if found.fix and rejected and found.fix in rejected:
        return (f"{title}; {found.fix} rewrote {class_name} in this run and validation "
                f"rejected it ({rejected[found.fix]}): change the code by hand")
    if found.fix:
        shown = found.site.rpartition(":")[0] if found.site else display
        return f"{title}; fix: {fix_command(found.fix, target)} {shown}"
    if found.refused:
        return f"{title}; not fixed by tsfix here ({found.refused}): change the code by hand"
    if found.code:
        function = bool(class_name) and re.search(rf"^(async\s+)?def\s+{re.escape(class_name)}\b",
                                                  text, re.MULTILINE) is not None
        words = no_rule_words(found.code, class_name or "?", message, function=function)
        return f"{title}; {words}: change the code by hand"
    return title


def no_rule_words(code: str | None, owner: str, message: str = "", *,
                  function: bool = False) -> str:
    """Why no rule fixes a blocker whose construct ``code`` names: none handles it, or the rule
    that does left it: in a module-level function (``function``: ``owner`` is one), or, in a
    class, none is left in its own code (it is in a function the class calls; ``message``,
    TorchScript's, names that function)."""
    from tsfix.codemods.lint.codes import rule_of_code

    rule = rule_of_code(code) if code else None
    if rule is None:
        return "no tsfix rule rewrites this yet"
    if function:
        return f"{rule} rewrites this construct, and leaves this one in {owner}() as it is"
    called = COMPILED_FROM.search(message)
    where = (f"it is in {called.group(1)}(), which {owner} calls" if called
             else f"it may be in a function {owner} calls")
    return f"{rule} rewrites this construct, and finds none left in {owner}'s methods ({where})"


def code_on_line(text: str, display: str, line: int, target: str = "torchscript"
                 ) -> str | None:
    """The code of ``tsfix check``'s first finding on ``line`` of ``text``: what construct
    stands where an error the message does not name points (the repair loop's round reads it
    as ``tsfix explain`` does)."""
    return next((f.code for f in _findings(text, display, target) if f.line == line), None)


@functools.lru_cache(maxsize=4)
def _findings(text: str, display: str, target: str) -> tuple[Finding, ...]:
    """``tsfix check`` of one text, once: a run explains every blocker of a file in turn, and
    a file of many classes has many (ParityBench: the explain phase was a fifth of a run)."""
    try:
        return tuple(check_source(text, display, target=target))
    except CheckSyntaxError:
        return ()


def _example_key(path: Path, root: Path | None) -> str:
    resolved = path.resolve()
    if root is not None and resolved.is_relative_to(root):
        return resolved.relative_to(root).as_posix()
    return path.as_posix()


def _run_child(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    try:
        done = subprocess.run([sys.executable, "-m", "tsfix.codemods.lint.explain"],
                              input=json.dumps(job), capture_output=True, text=True,
                              timeout=timeout + 60, env=env)   # + importing torch
    except subprocess.TimeoutExpired:
        return {"outcome": NOT_BUILT, "error": f"timed out after {timeout:g}s (a hang?)"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    if done.returncode < 0:
        try:
            died = signal.Signals(-done.returncode).name
        except ValueError:
            died = f"signal {-done.returncode}"
        what = {"SIGSEGV": "a segmentation fault", "SIGABRT": "an abort",
                "SIGKILL": "killed, out of memory?"}.get(died, died)
        return {"outcome": NOT_BUILT,
                "error": f"the scripting process died ({died}: {what}); its last output: {tail}"}
    return {"outcome": NOT_BUILT, "error": f"the scripting process failed: {tail}"}


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _explain(outcome: dict[str, Any], class_name: str, display: str, path: Path, text: str,
             hints: list[Finding], notes: list[str], target: str = "torchscript"
             ) -> Explanation:
    notes = notes + list(outcome.get("notes", []))
    result = Explanation(class_name, display, outcome["outcome"], hints=hints, notes=notes,
                         calls=int(outcome.get("calls", 0)), target=target)
    message = str(outcome.get("error", ""))
    result.error = _first_lines(outcome.get("error_type", ""), message)
    if result.outcome in (SCRIPTS, EXPORTS, NOT_BUILT):
        return result
    if target == "export":
        frames = [(str(f[0]), int(f[1])) for f in outcome.get("frames", ())]
        searched = message + "".join(f'\nFile "{f}", line {n}' for f, n in frames)
        known = next((k for k in EXPORT_ERRORS if re.search(k.pattern, searched)), None)
        result.line, elsewhere = _export_site(frames, path)
        if elsewhere is not None:
            # The construct is in a file the class calls into: that file's findings at that
            # line say what it is and which rule fixes it.
            hints = _site_findings(result, elsewhere, target)
    else:
        # A pattern whose message alone does not tell the construct counts only where check
        # found it; the next pattern that matches answers otherwise.
        known = next((k for k in KNOWN_ERRORS if re.search(k.pattern, message)
                      and (k.code not in _NEEDS_FINDING
                           or any(h.code == k.code for h in hints))), None)
        result.line = _user_line(message, path)
    code = known.code if known and (known.code is None or known.code in CODES) else None
    if code in _NEEDS_FINDING and not any(h.code == code for h in hints):
        code = None         # the message alone does not tell the construct (a name never bound)
    on_line = [h for h in hints if h.line == result.line]
    if on_line and code not in {h.code for h in on_line}:
        # Messages overlap (a bad sum() reads like a bad argument type); what the linter finds
        # on the line the error points at says which construct it is.
        code = on_line[0].code
    if code is not None and not result.site and not any(
            h.code == code and h.line == result.line for h in hints):
        # The message may point elsewhere than the site check fixes (a later assignment for
        # a local first set to None): the class's finding of that construct places it.
        located = [h for h in hints if h.code == code]
        if located and (result.line is None or code in _PLACED_BY_FINDING):
            result.line = located[0].line
    if result.site:
        on_line = hints         # the findings at the site, in the other file
        if on_line and code not in {h.code for h in on_line}:
            code = on_line[0].code
    if code is not None:
        result.code = code
        # The rule that handles the construct fixes this site only if it said so (check's
        # finding at this site); otherwise its refusal reason is the answer.
        site = next((h for h in hints if h.code == code and h.line == result.line),
                    next((h for h in hints if h.code == code), None))
        result.fix = site.fix if site is not None else None
        result.refused = site.refused if site is not None else ""
        result.explanation = (known.explanation if known and known.explanation
                              and known.code == code else CODES[code].help)
    elif known is not None:
        result.explanation = known.explanation
        # Named only when annotate itself says it fixes something on that line.
        result.fix = "annotate" if "--rule annotate" in known.explanation and any(
            h.fix == "annotate" for h in hints if h.line == result.line) else None
    else:
        # Not a message tsfix knows, and check finds nothing on the line it points at: no
        # finding elsewhere in the class is blamed for it.
        where = _any_frame(message) if result.line is None else None
        pointer = (f" It points at {where[0]}:{where[1]}." if where else
                   "" if result.line is not None else " It names no line.")
        result.explanation = ("not an error tsfix knows; torch's own message is below, as "
                              f"torch gives it.{pointer}")
    if result.line is not None:
        source = text.splitlines()
        if 0 < result.line <= len(source):
            result.source_line = source[result.line - 1]
    return result


def _is_torch_frame(file: str) -> bool:
    """A frame of torch's own code (or of code torch generated: ``<string>``)."""
    return file.startswith("<") or re.search(r"[/\\](torch|tsfix)[/\\]", file) is not None


def _export_site(frames: list[tuple[str, int]], path: Path
                 ) -> tuple[int | None, tuple[Path, int] | None]:
    """Where a torch.export error happened, from the traceback's frames (outermost first):
    the innermost line of the user's file, and the innermost frame outside torch when it is
    in another file (the user's line then is where the class calls into it)."""
    target = path.resolve()
    own_line: int | None = None
    innermost: tuple[Path, int] | None = None
    for file, line in frames:
        if _is_torch_frame(file):
            continue
        try:
            resolved = Path(file).resolve()
        except OSError:
            continue
        innermost = (resolved, line)
        if resolved == target:
            own_line = line
    if innermost is not None and innermost[0] == target:
        innermost = None
    return own_line, innermost


def _site_findings(result: Explanation, site: tuple[Path, int], target: str
                   ) -> list[Finding]:
    """Set ``result.site`` (and its source line) to a frame in another file; the findings of
    ``tsfix check`` in that file on that line (none when it cannot be read or parsed)."""
    file, line = site
    shown = _shown(file)
    result.site = f"{shown}:{line}"
    try:
        text = read_source(file).text
    except SourceError:
        return []
    lines = text.splitlines()
    if 0 < line <= len(lines):
        result.site_line = lines[line - 1]
    try:
        return [f for f in check_source(text, shown, target=target) if f.line == line]
    except (CheckSyntaxError, RecursionError):
        return []


def _shown(file: Path) -> str:
    """A path as the user should see it: relative to the working directory when inside it."""
    try:
        return file.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return file.as_posix()


def _any_frame(message: str) -> tuple[str, int] | None:
    """The last ``File "...", line N`` of the message: where torch says it failed."""
    frames = _FRAME.findall(message)
    return (frames[-1][0], int(frames[-1][1])) if frames else None


def _user_line(message: str, path: Path) -> int | None:
    """The first line of the user's file the message points at."""
    target = path.resolve()
    for file, line in _FRAME.findall(message):
        try:
            if Path(file).resolve() == target:
                return int(line)
        except OSError:
            continue
    return None


def _first_lines(kind: str, message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0].rstrip(":") if lines else ""
    if first.startswith("Arguments for call are not valid"):
        # The first candidate's complaint says what was found instead.
        found = next((line for line in lines if "instead found" in line), "")
        first = f"{first} {found}".strip()
    last = lines[-1] if len(lines) > 1 else ""
    if first.startswith("The following operation failed") and last:
        first = last          # the interpreter's own error is the last line
        kind = ""
    text = f"{kind}: {first}" if kind else first
    return text if len(text) <= 300 else text[:297] + "..."


# ---- the child process (imports torch) ---------------------------------------------------------

def child_main() -> None:
    """Script one class and call it: reads the job on stdin, writes one JSON line on the
    stdout it was started with (user prints go to stderr)."""
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    job = json.loads(sys.stdin.read())
    outcome = _export_class(job) if job.get("target") == "export" else _script_class(job)
    results.write(json.dumps(outcome) + "\n")
    results.flush()


def _module_class(job: dict[str, Any], load: Any) -> type | dict[str, Any]:
    """The job's nn.Module class, imported from the original file by ``load`` (the worker's
    import context), or the outcome saying why there is none."""
    import torch
    from tsfix.codemods.validation.worker import Verdict

    try:
        module = load.original()
    except Verdict as verdict:
        return {"outcome": NOT_BUILT, "error": verdict.reason}
    cls = getattr(module, job["class"], None)
    if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
        return {"outcome": NOT_BUILT, "error": f"{job['class']} is not an nn.Module class"}
    return cls


def _constructor_failed(instance: Any, exc: BaseException, notes: list[str]) -> dict[str, Any]:
    return {"outcome": NOT_BUILT, "notes": notes,
            "error": f"{instance.label(show_init=True)}: the constructor failed "
                     f"({type(exc).__name__}: {exc}); add an example table with init arguments"}


def _script_class(job: dict[str, Any]) -> dict[str, Any]:
    import warnings

    import torch
    from tsfix.codemods.validation.protocol import Example, ObserveJob
    from tsfix.codemods.validation.worker import (
        Instance,
        Verdict,
        build,
        call,
        import_context,
        instances,
    )

    warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=DeprecationWarning)
    notes: list[str] = []
    calls = 0
    context = ObserveJob(-1, str(job["path"]), (), tuple(job.get("sys_path") or ()))
    with import_context(context) as load:
        cls = _module_class(job, load)
        if isinstance(cls, dict):
            return cls
        try:
            made = instances(Example.from_json(job["example"]), cls)
        except Verdict as verdict:
            # No input could be guessed: scripting needs none, so script the default build.
            notes.append(f"not called: {verdict.reason.split(';')[0]}")
            made = [Instance(0, {}, [], False)]
        except BaseException as exc:
            return {"outcome": NOT_BUILT, "error": f"building the inputs failed: {exc}"}
        for instance in made:
            try:
                model = build(cls, instance.init)
            except BaseException as exc:
                return _constructor_failed(instance, exc, notes)
            try:
                scripted = torch.jit.script(model)
            except BaseException as exc:
                return {"outcome": SCRIPT_FAILED, "error_type": type(exc).__name__,
                        "error": str(exc), "notes": notes}
            for j, (args, kwargs) in enumerate(instance.calls):
                try:
                    call(scripted, args, kwargs)
                    calls += 1
                except BaseException as exc:
                    notes.append(f"the failing call: {instance.label(j, show_init=True)}")
                    return {"outcome": CALL_FAILED, "error_type": type(exc).__name__,
                            "error": str(exc), "notes": notes}
    return {"outcome": SCRIPTS, "notes": notes, "calls": calls}


def _export_class(job: dict[str, Any]) -> dict[str, Any]:
    """torch.export.export each configuration with its first example call, then call the
    exported program with each example call of the same input shapes (an exported program
    takes only the shapes it was exported with) and compare it with eager."""
    import logging
    import traceback
    import warnings

    import torch
    from tsfix.codemods.validation.protocol import Example, ObserveJob
    from tsfix.codemods.validation.worker import (
        SEED,
        Verdict,
        build,
        call,
        clone,
        difference,
        import_context,
        instances,
    )

    warnings.filterwarnings("ignore")
    # torch.export logs the partial graph of a failed export: the message says it all.
    logging.disable(logging.WARNING)
    notes: list[str] = []
    calls = skipped = 0
    context = ObserveJob(-1, str(job["path"]), (), tuple(job.get("sys_path") or ()))
    with import_context(context) as load:
        cls = _module_class(job, load)
        if isinstance(cls, dict):
            return cls
        try:
            made = instances(Example.from_json(job["example"]), cls)
        except Verdict as verdict:
            # Unlike scripting, exporting traces a call: no input, nothing to export.
            return {"outcome": NOT_BUILT, "error": "torch.export needs an example input: "
                    f"{verdict.reason}"}
        except BaseException as exc:
            return {"outcome": NOT_BUILT, "error": f"building the inputs failed: {exc}"}
        for instance in made:
            try:
                model = build(cls, instance.init)
            except BaseException as exc:
                return _constructor_failed(instance, exc, notes)
            if not instance.calls:
                return {"outcome": NOT_BUILT, "notes": notes,
                        "error": "torch.export needs an example input: the example table "
                                 "has no call"}
            args, kwargs = instance.calls[0]
            try:
                torch.manual_seed(SEED)
                program = torch.export.export(model, clone(args), clone(kwargs))
            except BaseException as exc:
                if len(made) > 1:
                    notes.append(f"the failing configuration: "
                                 f"{instance.label(show_init=True)}")
                frames = [[frame.filename, frame.lineno]
                          for frame in traceback.extract_tb(exc.__traceback__)]
                return {"outcome": EXPORT_FAILED, "error_type": type(exc).__name__,
                        "error": str(exc), "frames": frames, "notes": notes}
            exported = program.module()
            shapes = _shapes((args, kwargs))
            for j, (args_j, kwargs_j) in enumerate(instance.calls):
                if _shapes((args_j, kwargs_j)) != shapes:
                    skipped += 1
                    continue
                try:
                    expected = call(model, args_j, kwargs_j)
                    got = call(exported, args_j, kwargs_j)
                except BaseException as exc:
                    notes.append(f"the failing call: {instance.label(j, show_init=True)}")
                    return {"outcome": CALL_FAILED, "error_type": type(exc).__name__,
                            "error": str(exc), "notes": notes}
                differs = difference(expected, got)
                if differs is not None:
                    notes.append(f"the failing call: {instance.label(j, show_init=True)}")
                    return {"outcome": CALL_FAILED, "notes": notes,
                            "error": f"the exported program differs from eager: {differs}"}
                calls += 1
    if skipped:
        notes.append(f"{skipped} example call{'s' if skipped != 1 else ''} with other input "
                     "shapes not run (an exported program takes the shapes it was exported "
                     "with)")
    return {"outcome": EXPORTS, "notes": notes, "calls": calls}


def _shapes(value: Any) -> Any:
    """The input's structure with each tensor as its shape and dtype."""
    if isinstance(value, tuple | list):
        return tuple(_shapes(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _shapes(v)) for k, v in sorted(value.items()))
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return ("tensor", tuple(shape), str(value.dtype))
    return repr(value)


if __name__ == "__main__":
    child_main()
