"""float-arguments: which ints become floats (literals, int attributes and parameters, layer
arguments in __init__), which values are left alone and why, and the measured table itself
(slow: an int fails to script in every listed slot, the float form scripts). The fixture pairs
are tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES_ROOT, load_module, rule_rewriter
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.float_arguments import _FUNCTIONS, _LAYERS, FloatArguments

FIXTURES = FIXTURES_ROOT / "float-arguments"


rewrite = rule_rewriter(FloatArguments)


def forward_line(result: Rewrite, marker: str = "return") -> str:
    return next(line.strip() for line in result.text.splitlines()
                if line.strip().startswith(marker))


def module(init_params: str, init_body: str, forward_body: str) -> str:
    return (
        "import torch\n"
        "import torch.nn.functional as F\n"
        "class M(torch.nn.Module):\n"
        f"    def __init__(self{init_params}):\n"
        "        super().__init__()\n"
        f"        {init_body}\n"
        "    def forward(self, x):\n"
        f"        {forward_body}\n")


def test_int_literal_and_int_attribute_of_the_deepspeech_block() -> None:
    result = rewrite(module(", relu_max_clip: int = 20", "self.relu_max_clip = relu_max_clip",
                            "return torch.nn.functional.hardtanh(x, 0, self.relu_max_clip)"))
    assert forward_line(result) == ("return torch.nn.functional.hardtanh(x, 0.0, "
                                    "float(self.relu_max_clip))")
    assert [(f.code, f.line, f.column) for f in result.fixes] == [("TSF224", 8, 48),
                                                                  ("TSF224", 8, 51)]
    assert result.fixes[1].message == ("int `self.relu_max_clip` passed as "
                                       "torch.nn.functional.hardtanh's float parameter max_val "
                                       "in forward()")
    assert result.skips == []


@pytest.mark.parametrize(("params", "expected"), [
    # The annotation says float, the default stores an int: TorchScript types the attribute
    # by the value it holds.
    (", p: float = 0", "return F.dropout(x, float(self.p), self.training)"),
    (", p=0", "return F.dropout(x, float(self.p), self.training)"),
    (", p: float = 0.1", "return F.dropout(x, self.p, self.training)"),
    (", p: float", "return F.dropout(x, self.p, self.training)"),
])
def test_attribute_kinds_come_from_what_init_stores(params: str, expected: str) -> None:
    result = rewrite(module(params, "self.p = p", "return F.dropout(x, self.p, self.training)"))
    assert forward_line(result) == expected
    assert result.skips == []


@pytest.mark.parametrize(("signature", "expected"), [
    # In a compiled method TorchScript goes by the annotation: `alpha: float = 1` scripts.
    ("self, x, alpha: float = 1", "return F.elu(x, alpha)"),
    ("self, x, alpha: int = 1", "return F.elu(x, float(alpha))"),
    ("self, x, alpha=1", "return F.elu(x, float(alpha))"),
])
def test_forward_parameters_go_by_their_annotation(signature: str, expected: str) -> None:
    result = rewrite(f"""\
        import torch.nn as nn
        import torch.nn.functional as F
        class M(nn.Module):
            def forward({signature}):
                return F.elu(x, alpha)
        """)
    assert forward_line(result) == expected


def test_arithmetic_locals_keywords_and_literal_forms() -> None:
    result = rewrite("""\
        import torch
        from torch.nn.functional import leaky_relu as lrelu, pad
        class M(torch.nn.Module):
            def __init__(self, levels: int = 3):
                super().__init__()
                self.levels = levels
            def forward(self, x):
                slope = self.levels // 2
                x = lrelu(x, negative_slope=slope)
                x = pad(x, [1, 1], "constant", -1)
                x = torch.nn.functional.hardtanh(x, 0x0, len(x.shape) * 2)
                return torch.dropout(x, 1 - self.levels / 4, self.training)
        """)
    for line in ("x = lrelu(x, negative_slope=float(slope))",
                 'x = pad(x, [1, 1], "constant", -1.0)',
                 "x = torch.nn.functional.hardtanh(x, float(0x0), float(len(x.shape) * 2))",
                 # a float already
                 "return torch.dropout(x, 1 - self.levels / 4, self.training)"):
        assert f"        {line}\n" in result.text, line
    assert len(result.fixes) == 4


def test_layers_in_init_get_float_arguments_and_a_note() -> None:
    result = rewrite("""\
        import torch.nn as nn
        class Block(nn.Module):
            def __init__(self, dim: int, dropout: int = 0, eps=1):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim, eps),
                                         nn.Hardtanh(0, 6), nn.Dropout(p=dropout))
                self.attn = nn.MultiheadAttention(dim, 1, 0)
                self.rnn = nn.LSTM(dim, dim, 2, dropout=dropout)
            def forward(self, x):
                return self.net(x)
        """)
    assert "nn.LayerNorm(dim, float(eps))" in result.text
    assert "nn.Hardtanh(0.0, 6.0)" in result.text
    assert "nn.Dropout(p=float(dropout))" in result.text
    assert "nn.MultiheadAttention(dim, 1, 0.0)" in result.text
    # Recurrent layers take an int dropout: untouched.
    assert "nn.LSTM(dim, dim, 2, dropout=dropout)" in result.text
    assert result.changes[0].notes == [
        "nn.LayerNorm, nn.Hardtanh, nn.Dropout, nn.MultiheadAttention now store a float where "
        "they stored an int: their repr shows it (p=0.0)"]


def test_interpolate_scale_factor_tuple_and_attribute() -> None:
    result = rewrite(module(", scale: int = 2", "self.scale = scale",
                            "x = F.interpolate(x, scale_factor=(2, self.scale))\n"
                            "        return F.interpolate(x, None, self.scale)"))
    assert forward_line(result, "x =") == ("x = F.interpolate(x, scale_factor=(2.0, "
                                           "float(self.scale)))")
    assert forward_line(result) == "return F.interpolate(x, None, float(self.scale))"


@pytest.mark.parametrize(("params", "init_body", "call", "reason", "code"), [
    (", clip: int = 20, off: bool = False", "self.clip = False if off else clip",
     "F.hardtanh(x, 0.0, self.clip)", "it may be a bool", "TSF224"),
    (", clip: Optional[int] = None", "self.clip = clip",
     "F.hardtanh(x, 0.0, self.clip)", "it may be None, and float(None) fails", "TSF224"),
    (", value=0", "self.value = value", "F.pad(x, [1, 1], value=self.value)",
     "the parameter accepts None and the value's type comes from a default alone",
     "TSF224"),
    (", clip", "self.clip = clip", "F.hardtanh(x, 0.0, self.clip)",
     "its type cannot be read here", None),
    ("", "pass", "F.hardtanh(x, 0.0, 9007199254740993)", "9007199254740993 has no exact float",
     "TSF224"),
])
def test_values_left_alone_are_reported(params: str, init_body: str, call: str, reason: str,
                                        code: str | None) -> None:
    source = "from typing import Optional\n" + module(params, init_body, f"return {call}")
    result = rewrite_source(source, RewriteSettings([FloatArguments]), "m.py")
    assert result.text == source and not result.changes
    [skip] = result.skips
    assert reason in skip.reason and skip.code == code
    assert skip.rule == "float-arguments" and skip.class_name == "M"


def test_scalar_parameters_bools_floats_and_uncompiled_code_are_not_touched() -> None:
    source = textwrap.dedent("""\
        import torch
        import torch.nn.functional as F
        class M(torch.nn.Module):
            def forward(self, x, *bounds):
                x = torch.clamp(x, 0, 6) + F.softplus(x, 1, 20)
                x = F.dropout(x, self.training) + F.hardtanh(x, 0.5, True)
                x = F.hardtanh(x, *bounds)
                if not torch.jit.is_scripting():
                    x = F.leaky_relu(x, 0)
                return x
            def plain(self, x):
                return F.elu(x, 1)
        """)
    result = rewrite_source(source, RewriteSettings([FloatArguments]), "m.py")
    assert (result.text, result.changes, result.skips) == (source, [], [])


def test_a_file_that_rebinds_float_is_refused() -> None:
    source = module(", clip: int = 6", "self.clip = clip", "return F.hardtanh(x, 0, self.clip)")
    source = "float = None\n" + source
    result = rewrite_source(source, RewriteSettings([FloatArguments]), "m.py")
    # The literal needs no `float`; the attribute does.
    assert "F.hardtanh(x, 0.0, self.clip)" in result.text
    [skip] = result.skips
    assert "binds the name `float`" in skip.reason and skip.code == "TSF224"


def test_fixture_refusals() -> None:
    path = FIXTURES / "refused.in.py"
    result = rewrite_source(path.read_text(), RewriteSettings([FloatArguments]), path.name)
    assert [(s.class_name, s.code) for s in result.skips] == [("ClippedRelu", None),
                                                              ("PaddedConv", "TSF224")]


# ---- the table, measured (torch) ---------------------------------------------------------------

# A call for each function of the table, the float parameters as {name} placeholders.
CALLS = {
    "torch.nn.functional.hardtanh": "F.hardtanh(x, {min_val}, {max_val})",
    "torch.nn.functional.dropout": "F.dropout(x, {p}, False)",
    "torch.nn.functional.dropout1d": "F.dropout1d(x, {p}, False)",
    "torch.nn.functional.dropout2d": "F.dropout2d(x, {p}, False)",
    "torch.nn.functional.dropout3d": "F.dropout3d(x, {p}, False)",
    "torch.nn.functional.alpha_dropout": "F.alpha_dropout(x, {p}, False)",
    "torch.nn.functional.feature_alpha_dropout": "F.feature_alpha_dropout(x, {p}, False)",
    "torch.dropout": "torch.dropout(x, {p}, False)",
    "torch.alpha_dropout": "torch.alpha_dropout(x, {p}, False)",
    "torch.feature_dropout": "torch.feature_dropout(x, {p}, False)",
    "torch.nn.functional.elu": "F.elu(x, {alpha})",
    "torch.nn.functional.celu": "F.celu(x, {alpha})",
    "torch.nn.functional.leaky_relu": "F.leaky_relu(x, {negative_slope})",
    "torch.nn.functional.threshold": "F.threshold(x, {threshold}, {value})",
    "torch.nn.functional.rrelu": "F.rrelu(x, {lower}, {upper})",
    "torch.nn.functional.normalize": "F.normalize(x, {p}, 1, {eps})",
    "torch.nn.functional.layer_norm": "F.layer_norm(x, [4], None, None, {eps})",
    "torch.layer_norm": "torch.layer_norm(x, [4], None, None, {eps})",
    "torch.nn.functional.group_norm": "F.group_norm(x, 1, None, None, {eps})",
    "torch.group_norm": "torch.group_norm(x, 1, None, None, {eps})",
    "torch.nn.functional.rms_norm": "F.rms_norm(x, [4], None, {eps})",
    "torch.nn.functional.batch_norm": ("F.batch_norm(x, None, None, None, None, True, "
                                       "{momentum}, {eps})"),
    "torch.nn.functional.instance_norm": ("F.instance_norm(x, None, None, None, None, True, "
                                          "{momentum}, {eps})"),
    "torch.nn.functional.local_response_norm": "F.local_response_norm(x, 2, {alpha}, {beta}, {k})",
    "torch.nn.functional.pad": "F.pad(x, [1, 1], 'constant', {value})",
    "torch.nn.functional.interpolate": "F.interpolate(x, None, {scale_factor})",
    "torch.nn.functional.scaled_dot_product_attention": (
        "F.scaled_dot_product_attention(x, x, x, None, {dropout_p}, scale={scale})"),
    "torch.nn.functional.cosine_similarity": "F.cosine_similarity(x, x, 1, {eps})",
    "torch.cosine_similarity": "torch.cosine_similarity(x, x, 1, {eps})",
    "torch.nn.functional.pairwise_distance": "F.pairwise_distance(x, x, {p}, {eps})",
    "torch.pairwise_distance": "torch.pairwise_distance(x, x, {p}, {eps})",
    "torch.nn.functional.gumbel_softmax": "F.gumbel_softmax(x, {tau}, False, {eps})",
    "torch.nn.functional.embedding": "F.embedding(x.long(), x, None, {max_norm}, {norm_type})",
    "torch.cdist": "torch.cdist(x, x, {p})",
    "torch.logit": "torch.logit(x, {eps})",
    "torch.nan_to_num": "torch.nan_to_num(x, {nan}, {posinf}, {neginf})",
}
# Constructor arguments each layer needs besides the measured one.
LAYER_ARGS = {"LayerNorm": ["4"], "GroupNorm": ["1", "4"], "LocalResponseNorm": ["2"],
              "Embedding": ["3", "2"], "MultiheadAttention": ["4", "1"],
              "TransformerEncoderLayer": ["4", "1", "8"],
              "TransformerDecoderLayer": ["4", "1", "8"],
              "Transformer": ["4", "1", "1", "1", "8"],
              **{f"{kind}{d}d": ["4"] for kind in ("BatchNorm", "InstanceNorm") for d in (1, 2, 3)}}


def _scripts(source: str) -> str | None:
    """None when ``source`` (``def f(x: Tensor)`` calling ``torch`` and ``F``) compiles, else
    the error. TorchScript resolves the names in this frame."""
    import torch
    import torch.nn.functional as F  # noqa: F401

    try:
        torch.jit.CompilationUnit(source)
    except RuntimeError as exc:
        return str(exc)
    return None


@pytest.mark.slow
def test_every_listed_function_parameter_rejects_an_int_and_takes_a_float() -> None:
    pytest.importorskip("torch")
    assert set(CALLS) == set(_FUNCTIONS)
    for name, slots in _FUNCTIONS.items():
        floats = {slot.name: "1.0" for slot in slots}
        header = "def f(x: Tensor):\n    return "
        footer = "\n"
        assert _scripts(header + CALLS[name].format(**floats) + footer) is None, name
        for slot in slots:
            error = _scripts(header + CALLS[name].format(**{**floats, slot.name: "1"}) + footer)
            assert error is not None and "found type 'int'" in error, (name, slot.name)


def _forget_failed_compilation(torch: Any) -> None:
    """A failed compilation leaves its class half-defined in the process, and the next script
    of that class fails with "Can't redefine method"; these private resets forget it."""
    torch._C._jit_clear_class_registry()
    torch.jit._recursive.concrete_type_store = torch.jit._recursive.ConcreteTypeStore()
    torch.jit._state._clear_class_state()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:'norm' was found in ScriptModule constants")
def test_every_listed_layer_argument_rejects_an_int_and_takes_a_float() -> None:
    torch = pytest.importorskip("torch")
    import torch.nn as nn

    class Holder(nn.Module):
        def __init__(self, layer: nn.Module) -> None:
            super().__init__()
            self.layer = layer

    # 0 where a lower bound or a rate goes (Hardtanh checks max_val > min_val), else 1.
    lows = ("min_val", "lower", "threshold", "p", "dropout", "negative_slope")
    for name, slots in _LAYERS.items():
        floats = {slot.name: 0.0 if slot.name in lows else 1.0 for slot in slots}
        for slot in slots:
            for value, fails in ((int(floats[slot.name]), True), (floats[slot.name], False)):
                layer = getattr(nn, name)(*map(int, LAYER_ARGS.get(name, [])),
                                          **{**floats, slot.name: value})
                try:
                    torch.jit.script(Holder(layer))
                except RuntimeError as exc:
                    assert fails and "found type 'int'" in str(exc), (name, slot.name, exc)
                    _forget_failed_compilation(torch)
                else:
                    assert not fails, f"nn.{name}({slot.name}={value!r}) scripts"


@pytest.mark.slow
def test_written_deepspeech_scripts_with_the_original_outputs(tmp_path: Path) -> None:
    """Independent of the validation worker: the original fails to script at hardtanh, the file
    tsfix wrote scripts, and its outputs equal the original's."""
    torch = pytest.importorskip("torch")
    target = tmp_path / "deepspeech.in.py"
    target.write_text((FIXTURES / "deepspeech.in.py").read_text())
    run([target], Options(rules=["float-arguments"], verify=False))
    original = load_module(FIXTURES / "deepspeech.in.py", "deepspeech_original")
    written = load_module(target, "deepspeech_written")
    torch.manual_seed(0)
    reference = original.DeepSpeech(n_feature=12, n_hidden=16).eval()
    with pytest.raises(RuntimeError, match="found type 'int'"):
        torch.jit.script(reference)
    rewritten = written.DeepSpeech(n_feature=12, n_hidden=16).eval()
    rewritten.load_state_dict(reference.state_dict())
    x = torch.randn(2, 1, 7, 12)
    with torch.no_grad():
        assert torch.equal(torch.jit.script(rewritten)(x), reference(x))


L1NORM = textwrap.dedent("""\
    import torch
    import torch.nn.functional as F
    from torch import nn


    def l1norm(t, dim: int = -1, eps: float = 1e-8):
        return F.normalize(t, p = 1, dim = dim, eps = eps)


    class Attention(nn.Module):
        def forward(self, x):
            return l1norm(x.softmax(-1))
    """)


def test_a_module_function_the_repair_loop_names_gets_its_int_literals_as_floats() -> None:
    """perceiver's l1norm: the model stops in the function (``F.normalize(t, p = 1)``), and the
    loop asks the rules for it by name; statically the function is left alone."""
    assert rewrite(L1NORM).text == L1NORM
    result = rewrite_source(L1NORM, RewriteSettings([FloatArguments]),
                            FileContext("model.py", compiled_functions=frozenset({"l1norm"})))
    assert result.text == L1NORM.replace("p = 1, dim = dim, eps = eps", "p=1.0, dim=dim, eps=eps")
    assert [(c.class_name, c.summary) for c in result.changes] == [
        ("l1norm()", "F.normalize p `1` -> `1.0`")]
