"""Configured models in a run (codemods/pipeline/models.py): verdicts that flow down from a
model to the classes it is built from, the model verdict, the fix loop, exit codes, the cache.

Each project is a small package: the model file is the one with the example table; the blocks
live in other files, as in real zoos."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import Project, no_traceback

BLOCKS = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Gate(nn.Module):
        def __init__(self, channels, use_skip=True):
            super().__init__()
            self.proj = nn.Linear(channels, channels)
            self.use_skip = use_skip

        def forward(self, x):
            y = self.proj(x)
            if self.use_skip:
                y = y + x
            return y
""")

NET = textwrap.dedent("""\
    import torch.nn as nn

    from pkg.blocks import Gate
    from pkg.stack import Stack


    class Net(nn.Module):
        def __init__(self, channels=4):
            super().__init__()
            self.first = Gate(channels, use_skip=True)
            self.second = Gate(channels, use_skip=False)
            self.stack = Stack(channels)

        def forward(self, x):
            return self.stack(self.second(self.first(x)))
""")

# A helper file the user does not name on the command line: the model stops here until the
# fix loop rewrites it (modulelist-iter).
STACK = textwrap.dedent("""\
    import torch.nn as nn


    class Stack(nn.Module):
        def __init__(self, channels, depth=3):
            super().__init__()
            self.depth = depth
            self.layers = nn.ModuleList([nn.Linear(channels, channels) for _ in range(depth)])

        def forward(self, x):
            for i in range(self.depth):
                x = self.layers[i](x)
            return x
""")

# A blocker no rule rewrites.
STACK_WITH_TRY = textwrap.dedent("""\
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


def package(project: Project, stack: str = STACK) -> None:
    project.pyproject({"pkg/net.py:Net": {"inputs": ["randn(2, 4)"]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/blocks.py", BLOCKS)
    project.write("pkg/net.py", NET)
    project.write("pkg/stack.py", stack)


@pytest.mark.slow
def test_inner_classes_are_verified_from_the_model_and_the_model_scripts(
        project: Project) -> None:
    package(project)

    result = project.run("pkg", rules=["all"], jobs=1)

    files = {f.display: f for f in result.files}
    [gate] = files["pkg/blocks.py"].classes
    assert gate.rule == "lift-branch"
    assert gate.verdict == "verified", gate.reason
    # Two instances with other lifted settings and the same shapes: one artifact serves both.
    assert gate.reason.startswith("from model pkg/net.py:Net"), gate.reason
    assert "2 of 2" in gate.reason, gate.reason
    [stack] = files["pkg/stack.py"].classes
    assert stack.verdict == "verified", stack.reason
    [model] = result.models()
    assert model.model == "pkg/net.py:Net"
    assert model.ok, model
    assert model.scripted_before is False
    assert result.exit_code == 0
    assert not any(f.fix_loop for f in result.files)
    # Where the time went: the model job validated the classes it reaches.
    assert result.phase_s.get("models", 0) > 0, result.phase_s
    assert "fix" not in result.phase_s
    [time_row] = [row for row in result.summary_table() if row.lstrip().startswith("time")]
    assert "models " in time_row, time_row
    assert any("model pkg/net.py:Net" in row for row in result.summary_table())


@pytest.mark.slow
def test_fix_loop_rewrites_the_helper_file_the_model_imports(project: Project) -> None:
    package(project)
    before = project.bytes("pkg/stack.py")

    result = project.run("pkg/net.py", "pkg/blocks.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert model.ok, model
    assert any("pkg/stack.py" in line and "Stack" in line and "modulelist-iter" in line
               for line in model.rounds), model.rounds
    [loop_file] = [f for f in result.files if f.fix_loop]
    assert loop_file.display == "pkg/stack.py"
    assert loop_file.written
    rewritten = project.bytes("pkg/stack.py").decode()
    assert rewritten != before.decode()
    assert "self.layers[i]" not in rewritten and "in self.layers" in rewritten
    [stack] = loop_file.classes
    assert stack.verdict == "verified", stack.reason
    assert result.exit_code == 0


@pytest.mark.slow
def test_fix_loop_can_be_turned_off(project: Project) -> None:
    package(project)
    before = project.bytes("pkg/stack.py")

    result = project.run("pkg/net.py", "pkg/blocks.py", rules=["all"], jobs=1, fix_rounds=0)

    [model] = result.models()
    assert not model.ok
    assert model.blocker is not None and model.blocker.startswith("pkg/stack.py:")
    assert model.scope is not None and model.scope.startswith("Stack")
    assert "modulelist-iter" in model.explain, model.explain
    assert project.bytes("pkg/stack.py") == before
    assert result.exit_code == 3


@pytest.mark.slow
def test_a_blocker_no_rule_fixes_is_reported_with_explain_and_fails_the_run(
        project: Project) -> None:
    package(project, STACK_WITH_TRY)
    snapshot = project.bytes("pkg/stack.py")

    outcome = project.cli("apply", "--rule", "all", "-j", "1", "--report", "r.json", "pkg")

    no_traceback(outcome)
    assert outcome.exit_code == 3, outcome.output
    assert "pkg/net.py:Net: model does not script" in outcome.output
    assert "pkg/stack.py:10" in outcome.output
    assert "TSF101" in outcome.output
    assert "--allow-unscriptable" in outcome.output
    assert project.bytes("pkg/stack.py") == snapshot
    report = json.loads(Path("r.json").read_text())
    [model] = report["models"]
    assert model["status"] == "fails" and model["blocker"] == "pkg/stack.py:10"
    # The inner class the rules did change is still verified from the model's run.
    [blocks] = [f for f in report["files"] if f["path"] == "pkg/blocks.py"]
    assert blocks["classes"][0]["verdict"] == "verified"

    # The rewrites are written; the model still stops at the try block, now allowed.
    allowed = project.cli("apply", "--rule", "all", "-j", "1", "--no-cache",
                          "--allow-unscriptable", "pkg")
    assert allowed.exit_code == 0, allowed.output
    assert "pkg/net.py:Net: model does not script" in allowed.output
    assert "--allow-unscriptable" not in allowed.output


@pytest.mark.slow
def test_cached_model_verdict_is_redone_when_an_imported_file_changes(
        project: Project) -> None:
    package(project, STACK_WITH_TRY)
    first = project.run("pkg/net.py", rules=["all"], jobs=1, mode="check", cache=True,
                        fix_rounds=0)
    [model] = first.models()
    assert not model.ok
    again = project.run("pkg/net.py", rules=["all"], jobs=1, mode="check", cache=True,
                        fix_rounds=0)
    assert again.cache_hits == 1
    assert [m.status for m in again.models()] == ["fails"]

    project.write("pkg/stack.py", STACK)         # the blocker is gone; net.py is unchanged
    third = project.run("pkg/net.py", rules=["all"], jobs=1, mode="check", cache=True,
                        fix_rounds=0)
    assert third.cache_hits == 0
    [model] = third.models()
    assert not model.ok and model.blocker is not None
    assert model.blocker.startswith("pkg/stack.py:")     # now the ModuleList index
    assert "modulelist-iter" in model.explain


# A module-level function of a helper file that the model's forward calls: TorchScript
# compiles it with the model, and its None defaults are Tensors there until annotated.
MASKS = textwrap.dedent("""\
    import torch


    def make_mask(lengths, max_len=None, device=None):
        if max_len is None:
            max_len = int(lengths.max())
        if device is None:
            device = lengths.device
        steps = torch.arange(max_len, device=device)
        return steps[None, :] < lengths[:, None]


    def unused(x, scale=None):
        return x
""")

MASKED_NET = textwrap.dedent("""\
    import torch.nn as nn

    from pkg.masks import make_mask


    class Net(nn.Module):
        def __init__(self, channels=4):
            super().__init__()
            self.proj = nn.Linear(channels, channels)

        def forward(self, x, lengths):
            mask = make_mask(lengths, max_len=x.size(1), device=x.device)
            return self.proj(x) * mask[:, :, None].float()
""")


@pytest.mark.slow
def test_fix_loop_annotates_a_function_of_a_helper_file(project: Project) -> None:
    project.pyproject({"pkg/net.py:Net": {"inputs": ["randn(2, 5, 4)", "arange(3, 5)"]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/masks.py", MASKS)
    project.write("pkg/net.py", MASKED_NET)

    result = project.run("pkg/net.py", rules=["all"], jobs=1)

    [model] = result.models()
    assert model.ok, (model, model.rounds)
    assert model.scripted_before is False
    assert any("pkg/masks.py" in line and "make_mask()" in line and "annotate" in line
               for line in model.rounds), model.rounds
    [loop_file] = [f for f in result.files if f.fix_loop]
    assert loop_file.display == "pkg/masks.py" and loop_file.written
    rewritten = project.bytes("pkg/masks.py").decode()
    # Typed from the model's run (an int and a torch.device), the rest of the file as it was.
    assert "max_len: Optional[int] = None" in rewritten, rewritten
    assert "device: Optional[torch.device] = None" in rewritten, rewritten
    assert "def unused(x, scale=None):" in rewritten
    [change] = loop_file.classes
    assert change.class_name == "make_mask()" and change.rule == "annotate"
    assert change.verdict == "verified", change.reason
    assert result.exit_code == 0


@pytest.mark.slow
def test_a_dry_run_of_the_fix_loop_is_not_cached_in_place_of_its_writes(
        project: Project) -> None:
    """``--diff`` first, then ``apply``: the second run must still rewrite the helper file
    (a cached model outcome would say the model scripts and write nothing)."""
    package(project)
    before = project.bytes("pkg/stack.py")
    dry = project.run("pkg/net.py", rules=["all"], jobs=1, mode="diff", cache=True)
    assert [f.display for f in dry.files if f.fix_loop] == ["pkg/stack.py"]
    assert project.bytes("pkg/stack.py") == before

    applied = project.run("pkg/net.py", rules=["all"], jobs=1, cache=True)

    assert applied.cache_hits == 0
    assert project.bytes("pkg/stack.py") != before
    [model] = applied.models()
    assert model.ok, model
    # Written now: the next run may answer from the cache, and nothing is left to write.
    again = project.run("pkg/net.py", rules=["all"], jobs=1, cache=True)
    assert again.cache_hits == 1 and [m.ok for m in again.models()] == [True]
