"""variable-arguments: keyword-only parameters made ordinary, a **kwargs passed on to a submodule
of the file expanded, unused *args/**kwargs removed when the tree proves no caller passes extra
arguments (else only with --unsafe-fixes), read ones refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, load_module
from tsfix import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.variable_arguments import VariableArguments

HEADER = "import torch\nfrom torch import nn\n\n\n"

BLOCK = HEADER + textwrap.dedent("""\
    class Block(nn.Module):
        def forward(self, x, *args, scale=1.0, **kwargs):
            return x * scale
    """)

ENCODER = textwrap.dedent("""\
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block({args})
    """)


def _rewrite(code: str, path: str = "model.py", *, unsafe: bool = False) -> Rewrite:
    return rewrite_source(code, RewriteSettings([VariableArguments], unsafe_fixes=unsafe), path)


def _findings(result: Rewrite) -> list[tuple[str, int, str]]:
    found = [(f.code, f.line, "fixed") for f in result.fixes]
    found += [(s.code, s.line, s.reason) for s in result.skips if s.code]
    return sorted(found)


def _tree(tmp_path: Path, code: str, **others: str) -> Path:
    path = tmp_path / "model.py"
    path.write_text(code)
    for name, text in others.items():
        (tmp_path / f"{name}.py").write_text(text)
    return path


def test_unknown_callers_keep_unused_variadics_without_unsafe_fixes() -> None:
    safe = _rewrite(BLOCK)
    assert safe.text == BLOCK
    unknown = ("is never read, but TorchScript rejects it; removing it changes what callers may "
               "pass, and the file's tree is not known (--unsafe-fixes removes it)")
    assert _findings(safe) == sorted([
        ("TSF210", 6, f"forward(): *args {unknown}"),
        ("TSF210", 6, f"forward(): **kwargs {unknown}"),
        ("TSF210", 6, "forward(): keyword-only parameters follow *args, which stays; they "
                      "cannot become ordinary parameters")])
    unsafe = _rewrite(BLOCK, unsafe=True)
    assert unsafe.text == BLOCK.replace("x, *args, scale=1.0, **kwargs", "x, scale=1.0")
    assert _findings(unsafe) == [("TSF210", 6, "fixed")] * 3
    assert unsafe.changes[0].notes == [
        f"unsafe fix: removed unused {label} from forward(); callers that passed extra "
        "arguments now get a TypeError" for label in ("*args", "**kwargs")]


def test_callers_proven_by_the_tree_remove_unused_variadics(tmp_path: Path) -> None:
    code = BLOCK + "\n\n" + ENCODER.format(args="x, scale=2.0")
    path = _tree(tmp_path, code, other="def unrelated():\n    return 1\n")
    result = _rewrite(code, str(path))
    assert result.text == code.replace("x, *args, scale=1.0, **kwargs", "x, scale=1.0")
    assert _findings(result) == [("TSF210", 6, "fixed")] * 3
    assert result.changes[0].notes == []


def test_what_the_tree_cannot_prove_keeps_the_unsafe_requirement(tmp_path: Path) -> None:
    cases = {
        "other.py names Block": (ENCODER.format(args="x"), {"other": "from model import Block\n"}),
        "a call of Block passes more positional arguments than it names":
            (ENCODER.format(args="x, x"), {}),
        "a call of Block passes a keyword it does not name":
            (ENCODER.format(args="x, mask=x"), {}),
        "a call of Block unpacks its arguments": (ENCODER.format(args="*[x]"), {}),
        "Block is built nowhere in the tree": ("", {}),
        "Block is used other than as `self.<attr> = Block(...)`":
            ("blocks = nn.ModuleList([Block()])\n", {}),
    }
    for reason, (rest, others) in cases.items():
        folder = tmp_path / str(abs(hash(reason)))
        folder.mkdir()
        code = BLOCK + "\n\n" + rest
        result = _rewrite(code, str(_tree(folder, code, **others)))
        assert result.text == code, reason
        assert any(reason in s.reason for s in result.skips), (reason, result.skips)


STACK = textwrap.dedent("""\
    class Stack(nn.Module):
        def __init__(self, depth=2):
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(depth)])
            self.head = nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for block in self.blocks:
                x = block(x, scale=0.5)
            {use}
            return self.head[0](x) + len(self.blocks)
    """)


def test_blocks_in_a_module_list_whose_every_use_is_a_call_lose_unused_variadics(
        tmp_path: Path) -> None:
    """CCT's `self.blocks = nn.ModuleList([Layer(...) for ...])`, then `for blk in
    self.blocks: x = blk(x)`: the calls of the elements are the callers."""
    code = BLOCK + "\n\n" + STACK.format(use="x = self.head[1](x)")
    result = _rewrite(code, str(_tree(tmp_path, code)))
    assert result.text == code.replace("x, *args, scale=1.0, **kwargs", "x, scale=1.0")
    for use, reason in (
            ("x = self.head[1](x, x)", "passes more positional arguments than it names"),
            ("y = [b for b in self.blocks]", "self.blocks of Stack is used other than iterated"),
            ("x = self.head[-1:][0](x)", "self.head of Stack is indexed other than to call"),
            ("x = [b(x) for b in self.head][0]", "self.head of Stack is used other than")):
        folder = tmp_path / str(abs(hash(use)))
        folder.mkdir()
        code = BLOCK + "\n\n" + STACK.format(use=use)
        result = _rewrite(code, str(_tree(folder, code)))
        assert result.text == code, use
        assert any(reason in s.reason for s in result.skips), (use, result.skips)


def test_kwargs_passed_to_a_submodule_become_its_parameters() -> None:
    code = HEADER + textwrap.dedent("""\
        class Attention(nn.Module):
            def forward(self, x, context=None, mask=None, *, scale: float = 1.0):
                return x * scale

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = Attention()

            def forward(self, x, context, **kwargs):
                return self.attn(x, context, **kwargs) + x
        """)
    result = _rewrite(code)
    assert result.text == code.replace(
        "def forward(self, x, context, **kwargs):",
        "def forward(self, x, context, mask=None, scale: float = 1.0):").replace(
        "self.attn(x, context, **kwargs)", "self.attn(x, context, mask=mask, scale=scale)"
    ).replace("x, context=None, mask=None, *, scale", "x, context=None, mask=None, scale")
    assert ("TSF210", 14, "fixed") in _findings(result)


def test_kwargs_that_cannot_be_expanded_are_refused() -> None:
    unknown_callee = HEADER + textwrap.dedent("""\
        class Block(nn.Module):
            def __init__(self, layer):
                super().__init__()
                self.layer = layer

            def forward(self, x, **kwargs):
                return self.layer(x, **kwargs)
        """)
    result = _rewrite(unknown_callee)
    assert result.text == unknown_callee
    assert _findings(result) == [("TSF210", 10, "forward(): passes **kwargs to self.layer, the "
                                  "module given to the constructor, but the modules it wraps are "
                                  "not all known (the file's tree is not known)")]


def test_keyword_only_without_default_after_a_default_is_declined() -> None:
    code = HEADER + textwrap.dedent("""\
        class Pool(nn.Module):
            def forward(self, x, k=2, *, eps):
                return x + eps

            @torch.jit.export
            def pool(self, x, *, eps=1e-5, k):
                return x + eps
        """)
    result = _rewrite(code)
    assert result.text == code.replace("x, *, eps=1e-5, k", "x, k, eps=1e-5")
    assert _findings(result) == [("TSF210", 10, "fixed")]
    assert [s.reason for s in result.skips] == [
        "forward(): keyword-only parameters without defaults follow parameters with defaults; they "
        "cannot become ordinary parameters"]


# ---- **kwargs passed to the module the constructor was given ---------------------------------

WRAPPERS = HEADER + textwrap.dedent("""\
    class Attention(nn.Module):
        def forward(self, x, context=None, mask=None):
            return x

    class FeedForward(nn.Module):
        def forward(self, x):
            return x

    class Gate(nn.Module):
        def forward(self, x, mask=None):
            return x

    class PreNorm(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x, **kwargs):
            y = self.fn(x, **kwargs) + x
            return y

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention()
            self.attn = PreNorm(self.attn)
            gate = Gate()
            self.blocks = nn.ModuleList([PreNorm(gate), PreNorm(FeedForward())])
    """)


def test_kwargs_passed_to_the_module_given_to_the_constructor(tmp_path: Path) -> None:
    """One call per set of keywords a module built into the wrapper may take (Attention
    {context, mask}, Gate {mask}, FeedForward {}; and {context}, which a module built outside
    the tree may take), chosen by a constant per keyword where the sets differ, true also for a
    module whose forward takes **kwargs; the modules are followed through `self.attn = ...` and
    a local."""
    result = _rewrite(WRAPPERS, str(_tree(tmp_path, WRAPPERS)))
    assert result.text == textwrap.dedent("""\
        import inspect
        from typing import Optional

        import torch
        from torch import nn
    """) + "\n\n" + WRAPPERS[len(HEADER):].replace(textwrap.indent(textwrap.dedent("""\
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x, **kwargs):
            y = self.fn(x, **kwargs) + x
            return y
    """), "    "), textwrap.indent(textwrap.dedent("""\
        # TorchScript compiles only the call of self.fn its forward's parameters choose.
        __constants__ = ["fn_takes_context", "fn_takes_mask"]

        def __init__(self, fn):
            super().__init__()
            self.fn = fn
            fn_parameters = inspect.signature(self.fn.forward).parameters
            fn_has_kwargs = any(p.kind == p.VAR_KEYWORD for p in fn_parameters.values())
            self.fn_takes_context = fn_has_kwargs or "context" in fn_parameters
            self.fn_takes_mask = fn_has_kwargs or "mask" in fn_parameters

        def forward(
            self,
            x,
            context: Optional[torch.Tensor] = None,
            mask: Optional[torch.Tensor] = None,
        ):
            if self.fn_takes_context:
                if self.fn_takes_mask:
                    fn_out = self.fn(x, context=context, mask=mask)
                else:
                    fn_out = self.fn(x, context=context)
            else:
                if self.fn_takes_mask:
                    fn_out = self.fn(x, mask=mask)
                else:
                    fn_out = self.fn(x)
            y = fn_out + x
            return y
    """), "    "))
    assert {("TSF210", 22, "fixed"), ("TSF110", 23, "fixed")} <= set(_findings(result))


def test_every_call_passing_the_kwargs_on_is_rewritten(tmp_path: Path) -> None:
    """g-mlp's PreShiftTokens calls its module on two paths; each call gets its own choice."""
    code = HEADER + textwrap.dedent("""\
        class Gate(nn.Module):
            def forward(self, x, mask=None):
                return x

        class Shift(nn.Module):
            def __init__(self, shifts, fn):
                super().__init__()
                self.fn = fn
                self.shifts = shifts

            def forward(self, x, **kwargs):
                if self.shifts == 0:
                    return self.fn(x, **kwargs)
                return self.fn(x.roll(self.shifts, 1), **kwargs)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Shift(1, Gate()), Shift(0, nn.LSTM(4, 4))])
        """)
    assert _rewrite(code, str(_tree(tmp_path, code))).text == code  # nn.LSTM: takes hx too
    code = code.replace("nn.LSTM(4, 4)", "Gate()")
    result = _rewrite(code, str(_tree(tmp_path, code)))
    assert result.text == "from typing import Optional\n\n" + code.replace(
        "def forward(self, x, **kwargs):",
        "def forward(self, x, mask: Optional[torch.Tensor] = None):").replace(
        ", **kwargs)", ", mask=mask)")
    assert [f for f in _findings(result) if f[0] == "TSF110"] == [
        ("TSF110", 17, "fixed"), ("TSF110", 18, "fixed")]


def test_a_torch_layer_taking_only_its_input_counts_as_a_module_without_keywords(
        tmp_path: Path) -> None:
    """``PreNorm(nn.Linear(...))``, or a function of the file returning ``nn.Sequential``
    (perceiver's ``Mixer``), is a module whose forward takes no keyword."""
    layer = WRAPPERS.replace("PreNorm(FeedForward())", "PreNorm(nn.Linear(4, 4))")
    via_function = WRAPPERS.replace("PreNorm(FeedForward())", "PreNorm(mixer(4))") + (
        "\ndef mixer(n):\n    return nn.Sequential(nn.Linear(n, n), nn.GELU())\n")
    plain = _rewrite(WRAPPERS, str(_tree(tmp_path, WRAPPERS))).text
    for code in (layer, via_function):
        result = _rewrite(code, str(_tree(tmp_path, code)))
        assert result.text.split("class Net")[0] == plain.split("class Net")[0]


def test_kwargs_passed_to_the_given_module_are_refused_where_its_modules_are_unknown(
        tmp_path: Path) -> None:
    torch_layer = WRAPPERS.replace("PreNorm(FeedForward())", "PreNorm(nn.LSTM(4, 4))")
    defaults_differ = WRAPPERS.replace("def forward(self, x, mask=None):",
                                       "def forward(self, x, mask=False):")
    required = WRAPPERS.replace("def forward(self, x, mask=None):",
                                "def forward(self, x, mask):")
    cases = {
        torch_layer: "it wraps `nn.LSTM(4, 4)`, not a module class of the tree built there",
        defaults_differ: "the modules it wraps default mask differently (None, False)",
        required: ("Gate.forward()'s mask has no default, so a call that leaves it out fails"),
    }
    for code, why in cases.items():
        result = _rewrite(code, str(_tree(tmp_path, code)))
        assert result.text == code
        assert _findings(result) == [
            ("TSF210", 22, "forward(): passes **kwargs to self.fn, the module given to the "
                           f"constructor, but {why}")]


def test_constructions_in_other_files_of_the_tree_are_followed(tmp_path: Path) -> None:
    """perceiver's gated.py builds PreNorm (imported) around a class of its own and one of
    PreNorm's file: both count. A file that builds it around something unknown refuses it; a
    file of another package with a PreNorm class of its own does not count."""
    namesake = "class PreNorm:\n    pass\n\nPreNorm()\n"
    path = _tree(tmp_path, WRAPPERS, other=namesake)
    assert _rewrite(WRAPPERS, str(path)).text != WRAPPERS
    importer = HEADER + textwrap.dedent("""\
        from model import Gate, PreNorm

        class Mixer(nn.Module):
            def forward(self, x, mask=None, scale: float = 1.0):
                return x * scale

        class Stack(nn.Module):
            def __init__(self):
                super().__init__()
                self.mix = PreNorm(Mixer())
                self.gate = PreNorm(Gate())
        """)
    result = _rewrite(WRAPPERS, str(_tree(tmp_path, WRAPPERS, other=importer)))
    assert result.text == WRAPPERS      # Mixer's scale is a third keyword the modules differ in
    assert _findings(result) == [
        ("TSF210", 22, "forward(): passes **kwargs to self.fn, the module given to the "
                       "constructor, but the modules it wraps differ in 3 keywords: one call for "
                       "each set a module may take is 8, more than 4")]
    two = importer.replace("mask=None, scale: float = 1.0", "mask=None")
    assert "fn_out = self.fn(x, mask=mask)" in _rewrite(
        WRAPPERS, str(_tree(tmp_path, WRAPPERS, other=two))).text
    unknown = importer.replace("PreNorm(Mixer())", "PreNorm(None)")
    result = _rewrite(WRAPPERS, str(_tree(tmp_path, WRAPPERS, other=unknown)))
    assert result.text == WRAPPERS
    assert _findings(result) == [
        ("TSF210", 22, "forward(): passes **kwargs to self.fn, the module given to the "
                       "constructor, but it wraps `None`, not a module class of the tree built "
                       "there")]


def test_a_module_built_outside_the_tree_gets_exactly_the_keywords_it_took_before(
        tmp_path: Path) -> None:
    """The tree builds PreNorm around modules taking {context, mask}, {mask} and {}; a user's
    module taking **kwargs, or only context, gets the keywords the original passed it (found
    on perceiver-pytorch: a **kwargs module lost its context, and one taking context but not
    mask was passed mask and raised)."""
    pytest.importorskip("torch")
    rewritten = _rewrite(WRAPPERS, str(_tree(tmp_path, WRAPPERS))).text
    assert rewritten != WRAPPERS
    users = textwrap.dedent("""\

        class TakesAnyKeyword(nn.Module):
            def forward(self, x, **kw):
                return x

        class TakesContext(nn.Module):
            def forward(self, x, context=None):
                return x
        """)
    received = {}
    for label, code in (("original", WRAPPERS), ("rewritten", rewritten)):
        namespace: dict[str, type] = {}
        exec(compile(code + users, f"<{label}>", "exec"), namespace)
        pre_norm = namespace["PreNorm"]
        received[label] = [
            _received(pre_norm(namespace["TakesAnyKeyword"]()), context=2, mask=3),
            _received(pre_norm(namespace["TakesContext"]()), context=2),
        ]
    assert received["rewritten"] == received["original"] == [
        [("context", 2), ("mask", 3)], [("context", 2)]]


def _received(wrapper: object, **keywords: object) -> list[tuple[str, object]]:
    """The keywords the module inside ``wrapper`` was called with when ``wrapper`` was called
    with ``keywords`` (its forward is replaced by a recorder after the wrapper measured it)."""
    seen: list[list[tuple[str, object]]] = []

    def recording(x: object, **kw: object) -> int:
        seen.append(sorted(kw.items()))
        return 0
    wrapper.fn.forward = recording      # type: ignore[attr-defined]
    wrapper(0, **keywords)              # type: ignore[operator]
    return seen[0]


@pytest.mark.slow
def test_the_wrapper_fixture_fails_to_script_before_and_scripts_with_parity_after() -> None:
    torch = pytest.importorskip("torch")
    folder = FIXTURES_ROOT / "variable-arguments"
    before = load_module(folder / "prenorm_wrappers.in.py", "prenorm_before")
    after = load_module(folder / "prenorm_wrappers.out.py", "prenorm_after")
    torch.manual_seed(0)
    original = before.Transformer().eval()
    with pytest.raises(torch.jit.frontend.NotSupportedError, match="variable number"):
        torch.jit.script(original)
    rewritten = after.Transformer().eval()
    rewritten.load_state_dict(original.state_dict())
    scripted = torch.jit.script(rewritten)
    x, mask = torch.randn(2, 5, 16), torch.tensor([[True] * 5, [True, True, True, False, False]])
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), original(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(scripted(x, mask), original(x, mask=mask), rtol=1e-4, atol=1e-5)


PERMUTE = textwrap.dedent("""\
    from typing import Optional

    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x, mask: Optional[torch.Tensor] = None):
            y = self.proj(x)
            return y if mask is None else y.masked_fill(mask, 0.0)


    class PermuteToFrom(nn.Module):
        def __init__(self, permutation, fn):
            super().__init__()
            self.fn = fn
            self.permutation = permutation

        def forward(self, x, **kwargs):
            return self.fn(x.permute(self.permutation), **kwargs).permute(self.permutation)


    class Axial(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            self.attns = nn.ModuleList([PermuteToFrom([0, 1, 2], Attention(dim)),
                                        PermuteToFrom([0, 2, 1], Attention(dim))])

        def forward(self, x):
            for attn in self.attns:
                x = attn(x) + x
            return x
    """)


@pytest.mark.slow
def test_instances_that_differ_in_a_list_setting_are_not_compared_for_one_artifact(
        tmp_path: Path) -> None:
    """axial-attention's PermuteToFrom: instances with other permutations (a list) cannot be
    served by one artifact given each other's weights; that is "not comparable", not a
    rejection of the rewrite (the list was not seen as a setting)."""
    (tmp_path / "axial.py").write_text(PERMUTE)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tsfix.examples."axial.py:Axial"]\ninputs = ["randn(4, 4, 4)"]\n')
    result = run([str(tmp_path / "axial.py")], Options(rules=["variable-arguments"]))
    verdicts = {c.class_name: c for c in result.classes()}
    assert verdicts["PermuteToFrom"].verdict == "verified", verdicts["PermuteToFrom"].reason
    assert "not comparable: 1 also differing in a setting that is not lifted (attns.1: " \
           "permutation)" in verdicts["PermuteToFrom"].reason
    assert "def forward(self, x):" in (tmp_path / "axial.py").read_text()


# halonet-pytorch's helper: `torch.zeros(shape, **to(x))` in compiled code.
DICT_HELPER = HEADER + textwrap.dedent("""\
    def to(x):
        return {'device': x.device, 'dtype': x.dtype}


    def rel_to_abs(x):
        pad = torch.zeros((x.shape[0], 1), **to(x))
        return torch.cat((x, pad), dim=1)


    class Pad(nn.Module):
        def forward(self, x):
            y = torch.ones(x.shape, **to(x))
            z = torch.full((2,), 3.0, **{"dtype": x.dtype})
            w = torch.zeros(3, **dict(dtype=x.dtype), device=x.device)
            return x + y, z, w
    """)


def test_a_dict_unpacked_in_a_call_is_spelled_out_as_keywords() -> None:
    result = _rewrite(DICT_HELPER)

    assert textwrap.dedent("""\
            y = torch.ones(x.shape, device=x.device, dtype=x.dtype)
            z = torch.full((2,), 3.0, dtype=x.dtype)
            w = torch.zeros(3, dtype=x.dtype, device=x.device)
    """) in textwrap.dedent(result.text.split("def forward(self, x):\n")[1])
    # The function is compiled code only when the repair loop names it.
    assert "pad = torch.zeros((x.shape[0], 1), **to(x))" in result.text
    assert _findings(result) == [("TSF110", 16, "fixed"), ("TSF110", 17, "fixed"),
                                 ("TSF110", 18, "fixed")]
    assert not _rewrite(result.text).changed

    named = rewrite_source(DICT_HELPER, RewriteSettings([VariableArguments]),
                           FileContext("model.py", compiled_functions=frozenset({"rel_to_abs"})))
    assert "pad = torch.zeros((x.shape[0], 1), device=x.device, dtype=x.dtype)" in named.text
    assert [(c.class_name, c.lines) for c in named.changes] == [("Pad", (14, 19)),
                                                                ("rel_to_abs()", (9, 11))]


@pytest.mark.parametrize(("call", "reason"), [
    ("torch.zeros(3, **to(x + 1))", "x + 1 is not a name or an attribute"),
    ("torch.zeros(3, **to(x, x))", "passes its arguments otherwise"),
    ("torch.zeros(3, **to(x), dtype=x.dtype)", "a keyword repeats"),
    ("torch.zeros(3, **{k: x.dtype})", "a key is not a string literal"),
    ("torch.zeros(3, **opts(x))", "is not a dict display, dict(...) or a helper"),
])
def test_a_dict_unpacking_left_alone_says_why(call: str, reason: str) -> None:
    code = HEADER + textwrap.dedent(f"""\
        def to(x):
            return {{'device': x.device, 'dtype': x.dtype}}


        def opts(x):
            found = {{'device': x.device}}
            return found


        class Pad(nn.Module):
            def forward(self, x, k: str = "dtype"):
                return {call}
        """)
    result = _rewrite(code)

    assert not result.changed
    [(code_name, line, why)] = _findings(result)
    assert (code_name, line) == ("TSF110", 16) and reason in why, why


def test_a_name_the_helper_reads_that_the_caller_binds_is_not_spelled_out() -> None:
    """The helper's `dtype` is the module's; in forward() it is a local of another value."""
    code = HEADER + textwrap.dedent("""\
        dtype = torch.float64


        def like(x):
            return {'device': x.device, 'dtype': dtype}


        class Pad(nn.Module):
            def forward(self, x):
                dtype = torch.float16
                return torch.zeros(3, **like(x)), dtype
        """)
    result = _rewrite(code)

    assert not result.changed
    [(_, _, why)] = _findings(result)
    assert "dtype is bound where the call stands" in why, why


@pytest.mark.slow
def test_the_spelled_keywords_give_the_same_tensors_and_script(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    (tmp_path / "pad_in.py").write_text(DICT_HELPER)
    (tmp_path / "pad_out.py").write_text(_rewrite(DICT_HELPER).text)
    original = load_module(tmp_path / "pad_in.py", "_va_pad_in")
    rewritten = load_module(tmp_path / "pad_out.py", "_va_pad_out")
    x = torch.randn(2, 3, dtype=torch.float64)

    with pytest.raises(Exception, match="keyword-arg expansion is not supported"):
        torch.jit.script(original.Pad())
    for got, expected in zip(torch.jit.script(rewritten.Pad())(x), original.Pad()(x),
                             strict=True):
        assert torch.equal(got, expected) and got.dtype == expected.dtype
