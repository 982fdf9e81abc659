"""``dtype-methods``: ``x.bool()`` and ``torch.finfo(dtype).max`` in forms TorchScript compiles.

What it does
    In compiled methods (``forward()``, ``@torch.jit.export`` methods and the methods they call;
    not ``@torch.jit.ignore`` methods nor ``if not torch.jit.is_scripting():`` branches)::

        mask.bool()                       ->  mask.to(torch.bool)
        x.bfloat16()                      ->  x.to(torch.bfloat16)
        torch.finfo(torch.float16).max    ->  65504.0
        -torch.finfo(sim.dtype).max       ->  -(65504.0 if sim.dtype == torch.float16 else
                                                3.3895313892515355e+38 if sim.dtype ==
                                                torch.bfloat16 else 1.7976931348623157e+308 if
                                                sim.dtype == torch.float64 or sim.dtype ==
                                                torch.complex128 else 3.4028234663852886e+38)

    ``torch.finfo(d)`` is rewritten when its attribute is read at once (``max``, ``min``,
    ``eps``, ``tiny``) and ``d`` is a floating dtype written out (``torch.float32``,
    ``torch.half``, ...) or the ``dtype`` of a name or attribute (``sim.dtype``,
    ``self.weight.dtype``): the value becomes the number, or a choice between the numbers of
    the floating dtypes.

Why it breaks export
    Measured on torch 2.13: TorchScript's Tensor has no ``bool()`` nor ``bfloat16()`` method
    ("'Tensor' object has no attribute or method 'bool'"), while ``.float()``, ``.long()``,
    ``.half()`` and the other conversions script; and ``torch.finfo`` is not an operator
    ("Unknown builtin op: aten::finfo"). Masks built with ``.bool()`` and masking values from
    ``-torch.finfo(x.dtype).max`` are common in attention code.

Example
    Before::

        def forward(self, x):
            mask = torch.ones(n, n, device=x.device).triu(1).bool()
            return x.masked_fill(mask, -torch.finfo(x.dtype).max)

    After::

        def forward(self, x):
            mask = torch.ones(n, n, device=x.device).triu(1).to(torch.bool)
            return x.masked_fill(mask, -(65504.0 if x.dtype == torch.float16 else ...))

Fix safety
    ``t.bool()`` and ``t.to(torch.bool)`` are the same conversion (likewise ``bfloat16``).
    The numbers are ``torch.finfo``'s for float16, bfloat16, float32 and float64 (a complex
    dtype's are those of its real part), checked against torch by the tests. For a tensor of
    an integer or bool dtype, ``torch.finfo`` raised TypeError where the choice gives float32's
    number (noted on the class). Left alone, with the reason reported: ``finfo`` of a dtype
    that is neither written out nor a name's or attribute's ``dtype``, and ``finfo`` used
    other than by reading one of its four attributes.
"""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import ReplaceById, code_of, find_all, qualified_name
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_CODE = "TSF245"
# Conversions TorchScript's Tensor lacks (measured on torch 2.13), and the dtype each makes.
_CONVERSIONS = {"bool": "bool", "bfloat16": "bfloat16"}
_FINFO_FIELDS = ("max", "min", "eps", "tiny")
# torch.finfo(d).<field> for each floating dtype (torch 2.13; tests compare with torch).
_FINFO = {
    "float16": {"max": 65504.0, "min": -65504.0, "eps": 0.0009765625,
                "tiny": 6.103515625e-05},
    "bfloat16": {"max": 3.3895313892515355e+38, "min": -3.3895313892515355e+38,
                 "eps": 0.0078125, "tiny": 1.1754943508222875e-38},
    "float32": {"max": 3.4028234663852886e+38, "min": -3.4028234663852886e+38,
                "eps": 1.1920928955078125e-07, "tiny": 1.1754943508222875e-38},
    "float64": {"max": 1.7976931348623157e+308, "min": -1.7976931348623157e+308,
                "eps": 2.220446049250313e-16, "tiny": 2.2250738585072014e-308},
}
# Spellings of the dtypes (complex dtypes: finfo gives their real part's numbers).
_DTYPES = {"torch.float16": "float16", "torch.half": "float16", "torch.bfloat16": "bfloat16",
           "torch.float32": "float32", "torch.float": "float32", "torch.complex64": "float32",
           "torch.cfloat": "float32", "torch.float64": "float64", "torch.double": "float64",
           "torch.complex128": "float64", "torch.cdouble": "float64"}


def _is_plain(expr: cst.BaseExpression) -> bool:
    """``x`` or ``self.a.b``: read again in each arm of the choice at no cost."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name)


def _choice(dtype: str, field: str) -> str:
    """The finfo number of ``field`` for the dtype ``dtype`` (code) holds, as an expression."""
    number = {kind: repr(values[field]) for kind, values in _FINFO.items()}
    return (f"({number['float16']} if {dtype} == torch.float16 else {number['bfloat16']} if "
            f"{dtype} == torch.bfloat16 else {number['float64']} if {dtype} == torch.float64 "
            f"or {dtype} == torch.complex128 else {number['float32']})")


class DtypeMethods(Rule):
    __doc__ = __doc__
    name = "dtype-methods"
    # Next to drop-variable: one expression for another, no analysis shared with other rules.
    order = 42
    CODES = (
        Code(_CODE, "dtype-method", "x.bool() / x.bfloat16() / torch.finfo in a compiled method",
             "TorchScript's Tensor has no bool() or bfloat16() method and torch.finfo is not "
             "an operator: use x.to(torch.bool) and the dtype's number."),
    )
    summary = ("Write x.bool()/x.bfloat16() as x.to(dtype) and torch.finfo(dtype).max/min/"
               "eps/tiny as the dtype's number in compiled methods")

    VALID = (
        # Conversions TorchScript has.
        """
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x):
        return x.float() + x.long().to(torch.float32)
""",
        # Not compiled.
        """
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x):
        return x
    @torch.jit.ignore
    def masked(self, x):
        return x.bool()
""",
    )
    INVALID = (
        Example(
            """
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x):
        mask = torch.ones(x.shape[-1], x.shape[-1]).triu(1).bool()
        return x.masked_fill(mask, torch.finfo(torch.float16).min)
""",
            """
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x):
        mask = torch.ones(x.shape[-1], x.shape[-1]).triu(1).to(torch.bool)
        return x.masked_fill(mask, -65504.0)
""",
        ),
        Example(
            """
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x, mask):
        return x.masked_fill(mask, -torch.finfo(x.dtype).max)
""",
            """
import torch
from torch import nn
class M(nn.Module):
    def forward(self, x, mask):
        return x.masked_fill(mask, -""" + _choice("x.dtype", "max") + """)
""",
        ),
    )

    def prepare(self, module: cst.Module) -> None:
        self.imports = self.facts.imports

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        text = file.text
        # ... in a module class's compiled method: the only code the rule reads.
        return (".bool()" in text or ".bfloat16()" in text or "finfo" in text) and (
            file.tree is None or bool(file.compiled))

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        replacements: dict[int, cst.BaseExpression] = {}
        parts: list[str] = []
        notes: list[str] = []
        for method, func in facts.compiled_methods():
            skipped = facts.never_compiled(method)
            # finfo calls whose field is read: the attribute read is the site.
            read = {id(a.value) for a in find_all(func.body, cst.Attribute)
                    if a.attr.value in _FINFO_FIELDS and isinstance(a.value, cst.Call)}
            for node in find_all(func.body, cst.Call, cst.Attribute):
                if id(node) in skipped:
                    continue
                found = self._site(node, read)
                if found is None:
                    continue
                new, why = found
                shown = code_of(node.with_changes(lpar=[], rpar=[]))
                message = f"`{shown}` in {method}()"
                if new is None:
                    self.skip(cls.name.value, node, f"{method}(): `{shown}` left alone: {why}",
                              code=_CODE, message=message)
                    continue
                self.fixed(node, _CODE, message)
                replacements[id(node)] = new
                line = self.line_of(node)
                parts.append(f"line {line}: `{shown}` -> `{code_of(new)}`")
                if why:
                    notes.append(f"line {line}: {why}")
        if not replacements:
            return cls
        rewritten = cls.visit(_Replace(replacements))
        assert isinstance(rewritten, cst.ClassDef)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return rewritten

    def _site(self, node: cst.Call | cst.Attribute, read: set[int]
              ) -> tuple[cst.BaseExpression | None, str] | None:
        """None: not a site; else the replacement (None: left, with the reason) and a note."""
        if isinstance(node, cst.Call):
            func = node.func
            if (isinstance(func, cst.Attribute) and func.attr.value in _CONVERSIONS
                    and not node.args):
                dtype = _CONVERSIONS[func.attr.value]
                receiver = func.value
                return (cst.Call(cst.Attribute(receiver, cst.Name("to")),
                                 [cst.Arg(cst.parse_expression(f"torch.{dtype}"))])
                        .with_changes(lpar=node.lpar, rpar=node.rpar), "")
            if qualified_name(func, self.imports) == "torch.finfo" and id(node) not in read:
                return None, "torch.finfo(...) used other than by reading max/min/eps/tiny"
            return None
        if node.attr.value not in _FINFO_FIELDS or not isinstance(node.value, cst.Call):
            return None
        call = node.value
        if qualified_name(call.func, self.imports) != "torch.finfo":
            return None
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None, "torch.finfo takes one dtype here"
        given = call.args[0].value
        field = node.attr.value
        spelled = _DTYPES.get(qualified_name(given, self.imports) or "")
        if spelled is not None:
            value = _FINFO[spelled][field]
            return cst.parse_expression(repr(value)).with_changes(
                lpar=node.lpar, rpar=node.rpar), ""
        if (isinstance(given, cst.Attribute) and given.attr.value == "dtype"
                and _is_plain(given.value)):
            choice = cst.parse_expression(_choice(code_of(given), field))
            return choice, (f"`{code_of(given)}` of an integer or bool tensor: torch.finfo "
                            "raised TypeError, the choice gives float32's number")
        return None, (f"`{code_of(given)}` is neither a floating dtype written out nor the "
                      "dtype of a name or attribute")


class _Replace(ReplaceById):
    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode  # type: ignore[override]
                 ) -> cst.CSTNode:
        new = self.replacements.get(id(original))
        if (isinstance(new, cst.Call) and isinstance(updated, cst.Call)
                and isinstance(updated.func, cst.Attribute)):
            # A conversion of a conversion (`x.bool().bfloat16()`): the receiver as rewritten.
            return new.with_changes(func=cst.Attribute(updated.func.value, cst.Name("to")))
        return super().on_leave(original, updated)
