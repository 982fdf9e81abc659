"""The repair loop (codemods/pipeline/phases/fix_loop.py): a configured model that stops gets the
place the compiler names rewritten by the rules that answer the error, in any file of its tree,
round by round; a rewrite is kept only when the model gets further with its eager outputs
unchanged, else rolled back. The model's line says what got it there.

The projects are small packages (the model in one file, its blocks in another, as in real
zoos); the messages below were measured on torch 2.13."""

from __future__ import annotations

import json
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import libcst as cst
import pytest
from conftest import Project, no_traceback
from tsfix.codemods.pipeline.phases.fix_loop import (
    _callees,
    _moved,
    called_function,
    typed_by_message,
    typed_default,
)
from tsfix.codemods.pipeline.report import ModelRecord, repeated_models
from tsfix.codemods.rules import registry
from tsfix.codemods.rules.base import ClassChange, Code, Rule
from tsfix.codemods.validation.protocol import Blocker

# Outer's own blocker (`if self.mix:` on a submodule that may be None) is fixed by the run's
# none-module-test; the compiler then stops at the call of Inner, whose `lengths=None` it
# took for a Tensor: nothing in blocks.py tells its type, the compiler's message does.
BLOCKS = textwrap.dedent("""\
    import torch
    from torch import nn


    class Inner(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.proj = nn.Linear(channels, channels)

        def forward(self, x, lengths=None):
            y = self.proj(x)
            if lengths is None:
                return y
            return y * lengths
""")

NET = textwrap.dedent("""\
    from typing import Optional

    import torch
    from torch import nn

    from pkg.blocks import Inner


    class Outer(nn.Module):
        def __init__(self, channels=4):
            super().__init__()
            self.inner = Inner(channels)
            self.mix = None

        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            y = self.inner(x, lengths)
            if self.mix:
                y = self.mix(y)
            return y
""")
CALL_LINE = 16          # `y = self.inner(x, lengths)`
# A second model of net.py that passes Inner a Tensor: it scripts on the run's tree.
DIRECT = textwrap.dedent("""\


    class Direct(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner(4)

        def forward(self, x):
            return self.inner(x, torch.ones(1))
""")


def chained(project: Project) -> None:
    project.pyproject({"pkg/net.py:Outer": {"inputs": ["randn(2, 4)"]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/blocks.py", BLOCKS)
    project.write("pkg/net.py", NET)


@pytest.mark.slow
def test_a_fix_that_uncovers_the_next_blocker_is_followed_by_a_repair_there(
        project: Project) -> None:
    chained(project)

    outcome = project.cli("apply", "--rule", "all", "-j", "1", "--report", "r.json",
                          "pkg/net.py")

    no_traceback(outcome)
    assert outcome.exit_code == 0, outcome.output
    net, blocks = project.bytes("pkg/net.py").decode(), project.bytes("pkg/blocks.py").decode()
    assert "if self.mix is not None:" in net
    assert "def forward(self, x, lengths: Optional[torch.Tensor] = None):" in blocks
    assert blocks.startswith("from typing import Optional\n")
    report = json.loads(Path("r.json").read_text())
    [model] = report["models"]
    assert model["status"] == "scripts" and model["scripted_before"] is False
    assert model["rewrites"] == ["pkg/net.py:Outer none-module-test"]
    assert model["repairs"] == [f"pkg/net.py:{CALL_LINE} annotate (pkg/blocks.py:Inner)"]
    assert model["rounds"] == [f"round 1: stops at pkg/net.py:{CALL_LINE} (TSF207) in Inner; "
                               "rewritten by annotate; the model now scripts"]
    by_path = {f["path"]: f for f in report["files"]}
    assert by_path["pkg/blocks.py"]["fix_loop"] and by_path["pkg/blocks.py"]["written"]
    [inner] = by_path["pkg/blocks.py"]["classes"]
    assert (inner["rule"], inner["verdict"]) == ("annotate", "verified"), inner["reason"]
    # The run's own rewrite did not script alone; measured again on the tree written, it does.
    [outer] = by_path["pkg/net.py"]["classes"]
    assert (outer["rule"], outer["verdict"]) == ("none-module-test", "verified"), outer["reason"]
    # Model first: one line says what got the model there; the class lines are under -v.
    assert (f"pkg/net.py:Outer: model scripts (did not script before tsfix) after 2 rounds "
            f"(pkg/net.py:Outer none-module-test; pkg/net.py:{CALL_LINE} annotate "
            "(pkg/blocks.py:Inner)): 1 configuration(s)") in outcome.output
    assert "[none-module-test]" not in outcome.output and "[annotate]" not in outcome.output
    assert "rewrote pkg/blocks.py (the repair loop: a configured model imports it)" \
        in outcome.output

    # A second run over the output changes nothing, and needs no repair.
    again = project.cli("apply", "--rule", "all", "-j", "1", "--no-cache", "-v", "pkg/net.py")
    no_traceback(again)
    assert again.exit_code == 0, again.output
    assert project.bytes("pkg/net.py").decode() == net
    assert project.bytes("pkg/blocks.py").decode() == blocks
    assert "pkg/net.py:Outer: model scripts (scripted before tsfix): " in again.output
    assert "repair loop:" not in again.output


@pytest.mark.slow
def test_a_class_of_a_file_of_the_run_is_repaired_from_the_run_text(project: Project) -> None:
    """blocks.py is in the run too: annotate's own rewrite of Inner there (its return type,
    `lengths` left a Tensor: nothing tells its type, as a helper passes it on) is rejected;
    the loop types `lengths` from the compiler's message, on the run's text of blocks.py,
    and that rewrite, proven by the model, replaces the rejected one."""
    chained(project)
    project.write("pkg/blocks.py", BLOCKS.replace("return y * lengths",
                                                  "return scale(y, lengths)")
                  + "\n\ndef scale(y, factor):\n    return y * factor\n")

    result = project.run("pkg", rules=["all"], jobs=1)

    files = {f.display: f for f in result.files}
    blocks = files["pkg/blocks.py"]
    assert blocks.written and not blocks.fix_loop
    text = project.bytes("pkg/blocks.py").decode()
    assert "def forward(self, x, lengths: Optional[torch.Tensor] = None)" in text, text
    [inner] = blocks.classes
    assert (inner.rule, inner.verdict) == ("annotate", "verified"), inner.reason
    assert any(note.startswith("replaces the run's rewrite of Inner by annotate, rejected: ")
               for note in inner.notes), inner.notes
    [model] = result.models()
    assert model.ok, model
    assert model.repairs == [f"pkg/net.py:{CALL_LINE} annotate (pkg/blocks.py:Inner)"]
    assert result.exit_code == 0


@pytest.mark.slow
def test_a_second_model_is_judged_on_the_tree_the_first_ones_loop_left(
        project: Project) -> None:
    """Both models stop at the call of Inner; the first one's loop repairs blocks.py, and the
    second, run again on that tree, scripts without a loop of its own."""
    chained(project)
    project.pyproject({"pkg/net.py:Outer": {"inputs": ["randn(2, 4)"]},
                       "pkg/net.py:Wide": {"inputs": ["randn(2, 8)"]}})
    project.write("pkg/net.py", NET + textwrap.dedent("""\


        class Wide(Outer):
            def __init__(self):
                super().__init__(channels=8)
    """))

    result = project.run("pkg/net.py", rules=["all"], jobs=1)

    models = {m.model: m for m in result.models()}
    outer, wide = models["pkg/net.py:Outer"], models["pkg/net.py:Wide"]
    assert outer.ok and outer.repairs == [
        f"pkg/net.py:{CALL_LINE} annotate (pkg/blocks.py:Inner)"], outer
    assert wide.ok and wide.repairs == [] and wide.rounds == [], wide
    assert [f.display for f in result.files if f.fix_loop] == ["pkg/blocks.py"]
    assert result.exit_code == 0


# A helper file outside the run: `if self.mix:` on a submodule that is None (TSF116) hides
# the next error, the call of Attend without its unannotated `mask=None`, for which torch
# 2.13 names no line ("Unsupported value kind: Tensor").
HIDDEN = textwrap.dedent("""\
    import torch
    from torch import nn


    class Attend(nn.Module):
        def forward(self, x, mask=None):
            att = x * 2
            if mask is not None:
                att = att.masked_fill(mask, 0.0)
            return att


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.att = Attend()
            self.mix = None

        def forward(self, x):
            if self.mix:
                x = self.mix(x)
            return self.att(x)
""")

HIDDEN_NET = textwrap.dedent("""\
    from torch import nn

    from pkg.blocks import Block


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x)
""")


def hidden(project: Project) -> None:
    project.pyproject({"pkg/net.py:Net": {"inputs": ["randn(2, 4)"]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/blocks.py", HIDDEN)
    project.write("pkg/net.py", HIDDEN_NET)


def known_errors(monkeypatch: pytest.MonkeyPatch, unplaced: bool) -> None:
    """``tsfix explain``'s table with (or without) an entry for the message torch 2.13 gives
    no line for: then `tsfix check`'s finding of the construct places it."""
    from tsfix.codemods.lint import explain

    table = tuple(k for k in explain.KNOWN_ERRORS if "Unsupported value kind" not in k.pattern)
    if unplaced:
        table = (explain.KnownError(r"Unsupported value kind: Tensor", "TSF207"), *table)
    monkeypatch.setattr(explain, "KNOWN_ERRORS", table)


@pytest.mark.slow
def test_a_fix_after_which_the_compiler_names_no_line_is_kept(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    hidden(project)
    known_errors(monkeypatch, unplaced=False)

    result = project.run("pkg/net.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert not model.ok and model.blocker is None, model
    assert model.reason == "Unsupported value kind: Tensor", model.reason
    assert model.repairs == ["pkg/blocks.py:20 none-module-test"], model.rounds
    assert model.stopped == "no rule offers a fix (the compiler names no line of the tree)"
    # The fix is right (eager parity held, and the compiler got past it): written.
    assert "if self.mix is not None:" in project.bytes("pkg/blocks.py").decode()
    [loop_file] = [f for f in result.files if f.fix_loop]
    [change] = loop_file.classes
    assert (change.rule, change.class_name, change.verdict) == (
        "none-module-test", "Block", "unverified"), change


@pytest.mark.slow
def test_a_none_default_the_compiler_took_for_a_tensor_is_typed_optional(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Placed at Attend's `mask=None` (TSF207), the message says the compiler took it for a
    Tensor: Optional[Tensor] joins the type table, annotate types it, the model scripts."""
    hidden(project)
    known_errors(monkeypatch, unplaced=True)

    result = project.run("pkg/net.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert model.ok, (model, model.rounds)
    assert model.repairs == ["pkg/blocks.py:20 none-module-test",
                             "pkg/blocks.py:6 annotate"], model.rounds
    text = project.bytes("pkg/blocks.py").decode()
    assert "def forward(self, x, mask: Optional[torch.Tensor] = None):" in text, text


@pytest.mark.slow
def test_a_model_that_scripted_is_checked_again_when_a_later_loop_rewrites_its_files(
        project: Project) -> None:
    """Direct passes Inner a Tensor and scripts on the run's tree; Outer's loop then types
    Inner's `lengths` in blocks.py, which Direct imports too: Direct's verdict is that of
    the tree written."""
    chained(project)
    project.pyproject({"pkg/net.py:Direct": {"inputs": ["randn(2, 4)"]},
                       "pkg/net.py:Outer": {"inputs": ["randn(2, 4)"]}})
    project.write("pkg/net.py", NET + DIRECT)

    result = project.run("pkg/net.py", rules=["all"], jobs=1)

    models = {m.model: m for m in result.models()}
    direct, outer = models["pkg/net.py:Direct"], models["pkg/net.py:Outer"]
    assert outer.ok and outer.repairs, outer
    assert direct.ok and direct.scripted_before is True, direct
    assert direct.rounds == ["checked again on the files the repair loop of another model "
                             "rewrote"], direct.rounds


@pytest.mark.slow
def test_every_model_a_later_loop_made_stale_is_checked_again_with_its_own_answer(
        project: Project) -> None:
    """Two models that scripted import blocks.py, which Outer's loop then rewrites: both are
    measured again in one round of jobs (two workers), each keeping its own answer (one
    configuration against two); Alone, before them and importing neither, keeps its own."""
    chained(project)
    project.write("pkg/alone.py", textwrap.dedent("""\
        import torch
        from torch import nn


        class Alone(nn.Module):
            def forward(self, x):
                return x + 1
    """))
    project.pyproject({"pkg/alone.py:Alone": {"inputs": ["randn(2, 4)"]},
                       "pkg/net.py:Direct": {"inputs": ["randn(2, 4)"]},
                       "pkg/net.py:Doubled": {"init": [{"channels": 4}, {"channels": 6}],
                                              "inputs": ["randn(2, 4)"]},
                       "pkg/net.py:Outer": {"inputs": ["randn(2, 4)"]}})
    project.write("pkg/net.py", NET + DIRECT + textwrap.dedent("""\


        class Doubled(nn.Module):
            def __init__(self, channels):
                super().__init__()
                self.inner = Inner(4)
                self.channels = channels

            def forward(self, x):
                return self.inner(x, torch.ones(1)) * self.channels
    """))

    result = project.run("pkg/alone.py", "pkg/net.py", rules=["all"], jobs=2)

    models = {m.model: m for m in result.models()}
    assert next(iter(models)) == "pkg/alone.py:Alone", list(models)
    alone = models["pkg/alone.py:Alone"]
    assert alone.ok and alone.rounds == [], alone
    assert alone.reason.startswith("1 configuration(s): "), alone.reason
    direct, doubled = models["pkg/net.py:Direct"], models["pkg/net.py:Doubled"]
    assert models["pkg/net.py:Outer"].repairs, models["pkg/net.py:Outer"]
    for model, configurations in ((direct, 1), (doubled, 2)):
        assert model.ok, model
        assert model.rounds == ["checked again on the files the repair loop of another "
                                "model rewrote"], model.rounds
        assert model.reason.startswith(f"{configurations} configuration(s): "), model.reason


@pytest.mark.slow
def test_without_the_loop_the_model_stops_at_the_call(project: Project) -> None:
    chained(project)

    result = project.run("pkg/net.py", rules=["all"], jobs=1, mode="diff", fix_rounds=0)

    [model] = result.models()
    assert not model.ok and model.blocker == f"pkg/net.py:{CALL_LINE}"
    assert model.repairs == [] and model.rounds == []
    assert [f.display for f in result.files] == ["pkg/net.py"]


# A helper file the model imports, stopping at a try block (TSF101); the rules below answer
# TSF101 and are the only ones registered, so the outcome does not depend on the real rules.
STACK = textwrap.dedent("""\
    import torch.nn as nn


    class Stack(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.layer = nn.Linear(channels, channels)

        def forward(self, x):
            try:
                x = self.layer(x)
            except TypeError:
                x = x
            return x
""")

STACK_NET = textwrap.dedent("""\
    import torch.nn as nn

    from pkg.stack import Stack


    class Net(nn.Module):
        def __init__(self, channels=4):
            super().__init__()
            self.stack = Stack(channels)

        def forward(self, x):
            return self.stack(x)
""")


def answering(rule_name: str, statement: str) -> type[Rule]:
    """A rule that answers TSF101 by inserting ``statement`` at the start of Stack.forward."""

    class Insert(Rule):
        name = rule_name
        summary = f"insert {statement!r} into Stack.forward()"
        order = 1
        CODES = (Code("TSF101", "try-block", "try blocks", "test only"),)

        def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
            if cls.name.value != "Stack":
                return cls
            body = list(cls.body.body)
            for i, node in enumerate(body):
                if isinstance(node, cst.FunctionDef) and node.name.value == "forward":
                    added = cst.parse_statement(statement + "\n")
                    body[i] = node.with_changes(body=node.body.with_changes(
                        body=[added, *node.body.body]))
                    self.changes.append(ClassChange(self.name, "Stack", self.span_of(cls),
                                                    self.summary))
                    return cls.with_changes(body=cls.body.with_changes(body=body))
            return cls

    return Insert


@pytest.mark.slow
@pytest.mark.parametrize(("statement", "why"), [
    # Eager outputs change: the class, measured in the model, is rejected; never kept.
    ("x = x * 3.0", "the rewrite by breaking is rejected (Stack: eager parity: "),
    # Harmless, but the model stops at the same try block (one line further down).
    ("x = x * 1.0", "the rewrite by breaking leaves the model stopping there; rolled back"),
])
def test_a_rewrite_that_gets_the_model_nowhere_is_rolled_back(
        project: Project, monkeypatch: pytest.MonkeyPatch, statement: str, why: str) -> None:
    monkeypatch.setattr(registry, "ALL_RULES", {"breaking": answering("breaking", statement)})
    project.pyproject({"pkg/net.py:Net": {"inputs": ["randn(2, 4)"]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/stack.py", STACK)
    project.write("pkg/net.py", STACK_NET)
    before = project.snapshot()

    result = project.run("pkg/net.py", rules=["breaking"], jobs=1)

    [model] = result.models()
    assert not model.ok and model.blocker == "pkg/stack.py:10", model
    [line] = model.rounds
    assert line.startswith("round 1: stops at pkg/stack.py:10 in Stack; "), line
    assert why in line, line
    assert model.repairs == [] and model.stopped.startswith("the rewrite by breaking ")
    assert project.snapshot() == before
    assert not any(f.fix_loop for f in result.files)


# The issue's reproduction: `if self.mix:` (line 21) hides "B is not defined in the false
# branch" (line 22: a name bound under one `if self.freq:` and read under a later one).
# none-module-test and constant-flag fix both in the run; the model, with both
# configurations, scripts end to end.
ENC = textwrap.dedent("""\
    import torch
    from torch import nn

    class Mixer(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.proj = nn.Conv1d(channels, channels, 1)
        def forward(self, x):
            return x + self.proj(x)

    class EncLayer(nn.Module):
        def __init__(self, chin=4, chout=4, freq=True, mix=True):
            super().__init__()
            self.freq = freq
            self.conv = nn.Conv1d(chin, chout, 3, padding=1) if not freq else nn.Conv2d(chin, chout, 3, padding=1)
            self.mix = None
            if mix:
                self.mix = Mixer(chout)
        def forward(self, x):
            y = self.conv(x)
            if self.mix:
                if self.freq:
                    B, C, Fr, T = y.shape
                    y = y.permute(0, 2, 1, 3).reshape(-1, C, T)
                y = self.mix(y)
                if self.freq:
                    y = y.view(B, Fr, C, T).permute(0, 2, 1, 3)
            return torch.relu(y)
""")  # noqa: E501


@pytest.mark.slow
def test_the_issue_reproduction_scripts_with_parity_for_both_configurations(
        project: Project) -> None:
    project.pyproject({"enc.py:EncLayer": {"init": [{"freq": True}, {"freq": True, "mix": False}],
                                           "inputs": ["randn(2, 4, 6, 8)"]}})
    project.write("enc.py", ENC)

    outcome = project.cli("apply", "--rule", "all", "-j", "1", "--report", "r.json", ".")

    no_traceback(outcome)
    assert outcome.exit_code == 0, outcome.output
    [model] = json.loads(Path("r.json").read_text())["models"]
    assert model["status"] == "scripts" and model["scripted_before"] is False, model
    assert model["reason"].startswith("2 configuration(s): eager parity, script, parity with "
                                      "the original, save/load"), model["reason"]
    # Model first: the model's line, and no line per class (they are under -v).
    assert ("enc.py:EncLayer: model scripts (did not script before tsfix) after 1 round "
            "(enc.py:EncLayer none-module-test+constant-flag): 2 configuration(s)"
            ) in outcome.output
    assert "EncLayer [" not in outcome.output
    text = project.bytes("enc.py").decode()
    assert "if self.mix is not None:" in text and '__constants__ = ["freq"]' in text
    again = project.run(rules=["all"], jobs=1, cache=False)
    assert [f.status for f in again.files] == ["unchanged"]
    assert [m.ok for m in again.models()] == [True]


# ---- pieces, without torch -----------------------------------------------------------------

# torch 2.13's message when Outer passes its Optional[Tensor] to Inner's unannotated
# parameter (the class's qualified name as a model job's import gives it).
PASSED_OPTIONAL = textwrap.dedent("""\

    forward(__torch__.pkg.blocks.___tsfix_7.Inner self, Tensor x, Tensor lengths=[ Tensor (undefined) ]) -> Tensor:
    Expected a value of type 'Tensor (inferred)' for argument 'lengths' but instead found type 'Optional[Tensor]'.
    Inferred 'lengths' to be of type 'Tensor' because it was not annotated with an explicit type.
    :
      File "/p/pkg/net.py", line 16
        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            y = self.inner(x, lengths)
                ~~~~~~~~~~ <--- HERE
""")  # noqa: E501


def test_the_type_a_caller_passes_is_read_from_the_message() -> None:
    typed = typed_by_message(PASSED_OPTIONAL, {"/p/pkg/net.py": ("Outer",),
                                               "/p/pkg/blocks.py": ("Inner",)})
    assert typed is not None
    assert (typed.path, typed.class_name, typed.method, typed.param, typed.kind) == (
        "/p/pkg/blocks.py", "Inner", "forward", "lengths", "Optional[Tensor]")
    # Which file holds Inner is not known for certain: no type.
    assert typed_by_message(PASSED_OPTIONAL, {"/p/a.py": ("Inner",), "/p/b.py": ("Inner",)}) \
        is None
    # A parameter the user annotated is not the compiler's guess.
    annotated = PASSED_OPTIONAL.replace("'Tensor (inferred)'", "'Tensor'")
    assert typed_by_message(annotated, {"/p/pkg/blocks.py": ("Inner",)}) is None


TRY = ("try blocks aren't supported:\n  File \"/p/stack.py\", line {line}\n{context}"
       "        try:\n        ~~~~ <--- HERE\n")


def test_an_unannotated_none_default_on_the_blocker_line_is_typed_optional_tensor() -> None:
    text = HIDDEN
    unplaced = Blocker("/p/blocks.py", 6, "Attend.forward", "Unsupported value kind: Tensor")
    typed = typed_default(text, unplaced, "/p/blocks.py", "Attend")
    assert typed is not None
    assert (typed.class_name, typed.method, typed.param, typed.kind) == (
        "Attend", "forward", "mask", "Optional[Tensor]")
    # Another message, another line, another class: no type.
    assert typed_default(text, replace(unplaced, message="try blocks aren't supported"),
                         "/p/blocks.py", "Attend") is None
    assert typed_default(text, replace(unplaced, line=7), "/p/blocks.py", "Attend") is None
    assert typed_default(text, unplaced, "/p/blocks.py", "Block") is None


def test_a_blocker_moves_to_another_place_or_error_not_down_the_same_construct() -> None:
    def blocker(line: int, context: str = "", path: str = "/p/stack.py") -> Blocker:
        return Blocker(path, line, "Stack.forward", TRY.format(line=line, context=context))

    before = blocker(10, "    def forward(self, x):\n")
    # The same try block one line down, with another line shown above it: not a move.
    assert not _moved(before, blocker(11, "        x = x * 1.0\n"), "torchscript")
    assert not _moved(before, blocker(10), "torchscript")
    assert _moved(before, blocker(10, path="/p/other.py"), "torchscript")
    # The same line, another error class.
    numpy = Blocker("/p/stack.py", 10, "Stack.forward", "cannot create weak reference to "
                    "'numpy.ufunc' object")
    assert _moved(before, numpy, "torchscript")
    # Another line, another construct marked.
    other = Blocker("/p/stack.py", 14, "Stack.forward", TRY.format(line=14, context="").replace(
        "        try:\n", "        try:  # second\n"))
    assert _moved(before, other, "torchscript")
    # No line from the compiler: placed at a finding; another finding is another place.
    unplaced = Blocker("/p/blocks.py", 6, "Attend.forward", "Unsupported value kind: Tensor")
    assert _moved(unplaced, replace(unplaced, line=9), "torchscript")
    assert not _moved(unplaced, unplaced, "torchscript")


def test_the_model_line_names_each_round_and_why_the_loop_stopped() -> None:
    scripts = ModelRecord("enc.py:EncLayer", "scripts", "2 configuration(s): eager parity",
                          scripted_before=False, rewrites=["enc.py:EncLayer none-module-test"],
                          repairs=["enc.py:22 constant-flag"])
    assert scripts.line() == (
        "enc.py:EncLayer: model scripts (did not script before tsfix) after 2 rounds "
        "(enc.py:EncLayer none-module-test; enc.py:22 constant-flag): 2 configuration(s): "
        "eager parity")
    stops = ModelRecord("enc.py:EncLayer", "fails", "B is not defined in the false branch",
                        False, "enc.py:22", "EncLayer.forward",
                        rewrites=["enc.py:EncLayer none-module-test"],
                        stopped="no rule offers a fix (an error tsfix does not know; every "
                                "selected rule leaves EncLayer as it is)")
    assert stops.line() == (
        "enc.py:EncLayer: model does not script (did not script before tsfix) after 1 round "
        "(enc.py:EncLayer none-module-test) at enc.py:22 (EncLayer.forward): B is not defined "
        "in the false branch; no rule offers a fix (an error tsfix does not know; every "
        "selected rule leaves EncLayer as it is)")
    assert ModelRecord.from_json(json.loads(json.dumps(scripts.to_json()))) == scripts
    # Models alike but for their rounds are said once (without -v).
    alike = [ModelRecord(f"m.py:Net{k}", "scripts", "1 configuration(s): eager parity",
                         scripted_before=False, rewrites=[f"m.py:Net{k} annotate"])
             for k in range(3)]
    assert alike[0].line() == ("m.py:Net0: model scripts (did not script before tsfix) after "
                               "1 round (m.py:Net0 annotate): 1 configuration(s): eager parity")
    [group] = repeated_models(alike)
    assert group.classes == ("m.py:Net0", "m.py:Net1", "m.py:Net2")


def test_no_round_starts_that_cannot_finish_before_the_time_budget() -> None:
    """--timeout-total: a round takes up to a model job's timeout; past the deadline less
    that, the loop stops and says so (no worker started, no file read)."""
    from tsfix.codemods.pipeline.config import Config, ExampleSpec
    from tsfix.codemods.pipeline.models import Configured
    from tsfix.codemods.pipeline.phases.fix_loop import LoopTree, run_fix_loop
    from tsfix.codemods.pipeline.phases.records import File
    from tsfix.codemods.pipeline.phases.session import Session
    from tsfix.codemods.pipeline.phases.state import RunState
    from tsfix.codemods.validation.protocol import ModelResult, ModelVerdict

    session = Session(["all"], Config(), require_verified=False, unsafe_fixes=False,
                      timeout=60.0, deadline=time.monotonic() + 30.0)
    model = Configured(File(0, Path("net.py"), Path("/p/net.py"), "net.py"), "Net",
                       ExampleSpec("net.py:Net"))
    stops = ModelResult(0, ModelVerdict("fails", "try blocks aren't supported", False,
                                        Blocker("/p/stack.py", 10, "Stack.forward",
                                                "try blocks aren't supported")))
    rounds: list[str] = []
    state = RunState([], session, None, None)  # type: ignore[arg-type]
    outcome = run_fix_loop(LoopTree(state, {}), model, stops, rounds)
    assert outcome.stopped == "the run's time budget is spent"
    assert rounds == ["round 1: not tried: the run's time budget is spent"]
    assert outcome.result is stops and outcome.repairs == []


def test_no_round_starts_past_the_models_repair_budget() -> None:
    """--model-budget: the loop of one model starts no round that cannot finish within it
    (a round takes up to a model job's timeout), and says so."""
    from tsfix.codemods.pipeline.config import Config, ExampleSpec
    from tsfix.codemods.pipeline.models import Configured
    from tsfix.codemods.pipeline.phases.fix_loop import LoopTree, run_fix_loop
    from tsfix.codemods.pipeline.phases.records import File
    from tsfix.codemods.pipeline.phases.session import Session
    from tsfix.codemods.pipeline.phases.state import RunState
    from tsfix.codemods.validation.protocol import ModelResult, ModelVerdict

    session = Session(["all"], Config(), require_verified=False, unsafe_fixes=False,
                      timeout=60.0, model_budget=45.0)
    model = Configured(File(0, Path("net.py"), Path("/p/net.py"), "net.py"), "Net",
                       ExampleSpec("net.py:Net"))
    stops = ModelResult(0, ModelVerdict("fails", "try blocks aren't supported", False,
                                        Blocker("/p/stack.py", 10, "Stack.forward",
                                                "try blocks aren't supported")))
    rounds: list[str] = []
    state = RunState([], session, None, None)  # type: ignore[arg-type]
    outcome = run_fix_loop(LoopTree(state, {}), model, stops, rounds)
    assert outcome.stopped == "the model's repair budget (45 s, --model-budget) is spent"
    assert rounds == [f"round 1: not tried: {outcome.stopped}"]
    assert outcome.result is stops and outcome.repairs == []


# speechbrain's LSTM wrapper (speechbrain/nnet/RNN.py), reduced: the packing goes through
# functions of the file, so nothing static says `x` becomes a PackedSequence; the compiler's
# messages do, round by round.
SB_RNN = textwrap.dedent("""\
    from typing import Optional, Tuple

    import torch
    import torch.nn as nn


    def pack_padded_sequence(inputs, lengths):
        lengths = (lengths * inputs.size(1)).cpu()
        return torch.nn.utils.rnn.pack_padded_sequence(
            inputs, lengths, batch_first=True, enforce_sorted=False
        )


    def pad_packed_sequence(inputs):
        outputs, lengths = torch.nn.utils.rnn.pad_packed_sequence(inputs, batch_first=True)
        return outputs


    class LSTM(nn.Module):
        def __init__(self, hidden_size=5, input_size=4):
            super().__init__()
            self.rnn = nn.LSTM(input_size, hidden_size, batch_first=True)

        def forward(self, x, hx: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                    lengths: Optional[torch.Tensor] = None):
            if lengths is not None:
                x = pack_padded_sequence(x, lengths)
            if hx is not None:
                output, hn = self.rnn(x, hx=hx)
            else:
                output, hn = self.rnn(x)
            if lengths is not None:
                output = pad_packed_sequence(output)
            return output, hn
""")


@pytest.mark.slow
def test_a_local_rebound_to_a_packed_sequence_and_its_unpacking_function_are_repaired(
        project: Project) -> None:
    """Round 1: "Variable 'x' previously had type Tensor (inferred) but is now being assigned
    to a value of type ...PackedSequence" (TSF119): rebound-local splits the two `lengths`
    tests. Round 2: the unpacking function's unannotated `inputs` is passed to torch's
    pad_packed_sequence, which takes a PackedSequence: annotate types it from the message."""
    project.pyproject({"pkg/rnn.py:LSTM": {"calls": [
        {"inputs": ["randn(2, 6, 4)"]},
        {"inputs": ["randn(2, 6, 4)"], "kwargs": {"lengths": "ones(2)"}}]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/rnn.py", SB_RNN)

    result = project.run("pkg/rnn.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert model.ok, (model, model.rounds)
    assert model.repairs == ["pkg/rnn.py:27 rebound-local", "pkg/rnn.py:15 annotate"], \
        model.rounds
    text = project.bytes("pkg/rnn.py").decode()
    assert "def pad_packed_sequence(inputs: torch.nn.utils.rnn.PackedSequence):" in text
    assert textwrap.dedent("""\
            if lengths is not None:
                x_packed = pack_padded_sequence(x, lengths)
                if hx is not None:
                    output, hn = self.rnn(x_packed, hx=hx)
                else:
                    output, hn = self.rnn(x_packed)
                output = pad_packed_sequence(output)
            else:
                if hx is not None:
                    output, hn = self.rnn(x, hx=hx)
                else:
                    output, hn = self.rnn(x)
    """) in textwrap.dedent(text.split("def forward", 1)[1].split("\n", 2)[2]), text


SPEC = '''\
import torch


def frames(x, size=4):
    *other, length = x.shape
    x = x.reshape(-1, length)
    z = x.unfold(-1, size, size)
    return z.reshape(*other, -1, size)
'''

FRAMED = '''\
import torch
from torch import nn

from pkg.spec import frames


class Net(nn.Module):
    def __init__(self, size=4):
        super().__init__()
        self.size = size
        self.proj = nn.Linear(size, size)

    def forward(self, x):
        return self.proj(frames(x, self.size))
'''


@pytest.mark.slow
def test_rounds_on_one_function_keep_each_others_rewrites(project: Project) -> None:
    """demucs' spectro(): starred-args gets the model past the starred unpacking, then
    annotate past the untyped `size=4`; the second round rewrites the function from its base
    with both rules (with annotate alone it undid the first round, and the two rounds
    alternated until the round budget was spent)."""
    project.write("pkg/__init__.py", "")
    project.write("pkg/spec.py", SPEC)
    project.write("pkg/net.py", FRAMED)
    project.pyproject({"pkg/net.py:Net": {"init": [{"size": 4}], "inputs": ["randn(2, 3, 16)"]}})

    result = project.run("pkg/net.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert model.ok, (model.reason, model.rounds)
    assert model.repairs == ["pkg/spec.py:5 starred-args", "pkg/spec.py:8 starred-args+annotate"]
    spec = project.bytes("pkg/spec.py").decode()
    assert "other, length = list(x.shape[:-1]), x.shape[-1]" in spec, spec
    assert "def frames(x, size: int = 4)" in spec, spec


@pytest.mark.slow
def test_a_run_stopped_at_any_moment_of_the_repair_loop_leaves_files_old_or_new(
        project: Project) -> None:
    """The chained package takes a repair round after the run's own rewrite; a run stopped at
    any moment (the time limit stops it as Ctrl-C does) leaves every file as it was or as
    the whole run writes it, never a round's half."""
    from tsfix.codemods.pipeline.report import Interrupted

    chained(project)
    paths = ("pkg/net.py", "pkg/blocks.py")
    originals = {p: project.bytes(p) for p in paths}
    started = time.monotonic()
    whole = project.run("pkg/net.py", rules=["all"], jobs=1, cache=False)
    took = time.monotonic() - started
    [model] = whole.models()
    assert model.ok and model.repairs, model
    written = {p: project.bytes(p) for p in paths}
    assert all(written[p] != originals[p] for p in paths)
    stopped = 0
    # Stops spread over the run: validation, the model's verdict, the loop's rounds, the writes.
    for seconds in (took * k / 8 for k in range(1, 8)):
        for p in paths:
            project.write(p, originals[p].decode())
        try:
            project.run("pkg/net.py", rules=["all"], jobs=1, cache=False,
                        timeout_total=seconds)
        except Interrupted:
            stopped += 1
        for p in paths:
            assert project.bytes(p) in (originals[p], written[p]), (seconds, p)
    assert stopped, "no run was stopped: the limits are too long for this machine"


# What TorchScript says (torch 2.13) when RelPosEmb.forward calls relative_logits_1d(), whose
# rearrange() it cannot compile: the first place is einops' signature; TorchScript names the
# outermost function of the file it was compiling, then the call of it.
EINOPS_OUTSIDE = """\
Compiled functions can't take variable number of arguments or use keyword-only arguments with \
defaults:
  File "/venv/lib/python3.11/site-packages/einops/einops.py", line 561
def rearrange(tensor: Union[Tensor, List[Tensor]], pattern: str, **axes_lengths: Size) -> Tensor:
                                                                  ~~~~~~~~~~~~~ <--- HERE
'relative_logits_1d' is being compiled since it was called from 'RelPosEmb.forward'
  File "/p/halo.py", line 30
        rel_logits_w = relative_logits_1d(q, self.rel_width)
                       ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~ <--- HERE
"""
HALO_TEXT = textwrap.dedent("""\
    import torch
    from einops import rearrange


    def to(x):
        return {'device': x.device, 'dtype': x.dtype}


    def rel_to_abs(x):
        return rearrange(x, 'b l c -> b (l c)')


    def relative_logits_1d(q, rel_k):
        return rel_to_abs(rearrange(q, 'b x y r -> (b x) y r'))


    def unrelated(x):
        return x
""")


def test_the_function_compiled_when_the_error_is_outside_the_tree_is_the_site() -> None:
    at_call = Blocker("/p/halo.py", 30, "RelPosEmb.forward", EINOPS_OUTSIDE)
    assert called_function(at_call, HALO_TEXT) == "relative_logits_1d"
    # Its callees too: TorchScript named the outermost function; the call may be in any.
    assert _callees(HALO_TEXT, "relative_logits_1d") == {"rel_to_abs"}
    assert _callees(HALO_TEXT, "unrelated") == frozenset()
    # The error's own place in the tree: that place is the site, not the function named.
    inside = EINOPS_OUTSIDE.replace("/venv/lib/python3.11/site-packages/einops/einops.py",
                                    "/p/halo.py").replace("line 561", "line 30")
    assert called_function(replace(at_call, message=inside), HALO_TEXT) is None
    # A function the file does not define (another file's) is not this file's site.
    assert called_function(at_call, HALO_TEXT.replace("def relative_logits_1d",
                                                      "def other")) is None
    # The blocker already in the function named: its line is the site.
    assert called_function(replace(at_call, scope="relative_logits_1d"), HALO_TEXT) is None


HALO_PKG = textwrap.dedent("""\
    import torch
    from torch import nn
    from einops import rearrange


    def to(x):
        return {'device': x.device, 'dtype': x.dtype}


    def expand_dim(t, dim, k):
        t = t.unsqueeze(dim=dim)
        expand_shape = [-1] * len(t.shape)
        expand_shape[dim] = k
        return t.expand(*expand_shape)


    def rel_to_abs(x):
        b, l, m = x.shape
        col_pad = torch.zeros((b, l, 1), **to(x))
        x = torch.cat((x, col_pad), dim=2)
        return rearrange(x, 'b l c -> b (l c)')


    def relative_logits_1d(q, rel_k):
        logits = torch.einsum('bxyd,rd->bxyr', q, rel_k)
        logits = rearrange(logits, 'b x y r -> (b x) y r')
        logits = rel_to_abs(logits)
        return expand_dim(logits, dim=1, k=2)


    class RelPosEmb(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            self.rel = nn.Parameter(torch.randn(3, dim))

        def forward(self, q):
            return relative_logits_1d(q, self.rel)
""")


@pytest.mark.slow
def test_functions_the_model_calls_are_repaired_where_the_compiler_names_them(
        project: Project) -> None:
    """halonet-pytorch: the einops calls, the `**to(x)` and the starred expand of module-level
    functions RelPosEmb calls; each round rewrites the function TorchScript names (or the one
    holding the line it points at) and the model scripts, with its eager outputs unchanged."""
    project.write("pkg/__init__.py", "")
    project.write("pkg/halo.py", HALO_PKG)
    project.pyproject({"pkg/halo.py:RelPosEmb": {"inputs": ["randn(2, 3, 5, 4)"]}})

    result = project.run("pkg/halo.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert model.ok, (model.reason, model.rounds)
    text = project.bytes("pkg/halo.py").decode()
    assert "col_pad = torch.zeros((b, l, 1), device=x.device, dtype=x.dtype)" in text, text
    assert "return t.expand(expand_shape)" in text, text
    assert "rearrange(" not in text.split("def relative_logits_1d")[1], text
    assert model.rounds[0].startswith("round 1: stops at pkg/halo.py:37 (TSF236) in "
                                      "relative_logits_1d(), called there; rewritten by "
                                      "einops-to-torch"), model.rounds
    assert model.repairs == ["pkg/halo.py:37 einops-to-torch (pkg/halo.py:relative_logits_1d())",
                             "pkg/halo.py:19 einops-to-torch+variable-arguments",
                             "pkg/halo.py:14 starred-args"], model.rounds


PAIRS = textwrap.dedent("""\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self, depth=2, no_ff=True):
            super().__init__()
            self.layers = nn.ModuleList([])
            for _ in range(depth):
                self.layers.append(nn.ModuleList([nn.Linear(4, 4),
                                                  None if no_ff else nn.Linear(4, 4)]))

        def forward(self, x):
            for attn, ff in self.layers:
                x = attn(x) + x
                if ff is not None:
                    x = ff(x) + x
            return x
""")


@pytest.mark.slow
def test_an_error_tsfix_does_not_know_takes_the_code_of_the_construct_on_its_line(
        project: Project) -> None:
    """rela-transformer: "module cannot be used as a tuple" is no message tsfix knows; the
    round named it "an error tsfix does not know" while the explain line, reading the
    construct on that line, said TSF216 (a module list's elements unpacked)."""
    project.write("pkg/__init__.py", "")
    project.write("pkg/pairs.py", PAIRS)
    project.pyproject({"pkg/pairs.py:Net": {"inputs": ["randn(2, 4)"]}})

    result = project.run("pkg/pairs.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert not model.ok
    assert model.rounds[0].startswith("round 1: stops at pkg/pairs.py:14 (TSF216) in Net"), \
        model.rounds
    assert "TSF216" in model.stopped and "does not know" not in model.stopped, model.stopped
