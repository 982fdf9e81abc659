"""`tsfix check`: the linter's codes on the blocker fixture, exit codes, JSON and SARIF."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tsfix.codemods.lint.check import CODES, check_paths, check_source, to_json, to_sarif
from tsfix.codemods.lint.codes import LINT_CODES, rule_of_code
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.rules.registry import ALL_RULES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "check"
BLOCKERS = FIXTURES / "blockers.py"
CLEAN = FIXTURES / "clean.py"


def marked(path: Path) -> set[tuple[int, str]]:
    """(line, code) for every `# TSFnnn` marker comment in a fixture."""
    found = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = re.search(r"#((?: TSF\d{3})+)\s*$", line)
        if match:
            found.update((number, code) for code in match.group(1).split())
    return found


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tsfix.cli.main", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_blocker_fixture_yields_exactly_the_marked_findings() -> None:
    findings = check_source(BLOCKERS.read_text(), "blockers.py")
    assert {(f.line, f.code) for f in findings} == marked(BLOCKERS)


def torchscript_codes() -> set[str]:
    """Every code check reports under --target torchscript: codes of rules that serve only
    --target export (a data-dependent branch scripts) are tested in test_export_lint.py."""
    export_only = {code.code for rule in ALL_RULES.values()
                   if "torchscript" not in rule.targets for code in rule.CODES}
    return set(CODES) - export_only


def test_every_code_has_a_blocker_in_the_fixture() -> None:
    # The fixture's classes fail torch.jit.script.
    assert {code for _, code in marked(BLOCKERS)} == torchscript_codes()


def test_codes_are_the_linters_and_those_the_rules_declare() -> None:
    for code in CODES.values():
        assert code.summary and code.help and code.name
        if code.code.startswith("TSF1"):
            # The linter's own; a rule may declare one it fixes at some sites (a nested def),
            # and the linter still reports the sites that rule does not report.
            handler = rule_of_code(code.code)
            assert handler is None or handler in ALL_RULES, code.code
            assert code.code in {c.code for c in LINT_CODES}, code.code
        else:
            assert code.code.startswith("TSF2") and rule_of_code(code.code) in ALL_RULES
    declared = [c.code for rule in ALL_RULES.values() for c in rule.CODES]
    assert len(declared) == len(set(declared)), "a code is declared by two rules"
    assert set(CODES) == {c.code for c in LINT_CODES} | set(declared)


def test_a_site_the_rule_refuses_names_the_reason_not_the_rule() -> None:
    """check once promised modulelist-iter for a site the rule refuses (an element used other
    than by calling it)."""
    source = textwrap.dedent("""\
        import torch.nn as nn


        class Stack(nn.Module):
            def __init__(self, n=3):
                super().__init__()
                self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])

            def forward(self, x, k: int):
                return x @ self.blocks[k].weight
        """)
    [finding] = [f for f in check_source(source, "stack.py") if f.code == "TSF201"]
    assert finding.fix is None
    assert finding.refused.startswith("modulelist-iter: ")
    assert "(not fixed: modulelist-iter: " in finding.text()


def test_export_methods_are_compiled_and_fixed_there() -> None:
    source = textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Head(nn.Module):
            def forward(self, x):
                return x

            @torch.jit.export
            def flatten(self, x):
                return x.view(*x.shape[:1], -1)
        """)
    [finding] = [f for f in check_source(source, "head.py") if f.code == "TSF214"]
    assert (finding.line, finding.fix) == (11, "starred-args")


def test_after_apply_every_remaining_finding_is_one_no_rule_fixes(tmp_path: Path) -> None:
    """The promise of check: what it calls fixable, apply fixes. Over every rule's fixture
    inputs, after `apply --rule all --unsafe-fixes --no-verify`, nothing is left fixable."""
    root = Path(__file__).resolve().parent.parent / "fixtures"
    inputs = sorted(root.rglob("*.in.py"))
    assert len(inputs) > 30
    for path in inputs:
        target = tmp_path / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    applied = run([str(tmp_path)], Options(rules=["all"], verify=False, unsafe_fixes=True))
    assert applied.exit_code == 0
    left = check_paths([tmp_path])
    assert left.errors == []
    assert [f.text() for f in left.findings if f.fix] == []


def test_clean_fixture_has_no_findings() -> None:
    assert check_source(CLEAN.read_text(), "clean.py") == []


def test_findings_carry_class_method_and_one_based_column() -> None:
    source = textwrap.dedent("""\
        import torch.nn as nn


        class Net(nn.Module):
            def forward(self, x):
                return self.helper(x)

            def helper(self, x):
                f = lambda t: t
                return f(x)

            def unused_helper(self, x):
                g = lambda t: t
                return g(x)
        """)
    [finding] = check_source(source, "net.py")
    assert (finding.line, finding.column, finding.code) == (9, 13, "TSF102")
    assert (finding.class_name, finding.method) == ("Net", "helper")
    assert finding.text() == ("net.py:9:13: TSF102 lambda in helper() "
                              "(fix: tsfix apply --rule lambda-inline)")


def test_scripting_guards_hide_semantic_blockers_but_not_syntax_ones() -> None:
    source = textwrap.dedent("""\
        import numpy as np
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def forward(self, x):
                if torch.jit.is_tracing():
                    x = x * np.pi
                if not torch.jit.is_scripting():
                    x = x * np.pi
                    try:
                        x = x + 1
                    except RuntimeError:
                        pass
                if torch.jit.is_scripting():
                    return x
                return x * np.e
        """)
    found = [(f.line, f.code) for f in check_source(source, "net.py")]
    # is_tracing() code is compiled (measured); try fails even under the guard.
    assert found == [(9, "TSF205"), (12, "TSF101")]


def test_non_module_classes_and_ignored_methods_are_not_checked() -> None:
    source = textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Plain:
            def forward(self, x):
                return lambda: x


        class Net(nn.Module):
            def forward(self, x):
                return self.debug(x)

            @torch.jit.ignore
            def debug(self, x):
                return [lambda: x]
        """)
    assert check_source(source, "net.py") == []


# ---- CLI: exit codes, formats ------------------------------------------------------------------

def project(tmp_path: Path) -> Path:
    shutil.copy(BLOCKERS, tmp_path / "blockers.py")
    shutil.copy(CLEAN, tmp_path / "clean.py")
    return tmp_path


def test_cli_text_output_and_exit_one(tmp_path: Path) -> None:
    done = cli("check", ".", cwd=project(tmp_path))
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(check_source(BLOCKERS.read_text(), "blockers.py"))
    assert all(re.match(r"^blockers\.py:\d+:\d+: TSF\d{3} ", line) for line in lines)
    assert any(line.startswith("blockers.py:160:17: TSF201 ") and line.endswith(
        "(fix: tsfix apply --rule modulelist-iter)") for line in lines), lines
    assert "2 files" in done.stderr


def test_cli_clean_file_exits_zero(tmp_path: Path) -> None:
    done = cli("check", "clean.py", cwd=project(tmp_path))
    assert (done.returncode, done.stdout) == (0, "")


def test_cli_unparsable_file_is_an_error_and_the_batch_goes_on(tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "broken.py").write_text("import torch.nn as nn\nx = 1 +* 2\n")
    done = cli("check", "broken.py", "blockers.py", cwd=tmp_path)
    assert done.returncode == 3
    assert "error: broken.py:2:" in done.stderr and "cannot parse" in done.stderr
    assert "blockers.py:" in done.stdout and "Traceback" not in done.stderr


def test_cli_ignore_and_unknown_code(tmp_path: Path) -> None:
    project(tmp_path)
    source = "import torch.nn as nn\n\n\nclass N(nn.Module):\n    def forward(self, x):\n" \
             "        f = lambda t: t\n        return f(x)\n"
    (tmp_path / "one.py").write_text(source)
    assert cli("check", "--ignore", "TSF102", "one.py", cwd=tmp_path).returncode == 0
    bad = cli("check", "--ignore", "TSF999", "one.py", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown code" in bad.stderr


def test_cli_honours_config_exclude_and_bad_config(tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.tsfix]\nexclude = ["blockers.py"]\n')
    assert cli("check", ".", cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.tsfix]\nnot-a-key = 1\n')
    done = cli("check", ".", cwd=tmp_path)
    assert done.returncode == 2 and "unknown key" in done.stderr


def test_json_output_shape(tmp_path: Path) -> None:
    done = cli("check", "--output-format", "json", ".", cwd=project(tmp_path))
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert data["exit_code"] == 1 and data["files"] == 2 and data["errors"] == []
    first = data["findings"][0]
    assert set(first) == {"path", "line", "column", "code", "name", "level", "message", "fix",
                          "refused", "class", "method"}
    assert {f["code"] for f in data["findings"]} == torchscript_codes()
    branch = next(f for f in data["findings"]
                  if f["code"] == "TSF204" and f["class"] == "ConfigBranch")
    assert (branch["level"], branch["fix"], branch["class"]) == ("warning", "lift-branch",
                                                                "ConfigBranch")


def test_sarif_output_has_the_required_fields(tmp_path: Path) -> None:
    done = cli("check", "--output-format", "sarif", ".", cwd=project(tmp_path))
    assert done.returncode == 1
    sarif = json.loads(done.stdout)
    assert sarif["version"] == "2.1.0" and "sarif-2.1.0" in sarif["$schema"]
    [run] = sarif["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "tsfix"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert set(rule_ids) == torchscript_codes()
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["help"]["text"]
    for result in run["results"]:
        assert result["level"] in ("error", "warning")
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        assert result["message"]["text"]
        [location] = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] == "blockers.py"   # relative
        assert physical["region"]["startLine"] >= 1 and physical["region"]["startColumn"] >= 1


def test_sarif_reports_unreadable_files_as_notifications(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("class A(:\n")
    result = check_paths([tmp_path / "broken.py"])
    assert result.exit_code == 3
    sarif = to_sarif(result, "0")
    invocation = sarif["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert "cannot parse" in invocation["toolExecutionNotifications"][0]["message"]["text"]
    assert to_json(result)["errors"] == result.errors


def test_help_imports_neither_libcst_nor_torch() -> None:
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys\nfrom tsfix.cli.main import main\n"
         "for args in (['--help'], ['check', '--help'], ['explain', '--help']):\n"
         "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
         "print(sorted(m for m in ('libcst', 'black', 'torch') if m in sys.modules))"],
        capture_output=True, text=True, cwd="/", timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[-1] == "[]"


# ---- the fixture's claims, measured ------------------------------------------------------------

SCRIPT_EACH_CLASS = """
import importlib.util, inspect, json, sys, warnings
warnings.filterwarnings("ignore")
import torch
outcome = {}
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("fixture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, cls in vars(module).items():
        if inspect.isclass(cls) and issubclass(cls, torch.nn.Module) \\
                and cls.__module__ == "fixture":
            try:
                torch.jit.script(cls())
                outcome[name] = "scripts"
            except Exception as exc:
                outcome[name] = "fails: " + type(exc).__name__
print(json.dumps(outcome))
"""


@pytest.mark.slow
def test_every_flagged_class_fails_to_script_and_clean_ones_script() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT_EACH_CLASS, str(BLOCKERS), str(CLEAN)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.splitlines()[-1])
    # Scripts, but loses a branch on export (TSF204) / fails when called (TSF207); and the
    # annotated form of TSF207, which has no finding.
    scripting = {"ConfigBranch", "UntypedNoneDefault", "OptionalParam"}
    findings = check_source(BLOCKERS.read_text(), "blockers.py")
    flagged = {f.class_name for f in findings}
    for name, result in outcome.items():
        if name in scripting or name in ("WorksList", "ConvWithFunctional", "GuardedRnn"):
            assert result == "scripts", (name, result)
        else:
            assert name in flagged and result.startswith("fails"), (name, result)


def test_cli_warns_about_a_folder_without_python_files(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = cli("check", "empty", cwd=tmp_path)
    assert done.returncode == 0
    assert "warning: " in done.stderr and "empty" in done.stderr


def test_a_file_name_with_a_newline_stays_one_finding_per_line(tmp_path: Path) -> None:
    source = ("import torch.nn as nn\n\n\nclass N(nn.Module):\n    def forward(self, x):\n"
              "        f = lambda t: t\n        return f(x)\n")
    (tmp_path / "two\nlines.py").write_text(source)
    done = cli("check", ".", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "two\\nlines.py:6:13: TSF102 lambda in forward() (fix: tsfix apply --rule lambda-inline)"]


# ---- types TorchScript cannot merge: TSF118 returns, TSF119 re-bindings ------------------------

# Each class: the (method-relative) codes check reports, measured on torch 2.13 by the slow test
# below (a class with a code fails torch.jit.script, one without scripts).
TYPE_CASES = textwrap.dedent("""\
    from typing import Final, List, Optional

    import torch
    import torch.nn as nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


    class SameBlockRebind(nn.Module):
        def forward(self, x):
            x = x.shape
            x = len(x)
            return torch.zeros(x)


    class NestedIntToFloat(nn.Module):
        def __init__(self, half: bool = True):
            super().__init__()
            self.half = half

        def forward(self, x):
            scale = 1
            if self.half:
                scale = 0.5  # TSF119
            return x * scale


    class NestedSameType(nn.Module):
        def forward(self, x):
            y = x
            if x.dim() > 1:
                y = x * 2
            return y


    class LoopTargetRebinds(nn.Module):
        def forward(self, x):
            i = x
            for i in range(3):  # TSF119
                x = x + i
            return x


    class WithIsNoBlock(nn.Module):
        def forward(self, x):
            with torch.no_grad():
                x = x.shape
            return x


    class OptionalFilled(nn.Module):
        def forward(self, x, h: Optional[torch.Tensor] = None):
            if h is None:
                h = torch.zeros_like(x)
            y = x
            if h is not None:
                y = h
            return x + h + y


    class TensorToNone(nn.Module):
        def forward(self, x):
            y = x
            if x.dim() > 3:
                y = None  # TSF119
            return x


    class PackedInLoop(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(4, 4, batch_first=True)

        def forward(self, x, lengths: torch.Tensor):
            for _ in range(2):
                x = pack_padded_sequence(x, lengths, batch_first=True)  # TSF119
                x, _ = self.rnn(x)  # TSF119
                x, _ = pad_packed_sequence(x, batch_first=True)
            return x


    class PackedStraight(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(4, 4, batch_first=True)

        def forward(self, x, lengths: torch.Tensor):
            x = pack_padded_sequence(x, lengths, batch_first=True)
            x, _ = self.rnn(x)
            x, _ = pad_packed_sequence(x, batch_first=True)
            return x


    class ReturnsMoreWithFlag(nn.Module):
        def __init__(self, return_skip: bool = False):
            super().__init__()
            self.return_skip = return_skip

        def forward(self, x):
            if self.return_skip:
                return x, x + 1
            else:
                return x  # TSF118


    class ConstantFlag(nn.Module):
        return_skip: Final[bool]

        def __init__(self, return_skip: bool = False):
            super().__init__()
            self.return_skip = return_skip

        def forward(self, x):
            if self.return_skip:
                return x, x + 1
            return x


    class ReturnsNonePadded(nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                return x, x
            if x.dim() > 2:
                return x, None
            return x, x * 2


    class ReturnsIntOrFloat(nn.Module):
        def forward(self, x):
            if x.dim() > 2:
                return 1
            return 0.5  # TSF118


    class ReturnsTupleAnnotatedTensor(nn.Module):
        def forward(self, x) -> torch.Tensor:
            return self.helper(x)[0]

        def helper(self, x) -> torch.Tensor:
            if x.dim() > 2:
                return x, x  # TSF118
            return x
    """)



def type_cases_expected() -> dict[str, set[tuple[int, str]]]:
    """Class -> the (line, code) its marker comments name (none: the class scripts)."""
    expected: dict[str, set[tuple[int, str]]] = {}
    current = ""
    for number, line in enumerate(TYPE_CASES.splitlines(), 1):
        match = re.match(r"class (\w+)", line)
        if match:
            current = match.group(1)
            expected[current] = set()
        for code in re.findall(r"# (TSF\d{3})", line):
            expected[current].add((number, code))
    return expected


def test_types_torchscript_cannot_merge_are_reported_where_it_points() -> None:
    findings = [f for f in check_source(TYPE_CASES, "types.py") if f.code in ("TSF118",
                                                                               "TSF119")]
    expected = type_cases_expected()
    got: dict[str, set[tuple[int, str]]] = {name: set() for name in expected}
    for finding in findings:
        got[finding.class_name].add((finding.line, finding.code))
    assert got == expected
    messages = {f.class_name: f.message for f in findings}
    assert messages["NestedIntToFloat"] == ("'scale' is an int from an enclosing block and is "
                                            "assigned a float here")
    assert messages["LoopTargetRebinds"] == ("'i' is a Tensor from an enclosing block and is "
                                             "assigned an int here")
    assert messages["ReturnsMoreWithFlag"] == ("forward() returns a Tensor here and a "
                                               "Tuple[Tensor, Tensor] on an earlier return")
    assert messages["ReturnsTupleAnnotatedTensor"] == (
        "helper() is annotated -> Tensor but returns a Tuple[Tensor, Tensor] here")
    packed = sorted(f.message for f in findings if f.class_name == "PackedInLoop")
    assert packed == ["'x' is a Tensor from an enclosing block and is assigned a "
                      "PackedSequence here"] * 2


SCRIPT_SOURCE = """
import importlib.util, inspect, json, sys, warnings
warnings.filterwarnings("ignore")
import torch
spec = importlib.util.spec_from_file_location("cases", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
outcome = {}
for name, cls in vars(module).items():
    if inspect.isclass(cls) and issubclass(cls, torch.nn.Module) and cls.__module__ == "cases":
        try:
            torch.jit.script(cls())
            outcome[name] = "scripts"
        except Exception as exc:
            outcome[name] = str(exc).strip().splitlines()[0]
print(json.dumps(outcome))
"""


@pytest.mark.slow
def test_the_type_cases_fail_to_script_exactly_where_check_says(tmp_path: Path) -> None:
    cases = tmp_path / "types.py"
    cases.write_text(TYPE_CASES)
    done = subprocess.run([sys.executable, "-c", SCRIPT_SOURCE, str(cases)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout.splitlines()[-1])
    expected = type_cases_expected()
    assert set(outcome) == set(expected)
    for name, marks in expected.items():
        if not marks:
            assert outcome[name] == "scripts", (name, outcome[name])
        elif {code for _, code in marks} == {"TSF119"}:
            assert "previously had type" in outcome[name], (name, outcome[name])
        else:
            assert re.match(r"(Previous return statement|Return value was annotated)",
                            outcome[name]), (name, outcome[name])
