"""A cheap first look at a file with CPython's ``ast``, before LibCST parses it.

LibCST's parse is most of what a rewrite costs, and most model files hold nothing a given rule
looks at. Each rule answers :meth:`Rule.may_apply <tsfix.codemods.rules.base.Rule.may_apply>`
from this view; when no selected rule may apply, the file is left as it is without a LibCST
parse. The answers must over-approximate: a rule that says no here must find nothing (no
rewrite, no refusal) in the full analysis. ``tests/test_prefilter.py`` checks that on the
fixtures.

The view mirrors :mod:`tsfix.codemods.facts.classes` loosely (module classes by their bases,
compiled methods by calls through ``self``) but errs on the side of "maybe": never-compiled
branches are included, and every class with a base and a ``forward`` counts as a module.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from functools import cached_property

from tsfix.codemods.facts.scope import current_scope

_NOT_COMPILED = ("jit.ignore", "jit.unused", "staticmethod", "classmethod", "property")


def dotted_name(node: ast.expr) -> str:
    """``torch.jit.ignore`` for ``torch.jit.ignore`` or ``torch.jit.ignore(...)``; "" for
    anything else than names, attributes and calls of them."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted_name(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    if isinstance(node, ast.Call):
        return dotted_name(node.func)
    return ""


def _paired(target: ast.expr, value: ast.expr | None) -> Iterator[tuple[ast.expr,
                                                                        ast.expr | None]]:
    """(target, the value it is given) of an assignment, through unpacking."""
    if isinstance(target, ast.Tuple | ast.List):
        values: list[ast.expr | None] = [None] * len(target.elts)
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
            values = list(value.elts)
        for element, element_value in zip(target.elts, values, strict=True):
            yield from _paired(element.value if isinstance(element, ast.Starred) else element,
                               element_value)
    else:
        yield target, value


def walk(root: ast.AST, kinds: type[ast.AST] | tuple[type[ast.AST], ...] = ast.AST
         ) -> list[ast.AST]:
    """``list(ast.walk(root))``, same order, at about half the cost (no generator per node);
    with ``kinds``, only the nodes of those kinds and what they hold (a walk that never enters
    the others, in the same order as the full walk lists them)."""
    found = [root]
    index = 0
    while index < len(found):
        node = found[index]
        index += 1
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                found.extend(item for item in value if isinstance(item, kinds))
            elif isinstance(value, kinds):
                found.append(value)
    return found


def parse_once(text: str) -> ast.Module | None:
    """``ast.parse(text)``, or None when CPython cannot parse it; inside a file scope each
    text is parsed once (the prefilter and the rules' class layouts read the same tree, which
    nobody changes)."""
    scope = current_scope()
    if scope is not None and text in scope.ast_trees:
        return scope.ast_trees[text]  # type: ignore[no-any-return]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree: ast.Module | None = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if scope is not None:
        scope.ast_trees[text] = tree
    return tree


class AstFile:
    """One file as ``ast`` sees it. ``tree`` is None when CPython cannot parse it (then every
    rule may apply, and LibCST decides)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree: ast.Module | None = parse_once(text)
        self._walks: dict[int, list[ast.AST]] = {}
        self._compiled_methods: dict[int, list[ast.FunctionDef]] = {}

    def nodes_of(self, node: ast.AST) -> list[ast.AST]:
        """``list(ast.walk(node))`` for a node of this file's tree, walked once: every rule's
        prefilter walks the same compiled methods. The list is shared; do not change it."""
        found = self._walks.get(id(node))
        if found is None:
            found = self._walks[id(node)] = walk(node)
        return found

    @cached_property
    def _lines(self) -> list[str]:
        # The line breaks CPython's tokenizer knows (str.splitlines also splits at \f and
        # others, which would shift every later line).
        return re.split(r"\r\n|\r|\n", self.text)

    def segment(self, node: ast.expr) -> str | None:
        """The source text of a one-line node (``ast.get_source_segment`` splits the whole
        text on every call); None for a node spanning lines."""
        if node.end_lineno != node.lineno or node.end_col_offset is None:
            return None
        line = self._lines[node.lineno - 1].encode()
        return line[node.col_offset:node.end_col_offset].decode(errors="replace")

    @cached_property
    def nodes(self) -> list[ast.AST]:
        """Every node of the file, in ``ast.walk``'s order: walked once, read by every rule that
        looks at the whole file."""
        return walk(self.tree) if self.tree is not None else []

    @cached_property
    def statements(self) -> list[ast.AST]:
        """The module, every statement of the file (and ``except``/``case`` clauses), in the
        order ``nodes`` lists them: a walk that skips expressions, which hold no statement."""
        if self.tree is None:
            return []
        return walk(self.tree, (ast.stmt, ast.excepthandler, ast.match_case))

    @cached_property
    def imports(self) -> dict[str, str]:
        """Local name -> dotted name it was imported as, from every import of the file."""
        found: dict[str, str] = {}
        for node in self.statements:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        return found

    @cached_property
    def attribute_values(self) -> dict[str, list[ast.expr | None]]:
        """Attribute name -> every value the file assigns to ``<anything>.<name>`` (None where
        the value is not known: an augmented or bare annotated assignment, an unpacking of
        something other than a display of the same length)."""
        found: dict[str, list[ast.expr | None]] = {}
        for node in self.statements:
            if isinstance(node, ast.Assign):
                pairs = [pair for target in node.targets for pair in _paired(target, node.value)]
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                pairs = [(node.target, node.value if isinstance(node, ast.AnnAssign) else None)]
            else:
                continue
            for target, value in pairs:
                if isinstance(target, ast.Attribute):
                    found.setdefault(target.attr, []).append(value)
        return found

    @cached_property
    def none_default_names(self) -> frozenset[str]:
        """Names of the parameters, of any function of the file, whose default is None."""
        found: set[str] = set()
        for node in self.nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                args = node.args
                positional = args.posonlyargs + args.args
                defaults = list(zip(positional[len(positional) - len(args.defaults):],
                                    args.defaults, strict=True))
                defaults += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults,
                                                    strict=True) if d is not None]
                found.update(a.arg for a, d in defaults
                             if isinstance(d, ast.Constant) and d.value is None)
        return frozenset(found)

    def resolved(self, node: ast.expr) -> str:
        """The dotted name of ``node`` with its head resolved through the imports."""
        head, _, rest = dotted_name(node).partition(".")
        full = self.imports.get(head, head)
        return f"{full}.{rest}" if rest else full

    @cached_property
    def module_classes(self) -> list[ast.ClassDef]:
        """Top-level classes that may be ``nn.Module``-like: a base from ``torch`` (through the
        imports, aliases included), a base that is such a class of this file, a base named
        like a module, or any base and a ``forward`` or ``@torch.jit.export`` method."""
        if self.tree is None:
            return []
        classes = [node for node in self.tree.body if isinstance(node, ast.ClassDef)]
        found: dict[str, ast.ClassDef] = {}
        changed = True
        while changed:
            changed = False
            for cls in classes:
                if cls.name in found or not cls.bases:
                    continue
                names = [self.resolved(base) for base in cls.bases]
                has_forward = any(isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                                  and (item.name == "forward" or any(
                                      dotted_name(d).endswith("jit.export")
                                      for d in item.decorator_list))
                                  for item in cls.body)
                if has_forward or any(name in found or "nn" in name.split(".")
                                      or name.split(".")[0] == "torch"
                                      or name.endswith("Module") for name in names):
                    found[cls.name] = cls
                    changed = True
        return list(found.values())

    def compiled_methods(self, cls: ast.ClassDef) -> list[ast.FunctionDef]:
        """``forward``, ``@torch.jit.export`` methods and what they call through ``self``."""
        found = self._compiled_methods.get(id(cls))
        if found is None:
            found = self._compiled_methods[id(cls)] = self._find_compiled_methods(cls)
        return found

    def _find_compiled_methods(self, cls: ast.ClassDef) -> list[ast.FunctionDef]:
        methods = {item.name: item for item in cls.body if isinstance(item, ast.FunctionDef)}
        order = [name for name, func in methods.items()
                 if (name == "forward" or any(dotted_name(d).endswith("jit.export")
                                             for d in func.decorator_list))]
        for name in order:
            args = methods[name].args
            first = (args.posonlyargs + args.args)[:1]
            self_var = first[0].arg if first else "self"
            for node in self.nodes_of(methods[name]):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == self_var
                        and node.func.attr in methods and node.func.attr not in order
                        and node.func.attr != "__init__"
                        and not any(dotted_name(d).endswith(_NOT_COMPILED)
                                    for d in methods[node.func.attr].decorator_list)):
                    order.append(node.func.attr)
        return [methods[name] for name in order
                if not any(dotted_name(d).endswith(_NOT_COMPILED)
                           for d in methods[name].decorator_list)]

    @cached_property
    def compiled(self) -> list[tuple[ast.ClassDef, ast.FunctionDef]]:
        return [(cls, func) for cls in self.module_classes for func in self.compiled_methods(cls)]

    def compiled_nodes(self) -> list[ast.AST]:
        """Every node of every compiled method (signatures included), walked once."""
        return self._compiled_nodes

    @cached_property
    def _compiled_nodes(self) -> list[ast.AST]:
        return [node for _, func in self.compiled for node in self.nodes_of(func)]

    @cached_property
    def compiled_node_types(self) -> frozenset[type]:
        return frozenset(type(node) for node in self.compiled_nodes())

    def init_of(self, cls: ast.ClassDef) -> ast.FunctionDef | None:
        return next((item for item in cls.body if isinstance(item, ast.FunctionDef)
                     and item.name == "__init__"), None)

    @staticmethod
    def self_var(func: ast.FunctionDef) -> str:
        """The name of a method's first parameter (``self``)."""
        first = (func.args.posonlyargs + func.args.args)[:1]
        return first[0].arg if first else "self"

    @staticmethod
    def reads_self(node: ast.AST, self_var: str) -> bool:
        """Whether ``node`` reads an attribute of ``self_var``."""
        return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                   and n.value.id == self_var for n in ast.walk(node))

    def tests(self, func: ast.FunctionDef) -> Iterator[ast.expr]:
        """Expressions a method evaluates for their truth: if/elif/while/ternary/assert
        tests, comprehension conditions, and/or operands, ``not`` operands."""
        for node in self.nodes_of(func):
            if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
                yield node.test
            elif isinstance(node, ast.comprehension):
                yield from node.ifs
            elif isinstance(node, ast.BoolOp):
                yield from node.values
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                yield node.operand

