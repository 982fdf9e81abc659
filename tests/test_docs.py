"""The documentation: the generated rules page is current, the README stays a short page a
user reads and keeps the command CI runs, and every link and TOML snippet in the docs works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from tsfix.cli.main import main
from tsfix.codemods.lint.check import CODES
from tsfix.codemods.lint.explain import RULES_PAGE, RULES_PAGE_COMMAND, rules_markdown
from tsfix.codemods.pipeline.config import ConfigError, load_config
from tsfix.codemods.rules.registry import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "RESULTS.md",
         *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250


def test_the_rules_page_is_generated_from_the_rules() -> None:
    page = ROOT / RULES_PAGE
    assert page.is_file(), f"{RULES_PAGE} is missing: run `{RULES_PAGE_COMMAND}`"
    assert page.read_text(encoding="utf-8") == rules_markdown(), (
        f"{RULES_PAGE} is out of date with the rules' docstrings: run `{RULES_PAGE_COMMAND}`")


def test_rules_format_markdown_prints_the_page_and_text_stays_the_default() -> None:
    runner = CliRunner()
    markdown = runner.invoke(main, ["rules", "--format", "markdown"])
    assert markdown.exit_code == 0, markdown.output
    assert markdown.output == rules_markdown()
    text = runner.invoke(main, ["rules"])
    assert [line.split()[0] for line in text.output.splitlines()] == list(ALL_RULES)
    assert runner.invoke(main, ["rules", "--format", "html"]).exit_code == 2


def test_the_rules_page_documents_every_rule_and_code() -> None:
    page = rules_markdown()
    headings = re.findall(r"^## (\S+)$", page, re.MULTILINE)
    assert headings[:len(ALL_RULES)] == list(ALL_RULES)
    for name in ALL_RULES:
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert [h for h in re.findall(r"^### (.+)$", section, re.MULTILINE)] == [
            "What it does", "Why it breaks export", "Example", "Fix safety"], name
    table = page.split("\n## Check codes\n", 1)[1]
    assert re.findall(r"^\| `(TSF\d{3})` ", table, re.MULTILINE) == list(CODES)


def test_markdown_keeps_code_literal_and_escapes_prose() -> None:
    page = rules_markdown()
    # A docstring's indented example is fenced, not left to Markdown's indentation rules.
    assert "```\nfor i in range(len(self.layers)):" in page
    # Outside code, __init__ would be bold and <Class> an HTML tag.
    assert "attribute \\_\\_init\\_\\_ sets to None" in page
    assert page.count("```") % 2 == 0


def test_the_readme_is_short_and_runs_what_ci_runs() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci in lines, "the README's test command is what .ci/run runs"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    text = re.sub(r"`[^`]*`", "", text)         # code spans: `self.blocks[i](x)` is no link
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name}: {target}: no such file"
        if anchor:
            assert anchor in _anchors(linked), f"{page.name}: {target}: no such heading"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_toml_snippet_is_a_valid_configuration(page: Path, tmp_path: Path) -> None:
    snippets = re.findall(r"^```toml\n(.*?)^```", page.read_text(encoding="utf-8"),
                          flags=re.M | re.S)
    for snippet in snippets:
        pyproject = tmp_path / "pyproject.toml"
        pyproject.write_text(snippet if "[tool.tsfix]" in snippet
                             else "[tool.tsfix]\n" + snippet, encoding="utf-8")
        try:
            load_config(pyproject)
        except ConfigError as exc:
            pytest.fail(f"{page.name}: a TOML snippet is not a valid configuration: {exc}")
