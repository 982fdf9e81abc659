"""One tsfix run: discover files, rewrite, validate, then show or write. The Python API.

    from tsfix.codemods.engine import Options, run
    result = run([Path("models")], Options(rules=["lift-branch"], mode="diff"))
    print(result.summary_line(), result.exit_code)

Per file: read (keeping encoding and line endings), skip ``@generated`` files and files that
cannot define an nn.Module, rewrite (:func:`~tsfix.codemods.rewrite.rewrite_source`), then
validate every rewritten class in worker processes. A class whose rewrite validation rejects is
left as it was: the rules run again without it, and only the rest is written. A file that cannot
be read, decoded or parsed, or whose example spec is wrong, is reported and left untouched; the
run goes on with the other files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tsfix.codemods.analysis import may_define_module
from tsfix.codemods.config import Config, ExampleError, find_pyproject, load_config
from tsfix.codemods.registry import select_rules
from tsfix.codemods.report import (
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
    FileResult,
    RunResult,
)
from tsfix.codemods.rewrite import Rewrite, RewriteError, rewrite_source, unified_diff
from tsfix.codemods.rule import Rule
from tsfix.codemods.sources import (
    SourceError,
    SourceText,
    discover,
    is_generated,
    read_source,
    write_atomic,
)
from tsfix.codemods.validation import ValidationJob, run_jobs


@dataclass
class Options:
    rules: list[str] | None = None          # None: [tool.tsfix] rules, else every rule
    mode: Literal["write", "diff", "check"] = "write"
    verify: bool = True
    require_verified: bool | None = None    # None: from the configuration
    config: Path | None = None              # None: nearest pyproject.toml with [tool.tsfix]
    jobs: int = 0                           # validation workers; 0: one per core
    timeout: float | None = None            # per file's validation; None: configuration


@dataclass
class _Pending:
    result: FileResult
    source: SourceText
    rewrite: Rewrite


def run(paths: list[Path], options: Options) -> RunResult:
    """Raises ConfigError or UnknownRuleError for a bad configuration or rule name."""
    config = load_config(options.config or find_pyproject(paths))
    rule_names = options.rules or config.rules or ["all"]
    rules = select_rules(rule_names)
    require_verified = (config.require_verified if options.require_verified is None
                        else options.require_verified)
    files: list[FileResult] = []
    pending: list[_Pending] = []
    for found in discover(paths, config.root, config.exclude):
        if isinstance(found, SourceError):
            files.append(FileResult(found.path, str(found.path), status="failed",
                                    error=str(found)))
            continue
        result = FileResult(found, _display(found))
        files.append(result)
        item = _rewrite_file(result, rules, config)
        if item is not None:
            pending.append(item)

    if options.verify:
        _validate(pending, config, options)
    else:
        for item in pending:
            for c in item.result.classes:
                c.reason = "not validated (--no-verify)"

    for item in pending:
        _finish(item, rules, config, options, require_verified)
    return RunResult(files, [r.name for r in rules], options.mode, options.verify,
                     require_verified)


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _rewrite_file(result: FileResult, rules: list[type[Rule]], config: Config) -> _Pending | None:
    try:
        source = read_source(result.path)
    except SourceError as exc:
        result.status, result.error = "failed", str(exc)
        return None
    if is_generated(source.text) or not may_define_module(source.text):
        result.status = "skipped"
        return None
    try:
        rewrite = rewrite_source(source.text, result.display, rules,
                                 line_length=config.line_length)
    except RewriteError as exc:
        result.status, result.error = "failed", str(exc)
        return None
    except Exception as exc:
        result.status = "failed"
        result.error = (f"{result.display}: internal error ({type(exc).__name__}: {exc}); "
                        "nothing was changed. Please report this with the file.")
        return None
    result.skips = rewrite.skips
    if not rewrite.changed:
        return None
    result.classes = [ClassResult(c.rule, c.class_name, c.lines, c.summary, c.lifted)
                      for c in rewrite.changes]
    return _Pending(result, source, rewrite)


def _validate(pending: list[_Pending], config: Config, options: Options) -> None:
    jobs: list[ValidationJob] = []
    by_job: dict[int, _Pending] = {}
    for item in pending:
        result = item.result
        classes = []
        for c in result.classes:
            spec = config.example_for(result.path, c.class_name)
            if isinstance(spec, ExampleError):
                result.status, result.error = "failed", str(spec)
                break
            if spec is None:
                where = _example_key(result.path, config)
                c.reason = (f'no example inputs: add [tool.tsfix.examples."{where}:'
                            f'{c.class_name}"] to {config.source or "pyproject.toml"}')
                continue
            classes.append({"name": c.class_name, "rule": c.rule, "lifted": c.lifted,
                            "example": spec.to_json()})
        if result.status == "failed" or not classes:
            continue
        job = ValidationJob(len(jobs), str(result.path.resolve()), item.rewrite.text, classes,
                            [str(config.root)] if config.root else [])
        jobs.append(job)
        by_job[job.id] = item
    timeout = options.timeout or config.timeout
    verdicts = run_jobs(jobs, workers=options.jobs or os.cpu_count() or 1, timeout=timeout)
    for job_id, class_verdicts in verdicts.items():
        by_name = {v.name: v for v in class_verdicts}
        for c in by_job[job_id].result.classes:
            v = by_name.get(c.class_name)
            if v is not None:
                c.verdict, c.reason, c.duration_s = v.verdict, v.reason, v.duration_s


def _example_key(path: Path, config: Config) -> str:
    resolved = path.resolve()
    if config.root and resolved.is_relative_to(config.root):
        return resolved.relative_to(config.root).as_posix()
    return _display(path)


def _finish(item: _Pending, rules: list[type[Rule]], config: Config, options: Options,
            require_verified: bool) -> None:
    result = item.result
    if result.status == "failed":
        result.classes = []  # nothing is written for a file with a broken example spec
        return
    held_back = {c.class_name for c in result.classes if c.verdict == REJECTED or (
        require_verified and c.verdict == UNVERIFIED)}
    text = item.rewrite.text
    if held_back:
        if require_verified:
            for c in result.classes:
                if c.verdict == UNVERIFIED:
                    c.verdict = REJECTED
                    c.reason = f"unverified and --require-verified: {c.reason}"
        skip = {rule.name: frozenset(held_back) for rule in rules}
        text = rewrite_source(item.source.text, result.display, rules,
                              line_length=config.line_length, skip_classes=skip).text
    if text == item.source.text:
        result.status = "rejected" if result.classes else "unchanged"
        return
    result.status = "changed"
    result.diff = unified_diff(item.source.text, text, result.display)
    if options.mode == "write":
        try:
            write_atomic(result.path, item.source.encode(text))
            result.written = True
        except OSError as exc:
            result.status = "failed"
            result.error = f"{result.display}: cannot write: {exc.strerror or exc}"


__all__ = ["REJECTED", "UNVERIFIED", "VERIFIED", "Options", "RunResult", "run"]
