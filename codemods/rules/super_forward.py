"""``super-forward``: ``super().forward(x)`` in a subclass of a torch layer becomes the layer's
functional form.

What it does
    In the methods TorchScript compiles (``forward()``, ``@torch.jit.export`` methods and the
    methods they call, outside ``@torch.jit.ignore`` and ``if not torch.jit.is_scripting():``)
    of a class that subclasses a torch layer, ``super().forward(x)`` and
    ``super(Cls, self).forward(x)`` become exactly what that layer's own ``forward`` runs
    (torch 2.13)::

        Conv1d/2d/3d            self._conv_forward(x, self.weight, self.bias)
        ConvTranspose1d/2d/3d   F.conv_transpose2d(x, self.weight, self.bias, self.stride,
                                                   self.padding, self.output_padding,
                                                   self.groups, self.dilation)
        Linear                  F.linear(x, self.weight, self.bias)
        Bilinear                F.bilinear(x1, x2, self.weight, self.bias)
        LayerNorm               F.layer_norm(x, self.normalized_shape, self.weight, self.bias,
                                             self.eps)
        RMSNorm                 F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
        GroupNorm               F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        Embedding               F.embedding(x, self.weight, self.padding_idx, self.max_norm,
                                            self.norm_type, self.scale_grad_by_freq, self.sparse)
        PReLU                   F.prelu(x, self.weight)

    The layer is found through the class's first base, following bases defined in the same file
    that do not define ``forward`` themselves. ``F`` is the file's name for
    ``torch.nn.functional``, else ``nn.functional`` when the file imports ``torch.nn`` as ``nn``;
    otherwise ``import torch.nn.functional as F`` is added after its ``import torch`` lines.

Why it breaks export
    TorchScript has no ``super()``: ``super().forward(x)`` compiles ``super()`` as an ordinary
    call and fails with the misleading "'Tensor' object has no attribute or method 'forward'",
    ``super(Cls, self)`` with "Python type cannot be used as a value", and calling the base
    explicitly (``nn.Conv2d.forward(self, x)``) with "attribute lookup is not defined on python
    value of type 'type'". The functional forms above script (measured on torch 2.13 for every
    entry, including Conv ``padding_mode="reflect"/"circular"``, ``bias=False`` and
    ``LayerNorm(bias=False)``) and give bit-identical outputs.

Example
    Before::

        class CausalConv1d(nn.Conv1d):
            def forward(self, x):
                return super().forward(F.pad(x, (self.left_pad, 0)))

    After::

        class CausalConv1d(nn.Conv1d):
            def forward(self, x):
                return self._conv_forward(F.pad(x, (self.left_pad, 0)), self.weight, self.bias)

Fix safety
    Each replacement is the body of the base's ``forward`` in torch 2.13, so eager outputs,
    gradients and in-place effects are unchanged in train and eval mode, and parameter names
    (checkpoints) are untouched. ``ConvTranspose`` is rewritten only for calls without
    ``output_size``. Left alone, with the reason reported: BatchNorm (training mode updates
    running statistics and ``num_batches_tracked``, which no single functional call does),
    InstanceNorm, recurrent layers, attention and transformer layers, ``Sequential``, other
    torch layers; a base whose ``forward`` is defined in this file (TorchScript cannot reach it
    through ``super()`` either) or outside it; calls with ``*args``/``**kwargs``, extra or unknown
    arguments; ``super(Other, self)``. ``Embedding`` with ``max_norm`` visibly set is refused:
    scripted ``F.embedding`` skips the in-place renormalisation that eager mode does (scripting a
    plain ``nn.Embedding(max_norm=...)`` has the same gap); when the class has no ``__init__``
    of its own, the rewrite carries a note saying so.
"""

from __future__ import annotations

import ast

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    names_used,
    qualified_name,
    self_name,
    short_source,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import

# Layer -> (forward's parameter names, functional template). ``{self}`` is the instance name,
# ``{F}`` the file's name for torch.nn.functional, ``{0}``, ``{1}`` the arguments.
_CONV = ("input",), "{self}._conv_forward({0}, {self}.weight, {self}.bias)"
_FORMS: dict[str, tuple[tuple[str, ...], str]] = {
    "Conv1d": _CONV, "Conv2d": _CONV, "Conv3d": _CONV,
    **{f"ConvTranspose{d}d": (("input",), f"{{F}}.conv_transpose{d}d({{0}}, {{self}}.weight, "
                                          "{self}.bias, {self}.stride, {self}.padding, "
                                          "{self}.output_padding, {self}.groups, "
                                          "{self}.dilation)")
       for d in (1, 2, 3)},
    "Linear": (("input",), "{F}.linear({0}, {self}.weight, {self}.bias)"),
    "Bilinear": (("input1", "input2"), "{F}.bilinear({0}, {1}, {self}.weight, {self}.bias)"),
    "LayerNorm": (("input",), "{F}.layer_norm({0}, {self}.normalized_shape, {self}.weight, "
                              "{self}.bias, {self}.eps)"),
    "RMSNorm": (("x",), "{F}.rms_norm({0}, {self}.normalized_shape, {self}.weight, {self}.eps)"),
    "GroupNorm": (("input",), "{F}.group_norm({0}, {self}.num_groups, {self}.weight, "
                              "{self}.bias, {self}.eps)"),
    "Embedding": (("input",), "{F}.embedding({0}, {self}.weight, {self}.padding_idx, "
                              "{self}.max_norm, {self}.norm_type, {self}.scale_grad_by_freq, "
                              "{self}.sparse)"),
    "PReLU": (("input",), "{F}.prelu({0}, {self}.weight)"),
}
_NEEDS_FUNCTIONAL = {name for name, (_, template) in _FORMS.items() if "{F}" in template}

_BATCH_NORM = ("BatchNorm's forward updates running_mean/running_var and num_batches_tracked "
               "in training mode (a cumulative average when momentum is None); no single "
               "functional call is exact in both train and eval mode")
_RECURRENT = ("the recurrent layer's forward (initial states, packed sequences, flattened "
              "weights) has no functional equivalent")
_REFUSED: dict[str, str] = {
    **{name: _BATCH_NORM for name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
                                      "SyncBatchNorm", "LazyBatchNorm1d", "LazyBatchNorm2d",
                                      "LazyBatchNorm3d")},
    **{f"InstanceNorm{d}d": "InstanceNorm's forward checks the input rank, handles unbatched "
                            "input and optional running statistics; no single functional call "
                            "is exact" for d in (1, 2, 3)},
    **{name: _RECURRENT for name in ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")},
    "Sequential": "Sequential's forward is a loop over its submodules; write the loop "
                  "(`for module in self: x = module(x)`)",
    "Module": "nn.Module has no forward to call",
}


def _super_forward_call(node: cst.Call) -> cst.Call | None:
    """The ``super(...)`` call of ``super(...).forward(...)``."""
    func = node.func
    if (isinstance(func, cst.Attribute) and func.attr.value == "forward"
            and isinstance(func.value, cst.Call)
            and get_full_name_for_node(func.value.func) == "super"):
        return func.value
    return None


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.BaseExpression]) -> None:
        self.replacements = replacements

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.replacements.get(id(original), updated)


class SuperForward(Rule):
    __doc__ = __doc__
    name = "super-forward"
    order = 20
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF211", "super-forward", "super().forward() in a compiled method",
             "In a subclass of a torch layer, super().forward(x) fails with \"'Tensor' object "
             "has no attribute or method 'forward'\"; call the functional form "
             "(self._conv_forward(...), F.linear(...))."),
    )
    summary = ("super().forward(x) in subclasses of torch layers becomes the layer's exact "
               "functional form (self._conv_forward, F.linear, F.layer_norm, ...)")

    VALID = (
        # BatchNorm: training mode updates running statistics; no exact functional form.
        """
import torch.nn as nn
class FrozenBN(nn.BatchNorm2d):
    def forward(self, x):
        return super().forward(x) * 2
""",
        # The base's forward is defined in this file.
        """
import torch.nn as nn
class Base(nn.Module):
    def forward(self, x):
        return x + 1
class Child(Base):
    def forward(self, x):
        return super().forward(x) * 2
""",
        # Not reached from forward: never compiled.
        """
import torch.nn as nn
class Proj(nn.Linear):
    def forward(self, x):
        return x
    def plain(self, x):
        return super().forward(x)
""",
    )
    INVALID = (
        Example(
            """
import torch.nn as nn
import torch.nn.functional as F
class CausalConv1d(nn.Conv1d):
    def __init__(self, channels, kernel_size):
        super().__init__(channels, channels, kernel_size)
        self.left_pad = kernel_size - 1
    def forward(self, x):
        return super().forward(F.pad(x, (self.left_pad, 0)))
""",
            """
import torch.nn as nn
import torch.nn.functional as F
class CausalConv1d(nn.Conv1d):
    def __init__(self, channels, kernel_size):
        super().__init__(channels, channels, kernel_size)
        self.left_pad = kernel_size - 1
    def forward(self, x):
        return self._conv_forward(F.pad(x, (self.left_pad, 0)), self.weight, self.bias)
""",
        ),
        # super(Cls, self), and torch.nn.functional imported for the rewrite.
        Example(
            """
import torch
class ChannelNorm(torch.nn.LayerNorm):
    def forward(self, x):
        y = super(ChannelNorm, self).forward(x.transpose(1, 2))
        return y.transpose(1, 2)
""",
            """
import torch
import torch.nn.functional as F
class ChannelNorm(torch.nn.LayerNorm):
    def forward(self, x):
        y = F.layer_norm(x.transpose(1, 2), self.normalized_shape, self.weight, self.bias, self.eps)
        return y.transpose(1, 2)
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        self.imports = self.facts.imports
        functional = sorted(local for local, full in self.imports.items()
                            if full == "torch.nn.functional")
        torch_names = sorted(local for local, full in self.imports.items() if full == "torch")
        nn_names = sorted(local for local, full in self.imports.items() if full == "torch.nn")
        self.add_functional_import = False
        self.functional: str | None
        if functional:
            self.functional = functional[0]
        elif nn_names:
            # ``from torch import nn``: ``nn.functional`` needs no new import line.
            self.functional = f"{nn_names[0]}.functional"
        elif "F" not in names_used(module):
            self.functional = "F"
            self.add_functional_import = True
        elif torch_names:
            self.functional = f"{torch_names[0]}.nn.functional"
        else:
            self.functional = None
        self.functional_used = False

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """A compiled method that calls ``super(...).<something>``: every model file has
        ``super().__init__()``, so the text alone says little."""
        if "super" not in file.text:
            return False
        return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                   and isinstance(node.func.value, ast.Call)
                   and isinstance(node.func.value.func, ast.Name)
                   and node.func.value.func.id == "super"
                   for node in file.compiled_nodes())

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        if self.source_text is not None and "super" not in self.source_text:
            return tree
        result = super().transform_module_impl(tree)
        if self.changes and self.functional_used and self.add_functional_import:
            result = _add_functional_import(result)
        return result

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        name = cls.name.value
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        replacements: dict[int, cst.BaseExpression] = {}
        parts: list[str] = []
        notes: list[str] = []
        for method, func in facts.compiled_methods():
            self_var = self_name(func)
            skipped = facts.never_compiled(method)
            for call in find_all(func.body, cst.Call):
                inner = _super_forward_call(call)
                if inner is None or id(call) in skipped:
                    continue
                message = f"super().forward() in {method}()"
                outcome = (self._replacement(cls, facts, self_var, call, inner)
                           if self_var is not None else f"{method}() has no self parameter")
                if isinstance(outcome, str):
                    self.skip(name, call, f"{method}(): `{short_source(call)}`: {outcome}",
                              code="TSF211", message=message)
                    continue
                self.fixed(call, "TSF211", message)
                layer, expression, note = outcome
                replacements[id(call)] = expression
                parts.append(f"line {self.line_of(call)}: `{short_source(call)}` -> "
                             f"{layer}'s functional form")
                if note:
                    notes.append(note)
        if not replacements:
            return cls
        rewritten = cls.visit(_Replace(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, name, self.span_of(cls), "; ".join(parts),
                                        notes=list(dict.fromkeys(notes))))
        return rewritten

    def _replacement(self, cls: cst.ClassDef, facts: ClassFacts, self_var: str, call: cst.Call,
                     inner: cst.Call) -> tuple[str, cst.BaseExpression, str | None] | str:
        """(layer, the functional expression, a note) or the reason it is not rewritten."""
        if inner.args:
            explicit = [a.value for a in inner.args]
            if (len(explicit) != 2 or any(a.keyword or a.star for a in inner.args)
                    or get_full_name_for_node(explicit[0]) != cls.name.value
                    or get_full_name_for_node(explicit[1]) != self_var):
                return (f"only `super()` and `super({cls.name.value}, {self_var})` are "
                        "resolved")
        layer = self._base_layer(cls)
        if layer.startswith("!"):
            return layer[1:]
        if layer in _REFUSED:
            return f"base nn.{layer}: {_REFUSED[layer]}"
        if layer not in _FORMS:
            return f"base nn.{layer}: no exact functional form known for it"
        parameters, template = _FORMS[layer]
        arguments = _bind(call, parameters)
        if arguments is None:
            return (f"nn.{layer}.forward takes ({', '.join(parameters)}); only those, passed "
                    "without * or **, are rewritten")
        functional = ""
        if layer in _NEEDS_FUNCTIONAL:
            if self.functional is None:
                return "the file has no name for torch.nn.functional, and `F` is taken"
            functional = self.functional
        note = None
        if layer == "Embedding":
            max_norm = _init_passes(facts.init, "max_norm", 3)
            if max_norm == "set":
                return ("Embedding with max_norm: scripted F.embedding skips the in-place "
                        "renormalisation eager mode does (as scripted nn.Embedding does)")
            if max_norm == "unknown":
                note = ("if built with max_norm, the scripted module skips the in-place "
                        "renormalisation eager mode does (as a scripted nn.Embedding does)")
        code = template.format(*(code_of(a) for a in arguments), self=self_var, F=functional)
        expression = cst.parse_expression(code)
        if layer in _NEEDS_FUNCTIONAL:
            self.functional_used = True
        return layer, expression.with_changes(lpar=call.lpar, rpar=call.rpar), note

    def _base_layer(self, cls: cst.ClassDef) -> str:
        """The torch layer ``super().forward`` resolves to, or ``"!<reason>"``."""
        seen: set[str] = set()
        current = cls
        while True:
            bases = [b for b in current.bases if b.keyword is None]
            if not bases:
                return f"!{current.name.value} has no base class"
            first = bases[0].value
            local = get_full_name_for_node(first) or code_of(first)
            qualified = qualified_name(first, self.imports) or ""
            if qualified.startswith("torch.nn."):
                return qualified.rpartition(".")[2]
            base = self.facts.classes.get(local)
            if base is None or local in seen:
                return f"!base `{local}` is defined outside this file"
            seen.add(local)
            if "forward" in self.facts.of(base).methods:
                return (f"!resolves to {local}.forward, defined in this file; TorchScript "
                        "cannot call it through super()")
            current = base


def _bind(call: cst.Call, parameters: tuple[str, ...]) -> list[cst.BaseExpression] | None:
    """The call's arguments in ``parameters`` order, when exactly those are passed."""
    values: dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is None:
            if index >= len(parameters):
                return None
            values[parameters[index]] = arg.value
        elif arg.keyword.value in parameters and arg.keyword.value not in values:
            values[arg.keyword.value] = arg.value
        else:
            return None
    if set(values) != set(parameters):
        return None
    return [values[p] for p in parameters]


def _init_passes(init: cst.FunctionDef | None, keyword: str, position: int) -> str:
    """Whether ``super().__init__`` in the class's ``__init__`` passes ``keyword``: "set",
    "unset" (absent or None) or "unknown" (no ``__init__`` of its own, or ``*args``)."""
    if init is None:
        return "unknown"
    for call in find_all(init.body, cst.Call):
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "__init__"
                and isinstance(func.value, cst.Call)
                and get_full_name_for_node(func.value.func) == "super"):
            continue
        if any(a.star for a in call.args):
            return "unknown"
        positional = [a for a in call.args if a.keyword is None]
        named = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        value = named.get(keyword)
        if value is None and len(positional) > position:
            value = positional[position].value
        if value is None or (isinstance(value, cst.Name) and value.value == "None"):
            return "unset"
        return "set"
    return "unknown"


def _add_functional_import(module: cst.Module) -> cst.Module:
    """``import torch.nn.functional as F`` after the file's last ``import torch...`` line."""
    line = cst.parse_statement("import torch.nn.functional as F\n")
    body = list(module.body)
    last = None
    for index, statement in enumerate(body):
        if (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.Import)
                and all((get_full_name_for_node(a.name) or "").split(".")[0] == "torch"
                        for a in statement.body[0].names)):
            last = index
    if last is None:
        return add_module_import(module, "torch.nn.functional as F")
    body.insert(last + 1, line)
    return module.with_changes(body=body)
