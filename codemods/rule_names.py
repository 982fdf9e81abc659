"""Rule names and one-line summaries, importable without LibCST.

``tsfix --help`` and ``tsfix rules`` must start fast (no LibCST, black or torch import), so the
names and summaries live here as plain strings, in ``--rule all`` order. Each rule class keeps
its own ``name`` and ``summary`` too; ``tests/test_cli.py`` checks that this table matches
:data:`tsfix.codemods.registry.ALL_RULES` exactly.
"""

from __future__ import annotations

RULE_SUMMARIES: dict[str, str] = {
    "modulelist-iter": "Indexing a ModuleList/Sequential/ModuleDict with a variable becomes "
                       "iteration over the container; parameter names are unchanged.",
    "lift-branch": "Config-attribute branches in forward() become a typed forward() argument, "
                   "so one scripted or exported artifact keeps every path.",
    "numpy-to-torch": "Translate numpy calls in compiled methods to their exact torch / math "
                      "equivalents",
    "ignore-numpy": "Move numpy statements of compiled methods into a @torch.jit.ignore method",
    "annotate": "Annotate parameters, empty containers, returns and attributes that TorchScript "
                "cannot type",
}


class UnknownRuleError(ValueError):
    pass


def check_rule_names(names: list[str], known: list[str]) -> None:
    """Raise :class:`UnknownRuleError` naming the first of ``names`` that is not known."""
    for name in names:
        if name != "all" and name not in known:
            raise UnknownRuleError(
                f"unknown rule {name!r} (known: {', '.join(['all', *known])})")
