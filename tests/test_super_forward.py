"""super-forward: each base layer's functional form, each refusal with its reason and check code,
the import it adds, compiled methods only (export yes, ignore no), check findings. The fixture
pairs are tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, load_module, rule_rewriter
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.super_forward import SuperForward

FIXTURES = FIXTURES_ROOT / "super-forward"
IMPORTS = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


# A long line length: black leaves the one-line functional forms as they are.
rewrite = rule_rewriter(SuperForward, line_length=200)


def reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


def subclass(base: str, body: str, imports: str = IMPORTS) -> str:
    return imports + f"class M({base}):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def rewritten(base: str, body: str, imports: str = IMPORTS) -> str:
    """What the rule writes: black puts an empty line before the first method."""
    return subclass(base, "\n" + textwrap.dedent(body).lstrip("\n"), imports)


FORWARD = """
def forward(self, x):
    return super().forward(x) + 1
"""


@pytest.mark.parametrize(("base", "expected"), [
    ("nn.Conv1d", "self._conv_forward(x, self.weight, self.bias)"),
    ("nn.Conv2d", "self._conv_forward(x, self.weight, self.bias)"),
    ("torch.nn.Conv3d", "self._conv_forward(x, self.weight, self.bias)"),
    ("nn.Linear", "F.linear(x, self.weight, self.bias)"),
    ("nn.LayerNorm", "F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)"),
    ("nn.GroupNorm", "F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)"),
    ("nn.RMSNorm", "F.rms_norm(x, self.normalized_shape, self.weight, self.eps)"),
    ("nn.PReLU", "F.prelu(x, self.weight)"),
    ("nn.ConvTranspose1d", "F.conv_transpose1d(x, self.weight, self.bias, self.stride, "
                           "self.padding, self.output_padding, self.groups, self.dilation)"),
])
def test_each_base_gets_its_functional_form(base: str, expected: str) -> None:
    result = rewrite(subclass(base, FORWARD))
    assert result.text == rewritten(base, f"""
        def forward(self, x):
            return {expected} + 1
        """)
    assert result.changes[0].class_name == "M"
    assert "functional form" in result.changes[0].summary
    assert [(f.code, f.line, f.column, f.message) for f in result.fixes] == [
        ("TSF211", 7, 16, "super().forward() in forward()")]


def test_keyword_input_and_super_with_class_and_self() -> None:
    result = rewrite(subclass("nn.Linear", """
        def forward(me, x):
            return super(M, me).forward(input=x * 2)
        """))
    assert result.text == rewritten("nn.Linear", """
        def forward(me, x):
            return F.linear(x * 2, me.weight, me.bias)
        """)


def test_bilinear_binds_both_inputs() -> None:
    result = rewrite(subclass("nn.Bilinear", """
        def forward(self, a, b):
            return super().forward(b, input1=a)
        """))
    assert not result.changed
    assert [s.code for s in result.skips] == ["TSF211"]
    result = rewrite(subclass("nn.Bilinear", """
        def forward(self, a, b):
            return super().forward(a, b)
        """))
    assert result.text == rewritten("nn.Bilinear", """
        def forward(self, a, b):
            return F.bilinear(a, b, self.weight, self.bias)
        """)


def test_base_chain_in_the_file_without_forward_is_followed() -> None:
    code = """
        import torch.nn as nn
        import torch.nn.functional as F
        class Base(nn.Conv1d):
            def extra(self):
                return 1
        class M(Base):
            def forward(self, x):
                return super().forward(x)
        """
    result = rewrite(code)
    assert result.text == textwrap.dedent(code).replace(
        "super().forward(x)", "self._conv_forward(x, self.weight, self.bias)")


def test_helper_reached_from_forward_is_rewritten_and_unreached_method_is_not() -> None:
    result = rewrite(subclass("nn.Linear", """
        def forward(self, x):
            return self._project(x)
        def _project(self, x):
            return super().forward(x)
        def export_only(self, x):
            return super().forward(x)
        """))
    assert result.text == rewritten("nn.Linear", """
        def forward(self, x):
            return self._project(x)
        def _project(self, x):
            return F.linear(x, self.weight, self.bias)
        def export_only(self, x):
            return super().forward(x)
        """)
    assert [(f.line, f.message) for f in result.fixes] == [
        (9, "super().forward() in _project()")]


def test_exported_method_is_rewritten() -> None:
    result = rewrite(subclass("nn.Linear", """
        def forward(self, x):
            return x
        @torch.jit.export
        def project(self, x):
            return super().forward(x)
        """))
    assert result.text == rewritten("nn.Linear", """
        def forward(self, x):
            return x
        @torch.jit.export
        def project(self, x):
            return F.linear(x, self.weight, self.bias)
        """)
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF211", 10, "super().forward() in project()")]


def test_ignored_helper_and_eager_only_branch_are_left_alone() -> None:
    code = subclass("nn.Linear", """
        def forward(self, x):
            if not torch.jit.is_scripting():
                x = super().forward(x)
            return self.debug(x)
        @torch.jit.ignore
        def debug(self, x):
            return super().forward(x)
        """)
    result = rewrite(code)
    assert not result.changed and result.text == code
    assert result.fixes == [] and result.skips == []


def test_functional_name_comes_from_the_file() -> None:
    # `from torch import nn`: nn.functional, no new import.
    result = rewrite(subclass("nn.Linear", FORWARD, imports="from torch import nn\n"))
    assert result.text == rewritten("nn.Linear", """
        def forward(self, x):
            return nn.functional.linear(x, self.weight, self.bias) + 1
        """, imports="from torch import nn\n")
    # Only `import torch`: the import is added right after it.
    result = rewrite(subclass("torch.nn.Linear", FORWARD, imports="import os\nimport torch\n"))
    assert result.text == rewritten("torch.nn.Linear", """
        def forward(self, x):
            return F.linear(x, self.weight, self.bias) + 1
        """, imports="import os\nimport torch\nimport torch.nn.functional as F\n")
    # Conv needs no functional name at all.
    result = rewrite(subclass("torch.nn.Conv2d", FORWARD, imports="import torch\n"))
    assert result.text == rewritten("torch.nn.Conv2d", """
        def forward(self, x):
            return self._conv_forward(x, self.weight, self.bias) + 1
        """, imports="import torch\n")


@pytest.mark.parametrize(("code", "reason"), [
    (subclass("nn.BatchNorm2d", FORWARD), "base nn.BatchNorm2d: BatchNorm's forward updates"),
    (subclass("nn.LSTM", FORWARD), "base nn.LSTM: the recurrent layer's forward"),
    (subclass("nn.Sequential", FORWARD), "base nn.Sequential: Sequential's forward is a loop"),
    (subclass("nn.MultiheadAttention", FORWARD),
     "base nn.MultiheadAttention: no exact functional form known for it"),
    (subclass("layers.Pooling", FORWARD), "base `layers.Pooling` is defined outside this file"),
    (subclass("nn.ConvTranspose2d", """
        def forward(self, x, size):
            return super().forward(x, size)
        """), "nn.ConvTranspose2d.forward takes (input); only those"),
    (subclass("nn.Linear", """
        def forward(self, x):
            return super(nn.Linear, self).forward(x)
        """), "only `super()` and `super(M, self)` are resolved"),
    (subclass("nn.Linear", """
        def forward(self, *args):
            return super().forward(*args)
        """), "only those, passed without * or **"),
    (subclass("nn.Embedding", """
        def __init__(self):
            super().__init__(10, 4, 0, 1.0)
        def forward(self, x):
            return super().forward(x)
        """), "Embedding with max_norm: scripted F.embedding skips"),
])
def test_refusals_are_reported(code: str, reason: str) -> None:
    result = rewrite(code)
    assert not result.changed and result.fixes == []
    assert len(result.skips) == 1
    assert reason in result.skips[0].reason, result.skips[0].reason
    assert result.skips[0].reason.startswith("forward(): `super(")
    assert (result.skips[0].code, result.skips[0].message) == (
        "TSF211", "super().forward() in forward()")


def test_base_forward_defined_in_the_file_is_refused() -> None:
    result = rewrite("""
        import torch.nn as nn
        class Base(nn.Module):
            def forward(self, x):
                return x
        class M(Base):
            def forward(self, x):
                return super().forward(x) * 2
        """)
    assert not result.changed
    assert reasons(result) == ["forward(): `super().forward(x)`: resolves to Base.forward, "
                               "defined in this file; TorchScript cannot call it through super()"]


def test_embedding_max_norm_unset_is_rewritten_and_unknown_is_noted() -> None:
    unset = rewrite(subclass("nn.Embedding", """
        def __init__(self, n=10):
            super().__init__(n, 4, padding_idx=0, max_norm=None)
        def forward(self, x):
            return super().forward(x)
        """))
    embedding = ("F.embedding(x, self.weight, self.padding_idx, self.max_norm, self.norm_type, "
                 "self.scale_grad_by_freq, self.sparse)")
    assert unset.text == rewritten("nn.Embedding", f"""
        def __init__(self, n=10):
            super().__init__(n, 4, padding_idx=0, max_norm=None)
        def forward(self, x):
            return {embedding}
        """)
    assert unset.changes[0].notes == []
    unknown = rewrite(subclass("nn.Embedding", FORWARD))
    assert unknown.changed
    assert unknown.changes[0].notes == [
        "if built with max_norm, the scripted module skips the in-place renormalisation eager "
        "mode does (as a scripted nn.Embedding does)"]


def test_check_findings_on_the_blockers_fixture() -> None:
    path = FIXTURES_ROOT / "check" / "blockers.py"
    result = rewrite_source(
        path.read_text(), RewriteSettings([SuperForward], output=False), str(path)
    )
    assert [(f.code, f.class_name) for f in result.fixes] == [("TSF211", "LinearWithSuper")]
    assert [s for s in result.skips if s.code] == []


def test_fixture_refusals() -> None:
    result = rewrite((FIXTURES / "refused.in.py").read_text())
    assert not result.changed
    skipped = {s.class_name: (s.code, s.reason) for s in result.skips}
    assert set(skipped) == {"FrozenStatsBatchNorm", "ResidualEncoder"}
    assert skipped["FrozenStatsBatchNorm"][0] == skipped["ResidualEncoder"][0] == "TSF211"
    assert "BatchNorm" in skipped["FrozenStatsBatchNorm"][1]
    assert "resolves to Encoder.forward" in skipped["ResidualEncoder"][1]


@pytest.mark.slow
def test_originals_fail_to_script_and_rewrites_match_in_train_mode(tmp_path: Path) -> None:
    """The misleading TorchScript error the rule exists for, and train-mode parity (validation
    compares in eval mode only)."""
    torch = pytest.importorskip("torch")
    original = load_module(FIXTURES / "conv_layers.in.py", "_sf_conv_in")
    rewritten = load_module(FIXTURES / "conv_layers.out.py", "_sf_conv_out")
    with pytest.raises(Exception, match="has no attribute or method 'forward'"):
        torch.jit.script(original.ScaledLinear())
    with pytest.raises(Exception, match="Python type cannot be used as a value"):
        torch.jit.script(original.WeightStandardizedConv2d())
    x = torch.randn(2, 3, 16, 16)
    torch.manual_seed(0)
    before = original.WeightStandardizedConv2d().train()
    after = rewritten.WeightStandardizedConv2d().train()
    after.load_state_dict(before.state_dict(), strict=True)
    scripted = torch.jit.script(after)
    expected = before(x)
    assert torch.equal(after(x), expected)
    assert torch.allclose(scripted(x), expected, rtol=1e-5, atol=1e-6)
