"""data-dependent-branch: which tests are tensor predicates (and which Python values are not),
the torch.cond forms it writes, what it refuses and why, the TSF227 reports, idempotence, and
(slow) one exported program of a rewritten fixture serving inputs that take each side."""

from __future__ import annotations

import io
import textwrap
import warnings
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES_ROOT, fixture_pairs, load_module
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.data_dependent_branch import DataDependentBranch
from tsfix.codemods.rules.names import UnknownRuleError

FIXTURES = FIXTURES_ROOT / "data-dependent-branch"


def rewrite(code: str) -> Rewrite:
    result = rewrite_source(textwrap.dedent(code), "m.py", [DataDependentBranch])
    cst.parse_module(result.text)
    again = rewrite_source(result.text, "m.py", [DataDependentBranch])
    assert not again.changed and again.text == result.text, "not a fixed point"
    return result


def module(forward: str, init: str = "", helpers: str = "", imports: str = "import torch\n"
           ) -> str:
    """A module class with ``forward``'s body (and optional ``__init__`` body and helpers)."""
    init_block = (f"    def __init__(self):\n        super().__init__()\n"
                  f"{textwrap.indent(textwrap.dedent(init), ' ' * 8)}") if init else ""
    return (f"{imports}\n\nclass M(torch.nn.Module):\n{init_block}"
            f"    def forward(self, x, mask):\n"
            f"{textwrap.indent(textwrap.dedent(forward), ' ' * 8)}"
            f"{textwrap.indent(textwrap.dedent(helpers), ' ' * 4)}")


def cond_predicate(result: Rewrite) -> list[str]:
    """The predicate source of every torch.cond call in the rewritten text."""
    found = []
    for call in _calls(cst.parse_module(result.text)):
        if cst.Module([]).code_for_node(call.func) == "torch.cond":
            found.append(cst.Module([]).code_for_node(call.args[0].value))
    return found


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    calls: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            calls.append(call)

    node.visit(Collect())
    return calls


# ---- what is a tensor predicate -------------------------------------------------------------

@pytest.mark.parametrize(("test", "predicate"), [
    ("mask.any()", "mask.any()"),
    ("mask.all()", "mask.all()"),
    ("x.sum() > 0", "x.sum() > 0"),
    ("x.abs().max() > self.limit", "x.abs().max() > self.limit"),
    ("torch.isnan(x).any()", "torch.isnan(x).any()"),
    ("torch.any(mask)", "torch.any(mask)"),
    ("bool(x.mean() > 0.5)", "x.mean() > 0.5"),
    ("not mask.any()", "torch.logical_not(mask.any())"),
    ("(x > 0).all()", "(x > 0).all()"),
    ("mask.any() and x.max() > 1", "torch.logical_and(mask.any(), x.max() > 1)"),
    ("mask.all() or not x.min() < 0",
     "torch.logical_or(mask.all(), torch.logical_not(x.min() < 0))"),
    ("self.scale > 1", "self.scale > 1"),          # a registered buffer
    ("y.norm() > 1", "y.norm() > 1"),              # a local from a tensor method
    ("h.any()", "h.any()"),                        # a local from a layer call
])
def test_a_test_on_a_tensor_becomes_the_torch_cond_predicate(test: str, predicate: str) -> None:
    code = module(f"""\
        y = x * 2
        h = self.proj(x)
        if {test}:
            x = x + 1
        return x
        """, init="""\
        self.limit = 1.0
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(1))
        """)
    result = rewrite(code)
    assert cond_predicate(result) == [predicate]
    assert [f.code for f in result.fixes] == ["TSF226"]
    assert "if " not in result.text.split("def forward")[1].split("torch.cond")[1]


@pytest.mark.parametrize("test", [
    "self.flag",
    "x is None",
    "len(xs) > 2",
    "self.training",
    "x.size(0) > 1",
    "x.shape[-1] == 4",
    "x.dim() == 3",
    "x.dtype == torch.float16",
    "x.is_floating_point()",
    "x.numel() > 0",
    "x.requires_grad",
    "isinstance(x, torch.Tensor)",
    "torch.jit.is_scripting()",
    "self.helper(x)",               # what a helper returns is not known
    "self.custom(x)",               # a submodule of this file's own class: may return anything
    "x.equal(y)",                   # a bool, not a tensor
    "x.allclose(y)",
])
def test_python_values_are_not_tensor_predicates(test: str) -> None:
    def with_test(test: str) -> str:
        code = module(f"""\
            xs = [x, x, x]
            y = x.relu() + 1
            if {test}:
                x = x + 1
            return x
            """, init="""\
            self.flag = True
            self.custom = Block()
            """, helpers="""\
            def helper(self, x):
                return x
            """)
        return code.replace("class M(", "class Block(torch.nn.Module):\n    pass\n\n\nclass M(")

    result = rewrite(with_test(test))
    assert not result.changed
    assert (result.fixes, result.skips) == ([], [])
    # The same class with a tensor test is rewritten: the harness reaches the test.
    assert cond_predicate(rewrite(with_test("y.any()"))) == ["y.any()"]


def test_a_parameter_with_a_python_default_or_annotation_is_not_a_tensor() -> None:
    result = rewrite("""\
        import torch
        from typing import Optional
        class M(torch.nn.Module):
            def forward(self, x, threshold=0.5, n: int = 2, h: Optional[torch.Tensor] = None):
                if threshold > 0:
                    x = x * threshold
                if n > 1:
                    x = x + 1
                if h is not None:
                    x = x + h
                return x.relu()
        """)
    assert not result.changed and (result.fixes, result.skips) == ([], [])


def test_branches_under_is_scripting_and_in_nested_functions_are_not_searched() -> None:
    # torch.export does not run the body of `if torch.jit.is_scripting():`; a nested function's
    # names are its own (a previous run's branch functions are such).
    result = rewrite(module("""\
        if torch.jit.is_scripting():
            if mask.any():
                x = x + 1
        def inner(x):
            if mask.any():
                x = x + 1
            return x
        return inner(x)
        """))
    assert not result.changed and (result.fixes, result.skips) == ([], [])


def test_a_helper_reached_from_forward_is_rewritten_and_an_unreached_one_is_not() -> None:
    code = module("return self.clip(x)\n", init="self.limit = 1.0\n", helpers="""\
        def clip(self, y):
            if y.abs().max() > self.limit:
                y = y / y.abs().max()
            return y
        @torch.jit.ignore
        def unused_clip(self, y):
            if y.abs().max() > self.limit:
                y = y / y.abs().max()
            return y
        """)
    result = rewrite(code)
    assert [f.line for f in result.fixes] == [code.splitlines().index(
        "        if y.abs().max() > self.limit:") + 1]
    assert result.text.count("torch.cond(") == 1
    assert "def unused_clip(self, y):\n        if y.abs().max()" in result.text
    assert result.changes[0].summary == ("torch.cond for 1 data-dependent branch: clip(): "
                                         "`if y.abs().max() > self.limit`")


def test_an_ignored_helper_forward_calls_is_searched_too() -> None:
    # torch.export runs Python: @torch.jit.ignore does not hide a helper from it.
    result = rewrite(module("return self.fill(x, mask)\n", helpers="""\
        @torch.jit.ignore
        def fill(self, x, mask):
            if mask.any():
                x = x.masked_fill(mask, 0.0)
            return x
        """))
    assert cond_predicate(result) == ["mask.any()"]


def test_elif_and_else_each_become_a_side() -> None:
    result = rewrite(module("""\
        if x.sum() > 0:
            x = x * 2
        elif mask.any():
            x = x - 1
        else:
            x = x + 1
        return x
        """))
    # The elif is lowered inside the false side, written before the outer call.
    assert cond_predicate(result) == ["mask.any()", "x.sum() > 0"]
    namespace: dict[str, object] = {}
    exec(compile(result.text, "m.py", "exec"), namespace)
    import torch
    model = namespace["M"]()  # type: ignore[operator]
    for x, mask, expected in ((torch.ones(2), torch.zeros(2, dtype=torch.bool), 2.0),
                              (-torch.ones(2), torch.ones(2, dtype=torch.bool), -2.0),
                              (-torch.ones(2), torch.zeros(2, dtype=torch.bool), 0.0)):
        assert torch.equal(model(x, mask), torch.full((2,), expected))


def test_a_file_without_import_torch_gets_it() -> None:
    result = rewrite("""\
        from torch import nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)
            def forward(self, x):
                h = self.proj(x)
                if h.any():
                    h = h * 2
                return h
        """)
    assert result.text.startswith("import torch\nfrom torch import nn\n")
    assert cond_predicate(result) == ["h.any()"]


# ---- refusals --------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "reason"), [
    ("""\
     if (x == 0).all():
         return x.new_zeros(x.size(0))
     return x * 2
     """, "the true side leaves the branch (contains `return`)"),
    ("""\
     scale = 1.0
     if mask.any():
         scale = 0.5
     return x * scale
     """, "no tensor output: `scale` is given a Python value in the true side (`0.5`); "
          "torch.cond returns tensors"),
    ("""\
     if mask.any() and self.flag:
         x = x + 1
     return x
     """, "`and` joins a Python value and a tensor test: torch.cond needs one tensor "
          "predicate (make both tensors, or split the if)"),
    ("""\
     if 0 < x.mean() < 1:
         x = x + 1
     return x
     """, "a chained comparison on a tensor: write it as `torch.logical_and(a < t, t < b)`"),
    ("""\
     while x.abs().max() > 10:
         x = x / 2
     return x
     """, "a while loop on a tensor: torch.cond cannot express a loop (loop a fixed count, or "
          "use torch.while_loop)"),
    ("""\
     return x if x.max() > 0 else -x
     """, "a conditional expression on a tensor: write it as `torch.where(pred, a, b)` (both "
          "computed) or as an if statement"),
])
def test_refused_with_the_reason_and_the_file_left_as_it_is(body: str, reason: str) -> None:
    code = module(body, init="self.flag = True\n")
    result = rewrite(code)
    assert result.text == textwrap.dedent(code)
    assert [(s.code, s.reason.partition("; not turned into torch.cond: ")[2])
            for s in result.skips] == [("TSF226", reason)]
    message = result.skips[0].message
    assert "on a tensor value" in message
    assert 'torch.export fails with "Could not guard on data-dependent expression"' in message


def test_a_python_value_first_in_or_is_reported_without_claiming_a_blocker() -> None:
    # speechbrain's ConformerEncoder layerdrop: in eval mode `not self.training` decides the
    # test, export never reads the tensor and the model exports; in training mode it fails.
    code = module("""\
        keep = torch.rand(3)
        if not self.training or keep[0] > 0.5:
            x = x + 1
        if keep[1] > 0.5 or not self.training:
            x = x + 2
        return x
        """)
    result = rewrite(code)
    assert result.text == textwrap.dedent(code)
    assert [(s.line, s.code) for s in result.skips] == [(7, None), (9, "TSF226")]
    assert result.skips[0].message.startswith("if on a tensor value (`not self.training or "
                                              "keep[0] > 0.5`): torch.export may fail")
    assert result.skips[0].reason.endswith("export fails only when `not self.training` does "
                                           "not decide the test on its own")
    assert "torch.export fails with" in result.skips[1].message


# ---- numbers read out of tensors (TSF227) ----------------------------------------------------

@pytest.mark.parametrize(("body", "shown", "error"), [
    ("n = int(mask.sum())\nreturn x[:n]\n", "`int(mask.sum())` reads an int",
     "Could not extract specialized integer from data-dependent expression"),
    ("return x * float(x.max())\n", "`float(x.max())` reads a float",
     "Could not guard on data-dependent expression"),
    ("for _ in range(mask.sum().item()):\n    x = x * 2\nreturn x\n",
     "`range(mask.sum().item())` loops a number of times",
     "Could not extract specialized integer from data-dependent expression"),
    ("k = mask.sum().item()\nif k > 2:\n    x = x * 2\nreturn x\n",
     "the test `k > 2` uses `k`", "Could not guard on data-dependent expression"),
    ("lengths = mask.sum(1).tolist()\nif lengths[0] > 2:\n    x = x * 2\nreturn x\n",
     "the test `lengths[0] > 2` uses `lengths`", "Could not guard on data-dependent expression"),
    ("return x * 2 if x.sum().item() > 0 else x\n",
     "the test `x.sum().item() > 0` uses `x.sum().item()`",
     "Could not guard on data-dependent expression"),
])
def test_a_number_read_out_of_a_tensor_is_reported_and_left(body: str, shown: str,
                                                           error: str) -> None:
    code = module(body)
    result = rewrite(code)
    assert result.text == textwrap.dedent(code)
    assert [s.code for s in result.skips] == ["TSF227"]
    skip = result.skips[0]
    assert skip.message.startswith(shown), skip.message
    assert f'torch.export fails with "{error}"' in skip.message
    assert "; left as it is: " in skip.reason


@pytest.mark.parametrize("body", [
    "return torch.zeros(mask.sum().item()) + x.sum()\n",   # a size
    "return x[: mask.sum().item()]\n",                      # a slice bound
    "return x.view(mask.sum().item(), -1)\n",
    "lengths = mask.sum(1).tolist()\nreturn x[:, : lengths[0]]\n",
    "assert mask.sum().item() > 0\nreturn x\n",
    "n = int(x.size(0))\nreturn x[:n]\n",                    # a shape is no tensor value
    "return x * float(self.limit)\n",
])
def test_uses_that_export_traces_are_not_reported(body: str) -> None:
    # Measured on torch 2.13: .item() as a size, slice bound or view argument, .tolist()
    # indexed, and an assert on .item() all export, one program serving every value.
    result = rewrite(module(body, init="self.limit = 1.0\n"))
    assert (result.changed, result.skips) == (False, [])


# ---- target, idempotence, fixtures -----------------------------------------------------------

def test_the_rule_serves_only_the_export_target() -> None:
    assert DataDependentBranch.targets == ("export",)
    from tsfix.codemods.rules.registry import select_rules
    assert DataDependentBranch in select_rules(["all"], "export")
    assert DataDependentBranch not in select_rules(["all"], "torchscript")
    with pytest.raises(UnknownRuleError, match="does not apply under --target torchscript"):
        select_rules(["data-dependent-branch"], "torchscript")


def test_fixture_pairs_and_a_second_run(tmp_path: Path) -> None:
    pairs = fixture_pairs(FIXTURES)
    copies = []
    for before, _ in pairs:
        copy = tmp_path / before.name
        copy.write_text(before.read_text())
        copies.append(copy)
    (tmp_path / "pyproject.toml").write_text((FIXTURES / "pyproject.toml").read_text())
    run([str(tmp_path)], Options(verify=False))
    for (_, after), copy in zip(pairs, copies, strict=True):
        assert copy.read_text() == after.read_text(), copy.name
    again = run([str(tmp_path)], Options(verify=False))
    assert [f.display for f in again.files if f.status == "changed"] == []


# ---- one exported program, both sides (slow) -------------------------------------------------

@pytest.mark.slow
def test_one_exported_program_serves_inputs_taking_each_side(tmp_path: Path) -> None:
    """The original fails torch.export; the rewrite exports once, and that one program (and
    the same after torch.export.save/load) gives exactly the original's eager output for
    inputs that take either side of each branch."""
    import torch
    warnings.filterwarnings("ignore")
    cases = {
        "masked_encoder": ("MaskedEncoderLayer", {}, lambda m, a: bool(a[1].any()), [
            (torch.randn(2, 5, 16), torch.zeros(2, 5, dtype=torch.bool)),
            (torch.randn(2, 5, 16), torch.ones(2, 5, dtype=torch.bool))]),
        "peak_normalize": ("PeakNormalizedFrontEnd", {"limit": 1.0},
                           lambda m, a: bool(a[0].abs().max() > m.limit), [
            (torch.rand(2, 160),), (torch.randn(2, 160) * 3,)]),
    }
    for case, (name, init, side, calls) in cases.items():
        before = getattr(load_module(FIXTURES / f"{case}.in.py", f"ddb_{case}_in"), name)
        after = getattr(load_module(FIXTURES / f"{case}.out.py", f"ddb_{case}_out"), name)
        torch.manual_seed(0)
        original = before(**init).eval()
        rewritten = after(**init).eval()
        rewritten.load_state_dict(original.state_dict())
        assert {side(original, args) for args in calls} == {True, False}, case
        with pytest.raises(Exception, match="Could not guard on data-dependent expression"):
            torch.export.export(original, calls[0])
        program = torch.export.export(rewritten, calls[0])
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        buffer.seek(0)
        loaded = torch.export.load(buffer)
        for args in calls:
            expected = original(*args)
            assert torch.equal(program.module()(*args), expected), case
            assert torch.equal(loaded.module()(*args), expected), case
