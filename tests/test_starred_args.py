"""starred-args: each starred form it rewrites, each it refuses (with the reason and check code),
compiled methods only (export yes, ignore no), check findings. The fixture pairs are
tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, load_module, rule_rewriter
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.rules.starred_args import StarredArgs

FIXTURES = FIXTURES_ROOT / "starred-args"
HEADER = "from typing import Dict, List, Tuple\nimport torch\nimport torch.nn as nn\n"


rewrite = rule_rewriter(StarredArgs)


def model(forward: str, init: str = "") -> str:
    init_block = ("def __init__(self):\n    super().__init__()\n"
                  + textwrap.indent(textwrap.dedent(init), "    ")) if init else ""
    return (HEADER + "class M(nn.Module):\n"
            + textwrap.indent(init_block + textwrap.dedent(forward), "    "))


@pytest.mark.parametrize(("signature", "line", "expected"), [
    ("x, shape: List[int]", "x.view(*shape)", "x.view(shape)"),
    ("x", "x.view(*x.shape[:2], -1)", "x.view(x.shape[0], x.shape[1], -1)"),
    ("x", "x.view(*x.size()[1:3], -1)", "x.view(x.size(1), x.size(2), -1)"),
    ("x", "x.reshape(*x.shape[:-1], 2, -1)", "x.reshape(list(x.shape[:-1]) + [2, -1])"),
    ("x", "x.expand(2, *x.shape)", "x.expand([2] + list(x.shape))"),
    ("x, dims: List[int]", "x.permute(0, *dims)", "x.permute([0] + list(dims))"),
    ("x", "x.view(*[2, -1])", "x.view(2, -1)"),
    ("x, size: List[int]", "torch.zeros(*size, dtype=x.dtype)",
     "torch.zeros(size, dtype=x.dtype)"),
    ("x", "x.new_ones(*x.size())", "x.new_ones(x.size())"),
    ("x", "x.view(*(x.shape[:-1] + (2, -1)))", "x.view((x.shape[:-1] + (2, -1)))"),
])
def test_rewritten_forms(signature: str, line: str, expected: str) -> None:
    result = rewrite(model(f"def forward(self, {signature}):\n    return {line}\n"))
    assert result.text == model(f"def forward(self, {signature}):\n    return {expected}\n")
    change = result.changes[0]
    assert change.rule == "starred-args" and change.class_name == "M"
    assert change.summary == f"line 6: `{line}` -> `{expected}`"
    call = cst.parse_expression(line)
    assert isinstance(call, cst.Call)
    starred = ["*" + cst.Module([]).code_for_node(a.value) for a in call.args if a.star == "*"]
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF214", 6, f"{arg} in a call in forward()") for arg in starred]


def test_shape_locals_and_list_attributes() -> None:
    result = rewrite(model("""
        def forward(self, x):
            new_shape = x.size()[:-1] + (self.heads, -1)
            out = x.view(*new_shape)
            return out.permute(*self.order)
        """, init="self.heads = 2\nself.order = [0, 2, 1, 3]\n"))
    assert result.text == model("""
        def forward(self, x):
            new_shape = x.size()[:-1] + (self.heads, -1)
            out = x.view(new_shape)
            return out.permute(self.order)
        """, init="self.heads = 2\nself.order = [0, 2, 1, 3]\n")


def test_attributes_typed_by_their_annotation_or_an_init_local() -> None:
    init = ("order = [0, 2, 1]\nself.order = order\nself.dims: List[int] = []\n"
            "self.dims.append(4)\n")
    forward = "def forward(self, x):\n    return x.permute({}self.order).view({}self.dims)\n"
    result = rewrite(model(forward.format("*", "*"), init))
    assert result.text == model(forward.format("", ""), init)


def test_nested_calls_keep_both_rewrites() -> None:
    result = rewrite(model("""
        def forward(self, x, a: List[int], b: List[int]):
            return x.view(*a).permute(*b)
        """))
    assert result.text == model("""
        def forward(self, x, a: List[int], b: List[int]):
            return x.view(a).permute(b)
        """)
    # The outer call first (the rule reports calls in preorder).
    assert [f.message for f in result.fixes] == ["*b in a call in forward()",
                                                 "*a in a call in forward()"]


def test_spelled_shape_slices_are_noted() -> None:
    result = rewrite(model("def forward(self, x):\n    return x.view(*x.shape[:2], -1)\n"))
    assert result.changes[0].notes == [
        "line 6: shape slices are spelled out element by element; a tensor with fewer "
        "dimensions than the slice bound now raises IndexError"]
    plain = rewrite(model("def forward(self, x, s: List[int]):\n    return x.view(*s)\n"))
    assert plain.changes[0].notes == []


def test_helper_reached_from_forward_and_unreached_method() -> None:
    result = rewrite(model("""
        def forward(self, x):
            return self.split(x)
        def split(self, x):
            return x.view(*x.shape[:1], -1)
        def debug(self, x):
            return x.view(*x.shape[:1], -1)
        """))
    assert result.text == model("""
        def forward(self, x):
            return self.split(x)
        def split(self, x):
            return x.view(x.shape[0], -1)
        def debug(self, x):
            return x.view(*x.shape[:1], -1)
        """)
    assert [(f.line, f.message) for f in result.fixes] == [
        (9, "*x.shape[:1] in a call in split()")]


def test_exported_method_is_rewritten() -> None:
    """Issue 14: check reported `*x.shape` in an export method as fixable by starred-args,
    which did not visit export methods."""
    result = rewrite(model("""
        def forward(self, x):
            return x
        @torch.jit.export
        def flatten(self, x):
            return x.reshape(*x.shape[:2], -1)
        """))
    assert result.text == model("""
        def forward(self, x):
            return x
        @torch.jit.export
        def flatten(self, x):
            return x.reshape(x.shape[0], x.shape[1], -1)
        """)
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF214", 10, "*x.shape[:2] in a call in flatten()")]
    assert result.skips == []


def test_ignored_helper_and_eager_only_branch_are_left_alone() -> None:
    code = model("""
        def forward(self, x):
            if not torch.jit.is_scripting():
                x = x.view(*x.shape[:1], -1)
            return self.debug(x)
        @torch.jit.ignore
        def debug(self, x, shape):
            return x.view(*shape)
        """)
    result = rewrite(code)
    assert not result.changed and result.text == code
    assert result.fixes == [] and result.skips == []


@pytest.mark.parametrize("forward", [
    "def forward(self, x, s: Tuple[int, int]):\n    return x.view(*s)\n",
    "def forward(self, x):\n    s = (x.size(0), -1)\n    return x.view(*s)\n",
    "def forward(self, x):\n    return x.view(*(2, -1))\n",
])
def test_tuples_already_script_and_are_left_alone(forward: str) -> None:
    result = rewrite(model(forward))
    assert not result.changed and result.skips == [] and result.fixes == []


@pytest.mark.parametrize(("forward", "init", "reason"), [
    ("def forward(self, x, shape):\n    return x.view(*shape)\n", "",
     "`shape` is an unannotated parameter, which TorchScript types as Tensor"),
    ("def forward(self, x):\n    return x.view(*self.target)\n", "self.target = make()\n",
     "cannot tell that `self.target` is a list or tuple of ints"),
    ("def forward(self, x):\n    return x.permute(0, *range(1, x.dim()))\n", "",
     "cannot tell that `range(1, x.dim())` is a list or tuple of ints"),
    ("def forward(self, x, d: List[int]):\n    return x.transpose(*d)\n", "",
     "`x.transpose` does not take the sequence itself"),
    ("def forward(self, x, xs: List[torch.Tensor]):\n    return torch.cat(*xs)\n", "",
     "`xs` is List[Tensor], not a sequence of ints"),
    ("def forward(self, *inputs):\n    return self.block(*inputs)\n", "",
     "`inputs` is a *args tuple of unknown length"),
    ("def forward(self, x, s: List[int], kw: Dict[str, int]):\n    return x.view(*s, **kw)\n",
     "", "`**` arguments are not rewritten"),
])
def test_refusals_are_reported(forward: str, init: str, reason: str) -> None:
    result = rewrite(model(forward, init))
    assert not result.changed and result.fixes == []
    assert len(result.skips) == 1, result.skips
    skip = result.skips[0]
    assert skip.reason.startswith("forward(): `")
    assert reason in skip.reason, skip.reason
    assert skip.code == "TSF214" and skip.message.endswith(" in a call in forward()")


def test_unannotated_parameter_used_as_tensor_is_refused_too() -> None:
    """The one parameter policy types `shape` Tensor here (the body calls a tensor method on
    it) and unknown above; either way the refusal asks for an annotation."""
    result = rewrite(model("""
        def forward(self, x, shape):
            return x.view(*shape) + shape.sum()
        """))
    assert not result.changed
    assert [(s.code, s.message) for s in result.skips] == [
        ("TSF214", "*shape in a call in forward()")]
    assert "`shape` is an unannotated parameter" in result.skips[0].reason


def test_nested_function_is_not_looked_into() -> None:
    # A checkpointing closure: the nested def is check's TSF106; its *inputs are its own.
    code = model("""
        def forward(self, x):
            def custom_forward(*inputs):
                return self.block(*inputs)
            return custom_forward(x)
        """)
    result = rewrite(code)
    assert result.text == code and result.skips == [] and result.fixes == []


def test_only_keyword_unpacking_is_not_a_starred_site() -> None:
    # **kw alone is the linter's TSF110, not a starred argument.
    result = rewrite(model("def forward(self, x, kw: Dict[str, int]):\n    return x.view(**kw)\n"))
    assert not result.changed and result.skips == [] and result.fixes == []


def test_check_findings_on_the_blockers_fixture() -> None:
    path = FIXTURES_ROOT / "check" / "blockers.py"
    result = rewrite_source(path.read_text(), str(path), [StarredArgs], output=False)
    assert [(f.code, f.class_name, f.message) for f in result.fixes] == [
        ("TSF214", "StarredCall", "*shape in a call in forward()")]
    assert [s for s in result.skips if s.code] == []


def test_fixture_refusals() -> None:
    result = rewrite((FIXTURES / "refused.in.py").read_text())
    assert not result.changed
    assert [(s.class_name, s.line, s.code) for s in result.skips] == [
        ("Reshaper", 14, "TSF214"), ("Reshaper", 15, "TSF214"), ("Checkpointed", 24, "TSF214")]


@pytest.mark.slow
def test_originals_fail_with_the_static_length_error() -> None:
    torch = pytest.importorskip("torch")
    original = load_module(FIXTURES / "attention.in.py", "_sa_attention_in")
    rewritten = load_module(FIXTURES / "attention.out.py", "_sa_attention_out")
    for name in ("SelfAttention", "MultiHeadProjection"):
        with pytest.raises(Exception, match="cannot statically infer the expected size"):
            torch.jit.script(getattr(original, name)())
        torch.jit.script(getattr(rewritten, name)())


# -- starred unpacking: b, n, _, h = *x.shape, self.heads ----------------------------------------

@pytest.mark.parametrize(("line", "expected"), [
    ("b, n, _, h = *x.shape, self.heads", "b, n, _ = x.shape\n    h = self.heads"),
    ("b, n, device = *x.shape[:2], x.device", "b, n = x.shape[:2]\n    device = x.device"),
    ("h, b, n = self.heads, *x.size()", "h = self.heads\n    b, n = x.size()"),
    ("b, n, c = *s, self.heads", "b, n = s\n    c = self.heads"),
    ("*_, hh, ww, h = *x.shape, self.heads", "hh, ww, h = x.shape[-2], x.shape[-1], self.heads"),
    ("b, n, *_, h = *x.shape, self.heads", "b, n, h = x.shape[0], x.shape[1], self.heads"),
    ("b, x = *x.shape[:1], x + 1", "b, x = x.shape[0], x + 1"),
])
def test_starred_unpacking_is_spelled_out(line: str, expected: str) -> None:
    forward = "def forward(self, x, s: List[int]):\n    {}\n    return x\n"
    result = rewrite(model(forward.format(line), init="self.heads = 2\n"))
    assert result.text == model(forward.format(expected), init="self.heads = 2\n")
    assert [(f.code, f.line) for f in result.fixes] == [("TSF115", 9)]
    assert result.changes[0].summary == (
        f"line 9: `{line}` -> `{expected.replace(chr(10) + '    ', '; ')}`")
    assert rewrite(result.text).changed is False


def test_indexed_whole_shape_is_noted() -> None:
    result = rewrite(model("def forward(self, x):\n    *_, w = *x.shape,\n    return w\n"))
    assert "w = x.shape[-1]" in result.text
    assert result.changes[0].notes == [
        "line 6: the shape is indexed element by element; a tensor of another rank than the "
        "names give now raises IndexError or is accepted, where unpacking raised ValueError"]


@pytest.mark.parametrize(("line", "reason"), [
    ("a, *rest = *x.shape, 1", "the starred target `rest` is read"),
    ("a, b = *x.shape, *x.shape", "several starred values"),
    ("self.a, b = *x.shape,", "a target is not a plain name"),
    ("a, b, c = *x.shape[:2],", "3 names for the 2 elements of `x.shape[:2]`"),
    ("a, b = *x.shape, 1, 2, 3", "2 names for at least 3 values"),
    ("*_, a = *x.shape[1:3],", "a starred target takes the middle of a whole"),
    ("a, b = *self.make(x).shape, 1", "cannot be spelled element by element"),
    ("a, b = *x[0].size(), 1", "cannot be spelled element by element"),
    ("a, b = *t,", "`t` is an unannotated parameter"),
])
def test_starred_unpacking_refusals(line: str, reason: str) -> None:
    forward = f"def forward(self, x, t):\n    {line}\n    return rest if False else x\n"
    result = rewrite(model(forward))
    assert not result.changed, result.text
    [skip] = result.skips
    assert skip.code == "TSF115" and reason in skip.reason
