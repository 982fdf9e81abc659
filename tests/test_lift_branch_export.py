"""lift-branch under ``--target export``: settings as 0-d tensor arguments, branches as
``torch.cond``; every read a tensor cannot serve refuses its setting with the reason."""

from __future__ import annotations

import io
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES_ROOT, fixture_pairs, load_module
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.lift_branch import LiftBranch, LiftBranchExport
from tsfix.codemods.rules.registry import select_rules

FOLDER = FIXTURES_ROOT / "export"


def _rewrite(code: str, rule: type[LiftBranch] = LiftBranchExport) -> Rewrite:
    return rewrite_source(textwrap.dedent(code), RewriteSettings([rule], line_length=100), "m.py")


def _reasons(result: Rewrite) -> list[str]:
    return [skip.reason for skip in result.skips if skip.code == "TSF204"]


def _model(forward: str, init: str = "self.flag = flag", params: str = "flag=True") -> str:
    return (
        "import torch\n"
        "import torch.nn as nn\n\n\n"
        "class Net(nn.Module):\n"
        f"    def __init__(self, {params}):\n"
        "        super().__init__()\n"
        f"        {init}\n"
        "        self.lin = nn.Linear(4, 4)\n\n"
        + textwrap.indent(textwrap.dedent(forward), "    "))


def test_export_selects_the_export_form() -> None:
    assert select_rules(["lift-branch"], "export") == [LiftBranchExport]


def test_fixture_inputs_become_their_outputs_and_stay_so(tmp_path: Path) -> None:
    folder = tmp_path / "export"
    shutil.copytree(FOLDER, folder, ignore=shutil.ignore_patterns("*.out.py", "__pycache__"))
    inputs = [folder / before.name for before, _ in fixture_pairs(FOLDER)]
    # The folder's pyproject.toml selects the target and the rule.
    result = run([str(folder)], Options(verify=False))
    changed = sorted(Path(f.display).name for f in result.files if f.status == "changed")
    assert changed == ["classic.in.py", "config_object.in.py", "helper_flag.in.py",
                       "structural.in.py"]
    for (_, after), written in zip(fixture_pairs(FOLDER), inputs, strict=True):
        assert written.read_text() == after.read_text(), written.name
    again = run([str(folder)], Options(verify=False))
    assert [f.display for f in again.files if f.status == "changed"] == []


def test_structural_flag_is_refused_and_the_other_lifted() -> None:
    result = rewrite_source(
        (FOLDER / "structural.in.py").read_text(),
        RewriteSettings([LiftBranchExport]),
        "structural.py",
    )
    assert [change.lifted for change in result.changes] == [{"residual": "residual"}]
    assert any("self.use_proj decides which submodules" in r for r in _reasons(result))
    assert "if self.use_proj:" in result.text


def test_print_only_branch_is_refused_with_its_reason() -> None:
    text = (FOLDER / "refused.in.py").read_text()
    result = rewrite_source(text, RewriteSettings([LiftBranchExport]), "refused.py")
    assert result.text == text
    assert _reasons(result) == [
        "its branch cannot be a torch.cond: no tensor output: the branch assigns nothing "
        "that code after it reads (only Python side effects such as print or logging)"]


def test_not_and_and_become_logical_functions() -> None:
    result = _rewrite(_model("""
        def forward(self, x):
            if not self.flag:
                x = self.lin(x)
            if self.flag and self.other:
                x = x * 2
            return x
        """, init="self.flag = flag\n        self.other = other", params="flag=True, other=False"))
    assert "torch.logical_not(flag)" in result.text
    assert "torch.logical_and(flag, other)" in result.text
    assert "if self." not in result.text


@pytest.mark.parametrize(("forward", "reason"), [
    ("""
     def forward(self, x):
         while self.flag:
             x = self.lin(x)
         return x
     """, "it is read in a `while` test"),
    ("""
     def forward(self, x):
         if self.flag:
             x = self.lin(x)
         for _ in range(int(self.flag)):
             x = x + 1
         return x
     """, "it is passed to `int(flag)`"),
    ("""
     def forward(self, x):
         return self.lin(x) if self.flag else x
     """, "it is the test of a ternary"),
    ("""
     def forward(self, x):
         if self.flag and self.training:
             x = self.lin(x)
         return x
     """, "mixes the setting with values that are not tensors"),
    ("""
     def forward(self, x):
         if self.flag:
             return self.lin(x)
         return x
     """, "the true side leaves the branch (contains `return`)"),
    ("""
     def forward(self, x):
         if self.flag:
             self.cache = x
         return x
     """, "`self.cache = ...` assigns to an attribute or item"),
])
def test_a_read_a_tensor_cannot_serve_refuses_the_setting(forward: str, reason: str) -> None:
    code = _model(forward)
    result = _rewrite(code)
    assert result.text == textwrap.dedent(code)
    assert result.changes == []
    reasons = _reasons(result)
    # Each test read is refused (a read outside a test is no lift-branch site of its own).
    assert reasons and all(reason in r for r in reasons), reasons


def test_one_bad_read_refuses_the_setting_everywhere() -> None:
    # The `if` alone would lower; the `while` on the same setting cannot take a tensor.
    code = _model("""
        def forward(self, x):
            if self.flag:
                x = self.lin(x)
            while self.flag:
                x = x - 1
            return x
        """)
    result = _rewrite(code)
    assert result.changes == []
    assert len(_reasons(result)) == 2      # both reads are reported, neither fixed


def test_str_setting_becomes_an_int_code_tensor() -> None:
    result = _rewrite(_model("""
        def forward(self, x):
            if self.mode == "avg":
                y = x.mean(1)
            else:
                y = x.amax(1)
            return y
        """, init="self.mode = mode", params='mode: str = "avg"'))
    assert 'mode = torch.tensor({"avg": 0}.get(self.mode, -1))' in result.text
    assert "torch.cond(mode == 0, mode_true, mode_false, ())" in result.text


def test_torch_is_imported_when_the_file_lacks_it() -> None:
    result = _rewrite("""
        from torch import nn

        class Net(nn.Module):
            def __init__(self, flag=True):
                super().__init__()
                self.flag = flag
                self.lin = nn.Linear(4, 4)

            def forward(self, x):
                if self.flag:
                    x = self.lin(x)
                return x
        """)
    assert "import torch\n" in result.text
    assert "torch.cond(flag," in result.text


def test_torchscript_form_is_unchanged() -> None:
    code = _model("""
        def forward(self, x):
            if self.flag:
                x = self.lin(x)
            return x
        """)
    result = _rewrite(code, LiftBranch)
    assert "torch.cond" not in result.text
    assert "flag: Optional[bool] = None" in result.text


# ---- one exported program serves every configuration (slow: torch.export) ------------------

def _configurations(table: dict[str, Any], folder: Path) -> list[tuple[dict[str, Any], list[Any]]]:
    import torch

    def tensor(spec: str) -> Any:
        name, _, rest = spec.partition("(")
        shape = [int(n) for n in rest.rstrip(")").split(",")]
        return getattr(torch, name)(*shape)

    if "factory" in table:
        module, _, function = table["factory"].partition(":")
        sys.path.insert(0, str(folder))
        try:
            made = getattr(__import__(module), function)()
        finally:
            sys.path.remove(str(folder))
        return [(init, list(args)) for init, args, _ in made]
    inputs = [tensor(a) for a in table["inputs"]]
    return [(init, inputs) for init in table.get("init", [{}])]


@pytest.mark.slow
def test_one_exported_program_serves_every_configuration(tmp_path: Path) -> None:
    """For each rewritten fixture class: export the first configuration once, call that
    program (and its save/load copy) with each other configuration's settings as tensors,
    and get exactly the original class's eager output for that configuration."""
    import tomllib
    import torch
    folder = tmp_path / "export"
    shutil.copytree(FOLDER, folder, ignore=shutil.ignore_patterns("*.out.py", "__pycache__"))
    tables = tomllib.loads((FOLDER / "pyproject.toml").read_text())["tool"]["tsfix"]["examples"]
    run([str(folder)], Options(verify=False))
    lifted = {
        change.class_name: change.lifted
        for before, _ in fixture_pairs(FOLDER)
        for change in rewrite_source(
            before.read_text(), RewriteSettings([LiftBranchExport]), before.name
        ).changes
    }
    checked = 0
    for key, table in tables.items():
        file, _, class_name = key.partition(":")
        if class_name not in lifted:
            continue
        stem = file.removesuffix(".in.py")
        original = getattr(load_module(FOLDER / file, f"export_{stem}_before"), class_name)
        rewritten = getattr(load_module(folder / file, f"export_{stem}_after"), class_name)
        configurations = _configurations(table, folder)
        torch.manual_seed(0)
        first = rewritten(**configurations[0][0]).eval()
        state = first.state_dict()

        def settings(model: torch.nn.Module, params: dict[str, str] = lifted[class_name]
                     ) -> dict[str, torch.Tensor]:
            return {param: torch.tensor(getattr(model, attr)) for param, attr in params.items()}

        args = configurations[0][1]
        program = torch.export.export(first, tuple(args), settings(first))
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        buffer.seek(0)
        loaded = torch.export.load(buffer)
        for init, inputs in configurations:
            reference = original(**init).eval()
            configured = rewritten(**init)
            if set(reference.state_dict()) != set(state) or not _same_except(
                    configured, first, set(lifted[class_name].values())):
                continue        # other modules or other unlifted settings: another program
            reference.load_state_dict(state)
            wanted = reference(*inputs)
            given = settings(configured)
            for exported in (program, loaded):
                got = exported.module()(*inputs, **given)
                assert torch.equal(got, wanted), (key, init)
            checked += 1
    # classic 2, helper_flag 2, config_object 2 (the third has another residual_scale),
    # structural 2 (the third builds no proj).
    assert checked == 8


def _same_except(a: Any, b: Any, lifted: set[str]) -> bool:
    """Whether two models hold the same plain settings apart from the lifted ones."""
    def plain(model: Any) -> dict[str, Any]:
        return {k: v for k, v in vars(model).items() if not k.startswith("_") and k != "training"
                and k not in lifted and isinstance(v, bool | int | float | str)}
    return plain(a) == plain(b)


# Issue 25 item 1: with do_res false, x and x1 have other shapes; torch.cond traces both sides
# even in eager mode, so the lifted `x1 = x + x1` side raises for that configuration.
RESIDUAL = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, cin=4, cout=4, do_res=True):
            super().__init__()
            self.do_res = do_res
            self.conv = nn.Conv1d(cin, cout, 3, padding=1)

        def forward(self, x):
            x1 = self.conv(x)
            if self.do_res:
                x1 = x + x1
            return x1
""")


@pytest.mark.slow
def test_a_cond_side_the_configuration_does_not_take_must_trace(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "model.py").write_text(RESIDUAL)
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.tsfix.examples."model.py:Block"]
        init = [{do_res = true}, {cin = 4, cout = 8, do_res = false}]
        inputs = ["randn(2, 4, 16)"]
    """))

    result = run([str(tmp_path / "model.py")], Options(rules=["lift-branch"], target="export",
                                                       mode="diff"))

    [block] = result.files[0].classes
    assert block.verdict == "rejected", block.reason
    assert block.reason.startswith(
        "eager parity: the rewritten forward raised for init[1] {'cin': 4, 'cout': 8, "
        "'do_res': False}: CondSideError: torch.cond at line "), block.reason
    assert ("its true side raises when traced (a side this call does not take: torch.cond "
            "traces both, also in eager mode): RuntimeError: The size of tensor a (4) must "
            "match the size of tensor b") in block.reason
