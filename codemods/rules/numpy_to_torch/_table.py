"""The call table as data: what each numpy function, ndarray method and numpy constant becomes,
which handler of :class:`~tsfix.codemods.rules.numpy_to_torch._calls.NumpyCall` translates it,
and why the others are refused."""

from __future__ import annotations

# How numpy dtypes are spelled in model code.
DTYPE_NAMES = {
    "float16": "float16", "half": "float16", "float32": "float32", "single": "float32",
    "float64": "float64", "double": "float64", "float_": "float64", "int8": "int8",
    "int16": "int16", "int32": "int32", "int64": "int64", "intp": "int64", "int_": "int64",
    "long": "int64", "longlong": "int64", "uint8": "uint8", "bool_": "bool", "bool": "bool"}
BUILTIN_DTYPES = {"float": "float64", "int": "int64", "bool": "bool"}


# float ufuncs: numpy name -> torch name, math name (for Python numbers; None: not scripted)
FLOAT_UFUNCS: dict[str, tuple[str, str | None]] = {
    "exp": ("exp", "exp"), "log": ("log", "log"), "log2": ("log2", None),
    "log10": ("log10", "log10"), "log1p": ("log1p", "log1p"), "expm1": ("expm1", "expm1"),
    "sqrt": ("sqrt", "sqrt"), "sin": ("sin", "sin"), "cos": ("cos", "cos"),
    "tan": ("tan", "tan"), "arcsin": ("asin", "asin"), "arccos": ("acos", "acos"),
    "arctan": ("atan", "atan"), "sinh": ("sinh", "sinh"), "cosh": ("cosh", "cosh"),
    "tanh": ("tanh", "tanh"), "arcsinh": ("asinh", "asinh"), "arccosh": ("acosh", "acosh"),
    "arctanh": ("atanh", "atanh"), "exp2": ("exp2", None), "deg2rad": ("deg2rad", "radians"),
    "radians": ("deg2rad", "radians"), "rad2deg": ("rad2deg", "degrees"),
    "degrees": ("rad2deg", "degrees")}
SAME_UFUNCS = {"abs": "abs", "absolute": "abs", "negative": "neg", "square": "square",
                "sign": "sign"}
FLOAT_ONLY_UFUNCS = {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "rint": "round",
                      "round": "round", "around": "round"}
BOOL_UFUNCS = {"isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite",
                "logical_not": "logical_not"}
OPERATOR_FUNCS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/",
                   "true_divide": "/", "floor_divide": "//", "mod": "%", "remainder": "%"}
BINARY_FUNCS = {"power": "pow", "matmul": "matmul", "fmod": "fmod", "arctan2": "atan2",
                 "hypot": "hypot",
                 "logical_and": "logical_and", "logical_or": "logical_or",
                 "logical_xor": "logical_xor", "maximum": "maximum", "minimum": "minimum"}
REDUCTIONS = {"sum", "prod", "mean", "std", "var", "max", "amax", "min", "amin", "argmax",
               "argmin", "any", "all", "cumsum", "cumprod"}
WINDOWS = {"hanning": "hann_window", "hamming": "hamming_window",
            "blackman": "blackman_window", "bartlett": "bartlett_window"}
CONSTANTS = {"pi": "pi", "e": "e", "inf": "inf", "Inf": "inf", "infty": "inf", "nan": "nan",
              "NaN": "nan", "NAN": "nan"}
REFUSED = {
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
REFUSED_MODULES = {
    "random": "np.random draws from numpy's generator; torch's gives other numbers",
    "fft": "np.fft is left (complex dtypes and normalisation are not translated)",
    "linalg": "np.linalg is left (not translated)"}

# numpy function -> (the NumpyCall handler that translates it, the handler's arguments). A name
# that is neither here nor refused above is "not translated (no exact torch form here)".
HANDLERS: dict[str, tuple[str, tuple[str | None, ...]]] = {
    **{name: ("float_ufunc", names) for name, names in FLOAT_UFUNCS.items()},
    **{name: ("same_ufunc", (torch,)) for name, torch in SAME_UFUNCS.items()},
    **{name: ("float_only", (torch,)) for name, torch in FLOAT_ONLY_UFUNCS.items()},
    **{name: ("bool_ufunc", (torch,)) for name, torch in BOOL_UFUNCS.items()},
    **{name: ("operator", (op,)) for name, op in OPERATOR_FUNCS.items()},
    **{name: ("binary", (torch,)) for name, torch in BINARY_FUNCS.items()},
    **{name: ("reduction", ()) for name in sorted(REDUCTIONS)},
    **{name: ("window", (torch,)) for name, torch in WINDOWS.items()},
    **{name: ("filled", ()) for name in ("zeros", "ones", "empty")},
    **{name: ("like", ()) for name in ("zeros_like", "ones_like", "empty_like", "full_like")},
    **{name: ("join", ()) for name in ("concatenate", "stack", "hstack", "vstack")},
    **{name: ("tri", ()) for name in ("tril", "triu")},
    **{name: ("array", ()) for name in ("array", "asarray")},
    "clip": ("clip", ()), "where": ("where", ()), "full": ("full", ()),
    "arange": ("arange", ()), "linspace": ("linspace", ()), "eye": ("eye", ()),
    "reshape": ("reshape", ()), "expand_dims": ("expand_dims", ()),
    "squeeze": ("squeeze", ()), "transpose": ("transpose", ()), "flip": ("flip", ()),
    "copy": ("copy", ()), "float_power": ("float_power", ()),
}


SIGNATURES: dict[str, tuple[str, ...]] = {
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
ALIASES = {"min": "a_min", "max": "a_max", "shape": "newshape"}


CAST_METHODS = {"long": "int64", "int": "int32", "float": "float32", "double": "float64",
                 "bool": "bool", "half": "float16", "argmax": "int64", "argmin": "int64"}


# Tensor methods and torch functions whose result is a float tensor (of the input's width).
FLOAT_METHODS = {"softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt",
                  "mean", "std", "var", "sin", "cos", "erf", "log1p", "expm1", "reciprocal"}
FLOAT_FUNCTIONS = {"softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "sqrt", "mean",
                    "erf", "gelu", "silu", "relu", "layer_norm", "normalize", "linear",
                    "conv1d", "conv2d", "interpolate"}
