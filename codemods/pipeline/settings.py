"""A run's settings, resolved once from the options (CLI or API) and ``[tool.tsfix]``.

:class:`RunSettings` is black's ``Mode`` for tsfix: frozen, built by the engine before anything
else, and what the cache key, the phases and the report read, so that no part of a run
resolves an option against the configuration again. This module imports neither LibCST nor
torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
