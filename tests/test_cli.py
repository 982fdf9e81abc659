"""`tsfix apply` / `tsfix rules` end to end: modes, exit codes, report, bad input."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import (
    CLEAN_SOURCE,
    TWO_CONFIGS,
    Project,
    file_record,
    model_source,
    no_traceback,
)
from tsfix.codemods.pipeline.report import (
    ClassResult,
    FileResult,
    ModelRecord,
    ReasonGroup,
    RunResult,
    model_headline,
    reason_headline,
    repeated_models,
    repeated_reasons,
)
from tsfix.codemods.rules import registry
from tsfix.codemods.rules.base import ClassChange, Rule
from tsfix.codemods.rules.names import rule_summaries
from tsfix.codemods.rules.registry import ALL_RULES

MODEL = model_source()
ORIGINAL_TEST_LINE = "        if self.use_act:\n"
BROKEN = "import torch.nn as nn\nx = 1 +* 2\n\n\nclass B(nn.Module):\n    pass\n"  # line 2


def lifted(text: str) -> bool:
    """lift-branch rewrote the generated Net: forward() takes use_act and tests the local."""
    return ("use_act: Optional[bool] = None" in text and ORIGINAL_TEST_LINE not in text
            and "from typing import Optional" in text)


def class_span(text: str, class_name: str) -> tuple[int, int]:
    """1-based first and last line of a top-level class in ``text``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"class {class_name}("))
    end = start
    for i in range(start + 1, len(lines)):
        if lines[i] and not lines[i][0].isspace():
            break
        if lines[i].strip():
            end = i
    return start + 1, end + 1


# ---- tsfix rules -------------------------------------------------------------------------------

def test_rules_lists_lift_branch_with_summary(project: Project) -> None:
    result = project.cli("rules")
    no_traceback(result)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    line = next(line for line in lines if line.split()[0] == "lift-branch")
    assert line.split(None, 1)[1] == ALL_RULES["lift-branch"].summary
    assert len(lines) == len(ALL_RULES)


def test_rules_via_module_entry_point() -> None:
    probe = subprocess.run([sys.executable, "-m", "tsfix.cli.main", "rules"],
                           capture_output=True, text=True, cwd="/", timeout=120)
    assert probe.returncode == 0, probe.stderr
    # Listed in the order --rule all runs them.
    assert [line.split()[0] for line in probe.stdout.splitlines()] == list(ALL_RULES)
    # That order is each rule's declared place (a new rule takes its own, no list to edit),
    # and the ordering a rule relies on holds: numpy tests are translated before
    # data-dependent branches are lowered (one run does both).
    order = list(ALL_RULES)
    assert order == sorted(ALL_RULES, key=lambda name: ALL_RULES[name].order)
    assert order.index("numpy-to-torch") < order.index("data-dependent-branch")


def test_rule_names_table_matches_the_rule_classes() -> None:
    # `tsfix rules` prints the LibCST-free table; it must say what the rule classes say.
    assert {name: rule.summary for name, rule in ALL_RULES.items()} == rule_summaries()
    assert list(rule_summaries()) == list(ALL_RULES)


def test_help_and_rules_import_neither_libcst_nor_torch() -> None:
    # Start-up speed: `tsfix --help` / `tsfix rules` must not pay for LibCST, black or torch.
    probe = subprocess.run(
        [sys.executable, "-c",
         "import sys\n"
         "from tsfix.cli.main import main\n"
         "try:\n    main(['rules'])\nexcept SystemExit:\n    pass\n"
         "print(sorted(m for m in ('libcst', 'black', 'torch', 'numpy') if m in sys.modules))"],
        capture_output=True, text=True, cwd="/", timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[-1] == "[]"


# ---- --dry-run / --diff ------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--dry-run", "--diff"])
def test_dry_run_prints_diff_and_writes_nothing(project: Project, flag: str) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", MODEL)
    before = project.snapshot()

    result = project.cli("apply", flag, ".")

    no_traceback(result)
    assert result.exit_code == 1, result.output
    assert project.snapshot() == before  # bytes, mtime and mode; no stray temp files
    assert "would rewrite model.py" in result.stderr

    # The diff on stdout is exactly what a real run then writes.
    written = project.cli("apply", ".")
    assert written.exit_code == 0, written.output
    after = project.bytes("model.py").decode()
    assert lifted(after)
    expected = "".join(difflib.unified_diff(MODEL.splitlines(keepends=True),
                                            after.splitlines(keepends=True),
                                            fromfile="a/model.py", tofile="b/model.py"))
    assert result.stdout == expected


@pytest.mark.parametrize("flag", ["--dry-run", "--diff"])
def test_dry_run_on_clean_tree_exits_zero(project: Project, flag: str) -> None:
    project.pyproject()
    project.write("plain.py", CLEAN_SOURCE)
    before = project.snapshot()
    result = project.cli("apply", flag, ".")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert project.snapshot() == before


# ---- --check -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_check_pending_exits_one_without_diff(project: Project) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", MODEL)
    project.write("plain.py", CLEAN_SOURCE)
    before = project.snapshot()
    result = project.cli("apply", "--check", ".")
    no_traceback(result)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "@@" not in result.output
    assert "would rewrite model.py" in result.stderr
    assert "plain.py" not in result.stderr
    assert project.snapshot() == before


def test_check_clean_exits_zero(project: Project) -> None:
    project.pyproject()
    project.write("plain.py", CLEAN_SOURCE)
    before = project.snapshot()
    result = project.cli("apply", "--check", ".")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert project.snapshot() == before


# ---- plain apply -------------------------------------------------------------------------------

@pytest.mark.slow
def test_apply_writes_and_is_idempotent(project: Project) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", MODEL)
    project.write("plain.py", CLEAN_SOURCE)

    first = project.cli("apply", ".")
    no_traceback(first)
    assert first.exit_code == 0, first.output
    assert first.stdout == ""
    assert "rewrote model.py" in first.stderr
    text = project.bytes("model.py").decode()
    assert lifted(text)
    compile(text, "model.py", "exec")
    assert project.bytes("plain.py") == CLEAN_SOURCE.encode()

    after_first = project.snapshot()
    second = project.cli("apply", ".")
    no_traceback(second)
    assert second.exit_code == 0, second.output
    assert "rewrote" not in second.stderr
    assert project.snapshot() == after_first

    check = project.cli("apply", "--check", ".")
    assert check.exit_code == 0, check.output


@pytest.mark.slow
def test_quiet_prints_only_errors(project: Project) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", MODEL)
    project.write("broken.py", BROKEN)
    result = project.cli("apply", "-q", ".")
    no_traceback(result)
    assert result.exit_code == 3
    assert lifted(project.bytes("model.py").decode())
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert "broken.py" in result.stderr


def test_verbose_explains_rewrites_and_skips(project: Project) -> None:
    project.pyproject()
    # self.training is never lifted; -v says why.
    source = model_source(forward_lines=["if self.training:", "    x = x * 1.0"])
    project.write("model.py", source)
    result = project.cli("apply", "-v", "--no-verify", ".")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert "lifted self.use_act" in result.stderr
    assert "self.training" in result.stderr and "skipped" in result.stderr


# ---- --report ----------------------------------------------------------------------------------

def test_report_json_records_files_classes_and_counts(project: Project) -> None:
    project.pyproject()
    two_classes = model_source("First") + "\n\n" + model_source("Second", "use_norm").split(
        "\n\n\n", 1)[1]
    project.write("a.py", MODEL)
    project.write("b.py", two_classes)
    project.write("plain.py", CLEAN_SOURCE)
    project.write("broken.py", BROKEN)

    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", "--report",
                         "report.json", ".")
    no_traceback(result)
    report = json.loads(project.bytes("report.json"))

    assert result.exit_code == 3  # broken.py failed
    assert report["exit_code"] == result.exit_code
    assert report["mode"] == "write" and report["verify"] is False
    assert report["rules"] == ["lift-branch"]
    assert sorted(f["path"] for f in report["files"]) == ["a.py", "b.py", "broken.py",
                                                          "plain.py"]

    a = file_record(report, "a.py")
    assert a["status"] == "changed" and a["written"] is True and a["error"] is None
    [net] = a["classes"]
    assert net["rule"] == "lift-branch"
    assert net["class_name"] == "Net"
    assert tuple(net["lines"]) == class_span(MODEL, "Net")
    assert net["verdict"] == "unverified"
    assert "--no-verify" in net["reason"]
    assert net["lifted"] == {"use_act": "use_act"}

    b = file_record(report, "b.py")
    assert [c["class_name"] for c in b["classes"]] == ["First", "Second"]
    for c in b["classes"]:
        assert tuple(c["lines"]) == class_span(two_classes, c["class_name"])
        assert {"rule", "verdict", "reason", "summary"} <= set(c)

    broken = file_record(report, "broken.py")
    assert broken["status"] == "failed" and broken["written"] is False
    assert broken["error"].startswith("broken.py:") and "cannot parse" in broken["error"]
    assert broken["classes"] == []

    plain = file_record(report, "plain.py")
    assert plain["status"] == "unchanged" and plain["classes"] == []

    assert report["summary"] == {"files": 4, "changed": 2, "unchanged": 1, "failed": 1,
                                 "classes": 3, "verified": 0, "rejected": 0,
                                 "unverified": 3, "withheld": 0}


@pytest.mark.parametrize(("where", "why"), [
    ("missing-folder/report.json", "No such file or directory"),
    ("model.py/report.json", "Not a directory"),
    ("a-folder", "is a directory"),         # click's own check
])
def test_unwritable_report_path_fails_before_anything_is_written(project: Project,
                                                                  where: str, why: str) -> None:
    project.pyproject()
    project.write("model.py", MODEL)
    (project.root / "a-folder").mkdir()
    result = project.cli("apply", "--no-verify", "--report", where, ".")
    no_traceback(result)
    assert result.exit_code == 2, result.output
    assert why in result.stderr
    if "/" in where:
        assert result.stderr == f"error: cannot write the report to {where}: {why}\n"
    assert project.bytes("model.py") == MODEL.encode()
    assert not (project.root / "missing-folder").exists()


def test_report_of_a_dry_run_marks_nothing_written(project: Project) -> None:
    project.pyproject()
    project.write("model.py", MODEL)
    result = project.cli("apply", "--no-verify", "--dry-run", "--report", "report.json", ".")
    assert result.exit_code == 1, result.output
    record = file_record(json.loads(project.bytes("report.json")), "model.py")
    assert record["status"] == "changed" and record["written"] is False
    assert [c["written"] for c in record["classes"]] == [False]

    result = project.cli("apply", "--no-verify", "--report", "report.json", ".")
    assert result.exit_code == 0, result.output
    record = file_record(json.loads(project.bytes("report.json")), "model.py")
    assert record["written"] is True and [c["written"] for c in record["classes"]] == [True]


# ---- --no-verify never imports torch -----------------------------------------------------------

NO_TORCH_PROBE = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from tsfix.codemods.pipeline.engine import Options, run
    from tsfix.cli.main import main

    result = run([Path("model.py")], Options(verify=False, mode="check"))
    try:
        main(["apply", "--no-verify", "model.py"], standalone_mode=False)
        code = 0
    except SystemExit as exc:
        code = exc.code
    print(json.dumps({
        "torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")),
        "classes": [[c.verdict, c.reason] for c in result.classes()],
        "exit": code,
    }))
""")


def test_no_verify_never_imports_torch(project: Project) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", MODEL)
    probe = subprocess.run([sys.executable, "-c", NO_TORCH_PROBE], capture_output=True,
                           text=True, cwd=project.root, timeout=120)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["torch"] == []
    [[verdict, reason]] = found["classes"]
    assert verdict == "unverified"
    assert "--no-verify" in reason
    assert found["exit"] == 0
    assert lifted(project.bytes("model.py").decode())


# ---- bad input ---------------------------------------------------------------------------------

BAD_FILES = {
    "syntax-error-on-last-line": (
        b"import torch.nn as nn\n\n\nclass Bad(nn.Module):\n    def forward(self, x):\n"
        b"        return x +* 2\n", 6, "cannot parse"),
    # The usual case: more code follows the error. The message must still name line 6.
    "syntax-error-mid-file": (
        b"import torch.nn as nn\n\n\nclass Bad(nn.Module):\n    def forward(self, x):\n"
        b"        return x +* 2\n\n\nclass After(nn.Module):\n    pass\n", 6, "cannot parse"),
    "latin-1-without-cookie": (
        b"import torch.nn as nn\n\n\nclass Bad(nn.Module):\n    # caf\xe9 au lait\n"
        b"    pass\n", 5, "utf-8"),
    "latin-1-on-line-1": (
        b"# caf\xe9\nimport torch.nn as nn\n\n\nclass Bad(nn.Module):\n    pass\n", 1, ""),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_is_reported_and_others_still_rewritten(project: Project, case: str) -> None:
    content, line, wording = BAD_FILES[case]
    project.pyproject({"good.py:Net": TWO_CONFIGS, "zzz.py:Net": TWO_CONFIGS})
    project.write("bad.py", content)
    project.write("good.py", MODEL)
    project.write("zzz.py", MODEL)  # after bad.py in discovery order

    result = project.cli("apply", "--report", "report.json", ".")

    no_traceback(result)
    assert result.exit_code == 3, result.output
    errors = [e for e in result.stderr.splitlines() if e.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"error: bad.py:{line}:"), errors
    assert wording.lower() in errors[0].lower()
    assert project.bytes("bad.py") == content
    assert lifted(project.bytes("good.py").decode())
    assert lifted(project.bytes("zzz.py").decode())
    report = json.loads(project.bytes("report.json"))
    assert file_record(report, "bad.py")["status"] == "failed"
    assert file_record(report, "zzz.py")["status"] == "changed"


@pytest.mark.parametrize(("content", "error"), [
    # CPython's own location: the line of the missing colon, not the next token's.
    (b"import torch.nn as nn\n\nclass Bad(nn.Module)\n    def forward(self, x):\n"
     b"        return x\n", "bad.py:3:21: cannot parse: expected ':'"),
    (b"import torch.nn as nn\n\n\nclass Bad(nn.Module):\n    def forward(self, x):\n"
     b"        return (x\n\n\nclass After(nn.Module):\n    pass\n",
     "bad.py:6:16: cannot parse: '(' was never closed"),
    # Without a class the file is not rewritten, but it still cannot be read as Python.
    (b"x = 1\ndef f(\n    return 2\n", "bad.py:2:6: cannot parse: '(' was never closed"),
], ids=["missing-colon", "unclosed-bracket", "no-class"])
def test_syntax_errors_are_reported_where_python_reports_them(project: Project, content: bytes,
                                                               error: str) -> None:
    project.pyproject()
    project.write("bad.py", content)
    result = project.cli("apply", "--no-verify", "--rule", "all", ".")
    no_traceback(result)
    assert result.exit_code == 3, result.output
    assert [e for e in result.stderr.splitlines() if e.startswith("error")] == [f"error: {error}"]
    assert project.bytes("bad.py") == content


def test_unknown_rule_is_usage_error(project: Project) -> None:
    project.pyproject()
    project.write("model.py", MODEL)
    result = project.cli("apply", "--rule", "lift-brunch", ".")
    no_traceback(result)
    assert result.exit_code == 2
    assert "lift-brunch" in result.stderr
    for known in ALL_RULES:
        assert known in result.stderr
    assert project.bytes("model.py") == MODEL.encode()


def test_unknown_rule_in_the_configuration_is_an_error_even_with_rule_given(
        project: Project) -> None:
    # --rule overrides the configured rules, but a typo there is still a broken configuration.
    project.pyproject(settings='rules = ["lift-brnch"]')
    project.write("model.py", MODEL)
    result = project.cli("apply", "--no-verify", "--rule", "lift-branch", ".")
    no_traceback(result)
    assert result.exit_code == 2, result.output
    [error] = result.stderr.splitlines()
    assert error.startswith(f"error: {project.root / 'pyproject.toml'}: [tool.tsfix] rules: "
                            "unknown rule 'lift-brnch' (known: all, ")
    assert project.bytes("model.py") == MODEL.encode()


def test_comma_separated_rules_accepted(project: Project) -> None:
    project.pyproject()
    project.write("model.py", MODEL)
    result = project.cli("apply", "--no-verify", "--rule", "lift-branch,all", ".")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert lifted(project.bytes("model.py").decode())


@pytest.mark.slow
def test_bad_example_spec_fails_only_that_file(project: Project) -> None:
    project.pyproject({"bad.py:Net": {"inputs": ["randm(1, 3)"]}})
    project.write("bad.py", MODEL)
    project.write("good.py", MODEL)  # no examples: unverified, not written (unsafe, unproven)

    result = project.cli("apply", "--report", "report.json", ".")

    no_traceback(result)
    assert result.exit_code == 3, result.output
    [error] = [e for e in result.stderr.splitlines() if e.startswith("error: ")]
    assert 'tool.tsfix.examples."bad.py:Net"' in error
    assert "pyproject.toml" in error
    assert "randm" in error
    assert project.bytes("bad.py") == MODEL.encode()
    assert project.bytes("good.py") == MODEL.encode()
    report = json.loads(project.bytes("report.json"))
    bad = file_record(report, "bad.py")
    assert bad["status"] == "failed" and bad["written"] is False
    good = file_record(report, "good.py")
    assert good["written"] is False and good["classes"][0]["withheld"]
    # No table and no layer to guess an input from: unverified, with the table to add.
    assert good["classes"][0]["reason"].startswith("could not infer inputs: no first layer")
    assert 'add [tool.tsfix.examples."good.py:Net"]' in good["classes"][0]["reason"]


def test_example_table_naming_a_missing_class_fails_that_file(project: Project) -> None:
    project.pyproject({"model.py:Nett": TWO_CONFIGS})
    project.write("model.py", MODEL)
    project.write("plain.py", CLEAN_SOURCE)

    result = project.cli("apply", "--rule", "lift-branch", "--report", "report.json", ".")

    no_traceback(result)
    assert result.exit_code == 3, result.output
    assert [e for e in result.stderr.splitlines() if e.startswith("error")] == [
        f'error: {project.root / "pyproject.toml"}: [tool.tsfix.examples."model.py:Nett"] '
        "names no class Nett in model.py (it defines Net)"]
    assert project.bytes("model.py") == MODEL.encode()
    report = json.loads(project.bytes("report.json"))
    assert file_record(report, "model.py")["status"] == "failed"
    assert file_record(report, "plain.py")["status"] == "unchanged"


def test_a_bad_table_of_a_class_no_rule_rewrites_fails_its_file(project: Project) -> None:
    """A configured model's table is read even when no rule changes its file: a value that
    does not parse is an error naming the table, not a model silently left unchecked."""
    project.pyproject({"plain.py:Plain": {"inputs": ["randn(2, 4) > 0"]}})
    project.write("plain.py", CLEAN_SOURCE)

    result = project.cli("apply", "--rule", "all", "--report", "report.json", ".")

    no_traceback(result)
    assert result.exit_code == 3, result.output
    assert [e for e in result.stderr.splitlines() if e.startswith("error")] == [
        f'error: {project.root / "pyproject.toml"}: [tool.tsfix.examples."plain.py:Plain"] '
        "inputs[0]: expected a call like randn(2, 3) in 'randn(2, 4) > 0'"]
    assert project.bytes("plain.py") == CLEAN_SOURCE.encode()
    report = json.loads(project.bytes("report.json"))
    assert file_record(report, "plain.py")["status"] == "failed"


def test_example_table_naming_a_missing_file_fails(project: Project) -> None:
    project.pyproject({"modle.py:Net": TWO_CONFIGS, "elsewhere/gone.py:Net": TWO_CONFIGS})
    project.write("plain.py", CLEAN_SOURCE)
    project.write("sub/plain.py", CLEAN_SOURCE)

    result = project.cli("apply", "--rule", "lift-branch", ".")

    no_traceback(result)
    assert result.exit_code == 3, result.output
    assert [e for e in result.stderr.splitlines() if e.startswith("error")] == [
        f'error: {project.root / "pyproject.toml"}: [tool.tsfix.examples."elsewhere/gone.py:Net"]'
        " names a file that does not exist: elsewhere/gone.py",
        f'error: {project.root / "pyproject.toml"}: [tool.tsfix.examples."modle.py:Net"] '
        "names a file that does not exist: modle.py"]
    # A run over another folder is not about those tables.
    result = project.cli("apply", "--rule", "lift-branch", "sub")
    assert result.exit_code == 0, result.output


def test_unknown_tsfix_key_is_usage_error(project: Project) -> None:
    project.pyproject(settings='rulez = ["lift-branch"]')
    project.write("model.py", MODEL)
    result = project.cli("apply", ".")
    no_traceback(result)
    assert result.exit_code == 2
    assert "rulez" in result.stderr
    assert "pyproject.toml" in result.stderr
    assert project.bytes("model.py") == MODEL.encode()


def test_invalid_toml_is_usage_error(project: Project) -> None:
    project.write("pyproject.toml", "[tool.tsfix\n")
    project.write("model.py", MODEL)
    result = project.cli("apply", ".")
    no_traceback(result)
    assert result.exit_code == 2
    assert "pyproject.toml" in result.stderr and "TOML" in result.stderr
    assert project.bytes("model.py") == MODEL.encode()


def test_config_option_reads_given_file(project: Project) -> None:
    project.pyproject()  # the nearest one is fine ...
    project.write("conf/other.toml", '[tool.tsfix]\nrules = ["no-such-rule"]\n')
    project.write("model.py", MODEL)
    result = project.cli("apply", "--config", "conf/other.toml", ".")
    no_traceback(result)
    assert result.exit_code == 2  # ... but --config wins
    assert "no-such-rule" in result.stderr


@pytest.mark.slow
def test_constructor_raising_is_unverified_with_reason(project: Project) -> None:
    source = model_source(init_lines=['raise RuntimeError("constructor exploded")'])
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", source)
    result = project.cli("apply", "--report", "report.json", ".")
    no_traceback(result)
    [c] = file_record(json.loads(project.bytes("report.json")), "model.py")["classes"]
    assert c["verdict"] == "unverified"
    assert "constructor" in c["reason"] and "constructor exploded" in c["reason"]
    assert "unverified" in result.stderr and "constructor exploded" in result.stderr
    # Nothing ran, so nothing proved the lifted branch keeps eager results: not written, and
    # the run does not fail for it.
    assert result.exit_code == 0
    assert c["withheld"] and project.bytes("model.py") == source.encode()


# ---- --require-verified ------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "config"])
def test_require_verified_holds_back_unverified(project: Project, how: str) -> None:
    project.pyproject(settings="require-verified = true" if how == "config" else "")
    project.write("model.py", MODEL)
    args = ["apply", "--report", "report.json", "."]
    if how == "flag":
        args.insert(1, "--require-verified")
    result = project.cli(*args)
    no_traceback(result)
    assert result.exit_code == 3, result.output
    assert project.bytes("model.py") == MODEL.encode()
    record = file_record(json.loads(project.bytes("report.json")), "model.py")
    assert record["written"] is False
    [c] = record["classes"]
    assert c["verdict"] == "rejected"
    assert c["written"] is False
    assert "require-verified" in c["reason"] and "could not infer inputs" in c["reason"]


# ---- rejected by validation --------------------------------------------------------------------

# Nothing here for lift-branch; the test-only rule below breaks it for TorchScript.
SCALED = textwrap.dedent("""\
    class Scaled(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, x):
            return x * self.scale
""")


class _BreakingRule(Rule):
    """Test-only: adds to Scaled.forward a lambda, which TorchScript does not compile (eager
    parity holds), so validation must reject the rewrite at re-script, whatever the real
    rules guess."""

    name = "breaking"
    summary = "test rule whose rewrite does not script"

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if cls.name.value != "Scaled":
            return cls
        body = list(cls.body.body)
        for i, node in enumerate(body):
            if isinstance(node, cst.FunctionDef) and node.name.value == "forward":
                added = cst.parse_statement("unused = (lambda: 1)\n")
                body[i] = node.with_changes(body=node.body.with_changes(
                    body=[added, *node.body.body]))
                self.changes.append(ClassChange(self.name, cls.name.value,
                                                self.span_of(cls), self.summary))
                return cls.with_changes(body=cls.body.with_changes(body=body))
        return cls


@pytest.mark.slow
def test_rejected_rewrite_is_not_written_exit_three(project: Project,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ALL_RULES", {"lift-branch": ALL_RULES["lift-branch"],
                                                "breaking": _BreakingRule})
    header = "import torch\nimport torch.nn as nn\n\n\n"
    only_rejected = header + SCALED
    mixed = model_source("Good") + "\n\n" + SCALED
    scaled_examples = {"init": [{"scale": 2}, {"scale": 0}], "inputs": ["randn(2, 4)"]}
    project.pyproject({
        "only.py:Scaled": scaled_examples,
        "mixed.py:Scaled": scaled_examples,
        "mixed.py:Good": {"init": [{"use_act": True}, {"use_act": False}],
                          "inputs": ["randn(2, 4)"]},
    })
    project.write("only.py", only_rejected)
    project.write("mixed.py", mixed)

    result = project.cli("apply", "--report", "report.json", ".")

    no_traceback(result)
    assert result.exit_code == 3, result.output
    assert project.bytes("only.py") == only_rejected.encode()
    report = json.loads(project.bytes("report.json"))

    only = file_record(report, "only.py")
    assert only["status"] == "rejected" and only["written"] is False
    [c] = only["classes"]
    assert c["verdict"] == "rejected" and c["written"] is False
    assert "re-script" in c["reason"]

    record = file_record(report, "mixed.py")
    assert record["status"] == "changed" and record["written"] is True
    verdicts = {c["class_name"]: c for c in record["classes"]}
    assert verdicts["Good"]["verdict"] == "verified"
    assert verdicts["Scaled"]["verdict"] == "rejected"
    assert "re-script" in verdicts["Scaled"]["reason"]

    text = project.bytes("mixed.py").decode()
    compile(text, "mixed.py", "exec")
    assert "use_act: Optional[bool] = None" in text  # Good was rewritten ...
    assert text.endswith(SCALED)                      # ... Scaled left exactly as it was
    assert report["summary"]["rejected"] == 2 and report["summary"]["verified"] == 1
    assert "rejected" in result.stderr and "re-script" in result.stderr


class _Opportunist(Rule):
    """Test-only: rewrites Other (a change of what it computes) only in a text where Scaled
    is not broken: the rewrite appears when the final text leaves _BreakingRule's out."""

    name = "opportunist"
    summary = "test rule that rewrites Other when Scaled is intact"

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if cls.name.value != "Other" or "lambda" in self.source_module.code:
            return cls
        forward = next(n for n in cls.body.body if isinstance(n, cst.FunctionDef)
                       and n.name.value == "forward")
        added = cst.parse_statement("x = x + 1\n")
        new = forward.with_changes(body=forward.body.with_changes(
            body=[added, *forward.body.body]))
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        self.summary))
        return cls.with_changes(body=cls.body.with_changes(body=[
            new if n is forward else n for n in cls.body.body]))


@pytest.mark.slow
def test_a_rewrite_the_rules_make_only_in_the_final_text_is_not_written_unvalidated(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """hourglass-transformer: with lift-branch's rejected rewrite of Attention left out, the
    final text had variable-arguments rewrite PreNormResidual, which the run had refused in
    its first rewrite: written, never validated, reported only as a skip."""
    monkeypatch.setattr(registry, "ALL_RULES", {"breaking": _BreakingRule,
                                                "opportunist": _Opportunist})
    other = textwrap.dedent("""\


        class Other(nn.Module):
            def forward(self, x):
                return x * 2
        """)
    source = "import torch\nimport torch.nn as nn\n\n\n" + SCALED + other
    project.pyproject({"m.py:Scaled": {"init": [{"scale": 2}], "inputs": ["randn(2, 4)"]},
                       "m.py:Other": {"inputs": ["randn(2, 4)"]}})
    project.write("m.py", source)

    result = project.cli("apply", "--report", "report.json", "m.py")

    no_traceback(result)
    assert project.bytes("m.py") == source.encode(), "an unvalidated rewrite was written"
    record = file_record(json.loads(project.bytes("report.json")), "m.py")
    verdicts = {c["class_name"]: c for c in record["classes"]}
    assert verdicts["Scaled"]["verdict"] == "rejected"
    assert verdicts["Other"]["rule"] == "opportunist" and verdicts["Other"]["written"] is False
    assert "never validated" in verdicts["Other"]["withheld"], verdicts["Other"]


# ---- --unsafe-fixes and notes ------------------------------------------------------------------

class _NotingRule(Rule):
    """Test-only: rewrites forward() trivially, with a note saying whether unsafe fixes are on."""

    name = "noting"
    summary = "test rule with notes"

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        body = list(cls.body.body)
        for i, node in enumerate(body):
            if isinstance(node, cst.FunctionDef) and node.name.value == "forward":
                added = cst.parse_statement("x = x * 1.0\n")
                body[i] = node.with_changes(body=node.body.with_changes(
                    body=[added, *node.body.body]))
                self.changes.append(ClassChange(
                    self.name, cls.name.value, self.span_of(cls), self.summary,
                    notes=[f"unsafe fixes {'on' if self.unsafe_fixes else 'off'}",
                           "second note"]))
                return cls.with_changes(body=cls.body.with_changes(body=body))
        return cls


@pytest.fixture
def noting_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ALL_RULES", {"noting": _NotingRule})


@pytest.mark.parametrize(("flag", "setting", "expected"), [
    (False, "", "off"),
    (True, "", "on"),
    (False, "unsafe-fixes = true", "on"),
])
def test_unsafe_fixes_flag_and_setting(project: Project, noting_rule: None, flag: bool,
                                       setting: str, expected: str) -> None:
    project.pyproject(settings=setting)
    project.write("model.py", MODEL)
    args = ["apply", "--no-verify", "--report", "report.json", "."]
    if flag:
        args.insert(1, "--unsafe-fixes")
    result = project.cli(*args)
    no_traceback(result)
    assert result.exit_code == 0, result.output
    report = json.loads(project.bytes("report.json"))
    assert report["unsafe_fixes"] is (expected == "on")
    [c] = file_record(report, "model.py")["classes"]
    assert c["notes"] == [f"unsafe fixes {expected}", "second note"]


def test_unsafe_fixes_help_says_what_it_allows(project: Project) -> None:
    result = project.cli("apply", "--help")
    assert "--unsafe-fixes" in result.stdout
    assert "*args/**kwargs" in result.stdout


def test_notes_are_printed_under_their_class_unless_quiet(project: Project,
                                                          noting_rule: None) -> None:
    project.pyproject()
    project.write("model.py", MODEL)
    result = project.cli("apply", "--no-verify", "--dry-run", ".")
    no_traceback(result)
    lines = result.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if "Net [noting] unverified" in line)
    assert lines[at + 1:at + 3] == ["    note: unsafe fixes off", "    note: second note"]

    quiet = project.cli("apply", "--no-verify", "--dry-run", "-q", ".")
    no_traceback(quiet)
    assert "note:" not in quiet.stderr


def test_file_notes_are_printed_unless_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from tsfix.cli.main import _print_outcome
    from tsfix.codemods.pipeline.report import FileResult, RunResult

    file = FileResult(Path("m.py"), "m.py", notes=["no observed types for Net: boom"])
    result = RunResult([file], ["annotate"], "write", True, False)
    _print_outcome(result, quiet=False, verbose=False)
    assert "m.py: note: no observed types for Net: boom" in capsys.readouterr().err
    _print_outcome(result, quiet=True, verbose=False)
    assert "note:" not in capsys.readouterr().err


# ---- repeated reasons: said once without -v, each with -v, all in the report -------------------

def _guessed(name: str, missing: str) -> ClassResult:
    return ClassResult("annotate", name, (3, 9), "typed 1 parameter(s)", {}, "unverified",
                       f"could not infer inputs: the constructor needs arguments (TypeError: "
                       f"{name}.__init__() missing 1 required positional argument: "
                       f"'{missing}'); add [tool.tsfix.examples.\"{name.lower()}.py:{name}\"] "
                       "to pyproject.toml")


def test_a_reason_many_classes_share_is_said_once_without_verbose(project: Project) -> None:
    names = ["Alpha", "Beta", "Gamma", "Delta"]
    files = [FileResult(project.root / f"{n.lower()}.py", f"{n.lower()}.py", "changed",
                        classes=[_guessed(n, f"arg{i}")]) for i, n in enumerate(names)]
    rejected = ClassResult("lift-branch", "Net", (5, 20), "lifted self.use_act", {},
                           "rejected", "eager parity: output: max abs diff 0.5 for init[0]")
    files.append(FileResult(project.root / "net.py", "net.py", "changed", classes=[rejected]))
    report = project.root / "report.json"
    RunResult(files, ["annotate", "lift-branch"], "diff", True, False).write_json(report)

    short = project.cli("report", str(report))
    verbose = project.cli("report", "-v", str(report))

    no_traceback(short)
    lines = short.stderr.splitlines()
    assert ("unverified: could not infer inputs: the constructor needs arguments - 4 classes, "
            "e.g. alpha.py:Alpha, beta.py:Beta, gamma.py:Gamma; -v for each") in lines
    assert not any("Delta" in line for line in lines)
    # A reason one class has keeps its own line.
    assert ("net.py:5: Net [lift-branch] rejected: eager parity: output: max abs diff 0.5 for "
            "init[0]") in lines
    for i, name in enumerate(names):
        assert (f"{name.lower()}.py:3: {name} [annotate] unverified: could not infer inputs: the "
                f"constructor needs arguments (TypeError: {name}.__init__() missing 1 required "
                f"positional argument: 'arg{i}')") in verbose.stderr
    assert "-v for each" not in verbose.stderr
    kept = json.loads(report.read_text())
    assert len([c for f in kept["files"] for c in f["classes"]]) == 5


def test_reason_headlines_group_alike_reasons_only() -> None:
    assert reason_headline("eager parity holds, but the class does not script before or after "
                           "this rewrite, for a reason it does not fix: RuntimeError: 'x' is "
                           "not defined (at a.py line 3) (the rewrite fails with: ...); one "
                           "artifact served 1 of 1 calls in eager mode") == (
        "eager parity holds, but the class does not script before or after this rewrite, for "
        "a reason it does not fix: RuntimeError: '...' is not defined")
    files = [FileResult(Path(f"{n}.py"), f"{n}.py", "changed", classes=[
        ClassResult(rule, n, (1, 2), "", {}, "unverified", f"worker died: exit code {n}")
        for rule in ("annotate", "lift-branch")]) for n in ("1", "2")]
    # Two classes (one changed by two rules) are not enough to summarise.
    assert repeated_reasons(files) == []
    [group] = repeated_reasons(files, minimum=2)
    assert group == ReasonGroup("unverified", "worker died: exit code N", ("1.py:1", "2.py:2"))


def test_configured_models_with_one_outcome_are_said_once() -> None:
    scripts = [ModelRecord(f"m.py:Net{k}", "scripts", f"{k + 1} configuration(s): eager parity",
                           scripted_before=True) for k in range(3)]
    fails = [ModelRecord(f"m.py:Bad{k}", "fails", "does not script", False, "m.py:9",
                         "Bad.forward", explain="hand fix") for k in range(3)]
    odd = ModelRecord("m.py:New", "scripts", "1 configuration(s): eager parity",
                      scripted_before=False)

    [group] = repeated_models([*scripts, *fails, odd])

    assert group.line(2) == ("model scripts (scripted before tsfix): N configuration(s): eager "
                             "parity - 3 models, e.g. m.py:Net0, m.py:Net1; -v for each")
    # Each model that does not script keeps its line (its blocker and explanation).
    assert all(model_headline(model) is None for model in fails)
