"""``drop-variable``: legacy ``torch.autograd.Variable(t)`` in compiled methods is dropped.

What it does
    In compiled code (``forward()``, ``@torch.jit.export`` methods and the methods they call;
    not ``@torch.jit.ignore`` methods nor ``if not torch.jit.is_scripting():`` branches), every
    call of ``torch.autograd.Variable`` --
    found by its import binding: ``from torch.autograd import Variable``, ``from
    torch.autograd import Variable as V``, ``torch.autograd.Variable``, ``autograd.Variable``
    after ``from torch import autograd`` -- becomes what it computes in today's torch::

        Variable(t)                              ->  t.detach()
        Variable(t, requires_grad=True)          ->  t.detach().requires_grad_()
        Variable(t, requires_grad=flag)          ->  t.detach().requires_grad_(flag)
        Variable(torch.zeros(b, d))              ->  torch.zeros(b, d)

    ``.detach()`` is left out when ``t`` is a fresh tensor from a factory (``torch.zeros``,
    ``torch.randn``, ``x.new_zeros``, ... without ``requires_grad=``), where it changes
    nothing. The ``Variable`` import is removed when no other code of the file uses the name.
    A ``Variable`` of another library (``chainer.Variable``) is never touched.

Why it breaks export
    ``Variable`` is a Python class with a metaclass that TorchScript cannot compile; any
    compiled method calling it fails to script. Since torch 0.4 it is a plain Tensor factory.

Example
    Before::

        from torch.autograd import Variable

        def forward(self, x):
            pad = Variable(torch.zeros(x.size(0), self.dim, 1)).type(x.type())
            h0 = Variable(self.h0.expand(2, x.size(0), -1), requires_grad=False)

    After::

        def forward(self, x):
            pad = torch.zeros(x.size(0), self.dim, 1).type(x.type())
            h0 = self.h0.expand(2, x.size(0), -1).detach()

Fix safety
    Exact in eager mode, gradients included: measured on torch 2.13, ``Variable(t)`` returns
    a new tensor sharing ``t``'s storage, detached from its graph (``requires_grad=False``, a
    leaf, even when ``t`` required grad), which is what ``t.detach()`` returns; the
    ``requires_grad`` flag is then set on that leaf, so ``.requires_grad_()`` never meets a
    non-leaf tensor. ``volatile=`` has had no effect since torch 0.4 (it only warned); it is
    dropped and the class's notes say so. Not rewritten, with the reason reported: calls
    without a tensor argument, with ``*args``/``**kwargs`` or with other keywords.
"""

from __future__ import annotations

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import code_of, find_all, qualified_name
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_VARIABLE = ("torch.autograd.Variable", "torch.autograd.variable.Variable")
# Tensor factories whose result is a new leaf that does not require grad (unless asked with
# requires_grad=): detaching it changes nothing.
_FACTORIES = {"zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
              "arange", "linspace", "logspace", "eye", "tensor", "as_tensor", "from_numpy",
              "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
              "randint_like", "FloatTensor", "LongTensor", "Tensor"}
_NEW_METHODS = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}


def _is_fresh(expr: cst.BaseExpression, imports: dict[str, str]) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    if any(a.keyword is not None and a.keyword.value == "requires_grad" for a in expr.args):
        return False
    if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _NEW_METHODS:
        return True
    qual = qualified_name(expr.func, imports) or ""
    head, _, last = qual.rpartition(".")
    return head == "torch" and last in _FACTORIES


def _atomic(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` parenthesised when ``.method()`` cannot be appended to it as it is."""
    if expr.lpar or isinstance(expr, cst.Name | cst.Attribute | cst.Call | cst.Subscript):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _method(value: cst.BaseExpression, name: str, *args: cst.BaseExpression) -> cst.Call:
    return cst.Call(cst.Attribute(_atomic(value), cst.Name(name)), [cst.Arg(a) for a in args])


class DropVariable(Rule):
    __doc__ = __doc__
    name = "drop-variable"
    order = 40
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF213", "variable", "torch.autograd.Variable in a compiled method",
             "Variable is a no-op wrapper since torch 0.4 and does not script (\"Class Variable "
             "does not have an __init__ function\"). Use the tensor itself."),
    )
    summary = ("Replace legacy torch.autograd.Variable(t) in compiled methods with the tensor "
               "(t.detach(), .requires_grad_() when asked)")

    VALID = (
        # chainer's Variable is another class.
        """
import chainer
from torch import nn
class M(nn.Module):
    def forward(self, x):
        return chainer.Variable(x)
""",
        # Not in a compiled method.
        """
from torch import nn
from torch.autograd import Variable
class M(nn.Module):
    def forward(self, x):
        return x * 2
    def loss(self, x):
        return Variable(x).sum()
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
from torch.autograd import Variable
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.h0 = nn.Parameter(torch.zeros(1, 1, 4))
    def forward(self, x):
        pad = Variable(torch.zeros(x.size(0), 1, 4))
        h0 = Variable(self.h0.expand(1, x.size(0), -1), requires_grad=True)
        return torch.cat([x, pad, h0.transpose(0, 1)], 1)
""",
            """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.h0 = nn.Parameter(torch.zeros(1, 1, 4))
    def forward(self, x):
        pad = torch.zeros(x.size(0), 1, 4)
        h0 = self.h0.expand(1, x.size(0), -1).detach().requires_grad_()
        return torch.cat([x, pad, h0.transpose(0, 1)], 1)
""",
        ),
        # Through the module, with a computed argument; the import stays (torch is used).
        Example(
            """
import torch
class M(torch.nn.Module):
    def forward(self, x, y):
        return torch.autograd.Variable(x + y) * 2
""",
            """
import torch
class M(torch.nn.Module):
    def forward(self, x, y):
        return (x + y).detach() * 2
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        self.imports = self.facts.imports

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # ... in a module class's compiled method: the only code the rule reads.
        return "Variable" in file.text and (file.tree is None or bool(file.compiled))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        text = self.source_text
        if text is not None and "Variable" not in text:
            return tree
        result = super().transform_module_impl(tree)
        if not self.changes:
            return result
        aliases = {local for local, full in self.imports.items() if full in _VARIABLE}
        return _drop_unused_imports(result, aliases)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        replacements: dict[int, cst.BaseExpression] = {}
        parts: list[str] = []
        notes: list[str] = []
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            for call in find_all(func.body, cst.Call):
                if id(call) in skipped or qualified_name(call.func, self.imports) not in _VARIABLE:
                    continue
                new, reason, volatile = self._replacement(call)
                shown = code_of(call.with_changes(lpar=[], rpar=[]))
                message = f"Variable(...) in {method}()"
                if new is None:
                    self.skip(cls.name.value, call, f"{method}(): `{shown}` left alone: {reason}",
                              code="TSF213", message=message)
                    continue
                self.fixed(call, "TSF213", message)
                replacements[id(call)] = new.with_changes(lpar=call.lpar, rpar=call.rpar)
                line = self.line_of(call)
                parts.append(f"line {line}: `{shown}` -> `{code_of(new)}`")
                if volatile:
                    notes.append(f"line {line}: volatile= dropped; it has had no effect since "
                                 "torch 0.4 (use `with torch.no_grad():`)")
        if not replacements:
            return cls
        rewritten = cls.visit(_Replace(self, replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return rewritten

    def _replacement(self, call: cst.Call) -> tuple[cst.BaseExpression | None, str, bool]:
        """The expression replacing ``call``, or None and why; and whether volatile= went."""
        slots: dict[str, cst.BaseExpression] = {}
        names = ("data", "requires_grad", "volatile")
        for index, arg in enumerate(call.args):
            if arg.star:
                return None, "*args/**kwargs hide what it receives", False
            if arg.keyword is None:
                if index >= len(names):
                    return None, "more positional arguments than Variable takes", False
                slots[names[index]] = arg.value
            elif arg.keyword.value in names:
                slots[arg.keyword.value] = arg.value
            else:
                return None, f"unsupported keyword `{arg.keyword.value}=`", False
        data = slots.get("data")
        if data is None:
            return None, "no tensor argument (Variable() makes an empty tensor)", False
        value = data if _is_fresh(data, self.imports) else _method(data, "detach")
        flag = slots.get("requires_grad")
        flag_name = get_full_name_for_node(flag) if flag is not None else None
        if flag is not None and flag_name != "False":
            value = (_method(value, "requires_grad_") if flag_name == "True"
                     else _method(value, "requires_grad_", flag))
        return value, "", "volatile" in slots


class _Replace(cst.CSTTransformer):
    def __init__(self, rule: DropVariable, replacements: dict[int, cst.BaseExpression]) -> None:
        self.rule = rule
        self.replacements = replacements

    def leave_Call(self, original_node: cst.Call,
                   updated_node: cst.Call) -> cst.BaseExpression:
        if id(original_node) not in self.replacements:
            return updated_node
        # Built again from the updated call: a Variable nested in the argument is replaced too.
        new = self.rule._replacement(updated_node)[0]
        assert new is not None
        return new.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)


def _drop_unused_imports(module: cst.Module, aliases: set[str]) -> cst.Module:
    """Remove ``from torch.autograd import Variable`` (or just that name) when nothing else in
    the file reads the name any more."""
    attribute_names = {id(a.attr) for a in find_all(module, cst.Attribute)}
    import_names = {id(n) for i in find_all(module, cst.ImportFrom, cst.Import)
                    for n in find_all(i, cst.Name)}
    used = {n.value for n in find_all(module, cst.Name)
            if id(n) not in attribute_names and id(n) not in import_names}
    unused = aliases - used
    if not unused:
        return module
    body: list[cst.BaseStatement] = []
    carried: list[cst.EmptyLine] = []
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and \
                isinstance(statement.body[0], cst.ImportFrom):
            small = statement.body[0]
            origin = get_full_name_for_node(small.module) if small.module else None
            if (origin in ("torch.autograd", "torch.autograd.variable") and not small.relative
                    and not isinstance(small.names, cst.ImportStar)):
                kept = [a for a in small.names
                        if get_full_name_for_node(a.asname.name if a.asname else a.name)
                        not in unused]
                if not kept:
                    if any(line.comment for line in statement.leading_lines):
                        carried = list(statement.leading_lines)
                    continue
                if len(kept) != len(small.names):
                    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    statement = statement.with_changes(
                        body=[small.with_changes(names=kept)])
        if carried:
            # A comment above a removed import stays, above what follows it.
            statement = statement.with_changes(
                leading_lines=[*carried, *statement.leading_lines])
            carried = []
        body.append(statement)
    return module.with_changes(body=body)
