"""Rewrites of original.py as --target export should (and should not) leave them."""

from typing import Optional

import torch
import torch.nn as nn


class Gate(nn.Module):
    """A configuration flag: torch.export keeps the construction-time path only."""

    def __init__(self, double: bool = True):
        super().__init__()
        self.double = double
        self.fc = nn.Linear(4, 4)

    def forward(self, x, double: Optional[torch.Tensor] = None):
        if double is None:
            double = torch.tensor(self.double)
        y = self.fc(x)

        def double_true(y):
            return y * 2.0

        def double_false(y):
            return y.clone()

        y = torch.cond(double, double_true, double_false, (y,))
        return y


class OneSided(Gate):
    """Gate, given examples that take one side of its flag only."""


class Arithmetic(nn.Module):
    """Serves both settings from one program, and keeps no branch for ONNX."""

    def __init__(self, double: bool = True):
        super().__init__()
        self.double = double
        self.fc = nn.Linear(4, 4)

    def forward(self, x, double: Optional[torch.Tensor] = None):
        if double is None:
            double = torch.tensor(self.double)
        return self.fc(x) * (double.float() + 1.0)


class Normalize(nn.Module):
    """A data-dependent branch: torch.export cannot guard on it."""

    def __init__(self, limit: float = 1.0):
        super().__init__()
        self.limit = limit

    def forward(self, x):
        peak = x.abs().max()

        def peak_true(x, peak):
            return x / peak

        def peak_false(x, peak):
            return x.clone()

        x = torch.cond(peak > self.limit, peak_true, peak_false, (x, peak))
        return x * 3.0


class WrongFalseSide(nn.Module):
    """The false side forgets to return x unchanged."""

    def __init__(self, limit: float = 1.0):
        super().__init__()
        self.limit = limit

    def forward(self, x):
        peak = x.abs().max()

        def peak_true(x, peak):
            return x / peak

        def peak_false(x, peak):
            return x * peak

        x = torch.cond(peak > self.limit, peak_true, peak_false, (x, peak))
        return x * 3.0


class Scale(nn.Module):
    """Runs eagerly like the original, but branches in Python on a tensor's value."""

    def __init__(self, factor: float = 2.0):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        if bool((x > 100.0).any()):
            return x * self.factor
        return x * self.factor


class TwoPeaks(nn.Module):
    """The helper's data-dependent branch is left as it was."""

    def forward(self, x):
        def positive(x):
            return x * 2.0

        def negative(x):
            return x.clone()

        x = torch.cond(x.sum() > 0, positive, negative, (x,))
        return self.damp(x)

    def damp(self, x):
        if x.abs().max() > 10.0:
            x = x / 10.0
        return x
