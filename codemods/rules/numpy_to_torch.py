"""``numpy-to-torch``: numpy expressions with an exact torch or math equivalent.

What it does
    In ``forward()`` and the methods it reaches (what ``torch.jit.script`` compiles; methods
    decorated ``@torch.jit.ignore``/``@torch.jit.unused`` and the branch of
    ``if torch.jit.is_scripting():`` that never compiles are left alone), numpy code is
    translated, statement by statement, into the torch or ``math`` code that computes the same
    values with the same dtypes:

    * arrays: ``np.exp/log/log1p/expm1/sqrt/sin/cos/tan/tanh/arc*/...`` -> ``torch.*``;
      ``np.abs/square/sign/negative``, ``np.floor/ceil/trunc/round`` (float arrays),
      ``np.isnan/isinf/isfinite/logical_*``, ``np.maximum/minimum`` (``torch.clamp`` against a
      scalar), ``np.clip`` -> ``torch.clamp``, ``np.where(c, x, y)`` -> ``torch.where``,
      ``np.add/subtract/multiply/divide/power/mod/floor_divide/matmul`` -> operators,
      ``np.fmod/arctan2/hypot`` -> ``torch.*``;
    * reductions (function or method): ``sum/prod/mean/std/var/max/amax/min/amin/argmax/
      argmin/any/all/cumsum/cumprod`` with ``axis=`` -> ``dim=``, ``keepdims`` -> ``keepdim``,
      ``ddof`` -> ``correction`` (numpy's default ddof=0 is written out: torch's is 1), and a
      reduction over an axis of ``max``/``min`` -> ``amax``/``amin``;
    * construction: ``np.zeros/ones/empty/full(shape)``, ``*_like``, ``np.arange``,
      ``np.linspace``, ``np.eye``, ``np.hanning/hamming/blackman/bartlett(n)`` (->
      ``torch.*_window(n, periodic=False)``), ``np.array/asarray`` of a list of numbers, with
      numpy's dtype spelled out (``dtype=torch.float64`` where numpy defaults to float64 and
      torch would give float32; ``np.float32``/``float``/``"int64"`` -> ``torch.float32``/...);
    * shapes: ``np.concatenate/stack/hstack/vstack`` -> ``torch.cat/stack/hstack/vstack``,
      ``np.reshape``, ``np.expand_dims`` -> ``torch.unsqueeze``, ``np.squeeze``,
      ``np.transpose(a, axes)`` -> ``torch.permute``, ``np.flip``, ``np.tril/triu``,
      ``np.copy``/``a.copy()`` -> ``clone()``, ``a.astype(d)`` -> ``a.to(torch.d)``,
      ``a.ndim`` -> ``a.dim()``, ``a.size`` -> ``a.numel()``, ``np.newaxis`` -> ``None``;
    * tensors in and out: ``t.numpy()`` is dropped from ``t.cpu().numpy()``,
      ``t.detach().cpu().numpy()`` and ``t.data.numpy()`` (``.data`` scripts), and the
      ``torch.from_numpy(...)`` / ``torch.as_tensor(...)`` wrapper around a translated array
      is removed, keeping what follows it (``.to(x.device)``, ``.float()``);
      ``torch.tensor(a)`` (a copy) becomes ``a.clone()``; an array passed as the lengths of
      ``pack_padded_sequence`` stays a (CPU int64) tensor;
    * scalars: ``np.pi/e/inf/nan`` -> ``math.*``, and numpy functions of Python numbers
      (``np.sqrt(self.d_model)``, ``np.log(x.size(-1))``) -> ``math.sqrt``/``math.log``/...
      (``import math`` is added when the file lacks it; ``import torch`` likewise).

    Arithmetic, comparisons, indexing, slice assignment and augmented assignment on translated
    arrays stay as written; where torch would compute in another dtype than numpy, the
    operand is cast first (see Fix safety).

Why it breaks export
    TorchScript compiles no numpy: every numpy call, ``np.pi``, ``t.numpy()`` and
    ``torch.from_numpy`` fails to script, often with an unhelpful message ("cannot create weak
    reference to 'numpy.ufunc' object", "'Tensor' object has no attribute or method
    'numpy'"). Moving the code into a ``@torch.jit.ignore`` method (``ignore-numpy``) scripts
    but cannot be saved or exported; a translation can.

Example
    Before::

        lens = lengths.cpu().numpy()
        mask = np.arange(x.size(1))[None, :] < lens[:, None]
        scale = 1.0 / np.sqrt(self.d_model)
        return x.masked_fill(~torch.from_numpy(mask).to(x.device), 0.0) * scale

    After::

        lens = lengths.cpu()
        mask = torch.arange(x.size(1))[None, :] < lens[:, None]
        scale = 1.0 / math.sqrt(self.d_model)
        return x.masked_fill(~mask.to(x.device), 0.0) * scale

Fix safety
    The translation is meant to be exact, not merely to compile, and is decided statically,
    statement by statement, from what the code says about types:

    * dtypes follow numpy 2 (NEP 50): every translated array has the dtype numpy gives it.
      Where torch's promotion differs (integer true division and integer arrays with a float
      are float64 in numpy, float32 in torch; ``int64`` with ``float32`` is float64 in numpy;
      a float32 array with a float64 numpy scalar is float64), the operand is cast first
      (``a.to(torch.float64) / n``), which is what numpy computes; each cast is a note.
      Float ufuncs of integer arrays are cast to numpy's float type first.
      What cannot be made exact is not translated: an array whose dtype is unknown (it came
      from ``t.numpy()``) in a true division, a mean, a float ufunc or with a float;
      ``np.where`` of two float scalars; integer ``np.floor/ceil`` (numpy 2 keeps the integer
      dtype since 2.x, older numpy does not).
    * arrays live on the CPU, and so do their translations (torch's default device): the
      original's own ``.to(x.device)`` after ``torch.from_numpy`` moves the tensor as before.
      ``t.cpu().numpy()`` -> ``t.cpu()`` (a no-op on a CPU tensor, sharing memory as
      ``.numpy()`` does). ``t.numpy()`` raises for a tensor that requires grad or lives on a
      GPU; the translation does not, so it agrees wherever the original runs.
    * comparisons of an array whose dtype is unknown with a number or an integer array are
      translated: the result only differs if integers beyond 2**24 meet a float32 array
      (torch compares in float32, numpy in float64); a note says so.
    * scalar ``math`` replaces numpy scalars (``np.float64`` -> ``float``, same value; math
      raises ``ValueError`` where numpy returns nan/inf with a warning, e.g. ``sqrt(-1)``).
      Such a value is not translated when untranslated numpy code reads it (numpy 2 promotes
      a float32 array with an ``np.float64`` but not with a ``float``). ``np.log2`` and
      ``np.hypot`` of scalars are not translated (``math.log2``/``math.hypot`` do not script).
    * whole reductions return a 0-d tensor instead of a numpy scalar: such a value is only
      used where both behave alike (translated arithmetic, ``int()``, ``float()``, ``.item()``,
      a test); ``range()``, slicing and other uses are refused. ``a[i]`` (integers only) may
      be a numpy scalar or an array (ranks are not tracked): it is translated only where
      torch's promotion cannot tell the difference (no cast needed).
    * a name that holds an array is translated together with every statement that reads it:
      if one of them cannot be translated (or only runs in eager mode, or returns the array,
      stores it on ``self``, passes it to another function or iterates it), none is, so no
      untranslated numpy code ever receives a Tensor. A statement reading a numpy name the
      rule left alone is left too. Refused statements are reported (``-v``) with the reason,
      for ``ignore-numpy`` to handle: ``np.median`` (torch's returns the lower middle
      value), ``np.percentile``/``quantile``, ``np.searchsorted``, ``np.unique``,
      ``np.sort``/``argsort`` (tie order), ``np.random`` (other generator), ``np.fft``,
      ``np.linalg``, ``a.tolist()`` (TorchScript needs the element type spelled out),
      ``.T``, numpy functions applied to a torch Tensor, and every name not in the list above.
    * ``a.astype(d)`` -> ``a.to(d)`` does not copy when the dtype already matches, so a later
      in-place write into such an array is refused; ``np.array(a)`` -> ``a.clone()``.
    * float results may differ from numpy's in the last bits (libm vs torch kernels,
      summation order of float32 reductions); validation compares with a tolerance.
    The numpy import is kept (other code may use it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.module import ModuleFacts
from tsfix.codemods.facts.numpy_usage import (
    NumpyUse,
    dotted_name,
    function_numpy_bindings,
    may_use_numpy,
    numpy_uses,
)
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    code_of,
    find_all,
    parameters_of,
    qualified_name,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    collect_locals,
    parts_of,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import

# ---- dtypes ------------------------------------------------------------------------------------

# dtype -> (category, bytes); category 0 bool, 1 integer, 2 float.
_DTYPES: dict[str, tuple[int, int]] = {
    "bool": (0, 1), "uint8": (1, 1), "int8": (1, 1), "int16": (1, 2), "int32": (1, 4),
    "int64": (1, 8), "float16": (2, 2), "float32": (2, 4), "float64": (2, 8)}
_UNSIGNED = {"uint8"}
# How numpy dtypes are spelled in model code.
_DTYPE_NAMES = {
    "float16": "float16", "half": "float16", "float32": "float32", "single": "float32",
    "float64": "float64", "double": "float64", "float_": "float64", "int8": "int8",
    "int16": "int16", "int32": "int32", "int64": "int64", "intp": "int64", "int_": "int64",
    "long": "int64", "longlong": "int64", "uint8": "uint8", "bool_": "bool", "bool": "bool"}
_BUILTIN_DTYPES = {"float": "float64", "int": "int64", "bool": "bool"}
_WEAK_DTYPES = {"bool": "bool", "int": "int64", "float": "float32"}   # torch's wrapped numbers


# "floating": a float array whose width is unknown (the softmax of a Tensor, a layer's output).
FLOATING = "floating"


def _category(dtype: str) -> int:
    return 2 if dtype == FLOATING else _DTYPES[dtype][0]


def _same_category(a: str, b: str) -> str:
    """Promotion within one category: numpy and torch agree there."""
    if a == b:
        return a
    if FLOATING in (a, b):
        return "float64" if "float64" in (a, b) else FLOATING
    ca, sa = _DTYPES[a]
    _, sb = _DTYPES[b]
    if ca == 1 and (a in _UNSIGNED) != (b in _UNSIGNED):
        signed, unsigned = (b, a) if a in _UNSIGNED else (a, b)
        size = max(_DTYPES[signed][1], _DTYPES[unsigned][1] * 2)
        return {1: "int8", 2: "int16", 4: "int32", 8: "int64"}[size]
    return a if sa >= sb else b


def _numpy_promote(a: str, b: str) -> str:
    ca, cb = _category(a), _category(b)
    if ca == cb:
        return _same_category(a, b)
    low, high = (a, b) if ca < cb else (b, a)
    if _category(low) == 0:
        return high
    if high == FLOATING:
        raise _Refuse("an integer array meets a float array of unknown width: numpy's result "
                      "dtype depends on the width")
    # integer with float: the float must hold every integer value
    needed = {1: "float16", 2: "float32", 4: "float64", 8: "float64"}[_DTYPES[low][1]]
    return _same_category(high, needed)


def _torch_promote(a: str, b: str) -> str:
    ca, cb = _category(a), _category(b)
    if ca == cb:
        return _same_category(a, b)
    return a if ca > cb else b


@dataclass(frozen=True)
class _Operand:
    """One operand of an elementwise operation, as numpy and as torch see it."""

    dtype: str | None          # numpy dtype of an array / numpy scalar; "int"/"float"/"bool" weak
    weak: bool                 # a Python number
    tier: str                  # torch: "dim" (array), "zero" (0-d tensor), "wrapped" (number)
    strong_scalar: bool = False   # a numpy float64/int64 scalar that became a Python number


def _numpy_result(ops: Sequence[_Operand]) -> str | None:
    strong = [o for o in ops if not o.weak or o.strong_scalar]
    weak = [o for o in ops if o.weak and not o.strong_scalar]
    if any(o.dtype is None for o in strong):
        return None
    dtypes = [("float64" if o.strong_scalar and o.dtype == "float" else
               "int64" if o.strong_scalar else o.dtype) for o in strong]
    if not dtypes:
        return None
    result = dtypes[0]
    for d in dtypes[1:]:
        result = _numpy_promote(result, d)  # type: ignore[arg-type]
    for o in weak:
        kind = {"bool": 0, "int": 1, "float": 2}[o.dtype or "float"]
        if kind > _category(result):  # type: ignore[arg-type]
            result = "int64" if kind == 1 else "float64"
    return result


def _torch_result(ops: Sequence[_Operand]) -> str | None:
    tiers: dict[str, str | None] = {"dim": None, "zero": None, "wrapped": None}
    for o in ops:
        dtype = _WEAK_DTYPES[o.dtype or "float"] if o.tier == "wrapped" else o.dtype
        if dtype is None:
            return None
        current = tiers[o.tier]
        tiers[o.tier] = dtype if current is None else _torch_promote(current, dtype)

    def combine(higher: str | None, lower: str | None) -> str | None:
        if higher is None:
            return lower
        if lower is None or _category(higher) == 2:
            return higher
        if higher == "bool" or _category(lower) == 2:
            return _torch_promote(higher, lower)
        return higher

    return combine(tiers["dim"], combine(tiers["zero"], tiers["wrapped"]))


def _float_result(dtype: str) -> str:
    """numpy's result dtype of a float ufunc (exp, sqrt, ...) of ``dtype``."""
    if _category(dtype) == 2:
        return dtype
    return {1: "float16", 2: "float32", 4: "float64", 8: "float64"}[_DTYPES[dtype][1]]


# ---- values ------------------------------------------------------------------------------------

ARRAY = "array"        # a numpy array; a Tensor of the same dtype once translated
SCALAR0 = "scalar0"    # a numpy scalar from a reduction or an element; a 0-d Tensor once translated
NUM = "number"         # a Python number (dtype "int"/"float"/"bool")
TENS = "tensor"        # a torch Tensor the original already had
OTHER = "other"        # anything else TorchScript can type (typ)
OPAQUE = "opaque"      # computed by numpy code that stays numpy
UNKNOWN = "unknown"
DTYPE = "dtype"        # a numpy dtype spelled in the code (np.float32, float, "int64")
NEWAXIS = "newaxis"
LITERAL = "literal"    # a tuple/list literal (items)


@dataclass(frozen=True)
class _Val:
    kind: str
    dtype: str | None = None
    strong: bool = False                 # NUM: it was a numpy scalar (np.float64) originally
    origins: frozenset[int] = frozenset()   # translated statements this value comes from
    alias: bool = False                  # ARRAY: may share memory where numpy copied
    maybe_scalar: bool = False           # ARRAY: an element (a[i]) that may be a numpy scalar
    typ: str | None = None               # OTHER: a TorchScript type string
    items: tuple[_Val, ...] = ()         # LITERAL: element values
    line: int = 0                        # OPAQUE: where it was computed


_UNKNOWN = _Val(UNKNOWN)


class _Refuse(Exception):
    """This statement cannot be translated exactly; the message says why."""


@dataclass
class _Expr:
    code: str
    val: _Val
    changed: bool = False
    atomic: bool = True


def _is_atomic(node: cst.BaseExpression) -> bool:
    if node.lpar:
        return True
    return not isinstance(node, cst.BinaryOperation | cst.UnaryOperation | cst.Comparison |
                          cst.BooleanOperation | cst.IfExp | cst.Lambda | cst.NamedExpr)


def _atom(expr: _Expr) -> str:
    return expr.code if expr.atomic else f"({expr.code})"


# ---- what numpy functions become ---------------------------------------------------------------

# float ufuncs: numpy name -> torch name, math name (for Python numbers; None: not scripted)
_FLOAT_UFUNCS: dict[str, tuple[str, str | None]] = {
    "exp": ("exp", "exp"), "log": ("log", "log"), "log2": ("log2", None),
    "log10": ("log10", "log10"), "log1p": ("log1p", "log1p"), "expm1": ("expm1", "expm1"),
    "sqrt": ("sqrt", "sqrt"), "sin": ("sin", "sin"), "cos": ("cos", "cos"),
    "tan": ("tan", "tan"), "arcsin": ("asin", "asin"), "arccos": ("acos", "acos"),
    "arctan": ("atan", "atan"), "sinh": ("sinh", "sinh"), "cosh": ("cosh", "cosh"),
    "tanh": ("tanh", "tanh"), "arcsinh": ("asinh", "asinh"), "arccosh": ("acosh", "acosh"),
    "arctanh": ("atanh", "atanh"), "exp2": ("exp2", None), "deg2rad": ("deg2rad", "radians"),
    "radians": ("deg2rad", "radians"), "rad2deg": ("rad2deg", "degrees"),
    "degrees": ("rad2deg", "degrees")}
_SAME_UFUNCS = {"abs": "abs", "absolute": "abs", "negative": "neg", "square": "square",
                "sign": "sign"}
_FLOAT_ONLY_UFUNCS = {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "round",
                      "round": "round", "around": "round"}
_BOOL_UFUNCS = {"isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite",
                "logical_not": "logical_not"}
_OPERATOR_FUNCS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/",
                   "true_divide": "/", "floor_divide": "//", "mod": "%", "remainder": "%"}
_BINARY_FUNCS = {"power": "pow", "matmul": "matmul", "fmod": "fmod", "arctan2": "atan2",
                 "hypot": "hypot",
                 "logical_and": "logical_and", "logical_or": "logical_or",
                 "logical_xor": "logical_xor", "maximum": "maximum", "minimum": "minimum"}
_REDUCTIONS = {"sum", "prod", "mean", "std", "var", "max", "amax", "min", "amin", "argmax",
               "argmin", "any", "all", "cumsum", "cumprod"}
_WINDOWS = {"hanning": "hann_window", "hamming": "hamming_window",
            "blackman": "blackman_window", "bartlett": "bartlett_window"}
_CONSTANTS = {"pi": "pi", "e": "e", "inf": "inf", "Inf": "inf", "infty": "inf", "nan": "nan",
              "NaN": "nan", "NAN": "nan"}
_REFUSED = {
    "median": "np.median averages the two middle values; torch.median returns the lower one",
    "nanmedian": "np.nanmedian averages the two middle values; torch's returns the lower one",
    "percentile": "np.percentile computes in float64 for any input and has no size limit; "
                  "torch.quantile needs a float input of at most 2**24 elements",
    "quantile": "np.quantile computes in float64 for any input and has no size limit; "
                "torch.quantile needs a float input of at most 2**24 elements",
    "searchsorted": "np.searchsorted accepts unsorted 'sorter' and mixed dtypes; not exact in "
                    "general",
    "unique": "np.unique returns sorted values and optional tuples; torch.unique's return "
              "types differ",
    "sort": "np.sort/argsort order ties differently from torch.sort",
    "argsort": "np.sort/argsort order ties differently from torch.sort",
    "interp": "np.interp has no torch equivalent",
    "convolve": "np.convolve has no exact torch equivalent (conv1d flips and pads differently)",
    "pad": "np.pad's modes do not map one to one onto F.pad",
    "nonzero": "np.nonzero returns a tuple of index arrays",
    "float32": "numpy scalar constructors have no TorchScript form",
    "float64": "numpy scalar constructors have no TorchScript form",
    "int64": "numpy scalar constructors have no TorchScript form",
    "int32": "numpy scalar constructors have no TorchScript form",
}
_REFUSED_MODULES = {
    "random": "np.random draws from numpy's generator; torch's gives other numbers",
    "fft": "np.fft is left (complex dtypes and normalisation are not translated)",
    "linalg": "np.linalg is left (not translated)"}
# Python numbers to math: np function -> math function (result float unless noted).
_MATH_BINARY = {"arctan2": "atan2", "power": "pow", "float_power": "pow", "fmod": "fmod"}
_CONSTRUCTOR_FLOAT = {"zeros", "ones", "empty"}


# ---- the rule ----------------------------------------------------------------------------------

class NumpyToTorch(Rule):
    __doc__ = __doc__

    name = "numpy-to-torch"
    # --rule all order: before ignore-numpy: what has an exact torch form is translated (the
    # artifact then saves), and only the rest is moved into an ignored method.
    order = 80
    CODES = (
        Code("TSF205", "numpy", "numpy in a compiled method",
             "TorchScript cannot call numpy (often \"cannot create weak reference to "
             "'numpy.ufunc' object\" or \"'Tensor' object has no attribute or method 'numpy'\"). "
             "Translate to torch/math, or move it into a @torch.jit.ignore method "
             "(ignore-numpy)."),
    )
    summary = "Translate numpy calls in compiled methods to their exact torch / math equivalents"

    INVALID: ClassVar[Sequence[Example]] = (
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Scaled(nn.Module):\n"
            "    def __init__(self, d_model=16):\n"
            "        super().__init__()\n"
            "        self.d_model = d_model\n\n"
            "    def forward(self, x):\n"
            "        x = x.masked_fill(x < -3, -np.inf)\n"
            "        return x * np.sqrt(self.d_model) + np.pi\n",
            "import math\n\nimport numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Scaled(nn.Module):\n"
            "    def __init__(self, d_model=16):\n"
            "        super().__init__()\n"
            "        self.d_model = d_model\n\n"
            "    def forward(self, x):\n"
            "        x = x.masked_fill(x < -3, -math.inf)\n"
            "        return x * math.sqrt(self.d_model) + math.pi\n",
        ),
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class LengthMask(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        lens = lengths.cpu().numpy()\n"
            "        mask = np.arange(x.size(1))[None, :] < lens[:, None]\n"
            "        mask = torch.from_numpy(mask).to(x.device)\n"
            "        return x * mask.unsqueeze(-1)\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class LengthMask(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        lens = lengths.cpu()\n"
            "        mask = torch.arange(x.size(1))[None, :] < lens[:, None]\n"
            "        mask = mask.to(x.device)\n"
            "        return x * mask.unsqueeze(-1)\n",
        ),
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Classifier(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.head = nn.Linear(8, 4)\n\n"
            "    def forward(self, x):\n"
            "        probs = self.head(x).softmax(-1).detach().cpu().numpy()\n"
            "        preds = np.argmax(probs, axis=1)\n"
            "        return torch.from_numpy(preds)\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Classifier(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.head = nn.Linear(8, 4)\n\n"
            "    def forward(self, x):\n"
            "        probs = self.head(x).softmax(-1).detach().cpu()\n"
            "        preds = torch.argmax(probs, dim=1)\n"
            "        return preds\n",
        ),
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Positions(nn.Module):\n"
            "    def forward(self, x):\n"
            "        T, D = x.size(1), x.size(2)\n"
            "        pos = np.arange(T)[:, None]\n"
            "        angle = pos / np.power(10000, 2 * (np.arange(D)[None, :] // 2) / D)\n"
            "        table = np.zeros((T, D))\n"
            "        table[:, 0::2] = np.sin(angle[:, 0::2])\n"
            "        table[:, 1::2] = np.cos(angle[:, 1::2])\n"
            "        return x + torch.from_numpy(table).float()\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Positions(nn.Module):\n"
            "    def forward(self, x):\n"
            "        T, D = x.size(1), x.size(2)\n"
            "        pos = torch.arange(T)[:, None]\n"
            "        angle = pos / torch.pow(10000, (2 * (torch.arange(D)[None, :] // 2))"
            ".to(torch.float64) / D)\n"
            "        table = torch.zeros((T, D), dtype=torch.float64)\n"
            "        table[:, 0::2] = torch.sin(angle[:, 0::2])\n"
            "        table[:, 1::2] = torch.cos(angle[:, 1::2])\n"
            "        return x + table.float()\n",
        ),
        Example(
            "from numpy import exp, clip, pi\nimport torch\nfrom torch import nn\n\n\n"
            "class Gate(nn.Module):\n"
            "    def forward(self, x):\n"
            "        g = torch.sigmoid(x).detach().numpy()\n"
            "        g = clip(exp(g) * pi, 0.0, 1.0)\n"
            "        return x * torch.from_numpy(g)\n",
            "import math\n\nfrom numpy import exp, clip, pi\nimport torch\n"
            "from torch import nn\n\n\n"
            "class Gate(nn.Module):\n"
            "    def forward(self, x):\n"
            "        g = torch.sigmoid(x).detach()\n"
            "        g = torch.clamp(torch.exp(g) * math.pi, 0.0, 1.0)\n"
            "        return x * g\n",
        ),
    )
    VALID: ClassVar[Sequence[str]] = (
        # The array feeds numpy code that has no exact torch form: nothing is translated.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Clip(nn.Module):\n"
        "    def forward(self, x):\n"
        "        a = x.detach().cpu().numpy()\n"
        "        hi = np.percentile(a, 99)\n"
        "        return x.clamp(max=float(hi))\n",
        # Ignored methods and the branch that never compiles are left alone.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Debug(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if not torch.jit.is_scripting():\n"
        "            print(np.abs(x.detach().numpy()).max())\n"
        "        return self.stats(x)\n\n"
        "    @torch.jit.ignore\n"
        "    def stats(self, x):\n"
        "        return torch.from_numpy(np.exp(x.numpy()))\n",
        # Integer true division of an array whose dtype is unknown: numpy gives float64 for
        # integers, torch float32; refused.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Ratio(nn.Module):\n"
        "    def forward(self, x, lengths):\n"
        "        ratio = lengths.numpy() / x.size(1)\n"
        "        return x * torch.from_numpy(ratio)[:, None]\n",
        # The array is returned: translating would change what forward returns.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Export(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return np.exp(x.detach().numpy())\n",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.module_imports: set[str] = set()

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # Every numpy use spells the word: an import of numpy (at module level or inside a
        # method), ``t.numpy()`` or ``torch.from_numpy``.
        return may_use_numpy(file.text) and (file.tree is None or bool(file.compiled))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        if self.source_text is not None and not may_use_numpy(self.source_text):
            return tree     # no numpy, no .numpy(), no from_numpy: nothing to walk
        result = super().transform_module_impl(tree)
        if not self.changes:
            return result
        for name in sorted(self.module_imports):
            result = add_module_import(result, name)
        return result

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        return _ClassTranslator(self, cls).rewrite()


@dataclass(frozen=True)
class _Spelling:
    """How the rewritten file spells the torch and math modules."""

    torch: str
    math: str
    needs_torch_import: bool
    needs_math_import: bool
    name_clash: bool        # an import to add would clash with a top-level name

    @staticmethod
    def of(facts: ModuleFacts) -> _Spelling:
        torch = facts.torch_alias
        maths = [local for local, full in facts.imports.items() if full == "math"]
        taken = facts.top_level_names
        return _Spelling(torch or "torch", maths[0] if maths else "math", torch is None,
                         not maths, (torch is None and "torch" in taken)
                         or (not maths and "math" in taken))


# ---- one class ---------------------------------------------------------------------------------

@dataclass
class _Unit:
    """A translatable piece: one small statement, or the test/iterable of a compound one."""

    node: cst.CSTNode                 # the small statement, or the header expression
    owner: cst.CSTNode                # the statement whose line is reported
    kind: str                         # "small" or "header"
    compiled: bool


@dataclass
class _Outcome:
    node: cst.CSTNode | None = None   # the unit translated; None: unchanged
    reason: str | None = None         # why it is not translated (None: translated)
    numpyish: bool = False
    names: list[str] = field(default_factory=list)    # numpy names translated, for the summary
    notes: list[str] = field(default_factory=list)


class _ClassTranslator:
    def __init__(self, rule: NumpyToTorch, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.cls = cls
        self.name = cls.name.value
        self.facts = rule.class_facts(cls)
        self.module = rule.facts
        self.imports = self.module.imports
        self.spelling = _Spelling.of(self.module)
        self.attributes: dict[str, str] = {}
        self.layers: set[str] = set()

    def rewrite(self) -> cst.ClassDef:
        if not isinstance(self.cls.body, cst.IndentedBlock):
            return self.cls
        replacements: dict[int, cst.CSTNode] = {}
        names: list[str] = []
        notes: list[str] = []
        candidates = []
        for method in self.facts.compiled:
            func = self.facts.methods[method]
            bindings = function_numpy_bindings(func, self.module.numpy_bindings)
            if numpy_uses(func.body, bindings, self.imports):
                candidates.append((method, func, bindings))
        if not candidates:
            return self.cls
        self.attributes, self.layers = _init_attributes(self.facts)
        for method, func, bindings in candidates:
            translator = _MethodTranslator(self, func, bindings)
            translator.run()
            for key, outcome in translator.outcomes.items():
                unit = translator.units[key]
                if outcome.reason is None and outcome.node is not None:
                    replacements[id(unit.node)] = outcome.node
                    names.extend(outcome.names)
                    notes.extend(outcome.notes)
                if unit.compiled:
                    self._report(method, unit, outcome, translator.uses[key])
        if not replacements:
            return self.cls
        if self.spelling.needs_math_import and "+math" in names:
            self.rule.module_imports.add("math")
        if self.spelling.needs_torch_import and "+torch" in names:
            self.rule.module_imports.add("torch")
        shown = sorted({n for n in names if not n.startswith("+")},
                       key=lambda n: (not n.startswith("np."), n))
        summary = (f"translated {', '.join(shown)} ({len(replacements)} "
                   f"{'site' if len(replacements) == 1 else 'sites'})")
        rewritten = self.cls.visit(_Replace(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.rule.changes.append(ClassChange(self.rule.name, self.name,
                                             self.rule.span_of(self.cls), summary,
                                             notes=list(dict.fromkeys(notes))))
        return rewritten


    def _report(self, method: str, unit: _Unit, outcome: _Outcome,
                uses: Sequence[NumpyUse]) -> None:
        """Each numpy use of a compiled unit is either fixed (translated) or refused with the
        reason; a refused unit without numpy uses of its own (it reads an array) is a skip
        without a code."""
        annotated = {id(n) for a in find_all(unit.node, cst.Annotation)
                     for n in find_all(a, cst.CSTNode)}  # type: ignore[type-abstract]
        translated = outcome.reason is None and outcome.node is not None
        for use in uses:
            if translated and id(use.node) not in annotated:
                self.rule.fixed(use.node, "TSF205", _message(use, method))
                continue
            if id(use.node) in annotated:
                reason = "numpy in a type annotation is not translated"
            elif outcome.reason is not None:
                reason = outcome.reason
            else:
                reason = f"`{code_of(use.node)}` is kept as a value (no torch form here)"
            self.rule.skip(self.name, use.node, f"{method}(): {reason}", code="TSF205",
                           message=_message(use, method))
        if not uses and outcome.numpyish and outcome.reason is not None:
            self.rule.skip(self.name, unit.owner, f"{method}(): {outcome.reason}")


def _message(use: NumpyUse, method: str) -> str:
    """The text ``tsfix check`` shows for a numpy use (the linter's TSF205 message)."""
    name = use.name
    if isinstance(use.node, cst.Call):
        name = code_of(use.node.func)
    return f"numpy ({name}) in {method}()"


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.replacements.get(id(original), updated)


# ---- one method --------------------------------------------------------------------------------

_FLAGGED = (ARRAY, SCALAR0, OPAQUE)


def _same_value(a: _Val, b: _Val) -> bool:
    return (a.kind, a.dtype, a.strong, a.alias, a.typ) == (b.kind, b.dtype, b.strong, b.alias,
                                                           b.typ)


def _join(a: dict[str, _Val], b: dict[str, _Val]) -> dict[str, _Val]:
    out: dict[str, _Val] = {}
    for name in a.keys() | b.keys():
        va, vb = a.get(name), b.get(name)
        if va is None or vb is None:
            one = va or vb
            assert one is not None
            if one.kind in _FLAGGED or one.strong:
                out[name] = _Val(OPAQUE, origins=one.origins, line=one.line)
            continue
        if _same_value(va, vb):
            out[name] = replace(va, origins=va.origins | vb.origins)
        elif va.kind in _FLAGGED or vb.kind in _FLAGGED or va.strong or vb.strong:
            out[name] = _Val(OPAQUE, origins=va.origins | vb.origins, line=va.line or vb.line)
    return out


class _MethodTranslator:
    def __init__(self, owner: _ClassTranslator, func: cst.FunctionDef,
                 bindings: dict[str, str]) -> None:
        self.owner = owner
        self.rule = owner.rule
        self.func = func
        self.method = func.name.value
        self.bindings = bindings
        self.self_var = self_name(func)
        self.imports = owner.imports
        self.never = owner.facts.never_compiled(self.method)
        self.typer = self._typer()
        self.base_env = dict(self.typer.env)
        self.local_names = set(parameters_of(func)) | {
            n.value for t in find_all(func.body, cst.AssignTarget, cst.For, cst.AugAssign,
                                      cst.AnnAssign)
            for n in find_all(t.target, cst.Name)}
        self.units: dict[int, _Unit] = {}
        self.outcomes: dict[int, _Outcome] = {}
        self.uses: dict[int, list[NumpyUse]] = {}
        self.refused: dict[int, str] = {}
        self.conflicts: dict[int, str] = {}
        self._lines: dict[int, int] = {}
        # per unit being translated
        self.env: dict[str, _Val] = {}
        self.outcome = _Outcome()
        self.use_ids: set[int] = set()
        self.flag_names: set[str] = set()
        self.unit_line = 0

    # -- types of what the code already says ---------------------------------------------------

    def _typer(self) -> Typer:
        """A Typer of its own (the translation rewrites its env unit by unit): the parameter
        types by the shared policy, the attributes and layers ``__init__`` stores, the
        locals."""
        observed = self.rule.observed.get(self.owner.name, {}).get(self.method, {})
        env = self.owner.facts.parameter_types(self.method, observed)
        # Local adjustment to the shared policy, which leaves a parameter without annotation,
        # observed type or default unknown unless the body uses it as a Tensor (so that
        # annotate never types a list into a Tensor). Here the question is what the compiled
        # code computes, and TorchScript itself types such a parameter as a Tensor: without
        # this, ``x + np.zeros(3).sum()`` (x read nowhere else) would be refused.
        for name, param in parameters_of(self.func).items():
            if (env.get(name, TENSOR) is None and param.annotation is None
                    and param.default is None):
                env[name] = TENSOR
        typer = Typer(env, self.imports, self.self_var, self.owner.attributes,
                      self.owner.layers)
        collect_locals(self.func.body, typer)
        return typer

    def _line(self, node: cst.CSTNode) -> int:
        key = id(node)
        if key not in self._lines:
            self._lines[key] = self.rule.line_of(node)
        return self._lines[key]

    def _compiled(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.never

    # -- the fixed point -----------------------------------------------------------------------

    def run(self) -> None:
        for _ in range(50):
            self.conflicts = {}
            self.outcomes = {}
            self._suite(self.func.body, {})
            new = {k: v for k, v in self.conflicts.items() if k not in self.refused}
            if not new:
                return
            self.refused.update(new)

    # -- the statement walk --------------------------------------------------------------------

    def _block(self, statements: Sequence[cst.BaseStatement],
               env: dict[str, _Val]) -> dict[str, _Val]:
        for statement in statements:
            env = self._statement(statement, env)
        return env

    def _suite(self, suite: cst.BaseSuite, env: dict[str, _Val]) -> dict[str, _Val]:
        if isinstance(suite, cst.IndentedBlock):
            return self._block(suite.body, dict(env))
        assert isinstance(suite, cst.SimpleStatementSuite)
        for small in suite.body:
            env = self._unit(self._new_unit(small, small, "small"), dict(env))
        return env

    def _new_unit(self, node: cst.CSTNode, owner: cst.CSTNode, kind: str) -> _Unit:
        return _Unit(node, owner, kind, self._compiled(node))

    def _statement(self, stmt: cst.BaseStatement, env: dict[str, _Val]) -> dict[str, _Val]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                env = self._unit(self._new_unit(small, stmt, "small"), env)
            return env
        if isinstance(stmt, cst.If):
            env = self._unit(self._new_unit(stmt.test, stmt, "header"), env)
            after_body = self._suite(stmt.body, env)
            if isinstance(stmt.orelse, cst.If):
                after_else = self._statement(stmt.orelse, dict(env))
            elif isinstance(stmt.orelse, cst.Else):
                after_else = self._suite(stmt.orelse.body, env)
            else:
                after_else = env
            return _join(after_body, after_else)
        if isinstance(stmt, cst.For | cst.While):
            header = stmt.iter if isinstance(stmt, cst.For) else stmt.test
            entry = env
            for _ in range(2):
                env = self._unit(self._new_unit(header, stmt, "header"), dict(entry))
                if isinstance(stmt, cst.For):
                    env = self._bind_loop_target(stmt, header, env)
                after = self._suite(stmt.body, env)
                entry = _join(entry, after)
            if stmt.orelse is not None:
                entry = self._suite(stmt.orelse.body, entry)
            return entry
        if isinstance(stmt, cst.With):
            for item in stmt.items:
                env = self._unit(self._new_unit(item.item, stmt, "header"), env)
                if item.asname is not None:
                    for name in find_all(item.asname, cst.Name):
                        env.pop(name.value, None)
            return self._suite(stmt.body, env)
        if isinstance(stmt, cst.Try):
            env = self._suite(stmt.body, env)
            for handler in stmt.handlers:
                env = _join(env, self._suite(handler.body, env))
            if stmt.orelse is not None:
                env = self._suite(stmt.orelse.body, env)
            if stmt.finalbody is not None:
                env = self._suite(stmt.finalbody.body, env)
            return env
        # nested functions and classes, match, ...: never translated, but they may read names
        return self._unit(self._new_unit(stmt, stmt, "opaque"), env)

    def _bind_loop_target(self, stmt: cst.For, header: cst.BaseExpression,
                          env: dict[str, _Val]) -> dict[str, _Val]:
        outcome = self.outcomes.get(id(header))
        opaque = outcome is not None and outcome.numpyish and outcome.reason is not None
        for name in find_all(stmt.target, cst.Name):
            if opaque:
                env[name.value] = _Val(OPAQUE, line=self._line(stmt))
            else:
                env.pop(name.value, None)
        return env

    # -- one unit ------------------------------------------------------------------------------

    def _unit(self, unit: _Unit, env: dict[str, _Val]) -> dict[str, _Val]:
        node = unit.node
        key = id(node)
        self.units[key] = unit
        uses = numpy_uses(node, self.bindings, self.imports)
        self.uses[key] = uses
        reads = _reads(node)
        flagged = {n: env[n] for n in reads if n in env and (env[n].kind in _FLAGGED
                                                              or env[n].strong)}
        numpyish = bool(uses) or any(v.kind in _FLAGGED for v in flagged.values())
        targets = _bound_names(node) if unit.kind == "small" else []
        if not numpyish and not flagged:
            for name in targets:
                env.pop(name, None)
            return env
        outcome = _Outcome(numpyish=numpyish)
        bound: dict[str, _Val] = {}
        if not unit.compiled:
            outcome.reason = "only runs in eager mode"
        elif key in self.refused:
            outcome.reason = self.refused[key]
        else:
            self.env, self.outcome = env, outcome
            self.use_ids = {id(u.node) for u in uses}
            self.flag_names = set(flagged)
            self.unit_line = 0
            self.unit = unit
            self.typer.env = {**self.base_env,
                              **{n: _type_string(v) for n, v in env.items()}}
            try:
                new, bound = self._translate(unit)
                outcome.node = new
            except _Refuse as refusal:
                outcome.reason = str(refusal)
                outcome.names, outcome.notes = [], []
        self.outcomes[key] = outcome
        if outcome.reason is None:
            for name in targets:
                env.pop(name, None)
            for name, value in bound.items():
                if value.kind in (ARRAY, SCALAR0) or value.strong:
                    value = replace(value, origins=frozenset({key}))
                env[name] = value
            return env
        # Left as it is: whatever it reads keeps being numpy.
        for name, value in flagged.items():
            if value.kind in (ARRAY, SCALAR0, OPAQUE) or numpyish:
                why = outcome.reason
                for origin in value.origins:
                    if origin != key:
                        self.conflicts.setdefault(
                            origin, f"`{name}` would become a Tensor, but line "
                                    f"{self._line(unit.owner)} still uses it as numpy ({why})")
        for name in targets:
            if numpyish:
                origins = frozenset(o for v in flagged.values() for o in v.origins)
                env[name] = _Val(OPAQUE, origins=origins, line=self._line(unit.owner))
            else:
                env.pop(name, None)
        return env

    def _translate(self, unit: _Unit) -> tuple[cst.CSTNode | None, dict[str, _Val]]:
        node = unit.node
        bound: dict[str, _Val] = {}
        if unit.kind == "header":
            assert isinstance(node, cst.BaseExpression)
            result = self.expr(node)
            owner = unit.owner
            if result.val.kind == ARRAY:
                what = ("iterates over" if isinstance(owner, cst.For) else "tests")
                raise _Refuse(f"{what} a numpy array")
            if isinstance(owner, cst.For) and result.val.kind in (SCALAR0, LITERAL):
                raise _Refuse("iterates over numpy values")
            if isinstance(owner, cst.With):
                raise _Refuse("numpy in a `with` item")
            if not result.changed:
                return None, bound
            return self._parse_expression(result.code, node), bound
        if unit.kind != "small":
            raise _Refuse("numpy inside a nested function or class")
        code = self._small(node, bound)
        if code is None or code == code_of(node).rstrip().rstrip(";").rstrip():
            return None, bound
        try:
            line = cst.parse_statement(code + "\n")
        except cst.ParserSyntaxError as exc:
            raise _Refuse(f"internal: the translation does not parse ({code!r})") from exc
        assert isinstance(line, cst.SimpleStatementLine)
        new = line.body[0]
        if isinstance(node, cst.BaseSmallStatement):
            new = new.with_changes(semicolon=node.semicolon)
        return new, bound

    def _parse_expression(self, code: str, node: cst.BaseExpression) -> cst.BaseExpression:
        try:
            return cst.parse_expression(code)
        except cst.ParserSyntaxError as exc:
            raise _Refuse(f"internal: the translation does not parse ({code!r})") from exc

    # -- statements ----------------------------------------------------------------------------

    def _small(self, node: cst.CSTNode, bound: dict[str, _Val]) -> str | None:
        if isinstance(node, cst.Assign):
            value = self.expr(node.value)
            targets = [self._target(t.target, value, bound) for t in node.targets]
            if not value.changed and not any(changed for _, changed in targets):
                return None
            return "".join(f"{code} = " for code, _ in targets) + value.code
        if isinstance(node, cst.AnnAssign):
            if node.value is None:
                raise _Refuse("an annotation of a numpy name")
            value = self.expr(node.value)
            if value.val.kind in (ARRAY, SCALAR0):
                raise _Refuse("an annotated numpy array")
            target, changed = self._target(node.target, value, bound)
            if not value.changed and not changed:
                return None
            return f"{target}: {code_of(node.annotation.annotation)} = {value.code}"
        if isinstance(node, cst.AugAssign):
            return self._augmented(node, bound)
        if isinstance(node, cst.Return):
            if node.value is None:
                return None
            value = self.expr(node.value)
            if _holds_array(value.val):
                raise _Refuse("returns a numpy array: translating it would return a Tensor")
            return f"return {value.code}" if value.changed else None
        if isinstance(node, cst.Expr):
            value = self.expr(node.value)
            return value.code if value.changed else None
        if isinstance(node, cst.Assert):
            test = self.expr(node.test)
            msg = self.expr(node.msg) if node.msg is not None else None
            if _holds_array(test.val):
                raise _Refuse("asserts on a numpy array")
            if not test.changed and not (msg and msg.changed):
                return None
            return f"assert {test.code}" + (f", {msg.code}" if msg else "")
        raise _Refuse(f"numpy in a `{code_of(node).split()[0]}` statement")

    def _target(self, target: cst.BaseExpression, value: _Expr,
                bound: dict[str, _Val]) -> tuple[str, bool]:
        if isinstance(target, cst.Name):
            val = value.val
            if val.kind == LITERAL:
                if any(_holds_array(item) for item in val.items):
                    raise _Refuse("a tuple of numpy arrays")
                val = _UNKNOWN
            bound[target.value] = val
            return code_of(target), False
        if isinstance(target, cst.Tuple | cst.List):
            names = [e.value for e in target.elements]
            if value.val.kind == LITERAL and len(value.val.items) == len(names):
                items: Sequence[_Val] = value.val.items
            elif value.val.kind == OTHER and value.val.typ == "List[int]":
                items = [_Val(NUM, "int")] * len(names)
            elif _holds_array(value.val):
                raise _Refuse("unpacks a numpy array")
            else:
                items = [_UNKNOWN] * len(names)
            changed = False
            for element, item in zip(names, items, strict=True):
                if isinstance(element, cst.Name):
                    bound[element.value] = item
                elif _holds_array(item):
                    raise _Refuse("unpacks numpy values into something other than names")
            return code_of(target), changed
        if isinstance(target, cst.Subscript):
            base = self.expr(target.value)
            if base.val.kind == ARRAY and base.val.alias:
                raise _Refuse(f"writes into `{base.code}`, which may share memory with the "
                              "array it was cast from (numpy's astype copies)")
            if base.val.kind not in (ARRAY, TENS) and base.val.kind in _FLAGGED:
                raise _Refuse(f"writes into `{base.code}`")
            if base.val.kind == TENS or base.val.kind == ARRAY:
                if value.val.kind == TENS and base.val.kind == ARRAY:
                    raise _Refuse("stores a Tensor into a numpy array")
                if value.val.kind not in (ARRAY, SCALAR0, NUM, TENS):
                    raise _Refuse(f"cannot tell the type of `{value.code}`")
            elif _holds_array(value.val):
                raise _Refuse(f"stores a numpy array into `{base.code}`")
            index, changed = self._indices(target, base)
            code = f"{_atom(base)}[{index}]" if changed or base.changed else code_of(target)
            return code, changed or base.changed
        if isinstance(target, cst.Attribute):
            if _holds_array(value.val):
                raise _Refuse("stores a numpy array on an attribute")
            base = self.expr(target.value)
            return (code_of(target) if not base.changed else
                    f"{_atom(base)}.{target.attr.value}"), base.changed
        raise _Refuse("an unusual assignment target")

    def _augmented(self, node: cst.AugAssign, bound: dict[str, _Val]) -> str | None:
        op = code_of(node.operator).strip()[:-1]
        target = self.expr(node.target)
        value = self.expr(node.value)
        if target.val.kind in (ARRAY, SCALAR0):
            if target.val.alias:
                raise _Refuse(f"writes into `{target.code}`, which may share memory with the "
                              "array it was cast from (numpy's astype copies)")
            self._promote([target, value], f"`{code_of(node)}`", op=op, in_place=True)
        elif value.val.kind in (ARRAY, SCALAR0):
            raise _Refuse(f"`{code_of(node)}` mixes a numpy array into a "
                          f"{target.val.kind} in place")
        if isinstance(node.target, cst.Name):
            current = self.env.get(node.target.value)
            if current is not None:
                bound[node.target.value] = current
        if not target.changed and not value.changed:
            return None
        return f"{target.code} {op}= {value.code}"

    # -- expressions ---------------------------------------------------------------------------

    def _involved(self, node: cst.CSTNode) -> bool:
        for found in find_all(node, cst.Name, cst.Attribute, cst.Call):
            if id(found) in self.use_ids:
                return True
            if isinstance(found, cst.Name) and found.value in self.flag_names:
                return True
        return False

    def _typed(self, node: cst.BaseExpression) -> _Val:
        return _val_from_type(self.typer.type_of(node))

    def expr(self, node: cst.BaseExpression) -> _Expr:
        if not self._involved(node):
            if isinstance(node, cst.Name) and node.value in self.env:
                return _Expr(node.value, self.env[node.value])
            if isinstance(node, cst.Tuple | cst.List):
                return self._literal(node)
            return _Expr(code_of(node), self._typed(node), atomic=_is_atomic(node))
        if isinstance(node, cst.Name):
            return self._name(node)
        if isinstance(node, cst.Attribute):
            return self._attribute(node)
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node)
        if isinstance(node, cst.UnaryOperation):
            return self._unary(node)
        if isinstance(node, cst.Comparison):
            return self._comparison(node)
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.Tuple | cst.List):
            return self._literal(node)
        kind = type(node).__name__
        raise _Refuse(f"numpy inside a {kind} expression is not translated")

    def _wrap(self, node: cst.BaseExpression, inner: str) -> str:
        return ("".join(code_of(p) for p in node.lpar) + inner
                + "".join(code_of(p) for p in node.rpar))

    def _name(self, node: cst.Name) -> _Expr:
        name = node.value
        if name in self.bindings and name not in self.env:
            return self._numpy_value(self.bindings[name], node)
        value = self.env.get(name)
        if value is None:
            value = _val_from_type(self.base_env.get(name))
        if value.kind == OPAQUE:
            where = f" (line {value.line})" if value.line else ""
            raise _Refuse(f"`{name}` is computed by numpy code left untranslated{where}")
        return _Expr(self._wrap(node, name), value)

    def _numpy_value(self, qualified: str, node: cst.BaseExpression) -> _Expr:
        short = qualified.removeprefix("numpy.")
        if short in _CONSTANTS:
            self.outcome.names.append(f"np.{short}")
            return _Expr(self._wrap(node, f"{self._math()}.{_CONSTANTS[short]}"),
                         _Val(NUM, "float"), changed=True)
        if short == "newaxis":
            self.outcome.names.append("np.newaxis")
            return _Expr("None", _Val(NEWAXIS), changed=True)
        if short in _DTYPE_NAMES:
            return _Expr(code_of(node), _Val(DTYPE, _DTYPE_NAMES[short]))
        raise _Refuse(f"np.{short} used as a value")

    def _attribute(self, node: cst.Attribute) -> _Expr:
        dotted = dotted_name(node)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            if head in self.bindings and head not in self.env:
                return self._numpy_value(f"{self.bindings[head]}.{rest}", node)
        base = self.expr(node.value)
        attr = node.attr.value
        kind = base.val.kind
        if kind in (ARRAY, SCALAR0):
            if attr == "shape":
                return _Expr(self._wrap(node, f"{_atom(base)}.shape"), _Val(OTHER,
                                                                            typ="List[int]"),
                             changed=base.changed)
            if attr == "ndim":
                self.outcome.names.append(".ndim")
                return _Expr(self._wrap(node, f"{_atom(base)}.dim()"), _Val(NUM, "int"),
                             changed=True)
            if attr == "size":
                self.outcome.names.append(".size")
                return _Expr(self._wrap(node, f"{_atom(base)}.numel()"), _Val(NUM, "int"),
                             changed=True)
            raise _Refuse(f"`.{attr}` of a numpy array is not translated")
        code = self._wrap(node, f"{_atom(base)}.{attr}") if base.changed else code_of(node)
        if kind == TENS:
            if attr == "data":
                return _Expr(code, _Val(TENS, base.val.dtype), changed=base.changed)
            if attr == "shape":
                return _Expr(code, _Val(OTHER, typ="List[int]"), changed=base.changed)
        if kind in (DTYPE, NEWAXIS, LITERAL):
            raise _Refuse(f"`{code_of(node)}` is not translated")
        return _Expr(code, self._typed(node), changed=base.changed)

    # -- calls ---------------------------------------------------------------------------------

    def _numpy_qualified(self, func: cst.BaseExpression) -> str | None:
        dotted = dotted_name(func)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head not in self.bindings or head in self.env:
            return None
        return f"{self.bindings[head]}.{rest}" if rest else self.bindings[head]

    def _call(self, node: cst.Call) -> _Expr:
        func = node.func
        qualified = self._numpy_qualified(func)
        if qualified is not None:
            return _NumpyCall(self, node, qualified).translate()
        if (isinstance(func, cst.Attribute) and func.attr.value == "numpy"
                and not node.args):
            source = self.expr(func.value)
            if source.val.kind not in (TENS, UNKNOWN):
                raise _Refuse(f"`.numpy()` of `{source.code}`, which is not a Tensor")
            self.outcome.names.append(".numpy()")
            dtype = _tensor_dtype(func.value, self) or source.val.dtype
            return _Expr(self._wrap(node, source.code), _Val(ARRAY, dtype), changed=True,
                         atomic=source.atomic or bool(node.lpar))
        qualified_torch = qualified_name(func, dict(self.imports)) or ""
        if qualified_torch in ("torch.from_numpy", "torch.as_tensor", "torch.tensor",
                               "torch.asarray"):
            converted = self._to_tensor(node, qualified_torch)
            if converted is not None:
                return converted
        receiver = None
        if isinstance(func, cst.Attribute):
            receiver = self.expr(func.value)
            if receiver.val.kind == ARRAY:
                return _ArrayMethod(self, node, receiver).translate()
            if receiver.val.kind == SCALAR0:
                if func.attr.value == "item" and not node.args:
                    if receiver.val.dtype is None:
                        raise _Refuse(f"`{code_of(node)}`: the dtype of the numpy scalar is "
                                      "unknown")
                    kind = {0: "bool", 1: "int", 2: "float"}[_category(receiver.val.dtype)]
                    return _Expr(self._wrap(node, f"{_atom(receiver)}.item()"),
                                 _Val(NUM, kind), changed=receiver.changed)
                raise _Refuse(f"`.{func.attr.value}()` of a numpy scalar is not translated")
            if receiver.val.kind in (DTYPE, NEWAXIS, LITERAL):
                raise _Refuse(f"`{code_of(node)}` is not translated")
        callee = get_full_name_for_node(func) or code_of(func)
        parts: list[str] = []
        kinds: list[str] = []
        changed = receiver.changed if receiver is not None else False
        for index, arg in enumerate(node.args):
            value = self.expr(arg.value)
            kinds.append(value.val.kind)
            if value.val.kind in (ARRAY, SCALAR0):
                self._array_argument(callee, qualified_torch, index, arg, value)
            elif value.val.kind in (DTYPE, NEWAXIS):
                raise _Refuse(f"passes `{code_of(arg.value)}` to {callee}()")
            elif value.val.kind == LITERAL and any(_holds_array(i) for i in value.val.items):
                raise _Refuse(f"passes numpy arrays to {callee}()")
            changed = changed or value.changed
            prefix = ("*" * len(arg.star)) if arg.star else (
                f"{arg.keyword.value}=" if arg.keyword is not None else "")
            parts.append(prefix + value.code)
        if not changed:
            result = _Expr(code_of(node), self._typed(node))
        else:
            func_code = (f"{_atom(receiver)}.{func.attr.value}"
                         if receiver is not None and receiver.changed
                         and isinstance(func, cst.Attribute) else code_of(func))
            result = _Expr(self._wrap(node, f"{func_code}({', '.join(parts)})"),
                           self._typed(node), changed=True)
        if callee == "len" and kinds[:1] == [ARRAY]:
            result.val = _Val(NUM, "int")
        elif callee in ("int", "float", "bool") and kinds[:1] in ([ARRAY], [SCALAR0]):
            result.val = _Val(NUM, callee)
        return result

    def _array_argument(self, callee: str, qualified: str, index: int, arg: cst.Arg,
                        value: _Expr) -> None:
        """Calls that treat a numpy array as a Tensor would be treated."""
        if callee == "len" and value.val.kind == ARRAY:
            return
        if callee in ("int", "float", "bool"):
            return
        if qualified.endswith("nn.utils.rnn.pack_padded_sequence") and (
                (arg.keyword is None and index == 1)
                or (arg.keyword is not None and arg.keyword.value == "lengths")):
            return  # it calls torch.as_tensor(lengths, dtype=torch.int64) itself
        raise _Refuse(f"passes the numpy value `{value.code}` to {callee}()")

    def _to_tensor(self, node: cst.Call, qualified: str) -> _Expr | None:
        """``torch.from_numpy(a)`` / ``torch.as_tensor(a)`` / ``torch.tensor(a)`` of a
        translated array."""
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if len(positional) != 1 or positional[0] is not node.args[0]:
            return None
        value = self.expr(positional[0].value)
        if value.val.kind not in (ARRAY, SCALAR0):
            if qualified == "torch.from_numpy":
                raise _Refuse(f"torch.from_numpy of `{value.code}`, which is not a translated "
                              "array")
            return None
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        if qualified == "torch.from_numpy" and keywords:
            raise _Refuse("torch.from_numpy with keywords")
        if set(keywords) - {"dtype", "device"}:
            raise _Refuse(f"{qualified} with {', '.join(sorted(keywords))}")
        self.outcome.names.append(qualified)
        code = _atom(value)
        dtype = value.val.dtype
        to_args = []
        if "dtype" in keywords:
            to_args.append(f"dtype={code_of(keywords['dtype'])}")
            dtype = _torch_dtype_name(keywords["dtype"], self.imports)
        if "device" in keywords:
            to_args.append(f"device={code_of(keywords['device'])}")
        if qualified == "torch.tensor":
            # torch.tensor copies; .to() alone may return the same tensor
            code = f"{code}.to({', '.join(to_args)}, copy=True)" if to_args else \
                f"{code}.clone()"
        elif to_args:
            code = f"{code}.to({', '.join(to_args)})"
        return _Expr(self._wrap(node, code), _Val(TENS, dtype), changed=True)

    # -- operators -----------------------------------------------------------------------------

    def _binary(self, node: cst.BinaryOperation) -> _Expr:
        left, right = self.expr(node.left), self.expr(node.right)
        op = code_of(node.operator).strip()
        kinds = {left.val.kind, right.val.kind}
        changed = left.changed or right.changed
        if kinds & {ARRAY, SCALAR0}:
            if left.val.kind == TENS and op in ("+", "-", "*", "/", "//", "%", "**"):
                # Tensor <op> ndarray: torch converts the array as it is; same result.
                code = f"{left.code}{code_of(node.operator)}{right.code}"
                return _Expr(self._wrap(node, code), _Val(TENS), changed=changed,
                             atomic=bool(node.lpar))
            codes, dtype = self._promote([left, right], f"`{code_of(node)}`", op=op)
            kind = ARRAY if ARRAY in kinds else SCALAR0
            changed = changed or codes != [left.code, right.code]
            code = f"{codes[0]}{code_of(node.operator)}{codes[1]}"
            return _Expr(self._wrap(node, code), _Val(kind, dtype), changed=changed,
                         atomic=bool(node.lpar))
        for side in (left, right):
            if side.val.kind in (DTYPE, NEWAXIS, LITERAL, OPAQUE):
                raise _Refuse(f"`{code_of(node)}` is not translated")
        code = (self._wrap(node, f"{left.code}{code_of(node.operator)}{right.code}") if changed
                else code_of(node))
        if left.val.kind == NUM and right.val.kind == NUM:
            dtype = "float" if "float" in (left.val.dtype, right.val.dtype) or op == "/" else \
                "int"
            val = _Val(NUM, dtype, strong=left.val.strong or right.val.strong)
        elif TENS in kinds:
            val = _Val(TENS)
        else:
            val = self._typed(node)
        return _Expr(code, val, changed=changed, atomic=bool(node.lpar))

    def _unary(self, node: cst.UnaryOperation) -> _Expr:
        inner = self.expr(node.expression)
        op = code_of(node.operator)
        code = self._wrap(node, f"{op}{inner.code}") if inner.changed else code_of(node)
        kind = inner.val.kind
        if kind in (ARRAY, SCALAR0):
            if isinstance(node.operator, cst.Not):
                raise _Refuse("`not` of a numpy array")
            if isinstance(node.operator, cst.Minus) and inner.val.dtype in (None, "bool"):
                raise _Refuse(f"`{code_of(node)}`: negating an array whose dtype is "
                              f"{inner.val.dtype or 'unknown'}")
            return _Expr(code, inner.val, changed=inner.changed, atomic=bool(node.lpar))
        if kind in (DTYPE, NEWAXIS, LITERAL):
            raise _Refuse(f"`{code_of(node)}` is not translated")
        val = inner.val if kind in (NUM, TENS) else self._typed(node)
        if isinstance(node.operator, cst.Not):
            val = _Val(NUM, "bool")
        return _Expr(code, val, changed=inner.changed, atomic=bool(node.lpar))

    def _comparison(self, node: cst.Comparison) -> _Expr:
        left = self.expr(node.left)
        rights = [self.expr(c.comparator) for c in node.comparisons]
        values = [left, *rights]
        changed = any(v.changed for v in values)
        kinds = {v.val.kind for v in values}
        if kinds & {ARRAY, SCALAR0}:
            if len(node.comparisons) != 1 or isinstance(
                    node.comparisons[0].operator, cst.Is | cst.IsNot | cst.In | cst.NotIn):
                raise _Refuse(f"`{code_of(node)}`: chained or identity comparison of arrays")
            codes, _ = self._promote(values, f"`{code_of(node)}`", comparison=True)
            changed = changed or codes != [left.code, rights[0].code]
            code = f"{codes[0]}{code_of(node.comparisons[0].operator)}{codes[1]}"
            kind = ARRAY if ARRAY in kinds else SCALAR0
            return _Expr(self._wrap(node, code), _Val(kind, "bool"), changed=changed,
                         atomic=bool(node.lpar))
        for value in values:
            if value.val.kind in (DTYPE, NEWAXIS, LITERAL):
                raise _Refuse(f"`{code_of(node)}` is not translated")
        if not changed:
            return _Expr(code_of(node), self._typed(node), atomic=bool(node.lpar))
        code = left.code + "".join(f"{code_of(c.operator)}{r.code}"
                                   for c, r in zip(node.comparisons, rights, strict=True))
        val = _Val(TENS) if TENS in kinds else _Val(NUM, "bool")
        return _Expr(self._wrap(node, code), val, changed=True, atomic=bool(node.lpar))

    def _operands(self, values: Sequence[_Expr], what: str) -> list[_Operand]:
        found = []
        for value in values:
            val = value.val
            if val.kind == ARRAY:
                found.append(_Operand(val.dtype, False, "dim"))
            elif val.kind == SCALAR0:
                found.append(_Operand(val.dtype, False, "zero"))
            elif val.kind == NUM and val.dtype in ("int", "float", "bool"):
                found.append(_Operand(val.dtype, True, "wrapped", strong_scalar=val.strong))
            elif val.kind == TENS:
                raise _Refuse(f"{what} mixes a numpy array with a torch Tensor")
            else:
                raise _Refuse(f"{what}: cannot tell the type of `{value.code}`")
        return found

    def _promote(self, values: Sequence[_Expr], what: str, *, op: str = "",
                 comparison: bool = False, in_place: bool = False,
                 exact_operands: bool = False) -> tuple[list[str], str | None]:
        """The operands' code, cast where torch would compute in another dtype than numpy,
        and numpy's result dtype (None: the same unknown dtype as the one array)."""
        operands = self._operands(values, what)
        codes = [v.code for v in values]
        divide = op == "/"
        unknown = [o for o in operands if not o.weak and o.dtype is None]
        if unknown:
            others = [o for o in operands if o.weak or o.dtype is not None]
            small = all((o.weak and not o.strong_scalar and o.dtype in ("int", "bool"))
                        or (not o.weak and o.dtype is not None and _category(o.dtype) <= 1)
                        for o in others)
            if comparison and (small or all(o.weak for o in others)):
                self.outcome.notes.append(
                    f"line {self._unit_line()}: {what} compares an array whose dtype is "
                    "unknown; torch compares int64 with float32 in float32, numpy in float64 "
                    "(equal unless integers exceed 2**24)")
                return codes, "bool"
            if (len(unknown) == 1 and not divide and not comparison and op != "@"
                    and all(o.weak and not o.strong_scalar and o.dtype in ("int", "bool")
                            for o in others)):
                return codes, None
            raise _Refuse(f"{what}: the dtype of an array here is unknown (it comes from "
                          "Tensor.numpy()), and numpy's result dtype depends on it")
        wanted = _numpy_result(operands)
        got = _torch_result(operands)
        if wanted is None or got is None:
            raise _Refuse(f"{what}: cannot tell the result dtype")
        if divide:
            if _category(wanted) < 2:
                wanted = "float64"
            if _category(got) < 2:
                got = "float32"
        mismatched = [o for o in operands if not o.weak and o.dtype != wanted]
        if (wanted != got or mismatched) and any(v.val.maybe_scalar for v in values):
            raise _Refuse(f"{what}: an element of an array of unknown rank may be a numpy "
                          "scalar or an array, which torch promotes differently")
        if wanted == got and not (exact_operands and mismatched):
            return codes, "bool" if comparison else wanted
        if in_place or wanted == FLOATING:
            raise _Refuse(f"{what}: numpy computes it in {wanted}, torch would in {got}")
        cast: list[_Operand] = []
        for index, (operand, value) in enumerate(zip(operands, values, strict=True)):
            if not operand.weak and operand.dtype != wanted:
                codes[index] = f"{_atom(value)}.to({self._torch()}.{wanted})"
                cast.append(replace(operand, dtype=wanted))
            else:
                cast.append(operand)
        check = _torch_result(cast)
        if divide and check is not None and _category(check) < 2:
            check = "float32"
        if check != wanted:
            raise _Refuse(f"{what}: numpy computes it in {wanted}, torch would in {got}")
        self.outcome.notes.append(
            f"line {self._unit_line()}: {what} is computed in {wanted} as numpy does "
            f"(torch alone would use {got}): operands cast with .to({self._torch()}."
            f"{wanted})")
        return codes, "bool" if comparison else wanted

    def _unit_line(self) -> int:
        if not self.unit_line:
            self.unit_line = self._line(self.unit.owner)
        return self.unit_line

    def _subscript(self, node: cst.Subscript) -> _Expr:
        base = self.expr(node.value)
        kind = base.val.kind
        if kind in (DTYPE, NEWAXIS, LITERAL, SCALAR0):
            raise _Refuse(f"`{code_of(node)}` is not translated")
        index, changed = self._indices(node, base)
        changed = changed or base.changed
        code = self._wrap(node, f"{_atom(base)}[{index}]") if changed else code_of(node)
        if kind == ARRAY:
            # Integers only: a numpy scalar if they index every dimension, else an array;
            # the rank is not tracked, so either.
            element = all(isinstance(e.slice, cst.Index)
                          and self.expr(e.slice.value).val.kind == NUM for e in node.slice)
            val = _Val(ARRAY, base.val.dtype, alias=base.val.alias,
                       maybe_scalar=element or base.val.maybe_scalar)
            return _Expr(code, val, changed=changed)
        if kind == TENS:
            return _Expr(code, _Val(TENS), changed=changed)
        if kind == OTHER and base.val.typ and base.val.typ.startswith(("List[", "Tuple[")):
            head, args = parts_of(base.val.typ)
            single = len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
            if head == "List" and args:
                val = _val_from_type(args[0]) if single else base.val
                return _Expr(code, val, changed=changed)
        return _Expr(code, self._typed(node), changed=changed)

    def _indices(self, node: cst.Subscript, base: _Expr) -> tuple[str, bool]:
        parts: list[str] = []
        changed = False
        for element in node.slice:
            piece = element.slice
            if isinstance(piece, cst.Index):
                value = self.expr(piece.value)
                self._check_index(value, base)
                parts.append(value.code)
                changed = changed or value.changed
            else:
                assert isinstance(piece, cst.Slice)
                bounds = []
                for bound in (piece.lower, piece.upper, piece.step):
                    if bound is None:
                        bounds.append("")
                        continue
                    value = self.expr(bound)
                    if value.val.kind != NUM and value.val.kind not in (UNKNOWN, OTHER):
                        raise _Refuse(f"slices with `{value.code}`")
                    if value.val.strong:
                        raise _Refuse(f"slices with the numpy scalar `{value.code}`")
                    bounds.append(value.code)
                    changed = changed or value.changed
                text = f"{bounds[0]}:{bounds[1]}" + (f":{bounds[2]}" if piece.step is not None
                                                      or isinstance(piece.second_colon,
                                                                    cst.Colon) else "")
                parts.append(text if changed else code_of(piece))
        return ", ".join(parts), changed

    def _check_index(self, value: _Expr, base: _Expr) -> None:
        kind = value.val.kind
        if kind in (NUM, NEWAXIS):
            if value.val.strong:
                raise _Refuse(f"indexes with the numpy scalar `{value.code}`")
            return
        if kind == ARRAY:
            if value.val.dtype is not None and _category(value.val.dtype) == 2:
                raise _Refuse(f"indexes with the float array `{value.code}`")
            return
        if kind == TENS and base.val.kind == TENS:
            return
        if kind in (UNKNOWN, OTHER) and base.val.kind != ARRAY:
            return
        if kind == OTHER and value.val.typ == "None":
            return
        if isinstance(value.code, str) and value.code in ("None", "..."):
            return
        raise _Refuse(f"indexes a numpy array with `{value.code}`")

    def _literal(self, node: cst.Tuple | cst.List) -> _Expr:
        items: list[_Val] = []
        codes: list[str] = []
        changed = False
        for element in node.elements:
            if isinstance(element, cst.StarredElement):
                if self._involved(element):
                    raise _Refuse("a starred numpy value")
                items.append(_UNKNOWN)
                codes.append(code_of(element.value))
                continue
            value = self.expr(element.value)
            items.append(value.val)
            codes.append(value.code)
            changed = changed or value.changed
        if changed:
            if isinstance(node, cst.Tuple):
                inner = ", ".join(codes) + ("," if len(codes) == 1 else "")
                code = self._wrap(node, inner) if node.lpar else inner
                atomic = bool(node.lpar)
            else:
                code = self._wrap(node, f"[{', '.join(codes)}]")
                atomic = True
        else:
            code, atomic = code_of(node), bool(node.lpar) or isinstance(node, cst.List)
        return _Expr(code, _Val(LITERAL, items=tuple(items)), changed=changed, atomic=atomic)

    # -- names this file can use ---------------------------------------------------------------

    def _torch(self) -> str:
        spelling = self.owner.spelling
        if spelling.torch in self.local_names or (spelling.needs_torch_import
                                                  and spelling.name_clash):
            raise _Refuse(f"`{spelling.torch}` is not the torch module here")
        self.outcome.names.append("+torch")
        return spelling.torch

    def _math(self) -> str:
        spelling = self.owner.spelling
        if spelling.math in self.local_names or (spelling.needs_math_import
                                                 and spelling.name_clash):
            raise _Refuse(f"`{spelling.math}` is not the math module here")
        self.outcome.names.append("+math")
        return spelling.math


def _holds_array(val: _Val) -> bool:
    if val.kind in (ARRAY, SCALAR0, OPAQUE):
        return True
    return val.kind == LITERAL and any(_holds_array(i) for i in val.items)


def _type_string(val: _Val) -> str | None:
    if val.kind == TENS:
        return TENSOR
    if val.kind == NUM:
        return val.dtype
    if val.kind == OTHER:
        return val.typ
    return None


def _val_from_type(kind: str | None) -> _Val:
    if kind is None:
        return _UNKNOWN
    if kind == TENSOR:
        return _Val(TENS)
    if kind in ("int", "float", "bool"):
        return _Val(NUM, kind)
    return _Val(OTHER, typ=kind)


# ---- numpy calls -------------------------------------------------------------------------------

_SIGNATURES: dict[str, tuple[str, ...]] = {
    "sum": ("a", "axis", "dtype", "out", "keepdims"), "prod": ("a", "axis", "dtype", "out",
                                                               "keepdims"),
    "mean": ("a", "axis", "dtype", "out", "keepdims"),
    "std": ("a", "axis", "dtype", "out", "ddof", "keepdims"),
    "var": ("a", "axis", "dtype", "out", "ddof", "keepdims"),
    "max": ("a", "axis", "out", "keepdims"), "amax": ("a", "axis", "out", "keepdims"),
    "min": ("a", "axis", "out", "keepdims"), "amin": ("a", "axis", "out", "keepdims"),
    "argmax": ("a", "axis", "out", "keepdims"), "argmin": ("a", "axis", "out", "keepdims"),
    "any": ("a", "axis", "out", "keepdims"), "all": ("a", "axis", "out", "keepdims"),
    "cumsum": ("a", "axis", "dtype", "out"), "cumprod": ("a", "axis", "dtype", "out"),
}
_ALIASES = {"min": "a_min", "max": "a_max", "shape": "newshape"}


class _Call:
    """Shared by numpy functions and ndarray methods: argument binding and value checks."""

    def __init__(self, t: _MethodTranslator, node: cst.Call, label: str) -> None:
        self.t = t
        self.node = node
        self.label = label

    def bind(self, params: Sequence[str],
             skip_first: bool = False) -> dict[str, cst.BaseExpression]:
        found: dict[str, cst.BaseExpression] = {}
        names = list(params[1:] if skip_first else params)
        for index, arg in enumerate(self.node.args):
            if arg.star:
                raise _Refuse(f"{self.label} with starred arguments")
            if arg.keyword is None:
                if index >= len(names):
                    raise _Refuse(f"{self.label} with {index + 1} positional arguments")
                found[names[index]] = arg.value
            else:
                key = _ALIASES.get(arg.keyword.value, arg.keyword.value)
                if key not in names:
                    raise _Refuse(f"{self.label} with {arg.keyword.value}=")
                found[key] = arg.value
        return found

    def unsupported(self, args: Mapping[str, cst.BaseExpression], *names: str) -> None:
        for name in names:
            value = args.get(name)
            if value is not None and not (isinstance(value, cst.Name) and value.value == "None"):
                raise _Refuse(f"{self.label} with {name}=")

    def array(self, node: cst.BaseExpression, *, scalar_ok: bool = True) -> _Expr:
        value = self.t.expr(node)
        if value.val.kind == ARRAY or (scalar_ok and value.val.kind == SCALAR0):
            return value
        self.refuse_operand(value)
        raise AssertionError  # unreachable

    def refuse_operand(self, value: _Expr) -> None:
        kind = value.val.kind
        if kind == TENS:
            raise _Refuse(f"{self.label} of the torch Tensor `{value.code}` (numpy converts it "
                          "and wraps the result back); not translated")
        if kind == UNKNOWN:
            raise _Refuse(f"{self.label}: cannot tell whether `{value.code}` is an array or "
                          "a number")
        raise _Refuse(f"{self.label} of `{value.code}` is not translated")

    def number(self, node: cst.BaseExpression | None, what: str,
               kinds: Iterable[str] = ("int",)) -> str:
        if node is None:
            raise _Refuse(f"{self.label} without {what}")
        value = self.t.expr(node)
        if value.val.kind == NUM and value.val.dtype in set(kinds):
            return value.code
        raise _Refuse(f"{self.label}: cannot tell that `{value.code}` is "
                      f"{' or '.join(kinds)}")

    def axis(self, node: cst.BaseExpression | None) -> str | None:
        """A dim argument: an int or a tuple of ints (as a list); None for ``axis=None``."""
        if node is None or (isinstance(node, cst.Name) and node.value == "None"):
            return None
        value = self.t.expr(node)
        if value.val.kind == NUM and value.val.dtype == "int":
            return value.code
        if value.val.kind == LITERAL and all(i.kind == NUM and i.dtype == "int"
                                             for i in value.val.items):
            elements = [e.value for e in node.elements]  # type: ignore[attr-defined]
            return "[" + ", ".join(self.t.expr(e).code for e in elements) + "]"
        raise _Refuse(f"{self.label}: cannot tell that the axis `{value.code}` is an int")

    def shape(self, node: cst.BaseExpression | None) -> str:
        if node is None:
            raise _Refuse(f"{self.label} without a shape")
        value = self.t.expr(node)
        val = value.val
        if val.kind == NUM and val.dtype == "int":
            return value.code
        if val.kind == LITERAL and val.items and all(i.kind == NUM and i.dtype == "int"
                                                     for i in val.items):
            return value.code if value.atomic else f"({value.code})"
        if val.kind == OTHER and val.typ == "List[int]":
            return value.code
        raise _Refuse(f"{self.label}: cannot tell that `{value.code}` is a shape of ints")

    def dtype(self, node: cst.BaseExpression | None, default: str | None) -> str | None:
        if node is None or (isinstance(node, cst.Name) and node.value == "None"):
            return default
        if isinstance(node, cst.Name) and node.value in _BUILTIN_DTYPES \
                and node.value not in self.t.bindings and node.value not in self.t.local_names:
            return _BUILTIN_DTYPES[node.value]
        if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
            name = node.evaluated_value
            if name in _DTYPE_NAMES:
                return _DTYPE_NAMES[name]
        else:
            value = self.t.expr(node)
            if value.val.kind == DTYPE and value.val.dtype is not None:
                return value.val.dtype
        raise _Refuse(f"{self.label}: the dtype `{code_of(node)}` is not translated")

    def torch_dtype(self, dtype: str) -> str:
        if dtype == FLOATING:
            raise _Refuse(f"{self.label}: the float width is unknown")
        return f"{self.t._torch()}.{dtype}"

    def cast(self, value: _Expr, dtype: str, why: str) -> str:
        if value.val.dtype == dtype:
            return value.code
        self.t.outcome.notes.append(
            f"line {self.t._unit_line()}: {self.label} of `{value.code}` "
            f"({value.val.dtype}) is computed in {dtype} as numpy does ({why})")
        return f"{_atom(value)}.to({self.torch_dtype(dtype)})"

    def reduce(self, fn: str, a: _Expr, args: Mapping[str, cst.BaseExpression],
               method: bool) -> _Expr:
        self.unsupported(args, "dtype", "out")
        if "where" in args or "initial" in args:
            raise _Refuse(f"{self.label} with where=/initial=")
        axis = self.axis(args.get("axis"))
        keep = args.get("keepdims")
        keep_code = self.t.expr(keep).code if keep is not None else None
        if keep_code is not None and axis is None and keep_code != "False":
            raise _Refuse(f"{self.label} with keepdims but no axis")
        dtype = a.val.dtype
        source = a.code
        if fn in ("sum", "prod", "cumsum", "cumprod"):
            if dtype in _UNSIGNED:
                raise _Refuse(f"{self.label} of an unsigned array is uint64 in numpy (int64 in "
                              "torch)")
            result = None if dtype is None else ("int64" if _category(dtype) < 2 else dtype)
            if fn in ("cumsum", "cumprod") and axis is None:
                raise _Refuse(f"{self.label} without an axis flattens the array first")
        elif fn in ("mean", "std", "var"):
            if dtype is None:
                raise _Refuse(f"{self.label} of an array whose dtype is unknown (numpy gives "
                              "float64 for integers; torch.mean refuses them)")
            result = dtype if _category(dtype) == 2 else "float64"
            source = self.cast(a, result, "the mean of integers is float64")
        elif fn in ("max", "amax", "min", "amin"):
            result = dtype
        elif fn in ("argmax", "argmin"):
            result = "int64"
        else:
            result = "bool"
        name = fn
        if fn in ("max", "amax", "min", "amin"):
            name = ("amax" if "max" in fn else "amin") if axis is not None else fn.lstrip("a")
        keywords = []
        if axis is not None:
            keywords.append(f"dim={axis}")
        if keep_code is not None and axis is not None:
            keywords.append(f"keepdim={keep_code}")
        if fn in ("std", "var"):
            ddof = args.get("ddof")
            keywords.append(f"correction={self.number(ddof, 'ddof') if ddof else '0'}")
        if method:
            receiver = source if source != a.code else _atom(a)
            code = f"{receiver}.{name}({', '.join(keywords)})"
        else:
            code = f"{self.t._torch()}.{name}({', '.join([source, *keywords])})"
        kind = ARRAY if axis is not None or fn in ("cumsum", "cumprod") else SCALAR0
        if a.val.kind == SCALAR0:
            kind = SCALAR0
        return _Expr(code, _Val(kind, result), changed=True)


class _NumpyCall(_Call):
    def __init__(self, t: _MethodTranslator, node: cst.Call, qualified: str) -> None:
        short = qualified.removeprefix("numpy.") if qualified != "numpy" else ""
        super().__init__(t, node, f"np.{short}")
        self.short = short

    def translate(self) -> _Expr:
        short = self.short
        head = short.split(".")[0]
        if head in _REFUSED_MODULES:
            raise _Refuse(f"{self.label}: {_REFUSED_MODULES[head]}")
        if not short or "." in short:
            raise _Refuse(f"{self.label} is not translated")
        if short in _REFUSED:
            raise _Refuse(f"{self.label}: {_REFUSED[short]}")
        handler = self._handler(short)
        if handler is None:
            raise _Refuse(f"{self.label} is not translated (no exact torch form here)")
        result = handler()
        self.t.outcome.names.append(self.label)
        result.code = self.t._wrap(self.node, result.code)
        result.changed = True
        return result

    def _handler(self, short: str) -> Callable[[], _Expr] | None:
        if short in _FLOAT_UFUNCS:
            return lambda: self._float_ufunc(*_FLOAT_UFUNCS[short])
        if short in _SAME_UFUNCS:
            return lambda: self._same_ufunc(_SAME_UFUNCS[short])
        if short in _FLOAT_ONLY_UFUNCS:
            return lambda: self._float_only(_FLOAT_ONLY_UFUNCS[short])
        if short in _BOOL_UFUNCS:
            return lambda: self._bool_ufunc(_BOOL_UFUNCS[short])
        if short in _OPERATOR_FUNCS:
            return lambda: self._operator(_OPERATOR_FUNCS[short])
        if short in _BINARY_FUNCS:
            return lambda: self._binary(_BINARY_FUNCS[short])
        if short in _REDUCTIONS:
            return self._reduction
        if short in _WINDOWS:
            return lambda: self._window(_WINDOWS[short])
        simple: dict[str, Callable[[], _Expr]] = {
            "clip": self._clip, "where": self._where, "zeros": self._filled,
            "ones": self._filled, "empty": self._filled, "full": self._full,
            "zeros_like": self._like, "ones_like": self._like, "empty_like": self._like,
            "full_like": self._like, "arange": self._arange, "linspace": self._linspace,
            "eye": self._eye, "concatenate": self._join, "stack": self._join,
            "hstack": self._join, "vstack": self._join, "reshape": self._reshape,
            "expand_dims": self._expand_dims, "squeeze": self._squeeze,
            "transpose": self._transpose, "flip": self._flip, "tril": self._tri,
            "triu": self._tri, "copy": self._copy, "array": self._array,
            "asarray": self._array, "float_power": self._float_power}
        return simple.get(short)

    # -- elementwise -----------------------------------------------------------------------------

    def _float_ufunc(self, torch_name: str, math_name: str | None) -> _Expr:
        x = self.t.expr(self.bind(("x",)).get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            dtype = x.val.dtype
            if dtype is None:
                raise _Refuse(f"{self.label} of `{x.code}`: its dtype is unknown (a float "
                              "function of integers is float64 in numpy, float32 in torch)")
            result = _float_result(dtype)
            code = self.cast(x, result, "numpy's float type for this input")
            return _Expr(f"{self.t._torch()}.{torch_name}({code})", _Val(x.val.kind, result))
        if x.val.kind == NUM and x.val.dtype in ("int", "float"):
            if math_name is None:
                raise _Refuse(f"{self.label} of a number: its math counterpart does not script")
            return _Expr(f"{self.t._math()}.{math_name}({x.code})", _Val(NUM, "float",
                                                                         strong=True))
        self.refuse_operand(x)
        raise AssertionError

    def _missing(self) -> cst.BaseExpression:
        raise _Refuse(f"{self.label} without its argument")

    def _same_ufunc(self, torch_name: str) -> _Expr:
        x = self.t.expr(self.bind(("x",)).get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            if x.val.dtype in (None, "bool"):
                raise _Refuse(f"{self.label} of an array whose dtype is "
                              f"{x.val.dtype or 'unknown'}")
            return _Expr(f"{self.t._torch()}.{torch_name}({x.code})", x.val)
        if x.val.kind == NUM and torch_name == "abs" and x.val.dtype in ("int", "float"):
            return _Expr(f"abs({x.code})", _Val(NUM, x.val.dtype, strong=True))
        self.refuse_operand(x)
        raise AssertionError

    def _float_only(self, torch_name: str) -> _Expr:
        args = self.bind(("x", "decimals") if torch_name == "round" else ("x",))
        x = self.t.expr(args.get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            if x.val.dtype is None or _category(x.val.dtype) != 2:
                raise _Refuse(f"{self.label} of an array whose dtype is "
                              f"{x.val.dtype or 'unknown'} (only float arrays are translated)")
            extra = ""
            if args.get("decimals") is not None:
                extra = f", decimals={self.number(args['decimals'], 'decimals')}"
            return _Expr(f"{self.t._torch()}.{torch_name}({x.code}{extra})", x.val)
        self.refuse_operand(x)
        raise AssertionError

    def _bool_ufunc(self, torch_name: str) -> _Expr:
        x = self.t.expr(self.bind(("x",)).get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            return _Expr(f"{self.t._torch()}.{torch_name}({x.code})", _Val(x.val.kind, "bool"))
        if x.val.kind == NUM and torch_name != "logical_not":
            return _Expr(f"{self.t._math()}.{torch_name}({x.code})", _Val(NUM, "bool"))
        self.refuse_operand(x)
        raise AssertionError

    def _operands(self, names: Sequence[str] = ("x1", "x2")) -> tuple[_Expr, _Expr]:
        args = self.bind(names)
        if len(args) != 2:
            raise _Refuse(f"{self.label} needs two arguments")
        first, second = (self.t.expr(args[n]) for n in names)
        return first, second

    def _operator(self, op: str) -> _Expr:
        a, b = self._operands()
        kinds = {a.val.kind, b.val.kind}
        if not kinds & {ARRAY, SCALAR0}:
            raise _Refuse(f"{self.label} of numbers is not translated")
        codes, dtype = self.t._promote([a, b], self.label, op=op, exact_operands=op == "@")
        codes = [c if c != v.code else _atom(v) for c, v in zip(codes, (a, b), strict=True)]
        kind = ARRAY if ARRAY in kinds else SCALAR0
        return _Expr(f"({codes[0]} {op} {codes[1]})", _Val(kind, dtype))

    def _binary(self, name: str) -> _Expr:
        a, b = self._operands()
        kinds = {a.val.kind, b.val.kind}
        torch = self.t._torch
        if not kinds & {ARRAY, SCALAR0}:
            if kinds == {NUM} and (name == "atan2" or (name == "pow" and "float" in (
                    a.val.dtype, b.val.dtype))):
                return _Expr(f"{self.t._math()}.{name}({a.code}, {b.code})",
                             _Val(NUM, "float", strong=True))
            raise _Refuse(f"{self.label} of numbers is not translated")
        kind = ARRAY if ARRAY in kinds else SCALAR0
        if name.startswith("logical_"):
            if not kinds <= {ARRAY, SCALAR0}:
                raise _Refuse(f"{self.label} of an array and a number")
            return _Expr(f"{torch()}.{name}({a.code}, {b.code})", _Val(kind, "bool"))
        if name in ("maximum", "minimum"):
            if kinds <= {ARRAY, SCALAR0}:
                codes, dtype = self.t._promote([a, b], self.label, exact_operands=True)
                return _Expr(f"{torch()}.{name}({codes[0]}, {codes[1]})", _Val(kind, dtype))
            array, number = (a, b) if a.val.kind in (ARRAY, SCALAR0) else (b, a)
            codes, dtype = self.t._promote([array, number], self.label)
            bound = "min" if name == "maximum" else "max"
            return _Expr(f"{torch()}.clamp({codes[0]}, {bound}={codes[1]})", _Val(kind, dtype))
        if name in ("fmod", "pow"):
            if name == "fmod" and a.val.kind not in (ARRAY, SCALAR0):
                raise _Refuse(f"{self.label} of a number by an array")
            codes, dtype = self.t._promote([a, b], self.label, op="**" if name == "pow" else "")
            return _Expr(f"{torch()}.{name}({codes[0]}, {codes[1]})", _Val(kind, dtype))
        if name == "matmul":
            if not kinds <= {ARRAY, SCALAR0}:
                raise _Refuse(f"{self.label} of an array and a number")
            codes, dtype = self.t._promote([a, b], self.label, op="@", exact_operands=True)
            return _Expr(f"{torch()}.matmul({codes[0]}, {codes[1]})", _Val(kind, dtype))
        if not kinds <= {ARRAY, SCALAR0}:
            raise _Refuse(f"{self.label} of an array and a number")
        codes, dtype = self.t._promote([a, b], self.label, exact_operands=True)
        if dtype is None or _category(dtype) != 2:
            raise _Refuse(f"{self.label} of integer arrays")
        return _Expr(f"{torch()}.{name}({codes[0]}, {codes[1]})", _Val(kind, dtype))

    def _float_power(self) -> _Expr:
        a, b = self._operands()
        if a.val.kind in (ARRAY, SCALAR0) or b.val.kind in (ARRAY, SCALAR0):
            if a.val.kind not in (ARRAY, SCALAR0):
                raise _Refuse(f"{self.label} of a number to an array power")
            kind = ARRAY if ARRAY in (a.val.kind, b.val.kind) else SCALAR0
            return _Expr(f"{self.t._torch()}.float_power({a.code}, {b.code})",
                         _Val(kind, "float64"))
        if a.val.kind == NUM and b.val.kind == NUM:
            return _Expr(f"{self.t._math()}.pow({a.code}, {b.code})", _Val(NUM, "float",
                                                                          strong=True))
        self.refuse_operand(a)
        raise AssertionError

    def _clip(self) -> _Expr:
        args = self.bind(("a", "a_min", "a_max"))
        a = self.array(args.get("a") or self._missing())
        values, names = [a], []
        for key, keyword in (("a_min", "min"), ("a_max", "max")):
            node = args.get(key)
            if node is None or (isinstance(node, cst.Name) and node.value == "None"):
                continue
            values.append(self.t.expr(node))
            names.append(keyword)
        if not names:
            raise _Refuse(f"{self.label} without bounds")
        codes, dtype = self.t._promote(values, self.label)
        bounds = ([f"{codes[1]}", f"{codes[2]}"] if names == ["min", "max"] else
                  [f"{names[0]}={codes[1]}"])
        return _Expr(f"{self.t._torch()}.clamp({', '.join([codes[0], *bounds])})",
                     _Val(a.val.kind, dtype))

    def _where(self) -> _Expr:
        args = self.bind(("condition", "x", "y"))
        if "x" not in args or "y" not in args:
            raise _Refuse(f"{self.label} with one argument returns index arrays")
        condition = self.array(args["condition"])
        if condition.val.dtype != "bool":
            raise _Refuse(f"{self.label}: the condition `{condition.code}` is not known to be "
                          "a bool array")
        x, y = self.t.expr(args["x"]), self.t.expr(args["y"])
        if x.val.kind == NUM and y.val.kind == NUM:
            if "float" in (x.val.dtype, y.val.dtype) or x.val.strong or y.val.strong:
                raise _Refuse(f"{self.label} of two float numbers is float64 in numpy, float32 "
                              "in torch.where")
            dtype: str | None = "bool" if x.val.dtype == y.val.dtype == "bool" else "int64"
            codes = [x.code, y.code]
        else:
            codes, dtype = self.t._promote([x, y], self.label)
        return _Expr(f"{self.t._torch()}.where({condition.code}, {codes[0]}, {codes[1]})",
                     _Val(ARRAY, dtype))

    def _reduction(self) -> _Expr:
        args = self.bind(_SIGNATURES[self.short])
        a = self.array(args.pop("a") if "a" in args else self._missing(), scalar_ok=False)
        return self.reduce(self.short, a, args, method=False)

    # -- construction ----------------------------------------------------------------------------

    def _filled(self) -> _Expr:
        args = self.bind(("shape", "dtype"))
        shape = self.shape(args.get("shape"))
        dtype = self.dtype(args.get("dtype"), "float64")
        assert dtype is not None
        return _Expr(f"{self.t._torch()}.{self.short}({shape}, dtype={self.torch_dtype(dtype)})",
                     _Val(ARRAY, dtype))

    def _full(self) -> _Expr:
        args = self.bind(("shape", "fill_value", "dtype"))
        shape = self.shape(args.get("shape"))
        fill = self.t.expr(args.get("fill_value") or self._missing())
        if fill.val.kind != NUM or fill.val.dtype not in ("int", "float", "bool"):
            raise _Refuse(f"{self.label}: cannot tell that `{fill.code}` is a number")
        natural = {"int": "int64", "float": "float64", "bool": "bool"}[fill.val.dtype]
        dtype = self.dtype(args.get("dtype"), natural)
        assert dtype is not None
        return _Expr(f"{self.t._torch()}.full({shape}, {fill.code}, "
                     f"dtype={self.torch_dtype(dtype)})", _Val(ARRAY, dtype))

    def _like(self) -> _Expr:
        params = ("a", "fill_value", "dtype") if self.short == "full_like" else ("a", "dtype")
        args = self.bind(params)
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        dtype = self.dtype(args.get("dtype"), a.val.dtype)
        parts = [a.code]
        if self.short == "full_like":
            fill = self.t.expr(args.get("fill_value") or self._missing())
            if fill.val.kind != NUM:
                raise _Refuse(f"{self.label}: cannot tell that `{fill.code}` is a number")
            parts.append(fill.code)
        if "dtype" in args and dtype is not None:
            parts.append(f"dtype={self.torch_dtype(dtype)}")
        return _Expr(f"{self.t._torch()}.{self.short}({', '.join(parts)})", _Val(ARRAY, dtype))

    def _arange(self) -> _Expr:
        positional = [a for a in self.node.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in self.node.args if a.keyword is not None}
        if set(keywords) - {"dtype"} or not 1 <= len(positional) <= 3 or \
                len(positional) + len(keywords) != len(self.node.args):
            raise _Refuse(f"{self.label} with these arguments")
        codes, kinds = [], set()
        for arg in positional:
            value = self.t.expr(arg.value)
            if value.val.kind != NUM or value.val.dtype not in ("int", "float"):
                raise _Refuse(f"{self.label}: cannot tell whether `{value.code}` is an int or a "
                              "float (numpy's dtype depends on it)")
            codes.append(value.code)
            kinds.add(value.val.dtype)
        natural = "float64" if "float" in kinds else "int64"
        dtype = self.dtype(keywords.get("dtype"), natural)
        assert dtype is not None
        if dtype != "int64" or "dtype" in keywords:
            codes.append(f"dtype={self.torch_dtype(dtype)}")
        return _Expr(f"{self.t._torch()}.arange({', '.join(codes)})", _Val(ARRAY, dtype))

    def _linspace(self) -> _Expr:
        args = self.bind(("start", "stop", "num", "endpoint", "retstep", "dtype", "axis"))
        for name, default in (("endpoint", "True"), ("retstep", "False"), ("axis", "0")):
            if name in args and code_of(args[name]).strip() != default:
                raise _Refuse(f"{self.label} with {name}={code_of(args[name])}")
        start = self.number(args.get("start"), "start", ("int", "float"))
        stop = self.number(args.get("stop"), "stop", ("int", "float"))
        num = self.number(args["num"], "num") if "num" in args else "50"
        dtype = self.dtype(args.get("dtype"), "float64")
        assert dtype is not None
        return _Expr(f"{self.t._torch()}.linspace({start}, {stop}, {num}, "
                     f"dtype={self.torch_dtype(dtype)})", _Val(ARRAY, dtype))

    def _eye(self) -> _Expr:
        args = self.bind(("N", "M", "k", "dtype"))
        if "k" in args and code_of(args["k"]).strip() != "0":
            raise _Refuse(f"{self.label} with k=")
        sizes = [self.number(args.get("N"), "N")]
        if args.get("M") is not None and code_of(args["M"]) != "None":
            sizes.append(self.number(args["M"], "M"))
        dtype = self.dtype(args.get("dtype"), "float64")
        assert dtype is not None
        return _Expr(f"{self.t._torch()}.eye({', '.join(sizes)}, "
                     f"dtype={self.torch_dtype(dtype)})", _Val(ARRAY, dtype))

    def _window(self, name: str) -> _Expr:
        size = self.number(self.bind(("M",)).get("M"), "its length")
        return _Expr(f"{self.t._torch()}.{name}({size}, periodic=False, "
                     f"dtype={self.torch_dtype('float64')})", _Val(ARRAY, "float64"))

    def _join(self, ) -> _Expr:
        first = "tup" if self.short in ("hstack", "vstack") else "arrays"
        params = (first,) if first == "tup" else (first, "axis", "out")
        args = self.bind(params)
        self.unsupported(args, "out")
        seq = self.t.expr(args.get(first) or self._missing())
        if seq.val.kind != LITERAL or not seq.val.items:
            raise _Refuse(f"{self.label} of `{seq.code}` (only a literal list or tuple of "
                          "arrays is translated)")
        dtypes = {i.dtype for i in seq.val.items}
        if any(i.kind != ARRAY for i in seq.val.items):
            raise _Refuse(f"{self.label} of something other than arrays")
        if len(dtypes) != 1 or None in dtypes:
            raise _Refuse(f"{self.label} of arrays whose dtypes differ or are unknown (numpy and "
                          "torch promote them differently)")
        node = args[first]
        elements = [self.t.expr(e.value).code for e in node.elements]  # type: ignore[attr-defined]
        name = {"concatenate": "cat"}.get(self.short, self.short)
        parts = [f"[{', '.join(elements)}]"]
        if "axis" in args:
            axis = self.axis(args["axis"])
            if axis is None:
                raise _Refuse(f"{self.label} with axis=None flattens first")
            parts.append(f"dim={axis}")
        return _Expr(f"{self.t._torch()}.{name}({', '.join(parts)})",
                     _Val(ARRAY, dtypes.pop()))

    def _reshape(self) -> _Expr:
        args = self.bind(("a", "newshape", "order"))
        self.unsupported(args, "order")
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        return _Expr(f"{self.t._torch()}.reshape({a.code}, {self.shape(args.get('newshape'))})",
                     replace(a.val, alias=a.val.alias))

    def _expand_dims(self) -> _Expr:
        args = self.bind(("a", "axis"))
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        axis = self.number(args.get("axis"), "axis")
        return _Expr(f"{self.t._torch()}.unsqueeze({a.code}, {axis})", a.val)

    def _squeeze(self) -> _Expr:
        args = self.bind(("a", "axis"))
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        axis = self.axis(args.get("axis"))
        parts = [a.code] + ([axis] if axis is not None else [])
        return _Expr(f"{self.t._torch()}.squeeze({', '.join(parts)})", a.val)

    def _transpose(self) -> _Expr:
        args = self.bind(("a", "axes"))
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        axes = self.axis(args.get("axes"))
        if axes is None or not axes.startswith("["):
            raise _Refuse(f"{self.label} without axes reverses every dimension; not translated")
        return _Expr(f"{self.t._torch()}.permute({a.code}, {axes})", a.val)

    def _flip(self) -> _Expr:
        args = self.bind(("m", "axis"))
        a = self.array(args.get("m") or self._missing(), scalar_ok=False)
        axis = self.axis(args.get("axis"))
        if axis is None:
            raise _Refuse(f"{self.label} without an axis")
        dims = axis if axis.startswith("[") else f"[{axis}]"
        return _Expr(f"{self.t._torch()}.flip({a.code}, {dims})", a.val)

    def _tri(self) -> _Expr:
        args = self.bind(("m", "k"))
        a = self.array(args.get("m") or self._missing(), scalar_ok=False)
        parts = [a.code]
        if args.get("k") is not None:
            parts.append(self.number(args["k"], "k"))
        return _Expr(f"{self.t._torch()}.{self.short}({', '.join(parts)})", a.val)

    def _copy(self) -> _Expr:
        a = self.array(self.bind(("a",)).get("a") or self._missing(), scalar_ok=False)
        return _Expr(f"{_atom(a)}.clone()", replace(a.val, alias=False))

    def _array(self) -> _Expr:
        first = "object" if self.short == "array" else "a"
        args = self.bind((first, "dtype"))
        value = self.t.expr(args.get(first) or self._missing())
        val = value.val
        if val.kind == ARRAY:
            dtype = self.dtype(args.get("dtype"), val.dtype)
            copy = self.short == "array"
            if "dtype" not in args:
                code = f"{_atom(value)}.clone()" if copy else value.code
            else:
                code = (f"{_atom(value)}.to({self.torch_dtype(dtype or 'float64')}"
                        f"{', copy=True' if copy else ''})")
            return _Expr(code, _Val(ARRAY, dtype))
        kinds: set[str | None] = set()
        if val.kind == LITERAL and val.items and all(i.kind == NUM for i in val.items):
            kinds = {i.dtype for i in val.items}
            node = args[first]
            elements = [self.t.expr(e.value).code for e in node.elements]  # type: ignore[attr-defined]
            data = f"[{', '.join(elements)}]"
        elif val.kind == OTHER and val.typ in ("List[int]", "List[float]", "List[bool]"):
            kinds = {val.typ[5:-1]}
            data = value.code
        else:
            raise _Refuse(f"{self.label} of `{value.code}` (only arrays and lists of numbers "
                          "are translated)")
        natural = ("float64" if "float" in kinds else "bool" if kinds == {"bool"} else "int64")
        dtype = self.dtype(args.get("dtype"), natural)
        assert dtype is not None
        return _Expr(f"{self.t._torch()}.tensor({data}, dtype={self.torch_dtype(dtype)})",
                     _Val(ARRAY, dtype))


class _ArrayMethod(_Call):
    def __init__(self, t: _MethodTranslator, node: cst.Call, receiver: _Expr) -> None:
        assert isinstance(node.func, cst.Attribute)
        self.attr = node.func.attr.value
        super().__init__(t, node, f"`.{self.attr}()` of a numpy array")
        self.receiver = receiver

    def translate(self) -> _Expr:
        attr, a = self.attr, self.receiver
        if attr in _REDUCTIONS and attr not in ("amax", "amin"):
            args = self.bind(_SIGNATURES[attr], skip_first=True)
            result = self.reduce(attr, a, args, method=True)
        elif attr == "astype":
            args = self.bind(("dtype", "order", "casting", "subok", "copy"))
            self.unsupported(args, "order", "casting", "subok", "copy")
            dtype = self.dtype(args.get("dtype") or self._missing(), None)
            assert dtype is not None
            alias = a.val.dtype is None or a.val.dtype == dtype
            result = _Expr(f"{_atom(a)}.to({self.torch_dtype(dtype)})",
                           _Val(a.val.kind, dtype, alias=alias))
        elif attr == "reshape":
            if any(arg.keyword is not None or arg.star for arg in self.node.args):
                raise _Refuse(f"{self.label} with keywords")
            if len(self.node.args) == 1:
                shape = self.shape(self.node.args[0].value)
            else:
                shape = ", ".join(self.number(arg.value, "a size") for arg in self.node.args)
            result = _Expr(f"{_atom(a)}.reshape({shape})", a.val)
        elif attr in ("flatten", "ravel"):
            self.bind(())
            result = _Expr(f"{_atom(a)}.{attr}()", replace(a.val, kind=ARRAY))
        elif attr == "squeeze":
            axis = self.axis(self.bind(("axis",)).get("axis"))
            result = _Expr(f"{_atom(a)}.squeeze({axis or ''})", a.val)
        elif attr == "transpose":
            if not self.node.args or any(arg.keyword for arg in self.node.args):
                raise _Refuse(f"{self.label} without axes reverses every dimension")
            if len(self.node.args) == 1:
                axes = self.axis(self.node.args[0].value) or ""
            else:
                axes = ", ".join(self.number(arg.value, "an axis") for arg in self.node.args)
            result = _Expr(f"{_atom(a)}.permute({axes})", a.val)
        elif attr == "copy":
            self.bind(())
            result = _Expr(f"{_atom(a)}.clone()", replace(a.val, alias=False))
        elif attr == "clip":
            args = self.bind(("a_min", "a_max"))
            values, names = [a], []
            for key, keyword in (("a_min", "min"), ("a_max", "max")):
                node = args.get(key)
                if node is not None and code_of(node) != "None":
                    values.append(self.t.expr(node))
                    names.append(keyword)
            if not names:
                raise _Refuse(f"{self.label} without bounds")
            codes, dtype = self.t._promote(values, self.label)
            bounds = [f"{n}={c}" for n, c in zip(names, codes[1:], strict=True)]
            receiver = codes[0] if codes[0] != a.code else _atom(a)
            result = _Expr(f"{receiver}.clamp({', '.join(bounds)})", _Val(a.val.kind, dtype))
        elif attr == "round":
            args = self.bind(("decimals",))
            if a.val.dtype is None or _category(a.val.dtype) != 2:
                raise _Refuse(f"{self.label} of an array whose dtype is "
                              f"{a.val.dtype or 'unknown'}")
            extra = (f"decimals={self.number(args['decimals'], 'decimals')}"
                     if "decimals" in args else "")
            result = _Expr(f"{_atom(a)}.round({extra})", a.val)
        elif attr == "fill":
            args = self.bind(("value",))
            if a.val.alias:
                raise _Refuse(f"{self.label}: the array may share memory with the one it was "
                              "cast from")
            value = self.t.expr(args.get("value") or self._missing())
            if value.val.kind != NUM:
                raise _Refuse(f"{self.label} with `{value.code}`")
            result = _Expr(f"{_atom(a)}.fill_({value.code})", _Val(OTHER, typ="None"))
        elif attr == "tolist":
            raise _Refuse("`.tolist()` of a numpy array: TorchScript needs the list's element "
                          "type spelled out (`ids: List[int] = t.tolist()`); not translated")
        elif attr == "item":
            self.bind(())
            if a.val.dtype is None:
                raise _Refuse(f"{self.label}: the dtype is unknown")
            kind = {0: "bool", 1: "int", 2: "float"}[_category(a.val.dtype)]
            result = _Expr(f"{_atom(a)}.item()", _Val(NUM, kind))
        else:
            raise _Refuse(f"{self.label} is not translated")
        result.code = self.t._wrap(self.node, result.code)
        result.changed = a.changed or result.code != code_of(self.node)
        if result.changed:
            self.t.outcome.names.append(f"ndarray.{attr}")
        return result

    def _missing(self) -> cst.BaseExpression:
        raise _Refuse(f"{self.label} without its argument")


# ---- helpers -----------------------------------------------------------------------------------

def _reads(node: cst.CSTNode) -> set[str]:
    """Names ``node`` reads: not attribute names, keyword names or plain assignment targets."""
    skip: set[int] = set()
    for attribute in find_all(node, cst.Attribute):
        skip.add(id(attribute.attr))
    for arg in find_all(node, cst.Arg):
        if arg.keyword is not None:
            skip.add(id(arg.keyword))
    for target in find_all(node, cst.AssignTarget, cst.AnnAssign):
        inner = target.target
        for name in ([inner] if isinstance(inner, cst.Name) else
                     [e.value for e in inner.elements] if isinstance(inner, cst.Tuple | cst.List)
                     else []):
            if isinstance(name, cst.Name):
                skip.add(id(name))
    return {n.value for n in find_all(node, cst.Name) if id(n) not in skip}


def _bound_names(node: cst.CSTNode) -> list[str]:
    found: list[str] = []
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, cst.AnnAssign | cst.AugAssign):
        targets = [node.target]
    else:
        return found
    for target in targets:
        if isinstance(target, cst.Name):
            found.append(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            found.extend(e.value.value for e in target.elements if isinstance(e.value, cst.Name))
    return found


_CAST_METHODS = {"long": "int64", "int": "int32", "float": "float32", "double": "float64",
                 "bool": "bool", "half": "float16", "argmax": "int64", "argmin": "int64"}


# Tensor methods and torch functions whose result is a float tensor (of the input's width).
_FLOAT_METHODS = {"softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt",
                  "mean", "std", "var", "sin", "cos", "erf", "log1p", "expm1", "reciprocal"}
_FLOAT_FUNCTIONS = {"softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "sqrt", "mean",
                    "erf", "gelu", "silu", "relu", "layer_norm", "normalize", "linear",
                    "conv1d", "conv2d", "interpolate"}


def _tensor_dtype(node: cst.BaseExpression, t: _MethodTranslator) -> str | None:
    """The dtype of the tensor whose ``.numpy()`` is taken, when the chain says it:
    an explicit cast, an argmax, or (as ``floating``) a float-only operation or layer."""
    while True:
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            node = node.value
            continue
        if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in ("cpu", "detach", "contiguous", "clone")):
            node = node.func.value
            continue
        break
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        method = node.func.attr.value
        if method in _CAST_METHODS and (not node.args or method.startswith("arg")):
            return _CAST_METHODS[method]
        if method == "to" and node.args and node.args[0].keyword is None:
            name = get_full_name_for_node(node.args[0].value) or ""
            head, _, last = name.rpartition(".")
            if head.endswith("torch") and last in _DTYPES:
                return last
    if isinstance(node, cst.Comparison):
        return "bool"
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute):
            if t.self_var and self_attr(func, t.self_var) in t.owner.layers:
                return FLOATING
            if func.attr.value in _FLOAT_METHODS:
                return FLOATING
        name = qualified_name(func, dict(t.imports)) or ""
        if name.startswith("torch.") and name.rpartition(".")[2] in _FLOAT_FUNCTIONS:
            return FLOATING
    return None


def _torch_dtype_name(node: cst.BaseExpression, imports: Mapping[str, str]) -> str | None:
    name = qualified_name(node, dict(imports)) or ""
    head, _, last = name.rpartition(".")
    return last if head == "torch" and last in _DTYPES else None


def _init_attributes(facts: ClassFacts) -> tuple[dict[str, str], set[str]]:
    """The types of what ``__init__`` stores on self (the shared facts), minus the attributes
    another method assigns too (their type may change on the way), and the layers whose call
    returns a Tensor."""
    return ({attr: kind for attr, kind in facts.attributes.items()
             if attr not in facts.assigned_outside_init}, facts.layers)
