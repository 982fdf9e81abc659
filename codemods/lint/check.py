"""``tsfix check``: find what TorchScript rejects in compiled methods, without rewriting.

Only code that ``torch.jit.script`` compiles is checked: ``forward`` and ``@torch.jit.export``
methods of ``nn.Module`` classes and the methods they call through ``self``, minus methods
marked ``@torch.jit.ignore`` / ``@torch.jit.unused``. Code that only runs when not scripting
(``if not torch.jit.is_scripting():``, the ``else`` of ``if torch.jit.is_scripting():``, and
what follows ``if torch.jit.is_scripting(): return ...``) is never compiled, so what fails there
only when compiled (numpy, ``flatten_parameters()``, ``sum`` over tensors...) is not reported.
Constructs the TorchScript front end rejects while reading the source (``try``, ``lambda``,
``global``, f-string format specs, nested ``def``, ``yield``, set literals, ``:=``) fail even
there, and are reported everywhere. ``torch.jit.is_tracing()`` branches ARE compiled (measured
on torch 2.13).

Codes are stable: ``TSF1xx`` constructs no rule rewrites, ``TSF2xx`` constructs a tsfix rule
fixes (the finding names it). Every code was measured on torch 2.13 with a minimal class
(``fixtures/check/blockers.py`` holds one class per code; ``tests/test_check.py`` scripts
them). Nothing here imports torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, PositionProvider
from tsfix.codemods.facts.numpy_usage import (
    function_numpy_bindings,
    module_numpy_bindings,
    numpy_uses,
)
from tsfix.codemods.facts.syntax import (
    attribute_assignments,
    decorator_names,
    find_all,
    import_map,
    is_ignored,
    methods_of,
    module_class_names,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import TENSOR, Typer, collect_locals, parts_of
from tsfix.codemods.pipeline.config import Config, find_pyproject, load_config
from tsfix.codemods.pipeline.sources import SourceError, discover, is_generated, read_source

# Exit codes, as ``tsfix apply`` (tsfix.codemods.pipeline.report).
EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_FAILED = 3

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Code:
    """One kind of finding: its stable code, a short name, what to tell the user."""

    code: str
    name: str
    summary: str
    help: str
    fix: str | None = None          # the tsfix rule that rewrites it
    level: Level = "error"          # warning: scripts, but the export loses behaviour


_CODE_LIST = (
    Code("TSF101", "try-except", "try/except in a compiled method",
         "TorchScript has no exception handling (\"try blocks aren't supported\"), even in "
         "code under `if not torch.jit.is_scripting():`. Move the try into a "
         "@torch.jit.ignore method or check the condition explicitly."),
    Code("TSF102", "lambda", "lambda in a compiled method",
         "TorchScript rejects lambdas (\"Lambda aren't supported\"). Use a method or a "
         "module-level function (scripted recursively) instead."),
    Code("TSF103", "global-statement", "global/nonlocal statement in a compiled method",
         "TorchScript rejects `global` and `nonlocal` (\"global variables aren't "
         "supported\"). Keep the state in a module attribute or buffer."),
    Code("TSF104", "fstring-format-spec", "f-string with a format spec or conversion",
         "TorchScript supports plain f-strings only: `{x:.2f}` and `{x!r}` fail "
         "(\"Don't support formatting in JoinedStr\"). Use `{x}`, or str.format()."),
    Code("TSF105", "module-level-constant", "module-level variable read in a compiled method",
         "TorchScript cannot read a module-level variable of type list, dict, tuple, int, "
         "float, str or bool (\"python value of type 'list' cannot be used as a value\"). "
         "Copy it into a module attribute in __init__, or write the literal in the method."),
    Code("TSF106", "nested-function", "function or class defined inside a compiled method",
         "TorchScript rejects nested definitions (\"function definitions aren't supported\"). "
         "Move the function to a method or to module level."),
    Code("TSF107", "yield", "yield in a compiled method",
         "TorchScript has no generators (\"Yield aren't supported\"). Build and return a list."),
    Code("TSF108", "set-literal", "set literal or set comprehension",
         "TorchScript has no set type (\"Set aren't supported\"). Use a list or a "
         "Dict[T, bool]."),
    Code("TSF109", "walrus", "assignment expression (:=)",
         "TorchScript rejects assignment expressions (\"NamedExpr aren't supported\"). "
         "Assign on a line of its own."),
    Code("TSF110", "keyword-unpacking", "**kwargs unpacking in a call",
         "TorchScript cannot unpack a dict into keyword arguments (\"keyword-arg expansion is "
         "not supported\"). Pass the arguments by name."),
    Code("TSF111", "getattr-non-literal", "getattr() with a computed name",
         "TorchScript resolves attributes at compile time: getattr's second argument must be a "
         "string literal. Iterate a ModuleDict, or index a list of attributes."),
    Code("TSF112", "break-in-module-loop", "break/continue in a loop over a module container",
         "Loops over a ModuleList/Sequential/ModuleDict are unrolled, so `break` and "
         "`continue` are rejected in them. Use a flag and skip the work instead."),
    Code("TSF113", "zip-module-range", "zip() of a module container with range()",
         "A loop over a module container needs a static length; zip with range() has none "
         "(\"Can not iterate over a module list ... statically determinable length\"). Use "
         "enumerate(self.layers)."),
    Code("TSF114", "slice-assignment", "assignment to a slice of a list",
         "TorchScript rejects `a[i:j] = ...` on lists (\"Sliced expression not yet supported "
         "for subscripted assignment\"). Build a new list."),
    Code("TSF115", "starred-unpacking", "starred unpacking in an assignment or a display",
         "TorchScript cannot infer the size of `a, *rest = ...`, `[*xs, y]` or `tuple(xs)` "
         "(\"cannot statically infer the expected size of a list\"). Index explicitly."),
    Code("TSF116", "none-attribute-test", "attribute that may be None tested or compared",
         "The attribute is None for some configurations, and TorchScript types it NoneType: "
         "`self.mode == 'a'` fails with the misleading \"aten::eq ... found type 'NoneType'\", "
         "`if self.mode:` with \"Could not cast value of type NoneType to bool\". Test "
         "`self.mode is not None` first, or store a non-None default (e.g. '')."),
    Code("TSF117", "builtin-none-test", "function attribute tested against None",
         "A torch function stored in an attribute (`self.act = torch.relu`) can be called, but "
         "not tested (\"builtin cannot be used as a value\"). Store nn.Identity() instead of "
         "None and call it unconditionally."),
)
CODES: dict[str, Code] = {code.code: code for code in _CODE_LIST}


@dataclass(frozen=True)
class Finding:
    path: str               # as given / relative to the working directory
    line: int
    column: int             # 1-based
    code: str
    message: str
    class_name: str = ""
    method: str = ""

    @property
    def fix(self) -> str | None:
        return CODES[self.code].fix

    def text(self) -> str:
        fix = f" (fix: tsfix apply --rule {self.fix})" if self.fix else ""
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}{fix}"


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)     # files that could not be checked
    files: int = 0

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_FAILED
        return EXIT_FINDINGS if self.findings else EXIT_CLEAN


class CheckSyntaxError(Exception):
    """A file that does not parse; the message is ``path:line:col: ...``."""


# ---- one file ----------------------------------------------------------------------------------

_CONTAINERS = ("ModuleList", "Sequential", "ModuleDict")
_CONFIG_NAMES = ("cfg", "config", "conf", "hparams", "hp", "opt", "opts", "args", "params")
_FUNCTION_MODULES = ("torch.", "torch.nn.functional.", "F.")
_NUMBERS = ("int", "float", "bool")


def check_source(text: str, display: str) -> list[Finding]:
    """Every finding in one file's source. Raises CheckSyntaxError if it does not parse."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise CheckSyntaxError(f"{display}:{exc.raw_line}:{exc.raw_column + 1}: cannot parse: "
                               f"{exc.message}") from exc
    imports = import_map(module)
    classes = module_class_names(module, imports)
    if not classes:
        return []
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    constants = _module_constants(module)
    numpy_names = module_numpy_bindings(module)
    lifted = _lifted_attributes(module, text)
    findings: list[Finding] = []
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and statement.name.value in classes:
            checker = _ClassChecker(statement, imports, constants, numpy_names)
            checker.lifted = lifted.get(statement.name.value, set())
            for node, code, message, method in checker.run():
                start = positions[node].start
                findings.append(Finding(display, start.line, start.column + 1, code, message,
                                        statement.name.value, method))
    return sorted(set(findings), key=lambda f: (f.line, f.column, f.code))


def _lifted_attributes(module: cst.Module, text: str) -> dict[str, set[str]]:
    """Class -> the attributes lift-branch would turn into forward() arguments: its own
    analysis decides what is a configuration attribute (not structural, not mutated...)."""
    from libcst.codemod import CodemodContext
    from tsfix.codemods.rules.lift_branch import LiftBranch

    rule = LiftBranch(CodemodContext())
    rule.source_text = text
    try:
        rule.transform_module(module)
    except Exception:       # the linter goes on without this one code
        return {}
    found: dict[str, set[str]] = {}
    for change in rule.changes:
        found.setdefault(change.class_name, set()).update(
            attr.split(".")[-1] for attr in change.lifted.values())
    return found


def _module_constants(module: cst.Module) -> dict[str, str]:
    """Module-level names bound to a literal value -> its kind (``list``, ``int``...)."""
    found: dict[str, str] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            targets: list[cst.BaseExpression] = []
            value: cst.BaseExpression | None = None
            if isinstance(small, cst.Assign):
                targets, value = [t.target for t in small.targets], small.value
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                targets, value = [small.target], small.value
            kind = _literal_kind(value) if value is not None else None
            for target in targets:
                if isinstance(target, cst.Name) and not target.value.startswith("__"):
                    if kind is None:
                        found.pop(target.value, None)
                    else:
                        found[target.value] = kind
    return found


def _literal_kind(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.List | cst.ListComp):
        return "list"
    if isinstance(node, cst.Dict | cst.DictComp):
        return "dict"
    if isinstance(node, cst.Tuple):
        return "tuple"
    if isinstance(node, cst.Set | cst.SetComp):
        return "set"
    if isinstance(node, cst.Integer):
        return "int"
    if isinstance(node, cst.Float):
        return "float"
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        return "str"
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return "bool"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _literal_kind(node.expression)
    return None


def _scripting_test(test: cst.BaseExpression, imports: dict[str, str]) -> bool | None:
    """True for ``torch.jit.is_scripting()``, False for its negation, else None."""
    negated = False
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        negated, test = not negated, test.expression
    if (isinstance(test, cst.Call) and not test.args
            and (qualified_name(test.func, imports) or "").endswith("jit.is_scripting")):
        return not negated
    return None


def _ends_flow(block: cst.BaseSuite) -> bool:
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        return isinstance(last.body[-1], cst.Return | cst.Raise)
    return isinstance(last, cst.SimpleStatementSuite) and isinstance(last.body[-1],
                                                                       cst.Return | cst.Raise)


Report = tuple[cst.CSTNode, str, str, str]


class _ClassChecker:
    def __init__(self, cls: cst.ClassDef, imports: dict[str, str], constants: dict[str, str],
                 numpy_names: dict[str, str]) -> None:
        self.cls = cls
        self.imports = imports
        self.constants = constants
        self.numpy_names = numpy_names
        self.methods = methods_of(cls)
        init = self.methods.get("__init__")
        self.containers: dict[str, str] = {}        # attr -> ModuleList/Sequential/ModuleDict
        self.maybe_none: set[str] = set()           # attrs that may hold None
        self.function_attrs: set[str] = set()       # attrs holding a torch function
        self.submodules: set[str] = set()
        self.config_objects: set[str] = set()
        self._read_init(init)
        self.reports: list[Report] = []
        self.method = ""
        # Name nodes that are not reads: ``.attr`` names, keyword names, covered numpy chains.
        self.not_reads: set[int] = set()
        # Attributes lift-branch turns into forward() arguments (its own analysis).
        self.lifted: set[str] = set()

    # -- what __init__ stores --

    def _read_init(self, init: cst.FunctionDef | None) -> None:
        if init is None:
            return
        defaults = {name: param.default for name, param in parameters_of(init).items()}
        assignments = attribute_assignments(self.cls)
        elsewhere = {a.attr for a in assignments if a.method != "__init__"}
        for assigned in assignments:
            value = assigned.value
            if assigned.method != "__init__" or value is None:
                continue
            attr = assigned.attr
            if isinstance(value, cst.Call):
                called = qualified_name(value.func, self.imports) or ""
                short = called.rpartition(".")[2]
                if short in _CONTAINERS and (called.startswith("torch.nn.") or "nn." in called
                                             or called == short):
                    self.containers[attr] = short
                if called.startswith("torch.nn.") or short[:1].isupper():
                    self.submodules.add(attr)
            elif isinstance(value, cst.Name) and value.value == "None":
                self.maybe_none.add(attr)
            elif isinstance(value, cst.Name) and value.value in defaults:
                default = defaults[value.value]
                if isinstance(default, cst.Name) and default.value == "None":
                    self.maybe_none.add(attr)
                if value.value.lower() in _CONFIG_NAMES:
                    self.config_objects.add(attr)
            # A dict of one value type scripts (Dict[str, float]); namespaces do not.
            if _config_like(attr) and not isinstance(value, cst.Integer | cst.Float | cst.Dict
                                                     | cst.SimpleString):
                self.config_objects.add(attr)
            if isinstance(value, cst.Attribute | cst.Name):
                name = qualified_name(value, self.imports) or ""
                if (name.startswith(_FUNCTION_MODULES) and name.rpartition(".")[2][:1].islower()
                        and name.count(".") >= 1):
                    self.function_attrs.add(attr)
        # Mutated elsewhere, or also given a module: not a plain configuration value.
        self.maybe_none -= elsewhere | self.submodules
        self.config_objects -= self.submodules

    # -- which methods are compiled --

    def compiled_methods(self) -> list[str]:
        entry = [name for name, func in self.methods.items()
                 if name == "forward" or any(d.endswith("jit.export")
                                             for d in decorator_names(func))]
        order: list[str] = []
        for name in entry:
            if name not in order and not is_ignored(self.methods[name]):
                order.append(name)
        for name in order:
            func = self.methods[name]
            self_var = self_name(func) or "self"
            for call in find_all(func.body, cst.Call):
                callee = self_attr(call.func, self_var)
                if (callee in self.methods and callee not in order and callee != "__init__"
                        and not is_ignored(self.methods[callee])):
                    order.append(callee)
        return order

    def run(self) -> list[Report]:
        for name in self.compiled_methods():
            func = self.methods[name]
            self.method = name
            self.self_var = self_name(func) or "self"
            self.bound = _bound_names(func)
            self.numpy_here = function_numpy_bindings(func, self.numpy_names)
            self.typer = self._typer(func)
            self._check_signature(func)
            self._block(func.body, compiled=True)
        return self.reports

    def _typer(self, func: cst.FunctionDef) -> Typer:
        from tsfix.codemods.facts.value_types import type_from_annotation

        env: dict[str, str | None] = {}
        for pname, param in parameters_of(func).items():
            if pname == self.self_var:
                continue
            annotated = (type_from_annotation(param.annotation.annotation)
                         if param.annotation is not None else None)
            env[pname] = annotated if param.annotation is not None else TENSOR
        typer = Typer(env, self.imports, self.self_var, layers=self.submodules)
        collect_locals(func.body, typer)
        return typer

    def report(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.reports.append((node, code, message, self.method))

    # -- signature --

    def _check_signature(self, func: cst.FunctionDef) -> None:
        params = func.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            name = param.name.value
            default = param.default
            if default is None or name == self.self_var:
                continue
            is_none = isinstance(default, cst.Name) and default.value == "None"
            if isinstance(default, cst.List | cst.Dict | cst.Set | cst.ListComp | cst.DictComp):
                self.report(param, "TSF209", f"mutable default for {name!r} in {self.method}()")
            elif param.annotation is None:
                if is_none:
                    self.report(param, "TSF207", f"parameter {name!r} of {self.method}() "
                                "defaults to None without an annotation (typed "
                                "Optional[Tensor])")
                elif _literal_kind(default) in ("int", "float", "bool", "str", "tuple"):
                    self.report(param, "TSF206", f"parameter {name!r} of {self.method}() has "
                                f"a {_literal_kind(default)} default but no annotation "
                                "(typed Tensor)")
            elif is_none and not _optional_annotation(param.annotation.annotation):
                self.report(param, "TSF208", f"parameter {name!r} of {self.method}() defaults "
                            "to None but its annotation is not Optional")
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                self.report(star, "TSF210", f"{self.method}() takes "
                            f"{'**' if star is params.star_kwarg else '*'}{star.name.value}")
        for param in params.kwonly_params:
            if param.default is not None:
                self.report(param, "TSF210", f"keyword-only parameter {param.name.value!r} "
                            f"with a default in {self.method}()")

    # -- bodies --

    def _block(self, block: cst.BaseSuite, compiled: bool) -> None:
        statements: Sequence[cst.CSTNode] = (block.body if isinstance(block, cst.IndentedBlock)
                                             else [block])
        for statement in statements:
            if isinstance(statement, cst.If):
                compiled = self._if(statement, compiled)
            else:
                self._node(statement, compiled)

    def _if(self, node: cst.If, compiled: bool) -> bool:
        """Check an if statement; returns whether what follows it is compiled."""
        scripting = _scripting_test(node.test, self.imports)
        if compiled:
            self._none_test(node)
            self._config_branch(node.test)
        self._node(node.test, compiled)
        self._block(node.body, compiled and scripting is not False)
        orelse = node.orelse
        if isinstance(orelse, cst.If):
            self._if(orelse, compiled and scripting is not True)
        elif isinstance(orelse, cst.Else):
            self._block(orelse.body, compiled and scripting is not True)
        # `if torch.jit.is_scripting(): return ...`: the rest runs in Python only.
        return compiled and not (scripting is True and orelse is None and _ends_flow(node.body))

    def _node(self, node: cst.CSTNode, compiled: bool) -> None:
        stop = self._syntax(node)
        if compiled:
            self._semantics(node)
        if stop:
            return
        for child in node.children:
            if isinstance(child, cst.If):
                self._if(child, compiled)
            elif isinstance(child, cst.BaseSuite):
                self._block(child, compiled)
            else:
                self._node(child, compiled)

    def _syntax(self, node: cst.CSTNode) -> bool:
        """What the TorchScript front end rejects wherever it appears; True: skip the inside."""
        if isinstance(node, cst.Try | cst.TryStar):
            self.report(node, "TSF101", f"try/except in {self.method}()")
        elif isinstance(node, cst.Lambda):
            self.report(node, "TSF102", f"lambda in {self.method}()")
        elif isinstance(node, cst.Global | cst.Nonlocal):
            keyword = "global" if isinstance(node, cst.Global) else "nonlocal"
            self.not_reads.update(id(item.name) for item in node.names)
            self.report(node, "TSF103", f"{keyword} statement in {self.method}()")
        elif isinstance(node, cst.FormattedStringExpression) and (
                node.format_spec is not None or node.conversion is not None):
            what = "format spec" if node.format_spec is not None else f"!{node.conversion}"
            self.report(node, "TSF104", f"f-string {what} in {self.method}()")
        elif isinstance(node, cst.FunctionDef | cst.ClassDef):
            kind = "function" if isinstance(node, cst.FunctionDef) else "class"
            self.report(node, "TSF106", f"{kind} {node.name.value!r} defined inside "
                        f"{self.method}()")
            return True
        elif isinstance(node, cst.Yield):
            self.report(node, "TSF107", f"yield in {self.method}()")
        elif isinstance(node, cst.Set | cst.SetComp):
            self.report(node, "TSF108", f"set in {self.method}()")
        elif isinstance(node, cst.NamedExpr):
            self.report(node, "TSF109", f"assignment expression in {self.method}()")
        return False

    def _semantics(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Call):
            self._call(node)
        elif isinstance(node, cst.Name):
            self._name(node)
        elif isinstance(node, cst.Subscript):
            self._subscript(node)
        elif isinstance(node, cst.For):
            self._for(node)
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                self._target(target.target)
        elif isinstance(node, cst.List | cst.Tuple) and any(
                isinstance(e, cst.StarredElement) for e in node.elements):
            star = next(e for e in node.elements if isinstance(e, cst.StarredElement))
            self.report(star, "TSF115", f"starred element in {self.method}()")
        elif isinstance(node, cst.Attribute):
            self._attribute(node)
        elif isinstance(node, cst.Comparison | cst.While | cst.IfExp):
            self._none_test(node)
            if isinstance(node, cst.While | cst.IfExp):
                self._config_branch(node.test)

    def _config_branch(self, test: cst.BaseExpression) -> None:
        for read in find_all(test, cst.Attribute):
            attr = self_attr(read, self.self_var)
            if attr is not None and attr in self.lifted:
                self.report(read, "TSF204", f"branch on configuration attribute 'self.{attr}' "
                            "(an exported model keeps only the branch chosen at construction)")

    def _target(self, target: cst.BaseExpression) -> None:
        # Slice assignment into a tensor scripts; into a list it does not.
        if isinstance(target, cst.Subscript) and any(
                isinstance(e.slice, cst.Slice) for e in target.slice) and (
                self.typer.type_of(target.value) or "").startswith("List["):
            self.report(target, "TSF114", f"slice assignment in {self.method}()")

    def _call(self, node: cst.Call) -> None:
        name = qualified_name(node.func, self.imports) or ""
        for arg in node.args:
            if arg.star == "**":
                self.report(arg, "TSF110", f"**{_code(arg.value)} in a call in "
                            f"{self.method}()")
            elif arg.star == "*":
                self.report(arg, "TSF214", f"*{_code(arg.value)} in a call in "
                            f"{self.method}()")
        func = node.func
        if name == "getattr" and len(node.args) >= 2 and not isinstance(
                node.args[1].value, cst.SimpleString | cst.ConcatenatedString):
            self.report(node, "TSF111", f"getattr() with computed name "
                        f"{_code(node.args[1].value)!r}")
        elif name == "reversed" and node.args and self._container(node.args[0].value):
            self.report(node, "TSF202", f"reversed({_code(node.args[0].value)})")
        elif name == "tuple" and node.args:
            self.report(node, "TSF115", f"tuple({_code(node.args[0].value)}) has no static "
                        "size")
        elif name == "zip" and any(self._container(a.value) for a in node.args) and any(
                isinstance(a.value, cst.Call) and get_full_name_for_node(a.value.func) == "range"
                for a in node.args):
            self.report(node, "TSF113", f"zip of a module container with range() in "
                        f"{self.method}()")
        elif name.endswith("autograd.Variable") or name.endswith("autograd.variable.Variable"):
            self.report(node, "TSF213", f"Variable(...) in {self.method}()")
        elif name == "sum" and node.args and self._sums_tensors(node.args[0].value):
            self.report(node, "TSF215", f"sum({_code(node.args[0].value)}) adds tensors")
        elif (isinstance(func, cst.Attribute) and func.attr.value == "forward"
              and isinstance(func.value, cst.Call)
              and get_full_name_for_node(func.value.func) == "super"):
            self.report(node, "TSF211", f"super().forward() in {self.method}()")
        elif isinstance(func, cst.Attribute) and func.attr.value == "flatten_parameters":
            self.report(node, "TSF212", f"{_code(func)}() in {self.method}()")
        for arg in node.args:
            if arg.keyword is not None:
                self.not_reads.add(id(arg.keyword))
        if ((isinstance(func, cst.Attribute) and func.attr.value == "numpy" and not node.args)
                or name == "torch.from_numpy"):
            self.report(node, "TSF205", f"numpy ({_code(func)}) in {self.method}()")

    def _name(self, node: cst.Name) -> None:
        if id(node) in self.not_reads or node.value in self.bound:
            return
        if node.value in self.numpy_here:
            self.report(node, "TSF205", f"numpy ({self.numpy_here[node.value]}) in "
                        f"{self.method}()")
            return
        kind = self.constants.get(node.value)
        if kind is not None:
            self.report(node, "TSF105", f"module-level {kind} {node.value!r} read in "
                        f"{self.method}()")

    def _attribute(self, node: cst.Attribute) -> None:
        self.not_reads.add(id(node.attr))
        uses = numpy_uses(node, self.numpy_here, self.imports)
        if uses and uses[0].node is node:
            self.report(node, "TSF205", f"numpy ({uses[0].name}) in {self.method}()")
            self.not_reads.update(id(n) for n in find_all(node, cst.Name))
        inner = self_attr(node.value, self.self_var)
        if inner is not None and inner in self.config_objects:
            self.report(node, "TSF203", f"{_code(node)} reads a field of config object "
                        f"'self.{inner}'")

    def _subscript(self, node: cst.Subscript) -> None:
        attr = self_attr(node.value, self.self_var)
        if attr is not None and attr in self.config_objects:
            self.report(node, "TSF203", f"{_code(node)} reads a field of config object "
                        f"'self.{attr}'")
        if attr is None or attr not in self.containers or len(node.slice) != 1:
            return
        index = node.slice[0].slice
        if not isinstance(index, cst.Index):
            return          # slices compile (their elements are called through .forward)
        value = index.value
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
            value = value.expression
        literal = (cst.SimpleString if self.containers[attr] == "ModuleDict" else cst.Integer)
        if not isinstance(value, literal):
            self.report(node, "TSF201", f"{self.containers[attr]} 'self.{attr}' indexed by "
                        f"{_code(index.value)!r}")

    def _for(self, node: cst.For) -> None:
        if not self._loops_over_container(node.iter):
            return
        for jump in _own_jumps(node.body):
            keyword = "break" if isinstance(jump, cst.Break) else "continue"
            self.report(jump, "TSF112", f"{keyword} in a loop over {_code(node.iter)}")

    def _loops_over_container(self, iterated: cst.BaseExpression) -> bool:
        if self._container(iterated):
            return True
        if isinstance(iterated, cst.Call) and get_full_name_for_node(iterated.func) in (
                "enumerate", "zip"):
            return any(self._container(a.value) for a in iterated.args)
        if isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute):
            return (iterated.func.attr.value in ("items", "values", "keys")
                    and self._container(iterated.func.value))
        return False

    def _container(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Subscript):      # self.layers[1:] is a container too
            expr = expr.value
        attr = self_attr(expr, self.self_var)
        return attr is not None and attr in self.containers

    def _sums_tensors(self, argument: cst.BaseExpression) -> bool:
        """Whether ``sum(argument)`` adds tensors: what is summed is typed Tensor, or is a
        call of a submodule or of a module container's element."""
        element: cst.BaseExpression | None = None
        if isinstance(argument, cst.ListComp | cst.GeneratorExp):
            element = argument.elt
            loops = find_all(argument.for_in, cst.CompFor)
            if isinstance(element, cst.Call) and any(
                    self._container(loop.iter) and isinstance(loop.target, cst.Name)
                    and get_full_name_for_node(element.func) == loop.target.value
                    for loop in loops):
                return True
            kind = self.typer.type_of(element)
            return kind == TENSOR
        if isinstance(argument, cst.List | cst.Tuple):
            kinds = [self.typer.type_of(e.value) for e in argument.elements]
            return any(kind == TENSOR for kind in kinds)
        kind = self.typer.type_of(argument)
        if kind is None:
            return False
        head, args = parts_of(kind)
        return head in ("List", "Tuple") and TENSOR in args

    def _none_test(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Comparison):
            left = self_attr(node.left, self.self_var)
            for target in node.comparisons:
                operator = target.operator
                if left is None:
                    continue
                if isinstance(operator, cst.Is | cst.IsNot):
                    if (left in self.function_attrs and isinstance(target.comparator, cst.Name)
                            and target.comparator.value == "None"):
                        self.report(node, "TSF117", f"'self.{left}' holds a function and is "
                                    "tested against None")
                elif left in self.maybe_none and isinstance(operator, cst.Equal | cst.NotEqual):
                    self.report(node, "TSF116", f"'self.{left}' may be None and is compared "
                                f"with {_code(target.comparator)}")
            return
        test: cst.BaseExpression | None = getattr(node, "test", None)
        if test is None:
            return
        attr = self_attr(test, self.self_var)
        if attr is not None and attr in self.maybe_none:
            self.report(test, "TSF116", f"'self.{attr}' may be None and is tested for truth")
        elif attr is not None and attr in self.function_attrs:
            self.report(test, "TSF117", f"'self.{attr}' holds a function and is tested")


def _config_like(name: str) -> bool:
    lowered = name.lower().lstrip("_")
    return lowered in _CONFIG_NAMES or lowered.endswith(("_cfg", "_config", "_conf"))


def _optional_annotation(node: cst.BaseExpression) -> bool:
    text = _code(node)
    return "Optional" in text or "None" in text or "Any" in text


def _bound_names(func: cst.FunctionDef) -> set[str]:
    """Names the method binds itself: parameters, assignment and loop targets, imports."""
    bound = {p.name.value for p in find_all(func.params, cst.Param)}
    for node in find_all(func.body, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.CompFor, cst.WithItem, cst.NamedExpr, cst.ImportAlias):
        target = getattr(node, "target", None) or getattr(node, "asname", None)
        if isinstance(node, cst.ImportAlias):
            target = node.asname.name if node.asname is not None else node.name
        for name in find_all(target, cst.Name) if target is not None else ():
            bound.add(name.value)
    return bound


def _own_jumps(block: cst.CSTNode) -> Iterator[cst.Break | cst.Continue]:
    """break/continue that belong to this loop (not to a loop nested in it)."""
    stack: list[cst.CSTNode] = [block]
    while stack:
        current = stack.pop()
        for child in current.children:
            if isinstance(child, cst.Break | cst.Continue):
                yield child
            elif not isinstance(child, cst.For | cst.While | cst.FunctionDef):
                stack.append(child)


_EMPTY = cst.Module([])


def _code(node: cst.CSTNode) -> str:
    text = " ".join(_EMPTY.code_for_node(node).split())
    return text if len(text) <= 60 else text[:57] + "..."


# ---- paths -------------------------------------------------------------------------------------

def check_paths(paths: list[Path], *, config_path: Path | None = None,
                ignore: Iterable[str] = (), display: Callable[[Path], str] | None = None
                ) -> CheckResult:
    """Check every Python file under ``paths`` (``[tool.tsfix] exclude`` applies).
    Raises ConfigError for a bad configuration."""
    config = load_config(config_path or find_pyproject(paths))
    ignored = set(ignore)
    shown = display or _display
    result = CheckResult()
    for found in discover(paths, config.root, config.exclude):
        if isinstance(found, SourceError):
            result.errors.append(str(found))
            continue
        result.files += 1
        try:
            source = read_source(found)
        except SourceError as exc:
            result.errors.append(str(exc))
            continue
        if is_generated(source.text):
            continue
        try:
            findings = check_source(source.text, shown(found))
        except CheckSyntaxError as exc:
            result.errors.append(str(exc))
            continue
        except RecursionError:
            result.errors.append(f"{shown(found)}: too deeply nested to check")
            continue
        result.findings.extend(f for f in findings if f.code not in ignored)
    return result


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def unknown_codes(codes: Iterable[str]) -> list[str]:
    return [code for code in codes if code not in CODES]


def config_for(paths: list[Path], config_path: Path | None) -> Config:
    return load_config(config_path or find_pyproject(paths))


# ---- output formats ----------------------------------------------------------------------------

def to_json(result: CheckResult) -> dict[str, Any]:
    return {
        "exit_code": result.exit_code,
        "files": result.files,
        "errors": result.errors,
        "findings": [{"path": f.path, "line": f.line, "column": f.column, "code": f.code,
                      "name": CODES[f.code].name, "level": CODES[f.code].level,
                      "message": f.message, "fix": f.fix, "class": f.class_name,
                      "method": f.method} for f in result.findings],
    }


SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def to_sarif(result: CheckResult, version: str) -> dict[str, Any]:
    """SARIF 2.1.0: one run, the codes as rules, the findings as results (uris relative)."""
    used = sorted({f.code for f in result.findings})
    rules = []
    for code in used:
        info = CODES[code]
        fix = f" Fix: tsfix apply --rule {info.fix} PATHS" if info.fix else ""
        rules.append({"id": code, "name": info.name,
                      "shortDescription": {"text": info.summary},
                      "fullDescription": {"text": info.help},
                      "help": {"text": info.help + fix},
                      "defaultConfiguration": {"level": info.level},
                      "properties": {"fix": info.fix} if info.fix else {}})
    index = {code: i for i, code in enumerate(used)}
    results = [{
        "ruleId": f.code,
        "ruleIndex": index[f.code],
        "level": CODES[f.code].level,
        "message": {"text": f.message + (f" (fix: tsfix apply --rule {f.fix})" if f.fix
                                         else "")},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": f.path},
            "region": {"startLine": f.line, "startColumn": f.column}}}],
    } for f in result.findings]
    notifications = [{"level": "error", "message": {"text": error}} for error in result.errors]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "tsfix", "version": version, "rules": rules}},
            "results": results,
            "invocations": [{"executionSuccessful": not result.errors,
                             "toolExecutionNotifications": notifications}],
        }],
    }


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2)
