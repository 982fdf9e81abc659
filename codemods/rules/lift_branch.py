"""``lift-branch``: config-attribute branches in ``forward()`` become a typed argument.

What it does
    Finds tests in the methods TorchScript compiles (``forward()``, ``@torch.jit.export``
    methods, and the methods they call; never a ``@torch.jit.ignore``/``unused`` method or code
    under ``if not torch.jit.is_scripting():``) that read a configuration attribute --
    ``if self.use_x:``, ``elif self.mode == "avg":``, ``while i < self.depth``,
    ``a if self.flag else b``, ``self.a and not self.b`` -- and turns each such attribute into a
    ``forward()`` parameter ``use_x: Optional[bool] = None`` that defaults to the attribute::

        def forward(self, x, use_x: Optional[bool] = None):
            if use_x is None:
                use_x = self.use_x
            if use_x:
                ...

    Every read of the attribute in the compiled methods then reads the local. Helper methods that
    read it get the same parameter, passed on by their callers (``self._fuse(a, use_x=use_x)``).
    Fields of config objects (``self.cfg.use_x``, ``self.cfg["use_x"]``) that the compiled methods
    read are first copied to plain attributes in ``__init__`` (``self.use_x = self.cfg.use_x``).
    An ``@torch.jit.export`` method that reads a setting gets the same parameter in its own
    signature (it is an entry point like ``forward()``); ``forward()`` gets it only when it
    reads the setting or calls a method that does.

Why it breaks export
    ``torch.jit.freeze``, ``Final`` attributes, the TorchScript-based ONNX exporter and
    ``torch.export`` turn module attributes into constants, so the exported artifact keeps only the
    branch chosen at construction. A graph input keeps every branch: one artifact serves every
    configuration, and the caller chooses at run time. Config objects (dataclasses, namespaces,
    dicts) cannot be held by a ScriptModule at all.

Example
    Before::

        class Net(nn.Module):
            def __init__(self, branch_testing=True):
                super().__init__()
                self.branch_testing = branch_testing
                self.act = Swish()

            def forward(self, x):
                if self.branch_testing == True:
                    x = self.act(x)
                return x

    After::

        class Net(nn.Module):
            ...
            def forward(self, x, branch_testing: Optional[bool] = None):
                if branch_testing is None:
                    branch_testing = self.branch_testing
                if branch_testing == True:
                    x = self.act(x)
                return x

Fix safety
    Safe for callers: the new parameter comes last and defaults to the attribute, so existing calls,
    state dicts and eager behaviour are unchanged. The attribute is read at call time, as before.
    Never lifted: ``self.training``; submodules, parameters and buffers; attributes assigned outside
    ``__init__``; tensors and values that may be None; values computed in ``__init__`` whose type
    cannot be known; and structural flags, i.e. attributes whose value decides in ``__init__``
    which submodules exist (both branches must compile, and the other branch's modules are absent)
    or is passed to a submodule's constructor (the submodule keeps the value it was built with:
    ``self.attn = Attention(dim, causal=causal)`` and ``if self.causal:`` in ``forward()``). The
    constructor may be in ``torch.nn``, this file, or another file of the user's tree, found
    through the imports as Python would (``from pkg.inner import Attention``, ``from .inner
    import ...``, ``*`` imports, re-exports; ``codemods/facts/project.py``) and read, never
    imported. When its
    class cannot be read -- an installed package, a class with a base from one, a relative import
    whose file is missing -- it is taken to build a module and the flag is not lifted; a class
    shown not to be an ``nn.Module`` (a dataclass, the standard library), a function, and torch
    outside ``torch.nn`` do not make a flag structural (a factory function that builds a module
    from the flag is not followed); and settings that a ``@torch.jit.ignore`` method called from
    compiled code also reads (it runs in Python and would read the attribute, not the argument).
    Every site is reported: each read of a setting in a test (``TSF204``) and each read of a
    config object's field (``TSF203``) is either fixed or refused with the reason, which
    ``tsfix check`` shows instead of promising a fix. Reads that are not configuration
    (``self.training``, submodules, tensors, values of unknown type) are noted with ``-v`` only.
    The parameter type is the one type that serves the values ``__init__`` gives and every use in
    the compiled methods (an attribute's value must have the argument's type exactly: an int
    attribute fails to script as ``Optional[float]`` or ``Optional[bool]``). The values: an
    annotation, a literal or literal default, ``int(...)``, ``len(...)`` (of a submodule list:
    structure, never lifted), arithmetic of those, else
    (a constructor parameter with neither) the type every observed example build passed when
    the example runs were observed (``annotate`` in the same run asks for them). The uses:
    ``range(n)`` and slices need an int, an index an int (or a str key), ``<`` and arithmetic a
    number, ``== "avg"`` a str, and a literal compared or combined with it (``n > 0.5``,
    ``i < n - 1``) tells int from float; a bare truth test takes any type (measured: an
    ``Optional[int]``, ``float`` or ``str`` argument serves ``if n:``, ``not n``, ``and``,
    ``while``, ternaries) and alone means bool. Refused, with the use named: a type no use
    allows (a float in ``range()``, a bool index), and a number of unknown type used only in
    arithmetic with tensors (int or float cannot be told; annotating the constructor parameter
    settles it). A wrong guess fails re-script, and validation rejects the rewrite rather than
    writing it.
    Config objects are followed down to the field read: ``self.config.NETWORK.USE_X`` is copied
    as ``self.USE_X = self.config.NETWORK.USE_X``, and a node of one kept on the module
    (``self.NETWORK = self.config.NETWORK``, YACS style, whose fields the class reads) is a config
    object too, its fields copied after it; such an object, or any attribute whose fields are
    read, is never lifted itself.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.module import module_facts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.project import (
    is_standard_library,
    lookup,
    relative_imports,
    star_imports,
)
from tsfix.codemods.facts.syntax import (
    SCALAR_TYPES,
    AttrAssignment,
    annotation_type,
    children,
    code_of,
    docstring_count,
    find_all,
    fresh_name,
    literal_type,
    names_used,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
    short_source,
    unify_types,
)
from tsfix.codemods.facts.type_flow import constant_attributes
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import
from tsfix.codemods.rules.torch_cond import CondSite, is_python_value, lower_to_cond

# What a test reads: ("attr", name) for self.name, ("cfg", holder, field, ...) for
# self.holder.field or self.holder["field"], one entry per field of a chain down to the leaf
# (self.config.NETWORK.USE_X is ("cfg", "config", "NETWORK", "USE_X")).
ReadKey = tuple[str, ...]

_CONFIG_NAME = re.compile(r"^_?(cfg|conf|config|configs|opt|opts|options|args|hparams|hp|params)$|"
                          r"(_cfg|_config|_conf)$", re.IGNORECASE)


# An annotation naming one of these holds an object, not a setting.
_OBJECT_TYPE = re.compile(r"\b(Module|ModuleList|ModuleDict|Sequential|Tensor|Parameter)\b")

# Methods a config object answers as a mapping (a YACS node, a dict); other method calls on a
# setting (``self.mode.startswith("a")``) do not make it an object.
_MAPPING_METHODS = frozenset({"get", "items", "keys", "values"})

_TSF203 = "TSF203"
_TSF204 = "TSF204"


def _describe(key: ReadKey) -> str:
    return f"self.{key[1]}" if key[0] == "attr" else "self." + ".".join(key[1:])


def _field_name(node: cst.CSTNode) -> str | None:
    """The field ``node`` reads from its value: ``x.name`` / ``x["name"]`` -> ``"name"``."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)
                and isinstance(index.value.evaluated_value, str)):
            return index.value.evaluated_value
    return None


def _dotted_read(expr: cst.BaseExpression) -> str | None:
    """``cfg.a.b`` / ``cfg["a"]`` -> ``"cfg.a.b"`` / ``"cfg.a"``; else None."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)
                and isinstance(index.value.evaluated_value, str)):
            base = _dotted_read(expr.value)
            return f"{base}.{index.value.evaluated_value}" if base else None
        return None
    return get_full_name_for_node(expr) if isinstance(expr, cst.Name | cst.Attribute) else None


def _test_expressions(body: cst.CSTNode) -> list[cst.BaseExpression]:
    """Expressions evaluated for their truth value: if/elif/while/ternary tests, and/or/not."""
    tests: list[cst.BaseExpression] = []
    for node in find_all(body, cst.If, cst.While, cst.IfExp, cst.CompIf, cst.BooleanOperation,
                         cst.UnaryOperation):
        if isinstance(node, cst.BooleanOperation):
            tests.extend((node.left, node.right))
        elif isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                tests.append(node.expression)
        else:
            tests.append(node.test)
    return tests


# What each use of a setting needs its value to be, measured (torch 2.13): an Optional[int]
# setting refined by ``if n is None: n = self.n`` serves truth tests, ``not``, ``and``/``or``,
# ``while``, ``<`` and arithmetic with ints, floats and tensors, ``range()``, indexes and slices;
# a bool serves arithmetic, comparisons and slices, not ``range()`` or an index; a float serves no
# ``range()``, index or slice. The attribute's value must have the lifted type exactly: an int
# attribute assigned to an ``Optional[float]`` or ``Optional[bool]`` argument fails to script.
_SERVES = {
    "int": (("int",), "an int"),
    "slice": (("int", "bool"), "an int"),
    "index": (("int", "str"), "an int index (or a str key)"),
    "number": (("int", "float", "bool"), "a number"),
    "str": (("str",), "a str"),
}


@dataclass
class _Usage:
    """How the compiled methods use one setting's value."""

    none: bool = False                      # compared with None
    # What a use needs the value to be (a key of _SERVES) -> the first such use.
    needs: dict[str, cst.CSTNode] = field(default_factory=dict)
    # Types of the literals the value is compared or combined with (``n > 0.5``: float).
    hints: list[str] = field(default_factory=list)

    def guess(self) -> str | None:
        """The type the uses imply when ``__init__`` does not say: None when they show only
        that it is a number, "" when the literals disagree."""
        for need in ("int", "str", "slice"):
            if need in self.needs:
                return "int" if need == "slice" else need
        if self.hints:
            return unify_types(self.hints) or ""
        if "number" in self.needs:
            return None
        return "int" if "index" in self.needs else "bool"

    def unserved(self, described: str, kind: str) -> str:
        """Why a ``kind`` argument cannot serve some use, else ""."""
        for need, site in self.needs.items():
            kinds, wording = _SERVES[need]
            if kind not in kinds:
                return (f"{described} is {'an' if kind == 'int' else 'a'} {kind} but "
                        f"`{short_source(site)}` needs {wording}: no lifted type serves every use")
        return ""


_ORDERING = (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual)


def _record_use(read: cst.CSTNode, parents: dict[int, cst.CSTNode], usage: _Usage) -> None:
    """Adds to ``usage`` what the expression directly around ``read`` needs of its value."""
    parent = parents.get(id(read))
    if isinstance(parent, cst.Comparison):
        operands = [parent.left, *(t.comparator for t in parent.comparisons)]
        for at, target in enumerate(parent.comparisons):
            pair = operands[at:at + 2]
            if read not in pair:
                continue
            other = pair[1] if pair[0] is read else pair[0]
            if m.matches(other, m.Name("None")):
                usage.none = True
            elif isinstance(target.operator, cst.In | cst.NotIn):
                if other is pair[1] and isinstance(other, cst.Tuple | cst.List | cst.Set):
                    usage.hints += [kind for e in other.elements
                                    if (kind := literal_type(e.value)) is not None]
            elif not isinstance(target.operator, cst.Is | cst.IsNot):
                kind = literal_type(other)
                if kind is not None:
                    usage.hints.append(kind)
                if isinstance(target.operator, _ORDERING) and kind != "str":
                    usage.needs.setdefault("number", parent)
    elif isinstance(parent, cst.BinaryOperation):
        other = parent.right if parent.left is read else parent.left
        kind = literal_type(other)
        if kind == "str":
            if isinstance(parent.operator, cst.Add):
                usage.needs.setdefault("str", parent)
            elif isinstance(parent.operator, cst.Multiply):
                usage.needs.setdefault("int", parent)
            # else: "%" formatting takes any value
        elif isinstance(parent.operator, cst.LeftShift | cst.RightShift):
            usage.needs.setdefault("int", parent)
        elif not isinstance(parent.operator, cst.BitAnd | cst.BitOr | cst.BitXor):
            usage.needs.setdefault("number", parent)
            if kind is not None and not isinstance(parent.operator, cst.Divide):
                usage.hints.append(kind)
    elif isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator,
                                                               cst.Minus | cst.Plus):
        usage.needs.setdefault("number", parent)
    elif isinstance(parent, cst.Arg) and parent.keyword is None:
        call = parents.get(id(parent))
        if isinstance(call, cst.Call) and m.matches(call.func, m.Name("range")):
            usage.needs.setdefault("int", call)
    elif isinstance(parent, cst.Index):
        usage.needs.setdefault("index", parents.get(id(parents.get(id(parent))), parent))
    elif isinstance(parent, cst.Slice):
        usage.needs.setdefault("slice", parents.get(id(parents.get(id(parent))), parent))


@dataclass
class _Lift:
    key: ReadKey
    attr: str              # plain attribute the parameter defaults to
    type: str
    param: str = ""
    methods: set[str] = field(default_factory=set)   # methods that receive the parameter
    # --target onnx: the local holding the setting's value, and for a str setting the int code
    # of each string it is compared with (any other string is -1).
    local: str = ""
    codes: dict[str, int] | None = None


@dataclass
class _ConfigCopy:
    key: ReadKey
    attr: str              # new plain attribute in __init__
    access: str            # how the read reaches the field from the holder: .x, ["x"], .a.b


@dataclass
class _Plan:
    lifts: list[_Lift]
    copies: list[_ConfigCopy]
    copy_after: dict[str, int]   # config holder -> index of the __init__ statement to follow
    reachable: list[str]


class _ClassAnalysis:
    """Decides, for one nn.Module class, what may be lifted and why the rest may not."""

    def __init__(self, rule: LiftBranch, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.cls = cls
        self.facts = rule.class_facts(cls)
        self.imports = rule.facts.imports
        # Node ids stay valid while the class's original tree is alive (for this analysis).
        self._memo: dict[tuple[int, str], Any] = {}
        self.name = cls.name.value
        self.methods = self.facts.methods
        self._constants = constant_attributes(cls)
        self.init = self.facts.init
        self.assignments = self.facts.assignments
        self.init_params = parameters_of(self.init) if self.init else {}
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
        # The sites the plan fixes: (node, code, message), reported when it is applied.
        self.fixes: list[tuple[cst.CSTNode, str, str]] = []

    # ---- facts about __init__ ---------------------------------------------------------------

    def _structural_reads(self) -> dict[str, cst.CSTNode]:
        """Dotted names __init__ reads where they decide which submodules exist or their shape:
        tests, loop ranges, and arguments of module constructors."""
        found: dict[str, cst.CSTNode] = {}
        if self.init is None:
            return found
        regions: list[cst.CSTNode] = list(_test_expressions(self.init.body))
        for node in find_all(self.init.body, cst.For):
            regions.append(node.iter)
        for call in find_all(self.init.body, cst.Call):
            if self._is_module_constructor(call):
                regions.extend(arg.value for arg in call.args)
            elif call.args:
                where = self.rule.builds_module_elsewhere(call.func)
                if where is not None:
                    regions.extend(arg.value for arg in call.args)
                    self.elsewhere.update((id(arg.value), where) for arg in call.args)
        for region in regions:
            for node in find_all(region, cst.Name, cst.Attribute, cst.Subscript):
                dotted = _dotted_read(node)
                if dotted is not None:
                    found.setdefault(dotted, region)
            if isinstance(region, cst.BaseExpression):
                dotted = _dotted_read(region)
                if dotted is not None:
                    found.setdefault(dotted, region)
        return found

    def _is_module_constructor(self, call: cst.Call) -> bool:
        qual = qualified_name(call.func, self.imports) or ""
        local = get_full_name_for_node(call.func) or ""
        return qual.startswith("torch.nn.") or local in self.rule.facts.module_classes

    def _init_assignments(self, attr: str) -> list[AttrAssignment]:
        return [a for a in self.assignments if a.attr == attr and a.method == "__init__"]

    def _config_holders(self) -> set[str]:
        """Attributes holding a config object (dataclass, namespace, dict) set in __init__:
        those the class facts name config objects, and those given a dataclass of this file,
        a namespace or a dict."""
        holders: set[str] = set()
        assigned = {a.attr for a in self.assignments}
        for attr in {a.attr for a in self.assignments if a.method == "__init__"}:
            if self._assigned_outside_init(attr) or attr + ".*" in assigned:
                continue
            if attr in self.facts.config_objects:
                holders.add(attr)
                continue
            values = [a.value for a in self._init_assignments(attr)]
            if values and all(v is not None and self._looks_like_config(attr, v) for v in values):
                holders.add(attr)
        # A node of a config object (``self.NETWORK = self.config.NETWORK``, YACS style) whose
        # fields the class reads is one too: its fields are copied, the node is never lifted.
        candidates = {a.attr for a in self.assignments if a.method == "__init__"} - holders
        grown = True
        while grown:
            grown = False
            for attr in sorted(candidates - holders):
                values = [a.value for a in self._init_assignments(attr)]
                if (attr in self.object_reads and not self._assigned_outside_init(attr)
                        and attr + ".*" not in assigned and values
                        and all(self._config_node(v, holders) for v in values)):
                    holders.add(attr)
                    grown = True
        return holders

    def _config_node(self, value: cst.BaseExpression | None, holders: set[str]) -> bool:
        """``value`` reads a field out of a config object: a holder attribute
        (``self.config.NETWORK``) or a constructor parameter that holds one
        (``config.NETWORK``, ``cfg["net"]``)."""
        if not isinstance(value, cst.Attribute | cst.Subscript) or _field_name(value) is None:
            return False
        dotted = _dotted_read(value)
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
                name = _field_name(node)
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

    def _assigned_outside_init(self, attr: str) -> str | None:
        for a in self.assignments:
            if a.attr == attr and a.method != "__init__":
                return a.method
        return None

    def _holder_field_types(self, holder: str) -> dict[str, str]:
        field_types = self.rule.facts.field_types
        for a in self._init_assignments(holder):
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

    def _declared_as_object(self, attr: str) -> str | None:
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
            for callee in sorted(_called(self.methods[name])):
                if callee in self.methods and callee != "__init__" and callee not in found:
                    found.append(callee)
        return [n for n in found if self_name(self.methods[n])]

    # ---- reads in compiled methods --------------------------------------------------------------

    def read_key(self, node: cst.CSTNode, self_var: str) -> ReadKey | None:
        """``("attr", name)`` for ``self.name``; ``("cfg", holder, field, ...)`` for a chain of
        fields read down from a config holder (``self.cfg.a``, ``self.cfg["a"].b``)."""
        fields: list[str] = []
        current: cst.CSTNode = node
        while (name := _field_name(current)) is not None:
            assert isinstance(current, cst.Attribute | cst.Subscript)
            fields.append(name)
            holder = self_attr(current.value, self_var)
            if holder in self.config_holders:
                return ("cfg", holder, *reversed(fields))
            current = current.value
        attr = self_attr(node, self_var)
        if attr is not None and attr not in self.config_holders:
            return ("attr", attr)
        return None

    def _config_rooted(self, node: cst.CSTNode, key: ReadKey | None, self_var: str) -> bool:
        """A config holder (``self.cfg``) or a field read out of one."""
        return (key is not None and key[0] == "cfg") or self_attr(node, self_var) in \
            self.config_holders

    def _scan(self, node: cst.CSTNode, self_var: str) -> tuple[
            list[cst.CSTNode], dict[int, ReadKey | None], set[int], set[int]]:
        """The attribute and subscript nodes of ``node`` in source order, their read keys,
        the ids of call targets, and the ids of chain interiors: a config holder or field that
        is only the way to a field read out of it (``self.config.NETWORK`` in
        ``self.config.NETWORK.USE_X``), never a read of its own."""
        memo_key = (id(node), "scan:" + self_var)
        if memo_key not in self._memo:
            nodes = find_all(node, cst.Call, cst.Attribute, cst.Subscript)
            called = {id(c.func) for c in nodes if isinstance(c, cst.Call)}
            accesses = [c for c in nodes if not isinstance(c, cst.Call)]
            keys = {id(c): self.read_key(c, self_var) for c in accesses}
            interior = {id(c.value) for c in accesses
                        if self._config_rooted(c.value, keys.get(id(c.value)), self_var)}
            self._memo[memo_key] = (accesses, keys, called, interior)
        scanned: tuple[list[cst.CSTNode], dict[int, ReadKey | None], set[int], set[int]] = \
            self._memo[memo_key]
        return scanned

    def comparisons(self, func: cst.FunctionDef) -> list[cst.Comparison]:
        key = (id(func), "comparisons")
        if key not in self._memo:
            self._memo[key] = find_all(func.body, cst.Comparison)
        found: list[cst.Comparison] = self._memo[key]
        return found

    def reads_in(self, node: cst.CSTNode, self_var: str) -> dict[ReadKey, cst.CSTNode]:
        """Every attribute/config read in ``node`` that is a value (not a call target), by key
        (the first read of each)."""
        memo_key = (id(node), self_var)
        if memo_key not in self._memo:
            found: dict[ReadKey, cst.CSTNode] = {}
            for key, read in self.all_reads(node, self_var):
                found.setdefault(key, read)
            self._memo[memo_key] = found
        reads: dict[ReadKey, cst.CSTNode] = self._memo[memo_key]
        return reads

    def all_reads(self, node: cst.CSTNode, self_var: str) -> list[tuple[ReadKey, cst.CSTNode]]:
        """Every attribute/config read in ``node`` that is a value, in source order."""
        found: list[tuple[ReadKey, cst.CSTNode]] = []
        accesses, keys, called, interior = self._scan(node, self_var)
        skipped = called | interior
        for candidate in accesses:
            key = keys[id(candidate)]
            if key is not None and id(candidate) not in skipped:
                found.append((key, candidate))
        return found

    def test_reads(self, method: str) -> list[tuple[ReadKey, cst.CSTNode]]:
        """The reads in the tests of ``method`` that TorchScript compiles, each node once."""
        func = self.methods[method]
        self_var = self_name(func) or "self"
        never = self.facts.never_compiled(method)
        seen: set[int] = set()
        found: list[tuple[ReadKey, cst.CSTNode]] = []
        for test in _test_expressions(func.body):
            if id(test) in never:
                continue
            for key, node in self.all_reads(test, self_var):
                if id(node) not in seen:
                    seen.add(id(node))
                    found.append((key, node))
        return found

    def usage(self, key: ReadKey, reachable: list[str]) -> _Usage:
        """How every read of ``key`` in the compiled methods uses the value: what it must be
        (an int for ``range()``, a number for ``<`` and arithmetic...) and the literals it is
        compared or combined with."""
        found = _Usage()
        for name in reachable:
            func = self.methods[name]
            parents = self._parents(func)
            for read_key, node in self.all_reads(func.body, self_name(func) or "self"):
                if read_key == key:
                    _record_use(node, parents, found)
        return found

    def _parents(self, func: cst.FunctionDef) -> dict[int, cst.CSTNode]:
        memo_key = (id(func), "parents")
        if memo_key not in self._memo:
            parents: dict[int, cst.CSTNode] = {}
            stack: list[cst.CSTNode] = [func.body]
            while stack:
                node = stack.pop()
                for child in children(node):
                    parents[id(child)] = node
                    stack.append(child)
            self._memo[memo_key] = parents
        found: dict[int, cst.CSTNode] = self._memo[memo_key]
        return found

    # ---- eligibility ----------------------------------------------------------------------------

    def classify(self, key: ReadKey, reachable: list[str]) -> tuple[str | None, str, bool]:
        """(type, "", True) when ``key`` may be lifted, else (None, reason, configuration):
        ``configuration`` says whether the value is a setting (an export blocker, TSF204, left
        for the reason) or not configuration at all (``self.training``, a submodule...)."""
        if key[0] == "cfg":
            return (*self._classify_config_field(key, reachable), True)
        attr = key[1]
        if attr == "training":
            return None, "self.training is set by train()/eval(), not configuration", False
        if attr in self.methods:
            return None, f"self.{attr} is a method or property", False
        if attr in self.registered:
            return None, f"self.{attr} is a registered buffer, parameter or submodule", False
        if attr in self._constants:
            return (None, f"self.{attr} is a TorchScript constant (__constants__ or Final): "
                    "TorchScript compiles only the branch it takes per instance; lifted into an "
                    "argument the test would be undecided again", True)
        other = self._assigned_outside_init(attr)
        if other is not None:
            return (None, f"self.{attr} is also assigned in {other}() (state, not "
                    "configuration)", True)
        assignments = self._init_assignments(attr)
        if not assignments:
            return None, f"self.{attr} is not assigned in {self.name}.__init__", False
        if attr in self.facts.function_attrs:
            return None, f"self.{attr} holds a function, not configuration", False
        declared = self._declared_as_object(attr)
        if declared is not None:
            return None, f"self.{attr} is declared {declared}, not configuration", False
        kinds = [self._value_kind(a.value) for a in assignments]
        for kind, detail in kinds:
            if kind in ("tensor", "module"):
                return None, f"self.{attr} {detail}", False
        read = self.object_reads.get(attr)
        if read is not None and any(kind not in SCALAR_TYPES for kind, _ in kinds):
            return None, (f"self.{attr} is an object whose fields are read "
                          f"(`{short_source(read)}`), not a setting"), True
        types: list[str] = []
        for a, (kind, detail) in zip(assignments, kinds, strict=True):
            if kind not in SCALAR_TYPES and kind != "scalar":
                # A value of unknown type is not shown to be a setting.
                return None, f"self.{attr} {detail}", kind != "computed"
            # Sorted: the reason names one line, the same on every run.
            for source in sorted(self._sources(a.value) | {f"self.{attr}"}):
                if source in self.structural:
                    return None, self._structural_reason(f"self.{attr}", source), True
            if kind in SCALAR_TYPES:
                types.append(kind)
        return (*self._settle_type(key, types, len(types) < len(assignments), reachable), True)

    def _classify_config_field(self, key: ReadKey,
                               reachable: list[str]) -> tuple[str | None, str]:
        holder, path = key[1], ".".join(key[2:])
        sources = {f"self.{holder}.{path}"} | {f"{alias}.{path}" for alias in
                                               self._aliases(holder)}
        for source in sorted(sources):
            if source in self.structural:
                return None, self._structural_reason(_describe(key), source)
        declared = self._holder_field_types(holder).get(key[2]) if len(key) == 3 else None
        return self._settle_type(key, [declared] if declared else [], not declared, reachable)

    def _aliases(self, holder: str, depth: int = 0) -> set[str]:
        """The dotted names ``__init__`` gives ``self.<holder>`` from (``cfg`` for
        ``self.cfg = cfg``; ``self.config.NETWORK`` and ``config.NETWORK`` for
        ``self.NETWORK = self.config.NETWORK`` after ``self.config = config``)."""
        found: set[str] = set()
        for a in self._init_assignments(holder):
            dotted = _dotted_read(a.value) if a.value is not None else None
            if dotted is None:
                continue
            found.add(dotted)
            head, _, rest = dotted.partition(".")
            inner, _, tail = rest.partition(".")
            if head == "self" and inner in self.config_holders and inner != holder and depth < 8:
                found |= {".".join(p for p in (alias, tail) if p)
                          for alias in self._aliases(inner, depth + 1)}
        return found

    def _structural_reason(self, described: str, source: str) -> str:
        region = self.structural[source]
        line = self.rule.line_of(region)
        where = self.elsewhere.get(id(region))
        if where is None:
            return (f"{described} decides which submodules __init__ builds (line {line}); both "
                    "branches must compile")
        return (f"{described} is passed to {where} in __init__ (line {line}): the submodule "
                "keeps the value it was built with, which a lifted argument would not change")

    def _settle_type(self, key: ReadKey, known: list[str], has_unknown: bool,
                     reachable: list[str]) -> tuple[str | None, str]:
        """The one type that serves the values ``__init__`` gives (``known``; ``has_unknown``:
        some are of unknown type) and every use in the compiled methods, or None and why."""
        described = _describe(key)
        usage = self.usage(key, reachable)
        if usage.none:
            return None, (f"{described} is compared with None: an optional setting, which "
                          "a lifted argument (None: not given) cannot pass")
        guess = usage.guess()
        if guess == "":
            return None, f"{described} is compared with values of different types"
        if known:
            observed = [guess] if has_unknown and guess not in (None, "bool") else []
            kind = unify_types(known + observed)
            if kind is None:
                return None, f"{described} is given values of different types"
        elif guess is None:
            site = usage.needs["number"]
            return None, (f"{described} is used as a number (`{short_source(site)}`) but __init__ "
                          "gives it no default, literal or annotation, so whether it is an int "
                          "or a float is unknown (a lifted argument must have its exact type); "
                          "annotate the constructor parameter")
        else:
            kind = guess
        return (None, usage.unserved(described, kind)) if usage.unserved(described, kind) \
            else (kind, "")

    def _value_kind(self, value: cst.BaseExpression | None) -> tuple[str, str]:
        """A scalar type name, "scalar" (unknown scalar), or a non-config kind and its wording."""
        if value is None:
            return "computed", "is assigned by unpacking or in place"
        kind = literal_type(value)
        if kind is not None:
            return kind, ""
        if m.matches(value, m.Name("None")):
            return "none", "may be None"
        if isinstance(value, cst.Name) and value.value in self.init_params:
            param = self.init_params[value.value]
            declared = annotation_type(param.annotation)
            if declared == "optional" or (param.default is not None
                                          and m.matches(param.default, m.Name("None"))):
                return "none", f"comes from {value.value}, which may be None"
            if declared is not None:
                return declared, ""
            if param.annotation is not None:
                text = cst.Module([]).code_for_node(param.annotation.annotation)
                return "other", f"comes from {value.value}: {text}, not a bool/int/float/str"
            default_kind = literal_type(param.default)
            if default_kind:
                return default_kind, ""
            # No annotation or literal default: the type every example build passed, when
            # the example runs were observed (ParityBench passes ints to flags tested for truth).
            observed = self.rule.observed.get(self.name, {}).get("__init__", {}).get(
                value.value)
            return (observed, "") if observed in SCALAR_TYPES else ("scalar", "")
        if isinstance(value, cst.Call):
            called = get_full_name_for_node(value.func) or ""
            if called in SCALAR_TYPES:
                return called, ""
            if called == "len":
                # The length of a submodule list is the structure, not a setting to vary.
                self_var = self_name(self.init) if self.init else "self"
                modules = self.registered | self.facts.submodules | set(self.facts.containers)
                sized = [a for arg in value.args for a in self._sources(arg.value)
                         if a.startswith(f"{self_var}.")
                         and a.partition(".")[2].partition(".")[0] in modules]
                if sized:
                    return "module", f"is the length of submodule {sized[0]}, not a setting"
                return "int", ""
            qual = qualified_name(value.func, self.imports) or ""
            if qual in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") or (
                    qual.startswith("torch.") and not qual.startswith("torch.nn.")):
                return "tensor", "is a tensor"
            if self._is_module_constructor(value):
                return "module", "is a submodule"
            if (isinstance(value.func, cst.Attribute) and value.func.attr.value == "get"
                    and isinstance(value.func.value, cst.Name)
                    and value.func.value.value in self.init_params):
                default = value.args[1].value if len(value.args) > 1 else None
                kind = literal_type(default)
                return (kind, "") if kind else ("scalar", "")
            return "computed", "is computed in __init__ and its type is unknown"
        if isinstance(value, cst.Attribute | cst.Subscript):
            dotted = _dotted_read(value)
            if dotted and dotted.split(".")[0] in self.init_params:
                return "scalar", ""
            return "computed", "is computed in __init__ and its type is unknown"
        if isinstance(value, cst.IfExp):
            kinds = {self._value_kind(value.body)[0], self._value_kind(value.orelse)[0]}
            if "module" in kinds:
                return "module", "is a submodule (or None)"
            if "none" in kinds:
                return "none", "may be None"
            if len(kinds) == 1 and kinds <= set(SCALAR_TYPES):
                return kinds.pop(), ""
        if isinstance(value, cst.Comparison) or m.matches(value,
                                                          m.UnaryOperation(operator=m.Not())):
            return "bool", ""
        if isinstance(value, cst.BinaryOperation):
            return self._arithmetic_kind(value)
        return "computed", "is computed in __init__ and its type is unknown"

    def _arithmetic_kind(self, value: cst.BinaryOperation) -> tuple[str, str]:
        """``num_layers - 1``: int from ints (``/`` gives a float), float with a float, str
        from ``+`` of strs; a tensor operand makes a tensor; unknown operands an unknown
        scalar (the uses then decide)."""
        kinds = {self._value_kind(value.left)[0], self._value_kind(value.right)[0]}
        if "tensor" in kinds:
            return "tensor", "is a tensor"
        if kinds == {"str"} and isinstance(value.operator, cst.Add):
            return "str", ""
        if kinds <= {"int", "bool"}:
            return ("float" if isinstance(value.operator, cst.Divide) else "int"), ""
        if kinds <= {"int", "bool", "float"}:
            return "float", ""
        if kinds <= {"int", "bool", "float", "scalar"}:
            return "scalar", ""
        return "computed", "is computed in __init__ and its type is unknown"

    def _sources(self, value: cst.BaseExpression | None) -> set[str]:
        if value is None:
            return set()
        found = set()
        for node in find_all(value, cst.Name, cst.Attribute, cst.Subscript):
            if isinstance(node, cst.BaseExpression):
                dotted = _dotted_read(node)
                if dotted:
                    found.add(dotted)
        return found

    def string_codes(self, key: ReadKey, reachable: list[str]) -> dict[str, int] | None:
        """An int code for every string ``key`` is compared with, when every read of it in the
        compiled methods is one side of ``==`` / ``!=`` with a string literal; else None."""
        codes: dict[str, int] = {}
        for name in reachable:
            func = self.methods[name]
            self_var = self_name(func) or "self"
            compared: set[int] = set()
            for comparison in self.comparisons(func):
                pair = _string_comparison(comparison)
                if pair is None:
                    continue
                read, literal = pair
                if self.read_key(read, self_var) == key:
                    compared.add(id(read))
                    codes.setdefault(literal, len(codes))
            nodes = find_all(func.body, cst.Call, cst.Attribute, cst.Subscript)
            called = {id(c.func) for c in nodes if isinstance(c, cst.Call)}
            for node in nodes:
                if (not isinstance(node, cst.Call) and id(node) not in called
                        and self.read_key(node, self_var) == key and id(node) not in compared):
                    return None
        return codes or None

    # ---- the plan -----------------------------------------------------------------------------

    def plan(self) -> _Plan | None:
        """What to lift and copy. Every site is reported: a refusal at once (``rule.skip``), a
        fix in :attr:`fixes`, which the rule reports when it applies the plan."""
        compiled = self.compiled
        if not compiled:
            return None
        uncopyable = self._uncopyable_holders()
        lifts: dict[ReadKey, _Lift] = {}
        verdicts: dict[ReadKey, tuple[str | None, str, bool, dict[str, int] | None]] = {}
        for method_name in compiled:
            for key, node in self.test_reads(method_name):
                if key not in verdicts:
                    verdicts[key] = self._verdict(key, uncopyable)
                kind, reason, configuration, codes = verdicts[key]
                message = (f"branch on configuration attribute '{_describe(key)}' (an exported "
                           "model keeps only the branch chosen at construction)")
                if kind is not None:
                    lifts.setdefault(key, _Lift(key, key[1] if key[0] == "attr" else "", kind,
                                                codes=codes))
                    self.fixes.append((node, _TSF204, message))
                elif configuration:
                    self.rule.skip(self.name, node, reason, code=_TSF204, message=message)
                elif not any(s.reason == reason for s in self.rule.skips):
                    self.rule.skip(self.name, node, reason)
        # Config fields read anywhere in compiled code are copied out of the holder.
        copies: dict[ReadKey, _ConfigCopy] = {}
        taken_attrs = {a.attr for a in self.assignments} | set(self.methods) | {
            key[1] for name in self.methods
            for key in self.reads_in(self.methods[name].body, self_name(self.methods[name])
                                     or "self") if key[0] == "attr"}
        for method_name in compiled:
            func = self.methods[method_name]
            for key, node in self.reads_in(func.body, self_name(func) or "self").items():
                if key[0] == "cfg" and key not in copies and key[1] not in uncopyable:
                    leaf = _identifier(key[-1])
                    attr = fresh_name(leaf.lstrip("_") or leaf,
                                      "_".join(_identifier(k) for k in key[1:]), taken=taken_attrs)
                    taken_attrs.add(attr)
                    copies[key] = _ConfigCopy(key, attr, _access(node, len(key) - 2))
        for key, lift in lifts.items():
            if key[0] == "cfg":
                lift.attr = copies[key].attr
        self._report_config_reads(copies, uncopyable)
        if not lifts and not copies:
            return None
        copy_after = {holder: max(self._top_level()[id(a.statement)]
                                  for a in self._init_assignments(holder))
                      for holder in {k[1] for k in copies}}
        self._thread(list(lifts.values()), compiled)
        return _Plan(list(lifts.values()), list(copies.values()), copy_after, compiled)

    def _verdict(self, key: ReadKey, uncopyable: dict[str, str]
                 ) -> tuple[str | None, str, bool, dict[str, int] | None]:
        """(type, reason, configuration, str codes) for one read key, by :meth:`classify` and
        what else forbids the lift: a holder whose fields cannot be copied, a method run in
        Python that reads the setting, a str setting under --target onnx."""
        if key[0] == "cfg" and key[1] in uncopyable:
            return None, uncopyable[key[1]], True, None
        kind, reason, configuration = self.classify(key, self.compiled)
        if kind is None:
            return kind, reason, configuration, None
        readers = [name for name in self.python_run
                   if key in self.reads_in(self.methods[name].body,
                                           self_name(self.methods[name]) or "self")]
        if readers:
            return None, (f"{_describe(key)} is also read in {readers[0]}(), which runs in "
                          "Python (a @torch.jit.ignore method or one it calls): it would not "
                          "see the lifted argument"), True, None
        codes = None
        if kind == "str" and self.rule.target in ("onnx", "export"):
            codes = self.string_codes(key, self.compiled)
            if codes is None:
                taker = "an ONNX graph" if self.rule.target == "onnx" else "torch.export"
                return None, (f"{_describe(key)} is a str setting used other than compared "
                              f"with string literals (== / !=): {taker} cannot take a "
                              "str input, and int codes need every compared value"), True, None
        return kind, "", True, codes

    def _top_level(self) -> dict[int, int]:
        """ids of ``__init__``'s top-level statements -> their index."""
        if self.init is None or not isinstance(self.init.body, cst.IndentedBlock):
            return {}
        return {id(s): index for index, s in enumerate(self.init.body.body)}

    def _uncopyable_holders(self) -> dict[str, str]:
        """Config holders whose fields cannot be copied after them in ``__init__`` -> why."""
        top_level = self._top_level()
        found: dict[str, str] = {}
        for holder in sorted(self.config_holders):
            statements = [a.statement for a in self._init_assignments(holder)]
            if not statements or not all(id(s) in top_level for s in statements):
                found[holder] = (f"self.{holder} is assigned inside a block of __init__; its "
                                 "fields are not copied")
        return found

    def _report_config_reads(self, copies: dict[ReadKey, _ConfigCopy],
                             uncopyable: dict[str, str]) -> None:
        """TSF203: every read of a config object's field in compiled code, fixed when it is
        copied to a plain attribute, else refused with the reason."""
        for method_name in self.compiled:
            func = self.methods[method_name]
            self_var = self_name(func) or "self"
            never = self.facts.never_compiled(method_name)
            accesses, keys, called, interior = self._scan(func.body, self_var)
            for node in accesses:
                assert isinstance(node, cst.Attribute | cst.Subscript)
                if id(node) in never or id(node) in interior or not self._config_rooted(
                        node.value, keys.get(id(node.value)), self_var):
                    continue
                key, inner = keys[id(node)], keys.get(id(node.value))
                # The holder the chain starts at (a computed key has no read key of its own).
                holder = (key or inner or ("", self_attr(node.value, self_var) or ""))[1]
                message = f"{short_source(node)} reads a field of config object 'self.{holder}'"
                if id(node) in called:
                    reason = (f"{short_source(node)}(...) calls a method of the config object; "
                              "only fields read as values are copied")
                elif holder in uncopyable:
                    reason = uncopyable[holder]
                elif key is None or key not in copies:
                    reason = ("the field is not named by a string literal; only fields read "
                              "by name are copied")
                else:
                    self.fixes.append((node, _TSF203, message))
                    continue
                self.rule.skip(self.name, node, reason, code=_TSF203, message=message)

    def _thread(self, lifts: list[_Lift], reachable: list[str]) -> None:
        """Which compiled methods need each parameter (they read it, or call one that does),
        and a parameter name free in all of them."""
        calls = {name: {c for c in _called(self.methods[name]) if c in reachable}
                 for name in reachable}
        taken: set[str] = set()
        for lift in lifts:
            needing = {name for name in reachable
                       if lift.key in self.reads_in(self.methods[name].body,
                                                    self_name(self.methods[name]) or "self")}
            changed = True
            while changed:
                changed = False
                for name in reachable:
                    if name not in needing and calls[name] & needing:
                        needing.add(name)
                        changed = True
            lift.methods = needing
            for name in needing:
                taken |= names_used(self.methods[name])
        chosen: set[str] = set()
        for lift in lifts:
            base = lift.attr.lstrip("_") or lift.attr
            lift.param = fresh_name(base, f"{base}_value", taken=taken | chosen)
            chosen.add(lift.param)
        if self.rule.target == "onnx":
            for lift in lifts:
                lift.local = fresh_name(f"{lift.param}_value", f"{lift.param}_setting",
                                        taken=taken | chosen)
                chosen.add(lift.local)


def _identifier(text: str) -> str:
    """``text`` as a Python identifier (a dict key may hold any string)."""
    name = re.sub(r"\W", "_", text)
    return f"_{name}" if not name or name[0].isdigit() or keyword.iskeyword(name) else name


def _access(read: cst.CSTNode, depth: int) -> str:
    """How ``read`` reaches its field from the holder, as written: ``.x``, ``["x"]``,
    ``.a["b"]`` (``depth`` fields)."""
    parts: list[str] = []
    node = read
    for _ in range(depth):
        assert isinstance(node, cst.Attribute | cst.Subscript)
        name = _field_name(node)
        parts.append(f".{name}" if isinstance(node, cst.Attribute) else f"[{_quoted(name or '')}]")
        node = node.value
    return "".join(reversed(parts))


def _string_comparison(comparison: cst.Comparison) -> tuple[cst.BaseExpression, str] | None:
    """(the other operand, the string) of ``a == "s"`` / ``"s" != a``; else None."""
    if len(comparison.comparisons) != 1:
        return None
    target = comparison.comparisons[0]
    if not isinstance(target.operator, cst.Equal | cst.NotEqual):
        return None
    for read, literal in ((comparison.left, target.comparator),
                          (target.comparator, comparison.left)):
        if isinstance(literal, cst.SimpleString) and isinstance(literal.evaluated_value, str):
            return read, literal.evaluated_value
    return None


def _called(func: cst.FunctionDef) -> set[str]:
    self_var = self_name(func) or "self"
    return {callee for c in find_all(func.body, cst.Call)
            if (callee := self_attr(c.func, self_var)) is not None}


class _ReadReplacer(cst.CSTTransformer):
    """Replaces attribute/config reads in one method and passes lifted values on to helpers."""

    def __init__(self, analysis: _ClassAnalysis, self_var: str,
                 replacements: dict[ReadKey, str], forwarded: dict[str, list[str]],
                 codes: dict[ReadKey, dict[str, int]] | None = None) -> None:
        self.analysis = analysis
        self.self_var = self_var
        self.replacements = replacements
        self.forwarded = forwarded
        self.codes = codes or {}

    def leave_Comparison(self, original_node: cst.Comparison,
                         updated_node: cst.Comparison) -> cst.BaseExpression:
        """``self.mode == "avg"`` -> ``mode_value == 0`` for a str setting lifted as a code."""
        pair = _string_comparison(original_node)
        if pair is None:
            return updated_node
        key = self.analysis.read_key(pair[0], self.self_var)
        if key not in self.codes:
            return updated_node
        code = cst.Integer(str(self.codes[key][pair[1]]))
        target = updated_node.comparisons[0]
        if isinstance(updated_node.left, cst.SimpleString):
            return updated_node.with_changes(left=code)
        return updated_node.with_changes(comparisons=[target.with_changes(comparator=code)])

    def _replace(self, original: cst.BaseExpression,
                 updated: cst.BaseExpression) -> cst.BaseExpression:
        key = self.analysis.read_key(original, self.self_var)
        if key is None or key not in self.replacements:
            return updated
        return cst.parse_expression(self.replacements[key])

    def leave_Attribute(self, original_node: cst.Attribute,
                        updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._replace(original_node, updated_node)

    def leave_Subscript(self, original_node: cst.Subscript,
                        updated_node: cst.Subscript) -> cst.BaseExpression:
        return self._replace(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        callee = self_attr(original_node.func, self.self_var)
        if callee is None or callee not in self.forwarded:
            return updated_node
        present = {a.keyword.value for a in updated_node.args if a.keyword is not None}
        extra = [cst.Arg(keyword=cst.Name(p), value=cst.Name(p),
                         equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
                 for p in self.forwarded[callee] if p not in present]
        return updated_node.with_changes(args=[*updated_node.args, *extra]) if extra else \
            updated_node


def _quoted(text: str) -> str:
    """A string literal, double-quoted as black would write it."""
    return f'"{text}"' if text.isprintable() and not set(text) & {'"', "\\"} else repr(text)


def _onnx_preamble(lift: _Lift, self_var: str) -> list[cst.BaseStatement]:
    """The setting's value as a plain local, from the Tensor argument when one is given."""
    if lift.codes is None:
        default = f"{lift.local}: {lift.type} = {self_var}.{lift.attr}\n"
        convert = lift.type
    else:
        table = ", ".join(f"{_quoted(text)}: {code}" for text, code in lift.codes.items())
        legend = ", ".join(f"{code} = {_quoted(text)}" for text, code in lift.codes.items())
        default = (f"# {lift.param} codes: {legend}, -1 = any other value\n"
                   f"{lift.local}: int = {{{table}}}.get({self_var}.{lift.attr}, -1)\n")
        convert = "int"
    return [cst.parse_statement(default),
            cst.parse_statement(f"if {lift.param} is not None:\n"
                                f"    {lift.local} = {convert}({lift.param})\n")]


def _laid_out(previous: cst.Param, lead: cst.BaseParenthesizableWhitespace,
              new: list[cst.Param], *, last: bool) -> tuple[cst.Param, list[cst.Param]]:
    """``previous`` and the ``new`` parameters that follow it, laid out as the signature is:
    one per line at the previous parameter's indentation when ``lead`` (the whitespace before
    ``previous``) is a line break, else one space apart. Whatever followed ``previous`` (a
    comment, the line break before ``)``, a trailing comma) follows the last new one; a
    comment stays on ``previous``'s line."""
    if isinstance(lead, cst.ParenthesizedWhitespace):
        step: cst.BaseParenthesizableWhitespace = lead.with_changes(
            first_line=cst.TrailingWhitespace(), empty_lines=[])
    else:
        step = cst.SimpleWhitespace(" ")
    trailing_comma = isinstance(previous.comma, cst.Comma)
    if trailing_comma and not last:
        # Before **kwargs: previous keeps its comma; the new ones lead to **kwargs as it did.
        assert isinstance(previous.comma, cst.Comma)
        after = previous.comma.whitespace_after
        closing = after.with_changes(first_line=cst.TrailingWhitespace()) if isinstance(
            after, cst.ParenthesizedWhitespace) else after
        commas = [cst.Comma(whitespace_after=step)] * (len(new) - 1) + [
            cst.Comma(whitespace_after=closing)]
        return previous, [p.with_changes(comma=c) for p, c in zip(new, commas, strict=True)]
    old = (previous.comma.whitespace_after if isinstance(previous.comma, cst.Comma)
           else previous.whitespace_after_param)
    into_first, closing = step, old
    if isinstance(step, cst.ParenthesizedWhitespace) and isinstance(
            old, cst.ParenthesizedWhitespace):
        # A comment after previous stays on its line; the break before ``)`` comes last.
        into_first = step.with_changes(first_line=old.first_line)
        closing = old.with_changes(first_line=cst.TrailingWhitespace())
    previous = previous.with_changes(comma=cst.Comma(whitespace_after=into_first),
                                     whitespace_after_param=cst.SimpleWhitespace(""))
    laid = [p.with_changes(comma=cst.Comma(whitespace_after=step)) for p in new[:-1]]
    final = new[-1]
    if trailing_comma:
        final = final.with_changes(comma=cst.Comma(whitespace_after=closing))
    else:
        final = final.with_changes(whitespace_after_param=closing)
    return previous, [*laid, final]


def _with_parameters(func: cst.FunctionDef, lifts: list[_Lift], self_var: str,
                     tensor: str | None = None,
                     preamble: list[cst.BaseStatement] | None = None) -> cst.FunctionDef:
    """``tensor`` (how the file names torch.Tensor) selects the --target onnx form, or with
    ``preamble`` (the statements that fill in each parameter) the --target export form."""
    new_params = [cst.Param(cst.Name(lift.param),
                            annotation=cst.Annotation(cst.parse_expression(
                                f"Optional[{tensor or lift.type}]")),
                            default=cst.Name("None"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(" "),
                                                  cst.SimpleWhitespace(" ")))
                  for lift in lifts]
    params = func.params
    keyword_only = isinstance(params.star_arg, cst.Param) or bool(params.kwonly_params)
    # After *args (or among keyword-only parameters) so positional calls bind as before.
    existing = list(params.kwonly_params if keyword_only else params.params)
    previous = existing[-1] if existing else params.star_arg if keyword_only else None
    if isinstance(previous, cst.Param):
        # Laid out after the parameter they follow, as the whitespace before it is.
        shown = [*params.posonly_params, params.posonly_ind, *params.params, params.star_arg,
                 *params.kwonly_params]
        ahead = shown[:next(i for i, p in enumerate(shown) if p is previous)]
        commas = [p.comma for p in ahead if isinstance(p, cst.Param | cst.ParamStar
                                                       | cst.ParamSlash)]
        lead = (commas[-1].whitespace_after if commas and isinstance(commas[-1], cst.Comma)
                else func.whitespace_before_params)
        previous, new_params = _laid_out(previous, lead, new_params,
                                         last=params.star_kwarg is None)
        if existing:
            existing[-1] = previous
        else:
            params = params.with_changes(star_arg=previous)
    params = params.with_changes(**{"kwonly_params" if keyword_only else "params":
                                    [*existing, *new_params]})
    if preamble is not None:
        pass
    elif tensor is not None:
        preamble = [line for lift in lifts for line in _onnx_preamble(lift, self_var)]
    else:
        preamble = [cst.parse_statement(f"if {lift.param} is None:\n"
                                        f"    {lift.param} = {self_var}.{lift.attr}\n")
                    for lift in lifts]
    body = func.body
    if isinstance(body, cst.SimpleStatementSuite):
        body = cst.IndentedBlock([cst.SimpleStatementLine(body.body)])
    assert isinstance(body, cst.IndentedBlock)
    at = docstring_count(body)
    body = body.with_changes(body=[*body.body[:at], *preamble, *body.body[at:]])
    return func.with_changes(params=params, body=body)


class LiftBranch(Rule):
    __doc__ = __doc__
    name = "lift-branch"
    order = 70
    CODES = (
        Code("TSF203", "config-object", "field of a config object read in a compiled method",
             "A ScriptModule cannot hold a config object (dataclass, namespace, dict); copy the "
             "fields forward reads into plain attributes in __init__."),
        Code("TSF204", "config-branch", "branch on a configuration attribute",
             "Scripts, but torch.jit.freeze, Final attributes, the ONNX exporter and torch.export "
             "bake the attribute: the exported model keeps only the branch chosen at "
             "construction. Lifting it into a forward() argument keeps every branch.",
             level="warning"),
    )
    summary = ("Config-attribute branches in forward() become a typed forward() argument, so one "
               "scripted or exported artifact keeps every path.")

    VALID = (
        # self.training is not configuration.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)
    def forward(self, x):
        if self.training:
            x = self.drop(x)
        return x
""",
        # A structural flag decides which submodule exists.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, use_proj=True):
        super().__init__()
        self.use_proj = use_proj
        if use_proj:
            self.proj = nn.Linear(4, 4)
    def forward(self, x):
        if self.use_proj:
            x = self.proj(x)
        return x
""",
        # State mutated outside __init__.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.warm = True
    def forward(self, x):
        if self.warm:
            self.warm = False
        return x
""",
    )
    INVALID = (
        Example(
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, use_act=True):
        super().__init__()
        self.use_act = use_act
    def forward(self, x):
        if self.use_act == True:
            x = x.relu()
        return x
""",
            """
from typing import Optional

import torch.nn as nn
class M(nn.Module):
    def __init__(self, use_act=True):
        super().__init__()
        self.use_act = use_act
    def forward(self, x, use_act: Optional[bool] = None):
        if use_act is None:
            use_act = self.use_act
        if use_act == True:
            x = x.relu()
        return x
""",
        ),
        Example(
            """
from typing import Optional
import torch.nn as nn
class Pool(nn.Module):
    def __init__(self, mode: str = "avg"):
        super().__init__()
        self.mode = mode
    def forward(self, x, mode=None):
        \"\"\"Pool over time.\"\"\"
        return self._pool(x)
    def _pool(self, x):
        return x.mean(1) if self.mode == "avg" else x.amax(1)
""",
            """
from typing import Optional
import torch.nn as nn
class Pool(nn.Module):
    def __init__(self, mode: str = "avg"):
        super().__init__()
        self.mode = mode
    def forward(self, x, mode=None, mode_value: Optional[str] = None):
        \"\"\"Pool over time.\"\"\"
        if mode_value is None:
            mode_value = self.mode
        return self._pool(x, mode_value=mode_value)
    def _pool(self, x, mode_value: Optional[str] = None):
        if mode_value is None:
            mode_value = self.mode
        return x.mean(1) if mode_value == "avg" else x.amax(1)
""",
        ),
        Example(
            """
import torch.nn as nn
class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        y = self.fc(x) * self.cfg.scale
        if self.cfg["residual"]:
            y = y + x
        return y
""",
            """
from typing import Optional

import torch.nn as nn
class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.scale = self.cfg.scale
        self.residual = self.cfg["residual"]
        self.fc = nn.Linear(4, 4)
    def forward(self, x, residual: Optional[bool] = None):
        if residual is None:
            residual = self.residual
        y = self.fc(x) * self.scale
        if residual:
            y = y + x
        return y
""",
        ),
    )

    # "onnx": the form the TorchScript-based ONNX exporter keeps every branch of (LiftBranchOnnx).
    target: ClassVar[str] = "torchscript"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Callees of __init__ calls looked up in other files: (as written, import level,
        # dotted name) -> how a reason names them (None: no module is built).
        self._elsewhere: dict[tuple[str, int, str], str | None] = {}
        self._relative: tuple[cst.Module, dict[str, tuple[int, str]],
                              list[tuple[int, str]]] | None = None

    @property
    def tensor_name(self) -> str | None:
        """--target onnx: how the file names torch.Tensor (``torch`` is imported when the file
        cannot name it). None for the TorchScript form."""
        return self.facts.tensor_name if self.target == "onnx" else None

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """Something lift-branch looks at: a test in a compiled method that reads an attribute
        of self, or a compiled read of a field of an attribute (``self.cfg.x``,
        ``self.cfg["x"]``) that ``__init__`` does not set to a torch object."""
        for klass, func in file.compiled:
            self_var = file.self_var(func)
            if any(file.reads_self(test, self_var) for test in file.tests(func)):
                return True
            holders = {node.value.attr for node in ast.walk(func)
                       if isinstance(node, ast.Attribute | ast.Subscript)
                       and isinstance(node.value, ast.Attribute)
                       and isinstance(node.value.value, ast.Name)
                       and node.value.value.id == self_var}
            if holders and _init_may_store_config(file, klass, holders):
                return True
        return False

    def builds_module_elsewhere(self, func: cst.BaseExpression) -> str | None:
        """How a reason names the callee of a call in ``__init__`` that builds, or may build,
        a module whose class is not in this file; None when it is shown not to (a function, a
        class that is no ``nn.Module``, the standard library, torch outside ``torch.nn``) or is
        not imported at all (this file's own names, builtins, methods)."""
        dotted = get_full_name_for_node(func)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.facts.imports:
            level, target = 0, qualified_name(func, self.facts.imports) or dotted
        elif head in self._imports_of_tree()[0]:
            level, imported = self._imports_of_tree()[0][head]
            target = ".".join(p for p in (imported, rest) if p)
        elif head not in self.facts.top_level_names and self._imports_of_tree()[1]:
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
        found = lookup(self.context.filename, target, level) if self.context.filename else None
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
        tree = self.source_module
        if self._relative is None or self._relative[0] is not tree:
            self._relative = (tree, relative_imports(tree), star_imports(tree))
        return self._relative[1], self._relative[2]

    def _star_imported(self, dotted: str) -> tuple[int, str] | None:
        """(level, dotted name) of a name a ``*`` import brings from the user's tree; None
        when no module of the tree defines it (a builtin, or an installed package's name,
        which is not followed)."""
        if not self.context.filename:
            return None
        for level, module in self._imports_of_tree()[1]:
            target = f"{module}.{dotted}" if module else dotted
            found = lookup(self.context.filename, target, level)
            if found is not None and found.kind != "unknown":
                return level, target
        return None

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # The file's facts before the rewrite: can it name torch.Tensor already?
        facts = module_facts(tree)
        import_torch = facts.torch_alias is None and (
            self.target == "export" or (self.target == "onnx"
                                        and facts.imports.get("Tensor") != "torch.Tensor"))
        rewritten = super().transform_module_impl(tree)
        if self.changes and import_torch:
            rewritten = add_module_import(rewritten, "torch")
        return rewritten

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        name = cls.name.value
        if not self.facts.is_module_class(cls):
            return cls
        analysis = _ClassAnalysis(self, cls)
        plan = analysis.plan()
        if plan is not None:
            plan = self.settle(analysis, plan)
        if plan is None:
            return cls
        rewritten = self._apply(analysis, plan, cls)
        for node, code, message in analysis.fixes:
            self.fixed(node, code, message)
        if plan.lifts:
            self.need_typing("Optional")
        parts = [f"lifted {_describe(lift.key)} as {lift.param}: Optional[{lift.type}]"
                 for lift in plan.lifts] if self.target == "torchscript" else [
            f"lifted {_describe(lift.key)} as {lift.param}: Optional[Tensor] "
            f"({'int code' if lift.codes is not None else lift.type})"
            for lift in plan.lifts] if self.target == "export" else [
            f"lifted {_describe(lift.key)} as {lift.param}: Optional[Tensor] "
            f"({'int code' if lift.codes is not None else lift.type} {lift.local})"
            for lift in plan.lifts]
        parts += [f"copied {_describe(c.key)} to self.{c.attr}" for c in plan.copies
                  if c.key not in {lift.key for lift in plan.lifts}]
        # Validation calls forward() with each configuration's values of these parameters.
        lifted = {lift.param: lift.attr for lift in plan.lifts if "forward" in lift.methods}
        self.changes.append(ClassChange(self.name, name, self.span_of(cls), "; ".join(parts),
                                        lifted))
        return rewritten

    def settle(self, analysis: _ClassAnalysis, plan: _Plan) -> _Plan | None:
        """The plan this form applies (a target form may refuse some lifts)."""
        return plan

    def _apply(self, analysis: _ClassAnalysis, plan: _Plan,
               cls: cst.ClassDef) -> cst.ClassDef:
        assert isinstance(cls.body, cst.IndentedBlock)
        new_body: list[cst.BaseStatement] = []
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef):
                name = statement.name.value
                self_var = self_name(statement) or "self"
                if name in plan.reachable:
                    statement = self._rewrite_method(analysis, plan, statement, self_var)
                if name == "__init__":
                    statement = self._copy_config_fields(plan, statement, self_var)
            new_body.append(statement)
        return cls.with_changes(body=cls.body.with_changes(body=new_body))

    def _rewrite_method(self, analysis: _ClassAnalysis, plan: _Plan, func: cst.FunctionDef,
                        self_var: str) -> cst.FunctionDef:
        func, mine = self._reads_replaced(analysis, plan, func, self_var)
        return _with_parameters(func, mine, self_var, self.tensor_name) if mine else func

    def _reads_replaced(self, analysis: _ClassAnalysis, plan: _Plan, func: cst.FunctionDef,
                        self_var: str) -> tuple[cst.FunctionDef, list[_Lift]]:
        """``func`` reading each lifted setting from its parameter (and copied config fields
        from their attributes), passing the parameters on to the helpers that need them; and
        the lifts whose parameter ``func`` takes."""
        name = func.name.value
        mine = [lift for lift in plan.lifts if name in lift.methods]
        replacements = {lift.key: lift.local or lift.param for lift in mine}
        codes = {lift.key: lift.codes for lift in mine if lift.codes is not None}
        for copy in plan.copies:
            replacements.setdefault(copy.key, f"{self_var}.{copy.attr}")
        forwarded: dict[str, list[str]] = {}
        for lift in mine:
            for callee in lift.methods - {name}:
                forwarded.setdefault(callee, []).append(lift.param)
        func = func.with_changes(body=func.body.visit(
            _ReadReplacer(analysis, self_var, replacements, forwarded, codes)))
        return func, mine

    def _copy_config_fields(self, plan: _Plan, init: cst.FunctionDef,
                            self_var: str) -> cst.FunctionDef:
        if not plan.copies:
            return init
        assert isinstance(init.body, cst.IndentedBlock)
        anchors = {index: holder for holder, index in plan.copy_after.items()}
        body: list[cst.BaseStatement] = []
        for index, statement in enumerate(init.body.body):
            body.append(statement)
            holder = anchors.get(index)
            if holder is None:
                continue
            for copy in plan.copies:
                if copy.key[1] == holder:
                    source = f"{self_var}.{holder}{copy.access}"
                    body.append(cst.parse_statement(f"{self_var}.{copy.attr} = {source}\n"))
        return init.with_changes(body=init.body.with_changes(body=body))


class LiftBranchOnnx(LiftBranch):
    """``lift-branch`` under ``--target onnx``: each lifted setting is an ``Optional[Tensor]``
    argument, read into a plain local::

        def forward(self, x, use_act: Optional[Tensor] = None):
            use_act_value: bool = self.use_act
            if use_act is not None:
                use_act_value = bool(use_act)
            if use_act_value:
                ...

    A str setting compared only with string literals becomes an int code (``mode == "avg"`` ->
    ``mode_value == 0``, any other string -1); other str settings are not lifted.

    Why this form (measured, torch 2.13 / onnx 1.23 / onnxruntime 1.31, TorchScript-based
    exporter): an ``Optional[bool]``/``Optional[int]``/``Optional[float]`` input is exported
    without a type and onnxruntime refuses the model; a ``str`` input cannot be exported; an
    ``Optional[Tensor]`` input exports as ``optional(tensor)``, every branch on it stays an
    ``If`` (a ``while`` on it a ``Loop``), and onnxruntime matches eager for every value. A plain
    ``bool`` argument would also export, but only without a default, which breaks existing
    ``model(x)`` callers or needs a wrapper class in the user's file. Here existing callers are
    unchanged (the setting is read from the attribute), and the rewritten class exports as it
    is: ``torch.onnx.export(torch.jit.script(m), (x, torch.tensor(True)), f, dynamo=False)``.
    A float setting is given as a float64 scalar tensor (a Python float is a double there).
    """

    target = "onnx"


class LiftBranchExport(LiftBranch):
    """``lift-branch`` under ``--target export``: each lifted setting is an
    ``Optional[torch.Tensor]`` argument holding the setting as a 0-d tensor, and each branch
    on it is a ``torch.cond``::

        def forward(self, x, branch_testing: Optional[torch.Tensor] = None):
            if branch_testing is None:
                branch_testing = torch.tensor(self.branch_testing)
            def branch_testing_true(x):
                x = self.act(x)
                return x
            def branch_testing_false(x):
                return x.clone()
            x = torch.cond(branch_testing == True, branch_testing_true,
                           branch_testing_false, (x,))
            return x

    Why this form (measured, torch 2.13): ``torch.export`` specialises a module attribute and a
    Python scalar argument, so the exported program (and the ``dynamo=True`` ONNX file) keeps
    only the branch taken while tracing; a Python ``if`` on a tensor fails to export. A 0-d
    tensor argument and ``torch.cond`` keep both branches: one exported program serves every
    configuration (``ep.module()(x, branch_testing=torch.tensor(False))``), survives
    ``torch.export.save``/``load``, and its ONNX export holds one ``If`` per ``cond``. Existing
    callers are unchanged (None reads the attribute). The branch functions take the locals the
    branch reads and return those code after it reads (``codemods/rules/torch_cond.py``); an
    unchanged value is returned as ``x.clone()`` because torch.cond rejects an output that
    aliases an input.

    A setting is lifted only when every read of it in the compiled methods can take the tensor:
    ``if`` tests that lower to ``torch.cond`` (``not flag`` becomes ``torch.logical_not(flag)``,
    ``a and b`` ``torch.logical_and(a, b)``) and tensor arithmetic (``x * scale``). A read in a
    ``while`` test, ``range(...)``, an index or slice, a ternary, or a test mixing it with
    Python values, and a branch torch.cond cannot express (a side that returns, raises or
    mutates state, or that assigns no tensor), refuses the setting with the reason. A str
    setting compared only with string literals becomes an int code, as under ``--target
    onnx``.
    """

    target = "export"

    @property
    def torch_name(self) -> str:
        return self.facts.torch_alias or "torch"

    def settle(self, analysis: _ClassAnalysis, plan: _Plan) -> _Plan | None:
        """Drop the lifts some read of which a tensor cannot serve, until none is left that
        cannot; each dropped setting's test reads are refused with the first reason."""
        refused: dict[ReadKey, str] = {}
        while True:
            found: dict[ReadKey, str] = {}
            for name in plan.reachable:
                func = analysis.methods[name]
                _, problems = self._export_method(analysis, plan, func, self_name(func) or "self")
                for key, reason in problems.items():
                    found.setdefault(key, reason)
            if not found:
                break
            refused.update(found)
            plan.lifts = [lift for lift in plan.lifts if lift.key not in found]
        if refused:
            keys = {id(node): key for name in analysis.compiled
                    for key, node in analysis.test_reads(name)}
            kept = []
            for node, code, message in analysis.fixes:
                if code == _TSF204 and keys.get(id(node)) in refused:
                    key = keys[id(node)]
                    self.skip(analysis.name, node, refused[key], code=code, message=message)
                else:
                    kept.append((node, code, message))
            analysis.fixes = kept
        if not plan.lifts and not plan.copies:
            return None
        return plan

    def _rewrite_method(self, analysis: _ClassAnalysis, plan: _Plan, func: cst.FunctionDef,
                        self_var: str) -> cst.FunctionDef:
        rewritten, problems = self._export_method(analysis, plan, func, self_var)
        assert not problems, problems
        return rewritten

    def _export_method(self, analysis: _ClassAnalysis, plan: _Plan, func: cst.FunctionDef,
                       self_var: str) -> tuple[cst.FunctionDef, dict[ReadKey, str]]:
        """``func`` in the export form, and why a tensor cannot serve some lifted settings."""
        func, mine = self._reads_replaced(analysis, plan, func, self_var)
        if not mine:
            return func, {}
        by_param = {lift.param: lift for lift in mine}
        problems: dict[ReadKey, str] = {}
        sites: list[CondSite] = []
        for branch in find_all(func.body, cst.If):
            read = [p for p in _params_read(branch.test, by_param)]
            if not read:
                continue
            predicate, why = _predicate(branch.test, set(by_param), self.torch_name)
            if predicate is None:
                for param in read:
                    problems.setdefault(by_param[param].key, why)
                continue
            sites.append(CondSite(branch, predicate, read[0]))
        result = lower_to_cond(func, sites, self.torch_name)
        for branch, reason in result.refused.items():
            for param in _params_read(branch.test, by_param):
                problems.setdefault(by_param[param].key,
                                    f"its branch cannot be a torch.cond: {reason}")
        served = {id(n) for branch in result.lowered for n in find_all(branch.test, cst.Name)}
        for param, why in _other_reads(func, by_param, served, plan.reachable, self_var):
            problems.setdefault(by_param[param].key, why)
        if problems:
            return func, problems
        preamble = [line for lift in mine for line in self._preamble(lift, self_var)]
        return _with_parameters(result.func, mine, self_var, f"{self.torch_name}.Tensor",
                                preamble), {}

    def _preamble(self, lift: _Lift, self_var: str) -> list[cst.BaseStatement]:
        value = f"{self_var}.{lift.attr}"
        lines = []
        if lift.codes is not None:
            table = ", ".join(f"{_quoted(text)}: {code}" for text, code in lift.codes.items())
            legend = ", ".join(f"{code} = {_quoted(text)}" for text, code in lift.codes.items())
            value = f"{{{table}}}.get({value}, -1)"
            lines.append(f"# {lift.param} codes: {legend}, -1 = any other value\n")
        return [cst.parse_statement("".join(lines) + f"if {lift.param} is None:\n"
                                    f"    {lift.param} = {self.torch_name}.tensor({value})\n")]


LiftBranch.target_forms = {"onnx": LiftBranchOnnx, "export": LiftBranchExport}


def _params_read(expr: cst.CSTNode, params: Iterable[str]) -> list[str]:
    """The lifted parameters ``expr`` reads, in order of first read."""
    wanted = set(params)
    found: list[str] = []
    for name in find_all(expr, cst.Name):
        if name.value in wanted and name.value not in found:
            found.append(name.value)
    return found


_LOGICAL = {cst.And: "logical_and", cst.Or: "logical_or"}


def _predicate(test: cst.BaseExpression, params: set[str],
               torch: str) -> tuple[cst.BaseExpression | None, str]:
    """The tensor expression torch.cond receives for ``test`` (``not p`` ->
    ``torch.logical_not(p)``, ``p and q`` -> ``torch.logical_and(p, q)``), or None and why."""
    bare = test.with_changes(lpar=[], rpar=[])
    if isinstance(bare, cst.Name) and bare.value in params:
        return bare, ""
    if isinstance(bare, cst.UnaryOperation) and isinstance(bare.operator, cst.Not):
        inner, why = _predicate(bare.expression, params, torch)
        if inner is None:
            return None, why
        return cst.parse_expression(f"{torch}.logical_not(X)").with_changes(
            args=[cst.Arg(inner)]), ""
    if isinstance(bare, cst.BooleanOperation):
        left, why = _predicate(bare.left, params, torch)
        right, why_right = _predicate(bare.right, params, torch)
        if left is None or right is None:
            return None, why or why_right
        call = cst.parse_expression(f"{torch}.{_LOGICAL[type(bare.operator)]}(X, Y)")
        assert isinstance(call, cst.Call)
        return call.with_changes(args=[cst.Arg(left, comma=call.args[0].comma),
                                       cst.Arg(right)]), ""
    if isinstance(bare, cst.Comparison) and len(bare.comparisons) == 1:
        operator = bare.comparisons[0].operator
        operands = [bare.left, bare.comparisons[0].comparator]
        if (isinstance(operator, cst.Equal | cst.NotEqual | cst.LessThan | cst.GreaterThan
                       | cst.LessThanEqual | cst.GreaterThanEqual)
                and any(_params_read(o, params) for o in operands)
                and all(is_python_value(o) or _tensor_operand(o, params) for o in operands)):
            return bare, ""
    return None, (f"the test `{short_source(test)}` mixes the setting with values that are not "
                  "tensors (or uses `is`, `in` or a chained comparison), so it cannot be a "
                  "torch.cond predicate")


def _tensor_operand(expr: cst.BaseExpression, params: set[str]) -> bool:
    """A lifted parameter, or arithmetic of one with Python numbers."""
    bare = expr.with_changes(lpar=[], rpar=[])
    if isinstance(bare, cst.Name):
        return bare.value in params
    if isinstance(bare, cst.BinaryOperation):
        sides = (bare.left, bare.right)
        return any(_tensor_operand(s, params) for s in sides) and all(
            _tensor_operand(s, params) or is_python_value(s) for s in sides)
    return False


def _other_reads(func: cst.FunctionDef, by_param: dict[str, _Lift], served: set[int],
                 reachable: list[str], self_var: str) -> list[tuple[str, str]]:
    """(param, why) for each read of a lifted parameter a tensor cannot serve: anything but a
    lowered test, tensor arithmetic, and passing it on to a compiled helper."""
    parents: dict[int, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [func.body]
    while stack:
        node = stack.pop()
        for child in children(node):
            parents[id(child)] = node
            stack.append(child)
    not_reads = {id(a.attr) for a in find_all(func.body, cst.Attribute)} | {
        id(a.keyword) for a in find_all(func.body, cst.Arg) if a.keyword is not None}
    found: list[tuple[str, str]] = []
    for name in find_all(func.body, cst.Name):
        if name.value not in by_param or id(name) in served or id(name) in not_reads:
            continue
        why = _python_context(name, parents, reachable, self_var)
        if why is not None:
            found.append((name.value, f"{why}; a tensor cannot serve it"))
    return found


def _python_context(name: cst.Name, parents: dict[int, cst.CSTNode], reachable: list[str],
                    self_var: str) -> str | None:
    parent = parents.get(id(name))
    if (isinstance(parent, cst.Arg) and parent.keyword is not None
            and parent.keyword.value == name.value):
        call = parents.get(id(parent))
        if isinstance(call, cst.Call) and self_attr(call.func, self_var) in reachable:
            return None      # passed on to a helper that takes the same parameter
    node: cst.CSTNode = name
    arithmetic = False
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(parent, cst.While) and node is parent.test:
            return "it is read in a `while` test"
        if isinstance(parent, cst.IfExp) and node is parent.test:
            return f"it is the test of a ternary (`{short_source(parent)}`)"
        if isinstance(parent, cst.If) and node is parent.test:
            return f"it is read in the test `if {short_source(parent.test)}:`"
        if isinstance(parent, cst.For) and node is parent.iter:
            return f"it decides a loop (`for ... in {short_source(parent.iter)}`)"
        if isinstance(parent, cst.SubscriptElement):
            index = parents.get(id(parent), parent)
            return f"it is used as an index or size (`{short_source(index)}`)"
        if isinstance(parent, cst.Call) and node is not parent.func:
            called = get_full_name_for_node(parent.func) or ""
            if called in _PYTHON_VALUE_CALLS or not arithmetic:
                return f"it is passed to `{short_source(parent)}`"
        if isinstance(parent, cst.BinaryOperation) and not is_python_value(
                parent.right if node is parent.left else parent.left):
            arithmetic = True     # with something that is not a Python number: a tensor
        if isinstance(parent, cst.BaseStatement | cst.BaseSmallStatement):
            break
        node = parent
    if not arithmetic:
        return f"it is read as a Python value (`{short_source(node)}`)"
    return None


_PYTHON_VALUE_CALLS = {"range", "int", "float", "bool", "str", "len", "print", "isinstance"}


def _init_may_store_config(file: AstFile, klass: ast.ClassDef, holders: set[str]) -> bool:
    """Whether ``__init__`` may store something other than a torch object in one of
    ``holders`` (a config object, dict, namespace, or a value of unknown kind)."""
    init = file.init_of(klass)
    if init is None:
        return False
    self_var = file.self_var(init)
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for target in targets:
            for item in ast.walk(target):
                if (isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name)
                        and item.value.id == self_var and item.attr in holders):
                    value = getattr(node, "value", None)
                    if not (isinstance(value, ast.Call)
                            and file.resolved(value.func).split(".")[0] == "torch"):
                        return True
    return False
