"""The TorchScript type of an expression, read statically from model source.

Types are TorchScript type strings: ``Tensor``, ``int``, ``float``, ``bool``, ``str``,
``None``, ``List[int]``, ``Tuple[int, float]``, ``Dict[str, int]``, ``Optional[Tensor]``. The
empty literal ``[]`` is ``List[?]`` and ``{}`` is ``Dict[?, ?]``: they take their element type
from whatever they are unified with. ``None`` as a Python value means "cannot tell"; guesses
are never made -- what this module cannot type, rules leave alone and report.

Nothing here imports torch: knowledge of torch's API is a few tables of names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import find_all, literal_type, qualified_name

TENSOR = "Tensor"
# torch.device and torch.dtype values (``x.device``, ``dtype=torch.float32``): TorchScript
# types them Device and ScalarType, and the annotations spell them so.
DEVICE = "torch.device"
DTYPE = "torch.dtype"
EMPTY_LIST = "List[?]"
EMPTY_DICT = "Dict[?, ?]"

# Tensor methods that return something other than a Tensor; every other method of a Tensor
# returns one (``x.view(...)``, ``x.masked_fill(...)``, ``x.sum()``...).
_TENSOR_METHOD_RESULTS = {"dim": "int", "ndimension": "int", "numel": "int",
                          "element_size": "int", "nelement": "int", "get_device": "int",
                          "is_contiguous": "bool", "is_floating_point": "bool",
                          "is_complex": "bool", "equal": "bool", "tolist": None, "item": None,
                          "size": None, "stride": None, "type": None, "data_ptr": "int",
                          "split": "List[Tensor]", "chunk": "List[Tensor]",
                          "unbind": "List[Tensor]", "max": None,
                          "min": None, "sort": None, "topk": None, "unique": None,
                          "__len__": "int"}
_TENSOR_ATTRIBUTE_RESULTS = {"shape": "List[int]", "ndim": "int", "T": TENSOR, "mT": TENSOR,
                             "data": TENSOR, "grad": None, "real": TENSOR, "imag": TENSOR,
                             "is_cuda": "bool", "requires_grad": "bool",
                             "device": DEVICE, "dtype": DTYPE}
# torch.* / torch.nn.functional.* functions that do not return a single Tensor.
_NON_TENSOR_FUNCTIONS = {"is_tensor", "numel", "is_floating_point", "is_grad_enabled",
                         "jit.is_scripting", "jit.is_tracing", "split", "chunk", "unbind",
                         "max", "min", "sort", "topk", "broadcast_tensors", "meshgrid",
                         "lstsq", "svd", "qr", "eig", "std_mean", "var_mean", "unique",
                         "where", "nn.functional.multi_head_attention_forward",
                         "nn.functional.max_pool1d_with_indices",
                         "nn.functional.max_pool2d_with_indices", "Size", "device", "dtype",
                         "finfo", "iinfo", "get_default_dtype", "set_grad_enabled", "no_grad",
                         "Generator", "cuda.is_available", "is_autocast_enabled"}
# nn layers whose forward returns one Tensor (what ``self.proj(x)`` gives).
_TENSOR_LAYERS = re.compile(
    r"^(Linear|Bilinear|LazyLinear|Conv[123]d|ConvTranspose[123]d|LazyConv\w*|"
    r"BatchNorm[123]d|SyncBatchNorm|InstanceNorm[123]d|LayerNorm|GroupNorm|RMSNorm|"
    r"LocalResponseNorm|Dropout\w*|AlphaDropout|Identity|Embedding|EmbeddingBag|"
    r"ReLU6?|LeakyReLU|PReLU|RReLU|SELU|CELU|ELU|GELU|SiLU|Mish|Sigmoid|Tanh|Hardswish|"
    r"Hardsigmoid|Hardtanh|Softplus|Softsign|Softmax|LogSoftmax|Softmin|Tanhshrink|Threshold|"
    r"GLU|(Adaptive)?(Max|Avg)Pool[123]d|AdaptiveAvgPool[123]d|LPPool[12]d|Upsample\w*|"
    r"PixelShuffle|PixelUnshuffle|Flatten|Unflatten|ZeroPad[123]d|ConstantPad[123]d|"
    r"ReflectionPad[123]d|ReplicationPad[123]d|Sequential|Fold|Unfold|ChannelShuffle)$")


def is_tensor_layer(qualified: str | None) -> bool:
    """``torch.nn.Linear`` and friends: layers whose call returns one Tensor."""
    if not qualified or not qualified.startswith("torch.nn."):
        return False
    return bool(_TENSOR_LAYERS.match(qualified.removeprefix("torch.nn.").removeprefix("modules.")
                                     .rpartition(".")[2]))


# ---- type strings ------------------------------------------------------------------------------

def split_args(inner: str) -> list[str]:
    """``"int, Tuple[int, str]"`` -> ``["int", "Tuple[int, str]"]``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    if inner[start:].strip():
        parts.append(inner[start:].strip())
    return parts


def parts_of(kind: str) -> tuple[str, list[str]]:
    """``"List[int]"`` -> ``("List", ["int"])``; ``"int"`` -> ``("int", [])``."""
    if "[" not in kind:
        return kind, []
    head, _, rest = kind.partition("[")
    return head, split_args(rest[:-1])


def is_complete(kind: str | None) -> bool:
    """A type TorchScript can be told: no unknown element left."""
    return kind is not None and "?" not in kind


def unify(a: str | None, b: str | None) -> str | None:
    """One type for two values that meet (branches, returns, list elements); None if none."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if {a, b} == {"int", "float"}:
        return "float"
    if a == "None" or b == "None":
        other = b if a == "None" else a
        return other if other.startswith("Optional[") else f"Optional[{other}]"
    head_a, args_a = parts_of(a)
    head_b, args_b = parts_of(b)
    if head_a == "Optional" or head_b == "Optional":
        inner = unify(args_a[0] if head_a == "Optional" else a,
                      args_b[0] if head_b == "Optional" else b)
        return f"Optional[{inner}]" if inner else None
    if head_a != head_b or len(args_a) != len(args_b) or not args_a:
        return None
    merged = []
    for x, y in zip(args_a, args_b, strict=True):
        if x == "?" or y == "?":
            merged.append(y if x == "?" else x)
            continue
        joined = unify(x, y)
        if joined is None:
            return None
        merged.append(joined)
    return f"{head_a}[{', '.join(merged)}]"


def unify_all(kinds: Iterable[str | None]) -> str | None:
    result: str | None = None
    first = True
    for kind in kinds:
        result = kind if first else unify(result, kind)
        first = False
        if result is None:
            return None
    return result


def without_none(kind: str) -> str | None:
    """``Optional[T]`` -> ``T``; ``None`` -> None (nothing but None seen)."""
    if kind == "None":
        return None
    head, args = parts_of(kind)
    return args[0] if head == "Optional" else kind


def annotation_text(kind: str, tensor_name: str) -> str:
    """A type string as source: ``Tensor`` spelled as the file can reach it (and ``torch.``
    as the module it is reached through: ``th.device`` after ``import torch as th``)."""
    module, dot, _ = tensor_name.rpartition(".")
    if dot and module != "torch":
        kind = re.sub(r"\btorch\.(device|dtype)\b", rf"{module}.\1", kind)
    return re.sub(r"\bTensor\b", tensor_name, kind)


def typing_names(kind: str) -> set[str]:
    return set(re.findall(r"\b(Optional|List|Tuple|Dict)\[", kind))


def type_from_annotation(node: cst.BaseExpression) -> str | None:
    """``torch.Tensor`` -> Tensor, ``Optional[List[int]]`` -> itself; None if not TorchScript."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        if not isinstance(value, str):
            return None
        try:
            node = cst.parse_expression(value)
        except cst.ParserSyntaxError:
            return None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        left, right = type_from_annotation(node.left), type_from_annotation(node.right)
        return unify(left, right)
    if isinstance(node, cst.Name) and node.value == "None":
        return "None"
    if isinstance(node, cst.Subscript):
        head = (get_full_name_for_node(node.value) or "").rpartition(".")[2]
        head = {"list": "List", "tuple": "Tuple", "dict": "Dict"}.get(head, head)
        if head not in ("List", "Tuple", "Dict", "Optional"):
            return None
        args = []
        for element in node.slice:
            if not isinstance(element.slice, cst.Index):
                return None
            inner = type_from_annotation(element.slice.value)
            if inner is None:
                return None
            args.append(inner)
        return f"{head}[{', '.join(args)}]"
    name = get_full_name_for_node(node)
    if name is not None:
        last = name.rpartition(".")[2]
        if last == "Tensor":
            return TENSOR
        if last in ("int", "float", "bool", "str"):
            return last
        if name in (DEVICE, DTYPE):
            return name
        return None
    return None


def function_parameter_types(func: cst.FunctionDef) -> dict[str, str | None]:
    """A module-level function's parameters typed as TorchScript types them: by their
    annotations; an unannotated one is a Tensor, or unknown with a default."""
    params = func.params
    return {param.name.value: (type_from_annotation(param.annotation.annotation)
                               if param.annotation is not None else
                               literal_type(param.default) if param.default is not None
                               else TENSOR)
            for param in (*params.posonly_params, *params.params, *params.kwonly_params)}


# ---- expressions -------------------------------------------------------------------------------

class Typer:
    """Types of expressions inside one method.

    ``env`` maps local names (parameters, assigned locals) to their types; ``attributes`` maps
    ``self.<attr>`` to the type of what ``__init__`` stores there (a scalar, or ``Tensor`` for
    parameters and buffers); ``layers`` names the submodule attributes whose call returns one
    Tensor."""

    def __init__(self, env: Mapping[str, str | None], imports: Mapping[str, str],
                 self_var: str | None, attributes: Mapping[str, str] | None = None,
                 layers: Iterable[str] = ()) -> None:
        self.env = dict(env)
        self.imports = imports
        self.self_var = self_var
        self.attributes = dict(attributes or {})
        self.layers = set(layers)

    def type_of(self, node: cst.BaseExpression) -> str | None:
        literal = literal_type(node)
        if literal is not None:
            return literal
        if isinstance(node, cst.Name):
            if node.value == "None":
                return "None"
            return self.env.get(node.value)
        if isinstance(node, cst.Tuple):
            if not node.elements:
                return None     # ``()``: element types unknown (``Tuple[]`` is no type)
            kinds = [self._element(e) for e in node.elements]
            return None if any(k is None for k in kinds) else f"Tuple[{', '.join(kinds)}]"  # type: ignore[arg-type]
        if isinstance(node, cst.List):
            if not node.elements:
                return EMPTY_LIST
            element = unify_all(self._element(e) for e in node.elements)
            return f"List[{element}]" if element else None
        if isinstance(node, cst.Dict):
            if not node.elements:
                return EMPTY_DICT
            keys, values = [], []
            for e in node.elements:
                if not isinstance(e, cst.DictElement):
                    return None
                keys.append(self.type_of(e.key))
                values.append(self.type_of(e.value))
            key, value = unify_all(keys), unify_all(values)
            return f"Dict[{key}, {value}]" if key and value else None
        if isinstance(node, cst.Attribute):
            return self._attribute(node)
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node)
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                inner = self.type_of(node.expression)
                return TENSOR if inner == TENSOR else "bool"
            return self.type_of(node.expression)
        if isinstance(node, cst.Comparison):
            kinds = [self.type_of(node.left),
                     *(self.type_of(c.comparator) for c in node.comparisons)]
            if any(isinstance(c.operator, cst.Is | cst.IsNot | cst.In | cst.NotIn)
                   for c in node.comparisons):
                return "bool"
            if TENSOR in kinds:
                return TENSOR
            return "bool" if all(kinds) else None
        if isinstance(node, cst.BooleanOperation):
            left, right = self.type_of(node.left), self.type_of(node.right)
            return "bool" if left == right == "bool" else None
        if isinstance(node, cst.IfExp):
            return unify(self.type_of(node.body), self.type_of(node.orelse))
        return None

    def _element(self, element: cst.BaseElement) -> str | None:
        if isinstance(element, cst.StarredElement):
            return None
        return self.type_of(element.value)

    def _attribute(self, node: cst.Attribute) -> str | None:
        if self.self_var and isinstance(node.value, cst.Name) and node.value.value == self.self_var:
            return self.attributes.get(node.attr.value)
        if self.type_of(node.value) == TENSOR:
            return _TENSOR_ATTRIBUTE_RESULTS.get(node.attr.value)
        return None

    def _subscript(self, node: cst.Subscript) -> str | None:
        base = self.type_of(node.value)
        if base is None:
            return None
        if base == TENSOR:
            return TENSOR
        head, args = parts_of(base)
        single = len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
        if head == "List" and args and args[0] != "?":
            return args[0] if single else base
        if head == "Dict" and single and args[1] != "?":
            return args[1]
        if head == "Tuple" and single:
            index = node.slice[0].slice.value  # type: ignore[attr-defined]
            if isinstance(index, cst.Integer) and int(index.value) < len(args):
                return args[int(index.value)]
        return None

    def _call(self, node: cst.Call) -> str | None:
        func = node.func
        if isinstance(func, cst.Name):
            builtin = {"len": "int", "int": "int", "float": "float", "bool": "bool",
                       "str": "str", "round": "int", "isinstance": "bool"}.get(func.value)
            if builtin:
                return builtin
            if func.value in ("max", "min", "abs", "sum") and node.args:
                kinds = [self.type_of(a.value) for a in node.args
                         if not a.star and a.keyword is None]
                if len(kinds) == 1 and func.value != "abs":
                    # max(xs): an element of the list
                    head, args = parts_of(kinds[0]) if kinds[0] else ("", [])
                    return args[0] if head == "List" and args[0] != "?" else None
                return unify_all(kinds)
        if isinstance(func, cst.Attribute):
            receiver = func.value
            if (self.self_var and isinstance(receiver, cst.Name)
                    and receiver.value == self.self_var):
                return TENSOR if func.attr.value in self.layers else None
            if self.type_of(receiver) == TENSOR:
                method = func.attr.value
                if method == "size":
                    return "int" if node.args else "List[int]"
                if method in ("max", "min") and not node.args:
                    return TENSOR
                if method in _TENSOR_METHOD_RESULTS:
                    return _TENSOR_METHOD_RESULTS[method]
                return TENSOR
        name = qualified_name(func, dict(self.imports)) or ""
        if name.startswith("torch.") and name.count(".") >= 1:
            short = name.removeprefix("torch.")
            # Namespaces whose functions return packed sequences, distributions, handles...
            if short in _NON_TENSOR_FUNCTIONS or short.startswith((
                    "jit.", "cuda.", "backends.", "nn.utils.", "distributions.", "utils.",
                    "autograd.")):
                return {"jit.is_scripting": "bool", "jit.is_tracing": "bool",
                        "is_tensor": "bool", "numel": "int", "is_floating_point": "bool",
                        "cuda.is_available": "bool"}.get(short)
            if short.rpartition(".")[2][:1].isupper():
                return TENSOR if is_tensor_layer(name) else None
            return TENSOR
        if name.startswith("math."):
            attr = name.removeprefix("math.")
            return "int" if attr in ("floor", "ceil", "trunc", "gcd", "factorial", "comb",
                                     "perm", "isqrt") else "bool" if attr.startswith("is") \
                else "float"
        return None

    def _binary(self, node: cst.BinaryOperation) -> str | None:
        left, right = self.type_of(node.left), self.type_of(node.right)
        if TENSOR in (left, right):
            return TENSOR   # a Tensor with anything that compiles is a Tensor
        if left is None or right is None:
            return None
        numbers = ("int", "float", "bool")
        if left in numbers and right in numbers:
            if isinstance(node.operator, cst.Divide):
                return "float"
            if isinstance(node.operator, cst.Power):
                literal = node.right
                if isinstance(literal, cst.UnaryOperation):
                    return "float"
                return "float" if "float" in (left, right) else None
            if "float" in (left, right):
                return "float"
            return "int"
        if isinstance(node.operator, cst.Add) and left == right == "str":
            return "str"
        if isinstance(node.operator, cst.Add) and left.startswith("List[") and \
                right.startswith("List["):
            return unify(left, right)
        if isinstance(node.operator, cst.Modulo) and left == "str":
            return "str"
        if isinstance(node.operator, cst.Multiply) and {left, right} & {"int", "bool"}:
            # ``[-1] * len(x.shape)``: a list repeated
            other = right if left in ("int", "bool") else left
            return other if other.startswith("List[") else None
        return None


def collect_locals(body: cst.CSTNode, typer: Typer) -> None:
    """Add the locals that ``body`` assigns to ``typer.env``, in source order, so a later
    assignment can use an earlier one's type. A name assigned values of types that do not
    unify gets None."""
    nodes = find_all(body, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For,
                     cst.FunctionDef, cst.Lambda)
    skipped: set[int] = set()
    for inner in nodes:
        if isinstance(inner, cst.FunctionDef | cst.Lambda):
            skipped.update(id(n) for n in find_all(inner, cst.Assign, cst.AnnAssign,
                                                   cst.AugAssign, cst.For))
    seen: dict[str, str | None] = {}
    for node in nodes:
        if id(node) in skipped:
            continue
        if isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name):
            declared = type_from_annotation(node.annotation.annotation)
            seen[node.target.value] = declared
            typer.env[node.target.value] = declared
        elif isinstance(node, cst.Assign):
            kind = typer.type_of(node.value)
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    _assign(target.target.value, kind, seen, typer)
                elif isinstance(target.target, cst.Tuple | cst.List):
                    parts = _unpacked(kind, len(target.target.elements))
                    for element, part in zip(target.target.elements, parts, strict=True):
                        if isinstance(element.value, cst.Name):
                            _assign(element.value.value, part, seen, typer)
        elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
            name = node.target.value
            combined = typer.type_of(cst.BinaryOperation(node.target, _binary_of(node),
                                                         node.value))
            _assign(name, combined, seen, typer)
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            _assign(node.target.value, _iterated(node.iter, typer), seen, typer)


def _assign(name: str, kind: str | None, seen: dict[str, str | None], typer: Typer) -> None:
    if name in seen:
        kind = unify(seen[name], kind) if seen[name] is not None else None
        if kind is None and seen[name] in (EMPTY_LIST, EMPTY_DICT):
            kind = seen[name]
    seen[name] = kind
    typer.env[name] = kind


def _unpacked(kind: str | None, count: int) -> list[str | None]:
    if kind is not None:
        head, args = parts_of(kind)
        if head == "Tuple" and len(args) == count:
            return list(args)
        if head == "List" and len(args) == 1 and args[0] != "?":
            return [args[0]] * count    # `res, gate = x.chunk(2, dim=-1)`
    return [None] * count


def _binary_of(node: cst.AugAssign) -> cst.BaseBinaryOp:
    name = type(node.operator).__name__.removesuffix("Assign")
    operator: cst.BaseBinaryOp = getattr(cst, name)()
    return operator


def _iterated(node: cst.BaseExpression, typer: Typer) -> str | None:
    if isinstance(node, cst.Call) and get_full_name_for_node(node.func) == "range":
        return "int"
    kind = typer.type_of(node)
    if kind is None:
        return None
    head, args = parts_of(kind)
    if head == "List" and args and args[0] != "?":
        return args[0]
    if kind == TENSOR:
        return TENSOR
    return None


def function_typer(func: cst.FunctionDef, imports: Mapping[str, str]) -> Typer:
    """A :class:`Typer` for a module-level function's body: its parameters
    (:func:`function_parameter_types`) and its locals."""
    typer = Typer(function_parameter_types(func), imports, None)
    collect_locals(func.body, typer)
    return typer
