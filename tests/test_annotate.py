"""The ``annotate`` rule: what it types, from where, and what it declines."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.annotate import Annotate
from tsfix.codemods.rules.base import Observations


def _rewrite(code: str, *, observed: Observations | None = None,
             unsafe: bool = False) -> Rewrite:
    return rewrite_source(textwrap.dedent(code), "model.py", [Annotate], observed=observed,
                          unsafe_fixes=unsafe)


TOPK = """\
    import torch
    from torch import nn


    class TopK(nn.Module):
        def forward(self, x, k, gain=None):
            if gain is not None:
                x = x * gain
            return x.topk(k, dim=-1).values
    """


def test_without_observations_an_undecidable_none_default_is_left_and_reported() -> None:
    result = _rewrite(TOPK)
    assert "def forward(self, x, k: int, gain=None):" in result.text
    assert [s.reason for s in result.skips] == [
        "forward(): gain=None: neither its uses nor an example call tell its type; left "
        "unannotated (TorchScript takes it for a Tensor)"]
    assert "1 from the code" in result.changes[0].summary


def test_observed_types_fill_what_the_code_cannot_tell() -> None:
    observed = {"TopK": {"forward": {"k": "int", "gain": "Optional[float]"}}}
    result = _rewrite(TOPK, observed=observed)
    assert "def forward(self, x, k: int, gain: Optional[float] = None):" in result.text
    assert "from typing import Optional" in result.text
    assert not result.skips
    assert "(2 from observed calls, 0 from the code)" in result.changes[0].summary


def test_observed_types_win_over_the_code_when_they_disagree() -> None:
    code = """\
        import torch
        from torch import nn


        class Scale(nn.Module):
            def forward(self, x, factor=None, offset=1):
                if factor is not None and factor > 1:
                    x = x * 2
                return x + offset
        """
    static = _rewrite(code)
    assert "def forward(self, x, factor: Optional[int] = None, offset: int = 1):" in static.text
    observed = {"Scale": {"forward": {"factor": "Optional[float]", "offset": "float"}}}
    result = _rewrite(code, observed=observed)
    assert ("def forward(self, x, factor: Optional[float] = None, offset: float = 1):"
            in result.text)


def test_weak_evidence_does_not_type_a_parameter_without_default() -> None:
    # x * 0.5 and x > 1 fit a Tensor as well as a float.
    code = """\
        import torch
        from torch import nn


        class Gate(nn.Module):
            def forward(self, x, threshold):
                return (x * 0.5) * (threshold > 1)
        """
    assert not _rewrite(code).changed


def test_a_parameter_observed_as_a_tensor_stays_unannotated() -> None:
    code = """\
        import torch
        from torch import nn


        class Add(nn.Module):
            def forward(self, x, bias):
                return x + bias
        """
    observed = {"Add": {"forward": {"bias": "Tensor"}}}
    result = _rewrite(code, observed=observed)
    assert not result.changed
    assert result.text == textwrap.dedent(code)


def test_unused_kwargs_are_removed_only_with_unsafe_fixes() -> None:
    code = """\
        import torch
        from torch import nn


        class Block(nn.Module):
            def forward(self, x, *args, scale=1.0, **kwargs):
                return x * scale
        """
    safe = _rewrite(code)
    assert "def forward(self, x, *args, scale: float = 1.0, **kwargs):" in safe.text
    assert sorted(s.reason.split(" is never read")[0] for s in safe.skips) == [
        "forward(): **kwargs", "forward(): *args"]
    unsafe = _rewrite(code, unsafe=True)
    assert "def forward(self, x, scale: float = 1.0):" in unsafe.text
    notes = unsafe.changes[0].notes
    assert len(notes) == 2 and all(n.startswith("unsafe fix: removed unused") for n in notes)


def test_keyword_only_without_default_after_a_default_is_declined() -> None:
    code = """\
        import torch
        from torch import nn


        class Mix(nn.Module):
            def forward(self, x, alpha=0.5, *, other):
                return x * alpha + other
        """
    result = _rewrite(code)
    assert "*, other" in result.text
    assert any("keyword-only parameters without defaults" in s.reason for s in result.skips)


def test_a_mutated_list_default_becomes_optional_with_a_fill_in() -> None:
    code = """\
        import torch
        from torch import nn


        class Pad(nn.Module):
            def forward(self, x, widths=[0, 1]):
                widths.append(0)
                return x.sum() + len(widths)
        """
    result = _rewrite(code)
    assert "widths: Optional[List[int]] = None" in result.text
    assert "        if widths is None:\n            widths = [0, 1]\n" in result.text


def test_an_optional_attribute_read_without_a_test_is_not_declared() -> None:
    code = """\
        import torch
        from torch import nn


        class Shift(nn.Module):
            def __init__(self, on=True):
                super().__init__()
                self.shift = torch.ones(3) if on else None

            def forward(self, x):
                if self.shift is not None and self.shift.sum() > 0:
                    x = x + 1
                return self.apply_shift(x)

            def apply_shift(self, x):
                return x + self.shift
        """
    result = _rewrite(code)
    assert "Optional" not in result.text
    assert any("read without an `is not None` test" in s.reason for s in result.skips)


def test_typing_names_join_the_existing_import() -> None:
    code = """\
        from typing import List

        import torch
        from torch import nn


        class Head(nn.Module):
            def forward(self, x, dims=(1, 2), eps=None):
                if eps is None:
                    eps = 1e-5
                return x / (x.std() + eps)
        """
    result = _rewrite(code)
    assert result.text.count("from typing import") == 1
    assert "from typing import List, Optional, Tuple\n" in result.text


def test_methods_outside_forward_are_not_touched() -> None:
    code = """\
        import torch
        from torch import nn


        class Model(nn.Module):
            def forward(self, x):
                return x

            def configure(self, lr=0.1, betas=(0.9, 0.99)):
                return lr, betas
        """
    assert not _rewrite(code).changed


def test_rewrites_are_idempotent_on_the_fixtures() -> None:
    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "annotate"
    for path in sorted(fixtures.glob("*.in.py")):
        once = rewrite_source(path.read_text(), path.name, [Annotate], unsafe_fixes=True)
        twice = rewrite_source(once.text, path.name, [Annotate], unsafe_fixes=True)
        assert twice.text == once.text, path.name


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(Annotate.INVALID)))
def test_every_embedded_rewrite_scripts(index: int, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    after = Annotate.INVALID[index].after
    assert after is not None
    path = tmp_path / f"example_{index}.py"
    path.write_text(rewrite_source(after, path.name, [Annotate], unsafe_fixes=True).text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and issubclass(v, torch.nn.Module)
               and v.__module__ == module.__name__]
    assert classes
    for cls in classes:
        torch.jit.script(cls())
