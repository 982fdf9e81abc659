"""einops-to-torch: the planned chains against einops itself (eager and scripted, bit for bit,
on a table of patterns and shapes); patterns einops rejects are refused; the rule's rewrites
in context (lambdas, nested calls, aliases, parenthesised inputs), what it leaves alone, its
refusals with a reason and a check code, and the fixtures failing to script before the rule and
scripting with parity after it. The fixture pairs are validated by tests/test_fixtures.py."""

from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES_ROOT, fixture_pairs, load_module, rule_rewriter
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules._einops_pattern import Unsupported, plan
from tsfix.codemods.rules.einops_to_torch import EinopsToTorch

FIXTURES = FIXTURES_ROOT / "einops-to-torch"
HEADER = ("import torch\nimport einops\nfrom torch import nn\n"
          "from einops import rearrange, repeat, reduce\nclass M(nn.Module):\n")

# (function, pattern, axis lengths, reduction, input shape)
PATTERNS: list[tuple[str, str, dict[str, int], str | None, tuple[int, ...]]] = [
    ("rearrange", "b n (h d) -> b h n d", {"h": 4}, None, (2, 3, 8)),
    ("rearrange", "b h n d -> b n (h d)", {}, None, (2, 4, 3, 5)),
    ("rearrange", "b c h w -> b (h w) c", {}, None, (2, 3, 4, 5)),
    ("rearrange", "b (h w) c -> b c h w", {"h": 2}, None, (2, 6, 3)),
    ("rearrange", "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", {"p1": 2, "p2": 2}, None,
     (2, 3, 4, 6)),
    ("rearrange", "b (h w) -> b h w", {"h": 2, "w": 3}, None, (4, 6)),
    ("rearrange", "(b x y) d -> b x y d", {"x": 2, "y": 3}, None, (12, 5)),
    ("rearrange", "(b h) n d -> b n (h d)", {"h": 2}, None, (4, 3, 5)),
    ("rearrange", "b v c t h w -> b v t c h w", {}, None, (1, 2, 3, 4, 2, 2)),
    ("rearrange", "b n d -> b n d", {}, None, (2, 3, 4)),
    ("rearrange", "b h -> h b", {"h": 3}, None, (2, 3)),
    # length-1 axes: 1 and ()
    ("rearrange", "b j -> b 1 1 j", {}, None, (2, 3)),
    ("rearrange", "b 1 d -> b d", {}, None, (2, 1, 4)),
    ("rearrange", "b () d -> b d ()", {}, None, (2, 1, 4)),
    ("rearrange", "i j h -> () h i j", {}, None, (2, 3, 4)),
    ("rearrange", "b (h 1 w) -> b h w", {"h": 2}, None, (2, 6)),
    # the ellipsis, with several axes and with none
    ("rearrange", "b ... d -> b (...) d", {}, None, (2, 3, 4, 5)),
    ("rearrange", "b ... d -> b (...) d", {}, None, (2, 5)),
    ("rearrange", "... -> 1 ...", {}, None, (2, 3)),
    ("rearrange", "i ... -> i 1 ...", {}, None, (2, 3, 4)),
    ("rearrange", "... d j -> ... (d j)", {}, None, (2, 3, 4)),
    ("rearrange", "... (d j) -> ... d j", {"j": 2}, None, (2, 3, 4)),
    ("rearrange", "b ... d -> b d ...", {}, None, (2, 3, 4, 5)),
    ("rearrange", "b ... d -> b d ...", {}, None, (2, 5)),
    ("rearrange", "b x ... y -> y ... b x", {}, None, (2, 3, 4, 5, 6)),
    ("rearrange", "b x ... y -> y ... b x", {}, None, (2, 3, 6)),
    ("rearrange", "... h d -> ... d h", {}, None, (2, 3, 4)),
    # repeat: new axes named and numbered, in composites, around an ellipsis
    ("repeat", "1 1 d -> b 1 d", {"b": 3}, None, (1, 1, 4)),
    ("repeat", "() n d -> b n d", {"b": 3}, None, (1, 2, 4)),
    ("repeat", "n d -> b n d", {"b": 3}, None, (2, 4)),
    ("repeat", "d -> b 1 d", {"b": 3}, None, (4,)),
    ("repeat", "1 1 d -> b f 1 d", {"b": 2, "f": 3}, None, (1, 1, 4)),
    ("repeat", "b n d -> b n (d j)", {"j": 2}, None, (2, 3, 4)),
    ("repeat", "h w -> h w 3", {}, None, (2, 3)),
    ("repeat", "h w -> (h 2) (w 3)", {}, None, (2, 3)),
    ("repeat", "h w -> (2 h) w", {}, None, (2, 3)),
    ("repeat", "n d -> b x y n d", {"b": 2, "x": 2, "y": 3}, None, (2, 4)),
    ("repeat", "w i j -> w b h i j", {"b": 2, "h": 3}, None, (2, 3, 4)),
    ("repeat", "... d -> b ... d", {"b": 3}, None, (2, 4)),
    ("repeat", "... d -> b ... d", {"b": 3}, None, (4,)),
    ("repeat", "b ... -> b r ...", {"r": 2}, None, (2, 3, 4)),
    ("repeat", "b n -> b n", {}, None, (2, 3)),
    # reduce: every reduction, keepdim-like outputs, anonymous pooling axes
    ("reduce", "b n d -> b d", {}, "mean", (2, 3, 4)),
    ("reduce", "b c h w -> b c", {}, "mean", (2, 3, 4, 5)),
    ("reduce", "b c h w -> b c 1 1", {}, "max", (2, 3, 4, 5)),
    ("reduce", "b c h w -> b c () ()", {}, "sum", (2, 3, 4, 5)),
    ("reduce", "b h n f p -> b h n f", {}, "sum", (2, 3, 4, 5, 2)),
    ("reduce", "b (f patch) d -> b f d", {"patch": 2}, "mean", (2, 6, 4)),
    ("reduce", "b c (h 2) (w 2) -> b c h w", {}, "max", (2, 3, 4, 6)),
    ("reduce", "b c h w -> c", {}, "prod", (2, 3, 4, 5)),
    ("reduce", "b c h w -> b h", {}, "min", (2, 3, 4, 5)),
    ("reduce", "b ... c -> b ...", {}, "mean", (2, 3, 4, 5)),
    ("reduce", "b n d -> d b", {}, "mean", (2, 3, 4)),
    ("reduce", "b n d -> b 1 d", {}, "mean", (2, 3, 4)),
    ("reduce", "b n d -> b d", {}, "any", (2, 3, 4)),
    ("reduce", "(b 2) d -> b", {}, "all", (4, 3)),
]


def _run(kind: str, pattern: str, lengths: dict[str, int], reduction: str | None,
         shape: tuple[int, ...]) -> tuple[Any, Any, Any, str]:
    torch = pytest.importorskip("torch")
    einops = pytest.importorskip("einops")
    x = torch.randn(*shape) if reduction not in ("any", "all") else torch.randn(*shape) > 0
    extra = (reduction,) if reduction else ()
    expected = getattr(einops, kind)(x, pattern, *extra, **lengths)
    chain = plan(kind, pattern, {name: name for name in lengths}, reduction)
    code = "inp" + chain.chain("inp")
    got = eval(code, {"inp": x, **lengths})     # the chain as the rule writes it
    params = ", ".join(["inp: torch.Tensor", *(f"{name}: int" for name in lengths)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        unit = torch.jit.CompilationUnit(f"def f({params}):\n    return {code}\n")
    scripted = unit.f(x, *lengths.values())
    return expected, got, scripted, code


@pytest.mark.parametrize(("kind", "pattern", "lengths", "reduction", "shape"), PATTERNS,
                         ids=[f"{p[0]}:{p[1]}:{p[4]}" for p in PATTERNS])
def test_chain_equals_einops_eager_and_scripted(kind: str, pattern: str,
                                                lengths: dict[str, int],
                                                reduction: str | None,
                                                shape: tuple[int, ...]) -> None:
    torch = pytest.importorskip("torch")
    expected, got, scripted, code = _run(kind, pattern, lengths, reduction, shape)
    for result in (got, scripted):
        assert result.shape == expected.shape, code
        assert result.dtype == expected.dtype, code
        assert torch.equal(result, expected), code


def test_chains_read_like_the_hand_written_code() -> None:
    assert plan("rearrange", "b n (h d) -> b h n d", {"h": "self.heads"}).calls == [
        "unflatten(2, (self.heads, -1))", "transpose(1, 2)"]
    assert plan("repeat", "1 1 d -> b 1 d", {"b": "b"}).calls == ["expand(b, -1, -1)"]
    assert plan("reduce", "b c h w -> b c 1 1", {}, "mean").calls == [
        "mean([2, 3], keepdim=True)"]
    identity = plan("rearrange", "b n d -> b n d", {})
    assert identity.calls == [] and not identity.reads_input_again
    # the given length of an axis that is not split is only checked by einops
    assert plan("rearrange", "b h -> h b", {"h": "4"}).used == set()


# (function, pattern, lengths, reduction, an input einops rejects it on or None when einops
# accepts the pattern and the rule cannot prove it, why)
REFUSED: list[tuple[str, str, dict[str, int], str | None, tuple[int, ...] | None, str]] = [
    ("rearrange", "b (h d) -> b h d", {}, None, None, "only one axis of a composite"),
    ("rearrange", "b ... d -> b d", {}, None, None, "ellipsis on one side only"),
    ("rearrange", "(b ...) d -> b d", {}, None, None, "ellipsis inside parentheses"),
    ("rearrange", "b n d -> b d", {}, None, (2, 3, 4), "on one side only"),
    ("rearrange", "b n -> b n 2", {}, None, (2, 3), "numbered axis other than 1"),
    ("rearrange", "b (n (h d)) -> b n h d", {}, None, (2, 12), "nested parentheses"),
    ("rearrange", "b n n -> b n", {}, None, (2, 3, 3), "named twice"),
    ("rearrange", "b n d", {}, None, (2, 3, 4), "no single '->'"),
    ("rearrange", "b n -> n b", {"k": 2}, None, (2, 3), "not in the pattern"),
    ("repeat", "n d -> b n d", {}, None, (2, 3), "no length given for the new axis b"),
    ("reduce", "b n d -> b d", {}, "median", (2, 3, 4), "not one of"),
    ("reduce", "b n -> b n k", {"k": 2}, "mean", (2, 3), "not in the input of reduce"),
]


@pytest.mark.parametrize(("kind", "pattern", "lengths", "reduction", "shape", "why"), REFUSED,
                         ids=[f"{p[0]}:{p[1]}" for p in REFUSED])
def test_patterns_einops_rejects_or_that_cannot_be_proven_are_refused(
        kind: str, pattern: str, lengths: dict[str, int], reduction: str | None,
        shape: tuple[int, ...] | None, why: str) -> None:
    with pytest.raises(Unsupported, match=why):
        plan(kind, pattern, {name: str(n) for name, n in lengths.items()}, reduction)
    if shape is None:
        return
    torch = pytest.importorskip("torch")
    einops = pytest.importorskip("einops")
    extra = (reduction,) if reduction else ()
    with pytest.raises((einops.EinopsError, ValueError)):
        getattr(einops, kind)(torch.zeros(*shape), pattern, *extra, **lengths)


rewrite = rule_rewriter(EinopsToTorch)


def method(body: str, signature: str = "self, x") -> str:
    return HEADER + f"    def forward({signature}):\n" + textwrap.indent(
        textwrap.dedent(body), "        ")


@pytest.mark.parametrize(("before", "after"), [
    # inside a lambda and a comprehension: still one expression
    ("f = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h=2), x.chunk(3, -1))\n"
     "return [repeat(t, 'n d -> b n d', b=2) for t in f]\n",
     "f = map(lambda t: t.unflatten(2, (2, -1)).transpose(1, 2), x.chunk(3, -1))\n"
     "return [t.unsqueeze(0).expand(2, -1, -1) for t in f]\n"),
    # nested calls, the module imported as einops, keyword arguments
    ("return einops.reduce(rearrange(x, 'b c h w -> b h w c'), pattern='b h w c -> b c',"
     " reduction='mean')\n",
     "return x.permute(0, 2, 3, 1).mean([1, 2])\n"),
    # an input that needs parentheses, and an identity pattern
    ("return rearrange(x + 1, 'b n -> n b') * rearrange(x - 1, 'b n -> b n')\n",
     "return (x + 1).transpose(0, 1) * (x - 1)\n"),
    # a length given by an expression, and one only checked (dropped)
    ("return rearrange(x, 'b (h d) -> h b d', h=x.shape[1] // 2, b=x.shape[0])\n",
     "return x.unflatten(1, (x.shape[1] // 2, -1)).transpose(0, 1)\n"),
])
def test_rewrites_in_context(before: str, after: str) -> None:
    result = rewrite(method(before))
    assert result.text == method(after)
    calls = len(re.findall(r"\b(?:rearrange|repeat|reduce)\(", before))
    assert [f.code for f in result.fixes] == ["TSF236"] * calls
    assert result.changes[0].rule == "einops-to-torch"


def test_alias_import_is_followed() -> None:
    code = ("import torch\nfrom torch import nn\nfrom einops import rearrange as r\n"
            "class M(nn.Module):\n    def forward(self, x):\n"
            "        return r(x, 'b n d -> b d n')\n")
    assert rewrite(code).text == code.replace("r(x, 'b n d -> b d n')", "x.transpose(1, 2)")


@pytest.mark.parametrize(("body", "reason"), [
    ("p = 'b n -> n b' if x.dim() == 2 else 'n b -> b n'\nreturn rearrange(x, p)\n",
     "pattern is not a string literal"),
    ("return rearrange([x, x], 'k b n -> b n k')\n", "list or tuple"),
    ("return reduce(x, 'b n -> b', torch.mean)\n", "reduction is not a string literal"),
    ("return rearrange(x, 'b (h d) -> b h d')\n", "only one axis of a composite"),
    ("return rearrange(x, 'b h -> h b', h=len(self.fc(x)))\n", "skip the call"),
    ("return repeat(self.fc(x), '... d -> b ... d', b=2)\n", "not a name or attribute"),
    ("return rearrange(x, *self.args)\n", "arguments passed with * or **"),
    ("return reduce(x, 'b ... d -> b d', 'mean')\n", "ellipsis on one side only"),
    # A name bound to a list or tuple of tensors: einops stacks it, permute would fail on it
    # (perceiver-pytorch's EnformerAttentionResidual: `block_outputs = list(block_outputs)`).
    ("xs = list((x, x))\nreturn rearrange(xs, 'k b n -> b n k')\n",
     "xs may hold a list or tuple of tensors"),
    ("xs = [x, x]\nreturn rearrange(xs, 'k b n -> b n k')\n", "may hold a list or tuple"),
    ("xs = tuple(t for t in (x, x))\nreturn rearrange(xs, 'k b n -> b n k')\n",
     "may hold a list or tuple"),
])
def test_refusals_leave_the_call_with_a_reason_and_a_check_code(body: str, reason: str) -> None:
    code = method(body)
    result = rewrite(code)
    assert result.text == textwrap.dedent(code) and result.fixes == []
    assert [(s.code, s.class_name) for s in result.skips] == [("TSF236", "M")]
    assert reason in result.skips[0].reason
    assert result.skips[0].message.endswith("is an einops call")


def test_list_typed_input_is_refused() -> None:
    code = method("return rearrange(xs, 'k b -> b k')\n",
                  "self, xs: List[torch.Tensor]").replace("import torch\n",
                                                          "from typing import List\nimport torch\n")
    result = rewrite(code)
    assert not result.changed and "einops stacks a list" in result.skips[0].reason


def test_a_parameter_annotated_as_a_list_or_a_tensor_is_refused() -> None:
    code = method("return rearrange(xs, 'k b -> b k')\n",
                  "self, xs: 'list[torch.Tensor] | torch.Tensor'")
    result = rewrite(code)
    assert not result.changed
    assert "xs may hold a list or tuple of tensors" in result.skips[0].reason


def test_uncompiled_code_and_layers_are_left_alone() -> None:
    code = HEADER + textwrap.indent(textwrap.dedent("""\
        def forward(self, x):
            if not torch.jit.is_scripting():
                print(rearrange(x, 'b n -> n b'))
            return self.show(x) if False else x
        @torch.jit.ignore
        def show(self, x):
            return rearrange(x, 'b n -> n b')
        def helper(self, x):
            return rearrange(x, 'b n -> n b')
        """), "    ")
    result = rewrite(code)
    assert result.text == code and result.fixes == [] and result.skips == []


def test_may_apply_needs_an_einops_import() -> None:
    from tsfix.codemods.facts.prefilter import AstFile

    assert EinopsToTorch.may_apply(AstFile(method("return rearrange(x, 'b n -> n b')\n")))
    assert EinopsToTorch.may_apply(AstFile("import einops as E\n"))
    assert not EinopsToTorch.may_apply(AstFile(
        "from torch import nn\nclass M(nn.Module):\n    def forward(self, x):\n"
        "        return rearrange(x, 'b n -> n b')\n"))


def test_fixtures_fail_to_script_before_and_script_with_parity_after() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("einops")
    classes = {"vit": [("Attention", (2, 5, 16)), ("ViT", (2, 3, 8, 8))],
               "shapes": [("PooledGate", (2, 6, 4, 8)), ("TokenMixer", (2, 3, 5, 4))],
               "registers": [("RegisterViT", (2, 3, 8, 8)), ("FramePacker", (2, 3, 4, 5))]}
    pairs = fixture_pairs(FIXTURES)
    assert {before.name.split(".")[0] for before, _ in pairs} == set(classes)
    for before, after in pairs:
        stem = before.name.split(".")[0]
        original = load_module(before, f"einops_{stem}_in")
        written = load_module(after, f"einops_{stem}_out")
        for name, shape in classes[stem]:
            torch.manual_seed(0)
            reference = getattr(original, name)().eval()
            rewritten = getattr(written, name)().eval()
            rewritten.load_state_dict(reference.state_dict())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                with pytest.raises(Exception, match=r"einops|rearrange|reduce|repeat|pack"):
                    torch.jit.script(reference)
                scripted = torch.jit.script(rewritten)
            x = torch.randn(*shape)
            with torch.no_grad():
                expected = _outputs(reference(x))
                for got in (_outputs(rewritten(x)), _outputs(scripted(x))):
                    assert len(got) == len(expected)
                    for e, g in zip(expected, got, strict=True):
                        assert torch.equal(e, g), (before.name, name)


def _outputs(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, tuple) else (value,)


EINSUMS = [
    ("b i d, b j d -> b i j", [(2, 3, 4), (2, 5, 4)]),
    ("b h i j, b h j d -> b h i d", [(2, 2, 3, 5), (2, 2, 5, 4)]),
    ("b h n d, n r d -> b h n r", [(2, 2, 3, 4), (3, 6, 4)]),
    ("... i d, ... j d -> ... i j", [(2, 3, 4), (2, 5, 4)]),
    ("batch seq dim -> batch dim", [(2, 3, 4)]),
]


@pytest.mark.parametrize(("pattern", "shapes"), EINSUMS, ids=[p for p, _ in EINSUMS])
def test_einsum_becomes_torch_einsum_equal_to_einops(pattern: str,
                                                     shapes: list[tuple[int, ...]]) -> None:
    """einops.einsum names axes with words and takes the pattern last; torch.einsum's letters
    do the same sums (einops itself calls it), eager and scripted, bit for bit."""
    torch = pytest.importorskip("torch")
    einops = pytest.importorskip("einops")
    names = [f"x{k}" for k in range(len(shapes))]
    code = method(f"return einsum({', '.join(names)}, {pattern!r})\n",
                  "self, " + ", ".join(names)).replace(
        "from einops import rearrange, repeat, reduce\n",
        "from einops import rearrange, repeat, reduce, einsum\n")
    result = rewrite(code)
    assert [f.code for f in result.fixes] == ["TSF236"]
    written = result.text.split("return ")[1].strip()
    assert written.startswith('torch.einsum("') and "einsum(x" not in written
    torch.manual_seed(0)
    tensors = [torch.randn(*shape) for shape in shapes]
    expected = einops.einsum(*tensors, pattern)
    scope: dict[str, Any] = {"torch": torch, **dict(zip(names, tensors, strict=True))}
    assert torch.equal(eval(written, scope), expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        unit = torch.jit.CompilationUnit(f"def f({', '.join(names)}):\n    return {written}\n")
    assert torch.equal(unit.f(*tensors), expected)


def test_einsum_with_a_pattern_it_cannot_spell_is_refused() -> None:
    header = "from einops import rearrange, repeat, reduce\n"
    for body, reason in (
            ("return einsum(x, y, p)\n", "pattern is not a string literal"),
            ("return einsum(x, y, 'b (i j), b j -> b i')\n", "einsum takes names and ... only"),
            ("return einsum(x, 'b i, b j -> b i j')\n", "one input per tensor")):
        code = method(body, "self, x, y, p").replace(
            header, "from einops import rearrange, repeat, reduce, einsum\n")
        result = rewrite(code)
        assert result.text == textwrap.dedent(code), body
        assert reason in result.skips[0].reason, result.skips


PACKS = [
    ("b * d", [(2, 3, 4), (2, 4), (2, 2, 5, 4)]),    # one tensor with no axis in the * place
    ("* h w", [(2, 3, 5, 4), (5, 4)]),
    ("b c *", [(2, 3, 4, 5), (2, 3)]),
    ("b *", [(2, 3)]),
    ("a * b c", [(2, 1, 3, 4), (2, 3, 4)]),
]


@pytest.mark.parametrize(("pattern", "shapes"), PACKS, ids=[p for p, _ in PACKS])
def test_pack_and_unpack_equal_einops(pattern: str, shapes: list[tuple[int, ...]],
                                      tmp_path: Path) -> None:
    """pack joins the tensors on the * axis and unpack restores them, as einops does: the
    packed tensor and every unpacked one bit for bit, eager and scripted."""
    torch = pytest.importorskip("torch")
    einops = pytest.importorskip("einops")
    names = [f"x{k}" for k in range(len(shapes))]
    code = method(f"packed, ps = pack([{', '.join(names)}], {pattern!r})\n"
                  f"doubled = packed * 2\n"
                  f"{', '.join(names)}, = unpack(doubled, ps, {pattern!r})\n"
                  f"return packed, {', '.join(names)}\n",
                  "self, " + ", ".join(names)).replace(
        "from einops import rearrange, repeat, reduce\n",
        "from einops import rearrange, repeat, reduce, pack, unpack\n")
    result = rewrite(code)
    assert [f.code for f in result.fixes] == ["TSF236", "TSF236"], result.skips
    assert "pack(" not in result.text.split("def forward")[1].replace("unpack(", "")
    path = tmp_path / f"packed_{abs(hash(pattern))}.py"
    path.write_text(result.text)
    written = load_module(path, path.stem).M()
    torch.manual_seed(0)
    tensors = [torch.randn(*shape) for shape in shapes]
    packed, ps = einops.pack(tensors, pattern)
    expected = (packed, *einops.unpack(packed * 2, ps, pattern))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(written)
    for got in (written(*tensors), scripted(*tensors)):
        assert len(got) == len(expected)
        for e, g in zip(expected, got, strict=True):
            assert e.shape == g.shape and torch.equal(e, g)


@pytest.mark.parametrize(("body", "reason"), [
    # the shapes leave the method: einops' are torch.Size, ours lists
    ("y, ps = pack([x, x], 'b * d')\nreturn y, ps\n", "only unpack() reads"),
    ("return pack([x, x], 'b * d')\n", "only unpack() reads"),
    # shapes from elsewhere may hold -1, which einops infers
    ("return unpack(x, shapes, 'b * d')\n", "a pack() of this method returned"),
    ("y, ps = pack([x * 2, x], 'b * d')\nreturn y\n", "not a name or attribute"),
    ("y, ps = pack([x, x], pattern)\nreturn y\n", "not a string literal"),
    ("y, ps = pack([x, x], 'b * *')\nreturn y\n", "one *"),
    # one of the packs binding the shapes is refused: they may be einops' tuples
    ("if x.dim() > 2:\n    y, ps = pack([x * 2, x], 'b * d')\nelse:\n"
     "    y, ps = pack([x, x], 'b * d')\nreturn unpack(y, ps, 'b * d')\n",
     "only unpack() reads"),
])
def test_pack_and_unpack_it_cannot_prove_are_refused(body: str, reason: str) -> None:
    code = method(body, "self, x, shapes, pattern").replace(
        "from einops import rearrange, repeat, reduce\n",
        "from einops import rearrange, repeat, reduce, pack, unpack\n")
    result = rewrite(code)
    assert result.text == textwrap.dedent(code)
    assert any(reason in skip.reason for skip in result.skips), result.skips


# halonet-pytorch 0.0.5: RelPosEmb.forward calls relative_logits_1d(), whose einops calls
# TorchScript meets while compiling the call (the repair loop names the function).
HALO_FUNCTIONS = '''\
import torch
from einops import rearrange


def rel_to_abs(x):
    b, l, m = x.shape
    x = torch.cat((x, x[:, :, :1]), dim=2)
    return rearrange(x, 'b l c -> b (l c)')


def relative_logits_1d(q, rel_k):
    logits = torch.einsum('bxyd,rd->bxyr', q, rel_k)
    logits = rearrange(logits, 'b x y r -> (b x) y r')
    return rel_to_abs(logits)


def eager_only(x):
    return rearrange(x, 'b n -> n b')
'''


def test_the_einops_calls_of_a_function_the_repair_loop_names_are_rewritten() -> None:
    named = FileContext("halo.py", compiled_functions=frozenset({"relative_logits_1d",
                                                                "rel_to_abs"}))
    result = rewrite_source(HALO_FUNCTIONS, RewriteSettings([EinopsToTorch]), named)

    assert "    return x.flatten(1)\n" in result.text
    assert "    logits = logits.flatten(0, 1)\n" in result.text
    # Only the functions named: another one of the file keeps its call.
    assert result.text.split("def eager_only")[1] == HALO_FUNCTIONS.split("def eager_only")[1]
    assert sorted((c.class_name, c.lines) for c in result.changes) == [
        ("rel_to_abs()", (5, 8)), ("relative_logits_1d()", (11, 14))]
    assert sorted((f.class_name, f.line) for f in result.fixes) == [
        ("rel_to_abs()", 8), ("relative_logits_1d()", 13)]
    # A file the loop names nothing in is left alone (the run's rules rewrite classes).
    assert not rewrite_source(HALO_FUNCTIONS, RewriteSettings([EinopsToTorch]), "halo.py").changed
    assert not rewrite_source(result.text, RewriteSettings([EinopsToTorch]), named).changed


def test_a_function_parameter_annotated_as_a_list_is_not_rearranged() -> None:
    """einops stacks a list first: a function's parameter types come from its annotations."""
    code = ("from typing import List\nimport torch\nfrom einops import rearrange\n\n\n"
            "def merge(xs: List[torch.Tensor]):\n    return rearrange(xs, 'n b -> b n')\n")
    result = rewrite_source(code, RewriteSettings([EinopsToTorch]),
                            FileContext("m.py", compiled_functions=frozenset({"merge"})))

    assert not result.changed
    [skip] = result.skips
    assert (skip.class_name, skip.line, skip.code) == ("merge()", 7, "TSF236")
    assert "is a List[Tensor], not a tensor" in skip.reason, skip.reason


@pytest.mark.slow
def test_the_rewritten_functions_give_einops_outputs_and_script(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("einops")
    named = FileContext("halo.py", compiled_functions=frozenset({"relative_logits_1d",
                                                                "rel_to_abs"}))
    (tmp_path / "halo_in.py").write_text(HALO_FUNCTIONS)
    (tmp_path / "halo_out.py").write_text(
        rewrite_source(HALO_FUNCTIONS, RewriteSettings([EinopsToTorch]), named).text)
    original = load_module(tmp_path / "halo_in.py", "_et_halo_in")
    rewritten = load_module(tmp_path / "halo_out.py", "_et_halo_out")
    q, rel_k = torch.randn(2, 3, 4, 5), torch.randn(7, 5)

    expected = original.relative_logits_1d(q, rel_k)
    assert torch.equal(rewritten.relative_logits_1d(q, rel_k), expected)
    with pytest.raises(Exception, match="variable number of arguments"):
        torch.jit.script(original.relative_logits_1d)
    assert torch.equal(torch.jit.script(rewritten.relative_logits_1d)(q, rel_k), expected)


def test_a_pattern_held_in_a_local_bound_once_to_a_literal_is_read_from_it() -> None:
    """nystrom-attention: `landmark_einops_eq = '... (n l) d -> ... n d'`, then
    `reduce(q, landmark_einops_eq, 'sum', l=l)` twice."""
    result = rewrite(method("""\
        eq = '... (n l) d -> ... n d'
        q = reduce(x, eq, 'sum', l=2)
        return reduce(q, eq, 'sum', l=2)
    """))
    assert result.text.count("unflatten(-2, (-1, 2)).sum(-2)") == 2, result.text
    assert not result.skips

    rebound = rewrite(method("""\
        eq = '... (n l) d -> ... n d'
        if x.dim() > 3:
            eq = '... (n l) -> ... n'
        return reduce(x, eq, 'sum', l=2)
    """))
    assert not rebound.changed
    [skip] = rebound.skips
    assert "the pattern is not a string literal (nor a local bound once to one)" in skip.reason
