"""explicit-defaults: which callees lose their defaults in TorchScript (exported, ignored and
unused methods of the class; not plain or static methods, functions or a submodule's exported
methods), keyword vs positional completion, refusals with their reason and check code, code
that is never compiled, nested calls, the prefilter. The fixture pairs are tests/test_fixtures.py's
(the slow test scripts them with parity)."""

from __future__ import annotations

import textwrap

from conftest import rule_rewriter
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.rules.explicit_defaults import ExplicitDefaults

HEADER = "from typing import List, Tuple\nimport torch\nfrom torch import nn\n"

rewrite = rule_rewriter(ExplicitDefaults, header=HEADER)


def cls(methods: str, name: str = "M") -> str:
    return f"class {name}(nn.Module):\n" + textwrap.indent(textwrap.dedent(methods), "    ")


def test_exported_method_gets_its_left_out_defaults_by_keyword() -> None:
    source = cls("""\
        @torch.jit.export
        def project(self, x, alpha: float = 0.5, mask=None, dims=(0, -1), mode="a", on=True):
            return x * alpha
        def forward(self, x):
            return self.project(x, 0.3, mode="b")
        """)
    result = rewrite(source)
    assert result.text == HEADER + source.replace(
        'self.project(x, 0.3, mode="b")',
        'self.project(x, 0.3, mode="b", mask=None, dims=(0, -1), on=True)')
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF241", 9, "forward() calls project(), an @torch.jit.export method, without `mask`, "
         "`dims`, `on`: TorchScript keeps no defaults for it (\"Argument mask not provided\")")]
    assert result.changes[0].summary == (
        "line 9: self.project() is passed mask=None, dims=(0, -1), on=True")
    assert not result.changes[0].python_only


def test_ignored_and_unused_methods_get_them_positionally() -> None:
    # A keyword argument to an ignored method fails when the scripted module runs.
    source = cls("""\
        @torch.jit.ignore
        def log(self, x, scale: float = 2.0, tag: str = "x"):
            return x * scale
        @torch.jit.unused
        def debug(self, x, level: int = -1):
            return x
        def forward(self, x):
            return self.debug(self.log(x, 3.0))
        """)
    result = rewrite(source)
    assert result.text == HEADER + source.replace(
        "self.debug(self.log(x, 3.0))", 'self.debug(self.log(x, 3.0, "x"), -1)')
    assert [f.line for f in result.fixes] == [12, 12]
    # Validation expects the artifact not to save: the call runs Python.
    assert result.changes[0].python_only


def test_calls_that_keep_their_defaults_are_left_alone() -> None:
    # Measured on torch 2.13: these script with the default left out.
    source = cls("""\
        def __init__(self):
            super().__init__()
            self.sub = Sub()
        def plain(self, x, alpha: float = 0.5):
            return x * alpha
        @staticmethod
        def static(x, alpha: float = 0.5):
            return x * alpha
        def forward(self, x):
            return self.sub.project(self.static(self.plain(helper(x))))
        """) + cls("""\
        @torch.jit.export
        def project(self, x, alpha: float = 0.5):
            return x * alpha
        def forward(self, x):
            return self.project(x, 1.0)
        """, "Sub") + "def helper(x, alpha: float = 0.5):\n    return x * alpha\n"
    result = rewrite(source)
    assert result.text == HEADER + source
    assert result.fixes == [] and result.skips == []


def test_a_default_that_is_not_a_literal_is_refused() -> None:
    source = cls("""\
        @torch.jit.export
        def project(self, x, sizes: List[int] = [1, 2], eps: float = 1e-3 * 2):
            return x
        def forward(self, x):
            return self.project(x)
        """)
    result = rewrite(source)
    assert result.text == HEADER + source and result.fixes == []
    [skip] = result.skips
    assert (skip.code, skip.line) == ("TSF241", 9)
    assert skip.reason.startswith("the default of `sizes` (`[1, 2]`) is not a number, string, "
                                  "bool, None or tuple of those")


def test_a_keyword_call_of_an_ignored_method_is_refused() -> None:
    source = cls("""\
        @torch.jit.ignore
        def log(self, x, scale: float = 2.0, tag: str = "x"):
            return x * scale
        def forward(self, x):
            return self.log(x, tag="y")
        """)
    result = rewrite(source)
    assert result.text == HEADER + source
    [skip] = result.skips
    assert skip.code == "TSF241" and "pass its arguments positionally" in skip.reason


def test_calls_never_compiled_and_complete_calls_are_left_alone() -> None:
    source = cls("""\
        @torch.jit.export
        def project(self, x, alpha: float = 0.5):
            return x * alpha
        def forward(self, x):
            if not torch.jit.is_scripting():
                return self.project(x)
            return self.project(x, alpha=0.5)
        """)
    result = rewrite(source)
    assert result.text == HEADER + source
    assert result.fixes == [] and result.skips == []


def test_exported_method_calling_another_one_is_completed() -> None:
    source = cls("""\
        @torch.jit.export
        def scale(self, x, factor: float = 2.0):
            return x * factor
        @torch.jit.export
        def project(self, x):
            return self.scale(
                x,
            )
        def forward(self, x):
            return x
        """)
    result = rewrite(source)
    assert result.text == HEADER + source.replace(
        "self.scale(\n            x,\n        )",
        "self.scale(\n            x,\n            factor=2.0,\n        )")


def test_prefilter_needs_a_decorated_method_with_a_default() -> None:
    exported = HEADER + cls("""\
        @torch.jit.export
        def project(self, x, alpha: float = 0.5):
            return x
        def forward(self, x):
            return self.project(x)
        """)
    assert ExplicitDefaults.may_apply(AstFile(exported))
    assert not ExplicitDefaults.may_apply(AstFile(exported.replace("@torch.jit.export", "")))
    assert not ExplicitDefaults.may_apply(AstFile(exported.replace(" = 0.5", "")))
