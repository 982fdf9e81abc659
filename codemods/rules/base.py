"""The contract every tsfix rule follows.

A rule is a LibCST codemod (``Codemod``) that rewrites top-level classes. Its module holds
everything about it, and the registry, ``tsfix rules``, ``tsfix check`` and ``tsfix explain``
read it from there:

* ``name``, ``summary`` and ``order`` (its place in ``--rule all``) as literal class
  attributes, and a docstring in ruff's sections (What it does / Why it breaks export /
  Example / Fix safety) for the docs;
* ``CODES``: the ``tsfix check`` codes of what it finds (``TSF2xx``);
* ``VALID`` / ``INVALID`` examples in Fixit's style, run by the test suite for every rule;
* what it finds, each finding either fixed or refused: every site it rewrites is reported with
  :meth:`Rule.fixed` (a :class:`Fix`), every site it is about but leaves alone with
  :meth:`Rule.skip` and the reason (a :class:`Skip`; with a ``code`` when the site blocks
  export, so ``tsfix check`` shows the reason instead of promising a fix). ``tsfix check`` runs
  the same rules on the same code, so it never names a rule for a site that rule refuses;
* per-class bookkeeping: each rewritten class is recorded as a :class:`ClassChange` (what
  validation re-scripts and compares), so the engine can report it and re-run the rule
  without a rejected class.

Rules read what they need about a file from the shared facts (:attr:`Rule.facts`,
:meth:`Rule.class_facts`): the compiled methods, ``__init__`` attributes and parameter types
are computed once per file for every rule and the linter.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol, TypeAlias

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.codemod import Codemod, CodemodContext, SkipFile
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider
from tsfix.codemods.facts.classes import ClassFacts, is_ignored
from tsfix.codemods.facts.module import ModuleFacts, module_facts
from tsfix.codemods.facts.prefilter import AstFile, parse_once
from tsfix.codemods.facts.scope import current_scope
from tsfix.codemods.facts.syntax import contains
from tsfix.codemods.rules.imports import add_typing_names

# Types seen in the eager example runs: class -> method -> parameter (or "return") -> a
# TorchScript type string ("int", "Optional[float]", "List[int]", "Tuple[int, int]", "Tensor").
# Only parameters whose observed values agree on one type are present. ``"local <name>"`` keys
# hold the type of a local variable's value when the method returned.
Observations: TypeAlias = Mapping[str, Mapping[str, Mapping[str, str]]]


@dataclass(frozen=True)
class Example:
    """An embedded example: ``before`` is rewritten to ``after`` (``after=None``: unchanged)."""

    before: str
    after: str | None = None


@dataclass
class ClassChange:
    """One class a rule rewrote."""

    rule: str
    class_name: str
    lines: tuple[int, int]
    summary: str
    # forward() parameter -> plain attribute it defaults to. Validation calls one scripted
    # artifact with every configuration's attribute values through these parameters.
    lifted: dict[str, str] = field(default_factory=dict)
    # What a reviewer must know beyond the summary: unsafe fixes applied, eager-mode caveats.
    notes: list[str] = field(default_factory=list)
    # The rewrite calls a ``@torch.jit.ignore`` method: the scripted artifact runs from Python
    # but cannot be saved, so validation expects ``torch.jit.save`` to fail.
    python_only: bool = False
    # Cannot change what the class computes eagerly (annotations, __constants__, ...): set by
    # the pipeline from a comparison of the code (pipeline/safety.py), never by the rule.
    safe: bool = False


@dataclass
class Skip:
    """A candidate a rule declined, and why (shown with ``-v``, in the report, and, when it
    has a ``code``, by ``tsfix check`` as a blocker the rule does not fix)."""

    rule: str
    class_name: str
    line: int
    reason: str
    code: str | None = None         # the check code of the blocker left in place, if any
    column: int = 0                 # 1-based; 0 when unknown
    message: str = ""               # what the blocker is (check's text); reason says why


@dataclass(frozen=True)
class Fix:
    """A site a rule rewrites: what ``tsfix check`` reports as fixed by ``tsfix apply --rule``."""

    rule: str
    code: str
    class_name: str
    line: int
    column: int                     # 1-based
    message: str


Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Code:
    """One kind of ``tsfix check`` finding: its stable code, a short name, what to tell the user.
    Rules declare the codes of what they find (``Rule.CODES``); the linter keeps the codes no
    rule handles."""

    code: str
    name: str
    summary: str
    help: str
    level: Level = "error"          # warning: scripts, but the export loses behaviour


class Rule(Codemod):
    """Base class: subclasses implement :meth:`rewrite_class` (and usually :meth:`prepare`).

    Rules work on top-level classes, so the module is not walked node by node and no metadata
    wrapper copies it; positions (for report lines) are computed only when a rule asks.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    # Place in ``--rule all`` (ascending); each rule module says why it runs where it does.
    order: ClassVar[int]
    CODES: ClassVar[tuple[Code, ...]] = ()
    # The form this rule takes under another ``--target`` (lift-branch under onnx).
    target_forms: ClassVar[Mapping[str, type[Rule]]] = {}
    # The ``--target`` values this rule serves (``--rule all`` under another target leaves it
    # out; naming it there is a usage error that says ``off_target``). Literals: read without
    # importing the rule (rules/names.py).
    targets: ClassVar[tuple[str, ...]] = ("torchscript", "onnx", "export")
    off_target: ClassVar[str] = ""
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Example]] = ()
    # True: the engine records argument types in eager example runs of the original file
    # before rewriting it, and passes them as ``observed``.
    needs_observations: ClassVar[bool] = False

    def __init__(self, context: CodemodContext, skip_classes: Collection[str] = (), *,
                 unsafe_fixes: bool = False, observed: Observations | None = None,
                 compiled_functions: Collection[str] = ()) -> None:
        super().__init__(context)
        # Classes whose rewrite validation rejected: the engine re-runs the rule without them.
        self.skip_classes = frozenset(skip_classes)
        # Module-level functions of this file that compiled code of ANOTHER file calls (the
        # fix loop found a model stopping in one): rules that rewrite functions treat them as
        # compiled, as they do the functions this file's own compiled methods call.
        self.compiled_functions = frozenset(compiled_functions)
        # Fixes that change what callers may pass are applied only when the user asks.
        self.unsafe_fixes = unsafe_fixes
        self.observed: Observations = observed or {}
        self.changes: list[ClassChange] = []
        self.skips: list[Skip] = []
        self.fixes: list[Fix] = []
        self.typing_names: set[str] = set()
        self._positions: Mapping[cst.CSTNode, CodeRange] | None = None
        self.source_module = cst.Module([])
        self.source_text: str | None = None     # set by the engine; saves a codegen
        # The ``ast`` view of the module this rule is given (set by the engine when it has
        # one): a rule may analyse only the classes its prefilter names.
        self.ast_file: AstFile | None = None
        self._current_class: cst.ClassDef | None = None
        self._class_index = 0
        self._class_layouts: list[_ClassLayout] = []
        # The classes as parsed from the source text (set by the engine): a class that is
        # still one of them can be located by the text's own line numbers.
        self.original_classes: Sequence[cst.ClassDef] = ()
        self._line_shift = 0

    def transform_module(self, tree: cst.Module) -> cst.Module:
        # Codemod.transform_module deep-copies the tree into a MetadataWrapper on every call;
        # rules resolve positions lazily instead (line_of).
        try:
            return self.transform_module_impl(tree)
        except SkipFile:
            return tree

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        self.source_module = tree
        self._class_layouts = _class_layouts(self.source_text or tree.code)
        self.prepare(tree)
        body: list[cst.BaseStatement] = []
        for statement in tree.body:
            if (isinstance(statement, cst.ClassDef)
                    and statement.name.value not in self.skip_classes):
                self._current_class, self._positions = statement, None
                statement = self._rewrite_isolated(statement)
            if isinstance(statement, cst.ClassDef):
                self._class_index += 1
            body.append(statement)
        if not self.changes:
            return tree
        return add_typing_names(tree.with_changes(body=body), self.typing_names)

    def _rewrite_isolated(self, cls: cst.ClassDef) -> cst.ClassDef:
        """:meth:`_rewrite_if_safe`, where a failure of this rule on this class (a bug: a
        construct it builds wrongly) costs only this rule's rewrite of this class: the class is
        left as it was, with a refusal naming the rule, the class, its line and the error, and
        the rule goes on with the next class and the other rules with this one."""
        marks = (len(self.changes), len(self.fixes), len(self.skips), set(self.typing_names))
        try:
            return self._rewrite_if_safe(cls)
        except SkipFile:
            raise
        except Exception as exc:        # reported as the rule's refusal
            del self.changes[marks[0]:]
            del self.fixes[marks[1]:]
            del self.skips[marks[2]:]
            self.typing_names = marks[3]
            message = " ".join(str(exc).split())
            self.skip(cls.name.value, cls,
                      f"internal error in rule {self.name} on class {cls.name.value} (line "
                      f"{self.line_of(cls)}): {type(exc).__name__}: {message[:300]}; the class "
                      "is left as it was for this rule (please report it with the file)")
            return cls

    def _rewrite_if_safe(self, cls: cst.ClassDef) -> cst.ClassDef:
        """``rewrite_class``, undone for a class that defines a compiled method more than once
        (``@torch.jit._overload_method`` declarations before the implementation): a rewrite
        of the signatures or bodies breaks the declarations, whose body must stay ``pass``,
        and the class fails on import. The rule's refusal says why."""
        redefined = sorted(set(self.class_facts(cls).compiled)
                           & self.class_facts(cls).redefined)
        if not redefined:
            return self.rewrite_class(cls)
        changes, fixes, typing = len(self.changes), len(self.fixes), set(self.typing_names)
        rewritten = self.rewrite_class(cls)
        if rewritten is cls and len(self.changes) == changes:
            return cls
        del self.changes[changes:]
        del self.fixes[fixes:]
        self.typing_names = typing
        self.skip(cls.name.value, cls,
                  f"{', '.join(f'{name}()' for name in redefined)} is defined more than once "
                  "in the class (overload declarations, @torch.jit._overload_method): "
                  "rewriting one definition would break the others; left alone")
        return cls

    def prepare(self, module: cst.Module) -> None:
        """Per-file analysis shared by every class (imports, module classes, ...)."""

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        """Return ``cls`` rewritten, recording a ClassChange, or ``cls`` itself."""
        return cls

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """Whether the file may hold anything this rule looks at, from CPython's ``ast`` view
        (:mod:`tsfix.codemods.facts.prefilter`). It must over-approximate: answering False
        promises that the full analysis finds nothing (no rewrite and no refusal). When no
        selected rule may apply, LibCST never parses the file."""
        return True

    @property
    def facts(self) -> ModuleFacts:
        """The shared facts of the module this rule is rewriting."""
        return module_facts(self.source_module)

    def class_facts(self, cls: cst.ClassDef) -> ClassFacts:
        return self.facts.of(cls)

    def fixed(self, node: cst.CSTNode, code: str, message: str) -> None:
        """Report a site this rule rewrites (``tsfix check``: fixable by this rule)."""
        assert self._current_class is not None
        position = self._position(node).start
        self.fixes.append(Fix(self.name, code, self._current_class.name.value, position.line,
                              position.column + 1, message))

    def need_typing(self, *names: str) -> None:
        self.typing_names.update(names)

    def line_of(self, node: cst.CSTNode) -> int:
        return self._position(node).start.line

    def span_of(self, node: cst.CSTNode) -> tuple[int, int]:
        position = self._position(node)
        return (position.start.line, position.end.line)

    def _position(self, node: cst.CSTNode) -> CodeRange:
        """Position of a node inside the class being rewritten, in file coordinates.

        Resolving PositionProvider over the whole file costs a full codegen with position
        tracking; instead positions are resolved within the one method holding the node when
        the class is as parsed (the text's own ``ast`` places the method), else within the
        class, shifted by its line."""
        assert self._current_class is not None
        located = self._position_in_method(node)
        if located is not None:
            return located
        if self._positions is None:
            self._positions = _node_positions(self._current_class,
                                              self.source_module.default_indent)
            self._line_shift = (self._class_layouts[self._class_index].line
                                - self._positions[self._current_class.name].start.line)
        return _shifted(self._positions[node], self._line_shift, 0)

    def _position_in_method(self, node: cst.CSTNode) -> CodeRange | None:
        cls = self._current_class
        index = self._class_index
        if cls is None or not isinstance(cls.body, cst.IndentedBlock):
            return None
        if index < len(self.original_classes) and self.original_classes[index] is cls:
            layout, shift = self._class_layouts[index], 0
            if node is cls:
                return layout.span
        else:
            # Rewritten by an earlier rule: the text this rule was given places its methods,
            # and the class keeps its line in the file as the user has it (as the whole
            # class's positions, shifted by its line, place them).
            current = self._current_layout(cls, index)
            if current is None:
                return None
            layout, shift = current, self._class_layouts[index].line - current.line
            if node is cls:
                return None if layout.span is None else _shifted(layout.span, shift, 0)
        for statement in cls.body.body:
            if (isinstance(statement, cst.FunctionDef) and statement.name.value in layout.methods
                    and contains(statement, node)):
                positions = _node_positions(statement, self.source_module.default_indent)
                line, column = layout.methods[statement.name.value]
                here = positions[statement].start
                return _shifted(positions[node], line - here.line + shift, column - here.column)
        return None

    def _current_layout(self, cls: cst.ClassDef, index: int) -> _ClassLayout | None:
        """The layout of ``cls`` in the text of the module this rule was given (``ast_file``
        is that text), when ``cls`` is still that module's class."""
        file = self.ast_file
        if file is None or file.tree is None or index >= len(self._class_layouts):
            return None
        given = [s for s in self.source_module.body if isinstance(s, cst.ClassDef)]
        if index >= len(given) or given[index] is not cls:
            return None
        layouts = _class_layouts(file.text)
        return layouts[index] if index < len(layouts) else None

    def function_position(self, func: cst.FunctionDef, node: cst.CSTNode) -> tuple[int, int]:
        """(line, 1-based column) of ``node`` in a module-level function, in the lines of the
        text as the user has it (earlier rules may have added import lines above)."""
        positions = _node_positions(func, self.source_module.default_indent)
        here = positions[node].start
        name_line = positions[func.name].start.line
        written = _function_lines(self.source_text or self.source_module.code)
        shift = written.get(func.name.value, name_line) - name_line
        return here.line + shift, here.column + 1

    def function_span(self, func: cst.FunctionDef) -> tuple[int, int]:
        """The first and last line of a module-level function, as :meth:`function_position`
        places them."""
        line, _ = self.function_position(func, func)
        positions = _node_positions(func, self.source_module.default_indent)
        return line, line + positions[func].end.line - positions[func].start.line

    def named_functions(self, tree: cst.Module) -> Iterator[tuple[int, cst.FunctionDef]]:
        """The module-level functions of ``tree`` the repair loop names (``compiled_functions``:
        a model stopped in one, compiled from another file or called from a class's method),
        each with its index in the module's body; ``@torch.jit.ignore``/``unused`` ones left
        out."""
        for index, statement in enumerate(tree.body):
            if (isinstance(statement, cst.FunctionDef)
                    and statement.name.value in self.compiled_functions
                    and not is_ignored(statement)):
                yield index, statement

    def skip(self, class_name: str, node: cst.CSTNode, reason: str, *, code: str | None = None,
             message: str = "") -> None:
        """Report a candidate this rule leaves alone, and why. With ``code``, the site is an
        export blocker that stays: ``tsfix check`` shows ``message`` and this reason."""
        position = self._position(node).start
        self.skips.append(Skip(self.name, class_name, position.line, reason, code,
                               position.column + 1, message))


class Sites(Protocol):
    """Where the sites of one class or module-level function are reported, and their lines:
    a rule that rewrites both reports through this and does not need to know which."""

    def fixed(self, node: cst.CSTNode, code: str, message: str) -> None: ...

    def skipped(self, node: cst.CSTNode, reason: str, code: str, message: str) -> None: ...

    def line(self, node: cst.CSTNode) -> int: ...


@dataclass
class ClassSites:
    """The sites of the class a rule is rewriting (:meth:`Rule.fixed`, :meth:`Rule.skip`)."""

    rule: Rule
    class_name: str

    def fixed(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.rule.fixed(node, code, message)

    def skipped(self, node: cst.CSTNode, reason: str, code: str, message: str) -> None:
        self.rule.skip(self.class_name, node, reason, code=code, message=message)

    def line(self, node: cst.CSTNode) -> int:
        return self.rule.line_of(node)


@dataclass
class FunctionSites:
    """A module-level function's sites, reported under ``owner`` (``function_change_name``)
    and placed in the lines of the file as the user has it."""

    rule: Rule
    func: cst.FunctionDef
    owner: str

    def fixed(self, node: cst.CSTNode, code: str, message: str) -> None:
        line, column = self.rule.function_position(self.func, node)
        self.rule.fixes.append(Fix(self.rule.name, code, self.owner, line, column, message))

    def skipped(self, node: cst.CSTNode, reason: str, code: str, message: str) -> None:
        line, column = self.rule.function_position(self.func, node)
        self.rule.skips.append(Skip(self.rule.name, self.owner, line, reason, code, column,
                                    message))

    def line(self, node: cst.CSTNode) -> int:
        return self.rule.function_position(self.func, node)[0]


@functools.lru_cache(maxsize=4)
def _function_lines(text: str) -> dict[str, int]:
    """Module-level function name -> the line of its ``def`` in ``text``."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    return {s.name: s.lineno for s in tree.body
            if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)}


def _shifted(position: CodeRange, lines: int, columns: int) -> CodeRange:
    return CodeRange((position.start.line + lines, position.start.column + columns),
                     (position.end.line + lines, position.end.column + columns))


def _node_positions(statement: cst.ClassDef | cst.FunctionDef,
                    indent: str = "    ") -> Mapping[cst.CSTNode, CodeRange]:
    """Positions within ``statement`` alone, in a module indented by ``indent`` (its file's:
    a nested block's column depends on it). Rules that left a class alone hand the next rule
    the same nodes, so inside a file scope positions are resolved once per file, not per
    rule."""
    scope = current_scope()
    if scope is not None:
        entry = scope.positions.get(id(statement))
        if entry is not None and entry[0] is statement:
            return entry[1]  # type: ignore[no-any-return]
    positions = _Positions(statement, indent)
    if scope is not None:
        scope.positions[id(statement)] = (statement, positions)
    return positions


class _PositionState(CodegenState):
    """LibCST's ``PositionProvider`` codegen, with the same positions (the test compares
    them): positions are kept as tuples and made ``CodeRange`` objects only when asked for,
    and a token without a line break moves the column without a regular expression. A rule
    asks for the positions of a few nodes of a method; LibCST's provider, driven by
    ``MetadataWrapper``, builds three objects for each of its thousands of nodes."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent,
                         default_newline=module.default_newline)
        self.line = 1           # 1-based
        self.column = 0         # 0-based
        self.found: dict[cst.CSTNode, tuple[int, int, int, int]] = {}
        self._starts: list[tuple[int, int]] = []

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        for token in self.indent_tokens:
            self._advance(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self._advance(value)

    def _advance(self, value: str) -> None:
        if "\n" not in value and "\r" not in value:
            self.column += len(value)
            return
        segments = _NEWLINE.split(value)
        self.line += len(segments) - 1
        self.column = len(segments[-1])

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        # A syntactic position recorded inside the node's codegen wins (as in LibCST).
        start = self._starts.pop()
        if node not in self.found:
            self.found[node] = (*start, self.line, self.column)

    # LibCST types it as a generator's context manager; any context manager does.
    def record_syntactic_position(  # type: ignore[override]
            self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
            end_node: cst.CSTNode | None = None) -> _SyntacticPosition:
        return _SyntacticPosition(self, node, start_node, end_node)


# LibCST's codegen calls these hooks of its CodegenState by name: a LibCST that renamed one
# would leave the override here uncalled and the positions wrong, so say so at import.
_HOOKS = (_PositionState.add_indent_tokens, _PositionState.add_token,
          _PositionState.before_codegen, _PositionState.after_codegen,
          _PositionState.record_syntactic_position)
if not all(hasattr(CodegenState, hook.__name__) for hook in _HOOKS):
    raise ImportError("libcst's CodegenState lacks a hook tsfix's positions override")


class _SyntacticPosition:
    """What ``PositionProvidingCodegenState.record_syntactic_position`` records, as a plain
    context manager (LibCST's is a generator, entered for most nodes)."""

    __slots__ = ("end_node", "node", "start", "start_node", "state")

    def __init__(self, state: _PositionState, node: cst.CSTNode,
                 start_node: cst.CSTNode | None, end_node: cst.CSTNode | None) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node
        self.start = (state.line, state.column)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        found = self.state.found
        start = found[self.start_node][:2] if self.start_node is not None else self.start
        end = (found[self.end_node][2:] if self.end_node is not None
               else (self.state.line, self.state.column))
        found[self.node] = (*start, *end)


class _Positions(Mapping[cst.CSTNode, CodeRange]):
    """The position of every node of ``statement`` alone, as LibCST's ``PositionProvider``
    gives them for a module holding only it."""

    def __init__(self, statement: cst.ClassDef | cst.FunctionDef,
                 indent: str = "    ") -> None:
        module = cst.Module(body=[statement], default_indent=indent)
        state = _PositionState(module)
        module._codegen(state)
        self._found = state.found

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        line, column, end_line, end_column = self._found[node]
        return CodeRange((line, column), (end_line, end_column))

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._found)

    def __len__(self) -> int:
        return len(self._found)


_NEWLINE = re.compile(r"\r\n?|\n")


@dataclass(frozen=True)
class _ClassLayout:
    """Where a top-level class and its methods start in the original text."""

    line: int                                           # of the ``class`` keyword
    span: CodeRange | None = None                       # the whole class statement
    # method name -> (line, column) of its ``def``; names defined twice are left out
    methods: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def _class_layouts(text: str) -> list[_ClassLayout]:
    """The layout of each top-level class, in order (once per file scope)."""
    scope = current_scope()
    if scope is not None and text in scope.layouts:
        return scope.layouts[text]  # type: ignore[no-any-return]
    layouts = _read_class_layouts(text)
    if scope is not None:
        scope.layouts[text] = layouts
    return layouts


def _read_class_layouts(text: str) -> list[_ClassLayout]:
    tree = parse_once(text)
    if tree is None:
        # LibCST parsed it, ast did not (rare): fall back to LibCST's own positions.
        module = cst.parse_module(text)
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        return [_ClassLayout(positions[s.name].start.line)
                for s in module.body if isinstance(s, cst.ClassDef)]
    layouts = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        methods: dict[str, tuple[int, int]] = {}
        seen: set[str] = set()
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                if item.name in seen:
                    methods.pop(item.name, None)
                else:
                    methods[item.name] = (item.lineno, item.col_offset)
                seen.add(item.name)
        span = CodeRange((node.lineno, node.col_offset),
                         (node.end_lineno or node.lineno, node.end_col_offset or 0))
        layouts.append(_ClassLayout(node.lineno, span, methods))
    return layouts
