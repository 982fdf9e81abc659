"""none-module-test: which truth tests become ``is not None`` / ``is None`` (if, while, ternary,
``not``, ``and``/``or`` in a test; never a value ``or``), the classes followed to decide that a
value is always true (torch.nn, the file, another file of the project, bases), refusals with
their reasons (containers with ``__len__``, Tensors, settings, unknown classes, attributes
assigned after construction), and what ``tsfix check`` shows. Slow: the measurement behind the
rule's targets. The fixture pairs are tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest
from conftest import load_module, rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.rewrite import Rewrite
from tsfix.codemods.rules.none_module_test import NoneModuleTest

HEADER = "import torch\nfrom torch import nn\n"


rewrite = rule_rewriter(NoneModuleTest)


def block(value: str, test: str = "if self.extra:\n            x = self.extra(x)",
          *, prelude: str = "") -> str:
    """A module whose __init__ stores None or ``value`` in self.extra, and whose forward runs
    ``test``."""
    return (HEADER + textwrap.dedent(prelude)
            + "class M(nn.Module):\n"
            + "    def __init__(self, on=True):\n"
            + "        super().__init__()\n"
            + "        self.extra = None\n"
            + "        if on:\n"
            + f"            self.extra = {value}\n"
            + "    def forward(self, x):\n"
            + f"        {test}\n"
            + "        return x\n")


def refusal(result: Rewrite) -> str:
    assert not result.changed and not result.fixes
    [skip] = result.skips
    assert (skip.code, skip.rule) == ("TSF116", "none-module-test")
    return skip.reason


# ---- the fix -------------------------------------------------------------------------------------

def test_the_ecapa_shortcut_test_becomes_is_not_none() -> None:
    result = rewrite("""\
        import torch.nn as nn
        class Conv1d(nn.Module):
            def __init__(self, in_channels, out_channels, kernel_size):
                super().__init__()
                self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)
            def forward(self, x):
                return self.conv(x)
        class SERes2NetBlock(nn.Module):
            def __init__(self, in_channels, out_channels):
                super().__init__()
                self.shortcut = None
                if in_channels != out_channels:
                    self.shortcut = Conv1d(
                        in_channels=in_channels,
                        out_channels=out_channels,
                        kernel_size=1,
                    )
            def forward(self, x, lengths=None):
                residual = x
                if self.shortcut:
                    residual = self.shortcut(x)
                return x + residual
        """)
    assert "        if self.shortcut is not None:\n            residual = self.shortcut(x)\n" \
        in result.text
    [fix] = result.fixes
    assert (fix.code, fix.rule, fix.class_name, fix.line, fix.column) == (
        "TSF116", "none-module-test", "SERes2NetBlock", 20, 12)
    [change] = result.changes
    assert "self.shortcut is None or Conv1d" in change.summary


@pytest.mark.parametrize(("test", "expected"), [
    ("if not self.extra:\n            x = x * 2",
     "if self.extra is None:\n            x = x * 2"),
    ("x = x if not self.extra else self.extra(x)",
     "x = x if self.extra is None else self.extra(x)"),
    ("x = self.extra(x) if self.extra else x",
     "x = self.extra(x) if self.extra is not None else x"),
    ("if self.extra and x.dim() > 1:\n            x = self.extra(x)",
     "if self.extra is not None and x.dim() > 1:\n            x = self.extra(x)"),
    # The touched lines are formatted: redundant parentheses go.
    ("if (self.extra):\n            x = self.extra(x)",
     "if self.extra is not None:\n            x = self.extra(x)"),
    ("skip = not self.extra\n        x = x * 2 if skip else x",
     "skip = self.extra is None\n        x = x * 2 if skip else x"),
    ("while self.extra and x.sum() > 100:\n            x = x / 2",
     "while self.extra is not None and x.sum() > 100:\n            x = x / 2"),
])
def test_every_truth_test_form_is_rewritten(test: str, expected: str) -> None:
    result = rewrite(block("nn.Linear(4, 4)", test))
    assert f"        {expected}\n" in result.text
    assert [f.code for f in result.fixes] == ["TSF116"]


def test_an_or_that_gives_a_value_is_left_and_not_reported() -> None:
    # `self.extra or self.fallback` is the submodule itself, not a bool.
    result = rewrite(block("nn.Linear(4, 4)", "layer = self.extra or nn.Identity()\n"
                                              "        x = layer(x)"))
    assert not result.changed and not result.fixes and not result.skips


@pytest.mark.parametrize("value", [
    "nn.Linear(4, 4)", "nn.Identity()", "torch.nn.BatchNorm1d(4)",
    # A class of the file, whose base is one too.
    "Scaled(2.0)",
])
def test_always_true_classes_are_fixed(value: str) -> None:
    prelude = """\
        class Base(nn.Module):
            pass
        class Scaled(Base):
            def __init__(self, factor):
                super().__init__()
                self.factor = factor
            def forward(self, x):
                return x * self.factor
        """
    result = rewrite(block(value, prelude=prelude))
    assert "if self.extra is not None:" in result.text


def test_a_class_of_another_project_file_is_followed(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(textwrap.dedent("""\
        from torch import nn
        class Gate(nn.Module):
            def forward(self, x):
                return x.sigmoid() * x
        class Stack(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n
            def __len__(self):
                return self.n
        """))
    model = package / "model.py"
    ok = rewrite(block("Gate()", prelude="from .layers import Gate\n"), path=str(model))
    assert "if self.extra is not None:" in ok.text
    # Stack defines __len__: Stack(0) is false.
    reason = refusal(rewrite(block("Stack(2)", prelude="from pkg.layers import Stack\n"),
                             path=str(model)))
    assert "Stack defines __len__" in reason and "can be false" in reason


def test_an_attribute_that_is_always_a_submodule_is_fixed_too() -> None:
    # TorchScript has no truth value for a submodule either (measured: "Could not cast value
    # of type __torch__...Linear to bool").
    result = rewrite(HEADER + textwrap.dedent("""\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)
            def forward(self, x):
                if self.proj:
                    x = self.proj(x)
                return x
        """))
    assert "if self.proj is not None:" in result.text
    [fix] = result.fixes
    assert "'self.proj' holds a submodule" in fix.message


def test_code_torchscript_never_compiles_is_left() -> None:
    result = rewrite(block("nn.Linear(4, 4)",
                           "if not torch.jit.is_scripting():\n"
                           "            if self.extra:\n"
                           "                x = self.extra(x)"))
    assert not result.changed and not result.fixes and not result.skips


# ---- refusals ------------------------------------------------------------------------------------

def test_a_sequential_is_refused_it_can_be_empty() -> None:
    reason = refusal(rewrite(block("nn.Sequential(*[nn.ReLU() for _ in range(depth)])")))
    assert "torch.nn.Sequential defines __len__: an empty one is false" in reason


@pytest.mark.parametrize("container", ["nn.ModuleList([nn.ReLU()])", "nn.ModuleDict({})"])
def test_other_torch_containers_are_refused(container: str) -> None:
    assert "defines __len__" in refusal(rewrite(block(container)))


def test_a_project_class_deriving_from_a_container_is_refused() -> None:
    # speechbrain's Sequential is a ModuleDict.
    prelude = """\
        class Sequential(torch.nn.ModuleDict):
            pass
        """
    reason = refusal(rewrite(block("Sequential()", prelude=prelude)))
    assert "Sequential derives from torch.nn.ModuleDict" in reason
    assert "defines __len__" in reason


def test_a_tensor_is_refused_its_truth_depends_on_its_data() -> None:
    reason = refusal(rewrite(block("nn.Parameter(torch.zeros(4))",
                                   "if self.extra:\n            x = x + self.extra")))
    assert "holds a Tensor" in reason and "depends on its data" in reason
    assert "`nn.Parameter(torch.zeros(4))`, line 8" in reason


def test_an_int_setting_is_refused_zero_is_false() -> None:
    reason = refusal(rewrite(block("4", "if self.extra:\n            x = x[..., :self.extra]")))
    assert "holds an int setting" in reason and "0, 0.0, '' and False are false" in reason


def test_a_class_from_an_installed_package_is_refused(tmp_path: Path) -> None:
    reason = refusal(rewrite(block("Conformer(4)",
                                   prelude="from torchaudio.models import Conformer\n"),
                             path=str(tmp_path / "m.py")))
    assert "outside the project tree" in reason


def test_a_class_given_to_the_constructor_is_refused() -> None:
    code = block("norm(4)").replace("def __init__(self, on=True)",
                                    "def __init__(self, on=True, norm=nn.LayerNorm)")
    reason = refusal(rewrite(code))
    assert "built from `norm`, a constructor argument" in reason


def test_a_local_of_init_naming_classes_is_followed_to_them() -> None:
    # demucs' HEncLayer: `klass = nn.Conv1d`, `klass = nn.Conv2d` under a setting, then
    # `self.rewrite = klass(...)` only when asked for.
    code = block("klass(4, 4, 1)").replace(
        "        self.extra = None\n",
        "        klass = nn.Conv1d\n        if on:\n            klass = nn.Conv2d\n"
        "        self.extra = None\n")
    assert "if self.extra is not None:" in rewrite(code).text
    # Any binding of the local that is not a class name leaves its class unknown.
    for other in ("make_conv", "nn.Conv2d if on else nn.Sequential"):
        unknown = code.replace("klass = nn.Conv2d", f"klass = {other}")
        assert "built from `klass`, a constructor argument or local of __init__" in refusal(
            rewrite(unknown))
    # A local that may name a container is followed to it, and refused for it.
    empty = code.replace("klass = nn.Conv2d", "klass = nn.Sequential")
    assert "torch.nn.Sequential defines __len__" in refusal(rewrite(empty))


def test_an_attribute_assigned_after_construction_is_refused() -> None:
    code = block("nn.Linear(4, 4)") + "    def drop(self):\n        self.extra = None\n"
    assert "assigned in M.drop() too" in refusal(rewrite(code))


def test_a_subclass_in_the_file_that_stores_a_container_is_seen() -> None:
    code = block("nn.Linear(4, 4)") + textwrap.dedent("""\
        class Deeper(M):
            def __init__(self):
                super().__init__()
                self.extra = nn.Sequential()
        """)
    reason = refusal(rewrite(code))
    assert "nn.Sequential" in reason and "defines __len__" in reason


# ---- tsfix check ---------------------------------------------------------------------------------

def test_check_shows_the_fix_and_the_refusal_instead_of_the_linters_finding() -> None:
    fixed = [f for f in check_source(block("nn.Linear(4, 4)"), "m.py") if f.code == "TSF116"]
    assert [(f.line, f.fix) for f in fixed] == [(10, "none-module-test")]
    # The linter reports this int setting itself (TSF116); the rule's refusal replaces it.
    refused = [f for f in check_source(block("4"), "m.py") if f.code == "TSF116"]
    assert len(refused) == 1 and refused[0].fix is None
    assert refused[0].refused.startswith("none-module-test: self.extra holds an int setting")


def test_check_under_export_does_not_report_it() -> None:
    # torch.export runs the Python test (see the slow test below).
    findings = check_source(block("nn.Linear(4, 4)"), "m.py", target="export")
    assert not [f for f in findings if f.code == "TSF116"]


# ---- the measurement behind the targets ----------------------------------------------------------

@pytest.mark.slow
def test_torchscript_rejects_the_truth_test_and_torch_export_runs_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    code = block("nn.Linear(4, 4)")
    (tmp_path / "nmt_original.py").write_text(code)
    (tmp_path / "nmt_fixed.py").write_text(rewrite(code).text)
    original = load_module(tmp_path / "nmt_original.py", "nmt_original")
    fixed = load_module(tmp_path / "nmt_fixed.py", "nmt_fixed")
    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for on in (False, True):
            model = original.M(on=on).eval()
            with pytest.raises(Exception, match="Could not cast value of type"):
                torch.jit.script(model)
            rewritten = fixed.M(on=on).eval()
            rewritten.load_state_dict(model.state_dict())
            assert torch.equal(torch.jit.script(rewritten)(x), model(x))
            exported = torch.export.export(model, (x,))
            assert torch.equal(exported.module()(x), model(x))


def test_a_bool_flag_set_again_later_is_not_this_rules() -> None:
    # speechbrain's Conv1d: self.unsqueeze = False in __init__, True in a shape check.
    result = rewrite(HEADER + textwrap.dedent("""\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.unsqueeze = False
            def check(self, x):
                self.unsqueeze = x.dim() == 2
            def forward(self, x):
                if self.unsqueeze:
                    x = x.unsqueeze(1)
                return x
        """))
    assert not result.changed and not result.fixes and not result.skips


def test_a_constructor_argument_defaulting_to_none_is_refused() -> None:
    # speechbrain's HifiGAN losses: self.stft_loss = stft_loss (default None).
    code = block("nn.Linear(4, 4)").replace("def __init__(self, on=True)",
                                            "def __init__(self, on=True, loss=None)")
    code = code.replace("        self.extra = None\n", "        self.extra = loss\n")
    reason = refusal(rewrite(code))
    assert "`loss` is a constructor argument: what a caller passes is not known" in reason


def test_a_capitalised_factory_function_is_refused() -> None:
    # ParityBench's pytorch_saliency: SimpleLinearBlock(...) is a function returning a
    # Sequential.
    prelude = """\
        def SimpleLinearBlock(channels):
            return nn.Sequential(nn.Linear(channels, channels))
        """
    reason = refusal(rewrite(block("SimpleLinearBlock(4)", prelude=prelude)))
    assert "`SimpleLinearBlock` is a function of its file: what it returns is not known" in reason
