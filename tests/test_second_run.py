"""A run on the tree a first run wrote decides as the first did (issue 25 item 3).

A verdict that depended on which of two original TorchScript errors the compiler reported
first rejected a rewrite on the first run ("a TorchScript error the original does not have")
and, with the error reported in another order on the second, wrote it. The verdict now rests on
what is measured: the original does not script either, eager parity holds.

Starts validation workers (torch), hence ``slow``.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import Project
from tsfix.codemods.validation.protocol import NOT_SCRIPTABLE_EITHER

pytestmark = pytest.mark.slow

# Two stacked blockers: the numpy call TorchScript meets first, then the local the loop binds
# ("undefined value layers_left"), which no rule fixes.
STACKED = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self, size=4):
            super().__init__()
            self.proj = nn.Linear(size, size)

        def forward(self, x):
            x = x / np.sqrt(x.size(-1))
            for i in range(x.size(0)):
                layers_left = x.size(0) - i
            return self.proj(x) * layers_left


    class Scaled(nn.Module):
        def forward(self, x):
            return x * np.sqrt(2.0)
""")
TABLES = {"model.py:Net": {"init": [{}], "inputs": ["randn(2, 4)"]},
          "model.py:Scaled": {"init": [{}], "inputs": ["randn(2, 4)"]}}


def test_a_rewrite_past_the_first_of_two_original_errors_is_decided_alike_twice(
        project: Project) -> None:
    project.pyproject(TABLES)
    project.write("model.py", STACKED)

    first = project.run(rules=["numpy-to-torch"], mode="write")

    verdicts = {c.class_name: (c.verdict, c.reason) for c in first.files[0].classes}
    verdict, reason = verdicts["Net"]
    assert verdict == "unverified", reason
    assert reason.startswith(f"{NOT_SCRIPTABLE_EITHER} this rewrite: the class still does not "
                             "script: RuntimeError: undefined value layers_left"), reason
    assert "(the original fails with: " in reason and "numpy.ufunc" in reason, reason
    assert verdicts["Scaled"][0] == "verified", verdicts["Scaled"]
    written = project.bytes("model.py").decode()
    assert "np.float32" not in written and "np.sqrt" not in written

    second = project.run(rules=["numpy-to-torch"], mode="write")

    assert [f.status for f in second.files if f.status == "changed"] == []
    assert project.bytes("model.py").decode() == written
