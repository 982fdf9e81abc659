"""``tsfix`` command line: a thin click layer over :func:`tsfix.codemods.pipeline.engine.run`.

The engine, LibCST and black are imported inside the commands that use them, so that
``tsfix --help`` and ``tsfix rules`` start in a fraction of LibCST's own import time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click
from tsfix.codemods.rules.names import rule_summaries

if TYPE_CHECKING:
    from tsfix.codemods.pipeline.report import RunResult

EXIT_INTERRUPTED = 130      # Ctrl-C, as shells report SIGINT
EXIT_USAGE = 2              # as tsfix.codemods.pipeline.report.EXIT_USAGE, without importing it

# Runs over this many files end with the summary table (small runs: the summary line only).
SUMMARY_TABLE_MIN_FILES = 10

EXIT_CODES = """\b
Exit codes:
  0  nothing to change, or every rewrite applied
  1  --check / --dry-run: changes would be made
  2  usage or configuration error
  3  a rewrite was rejected by validation, a file failed (cannot be read or
     parsed, bad example spec), or --require-verified and a rewrite is unverified
  130  interrupted (Ctrl-C)
"""


def _print_version(context: click.Context, _: click.Parameter, value: bool) -> None:
    # The version is read from the installed metadata only when asked for (importing
    # importlib.metadata costs more than the rest of a run answered from the cache).
    if not value or context.resilient_parsing:
        return
    from tsfix.codemods import __version__

    click.echo(f"tsfix, version {__version__}")
    context.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
              help="Skip validation (never imports torch); rewrites are reported unverified.")
@click.option("--require-verified", is_flag=True, default=None,
              help="Treat unverified rewrites as failures: do not write them, exit 3.")
@click.option("--unsafe-fixes", is_flag=True, default=None,
              help="Also apply fixes that change what callers may pass (e.g. removing unused "
                   "*args/**kwargs). Default: [tool.tsfix] unsafe-fixes, else off.")
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
@click.option("--target", type=click.Choice(["torchscript", "onnx"]), default=None,
              help="What the rewrite must work for. onnx: lifted settings become Tensor "
                   "arguments, and validation also exports each class to ONNX and runs it in "
                   "onnxruntime (pip install 'tsfix[onnx]'). Default: [tool.tsfix] target, "
                   "else torchscript.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors (and the diff with --dry-run).")
@click.option("-v", "--verbose", is_flag=True,
              help="Also say what each rewrite did and why candidates were skipped.")
def apply(paths: tuple[Path, ...], rule_names: tuple[str, ...], dry_run: bool, check: bool,
          interactive: bool, no_verify: bool, require_verified: bool | None,
          unsafe_fixes: bool | None, report_path: Path | None,
          config_path: Path | None, jobs: int, no_cache: bool, timeout: float | None,
          target: Literal["torchscript", "onnx"] | None, quiet: bool, verbose: bool) -> None:
    """Rewrite the model files under PATHS, validating every rewritten class."""
    from tsfix.cli.progress import ProgressDisplay
    from tsfix.codemods.pipeline.config import ConfigError
    from tsfix.codemods.pipeline.engine import Options, run
    from tsfix.codemods.pipeline.report import EXIT_FAILED
    from tsfix.codemods.rules.names import UnknownRuleError

    rules = [name.strip() for value in rule_names for name in value.split(",") if name.strip()]
    if interactive and (dry_run or check):
        click.echo("error: --interactive writes what you accept; it cannot be combined with "
                   "--dry-run or --check", err=True)
        sys.exit(EXIT_USAGE)
    if report_path is not None:
        # Found out before any file is written, not after a run that cannot be reported.
        problem = _unwritable(report_path)
        if problem:
            click.echo(f"error: cannot write the report to {report_path}: {problem}", err=True)
            sys.exit(EXIT_USAGE)
    mode: Literal["write", "diff", "check"] = (
        "diff" if dry_run or interactive else "check" if check else "write")
    display = None if quiet else ProgressDisplay(sys.stderr, terminal=sys.stderr.isatty())
    options = Options(rules=rules or None, mode=mode, verify=not no_verify,
                      require_verified=require_verified, config=config_path, jobs=jobs,
                      timeout=timeout, unsafe_fixes=unsafe_fixes, progress=display,
                      cache=not no_cache, target=target)
    try:
        result = run(list(paths), options)
    except (ConfigError, UnknownRuleError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        if display is not None:
            display.close()
        # Files are written only after every phase, each in one atomic rename.
        click.echo("interrupted: stopped; every file is either as it was or fully rewritten",
                   err=True)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        if display is not None:
            display.close()
    if mode == "diff" and not interactive:
        for file in result.files:
            if file.diff:
                click.echo(file.diff, nl=False)
    _print_outcome(result, quiet=quiet, verbose=verbose)
    if interactive:
        from tsfix.cli.interactive import review

        reviewed = review(result, _ask)
        for line in reviewed.lines:
            click.secho(line, err=True, fg="red" if line.startswith("error") else None)
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
    sys.exit(code)


def _unwritable(path: Path) -> str | None:
    """Why a file cannot be written at ``path`` (None: it can), found by opening it for
    writing without changing it (a file created for the test is removed again)."""
    import os

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
    from tsfix.codemods.pipeline.report import REJECTED, UNVERIFIED, VERIFIED

    colour = {VERIFIED: "green", REJECTED: "red", UNVERIFIED: "yellow"}
    if not quiet:
        for warning in result.warnings:
            click.secho(f"warning: {warning}", err=True, fg="yellow")
    for file in result.files:
        if file.error:
            click.secho(f"error: {file.error}", err=True, fg="red")
        if quiet:
            continue
        for note in file.notes:
            click.echo(f"{file.display}: note: {note}", err=True)
        for c in file.classes:
            verdict = click.style(c.verdict, fg=colour.get(c.verdict))
            detail = f": {c.reason}" if c.reason and (c.verdict != VERIFIED or verbose) else ""
            click.echo(f"{file.display}:{c.lines[0]}: {c.class_name} [{c.rule}] "
                       f"{verdict}{detail}", err=True)
            if verbose:
                click.echo(f"    {c.summary}", err=True)
            for note in c.notes:
                click.echo(f"    note: {note}", err=True)
        if verbose:
            for s in file.skips:
                click.echo(f"{file.display}:{s.line}: {s.class_name} [{s.rule}] skipped: "
                           f"{s.reason}", err=True)
        if file.status == "changed":
            action = "rewrote" if file.written else "would rewrite"
            click.echo(f"{action} {file.display}", err=True)
    if not quiet:
        if table or len(result.files) >= SUMMARY_TABLE_MIN_FILES:
            click.echo("summary:", err=True)
            for line in result.summary_table():
                click.echo(line, err=True)
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
def list_rules() -> None:
    """List the rules: name and one-line summary."""
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
