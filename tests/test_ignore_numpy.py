"""The ``ignore-numpy`` rule: which statements move, their inputs, outputs and types, what it
refuses, and the fixture pairs (without and with validation)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs
from libcst.codemod import CodemodContext
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.base import Observations
from tsfix.codemods.rules.ignore_numpy import DOCSTRING, IgnoreNumpy

FIXTURES = FIXTURES_ROOT / "ignore-numpy"
HEADER = "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"


def _rewrite(code: str, *, observed: Observations | None = None,
             header: str = HEADER) -> Rewrite:
    return rewrite_source(header + textwrap.dedent(code), "model.py", [IgnoreNumpy],
                          observed=observed)


def _reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


def _unchanged(result: Rewrite) -> None:
    assert not result.changes
    assert "_numpy_" not in result.text


# ---- inputs and outputs (scope analysis) ------------------------------------------------------

def test_a_name_read_and_assigned_in_the_block_is_input_and_output() -> None:
    result = _rewrite("""\
        class Squash(nn.Module):
            def forward(self, x):
                x = torch.from_numpy(np.tanh(x.numpy()))
                return x * 2
        """)
    assert "        x = self._numpy_x(x)\n        return x * 2\n" in result.text
    assert "def _numpy_x(self, x: torch.Tensor) -> torch.Tensor:" in result.text
    assert "        return x\n" in result.text


def test_a_comprehension_variable_shadowing_a_local_is_not_an_input() -> None:
    result = _rewrite("""\
        class Table(nn.Module):
            def forward(self, x):
                t = x.size(0)
                w = torch.from_numpy(np.array([float(t) for t in range(3)]))
                return x * w * t
        """)
    # `t` inside the comprehension is the comprehension's own; the outer `t` is not read.
    assert "        w = self._numpy_w()\n" in result.text
    assert "def _numpy_w(self) -> torch.Tensor:" in result.text


def test_a_name_defined_earlier_in_the_block_is_not_an_input() -> None:
    result = _rewrite("""\
        class Gain(nn.Module):
            def forward(self, x):
                scale = 2.0
                scale = float(np.sqrt(x.size(-1)))
                return x * scale
        """)
    # `scale = 2.0` stays; the block reassigns it before reading: no input, one output.
    assert "        scale = 2.0\n        scale = self._numpy_scale(x)\n" in result.text
    assert "def _numpy_scale(self, x: torch.Tensor) -> float:" in result.text


def test_a_loop_carried_output_is_returned() -> None:
    result = _rewrite("""\
        class Recurrent(nn.Module):
            def forward(self, x):
                h = torch.zeros(4)
                for t in range(x.size(0)):
                    g = torch.sigmoid(x[t] + h)
                    h = torch.from_numpy(np.tanh(g.numpy()))
                    if t > 8:
                        return h
                return h
        """)
    # The loop returns, so the rule works inside it; `h` is read by the next iteration.
    assert "            h = self._numpy_h(g)\n" in result.text
    assert "def _numpy_h(self, g: torch.Tensor) -> torch.Tensor:" in result.text


def test_a_read_from_a_later_iteration_is_refused() -> None:
    result = _rewrite("""\
        class Delay(nn.Module):
            def forward(self, x):
                for step in range(x.size(0)):
                    if step > 0:
                        y = torch.from_numpy(np.tanh(prev.numpy()))
                        x = x + y
                    prev = x
                    if step > 5:
                        return x
                return x
        """)
    _unchanged(result)
    assert _reasons(result) == ["forward(): `prev` is read before it is assigned, from a later "
                                "iteration of the loop; it may be unbound; left alone"]


def test_several_outputs_come_back_as_a_tuple_in_assignment_order() -> None:
    result = _rewrite("""\
        class Spans(nn.Module):
            def forward(self, x, durations: List[int]):
                ends = np.cumsum(durations)
                total = int(ends[-1])
                first = int(ends[0])
                return x[:, first:total]
        """, header="from typing import List\n\n" + HEADER)
    assert "        total, first = self._numpy_total_and_first(durations)\n" in result.text
    assert ("def _numpy_total_and_first(self, durations: List[int]) -> Tuple[int, int]:"
            in result.text)
    assert "from typing import List, Tuple" in result.text
    assert "        return total, first\n" in result.text


def test_a_list_the_block_fills_in_place_is_handed_back() -> None:
    result = _rewrite("""\
        class Peaks(nn.Module):
            def forward(self, x):
                found: List[int] = []
                for row in x:
                    found.append(int(np.argmax(row.numpy())))
                return x[:, max(found)]
        """, header="from typing import List\n\n" + HEADER)
    assert "        found = self._numpy_found(x, found)\n" in result.text
    assert "-> List[int]:" in result.text


def test_an_unannotated_empty_list_gets_the_type_the_block_stores() -> None:
    code = """\
        class Peaks(nn.Module):
            def forward(self, x):
                found = []
                n = x.size(0)
                for row in x:
                    found.append(int(np.argmax(row.numpy())))
                return x[:, max(found)] * n
        """
    result = _rewrite(code)
    # TorchScript would make `[]` a List[Tensor]; the block stores ints.
    assert "        found: List[int] = []\n" in result.text
    assert "        found = self._numpy_found(x, found)\n" in result.text
    assert result.changes[0].summary.endswith("; declared found: List[int]")
    # Assigned twice: no single place to declare it.
    twice = _rewrite(code.replace("n = x.size(0)\n", "n = x.size(0)\n"
                                  "                if n > 9:\n"
                                  "                    found = []\n"))
    _unchanged(twice)
    assert _reasons(twice) == [
        "forward(): `found` is an unannotated empty literal, which TorchScript types "
        "List[Tensor], but the block stores List[int] in it (annotate it: `found: List[int] "
        "= ...`); left alone"]


def test_an_empty_list_made_for_the_block_moves_with_it() -> None:
    result = _rewrite("""\
        class Rows(nn.Module):
            def forward(self, x):
                rows = []
                for row in x.numpy():
                    rows.append(torch.from_numpy(np.sort(row)))
                return torch.stack(rows)
        """)
    assert "        rows = self._numpy_rows(x)\n        return torch.stack(rows)\n" in result.text
    assert "def _numpy_rows(self, x: torch.Tensor) -> List[torch.Tensor]:" in result.text
    assert "        rows = []\n        for row in x.numpy():" in result.text


def test_an_in_place_tensor_update_needs_no_output() -> None:
    result = _rewrite("""\
        class Fill(nn.Module):
            def forward(self, x):
                out = torch.zeros(3)
                out[0] = float(np.pi)
                return x + out
        """)
    # Tensors are shared with the ignored method; nothing comes back.
    assert "        self._numpy_block(out)\n" in result.text
    assert "def _numpy_block(self, out: torch.Tensor) -> None:" in result.text


# ---- how numpy is found ------------------------------------------------------------------------

def test_numpy_under_an_alias_and_from_numpy_import() -> None:
    result = _rewrite("""\
        class Interp(nn.Module):
            def forward(self, x):
                grid = onp.arange(x.size(-1))
                y = torch.from_numpy(lerp(grid, grid[::2], x.numpy()[0, ::2]))
                return y
        """, header="import numpy as onp\nimport torch\nfrom numpy import interp as lerp\n"
                    "from torch import nn\n\n\n")
    assert "        y = self._numpy_y(x)\n" in result.text
    assert "grid = onp.arange(x.size(-1))" in result.text.split("@torch.jit.ignore")[1]


def test_dot_numpy_alone_is_numpy() -> None:
    result = _rewrite("""\
        class Copy(nn.Module):
            def forward(self, x):
                y = torch.from_numpy(x.numpy().copy())
                return y
        """, header="import torch\nfrom torch import nn\n\n\n")
    assert "        y = self._numpy_y(x)\n" in result.text


def test_a_name_shadowing_the_numpy_alias_is_not_numpy() -> None:
    result = _rewrite("""\
        class Shadow(nn.Module):
            def forward(self, x, np: int):
                return x * np

            def other(self, x):
                np = 3
                return x * np
        """)
    _unchanged(result)
    assert result.skips == []


def test_a_numpy_value_pulls_the_statements_that_read_it_into_the_block() -> None:
    result = _rewrite("""\
        class Masked(nn.Module):
            def forward(self, x, lengths):
                lens = lengths.cpu().numpy()
                maxlen = int(lens.max())
                mask = torch.from_numpy(np.arange(maxlen)[None, :] < lens[:, None])
                return x[:, :maxlen] * mask.unsqueeze(-1)
        """)
    assert ("        maxlen, mask = self._numpy_maxlen_and_mask(lengths)\n"
            "        return x[:, :maxlen]" in result.text)
    assert "-> Tuple[int, torch.Tensor]:" in result.text


def test_a_numpy_free_statement_joins_only_when_a_numpy_value_crosses_it() -> None:
    result = _rewrite("""\
        class Bridge(nn.Module):
            def forward(self, x):
                a = np.hanning(x.size(-1))
                y = x * 2
                b = torch.from_numpy(a * 3)
                z = x + 1
                c = torch.from_numpy(np.ones(3))
                return y + b + z + c
        """)
    assert ("        y, b = self._numpy_y_and_b(x)\n        z = x + 1\n"
            "        c = self._numpy_c()\n") in result.text
    assert "2 numpy block(s)" in result.changes[0].summary


def test_a_compound_statement_moves_whole_when_nothing_escapes() -> None:
    result = _rewrite("""\
        class Guarded(nn.Module):
            def forward(self, x):
                with torch.no_grad():
                    z = torch.from_numpy(np.cos(x.numpy()))
                try:
                    w = torch.from_numpy(np.sin(x.numpy()))
                except ValueError:
                    w = x
                return z + w
        """)
    assert "        z, w = self._numpy_z_and_w(x)\n        return z + w\n" in result.text


def test_a_returning_block_returns_the_call() -> None:
    result = _rewrite("""\
        class Decode(nn.Module):
            def forward(self, x, greedy: bool):
                if greedy:
                    best = np.argmax(x.detach().numpy(), -1)
                    return torch.from_numpy(best)
                return x
        """)
    assert ("        if greedy:\n            return self._numpy_forward_result(x)\n"
            in result.text)


def test_helpers_and_exported_methods_are_compiled_code_too() -> None:
    result = _rewrite("""\
        class Stats(nn.Module):
            def forward(self, x):
                return self.helper(x)

            def helper(self, x):
                return torch.from_numpy(np.tanh(x.numpy()))

            @torch.jit.export
            def mean(self, x: torch.Tensor) -> float:
                m = float(np.mean(x.numpy()))
                return m

            def unused(self, x):
                return np.tanh(x)
        """)
    text = result.text
    # Each new method right after the one it came from; unreachable code is not touched.
    assert text.index("def helper") < text.index("def _numpy_helper_result") < text.index(
        "def mean") < text.index("def _numpy_m(") < text.index("def unused")
    assert "        return np.tanh(x)\n" in text


def test_a_numpy_import_inside_the_method_goes_with_the_block() -> None:
    result = _rewrite("""\
        class LocalImport(nn.Module):
            def forward(self, x):
                import numpy as np
                y = x * 2
                z = torch.from_numpy(np.tanh(y.numpy()))
                return z
        """, header="import torch\nfrom torch import nn\n\n\n")
    forward, new = result.text.split("@torch.jit.ignore")
    assert "import numpy" not in forward
    assert f"        {DOCSTRING}\n        import numpy as np\n        z = " in new


def test_code_torchscript_never_compiles_is_left_alone() -> None:
    result = _rewrite("""\
        class Plain(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("w", torch.from_numpy(np.hanning(8)))

            def forward(self, x):
                if not torch.jit.is_scripting():
                    print(np.mean(x.numpy()))
                if torch.jit.is_scripting():
                    y = x
                else:
                    y = torch.from_numpy(np.tanh(x.numpy()))
                return self.log(y * self.w)

            @torch.jit.ignore
            def log(self, value):
                return torch.from_numpy(np.round(value.numpy(), 2))
        """)
    _unchanged(result)
    assert result.skips == []


# ---- types ------------------------------------------------------------------------------------

ROBUST = """\
    class Robust(nn.Module):
        def __init__(self):
            super().__init__()
            self.smooth = nn.Conv1d(4, 4, 3, padding=1)

        def forward(self, mels):
            flat = mels.detach().numpy().ravel()
            floor, ceil = np.percentile(flat, [5.0, 95.0]).tolist()
            smoothed = self.smooth(mels)
            return (smoothed - floor) / (ceil - floor)
    """


def test_without_example_runs_an_untyped_numpy_result_is_left_and_reported() -> None:
    result = _rewrite(ROBUST)
    _unchanged(result)
    assert _reasons(result) == [
        "forward(): `floor` is read after the block, but its value comes from numpy and has "
        "no known TorchScript type (no example run observed one); left alone",
        "forward(): `floor` is read by the block but holds a numpy value from code before it "
        "that stays compiled (no TorchScript type); left alone",
    ]


def test_observed_local_types_type_the_outputs() -> None:
    observed = {"Robust": {"forward": {"mels": "Tensor", "local floor": "float",
                                       "local ceil": "float", "return": "Tensor"}}}
    result = _rewrite(ROBUST, observed=observed)
    assert "        floor, ceil = self._numpy_floor_and_ceil(mels)\n" in result.text
    assert ("def _numpy_floor_and_ceil(self, mels: torch.Tensor) -> Tuple[float, float]:"
            in result.text)
    assert result.changes[0].summary.endswith("; 2 type(s) from the example runs")
    assert result.skips == []


def test_an_observed_local_is_trusted_only_at_its_last_assignment() -> None:
    code = """\
        class Twice(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                scale = np.abs(x.numpy()).max().tolist()
                y = self.proj(x) * scale
                scale = 1
                return y * scale
        """
    observed = {"Twice": {"forward": {"local scale": "int"}}}
    result = _rewrite(code, observed=observed)
    # The observed int is the value of `scale = 1`, not of the numpy line.
    _unchanged(result)
    assert any("`scale` is read after the block" in r for r in _reasons(result))


def test_observed_parameter_types_type_the_inputs() -> None:
    code = """\
        class Window(nn.Module):
            def forward(self, x, size=None):
                w = torch.from_numpy(np.hanning(size))
                return x[..., :size] * w
        """
    assert "cannot tell the type of `size`" in _reasons(_rewrite(code))[0]
    result = _rewrite(code, observed={"Window": {"forward": {"size": "Optional[int]"}}})
    assert "def _numpy_w(self, size: Optional[int]) -> torch.Tensor:" in result.text


def test_a_variable_that_changes_type_is_refused() -> None:
    result = _rewrite("""\
        class Root(nn.Module):
            def forward(self, x, n: int):
                n = float(np.sqrt(n))
                return x * n
        """)
    _unchanged(result)
    assert _reasons(result) == ["forward(): `n` changes type in the block (int -> float); "
                                "TorchScript gives a variable one type; left alone"]


def test_an_output_assigned_on_some_paths_only_is_refused() -> None:
    result = _rewrite("""\
        class Maybe(nn.Module):
            def forward(self, x, flag: bool):
                if flag:
                    scale = float(np.sqrt(x.size(0)))
                return x * scale
        """)
    _unchanged(result)
    assert _reasons(result) == ["forward(): `scale` is assigned on some paths of the block "
                                "only and read after it; left alone"]


def test_a_return_of_unknown_type_is_refused() -> None:
    result = _rewrite("""\
        class Means(nn.Module):
            def forward(self, xs: List[torch.Tensor]):
                return [float(np.mean(t.numpy())) for t in xs]
        """, header="from typing import List\n\n" + HEADER)
    _unchanged(result)
    assert _reasons(result) == ["forward(): cannot tell the type the block returns; "
                                "left alone"]


# ---- refusals that keep the scripted module working -------------------------------------------

@pytest.mark.parametrize(("body", "reason"), [
    ("h = self.proj(x).detach().numpy()\n        return torch.from_numpy(np.tanh(h))",
     "the block calls self.proj(...), a submodule that cannot be called from a "
     "@torch.jit.ignore method of a scripted module ('ScriptModule' object is not callable; "
     "call .forward(...))"),
    ("w = torch.from_numpy(self.window)\n        return x * w",
     "the block reads self.window, a numpy value TorchScript drops from the scripted module "
     "(an ignored method cannot see it; register it as a buffer)"),
    ("self.history.append(float(np.mean(x.numpy())))\n        return x",
     "the block changes self.history in place (append), and under script an ignored method "
     "sees a copy of a list/dict attribute"),
    ("self.counts[0] = int(np.argmax(x.numpy()))\n        return x",
     "the block changes self.counts in place, and under script an ignored method sees a copy "
     "of a list/dict attribute"),
])
def test_blocks_that_would_break_under_script_are_refused(body: str, reason: str) -> None:
    code = ("class Refused(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.proj = nn.Linear(4, 4)\n"
            "        self.window = np.hanning(4)\n"
            "        self.history = []\n"
            "        self.counts = [0]\n\n"
            "    def forward(self, x):\n"
            f"        {body}\n")
    result = _rewrite(code)
    _unchanged(result)
    assert _reasons(result)[0] == f"forward(): {reason}; left alone"


def test_setting_an_attribute_is_allowed() -> None:
    # Measured: rebinding self.<attr> in an ignored method is seen by the scripted forward.
    result = _rewrite("""\
        class Tracker(nn.Module):
            def __init__(self):
                super().__init__()
                self.last = 0.0

            def forward(self, x):
                self.last = float(np.mean(x.numpy()))
                return x * self.last
        """)
    assert "        self._numpy_last(x)\n" in result.text
    assert "def _numpy_last(self, x: torch.Tensor) -> None:" in result.text


@pytest.mark.parametrize(("code", "reason"), [
    ("class Head(nn.Module):\n"
     "    def forward(self, x):\n"
     "        if np.any(x.numpy() > 0):\n"
     "            return x\n"
     "        return -x\n",
     "the `if` header uses numpy, and the statement cannot move as a whole: it contains "
     "`return`; left alone"),
    ("class Gen(nn.Module):\n"
     "    def forward(self, x):\n"
     "        yield float(np.pi)\n",
     "a generator (or coroutine) using numpy; left alone"),
    ("class OneLine(nn.Module):\n"
     "    def forward(self, x, flag: bool):\n"
     "        if flag: return torch.from_numpy(np.tanh(x.numpy()))\n"
     "        return x\n",
     "numpy in a one-line body of a statement that cannot move; left alone"),
])
def test_numpy_where_no_block_can_be_cut_is_reported(code: str, reason: str) -> None:
    result = _rewrite(code)
    _unchanged(result)
    assert _reasons(result)[0] == f"forward(): {reason}"


def test_a_file_without_import_torch_is_reported() -> None:
    result = _rewrite("""\
        class NoTorch(nn.Module):
            def forward(self, x):
                y = torch.from_numpy(np.tanh(x.numpy()))
                return y
        """, header="import numpy as np\nfrom torch import nn\n\n\n")
    _unchanged(result)
    assert "the file does not import torch" in _reasons(result)[0]


# ---- the new method and the record ------------------------------------------------------------

def test_names_never_collide_and_the_record_says_python_only() -> None:
    result = _rewrite("""\
        class Named(nn.Module):
            def __init__(self):
                super().__init__()
                self._numpy_window_2 = None

            def forward(self, x):
                window = torch.from_numpy(np.hanning(x.size(-1)))
                return x * window

            def _numpy_window(self):
                return 0
        """)
    assert "def _numpy_window_3(self, x: torch.Tensor) -> torch.Tensor:" in result.text
    change = result.changes[0]
    assert change.python_only
    assert change.summary == ("moved 1 numpy block(s) into @torch.jit.ignore methods: "
                              "_numpy_window_3 (line 12)")
    assert change.notes == [
        "python only: _numpy_window_3() is @torch.jit.ignore; the scripted artifact runs "
        "from Python but cannot be saved with torch.jit.save nor exported to ONNX "
        "(translate the numpy code to torch for an artifact that saves)"]


def test_the_decorator_and_tensor_follow_the_files_imports() -> None:
    result = _rewrite("""\
        class Aliased(nn.Module):
            def forward(self, x):
                y = T.from_numpy(np.tanh(x.numpy()))
                return y
        """, header="import numpy as np\nimport torch as T\nfrom torch import Tensor, nn\n\n\n")
    assert "    @T.jit.ignore\n    def _numpy_y(self, x: Tensor) -> Tensor:\n" in result.text


def test_the_rewrite_is_a_fixed_point() -> None:
    first = _rewrite("""\
        class Twice(nn.Module):
            def forward(self, x, lengths):
                lens = lengths.cpu().numpy()
                mask = torch.from_numpy(np.arange(x.size(1))[None, :] < lens[:, None])
                return x * mask
        """)
    assert first.changes
    again = rewrite_source(first.text, "model.py", [IgnoreNumpy])
    assert not again.changes and again.text == first.text


def test_files_without_numpy_are_not_analysed() -> None:
    rule = IgnoreNumpy(CodemodContext())
    rule.source_text = "import torch\n"
    rule.prepare(cst.parse_module("import torch\n"))
    assert not rule.active


# ---- fixtures ---------------------------------------------------------------------------------

# Typed only by the example runs: without validation the class is left alone and reported.
OBSERVED_ONLY = {"robust_norm.in.py"}


def test_every_fixture_has_its_expected_output() -> None:
    pairs = fixture_pairs(FIXTURES)
    assert len(pairs) >= 6
    for before, after in pairs:
        assert after.is_file(), f"{before} has no {after.name}"
        assert before.read_text() != after.read_text(), before.name


def test_fixture_pairs_without_validation(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "ignore-numpy", inputs_only=True)
    result = run([folder], Options(rules=["ignore-numpy"], verify=False))
    for before, after in fixture_pairs(FIXTURES):
        written = (folder / before.name).read_text()
        if before.name in OBSERVED_ONLY:
            assert written == before.read_text(), before.name
        else:
            assert written == after.read_text(), before.name
    skips = {(f.path.name, s.class_name) for f in result.files for s in f.skips}
    assert ("robust_norm.in.py", "RobustFeatureNorm") in skips
    assert ("ctc_greedy.in.py", "LMRescorer") in skips
    again = run([folder], Options(rules=["ignore-numpy"], verify=False))
    assert [f.status for f in again.files if f.status == "changed"] == []


def test_the_observed_only_fixture_is_reported_without_examples() -> None:
    before = FIXTURES / "robust_norm.in.py"
    result = rewrite_source(before.read_text(), before.name, [IgnoreNumpy])
    assert not result.changes
    assert "`floor` is read after the block" in result.skips[0].reason


@pytest.mark.slow
def test_fixture_pairs_are_verified(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "ignore-numpy", inputs_only=True)
    done = apply_with_report(folder, "ignore-numpy")
    assert done.returncode == 0, done.stderr
    classes = done.classes
    assert len(classes) == len(fixture_pairs(FIXTURES))
    assert {c["verdict"] for c in classes} == {"verified"}, classes
    for c in classes:
        assert "save fails as expected" in c["reason"], c
        assert any("cannot be saved with torch.jit.save" in n for n in c["notes"]), c
    for before, after in fixture_pairs(FIXTURES):
        assert (folder / before.name).read_text() == after.read_text(), before.name
