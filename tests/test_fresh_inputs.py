"""Every instance validation builds gets its own copy of the init values and inputs.

A constructor or forward that changes an object it is given (ParityBench's ``FocalLoss``
sets ``loss_fcn.reduction = "none"`` on the loss it wraps) must not change what the next build
or call sees: the original and the rewrite are built from the same example, and sharing the
object made the second build differ (a false rejection). The first tests call the worker's
functions in this process; the last runs real workers (``slow``).
"""

from __future__ import annotations

import textwrap
import types

import pytest
import torch
from conftest import Project, by_display
from torch import nn
from tsfix.codemods.validation.protocol import NOT_SCRIPTABLE_EITHER
from tsfix.codemods.validation.worker import build, call, fresh


class Wraps(nn.Module):
    """Takes over the loss it is given and changes it (FocalLoss's pattern)."""

    def __init__(self, loss_fcn: nn.Module) -> None:
        super().__init__()
        self.loss_fcn = loss_fcn
        self.reduction = loss_fcn.reduction
        self.loss_fcn.reduction = "none"


class Appends(nn.Module):
    def forward(self, x: torch.Tensor, seen: list[int], log: dict[str, int]) -> torch.Tensor:
        seen.append(1)
        log["calls"] = log.get("calls", 0) + 1
        return x * float(len(seen) + log["calls"])


def test_each_build_gets_its_own_init_objects() -> None:
    loss = nn.BCEWithLogitsLoss()
    init = {"loss_fcn": loss}
    first, second = build(Wraps, init), build(Wraps, init)
    assert first.reduction == second.reduction == "mean"
    assert first.loss_fcn is not second.loss_fcn
    assert loss.reduction == "mean"         # the example's own object is untouched


def test_each_call_gets_its_own_inputs() -> None:
    module, x, seen, log = Appends(), torch.ones(2), [], {}
    outputs = [call(module, (x, seen), {"log": log}) for _ in range(2)]
    assert torch.equal(outputs[0], outputs[1])
    assert torch.equal(outputs[0], torch.full((2,), 2.0))
    assert seen == [] and log == {}


def test_fresh_keeps_aliasing_and_shares_only_what_cannot_be_copied() -> None:
    tensor = torch.randn(3)
    copied = fresh((tensor, tensor, [tensor]))
    assert copied[0] is copied[1] is copied[2][0]
    assert copied[0] is not tensor and torch.equal(copied[0], tensor)
    # A module object cannot be deep-copied: it is shared, the list around it is still new.
    values = [types, [1, 2]]
    mixed = fresh(values)
    assert mixed[0] is types
    assert mixed[1] == [1, 2] and mixed[1] is not values[1] and mixed is not values

# YOLO's FocalLoss, as crawled; ``use_focus`` gives lift-branch a rewrite to validate.
FOCAL_LOSS = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class FocalLoss(nn.Module):
        def __init__(self, loss_fcn, gamma=1.5, use_focus=True):
            super().__init__()
            self.loss_fcn = loss_fcn
            self.gamma = gamma
            self.use_focus = use_focus
            self.reduction = loss_fcn.reduction
            self.loss_fcn.reduction = "none"

        def forward(self, pred, true):
            loss = self.loss_fcn(pred, true)
            if self.use_focus:
                loss = loss * (1.0 - torch.sigmoid(pred)) ** self.gamma
            if self.reduction == "mean":
                return loss.mean()
            return loss


    class Scaler(nn.Module):
        def __init__(self, use_scale=True):
            super().__init__()
            self.use_scale = use_scale

        def forward(self, x, counter):
            # A forward that changes an input in place: no other call may see the change.
            counter.count += 1
            if self.use_scale:
                x = x * float(counter.count)
            return x
""")

EXAMPLES = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    def focal():
        pred, true = torch.linspace(-2.0, 2.0, 8).reshape(2, 4), torch.ones(2, 4)
        loss = nn.BCEWithLogitsLoss()
        return [({"loss_fcn": loss, "use_focus": True}, (pred, true), {}),
                ({"loss_fcn": loss, "use_focus": False}, (pred, true), {})]


    class Counter:
        def __init__(self):
            self.count = 0


    def scaler():
        x, counter = torch.ones(2, 3), Counter()
        return [({"use_scale": True}, (x, counter), {}),
                ({"use_scale": False}, (x, counter), {})]
""")


@pytest.mark.slow
def test_an_init_object_the_constructor_changes_is_fresh_for_every_build(
        project: Project) -> None:
    project.pyproject({"losses.py:FocalLoss": {"factory": "loss_examples:focal"},
                       "losses.py:Scaler": {"factory": "loss_examples:scaler"}})
    project.write("losses.py", FOCAL_LOSS)
    project.write("loss_examples.py", EXAMPLES)

    result = project.run("losses.py")

    verdicts = {c.class_name: c for c in by_display(result)["losses.py"].classes
                if c.rule == "lift-branch"}
    focal = verdicts["FocalLoss"]
    assert focal.verdict == "verified", focal.reason
    assert "2 configuration(s)" in focal.reason
    # A custom object does not script; what counts is that eager parity held for both
    # configurations (a shared counter made the original's two calls differ).
    scaler = verdicts["Scaler"]
    assert scaler.verdict == "unverified", scaler.reason
    assert scaler.reason.startswith(NOT_SCRIPTABLE_EITHER), scaler.reason
    assert "one artifact served 2 of 2 calls in eager mode" in scaler.reason


def test_a_config_dict_that_cannot_be_deep_copied_stays_its_own_class() -> None:
    """ParityBench's ``_mock_config`` (``__getattr__ = dict.__getitem__``) raises KeyError on
    deepcopy's ``__deepcopy__`` lookup; rebuilt as a plain dict, ``config.dim`` failed."""
    class Config(dict):  # type: ignore[type-arg]
        __getattr__ = dict.__getitem__

    config = Config(dim=4, layers=[1, 2])
    copied = fresh(config)
    assert type(copied) is Config and copied.dim == 4 and copied == config
    assert copied["layers"] is not config["layers"]
