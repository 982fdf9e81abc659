"""A run's settings, resolved once from the options (CLI or API) and ``[tool.tsfix]``.

:class:`RunSettings` is black's ``Mode`` for tsfix: frozen, built by the engine before anything
else, and what the cache key, the phases and the report read, so that no part of a run
resolves an option against the configuration again. :class:`RewriteSettings` is the part a
rewrite needs (``rewrite_source(text, settings, file)``), :class:`FileContext` what is known
about the one file. This module imports neither LibCST nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import libcst as cst
    from tsfix.codemods.rules.base import Observations, Rule

Mode = Literal["write", "diff", "check"]


@dataclass(frozen=True)
class RunSettings:
    """What a run does: the rules, the target, and how strict it is."""

    rule_names: tuple[str, ...]     # the selected rules, in --rule all order
    target: str = "torchscript"     # "torchscript", "onnx" or "export"
    mode: Mode = "write"
    verify: bool = True
    require_verified: bool = False
    unsafe_fixes: bool = False
    allow_unscriptable: bool = False
    line_length: int = 88
    auto_examples: bool = True
    executor: str = "local"         # where validation jobs run: "local" or "ray"
    ray_address: str | None = None  # the Ray cluster; None: RAY_ADDRESS, else a local one

    def cache_salt(self) -> dict[str, object]:
        """What of these settings changes a file's outcome (the cache key's part): the mode
        does not (a --diff run's outcome is a write run's), nor allow-unscriptable (it only
        changes the exit code), nor where validation runs (the verdicts are the same)."""
        return {"rules": list(self.rule_names), "unsafe_fixes": self.unsafe_fixes,
                "line_length": self.line_length, "verify": self.verify,
                "require_verified": self.require_verified,
                "auto_examples": self.auto_examples and self.verify,
                # The target changes lift-branch's form and the validation steps.
                "target": self.target}


@dataclass(frozen=True)
class RewriteSettings:
    """How to rewrite a file: the same for every file of a run; small and picklable (sent to
    rewrite worker processes)."""

    rules: Sequence[type[Rule]]     # kept as a tuple
    line_length: int = 88
    unsafe_fixes: bool = False
    # False (``tsfix check``): only the findings are wanted; the new text is neither
    # generated, formatted nor checked (``Rewrite.text`` stays the input).
    output: bool = True
    # The run the rewrites belong to (any string unique to it): a rewrite of a file again in
    # the same run starts after the rules that skip what they skipped before (rewrite.STEPS).
    # Only within a run: rules read other files of the tree, which a run never changes
    # before it writes. Empty: every rewrite starts from the first rule.
    run: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))


@dataclass(frozen=True)
class FileContext:
    """What is known about the one file a rewrite is of."""

    path: str = "<string>"          # as messages name it
    # Rule name -> classes it must leave alone (their earlier rewrite was rejected).
    skip_classes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # The argument types seen in the eager example runs of the original file.
    observed: Observations | None = None
    # Module-level functions of this file that another file's compiled code calls
    # (Rule.compiled_functions).
    compiled_functions: frozenset[str] = frozenset()
    module: cst.Module | None = None    # the text already parsed
