"""super-forward: each base layer's functional form, each refusal with its reason, the import it
adds, and the fixture pairs (without and with validation)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs, load_module
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.super_forward import SuperForward

FIXTURES = FIXTURES_ROOT / "super-forward"


def rewrite(code: str) -> Rewrite:
    result = rewrite_source(textwrap.dedent(code), "m.py", [SuperForward])
    cst.parse_module(result.text)
    if result.changed:
        again = rewrite_source(result.text, "m.py", [SuperForward])
        assert not again.changed and again.text == result.text, "not a fixed point"
    return result


def flat(text: str) -> str:
    """Without whitespace and magic trailing commas: black re-wraps the touched lines."""
    return "".join(text.split()).replace(",)", ")")


def reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


def subclass(base: str, body: str, imports: str = "import torch\nimport torch.nn as nn\n"
             "import torch.nn.functional as F\n") -> str:
    return imports + f"class M({base}):\n" + textwrap.indent(textwrap.dedent(body), "    ")


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
    assert flat(f"{expected} + 1") in flat(result.text)
    assert result.changes[0].class_name == "M"
    assert "functional form" in result.changes[0].summary


def test_keyword_input_and_super_with_class_and_self() -> None:
    result = rewrite(subclass("nn.Linear", """
        def forward(me, x):
            return super(M, me).forward(input=x * 2)
        """))
    assert flat("return F.linear(x * 2, me.weight, me.bias)") in flat(result.text)


def test_bilinear_binds_both_inputs() -> None:
    result = rewrite(subclass("nn.Bilinear", """
        def forward(self, a, b):
            return super().forward(b, input1=a)
        """))
    assert not result.changed
    result = rewrite(subclass("nn.Bilinear", """
        def forward(self, a, b):
            return super().forward(a, b)
        """))
    assert flat("F.bilinear(a, b, self.weight, self.bias)") in flat(result.text)


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
    assert flat("return self._conv_forward(x, self.weight, self.bias)") in flat(result.text)


def test_helper_reached_from_forward_is_rewritten_and_unreached_method_is_not() -> None:
    result = rewrite(subclass("nn.Linear", """
        def forward(self, x):
            return self._project(x)
        def _project(self, x):
            return super().forward(x)
        def export_only(self, x):
            return super().forward(x)
        """))
    assert flat(result.text).count(flat("F.linear(x, self.weight, self.bias)")) == 1
    assert result.text.count("super().forward(x)") == 1


def test_functional_name_comes_from_the_file() -> None:
    # `from torch import nn`: nn.functional, no new import.
    result = rewrite(subclass("nn.Linear", FORWARD, imports="from torch import nn\n"))
    assert flat("nn.functional.linear(x, self.weight, self.bias)") in flat(result.text)
    assert "import torch.nn.functional" not in result.text
    # Only `import torch`: the import is added right after it.
    result = rewrite(subclass("torch.nn.Linear", FORWARD, imports="import os\nimport torch\n"))
    assert result.text.startswith("import os\nimport torch\nimport torch.nn.functional as F\n")
    assert flat("F.linear(x, self.weight, self.bias)") in flat(result.text)
    # Conv needs no functional name at all.
    result = rewrite(subclass("torch.nn.Conv2d", FORWARD, imports="import torch\n"))
    assert "import torch.nn.functional" not in result.text


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
    assert not result.changed
    assert len(result.skips) == 1
    assert reason in result.skips[0].reason, result.skips[0].reason
    assert result.skips[0].reason.startswith("forward(): `super(")


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
    assert flat("F.embedding(x, self.weight, self.padding_idx, self.max_norm") in flat(unset.text)
    assert unset.changes[0].notes == []
    unknown = rewrite(subclass("nn.Embedding", FORWARD))
    assert unknown.changed
    assert "max_norm" in unknown.changes[0].notes[0]


# ---- fixtures ----------------------------------------------------------------------------------

def test_fixture_pairs_without_validation(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "super-forward")
    result = run(sorted(folder.glob("*.in.py")), Options(rules=["super-forward"], verify=False))
    for before, after in fixture_pairs(folder):
        assert before.read_text() == after.read_text(), before.name
    skipped = {s.class_name: s.reason for f in result.files for s in f.skips}
    assert set(skipped) == {"FrozenStatsBatchNorm", "ResidualEncoder"}
    assert "BatchNorm" in skipped["FrozenStatsBatchNorm"]
    again = run(sorted(folder.glob("*.in.py")), Options(rules=["super-forward"], verify=False))
    assert [f for f in again.files if f.status == "changed"] == []


@pytest.mark.slow
def test_fixture_pairs_are_verified(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "super-forward")
    done = apply_with_report(folder, "super-forward")
    assert done.returncode == 0, done.stderr
    classes = {c["class_name"]: c for c in done.classes}
    assert set(classes) == {"CausalConv1d", "WeightStandardizedConv2d", "ScaledLinear",
                            "UpsampleConvTranspose", "ChannelLastLayerNorm", "GlobalGroupNorm",
                            "LearnedPositionalEmbedding"}
    assert {c["verdict"] for c in classes.values()} == {"verified"}, classes
    for before, after in fixture_pairs(folder):
        assert before.read_text() == after.read_text(), before.name


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
