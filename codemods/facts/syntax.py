"""Syntax helpers every rule and the linter use: finding nodes, resolving names through the
imports, reading ``self.<attr>``, literal and annotation types.

Pure functions of the LibCST tree; nothing imports torch. What a *class* or a *module* is (its
compiled methods, its attributes, its module classes) is answered once per file by
:mod:`tsfix.codemods.facts.classes` and :mod:`tsfix.codemods.facts.module`.
"""

from __future__ import annotations

import dataclasses
import keyword
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.scope import current_scope

SCALAR_TYPES = ("bool", "int", "float", "str")
# torch functions that join a sequence of tensors: a list or a tuple gives the same result.
JOIN_FUNCTIONS = frozenset(f"torch.{name}" for name in (
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack"))

_CLASS_WITH_BASES = re.compile(r"^[ \t]*class\s+\w+\s*\(", re.MULTILINE)


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
# Fields that only ever hold whitespace, comments and punctuation.
_TRIVIA = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "header",
           "footer", "lines_after", "trailing_whitespace", "colon", "equal", "dot", "star",
           "asynchronous", "operator")


def child_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node type that can hold child nodes (not whitespace or punctuation)."""
    names = _CHILD_FIELDS.get(kind)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(kind)
                      if not f.name.startswith(_TRIVIA) or f.name == "operator")
        _CHILD_FIELDS[kind] = names
    return names


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Direct children of ``node`` (in source order), read from its dataclass fields."""
    found: list[cst.CSTNode] = []
    for name in child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, tuple | list):
            found.extend(v for v in value if isinstance(v, cst.CSTNode))
    return found


def find_all(node: cst.CSTNode, *types: type[cst.CSTNode]) -> list[Any]:
    """Every node of ``types`` in ``node`` (itself included), in source order.

    Reads the node dataclasses' fields directly: LibCST's own ``visit`` (and so
    ``matchers.findall``) rebuilds every node it passes, which dominates a rule's run time.
    Rules ask about the same method bodies many times (once per parameter, per rule), so inside
    a :func:`~tsfix.codemods.facts.scope.file_scope` each subtree is indexed once by node
    type."""
    index = _index(node)
    kinds = [kind for kind in index.by_type if issubclass(kind, types)]
    if len(kinds) == 1:
        return [index.nodes[i] for i in index.by_type[kinds[0]]]
    return [index.nodes[i] for i in sorted(i for kind in kinds for i in index.by_type[kind])]


@dataclass
class _Index:
    root: cst.CSTNode
    nodes: list[cst.CSTNode]                    # every node under root, in source order
    by_type: dict[type, list[int]]              # node type -> positions in ``nodes``
    ids: frozenset[int] | None = None


def _index(node: cst.CSTNode) -> _Index:
    scope = current_scope()
    indexes: dict[int, _Index] = scope.indexes if scope is not None else {}
    entry = indexes.get(id(node))
    if entry is not None and entry.root is node:
        return entry
    nodes = _preorder(node, indexes)
    by_type: dict[type, list[int]] = {}
    for i, found in enumerate(nodes):
        by_type.setdefault(type(found), []).append(i)
    entry = indexes[id(node)] = _Index(node, nodes, by_type)
    return entry


def _preorder(node: cst.CSTNode, indexes: dict[int, _Index]) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []
    stack: list[Any] = [node]
    while stack:
        current = stack.pop()
        if current is not node:
            indexed = indexes.get(id(current))
            if indexed is not None and indexed.root is current:
                found.extend(indexed.nodes)
                continue
        found.append(current)
        children = []
        for name in child_fields(type(current)):
            value = getattr(current, name)
            if isinstance(value, cst.CSTNode):
                children.append(value)
            elif isinstance(value, tuple | list):
                children.extend(v for v in value if isinstance(v, cst.CSTNode))
        stack.extend(reversed(children))
    return found


def contains(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether ``node`` is ``root`` or inside it (by identity)."""
    index = _index(root)
    if index.ids is None:
        index.ids = frozenset(map(id, index.nodes))
    return id(node) in index.ids


def may_define_module(text: str) -> bool:
    """Cheap pre-parse filter: could this file define an nn.Module-like class at all?"""
    return bool(_CLASS_WITH_BASES.search(text)) and ("Module" in text or "nn." in text or
                                                      "def forward" in text)


def import_map(module: cst.Module) -> dict[str, str]:
    """Local name -> dotted name it was imported as (``nn`` -> ``torch.nn``)."""
    names: dict[str, str] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = get_full_name_for_node(alias.name) or ""
                    if alias.asname is not None:
                        local = get_full_name_for_node(alias.asname.name) or full
                        names[local] = full
                    else:
                        names[full.split(".")[0]] = full.split(".")[0]
            elif isinstance(small, cst.ImportFrom) and small.relative == ():
                if small.module is None or isinstance(small.names, cst.ImportStar):
                    continue
                origin = get_full_name_for_node(small.module) or ""
                for alias in small.names:
                    imported = get_full_name_for_node(alias.name) or ""
                    local = imported
                    if alias.asname is not None:
                        local = get_full_name_for_node(alias.asname.name) or imported
                    names[local] = f"{origin}.{imported}"
    return names


def qualified_name(expr: cst.BaseExpression, imports: dict[str, str]) -> str | None:
    """Dotted name of ``expr`` with its first component resolved through the imports."""
    dotted = get_full_name_for_node(expr)
    if dotted is None:
        return None
    head, _, rest = dotted.partition(".")
    resolved = imports.get(head, head)
    return f"{resolved}.{rest}" if rest else resolved


def methods_of(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    found: dict[str, cst.FunctionDef] = {}
    if isinstance(cls.body, cst.IndentedBlock):
        for stmt in cls.body.body:
            if isinstance(stmt, cst.FunctionDef):
                found[stmt.name.value] = stmt
    return found


def module_class_names(module: cst.Module, imports: dict[str, str]) -> set[str]:
    """Names of the top-level classes that are nn.Module-like.

    A class counts when a base resolves into ``torch.nn`` (``nn.Module``, ``nn.Conv2d``, ...),
    when a base is another such class in the file, or when it defines ``forward`` and has a base
    we cannot see (``class Block(BaseLayer)`` imported from elsewhere).
    """
    classes = [s for s in module.body if isinstance(s, cst.ClassDef)]
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name.value in found:
                continue
            for base in cls.bases:
                if base.keyword is not None:
                    continue
                qual = qualified_name(base.value, imports) or ""
                local = get_full_name_for_node(base.value) or ""
                if (qual.startswith("torch.nn.") or local in found
                        or (local not in ("object", "") and "forward" in methods_of(cls))):
                    found.add(cls.name.value)
                    changed = True
                    break
    return found


def self_name(func: cst.FunctionDef) -> str | None:
    """The name of a method's instance parameter (``self`` by convention), if any."""
    decorators = {get_full_name_for_node(d.decorator) for d in func.decorators}
    if decorators & {"staticmethod", "classmethod"}:
        return None
    params = func.params.posonly_params or func.params.params
    return params[0].name.value if params else None


def self_attr(expr: cst.CSTNode, self_var: str) -> str | None:
    """``self.x`` -> ``"x"``; anything else -> None."""
    if (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
            and expr.value.value == self_var):
        return expr.attr.value
    return None


@dataclass
class AttrAssignment:
    attr: str
    value: cst.BaseExpression | None  # None for augmented assignments and unpacking
    statement: cst.CSTNode
    method: str


def _targets(node: cst.CSTNode) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression | None]]:
    if isinstance(node, cst.Assign):
        for target in node.targets:
            yield from _pair(target.target, node.value)
    elif isinstance(node, cst.AnnAssign) and node.value is not None:
        yield from _pair(node.target, node.value)
    elif isinstance(node, cst.AugAssign):
        yield node.target, None


def _pair(target: cst.BaseExpression,
          value: cst.BaseExpression | None) -> Iterator[tuple[cst.BaseExpression,
                                                              cst.BaseExpression | None]]:
    if isinstance(target, cst.Tuple | cst.List):
        values: list[cst.BaseExpression | None]
        if isinstance(value, cst.Tuple | cst.List) and len(value.elements) == len(target.elements):
            values = [e.value for e in value.elements]
        else:
            values = [None] * len(target.elements)
        for element, element_value in zip(target.elements, values, strict=True):
            yield from _pair(element.value, element_value)
    else:
        yield target, value


def _assignments_in(func: cst.FunctionDef, self_var: str, method: str) -> list[AttrAssignment]:
    found: list[AttrAssignment] = []
    # Assignments are small statements of a line; only a call of setattr can sit deeper. A
    # method that never names setattr needs no walk of each line.
    names_setattr = any(name.value == "setattr" for name in find_all(func.body, cst.Name))
    for line in find_all(func.body, cst.SimpleStatementLine):
        nodes = (find_all(line, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Call)
                 if names_setattr else
                 [small for small in line.body
                  if isinstance(small, cst.Assign | cst.AnnAssign | cst.AugAssign)])
        for node in nodes:
            if isinstance(node, cst.Call):
                # setattr(self, "x", v) assigns an attribute too.
                if (get_full_name_for_node(node.func) == "setattr" and len(node.args) >= 2
                        and m.matches(node.args[0].value, m.Name(self_var))
                        and isinstance(node.args[1].value, cst.SimpleString)):
                    named = node.args[1].value.evaluated_value
                    if isinstance(named, str):
                        found.append(AttrAssignment(named, None, line, method))
                continue
            for target, value in _targets(node):
                attr = self_attr(target, self_var)
                if attr is not None:
                    found.append(AttrAssignment(attr, value, line, method))
                    continue
                root = (_root_self_attr(target, self_var)
                        if isinstance(target, cst.Attribute | cst.Subscript) else None)
                if root is not None:
                    # self.cfg.x = ... / self.cfg["x"] = ...: a write into what self.cfg holds.
                    found.append(AttrAssignment(root + ".*", None, line, method))
    return found


def _root_self_attr(expr: cst.BaseExpression, self_var: str) -> str | None:
    while isinstance(expr, cst.Attribute | cst.Subscript):
        attr = self_attr(expr, self_var)
        if attr is not None:
            return attr
        expr = expr.value
    return None


def attribute_assignments(cls: cst.ClassDef) -> list[AttrAssignment]:
    """Every assignment to ``self.<attr>`` in every method, in source order."""
    found: list[AttrAssignment] = []
    for name, func in methods_of(cls).items():
        self_var = self_name(func)
        if self_var is None:
            continue
        found.extend(_assignments_in(func, self_var, name))
    return found


def registered_names(init: cst.FunctionDef) -> set[str]:
    """Names given to ``self.register_buffer/register_parameter/add_module`` in ``__init__``."""
    self_var = self_name(init) or "self"
    names: set[str] = set()
    for call in find_all(init.body, cst.Call):
        if self_attr(call.func, self_var) is None:
            continue
        if call.func.attr.value in ("register_buffer", "register_parameter", "add_module",
                                    "register_module") and call.args:
            first = call.args[0].value
            if isinstance(first, cst.SimpleString) and isinstance(first.evaluated_value, str):
                names.add(first.evaluated_value)
    return names


def literal_type(expr: cst.BaseExpression | None) -> str | None:
    """bool/int/float/str for a literal (``-1`` and ``"a" "b"`` included), else None."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return "bool"
    if isinstance(expr, cst.Integer):
        return "int"
    if isinstance(expr, cst.Float):
        return "float"
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus | cst.Plus):
        return literal_type(expr.expression)
    if isinstance(expr, cst.SimpleString | cst.ConcatenatedString):
        return "str" if isinstance(expr.evaluated_value, str) else None
    return None


def annotation_type(annotation: cst.Annotation | None) -> str | None:
    """A scalar type name from an annotation; ``"optional"`` for ``Optional[...]``/``X | None``."""
    if annotation is None:
        return None
    node = annotation.annotation
    if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
        text = node.evaluated_value.strip()
        return text if text in SCALAR_TYPES else ("optional" if "Optional" in text
                                                 or "None" in text else None)
    name = get_full_name_for_node(node)
    if name in SCALAR_TYPES:
        return name
    if isinstance(node, cst.Subscript) and (get_full_name_for_node(node.value) or "").endswith(
            "Optional"):
        return "optional"
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        return "optional"
    return None


def unify_types(types: list[str]) -> str | None:
    """One type for several assigned values: int and float unify to float; others must agree."""
    distinct = set(types)
    if len(distinct) == 1:
        return types[0]
    if distinct == {"int", "float"}:
        return "float"
    return None


def parameters_of(func: cst.FunctionDef) -> dict[str, cst.Param]:
    p = func.params
    found = {param.name.value: param for param in (*p.posonly_params, *p.params,
                                                   *p.kwonly_params)}
    for star in (p.star_arg, p.star_kwarg):
        if isinstance(star, cst.Param):
            found[star.name.value] = star
    return found


# ---- names a node binds ------------------------------------------------------------------------

def target_names(target: cst.BaseExpression) -> list[cst.Name]:
    """The plain names an assignment target binds, in source order: ``a``, ``a, (b, *c)``; not
    ``self.x`` or ``x[i]`` (those read ``self`` and ``x``)."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, cst.Tuple | cst.List):
        return [name for element in target.elements for name in target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return []


def bound_names(node: cst.CSTNode) -> set[str]:
    """The plain names one assignment (``=``, ``+=``, annotated), loop header or walrus binds;
    nothing for any other node."""
    targets: list[cst.BaseExpression]
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, cst.AugAssign | cst.AnnAssign | cst.For | cst.NamedExpr):
        targets = [node.target]
    else:
        return set()
    return {name.value for target in targets for name in target_names(target)}


def names_bound_in(func: cst.FunctionDef) -> set[str]:
    """Every name ``func``'s code binds (its parameters; assignment, loop, comprehension,
    ``with``/``except`` targets; imports; nested ``def`` and ``class``), so a read or call of
    one is not of a module-level name or a builtin. Bindings inside nested functions and
    comprehensions count too: a name they bind is never taken for the global."""
    names = set(parameters_of(func))
    for node in find_all(func.body, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.CompFor, cst.NamedExpr, cst.AsName, cst.ImportAlias,
                         cst.FunctionDef, cst.ClassDef):
        if isinstance(node, cst.FunctionDef | cst.ClassDef):
            names.add(node.name.value)
        elif isinstance(node, cst.ImportAlias):
            if node.asname is None:     # ``import a.b`` binds ``a``; an ``as`` name is an AsName
                names.add((get_full_name_for_node(node.name) or "").split(".")[0])
        elif isinstance(node, cst.AsName):
            names.update(name.value for name in target_names(node.name))
        else:
            names.update(name.value for name in target_names(node.target))
    return names


def declared_field_types(module: cst.Module) -> dict[str, dict[str, str]]:
    """For each top-level class, its class-level annotated scalar fields (dataclass style)."""
    found: dict[str, dict[str, str]] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.ClassDef) or not isinstance(stmt.body, cst.IndentedBlock):
            continue
        fields: dict[str, str] = {}
        for line in stmt.body.body:
            if isinstance(line, cst.SimpleStatementLine):
                for small in line.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        kind = annotation_type(small.annotation)
                        if kind in SCALAR_TYPES:
                            fields[small.target.value] = kind
        if fields:
            found[stmt.name.value] = fields
    return found


def names_used(node: cst.CSTNode) -> set[str]:
    """Identifiers ``node`` binds or reads (parameters, locals, globals), not ``.attr`` names."""
    attribute_names = {id(a.attr) for a in find_all(node, cst.Attribute)}
    return {n.value for n in find_all(node, cst.Name) if id(n) not in attribute_names}


def docstring_count(body: cst.BaseSuite) -> int:
    """1 when the block starts with a docstring, so inserted code goes after it."""
    if isinstance(body, cst.IndentedBlock) and body.body:
        first = body.body[0]
        if (isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1
                and isinstance(first.body[0], cst.Expr)
                and isinstance(first.body[0].value, cst.SimpleString | cst.ConcatenatedString)):
            return 1
    return 0


# ---- names and decorators ---------------------------------------------------------------------

_EMPTY_MODULE = cst.Module([])


def code_of(node: cst.CSTNode) -> str:
    """The source of one node, as LibCST writes it."""
    return _EMPTY_MODULE.code_for_node(node)


def short_source(node: cst.CSTNode, limit: int = 60) -> str:
    """The node's source on one line for a message, cut to ``limit`` characters."""
    text = " ".join(code_of(node).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def fresh_name(*candidates: str, taken: Collection[str], numbered: str | None = None) -> str:
    """The first candidate that is not empty, a keyword or ``taken``; else ``numbered`` (the
    last candidate by default) followed by 2, 3, ..."""
    for candidate in candidates:
        if candidate and candidate not in taken and not keyword.iskeyword(candidate):
            return candidate
    base = candidates[-1] if numbered is None else numbered
    n = 2
    while f"{base}{n}" in taken:
        n += 1
    return f"{base}{n}"


def decorator_names(func: cst.FunctionDef) -> list[str]:
    """Dotted names of ``func``'s decorators (``torch.jit.ignore`` for ``@torch.jit.ignore()``)."""
    names = []
    for decorator in func.decorators:
        target = decorator.decorator
        if isinstance(target, cst.Call):
            target = target.func
        names.append(get_full_name_for_node(target) or "")
    return names


def torch_alias(imports: Mapping[str, str]) -> str | None:
    """The local name bound to the torch module (``torch``, ``th``), if any."""
    for local, full in imports.items():
        if full == "torch" and "." not in local:
            return local
    return None


def top_level_names(module: cst.Module) -> set[str]:
    """Names bound at module level: imports, assignments, functions and classes."""
    names = set(import_map(module))
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            names.add(statement.name.value)
        for target in find_all(statement, cst.AssignTarget) if isinstance(
                statement, cst.SimpleStatementLine) else []:
            names.update(n.value for n in find_all(target.target, cst.Name))
    return names


def parent_map(root: cst.CSTNode) -> Mapping[int, cst.CSTNode]:
    """Each node under ``root`` (by ``id``) -> its parent, whitespace and punctuation left out
    (as :func:`children`). Inside a file scope a subtree's map is built once: several rules ask
    for the same method's, and LibCST's own ``node.children`` rebuilds what it visits."""
    scope = current_scope()
    memo: dict[int, Any] = scope.parents if scope is not None else {}
    entry = memo.get(id(root))
    if entry is not None and entry[0] is root:
        return entry[1]  # type: ignore[no-any-return]
    found: dict[int, cst.CSTNode] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        for child in children(node):
            found[id(child)] = node
            stack.append(child)
    memo[id(root)] = (root, found)
    return found


class ReplaceById(cst.CSTTransformer):
    """Replaces the nodes whose ``id`` (in the tree visited) is a key of ``replacements``."""

    def __init__(self, replacements: Mapping[int, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode  # type: ignore[override]
                 ) -> cst.CSTNode:
        return self.replacements.get(id(original), updated)
