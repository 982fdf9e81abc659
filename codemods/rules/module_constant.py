"""``module-constant``: a module-level constant read in a compiled method is written as its value.

What it does
    In compiled code (``forward()``, ``@torch.jit.export`` methods and the methods they call;
    not ``@torch.jit.ignore`` methods nor ``if not torch.jit.is_scripting():`` branches), a read
    of a name the module binds once, at its top level, to a literal -- a number (``-5e-4``), a
    string, ``True``/``False``/``None``, or a tuple of these -- becomes that literal::

        TOKEN_ATTEND_SELF_VALUE = -5e-4
        ...
        sim.masked_fill_(self_mask, TOKEN_ATTEND_SELF_VALUE)
        ->  sim.masked_fill_(self_mask, -5e-4)

    The module-level name stays (other code may read it). Left alone: a name the module binds
    more than once or otherwise (a loop, an import, a ``def``), or that any function declares
    ``global``; a name the method binds itself (a parameter, a local, a comprehension or
    lambda variable); lists, dicts and sets (each read would make a new object: a change to the
    module's object would no longer be seen).

Why it breaks export
    TorchScript cannot read a module-level variable of a Python scalar type: "python value of
    type 'float' cannot be used as a value. Perhaps it is a closed over global variable?"
    (measured on torch 2.13 for int, float, bool and str). ``torch.export`` runs the Python.

Example
    Before::

        EPS = 1e-8

        class Norm(nn.Module):
            def forward(self, x):
                return x / (x.norm(dim=-1, keepdim=True) + EPS)

    After::

        EPS = 1e-8

        class Norm(nn.Module):
            def forward(self, x):
                return x / (x.norm(dim=-1, keepdim=True) + 1e-8)

Fix safety
    Exact: the name holds that literal whenever the method runs, since nothing else binds it
    (a module-level name bound once, never declared ``global``); the literal is the same value.
    Code outside the file that assigns the module attribute (``module.EPS = 1e-6``) is not
    seen: the method keeps the value written here.
"""

from __future__ import annotations

import ast

import libcst as cst
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    ReplaceById,
    code_of,
    find_all,
    names_bound_in,
    parent_map,
    target_names,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_CODE = "TSF105"


def module_constants(module: cst.Module) -> dict[str, cst.BaseExpression]:
    """The names the module binds once, at its top level, to a scalar literal (or a tuple of
    them), and never declares ``global`` anywhere: name -> the literal."""
    inner = {id(n) for d in find_all(module, cst.FunctionDef, cst.ClassDef)
             for n in find_all(d.body, cst.CSTNode)}  # type: ignore[type-abstract]
    bindings: dict[str, int] = {}
    values: dict[str, cst.BaseExpression] = {}
    for node in find_all(module, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                         cst.CompFor, cst.NamedExpr, cst.AsName, cst.ImportAlias,
                         cst.FunctionDef, cst.ClassDef):
        if id(node) in inner and not isinstance(node, cst.FunctionDef | cst.ClassDef):
            continue
        if isinstance(node, cst.FunctionDef | cst.ClassDef):
            names = [node.name.value] if id(node) not in inner else []
        elif isinstance(node, cst.ImportAlias):
            names = [code_of(node.asname.name if node.asname else node.name).split(".")[0]]
        elif isinstance(node, cst.AsName):
            names = [n.value for n in target_names(node.name)]
        else:
            names = [n.value for n in target_names(node.target)]
        for name in names:
            bindings[name] = bindings.get(name, 0) + 1
    declared_global = {n.name.value for g in find_all(module, cst.Global) for n in g.names}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            continue
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            target, value = small.target, small.value
        else:
            continue
        if (isinstance(target, cst.Name) and bindings.get(target.value) == 1
                and target.value not in declared_global and _is_literal(value)):
            values[target.value] = value
    return values


def _ast_literal(node: ast.expr) -> bool:
    """:func:`_is_literal` in CPython's ``ast`` view (over-approximated: any constant)."""
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, ast.Tuple):
        return all(_ast_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant)


def _is_literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Integer | cst.Float | cst.SimpleString | cst.ConcatenatedString):
        return not isinstance(node, cst.ConcatenatedString) or all(
            isinstance(part, cst.SimpleString) for part in (node.left, node.right))
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus | cst.Plus):
        return isinstance(node.expression, cst.Integer | cst.Float)
    if isinstance(node, cst.Tuple):
        return all(isinstance(e, cst.Element) and _is_literal(e.value) for e in node.elements)
    return False


class ModuleConstant(Rule):
    __doc__ = __doc__
    name = "module-constant"
    # --rule all order: first, so that every later rule reads the literal (a number is typed
    # where a name of the module is not).
    order = 2
    targets = ("torchscript", "onnx")      # torch.export runs the Python
    CODES = (
        Code(_CODE, "module-level-constant", "module-level variable read in a compiled method",
             "TorchScript cannot read a module-level variable of type list, dict, tuple, int, "
             "float, str or bool (\"python value of type 'float' cannot be used as a value\"). "
             "`tsfix apply --rule module-constant` writes a scalar or tuple constant the module "
             "binds once as its literal; otherwise copy it into a module attribute in "
             "__init__, or write the literal in the method."),
    )
    summary = ("A module-level constant bound once to a number, string, bool, None or tuple "
               "of them, read in a compiled method, is written as its literal")

    VALID = (
        # Bound twice: which value a call sees is not known.
        """
import torch
from torch import nn
SCALE = 2.0
if torch.cuda.is_available():
    SCALE = 1.0
class M(nn.Module):
    def forward(self, x):
        return x * SCALE
""",
        # A list: each read would be a new list.
        """
from torch import nn
SIZES = [1, 2]
class M(nn.Module):
    def forward(self, x):
        return x.view(SIZES)
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
TOKEN_ATTEND_SELF_VALUE = -5e-4
class M(nn.Module):
    def forward(self, x):
        return x.masked_fill(x > 0, TOKEN_ATTEND_SELF_VALUE)
""",
            """
import torch
from torch import nn
TOKEN_ATTEND_SELF_VALUE = -5e-4
class M(nn.Module):
    def forward(self, x):
        return x.masked_fill(x > 0, -5e-4)
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # A top-level name bound to a literal, read in a compiled method.
        if file.tree is None:
            return bool(file.compiled)
        literals = {target.id for node in file.tree.body
                    if isinstance(node, ast.Assign | ast.AnnAssign)
                    for target in (node.targets if isinstance(node, ast.Assign)
                                   else [node.target])
                    if isinstance(target, ast.Name) and node.value is not None
                    and _ast_literal(node.value)}
        return bool(literals) and any(isinstance(node, ast.Name) and node.id in literals
                                      for node in file.compiled_nodes())

    def prepare(self, module: cst.Module) -> None:
        self.constants = module_constants(module)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.constants or not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        replacements: dict[int, cst.BaseExpression] = {}
        parts: list[str] = []
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            own = names_bound_in(func) | {p.name.value for lam in find_all(func, cst.Lambda)
                                          for p in lam.params.params}
            not_reads = {id(n) for a in find_all(func.body, cst.Attribute) for n in [a.attr]}
            not_reads |= {id(a.keyword) for a in find_all(func.body, cst.Arg)
                          if a.keyword is not None}
            parents = parent_map(func)
            for name in find_all(func.body, cst.Name):
                value = self.constants.get(name.value)
                if (value is None or name.value in own or id(name) in not_reads
                        or id(name) in skipped):
                    continue
                self.fixed(name, _CODE, f"module-level constant {name.value!r} read in "
                                        f"{method}()")
                if _bound_tighter(parents.get(id(name)), name, value):
                    value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                replacements[id(name)] = value
                parts.append(f"line {self.line_of(name)}: `{name.value}` -> `{code_of(value)}`")
        if not replacements:
            return cls
        rewritten = cls.visit(ReplaceById(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts)))
        return rewritten


def _bound_tighter(parent: cst.CSTNode | None, name: cst.Name, value: cst.BaseExpression
                   ) -> bool:
    """Whether ``value`` written where ``name`` stands needs parentheses to stay one operand:
    ``-2`` under ``**`` or a unary operator, a number or a tuple before ``.attr``, ``[i]`` or
    a call (``(-2) ** 2`` is not ``-2 ** 2``; ``5.bit_length()`` does not parse)."""
    if isinstance(value, cst.Tuple):
        return not value.lpar
    if isinstance(parent, cst.Attribute | cst.Subscript) and parent.value is name:
        return not isinstance(value, cst.SimpleString | cst.Name)
    if isinstance(parent, cst.Call) and parent.func is name:
        return True
    if isinstance(value, cst.UnaryOperation):
        return (isinstance(parent, cst.UnaryOperation)
                or (isinstance(parent, cst.BinaryOperation)
                    and isinstance(parent.operator, cst.Power) and parent.left is name))
    return False
