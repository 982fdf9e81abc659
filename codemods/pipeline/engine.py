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
from collections.abc import Callable, Collection, Iterator, Sequence
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
    from tsfix.codemods.pipeline.phases import Outcome


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
    target = _target(options, config)
    if config.rules:
        # --rule overrides the configured rules; a typo there is still a broken configuration
        # (a rule of another target only when the configured rules are the ones used).
        try:
            _rule_names(config.rules, target if not options.rules else None)
        except UnknownRuleError as exc:
            raise ConfigError(f"{config.source}: [tool.tsfix] rules: {exc}") from None
    rule_names = _rule_names(options.rules or config.rules or ["all"], target)
    require_verified = (config.require_verified if options.require_verified is None
                        else options.require_verified)
    unsafe_fixes = config.unsafe_fixes if options.unsafe_fixes is None else options.unsafe_fixes
    allow_unscriptable = (config.allow_unscriptable if options.allow_unscriptable is None
                          else options.allow_unscriptable)
    executor = options.executor or config.executor
    if options.verify:
        require_executor(executor)
    warnings: list[str] = []
    found: list[Path | SourceError] = list(discover(paths, config.root, config.exclude,
                                                    warnings))
    # Each path resolved once (a stat per folder): names in the report, example tables, jobs.
    cwd = Path.cwd().resolve()
    resolved = {i: f.resolve() for i, f in enumerate(found) if isinstance(f, Path)}
    displays = [_display(f, resolved[i], cwd) if isinstance(f, Path) else str(f.path)
                for i, f in enumerate(found)]

    # Example tables that name a class the file does not define, or a file that does not
    # exist: the file fails (nothing validated or written for it), as for any bad table.
    bad_tables, missing = (_table_problems(found, resolved, displays, paths, config, cwd)
                           if options.verify else ({}, []))

    cache = None
    if options.cache:
        cache = Cache.for_run(options.cache_dir, rules=rule_names, unsafe_fixes=unsafe_fixes,
                              line_length=config.line_length, verify=options.verify,
                              require_verified=require_verified,
                              auto_examples=config.auto_examples, target=target)
    keys, cached = _from_cache(found, resolved, displays, cache, config, skip=bad_tables)

    outcomes: dict[int, Outcome] = {}
    extra: list[Outcome] = []               # files the fix loop rewrote, not among `found`
    processes = 0
    # Each file is written as soon as the phases have decided it, in one atomic rename, so
    # that a run stopped later (Ctrl-C, SIGTERM, the time limit) keeps it; Interrupted names
    # the files written and those not decided.
    written: list[str] = []
    decided: dict[int, FileResult] = {}     # by index in `found`: after its write, if any
    known: set[int] = set()                 # decided, written or not (a stop may come between)
    todo = {i: f for i, f in enumerate(found)
            if isinstance(f, Path) and i not in cached and i not in bad_tables}

    def write(result: FileResult, text: str | None, source: SourceText | None) -> FileResult:
        """The one place a run writes a file: a changed file, in write mode."""
        if text is None or result.status != "changed" or options.mode != "write":
            return result
        with interrupts_deferred():
            result = _written(result, text, source)
            if result.written:
                written.append(result.display)
        return result

    def write_decided(ready: dict[int, Outcome], complete: bool) -> None:
        known.update(ready)
        for i, outcome in ready.items():
            result = write(outcome.result, outcome.text, outcome.source)
            decided[i] = result
            # Complete already (no model's record or imports to add later): the next run
            # answers it from the cache even when this one is stopped.
            if cache is not None and i in keys and complete and cacheable(result):
                cache.put(keys[i], entry_of(result, outcome.text))

    try:
        if todo:
            from tsfix.codemods.pipeline import phases

            session = phases.Session(
                rule_names, config, require_verified, unsafe_fixes, target,
                verify=options.verify, workers=options.jobs or os.cpu_count() or 1,
                timeout=options.timeout or config.timeout, progress=options.progress,
                fix_rounds=options.fix_rounds, decided=write_decided,
                executor=executor, ray_address=options.ray_address or config.ray_address,
                # The repair loop starts no round it cannot finish before the time limit.
                deadline=(time.monotonic() + limit
                          if (limit := options.timeout_total or config.timeout_total)
                          else None))
            try:
                outcomes, extra = phases.run_phases(
                    [phases.File(i, f, resolved[i], displays[i]) for i, f in todo.items()],
                    session)
            finally:
                processes = session.processes
    except KeyboardInterrupt as exc:
        raise _stopped(exc, written, [displays[i] for i in todo if i not in known]) from None

    files: list[FileResult] = []
    try:
        for i, source in enumerate(found):
            like = None
            if i in bad_tables:
                result, text = FileResult(source.path if isinstance(source, SourceError)
                                          else source, displays[i], "failed",
                                          bad_tables[i]), None
            elif i in cached:
                result, text = cached[i]
            elif isinstance(source, SourceError):
                result, text = FileResult(source.path, displays[i], "failed", str(source)), None
            else:
                result, text, like = outcomes[i].result, outcomes[i].text, outcomes[i].source
            if i in decided:
                # Written (or not) when it was decided; the model phase may have added records.
                done = decided[i]
                files.append(replace(result, status=done.status, error=done.error,
                                     written=done.written))
                continue
            files.append(write(result, text, like))
        # A model's outcome rests on what the fix loop did to the files it imports; when
        # that was not written (--diff, --check), a cached outcome would tell the next run
        # the model scripts while nothing rewrites those files.
        unwritten: set[str] = set()
        for outcome in extra:
            result = write(outcome.result, outcome.text, outcome.source)
            if result.status == "changed" and not result.written:
                unwritten.add(str(result.path))
            files.append(result)
        files.extend(missing)
        if cache is not None:
            for i, key in keys.items():
                if (i not in cached and cacheable(files[i])
                        and not unwritten & set(files[i].depends)):
                    result = files[i]
                    if result.depends:
                        # The bytes the next run will see (this run may have written them).
                        result = replace(result, depends=file_digests(set(result.depends)))
                    cache.put(key, entry_of(result,
                                            outcomes[i].text if i in outcomes else None))
    except KeyboardInterrupt as exc:
        raise _stopped(exc, written) from None
    return RunResult(files, rule_names, options.mode, options.verify, require_verified,
                     unsafe_fixes, processes, len(cached),
                     warnings=tuple(warnings), allow_unscriptable=allow_unscriptable)


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


def _from_cache(found: list[Path | SourceError], resolved: dict[int, Path], displays: list[str],
                cache: Cache | None, config: Config, *, skip: Collection[int] = ()
                ) -> tuple[dict[int, str], dict[int, tuple[FileResult, str | None]]]:
    """Every readable file's cache key, and the outcomes (with the rewritten text of a changed
    file) restored from the cache, both by index in ``found`` (``skip``: not these)."""
    keys: dict[int, str] = {}
    cached: dict[int, tuple[FileResult, str | None]] = {}
    if cache is None:
        return keys, cached
    for i, path in enumerate(found):
        if isinstance(path, SourceError) or i in skip:
            continue
        try:
            content = path.read_bytes()
        except OSError:
            continue        # reported when the file is read for rewriting
        specs = config.examples_in(resolved[i], resolved=True)
        examples = json.dumps({name: spec.to_json() if isinstance(spec, ExampleSpec)
                               else str(spec) for name, spec in sorted(specs.items())})
        keys[i] = cache.key(content, examples)
        entry = cache.get(keys[i])
        if entry is not None:
            cached[i] = restore(path, displays[i], entry)
    # An outcome that depends on a file the run redoes (a model's imports) is redone too: the
    # model's run gives that file's classes their verdicts.
    redone = {str(resolved[i]) for i, f in enumerate(found)
              if isinstance(f, Path) and i not in cached}
    while True:
        stale = [i for i, (result, _) in cached.items() if redone & set(result.depends)]
        if not stale:
            return keys, cached
        for i in stale:
            del cached[i]
            redone.add(str(resolved[i]))


def _table_problems(found: list[Path | SourceError], resolved: dict[int, Path],
                    displays: list[str], paths: list[Path], config: Config, cwd: Path
                    ) -> tuple[dict[int, str], list[FileResult]]:
    """Example tables that cannot be about anything: the error of each found file with a
    table naming a class it does not define (by index in ``found``), and a failed record for
    each table naming a file under ``paths`` that does not exist."""
    index = {path: i for i, path in resolved.items()}
    given = [p.resolve() for p in paths]
    bad: dict[int, str] = {}
    missing: list[FileResult] = []
    by_file: dict[Path, list[str]] = {}
    for file, class_name in config.examples:
        by_file.setdefault(file, []).append(class_name)
    for file, class_names in sorted(by_file.items()):
        where = [f'{config.source}: [tool.tsfix.examples."{config.example_keys[(file, name)]}"]'
                 for name in class_names]
        i = index.get(file)
        if i is not None:
            defined = _defined_names(found[i], class_names)
            if defined is None:
                continue        # not readable or not parseable: reported when rewritten
            problems = [f"{label} names no class {name} in {displays[i]} (it defines "
                        f"{', '.join(defined.classes) or 'no class'})"
                        for label, name in zip(where, class_names, strict=True)
                        if name not in defined.names]
            if problems:
                bad[i] = "; ".join(problems)
        elif not file.exists() and any(file == g or file.is_relative_to(g) for g in given):
            display = _display(file, file, cwd)
            missing.extend(FileResult(file, display, "failed",
                                      f"{label} names a file that does not exist: {display}")
                           for label in where)
    return bad, missing


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
