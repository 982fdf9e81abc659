"""The body typer annotate uses: the shared :class:`Typer`, plus what calls of this file's own
functions and of recurrent and attention layers return."""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.syntax import qualified_name
from tsfix.codemods.facts.value_types import Typer, type_from_annotation

# What calling these torch.nn layers returns (torch 2.13).
LAYER_RESULTS = {
    "LSTM": "Tuple[Tensor, Tuple[Tensor, Tensor]]",
    "GRU": "Tuple[Tensor, Tensor]",
    "RNN": "Tuple[Tensor, Tensor]",
    "LSTMCell": "Tuple[Tensor, Tensor]",
    "GRUCell": "Tensor",
    "RNNCell": "Tensor",
    "MultiheadAttention": "Tuple[Tensor, Optional[Tensor]]",
    "TransformerEncoderLayer": "Tensor",
    "TransformerDecoderLayer": "Tensor",
    "TransformerEncoder": "Tensor",
    "TransformerDecoder": "Tensor",
    "Transformer": "Tensor",
}


def layer_class(facts: ClassFacts, attr: str) -> str | None:
    """``LSTM`` when every assignment to ``self.<attr>`` stores ``torch.nn.LSTM(...)``."""
    assigned = [a for a in facts.assignments if a.attr == attr]
    if not assigned or not all(isinstance(a.value, cst.Call) for a in assigned):
        return None
    constructors = {qualified_name(a.value.func, facts.imports)  # type: ignore[union-attr]
                    for a in assigned}
    name = constructors.pop() if len(constructors) == 1 else None
    if not name or not name.startswith("torch.nn."):
        return None
    return name.rpartition(".")[2]


def module_functions(tree: cst.Module) -> dict[str, cst.FunctionDef]:
    return {s.name.value: s for s in tree.body if isinstance(s, cst.FunctionDef)}


class CalleeTyper(Typer):
    """A :class:`Typer` that also knows the return annotations of the file's functions and
    what recurrent and attention layers return."""

    def __init__(self, env: Mapping[str, str | None], facts: ClassFacts, self_var: str | None,
                 functions: Mapping[str, cst.FunctionDef]) -> None:
        super().__init__(env, facts.imports, self_var, facts.attributes, facts.layers)
        self.facts = facts
        self.functions = functions

    def _call(self, node: cst.Call) -> str | None:
        kind = super()._call(node)
        if kind is not None:
            return kind
        func = node.func
        if isinstance(func, cst.Name) and func.value in self.functions:
            returns = self.functions[func.value].returns
            return type_from_annotation(returns.annotation) if returns is not None else None
        if (isinstance(func, cst.Attribute) and self.self_var
                and isinstance(func.value, cst.Name) and func.value.value == self.self_var):
            layer = layer_class(self.facts, func.attr.value)
            return LAYER_RESULTS.get(layer) if layer else None
        return None
