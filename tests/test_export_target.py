"""``--target export``: which rules serve it, and the usage errors for the ones that do not."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tsfix.codemods.pipeline.config import ConfigError
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.rules.names import UnknownRuleError, rule_targets
from tsfix.codemods.rules.registry import ALL_RULES, select_rules

NUMPY_MODEL = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def forward(self, x):
            return x * np.sqrt(2.0)
""")


def test_every_rule_says_which_targets_it_serves_and_the_literals_agree() -> None:
    # The fast path (no rule import) and the imported classes must select the same rules.
    literals = rule_targets()
    assert list(literals) == list(ALL_RULES)
    for name, rule in ALL_RULES.items():
        assert literals[name] == (rule.targets, rule.off_target), name
        assert set(rule.targets) <= {"torchscript", "onnx", "export"}, name


def test_all_under_export_is_only_what_torch_export_needs() -> None:
    names = [rule.name for rule in select_rules(["all"], "export")]
    assert "lift-branch" in names and "numpy-to-torch" in names
    # TorchScript-only fixes would put changes in the diff that torch.export does not need.
    for torchscript_only in ("annotate", "modulelist-iter", "ignore-numpy", "starred-args"):
        assert torchscript_only not in names
        assert torchscript_only in [r.name for r in select_rules(["all"], "torchscript")]
    # Every rule serving export comes in its export form where it has one.
    for rule in select_rules(["all"], "export"):
        base = ALL_RULES[rule.name]
        assert rule is base.target_forms.get("export", base)


def test_lift_branch_under_export_is_its_export_form() -> None:
    (form,) = select_rules(["lift-branch"], "export")
    assert form.name == "lift-branch"
    assert form is ALL_RULES["lift-branch"].target_forms.get("export", ALL_RULES["lift-branch"])


def test_naming_ignore_numpy_under_export_says_why_and_changes_nothing(tmp_path: Path) -> None:
    model = tmp_path / "net.py"
    model.write_text(NUMPY_MODEL)
    with pytest.raises(UnknownRuleError, match=r"ignore-numpy.*--target export.*torch\.export "
                                               r"cannot trace.*numpy-to-torch"):
        run([model], Options(rules=["ignore-numpy"], target="export", verify=False))
    with pytest.raises(UnknownRuleError, match=r"'annotate' does not apply under --target "
                                               r"export.*rules for this target: .*lift-branch"):
        run([model], Options(rules=["annotate"], target="export", verify=False))
    assert model.read_text() == NUMPY_MODEL


def test_configured_rules_of_another_target(tmp_path: Path) -> None:
    model = tmp_path / "net.py"
    model.write_text(NUMPY_MODEL)
    (tmp_path / "pyproject.toml").write_text('[tool.tsfix]\nrules = ["ignore-numpy"]\n'
                                             'target = "export"\n')
    # The configured rules are the ones used: a broken configuration, named as such.
    with pytest.raises(ConfigError, match=r"\[tool\.tsfix\] rules: rule 'ignore-numpy' does "
                                          r"not apply under --target export"):
        run([model], Options(verify=False))
    # --rule overrides them: only their names are checked then.
    result = run([model], Options(rules=["numpy-to-torch"], verify=False, mode="diff"))
    assert result.rules == ["numpy-to-torch"]


def test_the_cli_names_the_rule_without_a_traceback(tmp_path: Path) -> None:
    model = tmp_path / "net.py"
    model.write_text(NUMPY_MODEL)
    done = subprocess.run([sys.executable, "-m", "tsfix.cli.main", "apply", "--rule",
                           "ignore-numpy", "--target", "export", "--no-verify", str(model)],
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "does not apply under --target export" in done.stderr
    assert "Traceback" not in done.stderr
    assert model.read_text() == NUMPY_MODEL


def test_selection_without_importing_the_rules() -> None:
    # A fresh interpreter has no registry loaded: the engine reads the rules' literals.
    code = textwrap.dedent("""\
        import json, sys
        from tsfix.codemods.pipeline.engine import _rule_names
        assert "tsfix.codemods.rules.registry" not in sys.modules
        print(json.dumps(_rule_names(["all"], "export")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    names = json.loads(done.stdout.splitlines()[-1])
    assert names == [rule.name for rule in select_rules(["all"], "export")]
    assert "annotate" not in names
