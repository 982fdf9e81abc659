"""A rewrite that makes a configured model fail where the original builds and runs is rejected
(codemods/validation/model.py :class:`NewFailure`), and the run leaves it out
(codemods/pipeline/phases/recheck.py ``recheck_not_checked``).

The breaking rewrite is the one measured on speechbrain's LiGRU under ``--target export``: a
torch.cond whose two sides return tensors of different shapes raises in eager mode too, and a
model that runs its layers in its constructor (speechbrain's ``Sequential`` sizes each layer
that way) then no longer builds. The model jobs here are built directly, with hand-written
overlays; the last test runs the whole pipeline on a package whose rewrites the rules make.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Project
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    NOT_CHECKED,
    Example,
    ExampleCall,
    JobClass,
    ModelClass,
    ModelJob,
    ModelResult,
    ValidationJob,
)

TIMEOUT = 120.0

# The model sizes its head by running its blocks once in the constructor on a ``dry`` input
# (a 4-D one reaches the rewrite's breaking side); ``call`` is how forward calls its block
# (``.forward`` directly is a call the recording hooks do not see).
NET = """\
    import torch
    import torch.nn as nn

    from pkg.layer import Layer, Plain
    from pkg.outer import Outer


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.outer = Outer(Layer())
            self.plain = Plain()
            # sized from a dry run, as speechbrain's Sequential does
            width = self.outer(torch.zeros({dry})).shape[-1]
            self.head = nn.Linear(width, 3)

        def forward(self, x):
            return self.head(self.plain(self.outer{call}(x)))
"""

# A block around the layer: on the failing traceback, in code no rewrite changes.
OUTER = """\
    import torch.nn as nn


    class Outer(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.scale = 2.0

        def forward(self, x):
            return self.inner(x) * self.scale
"""
OUTER_REWRITTEN = OUTER.replace("self.inner(x) * self.scale", "self.scale * self.inner(x)")

LAYER = """\
    import torch
    import torch.nn as nn


    class Layer(nn.Module):
        def __init__(self, reshape=True):
            super().__init__()
            self.reshape = reshape

        def forward(self, x):
            if self.reshape:
                if x.ndim == 4:
                    x = x.reshape(x.shape[0], x.shape[1], x.shape[2] * x.shape[3])
            return x * 2


    class Plain(nn.Module):
        def forward(self, x):
            return x + 1
"""

# The benchmark's LiGRU rewrite in small: the true side reshapes, the false side does not.
LAYER_REWRITTEN = """\
    from typing import Optional

    import torch
    import torch.nn as nn


    class Layer(nn.Module):
        def __init__(self, reshape=True):
            super().__init__()
            self.reshape = reshape

        def forward(self, x, reshape: Optional[torch.Tensor] = None):
            if reshape is None:
                reshape = torch.tensor(self.reshape)

            def reshape_true(x):
                if x.ndim == 4:
                    x = x.reshape(x.shape[0], x.shape[1], x.shape[2] * x.shape[3])
                return x.clone()

            def reshape_false(x):
                return x.clone()

            x = torch.cond(reshape, reshape_true, reshape_false, (x,))
            return x * 2


    class Plain(nn.Module):
        def forward(self, x):
            return (x + 1).clone()
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(1) as shared:
        yield shared


def randn(*shape: int) -> dict[str, object]:
    return {"__tensor__": {"fn": "randn", "shape": list(shape), "dtype": None}}


def line_of(text: str, fragment: str) -> int:
    [line] = [n for n, content in enumerate(textwrap.dedent(text).splitlines(), 1)
              if fragment in content]
    return line


def net_job(root: Path, *, dry: str = "1, 2, 2, 2", call: str = "") -> ModelJob:
    """The model job for ``Net`` with every file rewritten (Layer and Plain in layer.py, Outer
    in outer.py) and every rewritten class listed."""
    files = {"net.py": NET.format(dry=dry, call=call), "outer.py": OUTER, "layer.py": LAYER,
             "__init__.py": ""}
    for name, text in files.items():
        (root / "pkg").mkdir(parents=True, exist_ok=True)
        (root / "pkg" / name).write_text(textwrap.dedent(text))
    layer = str((root / "pkg" / "layer.py").resolve())
    outer = str((root / "pkg" / "outer.py").resolve())
    overlay = {layer: textwrap.dedent(LAYER_REWRITTEN), outer: textwrap.dedent(OUTER_REWRITTEN)}
    classes = (ModelClass(layer, "Layer", ("lift-branch",), {"reshape": "reshape"}),
               ModelClass(layer, "Plain"), ModelClass(outer, "Outer"))
    example = Example("pkg/net.py:Net", ({},), (ExampleCall((randn(2, 3, 2, 2),)),))
    return ModelJob(0, str((root / "pkg" / "net.py").resolve()), "Net", example, "validate",
                    overlay, classes, (), str(root.resolve()), "export")


def run_one(pool: WorkerPool, job: ModelJob) -> ModelResult:
    return pool.models([job], timeout=TIMEOUT)[job.id]


def verdicts(result: ModelResult) -> dict[str, tuple[str, str]]:
    return {c.verdict.name: (c.verdict.verdict, c.verdict.reason) for c in result.classes}


@pytest.mark.slow
def test_a_rewrite_that_stops_the_model_building_is_rejected_where_the_traceback_runs_it(
        pool: WorkerPool, tmp_path: Path) -> None:
    result = run_one(pool, net_job(tmp_path))

    assert result.failure is None, result.failure
    cond_line = line_of(LAYER_REWRITTEN, "x = torch.cond(")
    found = verdicts(result)
    verdict, reason = found["Layer"]
    assert verdict == "rejected", reason
    assert reason.startswith(
        f"build from model pkg/net.py:Net: the rewritten model does not build for init[0] "
        f"at layer.py:{cond_line} (Layer.forward): TorchRuntimeError: "), reason
    # Outer is on the traceback too, at a line whose function its rewrite changed: the error
    # may come from what it passed on.
    verdict, reason = found["Outer"]
    assert verdict == "rejected" and "at outer.py:" in reason and "(Outer.forward)" in reason
    # Plain's rewrite is nowhere on the traceback: the model could not check it.
    verdict, reason = found["Plain"]
    assert verdict == "unverified" and reason.startswith(NOT_CHECKED), reason
    assert result.model is not None and result.model.status == "fails"
    assert result.model.reason.startswith(
        f"build: the rewritten model does not build for init[0] at layer.py:{cond_line} "
        "(Layer.forward): TorchRuntimeError"), result.model.reason

    # Outer's rewrite left as it was: on the traceback in unchanged code, it is not blamed.
    job = net_job(tmp_path)
    outer = str((tmp_path / "pkg" / "outer.py").resolve())
    unchanged = {**job.overlay, outer: textwrap.dedent(OUTER)}
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, job.mode, unchanged,
                                    job.classes, job.sys_path, job.root, job.target))
    found = verdicts(result)
    assert found["Layer"][0] == "rejected", found["Layer"]
    assert found["Outer"][0] == "unverified" and found["Outer"][1].startswith(NOT_CHECKED)


@pytest.mark.slow
def test_a_rewrite_the_model_run_shows_raising_is_rejected_though_its_calls_were_not_seen(
        pool: WorkerPool, tmp_path: Path) -> None:
    # The dry run is 3-D (the cond's sides agree: the model builds); forward calls
    # outer.forward() directly, so Outer's calls are never recorded and only the model's own
    # run shows its rewritten code on the path of the error.
    result = run_one(pool, net_job(tmp_path, dry="1, 2, 4", call=".forward"))

    assert result.failure is None, result.failure
    found = verdicts(result)
    verdict, reason = found["Outer"]
    assert verdict == "rejected", reason
    assert reason.startswith(
        f"eager from model pkg/net.py:Net: the rewritten model raised for init[0] at "
        f"outer.py:{line_of(OUTER_REWRITTEN, 'return self.scale')} (Outer.forward): "), reason
    # Layer's own instance was called through __call__: its eager parity rejects it first.
    verdict, reason = found["Layer"]
    assert verdict == "rejected" and reason.startswith("eager parity: the rewritten outer.inner")
    assert found["Plain"][0] == "verified", found["Plain"]
    assert result.model is not None and result.model.status == "fails"
    assert result.model.reason.startswith(
        f"eager parity: the rewritten model raised for init[0] at "
        f"layer.py:{line_of(LAYER_REWRITTEN, 'x = torch.cond(')} (Layer.forward): "
    ), result.model.reason


@pytest.mark.slow
def test_a_class_job_rejects_a_rewrite_whose_constructor_raises(
        pool: WorkerPool, tmp_path: Path) -> None:
    # The per-class job: a class that runs itself in its constructor, rewritten to raise.
    setting = "        self.reshape = reshape\n"
    dry_run = setting + "        self.width = self(torch.zeros(1, 2, 2, 2)).shape[-1]\n"
    source = textwrap.dedent(LAYER).replace(setting, dry_run)
    rewritten = textwrap.dedent(LAYER_REWRITTEN).replace(setting, dry_run)
    assert source.count("self.width") == rewritten.count("self.width") == 1
    path = tmp_path / "layer.py"
    path.write_text(source)
    example = Example("layer.py:Layer", ({},), (ExampleCall((randn(2, 3, 2, 2),)),))
    job = ValidationJob(3, str(path.resolve()), rewritten,
                        (JobClass("Layer", example, ("lift-branch",), {"reshape": "reshape"}),),
                        target="export")
    [found] = pool.validate([job], timeout=TIMEOUT)[job.id]
    assert found.verdict == "rejected", found.reason
    assert found.reason.startswith("build: the rewritten class fails for init[0]: "
                                   "TorchRuntimeError"), found.reason


# ---- the run: a class the model could not check is checked again once the first is out -------

PIPE_NET = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    from pkg.back import Back
    from pkg.front import Front


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.front = Front()
            self.back = Back()
            # sized from a dry run, as speechbrain's Sequential does
            width = self.back(self.front(torch.zeros(1, 4))).shape[-1]
            self.head = nn.Linear(width, 2)

        def forward(self, x):
            return self.head(self.back(self.front(x)))
""")

# lift-branch makes each a torch.cond whose sides return tensors of other ranks: both raise
# eagerly (sides of one rank and other sizes do not: eager torch.cond then runs).
STACK = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class {name}(nn.Module):
        def __init__(self, stack=True):
            super().__init__()
            self.stack = stack

        def forward(self, x):
            if self.stack:
                x = torch.stack([x, x], dim=1)
            return x * 2
""")


@pytest.mark.slow
def test_the_run_leaves_out_every_rewrite_that_stops_the_model_one_behind_the_other(
        project: Project) -> None:
    project.pyproject({"pkg/net.py:Net": {"inputs": ["randn(2, 4)"]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/net.py", PIPE_NET)
    project.write("pkg/front.py", STACK.format(name="Front"))
    project.write("pkg/back.py", STACK.format(name="Back"))
    before = {name: project.bytes(f"pkg/{name}") for name in ("front.py", "back.py")}

    result = project.run("pkg", rules=["lift-branch"], jobs=1, target="export")

    files = {f.display: f for f in result.files}
    [front] = files["pkg/front.py"].classes
    [back] = files["pkg/back.py"].classes
    # The rules still make the breaking rewrite (else this test proves nothing).
    assert front.rule == back.rule == "lift-branch"
    # Front stops the model first; Back, not checked then, stops the model built without
    # Front's rewrite and is rejected by that run.
    assert front.verdict == "rejected" and "at front.py:" in front.reason, front.reason
    assert back.verdict == "rejected" and "at back.py:" in back.reason, back.reason
    assert {name: project.bytes(f"pkg/{name}") for name in before} == before
    [model] = result.models()
    assert model.status == "scripts", model
