"""numpy functions and ndarray methods: argument binding as numpy binds them, value checks, and
one handler per kind of function (the table in ``_table`` says which)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import libcst as cst
from tsfix.codemods.facts.syntax import code_of
from tsfix.codemods.rules.numpy_to_torch._promotion import (
    FLOATING,
    UNSIGNED,
    Promotion,
    category,
    float_result,
)
from tsfix.codemods.rules.numpy_to_torch._table import (
    ALIASES,
    BUILTIN_DTYPES,
    DTYPE_NAMES,
    HANDLERS,
    REDUCTIONS,
    REFUSED,
    REFUSED_MODULES,
    SIGNATURES,
)
from tsfix.codemods.rules.numpy_to_torch._values import (
    ARRAY,
    DTYPE,
    LITERAL,
    NUM,
    OTHER,
    SCALAR0,
    TENS,
    UNKNOWN,
    Expr,
    Refuse,
    Val,
    atom,
)


class _Call:
    """Shared by numpy functions and ndarray methods: argument binding and value checks."""

    def __init__(self, t: Promotion, node: cst.Call, label: str) -> None:
        self.t = t
        self.node = node
        self.label = label

    def bind(self, params: Sequence[str],
             skip_first: bool = False) -> dict[str, cst.BaseExpression]:
        found: dict[str, cst.BaseExpression] = {}
        names = list(params[1:] if skip_first else params)
        for index, arg in enumerate(self.node.args):
            if arg.star:
                raise Refuse(f"{self.label} with starred arguments")
            if arg.keyword is None:
                if index >= len(names):
                    raise Refuse(f"{self.label} with {index + 1} positional arguments")
                found[names[index]] = arg.value
            else:
                key = ALIASES.get(arg.keyword.value, arg.keyword.value)
                if key not in names:
                    raise Refuse(f"{self.label} with {arg.keyword.value}=")
                found[key] = arg.value
        return found

    def unsupported(self, args: Mapping[str, cst.BaseExpression], *names: str) -> None:
        for name in names:
            value = args.get(name)
            if value is not None and not (isinstance(value, cst.Name) and value.value == "None"):
                raise Refuse(f"{self.label} with {name}=")

    def array(self, node: cst.BaseExpression, *, scalar_ok: bool = True) -> Expr:
        value = self.t.expr(node)
        if value.val.kind == ARRAY or (scalar_ok and value.val.kind == SCALAR0):
            return value
        self.refuse_operand(value)
        raise AssertionError  # unreachable

    def refuse_operand(self, value: Expr) -> None:
        kind = value.val.kind
        if kind == TENS:
            raise Refuse(f"{self.label} of the torch Tensor `{value.code}` (numpy converts it "
                          "and wraps the result back); not translated")
        if kind == UNKNOWN:
            raise Refuse(f"{self.label}: cannot tell whether `{value.code}` is an array or "
                          "a number")
        raise Refuse(f"{self.label} of `{value.code}` is not translated")

    def number(self, node: cst.BaseExpression | None, what: str,
               kinds: Iterable[str] = ("int",)) -> str:
        if node is None:
            raise Refuse(f"{self.label} without {what}")
        value = self.t.expr(node)
        if value.val.kind == NUM and value.val.dtype in set(kinds):
            return value.code
        raise Refuse(f"{self.label}: cannot tell that `{value.code}` is "
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
        raise Refuse(f"{self.label}: cannot tell that the axis `{value.code}` is an int")

    def shape(self, node: cst.BaseExpression | None) -> str:
        if node is None:
            raise Refuse(f"{self.label} without a shape")
        value = self.t.expr(node)
        val = value.val
        if val.kind == NUM and val.dtype == "int":
            return value.code
        if val.kind == LITERAL and val.items and all(i.kind == NUM and i.dtype == "int"
                                                     for i in val.items):
            return value.code if value.atomic else f"({value.code})"
        if val.kind == OTHER and val.typ == "List[int]":
            return value.code
        raise Refuse(f"{self.label}: cannot tell that `{value.code}` is a shape of ints")

    def dtype(self, node: cst.BaseExpression | None, default: str | None) -> str | None:
        if node is None or (isinstance(node, cst.Name) and node.value == "None"):
            return default
        if isinstance(node, cst.Name) and node.value in BUILTIN_DTYPES \
                and node.value not in self.t.bindings and node.value not in self.t.local_names:
            return BUILTIN_DTYPES[node.value]
        if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
            name = node.evaluated_value
            if name in DTYPE_NAMES:
                return DTYPE_NAMES[name]
        else:
            value = self.t.expr(node)
            if value.val.kind == DTYPE and value.val.dtype is not None:
                return value.val.dtype
        raise Refuse(f"{self.label}: the dtype `{code_of(node)}` is not translated")

    def torch_dtype(self, dtype: str) -> str:
        if dtype == FLOATING:
            raise Refuse(f"{self.label}: the float width is unknown")
        return f"{self.t.torch_name()}.{dtype}"

    def cast(self, value: Expr, dtype: str, why: str) -> str:
        if value.val.dtype == dtype:
            return value.code
        self.t.outcome.notes.append(
            f"line {self.t.current_line()}: {self.label} of `{value.code}` "
            f"({value.val.dtype}) is computed in {dtype} as numpy does ({why})")
        return f"{atom(value)}.to({self.torch_dtype(dtype)})"

    def reduce(self, fn: str, a: Expr, args: Mapping[str, cst.BaseExpression],
               method: bool) -> Expr:
        self.unsupported(args, "dtype", "out")
        if "where" in args or "initial" in args:
            raise Refuse(f"{self.label} with where=/initial=")
        axis = self.axis(args.get("axis"))
        keep = args.get("keepdims")
        keep_code = self.t.expr(keep).code if keep is not None else None
        if keep_code is not None and axis is None and keep_code != "False":
            raise Refuse(f"{self.label} with keepdims but no axis")
        dtype = a.val.dtype
        source = a.code
        if fn in ("sum", "prod", "cumsum", "cumprod"):
            if dtype in UNSIGNED:
                raise Refuse(f"{self.label} of an unsigned array is uint64 in numpy (int64 in "
                              "torch)")
            result = None if dtype is None else ("int64" if category(dtype) < 2 else dtype)
            if fn in ("cumsum", "cumprod") and axis is None:
                raise Refuse(f"{self.label} without an axis flattens the array first")
        elif fn in ("mean", "std", "var"):
            if dtype is None:
                raise Refuse(f"{self.label} of an array whose dtype is unknown (numpy gives "
                              "float64 for integers; torch.mean refuses them)")
            result = dtype if category(dtype) == 2 else "float64"
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
            receiver = source if source != a.code else atom(a)
            code = f"{receiver}.{name}({', '.join(keywords)})"
        else:
            code = f"{self.t.torch_name()}.{name}({', '.join([source, *keywords])})"
        kind = ARRAY if axis is not None or fn in ("cumsum", "cumprod") else SCALAR0
        if a.val.kind == SCALAR0:
            kind = SCALAR0
        return Expr(code, Val(kind, result), changed=True)


class NumpyCall(_Call):
    def __init__(self, t: Promotion, node: cst.Call, qualified: str) -> None:
        short = qualified.removeprefix("numpy.") if qualified != "numpy" else ""
        super().__init__(t, node, f"np.{short}")
        self.short = short

    def translate(self) -> Expr:
        short = self.short
        head = short.split(".")[0]
        if head in REFUSED_MODULES:
            raise Refuse(f"{self.label}: {REFUSED_MODULES[head]}")
        if not short or "." in short:
            raise Refuse(f"{self.label} is not translated")
        if short in REFUSED:
            raise Refuse(f"{self.label}: {REFUSED[short]}")
        entry = HANDLERS.get(short)
        if entry is None:
            raise Refuse(f"{self.label} is not translated (no exact torch form here)")
        handler, arguments = entry
        result: Expr = getattr(self, f"_{handler}")(*arguments)
        self.t.outcome.names.append(self.label)
        result.code = self.t.wrap(self.node, result.code)
        result.changed = True
        return result

    # -- elementwise -----------------------------------------------------------------------------

    def _float_ufunc(self, torch_name: str, math_name: str | None) -> Expr:
        x = self.t.expr(self.bind(("x",)).get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            dtype = x.val.dtype
            if dtype is None:
                raise Refuse(f"{self.label} of `{x.code}`: its dtype is unknown (a float "
                              "function of integers is float64 in numpy, float32 in torch)")
            result = float_result(dtype)
            code = self.cast(x, result, "numpy's float type for this input")
            return Expr(f"{self.t.torch_name()}.{torch_name}({code})", Val(x.val.kind, result))
        if x.val.kind == NUM and x.val.dtype in ("int", "float"):
            if math_name is None:
                raise Refuse(f"{self.label} of a number: its math counterpart does not script")
            return Expr(f"{self.t.math_name()}.{math_name}({x.code})",
                        Val(NUM, "float", strong=True))
        self.refuse_operand(x)
        raise AssertionError

    def _missing(self) -> cst.BaseExpression:
        raise Refuse(f"{self.label} without its argument")

    def _same_ufunc(self, torch_name: str) -> Expr:
        x = self.t.expr(self.bind(("x",)).get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            if x.val.dtype in (None, "bool"):
                raise Refuse(f"{self.label} of an array whose dtype is "
                              f"{x.val.dtype or 'unknown'}")
            return Expr(f"{self.t.torch_name()}.{torch_name}({x.code})", x.val)
        if x.val.kind == NUM and torch_name == "abs" and x.val.dtype in ("int", "float"):
            return Expr(f"abs({x.code})", Val(NUM, x.val.dtype, strong=True))
        self.refuse_operand(x)
        raise AssertionError

    def _float_only(self, torch_name: str) -> Expr:
        args = self.bind(("x", "decimals") if torch_name == "round" else ("x",))
        x = self.t.expr(args.get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            if x.val.dtype is None or category(x.val.dtype) != 2:
                raise Refuse(f"{self.label} of an array whose dtype is "
                              f"{x.val.dtype or 'unknown'} (only float arrays are translated)")
            extra = ""
            if args.get("decimals") is not None:
                extra = f", decimals={self.number(args['decimals'], 'decimals')}"
            return Expr(f"{self.t.torch_name()}.{torch_name}({x.code}{extra})", x.val)
        self.refuse_operand(x)
        raise AssertionError

    def _bool_ufunc(self, torch_name: str) -> Expr:
        x = self.t.expr(self.bind(("x",)).get("x") or self._missing())
        if x.val.kind in (ARRAY, SCALAR0):
            return Expr(f"{self.t.torch_name()}.{torch_name}({x.code})", Val(x.val.kind, "bool"))
        if x.val.kind == NUM and torch_name != "logical_not":
            return Expr(f"{self.t.math_name()}.{torch_name}({x.code})", Val(NUM, "bool"))
        self.refuse_operand(x)
        raise AssertionError

    def _operands(self, names: Sequence[str] = ("x1", "x2")) -> tuple[Expr, Expr]:
        args = self.bind(names)
        if len(args) != 2:
            raise Refuse(f"{self.label} needs two arguments")
        first, second = (self.t.expr(args[n]) for n in names)
        return first, second

    def _operator(self, op: str) -> Expr:
        a, b = self._operands()
        kinds = {a.val.kind, b.val.kind}
        if not kinds & {ARRAY, SCALAR0}:
            raise Refuse(f"{self.label} of numbers is not translated")
        codes, dtype = self.t.promote([a, b], self.label, op=op, exact_operands=op == "@")
        codes = [c if c != v.code else atom(v) for c, v in zip(codes, (a, b), strict=True)]
        kind = ARRAY if ARRAY in kinds else SCALAR0
        return Expr(f"({codes[0]} {op} {codes[1]})", Val(kind, dtype))

    def _binary(self, name: str) -> Expr:
        a, b = self._operands()
        kinds = {a.val.kind, b.val.kind}
        torch = self.t.torch_name
        if not kinds & {ARRAY, SCALAR0}:
            if kinds == {NUM} and (name == "atan2" or (name == "pow" and "float" in (
                    a.val.dtype, b.val.dtype))):
                return Expr(f"{self.t.math_name()}.{name}({a.code}, {b.code})",
                            Val(NUM, "float", strong=True))
            raise Refuse(f"{self.label} of numbers is not translated")
        kind = ARRAY if ARRAY in kinds else SCALAR0
        if name.startswith("logical_"):
            if not kinds <= {ARRAY, SCALAR0}:
                raise Refuse(f"{self.label} of an array and a number")
            return Expr(f"{torch()}.{name}({a.code}, {b.code})", Val(kind, "bool"))
        if name in ("maximum", "minimum"):
            if kinds <= {ARRAY, SCALAR0}:
                codes, dtype = self.t.promote([a, b], self.label, exact_operands=True)
                return Expr(f"{torch()}.{name}({codes[0]}, {codes[1]})", Val(kind, dtype))
            array, number = (a, b) if a.val.kind in (ARRAY, SCALAR0) else (b, a)
            codes, dtype = self.t.promote([array, number], self.label)
            bound = "min" if name == "maximum" else "max"
            return Expr(f"{torch()}.clamp({codes[0]}, {bound}={codes[1]})", Val(kind, dtype))
        if name in ("fmod", "pow"):
            if name == "fmod" and a.val.kind not in (ARRAY, SCALAR0):
                raise Refuse(f"{self.label} of a number by an array")
            codes, dtype = self.t.promote([a, b], self.label, op="**" if name == "pow" else "")
            return Expr(f"{torch()}.{name}({codes[0]}, {codes[1]})", Val(kind, dtype))
        if name == "matmul":
            if not kinds <= {ARRAY, SCALAR0}:
                raise Refuse(f"{self.label} of an array and a number")
            codes, dtype = self.t.promote([a, b], self.label, op="@", exact_operands=True)
            return Expr(f"{torch()}.matmul({codes[0]}, {codes[1]})", Val(kind, dtype))
        if not kinds <= {ARRAY, SCALAR0}:
            raise Refuse(f"{self.label} of an array and a number")
        codes, dtype = self.t.promote([a, b], self.label, exact_operands=True)
        if dtype is None or category(dtype) != 2:
            raise Refuse(f"{self.label} of integer arrays")
        return Expr(f"{torch()}.{name}({codes[0]}, {codes[1]})", Val(kind, dtype))

    def _float_power(self) -> Expr:
        a, b = self._operands()
        if a.val.kind in (ARRAY, SCALAR0) or b.val.kind in (ARRAY, SCALAR0):
            if a.val.kind not in (ARRAY, SCALAR0):
                raise Refuse(f"{self.label} of a number to an array power")
            kind = ARRAY if ARRAY in (a.val.kind, b.val.kind) else SCALAR0
            return Expr(f"{self.t.torch_name()}.float_power({a.code}, {b.code})",
                        Val(kind, "float64"))
        if a.val.kind == NUM and b.val.kind == NUM:
            return Expr(f"{self.t.math_name()}.pow({a.code}, {b.code})",
                        Val(NUM, "float", strong=True))
        self.refuse_operand(a)
        raise AssertionError

    def _clip(self) -> Expr:
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
            raise Refuse(f"{self.label} without bounds")
        codes, dtype = self.t.promote(values, self.label)
        bounds = ([f"{codes[1]}", f"{codes[2]}"] if names == ["min", "max"] else
                  [f"{names[0]}={codes[1]}"])
        return Expr(f"{self.t.torch_name()}.clamp({', '.join([codes[0], *bounds])})",
                    Val(a.val.kind, dtype))

    def _where(self) -> Expr:
        args = self.bind(("condition", "x", "y"))
        if "x" not in args or "y" not in args:
            raise Refuse(f"{self.label} with one argument returns index arrays")
        condition = self.array(args["condition"])
        if condition.val.dtype != "bool":
            raise Refuse(f"{self.label}: the condition `{condition.code}` is not known to be "
                          "a bool array")
        x, y = self.t.expr(args["x"]), self.t.expr(args["y"])
        if x.val.kind == NUM and y.val.kind == NUM:
            if "float" in (x.val.dtype, y.val.dtype) or x.val.strong or y.val.strong:
                raise Refuse(f"{self.label} of two float numbers is float64 in numpy, float32 "
                              "in torch.where")
            dtype: str | None = "bool" if x.val.dtype == y.val.dtype == "bool" else "int64"
            codes = [x.code, y.code]
        else:
            codes, dtype = self.t.promote([x, y], self.label)
        return Expr(f"{self.t.torch_name()}.where({condition.code}, {codes[0]}, {codes[1]})",
                    Val(ARRAY, dtype))

    def _reduction(self) -> Expr:
        args = self.bind(SIGNATURES[self.short])
        a = self.array(args.pop("a") if "a" in args else self._missing(), scalar_ok=False)
        return self.reduce(self.short, a, args, method=False)

    # -- construction ----------------------------------------------------------------------------

    def _filled(self) -> Expr:
        args = self.bind(("shape", "dtype"))
        shape = self.shape(args.get("shape"))
        dtype = self.dtype(args.get("dtype"), "float64")
        assert dtype is not None
        return Expr(f"{self.t.torch_name()}.{self.short}({shape}, dtype={self.torch_dtype(dtype)})",
                    Val(ARRAY, dtype))

    def _full(self) -> Expr:
        args = self.bind(("shape", "fill_value", "dtype"))
        shape = self.shape(args.get("shape"))
        fill = self.t.expr(args.get("fill_value") or self._missing())
        if fill.val.kind != NUM or fill.val.dtype not in ("int", "float", "bool"):
            raise Refuse(f"{self.label}: cannot tell that `{fill.code}` is a number")
        natural = {"int": "int64", "float": "float64", "bool": "bool"}[fill.val.dtype]
        dtype = self.dtype(args.get("dtype"), natural)
        assert dtype is not None
        return Expr(f"{self.t.torch_name()}.full({shape}, {fill.code}, "
                     f"dtype={self.torch_dtype(dtype)})", Val(ARRAY, dtype))

    def _like(self) -> Expr:
        params = ("a", "fill_value", "dtype") if self.short == "full_like" else ("a", "dtype")
        args = self.bind(params)
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        dtype = self.dtype(args.get("dtype"), a.val.dtype)
        parts = [a.code]
        if self.short == "full_like":
            fill = self.t.expr(args.get("fill_value") or self._missing())
            if fill.val.kind != NUM:
                raise Refuse(f"{self.label}: cannot tell that `{fill.code}` is a number")
            parts.append(fill.code)
        if "dtype" in args and dtype is not None:
            parts.append(f"dtype={self.torch_dtype(dtype)}")
        return Expr(f"{self.t.torch_name()}.{self.short}({', '.join(parts)})", Val(ARRAY, dtype))

    def _arange(self) -> Expr:
        positional = [a for a in self.node.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in self.node.args if a.keyword is not None}
        if set(keywords) - {"dtype"} or not 1 <= len(positional) <= 3 or \
                len(positional) + len(keywords) != len(self.node.args):
            raise Refuse(f"{self.label} with these arguments")
        codes, kinds = [], set()
        for arg in positional:
            value = self.t.expr(arg.value)
            if value.val.kind != NUM or value.val.dtype not in ("int", "float"):
                raise Refuse(f"{self.label}: cannot tell whether `{value.code}` is an int or a "
                              "float (numpy's dtype depends on it)")
            codes.append(value.code)
            kinds.add(value.val.dtype)
        natural = "float64" if "float" in kinds else "int64"
        dtype = self.dtype(keywords.get("dtype"), natural)
        assert dtype is not None
        if dtype != "int64" or "dtype" in keywords:
            codes.append(f"dtype={self.torch_dtype(dtype)}")
        return Expr(f"{self.t.torch_name()}.arange({', '.join(codes)})", Val(ARRAY, dtype))

    def _linspace(self) -> Expr:
        args = self.bind(("start", "stop", "num", "endpoint", "retstep", "dtype", "axis"))
        for name, default in (("endpoint", "True"), ("retstep", "False"), ("axis", "0")):
            if name in args and code_of(args[name]).strip() != default:
                raise Refuse(f"{self.label} with {name}={code_of(args[name])}")
        start = self.number(args.get("start"), "start", ("int", "float"))
        stop = self.number(args.get("stop"), "stop", ("int", "float"))
        num = self.number(args["num"], "num") if "num" in args else "50"
        dtype = self.dtype(args.get("dtype"), "float64")
        assert dtype is not None
        return Expr(f"{self.t.torch_name()}.linspace({start}, {stop}, {num}, "
                     f"dtype={self.torch_dtype(dtype)})", Val(ARRAY, dtype))

    def _eye(self) -> Expr:
        args = self.bind(("N", "M", "k", "dtype"))
        if "k" in args and code_of(args["k"]).strip() != "0":
            raise Refuse(f"{self.label} with k=")
        sizes = [self.number(args.get("N"), "N")]
        if args.get("M") is not None and code_of(args["M"]) != "None":
            sizes.append(self.number(args["M"], "M"))
        dtype = self.dtype(args.get("dtype"), "float64")
        assert dtype is not None
        return Expr(f"{self.t.torch_name()}.eye({', '.join(sizes)}, "
                     f"dtype={self.torch_dtype(dtype)})", Val(ARRAY, dtype))

    def _window(self, name: str) -> Expr:
        size = self.number(self.bind(("M",)).get("M"), "its length")
        return Expr(f"{self.t.torch_name()}.{name}({size}, periodic=False, "
                     f"dtype={self.torch_dtype('float64')})", Val(ARRAY, "float64"))

    def _join(self, ) -> Expr:
        first = "tup" if self.short in ("hstack", "vstack") else "arrays"
        params = (first,) if first == "tup" else (first, "axis", "out")
        args = self.bind(params)
        self.unsupported(args, "out")
        seq = self.t.expr(args.get(first) or self._missing())
        if seq.val.kind != LITERAL or not seq.val.items:
            raise Refuse(f"{self.label} of `{seq.code}` (only a literal list or tuple of "
                          "arrays is translated)")
        dtypes = {i.dtype for i in seq.val.items}
        if any(i.kind != ARRAY for i in seq.val.items):
            raise Refuse(f"{self.label} of something other than arrays")
        if len(dtypes) != 1 or None in dtypes:
            raise Refuse(f"{self.label} of arrays whose dtypes differ or are unknown (numpy and "
                          "torch promote them differently)")
        node = args[first]
        elements = [self.t.expr(e.value).code for e in node.elements]  # type: ignore[attr-defined]
        name = {"concatenate": "cat"}.get(self.short, self.short)
        parts = [f"[{', '.join(elements)}]"]
        if "axis" in args:
            axis = self.axis(args["axis"])
            if axis is None:
                raise Refuse(f"{self.label} with axis=None flattens first")
            parts.append(f"dim={axis}")
        return Expr(f"{self.t.torch_name()}.{name}({', '.join(parts)})",
                    Val(ARRAY, dtypes.pop()))

    def _reshape(self) -> Expr:
        args = self.bind(("a", "newshape", "order"))
        self.unsupported(args, "order")
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        return Expr(f"{self.t.torch_name()}.reshape({a.code}, {self.shape(args.get('newshape'))})",
                    replace(a.val, alias=a.val.alias))

    def _expand_dims(self) -> Expr:
        args = self.bind(("a", "axis"))
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        axis = self.number(args.get("axis"), "axis")
        return Expr(f"{self.t.torch_name()}.unsqueeze({a.code}, {axis})", a.val)

    def _squeeze(self) -> Expr:
        args = self.bind(("a", "axis"))
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        axis = self.axis(args.get("axis"))
        parts = [a.code] + ([axis] if axis is not None else [])
        return Expr(f"{self.t.torch_name()}.squeeze({', '.join(parts)})", a.val)

    def _transpose(self) -> Expr:
        args = self.bind(("a", "axes"))
        a = self.array(args.get("a") or self._missing(), scalar_ok=False)
        axes = self.axis(args.get("axes"))
        if axes is None or not axes.startswith("["):
            raise Refuse(f"{self.label} without axes reverses every dimension; not translated")
        return Expr(f"{self.t.torch_name()}.permute({a.code}, {axes})", a.val)

    def _flip(self) -> Expr:
        args = self.bind(("m", "axis"))
        a = self.array(args.get("m") or self._missing(), scalar_ok=False)
        axis = self.axis(args.get("axis"))
        if axis is None:
            raise Refuse(f"{self.label} without an axis")
        dims = axis if axis.startswith("[") else f"[{axis}]"
        return Expr(f"{self.t.torch_name()}.flip({a.code}, {dims})", a.val)

    def _tri(self) -> Expr:
        args = self.bind(("m", "k"))
        a = self.array(args.get("m") or self._missing(), scalar_ok=False)
        parts = [a.code]
        if args.get("k") is not None:
            parts.append(self.number(args["k"], "k"))
        return Expr(f"{self.t.torch_name()}.{self.short}({', '.join(parts)})", a.val)

    def _copy(self) -> Expr:
        a = self.array(self.bind(("a",)).get("a") or self._missing(), scalar_ok=False)
        return Expr(f"{atom(a)}.clone()", replace(a.val, alias=False))

    def _array(self) -> Expr:
        first = "object" if self.short == "array" else "a"
        args = self.bind((first, "dtype"))
        value = self.t.expr(args.get(first) or self._missing())
        val = value.val
        if val.kind == ARRAY:
            dtype = self.dtype(args.get("dtype"), val.dtype)
            copy = self.short == "array"
            if "dtype" not in args:
                code = f"{atom(value)}.clone()" if copy else value.code
            else:
                code = (f"{atom(value)}.to({self.torch_dtype(dtype or 'float64')}"
                        f"{', copy=True' if copy else ''})")
            return Expr(code, Val(ARRAY, dtype))
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
            raise Refuse(f"{self.label} of `{value.code}` (only arrays and lists of numbers "
                          "are translated)")
        natural = ("float64" if "float" in kinds else "bool" if kinds == {"bool"} else "int64")
        dtype = self.dtype(args.get("dtype"), natural)
        assert dtype is not None
        return Expr(f"{self.t.torch_name()}.tensor({data}, dtype={self.torch_dtype(dtype)})",
                    Val(ARRAY, dtype))


class ArrayMethod(_Call):
    def __init__(self, t: Promotion, node: cst.Call, receiver: Expr) -> None:
        assert isinstance(node.func, cst.Attribute)
        self.attr = node.func.attr.value
        super().__init__(t, node, f"`.{self.attr}()` of a numpy array")
        self.receiver = receiver

    def translate(self) -> Expr:
        attr, a = self.attr, self.receiver
        if attr in REDUCTIONS and attr not in ("amax", "amin"):
            args = self.bind(SIGNATURES[attr], skip_first=True)
            result = self.reduce(attr, a, args, method=True)
        elif attr == "astype":
            args = self.bind(("dtype", "order", "casting", "subok", "copy"))
            self.unsupported(args, "order", "casting", "subok", "copy")
            dtype = self.dtype(args.get("dtype") or self._missing(), None)
            assert dtype is not None
            alias = a.val.dtype is None or a.val.dtype == dtype
            result = Expr(f"{atom(a)}.to({self.torch_dtype(dtype)})",
                          Val(a.val.kind, dtype, alias=alias))
        elif attr == "reshape":
            if any(arg.keyword is not None or arg.star for arg in self.node.args):
                raise Refuse(f"{self.label} with keywords")
            if len(self.node.args) == 1:
                shape = self.shape(self.node.args[0].value)
            else:
                shape = ", ".join(self.number(arg.value, "a size") for arg in self.node.args)
            result = Expr(f"{atom(a)}.reshape({shape})", a.val)
        elif attr in ("flatten", "ravel"):
            self.bind(())
            result = Expr(f"{atom(a)}.{attr}()", replace(a.val, kind=ARRAY))
        elif attr == "squeeze":
            axis = self.axis(self.bind(("axis",)).get("axis"))
            result = Expr(f"{atom(a)}.squeeze({axis or ''})", a.val)
        elif attr == "transpose":
            if not self.node.args or any(arg.keyword for arg in self.node.args):
                raise Refuse(f"{self.label} without axes reverses every dimension")
            if len(self.node.args) == 1:
                axes = self.axis(self.node.args[0].value) or ""
            else:
                axes = ", ".join(self.number(arg.value, "an axis") for arg in self.node.args)
            result = Expr(f"{atom(a)}.permute({axes})", a.val)
        elif attr == "copy":
            self.bind(())
            result = Expr(f"{atom(a)}.clone()", replace(a.val, alias=False))
        elif attr == "clip":
            args = self.bind(("a_min", "a_max"))
            values, names = [a], []
            for key, keyword in (("a_min", "min"), ("a_max", "max")):
                node = args.get(key)
                if node is not None and code_of(node) != "None":
                    values.append(self.t.expr(node))
                    names.append(keyword)
            if not names:
                raise Refuse(f"{self.label} without bounds")
            codes, dtype = self.t.promote(values, self.label)
            bounds = [f"{n}={c}" for n, c in zip(names, codes[1:], strict=True)]
            receiver = codes[0] if codes[0] != a.code else atom(a)
            result = Expr(f"{receiver}.clamp({', '.join(bounds)})", Val(a.val.kind, dtype))
        elif attr == "round":
            args = self.bind(("decimals",))
            if a.val.dtype is None or category(a.val.dtype) != 2:
                raise Refuse(f"{self.label} of an array whose dtype is "
                              f"{a.val.dtype or 'unknown'}")
            extra = (f"decimals={self.number(args['decimals'], 'decimals')}"
                     if "decimals" in args else "")
            result = Expr(f"{atom(a)}.round({extra})", a.val)
        elif attr == "fill":
            args = self.bind(("value",))
            if a.val.alias:
                raise Refuse(f"{self.label}: the array may share memory with the one it was "
                              "cast from")
            value = self.t.expr(args.get("value") or self._missing())
            if value.val.kind != NUM:
                raise Refuse(f"{self.label} with `{value.code}`")
            result = Expr(f"{atom(a)}.fill_({value.code})", Val(OTHER, typ="None"))
        elif attr == "tolist":
            raise Refuse("`.tolist()` of a numpy array: TorchScript needs the list's element "
                          "type spelled out (`ids: List[int] = t.tolist()`); not translated")
        elif attr == "item":
            self.bind(())
            if a.val.dtype is None:
                raise Refuse(f"{self.label}: the dtype is unknown")
            kind = {0: "bool", 1: "int", 2: "float"}[category(a.val.dtype)]
            result = Expr(f"{atom(a)}.item()", Val(NUM, kind))
        else:
            raise Refuse(f"{self.label} is not translated")
        result.code = self.t.wrap(self.node, result.code)
        result.changed = a.changed or result.code != code_of(self.node)
        if result.changed:
            self.t.outcome.names.append(f"ndarray.{attr}")
        return result

    def _missing(self) -> cst.BaseExpression:
        raise Refuse(f"{self.label} without its argument")
