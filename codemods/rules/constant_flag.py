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

    The same is done for an attribute ``__init__`` builds only under a test (``if pool_type ==
    'avg': self.avg_pool = ...``, or registers there: ``self.register_buffer('mask', m)``, also
    per branch of an ``elif`` chain or with no ``else``) and
    the compiled methods read under a test of settings (TSF231): the nearest enclosing ``if``
    (or ``x if t else y``) whose test reads only settings is made constant. A truth test of
    settings (``if self.use_bn:``, ``not``, ``and``/``or``, ``is None``) as above; any other
    test of settings -- ``==``, ``!=``, ``in``, ``<`` with literals or other settings, mixed
    with those -- by a bool copy of the whole test stored after the last setting it reads,
    ``self.pool_type_is_avg = self.pool_type == "avg"`` (``bool(...)`` around a test that is
    not a bool by itself; named after the comparison, else ``has_<attribute>``), named in
    ``__constants__`` and read by every compiled test written the same. A test made only of
    ``is None`` comparisons needs nothing (decided by the attribute's type). An attribute
    ``__init__`` builds only past an early ``return`` (``if not cat_dims: self.skip = True;
    return``) counts as built under a test, and a read past an ``if`` without ``else`` whose
    body ends in ``return`` or ``raise`` (``if self.skip: return x``) as read under that test
    (pytorch-tabnet's ``EmbeddingGenerator``); a bool setting may be assigned once per branch
    there (``self.skip = True`` / ``False``). So is a module ``__init__`` sets to None in some
    configurations (``self.context_norm = nn.LayerNorm(d) if cross_attend else None``, or an
    ``if``/``else``) when every compiled read of it is under a test of settings (vit-pytorch's
    ``if self.cross_attend: context = self.context_norm(context)``: "cannot call a value of
    type 'NoneType'"); one read under ``is not None``, or outside any test, and it is left
    alone (that code already scripts, or no constant would keep the read uncompiled).

    The same again for a local bound in one branch of a compiled ``if`` whose test reads only
    settings and read by a later statement of the same block under a test of the same side
    (TSF242; ``if self.freq: B, C, F, T = y.shape`` ... ``if self.freq: y = y.view(B, F, C,
    T)``, also ``if not self.freq:`` ... ``else:``, or a later ``if self.freq and i < n:``,
    whose branch TorchScript skips when the constant is False): those tests (the setting's
    operand of such an ``and``) are made constant as above.

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
    attribute's type. For the same reason an attribute built only for some configurations
    fails every instance that lacks it ("Module 'Pool' has no attribute 'max_pool'"), unless
    the test that guards its read is a constant bool (measured: scripts for every
    configuration, and survives ``torch.jit.save``/``load``). A local bound under one test of a
    setting and read under a later test of it fails the same way, on the path Python never
    takes: "B is not defined in the false branch" (or "true branch" when it is bound in the
    ``else``), pointing at the first test; with the setting a constant bool it scripts
    (measured on a demucs-style encoder layer: parity for every configuration).
    ``torch.export`` runs the Python code and takes the instance's path, so the original
    exports as it is.

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
    ``__init__``, more than once (unless each assignment stores a bool and the setting is
    named as it is), or by unpacking; a setting holding a tensor, a submodule, a
    list or dict (a bool copy would miss in-place changes); an existing ``__constants__`` that
    is not a literal of strings; a class with a base from another file (its ``__constants__``
    would be hidden by a list here). For a guarded attribute (TSF231), also refused: a read
    outside any test of settings, or under a test that reads something else (a tensor, a
    local, a call), and a setting the copy reads that ``__init__`` sets inside a block; the
    class is fixed whole or not at all (one test left undecided still fails). For a local
    bound under a test (TSF242), also refused: a read of it under no test of the side that
    binds it, or under another test of settings (a constant does not make it bound there),
    also a read in a test's own operand (``if self.hybrid and i >= offset:``: TorchScript
    compiles the right operand of ``and`` even when the left one is a constant False, while
    it skips the branch of such a test), whole or not at all too; a local bound before the
    test, or read only after a statement that binds it again, is no such site. Run before
    ``lift-branch`` (order 70), which leaves the settings named in ``__constants__`` alone:
    lifting one into a forward argument would make the test undecided again.
"""

from __future__ import annotations

import ast
import re
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.statements import definitely_assigned
from tsfix.codemods.facts.syntax import (
    AttrAssignment,
    bound_names,
    children,
    code_of,
    contains,
    find_all,
    literal_type,
    parameters_of,
    parent_map,
    self_attr,
    self_name,
    target_names,
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
_GUARD_CODE = "TSF231"
_NAME_CODE = "TSF242"
_COMMENT = "# TorchScript compiles only the branch a constant bool test takes."
_NOTE = ("the scripted module bakes {flags} per instance (TorchScript compiles only the "
         "branch the constant takes): the code compiled for one value (its submodules, "
         "return type, locals) does not compile for another, so one scripted artifact cannot "
         "serve another value; script one per configuration")
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
class _Copy:
    """A bool copy of a whole test (``self.has_avg_pool = self.pool_type == 'avg'``), stored
    after ``after`` (the last ``__init__`` statement setting what it reads); ``tests`` are the
    compiled tests that read it instead."""

    name: str
    expression: cst.BaseExpression
    after: cst.CSTNode
    # (test, the self of the method holding it)
    tests: list[tuple[cst.BaseExpression, str]] = field(default_factory=list)


@dataclass
class _Guard:
    """A compiled read of ``self.<attr>``, which ``__init__`` builds only under ``chooser``,
    reported at ``site`` (the test that guards it, or the read itself)."""

    site: cst.CSTNode
    attr: str
    chooser: cst.CSTNode
    test: cst.BaseExpression | None
    none: bool = False          # __init__ sets it to None in some configurations


@dataclass
class _BranchName:
    """Locals bound in one branch of ``site`` (a compiled ``if`` whose test reads only
    settings) and read under a later test of the same settings, ``read_under``; ``bound_when``
    is the test's value on the branch that binds it."""

    site: cst.If
    names: tuple[str, ...]
    bound_when: bool
    read_under: cst.BaseExpression | None = None


@dataclass
class _Plan:
    flags: dict[str, _Flag] = field(default_factory=dict)
    # (node, message): the TSF118 returns the plan fixes
    fixed: list[tuple[cst.CSTNode, str]] = field(default_factory=list)
    # (node, reason, message): what it leaves
    refused: list[tuple[cst.CSTNode, str, str]] = field(default_factory=list)
    callee: str | None = None           # the fixed class whose result this class unpacks
    # Tests guarding an attribute __init__ builds only under a test (TSF231), keyed by the
    # test's code: one copy serves every test written the same.
    copies: dict[str, _Copy] = field(default_factory=dict)
    guard_fixed: list[_Guard] = field(default_factory=list)
    guard_refused: list[tuple[_Guard, str]] = field(default_factory=list)
    guard_flags: list[str] = field(default_factory=list)    # flags only the guards need
    # Locals bound under a test of settings and read under a later test of them (TSF242).
    names_fixed: list[_BranchName] = field(default_factory=list)
    names_refused: list[tuple[_BranchName, str]] = field(default_factory=list)
    name_flags: list[str] = field(default_factory=list)     # flags only those locals need


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
    return _settings_read(test, self_var, lambda leaf: [] if _is_none_test(leaf, self_var)
                          else None)


def _settings_read(test: cst.BaseExpression, self_var: str,
                   leaf: Callable[[cst.BaseExpression], list[str] | None]) -> list[str] | None:
    """The settings ``self.<attr>`` a test of truth tests, ``not`` and ``and``/``or`` reads,
    what ``leaf`` says of any other part (None: the test reads something else)."""
    if isinstance(test, cst.Attribute):
        attr = self_attr(test, self_var)
        return [attr] if attr is not None else None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _settings_read(test.expression, self_var, leaf)
    if isinstance(test, cst.BooleanOperation):
        left = _settings_read(test.left, self_var, leaf)
        right = _settings_read(test.right, self_var, leaf)
        return None if left is None or right is None else [*left, *right]
    return leaf(test)


def _ancestor_ifs(root: cst.CSTNode, node: cst.CSTNode) -> list[cst.If] | None:
    """The ``if`` statements (``elif`` included) enclosing ``node`` inside ``root``, outermost
    first; None when ``node`` is not in ``root``."""
    if root is node:
        return []
    for child in children(root):
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


def _field_of_self(value: cst.BaseExpression, self_var: str) -> bool:
    """``self.config.hidden_size``: an attribute chain through an object kept on the module."""
    return (isinstance(value, cst.Attribute) and isinstance(value.value, cst.Attribute)
            and (code_of(value).split(".")[0] == self_var))


def _setting_problem(facts: ClassFacts, attr: str, *, bools_on_each_path: bool = False
                     ) -> str | None:
    """Why ``self.<attr>`` is not a setting a constant can stand for, or None: it must be set
    once, by a plain assignment in ``__init__``, to something other than a tensor, submodule or
    container. With ``bools_on_each_path``, also several plain assignments that each store a
    bool (``self.skip = True`` in one branch, ``False`` in the other): named in
    ``__constants__`` as it is, such a setting needs no copy stored after one of them."""
    assignments = [a for a in facts.assignments if a.attr == attr]
    outside = [a for a in assignments if a.method != "__init__"]
    if outside:
        return (f"self.{attr} is assigned in {outside[0].method}() too: a constant is "
                "set once, in __init__")
    if (bools_on_each_path and len(assignments) > 1
            and all(a.value is not None and _bool_setting(facts, a) for a in assignments)):
        return None
    if len(assignments) != 1 or assignments[0].value is None:
        return (f"self.{attr} is not set by exactly one plain assignment in __init__ "
                f"({len(assignments)} found)")
    if attr in facts.submodules or attr in facts.registered or attr in facts.layers:
        return f"self.{attr} is a submodule, parameter or buffer, not a setting"
    kind = facts.attributes.get(attr) or facts.maybe_none.get(attr) or ""
    if kind.startswith(_NOT_SETTINGS) or attr in facts.containers:
        return (f"self.{attr} holds a {kind or 'container'}, not a setting "
                "TorchScript can hold as a constant")
    return None


def _config_field_copy(facts: ClassFacts, settings: list[str]) -> str | None:
    """Why a TSF242 site is left alone when a setting its test reads is a copy of a
    configuration object's field (``self.x = self.config.x``): lift-branch writes such copies
    (of ``if self.config.x:``), so making them constant would rewrite its output on a second
    run (transformers' YolosEncoder)."""
    for attr in settings:
        assigned = [a for a in facts.assignments if a.attr == attr]
        if len(assigned) == 1 and isinstance(assigned[0].value, cst.Attribute):
            return (f"self.{attr} is a copy of `{code_of(assigned[0].value)}`, a field of a "
                    "configuration object: left to lift-branch")
    return None


_OPERATOR_WORDS = ((cst.Equal, "is"), (cst.NotEqual, "is_not"), (cst.IsNot, "is_not"),
                   (cst.Is, "is"), (cst.NotIn, "not_in"), (cst.In, "in"),
                   (cst.LessThanEqual, "le"), (cst.LessThan, "lt"),
                   (cst.GreaterThanEqual, "ge"), (cst.GreaterThan, "gt"))


def _operand_word(operand: cst.BaseExpression, self_var: str) -> str | None:
    attr = self_attr(operand, self_var)
    if attr is not None:
        return attr.lstrip("_") or None
    if isinstance(operand, cst.Tuple | cst.List | cst.Set):
        words = [_operand_word(e.value, self_var) for e in operand.elements]
        return "_".join(w for w in words if w) if all(words) else None
    if isinstance(operand, cst.UnaryOperation) and isinstance(operand.operator, cst.Minus):
        inner = _operand_word(operand.expression, self_var)
        return f"minus_{inner}" if inner else None
    text = code_of(operand)
    if isinstance(operand, cst.SimpleString):
        value = operand.evaluated_value
        text = value if isinstance(value, str) else ""
    word = "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")
    return word or None


def _test_name(test: cst.BaseExpression, self_var: str) -> str | None:
    """A name saying what a one-comparison test asks: ``self.pool_type == 'avg'`` ->
    ``pool_type_is_avg``, ``self.upscale in [2, 3]`` -> ``upscale_in_2_3``; None for other
    tests or a name that is no identifier or too long."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    operator = test.comparisons[0].operator
    verb = next((word for kind, word in _OPERATOR_WORDS if isinstance(operator, kind)), None)
    left = _operand_word(test.left, self_var)
    right = _operand_word(test.comparisons[0].comparator, self_var)
    if verb is None or left is None or right is None:
        return None
    name = f"{left}_{verb}_{right}"
    return name if name.isidentifier() and len(name) <= 40 else None


def _copy_name(attr: str, taken: set[str]) -> str:
    """``skip_chan`` -> ``has_skip_chan`` (``_x`` -> ``_has_x``), not clashing with ``taken``."""
    stripped = attr.lstrip("_")
    name = f"{attr[:len(attr) - len(stripped)]}has_{stripped}"
    while name in taken:
        name += "_flag"
    return name


# ---- attributes __init__ builds only under a test (TSF231) ---------------------------------

# A block that ends in ``raise`` assigns "everything": __init__ does not return through it.
_EVERYTHING = frozenset({"*"})


def _definite(block: cst.BaseSuite | cst.If | cst.Else | None, assigned: dict[int, set[str]],
              maybe: dict[str, cst.CSTNode]) -> frozenset[str]:
    """The attributes ``block`` assigns on every path through it; attributes it assigns on
    some paths only go to ``maybe`` (with the outermost ``if`` choosing)."""
    if block is None:
        return frozenset()
    if isinstance(block, cst.If):
        body = _definite(block.body, assigned, maybe)
        other = _definite(block.orelse, assigned, maybe)
        both = (body if other == _EVERYTHING else other if body == _EVERYTHING
                else body & other)
        for name in (body | other) - both - _EVERYTHING:
            maybe.setdefault(name, block)
        return both
    if isinstance(block, cst.Else):
        return _definite(block.body, assigned, maybe)
    found: set[str] = set()
    statements = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            found |= assigned.get(id(statement), set())
            if any(isinstance(small, cst.Raise) for small in statement.body):
                return _EVERYTHING
        elif isinstance(statement, cst.If):
            done = _definite(statement, assigned, maybe)
            if done == _EVERYTHING:
                return _EVERYTHING
            found |= done
            if _may_return(statement):
                # `if cat_dims == []: ...; return`: what follows is built on the other paths only.
                rest = statements[[id(s) for s in statements].index(id(statement)) + 1:]
                _built_after(rest, statement, assigned, maybe)
                return frozenset(found)
        elif isinstance(statement, cst.With):
            found |= _definite(statement.body, assigned, maybe) - _EVERYTHING
        elif isinstance(statement, cst.SimpleStatementSuite):
            found |= assigned.get(id(statement), set())
        else:
            # A loop's body may run zero times; a try's may stop early.
            _definite_nowhere(statement, assigned, maybe)
    return frozenset(found)


def _registrations(init: cst.FunctionDef) -> list[tuple[cst.SimpleStatementLine, str]]:
    """Each line of ``__init__`` that registers a buffer, parameter or module under a literal
    name (``self.register_buffer('mask', m)``), with that name."""
    self_var = self_name(init) or "self"
    found = []
    for line in find_all(init.body, cst.SimpleStatementLine):
        for small in line.body:
            call = small.value if isinstance(small, cst.Expr) else None
            if (isinstance(call, cst.Call) and call.args
                    and self_attr(call.func, self_var) is not None
                    and isinstance(call.func, cst.Attribute)
                    and call.func.attr.value in ("register_buffer", "register_parameter",
                                                 "add_module", "register_module")
                    and isinstance(call.args[0].value, cst.SimpleString)
                    and isinstance(call.args[0].value.evaluated_value, str)):
                found.append((line, call.args[0].value.evaluated_value))
    return found


def _given_to_the_constructor(facts: ClassFacts, setting: str) -> bool:
    """``__init__`` stores the setting from a parameter or a literal only: one read from a
    config object (``self.x = self.config.x``, as lift-branch writes it) is left to the rules
    that handle config objects, so a second run finds what the first left."""
    values = [a.value for a in facts.assignments if a.attr == setting]
    return bool(values) and all(
        isinstance(v, cst.Name) or (v is not None and literal_type(v) is not None)
        for v in values)


def _is_none(node: cst.CSTNode | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _may_return(statement: cst.CSTNode) -> bool:
    return any(not _inside_def(statement, node) for node in find_all(statement, cst.Return))


def _inside_def(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(contains(func, node) for func in find_all(root, cst.FunctionDef))


def _built_after(statements: Sequence[cst.CSTNode], chooser: cst.If,
                 assigned: dict[int, set[str]], maybe: dict[str, cst.CSTNode]) -> None:
    for statement in statements:
        for node in find_all(statement, cst.SimpleStatementLine, cst.SimpleStatementSuite):
            for name in assigned.get(id(node), set()):
                maybe.setdefault(name, chooser)


def _definite_nowhere(statement: cst.CSTNode, assigned: dict[int, set[str]],
                      maybe: dict[str, cst.CSTNode]) -> None:
    for node in find_all(statement, cst.SimpleStatementLine):
        for name in assigned.get(id(node), set()):
            maybe.setdefault(name, statement)


def _tested_reads(node: cst.CSTNode, self_var: str
                  ) -> list[tuple[cst.Attribute, tuple[cst.If | cst.IfExp, ...]]]:
    """Every ``self.<attr>`` in ``node`` with the ``if`` statements and ``x if t else y``
    expressions whose branches hold it, outermost first."""
    found: list[tuple[cst.Attribute, tuple[cst.If | cst.IfExp, ...]]] = []
    # A list filled by one recursion, not nested generators: a read deep in a method would
    # pass through one generator frame per level.
    _collect_tested_reads(node, self_var, (), found)
    return found


def _collect_tested_reads(node: cst.CSTNode, self_var: str,
                          tests: tuple[cst.If | cst.IfExp, ...],
                          found: list[tuple[cst.Attribute, tuple[cst.If | cst.IfExp, ...]]]
                          ) -> None:
    if isinstance(node, cst.If):
        _collect_tested_reads(node.test, self_var, tests, found)
        _collect_tested_reads(node.body, self_var, (*tests, node), found)
        if node.orelse is not None:
            _collect_tested_reads(node.orelse, self_var, (*tests, node), found)
        return
    if isinstance(node, cst.IndentedBlock):
        for statement in node.body:
            _collect_tested_reads(statement, self_var, tests, found)
            if isinstance(statement, cst.If) and statement.orelse is None and _leaves(statement):
                # `if self.skip: return x`: what follows runs only where the test is false.
                tests = (*tests, statement)
        return
    if isinstance(node, cst.IfExp):
        _collect_tested_reads(node.test, self_var, tests, found)
        _collect_tested_reads(node.body, self_var, (*tests, node), found)
        _collect_tested_reads(node.orelse, self_var, (*tests, node), found)
        return
    if isinstance(node, cst.Attribute) and self_attr(node, self_var) is not None:
        found.append((node, tests))
    for child in children(node):
        _collect_tested_reads(child, self_var, tests, found)


def _leaves(test: cst.If) -> bool:
    """Whether the body of ``test`` ends in ``return`` or ``raise``."""
    last = test.body.body[-1] if test.body.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last_small: cst.CSTNode | None = last.body[-1]
    else:
        last_small = last
    return isinstance(last_small, cst.Return | cst.Raise)


def _is_literal(expr: cst.BaseExpression) -> bool:
    """A str, number, bool or None literal, a negative number, or a tuple/list/set of them."""
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    if isinstance(expr, cst.SimpleString | cst.ConcatenatedString | cst.Integer | cst.Float):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return isinstance(expr.expression, cst.Integer | cst.Float)
    if isinstance(expr, cst.Tuple | cst.List | cst.Set):
        return all(isinstance(e, cst.Element) and _is_literal(e.value) for e in expr.elements)
    return False


def _comparison_settings(test: cst.BaseExpression, self_var: str) -> list[str] | None:
    """The settings a test reads when it is made only of comparisons of ``self.<attr>`` with
    literals or other settings (``==``, ``!=``, ``in``, ``<``, ``is None``, ...), truth tests
    of ``self.<attr>``, ``not`` and ``and``/``or``; None when it reads anything else."""
    def comparison(leaf: cst.BaseExpression) -> list[str] | None:
        if not isinstance(leaf, cst.Comparison):
            return None
        read: list[str] = []
        for operand in [leaf.left, *(c.comparator for c in leaf.comparisons)]:
            attr = self_attr(operand, self_var)
            if attr is not None:
                read.append(attr)
            elif not _is_literal(operand):
                return None
        return read

    return _settings_read(test, self_var, comparison)


def _bool_valued(expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` is a bool whatever the settings hold (comparisons, ``not``, and
    ``and``/``or`` of those)."""
    if isinstance(expr, cst.Comparison):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return True
    if isinstance(expr, cst.BooleanOperation):
        return _bool_valued(expr.left) and _bool_valued(expr.right)
    return False


# ---- locals bound under a test of settings, read under a later test of them (TSF242) --------

def _branch_assigned(branch: cst.BaseSuite | cst.If | cst.Else | None) -> set[str] | None:
    """The names one branch of an ``if`` binds on every path through it that goes on after
    the ``if``; None when no path does (every one ends in ``return`` or ``raise``)."""
    if branch is None:
        return set()
    if isinstance(branch, cst.If):
        body, other = _branch_assigned(branch.body), _branch_assigned(branch.orelse)
        return other if body is None else body if other is None else body & other
    if isinstance(branch, cst.Else):
        branch = branch.body
    statements: Sequence[cst.BaseStatement] = (
        [cst.SimpleStatementLine(body=branch.body)] if isinstance(branch, cst.SimpleStatementSuite)
        else branch.body if isinstance(branch, cst.IndentedBlock) else [])
    found: set[str] = set()
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine) and any(
                isinstance(small, cst.Return | cst.Raise) for small in statement.body):
            return None
        if isinstance(statement, cst.If):
            bound = _branch_assigned(statement)
            if bound is None:
                return None
            found |= bound
        else:
            found |= definitely_assigned(statement)
    return found


def _test_side(test: cst.BaseExpression, value: bool) -> tuple[str, bool]:
    """``test`` being ``value`` as (the test without its ``not``s and brackets, the value
    that has): ``not self.freq`` false and ``self.freq`` true are the same side."""
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, value = test.expression, not value
    bare = test.with_changes(lpar=[], rpar=[]) if hasattr(test, "lpar") else test
    return " ".join(code_of(bare).split()), value


def _implied(test: cst.BaseExpression, value: bool) -> list[tuple[cst.BaseExpression, bool]]:
    """``(part, its value)`` for ``test`` and each part of it whose value follows from
    ``test`` having ``value``: the operands of a true ``and`` or a false ``or``, through
    ``not``. TorchScript folds ``and``/``or`` with a constant bool operand (measured on torch
    2.13: ``if self.hybrid and i < n:`` is not compiled for a constant False)."""
    found = [(test, value)]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        found += _implied(test.expression, not value)
    elif isinstance(test, cst.BooleanOperation) and (
            isinstance(test.operator, cst.And) if value else isinstance(test.operator, cst.Or)):
        found += [*_implied(test.left, value), *_implied(test.right, value)]
    return found


def _conditions(parents: Mapping[int, cst.CSTNode], node: cst.CSTNode, top: cst.CSTNode
                ) -> list[tuple[cst.BaseExpression, bool]]:
    """The tests of the ``if`` statements and ``x if t else y`` expressions between ``top``
    and ``node`` whose branches hold ``node``, with the value each test has there."""
    found: list[tuple[cst.BaseExpression, bool]] = []
    child = node
    while child is not top and id(child) in parents:
        parent = parents[id(child)]
        if isinstance(parent, cst.If | cst.IfExp):
            if child is parent.body:
                found.append((parent.test, True))
            elif child is parent.orelse:
                found.append((parent.test, False))
        child = parent
    return found


def _name_reads(statement: cst.CSTNode, name: str) -> list[cst.Name]:
    """The reads of the local ``name`` in ``statement`` (not assignment targets, attribute
    names or keywords of a call)."""
    skipped = {id(a.attr) for a in find_all(statement, cst.Attribute)}
    skipped |= {id(a.keyword) for a in find_all(statement, cst.Arg) if a.keyword is not None}
    for node in find_all(statement, cst.AssignTarget, cst.AnnAssign, cst.For, cst.CompFor):
        skipped |= {id(n) for n in target_names(node.target)}
    return [n for n in find_all(statement, cst.Name) if n.value == name and id(n) not in skipped]


def _bound_before(node: cst.CSTNode, top: cst.CSTNode, parents: Mapping[int, cst.CSTNode]
                  ) -> set[str]:
    """The names every path from the start of ``top`` to ``node`` binds (the statements
    before it in its block and in each enclosing block; a binding under a test counts only
    when every branch that goes on makes it)."""
    found: set[str] = set()
    child = node
    while child is not top and id(child) in parents:
        parent = parents[id(child)]
        if isinstance(parent, cst.IndentedBlock):
            for statement in parent.body:
                if statement is child:
                    break
                found |= _branch_assigned(cst.IndentedBlock(body=[statement])) or set()
        child = parent
    return found


def _binding_nodes(root: cst.CSTNode) -> list[cst.CSTNode]:
    return find_all(root, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                    cst.CompFor, cst.NamedExpr, cst.AsName)


def _bound_by(node: cst.CSTNode) -> set[str]:
    if isinstance(node, cst.AssignTarget | cst.CompFor):
        return {n.value for n in target_names(node.target)}
    if isinstance(node, cst.AsName):
        return {n.value for n in target_names(node.name)} if isinstance(
            node.name, cst.BaseExpression) else set()
    return bound_names(node)


class _RenameSelf(cst.CSTTransformer):
    """``self`` of one method -> ``self`` of another (a test of forward evaluated in
    __init__)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute
                        ) -> cst.BaseExpression:
        if isinstance(updated.value, cst.Name) and updated.value.value == self.old:
            return updated.with_changes(value=cst.Name(self.new))
        return updated


class _Rewrite(cst.CSTTransformer):
    """Truth reads of a setting -> its bool copy; the copy stored after the setting's
    assignment; a list literal replaced."""

    def __init__(self, reads: dict[int, str], after: dict[int, list[cst.SimpleStatementLine]],
                 replaced: tuple[cst.CSTNode, cst.CSTNode] | None,
                 tests: dict[int, cst.BaseExpression] | None = None) -> None:
        self.reads = reads
        self.after = after
        self.replaced = replaced
        self.tests = tests or {}

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        test = self.tests.get(id(original.test))
        if test is None:
            return updated
        space = updated.whitespace_before_test
        if isinstance(space, cst.SimpleWhitespace) and not space.value:
            space = cst.SimpleWhitespace(" ")    # `elif(...)` read `elif ...` once rewritten
        return updated.with_changes(test=test, whitespace_before_test=space)

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.IfExp:
        test = self.tests.get(id(original.test))
        return updated.with_changes(test=test) if test is not None else updated

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



def _bound_names(statements: list[ast.stmt]) -> set[str]:
    """Names ``statements`` may bind (the prefilter's look at a branch: loosely, nested
    statements and comprehensions included)."""
    found: set[str] = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
                found.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(node.name)
            elif isinstance(node, ast.alias):
                found.add(node.asname or node.name.split(".")[0])
            elif (isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar)
                  and node.name):
                found.add(node.name)
    return found


def _stored(node: ast.AST, self_var: str | None = None) -> set[str]:
    """Attributes ``node`` assigns (of ``self_var`` only when given), setattr too."""
    found = set()
    for inner in ast.walk(node):
        if (isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store)
                and (self_var is None or (isinstance(inner.value, ast.Name)
                                          and inner.value.id == self_var))):
            found.add(inner.attr)
        elif (self_var is None and isinstance(inner, ast.Call)
              and isinstance(inner.func, ast.Name) and inner.func.id == "setattr"
              and len(inner.args) > 1 and isinstance(inner.args[1], ast.Constant)
              and isinstance(inner.args[1].value, str)):
            found.add(inner.args[1].value)
    return found


def _maybe_built(file: AstFile, init: ast.FunctionDef) -> set[str]:
    """What _conditional_attributes and _none_in_some_configurations may find: the attributes
    __init__ assigns inside a block (or anywhere, when it may return early) or gives a value
    holding None, and those it registers inside a block."""
    blocks = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.TryStar, ast.Match,
              ast.With, ast.AsyncWith, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    nodes = file.nodes_of(init)[1:]
    if any(isinstance(node, ast.Return) for node in nodes):
        found = _stored(init)
    else:
        found = {attr for node in nodes if isinstance(node, blocks) for attr in _stored(node)}
    found |= {attr for node in nodes if isinstance(node, ast.Assign | ast.AnnAssign)
              and node.value is not None and any(
                  isinstance(v, ast.Constant) and v.value is None for v in ast.walk(node.value))
              for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
              for attr in _stored(target)}
    self_var = file.self_var(init)
    inside = {id(n) for node in nodes if isinstance(node, blocks) for n in ast.walk(node)}
    for node in nodes:      # registered at the top level: built on every path
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == self_var and node.args
                and node.func.attr in ("register_buffer", "register_parameter", "add_module",
                                       "register_module")
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and re.fullmatch(r"""[rRuU]?('[^'\\\n]*'|"[^"\\\n]*")""",
                                 file.segment(node.args[0]) or "")):
            if id(node) in inside:
                found.add(node.args[0].value)
            else:
                found.discard(node.args[0].value)
    return found


_PLANNED: weakref.WeakKeyDictionary[AstFile, frozenset[str]] = weakref.WeakKeyDictionary()


def _planned_classes(file: AstFile) -> frozenset[str]:
    """The names of the classes :func:`_may_plan` names, asked once per file text (by
    ``may_apply``, then by ``prepare`` on the same file)."""
    if file not in _PLANNED:
        _PLANNED[file] = frozenset(klass.name for klass in file.module_classes
                                   if _may_plan(file, klass))
    return _PLANNED[file]


def _may_plan(file: AstFile, klass: ast.ClassDef) -> bool:
    """Whether constant-flag may find something in ``klass`` (the prefilter's look, per class:
    ``prepare`` plans only the classes it names). Every plan is of a module class with
    compiled methods: two returns in one (TSF118; the callers that unpack a result need such a
    class too), an `if` on the instance whose branches bind different names (the branch
    names), or a compiled read of an attribute __init__ may build on some paths only or set to
    None that no other method assigns."""
    read: set[str] = set()
    for func in file.compiled_methods(klass):
        self_var = file.self_var(func)
        nodes = file.nodes_of(func)
        if (sum(isinstance(node, ast.Return) for node in nodes) > 1
                or any(isinstance(node, ast.If) and file.reads_self(node.test, self_var)
                       and _bound_names(node.body) != _bound_names(node.orelse)
                       for node in nodes)):
            return True
        read.update(node.attr for node in nodes if isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name) and node.value.id == self_var)
    candidates = {attr for item in klass.body
                  if isinstance(item, ast.FunctionDef) and item.name == "__init__"
                  for attr in _maybe_built(file, item) & read}
    if not candidates:
        return False
    methods = {item.name: item for item in klass.body if isinstance(item, ast.FunctionDef)}
    elsewhere = {attr for name, item in methods.items()
                 if name != "__init__" and (item.args.posonlyargs or item.args.args)
                 and not any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                             for d in item.decorator_list)
                 for attr in _stored(item, file.self_var(item))}
    return bool(candidates - elsewhere)


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
        Code(_GUARD_CODE, "conditional-attribute", "attribute __init__ builds only under a test",
             "TorchScript compiles both branches of `if self.pool_type == 'avg': x = "
             "self.avg_pool(x)`, so an instance whose __init__ did not build `avg_pool` fails "
             "(\"Module 'Net' has no attribute 'avg_pool'\"); only a test that is a constant "
             "bool is decided when the instance is scripted. `constant-flag` stores the test's "
             "value in __init__ (`self.has_avg_pool = self.pool_type == 'avg'`), names it in "
             "`__constants__` and tests it instead (a bool setting tested alone is named "
             "itself). By hand: the same, or `hasattr(self, 'avg_pool')` as the test, or build "
             "the attribute on every path (`nn.Identity()`). torch.export is not affected: it "
             "traces the path taken."),
        Code(_NAME_CODE, "name-bound-under-setting",
             "local bound under a test of a setting, read under a later test of it",
             "TorchScript compiles both branches of `if self.freq: B, C, F, T = y.shape` and "
             "of a later `if self.freq: y = y.view(B, F, C, T)`, so the name is unbound on "
             "the path where the first test is false and read on the path where the second "
             "is true, which Python never takes (\"B is not defined in the false branch\"). "
             "Only a test that is a constant bool is decided when the instance is scripted. "
             "`constant-flag` names the setting (or a bool copy of it) in `__constants__`. By "
             "hand: the same, or bind the name on both paths before the first test (`B = 0`) "
             "when its type allows. torch.export is not affected: it traces the path taken."),
    )
    summary = ("a constructor setting whose test chooses between returns of different types, "
               "guards an attribute __init__ builds only under a test, or binds a local read "
               "under a later test of it is made a constant "
               "(the setting, or a bool copy, in __constants__), so TorchScript compiles only "
               "the configured path")

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
        # An attribute __init__ builds only under a test, read under the same test (TSF231).
        Example(
            """
import torch
from torch import nn
class Pool(nn.Module):
    def __init__(self, pool_type="avg"):
        super().__init__()
        self.pool_type = pool_type
        if pool_type == "avg":
            self.avg_pool = nn.AdaptiveAvgPool1d(1)
    def forward(self, x):
        if self.pool_type == "avg":
            x = self.avg_pool(x)
        return x
""",
            """
import torch
from torch import nn
class Pool(nn.Module):
    # TorchScript compiles only the branch a constant bool test takes.
    __constants__ = ["pool_type_is_avg"]

    def __init__(self, pool_type="avg"):
        super().__init__()
        self.pool_type = pool_type
        self.pool_type_is_avg = self.pool_type == "avg"
        if pool_type == "avg":
            self.avg_pool = nn.AdaptiveAvgPool1d(1)
    def forward(self, x):
        if self.pool_type_is_avg:
            x = self.avg_pool(x)
        return x
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        return bool(_planned_classes(file))

    def prepare(self, module: cst.Module) -> None:
        self.plans: dict[str, _Plan] = {}
        classes = [c for c in self.facts.classes.values() if self.facts.is_module_class(c)]
        # The returns, guards and branch-names plans only for the classes the prefilter names
        # (the callers' plan reads every class: it follows the fixed ones).
        planned = classes
        if self.ast_file is not None and self.ast_file.tree is not None:
            named = _planned_classes(self.ast_file)
            planned = [c for c in classes if c.name.value in named]
        for cls in planned:
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
        # Attributes __init__ builds only under a test, read under a test of settings.
        for cls in planned:
            name = cls.name.value
            plan = self.plans.get(name) or _Plan()
            if plan.refused:
                continue        # returns that stay apart fail to script whatever this does
            self._guards_plan(cls, plan)
            # Locals bound under a test of settings and read under a later test of them.
            self._branch_names_plan(cls, plan)
            if (plan.copies or plan.guard_fixed or plan.guard_refused or plan.flags
                    or plan.names_refused):
                self.plans[name] = plan

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

    def _settle(self, facts: ClassFacts, attrs: list[str], plan: _Plan, *,
                bool_constants_decided: bool = False) -> str | None:
        """Add ``attrs`` to ``plan`` as constants, or say why one cannot be (with
        ``bool_constants_decided``, a bool already named in ``__constants__`` needs nothing)."""
        constants = constant_attributes(facts.cls)
        settled: list[_Flag] = []
        for attr in attrs:
            if attr in plan.flags:
                continue
            problem = _setting_problem(facts, attr, bools_on_each_path=True)
            if problem is not None:
                return problem
            assignments = [a for a in facts.assignments if a.attr == attr]
            if attr in constants:
                if bool_constants_decided and _bool_setting(facts, assignments[0]):
                    continue
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

    def _guards_plan(self, cls: cst.ClassDef, plan: _Plan) -> None:
        """Make constant each compiled test under which an attribute ``__init__`` builds only
        under a test is read (``if self.pool_type == "avg": x = self.avg_pool(x)``): the test
        of the nearest enclosing ``if`` (or ``x if t else y``) that reads only settings."""
        facts = self.class_facts(cls)
        built = self._conditional_attributes(cls, facts)
        optional = {attr: node for attr, node in self._none_in_some_configurations(facts).items()
                    if attr not in built}
        if not built and not optional:
            return
        work = _Plan(flags=dict(plan.flags))
        sites: dict[int, tuple[cst.If | cst.IfExp, str, _Guard]] = {}
        refused: list[tuple[_Guard, str]] = []
        # An attribute that is None in some configurations counts only where every compiled
        # read is under a test of settings: one read under `is not None`, or none at all
        # under a test, is how code that already scripts reads it.
        optional_sites: dict[str, list[tuple[cst.If | cst.IfExp, str, _Guard]]] = {}
        for method, func in facts.compiled_methods():
            self_var = self_name(func)
            if self_var is None:
                continue
            for read, tests in _tested_reads(func.body, self_var):
                attr = self_attr(read, self_var)
                if attr is None or not facts.is_compiled(method, read):
                    continue
                if attr in optional:
                    owner = next((t for t in reversed(tests)
                                  if _comparison_settings(t.test, self_var) is not None), None)
                    if owner is None or not all(
                            _given_to_the_constructor(facts, setting)
                            for setting in _comparison_settings(owner.test, self_var) or []):
                        optional.pop(attr)
                        optional_sites.pop(attr, None)
                    else:
                        optional_sites.setdefault(attr, []).append(
                            (owner, self_var, _Guard(owner.test, attr, optional[attr],
                                                     owner.test, none=True)))
                    continue
                if attr not in built:
                    continue
                owner = next((t for t in reversed(tests)
                              if _comparison_settings(t.test, self_var) is not None), None)
                if owner is None:
                    where = (f"under `{code_of(tests[-1].test)}`, which reads more than "
                             "settings of the module" if tests else "outside any test")
                    refused.append((_Guard(read, attr, built[attr], None),
                                    f"self.{attr} is read {where}: only a test of settings "
                                    "can be made a constant that leaves the read uncompiled"))
                    continue
                sites.setdefault(id(owner), (owner, self_var,
                                             _Guard(owner.test, attr, built[attr], owner.test)))
        for found in optional_sites.values():
            for owner, self_var, guard in found:
                sites.setdefault(id(owner), (owner, self_var, guard))
        for owner, self_var, guard in sites.values():
            before = (len(work.flags), sum(len(c.tests) for c in work.copies.values()))
            reason = self._guard_test(facts, owner.test, self_var, guard.attr, work)
            if reason is not None:
                refused.append((guard, reason))
            elif before != (len(work.flags), sum(len(c.tests) for c in work.copies.values())):
                plan.guard_fixed.append(guard)
        if refused:
            # Fixed whole or not at all: one test left undecided still fails to script.
            plan.guard_refused = refused
            plan.guard_fixed.clear()
            return
        plan.guard_flags = [attr for attr in work.flags if attr not in plan.flags]
        plan.flags = work.flags
        plan.copies = work.copies

    def _branch_names_plan(self, cls: cst.ClassDef, plan: _Plan) -> None:
        """Make constant the tests of settings under which a local is bound in one branch only
        and read under a later test of the same settings (``if self.freq: B, C, F, T =
        y.shape`` ... ``if self.freq: y = y.view(B, F, C, T)``)."""
        facts = self.class_facts(cls)
        work = _Plan(flags=dict(plan.flags),
                     copies={k: replace(c, tests=list(c.tests)) for k, c in plan.copies.items()})
        fixed: list[_BranchName] = []
        refused: list[tuple[_BranchName, str]] = []
        for method, func in facts.compiled_methods():
            self_var = self_name(func)
            if self_var is None or not any(
                    _comparison_settings(node.test, self_var)
                    for node in find_all(func.body, cst.If)):
                continue
            for site, tests, reason in self._branch_names(facts, method, func, self_var):
                for test in tests:
                    if reason is not None:
                        break
                    settings = _comparison_settings(test, self_var) or [""]
                    reason = _config_field_copy(facts, settings) or self._guard_test(
                        facts, test, self_var, settings[0], work)
                if reason is not None:
                    refused.append((site, reason))
                else:
                    fixed.append(site)
        if refused:
            # Fixed whole or not at all: one name left unbound on a compiled path still fails.
            plan.names_refused = refused
            return
        if fixed:
            plan.name_flags = [attr for attr in work.flags if attr not in plan.flags]
            plan.flags = work.flags
            plan.copies = work.copies
            plan.names_fixed = fixed

    def _branch_names(self, facts: ClassFacts, method: str, func: cst.FunctionDef,
                      self_var: str
                      ) -> Iterator[tuple[_BranchName, list[cst.BaseExpression], str | None]]:
        """Each compiled ``if`` of settings binding locals in one branch only that later
        statements of its block read: the site, the tests to make constant, and why not (or
        None)."""
        order = {id(node): index for index, node in enumerate(
            find_all(func.body, cst.CSTNode))}  # type: ignore[type-abstract]
        parameters = set(parameters_of(func))
        parents: Mapping[int, cst.CSTNode] | None = None
        for block in find_all(func.body, cst.IndentedBlock):
            for index, site in enumerate(block.body):
                if (not isinstance(site, cst.If) or not facts.is_compiled(method, site)
                        or _comparison_settings(site.test, self_var) is None):
                    continue
                if _setting_test(site.test, self_var) == []:
                    continue        # `is None` tests only: decided by the attribute's type
                body, other = _branch_assigned(site.body), _branch_assigned(site.orelse)
                if body is None or other is None:
                    continue        # only the other branch goes on: what it binds is bound
                if parents is None:
                    parents = parent_map(func.body)
                names = sorted((body ^ other) - parameters
                               - _bound_before(site, func.body, parents))
                if not names:
                    continue
                read: list[str] = []
                tests: list[cst.BaseExpression] = []
                why: str | None = None
                for name in names:
                    found = self._later_reads(block.body[index + 1:], name, parents, order,
                                              (site.test, name in body), self_var)
                    if found is None:
                        continue
                    read.append(name)
                    tests += [test for test in found[0] if all(test is not t for t in tests)]
                    why = why or found[1]
                if read:
                    branch = _BranchName(site, tuple(read), read[0] in body,
                                         tests[0] if tests else None)
                    yield branch, [site.test, *tests], why

    @staticmethod
    def _later_reads(statements: Sequence[cst.BaseStatement], name: str,
                     parents: Mapping[int, cst.CSTNode], order: dict[int, int],
                     bound: tuple[cst.BaseExpression, bool], self_var: str
                     ) -> tuple[list[cst.BaseExpression], str | None] | None:
        """The later tests that guard the reads of ``name`` in ``statements`` (up to one that
        binds it on every path), and why they cannot be made constant (or None); None when
        nothing there reads it before binding it."""
        side = _test_side(*bound)
        tests: list[cst.BaseExpression] = []
        reads = False
        for statement in statements:
            bindings = [order[id(node)] for node in _binding_nodes(statement)
                        if name in _bound_by(node)]
            for read in _name_reads(statement, name):
                if bindings and min(bindings) < order.get(id(read), 0):
                    continue        # bound again in this statement first
                reads = True
                guard = next((part for test, value in _conditions(parents, read, statement)
                              for part, holds in _implied(test, value)
                              if _test_side(part, holds) == side
                              and (part is test or _setting_test(part, self_var))), None)
                if guard is None:
                    settings = [test for test, _ in _conditions(parents, read, statement)
                                if _comparison_settings(test, self_var) is not None]
                    where = (f"under `{code_of(settings[0])}`, another test than the one that "
                             "binds it" if settings else f"where `{code_of(bound[0])}` may be "
                             f"{str(not bound[1]).lower()}")
                    return tests, (f"`{name}` is also read {where}: a constant does not make "
                                   "it bound there")
                if all(test is not guard for test in tests):
                    tests.append(guard)
            if name in definitely_assigned(statement):
                break
        return (tests, None) if reads else None

    def _conditional_attributes(self, cls: cst.ClassDef,
                                facts: ClassFacts) -> dict[str, cst.CSTNode]:
        """Attributes ``__init__`` assigns on some paths only -> the statement that chooses
        (an ``if``, a loop); not those a class-level line, another method or a base class of
        the file assigns."""
        init = facts.init
        if init is None:
            return {}
        assigned: dict[int, set[str]] = {}
        for a in facts.assignments:
            if a.method == "__init__" and a.attr.isidentifier():
                assigned.setdefault(id(a.statement), set()).add(a.attr)
        # ``self.register_buffer('mask', ...)`` builds ``self.mask`` as an assignment would
        # (glom-pytorch registers its non-local mask only under a setting test).
        for registering, name in _registrations(init):
            assigned.setdefault(id(registering), set()).add(name)
        maybe: dict[str, cst.CSTNode] = {}
        definite = _definite(init.body, assigned, maybe)
        if definite == _EVERYTHING:
            return {}
        elsewhere = set(facts.assigned_outside_init) | set(facts.declared)
        if isinstance(cls.body, cst.IndentedBlock):
            for line in cls.body.body:
                for target in find_all(line, cst.AssignTarget):
                    if isinstance(target.target, cst.Name):
                        elsewhere.add(target.target.value)
        for base in self.facts.local_bases(cls):
            elsewhere |= {a.attr for a in self.class_facts(base).assignments}
        return {attr: node for attr, node in maybe.items()
                if attr not in definite and attr not in elsewhere}

    def _none_in_some_configurations(self, facts: ClassFacts) -> dict[str, cst.CSTNode]:
        """Attributes ``__init__`` sets to a module in some configurations and to None in
        others (``self.context_norm = nn.LayerNorm(d) if cross_attend else None``, or an
        ``if``/``else``) -> the expression or statement that chooses."""
        values: dict[str, list[tuple[cst.BaseExpression | None, cst.CSTNode]]] = {}
        for a in facts.assignments:
            values.setdefault(a.attr, []).append((a.value, a.statement))
        found: dict[str, cst.CSTNode] = {}
        for attr, assigned in values.items():
            if any(a.method != "__init__" for a in facts.assignments if a.attr == attr):
                continue
            nones = [(v, where) for v, where in assigned if _is_none(v) or (
                isinstance(v, cst.IfExp) and (_is_none(v.body) != _is_none(v.orelse)))]
            others = [v for v, _ in assigned if v is not None and not _is_none(v)]
            if nones and others and all(isinstance(v, cst.Call | cst.IfExp) for v in others):
                value, where = nones[0]
                found[attr] = value if isinstance(value, cst.IfExp) else where
        return found

    def _guard_test(self, facts: ClassFacts, test: cst.BaseExpression, self_var: str,
                    attr: str, plan: _Plan) -> str | None:
        """Make ``test`` constant in ``plan``: truth tests of settings by naming them (or their
        bool copies) in ``__constants__``, any other test of settings by a bool copy of the
        whole test; or say why it cannot be."""
        truth = _setting_test(test, self_var)
        if truth is not None:
            # Only `is None` tests: decided by the attributes' types already.
            return (self._settle(facts, truth, plan, bool_constants_decided=True)
                    if truth else None)
        key = code_of(test)
        if key in plan.copies:
            plan.copies[key].tests.append((test, self_var))
            return None
        read = list(dict.fromkeys(_comparison_settings(test, self_var) or []))
        if not read or facts.init is None:
            return f"`{key}` reads no setting of the module"
        init_self = self_name(facts.init) or "self"
        body = facts.init.body.body if isinstance(facts.init.body, cst.IndentedBlock) else []
        position = {id(statement): index for index, statement in enumerate(body)}
        last = -1
        for setting in read:
            problem = _setting_problem(facts, setting)
            if problem is not None:
                return problem
            [assignment] = [a for a in facts.assignments if a.attr == setting]
            if assignment.value is not None and _field_of_self(assignment.value, init_self):
                # lift-branch copies a config field read in forward to a plain attribute; a
                # copy of a test of it here would appear only on a second run (not idempotent).
                return (f"self.{setting} is a field of an object the module keeps "
                        f"(`{code_of(assignment.value)}`): lift-branch handles config fields")
            index = position.get(id(assignment.statement))
            if index is None:
                return (f"self.{setting} is set inside a block of __init__, not on every path: "
                        f"a copy of `{key}` could not be stored after it")
            last = max(last, index)
        expression = test.with_changes(lpar=[], rpar=[]) if isinstance(
            test, cst.Comparison | cst.BooleanOperation | cst.UnaryOperation | cst.Attribute
        ) else test
        if self_var != init_self:
            renamed = expression.visit(_RenameSelf(self_var, init_self))
            assert isinstance(renamed, cst.BaseExpression)
            expression = renamed
        if not _bool_valued(expression):
            expression = cst.Call(cst.Name("bool"), [cst.Arg(expression)])
        taken = ({a.attr for a in facts.assignments} | set(facts.methods)
                 | {c.name for c in plan.copies.values()}
                 | {f.derived for f in plan.flags.values() if f.derived})
        named = _test_name(test, self_var)
        if named is not None:
            while named in taken:
                named += "_flag"
        plan.copies[key] = _Copy(named or _copy_name(attr, taken), expression, body[last],
                                [(test, self_var)])
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
        for guard, reason in plan.guard_refused:
            self.skip(name, guard.site, reason, code=_GUARD_CODE,
                      message=self._guard_message(guard))
        for branch, reason in plan.names_refused:
            self.skip(name, branch.site, reason, code=_NAME_CODE,
                      message=_branch_message(branch))
        if not plan.flags and not plan.copies:
            return cls
        wanted = [flag.constant for flag in plan.flags.values()]
        wanted += [copy.name for copy in plan.copies.values()]
        existing = own_list(cls, _LIST, sets=True)
        refusal = None
        if existing is not None and existing.value is None:
            refusal = existing.problem
        elif existing is None:
            refusal = self._foreign_base(cls)
        if refusal is not None:
            named = [*(f"self.{f}" for f in plan.flags),
                     *(f"`{key}`" for key in plan.copies)]
            why = f"{', '.join(named)} not made constant: {refusal}"
            for node, message in plan.fixed:
                self.skip(name, node, why, code=code, message=message)
            for guard in plan.guard_fixed:
                self.skip(name, guard.site, why, code=_GUARD_CODE,
                          message=self._guard_message(guard))
            for branch in plan.names_fixed:
                self.skip(name, branch.site, why, code=_NAME_CODE,
                          message=_branch_message(branch))
            return cls
        replaced: tuple[cst.CSTNode, cst.CSTNode] | None = None
        if existing is not None:
            assert existing.value is not None
            missing = [n for n in wanted if n not in existing.names]
            if missing:
                replaced = (existing.value, appended(existing.value, missing))
        facts = self.class_facts(cls)
        init_self = (self_name(facts.init) if facts.init is not None else None) or "self"
        reads: dict[int, str] = {}
        after: dict[int, list[cst.SimpleStatementLine]] = {}
        for flag in plan.flags.values():
            if flag.derived is None:
                continue
            copy = cst.parse_statement(
                f"{init_self}.{flag.derived} = bool({init_self}.{flag.attr})\n")
            assert isinstance(copy, cst.SimpleStatementLine)
            after.setdefault(id(flag.assignment.statement), []).append(copy)
            for node in self._truth_sites(facts, flag.attr):
                reads[id(node)] = flag.derived
        tests: dict[int, cst.BaseExpression] = {}
        for test_copy in plan.copies.values():
            stored = cst.SimpleStatementLine([cst.Assign(
                [cst.AssignTarget(cst.Attribute(cst.Name(init_self), cst.Name(test_copy.name)))],
                test_copy.expression)])
            after.setdefault(id(test_copy.after), []).append(stored)
            for test, self_var in test_copy.tests:
                tests[id(test)] = cst.Attribute(cst.Name(self_var), cst.Name(test_copy.name))
        rewritten = cls.visit(_Rewrite(reads, after, replaced, tests))
        assert isinstance(rewritten, cst.ClassDef)
        if existing is None:
            inherited = self._base_names(cls)
            rewritten = with_list(rewritten, _LIST,
                                  [*inherited, *[n for n in wanted if n not in inherited]],
                                  _COMMENT)
        for node, message in plan.fixed:
            if code is not None:
                self.fixed(node, code, message)
        for guard in plan.guard_fixed:
            self.fixed(guard.site, _GUARD_CODE, self._guard_message(guard))
        for branch in plan.names_fixed:
            self.fixed(branch.site, _NAME_CODE, _branch_message(branch))
        described = ", ".join(
            [f"self.{f.attr}" if f.derived is None else f"self.{f.attr} (as self.{f.derived})"
             for f in plan.flags.values()]
            + [f"`{key}` (as self.{c.name})" for key, c in plan.copies.items()])
        whys = []
        if any(attr not in plan.guard_flags and attr not in plan.name_flags
               for attr in plan.flags):
            whys.append("its returns differ by it" if plan.callee is None
                        else f"it unpacks {plan.callee}'s result by it")
        if any(not guard.none for guard in plan.guard_fixed):
            built = sorted({guard.attr for guard in plan.guard_fixed if not guard.none})
            whys.append(f"it guards {', '.join(f'self.{a}' for a in built)}, which __init__ "
                        "builds only under a test")
        if any(guard.none for guard in plan.guard_fixed):
            nones = sorted({guard.attr for guard in plan.guard_fixed if guard.none})
            whys.append(f"it guards {', '.join(f'self.{a}' for a in nones)}, which __init__ "
                        "sets to None in other configurations")
        if plan.names_fixed:
            bound = sorted({n for branch in plan.names_fixed for n in branch.names})
            whys.append(f"{', '.join(f'`{n}`' for n in bound)} bound under it "
                        f"{'is' if len(bound) == 1 else 'are'} read under a later test of it")
        self.changes.append(ClassChange(
            self.name, name, self.span_of(cls),
            f"{described} named in {_LIST}: {'; '.join(whys)}, and TorchScript compiles only "
            "the branch a constant bool test takes",
            notes=[_NOTE.format(flags=described)]))
        return rewritten

    def _guard_message(self, guard: _Guard) -> str:
        read = "read" if guard.test is None else f"read under `{code_of(guard.test)}`"
        if guard.none:
            return (f"self.{guard.attr} is None in some configurations (__init__ chooses at "
                    f"line {self.line_of(guard.chooser)}) and is {read}; TorchScript compiles "
                    "that branch for every instance (\"cannot call a value of type "
                    "'NoneType'\")")
        return (f"self.{guard.attr} exists only for some configurations (__init__ builds it "
                f"under the statement at line {self.line_of(guard.chooser)}) and is {read}; "
                "TorchScript compiles that branch for every instance (\"Module has no "
                f"attribute '{guard.attr}'\")")

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


def _branch_message(branch: _BranchName) -> str:
    other = "false" if branch.bound_when else "true"
    read = ("after it" if branch.read_under is None
            else f"under a later `{code_of(branch.read_under)}`")
    names = ", ".join(f"`{name}`" for name in branch.names)
    return (f"{names} {'is' if len(branch.names) == 1 else 'are'} bound only where "
            f"`{code_of(branch.site.test)}` is {str(branch.bound_when).lower()} and read {read}; "
            "TorchScript compiles both branches of each test (\""
            f"{branch.names[0]} is not defined in the {other} branch\")")


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
