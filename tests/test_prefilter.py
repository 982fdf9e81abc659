"""The ast prefilter may only skip what the rules would not touch: for every rule and file where
``may_apply`` says no, the full analysis finds nothing (no rewrite, no fix, no refusal)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import libcst as cst
import pytest
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.registry import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent


def _files() -> list[Path]:
    files = sorted((ROOT / "fixtures").rglob("*.py"))
    spec = importlib.util.find_spec("torch")     # torch's own modules, read, never imported
    if spec is not None and spec.origin is not None:
        files += sorted((Path(spec.origin).parent / "nn" / "modules").glob("*.py"))
    return files


@pytest.mark.parametrize("name", list(ALL_RULES))
def test_a_rule_that_may_not_apply_finds_nothing(name: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rule = ALL_RULES[name]
    files = _files()
    assert len(files) > 50
    said_no = [path for path in files
               if not rule.may_apply(AstFile(path.read_text(encoding="utf-8")))]
    assert said_no, f"{name} never says no: its prefilter saves nothing"
    # The rewrite asks may_apply too: the rule runs on those files only with it saying yes.
    monkeypatch.setattr(rule, "may_apply", classmethod(lambda cls, file: True))
    for path in said_no:
        text = path.read_text(encoding="utf-8")
        found = rewrite_source(
            text,
            RewriteSettings([rule], output=False),
            FileContext(path.name, module=cst.parse_module(text)),
        )
        assert (found.changes, found.fixes, found.skips) == ([], [], []), path


def test_a_file_no_rule_may_touch_is_returned_as_it_is() -> None:
    text = ("import torch\n\n\nclass Plain(torch.nn.Module):\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        return x\n")
    assert not any(rule.may_apply(AstFile(text)) for rule in ALL_RULES.values())
    result = rewrite_source(text, RewriteSettings(list(ALL_RULES.values())), "plain.py")
    assert (result.text, result.changes, result.skips) == (text, [], [])


def test_the_statement_walk_is_the_full_walk_less_expressions() -> None:
    # imports and attribute values read the statements only; which import of a name wins
    # depends on the order, so it must be the full walk's.
    text = ("import a as x\ntry:\n    import b as x\nexcept ImportError:\n    import c as x\n"
            "def f():\n    import d as x\n    self.y = 1\nmatch v:\n    case 1:\n"
            "        self.y = 2\nclass C:\n    z = lambda: 0\n")
    compared = 0
    for path in [*_files(), None]:
        file = AstFile(path.read_text(encoding="utf-8") if path else text)
        if file.tree is None:
            continue
        kinds = (ast.Module, ast.stmt, ast.excepthandler, ast.match_case)
        assert [id(n) for n in file.nodes if isinstance(n, kinds)] == [
            id(n) for n in file.statements], path
        compared += 1
    assert compared > 100
    assert AstFile(text).imports["x"] == "c"     # breadth first: the handler's is deepest
