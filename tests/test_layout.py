"""The layout CONTRIBUTING.md promises: every package folder is installed, rules are found from
their modules alone, and no per-file memo outlives its file."""

from __future__ import annotations

import sys
from pathlib import Path

from tsfix.codemods.pipeline.settings import RewriteSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject() -> None:
    """An editable strict install only links listed packages: a rule split into a package
    and not listed would import in the checkout and fail once installed."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: ROOT / path for name, path in setuptools["package-dir"].items()}
    expected = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            if name == "tsfix.codemods" and relative.parts[:1] == ("api",):
                continue        # installed as `tsfix` itself
            expected.add(".".join((name, *relative.parts)))
    assert expected == set(setuptools["packages"])


def test_rules_are_found_from_their_modules_only() -> None:
    from tsfix.codemods.rules.names import rule_summaries
    from tsfix.codemods.rules.registry import ALL_RULES

    assert {name: rule.summary for name, rule in ALL_RULES.items()} == rule_summaries()
    assert list(rule_summaries()) == list(ALL_RULES)
    orders = [rule.order for rule in ALL_RULES.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    for rule in ALL_RULES.values():
        module = rule.__module__.rpartition(".")[2]
        assert module == rule.name.replace("-", "_"), (rule.name, rule.__module__)
        assert (ROOT / "fixtures" / rule.name).is_dir(), rule.name


def test_memos_live_in_the_file_scope_only() -> None:
    import libcst as cst
    from tsfix.codemods.facts.scope import current_scope, file_scope
    from tsfix.codemods.facts.syntax import find_all
    from tsfix.codemods.pipeline.rewrite import rewrite_source
    from tsfix.codemods.rules.registry import ALL_RULES

    source = (ROOT / "fixtures" / "lift-branch" / "classic.in.py").read_text()
    rewrite_source(source, RewriteSettings(list(ALL_RULES.values())), "classic.py")
    assert current_scope() is None
    module = cst.parse_module(source)
    with file_scope() as scope:
        assert find_all(module, cst.If)
        assert scope.indexes
    assert current_scope() is None
