"""``tsfix check``: report what TorchScript rejects in compiled methods, without rewriting."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from tsfix.codemods.rules.names import TARGETS

CHECK_EXIT_CODES = """\b
Exit codes:
  0  nothing found
  1  findings (including TSF204 warnings, unless --ignore'd)
  2  usage or configuration error
  3  a file could not be read or parsed (the others are still checked)
"""


@click.command("check", epilog=CHECK_EXIT_CODES)
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(exists=True, path_type=Path))
@click.option("--output-format", type=click.Choice(["text", "json", "sarif"]), default="text",
              show_default=True, help="json and sarif go to stdout, for CI annotation.")
@click.option("--ignore", "ignore", multiple=True, metavar="CODE",
              help="Do not report these codes (repeat or comma-separate, e.g. TSF204).")
@click.option("--config", "config_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read [tool.tsfix] (exclude) from this file instead of the nearest "
                   "pyproject.toml.")
@click.option("--list-codes", is_flag=True,
              help="Also print every code with its description first (text output).")
@click.option("--target", type=click.Choice(TARGETS), default=None,
              help="The exporter the code must work for: torchscript (torch.jit.script), onnx "
                   "(the TorchScript-based ONNX exporter, dynamo=False) or export "
                   "(torch.export.export and the torch.export-based ONNX exporter, "
                   "dynamo=True: only what they reject or specialise is reported, with the "
                   "rules of `tsfix apply --target export`). Default: [tool.tsfix] target, "
                   "else torchscript.")
def check(paths: tuple[Path, ...], output_format: str, ignore: tuple[str, ...],
          config_path: Path | None, list_codes: bool, target: str | None) -> None:
    """Report every construct in compiled methods that TorchScript rejects (or, with
    --target export, that torch.export rejects or specialises), one line each
    (path:line:col: CODE message), with the rule that fixes it when there is one.

    Only forward(), @torch.jit.export methods and the methods they call are checked;
    @torch.jit.ignore/unused methods and `if not torch.jit.is_scripting():` code are not
    compiled. TSF1xx: no rule fixes it (TorchScript only); TSF2xx: `tsfix apply --rule NAME`
    does.
    """
    from tsfix.codemods import __version__
    from tsfix.codemods.lint.check import (
        CODES,
        check_paths,
        dumps,
        to_json,
        to_sarif,
        unknown_codes,
    )
    from tsfix.codemods.lint.codes import rule_of_code
    from tsfix.codemods.pipeline.config import ConfigError

    codes = [c.strip().upper() for value in ignore for c in value.split(",") if c.strip()]
    unknown = unknown_codes(codes)
    if unknown:
        click.echo(f"error: unknown code(s) {', '.join(unknown)} "
                   f"(known: {', '.join(CODES)})", err=True)
        sys.exit(2)
    try:
        result = check_paths(list(paths), config_path=config_path, ignore=codes,
                             target=target)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if output_format == "json":
        click.echo(dumps(to_json(result)))
    elif output_format == "sarif":
        click.echo(dumps(to_sarif(result, __version__)))
    else:
        if list_codes:
            for code in CODES.values():
                handler = rule_of_code(code.code)
                fix = f" [{handler}]" if handler else ""
                click.echo(f"{code.code} {code.name}: {code.summary}{fix}")
        for finding in result.findings:
            click.echo(finding.text())
    for warning in result.warnings:
        click.secho(f"warning: {warning}", err=True, fg="yellow")
    for error in result.errors:
        click.secho(f"error: {error}", err=True, fg="red")
    fixable = sum(1 for f in result.findings if f.fix)
    click.echo(f"{len(result.findings)} finding{'s' if len(result.findings) != 1 else ''} "
               f"({fixable} fixable by a tsfix rule) in {result.files} "
               f"file{'s' if result.files != 1 else ''}"
               + (f"; {len(result.errors)} could not be checked" if result.errors else "")
               + ".", err=True)
    sys.exit(result.exit_code)
