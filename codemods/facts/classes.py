"""Class facts: what TorchScript compiles in a class, what ``__init__`` stores, parameter types.

Every rule and the linter read these through :meth:`ModuleFacts.of
<tsfix.codemods.facts.module.ModuleFacts.of>`; nothing here is recomputed per rule.

**Compiled methods** (the one answer): ``forward`` and every ``@torch.jit.export`` method, then
every method they call as ``self.m(...)``, transitively; minus ``__init__``, methods decorated
``@torch.jit.ignore``/``@torch.jit.unused`` (and static/class methods and properties, which are
not compiled as methods), and minus calls that sit in code TorchScript never compiles: the body
of ``if not torch.jit.is_scripting():``, the ``else`` of ``if torch.jit.is_scripting():``, and
what follows ``if torch.jit.is_scripting(): return ...`` in the same block. ``torch.jit.
is_tracing()`` branches ARE compiled (measured on torch 2.13).

**Parameter types** (the one policy): an annotation is believed; else an observed type from the
eager example runs; else a literal default's type; else, for a parameter without a default,
``Tensor`` when the body uses it as one (a tensor method, a torch function, a layer call) and
unknown otherwise: TorchScript assumes Tensor, but a list or int parameter must not be typed
into a Tensor by that assumption.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property

import libcst as cst
from tsfix.codemods.facts.syntax import (
    AttrAssignment,
    attribute_assignments,
    decorator_names,
    find_all,
    literal_type,
    methods_of,
    parameters_of,
    qualified_name,
    registered_names,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import (
    EMPTY_DICT,
    EMPTY_LIST,
    TENSOR,
    Typer,
    collect_locals,
    is_complete,
    is_tensor_layer,
    type_from_annotation,
    unify_all,
)

_IGNORED = ("jit.ignore", "jit.unused")
_NOT_COMPILED_METHOD = (*_IGNORED, "staticmethod", "classmethod", "property")
_CONTAINERS = ("ModuleList", "Sequential", "ModuleDict")
_CONFIG_NAMES = ("cfg", "config", "conf", "hparams", "hp", "opt", "opts", "args", "params")
_FUNCTION_MODULES = ("torch.", "torch.nn.functional.", "F.")
# Methods of lists, dicts and str: a parameter used with one of these is not a Tensor.
CONTAINER_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "index", "count", "copy", "items", "keys",
    "values", "get", "update", "setdefault", "startswith", "endswith", "lower", "upper", "strip",
    "format", "join", "split", "replace", "sort", "reverse", "clear", "__len__"})
# torch functions that build a tensor from Python values, or join a sequence of tensors: an
# argument to them is not a Tensor (``torch.stack(feats)`` takes a list).
TENSOR_CONSTRUCTORS = frozenset({
    "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "tensor",
    "as_tensor", "linspace", "logspace", "eye", "range", "stack", "cat", "concat",
    "concatenate", "hstack", "vstack", "dstack", "column_stack", "row_stack",
    "broadcast_tensors", "block_diag", "cartesian_prod", "meshgrid", "einsum"})


def is_ignored(func: cst.FunctionDef) -> bool:
    """Decorated ``@torch.jit.ignore`` or ``@torch.jit.unused``: never compiled."""
    return any(name.endswith(_IGNORED) for name in decorator_names(func))


def is_exported(func: cst.FunctionDef) -> bool:
    """Decorated ``@torch.jit.export``: compiled like forward."""
    return any(name.endswith("jit.export") for name in decorator_names(func))


def never_compiled_method(func: cst.FunctionDef) -> bool:
    """Ignored, unused, static or class methods and properties: not compiled as methods."""
    return any(name.endswith(_NOT_COMPILED_METHOD) for name in decorator_names(func))


def scripting_test(test: cst.BaseExpression, imports: Mapping[str, str]) -> str | None:
    """"scripting" for ``torch.jit.is_scripting()`` (its else branch never compiles),
    "eager" for ``not torch.jit.is_scripting()`` (its body never compiles)."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, not negated
    if isinstance(test, cst.Call) and not test.args and (
            qualified_name(test.func, dict(imports)) or "").endswith("jit.is_scripting"):
        return "eager" if negated else "scripting"
    return None


def _ends_flow(block: cst.BaseSuite) -> bool:
    body: Sequence[cst.CSTNode] = block.body if isinstance(block, cst.IndentedBlock) else [block]
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine | cst.SimpleStatementSuite):
        return isinstance(last.body[-1], cst.Return | cst.Raise)
    return False


def never_compiled_nodes(func: cst.FunctionDef, imports: Mapping[str, str]) -> frozenset[int]:
    """ids of the nodes of ``func`` that TorchScript never compiles (see the module doc)."""
    skipped: set[int] = set()
    for block in find_all(func.body, cst.IndentedBlock):
        after_return = False
        for statement in block.body:
            if after_return:
                skipped.update(map(id, find_all(statement, cst.CSTNode)))  # type: ignore[type-abstract]
                continue
            if not isinstance(statement, cst.If):
                continue
            kind = scripting_test(statement.test, imports)
            if kind == "eager":
                skipped.update(map(id, find_all(statement.body, cst.CSTNode)))  # type: ignore[type-abstract]
            elif kind == "scripting" and statement.orelse is not None:
                skipped.update(map(id, find_all(statement.orelse, cst.CSTNode)))  # type: ignore[type-abstract]
            elif kind == "scripting" and _ends_flow(statement.body):
                after_return = True
    return frozenset(skipped)


class ClassFacts:
    """Facts of one class, each computed on first use."""

    def __init__(self, cls: cst.ClassDef, imports: Mapping[str, str]) -> None:
        self.cls = cls
        self.name = cls.name.value
        self.imports = dict(imports)
        self._never_compiled: dict[str, frozenset[int]] = {}
        self._typers: dict[tuple[str, tuple[tuple[str, str], ...]], Typer] = {}
        # method -> its facts.type_flow.TypeFlow (constant-flag and rebound-local both ask)
        self.type_flows: dict[str, object] = {}

    # -- methods ---------------------------------------------------------------------------

    @cached_property
    def methods(self) -> dict[str, cst.FunctionDef]:
        return methods_of(self.cls)

    @cached_property
    def redefined(self) -> set[str]:
        """Methods defined more than once in the class body (overload declarations followed by
        the implementation, or a plain redefinition); ``methods`` holds the last one."""
        seen: set[str] = set()
        twice: set[str] = set()
        if isinstance(self.cls.body, cst.IndentedBlock):
            for statement in self.cls.body.body:
                if isinstance(statement, cst.FunctionDef):
                    (twice if statement.name.value in seen else seen).add(statement.name.value)
        return twice

    @property
    def init(self) -> cst.FunctionDef | None:
        return self.methods.get("__init__")

    @cached_property
    def compiled(self) -> list[str]:
        """Names of the methods TorchScript compiles, roots first (``forward``, then the
        ``@torch.jit.export`` methods), then callees in discovery order."""
        methods = self.methods
        order = [name for name, func in methods.items()
                 if (name == "forward" or is_exported(func)) and not never_compiled_method(func)]
        order.sort(key=lambda name: name != "forward")
        for name in order:
            func = methods[name]
            self_var = self_name(func)
            if self_var is None:
                continue
            skipped = self.never_compiled(name)
            for call in find_all(func.body, cst.Call):
                callee = self_attr(call.func, self_var)
                if (callee in methods and callee not in order and callee != "__init__"
                        and id(call) not in skipped
                        and not never_compiled_method(methods[callee])):
                    order.append(callee)
        return order

    def compiled_methods(self) -> list[tuple[str, cst.FunctionDef]]:
        return [(name, self.methods[name]) for name in self.compiled]

    def never_compiled(self, method: str) -> frozenset[int]:
        """ids of the nodes of ``method`` that are never compiled (see the module doc)."""
        found = self._never_compiled.get(method)
        if found is None:
            found = self._never_compiled[method] = never_compiled_nodes(self.methods[method],
                                                                        self.imports)
        return found

    def is_compiled(self, method: str, node: cst.CSTNode) -> bool:
        """Whether ``node`` (inside ``method``) is code TorchScript compiles."""
        return method in self.compiled and id(node) not in self.never_compiled(method)

    # -- what __init__ stores --------------------------------------------------------------

    @cached_property
    def assignments(self) -> list[AttrAssignment]:
        """Every assignment to ``self.<attr>`` in every method, in source order."""
        return attribute_assignments(self.cls)

    @cached_property
    def assigned_outside_init(self) -> set[str]:
        return {a.attr for a in self.assignments if a.method != "__init__"}

    @cached_property
    def registered(self) -> set[str]:
        """Names given to ``register_buffer/register_parameter/add_module`` in ``__init__``."""
        return registered_names(self.init) if self.init is not None else set()

    @cached_property
    def declared(self) -> dict[str, str | None]:
        """Class-level annotations (``ids: List[int]``) -> their types."""
        found: dict[str, str | None] = {}
        if isinstance(self.cls.body, cst.IndentedBlock):
            for line in self.cls.body.body:
                if isinstance(line, cst.SimpleStatementLine):
                    for small in line.body:
                        if isinstance(small, cst.AnnAssign) and isinstance(small.target,
                                                                            cst.Name):
                            found[small.target.value] = type_from_annotation(
                                small.annotation.annotation)
        return found

    @cached_property
    def _stored(self) -> tuple[dict[str, str], set[str], dict[str, str | None], dict[str, str]]:
        attributes: dict[str, str] = {}
        layers: set[str] = set()
        maybe_none: dict[str, str | None] = {}
        empty_containers: dict[str, str] = {}
        init = self.init
        if init is None:
            return attributes, layers, maybe_none, empty_containers
        self_var = self_name(init) or "self"
        typer = Typer(self._init_env(init), self.imports, None)
        values: dict[str, list[str | None]] = {}
        for assign in find_all(init.body, cst.Assign, cst.AnnAssign):
            targets = ([t.target for t in assign.targets] if isinstance(assign, cst.Assign)
                       else [assign.target])
            for target in targets:
                attr = self_attr(target, self_var)
                if attr is None or assign.value is None:
                    continue
                values.setdefault(attr, []).extend(self._stored_types(assign.value, typer))
                if isinstance(assign.value, cst.Call) and is_tensor_layer(
                        qualified_name(assign.value.func, self.imports)):
                    layers.add(attr)
        for call in find_all(init.body, cst.Call):
            if (self_attr(call.func, self_var) is not None and len(call.args) >= 2
                    and call.func.attr.value in ("register_buffer", "register_parameter")
                    and isinstance(call.args[0].value, cst.SimpleString)):
                named = call.args[0].value.evaluated_value
                if isinstance(named, str):
                    stored = self._stored_types(call.args[1].value, typer, tensor=True)
                    values.setdefault(named, []).extend(stored)
        for attr in self.registered:
            values.setdefault(attr, [])
        for attr, kinds in values.items():
            non_none = [k for k in kinds if k != "None"]
            if "None" in kinds:
                maybe_none[attr] = unify_all(non_none) if non_none else None
            elif kinds and all(k in (EMPTY_LIST, EMPTY_DICT) or
                               (k is not None and k.startswith(("List[", "Dict[")))
                               for k in kinds) and any(k in (EMPTY_LIST, EMPTY_DICT)
                                                       for k in kinds):
                empty_containers[attr] = unify_all(kinds) or kinds[0]  # type: ignore[assignment]
            elif kinds and attr not in maybe_none:
                kind = unify_all(kinds)
                if kind is not None and "?" not in kind:
                    attributes[attr] = kind
        return attributes, layers, maybe_none, empty_containers

    @property
    def attributes(self) -> dict[str, str]:
        """``self.<attr>`` -> its type, for attributes ``__init__`` gives one type (scalars,
        tensors, typed containers)."""
        return self._stored[0]

    @property
    def layers(self) -> set[str]:
        """Submodules whose call returns one Tensor (``self.proj = nn.Linear(...)``)."""
        return self._stored[1]

    @property
    def maybe_none(self) -> dict[str, str | None]:
        """Attributes ``__init__`` may set to None -> the type of their other values."""
        return self._stored[2]

    @property
    def empty_containers(self) -> dict[str, str]:
        """Attributes ``__init__`` sets to an empty list or dict -> their container type."""
        return self._stored[3]

    def _init_env(self, init: cst.FunctionDef) -> dict[str, str | None]:
        env: dict[str, str | None] = {}
        self_var = self_name(init)
        for name, param in parameters_of(init).items():
            if name == self_var:
                continue
            if param.annotation is not None:
                env[name] = type_from_annotation(param.annotation.annotation)
            elif param.default is not None:
                env[name] = Typer({}, self.imports, None).type_of(param.default)
        return env

    def _stored_types(self, value: cst.BaseExpression, typer: Typer,
                      tensor: bool = False) -> list[str | None]:
        if isinstance(value, cst.IfExp):
            return (self._stored_types(value.body, typer, tensor)
                    + self._stored_types(value.orelse, typer, tensor))
        if isinstance(value, cst.Name) and value.value == "None":
            return ["None"]
        if isinstance(value, cst.Call):
            name = qualified_name(value.func, self.imports) or ""
            if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") or (
                    name.startswith("torch.") and name.rpartition(".")[2][:1].islower()
                    and name.count(".") == 1):
                return [TENSOR]
        if tensor:
            return [TENSOR]
        return [typer.type_of(value)]

    @cached_property
    def _kinds(self) -> tuple[dict[str, str], set[str], set[str], set[str]]:
        containers: dict[str, str] = {}
        submodules: set[str] = set()
        function_attrs: set[str] = set()
        config_objects: set[str] = set()
        init = self.init
        if init is None:
            return containers, submodules, function_attrs, config_objects
        defaults = {name: param.default for name, param in parameters_of(init).items()}
        for assigned in self.assignments:
            value = assigned.value
            if assigned.method != "__init__" or value is None:
                continue
            attr = assigned.attr
            if isinstance(value, cst.Call):
                called = qualified_name(value.func, self.imports) or ""
                short = called.rpartition(".")[2]
                if short in _CONTAINERS and (called.startswith("torch.nn.") or "nn." in called
                                             or called == short):
                    containers[attr] = short
                if called.startswith("torch.nn.") or short[:1].isupper():
                    submodules.add(attr)
            elif (isinstance(value, cst.Name) and value.value in defaults
                  and value.value.lower() in _CONFIG_NAMES):
                config_objects.add(attr)
            # A dict of one value type scripts (Dict[str, float]); namespaces do not.
            if config_like(attr) and not isinstance(value, cst.Integer | cst.Float | cst.Dict
                                                    | cst.SimpleString):
                config_objects.add(attr)
            if isinstance(value, cst.Attribute | cst.Name):
                name = qualified_name(value, self.imports) or ""
                if (name.startswith(_FUNCTION_MODULES) and name.rpartition(".")[2][:1].islower()
                        and name.count(".") >= 1):
                    function_attrs.add(attr)
        return containers, submodules, function_attrs, config_objects - submodules

    @property
    def containers(self) -> dict[str, str]:
        """Module containers -> their kind (``ModuleList``, ``Sequential``, ``ModuleDict``)."""
        return self._kinds[0]

    @property
    def submodules(self) -> set[str]:
        """Attributes ``__init__`` assigns a constructed class to (torch.nn or capitalised)."""
        return self._kinds[1]

    @property
    def function_attrs(self) -> set[str]:
        """Attributes holding a torch function (``self.act = torch.relu``)."""
        return self._kinds[2]

    @property
    def config_objects(self) -> set[str]:
        """Attributes holding a config object (``self.cfg = cfg``), by name."""
        return self._kinds[3]

    # -- parameter types -------------------------------------------------------------------

    def parameter_types(self, method: str, observed: Mapping[str, str] | None = None
                        ) -> dict[str, str | None]:
        """Parameter -> type for one method, by the policy in the module doc (``None``:
        unknown). ``self`` is left out; ``*args``/``**kwargs`` are unknown."""
        func = self.methods[method]
        observed = observed or {}
        self_var = self_name(func)
        env: dict[str, str | None] = {}
        params = func.params
        for index, param in enumerate([*params.posonly_params, *params.params,
                                       *params.kwonly_params]):
            if index == 0 and self_var is not None:
                continue
            name = param.name.value
            if param.annotation is not None:
                env[name] = type_from_annotation(param.annotation.annotation)
            elif is_complete(observed.get(name)):
                env[name] = observed[name]
            elif param.default is not None:
                env[name] = literal_type(param.default)
            else:
                env[name] = TENSOR if self.used_as_tensor(name, func) else None
        return env

    def typer(self, method: str, observed: Mapping[str, str] | None = None) -> Typer:
        """A :class:`Typer` for ``method``'s body: its parameters, the attributes and layers
        ``__init__`` stores, and its locals. Each caller gets its own copy (its ``env`` may be
        extended); the locals are collected once."""
        key = (method, tuple(sorted((observed or {}).items())))
        typer = self._typers.get(key)
        if typer is None:
            func = self.methods[method]
            typer = Typer(self.parameter_types(method, observed), self.imports, self_name(func),
                          self.attributes, self.layers)
            collect_locals(func.body, typer)
            self._typers[key] = typer
        return Typer(typer.env, typer.imports, typer.self_var, typer.attributes, typer.layers)

    def used_as_tensor(self, name: str, func: cst.FunctionDef) -> bool:
        """Whether ``func``'s body treats the name as a Tensor: a tensor method or attribute,
        a torch function (not a constructor), or a call of a tensor layer."""
        for attribute in find_all(func.body, cst.Attribute):
            if _is_name(attribute.value, name) and attribute.attr.value not in CONTAINER_METHODS:
                return True
        self_var = self_name(func)
        for call in find_all(func.body, cst.Call):
            if not any(_is_name(a.value, name) for a in call.args):
                continue
            if self_var and isinstance(call.func, cst.Attribute) and _is_name(call.func.value,
                                                                              self_var):
                if call.func.attr.value in self.layers:
                    return True
                continue
            qualified = qualified_name(call.func, self.imports) or ""
            if qualified.startswith("torch.") and \
                    qualified.rpartition(".")[2] not in TENSOR_CONSTRUCTORS:
                return True
        return False


def config_like(name: str) -> bool:
    """A name that usually holds a config object (``cfg``, ``hparams``, ``model_config``)."""
    lowered = name.lower().lstrip("_")
    return lowered in _CONFIG_NAMES or lowered.endswith(("_cfg", "_config", "_conf"))


def _is_name(node: cst.CSTNode | None, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


