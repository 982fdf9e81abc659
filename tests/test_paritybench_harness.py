"""benchmarks/paritybench.py counts before/after correctly, on a synthetic ParityBench file.

``tests/data/paritybench/test_synthetic_models.py`` is written like ParityBench's generated files
(the ``_paritybench_helpers`` import, an absent third-party module, ``_mock_config``, a
``TESTCASES`` list) with four cases: one that scripts as it is once it has run (its forward
creates an attribute), one that ``float-arguments`` fixes (given its init args positionally),
one that fails before and after (``try`` in forward), and one whose input does not fit the
layer, so it fails eagerly and is excluded. No network and no ParityBench snapshot are needed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "paritybench"
FILE = "test_synthetic_models.py"


def harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paritybench_harness",
                                                  ROOT / "benchmarks" / "paritybench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_causes_are_read_from_torchscript_messages() -> None:
    pb = harness()
    assert pb.cause_of("RuntimeError: Module 'Net' has no attribute 'act'") == (
        "config or Python-object attributes")
    assert pb.cause_of("Expected integer literal for index. ModuleList/Sequential indexing "
                       "is only supported with integer literals") == "ModuleList index"
    assert pb.cause_of("Compiled functions can't take variable number of arguments or use "
                       "keyword-only arguments with defaults") == "syntax"
    assert pb.cause_of("Expected a value of type 'Tensor' for argument 'x' but instead found "
                       "type 'int'.") == "types and annotations"
    assert pb.cause_of("something else entirely") == "other"


@pytest.mark.slow
def test_before_and_after_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pb = harness()
    out = tmp_path / "result.json"
    assert pb.main(["5", "--source", str(DATA), "--workdir", str(tmp_path / "work"),
                    "--json", str(out), "--timeout", "300"]) == 0
    result = json.loads(out.read_text())
    summary = result["summary"]
    key = {name: f"{FILE}:{i}:{name}"
           for i, name in enumerate(("Scripts", "IntClip", "TryBlock", "WrongShape"))}
    cases = result["cases"]

    assert result["files"] == 1 and "paritybench_absent_module" in result["stubbed_modules"]
    assert summary["cases"] == 4
    assert summary["excluded"] == {"eager fails": 1}
    assert cases[key["WrongShape"]]["before"]["status"] == "eager fails"
    assert cases[key["WrongShape"]]["after"] is None
    assert summary["measured"] == 3

    assert cases[key["Scripts"]]["before"]["status"] == "pass"
    assert cases[key["Scripts"]]["after"]["status"] == "pass"
    assert cases[key["IntClip"]]["before"]["status"] == "script fails"
    assert cases[key["IntClip"]]["after"]["status"] == "pass"
    assert cases[key["TryBlock"]]["before"]["status"] == "script fails"
    assert cases[key["TryBlock"]]["after"]["status"] == "script fails"
    assert (summary["pass_before"], summary["pass_after"]) == (1, 2)
    assert summary["new_passes"] == [key["IntClip"]]
    assert summary["regressions"] == []
    assert summary["causes"]["after"]["counts"] == {"syntax": 1}
    assert sum(summary["causes"]["before"]["counts"].values()) == 2

    # Tables for the three classes that ran eagerly; the positional width became a keyword.
    assert result["tables"] == 3
    assert result["verdicts"]["rules"].get("float-arguments") == 1
    assert result["verdicts"]["verdicts"].get("verified") == 1
    assert result["tsfix"]["seconds"] > 0 and result["tsfix"]["peak_mb"] > 0
    report = capsys.readouterr().out
    assert "scripts with parity before: 1 (33.3%)   after: 2 (66.7%)" in report
    assert "regressions: 0" in report
