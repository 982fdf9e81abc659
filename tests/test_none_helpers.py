"""none-helpers: calls of one-line None helpers in compiled methods become the test they stand
for (parenthesized only where the context needs it), helpers are recognized by their body, and
every call left alone has its reason. The fixture pairs (scripted with parity) are
tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap

import pytest
from conftest import rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.rules.none_helpers import NoneHelpers

HELPERS = """\
import torch
import torch.nn as nn


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


"""

rewrite = rule_rewriter(NoneHelpers, header=HELPERS)


def model(forward: str, init: str = "self.norm = None") -> str:
    return ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"        {init}\n\n" + textwrap.indent(textwrap.dedent(forward), "    "))


def forward_of(text: str) -> str:
    return textwrap.dedent(text[text.index("    def forward"):])


def test_calls_become_tests_with_parentheses_only_where_needed() -> None:
    result = rewrite(model("""\
        def forward(self, x, context=None, mask=None):
            context = default(context, x)
            if exists(self.norm) and not exists(mask):
                x = self.norm(x)
            flags = [exists(mask), exists(mask) == exists(context)]
            y = default(mask, x) * 2
            return x + context + y, exists(mask), flags
        """))
    assert forward_of(result.text) == textwrap.dedent("""\
        def forward(self, x, context=None, mask=None):
            context = context if context is not None else x
            if self.norm is not None and mask is None:
                x = self.norm(x)
            flags = [mask is not None, (mask is not None) == (context is not None)]
            y = (mask if mask is not None else x) * 2
            return x + context + y, mask is not None, flags
        """)
    assert [f.code for f in result.fixes] == ["TSF244"] * 8
    assert result.changes[0].summary == "forward(): 8 call(s) of None helpers written out"


def test_helpers_are_known_by_their_body_and_nested_calls_are_written_out() -> None:
    header = HELPERS.replace("def exists(val):\n    return val is not None",
                             'def has(v):\n    "Whether v is set."\n    return v is not None')
    header = header.replace("val if exists(val) else d", "d if not has(val) else val")
    result = rule_rewriter(NoneHelpers, header=header)(model("""\
        def forward(self, x, a=None, b=None):
            return default(a, default(b, x)) if has(a) else x
        """))
    assert forward_of(result.text) == textwrap.dedent("""\
        def forward(self, x, a=None, b=None):
            return (
                (a if a is not None else b if b is not None else x) if a is not None else x
            )
        """)


@pytest.mark.parametrize(("call", "reason"), [
    ("default(mask, torch.ones_like(x))",
     "the fallback `torch.ones_like(x)` would be evaluated only when mask is None, and computing "
     "it may have an effect or raise (it is not a name, an attribute, a literal or such a call)"),
    ("default(mask, self.levels(x) * 2)",
     "the fallback `self.levels(x) * 2` would be evaluated only when mask is None, and "
     "computing it may have an effect or raise (it is not a name, an attribute, a literal or "
     "such a call)"),
    ("default(self.masks[0], x)",
     "`self.masks[0]` is not a name or an attribute: written out, it would be evaluated twice"),
    ("default(mask, d=x)", "it is not called with 2 positional argument(s)"),
    ("exists(mask or x)", "`mask or x` would need parentheses to be tested"),
])
def test_calls_left_alone_with_the_reason(call: str, reason: str) -> None:
    code = model(f"""\
        def forward(self, x, mask=None):
            y = {call}
            return x
        """)
    result = rewrite(code)
    assert result.text == HELPERS + code
    assert [(s.code, s.reason) for s in result.skips] == [
        ("TSF244", f"forward(): `{call}` calls the None helper "
                   f"{call[:call.index('(')]}(); left alone: {reason}")]


def test_what_is_not_a_none_helper_or_not_compiled_is_left_alone() -> None:
    code = textwrap.dedent("""\
        import torch
        import torch.nn as nn


        def exists(val):
            return val is not None and val.numel() > 0


        def default(val, d=None):
            return val if val is not None else d


        class M(nn.Module):
            def forward(self, x, mask=None):
                if exists(mask):
                    x = x * mask
                return default(x, x) + self.helper(mask)

            @torch.jit.ignore
            def helper(self, mask):
                return exists(mask)
        """)
    result = rule_rewriter(NoneHelpers)(code)
    assert (result.text, result.skips) == (code, [])


def test_a_helper_rebound_in_the_method_is_refused() -> None:
    code = model("""\
        def forward(self, x, mask=None):
            exists = lambda v: False
            return x if exists(mask) else -x
        """)
    result = rewrite(code)
    assert result.text == HELPERS + code
    assert [s.reason for s in result.skips] == [
        "forward(): `exists(mask)` calls the None helper exists(); left alone: exists is "
        "re-bound in the method"]


def test_check_reports_each_call_as_fixable() -> None:
    findings = check_source(HELPERS + model("""\
        def forward(self, x, mask=None):
            return x if exists(mask) else -x
        """), "m.py")
    assert [(f.code, f.line, f.fix) for f in findings if f.code == "TSF244"] == [
        ("TSF244", 19, "none-helpers")]


def test_a_fallback_of_arithmetic_on_names_and_numbers_is_written_out() -> None:
    """glom-pytorch: `iters = default(iters, self.levels * 2)`; left as a call, `default` was
    compiled with `d: int` and a Tensor `val`, which does not script."""
    result = rewrite(model("""\
        def forward(self, x, iters=None):
            iters = default(iters, self.levels * 2 + 1)
            return x * iters
        """, init="self.levels = 3"))
    assert "        iters = iters if iters is not None else self.levels * 2 + 1\n" in \
        result.text, result.text
