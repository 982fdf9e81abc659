"""``--target onnx``: lift-branch's exportable form, the ONNX validation step, configuration."""

from __future__ import annotations

import importlib.util
import shutil
import textwrap
from pathlib import Path
from typing import Any

import libcst as cst
import pytest
from tsfix.codemods.pipeline import engine
from tsfix.codemods.pipeline.config import ConfigError, load_config
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.lift_branch import LiftBranch, LiftBranchOnnx
from tsfix.codemods.rules.registry import select_rules
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import Example, JobClass, ValidationJob

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def rewrite_onnx(code: str) -> Rewrite:
    result = rewrite_source(
        textwrap.dedent(code), RewriteSettings([LiftBranchOnnx], line_length=120), "m.py"
    )
    cst.parse_module(result.text)
    return result


# ---- lift-branch's form under --target onnx ----------------------------------------------------

def test_flag_becomes_an_optional_tensor_read_into_a_typed_local() -> None:
    result = rewrite_onnx("""
        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, use_act: bool = True, scale: float = 1.0):
                super().__init__()
                self.use_act = use_act
                self.scale = scale
            def forward(self, x):
                if self.use_act and self.scale > 0.5:
                    x = x.relu() * self.scale
                return x
        """)
    text = result.text
    assert ("def forward(self, x, use_act: Optional[torch.Tensor] = None, "
            "scale: Optional[torch.Tensor] = None):") in text
    assert "use_act_value: bool = self.use_act\n" in text
    assert "use_act_value = bool(use_act)" in text
    assert "scale_value = float(scale)" in text
    assert "if use_act_value and scale_value > 0.5:" in text
    assert "x.relu() * scale_value" in text
    assert result.changes[0].lifted == {"use_act": "use_act", "scale": "scale"}
    # A second run changes nothing.
    assert not rewrite_source(text, RewriteSettings([LiftBranchOnnx]), "m.py").changed


def test_string_mode_compared_with_literals_becomes_an_int_code() -> None:
    result = rewrite_onnx("""
        import torch.nn as nn
        from torch import Tensor
        class Pool(nn.Module):
            def __init__(self, mode: str = "avg"):
                super().__init__()
                self.mode = mode
            def forward(self, x: Tensor) -> Tensor:
                if self.mode == "avg":
                    return x.mean(1)
                if "max" != self.mode:
                    return x
                return x.amax(1)
        """)
    text = result.text
    assert "mode: Optional[Tensor] = None" in text
    assert '# mode codes: 0 = "avg", 1 = "max", -1 = any other value' in text
    assert 'mode_value: int = {"avg": 0, "max": 1}.get(self.mode, -1)' in text
    assert "if mode_value == 0:" in text
    assert "if 1 != mode_value:" in text


def test_string_mode_used_otherwise_is_not_lifted_with_a_reason() -> None:
    result = rewrite_onnx("""
        import torch.nn as nn
        import torch.nn.functional as F
        class Up(nn.Module):
            def __init__(self, mode: str = "nearest"):
                super().__init__()
                self.mode = mode
            def forward(self, x):
                if self.mode == "nearest":
                    return F.interpolate(x, scale_factor=2.0)
                return F.interpolate(x, scale_factor=2.0, mode=self.mode)
        """)
    assert not result.changed
    assert any("str setting used other than compared with string literals" in s.reason
               for s in result.skips)
    # The TorchScript target lifts it as Optional[str], as before.
    default = rewrite_source(result.text, RewriteSettings([LiftBranch]), "m.py")
    assert ": Optional[str] = None" in default.text


def test_torch_is_imported_when_the_file_cannot_name_tensor() -> None:
    result = rewrite_onnx("""
        from torch import nn
        class M(nn.Module):
            def __init__(self, flag=True):
                super().__init__()
                self.flag = flag
            def forward(self, x):
                return x if self.flag else -x
        """)
    assert "import torch\n" in result.text
    assert "flag: Optional[torch.Tensor] = None" in result.text


def test_default_target_keeps_the_torchscript_form(tmp_path: Path) -> None:
    assert select_rules(["lift-branch"]) == [LiftBranch]
    assert select_rules(["lift-branch"], "torchscript") == [LiftBranch]
    assert select_rules(["lift-branch"], "onnx") == [LiftBranchOnnx]
    folder = tmp_path / "lift-branch"
    shutil.copytree(FIXTURES / "lift-branch", folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    run([folder / "classic.in.py"], Options(rules=["lift-branch"], verify=False))
    assert (folder / "classic.in.py").read_text() == (folder / "classic.out.py").read_text()
    shutil.copy(FIXTURES / "lift-branch" / "classic.in.py", folder / "classic.in.py")
    run([folder / "classic.in.py"], Options(rules=["lift-branch"], verify=False, target="onnx"))
    assert "branch_testing: Optional[torch.Tensor] = None" in (
        folder / "classic.in.py").read_text()


# ---- configuration -----------------------------------------------------------------------------

def _pyproject(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_target_key(tmp_path: Path) -> None:
    assert load_config(_pyproject(tmp_path, "[tool.tsfix]\n")).target == "torchscript"
    assert load_config(_pyproject(tmp_path, '[tool.tsfix]\ntarget = "onnx"\n')).target == "onnx"
    assert load_config(_pyproject(tmp_path, '[tool.tsfix]\ntarget = "export"\n')
                       ).target == "export"
    with pytest.raises(ConfigError, match=r"target: expected one of 'torchscript', 'onnx', "
                                          r"'export', got 'tflite'"):
        load_config(_pyproject(tmp_path, '[tool.tsfix]\ntarget = "tflite"\n'))
    with pytest.raises(ConfigError, match="target: expected str"):
        load_config(_pyproject(tmp_path, "[tool.tsfix]\ntarget = 1\n"))


def test_missing_onnx_extra_is_a_usage_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_onnxruntime(name: str, *args: Any) -> Any:
        return None if name == "onnxruntime" else real(name, *args)

    monkeypatch.setattr(engine.importlib.util, "find_spec", without_onnxruntime)
    model = tmp_path / "m.py"
    model.write_text("import torch.nn as nn\n")
    with pytest.raises(ConfigError, match=r"onnxruntime is not installed: "
                                          r"pip install 'tsfix\[onnx\]'"):
        run([model], Options(target="onnx"))
    # Without validation nothing needs onnx.
    run([model], Options(target="onnx", verify=False))

    from click.testing import CliRunner
    from tsfix.cli.main import main as cli_main

    outcome = CliRunner().invoke(cli_main, ["apply", "--target", "onnx", str(model)])
    assert outcome.exit_code == 2
    assert "pip install 'tsfix[onnx]'" in outcome.output
    assert "Traceback" not in outcome.output


def test_target_is_part_of_the_cache_key() -> None:
    from tsfix.codemods.pipeline.cache import Cache
    from tsfix.codemods.pipeline.settings import RunSettings

    def key(**settings: object) -> str:
        cache = Cache.for_run(Path("/unused"), RunSettings(("lift-branch",),
                                                           **settings))  # type: ignore[arg-type]
        return cache.key(b"content", "{}")

    assert key(target="onnx") != key(target="torchscript")
    # What does not change a file's outcome is not in the key: --diff and --check runs
    # answer from a write run's cache.
    assert key(mode="diff") == key(mode="write") == key()
    assert key(unsafe_fixes=True) != key()


# ---- branches in the exported graph ------------------------------------------------------------

def _graph(*nodes: Any, inputs: tuple[str, ...] = ("x", "flag")) -> Any:
    onnx = pytest.importorskip("onnx")
    helper = onnx.helper
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "then", [],
                                    [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT,
                                                                   None)])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "else", [],
                                    [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT,
                                                                   None)])
    built = [helper.make_node(op, ins, outs, **({"then_branch": then_branch,
                                                  "else_branch": else_branch}
                                                 if op == "If" else {}))
             for op, ins, outs in nodes]
    graph = helper.make_graph(
        built, "g", [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                     for name in inputs],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    return helper.make_model(graph)


def test_an_if_on_the_flag_counts() -> None:
    from tsfix.codemods.validation.onnx_export import count_nodes, undecided_inputs

    model = _graph(("Cast", ["flag"], ["c"]), ("If", ["c"], ["y"]))
    assert undecided_inputs(model, ["flag"]) == []
    assert count_nodes(model.graph, "If") == 1


def test_a_graph_without_an_if_on_the_flag_is_undecided() -> None:
    from tsfix.codemods.validation.onnx_export import undecided_inputs

    # The flag is only arithmetic: the export kept one path.
    model = _graph(("Mul", ["x", "flag"], ["y"]))
    assert undecided_inputs(model, ["flag"]) == ["flag"]
    # An If on whether the optional input is present is not a branch on the setting.
    presence = _graph(("OptionalHasElement", ["flag"], ["p"]), ("If", ["p"], ["y"]))
    assert undecided_inputs(presence, ["flag"]) == ["flag"]
    # An input the exporter dropped is undecided too.
    assert undecided_inputs(_graph(("Neg", ["x"], ["y"]), inputs=("x",)), ["flag"]) == ["flag"]


def test_a_loop_on_an_int_setting_counts() -> None:
    from tsfix.codemods.validation.onnx_export import undecided_inputs

    model = _graph(("Less", ["x", "flag"], ["c"]), ("Loop", ["", "c"], ["y"]))
    assert undecided_inputs(model, ["flag"]) == []


# ---- validation under --target onnx (torch, onnx, onnxruntime) ---------------------------------

_ORIGINAL = """
import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self, double: bool = True):
        super().__init__()
        self.double = double
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return y * 2.0 if self.double else y
"""

# Eager-, TorchScript- and one-artifact-correct, but the flag is arithmetic, not a branch.
_NO_BRANCH = """
from typing import Optional

import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self, double: bool = True):
        super().__init__()
        self.double = double
        self.fc = nn.Linear(4, 4)

    def forward(self, x, double: Optional[torch.Tensor] = None):
        factor = torch.tensor(2.0 if self.double else 1.0)
        if double is not None:
            factor = double.float() + 1.0
        return self.fc(x) * factor
"""


def _validate(tmp_path: Path, rewritten: str, target: str) -> tuple[str, str]:
    path = tmp_path / "gate.py"
    path.write_text(_ORIGINAL)
    example = Example.from_json({
        "key": "gate.py:Gate", "init": [{"double": True}, {"double": False}],
        "inputs": [{"__tensor__": {"fn": "randn", "shape": [2, 4], "dtype": None}}],
        "kwargs": {}})
    job = ValidationJob(0, str(path), rewritten, (
        JobClass("Gate", example, ("lift-branch",), {"double": "double"}),), target=target)
    with WorkerPool(1) as pool:
        verdict = pool.validate([job], timeout=300)[0][0]
    return verdict.verdict, verdict.reason


@pytest.mark.slow
def test_export_without_an_if_on_the_lifted_flag_is_rejected(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    verdict, reason = _validate(tmp_path, _NO_BRANCH, "onnx")
    assert verdict == "rejected", reason
    # Eager parity, re-script, the one artifact, save/load and onnxruntime parity all hold:
    # only the branch check catches it.
    assert reason.startswith("onnx: no If node decides on the lifted double"), reason
    # lift-branch's own rewrite of the same class keeps the If, and verifies.
    lifted = rewrite_onnx(_ORIGINAL).text
    assert "double: Optional[torch.Tensor] = None" in lifted
    verdict, reason = _validate(tmp_path, lifted, "onnx")
    assert verdict == "verified", reason
    assert "each lifted input decides a branch" in reason


@pytest.mark.slow
def test_lift_branch_fixtures_validate_under_onnx(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    folder = tmp_path / "lift-branch"
    shutil.copytree(FIXTURES / "lift-branch", folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    # The configuration key, not an option, selects the target here.
    with (folder / "pyproject.toml").open("a") as config:
        config.write('\n[tool.tsfix]\ntarget = "onnx"\n')
    result = run([folder], Options(rules=["lift-branch"], mode="diff", jobs=2))
    classes = result.classes()
    expected = {"CustomModel": 2, "PoolingClassifierHead": 3, "SparseDenoiseBlock": 4,
                "TransformerBlock": 4, "GatedFusion": 2, "DetectionHead": 2, "ResidualBlock": 2,
                "SegHead": 4}
    # A layer count lifted for range() and `<` scripts, but the TorchScript-based ONNX
    # exporter cannot export the int tensor's comparisons ("bitwise" ops): rejected, not
    # written.
    refused = {"StackedRefiner"}
    assert {c.class_name for c in classes} == set(expected) | refused
    for c in classes:
        if c.class_name in refused:
            assert c.verdict == "rejected" and c.reason.startswith("onnx: "), c.reason
            continue
        assert c.verdict == "verified", (c.class_name, c.reason)
        assert "each lifted input decides a branch" in c.reason, c.reason
        assert (f"onnxruntime parity for {expected[c.class_name]} configuration(s)"
                in c.reason), c.reason
        assert "Optional[Tensor]" in c.summary
