"""The phases of a run over the files the cache could not answer: observe, rewrite, validate,
rule-drop trials, final texts (:mod:`~tsfix.codemods.pipeline.engine`'s docstring tells the
whole run). Each phase is a function from the records of the phases before it to new frozen
records; :func:`run_phases` chains them and returns each file's outcome, which the engine
writes. Importing this module loads neither LibCST nor black: the rules are loaded when a
file is first rewritten (:meth:`_RewriteSettings.rewrite`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.config import Config, ExampleError, ExampleSpec
from tsfix.codemods.pipeline.report import (
    MODEL_FAILS,
    MODEL_SCRIPTS,
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
    FileResult,
    ModelRecord,
    Phase,
    Progress,
    SkipResult,
)
from tsfix.codemods.pipeline.sources import SourceError, SourceText, is_generated, read_source
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    NOT_CHECKED,
    NOT_SCRIPTABLE_EITHER,
    Blocker,
    ClassVerdict,
    JobClass,
    ModelJob,
    ModelResult,
    TypeTable,
    ValidationJob,
    eager_parity_proven,
    function_change_name,
)

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from tsfix.codemods.rules.base import ClassChange, Rule


@dataclass(frozen=True)
class File:
    """A file found for the run, and the names it goes by."""

    index: int                              # in the run's list of files
    path: Path                              # as discovered
    resolved: Path
    display: str                            # in messages and the report


@dataclass(frozen=True)
class _Observed:
    """What the observe round found for one file."""

    types: TypeTable = field(default_factory=dict)
    notes: tuple[str, ...] = ()             # why a class has no observations
    # Observing the original's examples timed out: validation would hang the same way.
    timed_out: str | None = None


@dataclass(frozen=True)
class _ToRewrite:
    """A file for the first rewrite round: read it, pre-filter, rewrite."""

    index: int                              # in the run's list of files
    path: Path
    display: str
    observed: TypeTable


@dataclass(frozen=True)
class _Rewritten:
    """The first round's answer for one file."""

    index: int
    status: Literal["unchanged", "changed", "skipped", "failed"]
    error: str | None = None
    source: SourceText | None = None        # changed files only
    text: str = ""                          # changed files: the rewrite with every rule
    classes: tuple[ClassResult, ...] = ()   # one per rule and class it changed, unverified
    skips: tuple[SkipResult, ...] = ()
    rewrite_s: float = 0.0


# A rule name -> classes it must leave alone; hashable, so equal skip sets share a rewrite.
SkipSet = tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True)
class _ToRewriteAgain:
    """A text already read, rewritten again with rules skipping classes (trials, final)."""

    key: int
    text: str
    display: str
    observed: TypeTable
    skip: SkipSet


@dataclass(frozen=True)
class _RewrittenAgain:
    key: int
    text: str = ""
    classes: tuple[ClassResult, ...] = ()
    error: str | None = None                # the rules raised


@dataclass(frozen=True)
class _Pending:
    """A file the rules changed, on its way through validation."""

    file: File
    source: SourceText
    text: str
    classes: tuple[ClassResult, ...]
    observed: _Observed
    rewrite_s: float = 0.0                  # the first round's time for this file

    @property
    def index(self) -> int:
        return self.file.index

    def again(self, key: int, skip: SkipSet) -> _ToRewriteAgain:
        return _ToRewriteAgain(key, self.source.text, self.file.display, self.observed.types,
                               skip)


@dataclass(frozen=True)
class _Checked:
    """The validate phase's answer for one file: a verdict per class, or the file fails (a
    broken example table)."""

    verdicts: Mapping[str, ClassVerdict] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class _Drop:
    """A trial that verified: ``class_name`` without ``dropped``'s rewrite ("": with every
    rule, the file's other rejected classes left out)."""

    class_name: str
    dropped: str
    verdict: ClassVerdict
    kept: tuple[ClassResult, ...]           # the trial's ClassResults for the class
    skip: SkipSet
    text: str


@dataclass(frozen=True)
class _Final:
    """What the run makes of a changed file: its FileResult fields and the text to write."""

    status: str
    classes: tuple[ClassResult, ...] = ()
    error: str | None = None
    text: str | None = None                 # status "changed": the new text


# ---- settings and progress ---------------------------------------------------------------------

@dataclass(frozen=True)
class _RewriteSettings:
    """What rewriting one file needs; small and picklable, sent to rewrite worker processes."""

    rules: tuple[type[Rule], ...]
    line_length: int
    unsafe_fixes: bool

    def rewrite(self, text: str, display: str, observed: TypeTable, skip: SkipSet = (),
                compiled_functions: frozenset[str] = frozenset()
                ) -> tuple[str, tuple[ClassResult, ...], tuple[SkipResult, ...]]:
        """The new text, a ClassResult per change and the skips. LibCST, black and the rules
        are imported here, on the first file that needs them."""
        from tsfix.codemods.pipeline import rewrite as rewriting

        done = rewriting.rewrite_source(text, display, self.rules, line_length=self.line_length,
                                        skip_classes=dict(skip) or None,
                                        unsafe_fixes=self.unsafe_fixes, observed=observed or None,
                                        compiled_functions=compiled_functions)
        return (done.text, tuple(_class_result(c) for c in done.changes),
                tuple(SkipResult.of(s) for s in done.skips))


@dataclass
class Session:
    """What every phase of one run needs."""

    rule_names: list[str]
    config: Config
    require_verified: bool
    unsafe_fixes: bool
    target: str = "torchscript"
    verify: bool = True
    workers: int = 1                        # rewrite processes and validation workers
    timeout: float = 120.0                  # per file's validation
    progress: Callable[[Progress], None] | None = None
    # Running totals for the progress display: "rewrites" and one entry per verdict.
    counts: dict[str, int] = field(default_factory=dict)
    processes: int = 0                      # other processes that rewrote files
    fix_rounds: int = 5                     # per configured model (models.py)
    # Called in this process with the outcomes of files as they are decided (their final
    # text known and every configured model reaching them answered), so that the engine
    # writes them before the run is over: a run stopped later keeps them. By file index;
    # the flag: the outcome is complete (no model's record or imports will be added).
    decided: Callable[[dict[int, Outcome], bool], None] | None = None

    @cached_property
    def rules(self) -> tuple[type[Rule], ...]:
        """The rule classes (importing them imports LibCST: only when a file is rewritten)."""
        from tsfix.codemods.rules.registry import select_rules

        return tuple(select_rules(self.rule_names, self.target))

    @cached_property
    def order(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.rule_names)}

    def reporter(self, phase: Phase, total: int) -> _Reporter:
        return _Reporter(self.progress, phase, total, self.counts, self.target)

    @cached_property
    def settings(self) -> _RewriteSettings:
        return _RewriteSettings(self.rules, self.config.line_length, self.unsafe_fixes)

    @property
    def sys_path(self) -> tuple[str, ...]:
        return (str(self.config.root),) if self.config.root else ()

    def rank(self, rule: str) -> int:
        """A rule's place in registry (``--rule all``) order."""
        return self.order.get(rule, len(self.order))


class _Reporter:
    """Counts one phase's completed items and tells ``Options.progress`` (if any)."""

    def __init__(self, callback: Callable[[Progress], None] | None, phase: Phase, total: int,
                 counts: dict[str, int], target: str = "torchscript") -> None:
        self.callback, self.phase, self.total, self.counts = callback, phase, total, counts
        self.target = target
        self.done = 0
        self._tell()

    def __call__(self, items: int = 1, *, rewrites: int = 0,
                 verdicts: Iterable[str] = ()) -> None:
        self.done += items
        self.counts["rewrites"] = self.counts.get("rewrites", 0) + rewrites
        for verdict in verdicts:
            self.counts[verdict] = self.counts.get(verdict, 0) + 1
        self._tell()

    def _tell(self) -> None:
        if self.callback is not None and self.total:
            self.callback(Progress(self.phase, self.done, self.total,
                                   self.counts.get("rewrites", 0),
                                   {k: v for k, v in self.counts.items() if k != "rewrites"},
                                   self.target))


# ---- the phases, chained ----------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """What the phases made of one file: its result, and for a changed file the new text and
    the file as it was read (its encoding and line endings, for the write)."""

    result: FileResult
    text: str | None = None
    source: SourceText | None = None


def run_phases(todo: list[File], session: Session) -> tuple[dict[int, Outcome], list[Outcome]]:
    """Every phase over ``todo``; returns each file's outcome by its index, and the outcomes
    of files the fix loop rewrote (not among ``todo``). Nothing is written here: a file's
    outcome goes to ``session.decided`` as soon as it is known (:class:`_Decisions`)."""
    observed: dict[int, _Observed] = {}
    rewritten: dict[int, _Rewritten] = {}
    finals: dict[int, _Final] = {}
    decisions = _Decisions(session, lambda file, final: _outcome(
        file, rewritten[file.index], observed, final or finals.get(file.index)))
    models = configured.configured_models(todo, session) if session.verify else []
    observations = configured.Observations()
    validated: dict[str, ModelResult] = {}
    found_models = _Models()
    # Validation workers start only when a round has jobs; with verify=False none runs.
    with WorkerPool(session.workers) as pool, _Rewriters(session) as rewriters:
        if models and any(rule.needs_observations for rule in session.rules):
            observations = configured.observe(models, session, pool)
            observed = _observed_files(todo, models, observations)
        rewritten = _rewrite_all(todo, observed, session, rewriters)
        by_index = {file.index: file for file in todo}
        pending = [_Pending(by_index[r.index], r.source, r.text, r.classes,
                            observed.get(r.index, _Observed()), r.rewrite_s)
                   for r in rewritten.values() if r.status == "changed" and r.source]
        if not models:
            # No model's verdict to wait for: a file the rules did not change is decided.
            decisions.tell(file for file in todo if rewritten[file.index].status != "changed")
        if session.verify:
            checked, validated = _validate(
                pending, models, session, pool, observations,
                ready=lambda item, check: _decide_early(item, check, session, rewriters,
                                                        decisions))
            drops = _drop_rules(pending, checked, session, pool, rewriters)
        else:
            checked = {item.index: _Checked({c.class_name: ClassVerdict(
                c.class_name, UNVERIFIED, "not validated (--no-verify)")
                for c in item.classes}) for item in pending}
            drops = {}
        finals = _final_texts(pending, checked, drops, session, rewriters,
                              recheck=bool(models) and session.verify)
        rechecked: dict[str, tuple[dict[str, str], ModelResult]] = {}
        if models and session.verify:
            finals = _recheck_not_checked(pending, checked, drops, finals, models, validated,
                                          session, pool, rewriters, rechecked)
        # Every final text is known; a file no model reaches has nothing left to wait for.
        reached = {path for model in models for path in (
            str(model.file.resolved), *(validated[model.display].files
                                         if model.display in validated else ()))}
        decisions.tell(file for file in todo if str(file.resolved) not in reached)
        if models:
            found_models = _model_verdicts(
                models, todo, pending, finals, validated, observations, session, pool,
                rewriters, rechecked, answered=lambda: decisions.tell(todo, complete=False))
    outcomes = {}
    for file in todo:
        outcome = _outcome(file, rewritten[file.index], observed, finals.get(file.index))
        result = replace(outcome.result, models=found_models.records.get(file.index, []),
                         depends=dict.fromkeys(sorted(found_models.depends.get(file.index,
                                                                               ())), ""))
        outcomes[file.index] = replace(outcome, result=result)
    return outcomes, found_models.extra


def _outcome(file: File, rewritten: _Rewritten, observed: Mapping[int, _Observed],
             final: _Final | None) -> Outcome:
    """A file's outcome from the phases, before the model phase adds its records."""
    result, text = _file_result(file.path, file.display, rewritten,
                                observed.get(file.index, _Observed()), final)
    return Outcome(result, text, rewritten.source)


class _Decisions:
    """Tells ``session.decided`` each file's outcome once, when the run has decided it.

    A file counts as decided when its final text and the verdicts of its classes are known
    and no later phase can change them:

    - a file the rules did not change, or that failed: once rewritten, when no configured
      model is in the run; else once every final text is known (below);
    - a changed file, while the models still run (:func:`_decide_early`): every model that
      may reach it answered, no class of it waits for a guessed example or for a model's
      recheck, and no rule-drop trial can change it (:func:`_validate`'s ``ready``);
    - every other file once every final text is known, when no model reaches it;
    - the rest when every model has its verdict on the final texts.

    Only a file no model reaches is complete when decided (the model phase adds records and
    imports to the others); the engine caches only complete outcomes before the run's end."""

    def __init__(self, session: Session,
                 outcome: Callable[[File, _Final | None], Outcome]) -> None:
        self.session, self.outcome = session, outcome
        self.told: set[int] = set()

    def tell(self, files: Iterable[File], *, complete: bool = True,
             finals: Mapping[int, _Final] | None = None) -> None:
        """``complete``: no model reaches these files (nothing will be added to them).
        ``finals``: their final texts, known before the phase that computes them all."""
        if self.session.decided is None:
            return
        ready = [file for file in files if file.index not in self.told]
        self.told.update(file.index for file in ready)
        if ready:
            self.session.decided({file.index: self.outcome(file, (finals or {}).get(file.index))
                                  for file in ready}, complete)


def _decide_early(item: _Pending, check: _Checked, session: Session, rewriters: _Rewriters,
                  decisions: _Decisions) -> None:
    """A changed file whose verdicts are final while models still run: decided now, unless
    a rule-drop trial may change it. Its final text is the one :func:`_final_texts` gives at
    the end of the phases (the same verdicts and no drop), computed without progress lines
    (the display is showing the models)."""
    if session.decided is None or _trials_of(item, check, session):
        return
    quiet = replace(session, progress=None)
    finals = _final_texts([item], {item.index: check}, {}, quiet, rewriters)
    decisions.tell([item.file], complete=False, finals=finals)


def _observed_files(todo: list[File], models: list[configured.Configured],
                    observations: configured.Observations) -> dict[int, _Observed]:
    """Each file's types from the models' runs, and why a model gave none."""
    observed: dict[int, _Observed] = {}
    for file in todo:
        types = observations.types.get(str(file.resolved), {})
        notes: list[str] = []
        timed_out = None
        for model in models:
            result = observations.results.get(model.display)
            if model.file.index != file.index or result is None or result.failure is None:
                continue
            notes.append(f"no observed types for {model.name} (static inference only): "
                         f"{result.failure}")
            if "timed out" in result.failure:
                timed_out = result.failure
        if types or notes:
            observed[file.index] = _Observed(types, tuple(notes), timed_out)
    return observed


def _file_result(path: Path, display: str, rewritten: _Rewritten, observed: _Observed,
                 final: _Final | None) -> tuple[FileResult, str | None]:
    """A file's result once every phase is over, and its new text when it changed."""
    notes, types = list(observed.notes), observed.types
    base = FileResult(path, display, rewritten.status, rewritten.error,
                      skips=list(rewritten.skips), notes=notes, observed=types,
                      rewrite_s=rewritten.rewrite_s)
    if final is None:
        return base, None
    text = final.text if final.status == "changed" else None
    diff = ""
    if text is not None:
        from tsfix.codemods.pipeline.rewrite import unified_diff

        assert rewritten.source is not None
        diff = unified_diff(rewritten.source.text, text, display)
    return replace(base, status=final.status, error=final.error, classes=list(final.classes),
                   diff=diff, new_text=text), text


# ---- rewrite -----------------------------------------------------------------------------------

# Below this many files, starting rewrite processes (each imports LibCST and black, ~0.5 s)
# costs more than it saves; unless the round's work is known to take longer than
# PARALLEL_MIN_SECONDS (a later round of large files: on ParityBench one file took 12.8 s at
# p90, and its rule-drop trials rewrote such files serially, one core busy, the others idle).
PARALLEL_MIN_FILES = 24
PARALLEL_MIN_SECONDS = 5.0
# Files per task sent to a rewrite process: large enough to amortise pickling, small enough
# to keep every process busy to the end and the progress display moving.
FILES_PER_TASK = 8

T = TypeVar("T")
R = TypeVar("R")


class _Rewriters:
    """Where rewrites run: in this process, or in spawn processes started the first time a
    round is large enough (``PARALLEL_MIN_FILES``) and then kept for the run's later rounds
    (trials, final texts). A process that dies (killed, out of memory, or never started
    because the calling script has no ``if __name__ == "__main__":`` guard, which spawn
    re-runs) sends the round's unfinished work, and every later round, to this process."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._executor: ProcessPoolExecutor | None = None
        self._broken = False
        self.pids: set[int] = set()

    def __enter__(self) -> _Rewriters:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self.session.processes = len(self.pids - {os.getpid()})

    def map(self, work: Callable[[T, _RewriteSettings], R], items: Sequence[T],
            done: Callable[[R], None], *, seconds: float = 0.0) -> list[R]:
        """``work(item, settings)`` for every item, in any order; ``done`` is called in this
        process as each result arrives. ``seconds``: what the items are expected to take
        here (the first round's times), which can make a short round worth the processes."""
        settings = self.session.settings
        small = len(items) < PARALLEL_MIN_FILES and seconds < PARALLEL_MIN_SECONDS
        if self._executor is None and (self._broken or self.session.workers <= 1
                                       or len(items) < 2 or small):
            return self._here(work, items, settings, done)
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        if self._executor is None:
            # Processes stopped on Ctrl-C leave their queue's semaphores to multiprocessing's
            # resource tracker, which cleans them up and would say so on stderr after the
            # run's one interrupt message: the tracker (started with this pool, inheriting
            # the environment) is told to clean up silently.
            _quiet_resource_tracker()
            # spawn, not fork: the validation pool may already have threads and pipes open.
            self._executor = ProcessPoolExecutor(
                max_workers=self.session.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_ignore_interrupts)
        results: dict[int, R] = {}
        # A few items per process at least four times over: a short round of large files
        # is spread one file per task, not left to one process.
        per_task = max(1, min(FILES_PER_TASK, len(items) // (4 * self.session.workers)))
        tasks = [list(range(start, min(start + per_task, len(items))))
                 for start in range(0, len(items), per_task)]
        with _children_born_ignoring_interrupts():
            futures = {self._executor.submit(_work_batch, work, [items[i] for i in task],
                                             settings): task for task in tasks}
        try:
            for future in as_completed(futures):
                pid, answers = future.result()
                self.pids.add(pid)
                for i, answer in zip(futures[future], answers, strict=True):
                    results[i] = answer
                    done(answer)
        except BrokenProcessPool:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor, self._broken = None, True
            missing = [items[i] for i in range(len(items)) if i not in results]
            return [*results.values(), *self._here(work, missing, settings, done)]
        except BaseException:
            # Ctrl-C (or a failure here): the processes only compute, nothing of theirs is
            # written, so they are stopped rather than waited for (waiting at exit for
            # processes still importing their modules could hang the run).
            processes = list(getattr(self._executor, "_processes", {}).values())
            self._executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                with contextlib.suppress(Exception):
                    process.terminate()
            self._executor = None
            raise
        return list(results.values())

    def _here(self, work: Callable[[T, _RewriteSettings], R], items: Sequence[T],
              settings: _RewriteSettings, done: Callable[[R], None]) -> list[R]:
        self.pids.add(os.getpid())
        results = []
        for item in items:
            results.append(work(item, settings))
            done(results[-1])
        return results


def _work_batch(work: Callable[[T, _RewriteSettings], R], items: list[T],
                settings: _RewriteSettings) -> tuple[int, list[R]]:
    """One rewrite process's share: a few items, and the process that did them."""
    return os.getpid(), [work(item, settings) for item in items]


_QUIET_TRACKER = "ignore:resource_tracker:UserWarning"


def _quiet_resource_tracker() -> None:
    current = os.environ.get("PYTHONWARNINGS", "")
    if _QUIET_TRACKER not in current.split(","):
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [current, _QUIET_TRACKER]))


@contextlib.contextmanager
def _children_born_ignoring_interrupts() -> Iterator[None]:
    """Processes started in the block ignore Ctrl-C from birth: an ignored SIGINT survives
    fork and exec, and Python keeps it ignored, so a Ctrl-C while a rewrite process imports
    its modules prints no traceback from it (the initializer comes too late for that). The
    parent ignores it only while submitting, which starts the processes and returns (a few
    ms); the run's own interrupt handling is back before any work is waited for."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ignore_interrupts() -> None:
    """Rewrite processes leave Ctrl-C to the parent, which stops the run; a traceback from
    every process would bury its message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _rewrite_all(todo: list[File], observed: dict[int, _Observed], session: Session,
                 rewriters: _Rewriters) -> dict[int, _Rewritten]:
    """Read and rewrite every file (in processes when there are many)."""
    items = [_ToRewrite(f.index, f.path, f.display, observed.get(f.index, _Observed()).types)
             for f in todo]
    report = session.reporter("rewrite", len(items))
    answers: list[_Rewritten] = rewriters.map(
        _rewrite_file, items, lambda r: report(rewrites=len(r.classes)))
    return {r.index: r for r in sorted(answers, key=lambda r: r.index)}


def _rewrite_file(item: _ToRewrite, settings: _RewriteSettings) -> _Rewritten:
    started = time.perf_counter()
    try:
        source = read_source(item.path)
    except SourceError as exc:
        return _Rewritten(item.index, "failed", str(exc))
    from tsfix.codemods.facts.syntax import may_define_module
    from tsfix.codemods.pipeline.rewrite import RewriteError, python_syntax_error

    if is_generated(source.text):
        return _Rewritten(item.index, "skipped")
    if not may_define_module(source.text):
        # No rule looks at it, but it must still be Python (CPython's parser: a tenth of
        # LibCST's time).
        problem = python_syntax_error(source.text, item.display)
        if problem is not None:
            return _Rewritten(item.index, "failed", problem,
                              rewrite_s=round(time.perf_counter() - started, 4))
        return _Rewritten(item.index, "skipped")
    try:
        text, classes, skips = settings.rewrite(source.text, item.display, item.observed)
    except RewriteError as exc:
        return _Rewritten(item.index, "failed", str(exc),
                          rewrite_s=round(time.perf_counter() - started, 4))
    except Exception as exc:
        return _Rewritten(item.index, "failed", _internal_error(item.display, exc),
                          rewrite_s=round(time.perf_counter() - started, 4))
    elapsed = round(time.perf_counter() - started, 4)
    if not classes:
        return _Rewritten(item.index, "unchanged", skips=skips, rewrite_s=elapsed)
    return _Rewritten(item.index, "changed", source=source, text=text, classes=classes,
                      skips=skips, rewrite_s=elapsed)


def _rewrite_again(item: _ToRewriteAgain, settings: _RewriteSettings) -> _RewrittenAgain:
    try:
        text, classes, _ = settings.rewrite(item.text, item.display, item.observed, item.skip)
    except Exception as exc:
        return _RewrittenAgain(item.key, error=_internal_error(item.display, exc))
    return _RewrittenAgain(item.key, text, classes)


def _class_result(change: ClassChange) -> ClassResult:
    return ClassResult(change.rule, change.class_name, change.lines, change.summary,
                       dict(change.lifted), notes=list(change.notes),
                       python_only=change.python_only, safe=change.safe)


def _internal_error(display: str, exc: Exception) -> str:
    return (f"{display}: internal error ({type(exc).__name__}: {exc}); "
            "nothing was changed. Please report this with the file.")


def _by_class(classes: Iterable[ClassResult]) -> dict[str, list[ClassResult]]:
    """ClassResults grouped by class, in order of first appearance (one group per class)."""
    groups: dict[str, list[ClassResult]] = {}
    for c in classes:
        groups.setdefault(c.class_name, []).append(c)
    return groups


def _job_class(name: str, results: Iterable[ClassResult], spec: ExampleSpec) -> JobClass:
    """One validation entry for a class, whatever number of rules changed it."""
    results = list(results)
    lifted: dict[str, str] = {}
    for c in results:
        lifted.update(c.lifted)
    return JobClass(name, spec.to_example(), tuple(dict.fromkeys(c.rule for c in results)),
                    lifted, any(c.python_only for c in results))


def _skip_set(skip: Mapping[str, frozenset[str]]) -> SkipSet:
    return tuple(sorted((rule, classes) for rule, classes in skip.items() if classes))


# ---- validation --------------------------------------------------------------------------------

def _validate(pending: list[_Pending], models: list[configured.Configured], session: Session,
              pool: WorkerPool, observations: configured.Observations | None = None,
              ready: Callable[[_Pending, _Checked], None] | None = None
              ) -> tuple[dict[int, _Checked], dict[str, ModelResult]]:
    """A verdict for every rewritten class: a class with its own example table is validated
    alone; the others from the configured models that hold instances of them (one model job
    each, over the whole rewritten tree); a class no model reaches is guessed
    (``auto-examples``) or unverified. Returns the verdicts by file, and each model job's
    answer by model (its model verdict is the final one when nothing is held back).

    ``ready`` gets a file's verdicts while other models still run, as soon as they are its
    final ones: every model that may reach the file has answered (a model whose observe job
    named the files it imports reaches only those: its job carries no others; any other
    model may reach every file until it answers), no class of the file waits for a guessed
    example, and no model said it could not check one of its classes (the recheck may
    still reject that class). Later answers cannot change them: see _early_verdicts."""
    config = session.config
    checked: dict[int, _Checked] = {}
    jobs: list[ValidationJob] = []
    by_job: dict[int, int] = {}
    # file index -> class -> its ClassResults: no table of its own, for the models
    by_models: dict[int, dict[str, list[ClassResult]]] = {}
    # The classes with a table of their own: the models check them too (below).
    tabled: dict[int, dict[str, list[ClassResult]]] = {}
    for item in pending:
        verdicts: dict[str, ClassVerdict] = {}
        classes: list[JobClass] = []
        error = None
        for name, group in _by_class(item.classes).items():
            spec = config.example_for(item.file.resolved, name, resolved=True)
            if isinstance(spec, ExampleError):
                error = str(spec)
                break
            if spec is None:
                by_models.setdefault(item.index, {})[name] = group
                continue
            classes.append(_job_class(name, group, spec))
            tabled.setdefault(item.index, {})[name] = group
        if error is not None:
            checked[item.index] = _Checked(error=error)
            by_models.pop(item.index, None)
            tabled.pop(item.index, None)
            continue
        if classes and item.observed.timed_out:
            # Validation runs the same original examples first; do not wait for it twice.
            for c in classes:
                verdicts[c.name] = ClassVerdict(
                    c.name, UNVERIFIED, f"{item.observed.timed_out} while observing the "
                                        "original's examples; not validated")
        elif classes:
            job = ValidationJob(len(jobs), str(item.file.resolved), item.text, tuple(classes),
                                session.sys_path, target=session.target)
            jobs.append(job)
            by_job[job.id] = item.index
        checked[item.index] = _Checked(verdicts)
    _run_validation(jobs, by_job, checked, session, pool, "validate")

    validated: dict[str, ModelResult] = {}
    reached: dict[tuple[str, str], ClassVerdict] = {}
    if models:
        overlay = {str(item.file.resolved): item.text for item in pending
                   if checked[item.index].error is None}
        # A class verified on its own table can still break a model that holds it with
        # other settings (ParityBench: Dropsample's lifted prob typed int from its default 0,
        # MBConvResidual builds it with 0.0 and no longer scripted): every model that reaches
        # a rewritten class judges it, and a rejection there rejects it.
        wanted = [configured.model_class(item.file.resolved, name, group)
                  for item in pending for groups in (by_models, tabled)
                  for name, group in groups.get(item.index, {}).items()]
        seen = observations.results if observations is not None else {}
        reads = [configured.reads_of(seen.get(model.display)) for model in models]
        model_jobs = [configured.model_job(k, model, session, overlay=overlay, classes=wanted,
                                           reads=reads[k])
                      for k, model in enumerate(models)]
        report = session.reporter("models", len(model_jobs))
        early = _EarlyVerdicts(pending, models, reads, checked, tabled, by_models, config,
                               ready)

        def answered(job: ModelJob, answer: ModelResult) -> None:
            report()
            early.answered(job.id, answer)

        answers = _answered_here(
            lambda on_result: pool.models(model_jobs, timeout=session.timeout,
                                          on_result=on_result), answered)
        for k, model in enumerate(models):
            validated[model.display] = answers.get(k) or ModelResult(
                k, failure="no answer from the worker")
        reached = configured.merged_verdicts(validated.items())

    # Classes no model reached: a guessed example, else unverified with what to add.
    guessed: list[ValidationJob] = []
    by_guess: dict[int, int] = {}
    for item in pending:
        if checked[item.index].error is not None:
            continue
        checked[item.index], to_guess = _with_model_verdicts(
            item, checked[item.index], reached, tabled.get(item.index, {}),
            by_models.get(item.index, {}), config)
        classes = [_job_class(name, group, ExampleSpec.automatic(
            f"{_example_key(item.file, config)}:{name}")) for name, group in to_guess.items()]
        if classes:
            job = ValidationJob(len(guessed), str(item.file.resolved), item.text,
                                tuple(classes), session.sys_path, target=session.target)
            guessed.append(job)
            by_guess[job.id] = item.index
    _run_validation(guessed, by_guess, checked, session, pool, "validate")
    return checked, validated


def _with_model_verdicts(item: _Pending, check: _Checked,
                         reached: Mapping[tuple[str, str], ClassVerdict],
                         tabled: Collection[str], left: Mapping[str, list[ClassResult]],
                         config: Config) -> tuple[_Checked, dict[str, list[ClassResult]]]:
    """One file's verdicts with the models' (``reached``: merged, by path and class): a
    class with a table of its own that a model rejected is rejected; a class without one
    takes the models' verdict, else is returned to be guessed (``auto-examples``) or is
    unverified with what to add."""
    path = str(item.file.resolved)
    verdicts = dict(check.verdicts)
    for name in tabled:
        found = reached.get((path, name))
        if (found is not None and found.verdict == REJECTED and name in verdicts
                and verdicts[name].verdict != REJECTED):
            verdicts[name] = found
    to_guess: dict[str, list[ClassResult]] = {}
    for name, group in left.items():
        found = reached.get((path, name))
        if found is not None:
            verdicts[name] = found
        elif config.auto_examples:
            to_guess[name] = group
        else:
            where = _example_key(item.file, config)
            verdicts[name] = ClassVerdict(
                name, UNVERIFIED, f'no example inputs: add [tool.tsfix.examples."{where}:'
                                  f'{name}"] to {config.source or "pyproject.toml"}, or a '
                                  "table for a model that uses it")
    return _Checked(verdicts, check.error), to_guess


class _EarlyVerdicts:
    """Gives ``ready`` each file's verdicts once no model job still running can change them
    (:func:`_validate`'s docstring says when). They are the ones :func:`_validate` returns:
    a model's answer judges only classes of the files it imports, and the merged verdict of
    a class comes from the models that judged it, in model order, whichever answered first."""

    def __init__(self, pending: list[_Pending], models: list[configured.Configured],
                 reads: Sequence[Collection[str] | None], checked: Mapping[int, _Checked],
                 tabled: Mapping[int, Mapping[str, list[ClassResult]]],
                 by_models: Mapping[int, Mapping[str, list[ClassResult]]], config: Config,
                 ready: Callable[[_Pending, _Checked], None] | None) -> None:
        self.models, self.checked, self.config, self.ready = models, checked, config, ready
        self.tabled, self.by_models = tabled, by_models
        self.items = {item.index: item for item in pending
                      if checked[item.index].error is None}
        self.answers: dict[int, ModelResult] = {}
        self.judged: dict[str, set[int]] = {}       # path -> models that judged its classes
        # file index -> the models that may still judge its classes, and the reverse
        self.waiting: dict[int, set[int]] = {}
        self.blocks: dict[int, list[int]] = {k: [] for k in range(len(models))}
        if ready is None:
            return
        for index, item in self.items.items():
            path = str(item.file.resolved)
            self.waiting[index] = {k for k, files in enumerate(reads)
                                   if files is None or path in files}
            for k in self.waiting[index]:
                self.blocks[k].append(index)
        for index in [index for index, left in self.waiting.items() if not left]:
            self._decide(index)

    def answered(self, job_id: int, answer: ModelResult) -> None:
        if self.ready is None:
            return
        self.answers[job_id] = answer
        for found in answer.classes:
            self.judged.setdefault(found.path, set()).add(job_id)
        for index in self.blocks.pop(job_id, ()):
            left = self.waiting[index]
            left.discard(job_id)
            if not left:
                self._decide(index)

    def _decide(self, index: int) -> None:
        assert self.ready is not None
        item = self.items[index]
        path = str(item.file.resolved)
        judges = [(self.models[k].display, self.answers[k])
                  for k in sorted(self.judged.get(path, ()))]
        if any(found.path == path and found.verdict.reason.startswith(NOT_CHECKED)
               for _, answer in judges for found in answer.classes):
            return                  # _recheck_not_checked may still reject that class
        check, to_guess = _with_model_verdicts(
            item, self.checked[index], configured.merged_verdicts(judges),
            self.tabled.get(index, {}), self.by_models.get(index, {}), self.config)
        if not to_guess:
            self.ready(item, check)


def _answered_here(run: Callable[[Callable[[T, R], None]], dict[int, R]],
                   each: Callable[[T, R], None]) -> dict[int, R]:
    """``run(on_result)`` (a pool round) in another thread, each result handed to ``each`` in
    this one as it arrives; returns what ``run`` returns. The pool calls ``on_result`` in its
    driver threads; a file decided by a result is written here, in the main thread, where
    a stop (Ctrl-C, SIGTERM, the time limit) is raised, so the files a stop lists as written
    are exactly those written (sources.interrupts_deferred)."""
    results: queue.SimpleQueue[tuple[T, R] | None] = queue.SimpleQueue()
    answer: dict[int, R] = {}
    failed: list[BaseException] = []

    def drive() -> None:
        try:
            answer.update(run(lambda job, result: results.put((job, result))))
        except BaseException as exc:        # re-raised in the calling thread
            failed.append(exc)
        finally:
            results.put(None)

    threading.Thread(target=drive, daemon=True, name="tsfix-pool-round").start()
    while (arrived := results.get()) is not None:
        each(*arrived)
    if failed:
        raise failed[0]
    return answer


def _run_validation(jobs: list[ValidationJob], by_job: dict[int, int],
                    checked: dict[int, _Checked], session: Session, pool: WorkerPool,
                    phase: Phase) -> None:
    """Run per-file validation jobs; their verdicts join ``checked`` (by file index)."""
    if not jobs:
        return
    report = session.reporter(phase, sum(len(job.classes) for job in jobs))
    found = pool.validate(jobs, timeout=session.timeout, on_result=lambda _, found: report(
        len(found), verdicts=[v.verdict for v in found]))
    for job_id, class_verdicts in found.items():
        index = by_job[job_id]
        checked[index] = _Checked({**checked[index].verdicts,
                                   **{v.name: v for v in class_verdicts}})


def _example_for(session: Session, file: File, name: str
                 ) -> ExampleSpec | ExampleError | None:
    """The configured example table, else (``auto-examples``) a guessed one (rule-drop
    trials)."""
    spec = session.config.example_for(file.resolved, name, resolved=True)
    if spec is None and session.config.auto_examples:
        return ExampleSpec.automatic(f"{_example_key(file, session.config)}:{name}")
    return spec


def _example_key(file: File, config: Config) -> str:
    """The file's part of an example table's name: relative to the configuration's folder."""
    if config.root and file.resolved.is_relative_to(config.root):
        return file.resolved.relative_to(config.root).as_posix()
    return file.display


def _with_verdicts(classes: Iterable[ClassResult], checked: _Checked) -> list[ClassResult]:
    """The ClassResults with their class's verdict."""
    out = []
    for c in classes:
        v = checked.verdicts.get(c.class_name)
        out.append(c if v is None else
                   replace(c, verdict=v.verdict, reason=v.reason, duration_s=v.duration_s))
    return out


# ---- rules together: which rule's rewrite broke a class ----------------------------------------

@dataclass(frozen=True)
class _Trial:
    pending: _Pending
    class_name: str
    dropped: str            # the rule left out for this class ("": none)
    spec: ExampleSpec
    skip: SkipSet


def _drop_rules(pending: list[_Pending], checked: dict[int, _Checked], session: Session,
                pool: WorkerPool, rewriters: _Rewriters
                ) -> dict[int, dict[str, _Drop]]:
    """For each rejected class changed by several rules, rewrite and validate it once without
    each rule (one parallel round of each); drop the last rule in registry order whose
    removal verifies. Returns file index -> class -> the trial kept."""
    trials = [trial for item in pending for trial in _trials_of(item, checked[item.index],
                                                                session)]
    if not trials:
        return {}

    report = session.reporter("trials", len(trials))
    rewritten = {r.key: r for r in rewriters.map(
        _rewrite_again, [t.pending.again(k, t.skip) for k, t in enumerate(trials)],
        lambda _: report(), seconds=sum(t.pending.rewrite_s for t in trials))}
    jobs: list[ValidationJob] = []
    by_job: dict[int, tuple[_Trial, _RewrittenAgain]] = {}
    for k, trial in enumerate(trials):
        answer = rewritten[k]
        changed = [c for c in answer.classes if c.class_name == trial.class_name]
        if answer.error is not None or not changed:
            continue  # without this rule nothing changes the class: not a fix
        job = ValidationJob(len(jobs), str(trial.pending.file.resolved), answer.text,
                            (_job_class(trial.class_name, changed, trial.spec),),
                            session.sys_path, target=session.target)
        jobs.append(job)
        by_job[job.id] = (trial, answer)
    if not jobs:
        return {}
    report = session.reporter("recheck", len(jobs))
    verdicts = pool.validate(jobs, timeout=session.timeout, on_result=lambda *_: report())

    # (file, class) -> verified trials
    verified: dict[tuple[int, str], list[_Drop]] = {}
    for job_id, class_verdicts in verdicts.items():
        trial, answer = by_job[job_id]
        for v in class_verdicts:
            if v.name == trial.class_name and v.verdict == VERIFIED:
                kept = tuple(c for c in answer.classes if c.class_name == trial.class_name)
                verified.setdefault((trial.pending.index, trial.class_name), []).append(
                    _Drop(trial.class_name, trial.dropped, v, kept, trial.skip, answer.text))
    drops: dict[int, dict[str, _Drop]] = {}
    for (index, name), found in verified.items():
        # The largest kept set: every rule ("" dropped nothing), else all but the last rule.
        drops.setdefault(index, {})[name] = max(found, key=lambda d: session.rank(d.dropped))
    return drops


def _trials_of(item: _Pending, check: _Checked, session: Session) -> list[_Trial]:
    """The rule-drop trials of one file with these verdicts (none: no trial can change it)."""
    if check.error is not None:
        return []
    trials: list[_Trial] = []
    groups = _by_class(_with_verdicts(item.classes, check))
    rejected = {name for name, group in groups.items()
                if any(c.verdict == REJECTED for c in group)}
    # A class that scripted neither before nor after the combined rewrite may script with
    # one rule left out (annotate fixed what blocked it, another rule broke it again).
    not_scripting = {name for name, group in groups.items()
                     if any(c.verdict == UNVERIFIED
                            and c.reason.startswith(NOT_SCRIPTABLE_EITHER) for c in group)}
    for name in sorted(rejected | not_scripting, key=list(groups).index):
        contributing = sorted({c.rule for c in groups[name]}, key=session.rank)
        spec = _example_for(session, item.file, name)
        if len(contributing) < 2 or not isinstance(spec, ExampleSpec):
            continue
        others = frozenset(rejected - {name})
        # With other rejected classes in the file, C may have failed for their sake (the
        # rewritten file does not import): then C with every rule is a trial too.
        for rule_name in ([""] if others else []) + contributing:
            skip = {rule: others for rule in session.rule_names}
            if rule_name:
                skip[rule_name] = others | {name}
            trials.append(_Trial(item, name, rule_name, spec, _skip_set(skip)))
    return trials


def _with_drop(classes: list[ClassResult], drop: _Drop, session: Session) -> list[ClassResult]:
    """The file's ClassResults once ``drop`` is kept: its class's results are the trial's,
    with the trial's verdict, and the dropped rule's, rejected."""
    name = drop.class_name
    groups = _by_class(classes)
    dropped = [replace(c, verdict=REJECTED,
                       reason=(f"dropped: {name} validates without this rule's rewrite; "
                               f"with it: {c.reason}"))
               for c in groups[name] if drop.dropped and c.rule == drop.dropped]
    kept = [replace(c, verdict=drop.verdict.verdict, reason=drop.verdict.reason,
                    duration_s=drop.verdict.duration_s) for c in drop.kept]
    groups[name] = sorted(kept + dropped, key=lambda c: session.rank(c.rule))
    return [c for group in groups.values() for c in group]


# ---- final texts -------------------------------------------------------------------------------

def _final_texts(pending: list[_Pending], checked: dict[int, _Checked],
                 drops: dict[int, dict[str, _Drop]], session: Session,
                 rewriters: _Rewriters, *, recheck: bool = False) -> dict[int, _Final]:
    """Each changed file's final classes and text: the rewrite with every rule skipping the
    classes held back whole, and each dropped rule skipping its class. ``recheck``: a class a
    model could not check (NOT_CHECKED) stays in the text, for the models to check it there
    (_recheck_not_checked); else it is withheld like any unproven unsafe rewrite."""
    finals: dict[int, _Final] = {}
    again: list[tuple[_Pending, list[ClassResult], SkipSet]] = []
    for item in pending:
        check = checked[item.index]
        if check.error is not None:
            # Nothing is written for a file with a broken example table.
            finals[item.index] = _Final("failed", error=check.error)
            continue
        classes = _with_verdicts(item.classes, check)
        dropped: dict[str, str] = {}
        for name, drop in drops.get(item.index, {}).items():
            classes = _with_drop(classes, drop, session)
            if drop.dropped:
                dropped[name] = drop.dropped
        if session.require_verified:
            classes = [replace(c, verdict=REJECTED,
                               reason=f"unverified and --require-verified: {c.reason}")
                       if c.verdict == UNVERIFIED else c for c in classes]
        elif session.verify and not session.unsafe_fixes:
            classes = [c if recheck and c.reason.startswith(NOT_CHECKED)
                       else _withheld_unless_proven(c) for c in classes]
        # A class is held back whole unless its only rejected change is the dropped rule's.
        held_back = frozenset(c.class_name for c in classes
                              if c.verdict == REJECTED and dropped.get(c.class_name) != c.rule)
        withheld = [c for c in classes if c.withheld and c.class_name not in held_back]
        if not held_back and not dropped and not withheld:
            finals[item.index] = _decided(item, classes, item.text)
            continue
        skip = {rule: held_back for rule in session.rule_names}
        for name, rule_name in dropped.items():
            skip[rule_name] = skip.get(rule_name, frozenset()) | {name}
        for c in withheld:
            skip[c.rule] = skip.get(c.rule, frozenset()) | {c.class_name}
        skip_set = _skip_set(skip)
        # A trial rewrote this file with these very skip sets: its text is the answer.
        known = next((d.text for d in drops.get(item.index, {}).values()
                      if d.skip == skip_set), None)
        if known is not None:
            finals[item.index] = _decided(item, classes, known)
        else:
            again.append((item, classes, skip_set))
    if again:
        report = session.reporter("final", len(again))
        answers = {r.key: r for r in rewriters.map(
            _rewrite_again, [item.again(k, skip) for k, (item, _, skip) in enumerate(again)],
            lambda _: report(), seconds=sum(item.rewrite_s for item, _, _ in again))}
        for k, (item, classes, _) in enumerate(again):
            answer = answers[k]
            finals[item.index] = (_Final("failed", error=answer.error) if answer.error
                                  else _decided(item, classes, answer.text))
    return finals


# Why an unsafe rewrite that validation could not decide is not written (docs/validation.md).
WITHHELD_UNPROVEN = ("not written: it may change what the code computes (an unsafe fix) and "
                     "nothing proved it does not; --unsafe-fixes writes it")


def _withheld_unless_proven(c: ClassResult) -> ClassResult:
    """Fix safety: an unsafe rewrite is written when verified, or when eager parity held for
    every configuration and only compiling is left undecided (progress past a blocker); an
    unverified one with no such proof (no example inputs, an import or a constructor that
    failed, a timeout) is withheld. A safe one (pipeline/safety.py) is always written."""
    if c.verdict != UNVERIFIED or c.safe or eager_parity_proven(c.reason):
        return c
    return replace(c, withheld=WITHHELD_UNPROVEN)


def _decided(item: _Pending, classes: list[ClassResult], text: str) -> _Final:
    if text == item.source.text:
        rejected = any(c.verdict == REJECTED for c in classes)
        return _Final("rejected" if rejected else "unchanged", tuple(classes))
    return _Final("changed", tuple(classes), text=text)


def _final_overlay(pending: list[_Pending], finals: Mapping[int, _Final]) -> dict[str, str]:
    """Resolved path -> the text the run writes, for every file it changes."""
    return {str(item.file.resolved): final.text for item in pending
            if (final := finals.get(item.index)) is not None and final.status == "changed"
            and final.text is not None}


def _ticks(report: Callable[..., None]) -> Callable[..., None]:
    """An ``on_result`` callback that counts one item per result."""
    return lambda *_: report()


def _recheck_not_checked(pending: list[_Pending], checked: dict[int, _Checked],
                         drops: dict[int, dict[str, _Drop]], finals: dict[int, _Final],
                         models: list[configured.Configured],
                         validated: Mapping[str, ModelResult], session: Session,
                         pool: WorkerPool, rewriters: _Rewriters,
                         rechecked: dict[str, tuple[dict[str, str], ModelResult]]
                         ) -> dict[int, _Final]:
    """A class a model reached but could not check (``NOT_CHECKED``: the rewritten model did
    not build or run for another class's rewrite) and that the final texts still hold is
    checked again by that model on the final tree; a class rejected there is left out too,
    and the round repeats until no class is newly rejected (each round leaves one out).
    ``rechecked`` gets each model's last answer and the overlay it ran on."""
    by_path = {str(item.file.resolved): item for item in pending}
    for _ in range(sum(len(item.classes) for item in pending)):
        overlay = _final_overlay(pending, finals)
        jobs: list[tuple[configured.Configured, list[tuple[_Pending, str]]]] = []
        for model in models:
            answer = validated.get(model.display)
            wanted = []
            for found in answer.classes if answer is not None else ():
                item = by_path.get(found.path)
                if (item is None or not found.verdict.reason.startswith(NOT_CHECKED)
                        or found.path not in overlay):
                    continue
                now = checked[item.index].verdicts.get(found.verdict.name)
                if now is not None and now.verdict != REJECTED:
                    wanted.append((item, found.verdict.name))
            if wanted:
                jobs.append((model, wanted))
        if not jobs:
            break
        answers = pool.models(
            [configured.model_job(k, model, session, overlay=overlay, classes=[
                configured.model_class(item.file.resolved, name, _by_class(item.classes)[name])
                for item, name in wanted], reads=configured.reads_of(validated.get(model.display)))
             for k, (model, wanted) in enumerate(jobs)],
            timeout=session.timeout, on_result=_ticks(session.reporter("models", len(jobs))))
        results = {model.display: answers[k] for k, (model, _) in enumerate(jobs)
                   if k in answers}
        for display, result in results.items():
            rechecked[display] = (overlay, result)
        newly_rejected = False
        for (path, name), verdict in configured.merged_verdicts(results.items()).items():
            item = by_path[path]
            now = checked[item.index].verdicts.get(name)
            if now is None or now.verdict == REJECTED:
                continue
            if verdict.verdict == REJECTED or now.reason.startswith(NOT_CHECKED):
                checked[item.index] = _Checked({**checked[item.index].verdicts, name: verdict})
                newly_rejected = newly_rejected or verdict.verdict == REJECTED
        finals = _final_texts(pending, checked, drops, session, rewriters, recheck=True)
        if not newly_rejected:
            break
    if any(v.reason.startswith(NOT_CHECKED) for check in checked.values()
           for v in check.verdicts.values()):
        # What no model could check is now as proven as it will be (fix safety).
        finals = _final_texts(pending, checked, drops, session, rewriters)
    return finals


# ---- configured models: the model verdict and the fix loop ------------------------------------

@dataclass(frozen=True)
class _Models:
    """What the model phase adds to the run: each model file's records, the files each
    outcome depends on, and the files the fix loop rewrote."""

    records: dict[int, list[ModelRecord]] = field(default_factory=dict)
    depends: dict[int, set[str]] = field(default_factory=dict)
    extra: list[Outcome] = field(default_factory=list)


@dataclass
class _LoopFile:
    """A file of the tree outside the run that the fix loop rewrote."""

    source: SourceText
    display: str
    classes: set[str] = field(default_factory=set)      # classes the loop rewrote in it
    functions: set[str] = field(default_factory=set)    # module-level functions, likewise
    text: str = ""
    results: list[ClassResult] = field(default_factory=list)


def _model_verdicts(models: list[configured.Configured], todo: list[File],
                    pending: list[_Pending], finals: dict[int, _Final],
                    validated: dict[str, ModelResult],
                    observations: configured.Observations, session: Session,
                    pool: WorkerPool, rewriters: _Rewriters,
                    rechecked: Mapping[str, tuple[dict[str, str], ModelResult]] | None = None,
                    answered: Callable[[], None] | None = None) -> _Models:
    """Each configured model's verdict on the tree as the run leaves it, and the fix loop for
    a model that stops in a file of the tree outside the run (models.py's docstring).
    ``rechecked``: a model's answer on an overlay of its own (_recheck_not_checked).
    ``answered``: called once every model has its verdict on the final texts (the fix loop
    and the explanations change only files outside the run, and the records)."""
    validated_overlay = {str(item.file.resolved): item.text for item in pending}
    overlay = _final_overlay(pending, finals)
    results: dict[str, ModelResult] = {}
    again: list[configured.Configured] = []
    for model in models:
        known = validated.get(model.display)
        ran_on, last = (rechecked or {}).get(model.display, (None, None))
        if (last is not None and ran_on is not None and last.failure is None
                and configured.overlay_for(last.files, overlay)
                == configured.overlay_for(last.files, ran_on)):
            results[model.display] = last       # checked again on the final tree already
        elif (known is not None and known.failure is None and known.model is not None
                and configured.overlay_for(known.files, overlay)
                == configured.overlay_for(known.files, validated_overlay)):
            results[model.display] = known      # nothing it imports was held back
        elif known is not None and known.failure is not None:
            results[model.display] = known      # the original does not build or run
        else:
            again.append(model)
    if again:
        report = session.reporter("models", len(again))
        answers = pool.models([configured.model_job(
            k, model, session, overlay=overlay, reads=configured.reads_of(
                validated.get(model.display) or observations.results.get(model.display)))
            for k, model in enumerate(again)],
                              timeout=session.timeout, on_result=lambda *_: report())
        for k, model in enumerate(again):
            results[model.display] = answers.get(k) or ModelResult(
                k, failure="no answer from the worker")

    for key, found in results.items():
        results[key] = configured.located(found, overlay, session.target)
    if answered is not None:
        answered()
    run_paths = {str(file.resolved) for file in todo}
    display = {str(file.resolved): file.display for file in todo}
    loop_files: dict[str, _LoopFile] = {}
    out = _Models()
    failing = [m for m in models if _stops(results[m.display])]
    fix_report = session.reporter("fix", len(failing)) if session.fix_rounds else None
    finished: list[tuple[configured.Configured, ModelResult, list[str], str | None]] = []
    resolved = [(file, str(file.resolved)) for file in todo]
    for model in models:
        result = results[model.display]
        rounds: list[str] = []
        if session.fix_rounds and _stops(result):
            result = _fix_loop(model, result, overlay, loop_files, run_paths, observations,
                               session, pool, rounds)
            if fix_report is not None:
                fix_report()
        display.update({path: f.display for path, f in loop_files.items()})
        blocker = configured.to_explain(result)
        # The blocker's file as this model's job saw it (a later fix loop may rewrite it).
        text = None
        if blocker is not None and blocker.path is not None:
            loop_file = loop_files.get(blocker.path)
            text = loop_file.text if loop_file and loop_file.text else overlay.get(blocker.path)
        finished.append((model, result, rounds, text))
        for file, path in resolved:
            if file.index == model.file.index or path in result.files:
                out.depends.setdefault(file.index, set()).update(result.files)
    # `tsfix check` of a file takes about what rewriting it took.
    seconds = {str(item.file.resolved): item.rewrite_s for item in pending}
    # A rule whose rewrite of a class this run rejected is not the fix to recommend for it.
    rejected: dict[str, dict[str, dict[str, str]]] = {}
    for item in pending:
        for c in (final.classes if (final := finals.get(item.index)) is not None else ()):
            if c.verdict == REJECTED:
                rejected.setdefault(str(item.file.resolved), {}).setdefault(
                    c.class_name, {})[c.rule] = c.reason
    explanations = _explain_blockers(finished, display, session, rewriters, seconds, rejected)
    for model, result, rounds, text in finished:
        blocker = configured.to_explain(result)
        explanation = None if blocker is None else explanations.get(_explain_key(blocker, text))
        texts = {blocker.path: text} if blocker and blocker.path and text is not None else {}
        out.records.setdefault(model.file.index, []).append(
            configured.record_of(model, result, texts=texts, display=display, rounds=rounds,
                                 target=session.target, explanation=explanation))
    for path, loop_file in loop_files.items():
        if not loop_file.text or loop_file.text == loop_file.source.text:
            continue
        from tsfix.codemods.pipeline.rewrite import unified_diff

        result_file = FileResult(Path(path), loop_file.display, "changed",
                                 classes=loop_file.results,
                                 diff=unified_diff(loop_file.source.text, loop_file.text,
                                                   loop_file.display),
                                 new_text=loop_file.text, fix_loop=True)
        out.extra.append(Outcome(result_file, loop_file.text, loop_file.source))
    return out


# A blocker to explain: its file, that file's text as the model's job saw it (None: as on
# disk), TorchScript's message and the scope it names.
_ExplainKey = tuple[str, str | None, str, str | None]


def _explain_key(blocker: Blocker, text: str | None) -> _ExplainKey:
    return (str(blocker.path), text, blocker.message, blocker.scope)


@dataclass(frozen=True)
class _ToExplain:
    """The blockers of one file (one text) to explain, for a rewrite process."""

    key: int
    path: str
    text: str | None
    shown: str
    target: str
    blockers: tuple[tuple[str, str | None], ...]        # (message, scope)
    # class -> rule -> why the run rejected that rule's rewrite of the class
    rejected: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Explained:
    key: int
    explanations: tuple[str, ...]                       # one per blocker, in order


def _explain_blockers(finished: Sequence[tuple[configured.Configured, ModelResult, list[str],
                                               str | None]],
                      display: Mapping[str, str], session: Session, rewriters: _Rewriters,
                      seconds: Mapping[str, float] | None = None,
                      rejected: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None
                      ) -> dict[_ExplainKey, str]:
    """What ``tsfix explain`` says about each distinct blocker of the models that stop.

    Explaining runs ``tsfix check`` on the blocker's file: seconds for a large file, and on
    ParityBench (thousands of configured models, most blocked somewhere) it was the run's
    longest silent phase, on one core. Models blocked at the same place share one answer;
    the files are explained in the rewrite processes, with progress (``seconds``: each
    file's first rewrite time, what checking it is expected to take). ``rejected``: by
    file, class and rule, why the run rejected a rewrite (that rule is not recommended)."""
    by_file: dict[tuple[str, str | None], dict[tuple[str, str | None], None]] = {}
    for _, result, _, text in finished:
        blocker = configured.to_explain(result)
        if blocker is not None and blocker.path is not None:
            by_file.setdefault((blocker.path, text), {})[(blocker.message, blocker.scope)] = None
    if not by_file:
        return {}
    items = [_ToExplain(k, path, text, display.get(path) or configured.shown(path),
                        session.target, tuple(blockers), (rejected or {}).get(path, {}))
             for k, ((path, text), blockers) in enumerate(by_file.items())]
    report = session.reporter("explain", len(items))
    answers = {a.key: a for a in rewriters.map(
        _explain_file, items, lambda _: report(),
        seconds=sum((seconds or {}).get(item.path, 0.0) for item in items))}
    found: dict[_ExplainKey, str] = {}
    for item in items:
        for (message, scope), explanation in zip(item.blockers, answers[item.key].explanations,
                                                 strict=True):
            found[(item.path, item.text, message, scope)] = explanation
    return found


def _explain_file(item: _ToExplain, settings: _RewriteSettings) -> _Explained:
    explanations = []
    for message, scope in item.blockers:
        blocker = Blocker(item.path, None, scope, message)
        try:
            explanations.append(configured.explain_blocker(
                blocker, item.text, item.shown, item.target,
                item.rejected.get((scope or "").split(".")[0])))
        except Exception as exc:
            explanations.append(f"not explained: internal error ({type(exc).__name__}: {exc})")
    return _Explained(item.key, tuple(explanations))


def _blocked_in(result: ModelResult, path: str, class_name: str | None, function: str | None,
                text: str) -> bool:
    """The model's blocker is in ``class_name`` (else the module-level ``function``) of
    ``path`` (whose text is ``text``)."""
    assert result.model is not None and result.model.blocker is not None
    blocker = result.model.blocker
    if blocker.path != path:
        return False
    found = configured.class_at(text, blocker.line, blocker.scope)
    if class_name is not None:
        return found == class_name
    return found is None and configured.function_at(text, blocker.line,
                                                    blocker.scope) == function


def _function_verdict(owner: str, answer: ModelResult, shown: str) -> ClassVerdict:
    """The verdict on a module-level function the fix loop rewrote: no class of its own to
    script, so the model's answer is its verdict. The model checks eager parity before it
    scripts, so a model that stops at a place TorchScript names has matched the original."""
    verdict = answer.model
    if verdict is None:
        return ClassVerdict(owner, UNVERIFIED, "the model job gave no verdict")
    if verdict.status == MODEL_SCRIPTS:
        return ClassVerdict(owner, VERIFIED, f"the model scripts with it ({verdict.reason})")
    if verdict.status == MODEL_FAILS and verdict.blocker is not None:
        blocker = verdict.blocker
        place = (f"at {configured.shown(blocker.path)}"
                 + (f":{blocker.line}" if blocker.line else "") if blocker.path
                 else f"({blocker.message.splitlines()[0] if blocker.message else '?'})")
        return ClassVerdict(owner, UNVERIFIED, f"the model's eager outputs match the "
                                               f"original's with it, and it still stops "
                                               f"scripting {place}: its scripted "
                                               "outputs cannot be compared yet")
    if verdict.status == MODEL_FAILS:
        return ClassVerdict(owner, REJECTED, f"the model with {owner} in {shown}: "
                                             f"{verdict.reason}")
    return ClassVerdict(owner, UNVERIFIED, f"the model: {verdict.reason}")


def _stops(result: ModelResult) -> bool:
    """The model does not script, at a known place."""
    return (result.failure is None and result.model is not None
            and result.model.status == MODEL_FAILS and result.model.blocker is not None
            and result.model.blocker.path is not None)


def _fix_loop(model: configured.Configured, result: ModelResult, overlay: dict[str, str],
              loop_files: dict[str, _LoopFile], run_paths: set[str],
              observations: configured.Observations, session: Session, pool: WorkerPool,
              rounds: list[str]) -> ModelResult:
    """Rewrite the class that blocks ``model`` in a file of the tree outside the run, validate
    that through the model, script it again; ``rounds`` gets one line per round. Returns the
    last model job's answer."""
    for number in range(1, session.fix_rounds + 1):
        if not _stops(result):
            break
        assert result.model is not None and result.model.blocker is not None
        blocker = result.model.blocker
        path = str(blocker.path)
        loop_file = loop_files.get(path)
        shown = loop_file.display if loop_file else configured.shown(path)
        where = f"{shown}:{blocker.line}" if blocker.line else shown
        if path in run_paths:
            rounds.append(f"round {number}: not tried: {where} is in a file of this run "
                          "(every selected rule ran on it)")
            break
        if loop_file is None:
            try:
                source = read_source(Path(path))
            except SourceError as exc:
                rounds.append(f"round {number}: blocked at {where}: {exc}; the loop stops")
                break
            loop_file = _LoopFile(source, shown)
        current = loop_file.text or loop_file.source.text
        class_name = configured.class_at(current, blocker.line, blocker.scope)
        function = (configured.function_at(current, blocker.line, blocker.scope)
                    if class_name is None else None)
        if class_name is None and function is None:
            rounds.append(f"round {number}: blocked at {where}, outside any class or "
                          "module-level function; the loop stops")
            break
        # A function is rewritten as compiled from another file (annotate's entries), its
        # change reported under function_change_name: the model's verdict is its verdict.
        owner = class_name if class_name is not None else function_change_name(str(function))
        if owner in loop_file.classes | {function_change_name(f) for f in loop_file.functions}:
            rounds.append(f"round {number}: blocked at {where} in {owner}, which the "
                          "loop rewrote already; the loop stops")
            break
        chosen = loop_file.classes | ({class_name} if class_name is not None else set())
        functions = loop_file.functions | ({function} if function is not None else set())
        owners = {function_change_name(f) for f in functions}
        others = frozenset(configured.top_level_classes(loop_file.source.text)) - chosen
        skip = _skip_set(dict.fromkeys(session.rule_names, others))
        try:
            text, classes, _ = session.settings.rewrite(
                loop_file.source.text, shown, observations.types.get(path, {}), skip,
                frozenset(functions))
        except Exception as exc:
            rounds.append(f"round {number}: rewriting {owner} in {shown} failed: "
                          f"{_internal_error(shown, exc)}; the loop stops")
            break
        changed = [c for c in classes if c.class_name == owner]
        if not changed:
            rounds.append(f"round {number}: blocked at {where} in {owner}; no selected "
                          "rule changes it; the loop stops")
            break
        wanted = [configured.model_class(Path(path), name, group)
                  for name, group in _by_class(classes).items() if name not in owners]
        trial_overlay = {**overlay, **{p: f.text for p, f in loop_files.items() if f.text},
                         path: text}
        answer = pool.models([configured.model_job(0, model, session, overlay=trial_overlay,
                                                   classes=wanted)],
                             timeout=session.timeout).get(0)
        if answer is None or answer.failure is not None:
            why = answer.failure if answer is not None else "no answer from the worker"
            rounds.append(f"round {number}: {owner} rewritten, not validated ({why}); "
                          "the loop stops")
            break
        answer = configured.located(answer, trial_overlay, session.target)
        verdicts = {found.verdict.name: found.verdict for found in answer.classes
                    if found.path == path}
        verdicts.update({name: _function_verdict(name, answer, shown) for name in owners})
        judged = [c if c.reason else replace(
                      c, reason=f"not validated: the fix loop rewrote {shown} "
                                f"for model {model.display}, which does not reach this class; "
                                "give it an example table")
                  for c in configured.with_verdicts(classes, verdicts)]
        bad = [c for c in judged if c.class_name == owner and (
            c.verdict == REJECTED or (session.require_verified and c.verdict != VERIFIED))]
        rules = ", ".join(dict.fromkeys(c.rule for c in changed))
        if bad:
            rounds.append(f"round {number}: blocked at {where} in {owner}; the rewrite "
                          f"by {rules} is {bad[0].verdict}: {bad[0].reason}; not kept, the "
                          "loop stops")
            break
        verdict = verdicts.get(owner)
        if (_stops(answer) and (verdict is None or verdict.verdict != VERIFIED)
                and _blocked_in(answer, path, class_name, function, text)):
            # Not proven, and the model stops in the same place: the rewrite got it nowhere.
            rounds.append(f"round {number}: blocked at {where} in {owner}; the rewrite by "
                          f"{rules} leaves the model stopping in {owner}: not kept, the "
                          "loop stops")
            break
        if class_name is not None:
            loop_file.classes.add(class_name)
        if function is not None:
            loop_file.functions.add(function)
        loop_file.text = text
        loop_file.results = judged
        loop_files[path] = loop_file
        status = answer.model.status if answer.model else "not checked"
        works = "exports" if session.target == "export" else "scripts"
        rounds.append(f"round {number}: blocked at {where} in {owner}; rewritten by "
                      f"{rules} ({verdict.verdict if verdict else UNVERIFIED}); the model now "
                      f"{works if status == MODEL_SCRIPTS else status}")
        result = answer
    return result
