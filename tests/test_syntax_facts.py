"""The small syntax helpers every rule shares (facts/syntax.py): a node's source for a message,
a fresh identifier, and the names a target, a statement or a whole function binds."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from tsfix.codemods.facts.syntax import (
    bound_names,
    fresh_name,
    names_bound_in,
    short_source,
    target_names,
)
from tsfix.codemods.lint.check import check_source


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def small_statement(code: str) -> cst.BaseSmallStatement:
    line = cst.parse_statement(code)
    assert isinstance(line, cst.SimpleStatementLine)
    return line.body[0]


def function(code: str) -> cst.FunctionDef:
    func = cst.parse_statement(textwrap.dedent(code))
    assert isinstance(func, cst.FunctionDef)
    return func


def test_short_source_is_one_line_cut_to_the_limit() -> None:
    call = expression("torch.cat(\n    [a,\n     b],\n    dim=1)")
    assert short_source(call) == "torch.cat( [a, b], dim=1)"
    long = expression("f(" + ", ".join(f"argument_{i}" for i in range(10)) + ")")
    assert short_source(long) == "f(argument_0, argument_1, argument_2, argument_3, argumen..."
    assert len(short_source(long)) == 60
    assert short_source(long, 20) == "f(argument_0, arg..."


def test_fresh_name_takes_the_first_free_candidate_then_numbers_the_last() -> None:
    assert fresh_name("layer", "layer_module", taken={"x"}) == "layer"
    assert fresh_name("layer", "layer_module", taken={"layer"}) == "layer_module"
    assert fresh_name("layer", "layer_module",
                      taken={"layer", "layer_module", "layer_module2"}) == "layer_module3"
    # Empty candidates and keywords are skipped, never returned.
    assert fresh_name("", "lambda", "item", taken=set()) == "item"
    assert fresh_name("out", taken={"out"}) == "out2"
    assert fresh_name("_numpy_x", taken={"_numpy_x"}, numbered="_numpy_x_") == "_numpy_x_2"


def test_target_names_are_the_plain_names_in_source_order() -> None:
    target = expression("(a, [b, *c]), self.d, e[i]")
    assert [n.value for n in target_names(target)] == ["a", "b", "c"]


@pytest.mark.parametrize(("code", "names"), [
    ("a = b, c = f()", {"a", "b", "c"}),
    ("x[i] = self.y = 1", set()),
    ("total += 1", {"total"}),
    ("n: int = 0", {"n"}),
    ("print(a)", set()),
])
def test_bound_names_of_one_statement(code: str, names: set[str]) -> None:
    assert bound_names(small_statement(code)) == names


def test_bound_names_of_a_loop_header_and_a_walrus() -> None:
    loop = cst.parse_statement("for i, (k, v) in items:\n    pass\n")
    assert bound_names(loop) == {"i", "k", "v"}
    walrus = expression("(n := len(x))")
    assert isinstance(walrus, cst.NamedExpr)
    assert bound_names(walrus) == {"n"}


def test_names_bound_in_a_function_are_every_way_python_binds_a_local() -> None:
    func = function("""\
        def forward(self, x, *args, scale=1.0, **kwargs):
            import torch.nn.functional
            import numpy as np
            from math import pi as PI
            a, (b, *c) = x
            d: int = 0
            d += 1
            self.e = x
            f[0] = x
            for g in range(3):
                pass
            with open(p) as h, lock:
                pass
            try:
                pass
            except ValueError as error:
                pass
            values = [k for k in x]
            if (m := len(x)):
                pass
            def helper():
                pass
            class Local:
                pass
            return x
    """)
    assert names_bound_in(func) == {
        "self", "x", "args", "scale", "kwargs", "torch", "np", "PI", "a", "b", "c", "d",
        "g", "h", "error", "values", "k", "m", "helper", "Local"}


def test_a_module_list_written_through_an_index_is_a_module_level_read(tmp_path) -> None:
    """``SCALE[0] = 2.0`` binds nothing: it reads the global list, which TorchScript refuses
    (measured on torch 2.13: "python value of type 'list' cannot be used as a value"). The
    linter once counted every name in an assignment target as a local and said nothing."""
    source = textwrap.dedent("""\
        import torch.nn as nn

        SCALE = [1.0]


        class M(nn.Module):
            def forward(self, x):
                SCALE[0] = 2.0
                return x * SCALE[0]
    """)
    found = [(f.code, f.line, f.message) for f in check_source(source, "m.py")]
    assert found == [("TSF105", 8, "module-level list 'SCALE' read in forward()"),
                     ("TSF105", 9, "module-level list 'SCALE' read in forward()")]
