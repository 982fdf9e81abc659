"""``flatten-parameters``: ``rnn.flatten_parameters()`` in compiled methods is guarded.

What it does
    In compiled code (``forward()``, ``@torch.jit.export`` methods and the methods they call;
    not ``@torch.jit.ignore`` methods), every statement that is a bare
    ``<expr>.flatten_parameters()`` call (``self.rnn.flatten_parameters()``, ``rnn.flatten_
    parameters()`` on a local, ``self.flatten_parameters()`` for a helper of the class) is put
    under ``if not torch.jit.is_scripting():``. Consecutive calls share one guard, comments
    above the calls move above the guard, and ``import torch`` is added when the file only
    imports from torch. Calls already in the non-scripting branch of an ``is_scripting()`` test
    are left alone, so a second run changes nothing.

Why it breaks export
    ``nn.RNNBase.flatten_parameters`` (LSTM, GRU, RNN) is not scriptable: compiling it fails
    inside torch's own ``rnn.py`` (``SetComp aren't supported``), and moving the call into a
    ``@torch.jit.ignore`` helper fails at call time. TorchScript never compiles the body of
    ``if not torch.jit.is_scripting():``, and a scripted RNN does not need the call: it only
    re-packs the weights into one contiguous cuDNN buffer, a speed-up for multi-GPU training.

Example
    Before::

        def forward(self, x):
            self.rnn.flatten_parameters()  # faster multi-GPU training
            y, _ = self.rnn(x)
            return y

    After::

        def forward(self, x):
            if not torch.jit.is_scripting():
                self.rnn.flatten_parameters()  # faster multi-GPU training
            y, _ = self.rnn(x)
            return y

Fix safety
    Eager behaviour is unchanged: ``torch.jit.is_scripting()`` is False outside TorchScript, so
    the call runs exactly as before. The scripted module skips it; the weights are the same
    tensors either way (flattening changes their memory layout on CUDA, never their values).
    Not rewritten, with the reason reported: a call sharing its line with other statements
    (``a(); self.rnn.flatten_parameters()``) or written as a one-line body
    (``if c: self.rnn.flatten_parameters()``), and files that bind the name ``torch`` to
    something other than the torch module while not importing torch.
"""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts, is_exported, never_compiled_method
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import code_of, find_all, self_attr, self_name
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import

# ---- the rule -----------------------------------------------------------------------------------

def _flatten_call(statement: cst.CSTNode) -> cst.Call | None:
    """The ``<expr>.flatten_parameters()`` call a one-statement line consists of."""
    if not isinstance(statement, cst.SimpleStatementLine | cst.SimpleStatementSuite):
        return None
    if not any(_is_flatten(s) for s in statement.body):
        return None
    small = statement.body[0]
    if len(statement.body) == 1 and isinstance(small, cst.Expr):
        assert isinstance(small.value, cst.Call)
        return small.value
    return None


def _is_flatten(small: cst.BaseSmallStatement) -> bool:
    return isinstance(small, cst.Expr) and _is_flatten_call(small.value)


def _is_flatten_call(node: cst.CSTNode) -> bool:
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "flatten_parameters" and not node.args)


def _compiled_without(facts: ClassFacts, not_calls: set[int]) -> set[str]:
    """The compiled methods of the class once the calls in ``not_calls`` are guarded: a helper
    reached only through such a call is no longer compiled.
    TODO(facts): ``ClassFacts.compiled`` with calls to leave out (``compiled_without``)."""
    methods = facts.methods
    order = [name for name in facts.compiled
             if name == "forward" or is_exported(methods[name])]
    for name in order:
        func = methods[name]
        self_var = self_name(func)
        if self_var is None:
            continue
        skipped = facts.never_compiled(name)
        for call in find_all(func.body, cst.Call):
            callee = self_attr(call.func, self_var)
            if (callee in methods and callee not in order and callee != "__init__"
                    and id(call) not in skipped and id(call) not in not_calls
                    and not never_compiled_method(methods[callee])):
                order.append(callee)
    return set(order)


class _Guard(cst.CSTTransformer):
    """Wraps each run of consecutive guarded statements of one block in one ``if``."""

    def __init__(self, targets: set[int], test: str) -> None:
        self.targets = targets
        self.test = test

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        if not any(id(s) in self.targets for s in original_node.body):
            return updated_node
        body: list[cst.BaseStatement] = []
        run: list[cst.BaseStatement] = []
        for original, updated in zip(original_node.body, updated_node.body, strict=True):
            if id(original) in self.targets:
                run.append(updated)
                continue
            if run:
                body.append(self._guard(run))
                run = []
            body.append(updated)
        if run:
            body.append(self._guard(run))
        return updated_node.with_changes(body=body)

    def _guard(self, statements: list[cst.BaseStatement]) -> cst.If:
        first = statements[0]
        assert isinstance(first, cst.SimpleStatementLine)
        guard = cst.parse_statement(f"if {self.test}:\n    pass\n")
        assert isinstance(guard, cst.If) and isinstance(guard.body, cst.IndentedBlock)
        inner = [first.with_changes(leading_lines=[]), *statements[1:]]
        return guard.with_changes(leading_lines=first.leading_lines,
                                  body=guard.body.with_changes(body=inner))


class FlattenParameters(Rule):
    __doc__ = __doc__
    name = "flatten-parameters"
    order = 30
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF212", "flatten-parameters", "RNN flatten_parameters() in a compiled method",
             "flatten_parameters() does not compile (the failure points inside torch's rnn.py). "
             "Drop it or guard it with `if not torch.jit.is_scripting():`."),
    )
    summary = ("Guard rnn.flatten_parameters() calls in compiled methods with "
               "`if not torch.jit.is_scripting():`")

    VALID = (
        # Already guarded.
        """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 4)
    def forward(self, x):
        if not torch.jit.is_scripting():
            self.rnn.flatten_parameters()
        return self.rnn(x)[0]
""",
        # Not reached from forward.
        """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 4)
        self.rnn.flatten_parameters()
    def forward(self, x):
        return self.rnn(x)[0]
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn1 = nn.LSTM(4, 4, batch_first=True)
        self.rnn2 = nn.GRU(4, 4, batch_first=True)
    def forward(self, x):
        # Enables faster multi-GPU training.
        self.rnn1.flatten_parameters()
        self.rnn2.flatten_parameters()
        y, _ = self.rnn1(x)
        return self.rnn2(y)[0]
""",
            """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn1 = nn.LSTM(4, 4, batch_first=True)
        self.rnn2 = nn.GRU(4, 4, batch_first=True)
    def forward(self, x):
        # Enables faster multi-GPU training.
        if not torch.jit.is_scripting():
            self.rnn1.flatten_parameters()
            self.rnn2.flatten_parameters()
        y, _ = self.rnn1(x)
        return self.rnn2(y)[0]
""",
        ),
        # Only `from torch import nn`: `import torch` is added; a call under `if self.training`.
        Example(
            """
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 4)
    def forward(self, x):
        if self.training:
            self.gru.flatten_parameters()
        return self.gru(x)[0]
""",
            """
import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 4)
    def forward(self, x):
        if self.training:
            if not torch.jit.is_scripting():
                self.gru.flatten_parameters()
        return self.gru(x)[0]
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        alias = self.facts.torch_alias
        self.needs_torch_import = alias is None
        self.torch = alias or "torch"
        self.name_clash = alias is None and "torch" in self.facts.top_level_names

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        return "flatten_parameters" in file.text

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        text = self.source_text
        if text is not None and "flatten_parameters" not in text:
            return tree
        result = super().transform_module_impl(tree)
        if self.changes and self.needs_torch_import:
            result = add_module_import(result, "torch")
        return result

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        name = cls.name.value
        candidates: list[tuple[str, cst.SimpleStatementLine | cst.SimpleStatementSuite]] = []
        others: list[tuple[str, cst.Call]] = []
        guarded_calls: set[int] = set()
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            in_statements: set[int] = set()
            for statement in find_all(func.body, cst.SimpleStatementLine,
                                      cst.SimpleStatementSuite):
                if id(statement) in skipped or not any(_is_flatten(s) for s in statement.body):
                    continue
                candidates.append((method, statement))
                in_statements.update(id(s.value) for s in statement.body if _is_flatten(s))
                call = _flatten_call(statement)
                if call is not None:
                    guarded_calls.add(id(call))
            others.extend((method, call) for call in find_all(func.body, cst.Call)
                          if _is_flatten_call(call) and id(call) not in skipped
                          and id(call) not in in_statements)
        if not candidates and not others:
            return cls
        # A helper reached only through a call that gets guarded is no longer compiled.
        compiled = _compiled_without(facts, guarded_calls)
        targets: set[int] = set()
        parts: list[str] = []
        for method, call in others:
            if method in compiled:
                self.skip(name, call, f"{method}(): `{code_of(call)}` is not a statement of its "
                          "own; only a call on a line of its own is guarded",
                          code="TSF212", message=f"{code_of(call.func)}() in {method}()")
        for method, statement in candidates:
            if method not in compiled:
                continue
            small = next(s for s in statement.body if _is_flatten(s))
            assert isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
            shown = code_of(small).strip()
            message = f"{code_of(small.value.func)}() in {method}()"
            if self.name_clash:
                reason = (f"{method}(): `{shown}` not guarded: the file binds `torch` to "
                          "something else, so `torch.jit.is_scripting()` cannot be written")
            elif isinstance(statement, cst.SimpleStatementSuite):
                reason = (f"{method}(): `{shown}` is a one-line body; put it on its own line "
                          "to have it guarded")
            elif _flatten_call(statement) is None:
                reason = (f"{method}(): `{shown}` shares its line with other statements; put "
                          "it on its own line to have it guarded")
            else:
                self.fixed(small.value, "TSF212", message)
                targets.add(id(statement))
                parts.append(f"line {self.line_of(statement)}: `{shown}`")
                continue
            for other in statement.body:
                if isinstance(other, cst.Expr) and _is_flatten(other):
                    assert isinstance(other.value, cst.Call)
                    self.skip(name, other.value, reason, code="TSF212",
                              message=f"{code_of(other.value.func)}() in {method}()")
        if not targets:
            return cls
        rewritten = cls.visit(_Guard(targets, f"not {self.torch}.jit.is_scripting()"))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(
            self.name, name, self.span_of(cls),
            f"guarded by `if not {self.torch}.jit.is_scripting():`: {', '.join(parts)}"))
        return rewritten
