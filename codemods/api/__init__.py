"""tsfix: make PyTorch model source scriptable and exportable, every rewrite validated.

The Python API under the ``tsfix`` command::

    import tsfix

    result = tsfix.run(["models"], tsfix.Options(rules=["lift-branch"], mode="diff"))
    print(result.summary_line(), result.exit_code)

    findings = tsfix.check(["models"])          # what `tsfix check` prints, as records
    for finding in findings.findings:
        print(finding.text())

``run`` is ``tsfix apply``; ``check`` is ``tsfix check``; ``rule_names()`` lists the rules in
``--rule all`` order. The implementation lives in :mod:`tsfix.codemods` (this package is the
folder ``codemods/api/``, installed as ``tsfix``). Importing ``tsfix`` is cheap: the engine,
LibCST and black load on first use of ``run``/``check``, and torch only in validation workers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tsfix.codemods.lint.check import CheckResult, Finding
    from tsfix.codemods.lint.check import check_paths as check
    from tsfix.codemods.pipeline.engine import Options, run
    from tsfix.codemods.pipeline.report import RunResult

__all__ = ["CheckResult", "Finding", "Options", "RunResult", "__version__", "check",
           "rule_names", "run"]

_LAZY = {
    "run": ("tsfix.codemods.pipeline.engine", "run"),
    "Options": ("tsfix.codemods.pipeline.engine", "Options"),
    "RunResult": ("tsfix.codemods.pipeline.report", "RunResult"),
    "check": ("tsfix.codemods.lint.check", "check_paths"),
    "CheckResult": ("tsfix.codemods.lint.check", "CheckResult"),
    "Finding": ("tsfix.codemods.lint.check", "Finding"),
}


def rule_names() -> list[str]:
    """The rule names, in ``--rule all`` order (no LibCST import)."""
    from tsfix.codemods.rules.names import rule_summaries

    return list(rule_summaries())


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from tsfix.codemods import _version

        return _version()
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tsfix' has no attribute {name!r}")
