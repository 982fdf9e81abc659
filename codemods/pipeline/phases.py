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
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from tsfix.codemods.pipeline.config import Config, ExampleError, ExampleSpec
from tsfix.codemods.pipeline.report import (
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
    FileResult,
    Phase,
    Progress,
    SkipResult,
)
from tsfix.codemods.pipeline.sources import SourceError, SourceText, is_generated, read_source
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    NOT_SCRIPTABLE_EITHER,
    ClassVerdict,
    JobClass,
    ObserveClass,
    ObserveJob,
    TypeTable,
    ValidationJob,
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

    def rewrite(self, text: str, display: str, observed: TypeTable,
                skip: SkipSet = ()) -> tuple[str, tuple[ClassResult, ...], tuple[SkipResult, ...]]:
        """The new text, a ClassResult per change and the skips. LibCST, black and the rules
        are imported here, on the first file that needs them."""
        from tsfix.codemods.pipeline import rewrite as rewriting

        done = rewriting.rewrite_source(text, display, self.rules, line_length=self.line_length,
                                        skip_classes=dict(skip) or None,
                                        unsafe_fixes=self.unsafe_fixes, observed=observed or None)
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

    @cached_property
    def rules(self) -> tuple[type[Rule], ...]:
        """The rule classes (importing them imports LibCST: only when a file is rewritten)."""
        from tsfix.codemods.rules.registry import select_rules

        return tuple(select_rules(self.rule_names, self.target))

    @cached_property
    def order(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.rule_names)}

    def reporter(self, phase: Phase, total: int) -> _Reporter:
        return _Reporter(self.progress, phase, total, self.counts)

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
                 counts: dict[str, int]) -> None:
        self.callback, self.phase, self.total, self.counts = callback, phase, total, counts
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
                                   {k: v for k, v in self.counts.items() if k != "rewrites"}))


# ---- the phases, chained ----------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """What the phases made of one file: its result, and for a changed file the new text and
    the file as it was read (its encoding and line endings, for the write)."""

    result: FileResult
    text: str | None = None
    source: SourceText | None = None


def run_phases(todo: list[File], session: Session) -> dict[int, Outcome]:
    """Every phase over ``todo``; returns each file's outcome by its index. Nothing is
    written here."""
    observed: dict[int, _Observed] = {}
    # Validation workers start only when a round has jobs; with verify=False none runs.
    with WorkerPool(session.workers) as pool, _Rewriters(session) as rewriters:
        if session.verify and any(rule.needs_observations for rule in session.rules):
            observed = _observe(todo, session, pool)
        rewritten = _rewrite_all(todo, observed, session, rewriters)
        by_index = {file.index: file for file in todo}
        pending = [_Pending(by_index[r.index], r.source, r.text, r.classes,
                            observed.get(r.index, _Observed()))
                   for r in rewritten.values() if r.status == "changed" and r.source]
        if session.verify:
            checked = _validate(pending, session, pool)
            drops = _drop_rules(pending, checked, session, pool, rewriters)
        else:
            checked = {item.index: _Checked({c.class_name: ClassVerdict(
                c.class_name, UNVERIFIED, "not validated (--no-verify)")
                for c in item.classes}) for item in pending}
            drops = {}
        finals = _final_texts(pending, checked, drops, session, rewriters)
    outcomes = {}
    for file in todo:
        answer = rewritten[file.index]
        result, text = _file_result(file.path, file.display, answer,
                                    observed.get(file.index, _Observed()),
                                    finals.get(file.index))
        outcomes[file.index] = Outcome(result, text, answer.source)
    return outcomes


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


# ---- observed types ----------------------------------------------------------------------------

def _observe(todo: list[File], session: Session, pool: WorkerPool) -> dict[int, _Observed]:
    """Run the original files' examples eagerly, recording argument types for the rules."""
    jobs: list[ObserveJob] = []
    by_job: dict[int, int] = {}
    for file in todo:
        specs = session.config.examples_in(file.resolved, resolved=True)
        classes = tuple(ObserveClass(name, spec.to_example())
                        for name, spec in sorted(specs.items()) if isinstance(spec, ExampleSpec))
        if not classes:
            continue
        job = ObserveJob(len(jobs), str(file.resolved), classes, session.sys_path)
        jobs.append(job)
        by_job[job.id] = file.index
    report = session.reporter("observe", len(jobs))
    found_types = pool.observe(jobs, timeout=session.timeout, on_result=lambda _: report())
    return {by_job[job_id]: _Observed(
        found.types,
        tuple(f"no observed types for {name} (static inference only): {reason}"
              for name, reason in sorted(found.failures.items())),
        found.timed_out) for job_id, found in found_types.items()}


# ---- rewrite -----------------------------------------------------------------------------------

# Below this many files, starting rewrite processes (each imports LibCST and black, ~0.5 s)
# costs more than it saves.
PARALLEL_MIN_FILES = 24
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
            done: Callable[[R], None]) -> list[R]:
        """``work(item, settings)`` for every item, in any order; ``done`` is called in this
        process as each result arrives."""
        settings = self.session.settings
        if self._executor is None and (self._broken or self.session.workers <= 1
                                       or len(items) < PARALLEL_MIN_FILES):
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
        tasks = [list(range(start, min(start + FILES_PER_TASK, len(items))))
                 for start in range(0, len(items), FILES_PER_TASK)]
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
                       python_only=change.python_only)


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

def _validate(pending: list[_Pending], session: Session, pool: WorkerPool
              ) -> dict[int, _Checked]:
    config = session.config
    checked: dict[int, _Checked] = {}
    jobs: list[ValidationJob] = []
    by_job: dict[int, int] = {}
    for item in pending:
        verdicts: dict[str, ClassVerdict] = {}
        classes: list[JobClass] = []
        error = None
        for name, group in _by_class(item.classes).items():
            spec = _example_for(session, item.file, name)
            if isinstance(spec, ExampleError):
                error = str(spec)
                break
            if spec is None:
                where = _example_key(item.file, config)
                verdicts[name] = ClassVerdict(
                    name, UNVERIFIED, f'no example inputs: add [tool.tsfix.examples."{where}:'
                                      f'{name}"] to {config.source or "pyproject.toml"}')
                continue
            classes.append(_job_class(name, group, spec))
        if error is not None:
            checked[item.index] = _Checked(error=error)
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
    report = session.reporter("validate", sum(len(job.classes) for job in jobs))
    found = pool.validate(jobs, timeout=session.timeout, on_result=lambda _, found: report(
        len(found), verdicts=[v.verdict for v in found]))
    for job_id, class_verdicts in found.items():
        index = by_job[job_id]
        checked[index] = _Checked({**checked[index].verdicts,
                                   **{v.name: v for v in class_verdicts}})
    return checked


def _example_for(session: Session, file: File, name: str
                 ) -> ExampleSpec | ExampleError | None:
    """The configured example table, else (``auto-examples``) a guessed one."""
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
    trials: list[_Trial] = []
    for item in pending:
        if checked[item.index].error is not None:
            continue
        groups = _by_class(_with_verdicts(item.classes, checked[item.index]))
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
    if not trials:
        return {}

    report = session.reporter("trials", len(trials))
    rewritten = {r.key: r for r in rewriters.map(
        _rewrite_again, [t.pending.again(k, t.skip) for k, t in enumerate(trials)],
        lambda _: report())}
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
                 rewriters: _Rewriters) -> dict[int, _Final]:
    """Each changed file's final classes and text: the rewrite with every rule skipping the
    classes held back whole, and each dropped rule skipping its class."""
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
        # A class is held back whole unless its only rejected change is the dropped rule's.
        held_back = frozenset(c.class_name for c in classes
                              if c.verdict == REJECTED and dropped.get(c.class_name) != c.rule)
        if not held_back and not dropped:
            finals[item.index] = _decided(item, classes, item.text)
            continue
        skip = {rule: held_back for rule in session.rule_names}
        for name, rule_name in dropped.items():
            skip[rule_name] = skip.get(rule_name, frozenset()) | {name}
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
            lambda _: report())}
        for k, (item, classes, _) in enumerate(again):
            answer = answers[k]
            finals[item.index] = (_Final("failed", error=answer.error) if answer.error
                                  else _decided(item, classes, answer.text))
    return finals


def _decided(item: _Pending, classes: list[ClassResult], text: str) -> _Final:
    if text == item.source.text:
        return _Final("rejected" if classes else "unchanged", tuple(classes))
    return _Final("changed", tuple(classes), text=text)
