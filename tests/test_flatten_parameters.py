"""flatten-parameters: guarded calls, refusals with reasons and their check code, compiled methods
only (export yes, ignore no), check findings, idempotence. The fixture pairs are
tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap

from conftest import FIXTURES_ROOT, rule_rewriter
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.flatten_parameters import FlattenParameters

FIXTURES = FIXTURES_ROOT / "flatten-parameters"


rewrite = rule_rewriter(FlattenParameters)


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
    assert result.text == textwrap.dedent("""\
        import torch as th
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(4, 4)
            def forward(self, x):
                # data parallel
                if not th.jit.is_scripting():
                    self.rnn.flatten_parameters()
                return self.rnn(x)[0]
        """)
    assert result.changes[0].class_name == "M"
    assert [(f.code, f.line, f.column, f.message) for f in result.fixes] == [
        ("TSF212", 9, 9, "self.rnn.flatten_parameters() in forward()")]


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
    assert result.text == textwrap.dedent("""\
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
                if not torch.jit.is_scripting():
                    rnn.flatten_parameters()
                return rnn(x)[0]
        """)
    assert [(f.code, f.message) for f in result.fixes] == [
        ("TSF212", "rnn.flatten_parameters() in _run()")]


def test_exported_method_is_guarded() -> None:
    result = rewrite("""\
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(4, 4)
            def forward(self, x):
                return x
            @torch.jit.export
            def encode(self, x):
                self.rnn.flatten_parameters()
                return self.rnn(x)[0]
        """)
    assert result.text == textwrap.dedent("""\
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(4, 4)
            def forward(self, x):
                return x
            @torch.jit.export
            def encode(self, x):
                if not torch.jit.is_scripting():
                    self.rnn.flatten_parameters()
                return self.rnn(x)[0]
        """)
    assert [(f.code, f.line) for f in result.fixes] == [("TSF212", 11)]


def test_ignored_helper_called_from_forward_is_left_alone() -> None:
    code = """\
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(4, 4)
            def forward(self, x):
                self.prepare()
                return self.rnn(x)[0]
            @torch.jit.ignore
            def prepare(self):
                self.rnn.flatten_parameters()
        """
    result = rewrite(code)
    assert not result.changed and result.text == textwrap.dedent(code)
    assert result.fixes == [] and result.skips == []


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
    assert result.text == textwrap.dedent("""\
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(4, 4)
            def flatten_parameters(self):
                self.lstm.flatten_parameters()
            def forward(self, x):
                if not torch.jit.is_scripting():
                    self.flatten_parameters()
                return self.lstm(x)[0]
        """)
    # The helper is no longer compiled: only the guarded call is a finding.
    assert [(f.line, f.message) for f in result.fixes] == [
        (10, "self.flatten_parameters() in forward()")]


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
                h = [self.rnn.flatten_parameters()]
                return self.rnn(y)[0]
        """)
    assert not result.changed and result.fixes == []
    assert [(s.code, s.line, s.message) for s in result.skips] == [
        ("TSF212", 10, "self.rnn.flatten_parameters() in forward()"),
        ("TSF212", 8, "self.rnn.flatten_parameters() in forward()"),
        ("TSF212", 9, "self.rnn.flatten_parameters() in forward()")]
    reasons = [s.reason for s in result.skips]
    assert "is not a statement of its own" in reasons[0]
    assert "one-line body" in reasons[1]
    assert "shares its line" in reasons[2]


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
    assert [(s.code, s.line) for s in result.skips] == [("TSF212", 5)]
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


def test_check_findings_on_the_blockers_fixture() -> None:
    path = FIXTURES_ROOT / "check" / "blockers.py"
    result = rewrite_source(
        path.read_text(), RewriteSettings([FlattenParameters], output=False), str(path)
    )
    assert [(f.code, f.class_name) for f in result.fixes] == [("TSF212", "FlattensParameters")]
    assert [s for s in result.skips if s.code] == []


def test_fixture_refusals() -> None:
    masker = rewrite((FIXTURES / "recurrent_masker.in.py").read_text())
    assert [(s.class_name, s.code) for s in masker.skips] == [("OneLineGuard", "TSF212")]
