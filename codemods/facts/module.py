"""Module facts: what a file imports, which of its classes are modules, and each class's facts.

One :class:`ModuleFacts` per parsed tree, shared by every rule and the linter through
:func:`module_facts` (memoised in the file scope). A rule that changed nothing hands the next rule
the same tree, and so the same facts; a rule that changed a class hands on a new tree whose
unchanged classes keep their :class:`~tsfix.codemods.facts.classes.ClassFacts`.

Base classes are resolved within the file (``class Block(Base)`` with ``Base`` defined above)
and, by name, through the imports (``torch.nn.Conv2d``). A base imported from another file of
the user's tree is recorded by its dotted name only: its source is not read here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.numpy_usage import module_numpy_bindings
from tsfix.codemods.facts.scope import current_scope
from tsfix.codemods.facts.syntax import (
    declared_field_types,
    import_map,
    module_class_names,
    qualified_name,
    top_level_names,
    torch_alias,
)


@dataclass(eq=False)
class ModuleFacts:
    tree: cst.Module
    _classes: dict[int, ClassFacts] = field(default_factory=dict)

    @cached_property
    def imports(self) -> dict[str, str]:
        """Local name -> dotted name it was imported as (``nn`` -> ``torch.nn``)."""
        return import_map(self.tree)

    @cached_property
    def module_classes(self) -> set[str]:
        """Names of the top-level classes that are ``nn.Module``-like."""
        return module_class_names(self.tree, self.imports)

    @cached_property
    def classes(self) -> dict[str, cst.ClassDef]:
        """Top-level classes by name (the last definition wins, as in Python)."""
        return {s.name.value: s for s in self.tree.body if isinstance(s, cst.ClassDef)}

    @cached_property
    def field_types(self) -> dict[str, dict[str, str]]:
        """Class -> its class-level annotated scalar fields (dataclass-style config objects)."""
        return declared_field_types(self.tree)

    @cached_property
    def numpy_bindings(self) -> dict[str, str]:
        return module_numpy_bindings(self.tree)

    @cached_property
    def top_level_names(self) -> set[str]:
        return top_level_names(self.tree)

    @cached_property
    def torch_alias(self) -> str | None:
        return torch_alias(self.imports)

    @cached_property
    def tensor_name(self) -> str:
        """How this file spells the Tensor type in an annotation."""
        if self.imports.get("Tensor") == "torch.Tensor":
            return "Tensor"
        return f"{self.torch_alias or 'torch'}.Tensor"

    def bases(self, cls: cst.ClassDef) -> list[str]:
        """Dotted names of ``cls``'s bases, resolved through the imports."""
        return [qualified_name(base.value, self.imports) or get_full_name_for_node(base.value)
                or "" for base in cls.bases if base.keyword is None]

    def local_bases(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The bases of ``cls`` defined in this file, nearest first, transitively."""
        found: list[cst.ClassDef] = []
        pending = [cls]
        while pending:
            current = pending.pop(0)
            for base in current.bases:
                name = get_full_name_for_node(base.value) or ""
                local = self.classes.get(name)
                if base.keyword is None and local is not None and local is not cls \
                        and local not in found:
                    found.append(local)
                    pending.append(local)
        return found

    def is_module_class(self, cls: cst.ClassDef) -> bool:
        return cls.name.value in self.module_classes

    def of(self, cls: cst.ClassDef) -> ClassFacts:
        """The facts of one class of this tree. A class node that the previous tree held too,
        with the same imports, keeps the facts computed for it then."""
        scope = current_scope()
        cache = scope.classes if scope is not None else self._classes
        entry = cache.get(id(cls))
        if entry is not None and entry.cls is cls and entry.imports == self.imports:
            return entry
        facts = ClassFacts(cls, self.imports)
        cache[id(cls)] = facts
        return facts


def module_facts(tree: cst.Module) -> ModuleFacts:
    """The facts of ``tree``, once per tree in the current file scope."""
    scope = current_scope()
    if scope is None:
        return ModuleFacts(tree)
    entry = scope.modules.get(id(tree))
    if entry is not None and entry.tree is tree:
        return entry  # type: ignore[no-any-return]
    facts = ModuleFacts(tree)
    scope.modules[id(tree)] = facts
    return facts

