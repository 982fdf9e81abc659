"""The ``ignore-numpy`` rule: which statements move, their inputs, outputs and types, what it
refuses, and what it reports (TSF205: each numpy use of compiled code, fixed or refused).
Rewrites are compared whole; the fixture pairs are checked by ``tests/test_fixtures.py``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules import base
from tsfix.codemods.rules.base import Observations
from tsfix.codemods.rules.ignore_numpy import DOCSTRING, IgnoreNumpy

FIXTURES = FIXTURES_ROOT / "ignore-numpy"
HEADER = "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
LIST_HEADER = "from typing import List\n\n" + HEADER
TUPLE_HEADER = "from typing import Tuple\n\n" + HEADER


def _rewrite(code: str, *, observed: Observations | None = None,
             header: str = HEADER) -> Rewrite:
    return rewrite_source(
        header + textwrap.dedent(code),
        RewriteSettings([IgnoreNumpy]),
        FileContext("model.py", observed=observed),
    )


def _moved(code: str, expected: str, *, header: str = HEADER, after: str | None = None,
           observed: Observations | None = None) -> Rewrite:
    """Rewrite ``code`` and compare the whole output with ``after`` (the header it ends up
    with; default: ``header``) + ``expected``. ``{doc}`` in ``expected`` is the docstring
    line of a new method."""
    result = _rewrite(code, observed=observed, header=header)
    wanted = textwrap.dedent(expected).replace("{doc}", DOCSTRING)
    assert result.text == (after if after is not None else header) + wanted
    assert result.changes
    return result


def _reasons(result: Rewrite) -> list[str]:
    """The distinct skip reasons, in order."""
    return list(dict.fromkeys(s.reason for s in result.skips))


def _unchanged(result: Rewrite) -> None:
    assert not result.changes
    assert not result.fixes
    assert "_numpy_" not in result.text


# ---- inputs and outputs (scope analysis) ------------------------------------------------------

def test_a_name_read_and_assigned_in_the_block_is_input_and_output() -> None:
    _moved("""\
        class Squash(nn.Module):
            def forward(self, x):
                x = torch.from_numpy(np.tanh(x.numpy()))
                return x * 2
        """, """\
        class Squash(nn.Module):
            def forward(self, x):
                x = self._numpy_x(x)
                return x * 2

            @torch.jit.ignore
            def _numpy_x(self, x: torch.Tensor) -> torch.Tensor:
                {doc}
                x = torch.from_numpy(np.tanh(x.numpy()))
                return x
        """)


def test_a_comprehension_variable_shadowing_a_local_is_not_an_input() -> None:
    # `t` inside the comprehension is the comprehension's own; the outer `t` is not read.
    _moved("""\
        class Table(nn.Module):
            def forward(self, x):
                t = x.size(0)
                w = torch.from_numpy(np.array([float(t) for t in range(3)]))
                return x * w * t
        """, """\
        class Table(nn.Module):
            def forward(self, x):
                t = x.size(0)
                w = self._numpy_w()
                return x * w * t

            @torch.jit.ignore
            def _numpy_w(self) -> torch.Tensor:
                {doc}
                w = torch.from_numpy(np.array([float(t) for t in range(3)]))
                return w
        """)


def test_a_name_defined_earlier_in_the_block_is_not_an_input() -> None:
    # `scale = 2.0` stays; the block reassigns it before reading: no input, one output.
    _moved("""\
        class Gain(nn.Module):
            def forward(self, x):
                scale = 2.0
                scale = float(np.sqrt(x.size(-1)))
                return x * scale
        """, """\
        class Gain(nn.Module):
            def forward(self, x):
                scale = 2.0
                scale = self._numpy_scale(x)
                return x * scale

            @torch.jit.ignore
            def _numpy_scale(self, x: torch.Tensor) -> float:
                {doc}
                scale = float(np.sqrt(x.size(-1)))
                return scale
        """)


def test_a_loop_carried_output_is_returned() -> None:
    # The loop returns, so the rule works inside it; `h` is read by the next iteration.
    _moved("""\
        class Recurrent(nn.Module):
            def forward(self, x):
                h = torch.zeros(4)
                for t in range(x.size(0)):
                    g = torch.sigmoid(x[t] + h)
                    h = torch.from_numpy(np.tanh(g.numpy()))
                    if t > 8:
                        return h
                return h
        """, """\
        class Recurrent(nn.Module):
            def forward(self, x):
                h = torch.zeros(4)
                for t in range(x.size(0)):
                    g = torch.sigmoid(x[t] + h)
                    h = self._numpy_h(g)
                    if t > 8:
                        return h
                return h

            @torch.jit.ignore
            def _numpy_h(self, g: torch.Tensor) -> torch.Tensor:
                {doc}
                h = torch.from_numpy(np.tanh(g.numpy()))
                return h
        """)


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
    _moved("""\
        class Spans(nn.Module):
            def forward(self, x, durations: List[int]):
                ends = np.cumsum(durations)
                total = int(ends[-1])
                first = int(ends[0])
                return x[:, first:total]
        """, """\
        class Spans(nn.Module):
            def forward(self, x, durations: List[int]):
                total, first = self._numpy_total_and_first(durations)
                return x[:, first:total]

            @torch.jit.ignore
            def _numpy_total_and_first(self, durations: List[int]) -> Tuple[int, int]:
                {doc}
                ends = np.cumsum(durations)
                total = int(ends[-1])
                first = int(ends[0])
                return total, first
        """, header=LIST_HEADER, after="from typing import List, Tuple\n\n" + HEADER)


def test_a_list_the_block_fills_in_place_is_handed_back() -> None:
    _moved("""\
        class Peaks(nn.Module):
            def forward(self, x):
                found: List[int] = []
                for row in x:
                    found.append(int(np.argmax(row.numpy())))
                return x[:, max(found)]
        """, """\
        class Peaks(nn.Module):
            def forward(self, x):
                found: List[int] = []
                found = self._numpy_found(x, found)
                return x[:, max(found)]

            @torch.jit.ignore
            def _numpy_found(self, x: torch.Tensor, found: List[int]) -> List[int]:
                {doc}
                for row in x:
                    found.append(int(np.argmax(row.numpy())))
                return found
        """, header=LIST_HEADER)


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
    # TorchScript would make `[]` a List[Tensor]; the block stores ints.
    result = _moved(code, """\
        class Peaks(nn.Module):
            def forward(self, x):
                found: List[int] = []
                n = x.size(0)
                found = self._numpy_found(x, found)
                return x[:, max(found)] * n

            @torch.jit.ignore
            def _numpy_found(self, x: torch.Tensor, found: List[int]) -> List[int]:
                {doc}
                for row in x:
                    found.append(int(np.argmax(row.numpy())))
                return found
        """, after=LIST_HEADER)
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
    _moved("""\
        class Rows(nn.Module):
            def forward(self, x):
                rows = []
                for row in x.numpy():
                    rows.append(torch.from_numpy(np.sort(row)))
                return torch.stack(rows)
        """, """\
        class Rows(nn.Module):
            def forward(self, x):
                rows = self._numpy_rows(x)
                return torch.stack(rows)

            @torch.jit.ignore
            def _numpy_rows(self, x: torch.Tensor) -> List[torch.Tensor]:
                {doc}
                rows = []
                for row in x.numpy():
                    rows.append(torch.from_numpy(np.sort(row)))
                return rows
        """, after=LIST_HEADER)


def test_an_in_place_tensor_update_needs_no_output() -> None:
    # Tensors are shared with the ignored method; nothing comes back.
    _moved("""\
        class Fill(nn.Module):
            def forward(self, x):
                out = torch.zeros(3)
                out[0] = float(np.pi)
                return x + out
        """, """\
        class Fill(nn.Module):
            def forward(self, x):
                out = torch.zeros(3)
                self._numpy_block(out)
                return x + out

            @torch.jit.ignore
            def _numpy_block(self, out: torch.Tensor) -> None:
                {doc}
                out[0] = float(np.pi)
        """)


# ---- how numpy is found ------------------------------------------------------------------------

def test_numpy_under_an_alias_and_from_numpy_import() -> None:
    header = ("import numpy as onp\nimport torch\nfrom numpy import interp as lerp\n"
              "from torch import nn\n\n\n")
    _moved("""\
        class Interp(nn.Module):
            def forward(self, x):
                grid = onp.arange(x.size(-1))
                y = torch.from_numpy(lerp(grid, grid[::2], x.numpy()[0, ::2]))
                return y
        """, """\
        class Interp(nn.Module):
            def forward(self, x):
                y = self._numpy_y(x)
                return y

            @torch.jit.ignore
            def _numpy_y(self, x: torch.Tensor) -> torch.Tensor:
                {doc}
                grid = onp.arange(x.size(-1))
                y = torch.from_numpy(lerp(grid, grid[::2], x.numpy()[0, ::2]))
                return y
        """, header=header)


def test_dot_numpy_alone_is_numpy() -> None:
    header = "import torch\nfrom torch import nn\n\n\n"
    _moved("""\
        class Copy(nn.Module):
            def forward(self, x):
                y = torch.from_numpy(x.numpy().copy())
                return y
        """, """\
        class Copy(nn.Module):
            def forward(self, x):
                y = self._numpy_y(x)
                return y

            @torch.jit.ignore
            def _numpy_y(self, x: torch.Tensor) -> torch.Tensor:
                {doc}
                y = torch.from_numpy(x.numpy().copy())
                return y
        """, header=header)


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
    _moved("""\
        class Masked(nn.Module):
            def forward(self, x, lengths):
                lens = lengths.cpu().numpy()
                maxlen = int(lens.max())
                mask = torch.from_numpy(np.arange(maxlen)[None, :] < lens[:, None])
                return x[:, :maxlen] * mask.unsqueeze(-1)
        """, """\
        class Masked(nn.Module):
            def forward(self, x, lengths):
                maxlen, mask = self._numpy_maxlen_and_mask(lengths)
                return x[:, :maxlen] * mask.unsqueeze(-1)

            @torch.jit.ignore
            def _numpy_maxlen_and_mask(self, lengths: torch.Tensor) -> Tuple[int, torch.Tensor]:
                {doc}
                lens = lengths.cpu().numpy()
                maxlen = int(lens.max())
                mask = torch.from_numpy(np.arange(maxlen)[None, :] < lens[:, None])
                return maxlen, mask
        """, after=TUPLE_HEADER)


def test_a_numpy_free_statement_joins_only_when_a_numpy_value_crosses_it() -> None:
    result = _moved("""\
        class Bridge(nn.Module):
            def forward(self, x):
                a = np.hanning(x.size(-1))
                y = x * 2
                b = torch.from_numpy(a * 3)
                z = x + 1
                c = torch.from_numpy(np.ones(3))
                return y + b + z + c
        """, """\
        class Bridge(nn.Module):
            def forward(self, x):
                y, b = self._numpy_y_and_b(x)
                z = x + 1
                c = self._numpy_c()
                return y + b + z + c

            @torch.jit.ignore
            def _numpy_y_and_b(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
                {doc}
                a = np.hanning(x.size(-1))
                y = x * 2
                b = torch.from_numpy(a * 3)
                return y, b

            @torch.jit.ignore
            def _numpy_c(self) -> torch.Tensor:
                {doc}
                c = torch.from_numpy(np.ones(3))
                return c
        """, after=TUPLE_HEADER)
    assert result.changes[0].summary == (
        "moved 2 numpy block(s) into @torch.jit.ignore methods: _numpy_y_and_b (lines 8-10), "
        "_numpy_c (line 12)")


def test_a_compound_statement_moves_whole_when_nothing_escapes() -> None:
    _moved("""\
        class Guarded(nn.Module):
            def forward(self, x):
                with torch.no_grad():
                    z = torch.from_numpy(np.cos(x.numpy()))
                try:
                    w = torch.from_numpy(np.sin(x.numpy()))
                except ValueError:
                    w = x
                return z + w
        """, """\
        class Guarded(nn.Module):
            def forward(self, x):
                z, w = self._numpy_z_and_w(x)
                return z + w

            @torch.jit.ignore
            def _numpy_z_and_w(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
                {doc}
                with torch.no_grad():
                    z = torch.from_numpy(np.cos(x.numpy()))
                try:
                    w = torch.from_numpy(np.sin(x.numpy()))
                except ValueError:
                    w = x
                return z, w
        """, after=TUPLE_HEADER)


def test_a_returning_block_returns_the_call() -> None:
    _moved("""\
        class Decode(nn.Module):
            def forward(self, x, greedy: bool):
                if greedy:
                    best = np.argmax(x.detach().numpy(), -1)
                    return torch.from_numpy(best)
                return x
        """, """\
        class Decode(nn.Module):
            def forward(self, x, greedy: bool):
                if greedy:
                    return self._numpy_forward_result(x)
                return x

            @torch.jit.ignore
            def _numpy_forward_result(self, x: torch.Tensor) -> torch.Tensor:
                {doc}
                best = np.argmax(x.detach().numpy(), -1)
                return torch.from_numpy(best)
        """)


def test_a_numpy_import_inside_the_method_goes_with_the_block() -> None:
    _moved("""\
        class LocalImport(nn.Module):
            def forward(self, x):
                import numpy as np
                y = x * 2
                z = torch.from_numpy(np.tanh(y.numpy()))
                return z
        """, """\
        class LocalImport(nn.Module):
            def forward(self, x):
                y = x * 2
                z = self._numpy_z(y)
                return z

            @torch.jit.ignore
            def _numpy_z(self, y: torch.Tensor) -> torch.Tensor:
                {doc}
                import numpy as np
                z = torch.from_numpy(np.tanh(y.numpy()))
                return z
        """, header="import torch\nfrom torch import nn\n\n\n")


# ---- which code is compiled (the class facts) -------------------------------------------------

def test_helpers_and_exported_methods_are_compiled_code_too() -> None:
    # Each new method right after the one it came from; unreachable code is not touched.
    result = _moved("""\
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
        """, """\
        class Stats(nn.Module):
            def forward(self, x):
                return self.helper(x)

            def helper(self, x):
                return self._numpy_helper_result(x)

            @torch.jit.ignore
            def _numpy_helper_result(self, x: torch.Tensor) -> torch.Tensor:
                {doc}
                return torch.from_numpy(np.tanh(x.numpy()))

            @torch.jit.export
            def mean(self, x: torch.Tensor) -> float:
                m = self._numpy_m(x)
                return m

            @torch.jit.ignore
            def _numpy_m(self, x: torch.Tensor) -> float:
                {doc}
                m = float(np.mean(x.numpy()))
                return m

            def unused(self, x):
                return np.tanh(x)
        """)
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF205", 11, "numpy (torch.from_numpy) in helper()"),
        ("TSF205", 11, "numpy (numpy.tanh) in helper()"),
        ("TSF205", 11, "numpy (x.numpy) in helper()"),
        ("TSF205", 15, "numpy (numpy.mean) in mean()"),
        ("TSF205", 15, "numpy (x.numpy) in mean()"),
    ]


def test_an_exported_method_without_forward_is_handled() -> None:
    result = _moved("""\
        class Scorer(nn.Module):
            @torch.jit.export
            def score(self, x: torch.Tensor) -> float:
                return float(np.median(x.numpy()))
        """, """\
        class Scorer(nn.Module):
            @torch.jit.export
            def score(self, x: torch.Tensor) -> float:
                return self._numpy_score_result(x)

            @torch.jit.ignore
            def _numpy_score_result(self, x: torch.Tensor) -> float:
                {doc}
                return float(np.median(x.numpy()))
        """)
    assert {f.message for f in result.fixes} == {"numpy (numpy.median) in score()",
                                                 "numpy (x.numpy) in score()"}


def test_an_ignored_helper_called_from_forward_is_untouched() -> None:
    result = _rewrite("""\
        class Logged(nn.Module):
            def forward(self, x):
                self.log(x)
                return x * 2

            @torch.jit.ignore
            def log(self, x: torch.Tensor) -> None:
                print(float(np.mean(x.numpy())))

            @torch.jit.unused
            def debug(self, x):
                return torch.from_numpy(np.tanh(x.numpy()))
        """)
    _unchanged(result)
    assert result.skips == []


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


def test_code_after_a_scripting_return_is_never_compiled() -> None:
    # What follows `if torch.jit.is_scripting(): return ...` runs in eager mode only, and so
    # does a helper called only from there.
    result = _rewrite("""\
        class Eager(nn.Module):
            def forward(self, x):
                return self.scaled(x)

            def scaled(self, x):
                if torch.jit.is_scripting():
                    return x * 2.0
                return self.slow(x)

            def slow(self, x):
                return torch.from_numpy(np.asarray(x.numpy()) * 2.0)
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
    left = ("forward(): `floor` is read after the block, but its value comes from numpy and "
            "has no known TorchScript type (no example run observed one); left alone")
    # Each numpy use is a refused TSF205; the last line only reads a numpy value: its refusal
    # has no check code.
    assert [(s.line, s.code, s.message, s.reason) for s in result.skips] == [
        (12, "TSF205", "numpy (mels.detach().numpy) in forward()", left),
        (13, "TSF205", "numpy (numpy.percentile) in forward()", left),
        (15, None, "", "forward(): `floor` is read by the block but holds a numpy value from "
         "code before it that stays compiled (no TorchScript type); left alone"),
    ]


def test_observed_local_types_type_the_outputs() -> None:
    observed = {"Robust": {"forward": {"mels": "Tensor", "local floor": "float",
                                       "local ceil": "float", "return": "Tensor"}}}
    result = _moved(ROBUST, """\
        class Robust(nn.Module):
            def __init__(self):
                super().__init__()
                self.smooth = nn.Conv1d(4, 4, 3, padding=1)

            def forward(self, mels):
                floor, ceil = self._numpy_floor_and_ceil(mels)
                smoothed = self.smooth(mels)
                return (smoothed - floor) / (ceil - floor)

            @torch.jit.ignore
            def _numpy_floor_and_ceil(self, mels: torch.Tensor) -> Tuple[float, float]:
                {doc}
                flat = mels.detach().numpy().ravel()
                floor, ceil = np.percentile(flat, [5.0, 95.0]).tolist()
                return floor, ceil
        """, after=TUPLE_HEADER, observed=observed)
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
    assert _reasons(_rewrite(code)) == [
        "forward(): cannot tell the type of `size`, which the block reads (no annotation, "
        "example run or static type); left alone"]
    _moved(code, """\
        class Window(nn.Module):
            def forward(self, x, size=None):
                w = self._numpy_w(size)
                return x[..., :size] * w

            @torch.jit.ignore
            def _numpy_w(self, size: Optional[int]) -> torch.Tensor:
                {doc}
                w = torch.from_numpy(np.hanning(size))
                return w
        """, after="from typing import Optional\n\n" + HEADER,
           observed={"Window": {"forward": {"size": "Optional[int]"}}})


def test_init_parameter_types_type_the_attributes_a_block_reads() -> None:
    # `self.heads` is `heads`, an int by its default (the class facts type it).
    _moved("""\
        class Slopes(nn.Module):
            def __init__(self, heads=4):
                super().__init__()
                self.heads = heads

            def forward(self, x):
                start = 2 ** (-8.0 / self.heads)
                slopes = torch.from_numpy(start ** np.arange(1, self.heads + 1))
                return x * slopes
        """, """\
        class Slopes(nn.Module):
            def __init__(self, heads=4):
                super().__init__()
                self.heads = heads

            def forward(self, x):
                start = 2 ** (-8.0 / self.heads)
                slopes = self._numpy_slopes(start)
                return x * slopes

            @torch.jit.ignore
            def _numpy_slopes(self, start: float) -> torch.Tensor:
                {doc}
                slopes = torch.from_numpy(start ** np.arange(1, self.heads + 1))
                return slopes
        """)


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
        """, header=LIST_HEADER)
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
    _moved("""\
        class Tracker(nn.Module):
            def __init__(self):
                super().__init__()
                self.last = 0.0

            def forward(self, x):
                self.last = float(np.mean(x.numpy()))
                return x * self.last
        """, """\
        class Tracker(nn.Module):
            def __init__(self):
                super().__init__()
                self.last = 0.0

            def forward(self, x):
                self._numpy_last(x)
                return x * self.last

            @torch.jit.ignore
            def _numpy_last(self, x: torch.Tensor) -> None:
                {doc}
                self.last = float(np.mean(x.numpy()))
        """)


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
    assert _reasons(result) == [f"forward(): {reason}"]
    assert {s.code for s in result.skips} == {"TSF205"}


def test_a_file_without_import_torch_is_reported() -> None:
    result = _rewrite("""\
        class NoTorch(nn.Module):
            def forward(self, x):
                y = torch.from_numpy(np.tanh(x.numpy()))
                return y
        """, header="import numpy as np\nfrom torch import nn\n\n\n")
    _unchanged(result)
    assert _reasons(result) == [
        "forward(): the file does not import torch (`import torch`), which the "
        "@torch.jit.ignore decorator needs; left alone"]
    assert len(result.skips) == 3 and {s.code for s in result.skips} == {"TSF205"}


# ---- what tsfix check reports (TSF205) --------------------------------------------------------

def test_each_numpy_use_is_fixed_or_refused_with_the_check_code() -> None:
    result = _rewrite("""\
        class Mixed(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x):
                w = torch.from_numpy(np.hanning(x.size(-1)))
                h = self.proj(x).detach().numpy()
                return x * w + torch.from_numpy(np.tanh(h))
        """)
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF205", 12, "numpy (torch.from_numpy) in forward()"),
        ("TSF205", 12, "numpy (numpy.hanning) in forward()"),
    ]
    refused = ("forward(): the block calls self.proj(...), a submodule that cannot be called "
               "from a @torch.jit.ignore method of a scripted module ('ScriptModule' object "
               "is not callable; call .forward(...)); left alone")
    assert [(s.code, s.line, s.message, s.reason) for s in result.skips] == [
        ("TSF205", 13, "numpy (self.proj(x).detach().numpy) in forward()", refused),
        ("TSF205", 14, "numpy (torch.from_numpy) in forward()",
         "forward(): `h` is read by the block but holds a numpy value from code before it "
         "that stays compiled (no TorchScript type); left alone"),
        ("TSF205", 14, "numpy (numpy.tanh) in forward()",
         "forward(): `h` is read by the block but holds a numpy value from code before it "
         "that stays compiled (no TorchScript type); left alone"),
    ]


def test_check_findings_on_the_blockers_fixture() -> None:
    path = FIXTURES_ROOT / "check" / "blockers.py"
    result = rewrite_source(
        path.read_text(), RewriteSettings([IgnoreNumpy], output=False), str(path)
    )
    assert [(f.class_name, f.code, f.message) for f in result.fixes] == [
        ("NumpyCall", "TSF205", "numpy (numpy.sqrt) in forward()")]
    line = path.read_text().splitlines()[result.fixes[0].line - 1]
    assert line.endswith("# TSF205")
    assert [s for s in result.skips if s.code is not None] == []


def test_files_without_numpy_are_not_analysed(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_facts(tree: object) -> None:
        raise AssertionError("facts computed for a file without numpy")

    monkeypatch.setattr(base, "module_facts", no_facts)
    text = "import torch\nfrom torch import nn\n\n\nclass A(nn.Module):\n" \
           "    def forward(self, x):\n        return x\n"
    result = rewrite_source(text, RewriteSettings([IgnoreNumpy]), "model.py")
    assert result.text == text and not result.skips


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
    _moved("""\
        class Aliased(nn.Module):
            def forward(self, x):
                y = T.from_numpy(np.tanh(x.numpy()))
                return y
        """, f"""\
        class Aliased(nn.Module):
            def forward(self, x):
                y = self._numpy_y(x)
                return y

            @T.jit.ignore
            def _numpy_y(self, x: Tensor) -> Tensor:
                {DOCSTRING}
                y = T.from_numpy(np.tanh(x.numpy()))
                return y
        """, header="import numpy as np\nimport torch as T\nfrom torch import Tensor, nn\n\n\n")


def test_the_rewrite_is_a_fixed_point() -> None:
    first = _rewrite("""\
        class Twice(nn.Module):
            def forward(self, x, lengths):
                lens = lengths.cpu().numpy()
                mask = torch.from_numpy(np.arange(x.size(1))[None, :] < lens[:, None])
                return x * mask
        """)
    assert first.changes
    again = rewrite_source(first.text, RewriteSettings([IgnoreNumpy]), "model.py")
    assert not again.changes and again.text == first.text
    assert not again.fixes and not again.skips


# ---- fixtures (the pairs themselves: tests/test_fixtures.py) ----------------------------------

def test_the_observed_only_fixture_is_reported_without_examples() -> None:
    # Typed only by the example runs: without them the class is left alone and reported.
    before = FIXTURES / "robust_norm.in.py"
    result = rewrite_source(before.read_text(), RewriteSettings([IgnoreNumpy]), before.name)
    assert not result.changes and result.text == before.read_text()
    assert "`floor` is read after the block" in result.skips[0].reason
    assert {s.class_name for s in result.skips} == {"RobustFeatureNorm"}


def test_the_ctc_fixture_leaves_the_rescorer_and_reports_it() -> None:
    before = FIXTURES / "ctc_greedy.in.py"
    result = rewrite_source(before.read_text(), RewriteSettings([IgnoreNumpy]), before.name)
    assert ("LMRescorer", "TSF205") in {(s.class_name, s.code) for s in result.skips}
    assert "LMRescorer" not in {c.class_name for c in result.changes}


@pytest.mark.slow
def test_every_rewritten_fixture_class_is_python_only(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "ignore-numpy", inputs_only=True)
    done = apply_with_report(folder, "ignore-numpy")
    assert done.returncode == 0, done.stderr
    classes = done.classes
    assert len(classes) == len(fixture_pairs(FIXTURES))
    for c in classes:
        assert c["verdict"] == "verified", c
        assert "save fails as expected" in c["reason"], c
        assert any("cannot be saved with torch.jit.save" in n for n in c["notes"]), c
