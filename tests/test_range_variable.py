"""range-variable: a range kept in a name bound on several paths becomes its bounds (a step
kept when any binding has one), every loop over it calls range itself, a name bound once is
left (it scripts), each refusal has its reason, and check reports TSF240 at each loop. The
fixture pairs (scripted with parity) are tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap

import pytest
from conftest import rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.rules.range_variable import RangeVariable

HEADER = "import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n"


rewrite = rule_rewriter(RangeVariable)


def forward(body: str) -> str:
    return HEADER + "    def forward(self, x, n: int):\n" + textwrap.indent(
        textwrap.dedent(body), "        ")


def test_bounds_per_path_and_the_loops_call_range() -> None:
    result = rewrite(forward("""\
        if n > 3:
            steps = range(1, n)
        else:
            steps = range(n)
        for i in steps:
            x = x + i
        return x
        """))
    assert result.text == forward("""\
        if n > 3:
            steps_start, steps_stop = 1, n
        else:
            steps_start, steps_stop = 0, n
        for i in range(steps_start, steps_stop):
            x = x + i
        return x
        """)
    assert [(f.code, f.line) for f in result.fixes] == [("TSF240", 11)]


def test_a_step_in_one_binding_gives_every_binding_a_step_and_names_stay_fresh() -> None:
    result = rewrite(forward("""\
        steps_start = 5
        steps = range(n)
        if n > 3:
            steps = range(n - 1, -1, -1)
        for i in steps:
            x = x + i + steps_start
        return x
        """))
    assert result.text == forward("""\
        steps_start = 5
        steps_start_2, steps_stop, steps_step = 0, n, 1
        if n > 3:
            steps_start_2, steps_stop, steps_step = n - 1, -1, -1
        for i in range(steps_start_2, steps_stop, steps_step):
            x = x + i + steps_start
        return x
        """)


def test_a_range_bound_once_scripts_and_is_left_alone() -> None:
    result = rewrite(forward("""\
        steps = range(1, n)
        for i in steps:
            x = x + i
        return x
        """))
    assert not result.changed and result.skips == []


@pytest.mark.parametrize(("body", "reason"), [
    ("r = range(n)\nif n > 2:\n    r = range(2, n)\nreturn x * len(r)\n",
     "read other than as the iterable of a for loop"),
    ("r = range(n)\nif n > 2:\n    r = [0, 1]\nfor i in r:\n    x = x + i\nreturn x\n",
     "also bound to `[0, 1]`"),
    ("r = range(n)\nfor r in range(2):\n    x = x + r\nreturn x\n",
     "also bound other than by `r = ...`"),
    ("r = range(n)\nif n > 2:\n    r = range(stop=n)\nfor i in r:\n    x = x + i\nreturn x\n",
     "passes keywords, *args or no bound"),
])
def test_refusals_say_why(body: str, reason: str) -> None:
    result = rewrite(forward(body))
    assert not result.changed
    [skip] = result.skips
    assert skip.code == "TSF240" and reason in skip.reason


def test_a_re_bound_range_is_left_alone() -> None:
    code = "from mytools import range\n" + forward(
        "r = range(n)\nif n > 2:\n    r = range(2, n)\nfor i in r:\n    x = x + i\nreturn x\n")
    result = rewrite(code)
    assert not result.changed and "range is re-bound" in result.skips[0].reason


def test_check_reports_each_loop_with_the_fix() -> None:
    source = forward("""\
        if n > 3:
            steps = range(1, n)
        else:
            steps = range(n)
        for i in steps:
            x = x + i
        for j in steps:
            x = x - j
        return x
        """)
    found = [(f.line, f.fix) for f in check_source(source, "m.py") if f.code == "TSF240"]
    assert found == [(11, "range-variable"), (13, "range-variable")]
