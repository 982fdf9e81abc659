"""``tsfix check --target export`` and ``tsfix explain --target export``: the codes reported
under the export target (the rules' export forms, no TorchScript-only TSF1xx), torch.export's
measured messages (EXPORT_ERRORS) and where an error is placed, and the CLI's ``--target``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import TWO_CONFIGS, pyproject_text
from tsfix.codemods.lint.check import CODES, Finding, check_paths, check_source
from tsfix.codemods.lint.codes import LINT_CODES
from tsfix.codemods.lint.explain import (
    CALL_FAILED,
    EXPORT_ERRORS,
    EXPORT_FAILED,
    EXPORTS,
    _explain,
    explain_class,
    explain_error,
)
from tsfix.codemods.rules.registry import select_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BLOCKERS = FIXTURES / "check" / "blockers.py"
LINT = {code.code for code in LINT_CODES}

# One class per construct that torch.export rejects, each with the line the error points at.
EXPORT_BLOCKERS = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class DataBranch(nn.Module):
        def forward(self, x):
            if x.abs().max() > 1.0:
                x = x / x.abs().max()
            return x


    class ItemLoop(nn.Module):
        def forward(self, x, n):
            for _ in range(int(n.max().item())):
                x = x * 0.5
            return x


    class ConfigBranch(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.use_act = use_act
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            x = self.lin(x)
            if self.use_act:
                x = torch.relu(x)
            return x
    """)


def codes(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tsfix.cli.main", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


# ---- check --target export ---------------------------------------------------------------------

def test_export_reports_no_torchscript_only_code_on_the_blockers() -> None:
    text = BLOCKERS.read_text()
    torchscript = check_source(text, "blockers.py")
    export = check_source(text, "blockers.py", target="export")
    assert codes(torchscript) >= LINT             # the fixture has every linter code...
    assert not codes(export) & LINT               # ...and none is reported under export
    served = {code.code for rule in select_rules(["all"], "export") for code in rule.CODES}
    assert codes(export) <= served
    # What torch.export still needs fixed: the setting branch and numpy on a tensor.
    assert {"TSF204", "TSF205"} <= codes(export)
    # annotate and modulelist-iter do not serve export: their codes are gone.
    assert not codes(export) & {"TSF201", "TSF202", "TSF206", "TSF207", "TSF209", "TSF210"}


def test_export_fixes_name_the_target() -> None:
    findings = check_source(BLOCKERS.read_text(), "blockers.py", target="export")
    branch = next(f for f in findings if f.code == "TSF204" and f.class_name == "ConfigBranch")
    assert branch.fix == "lift-branch"
    assert "(fix: tsfix apply --target export --rule lift-branch)" in branch.text()
    # The TorchScript finding keeps its command as it was.
    plain = next(f for f in check_source(BLOCKERS.read_text(), "blockers.py")
                 if f.code == "TSF204" and f.class_name == "ConfigBranch")
    assert "(fix: tsfix apply --rule lift-branch)" in plain.text()


def test_data_dependent_codes_only_under_export() -> None:
    export = check_source(EXPORT_BLOCKERS, "m.py", target="export")
    by_class = {(f.class_name, f.code) for f in export}
    assert ("DataBranch", "TSF226") in by_class
    assert ("ItemLoop", "TSF227") in by_class
    assert not {"TSF226", "TSF227"} & codes(check_source(EXPORT_BLOCKERS, "m.py"))


def test_check_paths_takes_the_configured_target(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(EXPORT_BLOCKERS)
    (tmp_path / "pyproject.toml").write_text(pyproject_text(settings='target = "export"'))
    configured = check_paths([tmp_path])
    assert configured.target == "export" and "TSF226" in codes(configured.findings)
    given = check_paths([tmp_path], target="torchscript")
    assert "TSF226" not in codes(given.findings)


def test_cli_check_target_export_json_shape(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(EXPORT_BLOCKERS)
    plain = json.loads(cli("check", "--output-format", "json", ".", cwd=tmp_path).stdout)
    done = cli("check", "--target", "export", "--output-format", "json", ".", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == set(plain)
    assert set(data["findings"][0]) == set(plain["findings"][0])
    assert {"TSF226", "TSF227"} <= {f["code"] for f in data["findings"]}
    sarif = json.loads(cli("check", "--target", "export", "--output-format", "sarif", ".",
                           cwd=tmp_path).stdout)
    helps = {rule["id"]: rule["help"]["text"] for rule in sarif["runs"][0]["tool"]["driver"]
             ["rules"]}
    assert "tsfix apply --target export --rule data-dependent-branch" in helps["TSF226"]


def test_cli_target_is_accepted_by_apply_check_and_explain(tmp_path: Path) -> None:
    for command in ("apply", "check", "explain"):
        done = cli(command, "--help", cwd=tmp_path)
        assert done.returncode == 0 and "[torchscript|onnx|export]" in done.stdout, command
    assert "torch.export.export" in cli("apply", "--help", cwd=tmp_path).stdout
    (tmp_path / "m.py").write_text(EXPORT_BLOCKERS)
    done = cli("check", "--target", "bogus", ".", cwd=tmp_path)
    assert done.returncode == 2 and "bogus" in done.stderr
    done = cli("apply", "--target", "export", "--no-verify", "--dry-run", "m.py", cwd=tmp_path)
    assert done.returncode == 1, done.stderr          # changes would be made
    assert "torch.cond" in done.stdout and "Traceback" not in done.stderr
    assert (tmp_path / "m.py").read_text() == EXPORT_BLOCKERS


def test_explain_rejects_an_unknown_target(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(EXPORT_BLOCKERS)
    done = cli("explain", "--target", "tflite", "m.py:DataBranch", cwd=tmp_path)
    assert done.returncode == 2 and "tflite" in done.stderr


# ---- explain: torch.export's messages, placed ---------------------------------------------------

def known(message: str) -> tuple[str | None, str]:
    entry = next(k for k in EXPORT_ERRORS if re.search(k.pattern, message))
    return entry.code, entry.explanation


def test_export_table_codes_exist() -> None:
    assert all(entry.code is None or entry.code in CODES for entry in EXPORT_ERRORS)
    assert all(entry.code or entry.explanation for entry in EXPORT_ERRORS)


def test_export_error_is_placed_at_the_users_line_with_the_rule(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text(EXPORT_BLOCKERS)
    hints = [f for f in check_source(EXPORT_BLOCKERS, "m.py", target="export")
             if f.class_name == "DataBranch"]
    frames = [["/site-packages/torch/export/_trace.py", 2124], [str(model), 8],
              ["/site-packages/torch/fx/experimental/symbolic_shapes.py", 8203]]
    outcome = {"outcome": EXPORT_FAILED, "error_type": "GuardOnDataDependentSymNode",
               "error": "Could not guard on data-dependent expression Eq(u0, 1)",
               "frames": frames}
    result = _explain(outcome, "DataBranch", "m.py", model, EXPORT_BLOCKERS, hints, [],
                      "export")
    assert (result.line, result.code, result.fix) == (8, "TSF226", "data-dependent-branch")
    lines = result.lines()
    assert lines[0].startswith("m.py:8: DataBranch does not export")
    assert "fix: tsfix apply --target export --rule data-dependent-branch m.py" in lines
    assert result.exit_code == 1


def test_export_error_in_a_called_file_is_placed_there(tmp_path: Path) -> None:
    # asteroid's norms.py: dims from .tolist() (DPRNNTasNet fails torch.export there).
    helper = tmp_path / "norms.py"
    helper.write_text("import torch\n\n\ndef norm(x):\n"
                      "    dims = torch.arange(1, len(x.shape)).tolist()\n"
                      "    return x.mean(dim=dims, keepdim=True)\n")
    model = tmp_path / "m.py"
    text = ("import torch.nn as nn\nfrom norms import norm\n\n\nclass Net(nn.Module):\n"
            "    def forward(self, x):\n        return norm(x) * 2\n")
    model.write_text(text)
    frames = [[str(model), 7], [str(helper), 6], ["<string>", 1]]
    outcome = {"outcome": EXPORT_FAILED, "error_type": "GuardOnDataDependentSymNode",
               "error": "Could not extract specialized integer from data-dependent expression "
                        "u0", "frames": frames}
    result = _explain(outcome, "Net", "m.py", model, text, [], [], "export")
    assert (result.line, result.code) == (7, "TSF227")
    assert result.site.endswith("norms.py:6")
    assert "x.mean(dim=dims" in result.site_line
    assert any(line.startswith("    at ") and "norms.py:6" in line for line in result.lines())


def test_numpy_under_export_does_not_advise_ignore_numpy(tmp_path: Path) -> None:
    code, explanation = known(".numpy() is not supported for tensor subclasses.")
    assert code == "TSF205"
    assert "@torch.jit.ignore method does not hide it" in explanation
    assert "ignore-numpy" not in explanation


def test_exports_but_bakes_a_setting(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text(EXPORT_BLOCKERS)
    hints = [f for f in check_source(EXPORT_BLOCKERS, "m.py", target="export")
             if f.class_name == "ConfigBranch"]
    result = _explain({"outcome": EXPORTS, "calls": 2}, "ConfigBranch", "m.py", model,
                      EXPORT_BLOCKERS, hints, [], "export")
    assert result.exit_code == 1
    line = next(x for x in result.lines() if "keeps only the path" in x)
    assert line == ("m.py:28: exports, but torch.export keeps only the path of self.use_act "
                    "chosen at construction; fix: tsfix apply --target export --rule "
                    "lift-branch m.py")
    # The same class under torchscript: scripting keeps both sides; exit 0.
    scripted = _explain({"outcome": "scripts", "calls": 2}, "ConfigBranch", "m.py", model,
                        EXPORT_BLOCKERS, hints, [])
    assert scripted.exit_code == 0


def test_a_differing_exported_program_is_a_call_failure(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text(EXPORT_BLOCKERS)
    result = _explain({"outcome": CALL_FAILED, "error": "the exported program differs from "
                       "eager: output: max abs diff 1"}, "DataBranch", "m.py", model,
                      EXPORT_BLOCKERS, [], [], "export")
    assert "exports, but its exported program fails the examples" in result.lines()[0]
    assert result.exit_code == 1


def test_explain_error_under_export(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text(EXPORT_BLOCKERS)
    message = (f'Could not guard on data-dependent expression Eq(u0, 1)\n  File "{model}", '
               "line 8, in forward\n    if x.abs().max() > 1.0:")
    line = explain_error(message, model, "m.py", EXPORT_BLOCKERS, "DataBranch",
                         target="export")
    assert line == ("if on a tensor value [TSF226]; fix: tsfix apply --target export --rule "
                    "data-dependent-branch m.py")


def test_explain_error_does_not_recommend_a_rewrite_the_run_rejected(tmp_path: Path) -> None:
    """A model stops where data-dependent-branch's rewrite was rejected in the same run:
    running that rule again cannot be the advice."""
    model = tmp_path / "m.py"
    model.write_text(EXPORT_BLOCKERS)
    message = (f'Could not guard on data-dependent expression Eq(u0, 1)\n  File "{model}", '
               "line 8, in forward\n    if x.abs().max() > 1.0:")
    line = explain_error(message, model, "m.py", EXPORT_BLOCKERS, "DataBranch",
                         target="export",
                         rejected={"data-dependent-branch": "eager parity: max abs diff 2"})
    assert line == ("if on a tensor value [TSF226]; data-dependent-branch rewrote DataBranch in "
                    "this run and validation rejected it (eager parity: max abs diff 2): "
                    "change the code by hand")
    assert "tsfix apply" not in line
    # Another rule's rejection leaves the advice as it was.
    assert "fix: tsfix apply --target export --rule data-dependent-branch" in explain_error(
        message, model, "m.py", EXPORT_BLOCKERS, "DataBranch", target="export",
        rejected={"annotate": "does not script"})


def test_explaining_the_blockers_of_one_file_checks_it_once(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    import tsfix.codemods.lint.explain as explain

    checked: list[str] = []
    real = explain.check_source

    def counted(text: str, display: str, **kwargs: object) -> object:
        checked.append(display)
        return real(text, display, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(explain, "check_source", counted)
    explain._findings.cache_clear()
    model = tmp_path / "m.py"
    model.write_text(EXPORT_BLOCKERS)
    message = (f'Could not guard on data-dependent expression Eq(u0, 1)\n  File "{model}", '
               "line 8, in forward\n    if x.abs().max() > 1.0:")
    first = explain_error(message, model, "m.py", EXPORT_BLOCKERS, "DataBranch", target="export")
    again = explain_error(message, model, "m.py", EXPORT_BLOCKERS, "DataBranch", target="export")
    assert first == again and "TSF226" in first
    explain_error(message, model, "m.py", EXPORT_BLOCKERS + "\n", "DataBranch", target="export")
    assert checked == ["m.py", "m.py"]      # once per text: the changed text is checked again


# ---- measured on torch 2.13 (real torch, one child each) ---------------------------------------

MEASURE = textwrap.dedent("""\
    import importlib.util, json, logging, sys, warnings
    import numpy as np
    import torch, torch.nn as nn
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    spec = importlib.util.spec_from_file_location("blockers", sys.argv[1])
    blockers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(blockers)


    class FloatScale(nn.Module):
        def forward(self, x):
            return x * float(x.std())


    class NumpyOnTensor(nn.Module):
        def forward(self, x):
            return torch.from_numpy(np.tanh(x.numpy()))


    class CondAlias(nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x, (x,))


    class CondDtype(nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: (x > 0).long(), (x,))


    class PackPadded(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(4, 4, batch_first=True)

        def forward(self, x):
            lengths = (x[:, :, 0] != 0).sum(1)
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                       enforce_sorted=False)
            return self.rnn(packed)[1]


    def attempt(module, *args):
        try:
            torch.export.export(module, args)
            return None
        except Exception as exc:
            import traceback
            frames = "".join(f'\\nFile "{f.filename}", line {f.lineno}'
                             for f in traceback.extract_tb(exc.__traceback__))
            return str(exc) + frames

    x = torch.randn(2, 4)
    out = {}
    for name in sys.argv[2].split(","):
        out[name] = attempt(getattr(blockers, name)(), x)
    for cls in (FloatScale, NumpyOnTensor, CondAlias, CondDtype):
        out[cls.__name__] = attempt(cls(), x)
    out["PackPadded"] = attempt(PackPadded(), torch.randn(2, 5, 4))
    print(json.dumps(out))
    """)


def _lint_classes() -> dict[str, str]:
    """Class of blockers.py -> the linter code it is marked with."""
    found: dict[str, str] = {}
    current = ""
    for line in BLOCKERS.read_text().splitlines():
        match = re.match(r"class (\w+)", line)
        if match:
            current = match.group(1)
        for code in re.findall(r"TSF1\d\d", line):
            found.setdefault(current, code)
    return found


@pytest.mark.slow
def test_torchscript_only_codes_export_and_the_export_table_matches_torch(
        tmp_path: Path) -> None:
    """The decision in check.py's module doc, measured: every class of blockers.py marked with
    a linter code exports except TSF104 (a tensor formatted with a spec), TSF107 (forward is
    a generator) and TSF112's class (its break condition tests a tensor: TSF226), and
    EXPORT_ERRORS names each measured message."""
    classes = _lint_classes()
    script = tmp_path / "measure.py"
    script.write_text(MEASURE)
    done = subprocess.run([sys.executable, str(script), str(BLOCKERS), ",".join(classes)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    errors = json.loads(done.stdout.splitlines()[-1])
    failing = {classes[name] for name in classes if errors[name] is not None}
    assert failing == {"TSF104", "TSF107", "TSF112"}
    # BreakInModuleLoop breaks on `x.sum() > 100`: that test of a tensor fails, not the break.
    assert known(errors["BreakInModuleLoop"])[0] == "TSF226"
    assert known(errors["FormatSpec"])[1].startswith("An f-string formats a tensor")
    assert known(errors["Generator"])[1].startswith("forward returns a value torch.export")
    assert known(errors["FloatScale"])[0] == "TSF227"
    assert known(errors["NumpyOnTensor"])[0] == "TSF205"
    assert "returns one of its inputs" in known(errors["CondAlias"])[1]
    assert "different dtypes" in known(errors["CondDtype"])[1]
    assert known(errors["PackPadded"])[1].startswith("pack_padded_sequence needs")


@pytest.mark.slow
def test_explain_export_a_data_dependent_branch(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(EXPORT_BLOCKERS)
    (tmp_path / "pyproject.toml").write_text(pyproject_text(
        {"m.py:DataBranch": {"inputs": ["randn(2, 4)"]}}))
    result = explain_class(tmp_path / "m.py", "DataBranch", target="export", display="m.py")
    assert result.outcome == EXPORT_FAILED, result.error
    assert (result.line, result.code, result.fix) == (8, "TSF226", "data-dependent-branch")
    assert "Could not guard on data-dependent expression" in result.error
    assert result.exit_code == 1


@pytest.mark.slow
def test_explain_export_a_config_branch(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(EXPORT_BLOCKERS)
    (tmp_path / "pyproject.toml").write_text(pyproject_text(
        {"m.py:ConfigBranch": TWO_CONFIGS}))
    done = cli("explain", "--target", "export", "m.py:ConfigBranch", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("m.py: ConfigBranch exports with torch.export and its exported program "
                        "matches eager on 2 example calls")
    assert lines[1].startswith("m.py:28: exports, but torch.export keeps only the path of "
                               "self.use_act chosen at construction; fix: tsfix apply "
                               "--target export --rule lift-branch")
