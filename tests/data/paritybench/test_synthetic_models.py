import sys
_module = sys.modules[__name__]
del sys
models = _module

from _paritybench_helpers import _mock_config, patch_functional
from unittest.mock import mock_open, MagicMock
import abc, collections, math, paritybench_absent_module, torch
patch_functional()
open = mock_open()
_global_config = args = argv = cfg = config = params = _mock_config()


import torch


import torch.nn as nn


import torch.nn.functional as F


from paritybench_absent_module.sub import helper


class Scripts(nn.Module):
    """Scripts as it is, once it has run: forward creates `self.last` (ParityBench's own runs
    script an instance that ran eagerly, and so must the harness's after phase)."""

    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.width, cfg.width)

    def forward(self, x):
        self.last = torch.relu(self.fc(x))
        return self.last


class IntClip(nn.Module):
    """F.hardtanh with int bounds does not script; float-arguments makes them floats."""

    def __init__(self, width, max_clip=20):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.max_clip = max_clip

    def forward(self, x):
        return F.hardtanh(self.fc(x) * 30, 0, self.max_clip)


class TryBlock(nn.Module):
    """try/except in forward: no rule rewrites it, it fails before and after."""

    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        try:
            y = self.fc(x)
        except RuntimeError:
            y = x
        return y


class WrongShape(nn.Module):
    """Its test case fails eagerly (the input does not fit the layer): excluded."""

    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return self.fc(x)


TESTCASES = [
    # (nn.Module, init_args, forward_args, jit_compiles)
    (Scripts,
     lambda: ([], {'cfg': _mock_config(width=4)}),
     lambda: ([torch.rand([2, 4])], {}),
     True),
    (IntClip,
     lambda: ([4], {}),
     lambda: ([torch.rand([2, 4])], {}),
     False),
    (TryBlock,
     lambda: ([], {'width': 4}),
     lambda: ([torch.rand([2, 4])], {}),
     False),
    (WrongShape,
     lambda: ([], {'width': 4}),
     lambda: ([torch.rand([2, 5])], {}),
     True),
]
