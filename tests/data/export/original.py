"""Originals for tests/test_export_validation.py (copied to a temporary folder there)."""

import torch
import torch.nn as nn


class Gate(nn.Module):
    """A configuration flag: torch.export keeps the construction-time path only."""

    def __init__(self, double: bool = True):
        super().__init__()
        self.double = double
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if self.double:
            y = y * 2.0
        return y


class OneSided(Gate):
    """Gate, given examples that take one side of its flag only."""


class Arithmetic(Gate):
    """Gate again; its rewrite below serves the flag without a branch."""


class Normalize(nn.Module):
    """A data-dependent branch: torch.export cannot guard on it."""

    def __init__(self, limit: float = 1.0):
        super().__init__()
        self.limit = limit

    def forward(self, x):
        peak = x.abs().max()
        if peak > self.limit:
            x = x / peak
        return x * 3.0


class WrongFalseSide(Normalize):
    pass


class Scale(nn.Module):
    """Exports as it is; its rewrite below does not."""

    def __init__(self, factor: float = 2.0):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class TwoPeaks(nn.Module):
    """Two data-dependent branches; its rewrite below turns only the first into torch.cond."""

    def forward(self, x):
        if x.sum() > 0:
            x = x * 2.0
        return self.damp(x)

    def damp(self, x):
        if x.abs().max() > 10.0:
            x = x / 10.0
        return x
