"""typeerror-fallback: which call each element class binds (Python's own binding rules), the
dispatch it writes (isinstance, one call, the fallback), classes read from other files of the
project and from constructor arguments, refusals with their reasons and check code, check
findings. Slow: the fixture's rewrite scripts and exports with the original's outputs where the
original does neither. The fixture pairs are tests/test_fixtures.py's."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, load_module, rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.rewrite import Rewrite
from tsfix.codemods.rules.typeerror_fallback import TypeErrorFallback

FIXTURES = FIXTURES_ROOT / "typeerror-fallback"

BLOCKS = textwrap.dedent("""\
    from typing import Optional
    import torch
    from torch import nn
    class Plain(nn.Module):
        def forward(self, x):
            return x + 1
    class Masked(nn.Module):
        def forward(self, x, lengths: Optional[torch.Tensor] = None):
            return x if lengths is None else x * lengths
    """)


rewrite = rule_rewriter(TypeErrorFallback)


def model(init: str, *, call: str = "layer(x, lengths=lengths)",
          fallback: str = "layer(x)", blocks: str = BLOCKS) -> str:
    """A module whose blocks (built by ``init``) are called with a TypeError fallback."""
    body = textwrap.indent(textwrap.dedent(init).strip() + "\n", " " * 8)
    return (textwrap.dedent(blocks)
            + "class M(nn.Module):\n"
            + "    def __init__(self, activation=nn.ReLU):\n"
            + "        super().__init__()\n"
            + body
            + "    def forward(self, x, lengths: Optional[torch.Tensor] = None):\n"
            + "        for layer in self.blocks:\n"
            + "            try:\n"
            + f"                x = {call}\n"
            + "            except TypeError:\n"
            + f"                x = {fallback}\n"
            + "        return x\n")


def refusal(result: Rewrite) -> str:
    [skip] = result.skips
    assert skip.code == "TSF101" and skip.rule == "typeerror-fallback"
    return skip.reason


def test_mixed_blocks_are_dispatched_on_the_classes_that_take_the_keyword() -> None:
    result = rewrite(model("self.blocks = nn.ModuleList([Plain(), Masked(), nn.ReLU()])"))
    assert "if isinstance(layer, Masked):\n                x = layer(x, lengths=lengths)\n" \
           "            else:\n                x = layer(x)\n" in result.text
    assert "try" not in result.text
    [fix] = result.fixes
    assert (fix.code, fix.rule) == ("TSF101", "typeerror-fallback")


def test_several_classes_that_take_the_keyword_are_named_in_one_tuple() -> None:
    blocks = BLOCKS + textwrap.dedent("""\
        class Open(nn.Module):
            def forward(self, x, **kwargs):
                return x
        """)
    result = rewrite(model("self.blocks = nn.ModuleList([Masked(), Plain(), Open()])",
                           blocks=blocks))
    assert "if isinstance(layer, (Masked, Open)):" in result.text


def test_one_call_stays_when_every_element_takes_the_same_one() -> None:
    every = rewrite(model("self.blocks = nn.ModuleList([Masked() for _ in range(3)])"))
    assert "x = layer(x, lengths=lengths)\n        return x" in every.text
    assert "isinstance" not in every.text and "layer(x)\n" not in every.text
    none = rewrite(model("self.blocks = nn.ModuleList()\n"
                         "self.blocks.extend([Plain(), activation(), nn.BatchNorm1d(4)])"))
    assert "for layer in self.blocks:\n            x = layer(x)\n" in none.text
    assert "isinstance" not in none.text and "lengths=lengths)" not in none.text


def test_binding_follows_python_rules() -> None:
    cases = {
        # keyword-only parameter: the keyword binds
        "def forward(self, x, *, lengths=None)": True,
        # positional-only: a keyword of that name does not bind
        "def forward(self, x, lengths=None, /)": False,
        # a required parameter the call does not give
        "def forward(self, x, lengths, scale)": False,
        # the keyword would give a second value to a positional parameter
        "def forward(lengths, self, x=None)": False,
    }
    for signature, binds in cases.items():
        blocks = BLOCKS + textwrap.dedent(f"""\
            class Odd(nn.Module):
                {signature}:
                    return x
            """)
        result = rewrite(model("self.blocks = nn.ModuleList([Plain(), Odd()])", blocks=blocks))
        assert ("isinstance(layer, Odd)" in result.text) is binds, signature
        if not binds:
            assert "isinstance" not in result.text and "try" not in result.text


def test_inherited_forward_and_both_sides_of_a_conditional_element() -> None:
    blocks = BLOCKS + textwrap.dedent("""\
        class MaskedChild(Masked):
            pass
        """)
    result = rewrite(model(
        "self.blocks = nn.ModuleList([MaskedChild() if activation is nn.ReLU else Plain()])",
        blocks=blocks))
    assert "if isinstance(layer, MaskedChild):" in result.text


def test_a_class_read_from_another_file_of_the_project(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "pooling.py").write_text(textwrap.dedent("""\
        import torch
        class StatisticsPooling(torch.nn.Module):
            def forward(self, x, lengths=None):
                return x
        """))
    source = textwrap.dedent("""\
        from typing import Optional
        import torch
        from torch import nn
        from .pooling import StatisticsPooling
        class Xvector(nn.Module):
            def __init__(self, activation=nn.LeakyReLU):
                super().__init__()
                self.blocks = nn.ModuleList([nn.Conv1d(4, 4, 1), activation()])
                self.blocks.append(StatisticsPooling())
            def forward(self, x, lens: Optional[torch.Tensor] = None):
                for layer in self.blocks:
                    try:
                        x = layer(x, lengths=lens)
                    except TypeError:
                        x = layer(x)
                return x
        """)
    path = package / "xvector.py"
    path.write_text(source)
    result = rewrite(source, path=str(path))
    assert "if isinstance(layer, StatisticsPooling):" in result.text
    [change] = result.changes
    # activation() is judged by its default and noted: another class may be passed.
    assert any("`activation` (default nn.LeakyReLU)" in note for note in change.notes)
    # Without the project file the class cannot be read: refused, nothing changed.
    (package / "pooling.py").unlink()
    alone = rewrite(source, path=str(path))
    assert not alone.changed and "StatisticsPooling" in refusal(alone)


def test_refusals_say_why() -> None:
    blocks = BLOCKS + textwrap.dedent("""\
        class Unmasked(Masked):
            def forward(self, x):
                return x
        """)
    cases = {
        "isinstance cannot tell them apart": model(
            "self.blocks = nn.ModuleList([Masked(), Unmasked()])", blocks=blocks),
        "a local of __init__": model(
            "kind = Masked\nself.blocks = nn.ModuleList([kind()])"),
        "is not built by a class call in __init__": model(
            "block = Masked()\nself.blocks = nn.ModuleList([block])"),
        "evaluates it again": model(
            "self.blocks = nn.ModuleList([Masked()])",
            call="layer(x.relu(), lengths=lengths)", fallback="layer(x.relu())"),
        "cannot be told statically": model(
            "self.blocks = nn.ModuleList([nn.MultiheadAttention(4, 1)])",
            call="layer(x, mask=lengths)"),
        "builds the class given as `activation`": model(
            "self.blocks = nn.ModuleList([activation()])").replace(
            "activation=nn.ReLU", "activation=Masked"),
        "is changed in grow()": model(
            "self.blocks = nn.ModuleList([Masked()])").replace(
            "    def forward", "    def grow(self):\n        self.blocks.append(Plain())\n"
            "    def forward"),
    }
    for expected, code in cases.items():
        result = rewrite(code)
        assert not result.changed, expected
        assert expected in refusal(result), (expected, refusal(result))


def test_a_handler_that_reads_the_exception_and_other_try_statements() -> None:
    named = rewrite(model("self.blocks = nn.ModuleList([Masked()])").replace(
        "except TypeError:", "except TypeError as error:"))
    assert "binds the exception" in refusal(named)
    other = rewrite(model("self.blocks = nn.ModuleList([Masked()])").replace(
        "except TypeError:", "except RuntimeError:"))
    assert not other.changed and not other.skips and not other.fixes


def test_a_submodule_called_with_a_fallback() -> None:
    code = textwrap.dedent(BLOCKS) + textwrap.dedent("""\
        class M(nn.Module):
            def __init__(self, masked=True):
                super().__init__()
                self.sub = Masked() if masked else Plain()
            def forward(self, x, lengths: Optional[torch.Tensor] = None):
                try:
                    return self.sub(x, lengths=lengths)
                except TypeError:
                    return self.sub(x)
        """)
    result = rewrite(code)
    assert "if isinstance(self.sub, Masked):\n            return self.sub(x, lengths=lengths)" \
        in result.text


def test_check_names_the_rule_on_the_try_line_instead_of_the_linter() -> None:
    text = (FIXTURES / "speaker_embedding.in.py").read_text()
    found = [(f.line, f.code, f.fix) for f in check_source(text, "s.py") if f.code == "TSF101"]
    tries = [n for n, line in enumerate(text.splitlines(), 1) if line.strip() == "try:"]
    assert found == [(n, "TSF101", "typeerror-fallback") for n in tries]
    refused = (FIXTURES / "refused.in.py").read_text()
    reasons = [f.refused for f in check_source(refused, "r.py") if f.code == "TSF101"]
    assert len(reasons) == 3 and all(r.startswith("typeerror-fallback: ") for r in reasons)


@pytest.mark.slow
def test_rewritten_fixture_scripts_and_exports_with_the_original_outputs() -> None:
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    original = load_module(FIXTURES / "speaker_embedding.in.py", "typeerror_original")
    written = load_module(FIXTURES / "speaker_embedding.out.py", "typeerror_written")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 30, 20, generator=generator)
    lengths = torch.tensor([1.0, 0.6])
    torch.manual_seed(0)
    reference = original.SpeakerEmbedding().eval()
    rewritten = written.SpeakerEmbedding().eval()
    rewritten.load_state_dict(reference.state_dict())
    with torch.no_grad():
        expected = reference(x, lengths=lengths)
        assert not torch.equal(expected, reference(x)), "lengths must matter for this check"
        with pytest.raises(Exception, match="try blocks"):
            torch.jit.script(reference)
        assert torch.equal(torch.jit.script(rewritten)(x, lengths), expected)
        with pytest.raises(Exception, match="Unexpected key"):
            torch.export.export(reference, (x,), {"lengths": lengths}, strict=False)
        program = torch.export.export(rewritten, (x,), {"lengths": lengths}, strict=False)
        assert torch.equal(program.module()(x, lengths=lengths), expected)
