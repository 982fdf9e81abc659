"""What a class sets up: :class:`ClassSetup`, the facts about ``__init__`` (structural
reads, config holders, objects read field by field) and the methods compiled code runs."""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import (
    AttrAssignment,
    code_of,
    find_all,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
    target_names,
)
from tsfix.codemods.facts.type_flow import constant_attributes
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.lift_branch._callees import Callees
from tsfix.codemods.rules.lift_branch._reads import (
    dotted_read,
    field_name,
    methods_called,
    test_expressions,
)

_CONFIG_NAME = re.compile(r"^_?(cfg|conf|config|configs|opt|opts|options|args|hparams|hp|params)$|"
                          r"(_cfg|_config|_conf)$", re.IGNORECASE)


# An annotation naming one of these holds an object, not a setting.
_OBJECT_TYPE = re.compile(r"\b(Module|ModuleList|ModuleDict|Sequential|Tensor|Parameter)\b")

# Methods a config object answers as a mapping (a YACS node, a dict); other method calls on a
# setting (``self.mode.startswith("a")``) do not make it an object.
_MAPPING_METHODS = frozenset({"get", "items", "keys", "values"})


class ClassSetup:
    """What one nn.Module class sets up in ``__init__`` and which of its methods compile: the
    attributes that decide its structure, the config objects it holds, the objects whose fields
    it reads, the methods compiled code runs in Python."""

    def __init__(self, rule: Rule, cls: cst.ClassDef, callees: Callees, target: str) -> None:
        self.rule = rule
        self.cls = cls
        self.callees = callees
        self.target = target        # the rule's form: torchscript, onnx or export
        self.facts = rule.class_facts(cls)
        self.imports = rule.facts.imports
        self.name = cls.name.value
        self.methods = self.facts.methods
        self.constants = constant_attributes(cls)
        self.init = self.facts.init
        self.assignments = self.facts.assignments
        self.init_params = parameters_of(self.init) if self.init else {}
        # Parameters __init__ binds again (`size = pair(size)`): the name no longer holds
        # what the caller passed, so the parameter's type says nothing about it.
        self.rebound_params = {
            name.value for node in (find_all(self.init.body, cst.AssignTarget, cst.AnnAssign,
                                             cst.AugAssign, cst.For, cst.NamedExpr)
                                    if self.init else ())
            for name in target_names(node.target) if name.value in self.init_params}
        self.registered = self.facts.registered
        # What TorchScript compiles: forward, @torch.jit.export methods and what they call;
        # never a @torch.jit.ignore/unused method.
        self.compiled = [n for n in self.facts.compiled if self_name(self.methods[n])]
        # Constructor arguments whose callee is defined in another file (or cannot be read):
        # id of the argument -> how the reason names the callee.
        self.elsewhere: dict[int, str] = {}
        self.structural = self._structural_reads()
        self.object_reads = self._object_reads()
        self.config_holders = self._config_holders()
        self.python_run = self._python_run()

    def _structural_reads(self) -> dict[str, cst.CSTNode]:
        """Dotted names __init__ reads where they decide which submodules exist or their shape:
        tests, loop ranges, and arguments of module constructors."""
        found: dict[str, cst.CSTNode] = {}
        if self.init is None:
            return found
        regions: list[cst.CSTNode] = list(test_expressions(self.init.body))
        for node in find_all(self.init.body, cst.For):
            regions.append(node.iter)
        for call in find_all(self.init.body, cst.Call):
            if self.is_module_constructor(call):
                regions.extend(arg.value for arg in call.args)
            elif call.args:
                where = self.callees.builds_module_elsewhere(call.func)
                if where is not None:
                    regions.extend(arg.value for arg in call.args)
                    self.elsewhere.update((id(arg.value), where) for arg in call.args)
        for region in regions:
            for node in find_all(region, cst.Name, cst.Attribute, cst.Subscript):
                dotted = dotted_read(node)
                if dotted is not None:
                    found.setdefault(dotted, region)
            if isinstance(region, cst.BaseExpression):
                dotted = dotted_read(region)
                if dotted is not None:
                    found.setdefault(dotted, region)
        return found

    def is_module_constructor(self, call: cst.Call) -> bool:
        qual = qualified_name(call.func, self.imports) or ""
        local = get_full_name_for_node(call.func) or ""
        return qual.startswith("torch.nn.") or local in self.rule.facts.module_classes

    def init_assignments(self, attr: str) -> list[AttrAssignment]:
        return [a for a in self.assignments if a.attr == attr and a.method == "__init__"]

    def _config_holders(self) -> set[str]:
        """Attributes holding a config object (dataclass, namespace, dict) set in __init__:
        those the class facts name config objects, and those given a dataclass of this file,
        a namespace or a dict."""
        holders: set[str] = set()
        assigned = {a.attr for a in self.assignments}
        for attr in {a.attr for a in self.assignments if a.method == "__init__"}:
            if self.assigned_outside_init(attr) or attr + ".*" in assigned:
                continue
            if attr in self.facts.config_objects:
                holders.add(attr)
                continue
            values = [a.value for a in self.init_assignments(attr)]
            if values and all(v is not None and self._looks_like_config(attr, v) for v in values):
                holders.add(attr)
        # A node of a config object (``self.NETWORK = self.config.NETWORK``, YACS style) whose
        # fields the class reads is one too: its fields are copied, the node is never lifted.
        candidates = {a.attr for a in self.assignments if a.method == "__init__"} - holders
        grown = True
        while grown:
            grown = False
            for attr in sorted(candidates - holders):
                values = [a.value for a in self.init_assignments(attr)]
                if (attr in self.object_reads and not self.assigned_outside_init(attr)
                        and attr + ".*" not in assigned and values
                        and all(self._config_node(v, holders) for v in values)):
                    holders.add(attr)
                    grown = True
        return holders

    def _config_node(self, value: cst.BaseExpression | None, holders: set[str]) -> bool:
        """``value`` reads a field out of a config object: a holder attribute
        (``self.config.NETWORK``) or a constructor parameter that holds one
        (``config.NETWORK``, ``cfg["net"]``)."""
        if not isinstance(value, cst.Attribute | cst.Subscript) or field_name(value) is None:
            return False
        dotted = dotted_read(value)
        if dotted is None:
            return False
        head, _, rest = dotted.partition(".")
        if head == (self_name(self.init) if self.init else None):
            return rest.partition(".")[0] in holders
        if head not in self.init_params:
            return False
        root: cst.BaseExpression = value
        while isinstance(root, cst.Attribute | cst.Subscript):
            root = root.value
        return self._looks_like_config(head, root)

    def _object_reads(self) -> dict[str, cst.CSTNode]:
        """Attributes the class reads fields out of (``self.NETWORK.USE_X``,
        ``self.opt["depth"]``, ``self.opt.get("depth")``) -> the first such read: objects,
        not settings."""
        found: dict[str, cst.CSTNode] = {}
        for func in self.methods.values():
            self_var = self_name(func) or "self"
            nodes = find_all(func.body, cst.Call, cst.Attribute, cst.Subscript)
            called = {id(c.func) for c in nodes if isinstance(c, cst.Call)}
            for node in nodes:
                if not isinstance(node, cst.Attribute | cst.Subscript):
                    continue
                attr = self_attr(node.value, self_var)
                name = field_name(node)
                if attr is None or name is None or (
                        id(node) in called and name not in _MAPPING_METHODS):
                    continue
                found.setdefault(attr, node)
        return found

    def _looks_like_config(self, attr: str, value: cst.BaseExpression) -> bool:
        field_types = self.rule.facts.field_types
        if isinstance(value, cst.Dict):
            return True
        if isinstance(value, cst.Name) and value.value in self.init_params:
            param = self.init_params[value.value]
            declared = get_full_name_for_node(param.annotation.annotation) if \
                param.annotation else None
            return bool(declared in field_types or _CONFIG_NAME.search(value.value)
                        or _CONFIG_NAME.search(attr))
        if isinstance(value, cst.Call):
            called = get_full_name_for_node(value.func) or ""
            return (called in field_types or called.endswith("SimpleNamespace")
                    or called == "dict")
        return False

    def assigned_outside_init(self, attr: str) -> str | None:
        for a in self.assignments:
            if a.attr == attr and a.method != "__init__":
                return a.method
        return None

    def holder_field_types(self, holder: str) -> dict[str, str]:
        field_types = self.rule.facts.field_types
        for a in self.init_assignments(holder):
            declared: str | None = None
            if isinstance(a.value, cst.Name) and a.value.value in self.init_params:
                param = self.init_params[a.value.value]
                if param.annotation is not None:
                    declared = get_full_name_for_node(param.annotation.annotation)
            elif isinstance(a.value, cst.Call):
                declared = get_full_name_for_node(a.value.func)
            if declared in field_types:
                return field_types[declared]
        return {}

    def declared_as_object(self, attr: str) -> str | None:
        """The annotation of ``attr`` (in ``__init__`` or at class level) when it names a
        module or tensor type (``self.proj: Optional[nn.Module] = None``)."""
        annotations: list[cst.BaseExpression] = []
        if self.init is not None:
            self_var = self_name(self.init) or "self"
            annotations += [node.annotation.annotation
                            for node in find_all(self.init.body, cst.AnnAssign)
                            if self_attr(node.target, self_var) == attr]
        if isinstance(self.cls.body, cst.IndentedBlock):
            annotations += [small.annotation.annotation for line in self.cls.body.body
                            if isinstance(line, cst.SimpleStatementLine) for small in line.body
                            if isinstance(small, cst.AnnAssign)
                            and m.matches(small.target, m.Name(attr))]
        for annotation in annotations:
            text = code_of(annotation)
            if _OBJECT_TYPE.search(text):
                return text
        return None

    def _python_run(self) -> list[str]:
        """Methods that run in Python when compiled code calls them: the ``@torch.jit.ignore``
        (or ``unused``) methods a compiled method calls, and every method they call."""
        found: list[str] = []
        for name in self.compiled:
            never = self.facts.never_compiled(name)
            for call in find_all(self.methods[name].body, cst.Call):
                callee = self_attr(call.func, self_name(self.methods[name]) or "self")
                if (callee in self.methods and callee not in self.compiled
                        and callee != "__init__" and id(call) not in never
                        and callee not in found):
                    found.append(callee)
        for name in found:
            for callee in sorted(methods_called(self.methods[name])):
                if callee in self.methods and callee != "__init__" and callee not in found:
                    found.append(callee)
        return [n for n in found if self_name(self.methods[n])]

    def aliases(self, holder: str, depth: int = 0) -> set[str]:
        """The dotted names ``__init__`` gives ``self.<holder>`` from (``cfg`` for
        ``self.cfg = cfg``; ``self.config.NETWORK`` and ``config.NETWORK`` for
        ``self.NETWORK = self.config.NETWORK`` after ``self.config = config``)."""
        found: set[str] = set()
        for a in self.init_assignments(holder):
            dotted = dotted_read(a.value) if a.value is not None else None
            if dotted is None:
                continue
            found.add(dotted)
            head, _, rest = dotted.partition(".")
            inner, _, tail = rest.partition(".")
            if head == "self" and inner in self.config_holders and inner != holder and depth < 8:
                found |= {".".join(p for p in (alias, tail) if p)
                          for alias in self.aliases(inner, depth + 1)}
        return found

    def top_level(self) -> dict[int, int]:
        """ids of ``__init__``'s top-level statements -> their index."""
        if self.init is None or not isinstance(self.init.body, cst.IndentedBlock):
            return {}
        return {id(s): index for index, s in enumerate(self.init.body.body)}
