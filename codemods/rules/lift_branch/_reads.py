"""Reads of settings: what a test reads (``ReadKey``), the syntax of attribute and field
reads, and :class:`Reads`, every read in a class's compiled methods."""

from __future__ import annotations

import keyword
import re
from typing import TYPE_CHECKING, Any

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import children, find_all, self_attr, self_name

if TYPE_CHECKING:
    from tsfix.codemods.rules.lift_branch._setup import ClassSetup

# What a test reads: ("attr", name) for self.name, ("cfg", holder, field, ...) for
# self.holder.field or self.holder["field"], one entry per field of a chain down to the leaf
# (self.config.NETWORK.USE_X is ("cfg", "config", "NETWORK", "USE_X")).
ReadKey = tuple[str, ...]


def describe(key: ReadKey) -> str:
    return f"self.{key[1]}" if key[0] == "attr" else "self." + ".".join(key[1:])


def field_name(node: cst.CSTNode) -> str | None:
    """The field ``node`` reads from its value: ``x.name`` / ``x["name"]`` -> ``"name"``."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        index = node.slice[0].slice
        if (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)
                and isinstance(index.value.evaluated_value, str)):
            return index.value.evaluated_value
    return None


def dotted_read(expr: cst.BaseExpression) -> str | None:
    """``cfg.a.b`` / ``cfg["a"]`` -> ``"cfg.a.b"`` / ``"cfg.a"``; else None."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)
                and isinstance(index.value.evaluated_value, str)):
            base = dotted_read(expr.value)
            return f"{base}.{index.value.evaluated_value}" if base else None
        return None
    return get_full_name_for_node(expr) if isinstance(expr, cst.Name | cst.Attribute) else None


def test_expressions(body: cst.CSTNode) -> list[cst.BaseExpression]:
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


def identifier(text: str) -> str:
    """``text`` as a Python identifier (a dict key may hold any string)."""
    name = re.sub(r"\W", "_", text)
    return f"_{name}" if not name or name[0].isdigit() or keyword.iskeyword(name) else name


def access(read: cst.CSTNode, depth: int) -> str:
    """How ``read`` reaches its field from the holder, as written: ``.x``, ``["x"]``,
    ``.a["b"]`` (``depth`` fields)."""
    parts: list[str] = []
    node = read
    for _ in range(depth):
        assert isinstance(node, cst.Attribute | cst.Subscript)
        name = field_name(node)
        parts.append(f".{name}" if isinstance(node, cst.Attribute) else f"[{quoted(name or '')}]")
        node = node.value
    return "".join(reversed(parts))


def string_comparison(comparison: cst.Comparison) -> tuple[cst.BaseExpression, str] | None:
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


def methods_called(func: cst.FunctionDef) -> set[str]:
    self_var = self_name(func) or "self"
    return {callee for c in find_all(func.body, cst.Call)
            if (callee := self_attr(c.func, self_var)) is not None}


def quoted(text: str) -> str:
    """A string literal, double-quoted as black would write it."""
    return f'"{text}"' if text.isprintable() and not set(text) & {'"', "\\"} else repr(text)


def sources(value: cst.BaseExpression | None) -> set[str]:
    """The dotted names ``value`` reads (``cfg.a``, ``self.depth``)."""
    if value is None:
        return set()
    found = set()
    for node in find_all(value, cst.Name, cst.Attribute, cst.Subscript):
        if isinstance(node, cst.BaseExpression):
            dotted = dotted_read(node)
            if dotted:
                found.add(dotted)
    return found


def parents_of(root: cst.CSTNode) -> dict[int, cst.CSTNode]:
    """Each node under ``root`` (by ``id``) -> its parent."""
    parents: dict[int, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        for child in children(node):
            parents[id(child)] = node
            stack.append(child)
    return parents


class Reads:
    """The reads of attributes and config fields in one class's methods, memoized per node."""

    def __init__(self, setup: ClassSetup) -> None:
        self.setup = setup
        # Node ids stay valid while the class's original tree is alive (for this analysis).
        self._memo: dict[tuple[int, str], Any] = {}

    def read_key(self, node: cst.CSTNode, self_var: str) -> ReadKey | None:
        """``("attr", name)`` for ``self.name``; ``("cfg", holder, field, ...)`` for a chain of
        fields read down from a config holder (``self.cfg.a``, ``self.cfg["a"].b``)."""
        fields: list[str] = []
        current: cst.CSTNode = node
        while (name := field_name(current)) is not None:
            assert isinstance(current, cst.Attribute | cst.Subscript)
            fields.append(name)
            holder = self_attr(current.value, self_var)
            if holder in self.setup.config_holders:
                return ("cfg", holder, *reversed(fields))
            current = current.value
        attr = self_attr(node, self_var)
        if attr is not None and attr not in self.setup.config_holders:
            return ("attr", attr)
        return None

    def config_rooted(self, node: cst.CSTNode, key: ReadKey | None, self_var: str) -> bool:
        """A config holder (``self.cfg``) or a field read out of one."""
        return (key is not None and key[0] == "cfg") or self_attr(node, self_var) in \
            self.setup.config_holders

    def scan(self, node: cst.CSTNode, self_var: str) -> tuple[
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
                        if self.config_rooted(c.value, keys.get(id(c.value)), self_var)}
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
        accesses, keys, called, interior = self.scan(node, self_var)
        skipped = called | interior
        for candidate in accesses:
            key = keys[id(candidate)]
            if key is not None and id(candidate) not in skipped:
                found.append((key, candidate))
        return found

    def test_reads(self, method: str) -> list[tuple[ReadKey, cst.CSTNode]]:
        """The reads in the tests of ``method`` that TorchScript compiles, each node once."""
        func = self.setup.methods[method]
        self_var = self_name(func) or "self"
        never = self.setup.facts.never_compiled(method)
        seen: set[int] = set()
        found: list[tuple[ReadKey, cst.CSTNode]] = []
        for test in test_expressions(func.body):
            if id(test) in never:
                continue
            for key, node in self.all_reads(test, self_var):
                if id(node) not in seen:
                    seen.add(id(node))
                    found.append((key, node))
        return found

    def parents(self, func: cst.FunctionDef) -> dict[int, cst.CSTNode]:
        memo_key = (id(func), "parents")
        if memo_key not in self._memo:
            self._memo[memo_key] = parents_of(func.body)
        found: dict[int, cst.CSTNode] = self._memo[memo_key]
        return found
