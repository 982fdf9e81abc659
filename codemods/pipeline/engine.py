"""One tsfix run: discover files, rewrite, validate, then show or write. The Python API.

    from tsfix.codemods.pipeline.engine import Options, run
    result = run([Path("models")], Options(rules=["lift-branch"], mode="diff"))
    print(result.summary_line(), result.exit_code)

The run is a sequence of phases, each a function that takes the records of the phases before
it and returns new ones (frozen dataclasses; nothing a phase returns is changed later). This
module discovers the files, answers what it can from the cache and writes; phases 2 to 7 run
in :mod:`~tsfix.codemods.pipeline.phases` (a module each), loaded only when a file is not
cached:

1. discover and **cache** (:mod:`~tsfix.codemods.pipeline.cache`): a file whose outcome is
   cached is answered from it; when every file is, neither LibCST, black nor the rules are
   imported (the rewrite machinery loads on the first file that needs rewriting);
2. **observe** (validation on, a selected rule ``needs_observations``): the configured models
   (classes with example tables) run eagerly in the workers, and the types seen in every class
   of the tree they hold an instance of are passed to the rules
   (:mod:`~tsfix.codemods.pipeline.models`);
3. **rewrite** (:func:`~tsfix.codemods.pipeline.rewrite.rewrite_source`): read (keeping
   encoding and line endings), skip ``@generated`` files and files that cannot define an
   nn.Module, parse, run the rules, format the touched lines. A file that cannot be read,
   decoded or parsed is reported and left untouched; the run goes on;
4. **validate** every rewritten class in the worker pool
   (:class:`~tsfix.codemods.validation.pool.WorkerPool`, typed jobs and verdicts from
   :mod:`~tsfix.codemods.validation.protocol`): a class with its own example table alone, the
   others from the configured models that hold instances of them, the rest on a guessed input;
5. **rule-drop trials** (below), rewritten and validated in parallel like the first round;
6. **final texts**: the rewrite without what was held back;
7. **models**: each configured model's verdict on the tree as the run leaves it, and the fix
   loop for a model that stops in a file of the tree outside the run (those files join the
   run's outcomes); then every file is written through
   :func:`~tsfix.codemods.pipeline.sources.write_source`, the one function that writes.

Rewrites run in this process for small rounds, else in spawn processes started once and kept
for the run's later rounds. One WorkerPool serves every validation round (torch is imported
once per worker); ``verify=False`` never starts it.

Observed types. An observation that fails (import error, constructor or forward raising,
timeout, worker crash) only means no observed types for that class: the rules fall back to
static inference, and the file's ``notes`` say why. A file whose observation timed out is not
validated (``unverified``): validation runs the same original examples first and would only
wait for the same hang again.

Validation runs once per class on the combined result of every rule (one job entry per class,
the ``lifted`` parameters of all its changes merged); each rule's ClassResult for the class gets
that verdict. A class whose rewrite is rejected is left as it was, and the rules run again
without it; only the rest is written.

Rules together. When a rejected class was changed by more than one rule -- or a class that
scripts neither before nor after the combined rewrite, since one rule may fix what blocked it
while another breaks it again -- the run finds the rule whose rewrite broke it, in one extra
round of trials:

1. for every such class C and every rule R that changed it, re-run the rules on the original
   text with R skipping C (and every rule skipping the file's other rejected classes), and
   validate C in that text; when the file has other rejected classes, C with every rule (only
   those others skipped) is one more trial, since C may have been rejected for their sake (a
   rewritten file that does not import rejects every class in it); all these trials of all
   files are rewritten in parallel, then validated in one parallel round;
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
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tsfix.codemods.pipeline.cache import (
    Cache,
    cacheable,
    entry_of,
    file_digests,
    restore,
)
from tsfix.codemods.pipeline.config import (
    TARGETS,
    Config,
    ConfigError,
    ExampleError,
    ExampleSpec,
    find_pyproject,
    load_config,
    require_executor,
)
from tsfix.codemods.pipeline.report import (
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    FileResult,
    Interrupted,
    Progress,
    RunResult,
    TimeLimitReached,
)
from tsfix.codemods.pipeline.settings import RunSettings
from tsfix.codemods.pipeline.sources import (
    SourceError,
    SourceText,
    WriteError,
    discover,
    interrupts_deferred,
    read_source,
    write_source,
)
from tsfix.codemods.rules.names import (
    UnknownRuleError,
    check_rule_names,
    for_target,
    rule_targets,
)

if TYPE_CHECKING:
    from tsfix.codemods.pipeline.phases import Outcome, Session


@dataclass(frozen=True)
class Options:
    """What a run is asked to do (the CLI builds one; None: from ``[tool.tsfix]``). Frozen:
    the engine resolves it once into :class:`~tsfix.codemods.pipeline.settings.RunSettings`."""

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
    # "onnx": lift-branch emits the exportable form and validation also exports to ONNX (the
    # TorchScript-based exporter) and runs onnxruntime (needs the onnx extra). "export": only
    # the rules torch.export needs, in their torch.cond forms, proven with torch.export (and the
    # torch.export-based ONNX exporter when the onnx extra is installed). None: [tool.tsfix]
    # target, else "torchscript".
    target: Literal["torchscript", "onnx", "export"] | None = None
    # A configured model that does not script end to end is reported without failing the run.
    # None: [tool.tsfix] allow-unscriptable.
    allow_unscriptable: bool | None = None
    # Rounds of the repair loop per configured model (0: no loop, the model verdict only).
    fix_rounds: int = 12
    # Seconds of repair rounds per configured model. None: [tool.tsfix] model-budget, else
    # no limit but the rounds and the run's.
    model_budget: float | None = None
    # Seconds for the whole run: then it stops as on Ctrl-C, keeping the files decided by then
    # (Interrupted with ``time_limit``). None: [tool.tsfix] timeout-total, else no limit.
    # Measured from the call; only in the main thread (a timer signal, SIGALRM).
    timeout_total: float | None = None
    # Where validation jobs run: "local" worker processes or "ray" tasks (the ray extra;
    # codemods/validation/ray_executor.py). None: [tool.tsfix] executor, else "local".
    executor: Literal["local", "ray"] | None = None
    # The Ray cluster ("ray://host:10001", "host:6379", "auto"). None: [tool.tsfix]
    # ray-address, else RAY_ADDRESS, else a local Ray instance started for the run.
    ray_address: str | None = None


# ---- the run -----------------------------------------------------------------------------------

def run(targets: Sequence[str | os.PathLike[str]], options: Options) -> RunResult:
    """Rewrite the files and folders ``targets``. Raises ConfigError or UnknownRuleError for a
    bad configuration or rule name, and :class:`Interrupted` (a KeyboardInterrupt naming the
    files already written and those not decided) for Ctrl-C, or when the time limit runs out,
    once the files are found."""
    paths = [Path(target) for target in targets]
    config = load_config(options.config or find_pyproject(paths))
    limit = options.timeout_total or config.timeout_total
    with _time_limit(limit):
        return _run(paths, options, config)


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """``TimeLimitReached`` is raised in this (the main) thread ``seconds`` from now, unless
    the block is over by then."""
    if (seconds is None or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return

    def reached(signum: int, frame: object) -> None:
        raise TimeLimitReached(seconds)

    previous = signal.signal(signal.SIGALRM, reached)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(paths: list[Path], options: Options, config: Config) -> RunResult:
    settings = _settings(options, config)
    warnings: list[str] = []
    files = _found(paths, config, warnings)
    # Example tables that name a class the file does not define, or a file that does not
    # exist: the file fails (nothing validated or written for it), as for any bad table.
    missing = _table_problems(files, paths, config) if settings.verify else []
    cache = Cache.for_run(options.cache_dir, settings) if options.cache else None
    _from_cache(files, cache, config)
    writer = _Writer(settings.mode, cache)
    todo = [file for file in files if file.todo]
    processes = 0
    phase_s: dict[str, float] = {}
    phase_items: dict[str, int] = {}
    extra: list[Outcome] = []               # files the fix loop rewrote, not among `files`
    try:
        if todo:
            from tsfix.codemods.pipeline import phases

            session = _session(settings, options, config,
                               lambda ready, complete: writer.decided(files, ready, complete))
            try:
                outcomes, extra = phases.run_phases(
                    [phases.File(f.index, f.path, f.resolved, f.display) for f in todo
                     if f.resolved is not None],
                    session)
            finally:
                processes, phase_s = session.processes, session.phase_s
                phase_items = session.phase_items
            for index, outcome in outcomes.items():
                files[index].outcome = outcome
    except KeyboardInterrupt as exc:
        raise _stopped(exc, writer.written,
                       [f.display for f in todo if f.index not in writer.known]) from None
    try:
        results = [writer.final(file) for file in files]
        # A model's outcome rests on what the fix loop did to the files it imports; when
        # that was not written (--diff, --check), a cached outcome would tell the next run
        # the model scripts while nothing rewrites those files.
        extra_results = [writer.write(o.result, o.text, o.source) for o in extra]
        unwritten = {str(r.path) for r in extra_results
                     if r.status == "changed" and not r.written}
        writer.cache_outcomes(files, results, unwritten)
    except KeyboardInterrupt as exc:
        raise _stopped(exc, writer.written) from None
    return RunResult([*results, *extra_results, *missing], list(settings.rule_names),
                     settings.mode, settings.verify, settings.require_verified,
                     settings.unsafe_fixes, processes,
                     sum(file.cached is not None for file in files),
                     warnings=tuple(warnings), allow_unscriptable=settings.allow_unscriptable,
                     phase_s={k: round(v, 2) for k, v in phase_s.items()},
                     phase_items=dict(phase_items))


def _settings(options: Options, config: Config) -> RunSettings:
    """The options resolved against the configuration, once for the run."""
    target = _target(options, config)
    if config.rules:
        # --rule overrides the configured rules; a typo there is still a broken configuration
        # (a rule of another target only when the configured rules are the ones used).
        try:
            _rule_names(config.rules, target if not options.rules else None)
        except UnknownRuleError as exc:
            raise ConfigError(f"{config.source}: [tool.tsfix] rules: {exc}") from None

    def given(option: bool | None, configured: bool) -> bool:
        return configured if option is None else option

    rule_names = tuple(_rule_names(options.rules or config.rules or ["all"], target))
    executor = options.executor or config.executor
    if options.verify:
        require_executor(executor)
    return RunSettings(
        rule_names, target, options.mode, options.verify,
        require_verified=given(options.require_verified, config.require_verified),
        unsafe_fixes=given(options.unsafe_fixes, config.unsafe_fixes),
        allow_unscriptable=given(options.allow_unscriptable, config.allow_unscriptable),
        line_length=config.line_length, auto_examples=config.auto_examples,
        executor=executor, ray_address=options.ray_address or config.ray_address)


def _session(settings: RunSettings, options: Options, config: Config,
             decided: Callable[[dict[int, Outcome], bool], None]) -> Session:
    """What the phases need of the run (``decided``: where they tell decided files)."""
    from tsfix.codemods.pipeline import phases

    limit = options.timeout_total or config.timeout_total
    return phases.Session(
        list(settings.rule_names), config, settings.require_verified, settings.unsafe_fixes,
        settings.target, verify=settings.verify, workers=options.jobs or os.cpu_count() or 1,
        timeout=options.timeout or config.timeout, progress=options.progress,
        fix_rounds=options.fix_rounds, decided=decided, executor=settings.executor,
        ray_address=settings.ray_address,
        model_budget=options.model_budget or config.model_budget,
        # The repair loop starts no round it cannot finish before the time limit.
        deadline=time.monotonic() + limit if limit else None)


@dataclass
class _File:
    """One file found for the run, from discovery to its result."""

    index: int                              # in the run's list of files
    found: Path | SourceError               # as discovered, or why it cannot be read
    display: str                            # in messages and the report
    resolved: Path | None = None            # None for a SourceError
    problem: str | None = None              # an example table names no class of it
    key: str | None = None                  # its cache key
    cached: tuple[FileResult, str | None] | None = None   # its outcome (and text) cached
    outcome: Outcome | None = None          # what the phases made of it
    decided: FileResult | None = None       # written (or not) as soon as it was decided

    @property
    def path(self) -> Path:
        return self.found.path if isinstance(self.found, SourceError) else self.found

    @property
    def todo(self) -> bool:
        """For the phases: readable, not answered from the cache, no bad table."""
        return isinstance(self.found, Path) and self.cached is None and self.problem is None


def _found(paths: list[Path], config: Config, warnings: list[str]) -> list[_File]:
    """The files under ``paths``, each resolved once (a stat per folder) and named."""
    cwd = Path.cwd().resolve()
    files = []
    for i, found in enumerate(discover(paths, config.root, config.exclude, warnings)):
        if isinstance(found, SourceError):
            files.append(_File(i, found, str(found.path)))
        else:
            resolved = found.resolve()
            files.append(_File(i, found, _display(found, resolved, cwd), resolved))
    return files


class _Writer:
    """The one place a run writes a file (a changed file, in write mode), as soon as the
    phases have decided it, in one atomic rename, so that a run stopped later (Ctrl-C,
    SIGTERM, the time limit) keeps it; :class:`Interrupted` names the files written and
    those not decided. Caches the outcomes that are complete."""

    def __init__(self, mode: str, cache: Cache | None) -> None:
        self.mode, self.cache = mode, cache
        self.written: list[str] = []
        self.known: set[int] = set()        # decided, written or not (a stop may come between)

    def write(self, result: FileResult, text: str | None, source: SourceText | None
              ) -> FileResult:
        if text is None or result.status != "changed" or self.mode != "write":
            return result
        with interrupts_deferred():
            result = _written(result, text, source)
            if result.written:
                self.written.append(result.display)
        return result

    def decided(self, files: list[_File], ready: dict[int, Outcome], complete: bool) -> None:
        """The phases decided ``ready`` (by file index); ``complete``: no model's record or
        imports will be added to them."""
        self.known.update(ready)
        for i, outcome in ready.items():
            file = files[i]
            file.decided = self.write(outcome.result, outcome.text, outcome.source)
            # Complete already: the next run answers it from the cache even when this one
            # is stopped.
            if (self.cache is not None and file.key is not None and complete
                    and cacheable(file.decided)):
                self.cache.put(file.key, entry_of(file.decided, outcome.text))

    def final(self, file: _File) -> FileResult:
        """A file's result at the end of the run, written if it was not already."""
        if file.problem is not None:
            return FileResult(file.path, file.display, "failed", file.problem)
        if file.cached is not None:
            result, text, like = *file.cached, None
        elif isinstance(file.found, SourceError):
            return FileResult(file.path, file.display, "failed", str(file.found))
        else:
            assert file.outcome is not None
            result, text, like = file.outcome.result, file.outcome.text, file.outcome.source
        if file.decided is not None:
            # Written (or not) when it was decided; the model phase may have added records.
            done = file.decided
            return replace(result, status=done.status, error=done.error, written=done.written)
        return self.write(result, text, like)

    def cache_outcomes(self, files: list[_File], results: list[FileResult],
                       unwritten: set[str]) -> None:
        """Every new outcome the next run can be answered from, with the digests of the
        files it depends on as the next run will see them (this run may have written them)."""
        if self.cache is None:
            return
        for file, result in zip(files, results, strict=True):
            if (file.key is None or file.cached is not None or not cacheable(result)
                    or unwritten & set(result.depends)):
                continue
            if result.depends:
                result = replace(result, depends=file_digests(set(result.depends)))
            self.cache.put(file.key, entry_of(result, file.outcome.text
                                              if file.outcome is not None else None))


def _stopped(exc: KeyboardInterrupt, written: list[str], undecided: Sequence[str] = ()
             ) -> Interrupted:
    """What stopped the run (a signal, the time limit), with what it kept and left."""
    return Interrupted(written, undecided,
                       exc.seconds if isinstance(exc, TimeLimitReached) else None)


def _rule_names(names: list[str], target: str | None) -> list[str]:
    """The selected rules' names in ``--rule all`` order; raises UnknownRuleError. Read from
    the rule modules without importing them (LibCST), unless the registry is loaded already
    (then its table is the truth: tests substitute rules there)."""
    registry = sys.modules.get("tsfix.codemods.rules.registry")
    if target is None:              # names only
        known = list(registry.ALL_RULES) if registry is not None else list(rule_targets())
        check_rule_names(names, known)
        return names
    if registry is not None:
        return [rule.name for rule in registry.select_rules(names, target)]
    return for_target(names, target, rule_targets())


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


def _from_cache(files: list[_File], cache: Cache | None, config: Config) -> None:
    """Every readable file's cache key, and its outcome (with the rewritten text of a changed
    file) restored from the cache (not for a file with a bad table)."""
    if cache is None:
        return
    for file in files:
        if not isinstance(file.found, Path) or file.problem is not None:
            continue
        assert file.resolved is not None
        try:
            content = file.found.read_bytes()
        except OSError:
            continue        # reported when the file is read for rewriting
        specs = config.examples_in(file.resolved, resolved=True)
        examples = json.dumps({name: spec.to_json() if isinstance(spec, ExampleSpec)
                               else str(spec) for name, spec in sorted(specs.items())})
        file.key = cache.key(content, examples)
        entry = cache.get(file.key)
        if entry is not None:
            file.cached = restore(file.found, file.display, entry)
    # An outcome that depends on a file the run redoes (a model's imports) is redone too: the
    # model's run gives that file's classes their verdicts.
    redone = {str(file.resolved) for file in files
              if isinstance(file.found, Path) and file.cached is None}
    while True:
        stale = [file for file in files if file.cached is not None
                 and redone & set(file.cached[0].depends)]
        if not stale:
            return
        for file in stale:
            file.cached = None
            redone.add(str(file.resolved))


def _table_problems(files: list[_File], paths: list[Path], config: Config) -> list[FileResult]:
    """Example tables that cannot be about anything: each found file with a table naming a
    class it does not define gets its ``problem``, and each table naming a file under
    ``paths`` that does not exist gives a failed record (returned)."""
    index = {file.resolved: file for file in files if file.resolved is not None}
    given = [p.resolve() for p in paths]
    missing: list[FileResult] = []
    cwd = Path.cwd().resolve()
    by_file: dict[Path, list[str]] = {}
    for file, class_name in config.examples:
        by_file.setdefault(file, []).append(class_name)
    for file, class_names in sorted(by_file.items()):
        where = [f'{config.source}: [tool.tsfix.examples."{config.example_keys[(file, name)]}"]'
                 for name in class_names]
        known = index.get(file)
        if known is not None:
            defined = _defined_names(known.found, class_names)
            if defined is None:
                continue        # not readable or not parseable: reported when rewritten
            problems = [f"{label} names no class {name} in {known.display} (it defines "
                        f"{', '.join(defined.classes) or 'no class'})"
                        for label, name in zip(where, class_names, strict=True)
                        if name not in defined.names]
            # A table that does not parse is reported where its class is validated; a class
            # no rule rewrites (a configured model) would otherwise lose it without a word.
            problems += [str(spec) for spec in (config.examples[(file, name)]
                                                for name in class_names)
                         if isinstance(spec, ExampleError)]
            if problems:
                known.problem = "; ".join(problems)
        elif not file.exists() and any(file == g or file.is_relative_to(g) for g in given):
            display = _display(file, file, cwd)
            missing.extend(FileResult(file, display, "failed",
                                      f"{label} names a file that does not exist: {display}")
                           for label in where)
    return missing


@dataclass(frozen=True)
class _Defined:
    names: frozenset[str]           # every name the module binds at its top level
    classes: tuple[str, ...]        # the classes it defines, in order


def _defined_names(path: Path | SourceError, wanted: list[str]) -> _Defined | None:
    """What the module at ``path`` defines at its top level, as far as ``wanted`` needs to be
    known (None: unreadable or unparseable)."""
    import ast
    import re

    if isinstance(path, SourceError):
        return None
    try:
        text = read_source(path).text
    except SourceError:
        return None
    if all(re.search(rf"^class\s+{name}\b", text, re.MULTILINE) for name in wanted):
        return _Defined(frozenset(wanted), ())      # the usual case, without parsing
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    names: set[str] = set()
    classes: list[str] = []
    statements = list(tree.body)
    while statements:
        node = statements.pop(0)
        if isinstance(node, ast.ClassDef):
            classes.append(node.name)
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            # Definitions under `if TYPE_CHECKING:`, try/except ImportError, ...
            for field_name in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field_name, []):
                    statements.extend(child.body if isinstance(child, ast.ExceptHandler)
                                      else [child])
    return _Defined(frozenset(names), tuple(classes))


def _display(path: Path, resolved: Path, cwd: Path) -> str:
    """How the report names a file: relative to the working folder, else as given."""
    try:
        return resolved.relative_to(cwd).as_posix()
    except ValueError:
        return str(path)


def _written(result: FileResult, text: str, source: SourceText | None) -> FileResult:
    """``result`` after writing ``text`` to its file (``source``: the file as read)."""
    try:
        write_source(result.path, text, source)
    except WriteError as exc:
        return replace(result, status="failed", error=f"{result.display}: cannot write: {exc}")
    return replace(result, written=True)


__all__ = ["REJECTED", "UNVERIFIED", "VERIFIED", "Interrupted", "Options", "Progress",
           "RunResult", "run"]
