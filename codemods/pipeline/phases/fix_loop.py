"""The repair loop: a configured model that stops gets the place the compiler names rewritten
by the rules that answer its error, in any file of the tree, round by round, while the model
gets further with its eager outputs unchanged (:mod:`~tsfix.codemods.pipeline.models`'
docstring).
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.records import by_class, internal_error, skip_set_of
from tsfix.codemods.pipeline.phases.session import Session, rewritten
from tsfix.codemods.pipeline.phases.state import RunState
from tsfix.codemods.pipeline.report import (
    MODEL_SCRIPTS,
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
)
from tsfix.codemods.pipeline.sources import SourceError, SourceText, read_source
from tsfix.codemods.validation.protocol import (
    COMPILED_FROM,
    OBSERVED_FUNCTIONS,
    Blocker,
    ClassVerdict,
    ModelResult,
    TypeTable,
    function_change_name,
)

if TYPE_CHECKING:
    from tsfix.codemods.pipeline.phases.records import SkipSet
    from tsfix.codemods.pipeline.settings import RewriteSettings
    from tsfix.codemods.rules.base import Rule


@dataclass
class LoopFile:
    """A file of the tree the repair loop rewrote: a file of the run (starting from the text
    the run leaves it with) or one outside it (starting from its own text)."""

    source: SourceText
    display: str
    base: str                                # the text the loop started from
    in_run: bool = False
    # What the loop's rounds rewrote, all again from ``base`` each round (so that a rule
    # sees the classes it rewrites together as they were: constant-flag makes a block's
    # setting constant and, in a later round, the class that unpacks the block's output):
    # class -> the rules run on it, the module-level functions, and the types the
    # compiler's messages gave.
    chosen: dict[str, set[str]] = field(default_factory=dict)
    functions: set[str] = field(default_factory=set)
    types: TypeTable = field(default_factory=dict)
    text: str = ""                           # the loop's text ("": nothing kept yet)
    results: list[ClassResult] = field(default_factory=list)

    @property
    def current(self) -> str:
        return self.text or self.base


@dataclass
class LoopOutcome:
    """What the loop made of one model: its last answer, the rounds kept ("file:line rule")
    and, when the model still stops, why the loop stopped."""

    result: ModelResult
    repairs: list[str] = field(default_factory=list)
    stopped: str = ""


def model_stops(result: ModelResult) -> bool:
    """The model does not script, at a known place."""
    return (result.failure is None and result.model is not None
            and result.model.status == "fails" and result.model.blocker is not None
            and result.model.blocker.path is not None)


# How the model job says the rewritten tree does not import: a blocker, but no eager run.
_NOT_IMPORTED = "the rewritten tree does not import"


def _eager_parity_held(answer: ModelResult) -> bool:
    """The model job measured eager parity for every configuration: it checks it before it
    scripts, so a model that scripts, or whose scripting (exporting) failed once its tree
    imported (a blocker, placed in the tree or not), matched the original."""
    verdict = answer.model
    if verdict is None or answer.failure is not None:
        return False
    return verdict.status == MODEL_SCRIPTS or (
        verdict.blocker is not None and not verdict.reason.startswith(_NOT_IMPORTED))


_FRAME_LINE = re.compile(r'^\s*File "[^"]*", line \d+')
_UNDERLINE = re.compile(r"^\s*~+")


def _moved(before: Blocker, after: Blocker, target: str) -> bool:
    """Progress: the model stops at another place than ``before``: another file, another
    error class, or another line with another error or another construct marked (the same
    construct a rewrite only shifted down is not a move)."""
    if before.path != after.path or (configured.error_code(before.message, target)
                                     != configured.error_code(after.message, target)):
        return True
    if not any(map(_FRAME_LINE.match, (before.message + "\n" + after.message).splitlines())):
        # The compiler named no line: `tsfix check` placed both at a finding of the
        # construct, and another line is another finding (the first one was fixed).
        return before.line != after.line
    return before.line != after.line and _comparable(before.message) != _comparable(
        after.message)


def _comparable(message: str) -> list[str]:
    """What a message says apart from where: its text before the first frame, and the code
    lines TorchScript underlines (``~~~~ <--- HERE``), without the context it shows around
    them, addresses or spacing."""
    lines = message.splitlines()
    first = next((i for i, line in enumerate(lines) if _FRAME_LINE.match(line)), len(lines))
    marked = [lines[i - 1] for i, line in enumerate(lines) if i and _UNDERLINE.match(line)]
    return [" ".join(re.sub(r"0x[0-9a-fA-F]+", "0x?", line).split())
            for line in [*lines[:first], *marked]]


# "forward(__torch__.pkg.blocks.Inner self, Tensor x, Tensor lengths=...) -> Tensor:
#  Expected a value of type 'Tensor (inferred)' for argument 'lengths' but instead found
#  type 'Optional[Tensor]'." (torch 2.13): the callee's unannotated parameter, and the type
#  its caller passes. A module-level function's signature has no ``self``: "pad(Tensor inputs)
#  -> Tensor:".
_CALLEE = re.compile(r"^(?P<method>\w+)\(__torch__\.(?P<qualified>[\w.]+) self\b", re.MULTILINE)
_SCHEMA = re.compile(r"^(?P<name>\w+)\((?P<params>[^\n]*)\) -> [^\n]*:$", re.MULTILINE)
_PASSED = re.compile(r"Expected a value of type '[^']*\(inferred\)' for argument '(?P<param>\w+)'"
                     r" but instead found type '(?P<found>[^']+)'")
# The other way round: an unannotated parameter (a Tensor to TorchScript) passed on to a callee
# that takes another type: "pad_packed_sequence(__torch__.torch.nn.utils.rnn.PackedSequence
# sequence, bool batch_first=False, ...) -> ((Tensor, Tensor)):\nExpected a value of type
# '__torch__.torch.nn.utils.rnn.PackedSequence' for argument 'sequence' but instead found type
# 'Tensor (inferred)'.\nInferred the value for argument 'sequence' to be of type 'Tensor'
# because it was not annotated with an explicit type." (torch 2.13; the frame is the call, in
# the function or method whose parameter it is).
_PASSED_ON = re.compile(r"Expected a value of type '(?P<expected>[^']+)' for argument "
                        r"'(?P<param>\w+)' but instead found type 'Tensor \(inferred\)'")


@dataclass(frozen=True)
class _Typed:
    """A parameter's type from the compiler's message: ``path``'s class ``class_name``,
    ``method``'s ``param`` takes ``kind`` (``class_name`` OBSERVED_FUNCTIONS: ``method`` is a
    module-level function)."""

    path: str
    class_name: str
    method: str
    param: str
    kind: str

    @property
    def function(self) -> str | None:
        """The module-level function whose parameter it is, if it is one."""
        return self.method if self.class_name == OBSERVED_FUNCTIONS else None


def annotation_kind(found: str) -> str | None:
    """A type of TorchScript's message as annotate writes it: ``__torch__.torch.nn.utils.rnn.
    PackedSequence`` -> ``torch.nn.utils.rnn.PackedSequence`` (a class of torch, reached
    through ``torch``); None for a class of the tree or anything else spelled ``__torch__``
    (no annotation names it without an import of its module)."""
    kind = re.sub(r"__torch__\.(torch\.[\w.]+)", r"\1", found.strip())
    return None if "__torch__" in kind or "(inferred)" in kind else kind


def typed_by_message(message: str, reached: Mapping[str, tuple[str, ...]],
                     blocker: Blocker | None = None, text: str | None = None) -> _Typed | None:
    """The unannotated parameter that TorchScript took for a Tensor while it is given another
    type, when the message names both: a tree class's method (the callee's signature and the
    type its caller passes), or, with the ``blocker`` and its file's ``text``, a module-level
    function of that file called at the blocker (``pad(Tensor inputs) -> Tensor:``), or the
    parameter of the function or method at the blocker that it passes on to a callee taking
    another type (``... found type 'Tensor (inferred)'``). None otherwise, or when the class's
    file is not known for certain, or the type cannot be written as an annotation."""
    callee, passed = _CALLEE.search(message), _PASSED.search(message)
    if passed is not None and "NoneType" not in passed["found"]:
        kind = annotation_kind(passed["found"])
        if kind is None:
            return None
        if callee is not None:
            class_name = callee["qualified"].rsplit(".", 1)[-1]
            paths = [path for path, classes in reached.items() if class_name in classes]
            if len(paths) != 1:
                return None
            return _Typed(paths[0], class_name, callee["method"], passed["param"], kind)
        schema = _schema_before(message, passed.start())
        if (schema is None or blocker is None or blocker.path is None or text is None
                or schema["name"] not in _plain_functions(text, passed["param"])):
            return None
        return _Typed(blocker.path, OBSERVED_FUNCTIONS, schema["name"], passed["param"], kind)
    passed_on = _PASSED_ON.search(message)
    if (passed_on is None or blocker is None or text is None
            or "The following variants are available" in message):
        # Several overloads: each names the type it would take, none is the one.
        return None
    kind = annotation_kind(passed_on["expected"])
    schema = _schema_before(message, passed_on.start())
    if kind is None or schema is None:
        return None
    return _passed_on(text, blocker, schema, passed_on["param"], kind)


def _schema_before(message: str, end: int) -> re.Match[str] | None:
    """The last signature line of the message before ``end``."""
    found = None
    for match in _SCHEMA.finditer(message, 0, end):
        found = match
    return found


def _schema_params(params: str) -> list[str]:
    """The parameter names of a signature line's ``(...)`` (``(Tensor, Tensor)? hx=None``)."""
    names: list[str] = []
    depth, part = 0, ""
    for char in params + ",":
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            words = part.split("=", 1)[0].split()
            if words:
                names.append(words[-1])
            part = ""
        else:
            part += char
    return names


def _plain_functions(text: str, param: str) -> set[str]:
    """The module-level functions of ``text`` with an unannotated ``param``."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return set()
    return {node.name for node in module.body if isinstance(node, ast.FunctionDef)
            and any(a.arg == param and a.annotation is None
                    for a in [*node.args.posonlyargs, *node.args.args])}


def _passed_on(text: str, blocker: Blocker, schema: re.Match[str], param: str, kind: str
               ) -> _Typed | None:
    """The unannotated parameter (no default) of the function or method holding the blocker's
    line that the one call of that line passes to the callee's ``param``."""
    if blocker.line is None or blocker.path is None:
        return None
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    scope = (blocker.scope or "").split(".")
    holder: ast.FunctionDef | None = None
    class_name = OBSERVED_FUNCTIONS
    for node in module.body:
        if len(scope) == 1 and isinstance(node, ast.FunctionDef) and node.name == scope[0]:
            holder = node
        elif (len(scope) == 2 and isinstance(node, ast.ClassDef) and node.name == scope[0]):
            class_name = node.name
            holder = next((m for m in node.body if isinstance(m, ast.FunctionDef)
                           and m.name == scope[1]), None)
    if holder is None:
        return None
    params = _schema_params(schema["params"])
    if params[:1] == ["self"]:
        params = params[1:]
    position = params.index(param) if param in params else None
    arguments = []
    for call in ast.walk(holder):
        if not isinstance(call, ast.Call) or call.lineno != blocker.line:
            continue
        given = next((k.value for k in call.keywords if k.arg == param), None)
        if given is None and position is not None and position < len(call.args) and not any(
                isinstance(a, ast.Starred) for a in call.args[:position + 1]):
            given = call.args[position]
        if isinstance(given, ast.Name):
            arguments.append(given.id)
    plain = {a.arg for a in _required(holder)}
    found = [name for name in dict.fromkeys(arguments) if name in plain]
    if len(found) != 1:
        return None
    return _Typed(blocker.path, class_name, holder.name, found[0], kind)


def _required(func: ast.FunctionDef) -> list[ast.arg]:
    """The positional parameters of ``func`` without annotation or default."""
    positional = [*func.args.posonlyargs, *func.args.args]
    required = positional[:len(positional) - len(func.args.defaults)]
    return [a for a in required if a.annotation is None]


# A local re-bound to another type in a nested block: "Variable 'x' previously had type Tensor
# (inferred) but is now being assigned to a value of type
# __torch__.torch.nn.utils.rnn.PackedSequence" (torch 2.13). The type given goes to the
# method's observed types as ``"rebound x"`` (rebound-local reads it).
_REBOUND = re.compile(r"Variable '(?P<name>\w+)' previously had type .+? but is now being "
                      r"assigned to a value of type (?P<kind>\S+)")


def typed_rebinding(blocker: Blocker, class_name: str | None) -> _Typed | None:
    """The re-binding the blocker's message names, in a method of ``class_name``."""
    found = _REBOUND.search(blocker.message)
    scope = (blocker.scope or "").split(".")
    if (found is None or class_name is None or blocker.path is None or len(scope) != 2
            or scope[0] != class_name):
        return None
    return _Typed(blocker.path, class_name, scope[1], f"rebound {found['name']}",
                  found["kind"].rstrip(".,"))


# The compiler took an unannotated `p=None` for a Tensor: "Unsupported value kind: Tensor"
# (a call leaves it out; torch 2.13 names no line, `tsfix check`'s TSF207 finding places it),
# "Expected a default value of type Tensor (inferred) on parameter".
_NONE_AS_TENSOR = re.compile(r"Unsupported value kind: Tensor|Expected a default value of "
                             r"type Tensor")


def typed_default(text: str, blocker: Blocker, path: str, class_name: str) -> _Typed | None:
    """``Optional[Tensor]`` for the unannotated ``None``-default parameter of a method of
    ``class_name`` on the blocker's line, when the message says the compiler took it for a
    Tensor; None otherwise."""
    if blocker.line is None or not _NONE_AS_TENSOR.search(blocker.message):
        return None
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    found = [(method.name, arg.arg)
             for node in module.body if isinstance(node, ast.ClassDef)
             and node.name == class_name
             for method in node.body if isinstance(method, ast.FunctionDef)
             for arg, default in zip(method.args.args[::-1], method.args.defaults[::-1],
                                     strict=False)
             if arg.lineno == blocker.line and arg.annotation is None
             and isinstance(default, ast.Constant) and default.value is None]
    if len(found) != 1:
        return None
    [(method, param)] = found
    return _Typed(path, class_name, method, param, "Optional[Tensor]")


def _with_type(table: TypeTable, typed: _Typed) -> TypeTable:
    """``table`` with ``typed``'s parameter type, unless a complete type was observed."""
    params = dict(table.get(typed.class_name, {}).get(typed.method, {}))
    seen = params.get(typed.param)
    if seen is not None and seen not in ("None", "NoneType"):
        return table
    params[typed.param] = typed.kind
    methods = {**table.get(typed.class_name, {}), typed.method: params}
    return {**table, typed.class_name: methods}


def _merged(observed: TypeTable, given: TypeTable) -> TypeTable:
    """The observed types, with those the compiler's messages gave in earlier rounds."""
    table = observed
    for class_name, methods in given.items():
        for method, params in methods.items():
            for param, kind in params.items():
                table = _with_type(table, _Typed("", class_name, method, param, kind))
    return table


def answering_rules(session: Session, code: str | None) -> tuple[type[Rule], ...]:
    """The selected rules that declare ``code`` (``Rule.CODES``): those that answer it."""
    if code is None:
        return ()
    return tuple(rule for rule in session.rules if any(c.code == code for c in rule.CODES))


def _loop_file(path: str, tree: dict[str, LoopFile], overlay: Mapping[str, str],
               run_files: Mapping[str, str]) -> LoopFile:
    """The loop's record of ``path``: the one it has, else a new one starting from the run's
    text of that file (a file of the run) or from the file itself. Raises SourceError."""
    known = tree.get(path)
    if known is not None:
        return known
    source = read_source(Path(path))
    in_run = path in run_files
    return LoopFile(source, run_files.get(path) or configured.shown(path),
                    overlay.get(path, source.text), in_run)


@dataclass
class LoopTree:
    """What the repair loops of one run share: the run (``state``), the texts it leaves
    (``overlay``, by resolved path), the files the loops rewrote so far (``files``: a model's
    repairs are the next model's starting point), the run's files (resolved path -> display)
    and their written rewrites (``run_classes``: given to the model job again, so that their
    verdicts are those of the tree the loops leave)."""

    state: RunState
    overlay: dict[str, str]
    files: dict[str, LoopFile] = field(default_factory=dict)
    run_files: dict[str, str] = field(default_factory=dict)
    run_classes: dict[str, list[ClassResult]] = field(default_factory=dict)
    # Each rewrite a round asked for, by all it depends on: models of one file often stop
    # at the same place of the same text (eight of ParityBench's mega_pytorch models at one
    # Conv2d), and rewriting a large file is most of a round that no rule can fix.
    rewrites: dict[tuple[object, ...], tuple[str, tuple[ClassResult, ...]]] = field(
        default_factory=dict)

    @property
    def session(self) -> Session:
        return self.state.session

    def rewritten(self, settings: RewriteSettings, loop_file: LoopFile, types: TypeTable,
                  skip: SkipSet, functions: frozenset[str]
                  ) -> tuple[str, tuple[ClassResult, ...]]:
        """``loop_file``'s base rewritten (once per distinct request of the run's loops)."""
        key = (settings, loop_file.base, loop_file.display, json.dumps(types, sort_keys=True),
               skip, functions)
        if key not in self.rewrites:
            text, classes, _ = rewritten(settings, loop_file.base, loop_file.display, types,
                                         skip, functions)
            self.rewrites[key] = (text, classes)
        return self.rewrites[key]


@dataclass
class _ModelLoop:
    """One model's loop: its rounds' lines, and what "works" means for the target."""

    tree: LoopTree
    model: configured.Configured
    rounds: list[str]
    outcome: LoopOutcome
    # Where each round found the model stopping: a rewrite that brings it back to one of
    # them undoes an earlier round (two rules rewriting one line back and forth).
    stops: list[Blocker] = field(default_factory=list)

    @property
    def works(self) -> str:
        return "exports" if self.tree.session.target == "export" else "scripts"


def run_fix_loop(tree: LoopTree, model: configured.Configured, result: ModelResult,
                 rounds: list[str]) -> LoopOutcome:
    """The repair loop for ``model``, which stops where ``result`` says: each round rewrites
    the class (or module-level function) the compiler names with the selected rules that
    answer its error, in any file of the tree, runs the model again, and keeps the rewrite
    only when the model scripts or stops further on with every configuration's eager output
    unchanged. ``rounds`` gets one line per round. Stops when the model scripts, no rule
    offers a fix, a rewrite is rolled back, after ``session.fix_rounds`` rounds, or at the
    run's deadline (``session.deadline``, ``time.monotonic()``)."""
    session = tree.session
    loop = _ModelLoop(tree, model, rounds, LoopOutcome(result))
    outcome = loop.outcome
    before = {path: replace(f, chosen=dict(f.chosen), functions=set(f.functions),
                            results=list(f.results)) for path, f in tree.files.items()}
    budget_ends = (time.monotonic() + session.model_budget
                   if session.model_budget is not None else None)
    for number in range(1, session.fix_rounds + 1):
        if not model_stops(outcome.result):
            break
        # A round takes up to a model job's timeout: none starts that cannot finish in time.
        if session.deadline is not None and time.monotonic() + session.timeout > session.deadline:
            outcome.stopped = "the run's time budget is spent"
            rounds.append(f"round {number}: not tried: {outcome.stopped}")
            break
        if budget_ends is not None and time.monotonic() + session.timeout > budget_ends:
            outcome.stopped = (f"the model's repair budget ({session.model_budget:g} s, "
                               "--model-budget) is spent")
            rounds.append(f"round {number}: not tried: {outcome.stopped}")
            break
        assert outcome.result.model is not None and outcome.result.model.blocker is not None
        stop = _round(loop, number, outcome.result.model.blocker)
        if stop:
            outcome.stopped = stop
            break
    else:
        if model_stops(outcome.result):
            outcome.stopped = f"the round budget ({session.fix_rounds}) is spent"
    last = outcome.result.model
    if (not outcome.stopped and last is not None and last.blocker is not None
            and not model_stops(outcome.result)):
        outcome.stopped = "no rule offers a fix (the compiler names no line of the tree)"
    if (session.require_verified and outcome.repairs
            and any(c.verdict != VERIFIED for f in tree.files.values() for c in f.results)):
        # --require-verified writes nothing unproven: a model left short of scripting keeps
        # none of its repairs.
        tree.files.clear()
        tree.files.update(before)
        rounds.append("the repairs are not kept: --require-verified, and the model does not "
                      f"{loop.works.removesuffix('s')} with them")
        outcome = LoopOutcome(result, stopped=(outcome.stopped or "") + (
            "; its repairs are not kept (--require-verified)"))
    return outcome


@dataclass
class _Site:
    """Where a round rewrites: the class or module-level function the compiler's message
    names (or the callee whose parameter type it names), in ``loop_file``."""

    path: str
    where: str                               # "file:line" of the blocker, for the lines
    code: str | None                         # the error's tsfix check code
    typed: _Typed | None                     # a parameter type the message gives
    loop_file: LoopFile
    class_name: str | None
    function: str | None
    # The module-level functions of the file ``function`` calls, directly or not: where the
    # compiler met code outside the tree while compiling ``function``, the call of it may be
    # in any of them (TorchScript names the outermost function of the file it compiles).
    callees: frozenset[str] = frozenset()
    called: bool = False                     # ``function`` is compiled from the blocker's line

    @property
    def owner(self) -> str:
        """The name the rewrite is reported under (a function's: function_change_name)."""
        return (self.class_name if self.class_name is not None
                else function_change_name(str(self.function)))

    @property
    def placed(self) -> str:
        """The owner as a round line names it: a function compiled from the blocker's line
        (the call of it) says so, the line being the caller's."""
        return f"{self.owner}, called there" if self.called else self.owner

    @property
    def owners(self) -> set[str]:
        """The names of what the round may rewrite: the owner and the callees."""
        return {self.owner, *map(function_change_name, self.callees)}

    @property
    def error(self) -> str:
        return self.code or "an error tsfix does not know"


def _site(loop: _ModelLoop, number: int, blocker: Blocker) -> _Site | str:
    """The place a round rewrites, or why the loop stops (its round line added)."""
    tree, target = loop.tree, loop.tree.session.target
    path = str(blocker.path)
    known = tree.files.get(path)
    shown = known.display if known else tree.run_files.get(path) or configured.shown(path)
    where = f"{shown}:{blocker.line}" if blocker.line else shown
    code = configured.error_code(blocker.message, target)
    try:
        text: str | None = _loop_file(path, tree.files, tree.overlay, tree.run_files).current
    except SourceError:
        text = None
    if code is None and text is not None and blocker.line is not None:
        # A message tsfix does not know ("module cannot be used as a tuple"): the construct
        # on the line it points at says what it is, as in the explain line.
        from tsfix.codemods.lint.explain import code_on_line

        code = code_on_line(text, shown, blocker.line, target)
    typed = (typed_by_message(blocker.message, loop.outcome.result.reached, blocker, text)
             if target != "export" else None)
    if typed is not None:
        # The compiler names the parameter and the type it is given: that is the place.
        path = typed.path
        code = "TSF207" if typed.kind.startswith("Optional[") else "TSF206"
    try:
        loop_file = _loop_file(path, tree.files, tree.overlay, tree.run_files)
    except SourceError as exc:
        loop.rounds.append(f"round {number}: stops at {where}: {exc}")
        return f"{shown} cannot be read"
    current = loop_file.current
    class_name: str | None = None
    function = None
    callees: frozenset[str] = frozenset()
    called: str | None = None
    if typed is not None:
        function = typed.function
        class_name = typed.class_name if function is None else None
    elif (called := called_function(blocker, current)) is not None:
        function = called
        callees = _callees(current, called)
    else:
        class_name = configured.class_at(current, blocker.line, blocker.scope)
        function = (configured.function_at(current, blocker.line, blocker.scope)
                    if class_name is None else None)
        if class_name is not None and target != "export":
            typed = (typed_default(current, blocker, path, class_name)
                     or typed_rebinding(blocker, class_name))
    if class_name is None and function is None:
        loop.rounds.append(f"round {number}: stops at {where}, outside any class or "
                           "module-level function")
        return "no rule offers a fix (outside any class or function)"
    return _Site(path, where, code, typed, loop_file, class_name, function, callees,
                 called is not None)


_FIRST_PLACE = re.compile(r'File "([^"]+)", line (\d+)')


def called_function(blocker: Blocker, text: str) -> str | None:
    """The module-level function of the blocker's file that TorchScript was compiling when it
    met an error in code outside the tree, the blocker being the call of it: halonet's
    ``relative_logits_1d``, which calls einops' ``rearrange`` (the message's first place is
    einops' signature, the first in the tree is the call in ``RelPosEmb.forward``). The rules
    rewrite the function, not the caller. None otherwise."""
    called = COMPILED_FROM.search(blocker.message)
    first = _FIRST_PLACE.search(blocker.message)
    if called is None or first is None or blocker.path is None or first.start() > called.start():
        return None
    if Path(first.group(1)).resolve() == Path(blocker.path) and int(first.group(2)) == blocker.line:
        return None                 # the error's own place is in the tree: the rules go there
    name = called.group(1)
    if name == (blocker.scope or "").split(".")[0]:
        return None
    return configured.function_at(text, None, name)


def _callees(text: str, function: str) -> frozenset[str]:
    """The module-level functions of ``text`` that ``function`` calls by name, directly or
    through each other (``function`` itself left out)."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()
    defined = {node.name: node for node in module.body if isinstance(node, ast.FunctionDef)}
    found: set[str] = set()
    todo = [function]
    while todo:
        node = defined.get(todo.pop())
        for call in ast.walk(node) if node is not None else ():
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id in defined and call.func.id not in found | {function}):
                found.add(call.func.id)
                todo.append(call.func.id)
    return frozenset(found)


@dataclass
class _Rewritten:
    """A round's rewrite of its site's file: the text, its changes, the rules chosen per
    class, the module-level functions rewritten, and how the rules were picked."""

    text: str
    classes: tuple[ClassResult, ...]
    chosen: dict[str, set[str]]
    functions: set[str]
    names: str


def _rewrite_site(loop: _ModelLoop, number: int, site: _Site) -> _Rewritten | str:
    """The site's file rewritten from its base by the rules that answer the error (else by
    every selected rule), with the earlier rounds' choices; or why the loop stops."""
    session, loop_file = loop.tree.session, site.loop_file
    functions = loop_file.functions | site.callees | (
        {site.function} if site.function is not None else set())
    classes_of_file = frozenset(configured.top_level_classes(loop_file.base))
    types = _merged(loop.tree.state.observations.types.get(site.path, {}), loop_file.types)
    if site.typed is not None:
        types = _with_type(types, site.typed)
    answering = answering_rules(session, site.code)
    # The rules that answer the error first; else every selected rule on that place: the
    # table names one construct per message, and a message listing every overload of a
    # call names several (any rule that gets the model further is kept, on proof).
    tried: list[tuple[type[Rule], ...]] = [answering] if answering else []
    if set(session.rules) - set(answering):
        tried.append(session.rules)
    done = _Rewritten(loop_file.current, (), loop_file.chosen, functions, "")
    for rules in tried:
        names = (", ".join(rule.name for rule in rules) if rules is answering
                 else "every selected rule")
        # The rules earlier rounds chose for this class or function run again with these:
        # each round rewrites the file from its base.
        chosen = dict(loop_file.chosen)
        chosen[site.owner] = chosen.get(site.owner, set()) | {r.name for r in rules}
        used = {name for names_of in chosen.values() for name in names_of}
        everyone = tuple(r for r in session.rules if r.name in used or r in rules)
        skip = skip_set_of({r.name: classes_of_file - {c for c, on in chosen.items()
                                                      if r.name in on} for r in everyone})
        settings = replace(session.settings, rules=everyone)
        try:
            text, classes = loop.tree.rewritten(settings, loop_file, types, skip,
                                                frozenset(functions))
        except Exception as exc:
            loop.rounds.append(f"round {number}: rewriting {site.owner} in {loop_file.display}"
                               f" failed: {internal_error(loop_file.display, exc)}")
            return "a rule failed (internal error)"
        done = _Rewritten(text, classes, chosen, functions, names)
        if text != loop_file.current and any(c.class_name in site.owners for c in classes):
            break
    if done.text == loop_file.current or not any(c.class_name in site.owners
                                                 for c in done.classes):
        names = done.names or "no selected rule"
        verb = "leave" if "," in names else "leaves"
        loop.rounds.append(f"round {number}: stops at {site.where} ({site.error}) in "
                           f"{site.placed}: {names} {verb} it as it is")
        return (f"no rule offers a fix ({site.error}; {done.names or 'no rule'} {verb} "
                f"{site.owner} as it is)")
    return done


def _round(loop: _ModelLoop, number: int, blocker: Blocker) -> str:
    """One round of :func:`run_fix_loop`; returns why the loop stops ("": go on)."""
    site = _site(loop, number, blocker)
    if isinstance(site, str):
        return site
    done = _rewrite_site(loop, number, site)
    if isinstance(done, str):
        return done
    changed = [c for c in done.classes if c.class_name in site.owners]
    fixed_rules = ", ".join(dict.fromkeys(c.rule for c in changed))
    answer = _run_model(loop, site, done)
    if isinstance(answer, str):
        loop.rounds.append(f"round {number}: {site.owner} rewritten by {fixed_rules}, not "
                           f"validated ({answer}); rolled back")
        return f"the rewrite by {fixed_rules} could not be validated"
    loop.stops.append(blocker)
    stop = _rolled_back(loop, number, site, blocker, answer, fixed_rules)
    if stop:
        return stop
    _keep(loop, site, done, answer)
    elsewhere = (f" ({site.loop_file.display}:{site.owner})"
                 if site.path != blocker.path or (site.class_name or site.function)
                 != (blocker.scope or "").split(".")[0] else "")
    loop.outcome.repairs.append(f"{site.where} "
                                f"{'+'.join(dict.fromkeys(c.rule for c in changed))}"
                                f"{elsewhere}")
    loop.rounds.append(f"round {number}: stops at {site.where} ({site.error}) in {site.placed};"
                       f" rewritten by {fixed_rules}; the model now {_now(loop, answer)}")
    return ""


def _run_model(loop: _ModelLoop, site: _Site, done: _Rewritten) -> ModelResult | str:
    """The model's answer on the tree with the round's rewrite (every rewrite of the loop in
    this file, from its base: the earlier rounds' again), or why there is none."""
    tree = loop.tree
    texts = {**tree.overlay, **{p: f.text for p, f in tree.files.items() if f.text},
             site.path: done.text}
    owners = {function_change_name(f) for f in done.functions}
    wanted = [configured.model_class(Path(p), name, group)
              for p, file_results in _measured(tree.files, site.path, list(done.classes),
                                               tree.run_classes,
                                               loop.outcome.result.files).items()
              for name, group in by_class(file_results).items() if name not in owners]
    session = tree.session
    answer = tree.state.pool.models([configured.model_job(0, loop.model, session,
                                                          overlay=texts, classes=wanted)],
                                    timeout=session.timeout).get(0)
    if answer is None or answer.failure is not None:
        return answer.failure or "" if answer is not None else "no answer from the worker"
    return configured.located(answer, texts, session.target)


def _now(loop: _ModelLoop, answer: ModelResult) -> str:
    """Where the model is with a round's rewrite, for the round's line."""
    status = answer.model.status if answer.model else "not checked"
    return (loop.works if status == MODEL_SCRIPTS else
            f"stops at {_place(answer)}" if model_stops(answer) else
            "stops where the compiler names no line of the tree" if answer.model
            and answer.model.blocker is not None else status)


def _rolled_back(loop: _ModelLoop, number: int, site: _Site, blocker: Blocker,
                 answer: ModelResult, fixed_rules: str) -> str:
    """Why a round's rewrite is rolled back ("": it is kept): the rewritten class rejected,
    any class the model reaches whose instances' eager outputs changed, the model failing
    before it scripts, or the model stopping at the same place. Another class whose own
    re-script fails now (the run rewrote it, and scripting gets further into it) says
    nothing against this rewrite."""
    where, owner = site.where, site.owner
    bad = next((found.verdict for found in answer.classes
                if found.verdict.verdict == REJECTED and (
                    (found.verdict.name == owner and found.path == site.path)
                    or found.verdict.reason.startswith("eager parity"))), None)
    if bad is not None:
        loop.rounds.append(f"round {number}: stops at {where} in {owner}; the rewrite by "
                           f"{fixed_rules} is rejected ({bad.name}: {bad.reason}); rolled back")
        return f"the rewrite by {fixed_rules} at {where} is rejected: {bad.reason}"
    if not _eager_parity_held(answer):
        reason = answer.model.reason if answer.model else "no model verdict"
        loop.rounds.append(f"round {number}: stops at {where} in {owner}; with the rewrite by "
                           f"{fixed_rules} the model fails: {reason}; rolled back")
        return f"the rewrite by {fixed_rules} at {where} is rolled back: {reason}"
    assert answer.model is not None
    if answer.model.status != MODEL_SCRIPTS and answer.model.blocker is not None and not _moved(
            blocker, answer.model.blocker, loop.tree.session.target):
        loop.rounds.append(f"round {number}: stops at {where} in {owner}; the rewrite by "
                           f"{fixed_rules} leaves the model stopping there; rolled back")
        return f"the rewrite by {fixed_rules} does not get the model past {where}"
    if answer.model.status != MODEL_SCRIPTS and answer.model.blocker is not None:
        again = next((k for k, earlier in enumerate(loop.stops[:-1], 1) if not _moved(
            earlier, answer.model.blocker, loop.tree.session.target)), None)
        if again is not None:
            loop.rounds.append(f"round {number}: stops at {where} in {owner}; the rewrite by "
                               f"{fixed_rules} takes the model back to where round {again} "
                               "stopped; rolled back")
            return (f"the rewrite by {fixed_rules} at {where} undoes round {again}'s (the "
                    "model stops there again)")
    return ""


def _keep(loop: _ModelLoop, site: _Site, done: _Rewritten, answer: ModelResult) -> None:
    """The round's rewrite joins the tree, its classes with the verdicts the model gave."""
    loop_file, owner = site.loop_file, site.owner
    owners = {function_change_name(f) for f in done.functions}
    verdicts = {found.verdict.name: found.verdict for found in answer.classes
                if found.path == site.path}
    verdicts.update({name: _function_verdict(name, answer) for name in owners})
    loop_file.text = done.text
    loop_file.functions = done.functions
    loop_file.chosen = done.chosen
    if site.typed is not None:
        loop_file.types = _with_type(loop_file.types, site.typed)
    # An earlier round's class keeps its verdict unless measured again, and when its own
    # re-script rejects it now (see _rolled_back).
    previous = {(c.rule, c.class_name): c for c in loop_file.results}
    verdicts = {name: v for name, v in verdicts.items()
                if v.verdict != REJECTED or name == owner}
    loop_file.results = [
        c if c.reason else
        replace(c, verdict=earlier.verdict, reason=earlier.reason,
                duration_s=earlier.duration_s)
        if (earlier := previous.get((c.rule, c.class_name))) is not None else
        replace(c, reason=f"not validated: the repair loop rewrote {loop_file.display} for "
                          f"model {loop.model.display}, which does not reach this class; "
                          "give it an example table")
        for c in configured.with_verdicts(list(done.classes), verdicts)]
    loop.tree.files[site.path] = loop_file
    loop.outcome.result = answer


def _measured(tree: Mapping[str, LoopFile], path: str, results: list[ClassResult],
              run_classes: Mapping[str, list[ClassResult]], files: Iterable[str]
              ) -> dict[str, list[ClassResult]]:
    """The rewritten classes a round's model job gives verdicts to, by file: every class the
    loop rewrote (``results`` for ``path``: this round's with the earlier ones), and the run's
    own rewrites in the files the model imports (``files``): the tree they were checked on
    changed, and their verdicts are to be those of the tree written."""
    measured = {p: list(run_classes[p]) for p in files if p in run_classes}
    for p, f in tree.items():
        measured[p] = [*run_classes.get(p, []), *f.results]
    measured[path] = [*run_classes.get(path, []), *results]
    return measured


def _place(answer: ModelResult) -> str:
    assert answer.model is not None and answer.model.blocker is not None
    blocker = answer.model.blocker
    shown = configured.shown(str(blocker.path))
    return f"{shown}:{blocker.line}" if blocker.line else shown


def _function_verdict(owner: str, answer: ModelResult) -> ClassVerdict:
    """The verdict on a module-level function the loop rewrote: no class of its own to
    script, so the model's answer is its verdict (the model checks eager parity before it
    scripts)."""
    verdict = answer.model
    if verdict is None:
        return ClassVerdict(owner, UNVERIFIED, "the model job gave no verdict")
    if verdict.status == MODEL_SCRIPTS:
        return ClassVerdict(owner, VERIFIED, f"the model scripts with it ({verdict.reason})")
    if _eager_parity_held(answer):
        return ClassVerdict(owner, UNVERIFIED, f"the model's eager outputs match the "
                                               f"original's with it, and it still stops at "
                                               f"{_place(answer)}: its scripted outputs "
                                               "cannot be compared yet")
    return ClassVerdict(owner, UNVERIFIED, f"the model: {verdict.reason}")

