"""Model jobs in the validation worker (codemods/validation/model.py) and the executor side
(codemods/validation/executor.py, pool.py).

A model job builds a configured model (a class with an example table) from the original tree
and, in validate mode, from the tree as tsfix would leave it (``overlay``). The packages under
fixtures/models/ are laid out like real zoos: the top model with the table, its blocks in other
files. Jobs are built here directly and run through one worker pool shared by this module.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tsfix.codemods.pipeline.config import parse_example
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.registry import ALL_RULES
from tsfix.codemods.validation import executor
from tsfix.codemods.validation.executor import Executor, Outcome
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    NOT_SCRIPTABLE_EITHER,
    Example,
    ExampleCall,
    Job,
    JobFailure,
    ModelClass,
    ModelJob,
    ModelResult,
    ModelVerdict,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MODELS = Path(__file__).resolve().parent.parent / "fixtures" / "models"
SEPNET = MODELS / "sepnet"
TDNN = MODELS / "tdnn"
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    """One worker for the module: torch is imported once (workers start on the first job, in
    a slow test)."""
    with WorkerPool(1) as shared:
        yield shared


def model_job(root: Path, *, mode: str = "validate", overlay: dict[str, str] | None = None,
              classes: Iterable[ModelClass] = (), job_id: int = 0) -> ModelJob:
    """The job for the one example table of ``root``'s pyproject.toml."""
    tables = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["tsfix"]["examples"]
    [(key, table)] = tables.items()
    file, _, name = key.partition(":")
    return ModelJob(job_id, str((root / file).resolve()), name,
                    parse_example(key, table).to_example(),
                    "observe" if mode == "observe" else "validate", overlay or {},
                    tuple(classes), (), str(root.resolve()))


def rewritten(path: Path, *rules: str) -> tuple[str, list[ModelClass]]:
    """``path`` as ``rules`` rewrite it, and its rewritten classes as a model job lists them."""
    done = rewrite_source(
        path.read_text(), RewriteSettings([ALL_RULES[r] for r in rules]), path.name
    )
    by_class: dict[str, list[str]] = {}
    lifted: dict[str, dict[str, str]] = {}
    for change in done.changes:
        by_class.setdefault(change.class_name, []).append(change.rule)
        lifted.setdefault(change.class_name, {}).update(change.lifted)
    return done.text, [ModelClass(str(path.resolve()), name, tuple(rules_), lifted[name])
                       for name, rules_ in by_class.items()]


def line_of(text: str, fragment: str) -> int:
    [line] = [n for n, content in enumerate(text.splitlines(), 1) if fragment in content]
    return line


def run_one(pool: WorkerPool, job: ModelJob, timeout: float = TIMEOUT) -> ModelResult:
    result = pool.models([job], timeout=timeout)[job.id]
    assert result.id == job.id
    return result


def verdicts(result: ModelResult) -> dict[str, tuple[str, str]]:
    return {c.verdict.name: (c.verdict.verdict, c.verdict.reason) for c in result.classes}


def blocks_text() -> str:
    return (SEPNET / "sepnet" / "blocks.py").read_text()


# ---- observe -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_observe_types_every_class_the_model_holds_and_their_bases_in_other_files(
        pool: WorkerPool) -> None:
    result = run_one(pool, model_job(SEPNET, mode="observe"))
    assert result.failure is None
    blocks = str(SEPNET / "sepnet" / "blocks.py")
    base = str(SEPNET / "sepnet" / "base.py")
    model = str(SEPNET / "sepnet" / "model.py")
    # Inner classes in another file than the model, with the types of their real calls.
    assert result.types[blocks]["ConvBlock"]["forward"]["x"] == "Tensor"
    assert result.types[blocks]["ConvBlock"]["__init__"]["use_skip"] == "bool"
    assert result.types[blocks]["Stack"]["forward"]["local i"] == "int"
    # A base class of a block, defined in a third file: recorded under the class defining it.
    assert result.types[base]["BaseBlock"]["residual"] == {"x": "Tensor", "y": "Tensor",
                                                           "return": "Tensor"}
    assert result.types[model]["SepNet"]["forward"]["local sources"] == "List[Tensor]"
    # Classes the model holds instances of, a base in the tree included (its methods run).
    assert {path: set(names) for path, names in result.reached.items()} == {
        model: {"SepNet"}, blocks: {"Stack", "ConvBlock"}, base: {"BaseBlock"}}
    assert set(result.files) == {str(SEPNET / "sepnet" / f)
                                 for f in ("__init__.py", "base.py", "blocks.py", "model.py")}
    # The original does not script: where, in the helper file.
    assert result.model is not None
    assert result.model.scripted_before is False
    assert result.model.blocker is not None
    assert (result.model.blocker.path, result.model.blocker.line,
            result.model.blocker.scope) == (blocks, line_of(blocks_text(), "self.layers[i](x)"),
                                            "Stack.forward")
    assert result.classes == ()


# ---- validate: per-class verdicts from the model's instances ----------------------------------

@pytest.mark.slow
def test_rewritten_inner_classes_are_verified_and_the_fixed_model_scripts(
        pool: WorkerPool) -> None:
    blocks = SEPNET / "sepnet" / "blocks.py"
    text, classes = rewritten(blocks, "modulelist-iter", "lift-branch")
    assert {c.name for c in classes} == {"Stack", "ConvBlock"}
    [conv] = [c for c in classes if c.name == "ConvBlock"]
    assert conv.lifted == {"use_skip": "use_skip"}
    result = run_one(pool, model_job(SEPNET, overlay={str(blocks): text}, classes=classes))
    assert result.failure is None
    found = verdicts(result)
    assert found["Stack"] == ("verified", "from model sepnet/model.py:SepNet: 1 instance(s) on "
                              "their real inputs: eager parity, re-script, one artifact served "
                              "1 of 1, save/load; at batch size 3 too: eager parity, re-script "
                              "(1 call(s) from the model's run at that size)")
    # Three ConvBlocks (use_skip True, False, True): one artifact serves all through the lift.
    assert found["ConvBlock"][0] == "verified"
    assert "3 instance(s) on their real inputs" in found["ConvBlock"][1]
    assert "one artifact served 3 of 3" in found["ConvBlock"][1]
    assert result.model is not None
    assert result.model.status == "scripts"
    assert result.model.scripted_before is False
    assert result.model.reason == ("1 configuration(s): eager parity, script, parity with the "
                                   "original, save/load; at batch size 3 too: eager parity, "
                                   "script, save/load (1 of 1 configuration(s))")


@pytest.mark.slow
def test_a_parity_change_in_an_inner_class_is_rejected_and_the_model_fails(
        pool: WorkerPool) -> None:
    blocks = SEPNET / "sepnet" / "blocks.py"
    text, classes = rewritten(blocks, "modulelist-iter")
    broken = text.replace("y = self.residual(x, y)", "y = self.residual(x, y) * 1.5")
    assert broken != text
    classes.append(ModelClass(str(blocks), "ConvBlock", ("lift-branch",)))
    result = run_one(pool, model_job(SEPNET, overlay={str(blocks): broken}, classes=classes))
    verdict, reason = verdicts(result)["ConvBlock"]
    assert verdict == "rejected"
    assert reason.startswith("eager parity: output: max abs diff")
    assert "stack.layers.0" in reason and "inputs from model sepnet/model.py:SepNet" in reason
    assert result.model is not None
    assert result.model.status == "fails"
    assert result.model.reason.startswith("eager parity: output: max abs diff")


@pytest.mark.slow
def test_a_lift_the_rewrite_does_not_honour_is_rejected_by_one_artifact(
        pool: WorkerPool) -> None:
    """The rewrite claims to lift use_skip but forward ignores the argument: the first block's
    copy, given the second block's weights and use_skip=False, still adds the skip."""
    blocks = SEPNET / "sepnet" / "blocks.py"
    text, classes = rewritten(blocks, "modulelist-iter")
    ignoring = text.replace("    def forward(self, x):\n        y = torch.relu",
                            "    def forward(self, x, use_skip: bool = True):\n"
                            "        y = torch.relu", 1)
    assert ignoring != text
    classes.append(ModelClass(str(blocks), "ConvBlock", ("lift-branch",),
                              {"use_skip": "use_skip"}))
    result = run_one(pool, model_job(SEPNET, overlay={str(blocks): ignoring},
                                     classes=classes))
    verdict, reason = verdicts(result)["ConvBlock"]
    assert verdict == "rejected"
    assert reason.startswith("one artifact (eager): output: max abs diff")
    assert "stack.layers.1" in reason and "{'use_skip': False}" in reason


@pytest.mark.slow
def test_a_class_that_scripts_neither_before_nor_after_is_unverified_with_the_prefix(
        pool: WorkerPool) -> None:
    layers = TDNN / "tdnn" / "layers.py"
    pooling = TDNN / "tdnn" / "pooling.py"
    layers_text, classes = rewritten(layers, "modulelist-iter")
    assert [c.name for c in classes] == ["Res2Block"]
    # A harmless change in StatsPool (a local renamed): it still has the try block.
    pooling_text = pooling.read_text().replace("total", "count")
    classes.append(ModelClass(str(pooling), "StatsPool", ("annotate",)))
    overlay = {str(layers): layers_text, str(pooling): pooling_text}
    result = run_one(pool, model_job(TDNN, overlay=overlay, classes=classes))
    found = verdicts(result)
    assert found["StatsPool"][0] == "unverified"
    assert found["StatsPool"][1].startswith(NOT_SCRIPTABLE_EITHER)
    assert "try blocks aren't supported" in found["StatsPool"][1]
    # Two Res2Blocks with other dilations: not comparable for one artifact, each verified.
    assert found["Res2Block"][0] == "verified"
    assert "2 instance(s) on their real inputs" in found["Res2Block"][1]
    assert ("not comparable: 1 also differing in a setting that is not lifted (blocks.1: "
            "convs.0.conv.dilation") in found["Res2Block"][1]
    # The model now stops at the next blocker: pooling.py, at the line of the overlay's text.
    assert result.model is not None
    assert result.model.status == "fails"
    assert result.model.reason == "try blocks aren't supported"
    blocker = result.model.blocker
    assert blocker is not None
    assert (blocker.path, blocker.line, blocker.scope) == (
        str(pooling), line_of(pooling_text, "try:"), "StatsPool.forward")
    assert "tsfix-validate-" not in blocker.message and str(pooling) in blocker.message


@pytest.mark.slow
def test_the_blocker_is_in_the_helper_file_at_the_line_of_the_text_imported(
        pool: WorkerPool) -> None:
    """Nothing rewritten: the model stops in a helper file (layers.py). With an overlay that
    moves that file's lines, the line is the overlay's."""
    layers = TDNN / "tdnn" / "layers.py"
    result = run_one(pool, model_job(TDNN))
    assert result.model is not None and result.model.blocker is not None
    assert result.model.status == "fails"
    assert result.model.scripted_before is False
    assert (result.model.blocker.path, result.model.blocker.line,
            result.model.blocker.scope) == (str(layers),
                                            line_of(layers.read_text(), "self.convs[i]("),
                                            "Res2Block.forward")
    assert result.model.reason.startswith("Expected integer literal for index")

    moved = "# two lines\n# more\n" + layers.read_text()
    again = run_one(pool, model_job(TDNN, overlay={str(layers): moved}))
    assert again.model is not None and again.model.blocker is not None
    assert again.model.blocker.line == line_of(moved, "self.convs[i](")
    assert again.model.blocker.line == result.model.blocker.line + 2


# ---- small packages written by the tests -------------------------------------------------------

def package(root: Path, files: dict[str, str], init: dict[str, object],
            inputs: list[object]) -> ModelJob:
    for name, text in files.items():
        target = root / "pkg" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    (root / "pkg" / "__init__.py").touch()
    example = Example("pkg/net.py:Net", (init,), (ExampleCall(tuple(inputs)),))
    return ModelJob(0, str((root / "pkg" / "net.py").resolve()), "Net", example,
                    root=str(root.resolve()))


def randn(*shape: int) -> dict[str, object]:
    return {"__tensor__": {"fn": "randn", "shape": list(shape), "dtype": None}}


NET_WITH_AUX = """\
    import torch.nn as nn

    from pkg.parts import Gate


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = Gate()
            self.aux = Gate()   # only used in training

        def forward(self, x):
            if self.training:
                x = self.aux(x)
            return self.gate(x)
"""

PARTS = """\
    import torch
    import torch.nn as nn


    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return torch.sigmoid(self.fc(x)) * x
"""


@pytest.mark.slow
def test_an_instance_the_examples_never_call_is_said_and_a_class_never_called_unverified(
        pool: WorkerPool, tmp_path: Path) -> None:
    job = package(tmp_path, {"net.py": NET_WITH_AUX, "parts.py": PARTS}, {}, [randn(2, 4)])
    parts = str((tmp_path / "pkg" / "parts.py").resolve())
    gate = ModelClass(parts, "Gate", ("annotate",))
    overlay = {parts: textwrap.dedent(PARTS).replace("return torch.sigmoid(self.fc(x)) * x",
                                                     "y = self.fc(x)\n"
                                                     "        return torch.sigmoid(y) * x")}
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, "validate", overlay,
                                    (gate,), (), job.root))
    verdict, reason = verdicts(result)["Gate"]
    assert verdict == "verified"
    assert "1 instance(s) on their real inputs" in reason
    assert "1 other instance(s) never called (aux)" in reason

    # A model whose only Gate is never called in eval mode.
    only_aux = NET_WITH_AUX.replace("return self.gate(x)", "return x").replace(
        "self.gate = Gate()", "self.gate = nn.Identity()")
    job = package(tmp_path / "aux", {"net.py": only_aux, "parts.py": PARTS}, {}, [randn(2, 4)])
    parts = str((tmp_path / "aux" / "pkg" / "parts.py").resolve())
    result = run_one(pool, ModelJob(2, job.path, job.name, job.example, "validate",
                                    {parts: overlay[next(iter(overlay))]},
                                    (ModelClass(parts, "Gate"),), (), job.root))
    verdict, reason = verdicts(result)["Gate"]
    assert verdict == "unverified"
    assert "its examples never call them" in reason and "(aux)" in reason


@pytest.mark.slow
def test_an_overlay_that_does_not_import_rejects_its_classes_and_stops_the_model_there(
        pool: WorkerPool, tmp_path: Path) -> None:
    job = package(tmp_path, {"net.py": NET_WITH_AUX, "parts.py": PARTS}, {}, [randn(2, 4)])
    parts = str((tmp_path / "pkg" / "parts.py").resolve())
    broken = textwrap.dedent(PARTS).replace("def forward(self, x):", "def forward(self, x)")
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, "validate",
                                    {parts: broken}, (ModelClass(parts, "Gate"),), (),
                                    job.root))
    verdict, reason = verdicts(result)["Gate"]
    assert verdict == "rejected"
    assert reason.startswith("the rewritten tree does not import: SyntaxError")
    assert result.model is not None and result.model.blocker is not None
    assert result.model.status == "fails"
    assert (result.model.blocker.path, result.model.blocker.line) == (
        parts, line_of(broken, "def forward(self, x)"))


@pytest.mark.slow
def test_an_original_that_fails_is_the_jobs_failure_without_verdicts(
        pool: WorkerPool, tmp_path: Path) -> None:
    job = package(tmp_path, {"net.py": NET_WITH_AUX, "parts.py": PARTS}, {}, [randn(2, 5)])
    parts = str((tmp_path / "pkg" / "parts.py").resolve())
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, "validate", {},
                                    (ModelClass(parts, "Gate"),), (), job.root))
    assert result.failure is not None
    assert result.failure.startswith("the original forward raised for init[0]: RuntimeError")
    assert result.classes == () and result.model is None


@pytest.mark.slow
def test_a_hanging_model_is_a_failure_saying_it_timed_out(pool: WorkerPool,
                                                          tmp_path: Path) -> None:
    hanging = NET_WITH_AUX.replace("return self.gate(x)",
                                   "import time; time.sleep(60)\n            return x")
    job = package(tmp_path, {"net.py": hanging, "parts.py": PARTS}, {}, [randn(2, 4)])
    result = run_one(pool, job, timeout=3)
    assert result.failure is not None and result.failure.startswith("timed out after 3s")


@pytest.mark.slow
def test_a_worker_forgets_the_rewritten_tree_after_a_job(pool: WorkerPool) -> None:
    """A validate job's overlay does not leak into the next job of the same worker: observing
    afterwards sees the original ConvBlock.forward (no lifted parameter)."""
    blocks = SEPNET / "sepnet" / "blocks.py"
    text, classes = rewritten(blocks, "lift-branch")
    assert "use_skip: Optional[bool] = None" in text
    result = pool.models([model_job(SEPNET, overlay={str(blocks): text}, classes=classes,
                                    job_id=5),
                          model_job(SEPNET, mode="observe", job_id=6)], timeout=TIMEOUT)
    assert result[5].failure is None
    assert "use_skip" not in result[6].types[str(blocks)]["ConvBlock"]["forward"]


# ---- the executor interface (no worker) --------------------------------------------------------

class Recorded:
    """An executor that answers from a table: what a cluster engine would return."""

    def __init__(self, answers: dict[int, Outcome]) -> None:
        self.answers = answers

    def run(self, jobs: Iterable[Job], *, timeout: float,
            on_result: Callable[[Job, Outcome], None] | None = None) -> dict[int, Outcome]:
        found = {}
        for job in jobs:
            found[job.id] = self.answers[job.id]
            if on_result is not None:
                on_result(job, self.answers[job.id])
        return found


def test_models_turns_every_missing_answer_into_a_failure_that_says_why() -> None:
    jobs = [model_job(SEPNET, job_id=k) for k in range(4)]
    good = ModelResult(3, ModelVerdict("scripts", "checked"))
    fake: Executor = Recorded({
        0: "validation timed out after 5s (a hang in the model?)",
        1: "validation worker died: SIGSEGV (segmentation fault)",
        2: JobFailure(2, "Traceback (most recent call last):\nKeyError: 'x'"),
        3: good})
    seen: list[int] = []
    results = executor.models(fake, jobs, timeout=5,
                              on_result=lambda job, result: seen.append(result.id))
    assert results[0].failure == "timed out after 5s (a hang in the model?)"
    assert results[1].failure == "worker died: SIGSEGV (segmentation fault)"
    assert results[2].failure == "internal model-job error: KeyError: 'x'"
    assert results[3] is good
    assert sorted(seen) == [0, 1, 2, 3]


@pytest.mark.slow
def test_an_error_of_the_callers_on_result_reaches_the_caller() -> None:
    # It was lost with the pool's thread, and every job that thread had not answered read
    # "no answer from the worker" (a progress display raising turned verdicts into errors).
    pytest.importorskip("torch")
    calls: list[int] = []

    def display(job: Job, outcome: Outcome) -> None:
        calls.append(job.id)
        raise BrokenPipeError("stderr closed")

    with WorkerPool(1) as pool, pytest.raises(BrokenPipeError, match="stderr closed"):
        pool.run([model_job(SEPNET, job_id=k) for k in range(3)], timeout=120,
                 on_result=display)
    assert calls == [0]     # no job is started once the caller failed


def test_the_worker_pool_is_an_executor() -> None:
    local: Executor = WorkerPool(1)     # mypy checks the Protocol; nothing starts
    assert callable(local.run)
    assert local.run([], timeout=1) == {}


BASE_CONV = """\
    import torch.nn as nn


    class Conv(nn.Module):
        def __init__(self, channels, skip_transpose=False):
            super().__init__()
            self.conv = nn.Conv1d(channels, channels, 1)
            self.skip_transpose = skip_transpose

        def forward(self, x):
            if not self.skip_transpose:
                x = x.transpose(1, 2)
            y = self.conv(x)
            if not self.skip_transpose:
                y = y.transpose(1, 2)
            return y
"""

# speechbrain's ECAPA_TDNN.py: a subclass that only changes __init__ (skip_transpose=True).
NET_OF_SUBCLASSES = """\
    import torch.nn as nn

    from pkg.base import Conv


    class Conv1d(Conv):
        def __init__(self, *args, **kwargs):
            super().__init__(skip_transpose=True, *args, **kwargs)


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = Conv1d(4)
            self.second = Conv(4)

        def forward(self, x):
            return self.second(self.first(x).transpose(1, 2))
"""


@pytest.mark.slow
def test_a_rewritten_base_class_is_judged_on_the_instances_of_its_subclasses(
        pool: WorkerPool, tmp_path: Path) -> None:
    job = package(tmp_path, {"net.py": NET_OF_SUBCLASSES, "base.py": BASE_CONV}, {},
                  [randn(2, 4, 6)])
    base = (tmp_path / "pkg" / "base.py").resolve()
    text, classes = rewritten(base, "lift-branch")
    assert [(c.name, c.lifted) for c in classes] == [
        ("Conv", {"skip_transpose": "skip_transpose"})]
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, "validate",
                                    {str(base): text}, tuple(classes), (), job.root))
    assert set(result.reached[str(base)]) == {"Conv"}
    verdict, reason = verdicts(result)["Conv"]
    assert verdict == "verified"
    # The Conv1d (skip_transpose=True) and the Conv (False): one artifact serves both.
    assert "2 instance(s) on their real inputs" in reason
    assert "one artifact served 2 of 2" in reason
    assert result.model is not None and result.model.status == "scripts"


@pytest.mark.slow
def test_an_instance_whose_inputs_are_too_large_to_record_says_so(
        pool: WorkerPool, tmp_path: Path) -> None:
    """72 MB of input (over the 64 MB recorded per call): the Gate has no recorded inputs, and
    its verdict says why instead of pretending it was never called."""
    job = package(tmp_path, {"net.py": NET_WITH_AUX, "parts.py": PARTS}, {},
                  [randn(4_718_592, 4)])
    parts = str((tmp_path / "pkg" / "parts.py").resolve())
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, "validate", {},
                                    (ModelClass(parts, "Gate"),), (), job.root))
    verdict, reason = verdicts(result)["Gate"]
    assert verdict == "unverified"
    assert "were not recorded: a call's tensors (72 MB) exceed the 64 MB recorded per call" \
        in reason
    # The model verdict is decided all the same (nothing rewritten: it scripts as it is).
    assert result.model is not None and result.model.status == "scripts"
    assert result.model.scripted_before is True


@pytest.mark.slow
def test_a_python_only_rewrite_scripts_and_runs_and_its_save_fails_as_expected(
        pool: WorkerPool, tmp_path: Path) -> None:
    """What ignore-numpy makes: part of forward moved into a @torch.jit.ignore method. The
    class and the model script and run from Python; torch.jit.save cannot export them."""
    job = package(tmp_path, {"net.py": NET_WITH_AUX, "parts.py": PARTS}, {}, [randn(2, 4)])
    parts = str((tmp_path / "pkg" / "parts.py").resolve())
    ignored = textwrap.dedent(PARTS).replace(
        "        return torch.sigmoid(self.fc(x)) * x",
        "        return self.gate(self.fc(x)) * x\n\n"
        "    @torch.jit.ignore\n"
        "    def gate(self, y: torch.Tensor) -> torch.Tensor:\n"
        "        return torch.sigmoid(y)")
    gate = ModelClass(parts, "Gate", ("ignore-numpy",), python_only=True)
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, "validate",
                                    {parts: ignored}, (gate,), (), job.root))
    verdict, reason = verdicts(result)["Gate"]
    assert verdict == "verified"
    assert "save fails as expected (a @torch.jit.ignore method runs in Python only)" in reason
    assert result.model is not None
    assert (result.model.status, result.model.python_only) == ("scripts", True)
    assert ("save fails as expected (a @torch.jit.ignore method runs in Python only)"
            in result.model.reason)
    # The same rewrite not marked Python-only: its save failing is a rejection.
    result = run_one(pool, ModelJob(2, job.path, job.name, job.example, "validate",
                                    {parts: ignored}, (ModelClass(parts, "Gate"),), (),
                                    job.root))
    verdict, reason = verdicts(result)["Gate"]
    assert verdict == "rejected" and reason.startswith("save/load: ")


@pytest.mark.slow
def test_a_rewritten_class_whose_constructor_raises_is_rejected_and_the_model_fails(
        pool: WorkerPool, tmp_path: Path) -> None:
    job = package(tmp_path, {"net.py": NET_WITH_AUX, "parts.py": PARTS}, {}, [randn(2, 4)])
    parts = str((tmp_path / "pkg" / "parts.py").resolve())
    raising = textwrap.dedent(PARTS).replace("self.fc = nn.Linear(4, 4)",
                                             "self.fc = nn.Linear(4, 4)\n"
                                             "        raise ValueError('no')")
    result = run_one(pool, ModelJob(1, job.path, job.name, job.example, "validate",
                                    {parts: raising}, (ModelClass(parts, "Gate"),), (),
                                    job.root))
    verdict, reason = verdicts(result)["Gate"]
    assert verdict == "rejected"
    raised_at = line_of(raising, "raise ValueError")
    assert reason == (f"build from model pkg/net.py:Net: the rewritten model does not build "
                      f"for init[0] at parts.py:{raised_at} (Gate.__init__): ValueError: no")
    assert result.model is not None and result.model.status == "fails"
    assert result.model.reason == (f"build: the rewritten model does not build for init[0] "
                                   f"at parts.py:{raised_at} (Gate.__init__): ValueError: no")


# ---- what a model job carries -------------------------------------------------------------------

def test_a_model_job_carries_only_the_files_the_model_reads() -> None:
    from tsfix.codemods.pipeline import models as configured
    from tsfix.codemods.pipeline import phases
    from tsfix.codemods.pipeline.config import Config, ExampleSpec

    session = phases.Session(["annotate"], Config(), False, False)
    file = phases.File(0, Path("/p/net.py"), Path("/p/net.py"), "net.py")
    model = configured.Configured(file, "Net", ExampleSpec("net.py:Net"))
    overlay = {"/p/net.py": "net", "/p/blocks.py": "blocks", "/p/other.py": "other"}
    classes = [ModelClass("/p/blocks.py", "Block"), ModelClass("/p/other.py", "Other")]
    observed = ModelResult(0, files=("/p/blocks.py", "/p/net.py"))

    job = configured.model_job(0, model, session, overlay=overlay, classes=classes,
                               reads=configured.reads_of(observed))
    unknown = configured.model_job(0, model, session, overlay=overlay, classes=classes,
                                   reads=configured.reads_of(ModelResult(0, failure="no")))

    assert job.overlay == {"/p/net.py": "net", "/p/blocks.py": "blocks"}
    assert job.classes == (ModelClass("/p/blocks.py", "Block"),)
    # Without a run that says what the model imports, every file goes.
    assert unknown.overlay == overlay and unknown.classes == tuple(classes)


class _Answers:
    """A pool that answers from tables: the class's own validation verifies it, the model that
    holds it rejects it (and the jobs it was given are kept)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.model_jobs: list[ModelJob] = []

    def validate(self, jobs: Iterable[Job], *, timeout: float,
                 on_result: Callable[..., None] | None = None) -> dict[int, list[Any]]:
        from tsfix.codemods.validation.protocol import ClassVerdict

        return {job.id: [ClassVerdict("Drop", "verified", "own table")] for job in jobs}

    def models(self, jobs: Iterable[ModelJob], *, timeout: float,
               on_result: Callable[..., None] | None = None) -> dict[int, ModelResult]:
        from tsfix.codemods.validation.protocol import ClassVerdict, ModelClassVerdict

        self.model_jobs.extend(jobs)
        rejected = ClassVerdict("Drop", "rejected", "re-script: prob is Optional[int], the "
                                                    "model gives 0.0")
        return {job.id: ModelResult(job.id, ModelVerdict("fails", "does not script"),
                                    (ModelClassVerdict(self.path, rejected),))
                for job in jobs}


def test_a_class_verified_on_its_own_table_is_rejected_by_a_model_it_breaks(
        tmp_path: Path) -> None:
    from tsfix.codemods.pipeline import models as configured
    from tsfix.codemods.pipeline import phases
    from tsfix.codemods.pipeline.config import Config, ExampleSpec
    from tsfix.codemods.pipeline.phases.records import Observed, Pending
    from tsfix.codemods.pipeline.phases.state import RunState
    from tsfix.codemods.pipeline.phases.validate import validate_all
    from tsfix.codemods.pipeline.report import ClassResult
    from tsfix.codemods.pipeline.sources import SourceText

    path = (tmp_path / "nets.py").resolve()
    specs = {(path, name): ExampleSpec(f"nets.py:{name}", inputs=["randn(2)"])
             for name in ("Drop", "Wrap")}
    session = phases.Session(["lift-branch"], Config(examples=dict(specs)), False, False)
    file = phases.File(0, path, path, "nets.py")
    change = ClassResult("lift-branch", "Drop", (1, 5), "lifted self.prob", {"prob": "prob"})
    pending = [Pending(file, SourceText(path, "old", "utf-8", False), "new", (change,),
                       Observed())]
    wrap = configured.Configured(file, "Wrap", specs[(path, "Wrap")])
    answers = _Answers(str(path))

    state = RunState([file], session, answers, None, [wrap],  # type: ignore[arg-type]
                     pending=pending)
    validate_all(state)
    checked = state.checked

    [job] = answers.model_jobs
    assert [c.name for c in job.classes] == ["Drop"]
    verdict = checked[0].verdicts["Drop"]
    assert verdict.verdict == "rejected"
    assert verdict.reason == ("re-script: prob is Optional[int], the model gives 0.0 (inputs "
                              "from model nets.py:Wrap)")
