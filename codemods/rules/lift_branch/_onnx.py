"""The ``--target onnx`` form: each lifted setting is read into a plain local from an
``Optional[Tensor]`` argument (see ``LiftBranchOnnx``)."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.rules.lift_branch._plan import Lift
from tsfix.codemods.rules.lift_branch._reads import quoted


def onnx_preamble(lift: Lift, self_var: str) -> list[cst.BaseStatement]:
    """The setting's value as a plain local, from the Tensor argument when one is given."""
    if lift.codes is None:
        default = f"{lift.local}: {lift.type} = {self_var}.{lift.attr}\n"
        convert = lift.type
    else:
        table = ", ".join(f"{quoted(text)}: {code}" for text, code in lift.codes.items())
        legend = ", ".join(f"{code} = {quoted(text)}" for text, code in lift.codes.items())
        default = (f"# {lift.param} codes: {legend}, -1 = any other value\n"
                   f"{lift.local}: int = {{{table}}}.get({self_var}.{lift.attr}, -1)\n")
        convert = "int"
    return [cst.parse_statement(default),
            cst.parse_statement(f"if {lift.param} is not None:\n"
                                f"    {lift.local} = {convert}({lift.param})\n")]
