"""The repair loop: a configured model that stops gets the place the compiler names rewritten
by the rules that answer its error, in any file of the tree, round by round, while the model
gets further with its eager outputs unchanged (:mod:`~tsfix.codemods.pipeline.models`'
docstring).
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.records import by_class, internal_error, skip_set_of
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.report import (
    MODEL_SCRIPTS,
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
)
from tsfix.codemods.pipeline.sources import SourceError, SourceText, read_source
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    Blocker,
    ClassVerdict,
    ModelResult,
    TypeTable,
    function_change_name,
)

if TYPE_CHECKING:
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
#  its caller passes.
_CALLEE = re.compile(r"^(?P<method>\w+)\(__torch__\.(?P<qualified>[\w.]+) self\b", re.MULTILINE)
_PASSED = re.compile(r"Expected a value of type '[^']*\(inferred\)' for argument '(?P<param>\w+)'"
                     r" but instead found type '(?P<found>[^']+)'")


@dataclass(frozen=True)
class _Typed:
    """A parameter's type from the compiler's message: ``path``'s class ``class_name``,
    ``method``'s ``param`` takes ``kind``."""

    path: str
    class_name: str
    method: str
    param: str
    kind: str


def typed_by_message(message: str, reached: Mapping[str, tuple[str, ...]]) -> _Typed | None:
    """The unannotated parameter of a tree class that TorchScript took for a Tensor while its
    caller passes another type, when the message names both (the callee's signature and the
    type found); None otherwise, or when the class's file is not known for certain."""
    callee, passed = _CALLEE.search(message), _PASSED.search(message)
    if callee is None or passed is None or "NoneType" in passed["found"]:
        return None
    class_name = callee["qualified"].rsplit(".", 1)[-1]
    paths = [path for path, classes in reached.items() if class_name in classes]
    if len(paths) != 1:
        return None
    return _Typed(paths[0], class_name, callee["method"], passed["param"], passed["found"])


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


def run_fix_loop(model: configured.Configured, result: ModelResult, overlay: dict[str, str],
                 tree: dict[str, LoopFile], run_files: Mapping[str, str],
                 run_classes: Mapping[str, list[ClassResult]],
                 observations: configured.Observations, session: Session, pool: WorkerPool,
                 rounds: list[str], deadline: float | None = None) -> LoopOutcome:
    """The repair loop for ``model``, which stops where ``result`` says: each round rewrites
    the class (or module-level function) the compiler names with the selected rules that
    answer its error, in any file of the tree (``tree``: the files the loop rewrote so far,
    shared between models; ``run_files``: resolved path -> display of the run's files, whose
    texts in ``overlay`` the loop starts from; ``run_classes``: their rewritten classes, given
    to the model job again so that their verdicts are those of the tree the loop leaves),
    runs the model again, and keeps the rewrite only when the model scripts or stops further
    on with every configuration's eager output unchanged. ``rounds`` gets one line per round.
    Stops when the model scripts, no rule offers a fix, a rewrite is rolled back, after
    ``session.fix_rounds`` rounds, or at ``deadline`` (``time.monotonic()``)."""
    outcome = LoopOutcome(result)
    before = {path: replace(f, chosen=dict(f.chosen), functions=set(f.functions),
                            results=list(f.results)) for path, f in tree.items()}
    works = "exports" if session.target == "export" else "scripts"
    for number in range(1, session.fix_rounds + 1):
        if not model_stops(outcome.result):
            break
        if deadline is not None and time.monotonic() + session.timeout > deadline:
            outcome.stopped = "the run's time budget is spent"
            rounds.append(f"round {number}: not tried: {outcome.stopped}")
            break
        assert outcome.result.model is not None and outcome.result.model.blocker is not None
        blocker = outcome.result.model.blocker
        stop = _round(number, model, blocker, outcome, overlay, tree, run_files, run_classes,
                      observations, session, pool, rounds, works)
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
            and any(c.verdict != VERIFIED for f in tree.values() for c in f.results)):
        # --require-verified writes nothing unproven: a model left short of scripting keeps
        # none of its repairs.
        tree.clear()
        tree.update(before)
        rounds.append("the repairs are not kept: --require-verified, and the model does not "
                      f"{works.removesuffix('s')} with them")
        outcome = LoopOutcome(result, stopped=(outcome.stopped or "") + (
            "; its repairs are not kept (--require-verified)"))
    return outcome


def _round(number: int, model: configured.Configured, blocker: Blocker, outcome: LoopOutcome,
           overlay: Mapping[str, str], tree: dict[str, LoopFile],
           run_files: Mapping[str, str], run_classes: Mapping[str, list[ClassResult]],
           observations: configured.Observations, session: Session, pool: WorkerPool,
           rounds: list[str], works: str) -> str:
    """One round of :func:`run_fix_loop`; returns why the loop stops ("": go on)."""
    path = str(blocker.path)
    known = tree.get(path)
    shown = known.display if known else run_files.get(path) or configured.shown(path)
    where = f"{shown}:{blocker.line}" if blocker.line else shown
    code = configured.error_code(blocker.message, session.target)
    typed = (typed_by_message(blocker.message, outcome.result.reached)
             if session.target != "export" else None)
    if typed is not None:
        # The compiler names the callee's parameter and the type passed: that is the place.
        path = typed.path
        code = "TSF207" if typed.kind.startswith("Optional[") else "TSF206"
    try:
        loop_file = _loop_file(path, tree, overlay, run_files)
    except SourceError as exc:
        rounds.append(f"round {number}: stops at {where}: {exc}")
        return f"{shown} cannot be read"
    current = loop_file.current
    if typed is not None:
        class_name: str | None = typed.class_name
        function = None
    else:
        class_name = configured.class_at(current, blocker.line, blocker.scope)
        function = (configured.function_at(current, blocker.line, blocker.scope)
                    if class_name is None else None)
        if class_name is not None and session.target != "export":
            typed = typed_default(current, blocker, path, class_name)
    if class_name is None and function is None:
        rounds.append(f"round {number}: stops at {where}, outside any class or module-level "
                      "function")
        return "no rule offers a fix (outside any class or function)"
    # A function is rewritten as compiled from another file (annotate's entries), its change
    # reported under function_change_name: the model's verdict is its verdict.
    owner = class_name if class_name is not None else function_change_name(str(function))
    functions = loop_file.functions | ({function} if function is not None else set())
    classes_of_file = frozenset(configured.top_level_classes(loop_file.base))
    types = _merged(observations.types.get(path, {}), loop_file.types)
    if typed is not None:
        types = _with_type(types, typed)
    error = code or "an error tsfix does not know"
    answering = answering_rules(session, code)
    # The rules that answer the error first; else every selected rule on that place: the
    # table names one construct per message, and a message listing every overload of a
    # call names several (any rule that gets the model further is kept, on proof).
    tried: list[tuple[type[Rule], ...]] = [answering] if answering else []
    if set(session.rules) - set(answering):
        tried.append(session.rules)
    text, names = current, ""
    classes: tuple[ClassResult, ...] = ()
    chosen = loop_file.chosen
    for rules in tried:
        names = (", ".join(rule.name for rule in rules) if rules is answering
                 else "every selected rule")
        chosen = dict(loop_file.chosen)
        if class_name is not None:
            chosen[class_name] = chosen.get(class_name, set()) | {r.name for r in rules}
        used = {name for names_of in chosen.values() for name in names_of}
        everyone = tuple(r for r in session.rules if r.name in used or r in rules)
        skip = skip_set_of({r.name: classes_of_file - {c for c, on in chosen.items()
                                                      if r.name in on} for r in everyone})
        settings = replace(session.settings, rules=everyone)
        try:
            text, classes, _ = settings.rewrite(loop_file.base, loop_file.display, types,
                                                skip, frozenset(functions))
        except Exception as exc:
            rounds.append(f"round {number}: rewriting {owner} in {loop_file.display} failed: "
                          f"{internal_error(loop_file.display, exc)}")
            return "a rule failed (internal error)"
        if text != current and any(c.class_name == owner for c in classes):
            break
    changed = [c for c in classes if c.class_name == owner]
    if text == current or not changed:
        rounds.append(f"round {number}: stops at {where} ({error}) in {owner}: "
                      f"{names or 'no selected rule'} leave(s) it as it is")
        return f"no rule offers a fix ({error}; {names or 'no rule'} leave(s) {owner} as it is)"
    fixed_rules = ", ".join(dict.fromkeys(c.rule for c in changed))
    # Every rewrite of the loop in this file, from its base: the earlier rounds' again.
    results = list(classes)
    texts = {**overlay, **{p: f.text for p, f in tree.items() if f.text}, path: text}
    owners = {function_change_name(f) for f in functions}
    wanted = [configured.model_class(Path(p), name, group)
              for p, file_results in _measured(tree, path, results, run_classes,
                                               outcome.result.files).items()
              for name, group in by_class(file_results).items() if name not in owners]
    answer = pool.models([configured.model_job(0, model, session, overlay=texts,
                                               classes=wanted)],
                         timeout=session.timeout).get(0)
    if answer is None or answer.failure is not None:
        why = answer.failure if answer is not None else "no answer from the worker"
        rounds.append(f"round {number}: {owner} rewritten by {fixed_rules}, not validated "
                      f"({why}); rolled back")
        return f"the rewrite by {fixed_rules} could not be validated"
    answer = configured.located(answer, texts, session.target)
    verdicts = {found.verdict.name: found.verdict for found in answer.classes
                if found.path == path}
    verdicts.update({name: _function_verdict(name, answer) for name in owners})
    # Rolled back: the rewritten class rejected, or any class the model reaches whose
    # instances' eager outputs changed. Another class whose own re-script fails now (the run
    # rewrote it, and scripting gets further into it) says nothing against this rewrite.
    bad = next((found.verdict for found in answer.classes
                if found.verdict.verdict == REJECTED and (
                    (found.verdict.name == owner and found.path == path)
                    or found.verdict.reason.startswith("eager parity"))), None)
    status = answer.model.status if answer.model else "not checked"
    now = (works if status == MODEL_SCRIPTS else
           f"stops at {_place(answer)}" if model_stops(answer) else
           "stops where the compiler names no line of the tree" if answer.model
           and answer.model.blocker is not None else status)
    if bad is not None:
        rounds.append(f"round {number}: stops at {where} in {owner}; the rewrite by "
                      f"{fixed_rules} is rejected ({bad.name}: {bad.reason}); rolled back")
        return f"the rewrite by {fixed_rules} at {where} is rejected: {bad.reason}"
    if not _eager_parity_held(answer):
        reason = answer.model.reason if answer.model else "no model verdict"
        rounds.append(f"round {number}: stops at {where} in {owner}; with the rewrite by "
                      f"{fixed_rules} the model fails: {reason}; rolled back")
        return f"the rewrite by {fixed_rules} at {where} is rolled back: {reason}"
    assert answer.model is not None
    if status != MODEL_SCRIPTS and answer.model.blocker is not None and not _moved(
            blocker, answer.model.blocker, session.target):
        rounds.append(f"round {number}: stops at {where} in {owner}; the rewrite by "
                      f"{fixed_rules} leaves the model stopping there; rolled back")
        return f"the rewrite by {fixed_rules} does not get the model past {where}"
    loop_file.text = text
    loop_file.functions = functions
    loop_file.chosen = chosen
    if typed is not None:
        loop_file.types = _with_type(loop_file.types, typed)
    # An earlier round's class keeps its verdict unless measured again, and when its own
    # re-script rejects it now (see `bad`).
    previous = {(c.rule, c.class_name): c for c in loop_file.results}
    verdicts = {name: v for name, v in verdicts.items()
                if v.verdict != REJECTED or name == owner}
    loop_file.results = [
        c if c.reason else
        replace(c, verdict=earlier.verdict, reason=earlier.reason,
                duration_s=earlier.duration_s)
        if (earlier := previous.get((c.rule, c.class_name))) is not None else
        replace(c, reason=f"not validated: the repair loop rewrote {loop_file.display} for "
                          f"model {model.display}, which does not reach this class; give it "
                          "an example table")
        for c in configured.with_verdicts(results, verdicts)]
    tree[path] = loop_file
    outcome.result = answer
    elsewhere = (f" ({loop_file.display}:{owner})" if path != blocker.path
                 or (class_name or function) != (blocker.scope or "").split(".")[0] else "")
    outcome.repairs.append(f"{where} {'+'.join(dict.fromkeys(c.rule for c in changed))}"
                           f"{elsewhere}")
    rounds.append(f"round {number}: stops at {where} ({error}) in {owner}; rewritten by "
                  f"{fixed_rules}; the model now {now}")
    return ""


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

