"""Configured models: a class with an example table is a model the user wants to export.

What the run does with them (validation on), besides validating each rewritten class:

1. **Examples flow down.** The model is built from the original tree and run on its example
   inputs; every submodule instance inside it is seen with its real inputs. The types seen in
   every class of the tree go to the rules (observe phase), and every rewritten class the model
   holds an instance of gets its verdict from that run (validate phase): eager parity of each
   rewritten instance on its inputs, re-script, one artifact across instances that differ in
   lifted settings, save/load (:mod:`tsfix.codemods.validation.model`). A class with a table of
   its own keeps its own verdict; a class no model reaches is guessed (``auto-examples``) or
   unverified, as before.
2. **A model verdict** (:class:`~tsfix.codemods.pipeline.report.ModelRecord`): the model built
   from the tree as the run leaves it, with the original's weights, scripts end to end, its
   outputs match the ORIGINAL eager outputs, and it survives save/load; or where it stops
   (file:line, TorchScript's message, and what ``tsfix explain`` says about that line). A
   configured model that does not script fails the run (exit 3) unless ``--allow-unscriptable``
   (``[tool.tsfix] allow-unscriptable = true``).
3. **The repair loop** (:mod:`~tsfix.codemods.pipeline.phases.fix_loop`). A model that
   stops is scripted (exported) on the tree as the run leaves it; its blocker (the innermost
   frame in the tree, its line, and the ``tsfix check`` code :func:`error_code` gives its
   message) is rewritten by the selected rules that declare that code (``Rule.CODES``; every
   selected rule when those leave it as it is), on the class or module-level function that
   holds it, in any file of the tree (a file of the run from the run's text of it). A
   parameter type the compiler's message names joins the observed types for that round and
   the later ones (``fix_loop.typed_by_message``: a method's or a module-level function's
   unannotated parameter given another type, or passed on where another type is expected,
   such as a PackedSequence; ``typed_default``; and ``typed_rebinding``: a local the message
   says is re-bound to another type, as ``"rebound <name>"``, which rebound-local reads). The
   model runs again: the rewrite is kept when the model scripts, or stops at another place,
   with every configuration's eager output unchanged; else rolled back. Until the model
   scripts, no rule offers a fix, ``Options.fix_rounds`` rounds are done or the run's time
   budget would be exceeded. The model's record names the rounds kept (``repairs``), the
   run's own rewrites of its classes (``rewrites``) and why the loop stopped (``stopped``);
   ``rounds`` has one line per round (``-v``). A file the loop rewrote outside the run is
   reported and written like the others, marked ``fix_loop``; the files a model that stops
   imports are decided only once its loop is over.

Which models: the tables of the files in the run. The tree: the folder of the configuration
(``pyproject.toml``), else the package of the model's file; files of the Python installation are
never the tree.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tsfix.codemods.pipeline.config import ExampleSpec
from tsfix.codemods.pipeline.report import (
    MODEL_ERROR,
    MODEL_FAILS,
    MODEL_SCRIPTS,
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
    ModelRecord,
    Phase,
)
from tsfix.codemods.validation.protocol import (
    Blocker,
    ClassVerdict,
    ModelClass,
    ModelJob,
    ModelResult,
    TypeTable,
)

if TYPE_CHECKING:
    from tsfix.codemods.pipeline.config import Config
    from tsfix.codemods.validation.pool import WorkerPool


class File(Protocol):
    """A file of the run (phases.File)."""

    @property
    def index(self) -> int: ...
    @property
    def resolved(self) -> Path: ...
    @property
    def display(self) -> str: ...


class Session(Protocol):
    """What model jobs need of the run (phases.Session)."""

    config: Config
    target: str
    timeout: float

    @property
    def sys_path(self) -> tuple[str, ...]: ...

    def reporter(self, phase: Phase, total: int) -> Callable[..., None]: ...


@dataclass(frozen=True)
class Configured:
    """A configured model of the run: class ``name`` of ``file``, built with ``spec``."""

    file: File
    name: str
    spec: ExampleSpec

    @property
    def display(self) -> str:
        return f"{self.file.display}:{self.name}"


def configured_models(todo: Iterable[File], session: Session) -> list[Configured]:
    found: list[Configured] = []
    for file in todo:
        specs = session.config.examples_in(file.resolved, resolved=True)
        found.extend(Configured(file, name, spec) for name, spec in sorted(specs.items())
                     if isinstance(spec, ExampleSpec))
    return found


def model_job(job_id: int, model: Configured, session: Session, *,
              overlay: Mapping[str, str] | None = None,
              classes: Iterable[ModelClass] = (),
              reads: Collection[str] | None = None) -> ModelJob:
    """``reads``: the tree files an earlier job of this model imported (:func:`reads_of`);
    only those files' texts and classes go into the job. A run of a few hundred files sent
    every rewritten file's text with each of thousands of model jobs, encoded and decoded
    each time."""
    root = session.config.root
    texts = dict(overlay or {})
    if reads is not None:
        wanted = set(reads)
        texts = {path: text for path, text in texts.items() if path in wanted}
        classes = [c for c in classes if c.path in wanted]
    return ModelJob(job_id, str(model.file.resolved), model.name, model.spec.to_example(),
                    "validate", texts, tuple(classes),
                    session.sys_path, str(root) if root else None, session.target)


def reads_of(result: ModelResult | None) -> tuple[str, ...] | None:
    """The tree files a model's earlier job (observe or validate) imported, running the
    original model: what its later jobs read too, since no rule adds an import of a tree
    file. None when not known (no such job, or the original did not build or run)."""
    if result is None or result.failure is not None or not result.files:
        return None
    return result.files


def model_class(path: Path, name: str, results: Iterable[ClassResult]) -> ModelClass:
    """One rewritten class for a model job, whatever number of rules changed it."""
    results = list(results)
    lifted: dict[str, str] = {}
    for c in results:
        lifted.update(c.lifted)
    return ModelClass(str(path), name, tuple(dict.fromkeys(c.rule for c in results)), lifted,
                      any(c.python_only for c in results))


# ---- observe ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Observations:
    """What running the original models found: types by file, and per model its result."""

    types: dict[str, TypeTable] = field(default_factory=dict)       # resolved path -> table
    results: dict[str, ModelResult] = field(default_factory=dict)   # model display -> result


def observe(models: list[Configured], session: Session, pool: WorkerPool) -> Observations:
    jobs = [replace(model_job(k, m, session), mode="observe") for k, m in enumerate(models)]
    report = session.reporter("observe", len(jobs))
    found = pool.models(jobs, timeout=session.timeout, on_result=lambda *_: report())
    types: dict[str, TypeTable] = {}
    results = {}
    for k, model in enumerate(models):
        result = found.get(k) or ModelResult(k, failure="no answer from the worker")
        for path, table in result.types.items():
            merge_types(types.setdefault(path, {}), table)
        # Kept for the whole run: without the types, merged above (thousands of models
        # each held the tables of every file they ran).
        results[model.display] = replace(result, types={})
    return Observations(types, results)


def merge_types(into: TypeTable, table: TypeTable) -> None:
    """Types seen by another model join; where two disagree, the first model's stays (each is
    a type the class really took; the rules type a parameter from one)."""
    for cls, methods in table.items():
        for method, params in methods.items():
            slot = into.setdefault(cls, {}).setdefault(method, {})
            for name, type_text in params.items():
                slot.setdefault(name, type_text)


# ---- validate ---------------------------------------------------------------------------------

def merged_verdicts(results: Iterable[tuple[str, ModelResult]]
                    ) -> dict[tuple[str, str], ClassVerdict]:
    """(path, class) -> one verdict from every model that reached the class: rejected by any
    model is rejected, else verified by any is verified, else the first reason."""
    merged: dict[tuple[str, str], ClassVerdict] = {}
    rank = {REJECTED: 2, VERIFIED: 1, UNVERIFIED: 0}
    for model, result in results:
        for found in result.classes:
            key = (found.path, found.verdict.name)
            known = merged.get(key)
            if known is None or rank[found.verdict.verdict] > rank[known.verdict]:
                verdict = found.verdict
                if "from model" not in verdict.reason:
                    # Which run decided it: the reader reproduces it with that model's table.
                    verdict = replace(verdict, reason=f"{verdict.reason} (inputs from model "
                                                      f"{model})")
                merged[key] = verdict
    return merged


# ---- the model verdict ------------------------------------------------------------------------

def to_explain(result: ModelResult) -> Blocker | None:
    """The blocker :func:`record_of` explains (one placed in a file of the tree), if any."""
    verdict = result.model
    if result.failure is not None or verdict is None or verdict.status == MODEL_SCRIPTS:
        return None
    blocker = verdict.blocker
    return blocker if blocker is not None and blocker.path is not None else None


def record_of(model: Configured, result: ModelResult, *, texts: Mapping[str, str],
              display: Mapping[str, str], target: str = "torchscript",
              explanation: str | None = None) -> ModelRecord:
    """The report's record of a model job's answer (the repair loop's rounds are added by its
    caller). ``texts``: the text of each rewritten file (the blocker's line is read there);
    ``display``: how the report names files; ``explanation``: :func:`explain_blocker`'s answer
    for the blocker, when the caller has it already (explaining runs ``tsfix check`` on the
    blocker's file)."""
    if result.failure is not None or result.model is None:
        return ModelRecord(model.display, MODEL_ERROR,
                           result.failure or "the worker gave no model verdict",
                           target=target)
    verdict = result.model
    blocker = verdict.blocker
    if verdict.status == MODEL_SCRIPTS or blocker is None or blocker.path is None:
        return ModelRecord(model.display, verdict.status, verdict.reason,
                           verdict.scripted_before,
                           message=_first_lines(blocker.message) if blocker else "",
                           python_only=verdict.python_only, duration_s=verdict.duration_s,
                           target=target)
    name = display.get(blocker.path) or shown(blocker.path)
    return ModelRecord(model.display, MODEL_FAILS, verdict.reason, verdict.scripted_before,
                       f"{name}:{blocker.line}" if blocker.line else name, blocker.scope,
                       _first_lines(blocker.message),
                       explain_blocker(blocker, texts.get(blocker.path), name, target)
                       if explanation is None else explanation,
                       python_only=verdict.python_only, duration_s=verdict.duration_s,
                       target=target)


def located(result: ModelResult, texts: Mapping[str, str],
            target: str = "torchscript") -> ModelResult:
    """``result`` with its blocker placed in the tree when TorchScript's message names no line
    there (an error inside torch's own code, such as ``flatten_parameters``): the first
    ``tsfix check`` finding of the construct the message matches, in a class the model holds
    an instance of, in the tree files it imports. Unchanged when none is found."""
    from tsfix.codemods.lint.check import CheckSyntaxError, check_source

    verdict = result.model
    if verdict is None or verdict.blocker is None or verdict.blocker.path is not None:
        return result
    message = verdict.blocker.message
    code = error_code(message, target)
    if code is None:
        return result
    for path in sorted(result.reached):
        text = texts.get(path)
        if text is None:
            text = _disk_text(path)
            if text is None:
                continue
        try:
            findings = check_source(text, path, target=target)
        except CheckSyntaxError:
            continue
        reached = set(result.reached[path])
        for finding in findings:
            if finding.code == code and finding.class_name in reached:
                scope = ".".join(filter(None, (finding.class_name, finding.method)))
                blocker = Blocker(path, finding.line, scope or None, message)
                return replace(result, model=replace(verdict, blocker=blocker))
    return result


def error_code(message: str, target: str = "torchscript") -> str | None:
    """The ``tsfix check`` code of a TorchScript (``target`` "export": torch.export) error:
    the first pattern of ``tsfix explain``'s table (KNOWN_ERRORS, EXPORT_ERRORS) found in
    ``message``; None when no pattern is, or the one found names no code."""
    from tsfix.codemods.lint.explain import EXPORT_ERRORS, KNOWN_ERRORS

    table = EXPORT_ERRORS if target == "export" else KNOWN_ERRORS
    known = next((k for k in table if re.search(k.pattern, message)), None)
    return None if known is None else known.code


def explain_blocker(blocker: Blocker, text: str | None, shown: str,
                    target: str = "torchscript", rejected: Mapping[str, str] | None = None
                    ) -> str:
    """What ``tsfix explain`` says about the blocker: the construct (a ``tsfix check`` code),
    and the rule that fixes that site or why it is left alone, or the hand fix (``rejected``:
    rule -> why the run rejected its rewrite of the blocker's class; never recommended)."""
    from tsfix.codemods.lint.explain import explain_error

    if blocker.path is None:
        return ""
    if text is None:
        text = _disk_text(blocker.path)
        if text is None:
            return ""
    scope = (blocker.scope or "").split(".")[0]
    return explain_error(blocker.message, Path(blocker.path), shown, text, scope, target,
                         rejected)


def _first_lines(message: str, lines: int = 6) -> str:
    kept = [line for line in message.strip().splitlines() if line.strip()][:lines]
    return "\n".join(kept)


def shown(path: str) -> str:
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path


def class_at(text: str, line: int | None, scope: str | None) -> str | None:
    """The top-level class of ``text`` that holds ``line`` (else the class ``scope`` names)."""
    return _top_level_at(text, line, (scope or "").split(".")[0], ast.ClassDef)


def function_at(text: str, line: int | None, scope: str | None) -> str | None:
    """The module-level function of ``text`` that holds ``line`` (else the one ``scope``
    names)."""
    return _top_level_at(text, line, scope or "", ast.FunctionDef)


def _top_level_at(text: str, line: int | None, wanted: str,
                  kind: type[ast.ClassDef] | type[ast.FunctionDef]) -> str | None:
    nodes = [(name, first, last) for node_kind, name, first, last in _top_level(text)
             if node_kind is kind]
    if line is not None:
        for name, first, last in nodes:
            if first <= line <= last:
                return name
    return wanted if any(name == wanted for name, _, _ in nodes) else None


def top_level_classes(text: str) -> list[str]:
    return [name for kind, name, _, _ in _top_level(text) if kind is ast.ClassDef]


@functools.lru_cache(maxsize=8)
def _top_level(text: str) -> tuple[tuple[type[ast.AST], str, int, int], ...]:
    """``text``'s top-level classes and functions: (kind, name, first line, last line). The
    repair loop asks for each model's every round, most of them of the same few texts."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return ()
    return tuple((type(node), node.name, node.lineno, node.end_lineno or node.lineno)
                 for node in tree.body if isinstance(node, ast.ClassDef | ast.FunctionDef))


def with_verdicts(classes: Iterable[ClassResult], verdicts: Mapping[str, ClassVerdict]
                  ) -> list[ClassResult]:
    out = []
    for c in classes:
        found = verdicts.get(c.class_name)
        out.append(c if found is None else replace(c, verdict=found.verdict,
                                                   reason=found.reason,
                                                   duration_s=found.duration_s))
    return out



def carried_over(result: ModelResult, before: Mapping[str, str], after: Mapping[str, str],
                 text_of: Callable[[str], str | None]) -> ModelResult | None:
    """The model's answer on the texts ``before`` as it reads on the texts ``after`` (its
    blocker's line moved with the code around it), when it answers for them too; else None.

    It does when the tree files the model imports (``result.files``; ``text_of`` gives one of
    the run the overlays do not hold, else it is read) are the same, or differ only in imports
    and in top-level classes and functions the model cannot run: those no live statement
    names. Live are
    the classes it holds an instance of or of which one is a subclass (``result.reached``),
    module-level statements that call something when the module is imported, and whatever a
    live statement names (a function, a base class, a class a live function builds, an
    import; by name, attribute or string). A list naming classes it never calls
    (ParityBench's ``TESTCASES``) does not make them live.

    The final texts differ from the validated ones mostly so: an unproven unsafe rewrite of
    a class no model reaches is withheld after the models ran (ParityBench: 90 of 114 models
    were run again for that alone)."""
    suspects: set[str] = set()          # the classes and functions whose code differs
    statements: list[tuple[str, _Statement]] = []
    moves: dict[str, dict[int, int]] = {}       # path -> line before -> line after
    for path in result.files:
        old = before.get(path) or text_of(path) or _disk_text(path)
        new = after.get(path) or text_of(path) or _disk_text(path)
        old_statements, new_statements = _statements(old), _statements(new)
        if old_statements is None or new_statements is None:
            return None
        if old == new:
            statements += [(path, s) for s in new_statements]
            continue
        statements += [(path, s) for s in (*old_statements, *new_statements)]
        moved = moves[path] = {}
        for o, n in itertools.zip_longest(
                [s for s in old_statements if s.kind != "import"],
                [s for s in new_statements if s.kind != "import"]):
            if o is not None and n is not None and o.code == n.code:
                if o.lines[0] != n.lines[0]:
                    moved.update((line, line + n.lines[0] - o.lines[0])
                                 for line in range(o.lines[0], o.lines[1] + 1))
                continue
            if o is None or n is None or not o.name or o.name != n.name:
                return None
            suspects.add(o.name)
    if not suspects:
        return _moved(result, moves)
    held = {str(Path(p).resolve()): {n.partition(".")[0] for n in names}
            for p, names in result.reached.items()}
    reached = {path: held.get(str(Path(path).resolve()), set()) for path in result.files}
    frontier = [s for path, s in statements
                if s.executes or (s.kind == "class" and s.name in reached[path])]
    live: set[str] = set().union(*(s.defines for s in frontier))
    while frontier:
        named = set().union(*(s.names for s in frontier)) - live
        live |= named
        frontier = [s for _, s in statements if s.defines & named]
    return None if suspects & live else _moved(result, moves)


def _moved(result: ModelResult, moves: Mapping[str, Mapping[int, int]]) -> ModelResult:
    """``result`` with its blocker's line, and the lines its message names, in the files
    whose code moved, where that code is in the texts the result now answers for."""
    verdict = result.model
    blocker = verdict.blocker if verdict is not None else None
    if verdict is None or blocker is None or not any(moves.values()):
        return result

    def frame(match: re.Match[str]) -> str:
        moved = moves.get(match["path"], {})
        return match[0].replace(match["line"], str(moved.get(int(match["line"]),
                                                              int(match["line"]))))

    message = blocker.message
    for path in moves:
        message = re.sub(rf'(?P<path>{re.escape(path)})(?:", line |:)(?P<line>\d+)', frame,
                         message)
    line = blocker.line
    if blocker.path is not None and line is not None:
        line = moves.get(blocker.path, {}).get(line, line)
    return replace(result, model=replace(verdict, blocker=replace(blocker, line=line,
                                                                  message=message)))


def _disk_text(path: str) -> str | None:
    """A tree file's text as on disk, or None when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class _Statement:
    """A top-level statement: ``import``, ``class`` or ``other``; the name it defines (a class
    or a function), its code
    (``ast.dump``), the names it binds, every name it mentions (names, attributes, imported
    names, strings), and whether it calls something when the module is imported."""

    kind: str
    name: str
    code: str
    defines: frozenset[str]
    names: frozenset[str]
    executes: bool
    lines: tuple[int, int]      # first (its decorators') and last line


@functools.lru_cache(maxsize=32)
def _statements(text: str | None) -> tuple[_Statement, ...] | None:
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found = []
    for statement in tree.body:
        kind = ("import" if isinstance(statement, ast.Import | ast.ImportFrom)
                else "class" if isinstance(statement, ast.ClassDef) else "other")
        name = (statement.name if isinstance(
            statement, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) else "")
        defines = {name} if name else set(_bound(statement))
        found.append(_Statement(
            kind, name, ast.dump(statement), frozenset(defines),
            frozenset(n for node in ast.walk(statement) for n in _mentions(node)),
            kind == "other" and _calls_on_import(statement),
            (min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))]),
             statement.end_lineno or statement.lineno)))
    return tuple(found)


def _bound(node: ast.AST) -> Iterable[str]:
    """The module-level names a statement binds (not those of the functions, lambdas or
    classes it defines)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
        return
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        yield node.id
    elif isinstance(node, ast.alias):
        yield node.asname or node.name.partition(".")[0]
    if not isinstance(node, ast.Lambda):
        for child in ast.iter_child_nodes(node):
            yield from _bound(child)


def _mentions(node: ast.AST) -> Iterable[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.alias):
        yield node.name.rpartition(".")[2]
        if node.asname:
            yield node.asname
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value


def _calls_on_import(node: ast.AST) -> bool:
    """A call that runs when the statement does: not one inside a function, a lambda or a
    class body defined there."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
        return False
    return isinstance(node, ast.Call) or any(
        _calls_on_import(child) for child in ast.iter_child_nodes(node))

__all__ = ["Configured", "Observations", "carried_over", "class_at", "configured_models",
           "error_code", "explain_blocker", "function_at", "located", "merge_types",
           "merged_verdicts", "model_class", "model_job", "observe", "reads_of", "record_of",
           "shown", "to_explain", "top_level_classes", "with_verdicts"]
