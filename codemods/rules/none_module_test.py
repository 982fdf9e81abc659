"""``none-module-test``: a truth test of an attribute that holds a submodule or None becomes an
``is not None`` test.

What it does
    In the methods TorchScript compiles (``forward()``, ``@torch.jit.export`` methods and the
    methods they call; not code under ``if not torch.jit.is_scripting():``), a truth test of
    ``self.<attr>`` where ``__init__`` stores either None or a constructed submodule there::

        self.shortcut = None
        if in_channels != out_channels:
            self.shortcut = Conv1d(in_channels, out_channels, kernel_size=1)

    is rewritten where it is tested:

    * ``if self.shortcut:`` (also ``elif``, ``while``, ``assert``, a comprehension's ``if``,
      the test of ``x if self.shortcut else y``, and the operands of ``and``/``or`` inside
      those) -> ``self.shortcut is not None``;
    * ``not self.shortcut`` (anywhere: ``not`` always gives a bool) -> ``self.shortcut is None``.

    The values are read from ``__init__`` of the class, of its bases in the file and of the
    file's classes that derive from it (both sides of ``A() if c else None`` too; a call
    through a local of ``__init__`` bound only to class names, ``klass = nn.Conv1d`` / ``klass =
    nn.Conv2d``, builds one of those classes). A submodule's class is followed to where it is
    defined: the file, another file of the project (read with ``ast``, never imported:
    ``codemods/facts/project.py``) or ``torch.nn``.

Why it breaks export
    TorchScript types the attribute by the value the instance holds, and a module or None has
    no truth value there (measured on torch 2.13): ``if self.shortcut:`` fails with "Could not
    cast value of type NoneType to bool" when it is None, and with "Could not cast value of type
    __torch__...Conv1d to bool" when it is a submodule, so neither configuration scripts. ``is
    not None`` is decided from the attribute's type when the module is scripted: the branch a
    None attribute skips is not even compiled. ``torch.export`` runs the Python test and exports
    both configurations with exact parity as written, so the rule serves the TorchScript-based
    targets only.

Example
    Before::

        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            residual = x
            if self.shortcut:
                residual = self.shortcut(x)

    After::

        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            residual = x
            if self.shortcut is not None:
                residual = self.shortcut(x)

Fix safety
    ``bool(value)`` equals ``value is not None`` only when every other value the attribute can
    hold is always true, so the rule rewrites a test only when every value ``__init__`` stores is
    None or a call of a class that defines neither ``__len__`` nor ``__bool__``, itself or in a
    base (an instance of such a class is always true). Refused, with the reason (``tsfix
    check`` shows it, TSF116):
    ``nn.Sequential``, ``nn.ModuleList``, ``nn.ModuleDict``, ``nn.ParameterList`` and
    ``nn.ParameterDict`` (they define ``__len__``: an empty one is false), and classes of the
    project that define or inherit ``__len__``/``__bool__`` (speechbrain's ``Sequential`` is a
    ``ModuleDict``); a class whose base cannot be followed (an installed package other than
    torch), or that is not known at all (built by a function, from a constructor argument); a
    Tensor (``nn.Parameter(...)``, ``torch.zeros(...)``): its truth value depends on its data and
    is an error for more than one element, which ``is not None`` does not reproduce; a number,
    string or bool setting (``0`` and ``""`` are false, ``is not None`` is true for them: store a
    non-None default instead of None, or test ``is not None`` by hand where 0 is not meant to
    switch it off; ``constant-flag`` handles a setting whose test chooses the return type); an
    attribute assigned outside ``__init__`` (in another method, by ``setattr``, by unpacking) or
    registered with ``register_buffer``/``register_parameter``/``add_module``. A subclass in
    another file that stores another value there is not seen; validation re-scripts and compares
    the configurations of the example tables.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.project import ast_imports, dotted_name, lookup, parsed_file
from tsfix.codemods.facts.syntax import (
    contains,
    find_all,
    literal_type,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

# torch.nn classes that define __len__ or __bool__ (every class in torch.nn and its submodules,
# torch 2.13): an empty container is false.
_TORCH_NN_FALSY = frozenset({"Sequential", "ModuleList", "ModuleDict", "ParameterList",
                             "ParameterDict", "ParametrizationList"})
# torch.nn classes whose instances are Tensors.
_TORCH_NN_TENSORS = frozenset({"Parameter", "UninitializedParameter", "Buffer",
                               "UninitializedBuffer"})
_TRUTH_METHODS = ("__len__", "__bool__")
# How deep bases are followed.
_MAX_DEPTH = 8

# Kinds of value ``__init__`` stores in the attribute.
_NONE, _MODULE, _FALSY, _TENSOR, _SETTING, _UNKNOWN = (
    "none", "module", "falsy", "tensor", "setting", "unknown")


@dataclass(frozen=True)
class _Value:
    """One value the attribute can hold: its kind, where it is written, and what to say."""

    kind: str
    shown: str          # the expression, shortened
    line: int
    why: str = ""       # for _FALSY and _UNKNOWN: why the class may be false or is not known


@dataclass(frozen=True)
class _Site:
    """One truth test of ``self.<attr>``: the attribute node, and the ``not`` around it."""

    attr: str
    node: cst.Attribute
    negated: cst.UnaryOperation | None


# ---- the classes a value is built from ---------------------------------------------------------

def _torch_problem(dotted: str) -> str:
    """Why instances of the torch class ``dotted`` may be false ("" when they never are)."""
    name = dotted.rpartition(".")[2]
    if not dotted.startswith("torch.nn.") or not name[:1].isupper():
        return f"`{dotted}` is not a torch.nn layer"
    if name in _TORCH_NN_FALSY:
        return f"torch.nn.{name} defines __len__: an empty one is false"
    return ""


class _Truthiness:
    """Whether instances of a class named in a file are always true: neither the class nor a
    base defines ``__len__``/``__bool__``. Classes are read from the file and the project's
    other files with CPython's ``ast`` (nothing is imported)."""

    def __init__(self, tree: ast.Module, path: Path | None) -> None:
        self.tree = tree
        self.path = path
        self._seen: dict[tuple[str, str], str] = {}

    def problem(self, dotted: str) -> str:
        """Why an instance of ``dotted`` may be false, or is not known ("": always true)."""
        return self._resolve(self.tree, self.path, dotted, 0)

    def _resolve(self, tree: ast.Module, path: Path | None, dotted: str, depth: int) -> str:
        if depth > _MAX_DEPTH:
            return f"the bases of `{dotted}` go too deep to follow"
        head, _, rest = dotted.partition(".")
        classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
        if not rest and head in classes:
            return self._class(tree, path, classes[head], depth)
        imports = ast_imports(tree.body)
        if not rest and any(isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                            and s.name == head for s in tree.body):
            return f"`{dotted}` is a function of its file: what it returns is not known"
        if head not in imports:
            if dotted == "object":
                return ""
            if not rest and hasattr(builtins, head):
                return f"`{dotted}` is a builtin type"
            return f"`{dotted}` is neither a class of its file nor imported there"
        level, target = imports[head]
        full = ".".join(p for p in (target, rest) if p)
        if not level and full.split(".")[0] == "torch":
            return _torch_problem(full)
        if path is None:
            return f"`{dotted}` comes from another file and this source has no path"
        found = lookup(path, full, level)
        if found is None:
            return (f"`{dotted}` comes from {full}, outside the project tree: whether it "
                    "defines __len__ or __bool__ is not known")
        if found.kind == "external":
            if found.external.split(".")[0] == "torch":
                return _torch_problem(found.external)
            return (f"`{dotted}` comes from {found.external}, outside the project tree: "
                    "whether it defines __len__ or __bool__ is not known")
        other = parsed_file(found.path) if found.kind == "class" else None
        cls = next((s for s in other.body if isinstance(s, ast.ClassDef)
                    and s.lineno == found.line), None) if other is not None else None
        if other is None or cls is None:
            return (f"`{dotted}` is not a class the project defines visibly "
                    f"({found.display or found.path})")
        return self._class(other, found.path, cls, depth + 1)

    def _class(self, tree: ast.Module, path: Path | None, cls: ast.ClassDef, depth: int) -> str:
        key = (str(path), cls.name)
        if key in self._seen:
            return self._seen[key]
        self._seen[key] = f"the bases of {cls.name} form a cycle"
        problem = ""
        for statement in cls.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.Assign
                          | ast.AnnAssign):
                names = ([statement.name] if isinstance(statement, ast.FunctionDef
                                                        | ast.AsyncFunctionDef)
                         else [n.id for t in (statement.targets if isinstance(
                             statement, ast.Assign) else [statement.target])
                               for n in ast.walk(t) if isinstance(n, ast.Name)])
                defined = [n for n in names if n in _TRUTH_METHODS]
                if defined:
                    problem = (f"{cls.name} defines {defined[0]} (line {statement.lineno}): an "
                               "instance can be false")
                    break
        if not problem:
            for base in cls.bases:
                name = dotted_name(base)
                found = (self._resolve(tree, path, name, depth + 1) if name is not None
                         else f"a base of {cls.name} is no name")
                if found:
                    problem = f"{cls.name} derives from {name or ast.unparse(base)}: {found}"
                    break
        self._seen[key] = problem
        return problem


# ---- where the attribute is tested --------------------------------------------------------------

def _truth_sites(func: cst.FunctionDef, self_var: str) -> Iterator[_Site]:
    """Every ``self.<attr>`` whose truth value is taken in ``func`` (see the module doc)."""
    pending: list[tuple[cst.CSTNode, bool, cst.UnaryOperation | None]] = [(func.body, False,
                                                                            None)]
    while pending:
        node, truth, negated = pending.pop()
        attr = self_attr(node, self_var)
        if truth and attr is not None:
            assert isinstance(node, cst.Attribute)
            yield _Site(attr, node, negated)
            continue
        if isinstance(node, cst.FunctionDef | cst.ClassDef | cst.Lambda) and node is not func:
            continue        # not compiled as part of this method (other rules report them)
        tests: set[int] = set()
        if isinstance(node, cst.If | cst.While | cst.IfExp | cst.Assert | cst.CompIf):
            tests.add(id(node.test))
        not_operand = (node.expression if isinstance(node, cst.UnaryOperation)
                       and isinstance(node.operator, cst.Not) else None)
        for child in reversed(node.children):
            if child is not_operand:
                pending.append((child, True, node if isinstance(node, cst.UnaryOperation)
                                else None))
            elif isinstance(node, cst.BooleanOperation) and child in (node.left, node.right):
                # ``self.a or b`` gives the operand itself, not a bool: only a test of the
                # whole expression takes the operand's truth value.
                pending.append((child, truth, None))
            else:
                pending.append((child, id(child) in tests, None))


# ---- the rule ------------------------------------------------------------------------------------

class NoneModuleTest(Rule):
    __doc__ = __doc__
    name = "none-module-test"
    # --rule all order: after nested-function (5), typeerror-fallback (7) and modulelist-iter
    # (10), whose methods and loops it then reads as written; before constant-flag (12): an
    # ``is None`` test is decided by the attribute's type, so a submodule-or-None test that
    # chooses a return type needs no constant once rewritten; before lift-branch (70), which
    # never lifts a value that may be None or a submodule.
    order = 11
    targets = ("torchscript", "onnx")
    off_target = ("torch.export runs the Python truth test of the attribute (measured: a "
                  "submodule-or-None test exports both configurations with exact parity): the "
                  "original exports as it is")
    CODES = (
        Code("TSF116", "none-attribute-test", "attribute that may be None tested or compared",
             "The attribute is None for some configurations, and TorchScript types it "
             "NoneType: `self.mode == 'a'` fails with the misleading \"aten::eq ... found type "
             "'NoneType'\", `if self.mode:` with \"Could not cast value of type NoneType to "
             "bool\" (a submodule has no truth value either: \"Could not cast value of type "
             "__torch__...Conv1d to bool\"). Test `self.mode is not None` first, or store a "
             "non-None default (e.g. ''). `none-module-test` rewrites `if self.shortcut:` to "
             "`if self.shortcut is not None:` where __init__ stores None or a submodule that "
             "is always true (no __len__/__bool__), and says why where it does not (an "
             "nn.Sequential can be empty, a Tensor's truth depends on its data, 0 and '' are "
             "false)."),
    )
    summary = ("`if self.shortcut:` on an attribute __init__ sets to None or a submodule "
               "becomes `if self.shortcut is not None:` (refused for containers that can be "
               "empty, Tensors and settings)")

    VALID = (
        # A Sequential can be empty (it defines __len__): `is not None` would differ.
        """
from torch import nn
class M(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.extra = None
        if depth >= 0:
            self.extra = nn.Sequential(*[nn.ReLU() for _ in range(depth)])
    def forward(self, x):
        if self.extra:
            x = self.extra(x)
        return x
""",
        # A Tensor's truth depends on its data.
        """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(4)) if bias else None
    def forward(self, x):
        if self.bias:
            x = x + self.bias
        return x
""",
        # `self.proj or self.fallback` is a value, not a truth test.
        """
from torch import nn
class M(nn.Module):
    def __init__(self, project):
        super().__init__()
        self.proj = nn.Linear(4, 4) if project else None
        self.fallback = nn.Identity()
    def forward(self, x):
        layer = self.proj or self.fallback
        return layer(x)
""",
    )
    INVALID = (
        Example(
            """
from typing import Optional
import torch
from torch import nn
class Conv1d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)
    def forward(self, x):
        return self.conv(x)
class SERes2NetBlock(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.tdnn = Conv1d(in_channels, out_channels, 1)
        self.shortcut = None
        if in_channels != out_channels:
            self.shortcut = Conv1d(in_channels, out_channels, 1)
        self.norm = nn.BatchNorm1d(out_channels) if out_channels > 1 else None
    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        residual = x
        if self.shortcut:
            residual = self.shortcut(x)
        x = self.tdnn(x)
        x = x if not self.norm else self.norm(x)
        return x + residual
""",
            """
from typing import Optional
import torch
from torch import nn
class Conv1d(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size)
    def forward(self, x):
        return self.conv(x)
class SERes2NetBlock(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.tdnn = Conv1d(in_channels, out_channels, 1)
        self.shortcut = None
        if in_channels != out_channels:
            self.shortcut = Conv1d(in_channels, out_channels, 1)
        self.norm = nn.BatchNorm1d(out_channels) if out_channels > 1 else None
    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        residual = x
        if self.shortcut is not None:
            residual = self.shortcut(x)
        x = self.tdnn(x)
        x = x if self.norm is None else self.norm(x)
        return x + residual
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True

        def may_hold(value: ast.expr | None) -> bool:
            """May ``value`` be None or an instance (what _kinds calls _NONE, _MODULE or
            _FALSY): None, a call, a parameter that defaults to None, or a choice of those."""
            if isinstance(value, ast.IfExp):
                return may_hold(value.body) or may_hold(value.orelse)
            return (isinstance(value, ast.Call)
                    or (isinstance(value, ast.Constant) and value.value is None)
                    or (isinstance(value, ast.Name) and value.id in file.none_default_names))

        # A truth test of ``self.<attr>`` in a compiled method (what _truth_sites looks for)
        # where the file assigns the attribute a value that may be None or a submodule: the
        # values the rule judges are assignments in the methods of the class's family.
        values = file.attribute_values
        for _, func in file.compiled:
            self_var = file.self_var(func)
            if any(isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name)
                   and test.value.id == self_var
                   and any(may_hold(value) for value in values.get(test.attr, ()))
                   for test in file.tests(func)):
                return True
        return False

    def prepare(self, module: cst.Module) -> None:
        self._truthiness: _Truthiness | None = None

    def _classes(self) -> _Truthiness:
        if self._truthiness is None:
            text = self.source_text or self.source_module.code
            filename = self.context.filename
            self._truthiness = _Truthiness(ast.parse(text), Path(filename) if filename else None)
        return self._truthiness

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        replacements: dict[int, cst.BaseExpression] = {}
        parts: list[str] = []
        verdicts: dict[str, tuple[list[_Value], str]] = {}
        for method, func in facts.compiled_methods():
            self_var = self_name(func)
            if self_var is None:
                continue
            skipped = facts.never_compiled(method)
            for site in _truth_sites(func, self_var):
                if id(site.node) in skipped:
                    continue
                if site.attr not in verdicts:
                    verdicts[site.attr] = self._values(cls, site.attr)
                values, problem = verdicts[site.attr]
                if not any(v.kind in (_NONE, _MODULE, _FALSY) for v in values):
                    continue        # a setting, a tensor, unknown: not this rule's attribute
                maybe_none = any(v.kind == _NONE for v in values)
                held = "may be None" if maybe_none else "holds a submodule"
                message = f"'self.{site.attr}' {held} and is tested for truth in {method}()"

                why = problem or _refusal(site.attr, values)
                if why:
                    self.skip(cls.name.value, site.node, f"{message}: {why}", code="TSF116",
                              message=message)
                    continue
                self.fixed(site.node, "TSF116", message)
                old: cst.BaseExpression = site.negated or site.node
                replacements[id(old)] = _is_none_test(site)
                classes = sorted({v.shown for v in values if v.kind == _MODULE})
                parts.append(f"line {self.line_of(site.node)}: `{short_source(old)}` -> "
                             f"`{short_source(replacements[id(old)])}` (self.{site.attr} is "
                             f"{'None or ' if maybe_none else ''}{', '.join(classes)}: always "
                             "true when not None)")
        if not replacements:
            return cls
        rewritten = cls.visit(_Replace(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts)))
        return rewritten

    def _family(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """``cls``, its bases in the file, and the file's classes that derive from it: every
        ``__init__`` that may store the attribute ``cls``'s compiled methods read."""
        facts = self.facts
        derived = [other for other in facts.classes.values()
                   if other is not cls and cls in facts.local_bases(other)]
        return [cls, *facts.local_bases(cls), *derived]

    def _values(self, cls: cst.ClassDef, attr: str) -> tuple[list[_Value], str]:
        """The values the class's family stores in ``self.<attr>`` (every method: a value a
        later method stores makes the attribute this rule's too), and why they cannot all be
        known ("" when they can: ``__init__`` alone stores them, each visibly)."""
        values: list[_Value] = []
        problem = ""
        for member in self._family(cls):
            facts = self.class_facts(member)
            if attr in facts.registered and not problem:
                problem = (f"{member.name.value}.__init__ registers self.{attr} "
                           "(register_buffer, register_parameter or add_module): its values "
                           "are not followed")
            for assigned in facts.assignments:
                if assigned.attr != attr:
                    continue
                if assigned.value is not None:
                    values.extend(self._kinds(facts, assigned.value))
                if problem:
                    continue
                if assigned.method != "__init__":
                    problem = (f"self.{attr} is assigned in {member.name.value}."
                               f"{assigned.method}() too: its value after construction is not "
                               "known")
                elif assigned.value is None:
                    problem = (f"self.{attr} is assigned by unpacking, setattr or an augmented "
                               f"assignment in {member.name.value}.__init__: its value is not "
                               "known")
        return values, problem

    def _kinds(self, facts: ClassFacts, value: cst.BaseExpression) -> list[_Value]:
        if isinstance(value, cst.IfExp):
            return self._kinds(facts, value.body) + self._kinds(facts, value.orelse)
        line = self.line_of(value) if self._in_current_class(value) else 0
        shown = short_source(value)
        if isinstance(value, cst.Name) and value.value == "None":
            return [_Value(_NONE, shown, line)]
        if literal_type(value) is not None:
            return [_Value(_SETTING, shown, line, literal_type(value) or "")]
        init = facts.init
        if isinstance(value, cst.Name) and init is not None:
            param = parameters_of(init).get(value.value)
            if param is not None:
                passed = _Value(_UNKNOWN, shown, line, f"`{shown}` is a constructor argument: "
                                "what a caller passes is not known")
                none_default = isinstance(param.default, cst.Name) and \
                    param.default.value == "None"
                return [_Value(_NONE, shown, line), passed] if none_default else [passed]
        if not isinstance(value, cst.Call):
            return [_Value(_UNKNOWN, shown, line, f"`{shown}` is not a class call: its type is "
                           "not known")]
        full = qualified_name(value.func, facts.imports) or ""
        name = full.rpartition(".")[2]
        if full.startswith("torch.") and (
                name in _TORCH_NN_TENSORS or name.endswith("Tensor")
                or (full.count(".") == 1 and name[:1].islower())):
            return [_Value(_TENSOR, shown, line)]
        written = _dotted(value.func)
        aliased = (_class_alias_values(init, written) if init is not None and written
                   is not None and "." not in written else None)
        if aliased:
            # `klass = nn.Conv1d` ... `klass = nn.Conv2d` in __init__, then `klass(...)`
            # (demucs' HEncLayer): the call builds one of the classes the local names.
            return [kind for alias in aliased
                    for kind in self._kinds(facts, value.with_changes(func=alias))]
        if written is not None and init is not None and \
                written.partition(".")[0] in _init_names(init):
            return [_Value(_UNKNOWN, shown, line, f"`{shown}` is built from "
                           f"`{written.partition('.')[0]}`, a constructor argument or local of "
                           "__init__: its class is not known")]
        if written is None or not name[:1].isupper():
            return [_Value(_UNKNOWN, shown, line, f"`{shown}` is not a call of a named class: "
                           "what it returns is not known")]
        problem = (_torch_problem(full) if full.startswith("torch.")
                   else self._classes().problem(written))
        return [_Value(_FALSY if problem else _MODULE, written, line, problem)]

    def _in_current_class(self, node: cst.CSTNode) -> bool:
        return self._current_class is not None and contains(self._current_class, node)


def _dotted(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = _dotted(expr.value)
        return f"{base}.{expr.attr.value}" if base else None
    return None


def _class_alias_values(init: cst.FunctionDef, local: str) -> list[cst.BaseExpression] | None:
    """The classes a local of ``__init__`` is bound to, when every binding of it is a plain
    ``local = <dotted class name>`` (a capitalized last part) and it is no parameter; else
    None."""
    if local in parameters_of(init):
        return None
    values: list[cst.BaseExpression] = []
    for node in find_all(init.body, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.AsName, cst.NamedExpr):
        target = node.name if isinstance(node, cst.AsName) else node.target
        if local not in {n.value for n in find_all(target, cst.Name)}:
            continue
        if not (isinstance(node, cst.AssignTarget) and isinstance(target, cst.Name)):
            return None
        values.append(target)
    targets = {id(v) for v in values}
    assigned = [a.value for a in find_all(init.body, cst.Assign)
                if any(id(t.target) in targets for t in a.targets)]
    if not assigned or len(assigned) != len(values) or not all(
            (_dotted(v) or "").rpartition(".")[2][:1].isupper() for v in assigned):
        return None
    return assigned


def _init_names(init: cst.FunctionDef) -> set[str]:
    """Names ``__init__`` binds: its parameters and locals (a class call through one of them
    builds whatever the caller passed)."""
    bound = set(parameters_of(init))
    for node in find_all(init.body, cst.AssignTarget, cst.AnnAssign, cst.For, cst.AsName):
        target = node.name if isinstance(node, cst.AsName) else node.target
        bound.update(n.value for n in find_all(target, cst.Name))
    return bound


def _refusal(attr: str, values: list[_Value]) -> str:
    """Why ``is not None`` would not give the truth value the original takes ("" when it
    would)."""
    def where(value: _Value) -> str:
        return f"`{value.shown}`" + (f", line {value.line}" if value.line else "")

    for value in values:
        if value.kind == _TENSOR:
            return (f"self.{attr} holds a Tensor in some configurations ({where(value)}): a "
                    "Tensor's truth value depends on its data (an error for more than one "
                    "element), which `is not None` does not reproduce")
    for value in values:
        if value.kind == _SETTING:
            return (f"self.{attr} holds {'an' if value.why == 'int' else 'a'} {value.why} "
                    f"setting in some configurations ({where(value)}): 0, 0.0, '' and False "
                    "are false but not None, so `is not None` would differ; store a non-None "
                    "default instead of None, or test `is not None` by hand where that is meant")
    for value in values:
        if value.kind == _FALSY:
            return f"self.{attr} may hold `{value.shown}`: {value.why}"
        if value.kind == _UNKNOWN:
            return f"self.{attr} may hold {where(value)}: {value.why}"
    return ""


def _is_none_test(site: _Site) -> cst.BaseExpression:
    """``self.x is not None`` for the attribute, ``self.x is None`` for ``not self.x``; the
    parentheses of the replaced expression stay."""
    attr = site.node.with_changes(lpar=[], rpar=[])
    if site.negated is not None:
        return cst.Comparison(attr, [cst.ComparisonTarget(cst.Is(), cst.Name("None"))],
                              lpar=site.negated.lpar, rpar=site.negated.rpar)
    return cst.Comparison(attr, [cst.ComparisonTarget(cst.IsNot(), cst.Name("None"))],
                          lpar=site.node.lpar, rpar=site.node.rpar)


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.BaseExpression]) -> None:
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode,  # type: ignore[override]
                 updated_node: cst.CSTNode) -> cst.CSTNode:
        new = self.replacements.get(id(original_node))
        return new if new is not None else updated_node
