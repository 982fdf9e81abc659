"""Guessed examples have a cost cap: a default model too large (parameters) or too slow to build
is not built (again) just to guess an input; it ends ``unverified`` naming its cost and the table
to add. Calls the worker's functions in this process (no worker is started)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from tsfix.codemods.validation import worker

KEY = "models/big.py:Big"


class Wide(nn.Module):
    """30 x 30 + 30 = 930 parameters; counts the builds that made real (not meta) weights."""

    real_builds = 0

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(30, 30)
        if self.fc.weight.device.type != "meta":
            Wide.real_builds += 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class ReadsValues(Wide):
    """A constructor that cannot run on the meta device (it reads a value): counted for real."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = float(self.fc.weight.abs().max().item())


class Slow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        time.sleep(0.05)
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def refusal(cls: type) -> str:
    with pytest.raises(worker.Verdict) as raised:
        worker.automatic_instance(cls, KEY)
    assert raised.value.verdict == "unverified"
    return raised.value.reason


def test_a_default_model_above_the_parameter_cap_is_refused_without_a_real_build(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "GUESS_MAX_PARAMETERS", 929)
    Wide.real_builds = 0
    reason = refusal(Wide)
    assert reason == ("could not infer inputs: the default model has 930 parameters (cap 929): "
                      "too costly to build just to guess an input; "
                      f'add [tool.tsfix.examples."{KEY}"] to pyproject.toml')
    assert Wide.real_builds == 0


def test_at_the_cap_the_guess_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "GUESS_MAX_PARAMETERS", 930)
    instance = worker.automatic_instance(Wide, KEY)
    assert instance.guessed == "randn(2, 30) for Linear"
    (args, _kwargs), = instance.calls
    assert tuple(args[0].shape) == (2, 30)


def test_a_constructor_the_meta_device_cannot_run_is_counted_after_the_real_build(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert worker.meta_parameter_count(ReadsValues) is None
    monkeypatch.setattr(worker, "GUESS_MAX_PARAMETERS", 929)
    reason = refusal(ReadsValues)
    assert "the default model has 930 parameters (cap 929)" in reason


def test_a_default_build_slower_than_the_time_cap_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "GUESS_MAX_BUILD_SECONDS", 0.01)
    reason = refusal(Slow)
    assert reason.startswith("could not infer inputs: building the default model took ")
    assert reason.endswith(f's (cap 0.01 s); add [tool.tsfix.examples."{KEY}"] to pyproject.toml')
    monkeypatch.setattr(worker, "GUESS_MAX_BUILD_SECONDS", 5.0)
    assert worker.automatic_instance(Slow, KEY).guessed == "randn(2, 3) for Linear"


def test_the_shipped_caps_admit_blocks_and_refuse_full_size_models() -> None:
    class FullSize(nn.Module):              # 5,000 x 5,000 x 1 = 25M parameters, never allocated
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(5000, 5000, bias=False)

    assert worker.meta_parameter_count(FullSize) == 25_000_000
    assert "25,000,000 parameters (cap 20,000,000)" in refusal(FullSize)
    assert worker.automatic_instance(Wide, KEY).guessed == "randn(2, 30) for Linear"
