"""Validation under ``--target export`` (codemods/validation/export.py), through the worker.

The classes are hand-written pairs in tests/data/export/: ``original.py`` and ``rewritten.py``
(what a rule under the export target should, or should not, leave).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
from tsfix.codemods.validation.case import setting_value
from tsfix.codemods.validation.export import headline, string_codes
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    ClassVerdict,
    Example,
    JobClass,
    ModelClass,
    ModelJob,
    ModelResult,
    ValidationJob,
)

DATA = Path(__file__).resolve().parent / "data" / "export"
HAS_ONNX = all(importlib.util.find_spec(name) is not None
               for name in ("onnx", "onnxruntime", "onnxscript"))


def _tensor(fn: str, rows: int = 2) -> dict[str, Any]:
    return {"__tensor__": {"fn": fn, "shape": [rows, 4], "dtype": None}}


def _job_class(name: str, init: list[dict[str, Any]], calls: list[dict[str, Any]],
               lifted: dict[str, str] | None = None) -> JobClass:
    example = Example.from_json({"key": f"model.py:{name}", "init": init,
                                 "calls": [{"inputs": [c], "kwargs": {}} for c in calls]})
    return JobClass(name, example, ("lift-branch",), lifted or {})


FLAG = [{"double": True}, {"double": False}]
CLASSES = (
    # Both settings, two input shapes.
    _job_class("Gate", FLAG, [_tensor("randn"), _tensor("randn", rows=3)], {"double": "double"}),
    _job_class("OneSided", [{"double": True}], [_tensor("randn")], {"double": "double"}),
    _job_class("Arithmetic", FLAG, [_tensor("randn")], {"double": "double"}),
    # randn (seed 0) peaks above 1, zeros and rand below: both sides of the data branch.
    _job_class("Normalize", [{}], [_tensor("randn"), _tensor("zeros")]),
    _job_class("WrongFalseSide", [{}], [_tensor("randn"), _tensor("rand")]),
    _job_class("Scale", [{}], [_tensor("randn")]),
    _job_class("TwoPeaks", [{}], [_tensor("randn")]),
)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ClassVerdict]:
    """Every class of tests/data/export validated in one job (one worker)."""
    folder = tmp_path_factory.mktemp("export")
    shutil.copy(DATA / "original.py", folder / "model.py")
    job = ValidationJob(0, str(folder / "model.py"), (DATA / "rewritten.py").read_text(),
                        CLASSES, target="export")
    with WorkerPool(1) as pool:
        found = pool.validate([job], timeout=600)[0]
    return {verdict.name: verdict for verdict in found}


@pytest.mark.slow
def test_a_lifted_flag_is_served_by_one_exported_program(
        verdicts: dict[str, ClassVerdict]) -> None:
    gate = verdicts["Gate"]
    assert gate.verdict == "verified", gate.reason
    # Two settings x two input shapes from one export per input shape, never one per setting.
    assert "one exported program served 4 of 4 (exported per input shape: 2 programs)" \
        in gate.reason
    assert "both sides of 1 cond(s)" in gate.reason
    assert "save/load (2 call(s))" in gate.reason
    assert "the original exports with init[0]'s path only" in gate.reason


@pytest.mark.slow
def test_a_cond_whose_examples_take_one_side_is_unverified(
        verdicts: dict[str, ClassVerdict]) -> None:
    one_sided = verdicts["OneSided"]
    assert one_sided.verdict == "unverified", one_sided.reason
    line = (DATA / "rewritten.py").read_text().splitlines().index(
        "        y = torch.cond(double, double_true, double_false, (y,))") + 1
    assert one_sided.reason.startswith(
        f"torch.cond at line {line} only took the true side on the examples (add an input or "
        "configuration taking the other side)"), one_sided.reason


@pytest.mark.slow
def test_a_data_dependent_cond_verifies_where_the_original_cannot_export(
        verdicts: dict[str, ClassVerdict]) -> None:
    normalize = verdicts["Normalize"]
    assert normalize.verdict == "verified", normalize.reason
    assert "both sides of 1 cond(s)" in normalize.reason
    assert ("the original does not export: GuardOnDataDependentSymNode: Could not guard on "
            "data-dependent expression") in normalize.reason
    # The original's line, `if peak > self.limit:`.
    line = (DATA / "original.py").read_text().splitlines().index(
        "        if peak > self.limit:") + 1
    assert f"(at model.py line {line})" in normalize.reason


@pytest.mark.slow
def test_a_wrong_false_side_is_rejected(verdicts: dict[str, ClassVerdict]) -> None:
    wrong = verdicts["WrongFalseSide"]
    assert wrong.verdict == "rejected", wrong.reason
    assert wrong.reason.startswith("eager parity: output: max abs diff"), wrong.reason
    assert wrong.reason.endswith("for init[0] call[1]"), wrong.reason


@pytest.mark.slow
def test_a_rewrite_that_does_not_export_while_the_original_does_is_rejected(
        verdicts: dict[str, ClassVerdict]) -> None:
    scale = verdicts["Scale"]
    assert scale.verdict == "rejected", scale.reason
    assert scale.reason.startswith("export: the rewritten class does not export"), scale.reason
    assert "while the original does" in scale.reason
    line = (DATA / "rewritten.py").read_text().splitlines().index(
        "        if bool((x > 100.0).any()):") + 1
    assert f"(at the rewritten model.py line {line})" in scale.reason


@pytest.mark.slow
def test_an_error_past_the_originals_is_unverified_with_the_rewrites_error(
        verdicts: dict[str, ClassVerdict]) -> None:
    # The original does not export either: no regression, whichever error comes first.
    two = verdicts["TwoPeaks"]
    assert two.verdict == "unverified", two.reason
    line = (DATA / "rewritten.py").read_text().splitlines().index(
        "        if x.abs().max() > 10.0:") + 1
    assert two.reason.startswith("does not export either: the rewrite fails with: "), two.reason
    assert f"(at the rewritten model.py line {line}) for init[0] (the original fails with: " \
        in two.reason, two.reason


@pytest.mark.slow
def test_onnx_keeps_an_if_per_cond_and_per_lifted_setting(
        verdicts: dict[str, ClassVerdict]) -> None:
    if not HAS_ONNX:
        assert "onnx: not checked (pip install 'tsfix[onnx]')" in verdicts["Gate"].reason
        pytest.skip("onnx, onnxruntime or onnxscript is not installed")
    gate = verdicts["Gate"]
    assert ("onnx: 1 If node(s), each lifted setting decides one, onnxruntime parity for 2 "
            "call(s)") in gate.reason, gate.reason
    # Serves both settings through export (no If needed there), but its ONNX file has no
    # branch on the setting.
    arithmetic = verdicts["Arithmetic"]
    assert arithmetic.verdict == "rejected", arithmetic.reason
    assert arithmetic.reason.startswith("onnx: no If node decides on the lifted double"), \
        arithmetic.reason


# ---- helpers (no worker) -----------------------------------------------------------------------

def test_string_codes_are_found_wherever_the_table_is_read() -> None:
    source = '''
class Pool:
    def forward(self, x, mode=None):
        if mode is None:
            mode = torch.tensor({"avg": 0, "max": 1}.get(self.mode, -1))
        code: int = {"sum": 0}.get(self.reduce, -1)
'''
    assert string_codes(source, "Pool") == {"mode": {"avg": 0, "max": 1}, "reduce": {"sum": 0}}
    assert string_codes(source, "Other") == {}


def test_settings_become_the_tensors_the_rewrite_defaults_to() -> None:
    import torch

    assert setting_value(True).dtype == torch.bool
    # torch.tensor(self.scale) is float32, not the float64 the onnx target feeds.
    assert setting_value(0.5).dtype == torch.float32
    assert setting_value(0.5, double=True).dtype == torch.float64
    assert setting_value("max", {"avg": 0, "max": 1}).item() == 1
    assert setting_value("other", {"avg": 0}).item() == -1


def test_headline_drops_torch_debugging_detail_and_reads_past_a_colon() -> None:
    guard = RuntimeError("Could not guard on data-dependent expression Eq(u0, 1) (unhinted: "
                         "Eq(u0, 1)).  (Size-like symbols: none)\n\nmore")
    assert headline(guard) == ("RuntimeError: Could not guard on data-dependent expression "
                               "Eq(u0, 1)")
    higher = ValueError("This higher order operator doesn't work unless it is captured "
                        "completely with torch.compile. Got graph break/error:\n\n"
                        "Encountered aliasing during higher order op tracing\n  more")
    assert headline(higher).endswith("Got graph break/error: Encountered aliasing during "
                                     "higher order op tracing")


# ---- a configured model (model job) ------------------------------------------------------------

_NET = '''
import torch.nn as nn

from pkg.blocks import Gate, Scale


class Net(nn.Module):
    def __init__(self, double: bool = True):
        super().__init__()
        self.first = Gate(double)
        self.second = Gate(not double)
        self.scale = Scale()

    def forward(self, x):
        return self.scale(self.second(self.first(x)))
'''


def _model_job(tmp_path: Path, rewritten_blocks: str) -> ModelResult:
    package = tmp_path / "pkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    shutil.copy(DATA / "original.py", package / "blocks.py")
    (package / "net.py").write_text(_NET)
    blocks = str((package / "blocks.py").resolve())
    example = Example.from_json({"key": "pkg/net.py:Net", "init": [{"double": True}],
                                 "calls": [{"inputs": [_tensor("randn")], "kwargs": {}}]})
    job = ModelJob(0, str((package / "net.py").resolve()), "Net", example, "validate",
                   {blocks: rewritten_blocks},
                   (ModelClass(blocks, "Gate", ("lift-branch",), {"double": "double"}),),
                   (), str(tmp_path.resolve()), target="export")
    with WorkerPool(1) as pool:
        return pool.models([job], timeout=600)[0]


@pytest.mark.slow
def test_a_configured_model_exports_from_the_rewritten_tree(tmp_path: Path) -> None:
    rewritten = (DATA / "rewritten.py").read_text()
    # Scale's rewrite does not export: the model's export stops there, in the tree.
    result = _model_job(tmp_path, rewritten)
    assert result.model is not None, result.failure
    assert result.model.scripted_before is True       # the original model exports
    assert result.model.status == "fails", result.model.reason
    blocker = result.model.blocker
    assert blocker is not None, (result.model.reason, result.classes)
    assert blocker.path == str((tmp_path / "pkg" / "blocks.py").resolve())
    assert blocker.scope == "Scale.forward"
    assert "Could not guard on data-dependent expression" in blocker.message
    # The Gate instances (one per setting) are served by one exported program.
    [gate] = result.classes
    assert gate.verdict.verdict == "verified", gate.verdict.reason
    assert "one exported program served 2 of 2 instance(s)" in gate.verdict.reason

    # With Scale left as it was, the whole model exports and matches the original.
    original_scale = (DATA / "original.py").read_text().split("class Scale")[1].split(
        "\n\n\nclass ")[0]
    fixed = rewritten.replace(rewritten.split("class Scale")[1].split("\n\n\nclass ")[0],
                              original_scale)
    (tmp_path / "fixed").mkdir()
    result = _model_job(tmp_path / "fixed", fixed)
    assert result.model is not None, result.failure
    assert result.model.status == "scripts", result.model.reason
    assert result.model.reason.startswith("1 configuration(s): eager parity, exported (1 "
                                          "program(s)"), result.model.reason
