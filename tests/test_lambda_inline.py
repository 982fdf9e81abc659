"""lambda-inline: map(lambda ...) consumed at once becomes a list comprehension (unpacked,
list(), tuple() unpacked or joined by torch.cat, several iterables through zip, a variable
renamed away from a local of the method), a lambda bound to a name becomes a nested def that
nested-function moves out, every other lambda is refused with its reason, and check's TSF102
finding names the rule only where it fixes the site. The fixture pairs are
tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import apply_with_report, rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.rewrite import Rewrite
from tsfix.codemods.rules.lambda_inline import LambdaInline

HEADER = "import torch\nimport torch.nn as nn\n\n\nclass M(nn.Module):\n"


rewrite = rule_rewriter(LambdaInline)


def forward(body: str, signature: str = "self, x") -> str:
    return HEADER + f"    def forward({signature}):\n" + textwrap.indent(
        textwrap.dedent(body), "        ")


def reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


def test_map_unpacked_from_a_chunk_becomes_a_comprehension() -> None:
    result = rewrite(forward("""\
        qkv = x.chunk(3, dim=-1)
        q, k, v = map(lambda t: t.reshape(2, self.heads, -1), qkv)
        return q + k + v
        """))
    assert result.text == forward("""\
        qkv = x.chunk(3, dim=-1)
        q, k, v = [t.reshape(2, self.heads, -1) for t in qkv]
        return q + k + v
        """)
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF102", 8, "lambda in forward()")]
    assert result.changes[0].summary == (
        "forward(): map(lambda ...) becomes a list comprehension")


def test_list_tuple_and_several_iterables() -> None:
    result = rewrite(forward("""\
        a, b = tuple(map(lambda t: t * 2, (x, x + 1)))
        ys = list(map(lambda u, w: u - w, (a, b), (b, a)))
        return ys
        """))
    assert result.text == forward("""\
        a, b = [t * 2 for t in (x, x + 1)]
        ys = [u - w for u, w in zip((a, b), (b, a))]
        return ys
        """)


def test_a_tuple_only_joined_by_torch_cat_becomes_a_list() -> None:
    result = rewrite(forward("""\
        fmaps = tuple(map(lambda conv: conv(x), self.convs))
        return torch.cat(fmaps, dim=1) + torch.stack(tuple(map(lambda t: t + 1, (x, x))))
        """))
    assert result.text == forward("""\
        fmaps = [conv(x) for conv in self.convs]
        return torch.cat(fmaps, dim=1) + torch.stack([t + 1 for t in (x, x)])
        """)


def test_a_parameter_named_like_a_local_is_renamed_in_the_comprehension() -> None:
    # TorchScript types a comprehension variable as the method's local of that name
    # (measured: `t = 3` then `[t * 2 for t in qkv]` scripts and fails when it runs).
    result = rewrite(forward("""\
        t = x.shape[-1]
        q, k = map(lambda t: t.flip(-1) * t.t_scale + x.sum(t=2), (x, x))
        return q + k + t
        """))
    assert result.text == forward("""\
        t = x.shape[-1]
        q, k = [t_item.flip(-1) * t_item.t_scale + x.sum(t=2) for t_item in (x, x)]
        return q + k + t
        """)
    assert "variable t as t_item" in result.changes[0].summary


def test_an_iterable_that_needs_parentheses_gets_them() -> None:
    result = rewrite(forward("""\
        a, b = map(lambda t: t + 1, (x, x) if self.flag else (x, -x))
        return a + b
        """))
    assert "for t in ((x, x) if self.flag else (x, -x))]" in result.text


def test_a_lambda_bound_to_a_name_becomes_a_nested_def() -> None:
    result = rewrite(forward("""\
        # the gate
        gate = lambda y, k=2: torch.sigmoid(y) * k  # squashed
        return gate(x) + gate(x, 3)
        """))
    assert result.text == forward("""\
        # the gate
        def gate(y, k=2):
            return torch.sigmoid(y) * k  # squashed

        return gate(x) + gate(x, 3)
        """)
    assert result.changes[0].notes == [
        "forward(): lambda bound to gate is now a nested def: nested-function (next in "
        "--rule all) moves it out; without it the class still does not script"]


def test_a_bound_lambda_mapped_at_once_is_called_in_a_comprehension() -> None:
    result = rewrite(forward("""\
        merge = lambda x, s: x.flip(-1) * s
        q, k = map(merge, (x, x), (2, 3))
        return q + merge(k, 1)
        """))
    assert result.text == forward("""\

        def merge(x, s):
            return x.flip(-1) * s

        q, k = [merge(x_item, s) for x_item, s in zip((x, x), (2, 3))]
        return q + merge(k, 1)
        """)


@pytest.mark.parametrize(("body", "reason"), [
    ("return sorted([x, x], key=lambda t: t.sum())[0]\n", "takes no key function"),
    ("return list(filter(lambda t: t.sum() > 0, [x, x]))\n", "has no filter()"),
    ("for y in map(lambda t: t * 2, (x, x)):\n    x = x + y\nreturn x\n",
     "is not unpacked nor made a list at once"),
    ("a, b = map(lambda t, s=2: t * s, (x, x))\nreturn a\n", "defaults or are variadic"),
    ("a, b = map(lambda t: t * 2, (x, x), (x, x))\nreturn a\n",
     "passes 2 iterable(s) to a lambda of 1 parameter(s)"),
    ("a, b = map(lambda t: (y := t), (x, x))\nreturn a\n", "holds := or yield"),
    ("a, b = map(lambda t: (lambda: t)(), (x, x))\nreturn a\n", "holds another lambda"),
    ("f = lambda t: t * 2\nreturn self.apply_fn(f, x)\n", "used other than by calling it"),
    ("f = lambda t: t * 2\nfor y in map(f, (x, x)):\n    x = x + y\nreturn x\n",
     "is not unpacked nor made a list at once"),
    ("f = lambda t: t * 2\nf = lambda t: t * 3\nreturn f(x)\n",
     "re-bound or used other than by calling it"),
    ("if self.flag:\n    f = lambda t: t\n    x = f(x)\nreturn x\n",
     "not a map() made a list nor a lambda bound to a name at the top of the method"),
    ("return self.apply_fn(lambda t: t * 2, x)\n", "TorchScript has no function values"),
])
def test_refusals_say_why(body: str, reason: str) -> None:
    result = rewrite(forward(body))
    assert not result.changed
    assert result.skips and all(s.code == "TSF102" for s in result.skips)
    assert reason in reasons(result)[-1], reasons(result)


def test_a_re_bound_map_is_left_alone() -> None:
    code = "from mytools import map\n" + forward("a, b = map(lambda t: t, (x, x))\nreturn a\n")
    result = rewrite(code)
    assert not result.changed
    assert "map is re-bound" in reasons(result)[0]


def test_lambdas_outside_compiled_code_are_not_touched() -> None:
    code = HEADER + textwrap.indent(textwrap.dedent("""\
        def __init__(self):
            super().__init__()
            self.make = lambda n: n * 2

        @torch.jit.ignore
        def debug(self, x):
            return list(map(lambda t: t * 2, x))

        def forward(self, x):
            return self.debug(x)
        """), "    ")
    result = rewrite(code)
    assert not result.changed and result.skips == []


def test_check_names_the_rule_where_it_fixes_and_the_reason_where_it_does_not() -> None:
    source = forward("""\
        a, b = map(lambda t: t * 2, (x, x))
        return sorted([a, b], key=lambda t: t.sum())[0]
        """)
    found = {f.line: f for f in check_source(source, "m.py") if f.code == "TSF102"}
    assert found[7].fix == "lambda-inline" and found[7].method == "forward"
    assert found[8].fix is None and "takes no key function" in found[8].refused


# ---- map of a named function, method or submodule ------------------------------------------------

def test_a_mapped_submodule_method_and_function_become_comprehensions() -> None:
    code = "def l2norm(t, dim: int = -1):\n    return t / t.norm(dim=dim, keepdim=True)\n\n\n" + (
        HEADER + textwrap.indent(textwrap.dedent("""\
            def merge(self, y, s: float = 1.0):
                return y * s

            def forward(self, x):
                q, k, v = x.chunk(3, dim=-1)
                q, k, v = map(self.split_heads, (q, k, v))
                q, k = map(l2norm, (q, k))
                a, b = tuple(map(self.merge, (q, k)))
                return torch.cat(list(map(self.merge, (a, b), (2.0, 3.0))))
            """), "    "))
    result = rewrite(code)
    assert result.text == code.replace(
        "map(self.split_heads, (q, k, v))", "[self.split_heads(t) for t in (q, k, v)]").replace(
        "map(l2norm, (q, k))", "[l2norm(t) for t in (q, k)]").replace(
        "tuple(map(self.merge, (q, k)))", "[self.merge(y) for y in (q, k)]").replace(
        "list(map(self.merge, (a, b), (2.0, 3.0)))",
        "[self.merge(y, s) for y, s in zip((a, b), (2.0, 3.0))]")
    assert result.skips == [] and result.fixes == []
    assert result.changes[0].summary == "; ".join(
        f"forward(): map({f}, ...) becomes a list comprehension"
        for f in ("self.split_heads", "l2norm", "self.merge", "self.merge"))


def test_a_mapped_nested_def_keeps_its_parameter_name_and_avoids_locals() -> None:
    result = rewrite(forward("""\
        def split_heads(t):
            return t.unflatten(-1, (2, -1))

        t = x * 2
        q, k = map(split_heads, (x, t))
        u, w = map(torch.sigmoid, (q, k))
        return u + w
        """))
    assert result.text == forward("""\
        def split_heads(t):
            return t.unflatten(-1, (2, -1))

        t = x * 2
        q, k = [split_heads(t_item) for t_item in (x, t)]
        u, w = map(torch.sigmoid, (q, k))
        return u + w
        """)


@pytest.mark.parametrize(("body", "reason"), [
    ("for y in map(self.proj, (x, x)):\n    x = x + y\nreturn x\n",
     "map(self.proj, ...) in forward(); left as it is: its map() is not unpacked nor made a "
     "list at once: the function runs while the result is consumed (a list would run it "
     "before)"),
    ("ys = tuple(map(self.proj, (x, x)))\nreturn ys\n",
     "map(self.proj, ...) in forward(); left as it is: its map() is not unpacked nor made a "
     "list at once: the function runs while the result is consumed (a list would run it "
     "before)"),
    ("a, b = map(self.proj, (x, x), *self.extra)\nreturn a\n",
     "map(self.proj, ...) in forward(); left as it is: map() is passed no iterable, a keyword "
     "or a *argument"),
])
def test_a_mapped_callable_refused_says_why(body: str, reason: str) -> None:
    result = rewrite(forward(body))
    assert not result.changed
    assert [(s.code, s.reason) for s in result.skips] == [(None, reason)]


def test_a_mapped_callable_under_a_re_bound_map_is_left_alone() -> None:
    code = "from mytools import map\n" + forward("a, b = map(self.proj, (x, x))\nreturn a\n")
    result = rewrite(code)
    assert not result.changed
    assert reasons(result) == ["map(self.proj, ...) in forward(); left as it is: map is "
                               "re-bound in this file or method"]


@pytest.mark.slow
def test_a_bound_lambda_scripts_with_parity_after_nested_function(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "gate.py").write_text(textwrap.dedent("""\
        import torch
        from torch import nn


        class Gate(nn.Module):
            def __init__(self, dim=4):
                super().__init__()
                self.proj = nn.Linear(dim, dim)
                self.scale = 0.5

            def forward(self, x):
                bias = x.mean()
                gate = lambda y, k=2: torch.sigmoid(self.proj(y)) * self.scale + bias * k
                qkv = x.chunk(2, dim=-1)
                a, b = map(lambda t: t * 2, qkv)
                split = lambda t: t * bias
                c, d = map(split, qkv)
                return gate(x) + gate(x * 2, 3) + torch.cat((a + c, b + d), dim=-1)
        """))
    (folder / "pyproject.toml").write_text(
        '[tool.tsfix.examples."gate.py:Gate"]\ninit = [{}]\ninputs = ["randn(2, 4)"]\n')
    done = apply_with_report(folder, "lambda-inline", "nested-function", workdir=folder)
    assert done.returncode == 0, done.stderr
    assert {(c["rule"], c["verdict"]) for c in done.classes} == {
        ("lambda-inline", "verified"), ("nested-function", "verified")}
    assert "lambda" not in (folder / "gate.py").read_text()
    assert "gate.py:Gate: model scripts (did not script before tsfix)" in done.stderr


def test_a_map_summed_at_once_becomes_a_comprehension() -> None:
    """mlp-mixer's ParallelSum and axial-attention: ``sum(map(lambda fn: fn(x), self.fns))``.
    sum takes every result before it returns; a mapped call it has added is not read again."""
    result = rewrite(forward("return sum(map(lambda fn: fn(x), self.fns))\n"))
    assert result.text == forward("return sum([fn(x) for fn in self.fns])\n")
    for consumer in ("max", "sorted"):
        code = forward(f"return {consumer}(map(lambda fn: fn(x), self.fns))\n")
        assert rewrite(code).text == code
