"""Constructor callees defined in other files: whether a call in ``__init__`` builds a module
whose class is elsewhere (found through the imports as Python would, read, never imported)."""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.project import (
    is_standard_library,
    lookup,
    relative_imports,
    star_imports,
)
from tsfix.codemods.facts.syntax import qualified_name
from tsfix.codemods.rules.base import Rule


class Callees:
    """The callees of one rule's ``__init__`` calls looked up in other files, memoized."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        # Callees of __init__ calls looked up in other files: (as written, import level,
        # dotted name) -> how a reason names them (None: no module is built).
        self._elsewhere: dict[tuple[str, int, str], str | None] = {}
        self._relative: tuple[cst.Module, dict[str, tuple[int, str]],
                              list[tuple[int, str]]] | None = None

    def builds_module_elsewhere(self, func: cst.BaseExpression) -> str | None:
        """How a reason names the callee of a call in ``__init__`` that builds, or may build,
        a module whose class is not in this file; None when it is shown not to (a function, a
        class that is no ``nn.Module``, the standard library, torch outside ``torch.nn``) or is
        not imported at all (this file's own names, builtins, methods)."""
        dotted = get_full_name_for_node(func)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.rule.facts.imports:
            level, target = 0, qualified_name(func, self.rule.facts.imports) or dotted
        elif head in self._imports_of_tree()[0]:
            level, imported = self._imports_of_tree()[0][head]
            target = ".".join(p for p in (imported, rest) if p)
        elif head not in self.rule.facts.top_level_names and self._imports_of_tree()[1]:
            starred = self._star_imported(dotted)
            if starred is None:
                return None
            level, target = starred
        else:
            return None
        if not level and (target.split(".")[0] == "torch" or is_standard_library(target)):
            return None
        key = (dotted, level, target)
        if key not in self._elsewhere:
            self._elsewhere[key] = self._callee_elsewhere(dotted, target, level)
        return self._elsewhere[key]

    def _callee_elsewhere(self, dotted: str, target: str, level: int) -> str | None:
        filename = self.rule.context.filename
        found = lookup(filename, target, level) if filename else None
        shown = "." * level + target
        if found is None:
            if level:
                return f"{dotted} (from {shown}, whose source was not found)"
            # An installed package: a class (CapWords, by convention) is taken to build a
            # module; a function is not followed, as in the user's tree.
            if not target.rsplit(".", 1)[-1][:1].isupper():
                return None
            return (f"{dotted} ({shown}, whose source is not in this tree: a class from it is "
                    "taken to be a module)")
        if found.kind == "class" and found.module is False:
            return None
        if found.kind in ("function", "other"):
            return None
        if found.kind == "external":
            external = found.external
            if external.split(".")[0] == "torch":
                return dotted if external.startswith("torch.nn.") else None
            if is_standard_library(external) or not external.rsplit(".", 1)[-1][:1].isupper():
                return None
            return (f"{dotted} ({external}, re-exported by {found.display}, whose source is not "
                    "in this tree: a class from it is taken to be a module)")
        if found.kind == "unknown":
            return f"{dotted} (from {found.display}, which {found.problem}: taken to be a module)"
        if found.module is None:
            return (f"{dotted} (a class defined in {found.display} with a base not in this "
                    "tree: taken to be a module)")
        return f"{dotted} (a module class defined in {found.display})"

    def _imports_of_tree(self) -> tuple[dict[str, tuple[int, str]], list[tuple[int, str]]]:
        """The file's relative imports and ``*`` imports (module facts hold the absolute)."""
        tree = self.rule.source_module
        if self._relative is None or self._relative[0] is not tree:
            self._relative = (tree, relative_imports(tree), star_imports(tree))
        return self._relative[1], self._relative[2]

    def _star_imported(self, dotted: str) -> tuple[int, str] | None:
        """(level, dotted name) of a name a ``*`` import brings from the user's tree; None
        when no module of the tree defines it (a builtin, or an installed package's name,
        which is not followed)."""
        if not self.rule.context.filename:
            return None
        for level, module in self._imports_of_tree()[1]:
            target = f"{module}.{dotted}" if module else dotted
            found = lookup(self.rule.context.filename, target, level)
            if found is not None and found.kind != "unknown":
                return level, target
        return None
