"""drop-variable: replacements by binding, import removal, refusals with their check code,
compiled methods only (export yes, ignore no), check findings, idempotence. The fixture pairs
are tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap

import pytest
from conftest import FIXTURES_ROOT, rule_rewriter
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.drop_variable import DropVariable

FIXTURES = FIXTURES_ROOT / "drop-variable"


rewrite = rule_rewriter(DropVariable)


IMPORTS = ("import torch\n"
           "from torch import autograd, nn\n"
           "from torch.autograd import Variable\n"
           "from torch.autograd import Variable as V\n")


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
    body = "class M(nn.Module):\n    def forward(self, x, flag: bool):\n        return {}\n"
    result = rewrite(IMPORTS + body.format(call))
    # Both Variable imports are unused afterwards, and go.
    assert result.text == "import torch\nfrom torch import autograd, nn\n" + body.format(expected)
    assert [(f.code, f.class_name, f.line) for f in result.fixes] == [("TSF213", "M", 7)]


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
    assert used_elsewhere.text == textwrap.dedent("""\
        from torch import nn
        from torch.autograd import Variable
        class M(nn.Module):
            def forward(self, x):
                return x.detach()
            def loss(self, x):
                return Variable(x)
        """)
    unused = rewrite("""\
        from torch import nn
        # legacy autograd wrapper
        from torch.autograd import Function, Variable
        from torch.autograd import Variable as V
        class M(nn.Module):
            def forward(self, x):
                return V(Variable(x))
        """)
    assert unused.text == textwrap.dedent("""\
        from torch import nn
        # legacy autograd wrapper
        from torch.autograd import Function
        class M(nn.Module):
            def forward(self, x):
                return x.detach().detach()
        """)


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
    assert result.text == textwrap.dedent("""\
        import chainer
        import torch
        from torch import nn
        from torch.autograd import Variable
        class M(nn.Module):
            def forward(self, x, *rest):
                a = chainer.Variable(x)
                b = Variable(*rest)
                c = Variable()
                d = x.detach()
                return a, b, c, d
        """)
    assert [(s.code, s.line, s.message) for s in result.skips] == [
        ("TSF213", 8, "Variable(...) in forward()"), ("TSF213", 9, "Variable(...) in forward()")]
    reasons = [s.reason for s in result.skips]
    assert "*args/**kwargs hide what it receives" in reasons[0]
    assert "no tensor argument" in reasons[1]
    assert [(f.code, f.line) for f in result.fixes] == [("TSF213", 10)]
    assert result.changes[0].notes == [
        "line 10: volatile= dropped; it has had no effect since torch 0.4 (use `with "
        "torch.no_grad():`)"]


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


def test_ignored_helper_called_from_forward_is_left_alone() -> None:
    code = """\
        import torch
        from torch import nn
        from torch.autograd import Variable
        class M(nn.Module):
            def forward(self, x):
                return self.helper(x)
            @torch.jit.ignore
            def helper(self, x):
                return Variable(x)
        """
    result = rewrite(code)
    assert not result.changed and result.text == textwrap.dedent(code)
    assert result.skips == [] and result.fixes == []


def test_exported_method_is_rewritten() -> None:
    result = rewrite("""\
        import torch
        from torch import nn
        from torch.autograd import Variable
        class M(nn.Module):
            def forward(self, x):
                return x
            @torch.jit.export
            def infer(self, x):
                return Variable(x) * 2
        """)
    assert result.text == textwrap.dedent("""\
        import torch
        from torch import nn
        class M(nn.Module):
            def forward(self, x):
                return x
            @torch.jit.export
            def infer(self, x):
                return x.detach() * 2
        """)
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF213", 9, "Variable(...) in infer()")]


def test_check_findings_on_the_blockers_fixture() -> None:
    path = FIXTURES_ROOT / "check" / "blockers.py"
    result = rewrite_source(
        path.read_text(), RewriteSettings([DropVariable], output=False), str(path)
    )
    assert [(f.code, f.class_name) for f in result.fixes] == [("TSF213", "WrapsVariable")]
    assert [s for s in result.skips if s.code] == []


def test_fixture_refusals() -> None:
    # reset_state() is not compiled: its Variable, and so the import, stay.
    assert "from torch.autograd import Variable" in (FIXTURES / "dprnn.out.py").read_text()
    refused = rewrite((FIXTURES / "am_softmax.in.py").read_text()).skips
    assert [(s.class_name, s.code, "name=" in s.reason) for s in refused] == [
        ("NamedVariable", "TSF213", True)]
