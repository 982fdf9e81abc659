"""loop-carried-local: the placeholder before the loop, its type, the proof that eager code never
reads it, each refusal with its reason, and what ``tsfix check`` shows (TSF230)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from conftest import rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.loop_carried_local import LoopCarriedLocal
from tsfix.codemods.rules.modulelist_iter import ModuleListIter

HEADER = "from typing import List\n\nimport torch\nimport torch.nn as nn\n\n\n"
COMMENT = "# Carried across iterations: TorchScript needs it bound before the loop."


rewrite = rule_rewriter(LoopCarriedLocal, header=HEADER)


def added(code: str, header: str = HEADER) -> tuple[list[str], Rewrite]:
    """The lines the rewrite adds to ``code`` (stripped, in order) and the result."""
    source = header + textwrap.dedent(code)
    result = rewrite(code, header=header)
    old = [line.strip() for line in source.splitlines()]
    new = [line.strip() for line in result.text.splitlines()]
    extra = list(new)
    for line in old:
        if line in extra:
            extra.remove(line)
    return extra, result


ECAPA = """\
class Res2NetBlock(nn.Module):
    def __init__(self, scale=4):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Conv1d(2, 2, 3, padding=1) for i in range(scale - 1)])
        self.scale = scale

    def forward(self, x):
        y = []
        # one output per chunk
        for i, x_i in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                y_i = x_i
            elif i == 1:
                y_i = self.blocks[i - 1](x_i)
            else:
                y_i = self.blocks[i - 1](x_i + y_i)
            y.append(y_i)
        return torch.cat(y, dim=1)
"""


def test_ecapa_res2net_block_gets_a_tensor_placeholder_before_the_loop() -> None:
    """speechbrain's shape, as written (the ModuleList index is modulelist-iter's): the comment
    above the loop stays above the new lines."""
    result = rewrite(ECAPA)
    assert "        y = []\n        # one output per chunk\n        " + COMMENT + \
        "\n        y_i = torch.empty(0)\n        for i, x_i in enumerate(" in result.text
    assert [(f.code, f.line, f.rule) for f in result.fixes] == [
        ("TSF230", HEADER.count("\n") + 10, "loop-carried-local")]
    assert [c.class_name for c in result.changes] == ["Res2NetBlock"]
    assert "y_i (Tensor) bound before the loop in forward()" in result.changes[0].summary


def test_it_proves_on_modulelist_iters_output_too() -> None:
    """The order of --rule all: the binding in modulelist-iter's loop over the blocks is not
    sure, but it sits in the branch later iterations take."""
    source = HEADER + ECAPA
    both = rewrite_source(source, RewriteSettings([ModuleListIter, LoopCarriedLocal]), "m.py")
    assert "for j, block in enumerate(self.blocks)" in both.text
    assert "y_i = torch.empty(0)\n        for i, x_i in enumerate(" in both.text
    assert {c.rule for c in both.changes} == {"modulelist-iter", "loop-carried-local"}


@pytest.mark.parametrize(("loop", "branches"), [
    ("for i in range(n):", ["if i == 0:", "    h = x + i", "else:", "    h = h * 2"]),
    ("for i in range(n):", ["if not i:", "    h = x + i", "else:", "    h = h * 2"]),
    ("for i in range(n):", ["if i < 1:", "    h = x + i", "else:", "    h = h * 2"]),
    ("for i in range(0, n):", ["if 0 == i:", "    h = x + i", "else:", "    h = h * 2"]),
    ("for i in range(1, n):", ["if i == 1:", "    h = x + i", "elif i > 1:", "    h = h * 2"]),
    ("for i in range(2, n, 2):", ["if i <= 2:", "    h = x + i", "else:", "    h = h * 2"]),
    ("for i, v in enumerate(xs):",
     ["if i == 0 or self.stage:", "    h = x + i", "else:", "    h = h * 2"]),
    ("for k, v in enumerate(xs, 1):", ["if k == 1:", "    h = x + k", "else:", "    h = h * 2"]),
    ("for k, v in enumerate(xs, start=3):",
     ["if k != 3:", "    h = h * v", "else:", "    h = x + k"]),
])
def test_tests_on_the_counter_decide_the_first_iteration(loop: str, branches: list[str]) -> None:
    """Each form binds h on the first iteration before the read in the branch later
    iterations take."""
    code = "\n".join([
        "class M(nn.Module):",
        "    def forward(self, x, xs: List[int], n: int):",
        "        out = []",
        f"        {loop}",
        *(f"            {line}" for line in branches),
        "            out.append(h)",
        "        return out",
        ""])
    lines, result = added(code)
    assert lines == [COMMENT, "h = torch.empty(0)"], result.text


def test_a_read_guarded_by_the_counter_before_the_binding_at_the_end_of_the_body() -> None:
    lines, _ = added("""\
    class Delta(nn.Module):
        def forward(self, x):
            out = []
            for t in range(x.size(1)):
                if t > 0:
                    out.append(x[:, t] - previous)
                previous = x[:, t]
            return out
    """)
    assert lines == [COMMENT, "previous = torch.empty(0)"]


def test_a_conditional_expression_on_the_counter() -> None:
    lines, _ = added("""\
    class Gain(nn.Module):
        def forward(self, x):
            out = []
            for i in range(3):
                gain = 1.0 if i == 0 else gain * 0.5
                out.append(x * gain)
            return out
    """)
    assert lines == [COMMENT, "gain = 0.0"]


@pytest.mark.parametrize(("first", "later", "placeholder", "typing"), [
    ("x.size(0)", "h * 2", "h = 0", ""),
    ("x.size(0) / 2", "h * 0.5", "h = 0.0", ""),
    ("x.size(0) > 1", "not h", "h = False", ""),
    ('"a"', 'h + "b"', 'h = ""', ""),
    ("[x.size(0)]", "h + [1]", "h: List[int] = []", "List"),
    ("[x]", "h + [x]", "h: List[torch.Tensor] = []", "List"),
    ("(x, x.size(0))", "(h[0] + 1, h[1])", "h: Tuple[torch.Tensor, int] = (torch.empty(0), 0)",
     "Tuple"),
    ("{'a': x.size(0)}", "h", "h: Dict[str, int] = {}", "Dict"),
    ("torch.split(x, 2)", "h", "h: List[torch.Tensor] = []", "List"),
])
def test_the_placeholder_has_the_type_of_the_values_the_loop_binds(
        first: str, later: str, placeholder: str, typing: str) -> None:
    lines, result = added(f"""\
    class M(nn.Module):
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = {first}
                else:
                    h = {later}
                print(h)
            return x
    """)
    assert lines[-1] == placeholder, result.text
    if typing:
        assert f"from typing import {typing}" in result.text or \
            typing in result.text.split("\n", 1)[0]


def test_a_typed_assignment_in_the_loop_gives_its_annotation_to_the_placeholder() -> None:
    """TorchScript rejects a second annotation ("already defined in an outer block"): the one in
    the loop moves to the placeholder."""
    result = rewrite("""\
    class M(nn.Module):
        def forward(self, x):
            for i in range(3):
                if not i:
                    lengths: List[int] = [x.size(-1)]
                else:
                    lengths = lengths + [1]
                print(lengths)
            return x
    """)
    assert "lengths: List[int] = []\n        for i in range(3):" in result.text
    assert "                lengths = [x.size(-1)]\n" in result.text


def test_torch_is_spelled_as_the_file_imports_it() -> None:
    lines, _ = added("""\
    class M(th.nn.Module):
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = x
                else:
                    h = h + x
                print(h)
            return x
    """, header="import torch as th\n\n\n")
    assert lines[-1] == "h = th.empty(0)"


def test_two_carried_names_share_one_comment() -> None:
    lines, _ = added("""\
    class M(nn.Module):
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = x
                    n = 1
                else:
                    h = h + x
                    n = n + 1
                print(h, n)
            return x
    """)
    assert lines == ["# Carried across iterations: TorchScript needs them bound before the "
                     "loop.", "h = torch.empty(0)", "n = 0"]


@pytest.mark.parametrize("code", [
    # Bound before the loop.
    """\
    def forward(self, x):
        h = x
        for i in range(3):
            h = h + x
        return h
    """,
    # Bound and read in each iteration: nothing is carried.
    """\
    def forward(self, x):
        out = []
        for i in range(3):
            h = x * i
            out.append(h)
        return out
    """,
    # The loop's own target.
    """\
    def forward(self, xs: List[int]):
        total = 0
        for v in xs:
            total = total + v
        return total
    """,
    # The carried read is in code TorchScript never compiles: not its problem.
    """\
    def forward(self, x):
        for i in range(3):
            if not torch.jit.is_scripting():
                if i > 0:
                    print(h)
            h = x * i
            x = x + h
        return x
    """,
])
def test_nothing_to_do_when_nothing_is_carried_in_compiled_code(code: str) -> None:
    source = HEADER + "class M(nn.Module):\n" + textwrap.indent(textwrap.dedent(code), "    ")
    result = rewrite_source(source, RewriteSettings([LoopCarriedLocal]), "m.py")
    assert result.text == source
    assert (result.changes, result.fixes, result.skips) == ([], [], [])


REFUSED = {
    "first iteration not decided": ("""\
        def forward(self, x, n: int):
            for i in range(n):
                if i == n:
                    h = x
                else:
                    h = h + x
                x = x * h
            return x
        """, "the read at line 13 may come before any assignment: the first iteration is not "
             "proven to bind it first"),
    "read after the loop": ("""\
        def forward(self, x):
            for i in range(x.size(0)):
                if i == 0:
                    h = x[i]
                else:
                    h = h + x[i]
            return h
        """, "it is also read outside the loop (line 14): when the loop runs no iteration "
             "Python raises there"),
    "start not literal": ("""\
        def forward(self, x, k: int):
            for i in range(k, 5):
                if i == 0:
                    h = x
                else:
                    h = h + x
                x = x * h
            return x
        """, "the read at line 13 may come before any assignment"),
    "while loop": ("""\
        def forward(self, x):
            i = 0
            while i < 3:
                if i == 0:
                    h = x
                else:
                    h = h + x
                i += 1
                x = x * h
            return x
        """, "the read at line 14 may come before any assignment"),
    "counter re-bound": ("""\
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = x
                else:
                    h = h + x
                i = 0
                x = x * h
            return x
        """, "the read at line 13 may come before any assignment"),
    "binding only in a nested loop": ("""\
        def forward(self, x, xs: List[int]):
            for i in range(3):
                if i == 0:
                    for v in xs:
                        h = x * v
                else:
                    h = h + x
                x = x * h
            return x
        """, "the read at line 15 may come before any assignment"),
    "type unknown": ("""\
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = self.helper(x)
                else:
                    h = self.helper(h)
                x = x + 1
            return x
        """, "the values the loop assigns to it are of a type this rule cannot tell"),
    "types differ": ("""\
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = 1
                else:
                    h = h * 0.5
                x = x * h
            return x
        """, "the loop assigns it values of different types (float, int)"),
    "deleted": ("""\
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = x
                else:
                    h = h + x
                    del h
                    h = x
            return x
        """, "it is deleted (del)"),
    "read by a nested function": ("""\
        def forward(self, x):
            for i in range(3):
                if i == 0:
                    h = x
                else:
                    h = h + x
            def show():
                return h
            return x
        """, "it is used inside a nested function"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_sites_stay_and_say_why(case: str) -> None:
    code, reason = REFUSED[case]
    source = HEADER + "class M(nn.Module):\n" + textwrap.indent(textwrap.dedent(code), "    ")
    result = rewrite_source(source, RewriteSettings([LoopCarriedLocal]), "m.py")
    assert result.text == source
    assert result.changes == [] and result.fixes == []
    assert len(result.skips) == 1, result.skips
    skip = result.skips[0]
    assert skip.code == "TSF230"
    assert skip.reason.startswith("'h' is carried from one iteration of this loop to the next "
                                  "and not bound before it; 'h' is left alone: "), skip.reason
    assert reason in skip.reason, skip.reason


def test_a_tensor_placeholder_needs_torch_imported() -> None:
    source = ("from torch import nn\n\n\nclass M(nn.Module):\n"
              "    def forward(self, x):\n        for i in range(3):\n"
              "            if i == 0:\n                h = x.sum(0)\n"
              "            else:\n                h = h + x.sum(0)\n"
              "            x = x * h\n        return x\n")
    result = rewrite_source(source, RewriteSettings([LoopCarriedLocal]), "m.py")
    assert result.text == source
    assert "(the file does not import torch)" in result.skips[0].reason


def test_check_shows_tsf230_with_the_fix_or_the_refusal() -> None:
    source = HEADER + textwrap.dedent("""\
        class Fixed(nn.Module):
            def forward(self, x):
                for i in range(3):
                    if i == 0:
                        h = x
                    else:
                        h = h + x
                    x = x * h
                return x


        class Refused(nn.Module):
            def forward(self, x, n: int):
                for i in range(n):
                    if i == n:
                        h = x
                    else:
                        h = h + x
                    x = x * h
                return x
        """)
    findings = {f.line: f for f in check_source(source, "m.py") if f.code == "TSF230"}
    assert sorted(findings) == [9, 20]
    assert findings[9].fix == "loop-carried-local" and not findings[9].refused
    assert findings[20].fix is None
    assert findings[20].refused.startswith(
        "loop-carried-local: 'h' is left alone: the read at line 24 may come before any "
        "assignment")
    assert findings[9].message == ("'h' is carried from one iteration of this loop to the next "
                                   "and not bound before it")


# ---- measured on torch ----------------------------------------------------------------------

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
def test_ecapa_block_scripts_after_both_rules_and_export_takes_the_original(
        tmp_path: Path) -> None:
    """modulelist-iter alone leaves 'undefined value y_i'; with this rule the block scripts with
    the original's results. torch.export runs the Python loop: the original exports as it is
    (one reason the rule serves the torchscript target only)."""
    torch = pytest.importorskip("torch")
    source = HEADER + ECAPA
    index_only = rewrite_source(source, RewriteSettings([ModuleListIter]), "m.py").text
    both = rewrite_source(source, RewriteSettings([ModuleListIter, LoopCarriedLocal]), "m.py").text
    original = _load(tmp_path, "carried_original", source)
    partial = _load(tmp_path, "carried_index_only", index_only)
    fixed = _load(tmp_path, "carried_fixed", both)
    x = torch.randn(2, 8, 6)
    torch.manual_seed(0)
    reference = original.Res2NetBlock().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="undefined value y_i"):
            torch.jit.script(partial.Res2NetBlock())
        candidate = fixed.Res2NetBlock().eval()
        candidate.load_state_dict(reference.state_dict())
        scripted = torch.jit.script(candidate)
        with torch.no_grad():
            expected = reference(x)
            torch.testing.assert_close(scripted(x), expected, rtol=1e-4, atol=1e-5)
            exported = torch.export.export(reference, (x,))
            assert torch.equal(exported.module()(x), expected)
