"""foreign-class: a module constructed in compiled code is built once in __init__ when its
arguments are constants of the instance (its buffers kept out of state_dict), else its call
moves into a @torch.jit.ignore method (a Python-only artifact); refusals say why; plain
classes of the file, which TorchScript compiles, are left alone."""

from __future__ import annotations

import io
import sys
import textwrap
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, load_module, rule_rewriter
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.rules.foreign_class import ForeignClass

rewrite = rule_rewriter(ForeignClass)
FIXTURES = FIXTURES_ROOT / "foreign-class"
HEAD = "import torch\nimport torch.nn as nn\n\nimport dsp_kit\n\n\n"
INIT = ("class M(nn.Module):\n"
        "    def __init__(self, rate: int = 4):\n"
        "        super().__init__()\n"
        "        self.rate = rate\n")
BUFFERS = ("        for _module in self._low_pass.modules():\n"
           "            for _name, _buffer in list(_module.named_buffers(recurse=False)):\n"
           "                _module.register_buffer(_name, _buffer, persistent=False)\n")


def model(*forward: str, init: str = INIT, params: str = "x") -> str:
    return (HEAD + init + f"\n    def forward(self, {params}):\n"
            + "".join(f"        {line}\n" for line in forward))


def test_a_foreign_module_from_settings_is_built_once_with_its_buffers_kept_out() -> None:
    result = rewrite(model("y = dsp_kit.LowPass(1.0 / self.rate, 9)(x)",
                           "return dsp_kit.LowPass(1.0 / self.rate, 9)(y)"))
    assert result.text == model(
        "y = self._low_pass(x)", "return self._low_pass(y)",
        init=INIT + "        self._low_pass = dsp_kit.LowPass(1.0 / self.rate, 9)\n" + BUFFERS)
    assert [(f.code, f.line) for f in result.fixes] == [("TSF248", 13), ("TSF248", 14)]
    [change] = result.changes
    assert change.summary == "forward(): LowPass built once in __init__ as self._low_pass"
    assert not change.python_only and change.notes == []


def test_modules_of_the_file_and_of_torch_nn_need_no_buffer_loop_and_names_stay_fresh() -> None:
    local = ("class Gain(nn.Module):\n    def __init__(self, k: float):\n"
             "        super().__init__()\n        self.k = k\n\n"
             "    def forward(self, x):\n        return x * self.k\n\n\n")
    init = INIT + "        self._gain = 1\n"
    code = model("g = Gain(2.0)", "y = g(x) + Gain(-1.0)(x)",
                 "return nn.Softmax(dim=self.rate - 5)(nn.ReLU()(y))", init=local + init)
    assert rewrite(code).text == model(
        "g = self._gain_2", "y = g(x) + self._gain_3(x)",
        "return self._softmax(self._relu(y))",
        init=local + init + "        self._gain_2 = Gain(2.0)\n        self._gain_3 = Gain(-1.0)\n"
        "        self._softmax = nn.Softmax(dim=self.rate - 5)\n        self._relu = nn.ReLU()\n")


def test_a_module_built_from_forward_values_is_called_from_an_ignored_method() -> None:
    result = rewrite(model("n = x.size(-1)", "return dsp_kit.Decimate(factor)(x[..., :n]) + 1",
                           params="x, factor: int"))
    assert result.text == HEAD + INIT + textwrap.indent(textwrap.dedent('''
        def forward(self, x, factor: int):
            n = x.size(-1)
            return self._decimate(factor, x, n) + 1

        @torch.jit.ignore
        def _decimate(self, factor: int, x: torch.Tensor, n: int) -> torch.Tensor:
            """Runs in Python only (torch.jit.ignore): TorchScript cannot construct Decimate."""
            return dsp_kit.Decimate(factor)(x[..., :n])
        '''), "    ")
    [change] = result.changes
    assert change.python_only
    assert change.notes == [
        "python only: _decimate() is @torch.jit.ignore; the scripted artifact runs from Python "
        "but cannot be saved with torch.jit.save nor exported to ONNX (build the object in "
        "__init__ from constant arguments for an artifact that saves)"]


def test_a_construction_inside_a_moved_call_moves_with_it_and_one_beside_it_stays_a_site(
        ) -> None:
    code = model("return dsp_kit.Decimate(n)(dsp_kit.Decimate(2)(x)) + "
                 "dsp_kit.Decimate(self.rate)(x)", params="x, n: int")
    result = rewrite(code)
    assert result.text == HEAD + INIT.replace(
        "        self.rate = rate\n",
        "        self.rate = rate\n        self._decimate_2 = dsp_kit.Decimate(self.rate)\n"
        + BUFFERS.replace("_low_pass", "_decimate_2")) + textwrap.indent(textwrap.dedent('''
        def forward(self, x, n: int):
            return self._decimate(n, x) + self._decimate_2(x)

        @torch.jit.ignore
        def _decimate(self, n: int, x: torch.Tensor) -> torch.Tensor:
            """Runs in Python only (torch.jit.ignore): TorchScript cannot construct Decimate."""
            return dsp_kit.Decimate(n)(dsp_kit.Decimate(2)(x))
        '''), "    ")
    assert [f.column for f in result.fixes] == [16, 62]


@pytest.mark.parametrize(("code", "reason"), [
    (model("gain = dsp_kit.Decimate(n)", "return gain(x)", params="x, n: int"),
     "`n` is not a constant of the instance, and the new object is not called at once"),
    (model("return dsp_kit.Decimate(*self.sizes)(x)"), "passes *args or **kwargs"),
    (model("gain = dsp_kit.Wrap(self.conv)", "return gain(x)",
           init=INIT + "        self.conv = nn.Conv1d(1, 1, 3)\n"),
     "`self.conv` is not a constant of the instance"),
    (model("return dsp_kit.Decimate(2)(x)",
           init="class M(nn.Module):\n    rate = 4\n"),
     "the class has no __init__ of its own"),
    (model("return dsp_kit.Decimate(self.rate)(x)",
           init=INIT + "        if rate > 8:\n            return\n"),
     "__init__ returns early"),
    (model("gain = dsp_kit.Decimate(self.rate)", "self.rate = 2", "return gain(x)"),
     "`self.rate` is not a constant of the instance"),
    (model("return dsp_kit.Decimate(n)(self.proj(x))", params="x, n: int"),
     "the call calls `self.proj(...)`, which a @torch.jit.ignore method cannot call on the "
     "scripted module"),
    (model("k = self.pick(x)", "return dsp_kit.Decimate(k)(x)"),
     "the type of `k` is not known for the @torch.jit.ignore method's parameter"),
    (model("return dsp_kit.Decimate(n)(x)", params="x, n: int").replace("import torch\n", ""),
     "the file does not import torch"),
])
def test_refusals_say_why(code: str, reason: str) -> None:
    result = rewrite(code)
    assert result.text == code
    assert [s.code for s in result.skips] == ["TSF248"]
    assert reason in result.skips[0].reason


def test_plain_classes_ignored_methods_and_eager_only_code_are_left_alone() -> None:
    code = HEAD + textwrap.dedent('''\
        from roi_align import RoIAlignFunction
        from torch.autograd import Function


        class Crop(Function):
            def forward(self, x):
                return x[..., 1:]


        class Scale:
            def __init__(self, k: float):
                self.k = k

            def apply(self, x):
                return x * self.k


        class M(nn.Module):
            def forward(self, x):
                if not torch.jit.is_scripting():
                    x = dsp_kit.Decimate(2)(x)
                x = RoIAlignFunction(7, 7)(Crop()(x))
                return Scale(2.0).apply(self.show(x)) + torch.Size([1])[0]

            @torch.jit.ignore
            def show(self, x):
                return dsp_kit.Decimate(2)(x)
        ''')
    result = rewrite(code)
    assert result.text == code and result.skips == [] and result.fixes == []


def test_check_reports_the_construction_with_the_fix() -> None:
    source = model("return dsp_kit.Decimate(self.rate)(x)")
    found = [(f.code, f.line, f.fix) for f in check_source(source, "m.py")
             if f.code == "TSF248"]
    assert found == [("TSF248", 13, "foreign-class")]


def test_may_apply_needs_a_called_call_or_a_module_class_of_the_file() -> None:
    assert ForeignClass.may_apply(AstFile(model("return dsp_kit.Decimate(2)(x)")))
    assert not ForeignClass.may_apply(AstFile(model("return dsp_kit.decimate(x, 2)")))


@pytest.fixture
def dsp_kit() -> Iterator[types.ModuleType]:
    sys.path.insert(0, str(FIXTURES))
    try:
        import dsp_kit as package

        yield package
    finally:
        sys.path.remove(str(FIXTURES))
        sys.modules.pop("dsp_kit", None)


@pytest.mark.slow
@pytest.mark.usefixtures("dsp_kit")
def test_the_fixtures_fail_to_script_before_and_script_with_parity_after() -> None:
    torch = pytest.importorskip("torch")
    cases = {"band_limit": ("BandLimiter", [(torch.randn(2, 3, 32),)], True),
             "decimate": ("Downsampler", [(torch.randn(2, 4, 24), 2),
                                          (torch.randn(1, 4, 30), 3)], False)}
    for stem, (name, calls, saves) in cases.items():
        before = getattr(load_module(FIXTURES / f"{stem}.in.py", f"fc_{stem}_in"), name)
        after = getattr(load_module(FIXTURES / f"{stem}.out.py", f"fc_{stem}_out"), name)
        torch.manual_seed(0)
        original = before().eval()
        rewritten = after().eval()
        rewritten.load_state_dict(original.state_dict())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # From a name imported from the package, torch 2.13 says either, depending on
            # what it resolved the name through before.
            with pytest.raises(Exception, match=r"Cannot instantiate class|Class Decimate does "
                                                r"not have an __init__ function defined"):
                torch.jit.script(original)
            scripted = torch.jit.script(rewritten)
        with torch.no_grad():
            for args in calls:
                torch.testing.assert_close(scripted(*args), original(*args),
                                           rtol=1e-4, atol=1e-5, msg=stem)
        if saves:
            torch.jit.save(scripted, io.BytesIO())
        else:
            with pytest.raises(RuntimeError, match="Could not export Python function"):
                torch.jit.save(scripted, io.BytesIO())


@pytest.mark.slow
def test_a_foreign_module_with_a_buffer_keeps_state_dict_and_saves(
        dsp_kit: types.ModuleType, tmp_path: Path) -> None:
    """The case the fixtures leave out: validation loads the original's weights into the
    scripted rewrite strictly, and a scripted module lists non-persistent buffers in its
    state_dict (torch 2.13), so validation calls it unverified; checked here by hand."""
    torch = pytest.importorskip("torch")
    source = model("return dsp_kit.LowPass(1.0 / self.rate, 9)(x)")
    written = tmp_path / "lowpass.py"
    written.write_text(rewrite(source).text)
    (tmp_path / "original.py").write_text(source)
    original = load_module(tmp_path / "original.py", "fc_lowpass_in").M()
    rewritten = load_module(written, "fc_lowpass_out").M()
    assert list(rewritten.state_dict()) == list(original.state_dict()) == []
    x = torch.randn(2, 3, 40)
    scripted = torch.jit.script(rewritten)
    saved = io.BytesIO()
    torch.jit.save(scripted, saved)
    saved.seek(0)
    assert torch.equal(torch.jit.load(saved)(x), original(x))
    torch.testing.assert_close(scripted(x), dsp_kit.LowPass(0.25, 9)(x), rtol=1e-4, atol=1e-5)
