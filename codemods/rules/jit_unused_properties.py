"""``jit-unused-properties``: a ``@property`` TorchScript cannot compile, and that no compiled
method reads, is listed in the class's ``__jit_unused_properties__``.

What it does
    TorchScript compiles every ``@property`` of a module it scripts (getter and setter), the
    inherited ones too, whether or not ``forward`` uses them. For each property of a module
    class whose getter or setter does something TorchScript cannot compile::

        self.__sample_rate              a name-mangled attribute (or self.__class__, __dict__)
        type(self), next(...)           Python builtins TorchScript lacks
        self.parameters(), .modules()   nn.Module's generator methods (also named_*, buffers,
                                          children)
        np.*, t.numpy()                 numpy
        lambda, try, global, nested def/class, yield, set literals, :=, f"{x:.2f}"
        self.other_property             a property of this list

    and that no compiled method of any module class in the file reads (``.sample_rate`` on
    anything, ``getattr(x, "sample_rate")``), the rule adds the property's name to
    ``__jit_unused_properties__`` on the class that defines it: a new class attribute after the
    docstring, or the class's own list literal extended. A class of the file that inherits the
    property and has a list of its own gets the name in that list too.

Why it breaks export
    A property that does not compile makes the class and every subclass fail to script, with an
    error about the property (``Module 'ConvTasNet' has no attribute '__sample_rate'`` for
    asteroid's ``BaseModel.sample_rate``, which returns ``self.__sample_rate``: Python stores
    the attribute as ``_BaseModel__sample_rate``), even when forward never touches it.
    TorchScript skips the properties named in ``__jit_unused_properties__`` (measured on torch
    2.13: the class and its subclasses then script, for every construct above).

Example
    Before::

        class BaseModel(torch.nn.Module):
            def __init__(self, sample_rate: float):
                super().__init__()
                self.__sample_rate = sample_rate

            @property
            def sample_rate(self):
                return self.__sample_rate

    After::

        class BaseModel(torch.nn.Module):
            # TorchScript compiles every property; it cannot compile these, and no compiled
            # method reads them.
            __jit_unused_properties__ = ["sample_rate"]

            def __init__(self, sample_rate: float):
                ...

Fix safety
    Only TorchScript reads ``__jit_unused_properties__``: eager behaviour is unchanged, and the
    property still works on the Python module. The scripted module has no such attribute
    (``scripted.sample_rate`` raises AttributeError); it could not be scripted before. A
    subclass in another file that reads the property in a compiled method fails either way (the
    property does not compile); one that overrides it with a property that compiles and reads
    that in ``forward`` would now fail: TorchScript skips names, not definitions. Left alone,
    with the reason reported: a property a compiled method of the file reads (make it
    compilable instead, e.g. store the value in a plain attribute), a class whose
    ``__jit_unused_properties__`` is not a list or tuple literal, and a class with a base from
    another file of the project (it may declare its own list, which a list here would replace).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import libcst as cst
from tsfix.codemods.facts.prefilter import AstFile, dotted_name
from tsfix.codemods.facts.syntax import (
    code_of,
    decorator_names,
    find_all,
    parameters_of,
    self_attr,
    self_name,
)
from tsfix.codemods.rules._class_lists import OwnList, appended, own_list, with_list
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_LIST = "__jit_unused_properties__"
# nn.Module methods that are generators (``yield``): TorchScript cannot compile them.
_GENERATOR_METHODS = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "children",
    "named_children", "modules", "named_modules"})
_UNSUPPORTED_BUILTINS = {"next": "next()", "iter": "iter()"}
_SYNTAX: tuple[tuple[type[cst.CSTNode], str], ...] = (
    (cst.Lambda, "a lambda"), (cst.Try, "try/except"), (cst.TryStar, "try/except*"),
    (cst.Global, "a global statement"), (cst.Nonlocal, "a nonlocal statement"),
    (cst.FunctionDef, "a nested function"), (cst.ClassDef, "a nested class"),
    (cst.Yield, "yield"), (cst.Set, "a set literal"), (cst.SetComp, "a set comprehension"),
    (cst.NamedExpr, "an assignment expression (:=)"))
_COMMENT = ("# TorchScript compiles every property; it cannot compile these, and no compiled\n"
            "# method reads them.")


@dataclass
class _Property:
    name: str
    owner: str                                  # the class that defines it
    functions: list[cst.FunctionDef] = field(default_factory=list)   # getter, setter
    failure: str | None = None                  # what TorchScript cannot compile, if anything


def _properties(cls: cst.ClassDef) -> dict[str, _Property]:
    """The class's own properties: ``@property`` getters and their ``@<name>.setter``s (the
    deleter is not compiled)."""
    found: dict[str, _Property] = {}
    if not isinstance(cls.body, cst.IndentedBlock):
        return found
    for statement in cls.body.body:
        if not isinstance(statement, cst.FunctionDef):
            continue
        name = statement.name.value
        decorators = decorator_names(statement)
        if "property" in decorators:
            found[name] = _Property(name, cls.name.value, [statement])
        elif f"{name}.setter" in decorators and name in found:
            found[name].functions.append(statement)
    return found


def _failure(func: cst.FunctionDef, owner: str, numpy_names: Mapping[str, str]) -> str | None:
    """What in a getter or setter TorchScript cannot compile (measured on torch 2.13), or
    None."""
    self_var = self_name(func)
    for node in find_all(func.body, cst.Attribute):
        attr = self_attr(node, self_var) if self_var is not None else None
        if attr is not None and attr.startswith("__"):
            if attr.endswith("__"):
                return f"it reads `{code_of(node)}`, which a scripted module does not have"
            return (f"it reads the name-mangled attribute `{code_of(node)}` (Python stores it "
                    f"as `_{owner.lstrip('_')}{attr}`; TorchScript looks for `{attr}`)")
    for call in find_all(func.body, cst.Call):
        callee = call.func
        if isinstance(callee, cst.Name) and callee.value in _UNSUPPORTED_BUILTINS:
            return f"it calls {_UNSUPPORTED_BUILTINS[callee.value]}, which TorchScript lacks"
        if (isinstance(callee, cst.Name) and callee.value == "type" and len(call.args) == 1
                and isinstance(call.args[0].value, cst.Name)
                and call.args[0].value.value == self_var):
            return "it calls type(self), which TorchScript cannot compile"
        method = self_attr(callee, self_var) if self_var is not None else None
        if method in _GENERATOR_METHODS:
            return (f"it calls `{code_of(callee)}()`, a generator of nn.Module that "
                    "TorchScript cannot compile")
        if isinstance(callee, cst.Attribute) and callee.attr.value == "numpy" and not call.args:
            return "it uses numpy (`.numpy()`)"
    local = set(parameters_of(func))
    for name in find_all(func.body, cst.Name):
        if name.value in numpy_names and name.value not in local:
            return f"it uses numpy (`{name.value}`)"
    for kind, what in _SYNTAX:
        if find_all(func.body, kind):
            return f"it holds {what}"
    for part in find_all(func.body, cst.FormattedStringExpression):
        if part.format_spec is not None or part.conversion is not None:
            return "it holds an f-string with a format spec or conversion"
    return None


_AST_SYNTAX = (ast.Lambda, ast.Try, ast.TryStar, ast.Global, ast.Nonlocal, ast.FunctionDef,
               ast.AsyncFunctionDef, ast.ClassDef, ast.Yield, ast.YieldFrom, ast.Set,
               ast.SetComp, ast.NamedExpr)


def _may_fail(func: ast.FunctionDef, numpy_names: set[str]) -> bool:
    """Whether :func:`_failure` may find something in ``func`` (the prefilter's ``ast`` look:
    it must say yes to everything _failure finds)."""
    nodes = list(ast.walk(func))[1:]
    for node in nodes:
        if isinstance(node, _AST_SYNTAX):
            return True
        if isinstance(node, ast.Attribute) and (node.attr.startswith("__")
                                                or node.attr in _GENERATOR_METHODS
                                                or node.attr == "numpy"):
            return True
        if isinstance(node, ast.Name) and (node.id in numpy_names or node.id == "type"
                                           or node.id in _UNSUPPORTED_BUILTINS):
            return True
        if isinstance(node, ast.FormattedValue) and (node.format_spec is not None
                                                     or node.conversion != -1):
            return True
    return False


def _reads(node: cst.CSTNode, wanted: set[str]) -> Iterator[tuple[str, cst.CSTNode]]:
    """``<anything>.name`` and ``getattr(<anything>, "name")`` for each of ``wanted``."""
    for attribute in find_all(node, cst.Attribute):
        if attribute.attr.value in wanted:
            yield attribute.attr.value, attribute
    for call in find_all(node, cst.Call):
        if (isinstance(call.func, cst.Name) and call.func.value in ("getattr", "hasattr")
                and len(call.args) >= 2 and isinstance(call.args[1].value, cst.SimpleString)):
            named = call.args[1].value.evaluated_value
            if isinstance(named, str) and named in wanted:
                yield named, call


class JitUnusedProperties(Rule):
    __doc__ = __doc__
    name = "jit-unused-properties"
    # Last: whether a compiled method reads a property is judged on the methods as the other
    # rules leave them.
    order = 110
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF225", "uncompilable-property", "property TorchScript cannot compile",
             "TorchScript compiles every @property of a scripted module (inherited ones too), "
             "even when forward never reads it; one it cannot compile (a name-mangled "
             "self.__x, next(), numpy, ...) fails the class and its subclasses. List it in "
             "`__jit_unused_properties__` on the class, or make it compilable."),
    )
    summary = ("@property getters TorchScript cannot compile and no compiled method reads "
               "(e.g. reading self.__x) are listed in the class's __jit_unused_properties__")

    VALID = (
        # Compiles: nothing to do.
        """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._rate = 8000.0
    @property
    def rate(self):
        return self._rate
    def forward(self, x):
        return x
""",
        # forward reads it: listing it would break forward; reported instead.
        """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.__rate = 8000.0
    @property
    def rate(self):
        return self.__rate
    def forward(self, x):
        return x * self.rate
""",
    )
    INVALID = (
        Example(
            '''
import torch
class BaseModel(torch.nn.Module):
    """Base class for serializable models."""

    def __init__(self, sample_rate: float):
        super().__init__()
        self.__sample_rate = sample_rate

    @property
    def sample_rate(self):
        return self.__sample_rate

    @sample_rate.setter
    def sample_rate(self, new_sample_rate: float):
        self.__sample_rate = new_sample_rate

class Gain(BaseModel):
    def forward(self, x):
        return x * 2
''',
            '''
import torch
class BaseModel(torch.nn.Module):
    """Base class for serializable models."""

    # TorchScript compiles every property; it cannot compile these, and no compiled
    # method reads them.
    __jit_unused_properties__ = ["sample_rate"]

    def __init__(self, sample_rate: float):
        super().__init__()
        self.__sample_rate = sample_rate

    @property
    def sample_rate(self):
        return self.__sample_rate

    @sample_rate.setter
    def sample_rate(self, new_sample_rate: float):
        self.__sample_rate = new_sample_rate

class Gain(BaseModel):
    def forward(self, x):
        return x * 2
''',
        ),
        # An existing list is extended; a property reading a failing one fails too.
        Example(
            """
import torch
class M(torch.nn.Module):
    __jit_unused_properties__ = ["name"]
    @property
    def name(self):
        return "m"
    @property
    def device(self):
        return next(self.parameters()).device
    @property
    def on_cuda(self):
        return self.device.type == "cuda"
    def forward(self, x):
        return x
""",
            """
import torch
class M(torch.nn.Module):
    __jit_unused_properties__ = ["name", "device", "on_cuda"]
    @property
    def name(self):
        return "m"
    @property
    def device(self):
        return next(self.parameters()).device
    @property
    def on_cuda(self):
        return self.device.type == "cuda"
    def forward(self, x):
        return x
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        # Nothing is listed or reported unless a property of a module class may fail to
        # compile (what _failure looks for, loosely: any dunder attribute, any numpy import).
        numpy = {name for name, full in file.imports.items() if full.split(".")[0] == "numpy"}
        return any(_may_fail(item, numpy) for cls in file.module_classes for item in cls.body
                   if isinstance(item, ast.FunctionDef) and any(
                       dotted_name(d) == "property" or dotted_name(d).endswith(".setter")
                       for d in item.decorator_list))

    def prepare(self, module: cst.Module) -> None:
        facts = self.facts
        classes = [c for c in facts.classes.values() if facts.is_module_class(c)]
        self.properties: dict[str, dict[str, _Property]] = {c.name.value: _properties(c)
                                                            for c in classes}
        every = [p for props in self.properties.values() for p in props.values()]
        numpy_names = facts.numpy_bindings
        for prop in every:
            prop.failure = next((f for f in (_failure(func, prop.owner, numpy_names)
                                             for func in prop.functions) if f), None)
        # A property reading one that does not compile does not compile either.
        changed = True
        while changed:
            changed = False
            failing = {p.name: p for p in every if p.failure}
            for prop in every:
                if prop.failure:
                    continue
                for func in prop.functions:
                    self_var = self_name(func)
                    read = next((name for name, node in _reads(func.body, set(failing))
                                 if isinstance(node, cst.Attribute) and self_var is not None
                                 and self_attr(node, self_var) == name), None)
                    if read is not None:
                        prop.failure = f"it reads the property `{read}`, which does not compile"
                        changed = True
                        break
        failing_names = {p.name for p in every if p.failure}
        # Who reads them in compiled code, anywhere in the file.
        self.readers: dict[str, tuple[str, str]] = {}
        for cls in classes:
            class_facts = self.class_facts(cls)
            for method, func in class_facts.compiled_methods():
                skipped = class_facts.never_compiled(method)
                for name, node in _reads(func.body, failing_names):
                    if id(node) not in skipped and name not in self.readers:
                        self.readers[name] = (cls.name.value, method)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        name = cls.name.value
        own = self.properties.get(name, {})
        wanted: list[str] = []
        for prop in own.values():
            if not prop.failure:
                continue
            reader = self.readers.get(prop.name)
            message = f"property {prop.name} does not compile: {prop.failure}"
            if reader is not None:
                self.skip(name, prop.functions[0],
                          f"property {prop.name} does not compile ({prop.failure}), and "
                          f"{reader[0]}.{reader[1]}() reads it: TorchScript must compile it; "
                          "make it compilable (e.g. store the value in a plain attribute)",
                          code="TSF225", message=message)
                continue
            wanted.append(prop.name)
        inherited = self._inherited(cls)
        existing = own_list(cls, _LIST)
        if not wanted and (existing is None or not inherited):
            return cls
        if existing is not None and existing.value is None:
            return self._refuse(cls, wanted or inherited, existing.problem)
        if existing is not None:
            assert existing.value is not None
            missing = [n for n in [*wanted, *inherited] if n not in existing.names]
            if not missing:
                return cls
            rewritten = cls.visit(_ReplaceNode(existing.value, appended(existing.value, missing)))
            assert isinstance(rewritten, cst.ClassDef)
            return self._record(cls, rewritten, missing)
        foreign = self._foreign_bases(cls)
        if foreign:
            return self._refuse(cls, wanted, f"its base {foreign[0]} is defined in another file: "
                                f"it may declare its own {_LIST}, which a list here would "
                                "replace")
        inherited_list = self._base_list(cls)
        if inherited_list is not None and inherited_list.value is None:
            return self._refuse(cls, wanted, f"a base class's {inherited_list.problem}; a list "
                                "here would replace it")
        kept = list(inherited_list.names) if inherited_list is not None else []
        names = [*kept, *[n for n in wanted if n not in kept]]
        return self._record(cls, with_list(cls, _LIST, names, _COMMENT), wanted)

    def _record(self, cls: cst.ClassDef, rewritten: cst.ClassDef,
                added: list[str]) -> cst.ClassDef:
        name = cls.name.value
        own = self.properties.get(name, {})
        reasons = []
        for prop_name in added:
            prop = own.get(prop_name) or self._find(prop_name)
            if prop is not None and prop.failure:
                if prop.owner == name:
                    self.fixed(prop.functions[0], "TSF225", f"property {prop_name} does not "
                               f"compile: {prop.failure}")
                reasons.append(f"{prop_name}: {prop.failure}")
        self.changes.append(ClassChange(
            self.name, name, self.span_of(cls),
            f"listed in {_LIST}, read by no compiled method ({'; '.join(reasons)})"))
        return rewritten

    def _refuse(self, cls: cst.ClassDef, wanted: list[str], reason: str) -> cst.ClassDef:
        own = self.properties.get(cls.name.value, {})
        for prop_name in wanted:
            prop = own.get(prop_name) or self._find(prop_name)
            assert prop is not None
            where = prop.functions[0] if prop.owner == cls.name.value else cls
            self.skip(cls.name.value, where,
                      f"property {prop_name} does not compile ({prop.failure}); not listed in "
                      f"{_LIST}: {reason}", code="TSF225",
                      message=f"property {prop_name} does not compile: {prop.failure}")
        return cls

    def _find(self, prop_name: str) -> _Property | None:
        for props in self.properties.values():
            if prop_name in props:
                return props[prop_name]
        return None

    def _inherited(self, cls: cst.ClassDef) -> list[str]:
        """Failing, unread properties ``cls`` inherits from bases of this file and does not
        override."""
        own = self.properties.get(cls.name.value, {})
        found: list[str] = []
        for base in self.facts.local_bases(cls):
            for prop in self.properties.get(base.name.value, {}).values():
                if (prop.failure and prop.name not in own and prop.name not in self.readers
                        and prop.name not in found):
                    found.append(prop.name)
        return found

    def _foreign_bases(self, cls: cst.ClassDef) -> list[str]:
        """Bases defined neither in this file nor in torch."""
        foreign: list[str] = []
        for current in [cls, *self.facts.local_bases(cls)]:
            for base in self.facts.bases(current):
                if base in self.facts.classes or base.split(".")[0] in ("torch", "object", ""):
                    continue
                if base in ("Generic", "ABC") or base.startswith(("typing.", "abc.")):
                    continue
                foreign.append(base)
        return foreign

    def _base_list(self, cls: cst.ClassDef) -> OwnList | None:
        """The list of the nearest base of this file that sets one (the list ``cls`` inherits
        now), or None."""
        for base in self.facts.local_bases(cls):
            found = own_list(base, _LIST)
            if found is not None:
                return found
        return None


class _ReplaceNode(cst.CSTTransformer):
    def __init__(self, old: cst.CSTNode, new: cst.CSTNode) -> None:
        self.old = old
        self.new = new

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.new if original is self.old else updated
