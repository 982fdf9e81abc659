"""module-constant: a module-level constant read in a compiled method is written as its literal
(glom-pytorch's TOKEN_ATTEND_SELF_VALUE: "python value of type 'float' cannot be used as a
value")."""

from __future__ import annotations

import textwrap

from conftest import rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.rules.module_constant import ModuleConstant

rewrite = rule_rewriter(ModuleConstant, header="")

CONSTANTS = textwrap.dedent("""\
    import torch
    from torch import nn

    VALUE = -5e-4
    NAME = "x"
    FLAG = True
    PAIR = (1, 2)
    AGAIN = 1
    AGAIN = 2
    SIZES = [1, 2]


    def set_g():
        global G
        G = 1


    G = 4


    class M(nn.Module):
        def forward(self, x, NAME: str = "y"):
            y = x * VALUE + VALUE ** 2 + AGAIN + G + sum(SIZES)
            if FLAG:
                y = y + len(NAME) + PAIR[0]
            return y * VALUE.real
    """)


def test_each_read_becomes_the_literal_kept_one_operand() -> None:
    result = rewrite(CONSTANTS)

    assert result.text == CONSTANTS.replace(
        "x * VALUE + VALUE ** 2", "x * -5e-4 + (-5e-4) ** 2").replace(
        "if FLAG:", "if True:").replace("PAIR[0]", "(1, 2)[0]").replace(
        "y * VALUE.real", "y * (-5e-4).real")
    # Bound twice, declared global in a function, a list, a parameter's name: left as read.
    assert [(f.line, f.code) for f in result.fixes] == [(23, "TSF105"), (23, "TSF105"),
                                                        (24, "TSF105"), (25, "TSF105"),
                                                        (26, "TSF105")]


def test_tsfix_check_names_the_rule_for_each_site_it_fixes() -> None:
    fixed = sorted((f.line, f.column) for f in check_source(CONSTANTS, "m.py")
                   if f.code == "TSF105" and f.fix == "module-constant")
    assert fixed == [(23, 17), (23, 25), (24, 12), (25, 33), (26, 20)]
