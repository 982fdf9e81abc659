"""One tsfix run: discover files, rewrite, validate, then show or write. The Python API.

    from tsfix.codemods.pipeline.engine import Options, run
    result = run([Path("models")], Options(rules=["lift-branch"], mode="diff"))
    print(result.summary_line(), result.exit_code)

Per file: read (keeping encoding and line endings), skip ``@generated`` files and files that
cannot define an nn.Module, rewrite (:func:`~tsfix.codemods.pipeline.rewrite.rewrite_source`), then
validate every rewritten class in worker processes. A file that cannot be read, decoded or
parsed, or whose example spec is wrong, is reported and left untouched; the run goes on with
the other files. One :class:`~tsfix.codemods.validation.pool.WorkerPool` serves every round of a run
(torch is imported once per worker); ``verify=False`` never starts it.

Observed types. When validation is on and a selected rule sets ``needs_observations``, every
file that has at least one example table is first run eagerly in the workers (the original
file, each configuration of each class with examples, ``sys.setprofile`` recording argument and
return types of the class's methods and of its same-file bases). The result is passed to the
rules as ``observed``, also in every re-run below. An observation that fails (import error,
constructor or forward raising, timeout, worker crash) only means no observed types for that
class: the rules fall back to static inference, and the file's ``notes`` say why. A file whose
observation timed out is not validated (``unverified``): validation runs the same original
examples first and would only wait for the same hang again.

Validation runs once per class on the combined result of every rule (one job entry per class,
the ``lifted`` parameters of all its changes merged); each rule's ClassResult for the class gets
that verdict. A class whose rewrite is rejected is left as it was, and the rules run again
without it; only the rest is written.

Rules together. When a rejected class was changed by more than one rule -- or a class that
scripts neither before nor after the combined rewrite, since one rule may fix what blocked it
while another breaks it again -- the run finds the rule whose rewrite broke it, in one extra
validation round:

1. for every such class C and every rule R that changed it, re-run the rules on the original
   text with R skipping C (and every rule skipping the file's other rejected classes), and
   validate C in that text; when the file has other rejected classes, C with every rule (only
   those others skipped) is one more trial, since C may have been rejected for their sake (a
   rewritten file that does not import rejects every class in it); all these trials of all
   files run in one parallel round;
2. keep the largest set that verifies: every rule if that trial verifies, else, among the
   single drops that verify, drop the rule that comes last in registry order;
3. the kept rules' ClassResults for C take the verdict, reason and records of that trial; the
   dropped rule's ClassResult is ``rejected`` with ``dropped: C validates without this rule's
   rewrite; with it: <original reason>``;
4. if no trial verifies, the whole class is held back as before (every contributing rule's
   ClassResult stays ``rejected``).

The written file is the rewrite of the original with the final skip sets: every rule skips the
classes held back whole, and a dropped rule skips its class.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tsfix.codemods.facts.syntax import may_define_module
from tsfix.codemods.pipeline.cache import Cache, cacheable, entry_of, restore
from tsfix.codemods.pipeline.config import (
    TARGETS,
    Config,
    ConfigError,
    ExampleError,
    ExampleSpec,
    find_pyproject,
    load_config,
)
from tsfix.codemods.pipeline.report import (
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
    FileResult,
    RunResult,
)
from tsfix.codemods.pipeline.rewrite import Rewrite, RewriteError, rewrite_source, unified_diff
from tsfix.codemods.pipeline.sources import (
    SourceError,
    SourceText,
    discover,
    is_generated,
    read_source,
    write_atomic,
)
from tsfix.codemods.rules.base import ClassChange, Observations, Rule
from tsfix.codemods.rules.registry import select_rules
from tsfix.codemods.validation.pool import (
    NOT_SCRIPTABLE_EITHER,
    ClassVerdict,
    ValidationJob,
    WorkerPool,
    observe_job,
)


@dataclass
class Options:
    rules: list[str] | None = None          # None: [tool.tsfix] rules, else every rule
    mode: Literal["write", "diff", "check"] = "write"
    verify: bool = True
    require_verified: bool | None = None    # None: from the configuration
    config: Path | None = None              # None: nearest pyproject.toml with [tool.tsfix]
    jobs: int = 0                           # rewrite and validation workers; 0: one per core
    timeout: float | None = None            # per file's validation; None: configuration
    unsafe_fixes: bool | None = None        # None: from the configuration
    # Called in this process as work completes (the CLI draws its progress display from it).
    progress: Callable[[Progress], None] | None = None
    # Reuse per-file outcomes of earlier runs (codemods/cache.py). Off by default in the API,
    # on by default in the CLI (--no-cache), as in black.
    cache: bool = False
    cache_dir: Path | None = None           # None: $TSFIX_CACHE_DIR, else ~/.cache/tsfix
    # "onnx": lift-branch emits the exportable form and validation also exports to ONNX and
    # runs onnxruntime (needs the onnx extra). None: [tool.tsfix] target, else "torchscript".
    target: Literal["torchscript", "onnx"] | None = None


@dataclass
class Progress:
    """How far a run is: ``done`` of ``total`` items of the current phase (files while
    observing and rewriting, classes while validating), with the counts so far."""

    phase: Literal["observe", "rewrite", "validate", "recheck"]
    done: int
    total: int
    rewrites: int = 0                       # class rewrites found so far
    verdicts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _RewriteSettings:
    """What rewriting one file needs; small and picklable, sent to rewrite worker processes."""

    rules: tuple[type[Rule], ...]
    line_length: int
    unsafe_fixes: bool

    def rewrite(self, item: _Loaded,
                skip: dict[str, frozenset[str]] | None = None) -> Rewrite:
        return rewrite_source(item.source.text, item.result.display, self.rules,
                              line_length=self.line_length, skip_classes=skip,
                              unsafe_fixes=self.unsafe_fixes, observed=item.observed)


@dataclass
class _Session:
    """What every step of one run needs."""

    rules: list[type[Rule]]
    config: Config
    options: Options
    require_verified: bool
    unsafe_fixes: bool
    # Running totals for the progress display: "rewrites" and one entry per verdict.
    counts: dict[str, int] = field(default_factory=dict)
    target: str = "torchscript"

    @property
    def workers(self) -> int:
        return self.options.jobs or os.cpu_count() or 1

    def reporter(self, phase: Literal["observe", "rewrite", "validate", "recheck"],
                 total: int) -> _Reporter:
        return _Reporter(self.options.progress, phase, total, self.counts)

    @property
    def settings(self) -> _RewriteSettings:
        return _RewriteSettings(tuple(self.rules), self.config.line_length, self.unsafe_fixes)

    @property
    def timeout(self) -> float:
        return self.options.timeout or self.config.timeout

    @property
    def sys_path(self) -> list[str]:
        return [str(self.config.root)] if self.config.root else []

    def rewrite(self, item: _Loaded,
                skip: dict[str, frozenset[str]] | None = None) -> Rewrite:
        return self.settings.rewrite(item, skip)


class _Reporter:
    """Counts one phase's completed items and tells ``Options.progress`` (if any)."""

    def __init__(self, callback: Callable[[Progress], None] | None, phase: Literal[
                 "observe", "rewrite", "validate", "recheck"], total: int,
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


@dataclass
class _Observed:
    """What the observe round found for one file."""

    types: Observations | None = None
    # Observing the original's examples timed out: validation would hang the same way.
    timed_out: str | None = None


@dataclass
class _Loaded:
    result: FileResult
    source: SourceText
    observed: Observations | None = None
    # Observing the original's examples timed out: validation would hang the same way.
    observe_timed_out: str | None = None


@dataclass
class _Pending:
    loaded: _Loaded
    rewrite: Rewrite
    # class -> the one rule whose rewrite of it was dropped (rules together)
    dropped: dict[str, str] = field(default_factory=dict)

    @property
    def result(self) -> FileResult:
        return self.loaded.result

    @property
    def source(self) -> SourceText:
        return self.loaded.source


def run(targets: Sequence[str | os.PathLike[str]], options: Options) -> RunResult:
    """Rewrite the files and folders ``targets``. Raises ConfigError or UnknownRuleError for a
    bad configuration or rule name."""
    paths = [Path(target) for target in targets]
    config = load_config(options.config or find_pyproject(paths))
    rule_names = options.rules or config.rules or ["all"]
    target = _target(options, config)
    rules = select_rules(rule_names, target)
    session = _Session(
        rules, config, options,
        require_verified=(config.require_verified if options.require_verified is None
                          else options.require_verified),
        unsafe_fixes=(config.unsafe_fixes if options.unsafe_fixes is None
                      else options.unsafe_fixes), target=target)
    files: list[FileResult] = []
    for found in discover(paths, config.root, config.exclude):
        if isinstance(found, SourceError):
            files.append(FileResult(found.path, str(found.path), status="failed",
                                    error=str(found)))
        else:
            files.append(FileResult(found, _display(found)))

    cache = None
    if options.cache:
        cache = Cache.for_run(options.cache_dir, rules=[r.name for r in rules],
                              unsafe_fixes=session.unsafe_fixes,
                              line_length=config.line_length, verify=options.verify,
                              require_verified=session.require_verified,
                              auto_examples=config.auto_examples, target=target)
    keys, cached_texts = _from_cache(files, cache, config)

    # Validation workers start only when a round has jobs; with verify=False none runs.
    with WorkerPool(session.workers) as pool:
        observed: dict[Path, _Observed] = {}
        if options.verify and any(rule.needs_observations for rule in rules):
            observed = _observe(files, session, pool)
        pending, processes = _rewrite_all(files, session, observed)
        if options.verify:
            _validate(pending, session, pool)
            _drop_rules(pending, session, pool)
        else:
            for rewritten in pending:
                for c in rewritten.result.classes:
                    c.reason = "not validated (--no-verify)"

    final_texts: dict[int, str] = {}
    for rewritten in pending:
        final = _finish(rewritten, session)
        if final is not None:
            final_texts[id(rewritten.result)] = final
    for i, text in cached_texts.items():
        _write_cached(files[i], text, options.mode)
    if cache is not None:
        for i, key in keys.items():
            if not files[i].cached and cacheable(files[i]):
                cache.put(key, entry_of(files[i], final_texts.get(id(files[i]))))
    return RunResult(files, [r.name for r in rules], options.mode, options.verify,
                     session.require_verified, session.unsafe_fixes, processes,
                     cache.hits if cache is not None else 0)


def _target(options: Options, config: Config) -> str:
    """The run's target; "onnx" with validation needs the onnx extra installed."""
    target = options.target or config.target
    if target not in TARGETS:
        raise ConfigError(f"unknown target {target!r} (expected one of {', '.join(TARGETS)})")
    if target == "onnx" and options.verify:
        missing = [name for name in ("onnx", "onnxruntime")
                   if importlib.util.find_spec(name) is None]
        if missing:
            raise ConfigError(f"--target onnx validates with onnx and onnxruntime, and "
                              f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                              "not installed: pip install 'tsfix[onnx]' (or run with "
                              "--no-verify)")
    return target


def _from_cache(files: list[FileResult], cache: Cache | None, config: Config
                ) -> tuple[dict[int, str], dict[int, str]]:
    """Restore the files whose outcome is cached. Returns every file's cache key and the
    rewritten text of the restored changed files, both by index in ``files``."""
    keys: dict[int, str] = {}
    texts: dict[int, str] = {}
    if cache is None:
        return keys, texts
    for i, result in enumerate(files):
        if result.status == "failed":
            continue
        try:
            content = result.path.read_bytes()
        except OSError:
            continue        # reported when the file is read for rewriting
        examples = json.dumps({name: spec.to_json() if isinstance(spec, ExampleSpec)
                               else str(spec)
                               for name, spec in sorted(config.examples_in(result.path).items())})
        keys[i] = cache.key(content, examples)
        entry = cache.get(keys[i])
        if entry is not None:
            text = restore(result, entry)
            if text is not None:
                texts[i] = text
    return keys, texts


def _write_cached(result: FileResult, text: str, mode: str) -> None:
    """A changed file restored from the cache (an earlier dry run or check): write it."""
    if result.status == "changed":
        result.new_text = text
    if mode != "write" or result.status != "changed":
        return
    try:
        source = read_source(result.path)
        write_atomic(result.path, source.encode(text))
        result.written = True
    except (SourceError, OSError) as exc:
        result.status = "failed"
        result.error = f"{result.display}: cannot write: {exc}"


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _load(result: FileResult) -> _Loaded | None:
    try:
        source = read_source(result.path)
    except SourceError as exc:
        result.status, result.error = "failed", str(exc)
        return None
    if is_generated(source.text) or not may_define_module(source.text):
        result.status = "skipped"
        return None
    return _Loaded(result, source)


# ---- observed types ----------------------------------------------------------------------------

def _observe(files: list[FileResult], session: _Session, pool: WorkerPool
             ) -> dict[Path, _Observed]:
    """Run the original files' examples eagerly, recording argument types for the rules."""
    jobs: list[ValidationJob] = []
    by_job: dict[int, FileResult] = {}
    for result in files:
        if result.status == "failed" or result.cached:
            continue
        specs = session.config.examples_in(result.path)
        classes = [{"name": name, "example": spec.to_json()}
                   for name, spec in sorted(specs.items()) if isinstance(spec, ExampleSpec)]
        if not classes:
            continue
        job = observe_job(len(jobs), str(result.path.resolve()), classes, session.sys_path)
        jobs.append(job)
        by_job[job.id] = result
    observed: dict[Path, _Observed] = {}
    report = session.reporter("observe", len(jobs))
    found_types = pool.observe(jobs, timeout=session.timeout, on_result=lambda _: report())
    for job_id, found in found_types.items():
        result = by_job[job_id]
        observed[result.path] = _Observed(found.types, found.timed_out)
        result.observed = found.types
        for name, reason in sorted(found.failures.items()):
            result.notes.append(f"no observed types for {name} (static inference only): "
                                f"{reason}")
    return observed


# ---- rewrite -----------------------------------------------------------------------------------

# Below this many files, starting rewrite processes (each imports LibCST and black, ~0.5 s)
# costs more than it saves.
PARALLEL_MIN_FILES = 24
# Files per task sent to a rewrite process: large enough to amortise pickling, small enough
# to keep every process busy to the end and the progress display moving.
FILES_PER_TASK = 8


def _rewrite_all(files: list[FileResult], session: _Session,
                 observed: dict[Path, _Observed]) -> tuple[list[_Pending], int]:
    """Read and rewrite every file, in ``session.workers`` processes when there are many.
    Returns the changed files and the number of other processes that did the work.

    A worker returns its own copy of each FileResult, which replaces the one in ``files``;
    only changed files keep their text in memory."""
    work = [(i, result, observed.get(result.path, _Observed()))
            for i, result in enumerate(files) if result.status != "failed" and not result.cached]
    settings = session.settings
    report = session.reporter("rewrite", len(work))
    if session.workers <= 1 or len(work) < PARALLEL_MIN_FILES:
        done: Iterator[list[tuple[int, _Outcome]]] = (
            [(i, _load_and_rewrite(result, seen, settings))] for i, result, seen in work)
        return _collect(files, done, report)
    tasks = [work[start:start + FILES_PER_TASK] for start in range(0, len(work), FILES_PER_TASK)]
    # spawn, not fork: the validation pool may already have threads and pipes open.
    context = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=min(session.workers, len(tasks)),
                                 mp_context=context, initializer=_ignore_interrupts) as executor:
            futures = [executor.submit(_rewrite_task, task, settings) for task in tasks]
            try:
                return _collect(files, (future.result() for future in as_completed(futures)),
                                report)
            except BaseException:
                executor.shutdown(wait=False, cancel_futures=True)
                raise
    except BrokenProcessPool:
        # A rewrite process died: killed, out of memory, or never started because the calling
        # script has no `if __name__ == "__main__":` guard (spawn re-runs it). The work is
        # redone here, in this process, from the untouched originals.
        for i, result, _ in work:
            files[i] = result
        report = session.reporter("rewrite", len(work))
        return _collect(files, ([(i, _load_and_rewrite(result, seen, settings))]
                                for i, result, seen in work), report)


def _ignore_interrupts() -> None:
    """Rewrite processes leave Ctrl-C to the parent, which stops the run; a traceback from
    every process would bury its message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class _Outcome:
    result: FileResult
    pending: _Pending | None
    pid: int = field(default_factory=os.getpid)


def _rewrite_task(task: list[tuple[int, FileResult, _Observed]], settings: _RewriteSettings
                  ) -> list[tuple[int, _Outcome]]:
    """One rewrite process's share: a few files, read, rewritten and returned."""
    return [(i, _load_and_rewrite(result, seen, settings)) for i, result, seen in task]


def _collect(files: list[FileResult], done: Iterable[list[tuple[int, _Outcome]]],
             report: _Reporter) -> tuple[list[_Pending], int]:
    pending: dict[int, _Pending] = {}
    pids: set[int] = set()
    for batch in done:
        for i, outcome in batch:
            files[i] = outcome.result
            pids.add(outcome.pid)
            if outcome.pending is not None:
                pending[i] = outcome.pending
        report(len(batch), rewrites=sum(len(outcome.result.classes) for _, outcome in batch))
    return [pending[i] for i in sorted(pending)], len(pids - {os.getpid()})


def _load_and_rewrite(result: FileResult, observed: _Observed,
                      settings: _RewriteSettings) -> _Outcome:
    started = time.perf_counter()
    item = _load(result)
    if item is None:
        return _Outcome(result, None)
    item.observed, item.observe_timed_out = observed.types, observed.timed_out
    pending = _rewrite_file(item, settings)
    result.rewrite_s = round(time.perf_counter() - started, 4)
    return _Outcome(result, pending)


def _rewrite_file(item: _Loaded, settings: _RewriteSettings) -> _Pending | None:
    result = item.result
    try:
        rewrite = settings.rewrite(item)
    except RewriteError as exc:
        result.status, result.error = "failed", str(exc)
        return None
    except Exception as exc:
        result.status, result.error = "failed", _internal_error(result, exc)
        return None
    result.skips = rewrite.skips
    if not rewrite.changed:
        return None
    result.classes = [_class_result(c) for c in rewrite.changes]
    return _Pending(item, rewrite)


def _class_result(change: ClassChange) -> ClassResult:
    return ClassResult(change.rule, change.class_name, change.lines, change.summary,
                       dict(change.lifted), notes=list(change.notes),
                       python_only=change.python_only)


def _internal_error(result: FileResult, exc: Exception) -> str:
    return (f"{result.display}: internal error ({type(exc).__name__}: {exc}); "
            "nothing was changed. Please report this with the file.")


def _by_class(classes: list[ClassResult]) -> dict[str, list[ClassResult]]:
    """ClassResults grouped by class, in order of first appearance (one group per class)."""
    groups: dict[str, list[ClassResult]] = {}
    for c in classes:
        groups.setdefault(c.class_name, []).append(c)
    return groups


def _job_class(name: str, results: list[ClassResult], spec: ExampleSpec) -> dict[str, Any]:
    """One validation entry for a class, whatever number of rules changed it."""
    lifted: dict[str, str] = {}
    for c in results:
        lifted.update(c.lifted)
    rules = list(dict.fromkeys(c.rule for c in results))
    return {"name": name, "rule": ",".join(rules), "lifted": lifted,
            "python_only": any(c.python_only for c in results), "example": spec.to_json()}


# ---- validation --------------------------------------------------------------------------------

def _validate(pending: list[_Pending], session: _Session, pool: WorkerPool) -> None:
    config = session.config
    jobs: list[ValidationJob] = []
    by_job: dict[int, _Pending] = {}
    for item in pending:
        result = item.result
        classes = []
        for name, group in _by_class(result.classes).items():
            spec = _example_for(session, result.path, name)
            if isinstance(spec, ExampleError):
                result.status, result.error = "failed", str(spec)
                break
            if spec is None:
                where = _example_key(result.path, config)
                for c in group:
                    c.reason = (f'no example inputs: add [tool.tsfix.examples."{where}:'
                                f'{name}"] to {config.source or "pyproject.toml"}')
                continue
            classes.append(_job_class(name, group, spec))
        if result.status == "failed" or not classes:
            continue
        if item.loaded.observe_timed_out:
            # Validation runs the same original examples first; do not wait for it twice.
            names = {c["name"] for c in classes}
            for c in result.classes:
                if c.class_name in names:
                    c.reason = (f"{item.loaded.observe_timed_out} while observing the "
                                "original's examples; not validated")
            continue
        job = ValidationJob(len(jobs), str(result.path.resolve()), item.rewrite.text, classes,
                            session.sys_path, target=session.target)
        jobs.append(job)
        by_job[job.id] = item
    report = session.reporter("validate", sum(len(job.classes) for job in jobs))
    verdicts = pool.validate(jobs, timeout=session.timeout, on_result=lambda _, found: report(
        len(found), verdicts=[v.verdict for v in found]))
    for job_id, class_verdicts in verdicts.items():
        by_name = {v.name: v for v in class_verdicts}
        for c in by_job[job_id].result.classes:
            v = by_name.get(c.class_name)
            if v is not None:
                c.verdict, c.reason, c.duration_s = v.verdict, v.reason, v.duration_s


def _example_for(session: _Session, path: Path, name: str) -> ExampleSpec | ExampleError | None:
    """The configured example table, else (``auto-examples``) a guessed one."""
    spec = session.config.example_for(path, name)
    if spec is None and session.config.auto_examples:
        return ExampleSpec.automatic(f"{_example_key(path, session.config)}:{name}")
    return spec


def _example_key(path: Path, config: Config) -> str:
    resolved = path.resolve()
    if config.root and resolved.is_relative_to(config.root):
        return resolved.relative_to(config.root).as_posix()
    return _display(path)


# ---- rules together: which rule's rewrite broke a class ----------------------------------------

@dataclass
class _Trial:
    item: _Pending
    class_name: str
    dropped: str            # the rule left out for this class ("": none)
    rewrite: Rewrite


def _drop_rules(pending: list[_Pending], session: _Session, pool: WorkerPool) -> None:
    """For each rejected class changed by several rules, validate it once without each rule
    (one parallel round); drop the last rule in registry order whose removal verifies."""
    order = {rule.name: i for i, rule in enumerate(session.rules)}
    jobs: list[ValidationJob] = []
    trials: dict[int, _Trial] = {}
    for item in pending:
        result = item.result
        if result.status == "failed":
            continue
        groups = _by_class(result.classes)
        rejected = {name for name, group in groups.items()
                    if any(c.verdict == REJECTED for c in group)}
        # A class that scripted neither before nor after the combined rewrite may script with
        # one rule left out (annotate fixed what blocked it, another rule broke it again).
        not_scripting = {name for name, group in groups.items()
                         if any(c.verdict == UNVERIFIED
                                and c.reason.startswith(NOT_SCRIPTABLE_EITHER) for c in group)}
        for name in sorted(rejected | not_scripting, key=list(groups).index):
            contributing = sorted({c.rule for c in groups[name]},
                                  key=lambda r: order.get(r, len(order)))
            spec = _example_for(session, result.path, name)
            if len(contributing) < 2 or not isinstance(spec, ExampleSpec):
                continue
            others = frozenset(rejected - {name})
            # With other rejected classes in the file, C may have failed for their sake (the
            # rewritten file does not import): then C with every rule is a trial too.
            for rule_name in ([""] if others else []) + contributing:
                skip = {rule.name: others for rule in session.rules}
                if rule_name:
                    skip[rule_name] = others | {name}
                try:
                    rewrite = session.rewrite(item.loaded, skip)
                except Exception:
                    continue
                kept = [_class_result(c) for c in rewrite.changes if c.class_name == name]
                if not kept:
                    continue  # without this rule nothing changes the class: not a fix
                job = ValidationJob(len(jobs), str(result.path.resolve()), rewrite.text,
                                    [_job_class(name, kept, spec)], session.sys_path,
                                    target=session.target)
                jobs.append(job)
                trials[job.id] = _Trial(item, name, rule_name, rewrite)
    if not jobs:
        return
    report = session.reporter("recheck", len(jobs))
    verdicts = pool.validate(jobs, timeout=session.timeout, on_result=lambda *_: report())

    # (file, class) -> verified trials, best (dropping the last rule in registry order) first
    verified: dict[tuple[int, str], list[tuple[_Trial, ClassVerdict]]] = {}
    for job_id, class_verdicts in verdicts.items():
        trial = trials[job_id]
        for v in class_verdicts:
            if v.name == trial.class_name and v.verdict == VERIFIED:
                verified.setdefault((id(trial.item), trial.class_name), []).append((trial, v))
    for found in verified.values():
        # The largest kept set: every rule ("" dropped nothing), else all but the last rule.
        trial, verdict = max(found, key=lambda tv: order.get(tv[0].dropped, len(order)))
        _apply_drop(trial, verdict, order)


def _apply_drop(trial: _Trial, verdict: ClassVerdict, order: dict[str, int]) -> None:
    item, name = trial.item, trial.class_name
    result = item.result
    groups = _by_class(result.classes)
    dropped = [c for c in groups[name] if trial.dropped and c.rule == trial.dropped]
    if trial.dropped:
        item.dropped[name] = trial.dropped
    for c in dropped:
        c.verdict = REJECTED
        c.reason = (f"dropped: {name} validates without this rule's rewrite; with it: "
                    f"{c.reason}")
    kept = [_class_result(c) for c in trial.rewrite.changes if c.class_name == name]
    for c in kept:
        c.verdict, c.reason, c.duration_s = verdict.verdict, verdict.reason, verdict.duration_s
    groups[name] = sorted(kept + dropped, key=lambda c: order.get(c.rule, len(order)))
    result.classes = [c for group in groups.values() for c in group]


# ---- show or write -----------------------------------------------------------------------------

def _finish(item: _Pending, session: _Session) -> str | None:
    """Write (or only diff) the final text; returns it when it differs from the original."""
    result = item.result
    if result.status == "failed":
        result.classes = []  # nothing is written for a file with a broken example spec
        return None
    require_verified = session.require_verified
    if require_verified:
        for c in result.classes:
            if c.verdict == UNVERIFIED:
                c.verdict = REJECTED
                c.reason = f"unverified and --require-verified: {c.reason}"
    # A class is held back whole unless its only rejected change is the dropped rule's.
    held_back = {c.class_name for c in result.classes
                 if c.verdict == REJECTED and item.dropped.get(c.class_name) != c.rule}
    text = item.rewrite.text
    if held_back or item.dropped:
        skip = {rule.name: frozenset(held_back) for rule in session.rules}
        for name, rule_name in item.dropped.items():
            skip[rule_name] = skip.get(rule_name, frozenset()) | {name}
        try:
            text = session.rewrite(item.loaded, skip).text
        except Exception as exc:
            result.status, result.error = "failed", _internal_error(result, exc)
            result.classes = []
            return None
    if text == item.source.text:
        result.status = "rejected" if result.classes else "unchanged"
        return None
    result.status = "changed"
    result.diff = unified_diff(item.source.text, text, result.display)
    result.new_text = text
    if session.options.mode == "write":
        try:
            write_atomic(result.path, item.source.encode(text))
            result.written = True
        except OSError as exc:
            result.status = "failed"
            result.error = f"{result.display}: cannot write: {exc.strerror or exc}"
    return text


__all__ = ["REJECTED", "UNVERIFIED", "VERIFIED", "Options", "RunResult", "run"]
