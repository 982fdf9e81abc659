"""A model's answer on the validated texts stands for the final texts when they differ only in
code the model cannot run (pipeline/models.py: carried_over), so the final model jobs are not
run again for an unsafe rewrite withheld from a class no model reaches; where it stops moves
with the code."""

from __future__ import annotations

import textwrap

import pytest
from tsfix.codemods.pipeline.models import carried_over
from tsfix.codemods.validation.protocol import Blocker, ModelResult, ModelVerdict

PATH = "/project/zoo.py"

ZOO = textwrap.dedent("""\
    import torch
    from torch import nn

    patch_functional()


    def helper(x):
        return x + 1


    def unused(x):
        return x - 1


    class Base(nn.Module):
        pass


    class Net(Base):
        def __init__(self):
            super().__init__()
            self.act = Act()

        def forward(self, x):
            y = helper(x)
            return Scale.apply(self.act(y))


    class Act(nn.Module):
        def forward(self, x):
            return x


    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x


    class Lone(nn.Module):
        def forward(self, x):
            return x


    class Built(nn.Module):
        def forward(self, x):
            return x


    DEFAULT = Built()

    TESTCASES = [(Lone, lambda: ([torch.rand(2)], {}), True)]
    """)

# The model holds a Net (its lineage: Net, Base) and its Act.
NET = ModelResult(0, reached={PATH: ("Net", "Base", "Act")}, files=(PATH,))


def _changed(name: str) -> str:
    """ZOO with the body of the top-level class or function ``name`` changed."""
    lines = ZOO.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines)
                 if line.startswith((f"class {name}(", f"def {name}(")))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("    return")
               or lines[i].strip() == "pass" or lines[i].startswith("        return"))
    indent = lines[end][: len(lines[end]) - len(lines[end].lstrip())]
    return "".join([*lines[:end], f"{indent}print('changed')\n", *lines[end:]])


def test_the_same_texts_answer_for_each_other() -> None:
    assert carried_over(NET, {PATH: ZOO}, {PATH: ZOO}, lambda _: None)
    # A file the overlay does not hold is the run's text of it.
    assert carried_over(NET, {PATH: ZOO}, {}, {PATH: ZOO}.get)


@pytest.mark.parametrize("name", ["Lone", "unused"])
def test_code_the_model_cannot_run_may_differ(name: str) -> None:
    """Lone is named only by the TESTCASES list (never called); unused by nothing."""
    assert _changed(name) != ZOO
    assert carried_over(NET, {PATH: ZOO}, {PATH: _changed(name)}, lambda _: None)


@pytest.mark.parametrize("name", [
    "Net",      # held
    "Base",     # a base of a held class
    "Act",      # held inside it
    "helper",   # called by a held class
    "Scale",    # named by a held class (Scale.apply)
    "Built",    # built when the module is imported
])
def test_code_the_model_may_run_may_not_differ(name: str) -> None:
    assert _changed(name) != ZOO
    assert not carried_over(NET, {PATH: ZOO}, {PATH: _changed(name)}, lambda _: None)


def test_a_class_named_by_a_string_a_held_class_reads_may_not_differ() -> None:
    by_name = ZOO.replace("return Scale.apply(self.act(y))",
                          "return getattr(zoo, 'Lone')()(self.act(y))")
    assert not carried_over(NET, {PATH: by_name}, {PATH: _changed("Lone").replace(
        "return Scale.apply(self.act(y))", "return getattr(zoo, 'Lone')()(self.act(y))")},
        lambda _: None)


def test_any_other_difference_runs_the_model_again() -> None:
    imports = ZOO.replace("import torch\n", "import torch\nimport inspect\n")
    assert carried_over(NET, {PATH: ZOO}, {PATH: imports}, lambda _: None)
    assert not carried_over(NET, {PATH: ZOO}, {PATH: ZOO.replace("(Lone,", "(Act,")},
                        lambda _: None)
    assert not carried_over(NET, {PATH: ZOO}, {PATH: ZOO + "\nLIMIT = 3\n"}, lambda _: None)
    assert not carried_over(NET, {PATH: ZOO}, {PATH: "def broken(:\n"}, lambda _: None)


def test_where_the_model_stops_moves_with_the_code() -> None:
    """The validated text held a rewrite of Early, above Act, two lines longer; the final one
    does not: the blocker in Act is two lines higher there, in its line and its message."""
    early = "class Early(nn.Module):\n    pass\n\n\n"
    final = ZOO.replace("class Act(nn.Module):\n", early + "class Act(nn.Module):\n")
    validated = final.replace("    pass\n\n\nclass Act",
                              "    a = 1\n    b = 2\n    c = 3\n\n\nclass Act")
    line = final.splitlines().index("class Act(nn.Module):") + 3
    assert validated.splitlines()[line + 1] == final.splitlines()[line - 1] == "        return x"
    stops = ModelVerdict("fails", "stops", blocker=Blocker(
        PATH, line + 2, "Act.forward", f'oops:\n  File "{PATH}", line {line + 2}\n'
                                       f'and {PATH}:{line + 2}, not /other.py:{line + 2}'))
    answer = ModelResult(0, stops, reached=NET.reached, files=NET.files)
    carried = carried_over(answer, {PATH: validated}, {PATH: final}, lambda _: None)
    assert carried is not None and carried.model is not None
    assert carried.model.blocker == Blocker(
        PATH, line, "Act.forward", f'oops:\n  File "{PATH}", line {line}\n'
                                   f'and {PATH}:{line}, not /other.py:{line + 2}')
