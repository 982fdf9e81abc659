"""``tsfix explain``: a rule's documentation, or why a class does not script."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from tsfix.codemods.rules.names import TARGETS

EXPLAIN_EXIT_CODES = """\b
Exit codes:
  0  the rule's documentation was printed, or the class scripts (exports)
  1  the class does not script (or its scripted module fails on the examples);
     --target export: it does not export, its exported program fails or differs
     on the examples, or it exports only the construction-time path of a setting
  2  usage or configuration error (unknown rule, no such file or class)
  3  the class could not be built (import or constructor failed)
"""


@click.command("explain", epilog=EXPLAIN_EXIT_CODES)
@click.argument("target", metavar="RULE | PATH:CLASS")
@click.option("--config", "config_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read [tool.tsfix] (examples) from this file instead of the nearest "
                   "pyproject.toml.")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="Seconds allowed for building, scripting and calling the class.")
@click.option("--target", "exporter", type=click.Choice(TARGETS), default=None,
              help="What the class must work for: torchscript and onnx script it "
                   "(torch.jit.script; the onnx target's exporter is TorchScript-based), "
                   "export runs torch.export.export on each configuration's first example "
                   "call and the exported program on the calls of the same shapes. Default: "
                   "[tool.tsfix] target, else torchscript.")
def explain(target: str, config_path: Path | None, timeout: float | None,
            exporter: str | None) -> None:
    """Print a rule's documentation (tsfix explain lift-branch), or script a class and
    explain its TorchScript error in plain words (tsfix explain models/net.py:Net): the line,
    why it fails, and the rule that fixes it. With --target export, export it with
    torch.export instead and explain torch.export's error the same way. Torch runs in a child
    process."""
    from tsfix.codemods.lint.explain import (
        ExplainError,
        UnreadableSource,
        explain_class,
        parse_target,
        rule_sections,
    )
    from tsfix.codemods.pipeline.config import ConfigError

    parsed = parse_target(target)
    try:
        if parsed is None:
            title, sections = rule_sections(target)
            click.secho(f"{target}: {title}", bold=True)
            for header, body in sections:
                click.echo()
                click.secho(header, bold=True)
                click.echo("\n".join(f"    {line}" if line else "" for line in body.splitlines()))
            sys.exit(0)
        path, class_name = parsed
        if not path.is_file():
            raise ExplainError(f"{path}: no such file")
        result = explain_class(path, class_name, config_path=config_path, timeout=timeout,
                               target=exporter)
    except UnreadableSource as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(3)
    except (ExplainError, ConfigError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    for i, line in enumerate(result.lines()):
        click.secho(line, bold=i == 0)
    sys.exit(result.exit_code)
