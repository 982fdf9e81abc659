"""Rule names and one-line summaries, read from the rule modules without importing LibCST.

``tsfix --help`` and ``tsfix rules`` must start fast (no LibCST, black or torch import), so the
``name``, ``summary`` and ``order`` literals are read from each rule module's class statement
with ``ast`` (only the class's own lines up to its first method are parsed, a few ms in all).
The rule classes stay the only place they are written.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

_RULE_CLASS = re.compile(r"^class \w+\(Rule\):\n", re.MULTILINE)
_ATTRIBUTE = re.compile(r"^    (name|summary|order) = ", re.MULTILINE)
_NEXT_CLASS = re.compile(r"^\S", re.MULTILINE)


class UnknownRuleError(ValueError):
    pass


@functools.cache
def rule_summaries() -> dict[str, str]:
    """name -> summary, in ``--rule all`` order."""
    found: list[tuple[int, str, str]] = []
    here = Path(__file__).resolve().parent
    # A rule is a module of this package, or a subpackage (its class in __init__.py).
    for path in sorted([*here.glob("*.py"), *here.glob("*/__init__.py")]):
        text = path.read_text(encoding="utf-8")
        for start in _RULE_CLASS.finditer(text):
            end = _NEXT_CLASS.search(text, start.end())
            body = text[start.end():end.start() if end else len(text)]
            values = {match.group(1): _literal_at(body, match.end())
                      for match in _ATTRIBUTE.finditer(body)}
            if {"name", "summary", "order"} <= values.keys():
                found.append((int(values["order"]), str(values["name"]),  # type: ignore[call-overload]
                              str(values["summary"])))
    return {name: summary for _, name, summary in sorted(found)}


def _literal_at(text: str, offset: int) -> object:
    """The literal that starts at ``offset`` (it may span a few lines)."""
    lines = text[offset:].splitlines()
    for count in range(1, min(len(lines), 12) + 1):
        try:
            return ast.literal_eval("\n".join(lines[:count]).strip())
        except (SyntaxError, ValueError):
            continue
    raise ValueError(f"not a literal: {lines[0]!r}")


def check_rule_names(names: list[str], known: list[str]) -> None:
    """Raise :class:`UnknownRuleError` naming the first of ``names`` that is not known."""
    for name in names:
        if name != "all" and name not in known:
            raise UnknownRuleError(
                f"unknown rule {name!r} (known: {', '.join(['all', *known])})")
