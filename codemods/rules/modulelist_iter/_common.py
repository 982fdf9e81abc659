"""What every part of modulelist-iter shares: the plans it builds, naming, and node helpers."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import code_of, find_all, fresh_name, parameters_of

# torch.nn container -> how it is indexed: "list" (an integer) or "dict" (a string).
CONTAINER_KINDS = {"ModuleList": "list", "Sequential": "list", "ModuleDict": "dict"}

TSF201 = "TSF201"
TSF202 = "TSF202"
TSF216 = "TSF216"


# ---- plans -------------------------------------------------------------------------------------

@dataclass
class Container:
    attr: str
    kind: str                       # "list" (ModuleList / Sequential) or "dict"
    keys: set[str] = field(default_factory=set)   # what its length provably equals


@dataclass
class LoopPlan:
    line: int
    old_header: str
    header_target: str
    header_iter: str
    subs: dict[str, str]            # container attr -> element name replacing self.attr[index]
    index: str | None               # the loop variable whose subscripts are replaced
    forward_calls: set[str]         # element names called through .forward(...)
    prelude: str | None             # statement inserted at the top of the body
    reverse_attrs: list[str] = field(default_factory=list)


@dataclass
class Hoist:
    line: int
    attr: str
    key: str
    result: str
    name: str
    element: str
    tensor: str


@dataclass
class Selection:
    """One list element picked by its index: ``for counter, element in enumerate(self.attr):
    if counter == index: ...``."""
    attr: str
    index: str                      # the index expression's source
    element: str
    counter: str
    nonnegative: bool               # the index is provably >= 0: no ``or counter == index + len``
    checked: bool                   # an out-of-range index is checked before the loop


@dataclass
class SelectPlan:
    """One statement whose indexed calls become selections (the module doc's three forms)."""
    line: int
    form: str                       # "inside", "result" or "return"
    selections: list[Selection]
    result: str | None = None       # "result": the Optional variable bound in the loop
    tensor: str = ""                # "result": how the file names the Tensor type
    keep_statement: bool = True     # "result": False when the statement was `result = call`


@dataclass
class RegionPlan:
    """``name = self.attr[index]`` and the ``moved`` statements after it that use ``name``:
    they move into ``for counter, name in enumerate(self.attr): if counter == index:``
    (``selection.element`` is ``name``), the binding gives way to the index check."""
    line: int
    selection: Selection
    moved: int


@dataclass
class UnpackPlan:
    """``for attn, ff in self.layers``: each unpacking target becomes one loop variable, its
    names bound from it by literal index at the top of the body."""
    line: int
    old_header: str
    targets: dict[int, str]         # id of a target tuple -> the loop variable replacing it
    prelude: list[str]              # ``attn = layer[0]``, ...


@dataclass
class MethodPlan:
    loops: dict[int, LoopPlan] = field(default_factory=dict)
    unpacks: dict[int, UnpackPlan] = field(default_factory=dict)
    hoists: dict[int, Hoist] = field(default_factory=dict)
    selects: dict[int, SelectPlan] = field(default_factory=dict)
    regions: dict[int, RegionPlan] = field(default_factory=dict)   # id of the binding -> plan
    # The sites these rewrites fix: (node, code, message), reported when the class is rewritten.
    fixed: list[tuple[cst.CSTNode, str, str]] = field(default_factory=list)


# ---- names -------------------------------------------------------------------------------------

def source_key(node: cst.CSTNode) -> str:
    """Source text without whitespace: two expressions written alike have the same key."""
    return "".join(code_of(node).split())


def singular(attr: str) -> str:
    base = attr.lstrip("_") or attr
    for suffix in ("_list", "_dict", "List", "Dict"):
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    if base.endswith("ies") and len(base) > 3:
        return base[:-3] + "y"
    if base.endswith(("sses", "xes", "ches", "shes")):
        return base[:-2]
    if base.endswith("s") and not base.endswith(("ss", "us", "is")) and len(base) > 1:
        return base[:-1]
    return ""


def element_name(attr: str, kind: str, taken: set[str]) -> str:
    """``layers`` -> ``layer``, else ``layer_module``, ``layer2``...; ``body`` -> ``body_layer``
    (``body_module`` for a ModuleDict)."""
    plain = attr.lstrip("_") or attr
    suffix = "_layer" if kind == "list" else "_module"
    one = singular(attr)
    if one:
        return fresh_name(one, one + ("_module" if kind == "list" else "_item"), taken=taken)
    return fresh_name(plain + suffix, taken=taken)


def parenthesized(target: str, count: int) -> str:
    return f"({target})" if count > 1 else target


# ---- nodes -------------------------------------------------------------------------------------

def call_name(expr: cst.BaseExpression) -> str | None:
    return get_full_name_for_node(expr.func) if isinstance(expr, cst.Call) else None


def int_value(expr: cst.BaseExpression) -> int | None:
    if isinstance(expr, cst.Integer):
        return int(expr.value)
    if (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus)
            and isinstance(expr.expression, cst.Integer)):
        return -int(expr.expression.value)
    return None


def positional(call: cst.Call) -> list[cst.BaseExpression] | None:
    """The arguments of ``call`` when they are all plain positional ones."""
    if any(a.keyword is not None or a.star for a in call.args):
        return None
    return [a.value for a in call.args]


def single_index(node: cst.Subscript) -> cst.BaseExpression | None:
    if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return node.slice[0].slice.value
    return None


def is_literal_key(expr: cst.BaseExpression) -> bool:
    return int_value(expr) is not None or isinstance(expr, cst.SimpleString |
                                                      cst.ConcatenatedString)


def literal_for(expr: cst.BaseExpression, kind: str) -> bool:
    """Whether TorchScript takes ``expr`` as an index of a ``kind`` container: an integer
    literal (negative too) for a list, a string literal for a dict."""
    if kind == "dict":
        return isinstance(expr, cst.SimpleString | cst.ConcatenatedString)
    return int_value(expr) is not None


def binding_counts(func: cst.FunctionDef) -> dict[str, int]:
    """How often each plain name is bound in ``func`` (parameters, assignments, for targets)."""
    counts: dict[str, int] = {}

    def bump(target: cst.BaseExpression) -> None:
        for name in find_all(target, cst.Name):
            counts[name.value] = counts.get(name.value, 0) + 1

    for name in parameters_of(func):
        counts[name] = counts.get(name, 0) + 1
    for node in find_all(func.body, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.NamedExpr, cst.AsName):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name | cst.Tuple | cst.List):
                    bump(target.target)
        elif isinstance(node, cst.AnnAssign | cst.AugAssign | cst.For | cst.NamedExpr):
            if isinstance(node.target, cst.Name | cst.Tuple | cst.List):
                bump(node.target)
        elif isinstance(node.name, cst.Name):
            bump(node.name)
    return counts


def own_jumps(body: cst.CSTNode) -> list[cst.CSTNode]:
    """``break``/``continue`` statements of this loop (not of loops nested in it)."""
    nested = {id(n) for loop in find_all(body, cst.For, cst.While)
              for n in find_all(loop.body, cst.Break, cst.Continue)}
    return [n for n in find_all(body, cst.Break, cst.Continue) if id(n) not in nested]


def path_to(root: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode]:
    """Nodes from ``root`` down to ``target`` (both included); empty if not found."""
    stack: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = [(root, [root])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        stack.extend((child, [*path, child]) for child in node.children)
    return []
