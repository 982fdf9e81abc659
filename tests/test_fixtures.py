"""The fixture pairs: each `<case>.in.py` becomes its `<case>.out.py`, validated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, apply_with_report, copy_fixture, fixture_pairs, load_module
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.rules.registry import ALL_RULES

# One folder of pairs per rule, named after it.
RULE_FIXTURES = tuple(ALL_RULES)


def test_every_rule_has_a_fixture_folder() -> None:
    for name in RULE_FIXTURES:
        assert fixture_pairs(FIXTURES_ROOT / name), f"fixtures/{name}/ has no <case>.in.py"


def test_every_fixture_has_its_expected_output() -> None:
    for folder in (*RULE_FIXTURES, "lift-branch-rejected", "rules-together", "export"):
        pairs = fixture_pairs(FIXTURES_ROOT / folder)
        assert pairs
        for before, after in pairs:
            assert after.is_file(), f"{before} has no {after.name}"


def _inputs(tmp_path: Path, rule: str) -> tuple[Path, list[Path]]:
    """A copy of the rule's fixture folder without its expected outputs (an .out.py can be
    another rule's input), and the copied inputs."""
    folder = copy_fixture(tmp_path, rule, inputs_only=True)
    inputs = [folder / before.relative_to(FIXTURES_ROOT / rule)
              for before, _ in fixture_pairs(FIXTURES_ROOT / rule)]
    assert inputs
    return folder, inputs


# Rules that type from observed example runs reach their expected outputs only with validation
# (the slow test below); without it they fall back to static inference.
STATIC_RULES = [name for name, rule in ALL_RULES.items() if not rule.needs_observations]


@pytest.mark.parametrize("rule", STATIC_RULES)
def test_rule_turns_each_fixture_input_into_its_output(tmp_path: Path, rule: str) -> None:
    _, inputs = _inputs(tmp_path, rule)
    run([str(p) for p in inputs], Options(rules=[rule], verify=False, unsafe_fixes=False))
    for (_, after), written in zip(fixture_pairs(FIXTURES_ROOT / rule), inputs, strict=True):
        assert written.read_text() == after.read_text(), written.name
    # The outputs are fixed points: a second run changes nothing.
    again = run([str(p) for p in inputs], Options(rules=[rule], verify=False))
    assert [f.display for f in again.files if f.status == "changed"] == []


@pytest.mark.slow
@pytest.mark.parametrize("rule", RULE_FIXTURES)
def test_every_fixture_rewrite_is_verified(tmp_path: Path, rule: str) -> None:
    folder, _ = _inputs(tmp_path, rule)
    done = apply_with_report(folder, rule, workdir=folder)
    assert done.returncode == 0, done.stderr
    changed = [before for before, after in fixture_pairs(FIXTURES_ROOT / rule)
               if before.read_text() != after.read_text()]
    assert changed and done.classes
    assert {c["verdict"] for c in done.classes} == {"verified"}, done.classes
    for (_, after), before in zip(fixture_pairs(FIXTURES_ROOT / rule),
                                  [b for b, _ in fixture_pairs(FIXTURES_ROOT / rule)],
                                  strict=True):
        written = folder / before.relative_to(FIXTURES_ROOT / rule)
        assert written.read_text() == after.read_text(), written.name


@pytest.mark.slow
def test_lift_branch_pairs_are_verified(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "lift-branch")
    done = apply_with_report(folder, "lift-branch")
    assert done.returncode == 0, done.stderr
    classes = done.classes
    changed_pairs = [b for b, a in fixture_pairs(FIXTURES_ROOT / "lift-branch")
                     if b.read_text() != a.read_text()]
    assert len(classes) == len(changed_pairs) > 0
    assert {c["verdict"] for c in classes} == {"verified"}, classes
    for c in classes:
        assert "one artifact served" in c["reason"]
    for before, after in fixture_pairs(folder):
        assert before.read_text() == after.read_text(), before.name


@pytest.mark.slow
def test_rejected_rewrite_is_not_written(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "lift-branch-rejected")
    result = run([folder / "scaled_residual.in.py"], Options(rules=["lift-branch"]))
    verdicts = {c.class_name: c for c in result.classes()}
    assert verdicts["ScaledResidual"].verdict == "rejected"
    assert verdicts["ScaledResidual"].reason.startswith("re-script:")
    assert verdicts["GatedBlock"].verdict == "verified"
    assert result.exit_code == 3
    written = (folder / "scaled_residual.in.py").read_text()
    assert written == (folder / "scaled_residual.out.py").read_text()


@pytest.mark.slow
def test_written_classic_model_keeps_both_paths_in_one_artifact(tmp_path: Path) -> None:
    """Independent of the validation worker: script the file tsfix wrote and check both
    configurations against the untouched original."""
    torch = pytest.importorskip("torch")
    folder = copy_fixture(tmp_path, "lift-branch")
    run([folder / "classic.in.py"], Options(rules=["lift-branch"], verify=False))
    original = load_module(FIXTURES_ROOT / "lift-branch" / "classic.in.py", "classic_original")
    written = load_module(folder / "classic.in.py", "classic_written")
    x = torch.rand(1, 3, 256, 256)
    torch.manual_seed(0)
    artifact = torch.jit.script(written.CustomModel(branch_testing=True).eval())
    outputs = []
    for flag in (True, False):
        torch.manual_seed(0)
        reference = original.CustomModel(branch_testing=flag).eval()
        with torch.no_grad():
            expected = reference(x)
            got = artifact(x, flag)
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
        outputs.append(expected)
    assert not torch.allclose(outputs[0], outputs[1]), "the flag must matter for this check"


@pytest.mark.slow
def test_annotate_pairs_are_verified_with_observed_types(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "annotate")
    data = apply_with_report(folder, "annotate", workdir=folder)
    assert data.returncode == 0, data.stderr
    classes = data.classes
    # Every class with an example table is rewritten, except in the already-typed file.
    tables = set(re.findall(r'^\[tool\.tsfix\.examples\."([^"]+)"\]',
                            (folder / "pyproject.toml").read_text(), re.MULTILINE))
    rewritten = {table for table in tables if not table.startswith("already_typed.")}
    assert len(rewritten) >= 9
    assert {f"{Path(f['path']).name}:{c['class_name']}"
            for f in data.report["files"] for c in f["classes"]} == rewritten
    assert {c["verdict"] for c in classes} == {"verified"}, classes
    # Several calls per instance: parity covered non-default argument values too.
    assert any("x 2 calls" in c["reason"] for c in classes)
    # Types the code alone cannot tell came from the example calls.
    observed = sum(int(n) for c in classes
                   for n in re.findall(r"(\d+) from observed calls", c["summary"]))
    assert observed >= 6
    for before, after in fixture_pairs(folder):
        assert before.read_text() == after.read_text(), before.name


@pytest.mark.slow
def test_the_rule_that_breaks_a_class_is_dropped_and_the_other_kept(tmp_path: Path) -> None:
    folder = copy_fixture(tmp_path, "rules-together")
    data = apply_with_report(folder, "all", target=folder / "residual_blocks.in.py",
                             workdir=folder)
    assert data.returncode == 3   # a dropped rewrite is a rejection
    verdicts = {(c["class_name"], c["rule"]): c for c in data.classes}
    dropped = verdicts[("ScaledResidual", "lift-branch")]
    assert dropped["verdict"] == "rejected" and not dropped["written"]
    assert dropped["reason"].startswith("dropped: ScaledResidual validates without this rule's")
    assert verdicts[("ScaledResidual", "annotate")]["verdict"] == "verified"
    assert verdicts[("GatedBlock", "lift-branch")]["verdict"] == "verified"
    assert verdicts[("GatedBlock", "annotate")]["verdict"] == "verified"
    for before, after in fixture_pairs(folder):
        assert before.read_text() == after.read_text(), before.name


@pytest.mark.slow
def test_rule_all_verifies_every_rule_fixture(tmp_path: Path) -> None:
    for name in RULE_FIXTURES:
        # The inputs only: an .out.py of one rule can be the next rule's input (what
        # numpy-to-torch leaves is ignore-numpy's), and has no example table of its own.
        folder = copy_fixture(tmp_path, name, inputs_only=True)
        data = apply_with_report(folder, "all", workdir=folder)
        assert data.returncode == 0, (name, data.stderr)
        classes = data.classes
        assert classes and {c["verdict"] for c in classes} == {"verified"}, (name, classes)
        again = apply_with_report(folder, "all", workdir=folder)
        assert [f for f in again.files if f["status"] == "changed"] == [], name


@pytest.mark.slow
def test_export_target_pairs_are_verified_with_one_exported_program(tmp_path: Path) -> None:
    """fixtures/export: lift-branch under ``--target export`` (the folder's pyproject sets the
    target): every rewritten class verified by one torch.export program serving every
    configuration, both sides of each torch.cond seen, and the outputs as expected."""
    folder, _ = _inputs(tmp_path, "export")
    done = apply_with_report(folder, "lift-branch", workdir=folder)
    assert done.returncode == 0, done.stderr
    changed = [b for b, a in fixture_pairs(FIXTURES_ROOT / "export")
               if b.read_text() != a.read_text()]
    assert len(done.classes) >= len(changed) >= 4
    for found in done.classes:
        assert found["verdict"] == "verified", found
        assert "one exported program served" in found["reason"], found
        assert "both sides of" in found["reason"], found
    for before, after in fixture_pairs(FIXTURES_ROOT / "export"):
        written = folder / before.relative_to(FIXTURES_ROOT / "export")
        assert written.read_text() == after.read_text(), written.name
