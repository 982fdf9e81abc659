"""Fix safety: a rewrite that may change eager results is written only when proven.

A rule's rewrite of a class is *safe* when the class before and after are the same program
once annotations and compiler-only statements are taken out (pipeline/safety.py); such a
rewrite is written even when validation cannot run. Every other rewrite is written when it is
verified, or when eager parity held for every configuration and only compiling is left
undecided; without that proof it is withheld unless ``--unsafe-fixes``.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import Project
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.safety import eager_equivalent, safe_classes
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.registry import select_rules


def code(text: str) -> str:
    return textwrap.dedent(text)


@pytest.mark.parametrize(("before", "after"), [
    ("def f(x, k=None):\n    return x\n",
     "from typing import Optional\n\ndef f(x, k: Optional[int] = None) -> int:\n    return x\n"),
    ("class A:\n    def f(self):\n        self.ids = []\n",
     "class A:\n    ids: List[int]\n\n    def f(self):\n        self.ids: List[int] = []\n"),
    ("class A:\n    def f(self):\n        return self.k\n",
     "class A:\n    __constants__ = ['k']\n    __jit_unused_properties__ = ['p']\n\n"
     "    def f(self):\n        return self.k\n"),
    ("def f(self):\n    self.rnn.flatten_parameters()\n    return 1\n",
     "def f(self):\n    if not torch.jit.is_scripting():\n        self.rnn.flatten_parameters()\n"
     "    return 1\n"),
])
def test_annotations_and_compiler_only_statements_are_eager_equivalent(before: str,
                                                                        after: str) -> None:
    assert eager_equivalent(before, after)


@pytest.mark.parametrize(("before", "after"), [
    # a tuple for a list default: the function gets another type
    ("def f(x, k=[1, 3]):\n    return x\n",
     "def f(x, k: Tuple[int, int] = (1, 3)):\n    return x\n"),
    # an added assert can raise
    ("def f(x):\n    return x + 1\n", "def f(x):\n    assert x is not None\n    return x + 1\n"),
    # a lifted argument
    ("def f(self, x):\n    if self.flag:\n        x = x * 2\n    return x\n",
     "def f(self, x, flag: Optional[bool] = None):\n    if flag is None:\n"
     "        flag = self.flag\n    if flag:\n        x = x * 2\n    return x\n"),
    # is_scripting with an else: eager runs the else branch, not the body
    ("def f(self):\n    return 1\n",
     "def f(self):\n    if not torch.jit.is_scripting():\n        return 1\n    else:\n"
     "        return 2\n"),
    # another import than typing's
    ("x = 1\n", "import math\nx = 1\n"),
])
def test_changes_to_what_runs_are_not_eager_equivalent(before: str, after: str) -> None:
    assert not eager_equivalent(before, after)


RESIDUAL = code("""\
    import torch
    from torch import nn


    class Residual(nn.Module):
        def __init__(self, chin, chout, do_res=True):
            super().__init__()
            self.do_res = do_res
            self.conv = nn.Conv1d(chin, chout, 3, padding=1)

        def forward(self, x, scale=1.0):
            x1 = self.conv(x) * scale
            if self.do_res:
                x1 = x + x1
            return x1
""")


def test_each_rules_change_of_a_class_carries_its_own_safety() -> None:
    result = rewrite_source(RESIDUAL, RewriteSettings(select_rules(["all"])), "block.py")
    safety = {c.rule: c.safe for c in result.changes}
    assert safety == {"lift-branch": False, "annotate": True}


SAFETY_BEFORE = code("""\
    import torch
    \f
    def helper(x):
        return x


    @torch.jit.interface
    class Typed(torch.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale


    class Lifted(torch.nn.Module):
        def forward(self, x):
            return x
""")


def test_a_class_whose_change_is_annotations_only_is_safe_and_a_changed_body_is_not() -> None:
    after = SAFETY_BEFORE.replace("x, scale=1.0):", "x, scale: float = 1.0):").replace(
        "        return x\n", "        return x + 0\n")
    assert "x + 0" in after and "scale: float" in after
    assert safe_classes(SAFETY_BEFORE, after, {"Typed", "Lifted"}) == {"Typed"}


def test_a_decorator_added_to_an_unchanged_method_is_not_taken_for_no_change() -> None:
    """ast places a def at its `def` line: the decorator above must still count."""
    before = "class M:\n    def f(self, x):\n        return x\n"
    after = "class M:\n    @staticmethod\n    def f(self, x):\n        return x\n"
    assert not eager_equivalent(before, after)
    assert safe_classes(before, after, {"M"}) == set()


def test_a_changed_module_level_function_makes_no_class_safe() -> None:
    after = SAFETY_BEFORE.replace("x, scale=1.0):", "x, scale: float = 1.0):").replace(
        "def helper(x):\n    return x", "def helper(x):\n    return -x")
    assert "-x" in after
    assert safe_classes(SAFETY_BEFORE, after, {"Typed"}) == set()
    # Only the annotation: the same program, with the form feed above not shifting the lines.
    assert safe_classes(SAFETY_BEFORE, after.replace("-x", "x"), {"Typed"}) == {"Typed"}


@pytest.mark.slow
def test_an_unsafe_rewrite_with_no_example_inputs_is_withheld(project: Project) -> None:
    # The constructor needs arguments and no table gives them: nothing can be run. The
    # annotation is written (it cannot change eager results); the lifted branch is not.
    project.write("block.py", RESIDUAL)
    project.pyproject()
    result = project.run("block.py", rules=["all"])
    text = project.bytes("block.py").decode()
    assert "def forward(self, x, scale: float = 1.0):" in text
    assert "if self.do_res:" in text and "do_res: Optional[bool]" not in text
    by_rule = {c.rule: c for c in result.classes()}
    assert by_rule["lift-branch"].withheld and not by_rule["lift-branch"].written
    assert by_rule["annotate"].safe and by_rule["annotate"].written
    assert result.exit_code == 0
    assert "not written" in result.summary_line()


@pytest.mark.slow
def test_unsafe_fixes_writes_the_unproven_rewrite(project: Project) -> None:
    project.write("block.py", RESIDUAL)
    project.pyproject()
    result = project.run("block.py", rules=["all"], unsafe_fixes=True)
    text = project.bytes("block.py").decode()
    assert "do_res: Optional[bool] = None" in text
    assert not any(c.withheld for c in result.classes())


def test_no_verify_writes_every_rewrite(project: Project) -> None:
    # The user asked for no proof: nothing is withheld for the lack of one.
    project.write("block.py", RESIDUAL)
    project.pyproject()
    result = project.run("block.py", rules=["all"], verify=False)
    assert "do_res: Optional[bool] = None" in project.bytes("block.py").decode()
    assert not any(c.withheld for c in result.classes())


@pytest.mark.slow
def test_a_verified_unsafe_rewrite_is_written(project: Project) -> None:
    project.write("block.py", RESIDUAL)
    project.pyproject({"block.py:Residual": {"init": [{"chin": 4, "chout": 4, "do_res": True},
                                                      {"chin": 4, "chout": 4, "do_res": False}],
                                             "inputs": ["randn(2, 4, 8)"]}})
    result = project.run("block.py", rules=["all"])
    assert {c.verdict for c in result.classes()} == {"verified"}
    assert "do_res: Optional[bool] = None" in project.bytes("block.py").decode()
