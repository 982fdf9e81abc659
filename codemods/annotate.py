"""``annotate``: the type annotations and signatures TorchScript needs.

(Work in progress: the rule is being written; it rewrites nothing yet.)
"""

from __future__ import annotations

from tsfix.codemods.rule import Rule


class Annotate(Rule):
    name = "annotate"
    summary = "Annotate parameters, empty containers, returns and attributes TorchScript cannot type"
    needs_observations = True
