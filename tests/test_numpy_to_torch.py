"""numpy-to-torch: what it translates (and that the values and dtypes match numpy's), what it
refuses with the reason, chains of names translated together, which methods it visits (compiled
ones: forward, what it calls, @torch.jit.export; never @torch.jit.ignore helpers or branches that
never compile), its TSF205 findings (each numpy use fixed or refused), and imports. Outputs are
compared whole."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path

import libcst as cst
import pytest
from conftest import (
    FIXTURES_ROOT,
    apply_with_report,
    copy_fixture,
    fixture_pairs,
    load_module,
    rule_rewriter,
)
from libcst.codemod import CodemodContext
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.numpy_to_torch import NumpyToTorch
from tsfix.codemods.rules.numpy_to_torch._calls import NumpyCall
from tsfix.codemods.rules.numpy_to_torch._table import HANDLERS
from tsfix.codemods.rules.numpy_to_torch._table import REFUSED as REFUSED_NAMES

FIXTURES = FIXTURES_ROOT / "numpy-to-torch"

HEADER = "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
MATH = "import math\n\n"


rewrite = rule_rewriter(NumpyToTorch)


def model(*lines: str, params: str = "x", init: str = "") -> str:
    """A module whose forward() is ``lines``; ``init`` lines go into __init__."""
    init_body = "".join(f"        {line}\n" for line in init.splitlines() if line)
    body = "".join(f"        {line}\n" for line in lines)
    return (HEADER + "class M(nn.Module):\n"
            "    def __init__(self, d_model=16):\n"
            "        super().__init__()\n"
            "        self.d_model = d_model\n" + init_body + "\n"
            f"    def forward(self, {params}):\n" + body)


def translated(*lines: str, params: str = "x") -> str:
    """The whole expected output: ``model(*lines)``, with ``import math`` when it uses math."""
    code = model(*lines, params=params)
    return MATH + code if any("math." in line for line in lines) else code


def reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


def findings(result: Rewrite) -> list[tuple[str, int, str, str]]:
    """(fixed|refused, line, check message, reason) of each TSF205 finding."""
    found = [("fixed", f.line, f.message, "") for f in result.fixes if f.code == "TSF205"]
    found += [("refused", s.line, s.message, s.reason) for s in result.skips
              if s.code == "TSF205"]
    return sorted(found, key=lambda f: (f[1], f[2]))


# ---- translations ----------------------------------------------------------------------------

TRANSLATIONS = [
    # scalars -> math
    ("return x * np.sqrt(self.d_model)", "return x * math.sqrt(self.d_model)"),
    ("return x.masked_fill(x > 0, -np.inf)", "return x.masked_fill(x > 0, -math.inf)"),
    ("return x * np.pi + np.e", "return x * math.pi + math.e"),
    ("return x / np.log(x.size(-1))", "return x / math.log(x.size(-1))"),
    ("return x * np.arctan2(1.0, 2.0)", "return x * math.atan2(1.0, 2.0)"),
    # constructors: numpy's float64 default spelled out; int arange stays int64
    ("return x + torch.from_numpy(np.zeros((2, x.size(1))))",
     "return x + torch.zeros((2, x.size(1)), dtype=torch.float64)"),
    ("return x + torch.from_numpy(np.ones(x.size(1), dtype=np.float32))",
     "return x + torch.ones(x.size(1), dtype=torch.float32)"),
    ("return x + torch.from_numpy(np.arange(x.size(1)))", "return x + torch.arange(x.size(1))"),
    ("return x + torch.from_numpy(np.arange(0.0, 1.0, 0.25))",
     "return x + torch.arange(0.0, 1.0, 0.25, dtype=torch.float64)"),
    ("return x + torch.from_numpy(np.full(3, 2))",
     "return x + torch.full(3, 2, dtype=torch.int64)"),
    ("return x + torch.from_numpy(np.linspace(0, 1, x.size(1)))",
     "return x + torch.linspace(0, 1, x.size(1), dtype=torch.float64)"),
    ("return x + torch.from_numpy(np.hamming(x.size(1)))",
     "return x + torch.hamming_window(x.size(1), periodic=False, dtype=torch.float64)"),
    ("return x + torch.from_numpy(np.array([1.0, 2.0]))",
     "return x + torch.tensor([1.0, 2.0], dtype=torch.float64)"),
    # elementwise, reductions, shapes on arrays from tensors
    ("return torch.from_numpy(np.clip(np.exp(torch.sigmoid(x).numpy()), 0.0, 1.5))",
     "return torch.clamp(torch.exp(torch.sigmoid(x)), 0.0, 1.5)"),
    ("return torch.from_numpy(np.argmax(x.detach().cpu().numpy(), axis=1))",
     "return torch.argmax(x.detach().cpu(), dim=1)"),
    ("return torch.from_numpy(x.detach().numpy().sum(axis=-1, keepdims=True))",
     "return x.detach().sum(dim=-1, keepdim=True)"),
    ("return torch.from_numpy(x.data.numpy().max(axis=0))", "return x.data.amax(dim=0)"),
    ("return torch.from_numpy(np.std(x.float().numpy(), axis=1))",
     "return torch.std(x.float(), dim=1, correction=0)"),
    ("return torch.from_numpy(np.mean(x.long().numpy(), axis=0))",
     "return torch.mean(x.long().to(torch.float64), dim=0)"),
    ("return torch.from_numpy(np.concatenate([x.float().numpy(), x.float().numpy()], axis=1))",
     "return torch.cat([x.float(), x.float()], dim=1)"),
    ("return torch.from_numpy(np.expand_dims(x.float().numpy(), 0))",
     "return torch.unsqueeze(x.float(), 0)"),
    ("return torch.from_numpy(np.transpose(x.float().numpy(), (1, 0)))",
     "return torch.permute(x.float(), [1, 0])"),
    ("return torch.from_numpy(x.long().numpy().astype(np.float32))",
     "return x.long().to(torch.float32)"),
    ("return torch.from_numpy(np.where(x.numpy() > 0, x.float().numpy(), 0.0))",
     "return torch.where(x > 0, x.float(), 0.0)"),
    ("return torch.from_numpy(np.maximum(x.float().numpy(), 0.0))",
     "return torch.clamp(x.float(), min=0.0)"),
    ("return torch.from_numpy(x.float().numpy().copy())", "return x.float().clone()"),
    ("return x.size(0) + x.float().numpy().ndim", "return x.size(0) + x.float().dim()"),
    # integer true division and int * float: computed in float64 like numpy
    ("return torch.from_numpy(np.arange(x.size(1)) / x.size(1))",
     "return torch.arange(x.size(1)).to(torch.float64) / x.size(1)"),
    ("return torch.from_numpy(np.arange(x.size(1)) * 0.5)",
     "return torch.arange(x.size(1)).to(torch.float64) * 0.5"),
    # a float32 array with a numpy float64 scalar is float64 in numpy 2
    ("return torch.from_numpy(x.float().numpy() * np.sqrt(2.0))",
     "return x.float().to(torch.float64) * math.sqrt(2.0)"),
    # torch.as_tensor / torch.tensor wrappers
    ("return torch.as_tensor(np.arange(x.size(1)), dtype=torch.float32)",
     "return torch.arange(x.size(1)).to(dtype=torch.float32)"),
    ("return torch.tensor(np.arange(x.size(1)))", "return torch.arange(x.size(1)).clone()"),
    ("return torch.tensor(np.arange(x.size(1)), dtype=torch.float32)",
     "return torch.arange(x.size(1)).to(dtype=torch.float32, copy=True)"),
]


@pytest.mark.parametrize(("before", "after"), TRANSLATIONS, ids=[t[0] for t in TRANSLATIONS])
def test_translation(before: str, after: str) -> None:
    result = rewrite(model(before))
    assert result.text == translated(after), reasons(result)
    assert [c.rule for c in result.changes] == ["numpy-to-torch"]
    # every numpy use of the line is reported fixed, none refused
    assert result.fixes and {f.code for f in result.fixes} == {"TSF205"}
    assert not [s for s in result.skips if s.code]


def test_each_numpy_use_is_reported_fixed_with_the_checks_message() -> None:
    result = rewrite(model("a = torch.from_numpy(np.clip(np.exp(x.float().numpy()), 0.0, 1.0))",
                           "return a * np.pi"))
    line = 12
    assert findings(result) == [
        ("fixed", line, "numpy (numpy.clip) in forward()", ""),
        ("fixed", line, "numpy (numpy.exp) in forward()", ""),
        ("fixed", line, "numpy (torch.from_numpy) in forward()", ""),
        ("fixed", line, "numpy (x.float().numpy) in forward()", ""),
        ("fixed", line + 1, "numpy (numpy.pi) in forward()", ""),
    ]
    assert result.text == translated(
        "a = torch.clamp(torch.exp(x.float()), 0.0, 1.0)", "return a * math.pi")


REFUSED = [
    ("a = np.percentile(x.detach().numpy(), 99)", "torch.quantile"),
    ("a = np.median(x.float().numpy())", "lower one"),
    ("a = np.random.rand(3)", "numpy's generator"),
    ("a = np.fft.rfft(x.float().numpy())", "np.fft"),
    ("a = np.sort(x.float().numpy())", "ties"),
    ("a = np.searchsorted(x.float().numpy(), 0.5)", "searchsorted"),
    ("a = np.exp(x.numpy())", "its dtype is unknown"),
    ("a = x.numpy() / 2", "dtype of an array here is unknown"),
    ("a = x.numpy() * 0.5", "dtype of an array here is unknown"),
    ("a = np.exp(x)", "of the torch Tensor `x`"),
    ("a = np.log2(x.size(0))", "does not script"),
    ("a = x.float().numpy().tolist()", "element type"),
    ("a = x.float().numpy().T", "`.T`"),
    ("a = np.where(x.numpy() > 0, 1.0, 0.0)", "two float numbers"),
    ("a = np.floor(x.long().numpy())", "only float arrays"),
    ("a = np.linspace(0, 1, 5, endpoint=False)", "endpoint"),
    ("a = np.concatenate([x.float().numpy(), x.long().numpy()])", "dtypes differ"),
    ("a = np.cumsum(x.float().numpy())", "flattens"),
    ("a = np.sum(x.to(torch.uint8).numpy())", "uint64"),
    ("a = np.arange(n)", "int or a float"),
]


@pytest.mark.parametrize(("line", "reason"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_with_reason(line: str, reason: str) -> None:
    code = model(line, "return x", params="x, n=None")
    result = rewrite(code)
    assert result.text == textwrap.dedent(code)
    assert not result.changes and not result.fixes
    # each numpy use of the line is a TSF205 refusal that carries the reason
    refused = [f for f in findings(result) if f[1] == 12]
    assert refused and all(kind == "refused" and reason in why for kind, _, _, why in refused), \
        findings(result)


def test_a_numpy_annotation_is_refused_and_the_value_still_translated() -> None:
    result = rewrite(model("a: np.float64 = np.sqrt(2.0)", "return x * a"))
    assert result.text == translated("a: np.float64 = math.sqrt(2.0)", "return x * a")
    assert findings(result) == [
        ("refused", 12, "numpy (numpy.float64) in forward()",
         "forward(): numpy in a type annotation is not translated"),
        ("fixed", 12, "numpy (numpy.sqrt) in forward()", "")]


# ---- chains of names -------------------------------------------------------------------------

def test_a_chain_is_translated_together() -> None:
    result = rewrite(model(
        "lens = lengths.cpu().numpy()",
        "mask = np.arange(x.size(1))[None, :] < lens[:, None]",
        "n = int(lens.max())",
        "mask = torch.from_numpy(mask).to(x.device)",
        "return x[:, :n] * mask[:, :n, None]", params="x, lengths"))
    assert result.text == translated(
        "lens = lengths.cpu()",
        "mask = torch.arange(x.size(1))[None, :] < lens[:, None]",
        "n = int(lens.max())",
        "mask = mask.to(x.device)",
        "return x[:, :n] * mask[:, :n, None]", params="x, lengths")
    assert result.changes[0].summary == \
        "translated np.arange, .numpy(), torch.from_numpy (3 sites)"
    assert any("2**24" in note for note in result.changes[0].notes)


def test_an_array_read_by_untranslated_numpy_keeps_the_whole_chain() -> None:
    code = model("a = x.float().numpy()",
                 "b = np.exp(a)",
                 "c = np.percentile(b, 50)",
                 "return x * float(c)")
    result = rewrite(code)
    assert result.text == code and not result.changes
    assert any("`b` would become a Tensor, but line" in r for r in reasons(result))
    assert [kind for kind, *_ in findings(result)] == ["refused"] * 3


def test_a_zero_dim_reduction_is_not_used_as_an_int() -> None:
    code = model("n = np.sum(x.long().numpy() > 0)", "return x[:, :n]")
    result = rewrite(code)
    assert result.text == code and not result.changes
    assert any("would become a Tensor" in r for r in reasons(result))


@pytest.mark.parametrize("line", ["return np.exp(x.float().numpy())",
                                  "self.cache = np.zeros(3)"])
def test_an_array_returned_or_stored_is_not_translated(line: str) -> None:
    code = model(line)
    result = rewrite(code)
    assert result.text == code and not result.changes
    assert any("numpy array" in r for r in reasons(result)), reasons(result)


def test_astype_that_may_alias_is_not_written_into() -> None:
    code = model("a = x.float().numpy().astype(np.float32)", "a[0] = 1.0",
                 "return torch.from_numpy(a)")
    result = rewrite(code)
    assert result.text == code and not result.changes
    assert any("share memory" in r for r in reasons(result))


def test_eager_only_branch_that_reads_the_array_blocks_it() -> None:
    code = model("a = np.zeros(3)",
                 "if not torch.jit.is_scripting():",
                 "    print(a.dtype)",
                 "return x + torch.from_numpy(a)")
    result = rewrite(code)
    assert result.text == code and not result.changes
    assert any("only runs in eager mode" in r for r in reasons(result))


def test_numpy_in_branches_and_loops() -> None:
    result = rewrite(model(
        "acc = np.zeros(x.size(1))",
        "for i in range(x.size(0)):",
        "    acc = acc + np.ones(x.size(1))",
        "if x.size(0) > 1:",
        "    acc = acc * 2",
        "return x + torch.from_numpy(acc).float()"))
    assert result.text == translated(
        "acc = torch.zeros(x.size(1), dtype=torch.float64)",
        "for i in range(x.size(0)):",
        "    acc = acc + torch.ones(x.size(1), dtype=torch.float64)",
        "if x.size(0) > 1:",
        "    acc = acc * 2",
        "return x + acc.float()")


# ---- which methods: compiled ones only ---------------------------------------------------------

def test_an_ignored_helper_is_left_untouched_and_not_reported() -> None:
    code = (HEADER + "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return self.stats(x) * np.sqrt(2.0)\n\n"
            "    @torch.jit.ignore\n"
            "    def stats(self, x):\n"
            "        return torch.from_numpy(np.exp(x.numpy()) * np.pi)\n")
    result = rewrite(code)
    assert result.text == MATH + code.replace("* np.sqrt(2.0)", "* math.sqrt(2.0)")
    assert findings(result) == [("fixed", 8, "numpy (numpy.sqrt) in forward()", "")]
    assert not result.skips


def test_code_that_never_compiles_is_left_untouched_and_not_reported() -> None:
    for code in NumpyToTorch.VALID[1:2]:
        result = rewrite(code)
        assert result.text == code and not result.changes
        assert not result.fixes and not [s for s in result.skips if s.code]
    # after `if torch.jit.is_scripting(): return ...` nothing compiles either
    code = (HEADER + "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        if torch.jit.is_scripting():\n"
            "            return x\n"
            "        return x * np.exp(x.detach().numpy())\n")
    result = rewrite(code)
    assert result.text == code and not result.fixes and not result.skips


def test_an_exported_method_is_translated() -> None:
    code = (HEADER + "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x\n\n"
            "    @torch.jit.export\n"
            "    def scaled(self, x):\n"
            "        return x / np.sqrt(x.size(-1))\n")
    result = rewrite(code)
    assert result.text == MATH + code.replace("np.sqrt", "math.sqrt")
    assert findings(result) == [("fixed", 12, "numpy (numpy.sqrt) in scaled()", "")]


def test_helper_methods_reached_from_forward_are_translated() -> None:
    code = (HEADER + "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return self.scale(x)\n\n"
            "    def scale(self, x):\n"
            "        return x / np.sqrt(x.size(-1))\n\n"
            "    def unused(self, x):\n"
            "        return x / np.sqrt(x.size(-1))\n")
    result = rewrite(code)
    assert result.text == MATH + code.replace("np.sqrt", "math.sqrt", 1)


def test_a_one_line_method_body_is_translated() -> None:
    code = HEADER + "class M(nn.Module):\n    def forward(self, x): return x * np.pi\n"
    result = rewrite(code)
    assert result.text == (MATH + HEADER + "class M(nn.Module):\n    def forward(self, x):\n"
                           "        return x * math.pi\n")
    assert findings(result) == [("fixed", 7, "numpy (numpy.pi) in forward()", "")]


def test_numpy_in_a_nested_function_is_refused_with_its_reason() -> None:
    code = model("def f(t):", "    return np.exp(t)", "return f(x)")
    result = rewrite(code)
    assert result.text == code
    assert findings(result) == [("refused", 13, "numpy (numpy.exp) in forward()",
                                 "forward(): numpy inside a nested function or class")]


def test_blockers_fixture_reports_numpy_once_for_its_class() -> None:
    path = FIXTURES_ROOT / "check" / "blockers.py"
    text = path.read_text()
    result = rewrite_source(text, RewriteSettings([NumpyToTorch], output=False), str(path))
    marked = [number for number, line in enumerate(text.splitlines(), 1) if "# TSF205" in line]
    assert [(f.class_name, f.line, f.message) for f in result.fixes] == [
        ("NumpyCall", marked[0], "numpy (numpy.sqrt) in forward()")]
    assert not [s for s in result.skips if s.code]


# ---- imports, shadowing, no numpy ------------------------------------------------------------

def test_import_torch_is_added_when_only_nn_is_imported() -> None:
    code = ("import numpy as np\nfrom torch import nn\n\n\n"
            "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x + np.zeros(3).sum()\n")
    result = rewrite(code)
    assert result.text == ("import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
                           "class M(nn.Module):\n"
                           "    def forward(self, x):\n"
                           "        return x + torch.zeros(3, dtype=torch.float64).sum()\n")


def test_existing_math_import_and_alias_are_reused() -> None:
    code = ("import math as m\nimport numpy as np\nimport torch as th\nfrom torch import nn\n\n\n"
            "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x * np.sqrt(2.0) + th.from_numpy(np.ones(2))\n")
    result = rewrite(code)
    assert result.text == code.replace("np.sqrt(2.0) + th.from_numpy(np.ones(2))",
                                       "m.sqrt(2.0) + th.ones(2, dtype=th.float64)")


def test_a_local_np_is_not_numpy() -> None:
    code = model("np = self.d_model", "return x * np")
    result = rewrite(code)
    assert result.text == code and not result.fixes and not result.skips


def test_files_without_numpy_cost_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import torch\nfrom torch import nn\n\n\n"
            "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x.sqrt()\n")

    def walked(*_: object) -> None:
        raise AssertionError("a class was walked")

    monkeypatch.setattr(NumpyToTorch, "rewrite_class", walked)
    assert not NumpyToTorch.may_apply(AstFile(code))
    rule = NumpyToTorch(CodemodContext())
    rule.source_text = code
    tree = cst.parse_module(code)
    assert rule.transform_module(tree) is tree
    assert not rule.changes and not rule.fixes and not rule.skips


def test_a_numpy_import_inside_the_method_is_seen() -> None:
    code = ("import torch\nfrom torch import nn\n\n\n"
            "class M(nn.Module):\n"
            "    def forward(self, x):\n"
            "        import numpy as onp\n"
            "        return x * onp.sqrt(2.0)\n")
    assert NumpyToTorch.may_apply(AstFile(code))
    result = rewrite(code)
    assert result.text == MATH + code.replace("onp.sqrt", "math.sqrt")


# ---- the call table --------------------------------------------------------------------------

def test_every_table_entry_names_a_handler_and_none_is_also_refused() -> None:
    for name, (handler, arguments) in HANDLERS.items():
        method = getattr(NumpyCall, f"_{handler}", None)
        assert callable(method), (name, handler)
        assert method.__code__.co_argcount == 1 + len(arguments), (name, handler)
    assert not set(HANDLERS) & set(REFUSED_NAMES)


# ---- values and dtypes equal numpy's ---------------------------------------------------------

PARITY = [
    "np.arange(x.size(1)) / x.size(1)",
    "np.arange(x.size(1)) * 0.5 + 1",
    "np.exp(np.arange(0, 8, 2) * -(np.log(10000.0) / 8))",
    "np.sin(np.arange(x.size(1))[:, None] * np.ones(3))",
    "np.clip(np.arange(6), 0.5, 3)",
    "np.maximum(np.arange(6) - 2, 0)",
    "np.sqrt(np.arange(4, dtype=np.int32))",
    "np.mean(np.arange(6).reshape(2, 3), axis=1)",
    "np.var(np.linspace(0, 1, 7)[:, None], axis=0)",
    "np.argmax(np.stack([np.array([1.0, 3.0, 3.0]), np.array([2.0, 0.0, 1.0])]), axis=1)",
    "np.cumsum(np.arange(5, dtype=np.int32), axis=0)",
    "x.float().numpy() * np.sqrt(2.0)",
    "np.hanning(7).astype(np.float32)",
    "np.where(np.arange(4) > 1, np.arange(4), -1)",
    "np.concatenate([np.zeros(2), np.ones(3)])",
    "(2 ** (-8.0 / 4)) ** np.arange(1, 5)",
]


def _load(path: Path, text: str) -> types.ModuleType:
    """Import ``text`` from a real file (torch.jit.script reads the source)."""
    path.write_text(text)
    return load_module(path, path.stem)


@pytest.mark.parametrize("expression", PARITY)
def test_translated_values_and_dtypes_equal_numpys(expression: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    code = model(f"a = {expression}", "return torch.from_numpy(np.asarray(a))")
    code = code.replace("torch.from_numpy(np.asarray(a))", "torch.from_numpy(a)")
    result = rewrite(code)
    assert result.changes, reasons(result)
    forward = result.text[result.text.index("    def forward"):]
    assert "np." not in forward, forward
    x = torch.randn(2, 5)
    key = abs(hash(expression))
    original = _load(tmp_path / f"n2t_original_{key}.py", textwrap.dedent(code)).M()(x)
    translated_model = _load(tmp_path / f"n2t_translated_{key}.py", result.text).M()
    translated = translated_model(x)
    assert translated.dtype == original.dtype, (expression, translated.dtype, original.dtype)
    assert torch.allclose(translated, original, rtol=1e-12, atol=1e-12, equal_nan=True)
    scripted = torch.jit.script(translated_model)(x)
    assert scripted.dtype == original.dtype
    assert torch.allclose(scripted, original, rtol=1e-12, atol=1e-12, equal_nan=True)


# ---- the fixture pairs: what is translated, what is left and why ----------------------------

def test_fixture_classes_translated_and_left() -> None:
    rewritten: set[str] = set()
    refused: dict[str, set[str]] = {}
    for before, _ in fixture_pairs(FIXTURES):
        result = rewrite_source(
            before.read_text(), RewriteSettings([NumpyToTorch], output=False), str(before)
        )
        rewritten |= {c.class_name for c in result.changes}
        for skip in result.skips:
            if skip.code == "TSF205":
                refused.setdefault(skip.class_name, set()).add(skip.reason)
    assert rewritten == {"SinusoidalPositionalEncoding", "ALiBiBias", "MaskedMeanPool",
                         "PackedEncoder", "IntentClassifier", "GeluTanh",
                         "CausalSelfAttention", "FramedLogEnergy", "FeatureScaler"}
    assert set(refused) == {"RobustScaler", "Bucketizer"}
    assert any("np.percentile" in r for r in refused["RobustScaler"])
    assert any("np.searchsorted" in r for r in refused["Bucketizer"])


@pytest.mark.slow
def test_fixture_rewrites_save_and_load(tmp_path: Path) -> None:
    """Unlike ignore-numpy's, a translated class is a whole TorchScript artifact."""
    folder = copy_fixture(tmp_path, "numpy-to-torch", inputs_only=True)
    done = apply_with_report(folder, "numpy-to-torch")
    assert done.returncode == 0, done.stderr
    classes = done.classes
    assert len(classes) == 9
    for c in classes:
        assert c["verdict"] == "verified", c
        assert "save/load" in c["reason"] and "save fails" not in c["reason"], c
