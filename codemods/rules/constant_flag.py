"""``constant-flag``: a constructor setting that decides a compiled method's return type is
made a TorchScript constant, so TorchScript compiles only the path the instance takes.

What it does
    For a compiled method whose returns have types TorchScript cannot merge (TSF118:
    ``return res_out`` on one path, ``return res_out, skip_out`` on another), where the test
    that separates the two returns is a truth test of settings (``if not self.skip_out_chan:``,
    ``self.a and not self.b``), each setting read there is made a constant:

    * a setting ``__init__`` stores as a bool (a ``True``/``False`` default or a ``bool``
      annotation of the constructor parameter, a bool literal, a comparison) is named in the
      class's ``__constants__``;
    * any other setting (an int channel count that 0 or None turns off, a str, a float) gets a
      bool copy stored right after it, ``self.has_skip_out_chan = bool(self.skip_out_chan)``,
      named in ``__constants__``, and every truth test of the setting in the compiled methods
      (``if``, ``while``, ``x if ... else y``, ``not``, ``and``/``or`` in those) reads the copy.

    ``__constants__`` is created after the class docstring (with the names a base class of the
    file lists, which a list here replaces) or the class's own list, tuple or set literal is
    extended. A class of the file that builds a fixed class in ``__init__`` and unpacks a
    result in a branch chosen by a setting of its own (asteroid's ``TDConvNet``: ``if
    self.skip_chan: residual, skip = tcn_out``) gets the same treatment for that setting: the
    other branch would unpack, or use as a tensor, a value of the wrong type.

Why it breaks export
    TorchScript compiles both branches of an ``if`` on a plain module attribute, so the
    method's returns must merge: "Previous return statement returned a value of type Tensor
    but this return statement returns a value of type Tuple[Tensor, Tensor]". An ``if`` whose
    test is a constant bool is decided when the instance is scripted, and only the chosen branch
    is compiled (the branch that reads a submodule the instance lacks is not compiled either).
    Measured on torch 2.13: only a bool constant is decided; an int, float, str or None
    constant in a truth test is not (``if not self.skip_out_chan:`` with the constant 128 still
    fails; with None it fails with "Could not cast value of type NoneType to bool"), which is
    why other settings get a bool copy. ``__constants__`` accepts bool, int, float, str, None
    and tuples or lists of them. ``self.x is None`` needs nothing: it is decided by the
    attribute's type.

Example
    Before::

        class Conv1DBlock(nn.Module):
            def __init__(self, in_chan, skip_out_chan):
                super().__init__()
                self.skip_out_chan = skip_out_chan
                self.res_conv = nn.Conv1d(in_chan, in_chan, 1)
                if skip_out_chan:
                    self.skip_conv = nn.Conv1d(in_chan, skip_out_chan, 1)

            def forward(self, x):
                res_out = self.res_conv(x)
                if not self.skip_out_chan:
                    return res_out
                return res_out, self.skip_conv(x)

    After::

        class Conv1DBlock(nn.Module):
            # TorchScript compiles only the branch a constant bool test takes.
            __constants__ = ["has_skip_out_chan"]

            def __init__(self, in_chan, skip_out_chan):
                super().__init__()
                self.skip_out_chan = skip_out_chan
                self.has_skip_out_chan = bool(self.skip_out_chan)
                ...

            def forward(self, x):
                res_out = self.res_conv(x)
                if not self.has_skip_out_chan:
                    return res_out
                return res_out, self.skip_conv(x)

Fix safety
    Eager behaviour is unchanged: ``nn.Module`` ignores ``__constants__``, and the bool copy is
    the truth value the test took. The module gains the plain attribute (no parameter, buffer or
    state-dict entry). The scripted module bakes the setting per instance: a flag that decides
    the submodules and the return type cannot be varied on one scripted artifact (build one per
    configuration), and changing the attribute after construction no longer changes what the
    copy says (the rule requires that nothing in the file assigns it outside ``__init__``). The
    rewrite is validated like every other. Refused, with the reason (``tsfix check`` shows it on
    the TSF118 line): returns not separated by a test, or separated by a test that reads
    something other than settings (a tensor, a local, a comparison); a setting assigned outside
    ``__init__``, more than once, or by unpacking; a setting holding a tensor, a submodule, a
    list or dict (a bool copy would miss in-place changes); an existing ``__constants__`` that
    is not a literal of strings; a class with a base from another file (its ``__constants__``
    would be hidden by a list here). Run before ``lift-branch`` (order 70), which leaves the
    settings named in ``__constants__`` alone: lifting one into a forward argument would make
    the test undecided again.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    AttrAssignment,
    code_of,
    find_all,
    parameters_of,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.type_flow import (
    ReturnConflict,
    constant_attributes,
    type_flow,
    with_article,
)
from tsfix.codemods.rules._class_lists import appended, own_list, with_list
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_LIST = "__constants__"
_COMMENT = "# TorchScript compiles only the branch a constant bool test takes."
_NOTE = ("the scripted module bakes {flags} per instance (TorchScript compiles only the "
         "branch the constant takes): it decides the submodules and the return type, so one "
         "scripted artifact cannot serve another value; script one per configuration")
# Kinds of values a bool copy cannot follow (in-place changes) or that are not settings.
_NOT_SETTINGS = ("Tensor", "List[", "Dict[", "Optional[Tensor]")


@dataclass
class _Flag:
    """A setting made constant: ``attr`` itself when it is a bool, else its bool copy
    ``derived``, stored after ``assignment``."""

    attr: str
    assignment: AttrAssignment
    derived: str | None = None

    @property
    def constant(self) -> str:
        return self.derived or self.attr


@dataclass
class _Plan:
    flags: dict[str, _Flag] = field(default_factory=dict)
    # (node, message): the TSF118 returns the plan fixes
    fixed: list[tuple[cst.CSTNode, str]] = field(default_factory=list)
    # (node, reason, message): what it leaves
    refused: list[tuple[cst.CSTNode, str, str]] = field(default_factory=list)
    callee: str | None = None           # the fixed class whose result this class unpacks


def _truth_reads(test: cst.BaseExpression, self_var: str) -> list[cst.Attribute]:
    """The ``self.<attr>`` nodes read as truth values in ``test`` (alone, under ``not``, as an
    operand of ``and``/``or``)."""
    if isinstance(test, cst.Attribute) and self_attr(test, self_var) is not None:
        return [test]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _truth_reads(test.expression, self_var)
    if isinstance(test, cst.BooleanOperation):
        return [*_truth_reads(test.left, self_var), *_truth_reads(test.right, self_var)]
    return []


def _is_none_test(test: cst.BaseExpression, self_var: str) -> bool:
    """``self.x is None`` / ``is not None``: decided by the attribute's type, no constant
    needed."""
    return (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Is | cst.IsNot)
            and self_attr(test.left, self_var) is not None
            and isinstance(test.comparisons[0].comparator, cst.Name)
            and test.comparisons[0].comparator.value == "None")


def _setting_test(test: cst.BaseExpression, self_var: str) -> list[str] | None:
    """The settings a test reads when it is made only of truth tests of ``self.<attr>``,
    ``not``, ``and``/``or`` and ``self.<attr> is (not) None``; None when it reads anything
    else."""
    if isinstance(test, cst.Attribute):
        attr = self_attr(test, self_var)
        return [attr] if attr is not None else None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _setting_test(test.expression, self_var)
    if isinstance(test, cst.BooleanOperation):
        left = _setting_test(test.left, self_var)
        right = _setting_test(test.right, self_var)
        return None if left is None or right is None else [*left, *right]
    if _is_none_test(test, self_var):
        return []
    return None


def _ancestor_ifs(root: cst.CSTNode, node: cst.CSTNode) -> list[cst.If] | None:
    """The ``if`` statements (``elif`` included) enclosing ``node`` inside ``root``, outermost
    first; None when ``node`` is not in ``root``."""
    if root is node:
        return []
    for child in root.children:
        found = _ancestor_ifs(child, node)
        if found is not None:
            return [root, *found] if isinstance(root, cst.If) else found
    return None


def _separating_ifs(func: cst.FunctionDef, first: cst.CSTNode,
                    later: cst.CSTNode) -> list[cst.If]:
    """The tests that choose between two returns: the ``if`` statements enclosing exactly one
    of them."""
    first_ifs = _ancestor_ifs(func.body, first) or []
    later_ifs = _ancestor_ifs(func.body, later) or []
    shared = {id(node) for node in first_ifs} & {id(node) for node in later_ifs}
    return [node for node in [*first_ifs, *later_ifs] if id(node) not in shared]


def _bool_setting(facts: ClassFacts, assignment: AttrAssignment) -> bool:
    """Whether ``__init__`` stores a bool: a bool literal, a comparison or ``not``, ``bool()``,
    or a constructor parameter annotated ``bool`` or defaulting to True/False."""
    value = assignment.value
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        return True
    if isinstance(value, cst.Comparison) or (
            isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not)):
        return True
    if isinstance(value, cst.Call) and get_full_name_for_node(value.func) == "bool":
        return True
    if isinstance(value, cst.Name) and facts.init is not None:
        param = parameters_of(facts.init).get(value.value)
        if param is not None:
            if param.annotation is not None:
                return code_of(param.annotation.annotation) == "bool"
            default = param.default
            return isinstance(default, cst.Name) and default.value in ("True", "False")
    return facts.attributes.get(assignment.attr) == "bool"


def _copy_name(attr: str, taken: set[str]) -> str:
    """``skip_chan`` -> ``has_skip_chan`` (``_x`` -> ``_has_x``), not clashing with ``taken``."""
    stripped = attr.lstrip("_")
    name = f"{attr[:len(attr) - len(stripped)]}has_{stripped}"
    while name in taken:
        name += "_flag"
    return name


class _Rewrite(cst.CSTTransformer):
    """Truth reads of a setting -> its bool copy; the copy stored after the setting's
    assignment; a list literal replaced."""

    def __init__(self, reads: dict[int, str], after: dict[int, list[cst.SimpleStatementLine]],
                 replaced: tuple[cst.CSTNode, cst.CSTNode] | None) -> None:
        self.reads = reads
        self.after = after
        self.replaced = replaced

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute
                        ) -> cst.BaseExpression:
        name = self.reads.get(id(original))
        return updated.with_changes(attr=cst.Name(name)) if name is not None else updated

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        if not any(id(s) in self.after for s in original.body):
            return updated
        body: list[cst.BaseStatement] = []
        for before, now in zip(original.body, updated.body, strict=True):
            body.append(now)
            body.extend(self.after.get(id(before), []))
        return updated.with_changes(body=body)

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        if self.replaced is not None and original is self.replaced[0]:
            return self.replaced[1]
        return super().on_leave(original, updated)  # type: ignore[return-value]


class ConstantFlag(Rule):
    __doc__ = __doc__
    name = "constant-flag"
    # --rule all order: after typeerror-fallback (7) and modulelist-iter (10), before
    # lift-branch (70), which must see the settings named in __constants__ (lifting one into
    # an argument would make the test undecided again), and before annotate (100).
    order = 12
    targets = ("torchscript", "onnx")
    off_target = ("torch.export runs the Python code and takes the path the instance takes: "
                  "the original exports as it is")
    CODES = (
        Code("TSF118", "return-type-differs", "return statements of different types",
             "A compiled method has one return type: returning `out, skip` on one path and "
             "`out` on another (often by a constructor flag) fails (\"Previous return "
             "statement returned a value of type Tuple[Tensor, Tensor] but this return "
             "statement returns a value of type Tensor\"), as does an int on one path and a "
             "float on another, or a value other than the `-> T` annotation says. Where the "
             "returns are chosen by truth tests of settings set once in __init__, "
             "`constant-flag` names them (or a bool copy) in `__constants__`, so TorchScript "
             "compiles only the path each instance takes. By hand: declare a bool flag constant "
             "(`return_skip: torch.jit.Final[bool]` in the class body), or return one shape on "
             "every path (`return out, None` merges with `return out, skip` as Tuple[Tensor, "
             "Optional[Tensor]]). torch.export is not affected: it traces the path taken."),
    )
    summary = ("a constructor setting whose truth test chooses between returns of different "
               "types is named (or a bool copy of it) in __constants__, so TorchScript compiles "
               "only the configured path")

    VALID = (
        # One return type: nothing to do.
        """
import torch
class M(torch.nn.Module):
    def __init__(self, double=False):
        super().__init__()
        self.double = double
    def forward(self, x):
        if self.double:
            return x * 2
        return x
""",
        # Chosen by the data, not a setting: refused (check shows TSF118 with the reason).
        """
import torch
class M(torch.nn.Module):
    def forward(self, x):
        if x.dim() == 2:
            return x
        return x, x
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
class Block(nn.Module):
    def __init__(self, chan, skip_chan):
        super().__init__()
        self.skip_chan = skip_chan
        self.res = nn.Conv1d(chan, chan, 1)
        if skip_chan:
            self.skip = nn.Conv1d(chan, skip_chan, 1)
    def forward(self, x):
        res = self.res(x)
        if not self.skip_chan:
            return res
        return res, self.skip(x)
""",
            """
import torch
from torch import nn
class Block(nn.Module):
    # TorchScript compiles only the branch a constant bool test takes.
    __constants__ = ["has_skip_chan"]

    def __init__(self, chan, skip_chan):
        super().__init__()
        self.skip_chan = skip_chan
        self.has_skip_chan = bool(self.skip_chan)
        self.res = nn.Conv1d(chan, chan, 1)
        if skip_chan:
            self.skip = nn.Conv1d(chan, skip_chan, 1)
    def forward(self, x):
        res = self.res(x)
        if not self.has_skip_chan:
            return res
        return res, self.skip(x)
""",
        ),
        # A bool setting is named itself; an existing list is extended.
        Example(
            """
import torch
class M(torch.nn.Module):
    __constants__ = ["scale"]
    def __init__(self, return_both=False):
        super().__init__()
        self.scale = 2
        self.return_both = return_both
    def forward(self, x):
        y = x * self.scale
        if self.return_both:
            return y, x
        return y
""",
            """
import torch
class M(torch.nn.Module):
    __constants__ = ["scale", "return_both"]
    def __init__(self, return_both=False):
        super().__init__()
        self.scale = 2
        self.return_both = return_both
    def forward(self, x):
        y = x * self.scale
        if self.return_both:
            return y, x
        return y
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        # Two returns in one method of a class, one of them a tuple.
        for node in file.tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    returns = [r for r in ast.walk(item) if isinstance(r, ast.Return)]
                    if len(returns) > 1:
                        return True
        return False

    def prepare(self, module: cst.Module) -> None:
        self.plans: dict[str, _Plan] = {}
        classes = [c for c in self.facts.classes.values() if self.facts.is_module_class(c)]
        for cls in classes:
            plan = self._returns_plan(cls)
            if plan.flags or plan.refused:
                self.plans[cls.name.value] = plan
        # Classes that unpack a fixed class's result under a test of their own setting.
        grown = True
        while grown:
            grown = False
            fixed = {name for name, plan in self.plans.items() if plan.flags}
            for cls in classes:
                name = cls.name.value
                if name in self.plans:
                    continue
                caller = self._caller_plan(cls, fixed)
                if caller is not None:
                    self.plans[name] = caller
                    grown = grown or bool(caller.flags)

    # ---- analysis ------------------------------------------------------------------------

    def _returns_plan(self, cls: cst.ClassDef) -> _Plan:
        facts = self.class_facts(cls)
        plan = _Plan()
        for method in facts.compiled:
            func = facts.methods[method]
            self_var = self_name(func)
            conflicts = [c for c in type_flow(facts, method).returns if not c.annotated]
            for conflict in conflicts:
                message = (f"{method}() returns {with_article(conflict.returned)} here and "
                           f"{with_article(conflict.expected)} on an earlier return")
                if self_var is None:
                    continue
                reason, attrs = self._chosen_by(func, conflict, self_var)
                if reason is None:
                    reason = self._settle(facts, attrs, plan)
                if reason is not None:
                    plan.refused.append((conflict.node, reason, message))
                else:
                    plan.fixed.append((conflict.node, message))
        if plan.refused:
            # A class is fixed whole or not at all: a constant for one return alone still
            # fails on the other.
            plan.flags.clear()
            plan.fixed.clear()
        return plan

    def _chosen_by(self, func: cst.FunctionDef, conflict: ReturnConflict,
                   self_var: str) -> tuple[str | None, list[str]]:
        tests = _separating_ifs(func, conflict.earlier, conflict.node)
        if not tests:
            return ("the returns of different types are not chosen by a test (return one "
                    "shape on every path)"), []
        attrs: list[str] = []
        for node in tests:
            read = _setting_test(node.test, self_var)
            if read is None:
                return (f"the returns are chosen by `{code_of(node.test)}`, which reads more "
                        "than settings of the module (return one shape on every path)"), []
            attrs.extend(a for a in read if a not in attrs)
        if not attrs:
            return ("the returns are chosen by `is None` tests only, which TorchScript decides "
                    "by type; the returns differ for another reason"), []
        return None, attrs

    def _settle(self, facts: ClassFacts, attrs: list[str], plan: _Plan) -> str | None:
        """Add ``attrs`` to ``plan`` as constants, or say why one cannot be."""
        constants = constant_attributes(facts.cls)
        settled: list[_Flag] = []
        for attr in attrs:
            if attr in plan.flags:
                continue
            assignments = [a for a in facts.assignments if a.attr == attr]
            outside = [a for a in assignments if a.method != "__init__"]
            if outside:
                return (f"self.{attr} is assigned in {outside[0].method}() too: a constant is "
                        "set once, in __init__")
            if len(assignments) != 1 or assignments[0].value is None:
                return (f"self.{attr} is not set by exactly one plain assignment in __init__ "
                        f"({len(assignments)} found)")
            if attr in facts.submodules or attr in facts.registered or attr in facts.layers:
                return f"self.{attr} is a submodule, parameter or buffer, not a setting"
            kind = facts.attributes.get(attr) or facts.maybe_none.get(attr) or ""
            if kind.startswith(_NOT_SETTINGS) or attr in facts.containers:
                return (f"self.{attr} holds a {kind or 'container'}, not a setting "
                        "TorchScript can hold as a constant")
            if attr in constants:
                return (f"self.{attr} is a constant already and not a bool: TorchScript "
                        "decides only a bool constant's test")
            flag = _Flag(attr, assignments[0])
            if not _bool_setting(facts, assignments[0]):
                taken = ({a.attr for a in facts.assignments} | set(facts.methods)
                         | {f.derived for f in plan.flags.values() if f.derived})
                flag.derived = _copy_name(attr, taken)
            settled.append(flag)
        for flag in settled:
            plan.flags[flag.attr] = flag
        return None

    def _caller_plan(self, cls: cst.ClassDef, fixed: set[str]) -> _Plan | None:
        facts = self.class_facts(cls)
        if facts.init is None:
            return None
        built = {get_full_name_for_node(call.func) for call in find_all(facts.init.body, cst.Call)}
        callee = next((name for name in sorted(fixed) if name in built), None)
        if callee is None:
            return None
        plan = _Plan(callee=callee)
        for method, func in facts.compiled_methods():
            self_var = self_name(func)
            if self_var is None:
                continue
            for node in find_all(func.body, cst.If):
                if not facts.is_compiled(method, node):
                    continue
                attrs = _setting_test(node.test, self_var)
                if not attrs or not any(_unpacks(branch) for branch in _branches(node)):
                    continue
                message = (f"{method}() unpacks a {callee} result under `{code_of(node.test)}`, "
                           f"and {callee} returns a tuple or not by a setting")
                reason = self._settle(facts, attrs, plan)
                if reason is not None:
                    plan.refused.append((node, reason, message))
                    plan.flags.clear()
                    return plan
                plan.fixed.append((node, message))
        return plan if plan.flags else None

    # ---- rewrite -------------------------------------------------------------------------

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        name = cls.name.value
        plan = self.plans.get(name)
        if plan is None:
            return cls
        code = "TSF118" if plan.callee is None else None
        for node, reason, message in plan.refused:
            self.skip(name, node, reason, code=code, message=message)
        if not plan.flags:
            return cls
        wanted = [flag.constant for flag in plan.flags.values()]
        existing = own_list(cls, _LIST, sets=True)
        refusal = None
        if existing is not None and existing.value is None:
            refusal = existing.problem
        elif existing is None:
            refusal = self._foreign_base(cls)
        if refusal is not None:
            for node, message in plan.fixed:
                self.skip(name, node, f"{', '.join(f'self.{f}' for f in plan.flags)} not made "
                          f"constant: {refusal}", code=code, message=message)
            return cls
        replaced: tuple[cst.CSTNode, cst.CSTNode] | None = None
        if existing is not None:
            assert existing.value is not None
            missing = [n for n in wanted if n not in existing.names]
            if missing:
                replaced = (existing.value, appended(existing.value, missing))
        facts = self.class_facts(cls)
        reads: dict[int, str] = {}
        after: dict[int, list[cst.SimpleStatementLine]] = {}
        for flag in plan.flags.values():
            if flag.derived is None:
                continue
            init_self = self_name(facts.init) if facts.init is not None else None
            copy = cst.parse_statement(
                f"{init_self}.{flag.derived} = bool({init_self}.{flag.attr})\n")
            assert isinstance(copy, cst.SimpleStatementLine)
            after.setdefault(id(flag.assignment.statement), []).append(copy)
            for node in self._truth_sites(facts, flag.attr):
                reads[id(node)] = flag.derived
        rewritten = cls.visit(_Rewrite(reads, after, replaced))
        assert isinstance(rewritten, cst.ClassDef)
        if existing is None:
            inherited = self._base_names(cls)
            rewritten = with_list(rewritten, _LIST,
                                  [*inherited, *[n for n in wanted if n not in inherited]],
                                  _COMMENT)
        for node, message in plan.fixed:
            if code is not None:
                self.fixed(node, code, message)
        described = ", ".join(
            f"self.{f.attr}" if f.derived is None else f"self.{f.attr} (as self.{f.derived})"
            for f in plan.flags.values())
        why = ("its returns differ by it" if plan.callee is None
               else f"it unpacks {plan.callee}'s result by it")
        self.changes.append(ClassChange(
            self.name, name, self.span_of(cls),
            f"{described} named in {_LIST}: {why}, and TorchScript compiles only the branch "
            "a constant bool test takes",
            notes=[_NOTE.format(flags=described)]))
        return rewritten

    def _truth_sites(self, facts: ClassFacts, attr: str) -> Iterator[cst.Attribute]:
        """Every truth read of ``self.<attr>`` in the tests of the compiled methods."""
        for method, func in facts.compiled_methods():
            self_var = self_name(func)
            if self_var is None:
                continue
            for node in find_all(func.body, cst.If, cst.IfExp, cst.While):
                if not facts.is_compiled(method, node):
                    continue
                for read in _truth_reads(node.test, self_var):
                    if self_attr(read, self_var) == attr:
                        yield read

    def _foreign_base(self, cls: cst.ClassDef) -> str | None:
        for current in [cls, *self.facts.local_bases(cls)]:
            for base in self.facts.bases(current):
                if base in self.facts.classes or base.split(".")[0] in ("torch", "nn",
                                                                        "object", ""):
                    continue
                return (f"its base {base} is defined in another file: it may declare its own "
                        f"{_LIST}, which a list here would hide")
        return None

    def _base_names(self, cls: cst.ClassDef) -> list[str]:
        for base in self.facts.local_bases(cls):
            found = own_list(base, _LIST, sets=True)
            if found is not None:
                return list(found.names)
        return []


def _branches(node: cst.If) -> list[cst.BaseSuite]:
    found: list[cst.BaseSuite] = [node.body]
    if isinstance(node.orelse, cst.Else):
        found.append(node.orelse.body)
    return found


def _unpacks(block: cst.BaseSuite) -> bool:
    """Whether ``block`` (not its nested blocks' ``if``s) unpacks a value into a tuple of
    names (``residual, skip = tcn_out``)."""
    return any(isinstance(target.target, cst.Tuple | cst.List)
               and isinstance(assign.value, cst.Name | cst.Call | cst.Subscript)
               for assign in find_all(block, cst.Assign) for target in assign.targets)
