"""``tsfix check``: find what TorchScript rejects in compiled methods, without rewriting.

A finding is either a rule's or the linter's own:

* **The rules' findings** (``TSF2xx``, declared in each rule module's ``CODES``): each rule is
  run on the file as the user has it (not after the other rules), in ``--rule all`` order,
  exactly as ``tsfix apply`` would run it, and reports every site it is about: fixed (the finding
  says ``fix: tsfix apply --rule NAME``) or refused with the rule's reason. Where several rules
  report one site (numpy-to-torch and ignore-numpy), the first rule that fixes it is named; if
  none does, their reasons are shown. So check never names a rule for a site that rule
  refuses.
* **The linter's own** (``TSF1xx``, :mod:`tsfix.codemods.lint.codes`): constructs no rule
  rewrites.

Only code that ``torch.jit.script`` compiles is checked (the compiled methods of
:mod:`tsfix.codemods.facts.classes`: ``forward``, ``@torch.jit.export`` methods and what they
call through ``self``, minus ``@torch.jit.ignore``/``unused`` methods and code that only runs
when not scripting). Constructs the TorchScript front end rejects while reading the source
(``try``, ``lambda``, ``global``, f-string format specs, nested ``def``, ``yield``, set literals,
``:=``) fail even there, and are reported everywhere in a compiled method. Nothing here imports
torch.

``--target`` (``check_source``/``check_paths`` ``target=``): the rules' findings come from each
rule's form for that target (``registry.select_rules(["all"], target)``), so ``--target export``
reports what ``tsfix apply --target export`` would fix (lift-branch's ``torch.cond`` form,
numpy-to-torch, data-dependent-branch) and nothing about rules that target skips (annotate,
modulelist-iter...). A fixed finding names the target in its fix
(``tsfix apply --target export --rule NAME``).

Under ``export`` the linter's own TSF1xx codes are not reported: each is a restriction of the
TorchScript front end, and ``torch.export`` traces the Python as it runs. Measured on torch 2.13
(``torch.export.export`` of each class of ``fixtures/check/blockers.py``): TSF101 try/except,
TSF102 lambda, TSF103 global, TSF105 module-level constants, TSF106 nested def, TSF108 sets,
TSF109 ``:=``, TSF110 ``**kwargs``, TSF111 computed getattr, TSF112 break in a module loop
(the fixture's class fails only because it breaks on ``x.sum() > 100``, a TSF226 test of a
tensor; ``if i >= self.depth: break`` exports), TSF113 zip with range, TSF114 list slice
assignment, TSF115 starred unpacking, TSF116 a None attribute compared, TSF117 a function
attribute tested: every one exports with eager parity. One form of TSF101 does not: a handler
that catches an exception raised while tracing (``try: layer(x, lengths=l) except TypeError:``;
the failed call stays on the tracer's module stack: "Unexpected key _export_root.blocks.0");
the typeerror-fallback rule reports that form under every target.
Two fail only in a form the linter cannot tell from the harmless one, so they are left to
``tsfix explain --target export``, which knows torch's message: TSF104 fails when the formatted
value is a tensor ("unsupported format string passed to FakeTensor.__format__"; a number
formats), TSF107 when forward itself returns the generator ("Found <class 'generator'> in
output"; a generator a helper yields and forward consumes exports). What still matters for
torch.export is reported by the rules: numpy on tensors (TSF205: ".numpy() is not supported
for tensor subclasses"), branches on a setting (TSF204: kept as the construction-time path
only), data-dependent branches and values (TSF226, TSF227: "Could not guard on data-dependent
expression", "Could not extract specialized integer").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, PositionProvider
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.module import ModuleFacts, module_facts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.scope import file_scope
from tsfix.codemods.facts.syntax import (
    names_bound_in,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.facts.type_flow import type_flow, with_article
from tsfix.codemods.lint.codes import all_codes, rule_of_code
from tsfix.codemods.pipeline.config import (
    TARGETS,
    ConfigError,
    find_pyproject,
    load_config,
)
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.pipeline.sources import SourceError, discover, is_generated, read_source
from tsfix.codemods.rules.base import Code, Fix, Skip

# Exit codes, as ``tsfix apply`` (tsfix.codemods.pipeline.report).
EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_FAILED = 3

# Every code, the linter's and the rules'.
CODES: dict[str, Code] = all_codes()


@dataclass(frozen=True)
class Finding:
    path: str               # as given / relative to the working directory
    line: int
    column: int             # 1-based
    code: str
    message: str
    class_name: str = ""
    method: str = ""
    fix: str | None = None  # the rule that rewrites this site
    refused: str = ""       # why the rules that handle this construct leave this site
    target: str = "torchscript"     # the --target the finding was made for

    @property
    def apply_command(self) -> str:
        """``tsfix apply [--target T] --rule NAME``: the command that fixes this site."""
        return fix_command(self.fix or "", self.target)

    def text(self) -> str:
        if self.fix:
            tail = f" (fix: {self.apply_command})"
        elif self.refused:
            tail = f" (not fixed: {self.refused})"
        else:
            tail = ""
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}{tail}"


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)     # files that could not be checked
    warnings: list[str] = field(default_factory=list)   # given folders without Python files
    files: int = 0
    target: str = "torchscript"

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_FAILED
        return EXIT_FINDINGS if self.findings else EXIT_CLEAN


class CheckSyntaxError(Exception):
    """A file that does not parse; the message is ``path:line:col: ...``."""


# ---- one file ----------------------------------------------------------------------------------

_NUMBERS = ("int", "float", "bool")

# Targets whose exporter compiles with TorchScript: the linter's own codes apply under them.
_TORCHSCRIPT_TARGETS = ("torchscript", "onnx")


def fix_command(rule: str, target: str = "torchscript") -> str:
    """The command that applies ``rule`` in its form for ``target``."""
    return ("tsfix apply --rule " if target == "torchscript"
            else f"tsfix apply --target {target} --rule ") + rule


def check_source(text: str, display: str, *, errors: list[str] | None = None,
                 target: str = "torchscript") -> list[Finding]:
    """Every finding in one file's source, for ``target`` (the module doc says what changes
    under ``export``). Raises CheckSyntaxError if it does not parse. A rule that fails on the
    file costs only its own findings; the failure goes to ``errors``."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise CheckSyntaxError(_syntax_error(text, display, exc)) from exc
    with file_scope():
        facts = module_facts(module)
        if not facts.module_classes:
            return []
        linted = (_lint_findings(module, facts, display)
                  if target in _TORCHSCRIPT_TARGETS else [])
        findings = _rule_findings(text, display, module, errors, target)
        # A rule that handles a construct the linter also reports (a nested def, a try/except)
        # declares the linter's code; its finding says whether it fixes that site, so it
        # replaces the linter's own on that line.
        handled = {(f.line, f.code) for f in findings}
        # Rules do not record the method of a site; the linter's finding there knows it.
        methods = {(f.line, f.column, f.code): f.method for f in linted}
        findings = [replace(f, method=methods.get((f.line, f.column, f.code), f.method))
                    for f in findings]
        findings.extend(f for f in linted if (f.line, f.code) not in handled)
    return sorted(set(findings), key=lambda f: (f.line, f.column, f.code))


def _syntax_error(text: str, display: str, exc: cst.ParserSyntaxError) -> str:
    """``path:line:col: cannot parse: ...``, placed where CPython places it (LibCST's own
    position can be a token later: a missing colon is reported on the next line)."""
    from tsfix.codemods.pipeline.rewrite import python_syntax_error

    return (python_syntax_error(text, display)
            or f"{display}:{exc.raw_line}:{exc.raw_column + 1}: cannot parse: {exc.message}")


def _lint_findings(module: cst.Module, facts: ModuleFacts, display: str) -> list[Finding]:
    """The linter's own codes (TSF1xx)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    constants = _module_constants(module)
    findings: list[Finding] = []
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and facts.is_module_class(statement):
            checker = _ClassChecker(facts.of(statement), constants)
            for node, code, message, method in checker.run():
                start = positions[node].start
                findings.append(Finding(display, start.line, start.column + 1, code, message,
                                        statement.name.value, method))
    return findings


def _rule_findings(text: str, display: str, module: cst.Module,
                   errors: list[str] | None, target: str) -> list[Finding]:
    """What each rule (in its form for ``target``) reports about the file: every site it fixes
    or refuses, merged per site (the module doc says how)."""
    from tsfix.codemods.pipeline.rewrite import rewrite_source
    from tsfix.codemods.rules.registry import select_rules

    fixes: list[Fix] = []
    refusals: list[Skip] = []
    file = AstFile(text)
    for rule in select_rules(["all"], target):
        if file.tree is not None and not rule.may_apply(file):
            continue                # it would find nothing here (its prefilter's promise)
        try:
            found = rewrite_source(
                text, RewriteSettings([rule], output=False), FileContext(display, module=module)
            )
        except Exception as exc:        # one rule's failure costs only its findings
            if errors is not None:
                errors.append(f"{display}: internal error in rule {rule.name}: "
                              f"{type(exc).__name__}: {exc}")
            continue
        fixes.extend(found.fixes)
        refusals.extend(s for s in found.skips if s.code)
    sites: dict[tuple[int, int, str], Finding] = {}
    for fix in fixes:
        key = (fix.line, fix.column, fix.code)
        if key not in sites:
            sites[key] = Finding(display, fix.line, fix.column, fix.code, fix.message,
                                 fix.class_name, fix=fix.rule, target=target)
    for skip in refusals:
        assert skip.code is not None
        key = (skip.line, skip.column, skip.code)
        known = sites.get(key)
        why = skip.reason
        if skip.message and why.startswith(skip.message):
            # The finding already says what the site is; the refusal adds only why it stays.
            why = why[len(skip.message):].lstrip(" ;:.") or why
        reason = f"{skip.rule}: {why}"
        if known is None:
            sites[key] = Finding(display, skip.line, skip.column, skip.code,
                                 skip.message or CODES[skip.code].summary, skip.class_name,
                                 refused=reason, target=target)
        elif known.fix is None and reason not in known.refused:
            sites[key] = Finding(display, known.line, known.column, known.code, known.message,
                                 known.class_name, refused=f"{known.refused}; {reason}",
                                 target=target)
    return list(sites.values())


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


Report = tuple[cst.CSTNode, str, str, str]


class _ClassChecker:
    """The linter's own codes in one class's compiled methods (the rules report theirs)."""

    def __init__(self, facts: ClassFacts, constants: dict[str, str]) -> None:
        self.facts = facts
        self.imports = facts.imports
        self.constants = constants
        self.reports: list[Report] = []
        self.method = ""
        # Name nodes that are not reads: ``.attr`` names and keyword names.
        self.not_reads: set[int] = set()
        self.maybe_none = self._maybe_none()

    def _maybe_none(self) -> set[str]:
        """Attributes ``__init__`` sets to None, directly or from a None-default parameter,
        and no other method assigns (a counter or cache set later is not configuration)."""
        init = self.facts.init
        if init is None:
            return set()
        defaults = {name: param.default for name, param in parameters_of(init).items()}
        found: set[str] = set()
        for assigned in self.facts.assignments:
            value = assigned.value
            if assigned.method != "__init__" or value is None:
                continue
            if isinstance(value, cst.Name) and value.value == "None":
                found.add(assigned.attr)
            elif isinstance(value, cst.Name) and value.value in defaults:
                default = defaults[value.value]
                if isinstance(default, cst.Name) and default.value == "None":
                    found.add(assigned.attr)
        return found - self.facts.assigned_outside_init - self.facts.submodules

    def run(self) -> list[Report]:
        for name, func in self.facts.compiled_methods():
            self.method = name
            self.self_var = self_name(func) or "self"
            self.bound = names_bound_in(func)
            self.never = self.facts.never_compiled(name)
            self.typer = self.facts.typer(name)
            self._block(func.body)
            self._types(name)
        return self.reports

    def _types(self, method: str) -> None:
        """Re-bindings and returns whose types TorchScript cannot merge (TSF119, TSF118)."""
        flow = type_flow(self.facts, method)
        for rebound in flow.rebindings:
            self.report(rebound.target, "TSF119", f"'{rebound.name}' is "
                        f"{with_article(rebound.previous)} from an enclosing block and is "
                        f"assigned {with_article(rebound.assigned)} here")
        for conflict in flow.returns:
            if conflict.annotated:
                message = (f"{method}() is annotated -> {conflict.expected} but returns "
                           f"{with_article(conflict.returned)} here")
            else:
                message = (f"{method}() returns {with_article(conflict.returned)} here and "
                           f"{with_article(conflict.expected)} on an earlier return")
            self.report(conflict.node, "TSF118", message)

    def report(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.reports.append((node, code, message, self.method))

    # -- bodies --

    def _block(self, block: cst.BaseSuite) -> None:
        statements: Sequence[cst.CSTNode] = (block.body if isinstance(block, cst.IndentedBlock)
                                             else [block])
        for statement in statements:
            self._node(statement)

    def _node(self, node: cst.CSTNode) -> None:
        stop = self._syntax(node)
        if id(node) not in self.never:
            self._semantics(node)
        if stop:
            return
        for child in node.children:
            self._node(child)

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
        elif isinstance(node, cst.Comparison | cst.If | cst.While | cst.IfExp):
            self._none_test(node)

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
                self.report(arg, "TSF110", f"**{short_source(arg.value)} in a call in "
                            f"{self.method}()")
        if name == "getattr" and len(node.args) >= 2 and not isinstance(
                node.args[1].value, cst.SimpleString | cst.ConcatenatedString):
            self.report(node, "TSF111", f"getattr() with computed name "
                        f"{short_source(node.args[1].value)!r}")
        elif name == "tuple" and node.args:
            self.report(node, "TSF115", f"tuple({short_source(node.args[0].value)}) has no static "
                        "size")
        elif name == "zip" and any(self._container(a.value) for a in node.args) and any(
                isinstance(a.value, cst.Call) and get_full_name_for_node(a.value.func) == "range"
                for a in node.args):
            self.report(node, "TSF113", f"zip of a module container with range() in "
                        f"{self.method}()")
        for arg in node.args:
            if arg.keyword is not None:
                self.not_reads.add(id(arg.keyword))

    def _name(self, node: cst.Name) -> None:
        if id(node) in self.not_reads or node.value in self.bound:
            return
        kind = self.constants.get(node.value)
        if kind is not None:
            self.report(node, "TSF105", f"module-level {kind} {node.value!r} read in "
                        f"{self.method}()")

    def _attribute(self, node: cst.Attribute) -> None:
        self.not_reads.add(id(node.attr))

    def _for(self, node: cst.For) -> None:
        if not self._loops_over_container(node.iter):
            return
        for jump in _own_jumps(node.body):
            keyword = "break" if isinstance(jump, cst.Break) else "continue"
            self.report(jump, "TSF112", f"{keyword} in a loop over {short_source(node.iter)}")

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
        return attr is not None and attr in self.facts.containers

    def _none_test(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Comparison):
            left = self_attr(node.left, self.self_var)
            for target in node.comparisons:
                operator = target.operator
                if left is None:
                    continue
                if isinstance(operator, cst.Is | cst.IsNot):
                    if (left in self.facts.function_attrs
                            and isinstance(target.comparator, cst.Name)
                            and target.comparator.value == "None"):
                        self.report(node, "TSF117", f"'self.{left}' holds a function and is "
                                    "tested against None")
                elif left in self.maybe_none and isinstance(operator, cst.Equal | cst.NotEqual):
                    self.report(node, "TSF116", f"'self.{left}' may be None and is compared "
                                f"with {short_source(target.comparator)}")
            return
        test: cst.BaseExpression | None = getattr(node, "test", None)
        if test is None:
            return
        attr = self_attr(test, self.self_var)
        if attr is not None and attr in self.maybe_none:
            self.report(test, "TSF116", f"'self.{attr}' may be None and is tested for truth")
        elif attr is not None and attr in self.facts.function_attrs:
            self.report(test, "TSF117", f"'self.{attr}' holds a function and is tested")


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


# ---- paths -------------------------------------------------------------------------------------

def check_paths(paths: list[Path], *, config_path: Path | None = None,
                ignore: Iterable[str] = (), display: Callable[[Path], str] | None = None,
                target: str | None = None) -> CheckResult:
    """Check every Python file under ``paths`` (``[tool.tsfix] exclude`` applies) for
    ``target`` (None: ``[tool.tsfix] target``, else torchscript). Raises ConfigError for a bad
    configuration or an unknown target."""
    config = load_config(config_path or find_pyproject(paths))
    chosen = target or config.target
    if chosen not in TARGETS:
        raise ConfigError(f"unknown target {chosen!r} (expected one of {', '.join(TARGETS)})")
    ignored = set(ignore)
    shown = display or _display
    result = CheckResult(target=chosen)
    for found in discover(paths, config.root, config.exclude, result.warnings):
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
            findings = check_source(source.text, shown(found), errors=result.errors,
                                    target=chosen)
        except CheckSyntaxError as exc:
            result.errors.append(str(exc))
            continue
        except RecursionError:
            result.errors.append(f"{shown(found)}: too deeply nested to check")
            continue
        result.findings.extend(f for f in findings if f.code not in ignored)
    return result


def _display(path: Path) -> str:
    """The path as the user should see it: relative to the working directory, with control
    characters in names escaped so that one finding stays one line."""
    from tsfix.codemods.pipeline.report import printable

    try:
        shown = path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        shown = path.as_posix()
    return printable(shown)


def unknown_codes(codes: Iterable[str]) -> list[str]:
    return [code for code in codes if code not in CODES]


# ---- output formats ----------------------------------------------------------------------------

def to_json(result: CheckResult) -> dict[str, Any]:
    return {
        "exit_code": result.exit_code,
        "files": result.files,
        "errors": result.errors,
        "warnings": result.warnings,
        "findings": [{"path": f.path, "line": f.line, "column": f.column, "code": f.code,
                      "name": CODES[f.code].name, "level": CODES[f.code].level,
                      "message": f.message, "fix": f.fix, "refused": f.refused or None,
                      "class": f.class_name, "method": f.method} for f in result.findings],
    }


SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def to_sarif(result: CheckResult, version: str) -> dict[str, Any]:
    """SARIF 2.1.0: one run, the codes as rules, the findings as results (uris relative)."""
    used = sorted({f.code for f in result.findings})
    rules = []
    for code in used:
        info = CODES[code]
        handler = rule_of_code(code)
        fix = (f" The rule {handler} fixes the sites it can "
               f"({fix_command(handler, result.target)}); "
               "a finding says whether it fixes that one." if handler else "")
        rules.append({"id": code, "name": info.name,
                      "shortDescription": {"text": info.summary},
                      "fullDescription": {"text": info.help},
                      "help": {"text": info.help + fix},
                      "defaultConfiguration": {"level": info.level},
                      "properties": {"rule": handler} if handler else {}})
    index = {code: i for i, code in enumerate(used)}
    results = [{
        "ruleId": f.code,
        "ruleIndex": index[f.code],
        "level": CODES[f.code].level,
        "message": {"text": f.text().split(f" {f.code} ", 1)[1]},
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
