"""Expression translation: each numpy expression becomes the torch or math code that computes
the same value, or the unit is refused with the reason."""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.numpy_usage import dotted_name
from tsfix.codemods.facts.syntax import code_of, find_all, qualified_name, self_attr
from tsfix.codemods.facts.value_types import parts_of
from tsfix.codemods.rules.numpy_to_torch._calls import ArrayMethod, NumpyCall
from tsfix.codemods.rules.numpy_to_torch._promotion import DTYPES, FLOATING, Promotion, category
from tsfix.codemods.rules.numpy_to_torch._table import (
    CAST_METHODS,
    CONSTANTS,
    DTYPE_NAMES,
    FLOAT_FUNCTIONS,
    FLOAT_METHODS,
)
from tsfix.codemods.rules.numpy_to_torch._values import (
    ARRAY,
    DTYPE,
    LITERAL,
    NEWAXIS,
    NUM,
    OPAQUE,
    OTHER,
    SCALAR0,
    TENS,
    UNKNOWN,
    UNKNOWN_VAL,
    Expr,
    Refuse,
    Val,
    atom,
    holds_array,
    is_atomic,
    val_from_type,
)


class Expressions(Promotion):
    """Translating one expression (``expr``) into an :class:`Expr`: its new code and what
    it holds."""

    def _involved(self, node: cst.CSTNode) -> bool:
        for found in find_all(node, cst.Name, cst.Attribute, cst.Call):
            if id(found) in self.use_ids:
                return True
            if isinstance(found, cst.Name) and found.value in self.flag_names:
                return True
        return False

    def _typed(self, node: cst.BaseExpression) -> Val:
        return val_from_type(self.typer.type_of(node))

    def expr(self, node: cst.BaseExpression) -> Expr:
        if not self._involved(node):
            if isinstance(node, cst.Name) and node.value in self.env:
                return Expr(node.value, self.env[node.value])
            if isinstance(node, cst.Tuple | cst.List):
                return self._literal(node)
            return Expr(code_of(node), self._typed(node), atomic=is_atomic(node))
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
        raise Refuse(f"numpy inside a {kind} expression is not translated")

    def _name(self, node: cst.Name) -> Expr:
        name = node.value
        if name in self.bindings and name not in self.env:
            return self._numpy_value(self.bindings[name], node)
        value = self.env.get(name)
        if value is None:
            value = val_from_type(self.base_env.get(name))
        if value.kind == OPAQUE:
            where = f" (line {value.line})" if value.line else ""
            raise Refuse(f"`{name}` is computed by numpy code left untranslated{where}")
        return Expr(self.wrap(node, name), value)

    def _numpy_value(self, qualified: str, node: cst.BaseExpression) -> Expr:
        short = qualified.removeprefix("numpy.")
        if short in CONSTANTS:
            self.outcome.names.append(f"np.{short}")
            return Expr(self.wrap(node, f"{self.math_name()}.{CONSTANTS[short]}"),
                        Val(NUM, "float"), changed=True)
        if short == "newaxis":
            self.outcome.names.append("np.newaxis")
            return Expr("None", Val(NEWAXIS), changed=True)
        if short in DTYPE_NAMES:
            return Expr(code_of(node), Val(DTYPE, DTYPE_NAMES[short]))
        raise Refuse(f"np.{short} used as a value")

    def _attribute(self, node: cst.Attribute) -> Expr:
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
                return Expr(self.wrap(node, f"{atom(base)}.shape"),
                            Val(OTHER, typ="List[int]"), changed=base.changed)
            if attr == "ndim":
                self.outcome.names.append(".ndim")
                return Expr(self.wrap(node, f"{atom(base)}.dim()"), Val(NUM, "int"),
                            changed=True)
            if attr == "size":
                self.outcome.names.append(".size")
                return Expr(self.wrap(node, f"{atom(base)}.numel()"), Val(NUM, "int"),
                            changed=True)
            raise Refuse(f"`.{attr}` of a numpy array is not translated")
        code = self.wrap(node, f"{atom(base)}.{attr}") if base.changed else code_of(node)
        if kind == TENS:
            if attr == "data":
                return Expr(code, Val(TENS, base.val.dtype), changed=base.changed)
            if attr == "shape":
                return Expr(code, Val(OTHER, typ="List[int]"), changed=base.changed)
        if kind in (DTYPE, NEWAXIS, LITERAL):
            raise Refuse(f"`{code_of(node)}` is not translated")
        return Expr(code, self._typed(node), changed=base.changed)

    def _numpy_qualified(self, func: cst.BaseExpression) -> str | None:
        dotted = dotted_name(func)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head not in self.bindings or head in self.env:
            return None
        return f"{self.bindings[head]}.{rest}" if rest else self.bindings[head]

    def _call(self, node: cst.Call) -> Expr:
        func = node.func
        qualified = self._numpy_qualified(func)
        if qualified is not None:
            return NumpyCall(self, node, qualified).translate()
        if (isinstance(func, cst.Attribute) and func.attr.value == "numpy"
                and not node.args):
            source = self.expr(func.value)
            if source.val.kind not in (TENS, UNKNOWN):
                raise Refuse(f"`.numpy()` of `{source.code}`, which is not a Tensor")
            self.outcome.names.append(".numpy()")
            dtype = _tensor_dtype(func.value, self) or source.val.dtype
            return Expr(self.wrap(node, source.code), Val(ARRAY, dtype), changed=True,
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
                return ArrayMethod(self, node, receiver).translate()
            if receiver.val.kind == SCALAR0:
                if func.attr.value == "item" and not node.args:
                    if receiver.val.dtype is None:
                        raise Refuse(f"`{code_of(node)}`: the dtype of the numpy scalar is "
                                      "unknown")
                    kind = {0: "bool", 1: "int", 2: "float"}[category(receiver.val.dtype)]
                    return Expr(self.wrap(node, f"{atom(receiver)}.item()"),
                                Val(NUM, kind), changed=receiver.changed)
                raise Refuse(f"`.{func.attr.value}()` of a numpy scalar is not translated")
            if receiver.val.kind in (DTYPE, NEWAXIS, LITERAL):
                raise Refuse(f"`{code_of(node)}` is not translated")
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
                raise Refuse(f"passes `{code_of(arg.value)}` to {callee}()")
            elif value.val.kind == LITERAL and any(holds_array(i) for i in value.val.items):
                raise Refuse(f"passes numpy arrays to {callee}()")
            changed = changed or value.changed
            prefix = ("*" * len(arg.star)) if arg.star else (
                f"{arg.keyword.value}=" if arg.keyword is not None else "")
            parts.append(prefix + value.code)
        if not changed:
            result = Expr(code_of(node), self._typed(node))
        else:
            func_code = (f"{atom(receiver)}.{func.attr.value}"
                         if receiver is not None and receiver.changed
                         and isinstance(func, cst.Attribute) else code_of(func))
            result = Expr(self.wrap(node, f"{func_code}({', '.join(parts)})"),
                          self._typed(node), changed=True)
        if callee == "len" and kinds[:1] == [ARRAY]:
            result.val = Val(NUM, "int")
        elif callee in ("int", "float", "bool") and kinds[:1] in ([ARRAY], [SCALAR0]):
            result.val = Val(NUM, callee)
        return result

    def _array_argument(self, callee: str, qualified: str, index: int, arg: cst.Arg,
                        value: Expr) -> None:
        """Calls that treat a numpy array as a Tensor would be treated."""
        if callee == "len" and value.val.kind == ARRAY:
            return
        if callee in ("int", "float", "bool"):
            return
        if qualified.endswith("nn.utils.rnn.pack_padded_sequence") and (
                (arg.keyword is None and index == 1)
                or (arg.keyword is not None and arg.keyword.value == "lengths")):
            return  # it calls torch.as_tensor(lengths, dtype=torch.int64) itself
        raise Refuse(f"passes the numpy value `{value.code}` to {callee}()")

    def _to_tensor(self, node: cst.Call, qualified: str) -> Expr | None:
        """``torch.from_numpy(a)`` / ``torch.as_tensor(a)`` / ``torch.tensor(a)`` of a
        translated array."""
        positional = [a for a in node.args if a.keyword is None and not a.star]
        if len(positional) != 1 or positional[0] is not node.args[0]:
            return None
        value = self.expr(positional[0].value)
        if value.val.kind not in (ARRAY, SCALAR0):
            if qualified == "torch.from_numpy":
                raise Refuse(f"torch.from_numpy of `{value.code}`, which is not a translated "
                              "array")
            return None
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        if qualified == "torch.from_numpy" and keywords:
            raise Refuse("torch.from_numpy with keywords")
        if set(keywords) - {"dtype", "device"}:
            raise Refuse(f"{qualified} with {', '.join(sorted(keywords))}")
        self.outcome.names.append(qualified)
        code = atom(value)
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
        return Expr(self.wrap(node, code), Val(TENS, dtype), changed=True)

    def _binary(self, node: cst.BinaryOperation) -> Expr:
        left, right = self.expr(node.left), self.expr(node.right)
        op = code_of(node.operator).strip()
        kinds = {left.val.kind, right.val.kind}
        changed = left.changed or right.changed
        if kinds & {ARRAY, SCALAR0}:
            if left.val.kind == TENS and op in ("+", "-", "*", "/", "//", "%", "**"):
                # Tensor <op> ndarray: torch converts the array as it is; same result.
                code = f"{left.code}{code_of(node.operator)}{right.code}"
                return Expr(self.wrap(node, code), Val(TENS), changed=changed,
                            atomic=bool(node.lpar))
            codes, dtype = self.promote([left, right], f"`{code_of(node)}`", op=op)
            kind = ARRAY if ARRAY in kinds else SCALAR0
            changed = changed or codes != [left.code, right.code]
            code = f"{codes[0]}{code_of(node.operator)}{codes[1]}"
            return Expr(self.wrap(node, code), Val(kind, dtype), changed=changed,
                        atomic=bool(node.lpar))
        for side in (left, right):
            if side.val.kind in (DTYPE, NEWAXIS, LITERAL, OPAQUE):
                raise Refuse(f"`{code_of(node)}` is not translated")
        code = (self.wrap(node, f"{left.code}{code_of(node.operator)}{right.code}") if changed
                else code_of(node))
        if left.val.kind == NUM and right.val.kind == NUM:
            dtype = "float" if "float" in (left.val.dtype, right.val.dtype) or op == "/" else \
                "int"
            val = Val(NUM, dtype, strong=left.val.strong or right.val.strong)
        elif TENS in kinds:
            val = Val(TENS)
        else:
            val = self._typed(node)
        return Expr(code, val, changed=changed, atomic=bool(node.lpar))

    def _unary(self, node: cst.UnaryOperation) -> Expr:
        inner = self.expr(node.expression)
        op = code_of(node.operator)
        code = self.wrap(node, f"{op}{inner.code}") if inner.changed else code_of(node)
        kind = inner.val.kind
        if kind in (ARRAY, SCALAR0):
            if isinstance(node.operator, cst.Not):
                raise Refuse("`not` of a numpy array")
            if isinstance(node.operator, cst.Minus) and inner.val.dtype in (None, "bool"):
                raise Refuse(f"`{code_of(node)}`: negating an array whose dtype is "
                              f"{inner.val.dtype or 'unknown'}")
            return Expr(code, inner.val, changed=inner.changed, atomic=bool(node.lpar))
        if kind in (DTYPE, NEWAXIS, LITERAL):
            raise Refuse(f"`{code_of(node)}` is not translated")
        val = inner.val if kind in (NUM, TENS) else self._typed(node)
        if isinstance(node.operator, cst.Not):
            val = Val(NUM, "bool")
        return Expr(code, val, changed=inner.changed, atomic=bool(node.lpar))

    def _comparison(self, node: cst.Comparison) -> Expr:
        left = self.expr(node.left)
        rights = [self.expr(c.comparator) for c in node.comparisons]
        values = [left, *rights]
        changed = any(v.changed for v in values)
        kinds = {v.val.kind for v in values}
        if kinds & {ARRAY, SCALAR0}:
            if len(node.comparisons) != 1 or isinstance(
                    node.comparisons[0].operator, cst.Is | cst.IsNot | cst.In | cst.NotIn):
                raise Refuse(f"`{code_of(node)}`: chained or identity comparison of arrays")
            codes, _ = self.promote(values, f"`{code_of(node)}`", comparison=True)
            changed = changed or codes != [left.code, rights[0].code]
            code = f"{codes[0]}{code_of(node.comparisons[0].operator)}{codes[1]}"
            kind = ARRAY if ARRAY in kinds else SCALAR0
            return Expr(self.wrap(node, code), Val(kind, "bool"), changed=changed,
                        atomic=bool(node.lpar))
        for value in values:
            if value.val.kind in (DTYPE, NEWAXIS, LITERAL):
                raise Refuse(f"`{code_of(node)}` is not translated")
        if not changed:
            return Expr(code_of(node), self._typed(node), atomic=bool(node.lpar))
        code = left.code + "".join(f"{code_of(c.operator)}{r.code}"
                                   for c, r in zip(node.comparisons, rights, strict=True))
        val = Val(TENS) if TENS in kinds else Val(NUM, "bool")
        return Expr(self.wrap(node, code), val, changed=True, atomic=bool(node.lpar))

    def _subscript(self, node: cst.Subscript) -> Expr:
        base = self.expr(node.value)
        kind = base.val.kind
        if kind in (DTYPE, NEWAXIS, LITERAL, SCALAR0):
            raise Refuse(f"`{code_of(node)}` is not translated")
        index, changed = self._indices(node, base)
        changed = changed or base.changed
        code = self.wrap(node, f"{atom(base)}[{index}]") if changed else code_of(node)
        if kind == ARRAY:
            # Integers only: a numpy scalar if they index every dimension, else an array;
            # the rank is not tracked, so either.
            element = all(isinstance(e.slice, cst.Index)
                          and self.expr(e.slice.value).val.kind == NUM for e in node.slice)
            val = Val(ARRAY, base.val.dtype, alias=base.val.alias,
                      maybe_scalar=element or base.val.maybe_scalar)
            return Expr(code, val, changed=changed)
        if kind == TENS:
            return Expr(code, Val(TENS), changed=changed)
        if kind == OTHER and base.val.typ and base.val.typ.startswith(("List[", "Tuple[")):
            head, args = parts_of(base.val.typ)
            single = len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
            if head == "List" and args:
                val = val_from_type(args[0]) if single else base.val
                return Expr(code, val, changed=changed)
        return Expr(code, self._typed(node), changed=changed)

    def _indices(self, node: cst.Subscript, base: Expr) -> tuple[str, bool]:
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
                        raise Refuse(f"slices with `{value.code}`")
                    if value.val.strong:
                        raise Refuse(f"slices with the numpy scalar `{value.code}`")
                    bounds.append(value.code)
                    changed = changed or value.changed
                text = f"{bounds[0]}:{bounds[1]}" + (f":{bounds[2]}" if piece.step is not None
                                                      or isinstance(piece.second_colon,
                                                                    cst.Colon) else "")
                parts.append(text if changed else code_of(piece))
        return ", ".join(parts), changed

    def _check_index(self, value: Expr, base: Expr) -> None:
        kind = value.val.kind
        if kind in (NUM, NEWAXIS):
            if value.val.strong:
                raise Refuse(f"indexes with the numpy scalar `{value.code}`")
            return
        if kind == ARRAY:
            if value.val.dtype is not None and category(value.val.dtype) == 2:
                raise Refuse(f"indexes with the float array `{value.code}`")
            return
        if kind == TENS and base.val.kind == TENS:
            return
        if kind in (UNKNOWN, OTHER) and base.val.kind != ARRAY:
            return
        if kind == OTHER and value.val.typ == "None":
            return
        if isinstance(value.code, str) and value.code in ("None", "..."):
            return
        raise Refuse(f"indexes a numpy array with `{value.code}`")

    def _literal(self, node: cst.Tuple | cst.List) -> Expr:
        items: list[Val] = []
        codes: list[str] = []
        changed = False
        for element in node.elements:
            if isinstance(element, cst.StarredElement):
                if self._involved(element):
                    raise Refuse("a starred numpy value")
                items.append(UNKNOWN_VAL)
                codes.append(code_of(element.value))
                continue
            value = self.expr(element.value)
            items.append(value.val)
            codes.append(value.code)
            changed = changed or value.changed
        if changed:
            if isinstance(node, cst.Tuple):
                inner = ", ".join(codes) + ("," if len(codes) == 1 else "")
                code = self.wrap(node, inner) if node.lpar else inner
                atomic = bool(node.lpar)
            else:
                code = self.wrap(node, f"[{', '.join(codes)}]")
                atomic = True
        else:
            code, atomic = code_of(node), bool(node.lpar) or isinstance(node, cst.List)
        return Expr(code, Val(LITERAL, items=tuple(items)), changed=changed, atomic=atomic)


def _tensor_dtype(node: cst.BaseExpression, t: Expressions) -> str | None:
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
        if method in CAST_METHODS and (not node.args or method.startswith("arg")):
            return CAST_METHODS[method]
        if method == "to" and node.args and node.args[0].keyword is None:
            name = get_full_name_for_node(node.args[0].value) or ""
            head, _, last = name.rpartition(".")
            if head.endswith("torch") and last in DTYPES:
                return last
    if isinstance(node, cst.Comparison):
        return "bool"
    if isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute):
            if t.self_var and self_attr(func, t.self_var) in t.owner.layers:
                return FLOATING
            if func.attr.value in FLOAT_METHODS:
                return FLOATING
        name = qualified_name(func, dict(t.imports)) or ""
        if name.startswith("torch.") and name.rpartition(".")[2] in FLOAT_FUNCTIONS:
            return FLOATING
    return None


def _torch_dtype_name(node: cst.BaseExpression, imports: Mapping[str, str]) -> str | None:
    name = qualified_name(node, dict(imports)) or ""
    head, _, last = name.rpartition(".")
    return last if head == "torch" and last in DTYPES else None
