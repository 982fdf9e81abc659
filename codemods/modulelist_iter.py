"""``modulelist-iter``: ModuleList / Sequential / ModuleDict indexing becomes iteration.

(Work in progress: the rule is being written; it rewrites nothing yet.)
"""

from __future__ import annotations

from tsfix.codemods.rule import Rule


class ModuleListIter(Rule):
    name = "modulelist-iter"
    summary = "Indexing a ModuleList/Sequential/ModuleDict with a variable becomes iteration"
