"""flatten-parameters: guarded calls, refusals with reasons, the fixture pairs (without and with
validation) and idempotence."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.flatten_parameters import FlattenParameters

FIXTURES = FIXTURES_ROOT / "flatten-parameters"


def rewrite(code: str) -> Rewrite:
    result = rewrite_source(textwrap.dedent(code), "m.py", [FlattenParameters])
    cst.parse_module(result.text)
    again = rewrite_source(result.text, "m.py", [FlattenParameters])
    assert not again.changed and again.text == result.text, "not a fixed point"
    return result


def test_guard_uses_the_torch_alias_and_keeps_the_comment_above() -> None:
    result = rewrite("""\
        import torch as th
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(4, 4)
            def forward(self, x):
                # data parallel
                self.rnn.flatten_parameters()
                return self.rnn(x)[0]
        """)
    assert ("        # data parallel\n        if not th.jit.is_scripting():\n"
            "            self.rnn.flatten_parameters()\n") in result.text
    assert "import torch\n" not in result.text
    assert result.changes[0].class_name == "M"


def test_local_rnn_and_helper_reached_from_forward() -> None:
    result = rewrite("""\
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn0 = nn.LSTM(4, 4)
            def forward(self, x):
                return self._run(x)
            def _run(self, x):
                rnn = self.rnn0
                rnn.flatten_parameters()
                return rnn(x)[0]
        """)
    assert "        if not torch.jit.is_scripting():\n            rnn.flatten_parameters()\n" \
        in result.text


def test_guarded_call_to_own_helper_leaves_the_helper_alone() -> None:
    result = rewrite("""\
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(4, 4)
            def flatten_parameters(self):
                self.lstm.flatten_parameters()
            def forward(self, x):
                self.flatten_parameters()
                return self.lstm(x)[0]
        """)
    assert result.text.count("is_scripting") == 1
    assert "            self.flatten_parameters()\n" in result.text


def test_refusals_are_reported() -> None:
    result = rewrite("""\
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.LSTM(4, 4)
            def forward(self, x):
                if self.training: self.rnn.flatten_parameters()
                y = x; self.rnn.flatten_parameters()
                return self.rnn(y)[0]
        """)
    assert not result.changed
    reasons = [s.reason for s in result.skips]
    assert any("one-line body" in r for r in reasons)
    assert any("shares its line" in r for r in reasons)


def test_torch_name_taken_without_a_torch_import() -> None:
    result = rewrite("""\
        from torch import nn
        torch = None
        class M(nn.Module):
            def forward(self, x):
                self.rnn.flatten_parameters()
                return x
        """)
    assert not result.changed
    assert "binds `torch`" in result.skips[0].reason


def test_outside_compiled_methods_and_non_modules_untouched() -> None:
    result = rewrite("""\
        import torch
        from torch import nn
        class Helper:
            def forward(self, x):
                self.rnn.flatten_parameters()
        class M(nn.Module):
            def train_step(self, x):
                self.rnn.flatten_parameters()
            def forward(self, x):
                return x
        """)
    assert not result.changed and not result.skips


def test_fixture_pairs_without_validation() -> None:
    pairs = fixture_pairs(FIXTURES)
    assert len(pairs) >= 2
    for before, after in pairs:
        result = rewrite(before.read_text())
        assert result.text == after.read_text(), before.name
    masker = rewrite((FIXTURES / "recurrent_masker.in.py").read_text())
    assert [s.class_name for s in masker.skips] == ["OneLineGuard"]


@pytest.mark.slow
def test_fixture_pairs_are_verified(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "flatten-parameters", inputs_only=True)
    done = apply_with_report(folder, "flatten-parameters")
    assert done.returncode == 0, done.stderr
    classes = done.classes
    assert len(classes) == 3
    assert {c["verdict"] for c in classes} == {"verified"}, classes
    for before, after in fixture_pairs(FIXTURES):
        assert (folder / before.name).read_text() == after.read_text(), before.name
