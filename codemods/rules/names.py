"""Rule names and one-line summaries, read from the rule modules without importing LibCST.

``tsfix --help`` and ``tsfix rules`` must start fast (no LibCST, black or torch import), so the
``name``, ``summary``, ``order`` and ``targets`` literals are read from each rule module's class
statement with ``ast`` (only the class's own lines up to its first method are parsed, a few ms
in all). The rule classes stay the only place they are written.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

_RULE_CLASS = re.compile(r"^class \w+\(Rule\):\n", re.MULTILINE)
_ATTRIBUTE = re.compile(r"^    (name|summary|order|targets|off_target) = ", re.MULTILINE)
# Every ``--target``; a rule serves them all unless its ``targets`` says otherwise.
TARGETS = ("torchscript", "onnx", "export")
_NEXT_CLASS = re.compile(r"^\S", re.MULTILINE)


class UnknownRuleError(ValueError):
    pass


@functools.cache
def rule_summaries() -> dict[str, str]:
    """name -> summary, in ``--rule all`` order."""
    return {name: summary for name, (summary, _, _) in _rule_literals().items()}


@functools.cache
def rule_targets() -> dict[str, tuple[tuple[str, ...], str]]:
    """name -> (the targets it serves, why it does not serve the others), in ``--rule all``
    order."""
    return {name: (targets, why) for name, (_, targets, why) in _rule_literals().items()}


@functools.cache
def _rule_literals() -> dict[str, tuple[str, tuple[str, ...], str]]:
    found: list[tuple[int, str, tuple[str, tuple[str, ...], str]]] = []
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
                served = values.get("targets", TARGETS)
                targets = tuple(str(x) for x in served) if isinstance(served, tuple) else TARGETS
                found.append((int(values["order"]), str(values["name"]),  # type: ignore[call-overload]
                              (str(values["summary"]), targets,
                               str(values.get("off_target", "")))))
    return {name: literals for _, name, literals in sorted(found)}


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


def for_target(names: list[str], target: str,
               served: dict[str, tuple[tuple[str, ...], str]]) -> list[str]:
    """The rules of ``names`` (``all``: every rule serving ``target``) in ``served``'s order
    (name -> (targets, why not the others)). A rule named explicitly that does not serve
    ``target`` is a usage error (UnknownRuleError): its fix is not what that exporter needs,
    and running it would put changes in the diff that nobody asked for."""
    check_rule_names(names, list(served))
    for name in names:
        if name != "all" and target not in served[name][0]:
            why = served[name][1] or (f"its fix is for {' and '.join(served[name][0])}; "
                                      f"the {target} target does not need it")
            available = [rule for rule, (targets, _) in served.items() if target in targets]
            raise UnknownRuleError(f"rule {name!r} does not apply under --target {target}: "
                                   f"{why} (rules for this target: {', '.join(available)})")
    return [name for name, (targets, _) in served.items()
            if target in targets and ("all" in names or name in names)]
