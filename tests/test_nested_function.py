"""nested-function: what a function defined inside a compiled method reads from the method (its
captured names, passed by every call, typed from the method), where it goes (a method when it
reads self, else a module function), its name, the defaults the calls pass, each refusal with
its reason, and check's one TSF106 finding per site. The fixture pairs are
tests/test_fixtures.py's."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import warnings
from pathlib import Path
from types import ModuleType

import libcst as cst
import pytest
from conftest import rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.nested_function import NestedFunction

HEADER = "import torch\nimport torch.nn as nn\n\n\n"


rewrite = rule_rewriter(NestedFunction, header=HEADER)


def body(result: Rewrite) -> str:
    """The rewritten text after the header."""
    assert result.text.startswith(HEADER)
    return result.text[len(HEADER):]


def test_captured_names_lead_the_parameters_in_the_order_the_function_reads_them() -> None:
    result = rewrite("""\
        class Scale(nn.Module):
            def forward(self, x, w):
                n = x.shape[-1]

                def scaled(y):
                    return y * w / n + self.bias

                return scaled(x) + scaled(x * 2)
        """)
    assert body(result) == textwrap.dedent("""\
        class Scale(nn.Module):
            def forward(self, x, w):
                n = x.shape[-1]

                return self._forward_scaled(w, n, x) + self._forward_scaled(w, n, x * 2)

            # From forward(): TorchScript compiles no nested function.
            def _forward_scaled(self, w, n: int, y):
                return y * w / n + self.bias
        """)
    [change] = result.changes
    assert change.summary == ("scaled() moved out of forward() to method _forward_scaled(), "
                              "given w, n")
    # w is unannotated in forward and used as a Tensor: nothing to say; n is an int.
    assert change.notes == []
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF106", 9, "function 'scaled' defined inside forward()")]


def test_a_function_that_does_not_read_self_becomes_a_module_function_before_its_class() -> None:
    result = rewrite("""\
        class Smooth(nn.Module):
            def forward(self, x):
                w = x.mean()

                def scan(init_state, x, w):
                    \"\"\"Loops and accumulates.\"\"\"
                    return init_state * w + x

                return scan(x[0], x, w)
        """)
    assert body(result) == textwrap.dedent("""\
        # From Smooth.forward(): TorchScript compiles no nested function.
        def _forward_scan(init_state, x, w):
            \"\"\"Loops and accumulates.\"\"\"
            return init_state * w + x


        class Smooth(nn.Module):
            def forward(self, x):
                w = x.mean()

                return _forward_scan(x[0], x, w)
        """)


def test_a_captured_value_of_unknown_type_is_left_unannotated_and_noted() -> None:
    result = rewrite("""\
        class Pick(nn.Module):
            def forward(self, x):
                k = self.index
                scale = 0.5
                names = ["a", "b"]

                def pick(y):
                    return y[k] * scale, names[0]

                return pick(x)
        """)
    assert "    def _forward_pick(self, k, scale: float, names: List[str], y):\n" not in \
        result.text     # a module function: it does not read self
    assert "def _forward_pick(k, scale: float, names: List[str], y):\n" in result.text
    assert "from typing import List\n" in result.text
    assert result.changes[0].notes == [
        "_forward_pick(): the type of k is not known here; TorchScript takes it for a Tensor"]


def test_a_captured_name_rebound_after_the_def_is_passed_as_it_is_at_the_call() -> None:
    """A closure reads the name when it runs: the call passes the value of that moment."""
    result = rewrite("""\
        class Late(nn.Module):
            def forward(self, x):
                step = 1

                def shifted(y):
                    return y + step

                step = 2
                return shifted(x)
        """)
    assert "        return _forward_shifted(step, x)\n" in result.text
    assert not result.skips


def test_literal_defaults_are_typed_and_a_computed_default_is_passed_by_each_call() -> None:
    """speechbrain's ECAPA pooling: ``eps=self.eps`` is evaluated when the def runs; every call
    that omits it passes it, and the literal default before it leaves the signature too."""
    result = rewrite("""\
        class Pool(nn.Module):
            def __init__(self):
                super().__init__()
                self.eps = 1e-12

            def forward(self, x, m):
                def stats(x, m, dim=2, eps=self.eps, keep=False):
                    return (m * x).sum(dim, keepdim=keep).clamp(eps)

                return stats(x, m) + stats(x, m, 1) + stats(x, m, eps=0.5, keep=True)
        """)
    assert "def _forward_stats(x, m, dim: int, eps: float, keep: bool = False):\n" in result.text
    assert ("return (\n"
            "            _forward_stats(x, m, dim=2, eps=self.eps)\n"
            "            + _forward_stats(x, m, 1, eps=self.eps)\n"
            "            + _forward_stats(x, m, eps=0.5, keep=True, dim=2)\n"
            "        )\n") in result.text


def test_own_parameters_are_typed_by_what_every_call_passes() -> None:
    result = rewrite("""\
        class Crop(nn.Module):
            def forward(self, x):
                def crop(y, size):
                    return y[..., :size]

                return crop(x, 3) + crop(x * 2, x.dim())
        """)
    assert "def _forward_crop(y, size: int):\n" in result.text


def test_the_new_name_avoids_names_of_the_file_and_of_nn_module() -> None:
    result = rewrite("""\
        class Hooked(nn.Module):
            def forward(self, x):
                def hooks(y):
                    return y * self.gain

                def scaled(y):
                    return y * self.gain

                return hooks(x) + scaled(x)

            def _forward_scaled(self, x):
                return x
        """)
    # nn.Module keeps its hooks in self._forward_hooks; the class has a _forward_scaled.
    assert "    def _forward_hooks_2(self, y):\n" in result.text
    assert "    def _forward_scaled_2(self, y):\n" in result.text
    assert "return self._forward_hooks_2(x) + self._forward_scaled_2(x)\n" in result.text


def test_a_method_forward_calls_is_handled_and_code_never_compiled_is_not() -> None:
    result = rewrite("""\
        class Helper(nn.Module):
            def forward(self, x):
                if not torch.jit.is_scripting():
                    def show(y):
                        print(y)
                    show(x)
                return self.pad(x)

            def pad(self, x):
                width = 2

                def padded(y):
                    return torch.nn.functional.pad(y, (width, 0))

                return padded(x)
        """)
    assert "            def show(y):\n" in result.text
    assert "        return _pad_padded(width, x)\n" in result.text
    assert "def _pad_padded(width: int, y):\n" in result.text
    assert [s.reason for s in result.skips] == []


REFUSED = {
    "used as a value (map)": (
        "def f(y):\n    return y\nreturn list(map(f, [x]))[0]",
        "it is used as a value, not only called"),
    "returned": ("def f(y):\n    return y\ng = f\nreturn g(x)",
                 "it is used as a value, not only called"),
    "recursive": ("def f(y, n):\n    return y if n == 0 else f(y, n - 1)\nreturn f(x, 2)",
                  "it calls itself (TorchScript has no recursion)"),
    "generator": ("def f(y):\n    yield y\nreturn f(x)", "it is a generator"),
    "decorated": ("@torch.no_grad()\ndef f(y):\n    return y\nreturn f(x)",
                  "it is decorated"),
    "star args": ("def f(*ys):\n    return ys[0]\nreturn f(x)",
                  "it takes *args or **kwargs"),
    "keyword-only": ("def f(y, *, k=1):\n    return y * k\nreturn f(x)",
                     "keyword-only or positional-only"),
    "nonlocal": ("n = 1\ndef f(y):\n    nonlocal n\n    n = 2\n    return y\n"
                 "return f(x) * n", "it declares nonlocal or global names"),
    "inside an if": ("if x.dim() > 1:\n    def f(y):\n        return y\n"
                     "    return f(x)\nreturn x", "it is defined inside a block"),
    "defined twice": ("def f(y):\n    return y\ndef f(y):\n    return -y\n"
                      "return f(x)", "bound more than once"),
    "called before its def": ("for i in range(2):\n    if i == 1:\n        x = f(x)\n"
                              "    else:\n        x = x * 2\n"
                              "def f(y):\n    return y\nreturn f(x)",
                              "it is called before its def"),
    "called from a lambda": ("def f(y):\n    return y\ng = lambda y: f(y)\n"
                             "return g(x)", "used inside another function or lambda"),
    "reads another nested function": (
        "def g(y):\n    return y\ndef f(y):\n    return g(y)\nreturn f(x)",
        "it uses g, defined in forward() as a function"),
    "star call": ("def f(y):\n    return y\nreturn f(*[x])",
                  "a call passes *args or **kwargs"),
    "comprehension rebinds a captured name": (
        "n = 2\ndef f(y):\n    return y * n\nreturn [f(x) for n in range(3)][0]",
        "a comprehension that binds n"),
    "default with a call": ("def f(y, z=torch.zeros(1)):\n    return y + z\nreturn f(x)",
                            "its default `torch.zeros(1)` is computed when the def runs"),
    "default from a re-bound local": (
        "k = 1\ndef f(y, s=k):\n    return y * s\nk = 2\nreturn f(x)",
        "its default `k` reads k, which forward() re-binds"),
    "default from an attribute forward assigns": (
        "self.count = self.count + 1\ndef f(y, c=self.count):\n    return y * c\n"
        "return f(x)", "reads self.count, which a method other than __init__ assigns"),
    "super": ("def f(y):\n    return super().forward(y)\nreturn f(x)",
              "it uses super() or __class__"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_functions_stay_and_say_why(case: str) -> None:
    code, why = REFUSED[case]
    source = (HEADER + "class M(nn.Module):\n    def forward(self, x):\n"
              + textwrap.indent(code, "        ") + "\n")
    cst.parse_module(source)
    result = rewrite_source(source, RewriteSettings([NestedFunction]), "m.py")
    assert result.text == source and not result.changes and not result.fixes
    refused = [s for s in result.skips if why in s.reason]
    assert refused, [s.reason for s in result.skips]
    assert all(s.code == "TSF106" and s.message.startswith(("function 'f' defined inside",
                                                             "function 'g' defined inside"))
               for s in result.skips)


def test_check_shows_one_tsf106_per_site_with_the_fix_or_the_refusal() -> None:
    source = HEADER + textwrap.dedent("""\
        class M(nn.Module):
            def forward(self, x):
                def double(y):
                    return y * 2

                def each(y):
                    return y + 1

                class Box:
                    pass

                return double(x) + list(map(each, [x]))[0]
        """)
    findings = [f for f in check_source(source, "m.py") if f.code == "TSF106"]
    by_line = {f.line: f for f in findings}
    assert len(by_line) == len(findings) == 3
    assert by_line[7].fix == "nested-function" and not by_line[7].refused
    assert by_line[10].fix is None
    assert by_line[10].refused.startswith(
        "nested-function: left where it is: it is used as a value")
    # A class defined inside forward is the linter's own finding, with no rule to fix it.
    assert by_line[13].fix is None and not by_line[13].refused
    assert by_line[13].message == "class 'Box' defined inside forward()"


# ---- measured on torch: the rewrite scripts and matches the original ---------------------------

MEASURED = HEADER + textwrap.dedent("""\
    class Forms(nn.Module):
        def __init__(self):
            super().__init__()
            self.eps = 1e-3
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            L = x.shape[-1]
            step = 1

            def shifted(y, dim=1, eps=self.eps):
                return self.proj(y).sum(dim).clamp(eps) * L + step

            step = 2
            total = shifted(x) + shifted(x * 2, 0 if L < 0 else 1)
            return [shifted(t) for t in [x, total.unsqueeze(-1).expand(-1, L)]][1]
    """)


def _load(tmp_path: Path, name: str, text: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_rewrite_scripts_with_the_originals_results_and_export_needs_none(
        tmp_path: Path) -> None:
    """The original fails to script; the rewrite (a captured name re-bound after the def, a
    default read from self, a call in a comprehension) scripts and gives the original's
    results. torch.export takes the original as it is (why the rule serves TorchScript only)."""
    torch = pytest.importorskip("torch")
    rewritten = rewrite_source(MEASURED, RewriteSettings([NestedFunction]), "m.py").text
    assert rewritten != MEASURED
    original = _load(tmp_path, "nested_original", MEASURED)
    moved = _load(tmp_path, "nested_moved", rewritten)
    x = torch.randn(3, 4)
    torch.manual_seed(0)
    reference = original.Forms().eval()
    torch.manual_seed(0)
    candidate = moved.Forms().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="function definitions aren't supported"):
            torch.jit.script(reference)
        scripted = torch.jit.script(candidate)
        with torch.no_grad():
            expected = reference(x)
            torch.testing.assert_close(scripted(x), expected, rtol=1e-4, atol=1e-5)
            exported = torch.export.export(reference, (x,))
            assert torch.equal(exported.module()(x), expected)


def test_a_comment_right_above_the_def_moves_with_it_and_one_about_the_method_stays() -> None:
    result = rewrite("""\
        class Pad(nn.Module):
            def forward(self, x):
                # the padding logic of the reference implementation

                # how much to pad on the left
                def left(k):
                    return k // 2

                return x[..., left(4):]
        """)
    assert body(result) == textwrap.dedent("""\
        # From Pad.forward(): TorchScript compiles no nested function.
        # how much to pad on the left
        def _forward_left(k: int):
            return k // 2


        class Pad(nn.Module):
            def forward(self, x):
                # the padding logic of the reference implementation

                return x[..., _forward_left(4) :]
        """)
