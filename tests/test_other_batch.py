"""Validation at a second batch size (issue 25, item 2): what an example fixes by accident (a
chunk count that follows the batch size, a tuple's length) is varied, so a rewrite that holds
at the example's batch size only is not reported verified, and an observed tuple whose length
follows the batch size is not typed with the one arity the example showed.

The unit tests at the top import the worker module (torch) but start no worker; the others
start validation workers, hence ``slow``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from conftest import apply_with_report, pyproject_text
from tsfix.codemods.pipeline.config import parse_example
from tsfix.codemods.validation import worker
from tsfix.codemods.validation.pool import JobClass, ValidationJob, WorkerPool, run_jobs
from tsfix.codemods.validation.protocol import ModelClass, ModelJob, ObserveClass

# forward hands a numpy helper's tuple of per-pair chunks to compiled code: the tuple's length
# is the batch size over 2, rounded up (1 at the example's batch 2, 2 at batch 3).
CHUNKS = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class Chunks(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            pieces = tuple(torch.from_numpy(p)
                           for p in np.array_split(x.numpy(), (x.shape[0] + 1) // 2))
            out = [self.proj(p) for p in pieces]
            return torch.cat(out, 0) * len(pieces)
""")

# The ignore-numpy rewrite typed with the arity seen at the example's batch size.
CHUNKS_ONE_ARITY = textwrap.dedent("""\
    from typing import Tuple

    import numpy as np
    import torch
    import torch.nn as nn


    class Chunks(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            pieces = self._numpy_pieces(x)
            out = [self.proj(p) for p in pieces]
            return torch.cat(out, 0) * len(pieces)

        @torch.jit.ignore
        def _numpy_pieces(self, x: torch.Tensor) -> Tuple[torch.Tensor]:
            return tuple(torch.from_numpy(p)
                         for p in np.array_split(x.numpy(), (x.shape[0] + 1) // 2))
""")

BATCH_2 = {"inputs": ["randn(2, 4)"]}


def chunks_job(tmp_path: Path, rewritten: str, target: str = "torchscript") -> ValidationJob:
    path = tmp_path / "chunks.py"
    path.write_text(CHUNKS)
    example = parse_example("chunks.py:Chunks", BATCH_2).to_example()
    return ValidationJob(0, str(path.resolve()), rewritten,
                         (JobClass("Chunks", example, ("ignore-numpy",), python_only=True),),
                         target=target)


# ---- the second call and the observed types -----------------------------------------------------

def test_the_second_batch_grows_every_input_of_the_batch_size_by_its_first_row() -> None:
    x = torch.arange(8.0).reshape(2, 4)
    lengths = torch.tensor([3, 1])
    table = torch.zeros(5, 2)
    batch = worker.other_batch((x, [lengths]), {"table": table, "scale": 2})
    assert batch is not None and batch.size == 3 and batch.label == "at batch size 3"
    grown_x, (grown_lengths,) = batch.args
    assert torch.equal(grown_x, torch.cat([x, x[:1]]))
    assert grown_lengths.tolist() == [3, 1, 3]
    # Inputs of another leading size, and non-tensors, are left as they are.
    assert batch.kwargs["table"] is table and batch.kwargs["scale"] == 2


def test_a_batch_of_one_becomes_two_and_a_call_without_a_batch_axis_is_not_varied() -> None:
    batch = worker.other_batch((torch.zeros(1, 3),), {})
    assert batch is not None and batch.size == 2
    assert worker.other_batch((torch.tensor(1.0), 3), {}) is None


def test_tuples_whose_length_differs_are_typed_as_a_list() -> None:
    pair, three = worker.type_of((torch.zeros(1),) * 2), worker.type_of((torch.zeros(1),) * 3)
    assert worker.type_string(pair) == "Tuple[Tensor, Tensor]"
    varied = worker.merge_types(pair, three)
    assert worker.type_string(varied) == "List[Tensor]"
    assert worker.type_string(worker.merge_types(varied, worker.type_of(()))) == "List[Tensor]"
    # Elements that disagree, or a real list against a tuple, stay a conflict.
    assert worker.type_string(worker.merge_types(pair, worker.type_of((1, 2, 3)))) is None
    assert worker.type_string(worker.merge_types(varied,
                                                 worker.type_of([torch.zeros(1)]))) is None


def test_observing_a_class_types_a_tuple_whose_length_follows_the_batch_as_a_list(
        tmp_path: Path) -> None:
    path = tmp_path / "chunks_observed.py"
    path.write_text(CHUNKS)
    module = worker.load_module("_tsfix_test_chunks_observed", path)
    example = parse_example("chunks_observed.py:Chunks", BATCH_2).to_example()
    found = worker.observe_class(module, ObserveClass("Chunks", example)).strings()
    # One chunk at the example's batch 2, two at batch 3.
    assert found["Chunks"]["forward"]["local pieces"] == "List[Tensor]"


# Batch 2 only; at batch 3 a helper is called with a str before forward raises.
PICKY = textwrap.dedent("""\
    import torch.nn as nn


    class Picky(nn.Module):
        def forward(self, x):
            count = self.count_of(x.shape[0] if x.shape[0] == 2 else str(x.shape[0]))
            if x.shape[0] != 2:
                raise ValueError("pairs only")
            return x * count

        def count_of(self, n):
            return n
""")


def test_a_second_batch_size_the_original_rejects_adds_no_types(tmp_path: Path) -> None:
    path = tmp_path / "picky_observed.py"
    path.write_text(PICKY)
    module = worker.load_module("_tsfix_test_picky_observed", path)
    example = parse_example("picky_observed.py:Picky", BATCH_2).to_example()
    found = worker.observe_class(module, ObserveClass("Picky", example)).strings()
    assert found["Picky"]["count_of"] == {"n": "int", "return": "int"}


# ---- class jobs ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_tuple_arity_that_holds_at_the_example_batch_only_is_rejected(
        tmp_path: Path) -> None:
    [verdicts] = run_jobs([chunks_job(tmp_path, CHUNKS_ONE_ARITY)], workers=1,
                          timeout=120).values()
    [verdict] = verdicts
    assert verdict.verdict == "rejected", verdict.reason
    assert verdict.reason.startswith("at batch size 3: re-script: the scripted module raised")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["torchscript", "export"])
def test_a_rewrite_that_differs_at_the_second_batch_size_only_is_rejected_in_eager_mode(
        tmp_path: Path, target: str) -> None:
    # The chunk count fixed at the example's value: same output at batch 2, not at batch 3
    # (the rewrite scripts: only the second size tells).
    fixed = CHUNKS_ONE_ARITY.replace("(x.shape[0] + 1) // 2", "1")
    [verdicts] = run_jobs([chunks_job(tmp_path, fixed, target)], workers=1,
                          timeout=120).values()
    [verdict] = verdicts
    assert verdict.verdict == "rejected", verdict.reason
    assert verdict.reason.startswith("at batch size 3: eager parity: output: max abs diff")


@pytest.mark.slow
def test_ignore_numpy_types_the_chunks_as_a_list_verified_at_both_batch_sizes(
        tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "chunks.py").write_text(CHUNKS)
    (folder / "pyproject.toml").write_text(pyproject_text({"chunks.py:Chunks": BATCH_2}))
    done = apply_with_report(folder, "ignore-numpy")
    assert done.returncode == 0, done.stderr
    [record] = done.classes
    assert record["verdict"] == "verified", record
    assert "at batch size 3 too: eager parity, re-script" in record["reason"]
    written = (folder / "chunks.py").read_text()
    assert "-> List[torch.Tensor]:" in written and "Tuple" not in written
    [model] = done.report["models"]
    assert model["status"] == "scripts"
    assert "at batch size 3 too: eager parity, script" in model["reason"]


# The batch axis is not free: the model takes exactly two items.
PAIR = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class Pair(nn.Module):
        def forward(self, x):
            first, second = x.unbind(0)
            window = torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)
            return (first - second) * window
""")


@pytest.mark.slow
def test_a_model_whose_batch_axis_is_not_free_keeps_its_verdict(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "pair.py").write_text(PAIR)
    (folder / "pyproject.toml").write_text(pyproject_text({"pair.py:Pair": BATCH_2}))
    done = apply_with_report(folder, "ignore-numpy")
    assert done.returncode == 0, done.stderr
    [record] = done.classes
    assert record["verdict"] == "verified", record
    assert ("batch size not varied for 1 configuration(s): the original raises at batch "
            "size 3: ValueError: too many values to unpack") in record["reason"]
    assert "at batch size 3 too" not in record["reason"]


# ---- model jobs: a class the model reaches -------------------------------------------------------

OUTER = textwrap.dedent("""\
    import torch.nn as nn

    from .chunks import Chunks


    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Chunks()

        def forward(self, x):
            return self.inner(x * 2)
""")


def zoo(tmp_path: Path) -> Path:
    """The package ``zoo``: Outer (outer.py, batch-2 table) holding a Chunks (chunks.py);
    the path of outer.py."""
    package = tmp_path / "zoo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "chunks.py").write_text(CHUNKS)
    (package / "outer.py").write_text(OUTER)
    return package / "outer.py"


def outer_job(tmp_path: Path, mode: str, overlay: dict[str, str],
              classes: tuple[ModelClass, ...]) -> ModelJob:
    outer = zoo(tmp_path)
    example = parse_example("zoo/outer.py:Outer", BATCH_2).to_example()
    return ModelJob(0, str(outer.resolve()), "Outer", example, mode, overlay, classes, (),
                    str(tmp_path.resolve()))


@pytest.mark.slow
def test_a_model_run_observes_the_reached_class_at_the_second_size_too(
        tmp_path: Path) -> None:
    job = outer_job(tmp_path, "observe", {}, ())
    with WorkerPool(1) as pool:
        result = pool.models([job], timeout=120)[0]
    assert result.failure is None
    chunks = str((tmp_path / "zoo" / "chunks.py").resolve())
    assert result.types[chunks]["Chunks"]["forward"]["local pieces"] == "List[Tensor]"


@pytest.mark.slow
def test_a_reached_class_is_checked_on_its_calls_from_the_model_run_at_the_second_size(
        tmp_path: Path) -> None:
    chunks = str((tmp_path / "zoo" / "chunks.py").resolve())
    job = outer_job(tmp_path, "validate", {chunks: CHUNKS_ONE_ARITY},
                    (ModelClass(chunks, "Chunks", ("ignore-numpy",), python_only=True),))
    with WorkerPool(1) as pool:
        result = pool.models([job], timeout=120)[0]
    assert result.failure is None
    [found] = result.classes
    assert found.verdict.verdict == "rejected", found.verdict.reason
    assert found.verdict.reason.startswith(
        "re-script: the scripted inner call[1] at batch size 3 raised")
    assert result.model is not None and result.model.status == "fails"
    assert result.model.reason.startswith("at batch size 3: script: the scripted model raised")
