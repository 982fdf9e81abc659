"""variable-arguments: keyword-only parameters made ordinary, a **kwargs passed on to a submodule
of the file expanded, unused *args/**kwargs removed when the tree proves no caller passes extra
arguments (else only with --unsafe-fixes), read ones refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.variable_arguments import VariableArguments

HEADER = "import torch\nfrom torch import nn\n\n\n"

BLOCK = HEADER + textwrap.dedent("""\
    class Block(nn.Module):
        def forward(self, x, *args, scale=1.0, **kwargs):
            return x * scale
    """)

ENCODER = textwrap.dedent("""\
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block({args})
    """)


def _rewrite(code: str, path: str = "model.py", *, unsafe: bool = False) -> Rewrite:
    return rewrite_source(code, RewriteSettings([VariableArguments], unsafe_fixes=unsafe), path)


def _findings(result: Rewrite) -> list[tuple[str, int, str]]:
    found = [(f.code, f.line, "fixed") for f in result.fixes]
    found += [(s.code, s.line, s.reason) for s in result.skips if s.code]
    return sorted(found)


def _tree(tmp_path: Path, code: str, **others: str) -> Path:
    path = tmp_path / "model.py"
    path.write_text(code)
    for name, text in others.items():
        (tmp_path / f"{name}.py").write_text(text)
    return path


def test_unknown_callers_keep_unused_variadics_without_unsafe_fixes() -> None:
    safe = _rewrite(BLOCK)
    assert safe.text == BLOCK
    unknown = ("is never read, but TorchScript rejects it; removing it changes what callers may "
               "pass, and the file's tree is not known (--unsafe-fixes removes it)")
    assert _findings(safe) == sorted([
        ("TSF210", 6, f"forward(): *args {unknown}"),
        ("TSF210", 6, f"forward(): **kwargs {unknown}"),
        ("TSF210", 6, "forward(): keyword-only parameters follow *args, which stays; they "
                      "cannot become ordinary parameters")])
    unsafe = _rewrite(BLOCK, unsafe=True)
    assert unsafe.text == BLOCK.replace("x, *args, scale=1.0, **kwargs", "x, scale=1.0")
    assert _findings(unsafe) == [("TSF210", 6, "fixed")] * 3
    assert unsafe.changes[0].notes == [
        f"unsafe fix: removed unused {label} from forward(); callers that passed extra "
        "arguments now get a TypeError" for label in ("*args", "**kwargs")]


def test_callers_proven_by_the_tree_remove_unused_variadics(tmp_path: Path) -> None:
    code = BLOCK + "\n\n" + ENCODER.format(args="x, scale=2.0")
    path = _tree(tmp_path, code, other="def unrelated():\n    return 1\n")
    result = _rewrite(code, str(path))
    assert result.text == code.replace("x, *args, scale=1.0, **kwargs", "x, scale=1.0")
    assert _findings(result) == [("TSF210", 6, "fixed")] * 3
    assert result.changes[0].notes == []


def test_what_the_tree_cannot_prove_keeps_the_unsafe_requirement(tmp_path: Path) -> None:
    cases = {
        "other.py names Block": (ENCODER.format(args="x"), {"other": "from model import Block\n"}),
        "a call of Block passes more positional arguments than it names":
            (ENCODER.format(args="x, x"), {}),
        "a call of Block passes a keyword it does not name":
            (ENCODER.format(args="x, mask=x"), {}),
        "a call of Block unpacks its arguments": (ENCODER.format(args="*[x]"), {}),
        "Block is built nowhere in the tree": ("", {}),
        "Block is used other than as `self.<attr> = Block(...)`":
            ("blocks = nn.ModuleList([Block()])\n", {}),
    }
    for reason, (rest, others) in cases.items():
        folder = tmp_path / str(abs(hash(reason)))
        folder.mkdir()
        code = BLOCK + "\n\n" + rest
        result = _rewrite(code, str(_tree(folder, code, **others)))
        assert result.text == code, reason
        assert any(reason in s.reason for s in result.skips), (reason, result.skips)


def test_kwargs_passed_to_a_submodule_become_its_parameters() -> None:
    code = HEADER + textwrap.dedent("""\
        class Attention(nn.Module):
            def forward(self, x, context=None, mask=None, *, scale: float = 1.0):
                return x * scale

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = Attention()

            def forward(self, x, context, **kwargs):
                return self.attn(x, context, **kwargs) + x
        """)
    result = _rewrite(code)
    assert result.text == code.replace(
        "def forward(self, x, context, **kwargs):",
        "def forward(self, x, context, mask=None, scale: float = 1.0):").replace(
        "self.attn(x, context, **kwargs)", "self.attn(x, context, mask=mask, scale=scale)"
    ).replace("x, context=None, mask=None, *, scale", "x, context=None, mask=None, scale")
    assert ("TSF210", 14, "fixed") in _findings(result)


def test_kwargs_that_cannot_be_expanded_are_refused() -> None:
    unknown_callee = HEADER + textwrap.dedent("""\
        class Block(nn.Module):
            def __init__(self, layer):
                super().__init__()
                self.layer = layer

            def forward(self, x, **kwargs):
                return self.layer(x, **kwargs)
        """)
    result = _rewrite(unknown_callee)
    assert result.text == unknown_callee
    assert _findings(result) == [("TSF210", 10, "forward(): reads **kwargs, which TorchScript "
                                  "cannot compile; make what it carries explicit parameters")]


def test_keyword_only_without_default_after_a_default_is_declined() -> None:
    code = HEADER + textwrap.dedent("""\
        class Pool(nn.Module):
            def forward(self, x, k=2, *, eps):
                return x + eps

            @torch.jit.export
            def pool(self, x, *, eps=1e-5, k):
                return x + eps
        """)
    result = _rewrite(code)
    assert result.text == code.replace("x, *, eps=1e-5, k", "x, k, eps=1e-5")
    assert _findings(result) == [("TSF210", 10, "fixed")]
    assert [s.reason for s in result.skips] == [
        "forward(): keyword-only parameters without defaults follow parameters with defaults; they "
        "cannot become ordinary parameters"]
