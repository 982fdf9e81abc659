"""What the rule contract (codemods/rules/base.py) guarantees for every rule."""

from __future__ import annotations

import ast

from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.registry import ALL_RULES

# timm's DenseLayer, reduced: TorchScript overload declarations, then the implementation.
OVERLOADED = '''\
from typing import List

import torch
import torch.nn as nn


class DenseLayer(nn.Module):
    def __init__(self, grad_checkpointing=False, drop_rate=0.0):
        super().__init__()
        self.grad_checkpointing = grad_checkpointing
        self.drop_rate = drop_rate
        self.fc = nn.Linear(4, 4)

    @torch.jit._overload_method  # noqa: F811
    def forward(self, x):
        # type: (List[torch.Tensor]) -> (torch.Tensor)
        pass

    @torch.jit._overload_method  # noqa: F811
    def forward(self, x):
        # type: (torch.Tensor) -> (torch.Tensor)
        pass

    def forward(self, x):  # noqa: F811
        if isinstance(x, torch.Tensor):
            prev = [x]
        else:
            prev = x
        out = self.fc(torch.cat(prev, 1))
        if self.drop_rate > 0:
            out = out * (1 - self.drop_rate)
        if self.grad_checkpointing:
            out = out + 0
        return out
'''


def test_a_class_with_overload_declarations_is_left_alone_with_a_reason() -> None:
    """lift-branch once rewrote all three `forward` definitions: the declarations' bodies were
    no longer `pass` and the module failed on import (timm's densenet)."""
    result = rewrite_source(
        OVERLOADED, RewriteSettings(list(ALL_RULES.values()), unsafe_fixes=True), "dense.py"
    )
    assert result.text == OVERLOADED
    assert (result.changes, result.fixes) == ([], [])
    reasons = {(s.rule, s.reason) for s in result.skips
               if "defined more than once" in s.reason}
    assert ("lift-branch", "forward() is defined more than once in the class (overload "
            "declarations, @torch.jit._overload_method): rewriting one definition would break "
            "the others; left alone") in reasons
    ast.parse(result.text)
