"""drop-variable: replacements by binding, import removal, refusals, the fixture pairs (without
and with validation) and idempotence."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.drop_variable import DropVariable

FIXTURES = FIXTURES_ROOT / "drop-variable"


def rewrite(code: str) -> Rewrite:
    result = rewrite_source(textwrap.dedent(code), "m.py", [DropVariable])
    cst.parse_module(result.text)
    again = rewrite_source(result.text, "m.py", [DropVariable])
    assert not again.changed and again.text == result.text, "not a fixed point"
    return result


def forward_line(result: Rewrite) -> str:
    return next(line.strip() for line in result.text.splitlines()
                if line.strip().startswith("return"))


@pytest.mark.parametrize(("call", "expected"), [
    ("Variable(x)", "x.detach()"),
    ("Variable(x * 2)", "(x * 2).detach()"),
    ("Variable(x, requires_grad=True)", "x.detach().requires_grad_()"),
    ("Variable(x, True)", "x.detach().requires_grad_()"),
    ("Variable(x, requires_grad=False)", "x.detach()"),
    ("Variable(x, requires_grad=flag)", "x.detach().requires_grad_(flag)"),
    ("Variable(torch.zeros(3))", "torch.zeros(3)"),
    ("Variable(x.new_zeros(3), requires_grad=True)", "x.new_zeros(3).requires_grad_()"),
    ("Variable(torch.zeros(3, requires_grad=True))", "torch.zeros(3, requires_grad=True).detach()"),
    ("V(x)", "x.detach()"),
    ("autograd.Variable(x)", "x.detach()"),
    ("torch.autograd.Variable(x)", "x.detach()"),
])
def test_replacements(call: str, expected: str) -> None:
    result = rewrite(f"""\
        import torch
        from torch import autograd, nn
        from torch.autograd import Variable
        from torch.autograd import Variable as V
        class M(nn.Module):
            def forward(self, x, flag: bool):
                return {call}
        """)
    assert forward_line(result) == f"return {expected}"


def test_replacement_matches_variable_in_eager_mode() -> None:
    torch = pytest.importorskip("torch")
    from torch.autograd import Variable
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    for original, replaced in ((Variable(y), y.detach()),
                               (Variable(y, requires_grad=True), y.detach().requires_grad_())):
        assert torch.equal(original, replaced)
        assert original.requires_grad == replaced.requires_grad
        assert original.is_leaf and replaced.is_leaf and original.grad_fn is None


def test_import_removed_only_when_unused() -> None:
    used_elsewhere = rewrite("""\
        from torch import nn
        from torch.autograd import Variable
        class M(nn.Module):
            def forward(self, x):
                return Variable(x)
            def loss(self, x):
                return Variable(x)
        """)
    assert "from torch.autograd import Variable\n" in used_elsewhere.text
    unused = rewrite("""\
        from torch import nn
        # legacy autograd wrapper
        from torch.autograd import Function, Variable
        from torch.autograd import Variable as V
        class M(nn.Module):
            def forward(self, x):
                return V(Variable(x))
        """)
    assert "# legacy autograd wrapper\nfrom torch.autograd import Function\n" in unused.text
    assert "Variable" not in unused.text


def test_other_variables_and_refusals() -> None:
    result = rewrite("""\
        import chainer
        import torch
        from torch import nn
        from torch.autograd import Variable
        class M(nn.Module):
            def forward(self, x, *rest):
                a = chainer.Variable(x)
                b = Variable(*rest)
                c = Variable()
                d = Variable(x, volatile=True)
                return a, b, c, d
        """)
    assert "chainer.Variable(x)" in result.text and "d = x.detach()" in result.text
    reasons = [s.reason for s in result.skips]
    assert len(reasons) == 2
    assert any("*args" in r for r in reasons) and any("no tensor argument" in r for r in reasons)
    assert any("volatile" in note for note in result.changes[0].notes)


def test_never_compiled_branch_is_left_alone() -> None:
    result = rewrite("""\
        import torch
        from torch import nn
        from torch.autograd import Variable
        class M(nn.Module):
            def forward(self, x):
                if not torch.jit.is_scripting():
                    x = Variable(x)
                return x
        """)
    assert not result.changed and not result.skips


def test_fixture_pairs_without_validation() -> None:
    pairs = fixture_pairs(FIXTURES)
    assert len(pairs) >= 2
    for before, after in pairs:
        result = rewrite(before.read_text())
        assert result.text == after.read_text(), before.name
    # reset_state() is not compiled: its Variable, and so the import, stay.
    assert "from torch.autograd import Variable" in (FIXTURES / "dprnn.out.py").read_text()
    refused = rewrite((FIXTURES / "am_softmax.in.py").read_text()).skips
    assert [(s.class_name, "name=" in s.reason) for s in refused] == [("NamedVariable", True)]


@pytest.mark.slow
def test_fixture_pairs_are_verified(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "drop-variable", inputs_only=True)
    done = apply_with_report(folder, "drop-variable")
    assert done.returncode == 0, done.stderr
    classes = done.classes
    assert len(classes) == 3
    assert {c["verdict"] for c in classes} == {"verified"}, classes
    for before, after in fixture_pairs(FIXTURES):
        assert (folder / before.name).read_text() == after.read_text(), before.name
