"""starred-args: each starred form it rewrites, each it refuses (with the reason), and the fixture
pairs (without and with validation)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs, load_module
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.starred_args import StarredArgs

FIXTURES = FIXTURES_ROOT / "starred-args"
HEADER = "from typing import List, Tuple\nimport torch\nimport torch.nn as nn\n"


def rewrite(code: str) -> Rewrite:
    result = rewrite_source(textwrap.dedent(code), "m.py", [StarredArgs])
    cst.parse_module(result.text)
    if result.changed:
        again = rewrite_source(result.text, "m.py", [StarredArgs])
        assert not again.changed and again.text == result.text, "not a fixed point"
    return result


def model(forward: str, init: str = "") -> str:
    init_block = ("def __init__(self):\n    super().__init__()\n"
                  + textwrap.indent(textwrap.dedent(init), "    ")) if init else ""
    return (HEADER + "class M(nn.Module):\n"
            + textwrap.indent(init_block + textwrap.dedent(forward), "    "))


def rewritten_line(result: Rewrite, start: str) -> str:
    return next(line.strip() for line in result.text.splitlines()
                if line.strip().startswith(start))


@pytest.mark.parametrize(("signature", "line", "expected"), [
    ("x, shape: List[int]", "x.view(*shape)", "x.view(shape)"),
    ("x", "x.view(*x.shape[:2], -1)", "x.view(x.shape[0], x.shape[1], -1)"),
    ("x", "x.view(*x.size()[1:3], -1)", "x.view(x.size(1), x.size(2), -1)"),
    ("x", "x.reshape(*x.shape[:-1], 2, -1)", "x.reshape(list(x.shape[:-1]) + [2, -1])"),
    ("x", "x.expand(2, *x.shape)", "x.expand([2] + list(x.shape))"),
    ("x, dims: List[int]", "x.permute(0, *dims)", "x.permute([0] + list(dims))"),
    ("x", "x.view(*[2, -1])", "x.view(2, -1)"),
    ("x, size: List[int]", "torch.zeros(*size, dtype=x.dtype)",
     "torch.zeros(size, dtype=x.dtype)"),
    ("x", "x.new_ones(*x.size())", "x.new_ones(x.size())"),
    ("x", "x.view(*(x.shape[:-1] + (2, -1)))", "x.view((x.shape[:-1] + (2, -1)))"),
])
def test_rewritten_forms(signature: str, line: str, expected: str) -> None:
    result = rewrite(model(f"def forward(self, {signature}):\n    return {line}\n"))
    assert rewritten_line(result, "return") == f"return {expected}"
    change = result.changes[0]
    assert change.rule == "starred-args" and change.class_name == "M"
    assert f"`{line}` -> `{expected}`" in change.summary


def test_shape_locals_and_list_attributes() -> None:
    result = rewrite(model("""
        def forward(self, x):
            new_shape = x.size()[:-1] + (self.heads, -1)
            out = x.view(*new_shape)
            return out.permute(*self.order)
        """, init="self.heads = 2\nself.order = [0, 2, 1, 3]\n"))
    assert "out = x.view(new_shape)" in result.text
    assert "return out.permute(self.order)" in result.text


def test_nested_calls_keep_both_rewrites() -> None:
    result = rewrite(model("""
        def forward(self, x, a: List[int], b: List[int]):
            return x.view(*a).permute(*b)
        """))
    assert "return x.view(a).permute(b)" in result.text


def test_spelled_shape_slices_are_noted() -> None:
    result = rewrite(model("def forward(self, x):\n    return x.view(*x.shape[:2], -1)\n"))
    assert len(result.changes[0].notes) == 1
    assert "IndexError" in result.changes[0].notes[0]
    plain = rewrite(model("def forward(self, x, s: List[int]):\n    return x.view(*s)\n"))
    assert plain.changes[0].notes == []


def test_helper_reached_from_forward_and_unreached_method() -> None:
    result = rewrite(model("""
        def forward(self, x):
            return self.split(x)
        def split(self, x):
            return x.view(*x.shape[:1], -1)
        def debug(self, x):
            return x.view(*x.shape[:1], -1)
        """))
    assert result.text.count("x.view(x.shape[0], -1)") == 1
    assert result.text.count("x.view(*x.shape[:1], -1)") == 1


@pytest.mark.parametrize("forward", [
    "def forward(self, x, s: Tuple[int, int]):\n    return x.view(*s)\n",
    "def forward(self, x):\n    s = (x.size(0), -1)\n    return x.view(*s)\n",
    "def forward(self, x):\n    return x.view(*(2, -1))\n",
])
def test_tuples_already_script_and_are_left_alone(forward: str) -> None:
    result = rewrite(model(forward))
    assert not result.changed and result.skips == []


@pytest.mark.parametrize(("forward", "init", "reason"), [
    ("def forward(self, x, shape):\n    return x.view(*shape)\n", "",
     "`shape` is an unannotated parameter, which TorchScript types as Tensor"),
    ("def forward(self, x):\n    return x.view(*self.target)\n", "self.target = make()\n",
     "cannot tell that `self.target` is a list or tuple of ints"),
    ("def forward(self, x):\n    return x.permute(0, *range(1, x.dim()))\n", "",
     "cannot tell that `range(1, x.dim())` is a list or tuple of ints"),
    ("def forward(self, x, d: List[int]):\n    return x.transpose(*d)\n", "",
     "`x.transpose` does not take the sequence itself"),
    ("def forward(self, x, xs: List[torch.Tensor]):\n    return torch.cat(*xs)\n", "",
     "`xs` is List[Tensor], not a sequence of ints"),
    ("def forward(self, *inputs):\n    return self.block(*inputs)\n", "",
     "`inputs` is a *args tuple of unknown length"),
    ("def forward(self, x, kw: List[int]):\n    return x.view(**kw)\n", "",
     "`**` arguments are not rewritten"),
])
def test_refusals_are_reported(forward: str, init: str, reason: str) -> None:
    result = rewrite(model(forward, init))
    assert not result.changed
    assert len(result.skips) == 1, result.skips
    assert result.skips[0].reason.startswith("forward(): `")
    assert reason in result.skips[0].reason, result.skips[0].reason


# ---- fixtures ----------------------------------------------------------------------------------

def test_fixture_pairs_without_validation(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "starred-args")
    result = run(sorted(folder.glob("*.in.py")), Options(rules=["starred-args"], verify=False))
    for before, after in fixture_pairs(folder):
        assert before.read_text() == after.read_text(), before.name
    skipped = sorted((s.class_name, s.line) for f in result.files for s in f.skips)
    assert skipped == [("Checkpointed", 24), ("Reshaper", 14), ("Reshaper", 15)]
    again = run(sorted(folder.glob("*.in.py")), Options(rules=["starred-args"], verify=False))
    assert [f for f in again.files if f.status == "changed"] == []


@pytest.mark.slow
def test_fixture_pairs_are_verified(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "starred-args")
    done = apply_with_report(folder, "starred-args")
    assert done.returncode == 0, done.stderr
    classes = {c["class_name"]: c for c in done.classes}
    assert set(classes) == {"SelfAttention", "MultiHeadProjection", "PositionalTiler"}
    assert {c["verdict"] for c in classes.values()} == {"verified"}, classes
    for before, after in fixture_pairs(folder):
        assert before.read_text() == after.read_text(), before.name


@pytest.mark.slow
def test_originals_fail_with_the_static_length_error() -> None:
    torch = pytest.importorskip("torch")
    original = load_module(FIXTURES / "attention.in.py", "_sa_attention_in")
    rewritten = load_module(FIXTURES / "attention.out.py", "_sa_attention_out")
    for name in ("SelfAttention", "MultiHeadProjection"):
        with pytest.raises(Exception, match="cannot statically infer the expected size"):
            torch.jit.script(getattr(original, name)())
        torch.jit.script(getattr(rewritten, name)())
