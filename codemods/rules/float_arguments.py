"""``float-arguments``: an int passed where a torch function or layer takes a ``float`` becomes a
float (``0`` -> ``0.0``, ``self.max_clip`` -> ``float(self.max_clip)``).

What it does
    In the methods TorchScript compiles (``forward()``, ``@torch.jit.export`` methods and the
    methods they call, outside ``@torch.jit.ignore`` and ``if not torch.jit.is_scripting():``)
    it finds the arguments given to a parameter that TorchScript types ``float`` (or
    ``Optional[float]``, ``List[float]``) in these functions, by position or by keyword::

        F.hardtanh min_val, max_val       F.dropout/dropout1d/2d/3d, alpha_dropout,
        F.elu, F.celu alpha                 feature_alpha_dropout p; torch.dropout,
        F.leaky_relu negative_slope         torch.alpha_dropout, torch.feature_dropout p
        F.threshold threshold, value      F.rrelu lower, upper
        F.normalize p, eps                F.layer_norm, F.group_norm, F.rms_norm eps
        F.batch_norm, F.instance_norm     F.local_response_norm alpha, beta, k
          momentum, eps                   F.pad value; F.interpolate scale_factor
        F.scaled_dot_product_attention    F.cosine_similarity eps; F.pairwise_distance p, eps
          dropout_p, scale                F.gumbel_softmax tau, eps; F.embedding max_norm,
        torch.cdist p; torch.logit eps      norm_type; torch.nan_to_num nan, posinf, neginf

    (``F`` is ``torch.nn.functional``; ``torch.cosine_similarity``, ``torch.pairwise_distance``,
    ``torch.layer_norm`` and ``torch.group_norm`` too), and in ``__init__`` the arguments of the
    torch layers that store such a value and pass it on in their own ``forward``::

        nn.Dropout/Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout p
        nn.LeakyReLU negative_slope; nn.ELU, nn.CELU alpha; nn.Hardtanh min_val, max_val
        nn.Threshold threshold, value; nn.RReLU lower, upper
        nn.LayerNorm, nn.GroupNorm eps; nn.BatchNorm1d/2d/3d, nn.InstanceNorm1d/2d/3d eps,
          momentum; nn.LocalResponseNorm alpha, beta, k
        nn.CosineSimilarity eps; nn.PairwiseDistance p, eps; nn.Embedding max_norm, norm_type
        nn.MultiheadAttention dropout; nn.TransformerEncoderLayer/DecoderLayer, nn.Transformer
          dropout, layer_norm_eps

    An argument known to be an int becomes a float: an int literal is written as a float literal
    (``0`` -> ``0.0``, ``-1`` -> ``-1.0``, ``scale_factor=(2, 2)`` -> ``(2.0, 2.0)``), any other
    int value is wrapped in ``float(...)``. What is an int: a literal, an ``int`` annotation, an
    int default, an attribute ``__init__`` stores an int in (``self.relu_max_clip =
    relu_max_clip`` with ``relu_max_clip: int = 20``, or ``p: float = 0``: the default is an int
    whatever the annotation says), arithmetic on ints, ``len(...)``, ``int(...)``.

Why it breaks export
    TorchScript does not convert an int to a float when it matches a call: ``F.hardtanh(x, 0,
    20)`` fails with "Expected a value of type 'float' for argument 'min_val' but instead found
    type 'int'" (measured on torch 2.13 for every entry above, with a literal, an int
    attribute and an int parameter; the float forms script). A module attribute has the type
    of the value it holds when the model is scripted, so ``self.p = p`` with ``p: float = 0``
    is an int attribute, and ``nn.Dropout(0)`` fails inside torch's own ``Dropout.forward``.
    Parameters that TorchScript types ``Scalar`` (``torch.clamp``, ``F.softplus``,
    ``F.hardshrink``, ``nn.Softplus``, ``nn.Upsample``, recurrent layers' ``dropout``) accept
    ints and are not touched: there an int and a float differ (``torch.clamp`` of an int tensor
    with a float bound returns a float tensor).

Example
    Before::

        class FullyConnected(torch.nn.Module):
            def __init__(self, n_feature: int, n_hidden: int, relu_max_clip: int = 20):
                super().__init__()
                self.fc = torch.nn.Linear(n_feature, n_hidden)
                self.relu_max_clip = relu_max_clip

            def forward(self, x):
                return torch.nn.functional.hardtanh(self.fc(x), 0, self.relu_max_clip)

    After::

            def forward(self, x):
                return torch.nn.functional.hardtanh(self.fc(x), 0.0, float(self.relu_max_clip))

Fix safety
    Eager results are identical: each of these functions turns the number into a C++ double (or
    the tensor's dtype) either way; measured for every entry on float32/64, float16, bfloat16,
    int64, int32, uint8 and bool tensors (same values, same dtype, or the same error). A
    layer built with ``0.0`` instead of ``0`` stores a float, so its ``repr`` shows ``p=0.0``.
    Ints beyond 2**53 have no exact float: such a literal is refused, and ``float(...)`` of an
    int attribute that large would round (no model holds a dropout rate or an epsilon that
    large). Left alone, with the reason reported: a value that may be a bool (TorchScript takes
    a bool there; converting one would hide a likely slip, e.g. ``self.training`` passed as
    ``p``), or may be None (``float(None)`` fails), a non-literal that may be None where the
    parameter accepts None (``F.pad`` ``value``, ``F.interpolate`` ``scale_factor``) and whose
    type comes from a default alone (a caller may pass None), a value whose type cannot be
    read (no annotation, no default), ``*args``/``**kwargs`` calls, and files that rebind
    ``float``. Floats, bools and tensors in those slots are not reported: they script.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts, never_compiled_nodes
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    ReplaceById,
    code_of,
    find_all,
    literal_type,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import type_from_annotation
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.validation.protocol import function_change_name

# ---- what takes a float (measured on torch 2.13: an int fails to script, a float scripts) -------


@dataclass(frozen=True)
class _Slot:
    name: str
    position: int | None        # None: keyword-only
    accepts_none: bool = False  # ``Optional[float]``: None is a valid value there
    sequence: bool = False      # ``Optional[List[float]]`` too: a tuple of ints is converted


_P1 = (_Slot("p", 1),)
_FUNCTIONS: dict[str, tuple[_Slot, ...]] = {
    **{f"torch.nn.functional.{name}": _P1
       for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                    "feature_alpha_dropout")},
    **{f"torch.{name}": _P1 for name in ("dropout", "alpha_dropout", "feature_dropout")},
    "torch.nn.functional.hardtanh": (_Slot("min_val", 1), _Slot("max_val", 2)),
    "torch.nn.functional.elu": (_Slot("alpha", 1),),
    "torch.nn.functional.celu": (_Slot("alpha", 1),),
    "torch.nn.functional.leaky_relu": (_Slot("negative_slope", 1),),
    "torch.nn.functional.threshold": (_Slot("threshold", 1), _Slot("value", 2)),
    "torch.nn.functional.rrelu": (_Slot("lower", 1), _Slot("upper", 2)),
    "torch.nn.functional.normalize": (_Slot("p", 1), _Slot("eps", 3)),
    "torch.nn.functional.layer_norm": (_Slot("eps", 4),),
    "torch.layer_norm": (_Slot("eps", 4),),
    "torch.nn.functional.group_norm": (_Slot("eps", 4),),
    "torch.group_norm": (_Slot("eps", 4),),
    "torch.nn.functional.rms_norm": (_Slot("eps", 3, accepts_none=True),),
    "torch.nn.functional.batch_norm": (_Slot("momentum", 6), _Slot("eps", 7)),
    "torch.nn.functional.instance_norm": (_Slot("momentum", 6), _Slot("eps", 7)),
    "torch.nn.functional.local_response_norm": (_Slot("alpha", 2), _Slot("beta", 3),
                                                _Slot("k", 4)),
    "torch.nn.functional.pad": (_Slot("value", 3, accepts_none=True),),
    "torch.nn.functional.interpolate": (_Slot("scale_factor", 2, accepts_none=True,
                                              sequence=True),),
    "torch.nn.functional.scaled_dot_product_attention": (
        _Slot("dropout_p", 4), _Slot("scale", None, accepts_none=True)),
    "torch.nn.functional.cosine_similarity": (_Slot("eps", 3),),
    "torch.cosine_similarity": (_Slot("eps", 3),),
    "torch.nn.functional.pairwise_distance": (_Slot("p", 2), _Slot("eps", 3)),
    "torch.pairwise_distance": (_Slot("p", 2), _Slot("eps", 3)),
    "torch.nn.functional.gumbel_softmax": (_Slot("tau", 1), _Slot("eps", 3)),
    "torch.nn.functional.embedding": (_Slot("max_norm", 3, accepts_none=True),
                                      _Slot("norm_type", 4)),
    "torch.cdist": (_Slot("p", 2),),
    "torch.logit": (_Slot("eps", 1, accepts_none=True),),
    "torch.nan_to_num": (_Slot("nan", 1, accepts_none=True), _Slot("posinf", 2,
                                                                   accepts_none=True),
                         _Slot("neginf", 3, accepts_none=True)),
}

# torch.nn layers (constructor arguments, ``self`` not counted) whose value reaches one of the
# slots above in the layer's own forward.
_NORM = (_Slot("eps", 1), _Slot("momentum", 2, accepts_none=True))
_LAYERS: dict[str, tuple[_Slot, ...]] = {
    **{name: (_Slot("p", 0),) for name in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d",
                                           "AlphaDropout", "FeatureAlphaDropout")},
    "LeakyReLU": (_Slot("negative_slope", 0),),
    "Hardtanh": (_Slot("min_val", 0), _Slot("max_val", 1)),
    "ELU": (_Slot("alpha", 0),),
    "CELU": (_Slot("alpha", 0),),
    "Threshold": (_Slot("threshold", 0), _Slot("value", 1)),
    "RReLU": (_Slot("lower", 0), _Slot("upper", 1)),
    "LayerNorm": (_Slot("eps", 1),),
    "GroupNorm": (_Slot("eps", 2),),
    **{f"{kind}{d}d": _NORM for kind in ("BatchNorm", "InstanceNorm") for d in (1, 2, 3)},
    "LocalResponseNorm": (_Slot("alpha", 1), _Slot("beta", 2), _Slot("k", 3)),
    "CosineSimilarity": (_Slot("eps", 1),),
    "PairwiseDistance": (_Slot("p", 0), _Slot("eps", 1)),
    "Embedding": (_Slot("max_norm", 3, accepts_none=True), _Slot("norm_type", 4)),
    "MultiheadAttention": (_Slot("dropout", 2),),
    "TransformerEncoderLayer": (_Slot("dropout", 3), _Slot("layer_norm_eps", 5)),
    "TransformerDecoderLayer": (_Slot("dropout", 3), _Slot("layer_norm_eps", 5)),
    "Transformer": (_Slot("dropout", 5), _Slot("layer_norm_eps", 9)),
}

# Last name components of everything above: a call the rule looks at names one of them.
_FUNCTION_NAMES = frozenset(name.rpartition(".")[2] for name in _FUNCTIONS)
_LAYER_NAMES = frozenset(_LAYERS)

_EXACT_FLOAT_LIMIT = 2 ** 53

# ---- what a value may be -----------------------------------------------------------------------

# A value's possible runtime kinds: "int", "float", "bool", "None", "other" (a tensor, a str...),
# and "guessed" when a kind comes from a default alone (no annotation: a caller may pass
# anything). None: cannot tell.
Kinds = frozenset[str]
_NUMBER_CALLS = {"float": "float", "int": "int", "bool": "bool", "len": "int"}


def _kinds_of_type(kind: str | None) -> Kinds | None:
    if kind is None or "?" in kind:
        return None
    if kind.startswith("Optional[") and kind.endswith("]"):
        inner = _kinds_of_type(kind[len("Optional["):-1])
        return inner | {"None"} if inner is not None else None
    if kind in ("int", "float", "bool", "None"):
        return frozenset({kind})
    return frozenset({"other"})


def _parameter_kinds(param: cst.Param, runtime: bool) -> Kinds | None:
    """What a parameter may hold. In a compiled method TorchScript goes by the annotation alone
    (``alpha: float = 1`` scripts); an ``__init__`` parameter's value is what ends up in the
    attribute, so there its default counts too (``p: float = 0`` stores an int)."""
    annotated = (_kinds_of_type(type_from_annotation(param.annotation.annotation))
                 if param.annotation is not None else None)
    default = param.default
    default_kind = (frozenset({"None"}) if isinstance(default, cst.Name) and default.value == "None"
                    else _kinds_of_type(literal_type(default)) if default is not None else None)
    if param.annotation is not None:
        if annotated is None:
            return None
        return annotated | default_kind if runtime and default_kind is not None else annotated
    if default_kind is None:
        return None
    return default_kind | {"guessed"}


def _combine(operator: cst.BaseBinaryOp, left: str, right: str) -> str | None:
    numbers = {"int", "float", "bool"}
    if left not in numbers or right not in numbers:
        return None
    if isinstance(operator, cst.Divide):
        return "float"
    if isinstance(operator, cst.Power):
        return "float" if "float" in (left, right) else None  # 2 ** -1 is a float
    if isinstance(operator, cst.Add | cst.Subtract | cst.Multiply | cst.FloorDivide |
                  cst.Modulo):
        return "float" if "float" in (left, right) else "int"
    return None


class _Values:
    """The kinds of the values one class's methods pass around."""

    def __init__(self, facts: ClassFacts, bases: list[ClassFacts]) -> None:
        self.facts = facts
        self.bases = bases
        self._attributes: dict[str, Kinds | None] = {}

    def of(self, expr: cst.BaseExpression, method: str, func: cst.FunctionDef) -> Kinds | None:
        return self._kinds(expr, self.facts, method, func, frozenset())

    def _kinds(self, expr: cst.BaseExpression, facts: ClassFacts, method: str,
               func: cst.FunctionDef, visiting: frozenset[str]) -> Kinds | None:
        literal = literal_type(expr)
        if literal is not None:
            return _kinds_of_type(literal)
        if isinstance(expr, cst.Name):
            if expr.value == "None":
                return frozenset({"None"})
            param = parameters_of(func).get(expr.value)
            if param is not None:
                if param.star:
                    return None
                return _parameter_kinds(param, runtime=method == "__init__")
        self_var = self_name(func)
        attr = self_attr(expr, self_var) if self_var is not None else None
        if attr is not None:
            return self._attribute(attr, visiting)
        if isinstance(expr, cst.IfExp):
            body = self._kinds(expr.body, facts, method, func, visiting)
            orelse = self._kinds(expr.orelse, facts, method, func, visiting)
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator,
                                                               cst.Minus | cst.Plus):
            inner = self._kinds(expr.expression, facts, method, func, visiting)
            return frozenset("int" if k == "bool" else k for k in inner) if inner else None
        if isinstance(expr, cst.BinaryOperation):
            left = self._kinds(expr.left, facts, method, func, visiting)
            right = self._kinds(expr.right, facts, method, func, visiting)
            if left is None or right is None:
                return None
            found = {_combine(expr.operator, a, b) for a in left - {"guessed"}
                     for b in right - {"guessed"}}
            if None in found:
                return None
            guessed = {"guessed"} & (left | right)
            return frozenset(k for k in found if k is not None) | guessed
        if (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name)
                and expr.func.value in _NUMBER_CALLS):
            return frozenset({_NUMBER_CALLS[expr.func.value]})
        return _kinds_of_type(facts.typer(method).type_of(expr))

    def _attribute(self, attr: str, visiting: frozenset[str]) -> Kinds | None:
        """Every value any method of the class (or, when it assigns none, of a base defined in
        this file) stores in ``self.<attr>``."""
        if attr in visiting:
            return None
        if attr in self._attributes:
            return self._attributes[attr]
        found: Kinds | None = None
        for facts in (self.facts, *self.bases):
            if attr in facts.declared:
                break       # a class-level annotation decides; not read here
            assigned = [a for a in facts.assignments if a.attr == attr]
            if not assigned:
                continue
            kinds: set[str] = set()
            for assignment in assigned:
                if assignment.value is None:
                    kinds.clear()
                    break
                func = facts.methods[assignment.method]
                value = self._kinds(assignment.value, facts, assignment.method, func,
                                    visiting | {attr})
                if value is None:
                    kinds.clear()
                    break
                kinds.update(value)
            found = frozenset(kinds) if kinds else None
            break
        else:
            if attr == "training":
                found = frozenset({"bool"})     # nn.Module's own flag
        self._attributes[attr] = found
        return found


# ---- the rule ----------------------------------------------------------------------------------

@dataclass
class _Site:
    """One argument in a float slot: where, what, and the rewrite (or why not)."""

    callee: str
    slot: _Slot
    value: cst.BaseExpression
    method: str
    func: cst.FunctionDef
    layer: bool = False         # a layer's constructor argument (in ``__init__``)


def _arguments(call: cst.Call, slots: tuple[_Slot, ...]) -> Iterator[tuple[_Slot, cst.Arg]]:
    by_name = {slot.name: slot for slot in slots}
    by_position = {slot.position: slot for slot in slots if slot.position is not None}
    for index, arg in enumerate(call.args):
        if arg.star:
            return
        if arg.keyword is None:
            if index in by_position:
                yield by_position[index], arg
        elif arg.keyword.value in by_name:
            yield by_name[arg.keyword.value], arg


def _float_literal(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``20`` -> ``20.0``, ``-1`` -> ``-1.0``; None for what is not a decimal int literal
    (``0x10.0`` would not parse)."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus | cst.Plus):
        inner = _float_literal(node.expression)
        return node.with_changes(expression=inner) if inner is not None else None
    if isinstance(node, cst.Integer):
        digits = node.value.replace("_", "")
        if digits.isdigit() and (digits == "0" or not digits.startswith("0")):
            return cst.Float(value=f"{node.value}.0", lpar=node.lpar, rpar=node.rpar)
    return None


def _literal_int(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus | cst.Plus):
        inner = _literal_int(node.expression)
        return None if inner is None else (-inner if isinstance(node.operator, cst.Minus)
                                           else inner)
    if isinstance(node, cst.Integer):
        value = node.evaluated_value
        return value if isinstance(value, int) else None
    return None


def _wrapped(node: cst.BaseExpression) -> cst.Call:
    return cst.Call(cst.Name("float"), [cst.Arg(node.with_changes(lpar=[], rpar=[]))],
                    lpar=node.lpar, rpar=node.rpar)


class FloatArguments(Rule):
    __doc__ = __doc__
    name = "float-arguments"
    # Before lift-branch (70) and annotate (100): an attribute read here is still ``self.x``
    # (lift-branch may turn it into a parameter), and the kinds come from the code as written.
    order = 45
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF224", "int-for-float", "int passed where TorchScript wants a float",
             "TorchScript does not convert an int to a float when it matches a call: "
             "F.hardtanh(x, 0, 20), F.dropout(x, p) with an int p, nn.Dropout(0) fail with "
             "\"Expected a value of type 'float' ... found type 'int'\". Write the literal as a "
             "float (0.0) or wrap the value in float(...)."),
    )
    summary = ("Ints passed to float parameters of torch functions and layers (F.hardtanh, "
               "F.dropout, nn.Dropout, eps, ...) become floats: 0 -> 0.0, x -> float(x)")

    VALID = (
        # Floats already; a Scalar parameter (clamp) takes an int and must keep it.
        """
import torch
import torch.nn.functional as F
class M(torch.nn.Module):
    def __init__(self, clip: float = 6.0):
        super().__init__()
        self.clip = clip
    def forward(self, x):
        return F.hardtanh(x, 0.0, self.clip) + torch.clamp(x, 0, 6)
""",
        # A bool where a float goes: TorchScript takes it, and converting it would hide a slip.
        """
import torch.nn as nn
import torch.nn.functional as F
class M(nn.Module):
    def forward(self, x):
        return F.dropout(x, self.training)
""",
        # Not compiled: behind `if not torch.jit.is_scripting():`.
        """
import torch
import torch.nn.functional as F
class M(torch.nn.Module):
    def forward(self, x):
        if not torch.jit.is_scripting():
            x = F.leaky_relu(x, 0)
        return x
""",
    )
    INVALID = (
        Example(
            """
import torch
class FullyConnected(torch.nn.Module):
    def __init__(self, n_feature: int, n_hidden: int, relu_max_clip: int = 20) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(n_feature, n_hidden)
        self.relu_max_clip = relu_max_clip
    def forward(self, x):
        return torch.nn.functional.hardtanh(self.fc(x), 0, self.relu_max_clip)
""",
            """
import torch
class FullyConnected(torch.nn.Module):
    def __init__(self, n_feature: int, n_hidden: int, relu_max_clip: int = 20) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(n_feature, n_hidden)
        self.relu_max_clip = relu_max_clip
    def forward(self, x):
        return torch.nn.functional.hardtanh(self.fc(x), 0.0, float(self.relu_max_clip))
""",
        ),
        # Layers built with ints, and an interpolate scale factor.
        Example(
            """
import torch.nn as nn
import torch.nn.functional as F
class Up(nn.Module):
    def __init__(self, dropout=0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.act = nn.LeakyReLU(0)
    def forward(self, x):
        return self.act(self.drop(F.interpolate(x, scale_factor=(2, 2))))
""",
            """
import torch.nn as nn
import torch.nn.functional as F
class Up(nn.Module):
    def __init__(self, dropout=0):
        super().__init__()
        self.drop = nn.Dropout(float(dropout))
        self.act = nn.LeakyReLU(0.0)
    def forward(self, x):
        return self.act(self.drop(F.interpolate(x, scale_factor=(2.0, 2.0))))
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        # The sites: torch functions called in compiled methods, layers built in __init__
        # (module-level functions only when the repair loop names them: no prefilter then).
        def calls(nodes: Iterable[ast.AST], names: frozenset[str]) -> bool:
            return any(isinstance(node, ast.Call)
                       and file.resolved(node.func).rpartition(".")[2] in names
                       for node in nodes)

        inits = (file.init_of(cls) for cls in file.module_classes)
        return (calls(file.compiled_nodes(), _FUNCTION_NAMES)
                or any(calls(file.nodes_of(init), _LAYER_NAMES) for init in inits if init))

    def prepare(self, module: cst.Module) -> None:
        self.imports = self.facts.imports
        self.float_rebound = "float" in self.facts.top_level_names

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        tree = super().transform_module_impl(tree)
        return self._rewrite_functions(tree) if self.compiled_functions else tree

    def _rewrite_functions(self, tree: cst.Module) -> cst.Module:
        """Int literals in float parameters of torch calls in the module-level functions the
        repair loop names (a model stopped in them: ``Rule.compiled_functions``; perceiver's
        ``l1norm``: ``F.normalize(t, p = 1)``), each reported under ``function_change_name``.
        Only literals: what a name holds is known from a class's facts, not a function's."""
        body = list(tree.body)
        for index, func in self.named_functions(tree):
            skipped = never_compiled_nodes(func, self.imports)
            replacements: dict[int, cst.BaseExpression] = {}
            parts: list[str] = []
            for call in find_all(func.body, cst.Call):
                slots = _FUNCTIONS.get(qualified_name(call.func, self.imports) or "")
                if slots is None or id(call) in skipped:
                    continue
                for slot, arg in _arguments(call, slots):
                    new = None if slot.sequence else _float_literal(arg.value)
                    if new is not None:
                        replacements[id(arg.value)] = new
                        parts.append(f"{code_of(call.func)} {slot.name} `{code_of(arg.value)}` "
                                     f"-> `{code_of(new)}`")
            if not replacements:
                continue
            rewritten = func.visit(ReplaceById(replacements))
            assert isinstance(rewritten, cst.FunctionDef)
            self.changes.append(ClassChange(self.name, function_change_name(func.name.value),
                                            self.function_span(func), "; ".join(parts)))
            body[index] = rewritten
        return tree.with_changes(body=body)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        values = _Values(facts, [self.class_facts(base) for base in self.facts.local_bases(cls)])
        replacements: dict[int, cst.BaseExpression] = {}
        parts: list[str] = []
        layers: list[str] = []
        for site, call in self._sites(facts):
            outcome = self._conversion(site, values.of(site.value, site.method, site.func),
                                       values)
            if outcome is None:
                continue
            shown = code_of(site.value)
            message = (f"int `{shown}` passed as {site.callee}'s float parameter "
                       f"{site.slot.name} in {site.method}()")
            if isinstance(outcome, tuple):
                reason, blocks = outcome
                self.skip(cls.name.value, site.value,
                          f"{site.method}(): `{shown}` as {site.callee}'s {site.slot.name} left "
                          f"alone: {reason}", code="TSF224" if blocks else None,
                          message=message if blocks else "")
                continue
            self.fixed(site.value, "TSF224", message)
            replacements[id(site.value)] = outcome
            parts.append(f"line {self.line_of(site.value)}: {site.callee} {site.slot.name} "
                         f"`{shown}` -> `{code_of(outcome)}`")
            if site.layer:
                layers.append(code_of(call.func))
        if not replacements:
            return cls
        rewritten = cls.visit(ReplaceById(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        notes = [f"{', '.join(dict.fromkeys(layers))} now store a float where they stored an "
                 "int: their repr shows it (p=0.0)"] if layers else []
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return rewritten

    def _sites(self, facts: ClassFacts) -> Iterator[tuple[_Site, cst.Call]]:
        """Arguments in float slots: torch functions in compiled methods, layers in
        ``__init__``."""
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            for call in find_all(func.body, cst.Call):
                name = qualified_name(call.func, self.imports)
                slots = _FUNCTIONS.get(name or "")
                if slots is None or id(call) in skipped:
                    continue
                callee = code_of(call.func)
                for slot, arg in _arguments(call, slots):
                    yield _Site(callee, slot, arg.value, method, func), call
        init = facts.init
        if init is None:
            return
        for call in find_all(init.body, cst.Call):
            layer = _layer_name(qualified_name(call.func, self.imports))
            if layer is None:
                continue
            for slot, arg in _arguments(call, _LAYERS[layer]):
                yield _Site(f"nn.{layer}", slot, arg.value, "__init__", init, layer=True), call

    def _conversion(self, site: _Site, kinds: Kinds | None, values: _Values
                    ) -> cst.BaseExpression | tuple[str, bool] | None:
        """The float form of the argument, None when it needs none, or (why it is left alone,
        whether it blocks export)."""
        value = site.value
        if site.slot.sequence and isinstance(value, cst.Tuple | cst.List):
            return self._sequence(site, value, values)
        if kinds is None:
            return ("its type cannot be read here (annotate it, or store a float in "
                    "__init__)", False)
        numbers = kinds - {"guessed"}
        if "int" not in numbers:
            return None
        literal = _literal_int(value)
        if literal is not None:
            if abs(literal) > _EXACT_FLOAT_LIMIT:
                return f"{literal} has no exact float", True
            return _float_literal(value) or self._wrap(value)
        for kind, why in (("bool", "it may be a bool (TorchScript takes a bool there; "
                                   "check the argument is the one meant)"),
                          ("None", "it may be None, and float(None) fails"),
                          ("other", "it may be something other than a number")):
            if kind in numbers:
                return why, True
        if site.slot.accepts_none and "guessed" in kinds:
            return ("the parameter accepts None and the value's type comes from a default "
                    "alone: a caller may pass None, and float(None) fails; annotate it"), True
        return self._wrap(value)

    def _wrap(self, value: cst.BaseExpression) -> cst.BaseExpression | tuple[str, bool]:
        if self.float_rebound:
            return "the file binds the name `float` to something else", True
        return _wrapped(value)

    def _sequence(self, site: _Site, value: cst.Tuple | cst.List, values: _Values
                  ) -> cst.BaseExpression | tuple[str, bool] | None:
        """``(2, 2)`` -> ``(2.0, 2.0)``: each element as a single value would be."""
        elements = []
        changed = False
        for element in value.elements:
            if isinstance(element, cst.StarredElement):
                return "a starred element hides the values", False
            single = _Site(site.callee, site.slot, element.value, site.method, site.func,
                           site.layer)
            outcome = self._conversion(single, values.of(element.value, site.method,
                                                         site.func), values)
            if isinstance(outcome, tuple):
                return outcome
            if outcome is not None:
                elements.append(element.with_changes(value=outcome))
                changed = True
            else:
                elements.append(element)
        return value.with_changes(elements=elements) if changed else None


def _layer_name(qualified: str | None) -> str | None:
    """``torch.nn.Dropout`` (also through ``torch.nn.modules...``) -> ``Dropout``."""
    if not qualified or not qualified.startswith("torch.nn."):
        return None
    path, _, last = qualified.rpartition(".")
    if last not in _LAYERS or not (path == "torch.nn" or path.startswith("torch.nn.modules")):
        return None
    return last
