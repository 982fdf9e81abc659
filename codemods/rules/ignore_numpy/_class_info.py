"""What ``ignore-numpy`` needs about the class being rewritten, on top of the shared facts."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.numpy_usage import function_numpy_bindings, numpy_uses
from tsfix.codemods.facts.syntax import find_all, qualified_name, self_attr, self_name
from tsfix.codemods.facts.value_types import (
    Typer,
    annotation_text,
    is_tensor_layer,
    type_from_annotation,
    typing_names,
)
from tsfix.codemods.rules.base import Rule


class ClassInfo:
    """The class's shared facts (``facts``: compiled methods, ``__init__`` attributes and
    layers, parameter types; ``module``: imports, numpy bindings), what this rule needs
    besides (numpy and list/dict attributes, method return types, names taken), and how the
    file spells ``torch.jit.ignore`` and ``Tensor``."""

    def __init__(self, rule: Rule, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.cls = cls
        self.name = cls.name.value
        self.module = rule.facts
        self.facts = rule.class_facts(cls)
        self.observed: Mapping[str, Mapping[str, str]] = rule.observed.get(self.name, {})

    # -- what __init__ stores, beyond the class facts ------------------------------------------

    @cached_property
    def _init_values(self) -> tuple[set[str], set[str]]:
        numpy_attributes: set[str] = set()
        containers: set[str] = set()
        init = self.facts.init
        if init is None:
            return numpy_attributes, containers
        self_var = self_name(init) or "self"
        imports = self.module.imports
        bindings = function_numpy_bindings(init, self.module.numpy_bindings)
        typer = Typer({}, imports, None)
        for assign in find_all(init.body, cst.Assign, cst.AnnAssign):
            targets = ([t.target for t in assign.targets] if isinstance(assign, cst.Assign)
                       else [assign.target])
            value = assign.value
            if value is None:
                continue
            for target in targets:
                attr = self_attr(target, self_var)
                if attr is None:
                    continue
                qualified = (qualified_name(value.func, imports) or ""
                             if isinstance(value, cst.Call) else "")
                if is_tensor_layer(qualified) or qualified in (
                        "torch.nn.Parameter", "torch.nn.parameter.Parameter") or (
                        qualified.startswith("torch.") and qualified.count(".") == 1
                        and qualified.rpartition(".")[2][:1].islower()):
                    continue        # a layer or a tensor (the class facts know these)
                if numpy_uses(value, bindings, imports) and not typer.type_of(value):
                    numpy_attributes.add(attr)
                elif isinstance(value, cst.List | cst.Dict | cst.Set) or (
                        isinstance(value, cst.Call)
                        and get_full_name_for_node(value.func) in ("list", "dict", "set")):
                    containers.add(attr)
        return numpy_attributes, containers

    @property
    def numpy_attributes(self) -> set[str]:
        """Attributes ``__init__`` sets to a numpy value: TorchScript drops them from the
        scripted module, so an ignored method cannot read them."""
        return self._init_values[0]

    @property
    def containers(self) -> set[str]:
        """Attributes ``__init__`` sets to a list, dict or set: an ignored method of a
        scripted module gets a copy of them."""
        return self._init_values[1]

    @cached_property
    def returns(self) -> dict[str, str | None]:
        """Method -> its return annotation's type (what ``self.m(...)`` gives)."""
        return {name: type_from_annotation(f.returns.annotation)
                for name, f in self.facts.methods.items() if f.returns is not None}

    @cached_property
    def taken(self) -> set[str]:
        """Names a new method must not take: methods, class attributes, ``self.<attr>``."""
        taken = set(self.facts.methods)
        if isinstance(self.cls.body, cst.IndentedBlock):
            for stmt in self.cls.body.body:
                for target in find_all(stmt, cst.AssignTarget, cst.AnnAssign):
                    if isinstance(target.target, cst.Name):
                        taken.add(target.target.value)
        for func in self.facts.methods.values():
            self_var = self_name(func) or "self"
            for node in find_all(func.body, cst.Attribute):
                attr = self_attr(node, self_var)
                if attr is not None:
                    taken.add(attr)
        return taken

    # -- how the file spells torch -------------------------------------------------------------

    @cached_property
    def decorator(self) -> str | None:
        """``torch.jit.ignore`` as this file spells it (None: no torch or torch.jit import)."""
        alias = self.module.torch_alias
        if alias is not None:
            return f"{alias}.jit.ignore"
        jit_alias = next((local for local, full in self.module.imports.items()
                          if full == "torch.jit"), None)
        return f"{jit_alias}.ignore" if jit_alias else None

    @cached_property
    def tensor_name(self) -> str | None:
        """``Tensor`` as this file spells it (None: it cannot without a torch import)."""
        if (self.module.imports.get("Tensor") == "torch.Tensor"
                or self.module.torch_alias is not None):
            return self.module.tensor_name
        return None

    def annotation(self, kind: str) -> cst.Annotation:
        assert self.tensor_name is not None
        self.rule.need_typing(*typing_names(kind))
        return cst.Annotation(cst.parse_expression(annotation_text(kind, self.tensor_name)))
