"""Types from the callee: what a call says about the argument it is given.

A ``None``-default parameter passed straight to a callee whose parameter has a type takes that
type: ``self.rnn(x, hx)`` with ``self.rnn = nn.LSTM(...)`` makes ``hx`` a
``Tuple[Tensor, Tensor]`` (Optional by its default); ``self.attend(q, mask)`` with ``def
attend(self, q, mask: Optional[torch.Tensor] = None)`` makes ``mask`` a Tensor; so does a
function of the same file (by its annotation, or by the one annotate has just given it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import libcst as cst
from tsfix.codemods.facts.syntax import find_all, parent_map, self_attr, self_name
from tsfix.codemods.facts.value_types import TENSOR, is_complete, type_from_annotation, without_none
from tsfix.codemods.rules.annotate._common import is_name
from tsfix.codemods.rules.annotate._state import MethodState
from tsfix.codemods.rules.annotate._typer import layer_class

_PAIR = "Tuple[Tensor, Tensor]"
# forward() parameters of the torch.nn layers whose types matter for an argument passed to them
# (read from torch 2.13's signatures and overloads; ``nn.LSTM.forward`` itself is unannotated,
# its overloads say ``hx: Optional[Tuple[Tensor, Tensor]]``, ``nn.GRU``'s ``Optional[Tensor]``).
# The types are what a non-None argument is.
LAYER_PARAMETERS: dict[str, tuple[tuple[str, str], ...]] = {
    "LSTM": (("input", TENSOR), ("hx", _PAIR)),
    "GRU": (("input", TENSOR), ("hx", TENSOR)),
    "RNN": (("input", TENSOR), ("hx", TENSOR)),
    "LSTMCell": (("input", TENSOR), ("hx", _PAIR)),
    "GRUCell": (("input", TENSOR), ("hx", TENSOR)),
    "RNNCell": (("input", TENSOR), ("hx", TENSOR)),
    "MultiheadAttention": (("query", TENSOR), ("key", TENSOR), ("value", TENSOR),
                           ("key_padding_mask", TENSOR), ("need_weights", "bool"),
                           ("attn_mask", TENSOR), ("average_attn_weights", "bool"),
                           ("is_causal", "bool")),
    "TransformerEncoderLayer": (("src", TENSOR), ("src_mask", TENSOR),
                                ("src_key_padding_mask", TENSOR), ("is_causal", "bool")),
    "TransformerDecoderLayer": (("tgt", TENSOR), ("memory", TENSOR), ("tgt_mask", TENSOR),
                                ("memory_mask", TENSOR), ("tgt_key_padding_mask", TENSOR),
                                ("memory_key_padding_mask", TENSOR), ("tgt_is_causal", "bool"),
                                ("memory_is_causal", "bool")),
    "TransformerEncoder": (("src", TENSOR), ("mask", TENSOR), ("src_key_padding_mask", TENSOR),
                           ("is_causal", "bool")),
    "TransformerDecoder": (("tgt", TENSOR), ("memory", TENSOR), ("tgt_mask", TENSOR),
                           ("memory_mask", TENSOR), ("tgt_key_padding_mask", TENSOR),
                           ("memory_key_padding_mask", TENSOR), ("tgt_is_causal", "bool"),
                           ("memory_is_causal", "bool")),
    "Transformer": (("src", TENSOR), ("tgt", TENSOR), ("src_mask", TENSOR), ("tgt_mask", TENSOR),
                    ("memory_mask", TENSOR), ("src_key_padding_mask", TENSOR),
                    ("tgt_key_padding_mask", TENSOR), ("memory_key_padding_mask", TENSOR),
                    ("src_is_causal", "bool"), ("tgt_is_causal", "bool"),
                    ("memory_is_causal", "bool")),
}


class Parameters:
    """A callee's parameters after ``self``: those a positional argument binds, in order,
    and every one by name, with the type each declares ("" when it declares none)."""

    def __init__(self, positional: Sequence[tuple[str, str]],
                 keyword_only: Sequence[tuple[str, str]] = ()) -> None:
        self.positional = list(positional)
        self.by_name = dict([*positional, *keyword_only])


def callee_type(method: MethodState, call: cst.Call, arg: cst.Arg) -> str | None:
    """The type ``call``'s callee declares for the parameter ``arg`` binds (without its
    Optional: the argument's own None default says that), else None."""
    parameters = _callee_parameters(method, call.func)
    if parameters is None or arg.star:
        return None
    if arg.keyword is not None:
        return parameters.by_name.get(arg.keyword.value) or None
    positional = [a for a in call.args if a.keyword is None]
    index = next(i for i, a in enumerate(positional) if a is arg)
    if any(a.star for a in positional[:index]) or index >= len(parameters.positional):
        return None
    return parameters.positional[index][1] or None


def _callee_parameters(method: MethodState, func: cst.BaseExpression) -> Parameters | None:
    facts = method.facts
    if isinstance(func, cst.Attribute) and method.self_var and \
            self_attr(func, method.self_var) is not None:
        called = func.attr.value
        layer = layer_class(facts, called)
        if layer is not None:
            known = LAYER_PARAMETERS.get(layer)
            return Parameters(known) if known is not None else None
        submodule = _submodule_class(method, called)
        if submodule is not None:
            return _forward_parameters(method, submodule)
        callee = facts.methods.get(called)
        if callee is None or called not in facts.compiled:
            return None
        return _declared(callee, skip_first=self_name(callee) is not None,
                         decided=method.callee_types.get(called, {}))
    if isinstance(func, cst.Name):
        narrowed = _isinstance_class(method, func)
        if narrowed is not None:
            return _forward_parameters(method, narrowed)
        function = method.functions.get(func.value)
        if function is not None:
            return _declared(function, skip_first=False,
                             decided=method.function_types.get(func.value, {}))
        if func.value in method.imported:
            return Parameters(method.imported[func.value])
    return None


def _submodule_class(method: MethodState, attr: str) -> cst.ClassDef | None:
    """The module class of this file that every assignment to ``self.<attr>`` constructs
    (``self.se_block = SEBlock(...)``), else None."""
    assigned = [a.value for a in method.facts.assignments if a.attr == attr]
    constructors = [v.func for v in assigned if isinstance(v, cst.Call)]
    names = {f.value for f in constructors if isinstance(f, cst.Name)}
    if not assigned or len(constructors) != len(assigned) or len(names) != 1 or \
            not all(isinstance(f, cst.Name) for f in constructors):
        return None
    return _module_class(method, names.pop())


def _isinstance_class(method: MethodState, callee: cst.Name) -> cst.ClassDef | None:
    """The module class of this file that an enclosing ``if isinstance(layer, Block):``
    narrows the called name to (TorchScript refines it there: ``layer(x, lengths=lengths)``
    calls ``Block.forward``), else None."""
    body = method.func.body
    if not any(is_name(c.func, "isinstance") and c.args and is_name(c.args[0].value,
                                                                    callee.value)
               for c in find_all(body, cst.Call)):
        return None     # the usual case, answered without a parent map
    parents = parent_map(body)
    node: cst.CSTNode = callee
    while id(node) in parents:
        parent = parents[id(node)]
        test = parent.test if isinstance(parent, cst.If) and node is parent.body else None
        if (isinstance(test, cst.Call) and is_name(test.func, "isinstance")
                and len(test.args) == 2 and is_name(test.args[0].value, callee.value)
                and isinstance(test.args[1].value, cst.Name)):
            return _module_class(method, test.args[1].value.value)
        node = parent
    return None


def _module_class(method: MethodState, name: str) -> cst.ClassDef | None:
    """The module class ``name`` of this file when it is defined before the class being
    annotated: its forward() types are then decided in this pass. A class defined after it
    is not followed: its types would be known only to a second run, which would change the
    file again (transformers' DebertaV2Attention calls the later DebertaV2SelfAttention)."""
    rule_facts = method.rule.facts
    for statement in rule_facts.tree.body:
        if not isinstance(statement, cst.ClassDef):
            continue
        if statement.name.value == method.facts.name:
            return None
        if statement.name.value == name and rule_facts.is_module_class(statement):
            return statement
    return None


def _forward_parameters(method: MethodState, cls: cst.ClassDef) -> Parameters | None:
    """A module class's forward() parameters, with the types annotate gave it in this pass."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    forward = next((s for s in body if isinstance(s, cst.FunctionDef)
                    and s.name.value == "forward"), None)
    return None if forward is None else _declared(
        forward, skip_first=self_name(forward) is not None,
        decided=method.forward_types.get(cls.name.value, {}))


def _declared(func: cst.FunctionDef, *, skip_first: bool,
              decided: Mapping[str, str] | None = None) -> Parameters:
    """The callee's parameters, typed by their annotations or by what annotate decided for
    them in this pass (a keyword-only parameter it made ordinary binds by name only here,
    as callers written for the original signature do)."""
    params = [*func.params.posonly_params, *func.params.params]
    if skip_first:
        params = params[1:]
    decided = decided or {}
    return Parameters([_typed(p, decided) for p in params],
                      [_typed(p, decided) for p in func.params.kwonly_params])


def _typed(param: cst.Param, decided: Mapping[str, str]) -> tuple[str, str]:
    kind = (type_from_annotation(param.annotation.annotation)
            if param.annotation is not None else decided.get(param.name.value))
    inner = without_none(kind) if kind else None
    return param.name.value, inner if inner and is_complete(inner) else ""
