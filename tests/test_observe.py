"""Observed types: the worker's type strings, its profiler, and the engine's observe round.

The pure type functions and the profiler run in this process (importing the worker module
imports torch); the engine tests start real workers, hence ``slow``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, ClassVar

import libcst as cst
import pytest
import torch
from conftest import Project
from tsfix.codemods.pipeline.config import parse_example
from tsfix.codemods.rules import registry
from tsfix.codemods.rules.base import ClassChange, Rule
from tsfix.codemods.validation import worker
from tsfix.codemods.validation.protocol import ObserveClass

T = torch.zeros(2)


# ---- type strings (pure) -----------------------------------------------------------------------

@pytest.mark.parametrize(("values", "expected"), [
    ([T], "Tensor"),
    ([torch.nn.Parameter(T)], "Tensor"),
    ([T, torch.nn.Parameter(T)], "Tensor"),
    ([3], "int"),
    ([2.5], "float"),
    ([True, False], "bool"),
    (["avg"], "str"),
    ([None], "NoneType"),
    ([1, 2.5], "float"),                    # int and float: float
    ([None, 3], "Optional[int]"),
    ([T, None, T], "Optional[Tensor]"),
    ([None, 1, 2.5], "Optional[float]"),
    ([[1, 2], [3]], "List[int]"),
    ([[], [1.5]], "List[float]"),           # an empty list takes the other's element type
    ([[T, None]], "List[Optional[Tensor]]"),
    ([(1, T)], "Tuple[int, Tensor]"),
    ([(1, T), (2.5, T)], "Tuple[float, Tensor]"),
    ([()], "Tuple[()]"),
    ([(1,), (1, 2)], "List[int]"),          # a length that varies: TorchScript takes tuples
    ([(T, T), (), (T,)], "List[Tensor]"),
    ([{"a": T}], "Dict[str, Tensor]"),
    ([{"a": 1}, {}], "Dict[str, int]"),
    ([{1: [2]}], "Dict[int, List[int]]"),
    ([[[1], []]], "List[List[int]]"),
    ([torch.float32, torch.int64], "torch.dtype"),
    ([None, torch.device("cpu")], "Optional[torch.device]"),
])
def test_observed_type_strings(values: list[Any], expected: str) -> None:
    assert worker.observed_types(values) == expected


@pytest.mark.parametrize("values", [
    [],                                     # never called
    [[]],                                   # an empty list alone has no element type
    [{}],
    [[], []],
    [True, 1],                              # bool is not an int to TorchScript
    [1, "a"],
    [[1, "a"]],                             # a list of mixed types
    [(1,), (1, "a")],                       # tuples of other lengths, elements disagree
    [(1,), [1, 2]],                         # a tuple and a list
    [{(1, 2): 1}],                          # a key TorchScript cannot hold
    [torch.nn.Linear(2, 2)],                # modules, custom objects
    [object()],
    [torch.float32, torch.device("cpu")],   # a dtype and a device: no one type
    [[torch.nn.Linear(2, 2)]],
])
def test_untypeable_values_give_no_type(values: list[Any]) -> None:
    assert worker.observed_types(values) is None


def test_merge_is_order_independent() -> None:
    samples = [None, 1, 2.5, [1], [], (1, T), {"a": 1}]
    for a in samples:
        for b in samples:
            left = worker.merge_types(worker.type_of(a), worker.type_of(b))
            right = worker.merge_types(worker.type_of(b), worker.type_of(a))
            assert worker.type_string(left) == worker.type_string(right), (a, b)


# ---- the profiler, in this process -------------------------------------------------------------

OBSERVED_MODEL = textwrap.dedent("""\
    import functools

    import torch
    import torch.nn as nn


    def logged(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return function(*args, **kwargs)
        return wrapper


    class Base(nn.Module):
        def scaled(self, x, factor):
            return x * factor


    class Net(Base):
        def __init__(self, depth=2, names=None):
            super().__init__()
            self.depth = depth
            self.fc = nn.Linear(4, 4)

        def forward(self, x, temperature=1.0, mask=None, sizes=(), *rest, **options):
            y = self.scaled(self.fc(x), temperature)
            if mask is not None:
                y = y * mask
            y = self.helper(y, [], {"a": y})
            self.failing(0)
            return y, self.depth

        @logged
        def helper(self, y, extra, table):
            def inner(z):
                return z
            return inner(y)

        def failing(self, n):
            try:
                self.explode(n)
            except ValueError:
                pass
            return n

        def explode(self, n):
            raise ValueError(n)

        @staticmethod
        def pure(a, b):
            return a + b
""")


def test_observe_class_records_methods_of_class_and_same_file_bases(tmp_path: Path) -> None:
    path = tmp_path / "observed_model.py"
    path.write_text(OBSERVED_MODEL)
    module = worker.load_module("_tsfix_test_observed_model", path)
    example = parse_example("observed_model.py:Net", {
        "init": [{"depth": 2}, {"depth": 3, "names": ["a", "b"]}],
        "calls": [{"inputs": ["randn(2, 4)"]},
                  {"inputs": ["randn(2, 4)"],
                   "kwargs": {"temperature": 1, "mask": "ones(2, 4)", "sizes": [2, 3]}}],
    }).to_example()

    found = worker.observe_class(module, ObserveClass("Net", example)).strings()

    net = found["Net"]
    assert net["__init__"] == {"depth": "int", "names": "Optional[List[str]]",
                               "return": "NoneType"}
    # Default and non-default calls merged; *rest and **options left out; no self.
    # Locals are recorded at return, arguments (*rest and **options too) are not.
    assert net["forward"] == {"x": "Tensor", "temperature": "float",
                              "mask": "Optional[Tensor]", "return": "Tuple[Tensor, int]",
                              "local y": "Tensor"}
    # sizes: () and [2, 3] disagree (tuple vs list): left out.
    assert "sizes" not in net["forward"]
    # extra was only ever [] (no element type): left out. helper is decorated: the function
    # written in the file is recorded, not the wrapper.
    # The nested function is a local TorchScript cannot type: left out.
    assert net["helper"] == {"y": "Tensor", "table": "Dict[str, Tensor]", "return": "Tensor"}
    # explode raised: its frame's 'return' event is not a return value.
    assert net["explode"] == {"n": "int"}
    assert net["failing"] == {"n": "int", "return": "int"}
    assert "pure" not in net                      # never called
    # A base defined in the same file is recorded under its own name.
    assert found["Base"] == {"scaled": {"x": "Tensor", "factor": "float", "return": "Tensor"}}


def test_observe_class_failure_is_a_verdict(tmp_path: Path) -> None:
    path = tmp_path / "raising_model.py"
    path.write_text(OBSERVED_MODEL.replace("self.depth = depth", "raise RuntimeError('boom')"))
    module = worker.load_module("_tsfix_test_raising_model", path)
    example = parse_example("raising_model.py:Net", {"inputs": ["randn(2, 4)"]}).to_example()
    with pytest.raises(worker.Verdict, match=r"constructor raised for init\[0\].*boom"):
        worker.observe_class(module, ObserveClass("Net", example))


# ---- the engine's observe round (real workers) -------------------------------------------------

SEEN: list[tuple[str, Any]] = []


class RecordingRule(Rule):
    """Test-only: records what it was given and inserts a no-op into forward()."""

    name = "recording"
    summary = "test rule that records observations"
    needs_observations: ClassVar[bool] = True

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        SEEN.append((cls.name.value, self.observed))
        body = list(cls.body.body)
        for i, statement in enumerate(body):
            if isinstance(statement, cst.FunctionDef) and statement.name.value == "forward":
                added = cst.parse_statement("x = x * 1.0\n")
                body[i] = statement.with_changes(body=statement.body.with_changes(
                    body=[added, *statement.body.body]))
                self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                                self.summary))
                return cls.with_changes(body=cls.body.with_changes(body=body))
        return cls


SIMPLE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class {name}(nn.Module):
        def __init__(self, gain=2.0):
            super().__init__()
            {init}
            self.gain = gain

        def forward(self, x, k: int = 1):
            return x * self.gain * k
""")


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    monkeypatch.setattr(registry, "ALL_RULES", {"recording": RecordingRule})
    SEEN.clear()
    return SEEN


@pytest.mark.slow
def test_engine_passes_observed_types_to_rules(project: Project,
                                               recording: list[tuple[str, Any]]) -> None:
    project.pyproject({
        "good.py:Good": {"calls": [{"inputs": ["randn(2, 3)"]},
                                   {"inputs": ["randn(2, 3)"], "kwargs": {"k": 2}}]},
        "broken.py:Broken": {"inputs": ["randn(2, 3)"]},
    })
    project.write("good.py", SIMPLE.format(name="Good", init="pass"))
    project.write("broken.py", SIMPLE.format(name="Broken", init="raise ValueError('nope')"))
    project.write("none.py", SIMPLE.format(name="NoExamples", init="pass"))

    result = project.run(jobs=1)

    files = {f.display: f for f in result.files}
    expected = {"Good": {"__init__": {"gain": "float", "return": "NoneType"},
                         "forward": {"x": "Tensor", "k": "int", "return": "Tensor"}}}
    assert files["good.py"].observed == expected
    assert files["good.py"].notes == []
    assert dict(recording)["Good"] == expected
    # A constructor that raises: no observations, a note, and the file is still rewritten.
    assert files["broken.py"].observed == {}
    [note] = files["broken.py"].notes
    assert note.startswith("no observed types for Broken (static inference only): ")
    assert "nope" in note
    assert dict(recording)["Broken"] == {}
    # No example table: no observe job at all.
    assert dict(recording)["NoExamples"] == {}
    assert files["none.py"].observed == {} and files["none.py"].notes == []
    [good_class] = files["good.py"].classes
    assert good_class.verdict == "verified", good_class.reason
    report = result.to_json()
    [good] = [f for f in report["files"] if f["path"] == "good.py"]
    assert good["observed"] == expected


def test_no_verify_observes_nothing(project: Project, recording: list[tuple[str, Any]],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def no_workers(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a worker was started")

    monkeypatch.setattr("tsfix.codemods.validation.pool._Worker.__init__", no_workers)
    project.pyproject({"good.py:Good": {"inputs": ["randn(2, 3)"]}})
    project.write("good.py", SIMPLE.format(name="Good", init="pass"))
    result = project.run(verify=False)
    assert dict(recording) == {"Good": {}}
    assert result.files[0].status == "changed"


@pytest.mark.slow
def test_observe_timeout_is_not_waited_for_twice(project: Project,
                                                 recording: list[tuple[str, Any]]) -> None:
    project.pyproject({"hang.py:Hang": {"inputs": ["randn(2, 3)"]}})
    project.write("hang.py", "import time\n" + SIMPLE.format(name="Hang", init="pass").replace(
        "return x * self.gain * k", "time.sleep(600)\n        return x"))

    result = project.run(jobs=1, timeout=2)

    [record] = result.files
    [note] = record.notes
    assert "timed out after 2s" in note
    [c] = record.classes
    assert c.verdict == "unverified"
    # The observe round's timeout, not a second one from validation.
    assert c.reason.startswith("timed out after 2s") and "not validated" in c.reason
    # Nothing ran to the end, so nothing proved the (unsafe) rewrite: it is not written.
    assert c.withheld and not c.safe and record.status == "unchanged"
