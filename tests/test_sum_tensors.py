"""sum-tensors: loops, literal lists and single tensors; what is left alone silently (ints) and
what is refused with a reason; eager exactness; the fixture pairs (without and with
validation) and idempotence."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.sum_tensors import SumTensors

FIXTURES = FIXTURES_ROOT / "sum-tensors"
HEADER = "from typing import List\nimport torch\nfrom torch import nn\nclass M(nn.Module):\n"


def rewrite(code: str, observed: dict | None = None) -> Rewrite:  # type: ignore[type-arg]
    result = rewrite_source(textwrap.dedent(code), "m.py", [SumTensors], observed=observed)
    cst.parse_module(result.text)
    again = rewrite_source(result.text, "m.py", [SumTensors], observed=observed)
    assert not again.changed and again.text == result.text, "not a fixed point"
    return result


def method(body: str, signature: str = "self, xs: List[torch.Tensor], t: torch.Tensor") -> str:
    return HEADER + f"    def forward({signature}):\n" + textwrap.indent(
        textwrap.dedent(body), "        ")


def test_list_sum_in_an_expression_gets_a_fresh_accumulator() -> None:
    result = rewrite(method("return t * sum(xs)\n"))
    assert result.text.endswith(
        "        xs_sum = torch.tensor(0)\n"
        "        for x in xs:\n"
        "            xs_sum = xs_sum + x\n"
        "        return t * xs_sum\n")
    assert result.changes[0].notes and "tensor(0)" in result.changes[0].notes[0]


def test_start_value_and_nested_generator_clauses() -> None:
    result = rewrite(method("""\
        out = sum((a * b for a in xs if a.numel() > 0 for b in xs), t)
        return out
        """))
    assert ("        out = t\n"
            "        for a in xs:\n"
            "            if a.numel() > 0:\n"
            "                for b in xs:\n"
            "                    out = out + a * b\n"
            "        return out\n") in result.text
    assert result.changes[0].notes == []


def test_single_tensor_and_literal_list() -> None:
    result = rewrite(method("return sum(t > 0), sum([t, t * 2]) / 2\n"))
    assert "return (t > 0).sum(0), (0 + t + t * 2) / 2\n" in result.text
    assert any("int64" in note for note in result.changes[0].notes)


def test_appended_list_of_tensors_is_known() -> None:
    result = rewrite(method("""\
        parts = []
        for x in xs:
            parts.append(torch.relu(x))
        y = sum(parts)
        return y
        """))
    assert "        y = torch.tensor(0)\n        for part in parts:\n            y = y + part\n" \
        in result.text


def test_observed_types_tell_what_the_code_does_not() -> None:
    code = HEADER + "    def forward(self, inputs):\n        return sum(inputs)\n"
    refused = rewrite(code)
    assert not refused.changed
    assert "cannot tell that the elements are tensors" in refused.skips[0].reason
    observed = {"M": {"forward": {"inputs": "List[Tensor]"}}}
    assert rewrite(code, observed).changed


@pytest.mark.parametrize("body", [
    "return t + sum([k // 2 for k in sizes])\n",
    "return t + sum(sizes)\n",
    "return t * sum([1, 2.5])\n",
])
def test_sums_of_numbers_are_left_alone_silently(body: str) -> None:
    result = rewrite(method(body, "self, t: torch.Tensor, sizes: List[int]"))
    assert not result.changed and not result.skips


@pytest.mark.parametrize(("body", "reason"), [
    ("return [sum(xs) for _ in range(2)]\n", "evaluated conditionally"),
    ("return t if t.numel() == 0 else sum(xs)\n", "evaluated conditionally"),
    ("x = t\nreturn x + sum(x * 2 for x in xs)\n", "also used outside the generator"),
    ("return sum(ys)\n", "cannot tell that the elements are tensors"),
    ("a = 1; return sum(xs)\n", "several statements"),
])
def test_refusals(body: str, reason: str) -> None:
    result = rewrite(method(body, "self, xs: List[torch.Tensor], t: torch.Tensor, ys"))
    assert not result.changed
    assert reason in result.skips[0].reason


def test_shadowed_sum_and_non_compiled_methods_are_left_alone() -> None:
    shadowed = rewrite("from torch import sum\n" + method("return sum(t)\n"))
    assert not shadowed.changed
    helper = rewrite(HEADER + "    def forward(self, t):\n        return t\n"
                     "    def stats(self, xs: List[torch.Tensor]):\n        return sum(xs)\n")
    assert not helper.changed and not helper.skips


def test_torch_import_is_added_when_missing() -> None:
    code = ("from typing import List\nfrom torch import Tensor, nn\nclass M(nn.Module):\n"
            "    def forward(self, xs: List[Tensor]):\n        return sum(xs)\n")
    result = rewrite(code)
    assert result.text.startswith("from typing import List\nimport torch\nfrom torch import")


def test_loop_is_exact_in_eager_mode() -> None:
    torch = pytest.importorskip("torch")
    cases = [[torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.bool)],
             [torch.ones(2, 3, dtype=torch.int8), torch.ones(3, dtype=torch.int8)],
             [torch.tensor([-0.0, 1.5], dtype=torch.float16)],
             [torch.randn(4, 1), torch.randn(5)]]
    for xs in cases:
        total = torch.tensor(0)
        for x in xs:
            total = total + x
        expected = sum(xs)
        assert isinstance(expected, torch.Tensor)
        assert total.dtype == expected.dtype and torch.equal(total, expected)


def test_fixture_pairs_without_validation() -> None:
    pairs = fixture_pairs(FIXTURES)
    assert len(pairs) >= 2
    for before, after in pairs:
        result = rewrite(before.read_text())
        assert result.text == after.read_text(), before.name
    refused = rewrite((FIXTURES / "fusion.in.py").read_text()).skips
    assert [s.class_name for s in refused] == ["AveragedSources"]


@pytest.mark.slow
def test_fixture_pairs_are_verified(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "sum-tensors", inputs_only=True)
    done = apply_with_report(folder, "sum-tensors")
    assert done.returncode == 0, done.stderr
    classes = done.classes
    assert len(classes) == 4
    assert {c["verdict"] for c in classes} == {"verified"}, classes
    for before, after in fixture_pairs(FIXTURES):
        assert (folder / before.name).read_text() == after.read_text(), before.name
