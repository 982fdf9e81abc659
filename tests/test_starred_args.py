"""starred-args: each starred form it rewrites, each it refuses (with the reason and check code),
compiled methods only (export yes, ignore no), check findings. The fixture pairs are
tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, load_module, rule_rewriter
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
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
    result = rewrite_source(
        path.read_text(), RewriteSettings([StarredArgs], output=False), str(path)
    )
    assert sorted((f.code, f.class_name, f.message) for f in result.fixes) == [
        ("TSF115", "StarredTarget", "*rest unpacked in forward()"),
        ("TSF214", "StarredCall", "*shape in a call in forward()")]
    assert [s for s in result.skips if s.code] == []


def test_fixture_refusals() -> None:
    result = rewrite((FIXTURES / "refused.in.py").read_text())
    assert not result.changed
    assert [(s.class_name, s.line, s.code) for s in result.skips] == [
        ("Reshaper", 14, "TSF214"), ("Reshaper", 15, "TSF214"), ("Checkpointed", 24, "TSF214")]


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "names"), [
    ("attention", ("SelfAttention", "MultiHeadProjection")),
    ("vit_blocks", ("CrossAttention", "ConvAttention", "PositionalTokens", "ShiftedPatches",
                    "RelativeGrid")),
])
def test_originals_fail_with_the_static_length_error(fixture: str, names: tuple[str, ...]
                                                     ) -> None:
    torch = pytest.importorskip("torch")
    original = load_module(FIXTURES / f"{fixture}.in.py", f"_sa_{fixture}_in")
    rewritten = load_module(FIXTURES / f"{fixture}.out.py", f"_sa_{fixture}_out")
    for name in names:
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
    ("*_, hh, ww = x.shape", "hh, ww = x.shape[-2], x.shape[-1]"),
    ("b, *_ = x.size()", "b = x.size(0)"),
    # A tensor split in pieces: unpacked as it is, in its own statement.
    ("q, k, v = (x + 1, *x.chunk(2, dim=-1))", "q = x + 1\n    k, v = x.chunk(2, dim=-1)"),
    ("q, k, v = (*torch.split(x, 2), x)", "q, k = torch.split(x, 2)\n    v = x"),
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
    ("a, *rest = *x.shape, 1", "a value other than the shape's elements would go to the"),
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


def test_read_starred_target_takes_the_middle_of_the_shape_as_a_list() -> None:
    result = rewrite(model("def forward(self, x):\n    *lead, w = x.shape\n"
                           "    return x.view(lead + [w])\n"))
    assert result.text == model("def forward(self, x):\n"
                                "    lead, w = list(x.shape[:-1]), x.shape[-1]\n"
                                "    return x.view(lead + [w])\n")
    result = rewrite(model("def forward(self, x):\n    b, *mid, w = *x.size(), 1\n"
                           "    return x.view([b] + mid)\n"))
    assert "b, mid, w = x.size(0), list(x.size()[1:]), 1" in result.text


@pytest.mark.parametrize(("line", "reason"), [
    ("q, k, v = (x, *x.chunk(2), x)", "is a list of unknown length"),
    ("q, k = (x, *x.chunk(1))", "is a list of unknown length"),
    ("*_, h, w = self.make(x).shape", "of a name only"),
])
def test_unpackings_of_lists_and_shapes_refused(line: str, reason: str) -> None:
    result = rewrite(model(f"def forward(self, x):\n    {line}\n    return x\n"))
    assert not result.changed, result.text
    [skip] = result.skips
    assert skip.code == "TSF115" and reason in skip.reason


# -- a starred chunk in a display bound to a name: qkv = (q, *kv.chunk(2)) ---------------------

def test_chunk_in_a_display_is_indexed() -> None:
    result = rewrite(model("""
        def forward(self, x):
            # the queries, keys and values
            qkv = (self.to_q(x), *self.to_kv(x).chunk(2, dim=-1))  # heads
            q, k, v = [t * 2 for t in qkv]
            pair = [x, *torch.chunk(x, chunks=2, dim=-1), self.scale]
            a, b, c, d = pair
            return q + k + v + a + b + c + d
        """, init="self.to_q = nn.Linear(4, 4)\nself.to_kv = nn.Linear(4, 8)\nself.scale = 2\n"))
    assert "\n".join(result.text.splitlines()[11:19]) == textwrap.indent(textwrap.dedent("""\
        # the queries, keys and values
        qkv_0 = self.to_q(x)
        qkv_chunks = self.to_kv(x).chunk(2, dim=-1)
        qkv = (qkv_0, qkv_chunks[0], qkv_chunks[1])  # heads
        q, k, v = [t * 2 for t in qkv]
        pair_chunks = torch.chunk(x, chunks=2, dim=-1)
        pair = [x, pair_chunks[0], pair_chunks[1], self.scale]
        a, b, c, d = pair"""), "        ")
    assert [(f.code, f.line) for f in result.fixes] == [("TSF115", 13), ("TSF115", 15)]
    assert result.changes[0].notes == [
        f"line {line}: `{name}` indexes the 2 pieces of the chunk: where the chunk gives fewer "
        "(its dimension too small to split so), indexing raises IndexError where unpacking "
        f"`{name}` raised ValueError" for line, name in ((13, "qkv"), (15, "pair"))]


@pytest.mark.parametrize(("lines", "reason"), [
    ("qkv = (x, *x.chunk(2))\n    y = qkv[0]", "`qkv` is used other than unpacked into 3 names"),
    ("qkv = (x, *x.chunk(2))\n    a, b = qkv", "`qkv` is used other than unpacked into 3 names"),
    ("qkv = (x, *x.chunk(2))\n    qkv = (x, x, x)\n    a, b, c = qkv",
     "`qkv` is bound more than once"),
    ("qkv = (x, *x.unbind(0))\n    a, b, c = qkv", "the length of `*x.unbind(0)` is not known"),
    ("qkv = (x, *x.chunk(n))\n    a, b, c = qkv", "the length of `*x.chunk(n)` is not known"),
    ("qkv = (*x.chunk(2), *x.chunk(2))\n    a, b, c, d = qkv", "several starred values"),
    ("qkv = (x, *x.chunk(2)); y = 1\n    a, b, c = qkv", "shares its line"),
])
def test_chunk_display_refusals(lines: str, reason: str) -> None:
    result = rewrite(model(f"def forward(self, x, n: int):\n    {lines}\n    return x\n"))
    assert not result.changed, result.text
    [skip] = result.skips
    assert skip.code == "TSF115" and reason in skip.reason, skip.reason


# -- a starred list joined: torch.cat((x, *xs)) -> torch.cat([x] + xs) --------------------------

@pytest.mark.parametrize(("line", "expected"), [
    ("torch.cat((x, *shifted), dim=1)", "torch.cat([x] + shifted, dim=1)"),
    ("torch.stack([*ys, x, x])", "torch.stack(list(ys) + [x, x])"),
    ("torch.cat((x, *[y * 2 for y in ys], x))", "torch.cat([x] + [y * 2 for y in ys] + [x])"),
    ("torch.cat((x, *x.unbind(0)))", "torch.cat([x] + list(x.unbind(0)))"),
])
def test_starred_list_joined(line: str, expected: str) -> None:
    forward = ("def forward(self, x, ys: List[torch.Tensor]):\n"
               "    shifted = [x + 1 for _ in range(2)]\n    return {}\n")
    result = rewrite(model(forward.format(line)))
    assert result.text == model(forward.format(expected))
    assert [(f.code, f.line) for f in result.fixes] == [("TSF115", 7)]
    before, after = (cst.parse_expression(text) for text in (line, expected))
    assert isinstance(before, cst.Call) and isinstance(after, cst.Call)
    module = cst.Module([])
    assert result.changes[0].summary == (
        f"line 7: `{module.code_for_node(before.args[0].value)}` -> "
        f"`{module.code_for_node(after.args[0].value)}`")


@pytest.mark.parametrize(("line", "reason"), [
    ("torch.cat((x, *t))", "cannot tell that `t` is a list"),
    ("torch.cat((x, *ys, *pair))", "a tuple and a list are both starred"),
])
def test_starred_join_refusals(line: str, reason: str) -> None:
    forward = (f"def forward(self, x, t, ys: List[torch.Tensor]):\n    pair = (x, x)\n"
               f"    return {line}\n")
    result = rewrite(model(forward))
    assert not result.changed, result.text
    [skip] = result.skips
    assert skip.code == "TSF115" and reason in skip.reason, skip.reason


def test_starred_tuples_joined_already_script() -> None:
    result = rewrite(model("def forward(self, x):\n    pair = (x, x)\n"
                           "    return torch.cat((x, *pair))\n"))
    assert not result.changed and not result.skips


def test_meshgrid_takes_the_tensors_as_a_list() -> None:
    result = rewrite(model("""
        def forward(self, x, ys: List[torch.Tensor]):
            spatial = x.shape[1:]
            grid = torch.meshgrid(*(torch.arange(s) for s in spatial), indexing="ij")
            other = torch.meshgrid(*ys)
            return grid[0] + other[0]
        """))
    assert 'grid = torch.meshgrid([torch.arange(s) for s in spatial], indexing="ij")' in result.text
    assert "other = torch.meshgrid(list(ys))" in result.text
    assert [(f.code, f.line) for f in result.fixes] == [("TSF214", 8), ("TSF214", 9)]
    refused = rewrite(model("def forward(self, x):\n    return torch.meshgrid(x, *x.unbind(0))\n"))
    assert not refused.changed
    assert "no other positional argument" in refused.skips[0].reason


@pytest.mark.parametrize("lines", [
    "qkv = (\n        x,  # the queries\n        *x.chunk(2),\n    )\n    q, k, v = qkv",
    "y = torch.cat((\n        x,  # first\n        *[x, x],\n    ))",
    "y = x.view(\n        *x.shape[:2],  # batch, tokens\n        -1)",
    "*_, h, w = (\n        x.shape  # all of it\n    )",
])
def test_comments_inside_a_spelled_value_are_not_lost(lines: str) -> None:
    result = rewrite(model(f"def forward(self, x):\n    {lines}\n    return x\n"))
    assert not result.changed, result.text
    assert [s.reason.rpartition(": ")[2] for s in result.skips] == [
        "a comment inside it would be lost when it is spelled out"]


# -- a module-level function compiled from another file (the repair loop names it) --------------

SPECTRO = textwrap.dedent('''\
    import torch as th


    def spectro(x, n_fft: int = 512, hop_length: int = 128):
        *other, length = x.shape
        x = x.reshape(-1, length)
        z = th.stft(x, n_fft, hop_length, window=th.hann_window(n_fft).to(x),
                    return_complex=True)
        _, freqs, frame = z.shape
        return z.view(*other, freqs, frame)


    def eager_only(x):
        *other, length = x.shape
        return x.view(*other, length)
''')


def test_a_function_compiled_from_another_file_is_rewritten() -> None:
    """demucs' spec.py: HDemucs' forward calls spectro(), whose starred target and starred
    view stop TorchScript; the repair loop names the function (Rule.compiled_functions)."""
    result = rewrite_source(
        SPECTRO,
        RewriteSettings([StarredArgs]),
        FileContext("spec.py", compiled_functions={"spectro"}),
    )
    spectro = result.text.split("def eager_only")[0]
    assert "other, length = list(x.shape[:-1]), x.shape[-1]" in spectro
    assert "return z.view(list(other) + [freqs, frame])" in spectro
    # Only the function named: another one of the file is left as it is.
    assert result.text.split("def eager_only")[1] == SPECTRO.split("def eager_only")[1]
    [change] = result.changes
    assert change.class_name == "spectro()" and change.lines == (4, 10)
    assert sorted((f.code, f.line) for f in result.fixes) == [("TSF115", 5), ("TSF214", 10)]
    assert not result.skips
    assert not rewrite_source(SPECTRO, RewriteSettings([StarredArgs]), "spec.py").changed
    again = rewrite_source(
        result.text,
        RewriteSettings([StarredArgs]),
        FileContext("spec.py", compiled_functions={"spectro"}),
    )
    assert not again.changed


@pytest.mark.slow
def test_the_rewritten_function_scripts_with_the_originals_outputs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    result = rewrite_source(
        SPECTRO,
        RewriteSettings([StarredArgs]),
        FileContext("spec.py", compiled_functions={"spectro"}),
    )
    (tmp_path / "spec_in.py").write_text(SPECTRO)
    (tmp_path / "spec_out.py").write_text(result.text)
    original = load_module(tmp_path / "spec_in.py", "_sa_spec_in")
    rewritten = load_module(tmp_path / "spec_out.py", "_sa_spec_out")
    with pytest.raises(Exception, match=r"[Ss]tarred|cannot statically infer"):
        torch.jit.script(original.spectro)
    scripted = torch.jit.script(rewritten.spectro)
    x = torch.randn(2, 3, 2048)
    torch.testing.assert_close(scripted(x), original.spectro(x), rtol=1e-4, atol=1e-5)


def test_a_function_local_built_by_repeating_a_list_is_passed_whole() -> None:
    """halonet-pytorch's expand_dim(): the local `expand_shape = [-1] * len(t.shape)` is a
    List[int] (a function's locals are typed as a method's are), so `t.expand(*expand_shape)`
    passes the list."""
    code = textwrap.dedent("""\
        import torch


        def expand_dim(t, dim: int, k: int):
            t = t.unsqueeze(dim=dim)
            expand_shape = [-1] * len(t.shape)
            expand_shape[dim] = k
            return t.expand(*expand_shape)
        """)
    result = rewrite_source(code, RewriteSettings([StarredArgs]),
                            FileContext("halo.py", compiled_functions={"expand_dim"}))

    assert result.text == code.replace("t.expand(*expand_shape)", "t.expand(expand_shape)")
    assert [(f.code, f.line) for f in result.fixes] == [("TSF214", 8)]
