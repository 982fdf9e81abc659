"""lower_to_cond: an ``if`` of a function as torch.cond, on source strings (no torch)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from tsfix.codemods.facts.syntax import code_of, find_all
from tsfix.codemods.rules.torch_cond import CondResult, CondSite, lower_to_cond


def _lower(code: str, test: str = "flag") -> tuple[str, CondResult]:
    """Lower every ``if`` whose test is exactly ``test`` (the predicate is the test)."""
    func = cst.parse_statement(textwrap.dedent(code).lstrip("\n"))
    assert isinstance(func, cst.FunctionDef)
    sites = [CondSite(branch, branch.test, "branch") for branch in find_all(func, cst.If)
             if code_of(branch.test) == test]
    assert sites
    result = lower_to_cond(func, sites)
    return code_of(result.func), result


def test_outputs_inputs_and_the_clone_of_an_unchanged_value() -> None:
    text, result = _lower("""
        def forward(self, x, flag):
            x = self.lin(x)
            if flag:
                x = self.act(x)
                y = x.sum()
            else:
                y = x.mean()
            return x + y
        """)
    assert len(result.lowered) == 1 and not result.refused
    assert text == textwrap.dedent("""\
        def forward(self, x, flag):
            x = self.lin(x)

            def branch_true(x):
                x = self.act(x)
                y = x.sum()
                return x, y
            def branch_false(x):
                y = x.mean()
                return x.clone(), y
            x, y = torch.cond(flag, branch_true, branch_false, (x,))
            return x + y
        """)


def test_one_output_without_else_and_a_value_that_may_alias() -> None:
    text, _ = _lower("""
        def forward(self, x, flag):
            if flag:
                x = x.detach()
            return x
        """)
    # A detached tensor shares its input's storage: torch.cond refuses an output aliasing an
    # input, so it is cloned.
    assert "return x.clone()\n    def branch_false(x):\n        return x.clone()" in text
    assert "x = torch.cond(flag, branch_true, branch_false, (x,))" in text


def test_a_side_that_may_change_shape_or_layout_is_refused() -> None:
    # torch.cond needs one shape, dtype and stride order from both sides (speechbrain's
    # skip_transpose / combine_batch_time flags broke eager runs when lowered).
    for change in ("x.view(-1)", "x.transpose(1, -1)", "x.reshape(b, -1).float()", "x.mT",
                   "x[:, :4]"):
        _, result = _lower(f"""
            def forward(self, x, flag, b: int):
                if flag:
                    x = {change}
                return x
            """)
        assert not result.lowered, change
        (reason,) = result.refused.values()
        assert "may change shape, dtype or memory layout in the true side" in reason, change
    # Shape changes inside arguments keep the value's own shape: lowered.
    _, result = _lower("""
        def forward(self, x, mask, flag):
            if flag:
                x = x.masked_fill(mask.unsqueeze(-1), 0.0)
            return x
        """)
    assert result.lowered and not result.refused


def test_names_the_sides_only_read_come_through_the_closure() -> None:
    # A read-only name may hold anything (speechbrain passed a torch.Size as an operand, which
    # torch.cond rejects); only names a side rebinds are operands.
    text, result = _lower("""
        def forward(self, x, mask, flag):
            shape_or = x.shape
            if flag:
                x = self.norm(x) * mask + shape_or[0]
            return x
        """)
    assert result.lowered
    assert "def branch_true(x):" in text
    assert "x = torch.cond(flag, branch_true, branch_false, (x,))" in text


def test_python_values_are_read_through_the_closure() -> None:
    text, _ = _lower("""
        def forward(self, x, flag, scale: float = 2.0):
            if flag:
                x = self.lin(x) * scale
            return x
        """)
    # torch.cond takes tensors only as operands; `scale` is no tensor.
    assert "def branch_true(x):" in text
    assert "(x,))" in text


def test_elif_is_lowered_inside_the_false_function() -> None:
    func = cst.parse_statement(textwrap.dedent("""
        def forward(self, x, a, b):
            if a:
                x = self.f(x)
            elif b:
                x = self.g(x)
            return x
        """))
    assert isinstance(func, cst.FunctionDef)
    outer = find_all(func, cst.If)[0]
    assert isinstance(outer.orelse, cst.If)
    result = lower_to_cond(func, [CondSite(outer, outer.test, "a"),
                                  CondSite(outer.orelse, outer.orelse.test, "b")])
    text = code_of(result.func)
    assert len(result.lowered) == 2
    assert "elif" not in text and "if " not in text
    assert "    def a_false(x):\n        def b_true(x):" in text
    assert "x = torch.cond(b, b_true, b_false, (x,))" in text
    assert "x = torch.cond(a, a_true, a_false, (x,))" in text


def test_only_the_elif_lowered_becomes_an_else_block() -> None:
    func = cst.parse_statement(textwrap.dedent("""
        def forward(self, x, mode: int, b):
            if mode == 1:
                x = self.f(x)
            elif b:
                x = self.g(x)
            return x
        """))
    assert isinstance(func, cst.FunctionDef)
    inner = find_all(func, cst.If)[1]
    text = code_of(lower_to_cond(func, [CondSite(inner, inner.test, "b")]).func)
    assert "if mode == 1:" in text and "else:\n        def b_true(x):" in text


def test_names_do_not_collide_with_names_the_function_uses() -> None:
    text, _ = _lower("""
        def forward(self, x, flag):
            branch_true = x * 2
            if flag:
                x = x + branch_true
            if flag:
                x = x - 1
            return x
        """)
    assert "def branch2_true(x):" in text and "x = x + branch_true" in text
    assert "def branch3_true(x):" in text


@pytest.mark.parametrize(("body", "reason"), [
    ("if flag:\n    print(x)\n", "no tensor output: the branch assigns nothing"),
    ("if flag:\n    n = 3\nelse:\n    n = 4\nx = x * n\n",
     "no tensor output: `n` is given a Python value in the true side (`3`)"),
    ("if flag:\n    return x\n", "the true side leaves the branch (contains `return`)"),
    ("if flag:\n    raise ValueError()\n", "the true side raises an exception"),
    ("if flag:\n    self.cache = x\n", "`self.cache = ...` assigns to an attribute or item"),
    ("if flag:\n    x += 1\n", "`x += 1` updates `x` in place"),
    ("if flag:\n    x.add_(1)\n", "`x.add_(...)` changes a tensor in place"),
    ("if flag:\n    rows.append(x)\n", "`rows.append(...)` changes a container in place"),
    ("if flag:\n    z = x * 2\nx = x + z\n",
     "`z` is assigned in the true side only and not bound before the `if`"),
])
def test_refusals_name_their_reason(body: str, reason: str) -> None:
    code = ("def forward(self, x, flag, rows):\n"
            + textwrap.indent(body, "    ") + "    return x\n")
    text, result = _lower(code)
    assert result.lowered == []
    [given] = result.refused.values()
    assert reason in given
    assert text == code


def test_loop_carried_value_is_an_output_and_an_input() -> None:
    text, result = _lower("""
        def forward(self, x, flag):
            h = x
            for _ in range(3):
                if flag:
                    h = self.cell(h)
            return h
        """)
    assert not result.refused
    assert "h = torch.cond(flag, branch_true, branch_false, (h,))" in text


def test_a_second_run_on_the_output_changes_nothing() -> None:
    text, _ = _lower("""
        def forward(self, x, flag):
            if flag:
                x = self.act(x)
            return x
        """)
    func = cst.parse_statement(text)
    assert isinstance(func, cst.FunctionDef)
    # The output has no `if` left: nothing to lower, and lowering nothing changes nothing.
    assert find_all(func, cst.If) == []
    assert code_of(lower_to_cond(func, []).func) == text


def test_a_side_holding_an_inner_lowered_cond_is_lowered_too() -> None:
    # data-dependent-branch lowers ``if mask.any():`` first; lift-branch then lowers the config
    # branch around it: the inner branch functions' returns do not leave the outer side.
    text, result = _lower("""
        def forward(self, x, mask, use_mask):
            if use_mask:
                def fill_true(x, mask):
                    x = x.masked_fill(mask, 0.0)
                    return x
                def fill_false(x, mask):
                    return x.clone()
                x = torch.cond(mask.any(), fill_true, fill_false, (x, mask))
            return x
        """, test="use_mask")
    assert len(result.lowered) == 1 and not result.refused, result.refused
    assert "x = torch.cond(use_mask, branch_true, branch_false, (x,))" in text
