"""No dead code in codemods/ and cli/: vulture finds functions, classes, methods, variables and
attributes nothing uses (at 60% confidence and up).

What vulture cannot see used is whitelisted: LibCST visitor methods (``visit_*``/``leave_*``,
called by name by LibCST's dispatch) and click commands by pattern here, the rest in
tests/vulture_whitelist.py, and the rule classes and numpy-to-torch's handlers from where they
are found (rules/registry.py and numpy_to_torch/_table.py). A rule class the registry does not
find or a handler no table entry names is reported like any other dead code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHITELIST = ROOT / "tests" / "vulture_whitelist.py"


def _discovered_names() -> list[str]:
    from tsfix.codemods.rules.numpy_to_torch._table import HANDLERS
    from tsfix.codemods.rules.registry import ALL_RULES

    rules = {form for rule in ALL_RULES.values()
             for form in (rule, *rule.target_forms.values())}
    names = sorted(rule.__name__ for rule in rules)
    names += sorted({f"_{handler}" for handler, _ in HANDLERS.values()})
    return names


def dead_code(*extra: Path) -> list[str]:
    """vulture's findings for codemods/ and cli/ (and ``extra`` files), one per line."""
    done = subprocess.run(
        [sys.executable, "-m", "vulture", "codemods", "cli", str(WHITELIST), *map(str, extra),
         "--min-confidence", "60",
         "--ignore-names", "visit_*,leave_*",
         "--ignore-decorators", "@main.command"],
        cwd=ROOT, capture_output=True, text=True, check=False)
    # 0: nothing found, 3: dead code found; anything else (a file it cannot parse, a bad
    # option) would otherwise pass with no findings.
    assert done.returncode in (0, 3), done.stderr
    return done.stdout.splitlines()


def _discovered(tmp_path: Path) -> Path:
    """A whitelist of the rule classes and handlers found by name at run time."""
    path = tmp_path / "discovered.py"
    path.write_text("".join(f"_.{name}\n" for name in _discovered_names()))
    return path


def test_codemods_and_cli_have_no_dead_code(tmp_path: Path) -> None:
    discovered = _discovered(tmp_path)
    found = dead_code(discovered)
    assert not found, "dead code (remove it, or whitelist it in tests/vulture_whitelist.py " \
        "saying why it is used):\n" + "\n".join(found)


def test_a_function_nothing_calls_is_reported(tmp_path: Path) -> None:
    """The check would catch dead code: a module-level function nobody calls is a finding."""
    discovered = _discovered(tmp_path)
    dead = tmp_path / "dead.py"
    dead.write_text("def never_called_helper() -> int:\n    return 1\n")
    assert dead_code(discovered, dead) == [
        f"{dead}:1: unused function 'never_called_helper' (60% confidence)"]
