"""dtype-methods: x.bool() / x.bfloat16() and torch.finfo(dtype).<field> in compiled code."""

from __future__ import annotations

import textwrap

import pytest
from conftest import rule_rewriter
from tsfix.codemods.rules.dtype_methods import _DTYPES, _FINFO, DtypeMethods

rewrite = rule_rewriter(DtypeMethods)

HEAD = "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n"


def method(*lines: str) -> str:
    return HEAD + "    def forward(self, x):\n" + "".join(f"        {line}\n" for line in lines)


@pytest.mark.parametrize(("line", "expected"), [
    ("return (x > 0).bool()", "return (x > 0).to(torch.bool)"),
    ("return x.bfloat16()", "return x.to(torch.bfloat16)"),
    ("return x.bool().bfloat16()", "return x.to(torch.bool).to(torch.bfloat16)"),
    ("return x + torch.finfo(torch.half).tiny", "return x + 6.103515625e-05"),
    ("return x.clamp(min=torch.finfo(torch.float64).min)",
     "return x.clamp(min=-1.7976931348623157e308)"),
])
def test_rewrites(line: str, expected: str) -> None:
    result = rewrite(method(line))
    assert result.text == method(expected)
    assert [f.code for f in result.fixes] == ["TSF245"] * len(result.fixes) != []


@pytest.mark.parametrize(("line", "reason"), [
    ("return x + torch.finfo(self.kind()).eps",
     "forward(): `torch.finfo(self.kind()).eps` left alone: `self.kind()` is neither a "
     "floating dtype written out nor the dtype of a name or attribute"),
    ("info = torch.finfo(x.dtype)",
     "forward(): `torch.finfo(x.dtype)` left alone: torch.finfo(...) used other than by "
     "reading max/min/eps/tiny"),
])
def test_refusals_say_why(line: str, reason: str) -> None:
    code = method(line, "return x")
    result = rewrite(code)
    assert result.text == code
    assert [(s.code, s.reason) for s in result.skips] == [("TSF245", reason)]


def test_the_dtype_of_a_tensor_becomes_a_choice_and_a_note() -> None:
    result = rewrite(method("return x.masked_fill(x > 0, -torch.finfo(x.dtype).max)"))
    [change] = result.changes
    assert "x.dtype == torch.float16" in result.text
    assert change.notes == ["line 7: `x.dtype` of an integer or bool tensor: torch.finfo "
                            "raised TypeError, the choice gives float32's number"]


def test_not_compiled_code_is_left() -> None:
    code = HEAD + textwrap.indent(textwrap.dedent("""\
        def forward(self, x):
            return x

        @torch.jit.ignore
        def mask(self, x):
            return x.bool()
    """), "    ")
    assert rewrite(code).text == code


def test_the_numbers_are_torchs() -> None:
    torch = pytest.importorskip("torch")
    for kind, fields in _FINFO.items():
        info = torch.finfo(getattr(torch, kind))
        assert {field: getattr(info, field) for field in fields} == fields
    for spelled, kind in _DTYPES.items():
        assert torch.finfo(eval(spelled)).max == _FINFO[kind]["max"], spelled
