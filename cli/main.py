"""``tsfix`` command line: a thin click layer over :func:`tsfix.codemods.pipeline.engine.run`.

The engine, LibCST and black are imported inside the commands that use them, so that
``tsfix --help`` and ``tsfix rules`` start in a fraction of LibCST's own import time.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import click
from tsfix.codemods.rules.names import TARGETS, rule_summaries

if TYPE_CHECKING:
    from tsfix.cli.progress import ProgressDisplay
    from tsfix.codemods.pipeline.engine import Options
    from tsfix.codemods.pipeline.report import RunResult

# --target's values, as the engine's Options type them (names.TARGETS lists them).
Target = Literal["torchscript", "onnx", "export"]

EXIT_INTERRUPTED = 130      # Ctrl-C, as shells report SIGINT
EXIT_USAGE = 2              # as tsfix.codemods.pipeline.report.EXIT_USAGE, without importing it
# --timeout-total ran out: what was decided is kept, the rest is not verified (as EXIT_FAILED).
EXIT_TIME_LIMIT = 3
# Files named one by one in the message of a stopped run; the rest are counted.
STOPPED_LISTED_MAX = 20

# Runs over this many files end with the summary table (small runs: the summary line only).
SUMMARY_TABLE_MIN_FILES = 10

EXIT_CODES = """\b
Exit codes:
  0  nothing to change, or every rewrite applied
  1  --check / --dry-run: changes would be made
  2  usage or configuration error
  3  a rewrite was rejected by validation, a file failed (cannot be read or
     parsed, bad example spec), or --require-verified and a rewrite is unverified,
     or --timeout-total ran out (the files decided by then are kept)
  130  interrupted (Ctrl-C, SIGTERM)
"""


def _print_version(context: click.Context, _: click.Parameter, value: bool) -> None:
    # The version is read from the installed metadata only when asked for (importing
    # importlib.metadata costs more than the rest of a run answered from the cache).
    if not value or context.resilient_parsing:
        return
    from tsfix.codemods import __version__

    click.echo(f"tsfix, version {__version__}")
    context.exit()


class _Group(click.Group):
    """click's group, except that Ctrl-C is tsfix's one message and exit 130, never click's
    ``Aborted!`` and exit 1 (``tsfix apply`` says which files it wrote)."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        import signal

        from tsfix import cli

        # Python's own handler again (KeyboardInterrupt), now that a command runs.
        if signal.getsignal(signal.SIGINT) is cli._stopped_while_starting:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            _interrupted([])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (KeyboardInterrupt, RuntimeError) as exc:
            if not _is_interrupt(exc):
                raise
            _interrupted(list(getattr(exc, "written", ())), exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
def main() -> None:
    """Rewrite PyTorch model code so that torch.jit.script and export keep its behaviour.

    Every rewrite is validated: the rewritten class must script, and its outputs must match
    the original's on the example inputs of every configuration.
    """


@main.command(epilog=EXIT_CODES)
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(exists=True, path_type=Path))
@click.option("--rule", "rule_names", multiple=True, metavar="NAME",
              help="Rule to run (repeat or comma-separate; 'all' for every rule). "
                   "Default: [tool.tsfix] rules, else all.")
@click.option("--dry-run", "--diff", "dry_run", is_flag=True,
              help="Print a unified diff of what would be written; write nothing.")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if any file would change.")
@click.option("-i", "--interactive", is_flag=True,
              help="Review every hunk (y/n/a/d/q, as in git add -p) before anything is written; "
                   "a file is written once all its hunks are decided.")
@click.option("--no-verify", is_flag=True,
              help="Skip validation (never imports torch); every rewrite is written, reported "
                   "unverified.")
@click.option("--require-verified", is_flag=True, default=None,
              help="Treat unverified rewrites as failures: do not write them, exit 3.")
@click.option("--unsafe-fixes", is_flag=True, default=None,
              help="Also write unsafe rewrites (ones that may change eager results) that "
                   "validation could not prove, and apply fixes that change what callers may "
                   "pass (e.g. removing unused *args/**kwargs). Default: [tool.tsfix] "
                   "unsafe-fixes, else off.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a JSON report: one record per file and per rewritten class.")
@click.option("--config", "config_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read [tool.tsfix] from this file instead of the nearest pyproject.toml.")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=0,
              help="Worker processes for rewriting and validation (default: one per core).")
@click.option("--no-cache", is_flag=True,
              help="Parse and validate every file again, ignoring outcomes cached by earlier "
                   "runs ($TSFIX_CACHE_DIR, default ~/.cache/tsfix).")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="Seconds allowed for validating one file (default 120).")
@click.option("--timeout-total", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS",
              help="Seconds for the whole run: then it stops, keeping the files decided by "
                   "then (a next run resumes from the cache), and exits 3. Default: "
                   "[tool.tsfix] timeout-total, else no limit.")
@click.option("--target", type=click.Choice(TARGETS), default=None,
              help="What the rewrite must work for, and what validation proves. "
                   "torchscript: torch.jit.script (+ save/load). onnx: lifted settings "
                   "become Tensor arguments; also the TorchScript-based ONNX exporter "
                   "(dynamo=False) + onnxruntime (pip install 'tsfix[onnx]'). export: "
                   "torch.export.export (+ save/load), with settings and data-dependent "
                   "branches as torch.cond; with the onnx extra, also the torch.export-based "
                   "ONNX exporter (dynamo=True) + onnxruntime. Default: [tool.tsfix] target, "
                   "else torchscript.")
@click.option("--allow-unscriptable", is_flag=True, default=None,
              help="Report a configured model (a class with an example table) that does not "
                   "script after the run without failing the run (default: exit 3). Default: "
                   "[tool.tsfix] allow-unscriptable, else off.")
@click.option("--fix-rounds", type=click.IntRange(min=0), default=12, show_default=True,
              help="Rounds of the repair loop per configured model that does not script "
                   "(export) after the rules: each rewrites the place the compiler names, in "
                   "any file of the model's tree (0: no loop).")
@click.option("--model-budget", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS",
              help="Seconds the repair loop may spend on one configured model: no round "
                   "starts that cannot finish within it (each takes up to --timeout). "
                   "Default: [tool.tsfix] model-budget, else no limit.")
@click.option("--executor", type=click.Choice(("local", "ray")), default=None,
              help="Where validation jobs run: local worker processes, or Ray tasks on a "
                   "Ray cluster (pip install 'tsfix[ray]'; docs/cluster.md). Default: "
                   "[tool.tsfix] executor, else local.")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="With --executor ray: the cluster to connect to (ray://HOST:10001, "
                   "HOST:6379, auto). Default: [tool.tsfix] ray-address, else $RAY_ADDRESS, "
                   "else a local Ray instance started for the run.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors (and the diff with --dry-run).")
@click.option("-v", "--verbose", is_flag=True,
              help="Also say what each rewrite did and why candidates were skipped.")
def apply(paths: tuple[Path, ...], rule_names: tuple[str, ...], dry_run: bool, check: bool,
          interactive: bool, no_verify: bool, require_verified: bool | None,
          unsafe_fixes: bool | None, report_path: Path | None,
          config_path: Path | None, jobs: int, no_cache: bool, timeout: float | None,
          timeout_total: float | None, target: Target | None, allow_unscriptable: bool | None,
          fix_rounds: int, model_budget: float | None, executor: Literal["local", "ray"] | None,
          ray_address: str | None,
          quiet: bool, verbose: bool) -> None:
    """Rewrite the model files under PATHS, validating every rewritten class."""
    from tsfix.codemods.pipeline.engine import Options

    state = _ApplyState()
    if interactive and (dry_run or check):
        click.echo("error: --interactive writes what you accept; it cannot be combined with "
                   "--dry-run or --check", err=True)
        sys.exit(EXIT_USAGE)
    # The run's options, built once; the engine resolves them against [tool.tsfix].
    options = Options(rules=[name.strip() for value in rule_names for name in value.split(",")
                             if name.strip()] or None,
                      mode="diff" if dry_run or interactive else "check" if check else "write",
                      verify=not no_verify, require_verified=require_verified,
                      config=config_path, jobs=jobs, timeout=timeout,
                      unsafe_fixes=unsafe_fixes, cache=not no_cache, target=target,
                      allow_unscriptable=allow_unscriptable, fix_rounds=fix_rounds,
                      timeout_total=timeout_total, model_budget=model_budget,
                      executor=executor, ray_address=ray_address)
    output = _Output(report_path, interactive, quiet, verbose)
    try:
        with _terminate_as_interrupt():
            code = _apply(state, paths, options, output)
    except (KeyboardInterrupt, RuntimeError) as exc:
        if not _is_interrupt(exc):
            raise
        if state.display is not None:
            state.display.close()
        _interrupted([*state.written, *getattr(exc, "written", ())], exc)
    sys.exit(code)


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a batch system's time limit, ``kill``) stops the run as Ctrl-C does: pending
    validation cancelled, the files decided so far kept and listed. Only in the main thread,
    where Python runs signal handlers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C, also when Python 3.11 wrapped it: a KeyboardInterrupt raised while a class
    was created (a dataclass field's ``__set_name__``, in an import) comes out as a
    RuntimeError caused by it."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__
    return False


@dataclass
class _ApplyState:
    """What the Ctrl-C message of ``tsfix apply`` needs, kept up to date as the run goes."""

    display: ProgressDisplay | None = None
    written: list[str] = field(default_factory=list)   # files written, as the report names them


@dataclass(frozen=True)
class _Output:
    """What ``tsfix apply`` shows and writes besides the files."""

    report_path: Path | None
    interactive: bool
    quiet: bool
    verbose: bool


def _apply(state: _ApplyState, paths: tuple[Path, ...], options: Options, output: _Output
           ) -> int:
    """``tsfix apply``; returns the exit code."""
    from tsfix.cli.progress import ProgressDisplay
    from tsfix.codemods.pipeline.config import ConfigError
    from tsfix.codemods.pipeline.engine import run
    from tsfix.codemods.pipeline.report import EXIT_FAILED, printable
    from tsfix.codemods.rules.names import UnknownRuleError

    report_path, interactive, quiet = output.report_path, output.interactive, output.quiet
    if report_path is not None:
        # Found out before any file is written, not after a run that cannot be reported.
        problem = _unwritable(report_path)
        if problem:
            click.echo(f"error: cannot write the report to {report_path}: {problem}", err=True)
            return EXIT_USAGE
    display = None if quiet else ProgressDisplay(sys.stderr, terminal=sys.stderr.isatty())
    state.display = display
    options = replace(options, progress=display)
    mode = options.mode
    try:
        result = run(list(paths), options)
    except (ConfigError, UnknownRuleError) as exc:
        click.echo(f"error: {printable(str(exc))}", err=True)
        return EXIT_USAGE
    finally:
        if display is not None:
            display.close()
    state.written = [f.display for f in result.files if f.written]
    if mode == "diff" and not interactive:
        for file in result.files:
            if file.diff:
                click.echo(file.diff, nl=False)
    _print_outcome(result, quiet=quiet, verbose=output.verbose)
    if interactive:
        from tsfix.cli.interactive import review

        reviewed = review(result, _ask)
        state.written = [f.display for f in result.files if f.path in reviewed.written]
        for line in reviewed.lines:
            click.secho(printable(line), err=True,
                        fg="red" if line.startswith("error") else None)
        # Exit as a write run would: what was declined is the user's decision, not pending.
        result = result.after_review(reviewed.written)
    code = result.exit_code
    if report_path is not None:
        try:
            result.write_json(report_path)
        except OSError as exc:
            click.echo(f"error: cannot write report {report_path}: {exc.strerror or exc}",
                       err=True)
            code = max(code, EXIT_FAILED)
    return code


def _printable(text: str) -> str:
    from tsfix.codemods.pipeline.report import printable

    return printable(text)


def _interrupted(written: list[str], stopped: BaseException | None = None) -> NoReturn:
    """Ctrl-C or SIGTERM: one message, the files already written (each whole; writes are
    atomic), exit 130; the time limit (``stopped`` says which): the same with the files not
    decided, exit 3. A second Ctrl-C while it is said is ignored."""
    import signal

    undecided: list[str] = list(getattr(stopped, "undecided", ()))
    time_limit = getattr(stopped, "time_limit", None) or getattr(stopped, "seconds", None)
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:              # not the main thread: no handler to change
        previous = None
    try:
        if time_limit is not None:
            lines = _time_limit_lines(written, undecided, time_limit)
        elif written:
            lines = [f"interrupted: stopped after rewriting {len(written)} "
                     f"file{'s' if len(written) != 1 else ''}; every other file is as it was:",
                     *(f"  rewrote {_printable(display)}" for display in written)]
            if undecided:
                lines.extend(_listed(f"{_files(len(undecided))} not decided (a next run "
                                     "does them):", "  ", undecided))
        else:
            from tsfix.cli import STOPPED_BEFORE_WRITING

            lines = [STOPPED_BEFORE_WRITING]
        click.echo("\n".join(lines), err=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    from tsfix import cli

    code = EXIT_TIME_LIMIT if time_limit is not None else EXIT_INTERRUPTED
    if cli.PROGRAM:
        # The run's processes and pools are closed by now (the interrupt came through their
        # `with` blocks). Python 3.11 would turn sys.exit(130) into death by SIGINT when the
        # KeyboardInterrupt passed through code run by exec() (a dataclass being created):
        # the exit code is documented, so leave without that.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


def _listed(headline: str, indent: str, names: list[str]) -> list[str]:
    """``headline`` and the first ``STOPPED_LISTED_MAX`` names, one a line."""
    lines = [headline, *(f"{indent}{_printable(name)}" for name in names[:STOPPED_LISTED_MAX])]
    if len(names) > STOPPED_LISTED_MAX:
        lines.append(f"{indent}... and {len(names) - STOPPED_LISTED_MAX} more")
    return lines


def _time_limit_lines(written: list[str], undecided: list[str], seconds: float) -> list[str]:
    """What a run stopped by ``--timeout-total`` kept and what it left as it was."""
    head = f"time limit reached (--timeout-total {seconds:g}s): "
    if written:
        lines = [f"{head}stopped after rewriting {_files(len(written))}, kept:",
                 *(f"  rewrote {_printable(display)}" for display in written)]
    else:
        lines = [f"{head}stopped before anything was rewritten"]
    if undecided:
        lines.extend(_listed(f"{_files(len(undecided))} not decided, left as they were (a next "
                             "run does them; what was decided comes from the cache):", "  ",
                             undecided))
    else:
        lines.append("every file was decided; the rest of the run (the summary) was cut short")
    return lines


def _unwritable(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` (None: it can), found by opening it for
    writing without changing it (a file created for the test is removed again)."""
    if os.path.lexists(path) and not path.exists():
        return None                 # a dangling symlink: writing creates its target
    try:
        if path.exists():
            with path.open("r+b"):
                pass
        else:
            with path.open("xb"):
                pass
            path.unlink()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _ask(prompt: str) -> str:
    """The answer to ``prompt``; end of input (Ctrl-D, an exhausted pipe, or no standard
    input at all: ``<&-``) is ``q``."""
    click.echo(prompt, nl=False)
    if sys.stdin is None or sys.stdin.closed:
        click.echo()
        return "q"
    # input(), not click.prompt: click turns Ctrl-C into the same Abort as end of input, and
    # Ctrl-C must stop the run (the files written so far are listed), not answer q.
    try:
        return input()
    except (EOFError, OSError, RuntimeError):
        click.echo()
        return "q"


def _print_outcome(result: RunResult, *, quiet: bool, verbose: bool,
                   table: bool = False) -> None:
    from tsfix.codemods.pipeline.report import (
        REJECTED,
        UNVERIFIED,
        VERIFIED,
        model_headline,
        reason_headline,
        repeated_models,
        repeated_reasons,
    )
    from tsfix.codemods.pipeline.report import printable as p

    # Names and messages come from the files (their names, their code): p() keeps each on
    # its line and keeps escape sequences in them from reaching the terminal.
    colour: dict[str, str] = {VERIFIED: "green", REJECTED: "red", UNVERIFIED: "yellow"}
    # Without -v, a reason many classes share is said once, after the files (the report
    # keeps every class's own).
    repeated = [] if verbose or quiet else repeated_reasons(result.files)
    summarised = {(g.verdict, g.headline) for g in repeated}
    alike_models = [] if verbose or quiet else repeated_models(result.models())
    summarised_models = {(g.verdict, g.headline) for g in alike_models}
    if not quiet:
        for warning in result.warnings:
            click.secho(f"warning: {p(warning)}", err=True, fg="yellow")
    for file in result.files:
        if file.error:
            click.secho(f"error: {p(file.error)}", err=True, fg="red")
        if quiet:
            continue
        shown = p(file.display)
        for note in file.notes:
            click.echo(f"{shown}: note: {p(note)}", err=True)
        # A configured model's line says what its classes' rewrites came to: their own lines
        # are for -v (and the report), but for a rejected rewrite, which fails the run.
        modelled = bool(file.models or file.depends or file.fix_loop) and not verbose
        for c in file.classes:
            if summarised and (c.verdict, reason_headline(c.reason)) in summarised:
                continue
            if modelled and c.verdict != REJECTED:
                continue
            verdict = click.style(c.verdict + (" (not written)" if c.withheld else ""),
                                  fg=colour.get(c.verdict))
            detail = f": {p(c.reason)}" if c.reason and (c.verdict != VERIFIED or verbose) else ""
            click.echo(f"{shown}:{c.lines[0]}: {c.class_name} [{c.rule}] {verdict}{detail}",
                       err=True)
            if verbose:
                click.echo(f"    {p(c.summary)}", err=True)
            for note in [*c.notes, *([c.withheld] if c.withheld else [])]:
                click.echo(f"    note: {p(note)}", err=True)
        if verbose:
            for s in file.skips:
                click.echo(f"{shown}:{s.line}: {s.class_name} [{s.rule}] skipped: "
                           f"{p(s.reason)}", err=True)
        if file.status == "changed":
            action = "rewrote" if file.written else "would rewrite"
            loop = " (the repair loop: a configured model imports it)" if file.fix_loop else ""
            click.echo(f"{action} {shown}{loop}", err=True)
    for group in repeated:
        click.secho(p(group.line()), err=True, fg=colour.get(group.verdict))
    for group in alike_models:
        click.secho(p(group.line()), err=True, fg="green" if "not" not in group.verdict
                    else None)
    for model in result.models():
        if quiet and model.ok:
            continue
        if summarised_models and model_headline(model) in summarised_models:
            continue
        click.secho(p(model.line()), err=True, fg="green" if model.ok else "red")
        if not model.ok and model.explain:
            click.echo(f"    explain: {p(model.explain)}", err=True)
        if not model.ok and model.message and verbose:
            for line in model.message.splitlines():
                click.echo(f"    | {p(line)}", err=True)
        if verbose:
            for line in model.rounds:
                click.echo(f"    repair loop: {p(line)}", err=True)
    if (not quiet and not result.allow_unscriptable
            and any(m.status == "fails" for m in result.models())):
        click.echo(f"a configured model that does not {result.model_verb()} fails the run "
                   "(exit 3); --allow-unscriptable (or [tool.tsfix] allow-unscriptable = true) "
                   "reports it without failing", err=True)
    if not quiet:
        if table or len(result.files) >= SUMMARY_TABLE_MIN_FILES:
            click.echo("summary:", err=True)
            for line in result.summary_table():
                click.echo(p(line), err=True)
        click.echo(result.summary_line(), err=True)


@main.command("report")
@click.argument("report_path", metavar="REPORT",
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-v", "--verbose", is_flag=True,
              help="Also say what each rewrite did and why candidates were skipped.")
def show_report(report_path: Path, verbose: bool) -> None:
    """Summarise a past run from its --report JSON file."""
    from tsfix.codemods.pipeline.report import RunResult

    try:
        result = RunResult.from_json(json.loads(report_path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as exc:
        click.echo(f"error: {report_path}: not a tsfix report ({type(exc).__name__}: {exc})",
                   err=True)
        sys.exit(EXIT_USAGE)
    mode = {"write": "written", "diff": "dry run", "check": "check"}.get(result.mode,
                                                                         result.mode)
    click.echo(f"{report_path}: rules {', '.join(result.rules)}; {mode}"
               f"{'' if result.verify else ', not validated'}", err=True)
    _print_outcome(result, quiet=False, verbose=verbose, table=True)
    sys.exit(result.exit_code)


@main.command("rules")
@click.option("--format", "output_format", type=click.Choice(["text", "markdown"]),
              default="text", show_default=True,
              help="markdown: every rule's full documentation and the check codes, the page "
                   "docs/rules.md is generated from.")
def list_rules(output_format: str) -> None:
    """List the rules: name and one-line summary."""
    if output_format == "markdown":
        from tsfix.codemods.lint.explain import rules_markdown

        click.echo(rules_markdown(), nl=False)
        return
    width = max(len(name) for name in rule_summaries())
    for name, summary in rule_summaries().items():
        click.echo(f"{name:<{width}}  {summary}")


# Linter and explainer: their heavy imports are inside the commands.
from tsfix.cli.check import check  # noqa: E402
from tsfix.cli.explain import explain  # noqa: E402

main.add_command(check)
main.add_command(explain)


if __name__ == "__main__":
    main()
