"""sum-tensors: loops, literal lists and single tensors; what is left alone silently (ints) and
what is refused with a reason (and a check code when it adds tensors); compiled methods only
(export yes, ignore no); check findings; eager exactness; idempotence. The fixture pairs are
tests/test_fixtures.py's (the slow test, with observed types)."""

from __future__ import annotations

import textwrap

import pytest
from conftest import FIXTURES_ROOT, fixture_pairs, rule_rewriter
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.sum_tensors import SumTensors

FIXTURES = FIXTURES_ROOT / "sum-tensors"
HEADER = "from typing import List\nimport torch\nfrom torch import nn\nclass M(nn.Module):\n"


rewrite = rule_rewriter(SumTensors)


def method(body: str, signature: str = "self, xs: List[torch.Tensor], t: torch.Tensor") -> str:
    return HEADER + f"    def forward({signature}):\n" + textwrap.indent(
        textwrap.dedent(body), "        ")


def fixes(result: Rewrite) -> list[tuple[str, int, str]]:
    return [(f.code, f.line, f.message) for f in result.fixes]


def test_list_sum_in_an_expression_gets_a_fresh_accumulator() -> None:
    result = rewrite(method("return t * sum(xs)\n"))
    assert result.text == method("""\
        xs_sum = torch.tensor(0)
        for x in xs:
            xs_sum = xs_sum + x
        return t * xs_sum
        """)
    assert result.changes[0].notes == [
        "line 6: an empty sequence now sums to tensor(0) instead of the int 0"]
    assert fixes(result) == [("TSF215", 6, "sum(xs) adds tensors")]


def test_start_value_and_nested_generator_clauses() -> None:
    result = rewrite(method("""\
        out = sum((a * b for a in xs if a.numel() > 0 for b in xs), t)
        return out
        """))
    assert result.text == method("""\
        out = t
        for a in xs:
            if a.numel() > 0:
                for b in xs:
                    out = out + a * b
        return out
        """)
    assert result.changes[0].notes == []


def test_single_tensor_and_literal_list() -> None:
    result = rewrite(method("return sum(t > 0), sum([t, t * 2]) / 2\n"))
    assert result.text == method("return (t > 0).sum(0), (0 + t + t * 2) / 2\n")
    assert result.changes[0].notes == [
        "line 6: sum(t) -> t.sum(0): int8/uint8/int16/int32 tensors now sum to int64, "
        "floating-point sums may differ in the last bits"]
    assert fixes(result) == [
        ("TSF215", 6, "sum(t > 0) of one tensor adds its rows in Python, every element in "
         "TorchScript"),
        ("TSF215", 6, "sum([t, t * 2]) adds tensors")]


def test_sum_in_a_condition_is_replaced_in_place() -> None:
    # No statement to put a loop before is needed for a single tensor (this crashed before).
    result = rewrite(method("if sum(t) > 0:\n    return t\nreturn -t\n"))
    assert result.text == method("if t.sum(0) > 0:\n    return t\nreturn -t\n")


def test_appended_list_of_tensors_is_known() -> None:
    result = rewrite(method("""\
        parts = []
        for x in xs:
            parts.append(torch.relu(x))
        y = sum(parts)
        return y
        """))
    assert result.text == method("""\
        parts = []
        for x in xs:
            parts.append(torch.relu(x))
        y = torch.tensor(0)
        for part in parts:
            y = y + part
        return y
        """)


def test_observed_types_tell_what_the_code_does_not() -> None:
    code = HEADER + "    def forward(self, inputs):\n        return sum(inputs)\n"
    refused = rewrite(code)
    assert not refused.changed
    assert "cannot tell that the elements are tensors" in refused.skips[0].reason
    # Nothing shows that it adds tensors: not an export blocker.
    assert refused.skips[0].code is None and refused.fixes == []
    observed = {"M": {"forward": {"inputs": "List[Tensor]"}}}
    assert rewrite(code, observed=observed).text == HEADER + (
        "    def forward(self, inputs):\n"
        "        inputs_sum = torch.tensor(0)\n"
        "        for input in inputs:\n"
        "            inputs_sum = inputs_sum + input\n"
        "        return inputs_sum\n")


def test_parameter_typed_by_its_use() -> None:
    """The one parameter policy: an unannotated parameter the body uses as a Tensor is one;
    passed to torch.stack it is a list, and stays unknown here."""
    used = rewrite(HEADER + "    def forward(self, t):\n        return sum(t.abs())\n")
    assert used.text == HEADER + "    def forward(self, t):\n        return t.abs().sum(0)\n"
    code = (HEADER + "    def forward(self, feats):\n"
            "        return torch.stack(feats), sum(feats)\n")
    stacked = rewrite(code)
    assert stacked.text == code and stacked.fixes == []
    assert "cannot tell that the elements are tensors" in stacked.skips[0].reason


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
    code = method(body, "self, xs: List[torch.Tensor], t: torch.Tensor, ys")
    result = rewrite(code)
    assert result.text == textwrap.dedent(code) and result.fixes == []
    assert len(result.skips) == 1
    assert reason in result.skips[0].reason
    # Refused sums of tensors are export blockers; a sum of unknown elements is not.
    assert result.skips[0].code == (None if "ys" in body else "TSF215")


def test_tensors_to_torchscript_make_a_refusal_a_blocker() -> None:
    """`inputs` is unknown to the rule (nothing uses it as a Tensor) but a Tensor to
    TorchScript, so the list it slices is a list of tensors there: check reports it."""
    code = HEADER + ("    def forward(self, inputs):\n"
                     "        output = inputs\n"
                     "        return sum([output[:, ::2], output[:, 1::2]])\n")
    result = rewrite(code)
    assert result.text == code and result.fixes == []
    assert [(s.code, s.message) for s in result.skips] == [
        ("TSF215", "sum([output[:, ::2], output[:, 1::2]]) adds tensors")]
    assert "cannot tell that every element is a tensor" in result.skips[0].reason


def test_ignored_helper_and_eager_only_branch_are_left_alone() -> None:
    code = HEADER + textwrap.indent(textwrap.dedent("""\
        def forward(self, xs: List[torch.Tensor]):
            if not torch.jit.is_scripting():
                print(sum(xs))
            return self.total(xs)
        @torch.jit.ignore
        def total(self, xs: List[torch.Tensor]):
            return sum(xs)
        """), "    ")
    result = rewrite(code)
    assert result.text == code and result.fixes == [] and result.skips == []


def test_exported_method_is_rewritten() -> None:
    body = """\
        def forward(self, t: torch.Tensor):
            return t
        @torch.jit.export
        def total(self, xs: List[torch.Tensor]):
            return {}
        """
    result = rewrite(HEADER + textwrap.indent(textwrap.dedent(body.format("sum(xs)")), "    "))
    expected = body.format("xs_sum").replace(
        "            return xs_sum", "            xs_sum = torch.tensor(0)\n"
        "            for x in xs:\n                xs_sum = xs_sum + x\n            return xs_sum")
    assert result.text == HEADER + textwrap.indent(textwrap.dedent(expected), "    ")
    assert fixes(result) == [("TSF215", 9, "sum(xs) adds tensors")]


def test_check_findings_on_the_blockers_fixture() -> None:
    path = FIXTURES_ROOT / "check" / "blockers.py"
    result = rewrite_source(
        path.read_text(), RewriteSettings([SumTensors], output=False), str(path)
    )
    # sum([head(x) for head in self.heads]): the layers of a ModuleList return tensors.
    assert [(f.code, f.class_name, f.message) for f in result.fixes] == [
        ("TSF215", "SumsTensors", "sum([head(x) for head in self.heads]) adds tensors")]
    assert [s for s in result.skips if s.code] == []


def test_shadowed_sum_and_non_compiled_methods_are_left_alone() -> None:
    shadowed = rewrite("from torch import sum\n" + method("return sum(t)\n"))
    assert not shadowed.changed
    helper = rewrite(HEADER + "    def forward(self, t):\n        return t\n"
                     "    def stats(self, xs: List[torch.Tensor]):\n        return sum(xs)\n")
    assert not helper.changed and not helper.skips and not helper.fixes


def test_torch_import_is_added_when_missing() -> None:
    code = ("from typing import List\nfrom torch import Tensor, nn\nclass M(nn.Module):\n"
            "    def forward(self, xs: List[Tensor]):\n        return sum(xs)\n")
    result = rewrite(code)
    assert result.text == (
        "from typing import List\nimport torch\nfrom torch import Tensor, nn\nclass M(nn.Module):\n"
        "    def forward(self, xs: List[Tensor]):\n        xs_sum = torch.tensor(0)\n"
        "        for x in xs:\n            xs_sum = xs_sum + x\n        return xs_sum\n")


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


def test_fixture_outputs_without_observations_and_refusals() -> None:
    # Without example runs (tests/test_fixtures.py validates them, with observations) the
    # static inference alone reaches the same outputs.
    for before, after in fixture_pairs(FIXTURES):
        assert rewrite(before.read_text()).text == after.read_text(), before.name
    refused = rewrite((FIXTURES / "fusion.in.py").read_text()).skips
    assert [(s.class_name, s.code) for s in refused] == [("AveragedSources", None)]


def test_a_sum_of_the_layers_of_a_module_list_adds_tensors() -> None:
    """``sum([fn(x) for fn in self.fns])`` over a ModuleList: what the layers return is what
    eager sum adds, a tensor (validation checks it); over a plain list it stays unknown."""
    code = HEADER.replace("class M(nn.Module):\n", textwrap.dedent("""\
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.fns = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
                self.plain = [abs, abs]

        """)) + "    def forward(self, x):\n        return sum([fn(x) for fn in self.fns])\n"
    result = rewrite(code)
    assert result.text.endswith(
        "        fns_sum = torch.tensor(0)\n"
        "        for fn in self.fns:\n"
        "            fns_sum = fns_sum + fn(x)\n"
        "        return fns_sum\n")
    plain = code.replace("for fn in self.fns", "for fn in self.plain")
    assert rewrite(plain).text == plain
