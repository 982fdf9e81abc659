"""`tsfix explain`: rule documentation, and TorchScript errors turned into explanations."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT
from tsfix.codemods.lint.check import CODES, check_source
from tsfix.codemods.lint.codes import rule_of_code
from tsfix.codemods.lint.explain import (
    CALL_FAILED,
    SCRIPT_FAILED,
    SECTIONS,
    ExplainError,
    _explain,
    explain_error,
    parse_target,
    rule_sections,
)
from tsfix.codemods.rules.registry import ALL_RULES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "check"
BLOCKERS = FIXTURES / "blockers.py"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tsfix.cli.main", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("name", list(ALL_RULES))
def test_every_rule_documents_the_four_sections(name: str) -> None:
    title, sections = rule_sections(name)
    assert title and not title.startswith("``")
    assert [header for header, _ in sections] == list(SECTIONS)
    assert all(body.strip() and "``" not in body for _, body in sections)


def test_explain_rule_cli_and_unknown_rule(tmp_path: Path) -> None:
    done = cli("explain", "modulelist-iter", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("modulelist-iter: ")
    for header in SECTIONS:
        assert f"\n{header}\n" in done.stdout
    unknown = cli("explain", "no-such-rule", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "unknown rule 'no-such-rule'" in unknown.stderr and "lift-branch" in unknown.stderr
    with pytest.raises(ExplainError):
        rule_sections("no-such-rule")


def test_parse_target() -> None:
    assert parse_target("models/x.py:Net") == (Path("models/x.py"), "Net")
    assert parse_target("lift-branch") is None
    assert parse_target("x.py:not a class") is None


def test_missing_class_or_file_is_a_usage_error(tmp_path: Path) -> None:
    shutil.copy(BLOCKERS, tmp_path / "blockers.py")
    missing = cli("explain", "blockers.py:Nope", cwd=tmp_path)
    assert missing.returncode == 2 and "no top-level class 'Nope'" in missing.stderr
    no_file = cli("explain", "absent.py:Net", cwd=tmp_path)
    assert no_file.returncode == 2 and "no such file" in no_file.stderr


# ---- mapping messages (no torch) ---------------------------------------------------------------

def _outcome(message: str, path: Path, outcome: str = SCRIPT_FAILED) -> dict[str, object]:
    return {"outcome": outcome, "error_type": "RuntimeError", "error": message}


def test_an_unknown_error_is_not_blamed_on_an_unrelated_finding() -> None:
    """A class with a config branch (TSF204) that fails for another reason: the branch is not
    the explanation; torch's message is shown as it is, with where it points."""
    text = BLOCKERS.read_text()
    hints = [f for f in check_source(text, "blockers.py") if f.class_name == "ConfigBranch"]
    assert [h.code for h in hints] == ["TSF204"]
    nowhere = _explain(_outcome("a TorchScript failure tsfix has never seen", BLOCKERS),
                       "ConfigBranch", "blockers.py", BLOCKERS, text, hints, [])
    assert (nowhere.code, nowhere.fix, nowhere.line) == (None, None, None)
    assert nowhere.explanation.endswith("torch gives it. It names no line.")
    elsewhere = _explain(_outcome('unsupported thing\n  File "/lib/other.py", line 7\n',
                                  BLOCKERS), "ConfigBranch", "blockers.py", BLOCKERS, text,
                         hints, [])
    assert elsewhere.code is None
    assert elsewhere.explanation.endswith("It points at /lib/other.py:7.")
    lines = elsewhere.lines()
    assert "[TSF204]" not in lines[0] and lines[0].endswith("does not script: TorchScript error")
    # The finding is still listed, as a finding of the class, not as the cause.
    assert lines[-2:] == ["other findings in ConfigBranch (tsfix check):", f"  {hints[0].text()}"]


def test_an_unparsable_file_exits_three_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import torch.nn as nn\n\nclass A(nn.Module)\n"
                                        "    def forward(self, x):\n        return x\n")
    done = cli("explain", "broken.py:A", cwd=tmp_path)
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert done.stderr.startswith("error: broken.py:3:") and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_class_that_segfaults_is_reported_as_such(tmp_path: Path) -> None:
    (tmp_path / "crash.py").write_text(
        "import ctypes\nimport torch.nn as nn\n\n\nclass Crash(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        ctypes.string_at(0)\n\n"
        "    def forward(self, x):\n        return x\n")
    done = cli("explain", "crash.py:Crash", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "the scripting process died (SIGSEGV: a segmentation fault)" in done.stdout
    assert "TSF" not in done.stdout


def test_misleading_aten_eq_message_points_at_the_none_attribute() -> None:
    text = BLOCKERS.read_text()
    hints = [f for f in check_source(text, "blockers.py") if f.class_name == "NoneModeCompared"]
    line = next(f.line for f in hints)
    message = ("\nArguments for call are not valid.\nThe following variants are available:\n"
               "  aten::eq.Tensor(Tensor self, Tensor other) -> Tensor:\n"
               "  Expected a value of type 'Tensor' for argument 'self' but instead found type "
               "'NoneType'.\n\nThe original call is:\n"
               f'  File "{BLOCKERS}", line {line}\n')
    result = _explain(_outcome(message, BLOCKERS), "NoneModeCompared", "blockers.py",
                      BLOCKERS, text, hints, [])
    assert (result.line, result.code, result.fix) == (line, "TSF116", None)
    assert "found type 'NoneType'" in result.error
    lines = result.lines()
    assert lines[0].startswith(f"blockers.py:{line}: NoneModeCompared does not script")
    assert "self.mode" in lines[1] and any(x.startswith("why: ") for x in lines)


def test_sum_over_an_untyped_list_of_tensors_is_sum_tensors_not_annotate() -> None:
    # tsfix check cannot see that the list holds tensors, but torch's message can.
    path = FIXTURES_ROOT / "sum-tensors" / "wavenet.in.py"
    text = path.read_text()
    line = next(i for i, source in enumerate(text.splitlines(), 1) if "sum(skip" in source)
    message = ("\nArguments for call are not valid.\nThe following variants are available:\n"
               "  aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor:\n"
               "  Expected a value of type 'Tensor' for argument 'self' but instead found type "
               "'List[Tensor]'.\n\nThe original call is:\n"
               f'  File "{path}", line {line}\n')
    hints = [f for f in check_source(text, "wavenet.in.py") if f.class_name == "ResidualStack"]
    result = _explain(_outcome(message, path), "ResidualStack", "wavenet.in.py", path, text,
                      hints, [])
    assert (result.line, result.code, result.fix) == (line, "TSF215", "sum-tensors")
    # Without check's finding at that site, explain promises no rule.
    alone = _explain(_outcome(message, path), "ResidualStack", "wavenet.in.py", path, text,
                     [], [])
    assert (alone.code, alone.fix) == ("TSF215", None)


def test_numpy_message_without_location_is_located_by_the_linter() -> None:
    text = BLOCKERS.read_text()
    hints = [f for f in check_source(text, "blockers.py") if f.class_name == "NumpyCall"]
    result = _explain({"outcome": SCRIPT_FAILED, "error_type": "TypeError",
                       "error": "cannot create weak reference to 'numpy.ufunc' object"},
                      "NumpyCall", "blockers.py", BLOCKERS, text, hints, [])
    assert (result.code, result.fix, result.line) == ("TSF205", "numpy-to-torch", hints[0].line)
    assert "fix: tsfix apply --rule numpy-to-torch blockers.py" in result.lines()


def test_unknown_error_is_printed_as_is_with_its_line(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text("import torch.nn as nn\n\n\nclass M(nn.Module):\n"
                     "    def forward(self, x):\n        return x.frobnicate()\n")
    message = f'Something new happened:\n  File "{model}", line 6\n    return x.frobnicate()\n'
    result = _explain(_outcome(message, model), "M", "m.py", model, model.read_text(), [], [])
    assert (result.line, result.code, result.fix) == (6, None, None)
    assert result.error == "RuntimeError: Something new happened"
    assert "return x.frobnicate()" in result.lines()[1]


def test_call_failure_names_the_parameter_finding() -> None:
    text = BLOCKERS.read_text()
    hints = [f for f in check_source(text, "blockers.py") if f.class_name == "UntypedNoneDefault"]
    message = ("The following operation failed in the TorchScript interpreter.\n"
               f'  File "{BLOCKERS}", line {hints[0].line + 2}, in forward\n'
               "RuntimeError: Expected a proper Tensor but got None (or an undefined Tensor in "
               "C++) for argument #1 'other'")
    result = _explain(_outcome(message, BLOCKERS, CALL_FAILED), "UntypedNoneDefault",
                      "blockers.py", BLOCKERS, text, hints, [])
    # `x * scale` with nothing else to tell: annotate types it Optional[Tensor] (a float seen
    # in an example call would win), so explain names the rule that fixes the site.
    assert (result.code, result.fix) == ("TSF207", "annotate")
    assert not result.refused
    assert result.error.startswith("RuntimeError: Expected a proper Tensor")
    assert "calling the scripted module fails" in result.lines()[0]


# ---- every fixture class, scripted for real ----------------------------------------------------

EXPLAIN_ALL = """
import json, sys
from pathlib import Path
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.config import ExampleSpec, find_pyproject, load_config
from tsfix.codemods.lint.explain import _explain, _script_class
path = Path(sys.argv[1]).resolve()
config = load_config(find_pyproject([path]))
text = path.read_text()
findings = check_source(text, path.name)
out = {}
for name in sorted({f.class_name for f in findings}):
    spec = config.example_for(path, name) or ExampleSpec.automatic(f"{path.name}:{name}")
    outcome = _script_class({"path": str(path), "class": name, "example": spec.to_json(),
                             "sys_path": [str(config.root)]})
    hints = [f for f in findings if f.class_name == name]
    result = _explain(outcome, name, path.name, path, text, hints, [])
    site = [f for f in hints if f.code == result.code and f.line == result.line] or [
        f for f in hints if f.code == result.code and result.outcome == "call_failed"]
    out[name] = {"outcome": result.outcome, "line": result.line, "code": result.code,
                 "fix": result.fix, "site_fix": site[0].fix if site else None,
                 "text": result.lines()}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_every_failing_fixture_class_gets_its_code_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "check"
    shutil.copytree(FIXTURES, folder, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-c", EXPLAIN_ALL, str(folder / "blockers.py")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    explained = json.loads(done.stdout.splitlines()[-1])
    markers: dict[int, set[str]] = {}
    for number, line in enumerate(BLOCKERS.read_text().splitlines(), 1):
        match = re.search(r"#((?: TSF\d{3})+)\s*$", line)
        if match:
            markers[number] = set(match.group(1).split())
    for name, result in explained.items():
        if name == "ConfigBranch":          # TSF204 is a warning: the class scripts
            assert result["outcome"] == "scripts", result
            continue
        assert result["outcome"] in (SCRIPT_FAILED, CALL_FAILED), (name, result)
        assert result["code"] in CODES, (name, result)
        marked_codes = {code for codes in markers.values() for code in codes}
        assert result["code"] in marked_codes
        # The line explained is one whose marker names that code, or the call that fails.
        assert result["line"] is not None, (name, result)
        assert (result["code"] in markers.get(result["line"], set())
                or result["outcome"] == CALL_FAILED), (name, result)
        # A rule is named only when check says it fixes that very site.
        if result["fix"] is not None:
            assert result["fix"] == result["site_fix"] == rule_of_code(result["code"]), result


@pytest.mark.slow
def test_explain_cli_on_a_class_that_scripts_and_one_that_does_not(tmp_path: Path) -> None:
    folder = tmp_path / "check"
    shutil.copytree(FIXTURES, folder, ignore=shutil.ignore_patterns("__pycache__"))
    good = cli("explain", "clean.py:WorksList", cwd=folder)
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("clean.py: WorksList scripts and runs on 1 example call")
    bad = cli("explain", "blockers.py:IndexedByVariable", cwd=folder)
    assert bad.returncode == 1, bad.stderr
    first, source = bad.stdout.splitlines()[:2]
    assert first.startswith("blockers.py:160: IndexedByVariable does not script")
    assert "[TSF201]" in first and "self.layers[i](x)" in source
    assert "fix: tsfix apply --rule modulelist-iter blockers.py" in bad.stdout
    assert "torch said: RuntimeError: Expected integer literal for index" in bad.stdout


def test_types_torchscript_cannot_merge_are_placed_on_the_users_line() -> None:
    """TorchScript's messages (torch 2.13) for a return of another type and a re-binding to
    another type name TSF118 and TSF119 at the line the error points at, with the hand fix."""
    text = BLOCKERS.read_text()
    findings = check_source(text, "blockers.py")
    for class_name, code, message in (
            ("ReturnsByFlag", "TSF118",
             "\nPrevious return statement returned a value of type Tuple[Tensor, Tensor] but "
             "this return statement returns a value of type Tensor:\n"
             '  File "{path}", line {line}\n        return out\n        ~~~~~~~~~~ <--- HERE\n'),
            ("PackedInBranch", "TSF119",
             "\nVariable 'x' previously had type Tensor (inferred) but is now being assigned "
             "to a value of type __torch__.torch.nn.utils.rnn.PackedSequence:\n"
             '  File "{path}", line {line}\n')):
        hints = [f for f in findings if f.class_name == class_name]
        line = min(f.line for f in hints if f.code == code)
        result = _explain(_outcome(message.format(path=BLOCKERS, line=line), BLOCKERS),
                          class_name, "blockers.py", BLOCKERS, text, hints, [])
        assert (result.code, result.line) == (code, line), class_name
        assert result.explanation == CODES[code].help
        lines = result.lines()
        assert lines[0] == (f"blockers.py:{line}: {class_name} does not script: "
                            f"{CODES[code].summary} [{code}]")
        assert any(x.startswith("torch said: RuntimeError: ") for x in lines)
        if code == "TSF118":
            # The flag deciding the return is a constructor setting: constant-flag fixes it.
            assert "fix: tsfix apply --rule constant-flag blockers.py" in lines
            assert "torch.jit.Final[bool]" in result.explanation


def test_an_annotated_return_of_another_type_is_tsf118() -> None:
    message = ("\nReturn value was annotated as having type Tensor but is actually of type "
               "Tuple[Tensor, Tensor]:\n")
    result = _explain(_outcome(message, BLOCKERS), "ReturnsByFlag", "blockers.py", BLOCKERS,
                      BLOCKERS.read_text(), [], [])
    assert result.code == "TSF118"


def test_an_undefined_name_is_a_carried_local_only_where_check_found_one() -> None:
    """"undefined value" is TorchScript's message for a loop-carried local (TSF230) and for a
    name bound nowhere; without a TSF230 finding in the class it names no code."""
    text = BLOCKERS.read_text()
    findings = check_source(text, "blockers.py")
    carried = [f for f in findings if f.class_name == "CarriedLocal"]
    read_line = next(n for n, line in enumerate(text.splitlines(), 1)
                     if line.strip() == "h = h + x")
    message = (f'\nundefined value h:\n  File "{BLOCKERS}", line {read_line}\n'
               "                h = h + x\n                    ~ <--- HERE\n")
    found = _explain(_outcome(message, BLOCKERS), "CarriedLocal", "blockers.py", BLOCKERS,
                     text, carried, [])
    assert (found.code, found.line) == ("TSF230", min(f.line for f in carried))
    unknown = _explain(_outcome(message, BLOCKERS), "CarriedLocal", "blockers.py", BLOCKERS,
                       text, [], [])
    assert unknown.code is None and unknown.line == read_line


def test_an_optional_passed_to_an_untyped_none_parameter_is_the_callees_annotation() -> None:
    # Measured on torch 2.13: the message names the callee's signature; the fix is there
    # (annotate's TSF207), not a None test at the caller (TSF228).
    path = BLOCKERS
    text = path.read_text()
    message = ("\n\nforward(__torch__.Block self, Tensor x, Tensor lengths=[ Tensor (undefined) ])"
               " -> Tensor:\nExpected a value of type 'Tensor (inferred)' for argument "
               "'lengths' but instead found type 'Optional[Tensor]'.\nInferred 'lengths' to be "
               "of type 'Tensor' because it was not annotated with an explicit type.\n:\n"
               f'  File "{path}", line 3\n')
    result = _explain(_outcome(message, path), "Outer", "blockers.py", path, text, [], [])
    assert result.code == "TSF207"
    annotated = message.replace("Tensor lengths=[ Tensor (undefined) ]",
                                "Tensor? lengths=None").replace("Tensor (inferred)", "Tensor")
    assert _explain(_outcome(annotated, path), "Outer", "blockers.py", path, text, [],
                    []).code == "TSF228"


@pytest.mark.parametrize(("message", "code"), [
    # Measured on torch 2.13: an exported and an ignored method of the class.
    ("\n\nproject(__torch__.E self, Tensor x, float alpha) -> Tensor:\nArgument alpha not "
     "provided.\n", "TSF241"),
    ("\n\nlazy_bind.<locals>.lazy_binding_method(__torch__.I self, Tensor x, float alpha) -> "
     "Tensor 0:\nArgument alpha not provided.\n", "TSF241"),
    # An aten overload listing says it of every overload: not a left-out default.
    ("\nArguments for call are not valid.\nThe following variants are available:\n  \n  "
     "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor:\n  Argument "
     "other not provided.\n", None),
])
def test_a_left_out_default_is_a_method_of_the_class_not_an_aten_overload(
        message: str, code: str | None) -> None:
    text = BLOCKERS.read_text()
    result = _explain(_outcome(message + f'  File "{BLOCKERS}", line 3\n', BLOCKERS), "M",
                      "blockers.py", BLOCKERS, text, [], [])
    assert result.code == code


EINOPS_IN_A_FUNCTION = '''\
import torch
from torch import nn
from einops import rearrange


def swap(q):
    return rearrange(q, "b x y -> b y x")


class Rel(nn.Module):
    def forward(self, q):
        return swap(q) + 1
'''


def test_a_construct_a_rule_handles_in_a_function_the_class_calls_is_said_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """halonet-pytorch: RelPosEmb's own rearrange calls are rewritten, and the model stops at
    the einops call of relative_logits_1d, a module-level function it calls. The rule that
    handles einops exists: the words say it leaves that function, and name it."""
    import torch

    pytest.importorskip("einops")
    model = tmp_path / "rel.py"
    model.write_text(EINOPS_IN_A_FUNCTION)
    monkeypatch.syspath_prepend(str(tmp_path))
    import rel  # type: ignore[import-not-found]

    with pytest.raises(Exception) as raised:
        torch.jit.script(rel.Rel())

    line = explain_error(str(raised.value), model, "rel.py", EINOPS_IN_A_FUNCTION, "Rel")
    assert line == ("einops rearrange/repeat/reduce call [TSF236]; einops-to-torch rewrites this "
                    "construct, and finds none left in Rel's methods (it is in swap(), which "
                    "Rel calls): change the code by hand"), line
